//! Shared helpers: the value sets a platform team would use, and readers of rendered
//! objects (containers, args, env, labels).

use super::*;

/// Value sets a platform team would use; each must render, lint and parse.
pub(crate) fn scenarios() -> Vec<(&'static str, Value)> {
    vec![
        ("default", json!({})),
        ("kind without GPUs (ci/kind-values.yaml)", kind_values()),
        (
            "policy kill, json logs, digests, pull secrets, tuned operator",
            json!({
                "imagePullSecrets": ["regcred"],
                "commonLabels": {"team": "platform"},
                "operator": {
                    "image": {"repository": "registry.example.com/muster/operator",
                              "digest": format!("sha256:{}", "a".repeat(64)), "pullPolicy": "Always"},
                    "replicas": 3, "cycleInterval": "2s", "gangStartTimeout": "10m",
                    "logFormat": "json", "logLevel": "info,muster_operator=debug",
                    "metricsPort": 9090, "extraArgs": ["--some-future-flag"],
                    "admins": {"groups": ["hpc-admins"], "users": ["root"]},
                    "extraEnv": [{"name": "TZ", "value": "UTC"}],
                    "priorityClassName": "system-cluster-critical",
                    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
                    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}}
                },
                "nodeAgent": {
                    "policy": "kill", "heartbeat": "1m", "quietPeriod": "0", "criticalXids": "48,79",
                    "logFormat": "json", "runtimeClassName": "", "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "image": {"repository": "registry.example.com/muster/node-agent", "tag": "0.1.0-rc1"}
                }
            }),
        ),
        (
            "monitoring: ServiceMonitor and Grafana dashboard",
            json!({
                "operator": {"serviceMonitor": {"enabled": true, "labels": {"release": "kube-prometheus-stack"},
                                                "interval": "15s"}},
                "dashboards": {"enabled": true, "namespace": "monitoring"}
            }),
        ),
        ("SuperPOD partitions", superpod_values()),
        (
            "minimal: one replica, no agent, no policies, no partitions",
            json!({
                "operator": {"replicas": 1, "leaderElection": {"enabled": false}},
                "nodeAgent": {"enabled": false},
                "admissionPolicies": {"gpuBinding": {"enabled": false}, "nodeAgentScope": {"enabled": false}},
                "partitions": {"gpu": null}
            }),
        ),
        (
            "policies in audit mode, own exemptions",
            json!({
                "admissionPolicies": {
                    "gpuBinding": {"validationActions": ["Warn", "Audit"], "exemptNamespaces": []},
                    "nodeAgentScope": {"validationActions": ["Audit"]}
                }
            }),
        ),
        (
            "scheduler: strict priority order, no reservations, fair-share shares",
            json!({"scheduler": {"backfill": false, "maxReservations": 0,
                                 "reserveAfterSecs": 600, "weightJobSize": 500.5,
                                 "shares": {"team-a": 3, "team-b": 1}}}),
        ),
    ]
}

pub(crate) fn kind_values() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("ci").join("kind-values.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

pub(crate) fn superpod_values() -> Value {
    json!({
        "partitions": {
            "gpu": null,
            "train": {
                "default": true,
                "nodeSelector": {"matchLabels": {"muster.dev/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                "topology": ["muster.dev/spine", "muster.dev/leaf", "kubernetes.io/hostname"],
                "maxTime": "7-00:00:00", "priorityTier": 10, "preemptMode": "None",
                "runtimeClassName": "nvidia", "defCpuPerGpu": 24, "defMemPerGpu": "200G"
            },
            "scavenger": {
                "topology": ["muster.dev/spine", "muster.dev/leaf", "kubernetes.io/hostname"],
                "priorityTier": 1, "preemptMode": "Requeue", "maxTime": "4:00:00",
                "graceTimeSeconds": 120, "allowedNamespaces": ["research", "interns"]
            }
        }
    })
}

pub(crate) fn app_version() -> String {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    let chart: Value = serde_yaml::from_str(&text).unwrap();
    chart["appVersion"].as_str().unwrap().to_string()
}

pub(crate) fn container<'a>(workload: &'a Value, name: &str) -> &'a Value {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

pub(crate) fn args(c: &Value) -> Vec<String> {
    c["args"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

pub(crate) fn env<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)
}

pub(crate) fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

//! The Helm chart (`charts/muster`), rendered by Helm's own engine (helm-python-sdk, through
//! `charts/muster/tests/helm.py`): every object parses as its Kubernetes type for default and
//! non-default values, `helm lint` is clean, the values schema refuses bad values, RBAC grants
//! exactly the documented verbs, the CRDs are crds/yaml, and the dashboard covers the metrics.
//!
//! Without helm-python-sdk the Helm-backed tests skip with a note; CI sets
//! MUSTER_REQUIRE_HELM=1 so they fail instead.

mod chart_common;

use std::collections::BTreeSet;

use chart_common::*;
use serde_json::{Value, json};

/// Value sets a platform team would use; each must render, lint and parse.
fn scenarios() -> Vec<(&'static str, Value)> {
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

fn kind_values() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("ci").join("kind-values.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn superpod_values() -> Value {
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

fn app_version() -> String {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    let chart: Value = serde_yaml::from_str(&text).unwrap();
    chart["appVersion"].as_str().unwrap().to_string()
}

fn container<'a>(workload: &'a Value, name: &str) -> &'a Value {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn args(c: &Value) -> Vec<String> {
    c["args"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn env<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn every_rendered_object_parses_as_its_kubernetes_type() {
    for (what, values) in scenarios() {
        let Some(r) = render(values) else { return };
        assert!(!r.objects.is_empty(), "{what}: nothing rendered");
        let errors: Vec<String> = r
            .objects
            .iter()
            .filter_map(|o| parse_as_kind(o).err())
            .collect();
        assert!(errors.is_empty(), "{what}: {errors:#?}");
        // Names are unique per kind and namespace, as the API server requires.
        let mut seen = BTreeSet::new();
        for o in &r.objects {
            let key = format!(
                "{}/{}/{}",
                o.kind(),
                o.value["metadata"]["namespace"].as_str().unwrap_or(""),
                o.name()
            );
            assert!(seen.insert(key.clone()), "{what}: {key} rendered twice");
        }
        assert!(r.notes.contains("kubectl"), "{what}: NOTES.txt is empty");
    }
}

#[test]
fn default_install_has_every_component() {
    let Some(r) = render(json!({})) else { return };
    let want: BTreeSet<String> = [
        "ServiceAccount/muster-operator",
        "ServiceAccount/muster-node-agent",
        "ClusterRole/muster-operator",
        "ClusterRoleBinding/muster-operator",
        "Role/muster-operator",
        "RoleBinding/muster-operator",
        "ClusterRole/muster-node-agent",
        "ClusterRoleBinding/muster-node-agent",
        "Deployment/muster-operator",
        "ConfigMap/muster-operator-scheduler",
        "Service/muster-operator-metrics",
        "PodDisruptionBudget/muster-operator",
        "DaemonSet/muster-node-agent",
        "ValidatingAdmissionPolicy/muster-gpu-binding",
        "ValidatingAdmissionPolicyBinding/muster-gpu-binding",
        "ValidatingAdmissionPolicy/muster-node-agent-scope",
        "ValidatingAdmissionPolicyBinding/muster-node-agent-scope",
        "Service/muster-operator-webhook",
        "MutatingWebhookConfiguration/muster-operator",
        "ValidatingWebhookConfiguration/muster-operator",
        "Partition/gpu",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(r.summary(), want);
    // Namespaced objects go to the release namespace; cluster-scoped ones carry none.
    for o in &r.objects {
        let ns = o.value["metadata"]["namespace"].as_str();
        let cluster_scoped = matches!(
            o.kind(),
            "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingWebhookConfiguration"
                | "ValidatingWebhookConfiguration"
                | "Partition"
        );
        if cluster_scoped {
            assert_eq!(ns, None, "{} {} is cluster-scoped", o.kind(), o.name());
        } else {
            assert_eq!(ns, Some(NAMESPACE), "{} {}", o.kind(), o.name());
        }
        assert_eq!(
            o.value["metadata"]["labels"]["app.kubernetes.io/instance"],
            "muster",
            "{} {} lacks the instance label",
            o.kind(),
            o.name()
        );
    }
}

#[test]
fn operator_deployment_is_hardened_and_wired_to_its_flags() {
    let Some(r) = render(json!({})) else { return };
    let d = r.get("Deployment", "muster-operator");
    assert_eq!(
        d["spec"]["replicas"], 2,
        "two replicas with leader election"
    );
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "muster-operator");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(pod["hostPID"].is_null() && pod["hostNetwork"].is_null());
    let c = container(d, "operator");
    assert_eq!(
        c["image"],
        format!("ghcr.io/muster-dev/muster-operator:{}", app_version())
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(sc["capabilities"]["add"].is_null() && sc["privileged"].is_null());
    let a = args(c);
    for want in [
        "--metrics-addr=0.0.0.0:8080",
        "--cycle-interval=5s",
        "--gang-start-timeout=5m",
        "--log-format=text",
        "--lease-name=muster-operator",
        "--scheduler-config=/etc/muster/scheduler/scheduler.yaml",
    ] {
        assert!(a.contains(&want.to_string()), "missing {want} in {a:?}");
    }
    assert!(!a.iter().any(|x| x == "--no-leader-election"));
    // The scheduler configuration: the ConfigMap mounted where the flag points, and by
    // default a file the operator reads as every default.
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "scheduler-config", "mountPath": "/etc/muster/scheduler", "readOnly": true}])
    );
    assert_eq!(
        pod["volumes"],
        json!([{"name": "scheduler-config", "configMap": {"name": "muster-operator-scheduler"}}])
    );
    let file = r.get("ConfigMap", "muster-operator-scheduler")["data"]["scheduler.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        muster_operator::controller::scheduler_config::parse(&file).unwrap(),
        muster_operator::core::Config::default()
    );
    assert_eq!(
        env(c, "MUSTER_NAMESPACE").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(
        env(c, "POD_NAME").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(env(c, "RUST_LOG").unwrap()["value"], "info");
    assert_eq!(c["ports"][0]["name"], "metrics");
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "metrics");
    for k in ["cpu", "memory"] {
        assert!(c["resources"]["requests"][k].is_string(), "no {k} request");
    }
    assert!(c["resources"]["limits"]["memory"].is_string());

    // The metrics Service and the PDB select exactly the operator's pods.
    let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
    let svc = r.get("Service", "muster-operator-metrics");
    assert!(labels_match(&svc["spec"]["selector"], pod_labels));
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    let pdb = r.get("PodDisruptionBudget", "muster-operator");
    assert!(labels_match(
        &pdb["spec"]["selector"]["matchLabels"],
        pod_labels
    ));
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(
        !labels_match(
            &svc["spec"]["selector"],
            &r.get("DaemonSet", "muster-node-agent")["spec"]["template"]["metadata"]["labels"]
        ),
        "the metrics Service must not select node agents"
    );
}

/// The webhook configurations the chart installs are the operator's own
/// (`admission::mutating_configuration`, `validating_configuration`), its Service reaches the
/// operator's webhook port, and its flags name them.
#[test]
fn webhooks_are_the_operators_configurations() {
    use muster_operator::controller::admission::{self, WebhookConfig};
    let Some(r) = render_as(
        json!({"operator": {"webhook": {"timeoutSeconds": 7}}}),
        "gpu-sched",
        "batch-system",
    ) else {
        return;
    };
    let r = r.unwrap();
    let cfg = WebhookConfig {
        name: "gpu-sched-muster-operator".into(),
        namespace: "batch-system".into(),
        service: "gpu-sched-muster-operator-webhook".into(),
        port: 443,
        failure_policy: "Fail".into(),
        timeout_seconds: 7,
    };
    let strip = |mut v: Value| {
        v["metadata"] = json!({"name": v["metadata"]["name"]});
        v
    };
    let mutating = strip(r.get("MutatingWebhookConfiguration", &cfg.name).clone());
    assert_eq!(
        mutating,
        serde_json::to_value(admission::mutating_configuration(&cfg)).unwrap()
    );
    let validating = strip(r.get("ValidatingWebhookConfiguration", &cfg.name).clone());
    assert_eq!(
        validating,
        serde_json::to_value(admission::validating_configuration(&cfg)).unwrap()
    );
    let d = r.get("Deployment", "gpu-sched-muster-operator");
    let c = container(d, "operator");
    let a = args(c);
    for want in [
        "--webhook-addr=0.0.0.0:9443",
        "--webhook-service=gpu-sched-muster-operator-webhook",
        "--webhook-secret=gpu-sched-muster-webhook-tls",
        "--webhook-configuration=gpu-sched-muster-operator",
    ] {
        assert!(a.contains(&want.to_string()), "missing {want} in {a:?}");
    }
    let svc = r.get("Service", "gpu-sched-muster-operator-webhook");
    assert!(labels_match(
        &svc["spec"]["selector"],
        &d["spec"]["template"]["metadata"]["labels"]
    ));
    assert_eq!(svc["spec"]["ports"][0]["port"], 443);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "webhook");
    assert!(
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "webhook" && p["containerPort"] == 9443)
    );
    // Disabled: no webhook objects, no secrets, and the operator is told.
    let Some(r) = render(json!({"operator": {"webhook": {"enabled": false}}})) else {
        return;
    };
    assert!(r.all("MutatingWebhookConfiguration").is_empty());
    assert!(r.all("ValidatingWebhookConfiguration").is_empty());
    let a = args(container(
        r.get("Deployment", "muster-operator"),
        "operator",
    ));
    assert!(a.contains(&"--no-webhook".to_string()), "{a:?}");
    assert!(
        !perms(r.get("Role", "muster-operator"))
            .iter()
            .any(|p| p.1 == "secrets")
    );
}

#[test]
fn operator_values_reach_its_command_line() {
    let Some(r) = render(scenarios()[2].1.clone()) else {
        return;
    };
    let d = r.get("Deployment", "muster-operator");
    assert_eq!(d["spec"]["replicas"], 3);
    let c = container(d, "operator");
    assert_eq!(
        c["image"],
        format!(
            "registry.example.com/muster/operator@sha256:{}",
            "a".repeat(64)
        )
    );
    assert_eq!(c["imagePullPolicy"], "Always");
    let a = args(c);
    for want in [
        "--metrics-addr=0.0.0.0:9090",
        "--cycle-interval=2s",
        "--gang-start-timeout=10m",
        "--log-format=json",
        "--some-future-flag",
    ] {
        assert!(a.contains(&want.to_string()), "missing {want} in {a:?}");
    }
    assert_eq!(
        a.last().unwrap(),
        "--some-future-flag",
        "extra args come last"
    );
    assert_eq!(
        env(c, "RUST_LOG").unwrap()["value"],
        "info,muster_operator=debug"
    );
    assert_eq!(env(c, "TZ").unwrap()["value"], "UTC");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "metrics");
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        d["metadata"]["labels"]["team"], "platform",
        "commonLabels reach every object"
    );
    assert_eq!(
        r.get("ServiceAccount", "muster-operator")["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::1:role/x"
    );

    // Without leader election: one replica, the flag, no lease name, no PDB.
    let Some(r) = render(scenarios()[5].1.clone()) else {
        return;
    };
    let d = r.get("Deployment", "muster-operator");
    assert_eq!(d["spec"]["replicas"], 1);
    let a = args(container(d, "operator"));
    assert!(a.contains(&"--no-leader-election".to_string()), "{a:?}");
    assert!(!a.iter().any(|x| x.starts_with("--lease-name")));
    assert!(!r.has("PodDisruptionBudget", "muster-operator"));
}

/// `scheduler:` values reach the operator as the file its `--scheduler-config` reads, parsed
/// by the operator's own parser, and a change rolls the operator's pods.
#[test]
fn scheduler_values_reach_the_operators_config_file() {
    use muster_operator::controller::scheduler_config;
    let values = scenarios()
        .into_iter()
        .find(|(what, _)| what.starts_with("scheduler:"))
        .unwrap()
        .1;
    let Some(many) = helm_many(vec![
        render_request(values, "muster", NAMESPACE),
        render_request(json!({}), "muster", NAMESPACE),
    ]) else {
        return;
    };
    let (tuned, default) = (rendered(&many[0]).unwrap(), rendered(&many[1]).unwrap());
    let file = tuned.get("ConfigMap", "muster-operator-scheduler")["data"]["scheduler.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    let cfg = scheduler_config::parse(&file).unwrap();
    assert!(!cfg.backfill);
    assert_eq!(cfg.max_reservations, 0);
    assert_eq!(cfg.reserve_after_secs, 600);
    assert_eq!(cfg.weight_job_size, 500.5);
    assert_eq!(cfg.shares.get("team-a"), Some(&3));
    assert_eq!(
        cfg.weight_age,
        muster_operator::core::Config::default().weight_age,
        "omitted keys keep their defaults"
    );
    let sum = |r: &Rendered| {
        r.get("Deployment", "muster-operator")["spec"]["template"]["metadata"]["annotations"]
            ["checksum/scheduler"]
            .clone()
    };
    assert!(sum(&tuned).is_string());
    assert_ne!(
        sum(&tuned),
        sum(&default),
        "a new configuration rolls the pods"
    );
}

#[test]
fn node_agent_gets_only_the_privileges_its_policy_needs() {
    // Policy report (default): host PID namespace, nothing else.
    let Some(r) = render(json!({})) else { return };
    let ds = r.get("DaemonSet", "muster-node-agent");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true, "NVML PIDs are host PIDs");
    assert!(pod["hostNetwork"].is_null() && pod["hostIPC"].is_null());
    assert!(pod["volumes"].is_null(), "no host paths, no volumes");
    assert_eq!(pod["runtimeClassName"], "nvidia");
    assert_eq!(pod["serviceAccountName"], "muster-node-agent");
    assert_eq!(
        pod["nodeSelector"],
        json!({"nvidia.com/gpu.present": "true"})
    );
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
    let c = container(ds, "node-agent");
    assert_eq!(
        c["image"],
        format!("ghcr.io/muster-dev/muster-node-agent:{}", app_version())
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"], json!({"drop": ["ALL"]}));
    assert!(sc["privileged"].is_null());
    assert_eq!(
        env(c, "NODE_NAME").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    assert_eq!(env(c, "NVIDIA_VISIBLE_DEVICES").unwrap()["value"], "all");
    assert_eq!(
        env(c, "NVIDIA_DRIVER_CAPABILITIES").unwrap()["value"],
        "utility"
    );
    let a = args(c);
    for want in [
        "--policy=report",
        "--heartbeat=30s",
        "--poll-interval=5s",
        "--quiet-period=300s",
        "--log-format=text",
    ] {
        assert!(a.contains(&want.to_string()), "missing {want} in {a:?}");
    }
    assert!(!a.iter().any(|x| x.starts_with("--fixture")));

    // Policy kill: UID 0 with CAP_KILL, and still nothing else.
    let Some(r) = render(scenarios()[2].1.clone()) else {
        return;
    };
    let ds = r.get("DaemonSet", "muster-node-agent");
    let c = container(ds, "node-agent");
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsUser"], 0);
    assert_eq!(
        sc["capabilities"],
        json!({"drop": ["ALL"], "add": ["KILL"]})
    );
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert!(sc["privileged"].is_null());
    let a = args(c);
    for want in [
        "--policy=kill",
        "--heartbeat=1m",
        "--quiet-period=0",
        "--critical-xids=48,79",
        "--log-format=json",
    ] {
        assert!(a.contains(&want.to_string()), "missing {want} in {a:?}");
    }
    let pod = &ds["spec"]["template"]["spec"];
    assert!(
        pod["runtimeClassName"].is_null(),
        "runtimeClassName \"\" means the default runtime"
    );
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(
        c["image"],
        "registry.example.com/muster/node-agent:0.1.0-rc1"
    );
}

#[test]
fn node_agent_fixture_mode_runs_without_nvidia() {
    let Some(r) = render(kind_values()) else {
        return;
    };
    let ds = r.get("DaemonSet", "muster-node-agent");
    let pod = &ds["spec"]["template"]["spec"];
    assert!(
        pod["runtimeClassName"].is_null(),
        "no NVIDIA runtime on kind"
    );
    assert_eq!(pod["nodeSelector"], json!({"muster.dev/fake-gpu": "true"}));
    let c = container(ds, "node-agent");
    assert!(env(c, "NVIDIA_VISIBLE_DEVICES").is_none());
    assert!(args(c).contains(&"--fixture=/etc/muster/fixture/fixture.yaml".to_string()));
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/etc/muster/fixture");
    let cm = r.get("ConfigMap", "muster-node-agent-fixture");
    let bundled =
        std::fs::read_to_string(chart_dir().join("files/fixtures/dgx-h100.yaml")).unwrap();
    assert_eq!(
        cm["data"]["fixture.yaml"].as_str().unwrap().trim(),
        bundled.trim()
    );
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        "muster-node-agent-fixture"
    );
    assert!(
        ds["spec"]["template"]["metadata"]["annotations"]["checksum/fixture"].is_string(),
        "agents roll when the fixture changes"
    );
    // The default partition lost its runtime class and tolerations, as kind needs.
    let p = r.get("Partition", "gpu");
    assert!(p["spec"]["runtimeClassName"].is_null() && p["spec"]["tolerations"].is_null());

    // An inline fixture wins over a bundled name.
    let Some(r) =
        render(json!({"nodeAgent": {"fixture": {"name": "dgx-h100", "content": "gpus: []\n"}}}))
    else {
        return;
    };
    let cm = r.get("ConfigMap", "muster-node-agent-fixture");
    assert_eq!(cm["data"]["fixture.yaml"], "gpus: []\n");
}

#[test]
fn bundled_fixtures_are_the_node_agents() {
    // The chart cannot read files outside itself, so it carries copies of the agent's
    // fixtures; they must not drift from node-agent/fixtures once that directory exists.
    let agent = root().join("node-agent").join("fixtures");
    let chart = chart_dir().join("files").join("fixtures");
    let bundled: Vec<_> = std::fs::read_dir(&chart)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(bundled.len(), 3, "{bundled:?}");
    for name in bundled {
        let ours = std::fs::read_to_string(chart.join(&name)).unwrap();
        let parsed: Value = serde_yaml::from_str(&ours).unwrap();
        assert!(
            parsed["gpus"].as_array().is_some_and(|g| !g.is_empty()),
            "{name}: no GPUs"
        );
        if agent.is_dir() {
            let theirs = std::fs::read_to_string(agent.join(&name))
                .unwrap_or_else(|e| panic!("node-agent/fixtures/{name}: {e}"));
            assert_eq!(
                ours, theirs,
                "charts/muster/files/fixtures/{name} drifted from node-agent/fixtures/{name}: copy it"
            );
        }
    }
}

/// (apiGroup, resource, verb, resourceName or "*") — one atomic permission.
type Perm = (String, String, String, String);

fn perms(role: &Value) -> BTreeSet<Perm> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        let names: Vec<String> = rule["resourceNames"]
            .as_array()
            .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
            .unwrap_or_else(|| vec!["*".to_string()]);
        for g in rule["apiGroups"].as_array().unwrap() {
            for res in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    for n in &names {
                        out.insert((
                            g.as_str().unwrap().to_string(),
                            res.as_str().unwrap().to_string(),
                            v.as_str().unwrap().to_string(),
                            n.clone(),
                        ));
                    }
                }
            }
        }
    }
    out
}

fn expect(list: &[(&str, &str, &[&str], &str)]) -> BTreeSet<Perm> {
    let mut out = BTreeSet::new();
    for (g, r, verbs, n) in list {
        for v in *verbs {
            out.insert((g.to_string(), r.to_string(), v.to_string(), n.to_string()));
        }
    }
    out
}

/// The operator's API calls (operator/src/controller: reflectors on partitions, batchjobs,
/// pods, nodes, gpunodes and persistentvolumeclaims; kube_api.rs, leader.rs, jobids.rs, usage.rs): any change to the
/// chart's RBAC must change this list too.
fn operator_cluster_perms() -> BTreeSet<Perm> {
    expect(&[
        ("muster.dev", "partitions", &["list", "watch"], "*"),
        ("muster.dev", "gpunodes", &["list", "watch"], "*"),
        (
            "muster.dev",
            "batchjobs",
            &["list", "watch", "create", "patch"],
            "*",
        ),
        ("muster.dev", "batchjobs/status", &["patch"], "*"),
        ("muster.dev", "partitions/status", &["patch"], "*"),
        ("", "pods", &["list", "watch", "create", "delete"], "*"),
        ("", "services", &["create"], "*"),
        // Each job's step credential Secret, in the job's namespace: create only, never read.
        ("", "secrets", &["create"], "*"),
        ("", "nodes", &["list", "watch"], "*"),
        ("", "persistentvolumeclaims", &["list", "watch"], "*"),
        ("", "events", &["create", "patch"], "*"),
        (
            "resource.k8s.io",
            "resourceclaims",
            &["list", "watch", "create", "delete"],
            "*",
        ),
        ("resource.k8s.io", "resourceslices", &["list", "watch"], "*"),
        ("resource.k8s.io", "deviceclasses", &["list", "watch"], "*"),
        ("scheduling.k8s.io", "workloads", &["create", "delete"], "*"),
        ("scheduling.k8s.io", "podgroups", &["create", "delete"], "*"),
        (
            "authentication.k8s.io",
            "selfsubjectreviews",
            &["create"],
            "*",
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            &["get", "patch"],
            "muster-operator",
        ),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            &["get", "patch"],
            "muster-operator",
        ),
    ])
}

fn operator_namespace_perms(lease: &str, secret: &str) -> BTreeSet<Perm> {
    expect(&[
        ("", "secrets", &["get", "update"], secret),
        ("", "secrets", &["create"], "*"),
        ("coordination.k8s.io", "leases", &["get", "update"], lease),
        ("coordination.k8s.io", "leases", &["create"], "*"),
        (
            "",
            "configmaps",
            &["get", "update", "patch"],
            "muster-job-ids",
        ),
        (
            "",
            "configmaps",
            &["get", "update", "patch"],
            "muster-fairshare",
        ),
        ("", "configmaps", &["create"], "*"),
    ])
}

fn node_agent_perms() -> BTreeSet<Perm> {
    expect(&[
        ("muster.dev", "gpunodes", &["get", "create", "patch"], "*"),
        ("muster.dev", "gpunodes/status", &["patch"], "*"),
        ("muster.dev", "batchjobs", &["get"], "*"),
        ("", "nodes", &["get", "patch"], "*"),
        ("", "pods", &["list", "watch"], "*"),
        ("events.k8s.io", "events", &["create"], "*"),
    ])
}

#[test]
fn rbac_grants_exactly_the_documented_verbs() {
    let Some(r) = render(json!({})) else { return };
    assert_eq!(
        perms(r.get("ClusterRole", "muster-operator")),
        operator_cluster_perms()
    );
    assert_eq!(
        perms(r.get("Role", "muster-operator")),
        operator_namespace_perms("muster-operator", "muster-webhook-tls")
    );
    assert_eq!(
        perms(r.get("ClusterRole", "muster-node-agent")),
        node_agent_perms()
    );
    // No wildcards, no privilege-escalation verbs anywhere; secrets are only created
    // cluster-wide (the jobs' step credentials), and of them only the webhook certificate, in
    // the release namespace, may be read.
    for o in r.all("ClusterRole").into_iter().chain(r.all("Role")) {
        for (g, res, v, n) in perms(&o.value) {
            assert!(g != "*" && res != "*" && v != "*", "{}: wildcard", o.name());
            assert!(
                !["clusterroles", "roles", "serviceaccounts/token"].contains(&res.as_str()),
                "{}: {res}",
                o.name()
            );
            if res == "secrets" {
                assert!(
                    o.kind() == "Role" || v == "create",
                    "{}: {v} on secrets cluster-wide",
                    o.name()
                );
                assert!(
                    v == "create" || n == "muster-webhook-tls",
                    "{}: {v} on secrets {n}",
                    o.name()
                );
            }
            assert!(
                !["escalate", "bind", "impersonate"].contains(&v.as_str()),
                "{}: {v}",
                o.name()
            );
        }
    }
}

#[test]
fn rbac_bindings_name_the_service_accounts_the_pods_run_as() {
    // Another release name and namespace: names derive from both.
    let Some(r) = render_as(json!({}), "gpu-sched", "batch-system") else {
        return;
    };
    let r = r.unwrap();
    let d = r.get("Deployment", "gpu-sched-muster-operator");
    let op_sa = d["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    assert_eq!(op_sa, "gpu-sched-muster-operator");
    let ds = r.get("DaemonSet", "gpu-sched-muster-node-agent");
    let agent_sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    let subject = |kind: &str, name: &str| r.get(kind, name)["subjects"].clone();
    let want =
        |sa: &str| json!([{"kind": "ServiceAccount", "name": sa, "namespace": "batch-system"}]);
    assert_eq!(
        subject("ClusterRoleBinding", "gpu-sched-muster-operator"),
        want(op_sa)
    );
    assert_eq!(
        subject("RoleBinding", "gpu-sched-muster-operator"),
        want(op_sa)
    );
    assert_eq!(
        subject("ClusterRoleBinding", "gpu-sched-muster-node-agent"),
        want(agent_sa)
    );
    assert_eq!(
        r.get("ClusterRoleBinding", "gpu-sched-muster-operator")["roleRef"]["name"],
        "gpu-sched-muster-operator"
    );
    assert_eq!(
        perms(r.get("Role", "gpu-sched-muster-operator")),
        operator_namespace_perms("gpu-sched-muster-operator", "gpu-sched-muster-webhook-tls"),
        "the Role names the lease the operator is told to use"
    );
    assert!(
        args(container(d, "operator")).contains(&"--lease-name=gpu-sched-muster-operator".into())
    );
    // The policies exempt exactly these accounts.
    let vap = r.get("ValidatingAdmissionPolicy", "gpu-sched-muster-gpu-binding");
    let conds = vap["spec"]["matchConditions"].to_string();
    assert!(conds.contains("system:serviceaccount:batch-system:gpu-sched-muster-operator"));
    assert!(conds.contains("'batch-system'") && conds.contains(&format!("'{agent_sa}'")));

    // Without the agent: no agent account, role, DaemonSet or agent policy.
    let Some(r) = render(scenarios()[5].1.clone()) else {
        return;
    };
    for (kind, name) in [
        ("ServiceAccount", "muster-node-agent"),
        ("ClusterRole", "muster-node-agent"),
        ("ClusterRoleBinding", "muster-node-agent"),
        ("DaemonSet", "muster-node-agent"),
        ("ValidatingAdmissionPolicy", "muster-node-agent-scope"),
        ("ValidatingAdmissionPolicy", "muster-gpu-binding"),
        ("Partition", "gpu"),
    ] {
        assert!(!r.has(kind, name), "{kind} {name} rendered");
    }
}

#[test]
fn helm_lint_is_clean() {
    for (what, values) in scenarios() {
        let Some(answer) = helm(json!({"op": "lint", "values": values})) else {
            return;
        };
        assert_eq!(answer["ok"], true, "{what}: {answer}");
        let report = &answer["report"];
        assert_eq!(report["total_charts_linted"], 1, "{what}: {report}");
        assert!(
            report["errors"].as_array().is_none_or(|e| e.is_empty()),
            "{what}: {report}"
        );
        for m in report["messages"].as_array().unwrap() {
            // Severity 1 is INFO; the only one is Helm's "icon is recommended" (no public
            // icon URL exists yet).
            assert!(
                m["severity"].as_i64().unwrap() < 2,
                "{what}: helm lint (strict) says {m}"
            );
        }
    }
}

#[test]
fn values_schema_refuses_bad_values_naming_the_key() {
    let bad = [
        (
            json!({"nodeAgent": {"policy": "maim"}}),
            "/nodeAgent/policy",
        ),
        (json!({"operator": {"replicas": 0}}), "/operator/replicas"),
        (json!({"operatr": {}}), "operatr"),
        (
            json!({"operator": {"cycleInterval": "soon"}}),
            "/operator/cycleInterval",
        ),
        (
            json!({"operator": {"logFormat": "xml"}}),
            "/operator/logFormat",
        ),
        (
            json!({"operator": {"image": {"pullPolicy": "Sometimes"}}}),
            "/operator/image/pullPolicy",
        ),
        (
            json!({"operator": {"image": {"digest": "latest"}}}),
            "/operator/image/digest",
        ),
        (
            json!({"nodeAgent": {"quietPeriod": "5 min"}}),
            "/nodeAgent/quietPeriod",
        ),
        (
            json!({"nodeAgent": {"criticalXids": "48,x"}}),
            "/nodeAgent/criticalXids",
        ),
        (
            json!({"nodeAgent": {"fixture": {"name": "dgx-a100"}}}),
            "/nodeAgent/fixture/name",
        ),
        (
            json!({"nodeAgent": {"runtimeClassName": "NVIDIA"}}),
            "/nodeAgent/runtimeClassName",
        ),
        (
            json!({"partitions": {"gpu": {"state": "Sideways"}}}),
            "/partitions/gpu/state",
        ),
        (
            json!({"partitions": {"gpu": {"priorityTier": -1}}}),
            "/partitions/gpu/priorityTier",
        ),
        (json!({"partitions": {"GPU_A": {}}}), "GPU_A"),
        (
            json!({"admissionPolicies": {"gpuBinding": {"validationActions": ["Deny", "Warn"]}}}),
            "/admissionPolicies/gpuBinding/validationActions",
        ),
        (
            json!({"admissionPolicies": {"gpuBinding": {"validationActions": ["Block"]}}}),
            "/admissionPolicies/gpuBinding/validationActions",
        ),
        (
            json!({"admissionPolicies": {"gpuBinding": {"exemptNamespaces": ["Kube System"]}}}),
            "/admissionPolicies/gpuBinding/exemptNamespaces",
        ),
        (
            json!({"scheduler": {"maxReservation": 4}}),
            "maxReservation",
        ),
        (
            json!({"scheduler": {"backfill": "no"}}),
            "/scheduler/backfill",
        ),
        (
            json!({"scheduler": {"maxReservations": -1}}),
            "/scheduler/maxReservations",
        ),
        (
            json!({"scheduler": {"shares": {"team-a": 0}}}),
            "/scheduler/shares/team-a",
        ),
    ];
    // One Helm process for all of it: validate, and render (helm install/template refuse
    // bad values too).
    let mut reqs = Vec::new();
    for (values, _) in &bad {
        reqs.push(json!({"op": "schema", "values": values}));
        reqs.push(render_request(values.clone(), "muster", NAMESPACE));
    }
    for (_, values) in scenarios() {
        reqs.push(json!({"op": "schema", "values": values}));
    }
    let Some(answers) = helm_many(reqs) else {
        return;
    };
    for (i, (values, key)) in bad.iter().enumerate() {
        let schema = &answers[2 * i];
        assert_eq!(schema["ok"], false, "{values} was accepted");
        let msg = schema["error"].as_str().unwrap();
        assert!(
            msg.contains(key),
            "{values}: message does not name {key}: {msg}"
        );
        let err = rendered(&answers[2 * i + 1]).expect_err(&format!("{values} rendered"));
        assert!(err.contains(key), "{values}: {err}");
    }
    for (n, (what, _)) in scenarios().iter().enumerate() {
        let answer = &answers[2 * bad.len() + n];
        assert_eq!(answer["ok"], true, "{what}: {answer}");
    }
}

#[test]
fn templates_refuse_incoherent_values_with_a_clear_message() {
    let cases = [
        (
            json!({"operator": {"leaderElection": {"enabled": false}}}),
            "two operators without leader election",
        ),
        (
            json!({"nodeAgent": {"policy": "kill", "fixture": {"name": "dgx-h100"}}}),
            "nodeAgent.policy=kill with nodeAgent.fixture",
        ),
    ];
    for (values, msg) in cases {
        let Some(r) = render_as(values.clone(), "muster", NAMESPACE) else {
            return;
        };
        let err = r.expect_err(&format!("{values} rendered"));
        assert!(err.contains(msg), "{values}: {err}");
    }
}

#[test]
fn chart_crds_are_crds_yaml() {
    // Byte for byte: regenerate crds/yaml with crdgen, then copy to charts/muster/crds/.
    let ours = chart_dir().join("crds");
    let theirs = root().join("crds").join("yaml");
    let names = |d: &std::path::Path| -> BTreeSet<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    assert_eq!(
        names(&ours),
        names(&theirs),
        "charts/muster/crds/ and crds/yaml/ list different CRDs"
    );
    for name in names(&theirs) {
        assert!(
            std::fs::read(ours.join(&name)).unwrap() == std::fs::read(theirs.join(&name)).unwrap(),
            "charts/muster/crds/{name} drifted from crds/yaml/{name}: cp crds/yaml/*.yaml charts/muster/crds/"
        );
    }
    // Helm sees all three as CRDs of the chart (installed before the templates).
    let Some(answer) = helm(json!({"op": "chart"})) else {
        return;
    };
    let crds = answer["crds"].as_array().unwrap();
    let kinds: BTreeSet<String> = crds
        .iter()
        .map(|c| {
            let obj = Object {
                template: c["filename"].as_str().unwrap().to_string(),
                value: serde_yaml::from_str(c["data"].as_str().unwrap()).unwrap(),
            };
            parse_as_kind(&obj).unwrap();
            obj.value["spec"]["names"]["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        ["BatchJob", "GpuNode", "Partition"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

fn values_schema() -> Value {
    serde_json::from_str(&std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap())
        .unwrap()
}

fn partition_spec_schema() -> Value {
    crd_schema("partitions.muster.dev.yaml")["properties"]["spec"].clone()
}

#[test]
fn values_schema_checks_partitions_with_the_crd_schema() {
    assert!(
        values_schema()["definitions"]["partitionSpec"] == partition_spec_schema(),
        "values.schema.json definitions.partitionSpec differs from the Partition CRD's spec schema: \
         run `cargo test -p muster-e2e --test chart -- --ignored bless_values_schema`"
    );
}

/// The chart refuses the scheduler keys and values the operator refuses: its schema is the
/// operator's own (`scheduler_config::json_schema`).
#[test]
fn values_schema_checks_scheduler_with_the_operators_keys() {
    use muster_operator::controller::scheduler_config;
    assert!(
        values_schema()["definitions"]["schedulerConfig"] == scheduler_config::json_schema(),
        "values.schema.json definitions.schedulerConfig differs from the operator's scheduler \
         keys: run `cargo test -p muster-e2e --test chart -- --ignored bless_values_schema`"
    );
    assert_eq!(
        values_schema()["properties"]["scheduler"]["$ref"],
        "#/definitions/schedulerConfig"
    );
}

/// Rewrites values.schema.json's copies of the Partition spec schema (from the CRD) and of
/// the scheduler configuration's (from the operator).
#[test]
#[ignore = "writes charts/muster/values.schema.json; run by hand after a CRD or scheduler-key change"]
fn bless_values_schema() {
    let mut schema = values_schema();
    schema["definitions"]["partitionSpec"] = partition_spec_schema();
    schema["definitions"]["schedulerConfig"] =
        muster_operator::controller::scheduler_config::json_schema();
    std::fs::write(
        chart_dir().join("values.schema.json"),
        serde_json::to_string_pretty(&schema).unwrap() + "\n",
    )
    .unwrap();
}

#[test]
fn rendered_partitions_pass_the_crd_schema_and_cel() {
    let Some(r) = render(superpod_values()) else {
        return;
    };
    let parts = r.all("Partition");
    let names: BTreeSet<&str> = parts.iter().map(|o| o.name()).collect();
    assert_eq!(names, BTreeSet::from(["scavenger", "train"]));
    for p in &parts {
        assert_eq!(crd_errors(&p.value), Vec::<String>::new(), "{}", p.name());
        let typed: muster_crds::v1alpha1::Partition = typed(&p.value).unwrap();
        assert_eq!(
            typed.spec.topology,
            [
                "muster.dev/spine",
                "muster.dev/leaf",
                "kubernetes.io/hostname"
            ]
        );
    }
    // A topology the API server would refuse fails the same check here.
    let Some(r) = render(json!({"partitions": {"gpu": {"topology": ["muster.dev/leaf"]}}})) else {
        return;
    };
    let errs = crd_errors(r.get("Partition", "gpu"));
    assert!(
        errs.iter()
            .any(|e| e.contains("end with kubernetes.io/hostname")),
        "{errs:?}"
    );
}

/// Every metric the operator exports (the operator's metrics contract).
const METRICS: [&str; 10] = [
    "muster_queue_jobs",
    "muster_running_jobs",
    "muster_scheduling_cycle_duration_seconds",
    "muster_job_time_to_start_seconds",
    "muster_gpus",
    "muster_preemptions_total",
    "muster_job_transitions_total",
    "muster_errors_total",
    "muster_leader",
    "muster_api_writes_total",
];

fn dashboard() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("files/dashboards/muster.json")).unwrap(),
    )
    .expect("the dashboard is JSON")
}

fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "expr" {
                    out.push(x.as_str().unwrap().to_string());
                } else {
                    exprs(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

#[test]
fn dashboard_shows_every_metric_and_only_real_ones() {
    let d = dashboard();
    let mut all = Vec::new();
    exprs(&d["panels"], &mut all);
    let mut used = BTreeSet::new();
    for e in &all {
        for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("muster_") {
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(word);
                assert!(
                    METRICS.contains(&base),
                    "the dashboard queries {word}, which the operator does not export: {e}"
                );
                used.insert(base.to_string());
            }
        }
        // Histograms are read through their buckets.
        if e.contains("histogram_quantile") {
            assert!(e.contains("_bucket"), "{e}");
        }
    }
    let want: BTreeSet<String> = METRICS.iter().map(|m| m.to_string()).collect();
    assert_eq!(used, want, "metrics missing from the dashboard");

    // Panels: unique ids, a datasource variable, and none overlapping another.
    let panels = d["panels"].as_array().unwrap();
    let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "duplicate panel ids");
    let mut cells = BTreeSet::new();
    for p in panels {
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_i64().unwrap(),
            g["y"].as_i64().unwrap(),
            g["w"].as_i64().unwrap(),
            g["h"].as_i64().unwrap(),
        );
        assert!(x + w <= 24, "panel {} is wider than the grid", p["title"]);
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "panel {} overlaps another",
                    p["title"]
                );
            }
        }
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    assert!(
        d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["type"] == "datasource"),
        "no datasource variable"
    );

    // The ConfigMap carries the same dashboard for the Grafana sidecar.
    let Some(r) = render(scenarios()[3].1.clone()) else {
        return;
    };
    let cm = r.get("ConfigMap", "muster-dashboard");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let inside: Value = serde_json::from_str(cm["data"]["muster.json"].as_str().unwrap()).unwrap();
    assert_eq!(inside, d);
    let sm = r.get("ServiceMonitor", "muster-operator");
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["interval"], "15s");
    assert!(labels_match(
        &sm["spec"]["selector"]["matchLabels"],
        &r.get("Service", "muster-operator-metrics")["metadata"]["labels"]
    ));
}

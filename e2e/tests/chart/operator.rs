//! The operator's objects: its hardened Deployment, its webhook configurations, and values
//! reaching its command line and scheduler config file.

use super::rbac::perms;
use super::*;

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
        "--admin-group=system:masters",
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
        "--admin-group=hpc-admins",
        "--admin-user=root",
    ] {
        assert!(a.contains(&want.to_string()), "missing {want} in {a:?}");
    }
    assert!(
        !a.iter().any(|x| x == "--admin-group=system:masters"),
        "the groups given replace the default: {a:?}"
    );
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

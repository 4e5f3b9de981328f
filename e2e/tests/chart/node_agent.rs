//! The node agent's DaemonSet: only the privileges its policy needs, fixture mode, and the
//! bundled fixtures.

use super::*;

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

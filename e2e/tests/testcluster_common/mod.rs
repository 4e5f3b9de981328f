//! Shared helpers of the `testcluster_*` suites. Every suite runs against the simulated cluster,
//! or a real one when `MUSTER_E2E_KUBECONFIG` is set; tests that need the simulation say so
//! and return early on a real cluster.

#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::wait::await_condition;
use kube::{Resource, ResourceExt};
use muster_e2e::TestCluster;
use muster_operator::core::cluster_spec::ClusterSpec;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Two leaves of two 8-CPU, 32 GiB, 4-GPU DGX nodes under one spine.
pub const SPEC: &str = r#"
name: e2e
levels:
  - {key: muster.dev/spine, count: 1}
  - {key: muster.dev/leaf, count: 2}
nodesPerLeaf: 2
node: {cpus: 8, memory: 32Gi, gpus: 4, gpuModel: NVIDIA H100 80GB HBM3, gpuMemoryMib: 81559, layout: dgx}
"#;

pub fn spec() -> ClusterSpec {
    ClusterSpec::from_yaml(SPEC).expect("test spec")
}

pub async fn start() -> TestCluster {
    TestCluster::start(spec())
        .await
        .expect("test cluster starts")
}

/// Skip (return `true`) on a real cluster, saying why.
pub fn real_cluster_skips(c: &TestCluster, why: &str) -> bool {
    if c.is_simulated() {
        return false;
    }
    eprintln!("skipped on a real cluster: {why}");
    true
}

/// A deadline: `secs` on the simulated cluster (at least a minute: CI's 2-core machine runs
/// two tests at a time beside each other's control planes), generous on a real one.
pub fn timeout(c: &TestCluster, secs: u64) -> Duration {
    if c.is_simulated() {
        Duration::from_secs(secs.max(60))
    } else {
        Duration::from_secs(secs * 6 + 60)
    }
}

/// The script test pods run: it does on a real node what the simulated kubelet does with the
/// `MUSTER_SIM_*` variables, and exits 143 on SIGTERM (a shell as PID 1 would ignore it).
pub const SCRIPT: &str = r#"trap 'exit 143' TERM; sleep "${MUSTER_SIM_RUN_SECONDS:-100000}" & wait $!; exit "${MUSTER_SIM_EXIT_CODE:-0}""#;

/// A pod running [`SCRIPT`] with `env` (`[(name, value)]`) and extra `spec` fields.
pub fn pod(name: &str, env: &[(&str, &str)], spec: Value) -> Pod {
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "muster-e2e"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "busybox:1.36",
                "command": ["sh", "-c", SCRIPT], "env": env}],
        }
    });
    if let (Some(dst), Value::Object(src)) = (p["spec"].as_object_mut(), spec) {
        dst.extend(src);
    }
    serde_json::from_value(p).expect("pod")
}

/// Wait until `f` holds for object `name` (`None`: it is gone), or panic naming `what`.
pub async fn wait<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    within: Duration,
    f: impl Fn(Option<&K>) -> bool,
) -> Option<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(within, await_condition(api.clone(), name, f)).await {
        Ok(Ok(k)) => k,
        Ok(Err(e)) => panic!("watching {name} for {what}: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out after {within:?} waiting for {name} to be {what}; it is {now:#?}")
        }
    }
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

pub fn condition<'a>(p: &'a Pod, t: &str) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
}

pub fn terminated(p: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStateTerminated> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .as_ref()
}

/// Events about pod `name` with `reason`.
pub async fn events(c: &TestCluster, ns: &str, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(c.client(), ns);
    api.list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// A namespace of its own for a test (`prefix-<random>`), so runs can share a real cluster.
pub async fn namespace(c: &TestCluster, prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = &format!("{prefix}-{:05x}", nanos & 0xfffff);
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.client());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match api.create(&Default::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
    name.to_string()
}

pub fn name_of<K: Resource>(k: &K) -> String {
    k.meta().name.clone().unwrap_or_default()
}

pub fn labels_of<K: Resource>(k: &K) -> std::collections::BTreeMap<String, String> {
    k.labels().clone()
}

/// Delete a test's namespace (best effort; matters on a real cluster).
pub async fn cleanup(c: &TestCluster, ns: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.client());
    let _ = api.delete(ns, &Default::default()).await;
}

/// Create pods `make(k)` (k = 0, 1, …) until the scheduler refuses one, and return it.
///
/// A node change and a pod created right after it reach a scheduler through separate watches,
/// so the first pods may still be scheduled on the old picture (as with the real
/// kube-scheduler); those are deleted.
pub async fn create_until_refused(
    c: &TestCluster,
    pods: &Api<Pod>,
    make: impl Fn(u32) -> Pod,
) -> Pod {
    for k in 0..20 {
        let p = make(k);
        let name = name_of(&p);
        pods.create(&Default::default(), &p).await.unwrap();
        let got = wait(pods, &name, "bound or refused", timeout(c, 10), |p| {
            p.is_some_and(|p| {
                node_of(p).is_some()
                    || condition(p, "PodScheduled").is_some_and(|c| c.status == "False")
            })
        })
        .await
        .unwrap();
        if node_of(&got).is_none() {
            return got;
        }
        let dp = kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let _ = pods.delete(&name, &dp).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the scheduler never refused a pod")
}

/// [`events`], waiting until there is at least one.
pub async fn wait_events(c: &TestCluster, ns: &str, name: &str, reason: &str) -> Vec<Event> {
    let t0 = std::time::Instant::now();
    loop {
        let ev = events(c, ns, name, reason).await;
        if !ev.is_empty() {
            return ev;
        }
        assert!(
            t0.elapsed() < timeout(c, 10),
            "no {reason} event for {ns}/{name}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

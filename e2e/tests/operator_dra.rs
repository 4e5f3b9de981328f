//! GPU binding the kubelet enforces, end to end: the real operator, the API server double
//! serving `resource.k8s.io/v1` (or not), the simulated NVIDIA DRA driver's slices and the
//! kube-scheduler stand-in allocating claims with their CEL selectors.
//!
//! - `dra` mode: every pod with GPUs references its own ResourceClaim, pinned to exactly the
//!   GPUs the job's status records; no GPU variable is set by hand; `kubectl get partitions`
//!   shows the binding; the claims go with the job.
//! - Two jobs never get the same GPU, even when a pod is created by hand with a claim for a GPU
//!   a job holds: kube-scheduler refuses it with its own message, and once the hand-made claim
//!   holds a GPU, Muster gives it to no job until it lets go.
//! - `auto` picks `env` on a server without `resource.k8s.io`; an explicit `dra` there waits
//!   with a reason.
//! - Kubernetes' gang API (1.35's Workload, 1.36's PodGroup): the group exists before the pods,
//!   with the pods' count as `minCount`, and the pods name it.

mod operator_support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use muster_crds::v1alpha1::{GpuBinding, JobState, Partition};
use muster_e2e::apiserver::WorkloadApi;
use muster_operator::controller::dra::{self, ResourceClaim};
use operator_support::{Env, NodeDef, batchjob};
use serde_json::json;

async fn partition_status(env: &Env) -> muster_crds::v1alpha1::PartitionStatus {
    Api::<Partition>::all(env.client.clone())
        .get("gpu")
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// `kubectl get partitions` against the double, as a user runs it.
async fn kubectl_get_partitions(env: &Env) -> Option<String> {
    let found = std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert_ne!(
            std::env::var("MUSTER_REQUIRE_KUBECTL").as_deref(),
            Ok("1"),
            "kubectl is not on PATH and MUSTER_REQUIRE_KUBECTL=1"
        );
        eprintln!("note: kubectl not on PATH; the kubectl view is not checked");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    env.server.write_kubeconfig(&kc).unwrap();
    let out = tokio::process::Command::new("kubectl")
        .args(["get", "partitions"])
        .env("KUBECONFIG", &kc)
        .env("HOME", dir.path())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

async fn claims_of(env: &Env, job: &str) -> Vec<ResourceClaim> {
    Api::<ResourceClaim>::namespaced(env.client.clone(), "default")
        .list(&kube::api::ListParams::default().labels(&format!("muster.dev/batchjob={job}")))
        .await
        .unwrap()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_mode_pins_each_pod_to_its_recorded_gpus_through_its_claim() {
    let env = Env::start_with(true).await;
    env.add_nodes(&[
        NodeDef::new("gpu001", 4, "leaf1"),
        NodeDef::new("gpu002", 4, "leaf1"),
    ])
    .await;
    env.default_partition().await;
    let op = env.start_operator(env.settings());
    env.submit(batchjob(
        "ddp",
        json!({"nodes": 2, "ntasksPerNode": 2, "gpusPerTask": 1}),
        4,
    ))
    .await;
    env.until_state("ddp", JobState::Running, 20).await;
    env.until(20, "the partition's binding", || async {
        partition_status(&env).await.gpu_binding == Some(GpuBinding::Dra)
    })
    .await;
    if let Some(table) = kubectl_get_partitions(&env).await {
        let mut lines = table.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let col = header
            .iter()
            .position(|h| *h == "BINDING")
            .expect("a BINDING column");
        assert_eq!(row[col], "dra", "{table}");
    }
    let job = env.job("ddp").await;
    let st = job.status.clone().unwrap();
    assert_eq!(st.gpu_binding, Some(GpuBinding::Dra));
    // One pod per node, one claim each with the node's two tasks' GPUs.
    env.until(20, "the gang's node pods", || async {
        env.pods_of("ddp").await.len() == 2
    })
    .await;
    let mut all = BTreeSet::new();
    for p in env.pods_of("ddp").await {
        let node: u32 = Env::env(&p)["NODE_RANK"].parse().unwrap();
        let task = muster_operator::controller::pods::node_share(&st.tasks, node).unwrap();
        assert_eq!(task.gpus.len(), 2);
        // What the container gets: the claim's allocation, nothing set by hand.
        let mut got = env.visible_gpus(&p).await;
        got.sort();
        let mut want = task.gpu_uuids.clone();
        want.sort();
        assert_eq!(got, want, "pod {}", p.name_any());
        for g in got {
            assert!(all.insert(g), "a GPU given twice");
        }
        let cname = dra::pod_claim(&p).unwrap().to_string();
        assert_eq!(cname, format!("{}-gpus", p.name_any()));
        let c = Api::<ResourceClaim>::namespaced(env.client.clone(), "default")
            .get(&cname)
            .await
            .unwrap();
        let mut pinned = dra::pinned_uuids(&c);
        pinned.sort();
        assert_eq!(pinned, want);
        let o = &c.owner_references()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str()),
            ("BatchJob", job.uid().unwrap().as_str())
        );
        let reserved = &c.status.as_ref().unwrap().reserved_for;
        assert_eq!(reserved.len(), 1);
        assert_eq!(reserved[0].name, p.name_any());
        assert!(c.finalizers().iter().any(|f| f == dra::DELETE_PROTECTION));
        let containers_claim = p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.claims.clone())
            .unwrap_or_default();
        assert_eq!(containers_claim[0].name, "gpus");
    }
    env.check_no_double_gpu().await.unwrap();
    env.until_state("ddp", JobState::Completed, 30).await;
    // The claims go with the job's attempt (once no pod uses them).
    env.until(20, "the claims deleted", || async {
        claims_of(&env, "ddp").await.is_empty()
    })
    .await;
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_claim_never_shares_a_gpu_with_a_job() {
    let env = Env::start_with(true).await;
    env.add_nodes(&[NodeDef::new("gpu001", 2, "leaf1")]).await;
    env.default_partition().await;
    let op = env.start_operator(env.settings());
    // It runs until cancelled below, so the checks while it holds the GPU race no clock.
    env.submit(batchjob("first", json!({"gpus": 1}), 3600))
        .await;
    env.until_state("first", JobState::Running, 20).await;
    let taken = env.job("first").await.status.unwrap().tasks[0].gpu_uuids[0].clone();
    // The job's pod holds its claim's device before anyone else asks for it (RUNNING is
    // written before the Secret, the claim and the pod are).
    env.until(20, "the job's pod running", || async {
        env.pods_of("first")
            .await
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;

    // Someone claims the GPU the job holds, and makes a pod that uses the claim.
    let claims: Api<ResourceClaim> = Api::namespaced(env.client.clone(), "default");
    let claim: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": dra::uuid_selector(&taken)}}]}}]}}
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "by-hand", "namespace": "default"},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "mine"}],
            "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    // kube-scheduler's answer: the device is allocated to the job's claim.
    env.until(20, "the hand-made pod refused", || async {
        pods.get("by-hand")
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.type_ == "PodScheduled"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && c.message.as_deref()
                        == Some("0/1 nodes are available: 1 cannot allocate all claims.")
            })
    })
    .await;
    assert!(
        claims
            .get("mine")
            .await
            .unwrap()
            .status
            .and_then(|s| s.allocation)
            .is_none(),
        "the hand-made claim got nothing"
    );
    env.check_no_double_gpu().await.unwrap();

    // The job ends (scancel) and lets go: the hand-made claim gets the GPU...
    env.jobs()
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cancel": true}})),
        )
        .await
        .unwrap();
    env.until_state("first", JobState::Cancelled, 30).await;
    env.until(20, "the hand-made claim allocated", || async {
        claims
            .get("mine")
            .await
            .unwrap()
            .status
            .and_then(|s| s.allocation)
            .is_some()
    })
    .await;
    // ... and while it holds it, a job asking for both GPUs waits, and one asking for one gets
    // the other GPU.
    env.submit(batchjob("both", json!({"gpus": 2}), 3)).await;
    env.submit(batchjob("one", json!({"gpus": 1}), 3)).await;
    env.until_state("one", JobState::Running, 20).await;
    let one = env.job("one").await.status.unwrap().tasks[0]
        .gpu_uuids
        .clone();
    assert_ne!(
        one,
        vec![taken.clone()],
        "the job got the hand-made claim's GPU"
    );
    env.check_no_double_gpu().await.unwrap();
    env.until_state("one", JobState::Completed, 30).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(env.state("both").await, Some(JobState::Pending));
    // The hand-made pod goes: its claim is released and the two-GPU job runs.
    pods.delete("by-hand", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    env.until_state("both", JobState::Running, 30).await;
    env.check_no_double_gpu().await.unwrap();
    env.until_state("both", JobState::Completed, 30).await;
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_is_env_without_resource_k8s_io_and_explicit_dra_waits() {
    let env = Env::start_with(false).await;
    assert!(
        env.client
            .list_api_group_resources("resource.k8s.io/v1")
            .await
            .is_err(),
        "this server does not serve DRA"
    );
    env.add_nodes(&[NodeDef::new("gpu001", 2, "leaf1")]).await;
    env.default_partition().await;
    env.add_partition(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "strict"},
        "spec": {"gpuBinding": "dra", "defaultImage": "busybox:1.36"}}))
        .await;
    let op = env.start_operator(env.settings());
    env.submit(batchjob("plain", json!({"gpus": 1}), 3)).await;
    let mut wants_dra = batchjob("wants-dra", json!({"gpus": 1}), 3);
    wants_dra["spec"]["partition"] = json!("strict");
    env.submit(wants_dra).await;
    env.until_state("plain", JobState::Running, 20).await;
    env.until(20, "the partition's binding", || async {
        partition_status(&env).await.gpu_binding == Some(GpuBinding::Env)
    })
    .await;
    if let Some(table) = kubectl_get_partitions(&env).await {
        let gpu_row = table.lines().find(|l| l.starts_with("gpu ")).unwrap();
        assert!(gpu_row.split_whitespace().any(|c| c == "env"), "{table}");
    }
    env.until(20, "the pod", || async {
        !env.pods_of("plain").await.is_empty()
    })
    .await;
    let p = &env.pods_of("plain").await[0];
    assert_eq!(
        env.visible_gpus(p).await,
        env.job("plain").await.status.unwrap().tasks[0].gpu_uuids
    );
    assert!(dra::pod_claim(p).is_none());
    // The partition that insists on DRA: its job waits, saying why.
    env.until(20, "the stalled job", || async {
        env.job("wants-dra")
            .await
            .status
            .and_then(|s| s.message)
            .is_some_and(|m| m.contains("gpuBinding: dra") && m.contains("resource.k8s.io/v1"))
    })
    .await;
    assert_eq!(env.state("wants-dra").await, Some(JobState::Pending));
    let strict = Api::<Partition>::all(env.client.clone())
        .get("strict")
        .await
        .unwrap()
        .status
        .unwrap();
    let ready = strict
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "GpuBindingUnavailable")
    );
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_gang_group_comes_before_the_pods_that_name_it() {
    for (api, version, plural, kind) in [
        (WorkloadApi::V1alpha1, "v1alpha1", "workloads", "Workload"),
        (WorkloadApi::V1alpha2, "v1alpha2", "podgroups", "PodGroup"),
    ] {
        let env = Env::start_opts(true, Some(api)).await;
        env.add_nodes(&[
            NodeDef::new("gpu001", 4, "leaf1"),
            NodeDef::new("gpu002", 4, "leaf1"),
        ])
        .await;
        env.default_partition().await;
        let op = env.start_operator(env.settings());
        env.submit(batchjob(
            "gang",
            json!({"nodes": 2, "ntasksPerNode": 1, "gpusPerTask": 2}),
            3,
        ))
        .await;
        env.until_state("gang", JobState::Running, 20).await;
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("scheduling.k8s.io", version, kind),
            plural,
        );
        let groups: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), "default", &ar);
        env.until(20, "the group", || async {
            groups.get_opt("gang-a1").await.unwrap().is_some()
        })
        .await;
        let g = groups.get("gang-a1").await.unwrap();
        let min = match api {
            WorkloadApi::V1alpha1 => &g.data["spec"]["podGroups"][0]["policy"]["gang"]["minCount"],
            WorkloadApi::V1alpha2 => &g.data["spec"]["schedulingPolicy"]["gang"]["minCount"],
        };
        assert_eq!(min, 2, "{kind}: minCount = the job's pods");
        env.until(20, "both pods running", || async {
            let ps = env.pods_of("gang").await;
            ps.len() == 2
                && ps
                    .iter()
                    .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        })
        .await;
        // The pods name the group (read raw: the field is newer than k8s-openapi's v1_32 Pod).
        let raw: Api<DynamicObject> = Api::namespaced_with(
            env.client.clone(),
            "default",
            &ApiResource::erase::<Pod>(&()),
        );
        for p in env.pods_of("gang").await {
            let v = raw.get(&p.name_any()).await.unwrap();
            assert_eq!(
                muster_operator::controller::gang::pod_group_of(&serde_json::to_value(&v).unwrap())
                    .as_deref(),
                Some("gang-a1"),
                "{kind}"
            );
        }
        env.until_state("gang", JobState::Completed, 30).await;
        env.until(20, "the group deleted", || async {
            groups.get_opt("gang-a1").await.unwrap().is_none()
        })
        .await;
        op.shutdown().await.unwrap();
    }
}

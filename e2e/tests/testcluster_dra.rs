//! Dynamic Resource Allocation and gang scheduling in the test control plane: the API server
//! double serving `resource.k8s.io/v1` (and the Workload/PodGroup API), the simulated NVIDIA
//! driver's slices, the kube-scheduler stand-in allocating claims by their CEL selectors and
//! refusing what cannot be had with kube-scheduler's words, and claims released when their
//! pods end — the way a user with `kubectl` and a DRA-enabled cluster would see it.

mod testcluster_common;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use muster_e2e::TestClusterOptions;
use muster_e2e::apiserver::WorkloadApi;
use muster_operator::controller::dra::{DELETE_PROTECTION, ResourceClaim};
use serde_json::{Value, json};
use testcluster_common::*;

fn claim(name: &str, count: u32, selector: &str) -> ResourceClaim {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": count,
            "selectors": [{"cel": {"expression": selector}}]}}]}}
    }))
    .unwrap()
}

fn with_claim(claim: &str) -> Value {
    json!({"resourceClaims": [{"name": "gpus", "resourceClaimName": claim}]})
}

fn claim_pod(name: &str, claim: &str) -> Pod {
    let mut p = pod(name, &[], with_claim(claim));
    p.spec.as_mut().unwrap().containers[0]
        .resources
        .get_or_insert_with(Default::default)
        .claims = Some(vec![k8s_openapi::api::core::v1::ResourceClaim {
        name: "gpus".into(),
        request: None,
    }]);
    p
}

/// The pod's `PodScheduled=False` message once it is the expected one. The scheduler
/// reports again when a retry fails differently: a claim created just before its pod may
/// not have reached the scheduler's informer yet, so a first report can say the claim is
/// not found (as kube-scheduler's would), then the real reason.
async fn refused_with(
    pods: &Api<Pod>,
    name: &str,
    c: &muster_e2e::TestCluster,
    expected: impl Fn(&str) -> bool,
) -> String {
    let p = wait(pods, name, "refused", timeout(c, 10), |p| {
        p.and_then(|p| condition(p, "PodScheduled"))
            .is_some_and(|c| c.status == "False" && expected(c.message.as_deref().unwrap_or("")))
    })
    .await
    .unwrap();
    assert_eq!(node_of(&p), None);
    condition(&p, "PodScheduled")
        .unwrap()
        .message
        .clone()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_allocated_by_their_selectors_and_released_with_their_pods() {
    let c = muster_e2e::TestCluster::simulated(TestClusterOptions::new(spec()).with_dra(true))
        .await
        .unwrap();
    let ns = namespace(&c, "dra").await;
    let claims: Api<ResourceClaim> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);

    // Two H100s with at least 80Gi, by product name and capacity (kube-cel's quantity).
    claims
        .create(
            &PostParams::default(),
            &claim(
                "two",
                2,
                r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100") && device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("79Gi")) >= 0"#,
            ),
        )
        .await
        .unwrap();
    pods.create(&PostParams::default(), &claim_pod("user", "two"))
        .await
        .unwrap();
    let p = wait(&pods, "user", "bound", timeout(&c, 10), |p| {
        p.and_then(node_of).is_some()
    })
    .await
    .unwrap();
    let node = node_of(&p).unwrap().to_string();
    let got = claims.get("two").await.unwrap();
    let alloc = got.status.as_ref().unwrap().allocation.clone().unwrap();
    let results = alloc.devices.unwrap().results;
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| r.pool == node && r.driver == "gpu.nvidia.com")
    );
    let sel = serde_json::to_value(alloc.node_selector.unwrap()).unwrap();
    assert_eq!(
        sel["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
        node.as_str()
    );
    let reserved = &got.status.as_ref().unwrap().reserved_for;
    assert_eq!(
        (reserved[0].resource.as_str(), reserved[0].name.as_str()),
        ("pods", "user")
    );
    assert!(got.finalizers().iter().any(|f| f == DELETE_PROTECTION));

    // What no node has: kube-scheduler's refusal, per node.
    claims
        .create(
            &PostParams::default(),
            &claim(
                "huge",
                1,
                r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("200Gi")) >= 0"#,
            ),
        )
        .await
        .unwrap();
    pods.create(&PostParams::default(), &claim_pod("greedy", "huge"))
        .await
        .unwrap();
    let want = "0/4 nodes are available: 4 cannot allocate all claims.";
    assert_eq!(refused_with(&pods, "greedy", &c, |m| m == want).await, want);
    // A claim that does not exist, and a selector that fails when evaluated.
    pods.create(&PostParams::default(), &claim_pod("lost", "ghost"))
        .await
        .unwrap();
    let want = "0/4 nodes are available: resourceclaim.resource.k8s.io \"ghost\" not found.";
    assert_eq!(refused_with(&pods, "lost", &c, |m| m == want).await, want);
    claims
        .create(
            &PostParams::default(),
            &claim(
                "typo",
                1,
                r#"device.attributes["gpu.nvidia.com"].noSuchAttribute == "x""#,
            ),
        )
        .await
        .unwrap();
    pods.create(&PostParams::default(), &claim_pod("typo", "typo"))
        .await
        .unwrap();
    let m = refused_with(&pods, "typo", &c, |m| m.contains("CEL runtime error")).await;
    assert!(m.contains("CEL runtime error"), "{m}");

    // The claim's spec cannot change.
    let mut changed = claims.get("two").await.unwrap();
    changed.spec.devices.requests[0].name = "other".into();
    let e = claims
        .replace("two", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("field is immutable"), "{e}");

    // The pod ends: the claim is released (reservation, allocation, finalizer), and a deleted
    // claim goes once no pod uses it.
    c.finish_pod(&ns, "user", 0).await.unwrap();
    wait(&claims, "two", "released", timeout(&c, 10), |cl| {
        cl.is_some_and(|cl| {
            cl.status
                .as_ref()
                .is_none_or(|s| s.allocation.is_none() && s.reserved_for.is_empty())
                && !cl.finalizers().iter().any(|f| f == DELETE_PROTECTION)
        })
    })
    .await;
    claims
        .delete("two", &DeleteParams::default())
        .await
        .unwrap();
    wait(&claims, "two", "gone", timeout(&c, 10), |cl| cl.is_none()).await;
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_dra_the_api_is_not_served_and_claim_fields_are_dropped() {
    let c = muster_e2e::TestCluster::simulated(TestClusterOptions::new(spec()).with_dra(false))
        .await
        .unwrap();
    assert!(
        c.client()
            .list_api_group_resources("resource.k8s.io/v1")
            .await
            .is_err()
    );
    let ns = namespace(&c, "nodra").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    pods.create(&PostParams::default(), &claim_pod("p", "x"))
        .await
        .unwrap();
    let p = pods.get("p").await.unwrap();
    assert!(p.spec.as_ref().unwrap().resource_claims.is_none());
    assert!(
        p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .is_none_or(|r| r.claims.is_none())
    );
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_binds_whole_or_not_at_all() {
    let mut o = TestClusterOptions::new(spec()).with_dra(true);
    o.api.features.workload = Some(WorkloadApi::V1alpha2);
    let c = muster_e2e::TestCluster::simulated(o).await.unwrap();
    let ns = namespace(&c, "gang").await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.k8s.io", "v1alpha2", "PodGroup"),
        "podgroups",
    );
    let groups: Api<DynamicObject> = Api::namespaced_with(c.client(), &ns, &ar);
    for (name, min) in [("pair", 2), ("trio", 3)] {
        let g: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min}}}}))
        .unwrap();
        groups.create(&PostParams::default(), &g).await.unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let member = |name: &str, group: &str, cpu: &str| -> Value {
        let mut p = serde_json::to_value(pod(name, &[], json!({}))).unwrap();
        p["spec"]["schedulingGroup"] = json!({"podGroupName": group});
        p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}});
        p
    };
    // Created as JSON: the group reference is newer than k8s-openapi's v1_32 Pod.
    let raw: Api<DynamicObject> =
        Api::namespaced_with(c.client(), &ns, &ApiResource::erase::<Pod>(&()));
    let create = |v: Value| {
        let raw = raw.clone();
        async move {
            let p: DynamicObject = serde_json::from_value(v).unwrap();
            raw.create(&PostParams::default(), &p).await.unwrap();
        }
    };
    // One of two: it waits for its partner.
    create(member("pair-0", "pair", "1")).await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert_eq!(node_of(&pods.get("pair-0").await.unwrap()), None);
    create(member("pair-1", "pair", "1")).await;
    for n in ["pair-0", "pair-1"] {
        wait(&pods, n, "bound", timeout(&c, 10), |p| {
            p.and_then(node_of).is_some()
        })
        .await;
    }
    // Three, one of which fits no node: none is bound.
    create(member("trio-0", "trio", "1")).await;
    create(member("trio-1", "trio", "1")).await;
    create(member("trio-2", "trio", "64")).await;
    let m = refused_with(&pods, "trio-0", &c, |m| m.contains("Insufficient cpu")).await;
    assert!(m.contains("Insufficient cpu"), "{m}");
    for n in ["trio-0", "trio-1", "trio-2"] {
        assert_eq!(node_of(&pods.get(n).await.unwrap()), None, "{n}");
    }
    cleanup(&c, &ns).await;
}

//! The planner and executor in `dra` mode and with Kubernetes' gang API, over the in-memory
//! cluster (which allocates claims as kube-scheduler does): a claim per pod before the pod,
//! pinned to the recorded GPUs, deleted with its attempt; GPUs allocated to others' claims are
//! taken; crash safety at every admission write.

use std::collections::BTreeMap;

use kube::ResourceExt;
use muster_crds::v1alpha1::{GpuBinding, GpuBindingMode, JobState};

use super::dra::{self, ResourceClaim};
use super::exec::{CrashAfter, WriteKind};
use super::fake::{FakeClaim, Harness};
use super::gang::GangApi;
use super::plan_tests::{gang, gpus, harness, job, partition, run_for, writes_excluding_events};

fn dra_harness(nodes: usize, gpus: u32) -> Harness {
    let mut h = harness(nodes, gpus);
    h.dra = true;
    h
}

fn env_of(p: &k8s_openapi::api::core::v1::Pod) -> BTreeMap<String, String> {
    p.spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn claims_of(h: &Harness, job: &str) -> Vec<FakeClaim> {
    h.cluster
        .lock()
        .claims
        .values()
        .filter(|c| {
            c.claim
                .labels()
                .get(muster_crds::labels::BATCHJOB)
                .map(String::as_str)
                == Some(job)
        })
        .cloned()
        .collect()
}

#[test]
fn a_claim_per_pod_pins_the_recorded_gpus_and_goes_with_its_attempt() {
    let mut h = dra_harness(4, 4);
    h.cluster.submit(job("mpi", gang(2, 2, 1), 60, None));
    h.cycle();
    let st = h.cluster.job("mpi").status.unwrap();
    assert_eq!(st.state, Some(JobState::Running));
    assert_eq!(st.gpu_binding, Some(GpuBinding::Dra));
    let claims = claims_of(&h, "mpi");
    assert_eq!(claims.len(), 2, "one claim per node pod");
    for p in h.cluster.pods_of("mpi") {
        let env = env_of(&p);
        assert!(
            !env.contains_key("NVIDIA_VISIBLE_DEVICES"),
            "no GPU variable set by hand in dra mode"
        );
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,1");
        let node: u32 = env["NODE_RANK"].parse().unwrap();
        let share = crate::controller::pods::node_share(&st.tasks, node).unwrap();
        let cname = dra::pod_claim(&p).unwrap().to_string();
        assert_eq!(cname, format!("{}-gpus", p.name_any()));
        let c = claims.iter().find(|c| c.claim.name_any() == cname).unwrap();
        assert_eq!(dra::pinned_uuids(&c.claim), share.gpu_uuids);
    }
    // Writes: finalizer, status, Secret, Service, 2 claims, 2 pods.
    assert_eq!(writes_excluding_events(&h), 4 + 2 + 2);
    assert_eq!(h.writes[&WriteKind::ClaimCreate], 2);
    h.step(5);
    h.cluster.check_claims().unwrap();
    run_for(&mut h, 70);
    assert_eq!(h.cluster.state("mpi"), JobState::Completed);
    // Deleted with the attempt; the claims go once no pod uses them.
    run_for(&mut h, 40);
    assert!(
        claims_of(&h, "mpi").is_empty(),
        "claims left after the job ended"
    );
    assert_eq!(h.writes[&WriteKind::ClaimDelete], 2);
}

#[test]
fn a_requeued_attempt_gets_new_claims_and_the_old_ones_are_deleted() {
    let mut h = dra_harness(3, 2);
    h.cluster.submit(job("r", gang(2, 1, 2), 600, None));
    h.cycle();
    h.step(5);
    let first = h.cluster.job("r").status.unwrap();
    let node = first.tasks[0].node.clone();
    h.cluster.set_node_ready(&node, false);
    for _ in 0..40 {
        h.step(5);
        let st = h.cluster.job("r").status.unwrap();
        if st.state == Some(JobState::Running) && st.attempt == Some(2) {
            break;
        }
    }
    let st = h.cluster.job("r").status.unwrap();
    assert_eq!(st.attempt, Some(2));
    assert!(st.tasks.iter().all(|t| t.node != node));
    run_for(&mut h, 30);
    let claims = claims_of(&h, "r");
    assert!(
        claims
            .iter()
            .all(|c| c.claim.labels()[muster_crds::labels::ATTEMPT] == "2"),
        "claims of the first attempt are deleted: {:?}",
        claims
            .iter()
            .map(|c| c.claim.name_any())
            .collect::<Vec<_>>()
    );
    assert_eq!(claims.len(), 2);
}

#[test]
fn gpus_allocated_to_a_hand_made_claim_are_taken() {
    let mut h = dra_harness(1, 4);
    // Someone's claim (no owner Muster knows) holds GPU 1 of node1.
    {
        let mut s = h.cluster.lock();
        let claim = ResourceClaim {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("mine".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        s.claims.insert(
            ("default".into(), "mine".into()),
            FakeClaim {
                claim,
                allocated: vec![("node1".into(), 1)],
                reserved_for: None,
                deleting: false,
            },
        );
    }
    h.cluster.submit(job("three", gpus(3), 60, None));
    h.cluster.submit(job("four", gpus(4), 60, None));
    h.cycle();
    let st = h.cluster.job("three").status.unwrap();
    assert_eq!(st.state, Some(JobState::Running));
    assert!(
        !st.tasks.iter().any(|t| t.gpus.contains(&1)),
        "GPU 1 is someone's: {:?}",
        st.tasks
    );
    assert_eq!(h.cluster.state("four"), JobState::Pending);
    h.step(5);
    h.cluster.check_claims().unwrap();
    // The claim lets go: the four-GPU job can start after the first.
    h.cluster
        .lock()
        .claims
        .remove(&("default".into(), "mine".into()));
    run_for(&mut h, 80);
    assert_eq!(h.cluster.state("four"), JobState::Running);
}

/// A claim of an ended attempt of Muster's, still allocated after its pods are gone (the
/// resourceclaim controller has not released it yet), does not push the next job elsewhere:
/// the job gets those GPUs, as the simulator and `--test-only` predict, and its pod starts
/// once the claim is gone — never while it holds them.
#[test]
fn a_released_attempts_claim_does_not_move_the_next_job() {
    let mut h = dra_harness(2, 4);
    h.cluster.submit(job("old", gpus(4), 10, None));
    h.cycle();
    run_for(&mut h, 20);
    assert_eq!(h.cluster.state("old"), JobState::Completed);
    let old = h.cluster.job("old");
    let node = old.status.as_ref().unwrap().tasks[0].node.clone();
    // Its claim as kube-scheduler may still show it: allocated, reserved for no pod.
    {
        let mut s = h.cluster.lock();
        let mut labels = BTreeMap::new();
        labels.insert(muster_crds::labels::BATCHJOB.to_string(), "old".to_string());
        labels.insert(muster_crds::labels::ATTEMPT.to_string(), "1".to_string());
        let claim = ResourceClaim {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("old-0-gpus".into()),
                namespace: Some("default".into()),
                labels: Some(labels),
                owner_references: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: "muster.dev/v1alpha1".into(),
                        kind: "BatchJob".into(),
                        name: "old".into(),
                        uid: old.metadata.uid.clone().unwrap(),
                        controller: Some(true),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            },
            ..Default::default()
        };
        s.claims.insert(
            ("default".into(), "old-0-gpus".into()),
            FakeClaim {
                claim,
                allocated: (0..4).map(|g| (node.clone(), g)).collect(),
                reserved_for: None,
                deleting: false,
            },
        );
    }
    h.cluster.submit(job("next", gpus(4), 10, None));
    h.cycle();
    let st = h.cluster.job("next").status.unwrap();
    assert_eq!(st.state, Some(JobState::Running));
    assert_eq!(st.tasks[0].node, node, "the GPUs the ended attempt left");
    h.cluster.check_claims().unwrap();
    run_for(&mut h, 5);
    assert!(
        !h.cluster
            .lock()
            .claims
            .contains_key(&("default".into(), "old-0-gpus".into())),
        "the ended attempt's claim is deleted"
    );
    run_for(&mut h, 20);
    assert_eq!(h.cluster.state("next"), JobState::Completed);
}

#[test]
fn explicit_dra_without_the_driver_stalls_with_a_reason() {
    let mut h = harness(2, 4);
    let mut p = partition("gpu", true);
    p.spec.gpu_binding = Some(GpuBindingMode::Dra);
    h.cluster.add_partition(p);
    h.cluster.submit(job("j", gpus(1), 60, None));
    h.cycle();
    let st = h.cluster.job("j").status.unwrap();
    assert_eq!(st.state, Some(JobState::Pending));
    assert_eq!(st.reason.as_deref(), Some("PartitionConfig"));
    assert!(
        st.message
            .as_deref()
            .unwrap()
            .contains("resource.k8s.io/v1"),
        "{:?}",
        st.message
    );
    let stalled = st.conditions.iter().find(|c| c.type_ == "Stalled").unwrap();
    assert_eq!(stalled.status, "True");
    assert_eq!(stalled.reason, "GpuBindingUnavailable");
    let ps = h.cluster.lock().partitions["gpu"].status.clone().unwrap();
    assert_eq!(ps.gpu_binding, None);
    let ready = ps.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.reason, "GpuBindingUnavailable");
    // Auto resolves to env here, and to dra where the driver is.
    let mut h = harness(1, 4);
    h.cycle();
    let ps = h.cluster.lock().partitions["gpu"].status.clone().unwrap();
    assert_eq!(ps.gpu_binding, Some(GpuBinding::Env));
    let mut h = dra_harness(1, 4);
    h.cycle();
    let ps = h.cluster.lock().partitions["gpu"].status.clone().unwrap();
    assert_eq!(ps.gpu_binding, Some(GpuBinding::Dra));
}

#[test]
fn the_gang_group_comes_before_the_pods_and_goes_with_the_attempt() {
    for api in [GangApi::WorkloadV1alpha1, GangApi::PodGroupV1alpha2] {
        let mut h = dra_harness(2, 4);
        h.gang = Some(api);
        h.cluster.submit(job("g", gang(2, 2, 1), 30, None));
        h.cycle();
        assert!(
            h.cluster
                .lock()
                .groups
                .contains(&("default".into(), "g-a1".into()))
        );
        assert_eq!(h.writes[&WriteKind::Group], 1);
        run_for(&mut h, 45);
        assert_eq!(h.cluster.state("g"), JobState::Completed);
        assert!(h.cluster.lock().groups.is_empty(), "{api:?}: group deleted");
    }
}

/// The operator dies after the n-th write of a cycle, for every n inside the admissions of
/// three gangs and a single job, in `dra` mode with the gang API on; a fresh operator takes
/// over. No GPU is held twice (by allocations, pods or claims), no pod ever exists before its
/// claim (the fake cluster refuses it), no claim of a superseded or ended attempt is left.
#[test]
fn killed_at_every_admission_write_in_dra_mode() {
    let mut iterations = 0;
    for conc in [1, 8] {
        for n in 0..=40u64 {
            let mut h = dra_harness(6, 4);
            h.gang = Some(GangApi::PodGroupV1alpha2);
            h.concurrency = conc;
            let mut names: Vec<String> = Vec::new();
            for i in 0..3 {
                h.cluster
                    .submit(job(&format!("g{i}"), gang(2, 2, 1), 30, None));
                names.push(format!("g{i}"));
            }
            h.cluster.submit(job("solo", gpus(2), 30, None));
            names.push("solo".into());
            let r = h.cycle_with(&CrashAfter::new(n));
            h.cluster.check_no_double_gpu().unwrap();
            h.cluster.check_claims().unwrap();
            if !r.crashed {
                continue;
            }
            iterations += 1;
            h.mem = Default::default();
            for _ in 0..200 {
                h.step(5);
                if names
                    .iter()
                    .all(|n| h.cluster.state(n) == JobState::Completed)
                {
                    break;
                }
            }
            h.cluster.check_gangs().unwrap();
            for name in &names {
                assert_eq!(
                    h.cluster.state(name),
                    JobState::Completed,
                    "conc={conc} n={n} {name}"
                );
            }
            run_for(&mut h, 40);
            let s = h.cluster.lock();
            assert!(
                s.claims.is_empty(),
                "n={n}: claims left: {:?}",
                s.claims.keys().collect::<Vec<_>>()
            );
        }
    }
    assert!(iterations >= 50, "{iterations} crash points exercised");
}

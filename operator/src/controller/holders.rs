//! Who holds each GPU, read back from the API objects: the invariant "never a GPU twice" as
//! the unit tests' in-memory cluster and the e2e suites both check it, written once.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use muster_crds::v1alpha1::{BatchJob, JobState};

use super::plan::PodObs;

/// A GPU: its Node's name and its NVML index.
pub type GpuKey = (String, u32);
/// A holder: a job's UID and admission attempt.
pub type Holder = (String, u32);

/// Every GPU recorded by a RUNNING job's status or by a live pod's allocation, with each
/// (job, attempt) that records it. A GPU with two holders is allocated twice.
pub fn gpu_holders<'a>(
    jobs: impl IntoIterator<Item = &'a BatchJob>,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> BTreeMap<GpuKey, BTreeSet<Holder>> {
    let mut holders: BTreeMap<GpuKey, BTreeSet<Holder>> = BTreeMap::new();
    for j in jobs {
        let Some(st) = &j.status else { continue };
        if st.state != Some(JobState::Running) {
            continue;
        }
        for t in &st.tasks {
            for g in &t.gpus {
                holders
                    .entry((t.node.clone(), *g))
                    .or_default()
                    .insert((j.uid().unwrap_or_default(), st.attempt.unwrap_or(0)));
            }
        }
    }
    for o in pods.into_iter().filter_map(PodObs::from_pod) {
        let Some(a) = o.alloc.as_ref().filter(|_| o.live()) else {
            continue;
        };
        for g in &a.gpus {
            holders
                .entry((a.node.to_string(), *g))
                .or_default()
                .insert((
                    o.owner_uid().unwrap_or_default().to_string(),
                    o.attempt.unwrap_or(0),
                ));
        }
    }
    holders
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::pods::TASK_ANNOTATION;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use muster_crds::labels;
    use muster_crds::v1alpha1::{BatchJobStatus, TaskAllocation};

    fn job(uid: &str, state: JobState, node: &str, gpus: &[u32]) -> BatchJob {
        let mut j = BatchJob::new("j", Default::default());
        j.metadata.uid = Some(uid.into());
        j.status = Some(BatchJobStatus {
            state: Some(state),
            attempt: Some(1),
            tasks: vec![TaskAllocation {
                node: node.into(),
                gpus: gpus.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        });
        j
    }

    fn pod(owner: &str, attempt: u32, node: &str, gpus: &[u32], phase: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(format!("{owner}-{node}"));
        p.metadata.labels = Some(
            [
                (labels::BATCHJOB.to_string(), "j".to_string()),
                (labels::ATTEMPT.to_string(), attempt.to_string()),
            ]
            .into(),
        );
        p.metadata.annotations = Some(
            [(
                TASK_ANNOTATION.to_string(),
                serde_json::json!({"rank": 0, "node": node, "nodeRank": 0, "localRank": 0,
                                   "gpus": gpus})
                .to_string(),
            )]
            .into(),
        );
        p.metadata.owner_references = Some(vec![OwnerReference {
            controller: Some(true),
            uid: owner.into(),
            ..Default::default()
        }]);
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    }

    #[test]
    fn a_gpu_two_jobs_record_has_two_holders() {
        let jobs = [
            job("a", JobState::Running, "n1", &[0, 1]),
            job("b", JobState::Running, "n1", &[1]),
            // Ended: holds nothing.
            job("c", JobState::Completed, "n1", &[0]),
        ];
        let pods = [
            pod("a", 1, "n1", &[0, 1], "Running"),
            // A finished pod holds nothing; a live one of an older attempt does.
            pod("b", 1, "n1", &[0], "Succeeded"),
            pod("d", 3, "n2", &[5], "Pending"),
        ];
        let h = gpu_holders(&jobs, &pods);
        let of = |n: &str, g: u32| h[&(n.to_string(), g)].clone();
        assert_eq!(of("n1", 0), BTreeSet::from([("a".to_string(), 1)]));
        assert_eq!(
            of("n1", 1),
            BTreeSet::from([("a".to_string(), 1), ("b".to_string(), 1)])
        );
        assert_eq!(of("n2", 5), BTreeSet::from([("d".to_string(), 3)]));
        assert_eq!(h.len(), 3);
    }
}

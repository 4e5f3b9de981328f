//! BatchJobs as the core's running and pending jobs, with the times and limits they carry.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as KubeTime;
use kube::ResourceExt;
use muster_crds::slurm::TimeLimit;
use muster_crds::v1alpha1::{BatchJob, BatchJobStatus, Exclusive};

use crate::core::{self, ArrayTask, JobId, PartitionId, PendingJob, RunningJob, TaskAlloc};

use super::{NodeTable, ParsedJob, job_user};

/// Seconds since the epoch of a Kubernetes time.
pub fn secs(t: &KubeTime) -> i64 {
    t.0.as_second()
}

/// A Kubernetes time from seconds since the epoch.
pub fn time(secs: i64) -> KubeTime {
    KubeTime(jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}

/// A job holding an allocation (from its `status.tasks`) as a core running job.
/// The time limit the admission recorded in `st` (`status.timeLimit`), in seconds; `None`
/// when unlimited or not admitted. The scheduler's timeout and the step's `--signal` both
/// read it here.
pub fn status_limit_secs(st: &BatchJobStatus) -> Option<u64> {
    TimeLimit::parse(st.time_limit.as_deref()?).ok()?.seconds()
}

/// `stopping_since` is set when the operator is stopping it (its resources stay busy until its
/// pods are gone, at least the partition's grace time).
pub fn running_job(
    job: &BatchJob,
    id: JobId,
    partition: Option<PartitionId>,
    nodes: &NodeTable,
    stopping_since: Option<i64>,
) -> RunningJob {
    let tasks = job
        .status
        .as_ref()
        .map(|st| core_tasks(&st.tasks, nodes))
        .unwrap_or_default();
    running_job_with(job, tasks, id, partition, stopping_since)
}

/// Task records as the core's running job holds them (a node not in `nodes` maps past the
/// end: see [`NodeTable::id`]).
pub fn core_tasks(
    tasks: &[muster_crds::v1alpha1::TaskAllocation],
    nodes: &NodeTable,
) -> Vec<TaskAlloc> {
    tasks
        .iter()
        .map(|t| TaskAlloc {
            node: nodes.id(&t.node),
            gpus: t.gpus.clone(),
            cpu_millis: t.cpu_millis,
            memory_mib: t.memory_mib,
        })
        .collect()
}

/// [`running_job`] with its tasks given (the operator's job cache keeps a status's task
/// records apart from the object).
pub fn running_job_with(
    job: &BatchJob,
    tasks: Vec<TaskAlloc>,
    id: JobId,
    partition: Option<PartitionId>,
    stopping_since: Option<i64>,
) -> RunningJob {
    let empty = BatchJobStatus::default();
    let st = job.status.as_ref().unwrap_or(&empty);
    let time_limit = status_limit_secs(st);
    RunningJob {
        id,
        name: job.name_any(),
        job_name: job.spec.job_name.clone(),
        namespace: job.namespace().unwrap_or_default(),
        partition,
        start_time: st.start_time.as_ref().map(secs).unwrap_or(0),
        time_limit,
        exclusive: job.spec.exclusive.is_some_and(Exclusive::is_node),
        exclusive_user: job.spec.exclusive == Some(Exclusive::User),
        user: job_user(job),
        tasks,
        stopping_since,
        array_job_id: st.array_job_id,
        array_task_id: st.array_task_id,
    }
}

/// A waiting job as a core pending job.
pub fn pending_job(
    job: &BatchJob,
    id: JobId,
    parsed: &ParsedJob,
    partition: Option<PartitionId>,
    submit_time: i64,
    eligible_time: Option<i64>,
    array: Option<ArrayTask>,
) -> PendingJob {
    PendingJob {
        id,
        name: job.name_any(),
        job_name: job.spec.job_name.clone(),
        namespace: job.namespace().unwrap_or_default(),
        user: job_user(job),
        partition,
        submit_time,
        eligible_time,
        request: parsed.request.clone(),
        hold: parsed.hold,
        begin_time: job.spec.begin.as_ref().map(|t| t.0.as_second()),
        nice: parsed.nice,
        priority: parsed.priority,
        array,
        // The controller evaluates dependencies itself (it sees finished jobs the snapshot
        // does not keep) and queues a job only once its dependency is met.
        dependency: None,
    }
}

/// The time limit a job runs with, in Slurm's format: the job's own, else the partition's
/// default, else its maximum, else `UNLIMITED` (the rule the core applies).
pub fn effective_time_limit(parsed: &ParsedJob, part: Option<&core::Partition>) -> Option<u64> {
    match part {
        Some(p) => p.effective_limit(parsed.request.time_limit),
        None => parsed.request.time_limit.and_then(|t| t.seconds()),
    }
}

/// A limit in seconds as Slurm prints it (`1:00:00`, `UNLIMITED`).
pub fn format_limit(secs: Option<u64>) -> String {
    match secs {
        Some(s) => muster_crds::slurm::time::format_duration_secs(s),
        None => "UNLIMITED".to_string(),
    }
}
#[cfg(test)]
mod tests {
    use super::super::tests_support::{i, kube_node};
    use super::super::{job_request, node};
    use super::*;
    use crate::core::NodeId;
    use muster_crds::v1alpha1::{BatchJobSpec, TaskAllocation};
    #[test]
    fn running_jobs_come_from_status_tasks() {
        let table = NodeTable::new(vec![
            node(&kube_node("gpu10", true), None),
            node(&kube_node("gpu2", true), None),
        ]);
        assert_eq!(table.nodes[0].name, "gpu2", "natural order");
        let mut j = BatchJob::new("train", BatchJobSpec::default());
        j.metadata.namespace = Some("ml".into());
        j.status = Some(muster_crds::v1alpha1::BatchJobStatus {
            time_limit: Some("1:00:00".into()),
            start_time: Some(time(1000)),
            array_job_id: Some(7),
            tasks: vec![
                TaskAllocation {
                    rank: 0,
                    node: "gpu10".into(),
                    gpus: vec![0, 1],
                    cpu_millis: 2000,
                    memory_mib: 100,
                    ..Default::default()
                },
                TaskAllocation {
                    rank: 1,
                    node: "gone".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let r = running_job(&j, 42, Some(0), &table, None);
        assert_eq!(r.id, 42);
        assert_eq!(r.namespace, "ml");
        assert_eq!(r.start_time, 1000);
        assert_eq!(r.time_limit, Some(3600));
        assert_eq!(r.tasks[0].node, 1);
        assert_eq!(r.tasks[0].gpus, vec![0, 1]);
        assert_eq!(r.tasks[1].node, NodeId::MAX);
        assert_eq!(r.array_job_id, Some(7));
    }

    #[test]
    fn effective_limits_follow_the_partition() {
        let parsed = job_request(&BatchJobSpec::default()).unwrap();
        let mut p = core::Partition::new("p", vec![]);
        assert_eq!(effective_time_limit(&parsed, Some(&p)), None);
        p.max_time = Some(TimeLimit::from_minutes(120));
        assert_eq!(effective_time_limit(&parsed, Some(&p)), Some(7200));
        p.default_time = Some(TimeLimit::from_minutes(10));
        assert_eq!(effective_time_limit(&parsed, Some(&p)), Some(600));
        assert_eq!(format_limit(Some(3600)), "1:00:00");
        assert_eq!(format_limit(None), "UNLIMITED");
        let own = job_request(&BatchJobSpec {
            time: i(5),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(effective_time_limit(&own, Some(&p)), Some(300));
    }
}

//! `sbatch --test-only`: when and where the job would start, computed by the operator's own
//! scheduling core on the cluster as it is now, without creating anything.
//!
//! The objects are translated to a core snapshot with the operator's public translation
//! functions (`muster_operator::controller::translate`), so the estimate follows the same
//! rules as the real cycle: running jobs hold their recorded allocations until their time
//! limits, waiting jobs keep their places in the queue, and the job under test joins the queue
//! as a job submitted now. Fair-share usage comes from what the operator last persisted
//! (ConfigMap `muster-fairshare`, at most a minute old), brought up to now with the running
//! jobs. Pods of stopped jobs still terminating are not seen, so the estimate can be a little
//! early.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use muster_crds::slurm::hostlist;
use muster_crds::v1alpha1::{BatchJob, GpuNode, JobState, Partition};
use muster_operator::controller::status::NOT_QUEUED;
use muster_operator::controller::translate::{self, NodeTable, join_errors, secs};
use muster_operator::controller::usage;
use muster_operator::controller::validate::{self, Refusal};
use muster_operator::core::{self, JobId, Snapshot};

/// Where and when the job would start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// Start time, seconds since the epoch (now when it could start at once).
    pub start: i64,
    /// Its nodes, as a Slurm hostlist (`gpu[001-002]`).
    pub nodes: String,
    /// CPUs it would hold (Slurm's "processors").
    pub processors: u64,
    /// Its partition.
    pub partition: String,
}

/// Why no start can be given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TestOnlyError {
    /// Submission would be refused (what `sbatch` and admission refuse: the same check).
    #[error("Job submit/allocate failed: {} ({})", .0.slurm, .0.detail)]
    Refused(Refusal),
    /// The spec does not parse.
    #[error("invalid job: {0}")]
    Invalid(String),
    /// The partition does not exist (or there is no default).
    #[error("{0}")]
    Partition(String),
    /// The job can never run as asked (Slurm's reason and the core's explanation).
    #[error("Job would never start: {reason}{}", detail(.message))]
    Never {
        /// Slurm's reason.
        reason: String,
        /// Why.
        message: String,
    },
    /// The job would wait with no start time to estimate (e.g. behind jobs without a time
    /// limit).
    #[error("no start time can be estimated ({reason}{})", detail(.message))]
    Unknown {
        /// Slurm's reason.
        reason: String,
        /// Why.
        message: String,
    },
}

fn detail(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

/// What the cluster holds, as read from the API.
#[derive(Clone, Copy, Debug)]
pub struct World<'a> {
    /// Every Partition.
    pub partitions: &'a [Partition],
    /// Every Node.
    pub nodes: &'a [Node],
    /// Every GpuNode.
    pub gpunodes: &'a [GpuNode],
    /// Every BatchJob (all namespaces when readable).
    pub jobs: &'a [BatchJob],
    /// The operator's persisted fair-share usage, when readable.
    pub usage: Option<&'a usage::Record>,
    /// The claims of the job's namespace, with their access modes.
    pub volume_claims: &'a [validate::ClaimModes],
}

/// The cluster's nodes (with their GpuNodes), as the operator translates them.
pub fn node_table(nodes: &[Node], gpunodes: &[GpuNode]) -> NodeTable {
    let gpu_by: HashMap<String, &GpuNode> = gpunodes
        .iter()
        .map(|g| (g.spec.node_name.clone(), g))
        .collect();
    NodeTable::new(
        nodes
            .iter()
            .map(|n| translate::node(n, gpu_by.get(&n.name_any()).copied()))
            .collect(),
    )
}

/// What submission checks read of the cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    /// Every Partition.
    pub partitions: Vec<Partition>,
    /// Every Node.
    pub nodes: Vec<Node>,
    /// Every GpuNode.
    pub gpunodes: Vec<GpuNode>,
    /// The claims of the job's namespace, with their access modes.
    pub volume_claims: Vec<validate::ClaimModes>,
}

impl ClusterView {
    /// Whether `job` would be admitted in `namespace`: the operator's own submission check.
    pub fn submission(&self, job: &BatchJob, namespace: &str) -> Result<Vec<String>, Refusal> {
        let table = translate::partitions(self.partitions.iter());
        let nodes = node_table(&self.nodes, &self.gpunodes);
        let objs: Vec<&Partition> = self.partitions.iter().collect();
        validate::submission(
            job,
            namespace,
            validate::World {
                partitions: &table,
                partition_objects: &objs,
                nodes: &nodes,
                volume_claims: &self.volume_claims,
            },
        )
    }
}

/// Reads partitions, nodes and GpuNodes.
pub async fn read_world(cluster: &crate::cluster::Cluster) -> anyhow::Result<ClusterView> {
    Ok(ClusterView {
        partitions: crate::fetch::partitions(cluster).await?,
        nodes: crate::fetch::nodes(cluster).await?,
        gpunodes: crate::fetch::gpunodes(cluster).await,
        volume_claims: crate::fetch::volume_claims(cluster).await,
    })
}

/// Estimate `job`'s start at `now` on `world`.
pub fn estimate(job: &BatchJob, world: World<'_>, now: i64) -> Result<Estimate, TestOnlyError> {
    let table = translate::partitions(world.partitions.iter());
    let nodes = node_table(world.nodes, world.gpunodes);
    {
        let objs: Vec<&Partition> = world.partitions.iter().collect();
        let ns = job.metadata.namespace.clone().unwrap_or_default();
        validate::submission(
            job,
            &ns,
            validate::World {
                partitions: &table,
                partition_objects: &objs,
                nodes: &nodes,
                volume_claims: world.volume_claims,
            },
        )
        .map_err(TestOnlyError::Refused)?;
    }
    let parsed =
        translate::job_request(&job.spec).map_err(|e| TestOnlyError::Invalid(join_errors(&e)))?;
    if parsed.cancel {
        return Err(TestOnlyError::Never {
            reason: "Cancelled".into(),
            message: "spec.cancel is set".into(),
        });
    }
    let part = table
        .resolve(job.spec.partition.as_deref())
        .map_err(|name| {
            TestOnlyError::Partition(if name.is_empty() {
                "no partition given and no Partition is the default".to_string()
            } else {
                format!("invalid partition specified: {name}")
            })
        })?;

    let mut snap = Snapshot {
        nodes: nodes.nodes.clone(),
        partitions: table.parts.clone(),
        ..Snapshot::default()
    };
    let mut max_id: JobId = 0;
    for j in world.jobs {
        let Some(st) = &j.status else { continue };
        let Some(id) = st.job_id else { continue };
        max_id = max_id.max(id);
        let jp = table
            .resolve(st.partition.as_deref().or(j.spec.partition.as_deref()))
            .ok();
        match st.state {
            Some(JobState::Running) if !st.tasks.is_empty() => {
                snap.running
                    .push(translate::running_job(j, id, jp, &nodes, None));
            }
            Some(JobState::Pending)
                if !st
                    .reason
                    .as_deref()
                    .is_some_and(|r| NOT_QUEUED.contains(&r))
                    && j.metadata.deletion_timestamp.is_none()
                    && j.spec.cancel != Some(true) =>
            {
                // An array parent waits through its elements, which are BatchJobs of their own.
                let parent = j.spec.array.is_some()
                    && !j.labels().contains_key(muster_crds::labels::ARRAY_PARENT);
                if parent {
                    continue;
                }
                if let Ok(p) = translate::job_request(&j.spec) {
                    let submit = st.submit_time.as_ref().map(secs).unwrap_or(now);
                    let eligible = st.eligible_time.as_ref().map(secs);
                    snap.pending.push(translate::pending_job(
                        j, id, &p, jp, submit, eligible, None,
                    ));
                }
            }
            _ => {}
        }
    }
    // The job under test: submitted now, after every job there is.
    let id = max_id + 1;
    let mut probe = job.clone();
    probe.metadata.name = Some(
        job.metadata
            .name
            .clone()
            .or_else(|| job.metadata.generate_name.clone())
            .unwrap_or_else(|| "test-only".into()),
    );
    let mut pending = translate::pending_job(&probe, id, &parsed, Some(part), now, None, None);
    // As Slurm's --test-only (checked against Slurm 22.05): when it would start if released
    // and its dependencies met — a hold or a dependency is not an answer about resources.
    pending.hold = false;
    pending.dependency = None;
    // --begin: the cluster as it will be then (as Slurm, no start before it): the cycle runs
    // at the begin time, without the running jobs whose time limits end by then.
    let at = pending.begin_time.filter(|&b| b > now).unwrap_or(now);
    if at > now {
        snap.running
            .retain(|r| r.end_time().is_none_or(|end| end > at));
    }
    snap.pending.push(pending);

    // Every waiting job may get a reservation, so the one under test gets an estimate however
    // long the queue.
    let cfg = core::Config {
        max_reservations: snap.pending.len(),
        ..core::Config::default()
    };
    if let Some(rec) = world.usage {
        // As the operator's next cycle would: decayed to now, running jobs' GPU time added.
        snap.usage = core::priority::decay_usage(
            &rec.usage,
            &snap.running,
            rec.time,
            now,
            cfg.fair_share_half_life_secs,
        );
    }
    let decisions = core::schedule(&snap, at, &cfg);
    let part_name = table.name(part).to_string();
    let name_of = |n: &core::NodeId| {
        nodes
            .nodes
            .get(*n as usize)
            .map(|n| n.name.clone())
            .unwrap_or_default()
    };
    if let Some(s) = decisions.starts.iter().find(|s| s.job == id) {
        let processors = if s.exclusive {
            s.nodes
                .iter()
                .filter_map(|n| nodes.nodes.get(*n as usize))
                .map(|n| n.cpu_millis.div_ceil(1000))
                .sum()
        } else {
            s.tasks
                .iter()
                .map(|t| t.cpu_millis)
                .sum::<u64>()
                .div_ceil(1000)
        };
        return Ok(Estimate {
            start: at,
            nodes: hostlist::compress(s.nodes.iter().map(name_of)),
            processors,
            partition: part_name,
        });
    }
    if let Some(r) = decisions.reservations.iter().find(|r| r.job == id) {
        let planned: Vec<&core::Node> = r
            .nodes
            .iter()
            .filter_map(|n| nodes.nodes.get(*n as usize))
            .collect();
        let p = &table.parts[part as usize];
        let processors = match core::shape::normalize(&parsed.request, p) {
            Ok(d) if !d.exclusive => (d.unit.cpu * u64::from(d.need())).div_ceil(1000),
            _ => planned.iter().map(|n| n.cpu_millis.div_ceil(1000)).sum(),
        };
        return Ok(Estimate {
            start: r.start_time,
            nodes: hostlist::compress(r.nodes.iter().map(name_of)),
            processors,
            partition: part_name,
        });
    }
    let info = decisions.pending.iter().find(|p| p.job == id);
    let (reason, message) = info
        .map(|i| (i.reason, i.message.clone()))
        .unwrap_or((core::Reason::Resources, String::new()));
    let never = matches!(
        reason,
        core::Reason::BadConstraints
            | core::Reason::ReqNodeNotAvail
            | core::Reason::PartitionDown
            | core::Reason::PartitionInactive
            | core::Reason::PartitionTimeLimit
            | core::Reason::PartitionNodeLimit
            | core::Reason::PartitionConfig
            | core::Reason::AccountNotAllowed
    );
    let reason = reason.as_str().to_string();
    Err(if never {
        TestOnlyError::Never { reason, message }
    } else {
        TestOnlyError::Unknown { reason, message }
    })
}

/// Slurm's line: `Job 0 to start at 2026-01-05T10:00:00 using 16 processors on nodes
/// gpu[001-002] in partition batch` (job 0: none was created).
pub fn message(e: &Estimate, tz: &jiff::tz::TimeZone) -> String {
    let at = crate::format::timestamp(jiff::Timestamp::from_second(e.start).ok(), tz);
    format!(
        "Job 0 to start at {at} using {} processors on nodes {} in partition {}",
        e.processors, e.nodes, e.partition
    )
}

//! One scheduling cycle as a pure function: the objects the reflectors hold in, the API writes
//! to make out ([`plan`]). No client calls, no clock: the caller passes `now` and carries the
//! writes out in the order each [`JobPlan`] gives (see [`super::exec`]).
//!
//! Per job the pipeline is dereference (its pods, partition, parent) → validate (spec parsed,
//! pods buildable) → build (desired status, pods) → the scheduler's decisions merged in; the
//! runner then applies (finalizer, status first, then pods, then deletions).
//!
//! # What holds resources
//! The snapshot handed to the core counts as taken:
//! - every RUNNING job's `status.tasks`, whether or not its pods exist (an admission recorded
//!   before the operator died still holds its GPUs);
//! - every *live* task pod (not Succeeded/Failed) that is not part of such an allocation — a
//!   pod of an older attempt, of a job that ended or was deleted — through the allocation it
//!   records in its `muster.dev/task` annotation, until it is gone.
//!
//! So a GPU is never given twice, even while pods of a stopped job terminate.
//!
//! # Per job (by `status.state`)
//! - no job id: gets the next id, its submit time (creation time), partition and time limit,
//!   and goes on as PENDING; the first status write carries all of it (and the allocation,
//!   when the job starts in the cycle that first sees it).
//! - PENDING: `spec.cancel` → CANCELLED. A spec that does not parse or cannot make pods →
//!   reason `InvalidSpec` (the message names the field). A backoff (`eligibleTime` in the
//!   future) or an unmet dependency keeps it out of the queue (`Dependency`,
//!   `DependencyNeverSatisfied`). Otherwise it is queued; the core's reason, estimated start
//!   and eligibility are written back.
//! - RUNNING: every task Succeeded → COMPLETED; cancel → CANCELLED; a node not ready or gone,
//!   or a GPU unhealthy → NODE_FAIL, requeued unless `requeue: false`; a task Failed → FAILED
//!   with its exit code (a pod failed with no container exit, e.g. evicted or lost with its
//!   node, counts as NODE_FAIL); past the time limit → TIMEOUT; pods missing within the gang
//!   start timeout → created; past it with pods missing or not running → requeued with reason
//!   `JobLaunchFailure` and an exponential backoff.
//! - ended: remaining live pods are deleted (graceful: the pod's grace period is the
//!   partition's `graceTimeSeconds`).
//! - being deleted: its live pods are deleted; the finalizer is removed once none is live.
//!
//! Array jobs are in the `array` submodule: the parent creates one child BatchJob per index.

use std::collections::BTreeMap;

/// The cycle's maps and sets hash names and uids of every job and pod, every cycle: with
/// foldhash rather than std's SipHash (HashDoS resistance buys nothing here: the keys come
/// from objects the API server already admitted, and the seed is still random per map).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{
    ArrayTaskSummary, BatchJob, BatchJobStatus, GpuBinding, JobState, Partition, PartitionState,
    PartitionStatus, TaskAllocation,
};

use crate::core::{
    self, ArrayTask, Decisions, JobId, PartitionId, RunningJob, Snapshot, TaskAlloc,
};

use super::cluster_cache::ClusterCache;
use super::compact::Packed;
use super::dra::{self, ClaimObs, DraSupport, ResourceClaim};
use super::gang::{self, GangApi, GangRef};
use super::jobobs::{JobObs, TaskRecords};
use super::pods::{self, JobContext, StepSettings};
use super::status::{
    self, DEPENDENCY, DEPENDENCY_NEVER, HELD, INVALID_SPEC, LAUNCH_FAILURE, PARTITION_CONFIG, Why,
};
use super::taskpod::{TaskContainerStatus, TaskPod};
use super::translate::{
    self, FieldError, NodeTable, ParsedJob, PartitionTable, format_limit, secs, time,
};
use crate::core::deps::{self, Asker, DepIndex, DepJob, DepState};
use crate::core::priority::UsageSpan;

mod array;
mod binding;
mod obs;
mod partitions;
mod pods_to_create;
mod step;
mod transitions;
mod types;

use array::*;
use binding::*;
pub use obs::*;
use partitions::*;
pub use pods_to_create::*;
use step::*;
use transitions::*;
pub use types::*;

/// How many jobs need a job id (so the caller can reserve enough before [`plan`]).
pub fn new_job_count(jobs: &[Arc<JobObs>]) -> usize {
    jobs.iter()
        .map(|j| j.job())
        .filter(|j| {
            j.metadata.deletion_timestamp.is_none()
                && j.status.as_ref().and_then(|s| s.job_id).is_none()
        })
        .count()
}

/// A job's working state during the cycle.
struct Work<'a> {
    /// The job as cached.
    obs: &'a Arc<JobObs>,
    /// `obs`'s object: its status (`prev`) has no task records, `records` has them.
    job: &'a BatchJob,
    uid: String,
    ns: String,
    name: String,
    /// The stored status, without its task records (`status.tasks` is `records`).
    prev: Option<&'a BatchJobStatus>,
    /// The stored status's task records.
    records: &'a TaskRecords,
    /// The status being decided, always without task records: those are `tasks`. Copying
    /// every job's task records into each cycle was the largest transient allocation
    /// (200,000 records at 16,384 nodes), and a cycle's admissions hold theirs until written.
    st: BatchJobStatus,
    /// `st`'s task records.
    tasks: Tasks,
    plan: JobPlan,
    id: Option<JobId>,
    parsed: Option<Parsed>,
    part: Option<PartitionId>,
    part_name: Option<String>,
    /// Index in the snapshot's pending list.
    queued: bool,
    /// Holds its `status.tasks` allocation (RUNNING and staying so).
    holds: bool,
    /// Array element: (array job id, index, max running).
    array: Option<ArrayTask>,
    /// Array parent: its elements' indices.
    is_parent: bool,
    /// Skip entirely this cycle (no id available).
    skip: bool,
    /// What the planner knows about a pending job that its Slurm reason does not say (for
    /// the conditions).
    known: Option<Why>,
}

/// A job's task records during the cycle.
enum Tasks {
    /// The stored ones ([`Work::records`]).
    Kept,
    /// Replaced this cycle (an admission; none once the allocation is released).
    New(Arc<TaskRecords>),
}

impl Work<'_> {
    /// `st`'s task records.
    fn task_records(&self) -> &TaskRecords {
        match &self.tasks {
            Tasks::Kept => self.records,
            Tasks::New(r) => r,
        }
    }

    /// `st`'s task records are now `tasks` (an empty list releases the allocation).
    fn set_tasks(&mut self, tasks: &[TaskAllocation]) {
        self.tasks = Tasks::New(Arc::new(TaskRecords::new(tasks)));
    }

    /// Whether `st` has task records (an allocation).
    fn has_tasks(&self) -> bool {
        !self.task_records().is_empty()
    }

    /// What the pods of the allocation `tasks` are built from: the job as it was admitted
    /// (partition, recorded GPU binding, `--gpus-per-*` as given, time limit).
    fn job_context<'c>(
        &'c self,
        attempt: u32,
        tasks: &'c [TaskAllocation],
        crd_parts: &'c HashMap<String, &'c Partition>,
        step: &'c StepSettings,
    ) -> JobContext<'c> {
        let parsed = match self.parsed.as_deref() {
            Some(Ok(p)) => Some(p),
            _ => None,
        };
        let partition_name = self.st.partition.as_deref().unwrap_or_default();
        JobContext {
            job: self.job,
            job_id: self.id.unwrap_or(0),
            attempt,
            tasks,
            partition: crd_parts.get(partition_name).copied(),
            partition_name,
            array: self.array.as_ref().map(|a| (a.array_job_id, a.task_id)),
            gpus_per_node: parsed.and_then(|p| p.gpus_per_node_echo.as_deref()),
            gpus_per_task: parsed.and_then(|p| p.gpus_per_task_echo.as_deref()),
            // The binding recorded with the allocation, never today's: a gang's pods must
            // agree.
            gpu_binding: self.st.gpu_binding.unwrap_or_default(),
            step,
            node_gpus: &[],
            limit_end: pods::limit_end(&self.st),
        }
    }

    /// The node indices of `st`'s tasks, ascending, each once.
    fn node_ranks(&self) -> Vec<u32> {
        self.task_records().node_ranks()
    }

    /// `st`'s task records as the core's running job reads them.
    fn core_tasks(&self, nodes: &NodeTable) -> Vec<TaskAlloc> {
        self.task_records()
            .iter()
            .map(|t| TaskAlloc {
                node: nodes.id(t.node()),
                gpus: t.gpus().to_vec(),
                cpu_millis: t.cpu_millis(),
                memory_mib: t.memory_mib(),
            })
            .collect()
    }

    /// Whether `st`'s task records differ from the stored ones.
    fn tasks_changed(&self) -> bool {
        match &self.tasks {
            Tasks::Kept => false,
            Tasks::New(r) => **r != *self.records,
        }
    }
}

/// Whether `j` is an array's parent (its elements are BatchJobs of their own; it never holds
/// an allocation).
pub(super) fn is_array_parent(j: &BatchJob) -> bool {
    j.spec.array.is_some() && !j.labels().contains_key(labels::ARRAY_PARENT)
}

pub(super) fn has_finalizer(j: &BatchJob) -> bool {
    j.finalizers().iter().any(|f| f == labels::FINALIZER)
}

fn event(warning: bool, reason: &str, note: impl Into<String>) -> JobEvent {
    JobEvent {
        warning,
        reason: reason.to_string(),
        note: note.into(),
    }
}

/// Requested sizes of a pending job, for its status (`numNodes`, `numTasks`, `numGpus`,
/// `numCpus`).
fn requested(st: &mut BatchJobStatus, parsed: &ParsedJob, part: Option<&core::Partition>) {
    let Some(p) = part else { return };
    if let Ok(d) = core::shape::normalize(&parsed.request, p) {
        st.num_nodes = Some(d.min_nodes);
        st.num_tasks = Some(d.min_tasks());
        st.num_gpus = Some(d.min_gpus().min(u64::from(u32::MAX)) as u32);
        st.num_cpus = Some(d.min_cpu().div_ceil(1000).min(u64::from(u32::MAX)) as u32);
    }
}

/// Status fields that only inform (message, estimated start, priority, array counts) are
/// "soft": a change to them alone is written at most every `status_refresh_secs`.
fn hard_view(st: &BatchJobStatus) -> BatchJobStatus {
    let mut s = st.clone();
    s.message = None;
    s.priority = None;
    s.start_time = if s.state == Some(JobState::Pending) {
        None
    } else {
        s.start_time
    };
    s.array_tasks = None;
    for c in &mut s.conditions {
        c.message.clear();
        c.last_transition_time = time(0);
    }
    s
}

/// Whether a waiting job's priority moved enough to be written on its own: by 1% or more
/// (the age factor grows every cycle; a write per job per cycle would load the API server
/// for a figure Slurm itself refreshes only every few minutes), or appeared or went.
fn reprioritized(old: Option<u32>, new: Option<u32>) -> bool {
    match (old, new) {
        (Some(a), Some(b)) => u64::from(a.abs_diff(b)) * 100 >= u64::from(a.min(b)).max(1),
        (a, b) => a != b,
    }
}

/// Runs one cycle: see the [module docs](self).
pub fn plan(
    inp: &Inputs<'_>,
    cfg: &PlanSettings,
    mem: &mut PlanMemory,
    ids: &mut dyn FnMut() -> Option<JobId>,
) -> CyclePlan {
    let now = inp.now;
    let table: PartitionTable = translate::partitions(inp.partitions.iter().map(|p| p.as_ref()));
    let crd_parts: HashMap<String, &Partition> = inp
        .partitions
        .iter()
        .map(|p| (p.name_any(), p.as_ref()))
        .collect();
    let bind = BindCtx::new(inp);
    // Taken out for the cycle and kept again at its end (a panic in between loses it:
    // rebuilt next cycle).
    let (mut cluster, built) =
        ClusterCache::reuse_or_build(mem.cluster.take(), inp.nodes, &table.parts);
    mem.cluster_builds += u64::from(built);
    let mut snap = Snapshot {
        nodes: cluster.nodes(),
        partitions: table.parts.clone(),
        usage: inp.usage.clone(),
        ..Default::default()
    };

    // Pods by (namespace, job name).
    let mut pods_of: HashMap<(&str, &str), Vec<&PodObs>> = HashMap::default();
    for p in inp.pods {
        pods_of
            .entry((p.namespace(), p.job()))
            .or_default()
            .push(p.as_ref());
    }

    // Jobs in submission order, so that new ids increase with it.
    let mut order: Vec<&Arc<JobObs>> = inp.jobs.iter().collect();
    // Keys borrowed, not `namespace()`/`name_any()` copies: jobs submitted in the same second
    // tie on the time, and the copies were most of the sort's cost.
    fn submit_key(j: &BatchJob) -> (Option<i64>, Option<&str>, &str) {
        let m = &j.metadata;
        let name = m.name.as_deref().or(m.generate_name.as_deref());
        (
            m.creation_timestamp.as_ref().map(secs),
            m.namespace.as_deref(),
            name.unwrap_or_default(),
        )
    }
    order.sort_by(|a, b| submit_key(a.job()).cmp(&submit_key(b.job())));
    let live_uids: HashSet<String> = order.iter().filter_map(|j| j.job().uid()).collect();
    mem.retain(&live_uids);

    // Parents by uid; children by parent uid.
    let by_uid: HashMap<String, &BatchJob> = order
        .iter()
        .filter_map(|j| Some((j.job().uid()?, j.job())))
        .collect();

    let mut works: Vec<Work<'_>> = Vec::with_capacity(order.len());
    for obs in &order {
        let job = obs.job();
        let prev = job.status.as_ref();
        let uid = job.uid().unwrap_or_default();
        let mut w = Work {
            obs,
            job,
            uid: uid.clone(),
            ns: job.namespace().unwrap_or_default(),
            name: job.name_any(),
            prev,
            records: obs.tasks(),
            // The cached status has no task records to copy: `records` stands for them.
            st: prev.cloned().unwrap_or_default(),
            tasks: Tasks::Kept,
            plan: JobPlan {
                namespace: job.namespace().unwrap_or_default(),
                name: job.name_any(),
                uid,
                ..Default::default()
            },
            id: prev.and_then(|s| s.job_id),
            parsed: None,
            part: None,
            part_name: None,
            queued: false,
            holds: false,
            array: None,
            is_parent: is_array_parent(job),
            skip: false,
            known: None,
        };
        if job.metadata.deletion_timestamp.is_none() && w.id.is_none() {
            match ids() {
                Some(id) => {
                    w.id = Some(id);
                    w.st.job_id = Some(id);
                    w.st.state = Some(JobState::Pending);
                    w.st.submit_time = Some(
                        job.metadata
                            .creation_timestamp
                            .clone()
                            .unwrap_or_else(|| time(now)),
                    );
                    w.plan
                        .events
                        .push(event(false, "Submitted", format!("job id {id} assigned")));
                    w.plan.effects.push(Effect::Transition(JobState::Pending));
                }
                None => w.skip = true,
            }
        }
        if !w.skip && job.metadata.deletion_timestamp.is_none() {
            let parsed = mem.parse(job);
            // Partition and time limit. A job that names none keeps the default it was given
            // when first seen (as Slurm fixes it at submission): a new default never moves
            // pending jobs.
            let pinned = match (
                &job.spec.partition,
                prev.and_then(|p| p.partition.as_deref()),
            ) {
                (None, Some(p)) if prev.and_then(|p| p.job_id).is_some() => Some(p),
                _ => None,
            };
            let resolved = match pinned {
                Some(p) => table.by_name.get(p).copied().ok_or_else(|| p.to_string()),
                None => table.resolve(job.spec.partition.as_deref()),
            };
            match resolved {
                Ok(pid) => {
                    w.part = Some(pid);
                    w.part_name = Some(table.name(pid).to_string());
                }
                Err(n) => {
                    w.part_name = (!n.is_empty()).then_some(n);
                }
            }
            if !(w.st.state == Some(JobState::Running)
                || w.st.state.is_some_and(|s| s.is_terminal()))
            {
                w.st.partition = w.part_name.clone();
                if let Ok(p) = parsed.as_ref() {
                    let part = w.part.map(|i| &table.parts[i as usize]);
                    w.st.time_limit = Some(format_limit(translate::effective_time_limit(p, part)));
                    requested(&mut w.st, p, part);
                }
            } else if w.st.state == Some(JobState::Running)
                && let Ok(p) = parsed.as_ref()
                && let Some(lower) = p.request.time_limit.and_then(|t| t.seconds())
                && translate::status_limit_secs(&w.st).is_none_or(|now| lower < now)
            {
                // `scontrol update TimeLimit` lowered a running job's own limit (admission
                // refuses a raise); the timeout and the step's --signal read it here. A
                // partition's limits changing does not move running jobs, as in Slurm.
                w.st.time_limit = Some(format_limit(Some(lower)));
            }
            w.parsed = Some(parsed);
        }
        works.push(w);
    }

    // Dependency index over every job.
    let dep_index = build_dep_index(&works);
    let id_to_work: HashMap<JobId, usize> = works
        .iter()
        .enumerate()
        .filter_map(|(i, w)| Some((w.id?, i)))
        .collect();

    // Arrays: each parent's elements and `%N`.
    let mut children_of: HashMap<String, Vec<usize>> = HashMap::default();
    for (i, w) in works.iter().enumerate() {
        if w.job.labels().contains_key(labels::ARRAY_PARENT)
            && let Some(o) = w
                .job
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
        {
            children_of.entry(o.uid.clone()).or_default().push(i);
        }
    }
    let max_running: HashMap<String, Option<u32>> = works
        .iter()
        .filter(|w| w.is_parent)
        .filter_map(|w| {
            let p = w.parsed.as_deref()?.as_ref().ok()?;
            Some((w.uid.clone(), p.array.as_ref().and_then(|a| a.max_running)))
        })
        .collect();

    // Held allocations: (uid, attempt).
    let mut held: HashSet<(String, u32)> = HashSet::default();
    for wi in 0..works.len() {
        if works[wi].skip {
            continue;
        }
        let key = (works[wi].ns.clone(), works[wi].name.clone());
        let pods: Vec<&PodObs> = pods_of
            .get(&(key.0.as_str(), key.1.as_str()))
            .map(|v| {
                v.iter()
                    .copied()
                    .filter(|p| p.owner_uid() == Some(works[wi].uid.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        if works[wi].is_parent {
            let kids = children_of.get(&works[wi].uid).cloned().unwrap_or_default();
            step_parent(
                &mut works,
                wi,
                &kids,
                &dep_index,
                inp.expected_jobs,
                cfg,
                now,
            );
            continue;
        }
        step_job(
            &mut works[wi],
            &pods,
            &snap,
            &crd_parts,
            &bind,
            &by_uid,
            &max_running,
            &dep_index,
            inp.nodes,
            cfg,
            now,
        );
        let w = &works[wi];
        if w.holds {
            let attempt = w.st.attempt.unwrap_or(0);
            held.insert((w.uid.clone(), attempt));
            snap.running.push(translate::running_job_with(
                w.job,
                w.core_tasks(inp.nodes),
                w.id.unwrap_or(0),
                w.part,
                None,
            ));
        }
        if w.queued {
            let parsed = w.parsed.as_ref().and_then(|p| p.as_ref().as_ref().ok());
            if let (Some(p), Some(id)) = (parsed, w.id) {
                let submit = w.st.submit_time.as_ref().map(secs).unwrap_or(now);
                let eligible = w.st.eligible_time.as_ref().map(secs);
                snap.pending.push(translate::pending_job(
                    w.job,
                    id,
                    p,
                    w.part,
                    submit,
                    eligible,
                    w.array.clone(),
                ));
            }
        }
    }
    // The jobs holding allocations (for fair-share usage): `snap.running` up to here, kept
    // as spans once the cycle is decided (not the jobs: a task record each).
    let usage_running_len = snap.running.len();

    // Live pods not covered by a held allocation keep their resources until gone.
    let mut groups: PodGroups<'_> = BTreeMap::new();
    for p in inp.pods.iter().map(|p| p.as_ref()).filter(|p| p.live()) {
        if let (Some(u), Some(a)) = (p.owner_uid(), p.attempt)
            && held.contains(&(u.to_string(), a))
        {
            continue;
        }
        groups
            .entry((
                p.namespace().to_string(),
                p.job().to_string(),
                p.owner_uid().map(str::to_string),
                p.attempt,
            ))
            .or_default()
            .push(p);
    }
    let mut synthetic = JobId::MAX;
    for ((ns, job, _, _), pods) in groups {
        let tasks: Vec<TaskAlloc> = pods
            .iter()
            .filter_map(|p| p.alloc.as_ref())
            .map(|a| TaskAlloc {
                node: inp.nodes.id(&a.node),
                gpus: a.gpus.to_vec(),
                cpu_millis: a.cpu_millis,
                memory_mib: a.memory_mib,
            })
            .filter(|t| (t.node as usize) < inp.nodes.nodes.len())
            .collect();
        if tasks.is_empty() {
            continue;
        }
        snap.running.push(RunningJob {
            id: synthetic,
            name: job,
            namespace: ns,
            partition: None,
            start_time: now,
            stopping_since: Some(now),
            tasks,
            ..Default::default()
        });
        synthetic -= 1;
    }
    // GPUs allocated to a ResourceClaim (anyone's) that nothing above counts: kube-scheduler
    // would give them to no other claim, so neither does Muster until the claim lets go.
    if !inp.claims.is_empty() {
        for r in claim_holds(inp, &held, &snap.running, now, &mut synthetic) {
            snap.running.push(r);
        }
    }

    let queued = snap.pending.len();
    let decisions: Decisions = if snap.pending.is_empty() && snap.running.is_empty() {
        Decisions::default()
    } else {
        cluster.schedule(&snap, now, &cfg.scheduler)
    };

    // Starts.
    let mut starts = 0;
    for s in &decisions.starts {
        let Some(&wi) = id_to_work.get(&s.job) else {
            continue;
        };
        admit(&mut works[wi], s, inp.nodes, &crd_parts, &bind, cfg, now);
        starts += 1;
    }
    // Preemptions.
    let mut preemptions = 0;
    for pr in &decisions.preemptions {
        for v in &pr.victims {
            let Some(&wi) = id_to_work.get(&v.job) else {
                continue;
            };
            let pods: Vec<&PodObs> = pods_of
                .get(&(works[wi].ns.as_str(), works[wi].name.as_str()))
                .cloned()
                .unwrap_or_default();
            preempt(&mut works[wi], pr.for_job, v.requeue, &pods, now);
            preemptions += 1;
        }
    }
    // Pending reasons and estimates.
    for info in &decisions.pending {
        let Some(&wi) = id_to_work.get(&info.job) else {
            continue;
        };
        let w = &mut works[wi];
        if w.st.state != Some(JobState::Pending) {
            continue;
        }
        w.st.reason = Some(info.reason.as_str().to_string());
        w.st.message = Some(info.message.clone()).filter(|m| !m.is_empty());
        w.st.start_time = info.start_estimate.map(time);
        w.st.priority = Some(info.priority);
        if info.eligible && w.st.eligible_time.is_none() {
            w.st.eligible_time = Some(time(now));
        }
    }

    // Array parents' summaries need their elements' new states: done in step_parent from the
    // stored states (one cycle behind), which keeps parents out of the critical path.

    // Gauges and partition statuses.
    let mut gauges = Gauges::default();
    for w in &works {
        if w.skip || w.is_parent || w.job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let part = w.st.partition.clone().unwrap_or_default();
        match w.st.state {
            Some(JobState::Pending) | None => {
                let r = w.st.reason.clone().unwrap_or_else(|| "None".into());
                *gauges.queue.entry((part, r)).or_default() += 1;
            }
            Some(JobState::Running) => *gauges.running.entry(part).or_default() += 1,
            _ => {}
        }
    }
    let partitions = partition_statuses(
        inp,
        &bind,
        &table,
        &snap,
        &decisions,
        &works,
        &mut gauges,
        mem,
        cfg,
    );
    mem.cluster = Some(cluster);
    let usage_running: Vec<UsageSpan> = snap.running[..usage_running_len]
        .iter()
        .map(UsageSpan::of)
        .collect();
    drop(snap);

    // Muster's claims by job: those not of an allocation the job keeps are deleted.
    let mut claims_of: HashMap<(&str, &str), Vec<&ClaimObs>> = HashMap::default();
    for c in inp.claims.iter().filter(|c| c.is_musters() && !c.deleting) {
        if let Some(j) = c.job() {
            claims_of
                .entry((c.namespace(), j))
                .or_default()
                .push(c.as_ref());
        }
    }

    // Finish statuses and decide which to write.
    let mut out = Vec::new();
    for mut w in works {
        if w.skip {
            continue;
        }
        if let Some(cs) = claims_of.get(&(w.ns.as_str(), w.name.as_str())) {
            let keep = (w.holds && w.job.metadata.deletion_timestamp.is_none())
                .then(|| w.st.attempt.unwrap_or(0));
            for c in cs {
                if c.owner_uid() == Some(w.uid.as_str()) && c.attempt != keep {
                    w.plan.delete_claims.push(c.name().to_string());
                }
            }
        }
        // The gang group of an attempt that stopped holding its allocation. (One a crash
        // left behind holds nothing and goes with the job.)
        if let (Some(api), Some(p)) = (bind.gang, w.prev)
            && p.state == Some(JobState::Running)
            && !w.records.is_empty()
        {
            let still =
                w.holds && w.st.attempt == p.attempt && w.job.metadata.deletion_timestamp.is_none();
            if !still {
                let name = gang::group_name(&w.name, p.attempt.unwrap_or(0));
                w.plan.delete_groups.push((api, name));
            }
        }
        if w.job.metadata.deletion_timestamp.is_none() {
            let generation = w.job.metadata.generation;
            let known = w.known.filter(|_| w.st.state == Some(JobState::Pending));
            status::finish(&mut w.st, w.prev, generation, now, known);
            // The stored status and `w.st` are compared without their task records (neither
            // holds any), and those apart.
            let tasks_changed = w.tasks_changed();
            let write = match w.prev {
                None => true,
                Some(p) if *p == w.st && !tasks_changed => false,
                Some(p) => {
                    if tasks_changed || hard_view(p) != hard_view(&w.st) {
                        true
                    } else {
                        // Soft change only: rate-limited, and small estimate moves ignored.
                        let moved = match (&p.start_time, &w.st.start_time) {
                            (Some(a), Some(b)) => {
                                (secs(a) - secs(b)).abs() >= cfg.estimate_tolerance_secs
                            }
                            (a, b) => a.is_some() != b.is_some(),
                        };
                        let other = p.message != w.st.message
                            || p.array_tasks != w.st.array_tasks
                            || reprioritized(p.priority, w.st.priority);
                        let last = mem
                            .last_status_write
                            .get(&w.uid)
                            .copied()
                            .unwrap_or(i64::MIN);
                        (moved || other) && now.saturating_sub(last) >= cfg.status_refresh_secs
                    }
                }
            };
            if write {
                let tasks = match std::mem::replace(&mut w.tasks, Tasks::Kept) {
                    Tasks::Kept => Arc::new(w.records.clone()),
                    Tasks::New(r) => r,
                };
                w.plan.status = Some(PlannedStatus {
                    status: std::mem::take(&mut w.st),
                    tasks,
                    resource_version: w.job.resource_version(),
                });
            }
        }
        if !w.plan.is_empty() {
            out.push(w.plan);
        }
    }

    CyclePlan {
        jobs: out,
        partitions,
        gauges,
        running: usage_running,
        starts,
        preemptions,
        queued,
    }
}

fn build_dep_index(works: &[Work<'_>]) -> DepIndex {
    let mut jobs: Vec<DepJob> = Vec::with_capacity(works.len());
    let mut parent_pos: HashMap<&str, usize> = HashMap::default();
    for w in works {
        let st = &w.st;
        jobs.push(DepJob {
            namespace: w.ns.clone(),
            name: w.name.clone(),
            slurm_name: w.job.job_name().to_string(),
            id: w.id,
            state: st.state,
            start: st
                .start_time
                .as_ref()
                .map(secs)
                .filter(|_| st.state != Some(JobState::Pending)),
            end: st.end_time.as_ref().map(secs),
            elements: BTreeMap::new(),
            is_array: w.is_parent,
        });
        if w.is_parent {
            parent_pos.insert(w.uid.as_str(), jobs.len() - 1);
        }
    }
    for w in works {
        if let Some(o) = w
            .job
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            && let Some(&pi) = parent_pos.get(o.uid.as_str())
            && let Some(idx) = w
                .job
                .labels()
                .get(labels::ARRAY_TASK_ID)
                .and_then(|v| v.parse::<u32>().ok())
        {
            jobs[pi].elements.insert(
                idx,
                (
                    w.st.state.unwrap_or(JobState::Pending),
                    w.st.end_time.as_ref().map(secs),
                ),
            );
        }
    }
    DepIndex::new(jobs)
}

fn parent_of<'a>(job: &BatchJob, by_uid: &HashMap<String, &'a BatchJob>) -> Option<&'a BatchJob> {
    job.labels().get(labels::ARRAY_PARENT)?;
    let o = job
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    by_uid.get(&o.uid).copied()
}

#[cfg(test)]
mod tests {
    use super::reprioritized;

    #[test]
    fn a_priority_is_written_alone_once_it_moves_by_one_percent() {
        assert!(!reprioritized(Some(1000), Some(1009)));
        assert!(reprioritized(Some(1000), Some(1010)));
        assert!(reprioritized(Some(1010), Some(1000)));
        assert!(!reprioritized(Some(1010), Some(1001)));
        assert!(!reprioritized(Some(u32::MAX - 1), Some(u32::MAX)));
        assert!(!reprioritized(Some(0), Some(0)));
        assert!(reprioritized(Some(0), Some(1)));
        assert!(reprioritized(None, Some(0)));
        assert!(!reprioritized(None, None));
    }
}

//! Job dependencies (`--dependency`), evaluated on the jobs of the job's namespace: one
//! evaluator for the operator (which indexes its BatchJobs, array parents with their
//! elements) and the core's cycle (which indexes a snapshot's pending, running and finished
//! jobs, [`DepIndex::from_snapshot`]), so `muster simulate` and `sbatch --test-only` judge a
//! dependency as the operator does.
//!
//! A reference is a BatchJob name or a numeric job id, always within the namespace. Meaning,
//! as in sbatch(1):
//!
//! - `after`: the job started (or ended without starting, e.g. cancelled) `+MINUTES` ago;
//! - `afterany`: the job ended, in any state;
//! - `afterok`: the job COMPLETED (every task exited 0); any other end can never satisfy it;
//! - `afternotok`: the job ended in FAILED, TIMEOUT, NODE_FAIL, PREEMPTED or CANCELLED;
//!   COMPLETED can never satisfy it;
//! - `aftercorr`: for an array element, the element of the referenced array with the same
//!   index COMPLETED (for a job that is not an array element: `afterok`);
//! - `singleton`: no job of the namespace with the same Slurm job name and a lower job id is
//!   pending or running.
//!
//! `+MINUTES` delays any type, counted from the referenced job's start (`after`) or end.
//! With `,` every item must hold; with `?` any one. A job that can never be satisfied stays
//! PENDING with reason `DependencyNeverSatisfied`, as Slurm does without `kill_invalid_depend`.
//! A reference to a job that does not exist (yet) waits ([`DepState::Missing`]): with GitOps,
//! `eval` may be applied before `train`; the operator shows such a job as stalled until the
//! job it names appears.

use std::collections::{BTreeMap, HashMap};

use muster_crds::slurm::{Combine, DepKind, DependencySpec, JobRef, JobTarget};

use super::model::{JobId, JobState, PendingJob, Snapshot};

/// What a dependency needs to know about one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DepJob {
    /// Namespace.
    pub namespace: String,
    /// BatchJob name.
    pub name: String,
    /// Slurm job name (`spec.jobName` or the BatchJob name).
    pub slurm_name: String,
    /// Job id, once assigned.
    pub id: Option<u64>,
    /// State (PENDING until the operator says otherwise).
    pub state: Option<JobState>,
    /// When it started.
    pub start: Option<i64>,
    /// When it ended.
    pub end: Option<i64>,
    /// For an array: its elements by index (state, end).
    pub elements: BTreeMap<u32, (JobState, Option<i64>)>,
    /// Whether this is an array (its elements are separate jobs).
    pub is_array: bool,
}

impl DepJob {
    fn state(&self) -> JobState {
        self.state.unwrap_or(JobState::Pending)
    }
}

/// The jobs dependencies may refer to.
#[derive(Clone, Debug, Default)]
pub struct DepIndex {
    jobs: Vec<DepJob>,
    by_name: HashMap<(String, String), usize>,
    by_id: HashMap<u64, usize>,
}

impl DepIndex {
    /// Indexes `jobs`.
    pub fn new(jobs: Vec<DepJob>) -> Self {
        let mut by_name = HashMap::with_capacity(jobs.len());
        let mut by_id = HashMap::with_capacity(jobs.len());
        for (i, j) in jobs.iter().enumerate() {
            by_name.insert((j.namespace.clone(), j.name.clone()), i);
            if let Some(id) = j.id {
                by_id.insert(id, i);
            }
        }
        DepIndex {
            jobs,
            by_name,
            by_id,
        }
    }

    /// Indexes a snapshot's finished, running and pending jobs. Array elements are jobs of
    /// their own; each array also gets an entry under its array job id (which a reference
    /// by that id finds) holding its elements: PENDING while none started, RUNNING while
    /// any has not ended, then COMPLETED if every element did, else the state of the first
    /// element (by index) that did not.
    pub fn from_snapshot(snap: &Snapshot) -> DepIndex {
        let mut jobs =
            Vec::with_capacity(snap.finished.len() + snap.running.len() + snap.pending.len());
        let mut arrays: BTreeMap<(String, JobId), DepJob> = BTreeMap::new();
        let mut element = |ns: &str,
                           name: &str,
                           a: Option<(JobId, u32)>,
                           st: JobState,
                           start: Option<i64>,
                           end: Option<i64>| {
            let Some((aid, idx)) = a else { return };
            let e = arrays
                .entry((ns.to_string(), aid))
                .or_insert_with(|| DepJob {
                    namespace: ns.to_string(),
                    name: String::new(),
                    slurm_name: name.to_string(),
                    id: Some(aid),
                    is_array: true,
                    ..Default::default()
                });
            e.elements.insert(idx, (st, end));
            e.start = match (e.start, start) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            e.end = match (e.end, end) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        };
        for j in &snap.finished {
            element(
                &j.namespace,
                &j.name,
                j.array_job_id.zip(j.array_task_id),
                j.state,
                j.start_time,
                Some(j.end_time),
            );
            jobs.push(DepJob {
                namespace: j.namespace.clone(),
                name: j.name.clone(),
                slurm_name: j.name.clone(),
                id: Some(j.id),
                state: Some(j.state),
                start: j.start_time,
                end: Some(j.end_time),
                ..Default::default()
            });
        }
        for j in &snap.running {
            element(
                &j.namespace,
                j.slurm_name(),
                j.array_job_id.zip(j.array_task_id),
                JobState::Running,
                Some(j.start_time),
                None,
            );
            jobs.push(DepJob {
                namespace: j.namespace.clone(),
                name: j.name.clone(),
                slurm_name: j.slurm_name().to_string(),
                id: Some(j.id),
                state: Some(JobState::Running),
                start: Some(j.start_time),
                ..Default::default()
            });
        }
        for j in &snap.pending {
            let a = j.array.as_ref().map(|a| (a.array_job_id, a.task_id));
            element(
                &j.namespace,
                j.slurm_name(),
                a,
                JobState::Pending,
                None,
                None,
            );
            jobs.push(DepJob {
                namespace: j.namespace.clone(),
                name: j.name.clone(),
                slurm_name: j.slurm_name().to_string(),
                id: Some(j.id),
                state: Some(JobState::Pending),
                ..Default::default()
            });
        }
        // The arrays last: a reference by the array job id means the whole array.
        for (_, mut a) in arrays {
            let states: Vec<JobState> = a.elements.values().map(|e| e.0).collect();
            a.state = Some(if states.iter().all(|s| s.is_terminal()) {
                states
                    .iter()
                    .copied()
                    .find(|&s| s != JobState::Completed)
                    .unwrap_or(JobState::Completed)
            } else if states.iter().all(|&s| s == JobState::Pending) {
                JobState::Pending
            } else {
                JobState::Running
            });
            if !a.state.is_some_and(JobState::is_terminal) {
                a.end = None;
            }
            jobs.push(a);
        }
        DepIndex::new(jobs)
    }

    fn find(&self, ns: &str, t: &JobTarget) -> Option<&DepJob> {
        let i = match t {
            JobTarget::Name(n) => self.by_name.get(&(ns.to_string(), n.clone())),
            JobTarget::Id(id) => self.by_id.get(id),
        }?;
        let j = &self.jobs[*i];
        (j.namespace == ns).then_some(j)
    }
}

/// Whether a job's dependency allows it to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DepState {
    /// It may start.
    Satisfied,
    /// Not yet; why.
    Waiting(String),
    /// Not until a job it names exists; why.
    Missing(String),
    /// Never; why.
    Never(String),
}

impl DepState {
    /// Waiting, for whatever reason (not satisfied, not never).
    pub fn waits(&self) -> bool {
        matches!(self, DepState::Waiting(_) | DepState::Missing(_))
    }
}

/// The job asking.
#[derive(Clone, Copy, Debug)]
pub struct Asker<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its BatchJob name.
    pub name: &'a str,
    /// Its Slurm job name.
    pub slurm_name: &'a str,
    /// Its job id.
    pub id: Option<u64>,
    /// Its array index, for `aftercorr`.
    pub array_index: Option<u32>,
}

impl<'a> Asker<'a> {
    /// A pending job of a snapshot.
    pub fn of(job: &'a PendingJob) -> Asker<'a> {
        Asker {
            namespace: &job.namespace,
            name: &job.name,
            slurm_name: job.slurm_name(),
            id: Some(job.id),
            array_index: job.array.as_ref().map(|a| a.task_id),
        }
    }
}

fn ended_ok(s: JobState) -> bool {
    s == JobState::Completed
}

fn one(kind: DepKind, r: &JobRef, who: &Asker<'_>, idx: &DepIndex, now: i64) -> DepState {
    let label = format!("{}:{}", kind, r.target);
    let Some(j) = idx.find(who.namespace, &r.target) else {
        return DepState::Missing(format!(
            "{label}: no such job in namespace {} (yet)",
            who.namespace
        ));
    };
    let delay = i64::from(r.delay_minutes.unwrap_or(0)) * 60;
    let after = |base: Option<i64>| -> DepState {
        let t = base.unwrap_or(now).saturating_add(delay);
        if now >= t {
            DepState::Satisfied
        } else {
            DepState::Waiting(format!("{label}: {}s to go", t - now))
        }
    };
    // aftercorr on an array: the element with our index.
    let (state, start, end) = if kind == DepKind::AfterCorr && j.is_array {
        match who.array_index {
            Some(i) => match j.elements.get(&i) {
                Some((s, e)) => (*s, None, *e),
                None if j.state().is_terminal() => {
                    return DepState::Never(format!("{label}: array has no element {i}"));
                }
                None => return DepState::Waiting(format!("{label}: element {i} has not run yet")),
            },
            None => (j.state(), j.start, j.end),
        }
    } else {
        (j.state(), j.start, j.end)
    };
    match kind {
        DepKind::After => {
            if state == JobState::Pending {
                DepState::Waiting(format!("{label}: not started"))
            } else {
                after(start.or(end))
            }
        }
        DepKind::AfterAny => {
            if state.is_terminal() {
                after(end)
            } else {
                DepState::Waiting(format!("{label}: {state}"))
            }
        }
        DepKind::AfterOk | DepKind::AfterCorr => {
            if !state.is_terminal() {
                DepState::Waiting(format!("{label}: {state}"))
            } else if ended_ok(state) {
                after(end)
            } else {
                DepState::Never(format!("{label}: ended {state}"))
            }
        }
        DepKind::AfterNotOk => {
            if !state.is_terminal() {
                DepState::Waiting(format!("{label}: {state}"))
            } else if ended_ok(state) {
                DepState::Never(format!("{label}: COMPLETED"))
            } else {
                after(end)
            }
        }
        DepKind::Singleton => DepState::Satisfied,
    }
}

fn singleton(who: &Asker<'_>, idx: &DepIndex) -> DepState {
    let blocker = idx.jobs.iter().find(|j| {
        j.namespace == who.namespace
            && j.slurm_name == who.slurm_name
            && j.name != who.name
            && !j.is_array
            && !j.state().is_terminal()
            && match (j.id, who.id) {
                (Some(a), Some(b)) => a < b,
                (Some(_), None) => true,
                _ => false,
            }
    });
    match blocker {
        Some(b) => DepState::Waiting(format!(
            "singleton: job {} ({}) named {} is {}",
            b.id.unwrap_or(0),
            b.name,
            who.slurm_name,
            b.state()
        )),
        None => DepState::Satisfied,
    }
}

/// Evaluates `spec` for `who`.
pub fn evaluate(spec: &DependencySpec, who: &Asker<'_>, idx: &DepIndex, now: i64) -> DepState {
    let mut results = Vec::new();
    for item in &spec.items {
        if item.kind == DepKind::Singleton {
            results.push(singleton(who, idx));
            continue;
        }
        for r in &item.jobs {
            results.push(one(item.kind, r, who, idx, now));
        }
    }
    combine(spec.combine, results)
}

fn combine(c: Combine, results: Vec<DepState>) -> DepState {
    match c {
        Combine::All => {
            if let Some(n) = results.iter().find(|r| matches!(r, DepState::Never(_))) {
                return n.clone();
            }
            // A job that does not exist holds the whole dependency up: say that first.
            if let Some(m) = results.iter().find(|r| matches!(r, DepState::Missing(_))) {
                return m.clone();
            }
            results
                .into_iter()
                .find(|r| matches!(r, DepState::Waiting(_)))
                .unwrap_or(DepState::Satisfied)
        }
        Combine::Any => {
            if results.is_empty() || results.contains(&DepState::Satisfied) {
                return DepState::Satisfied;
            }
            if results.iter().all(|r| matches!(r, DepState::Never(_))) {
                let why: Vec<String> = results
                    .into_iter()
                    .map(|r| match r {
                        DepState::Never(m) | DepState::Waiting(m) | DepState::Missing(m) => m,
                        DepState::Satisfied => String::new(),
                    })
                    .collect();
                return DepState::Never(why.join("; "));
            }
            // Any one may do: a job that exists and may yet satisfy it comes first.
            let waiting = results
                .iter()
                .find(|r| matches!(r, DepState::Waiting(_)))
                .cloned();
            waiting
                .or_else(|| {
                    results
                        .into_iter()
                        .find(|r| matches!(r, DepState::Missing(_)))
                })
                .unwrap_or(DepState::Satisfied)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ArrayTask, FinishedJob, RunningJob};

    fn job(name: &str, id: u64, state: JobState) -> DepJob {
        DepJob {
            namespace: "ml".into(),
            name: name.into(),
            slurm_name: name.into(),
            id: Some(id),
            state: Some(state),
            start: Some(100),
            end: state.is_terminal().then_some(200),
            ..Default::default()
        }
    }

    fn who(id: u64) -> Asker<'static> {
        Asker {
            namespace: "ml",
            name: "eval",
            slurm_name: "eval",
            id: Some(id),
            array_index: None,
        }
    }

    fn ev(dep: &str, jobs: Vec<DepJob>, now: i64) -> DepState {
        evaluate(
            &DependencySpec::parse(dep).unwrap(),
            &who(99),
            &DepIndex::new(jobs),
            now,
        )
    }

    #[test]
    fn afterok_chain() {
        assert!(matches!(
            ev(
                "afterok:train",
                vec![job("train", 1, JobState::Running)],
                300
            ),
            DepState::Waiting(_)
        ));
        assert_eq!(
            ev(
                "afterok:train",
                vec![job("train", 1, JobState::Completed)],
                300
            ),
            DepState::Satisfied
        );
        assert_eq!(
            ev("afterok:1", vec![job("train", 1, JobState::Completed)], 300),
            DepState::Satisfied
        );
        let never = ev(
            "afterok:train",
            vec![job("train", 1, JobState::Failed)],
            300,
        );
        assert!(
            matches!(&never, DepState::Never(m) if m.contains("FAILED")),
            "{never:?}"
        );
        // A requeued dependency waits again.
        assert!(matches!(
            ev(
                "afterok:train",
                vec![job("train", 1, JobState::Pending)],
                300
            ),
            DepState::Waiting(_)
        ));
    }

    #[test]
    fn afternotok_afterany_after() {
        let failed = || vec![job("train", 1, JobState::Timeout)];
        assert_eq!(ev("afternotok:train", failed(), 300), DepState::Satisfied);
        assert!(matches!(
            ev(
                "afternotok:train",
                vec![job("train", 1, JobState::Completed)],
                300
            ),
            DepState::Never(_)
        ));
        assert_eq!(ev("afterany:train", failed(), 300), DepState::Satisfied);
        assert!(matches!(
            ev(
                "afterany:train",
                vec![job("train", 1, JobState::Running)],
                300
            ),
            DepState::Waiting(_)
        ));
        // after: started 100; +10 minutes -> 700.
        assert_eq!(
            ev("after:train", vec![job("train", 1, JobState::Running)], 150),
            DepState::Satisfied
        );
        assert!(matches!(
            ev("after:train+10", vec![job("train", 1, JobState::Running)], 650),
            DepState::Waiting(m) if m.contains("50s")
        ));
        assert_eq!(
            ev(
                "after:train+10",
                vec![job("train", 1, JobState::Running)],
                700
            ),
            DepState::Satisfied
        );
        assert!(matches!(
            ev("after:train", vec![job("train", 1, JobState::Pending)], 150),
            DepState::Waiting(_)
        ));
    }

    #[test]
    fn all_and_any() {
        let jobs = || {
            vec![
                job("a", 1, JobState::Completed),
                job("b", 2, JobState::Failed),
                job("c", 3, JobState::Running),
            ]
        };
        assert!(matches!(
            ev("afterok:a,afterok:b", jobs(), 300),
            DepState::Never(_)
        ));
        assert!(matches!(
            ev("afterok:a,afterok:c", jobs(), 300),
            DepState::Waiting(_)
        ));
        assert_eq!(ev("afterok:b?afterok:a", jobs(), 300), DepState::Satisfied);
        assert!(matches!(
            ev("afterok:b?afterok:c", jobs(), 300),
            DepState::Waiting(_)
        ));
        assert!(matches!(
            ev("afterok:b?afternotok:a", jobs(), 300),
            DepState::Never(_)
        ));
        assert_eq!(
            ev("afterok:a:2?afterany:3", jobs(), 300),
            DepState::Satisfied
        );
    }

    #[test]
    fn references_stay_in_the_namespace_and_may_appear_later() {
        let mut other = job("train", 1, JobState::Completed);
        other.namespace = "other".into();
        assert!(matches!(
            ev("afterok:train", vec![other.clone()], 300),
            DepState::Missing(m) if m.contains("no such job")
        ));
        assert!(matches!(
            ev("afterok:1", vec![other.clone()], 300),
            DepState::Missing(_)
        ));
        // With `,` a missing job holds everything up; with `?` one that exists may still do.
        let running = job("prep", 2, JobState::Running);
        assert!(matches!(
            ev("afterok:prep,afterok:nosuch", vec![running.clone()], 300),
            DepState::Missing(_)
        ));
        assert!(matches!(
            ev("afterok:prep?afterok:nosuch", vec![running], 300),
            DepState::Waiting(_)
        ));
        assert!(matches!(
            ev("afterok:nosuch?afterok:gone", vec![other], 300),
            DepState::Missing(_)
        ));
    }

    #[test]
    fn singleton_waits_for_earlier_namesakes() {
        let mut prev = job("eval-old", 5, JobState::Running);
        prev.slurm_name = "eval".into();
        assert!(matches!(
            ev("singleton", vec![prev.clone()], 300),
            DepState::Waiting(_)
        ));
        let mut later = prev.clone();
        later.id = Some(150);
        assert_eq!(ev("singleton", vec![later], 300), DepState::Satisfied);
        prev.state = Some(JobState::Completed);
        assert_eq!(ev("singleton", vec![prev], 300), DepState::Satisfied);
    }

    #[test]
    fn aftercorr_uses_the_same_index() {
        let mut arr = job("prep", 10, JobState::Running);
        arr.is_array = true;
        arr.elements.insert(0, (JobState::Completed, Some(150)));
        arr.elements.insert(1, (JobState::Failed, Some(150)));
        let idx = DepIndex::new(vec![arr]);
        let spec = DependencySpec::parse("aftercorr:prep").unwrap();
        let mut w = who(99);
        w.array_index = Some(0);
        assert_eq!(evaluate(&spec, &w, &idx, 300), DepState::Satisfied);
        w.array_index = Some(1);
        assert!(matches!(evaluate(&spec, &w, &idx, 300), DepState::Never(_)));
        w.array_index = Some(2);
        assert!(matches!(
            evaluate(&spec, &w, &idx, 300),
            DepState::Waiting(_)
        ));
    }

    fn finished(id: u64, name: &str, state: JobState, array: Option<(u64, u32)>) -> FinishedJob {
        FinishedJob {
            id,
            name: name.into(),
            namespace: "ml".into(),
            state,
            start_time: Some(100),
            end_time: 200,
            array_job_id: array.map(|a| a.0),
            array_task_id: array.map(|a| a.1),
        }
    }

    fn pending(id: u64, name: &str, dep: &str) -> PendingJob {
        let mut j = PendingJob::new(id, 0, Default::default());
        j.name = name.into();
        j.namespace = "ml".into();
        j.dependency = Some(DependencySpec::parse(dep).unwrap());
        j
    }

    fn ask(snap: &Snapshot, job: &PendingJob, now: i64) -> DepState {
        let idx = DepIndex::from_snapshot(snap);
        evaluate(job.dependency.as_ref().unwrap(), &Asker::of(job), &idx, now)
    }

    #[test]
    fn a_snapshot_is_judged_as_the_operator_judges_its_jobs() {
        let mut s = Snapshot {
            finished: vec![
                finished(1, "train", JobState::Completed, None),
                finished(2, "prep", JobState::Failed, None),
                // Array 10: element 0 completed, element 1 failed, element 2 still pending.
                finished(10, "sweep", JobState::Completed, Some((10, 0))),
                finished(11, "sweep", JobState::Failed, Some((10, 1))),
            ],
            ..Default::default()
        };
        let mut el2 = PendingJob::new(12, 0, Default::default());
        el2.name = "sweep".into();
        el2.namespace = "ml".into();
        el2.array = Some(ArrayTask {
            array_job_id: 10,
            task_id: 2,
            max_running: None,
        });
        s.pending.push(el2);
        let ok = |d| matches!(d, DepState::Satisfied);
        let never = |d| matches!(d, DepState::Never(_));
        let waits = |d| matches!(d, DepState::Waiting(_));
        let missing = |d| matches!(d, DepState::Missing(_));
        assert!(ok(ask(&s, &pending(20, "eval", "afterok:train"), 300)));
        assert!(ok(ask(&s, &pending(20, "eval", "afterok:1"), 300)));
        assert!(never(ask(&s, &pending(20, "eval", "afterok:prep"), 300)));
        assert!(ok(ask(&s, &pending(20, "eval", "afternotok:2"), 300)));
        // +5 minutes after the end at 200.
        assert!(waits(ask(&s, &pending(20, "eval", "afterok:train+5"), 300)));
        assert!(ok(ask(&s, &pending(20, "eval", "afterok:train+5"), 500)));
        // The array id means the whole array: not over while element 2 waits.
        assert!(waits(ask(&s, &pending(20, "eval", "afterany:10"), 300)));
        // An unknown reference may be applied later (GitOps): it waits, as missing.
        assert!(missing(ask(&s, &pending(20, "eval", "afterok:77"), 300)));
        // Other namespaces are not visible.
        let mut other = pending(20, "eval", "afterok:train");
        other.namespace = "team-b".into();
        assert!(missing(ask(&s, &other, 300)));
    }

    #[test]
    fn snapshot_arrays_answer_aftercorr_and_end_with_their_worst_element() {
        let s = Snapshot {
            finished: vec![
                finished(10, "sweep", JobState::Completed, Some((10, 0))),
                finished(11, "sweep", JobState::Failed, Some((10, 1))),
            ],
            ..Default::default()
        };
        let corr = |idx: u32| {
            let mut j = pending(30 + u64::from(idx), "post", "aftercorr:10");
            j.array = Some(ArrayTask {
                array_job_id: 30,
                task_id: idx,
                max_running: None,
            });
            j
        };
        assert_eq!(ask(&s, &corr(0), 300), DepState::Satisfied);
        assert!(matches!(ask(&s, &corr(1), 300), DepState::Never(_)));
        assert!(matches!(ask(&s, &corr(5), 300), DepState::Never(_)));
        // Every element ended, one failed: afterok on the array can never hold.
        assert!(matches!(
            ask(&s, &pending(40, "eval", "afterok:10"), 300),
            DepState::Never(_)
        ));
        assert_eq!(
            ask(&s, &pending(40, "eval", "afterany:10"), 300),
            DepState::Satisfied
        );
    }

    #[test]
    fn snapshot_singletons_wait_for_lower_ids_pending_or_running() {
        let mut s = Snapshot {
            pending: vec![
                pending(5, "nightly", "singleton"),
                pending(6, "nightly", "singleton"),
            ],
            ..Default::default()
        };
        // Different BatchJob names, one Slurm name: the later one waits for the earlier.
        s.pending[1].name = "nightly-2".into();
        s.pending[1].job_name = Some("nightly".into());
        s.pending[0].job_name = Some("nightly".into());
        assert_eq!(ask(&s, &s.pending[0].clone(), 0), DepState::Satisfied);
        assert!(matches!(
            ask(&s, &s.pending[1].clone(), 0),
            DepState::Waiting(_)
        ));
        s.running.push(RunningJob {
            id: 3,
            name: "nightly-0".into(),
            job_name: Some("nightly".into()),
            namespace: "ml".into(),
            ..Default::default()
        });
        assert!(matches!(
            ask(&s, &s.pending[0].clone(), 0),
            DepState::Waiting(_)
        ));
    }
}

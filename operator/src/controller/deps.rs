//! Job dependencies (`--dependency`), evaluated on the jobs of the job's namespace (pure).
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
//! A reference to a job that does not exist (yet) waits: with GitOps, `eval` may be applied
//! before `train`.

use std::collections::{BTreeMap, HashMap};

use muster_crds::slurm::{Combine, DepKind, DependencySpec, JobRef, JobTarget};
use muster_crds::v1alpha1::JobState;

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
    /// Never; why.
    Never(String),
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

fn ended_ok(s: JobState) -> bool {
    s == JobState::Completed
}

fn one(kind: DepKind, r: &JobRef, who: &Asker<'_>, idx: &DepIndex, now: i64) -> DepState {
    let label = format!("{}:{}", kind, r.target);
    let Some(j) = idx.find(who.namespace, &r.target) else {
        return DepState::Waiting(format!(
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
                        DepState::Never(m) | DepState::Waiting(m) => m,
                        DepState::Satisfied => String::new(),
                    })
                    .collect();
                return DepState::Never(why.join("; "));
            }
            results
                .into_iter()
                .find(|r| matches!(r, DepState::Waiting(_)))
                .unwrap_or(DepState::Satisfied)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            DepState::Waiting(m) if m.contains("no such job")
        ));
        assert!(matches!(
            ev("afterok:1", vec![other], 300),
            DepState::Waiting(_)
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
}

//! Job dependencies (`--dependency`), evaluated against the snapshot's jobs.
//!
//! A reference by id finds any job of the snapshot (pending, running or finished); a
//! reference by name finds the BatchJob of that name in the dependent job's namespace.
//!
//! | type | satisfied when the target … | never satisfied when the target … |
//! |---|---|---|
//! | `after` | started (or ended without starting), + delay | — |
//! | `afterany` | ended, in any state, + delay | — |
//! | `afterok` | ended COMPLETED, + delay | ended in any other state |
//! | `afternotok` | ended not COMPLETED, + delay | ended COMPLETED |
//! | `aftercorr` | (an array) has its element with the same index COMPLETED | that element ended otherwise, or does not exist while the array does |
//! | `singleton` | — (no job of the same name and namespace is running or starting this cycle) | — |
//!
//! A target that is not found: by name, the job waits (`Dependency`) — in GitOps both jobs
//! are often applied at once, in any order; by id, it can never be satisfied
//! (`DependencyNeverSatisfied`), as ids are only handed out to existing jobs. A job that
//! depends on itself never runs. With `,` every item and every listed job must be satisfied;
//! with `?` any one satisfied job suffices (and it is never satisfiable only when none can
//! be).

use std::collections::{BTreeMap, BTreeSet};

use muster_crds::slurm::{Combine, DepKind, DependencySpec, JobTarget};

use super::model::{JobId, JobState, PendingJob, Snapshot};

/// What the dependency allows now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DepStatus {
    /// The job may run.
    Satisfied,
    /// Not yet; the message says what it waits for.
    Waiting(String),
    /// It can never be satisfied; the message says why.
    Never(String),
}

/// One job as dependencies see it.
#[derive(Clone, Debug)]
struct Info {
    id: JobId,
    namespace: String,
    /// `None` while pending or running.
    ended: Option<(JobState, i64)>,
    started: Option<i64>,
    array: Option<(JobId, u32)>,
}

/// Every job of a snapshot, indexed for dependency lookups.
#[derive(Debug, Default)]
pub struct JobTable {
    by_id: BTreeMap<JobId, Info>,
    by_name: BTreeMap<(String, String), JobId>,
    /// `(array job id, index)` → job id.
    by_element: BTreeMap<(JobId, u32), JobId>,
    /// Array job ids that exist.
    arrays: BTreeSet<JobId>,
    /// `(namespace, Slurm job name)` of running jobs, for `singleton`.
    running_names: BTreeSet<(String, String)>,
}

impl JobTable {
    /// Indexes the snapshot's pending, running and finished jobs.
    pub fn new(snap: &Snapshot) -> JobTable {
        let mut t = JobTable::default();
        let add = |t: &mut JobTable, info: Info, name: &str| {
            if let Some((a, i)) = info.array {
                t.by_element.insert((a, i), info.id);
                t.arrays.insert(a);
            }
            if !name.is_empty() {
                t.by_name
                    .insert((info.namespace.clone(), name.to_string()), info.id);
            }
            t.by_id.insert(info.id, info);
        };
        for j in &snap.finished {
            add(
                &mut t,
                Info {
                    id: j.id,
                    namespace: j.namespace.clone(),
                    ended: Some((j.state, j.end_time)),
                    started: j.start_time,
                    array: j.array_job_id.zip(j.array_task_id),
                },
                &j.name,
            );
        }
        for j in &snap.running {
            t.running_names
                .insert((j.namespace.clone(), j.slurm_name().to_string()));
            add(
                &mut t,
                Info {
                    id: j.id,
                    namespace: j.namespace.clone(),
                    ended: None,
                    started: Some(j.start_time),
                    array: j.array_job_id.zip(j.array_task_id),
                },
                &j.name,
            );
        }
        for j in &snap.pending {
            add(
                &mut t,
                Info {
                    id: j.id,
                    namespace: j.namespace.clone(),
                    ended: None,
                    started: None,
                    array: j.array.as_ref().map(|a| (a.array_job_id, a.task_id)),
                },
                &j.name,
            );
        }
        t
    }

    /// Records that a job started this cycle (for `singleton`).
    pub fn started(&mut self, namespace: &str, slurm_name: &str) {
        self.running_names
            .insert((namespace.to_string(), slurm_name.to_string()));
    }

    /// Whether `job`'s dependency allows it to run at `now`.
    pub fn status(&self, job: &PendingJob, spec: &DependencySpec, now: i64) -> DepStatus {
        // Per item: each listed job's status.
        let mut all_waiting: Vec<String> = Vec::new();
        let mut any_never: Option<String> = None;
        let mut any_ok = false;
        let mut all_never = true;
        for item in &spec.items {
            let results: Vec<DepStatus> = if item.kind == DepKind::Singleton {
                if self
                    .running_names
                    .contains(&(job.namespace.clone(), job.slurm_name().to_string()))
                {
                    vec![DepStatus::Waiting(format!(
                        "singleton: a job named {} is running",
                        job.slurm_name()
                    ))]
                } else {
                    vec![DepStatus::Satisfied]
                }
            } else {
                item.jobs
                    .iter()
                    .map(|r| {
                        let delay = i64::from(r.delay_minutes.unwrap_or(0)) * 60;
                        self.one(job, item.kind, &r.target, delay, now)
                    })
                    .collect()
            };
            for r in results {
                match r {
                    DepStatus::Satisfied => {
                        any_ok = true;
                        all_never = false;
                    }
                    DepStatus::Waiting(m) => {
                        all_never = false;
                        all_waiting.push(m);
                    }
                    DepStatus::Never(m) => {
                        if any_never.is_none() {
                            any_never = Some(m);
                        }
                    }
                }
            }
        }
        match spec.combine {
            Combine::All => {
                if let Some(m) = any_never {
                    DepStatus::Never(m)
                } else if let Some(m) = all_waiting.into_iter().next() {
                    DepStatus::Waiting(m)
                } else {
                    DepStatus::Satisfied
                }
            }
            Combine::Any => {
                if any_ok {
                    DepStatus::Satisfied
                } else if all_never {
                    DepStatus::Never(any_never.unwrap_or_else(|| "no dependency can be met".into()))
                } else {
                    DepStatus::Waiting(all_waiting.join("; "))
                }
            }
        }
    }

    fn one(
        &self,
        job: &PendingJob,
        kind: DepKind,
        target: &JobTarget,
        delay: i64,
        now: i64,
    ) -> DepStatus {
        let id = match target {
            JobTarget::Id(id) => {
                if !self.by_id.contains_key(id) && !self.arrays.contains(id) {
                    return DepStatus::Never(format!("{kind}:{id}: no job {id}"));
                }
                *id
            }
            JobTarget::Name(n) => match self.by_name.get(&(job.namespace.clone(), n.clone())) {
                Some(id) => *id,
                None => {
                    return DepStatus::Waiting(format!(
                        "{kind}:{n}: no job named {n} in namespace {} yet",
                        job.namespace
                    ));
                }
            },
        };
        if id == job.id {
            return DepStatus::Never(format!("{kind}:{id}: a job cannot depend on itself"));
        }
        let after = |t: i64, what: &str| -> DepStatus {
            if now >= t.saturating_add(delay) {
                DepStatus::Satisfied
            } else {
                DepStatus::Waiting(format!(
                    "{kind}:{id}: {what}; waiting {}s more",
                    t + delay - now
                ))
            }
        };
        if kind == DepKind::AfterCorr {
            let Some(index) = job.array.as_ref().map(|a| a.task_id) else {
                return DepStatus::Never(format!(
                    "aftercorr:{id}: the job is not an array element"
                ));
            };
            let array = self
                .by_id
                .get(&id)
                .and_then(|i| i.array.map(|a| a.0))
                .unwrap_or(id);
            let Some(elem) = self
                .by_element
                .get(&(array, index))
                .and_then(|e| self.by_id.get(e))
            else {
                return DepStatus::Never(format!(
                    "aftercorr:{id}: array {array} has no element {index}"
                ));
            };
            return match elem.ended {
                Some((JobState::Completed, t)) => after(t, "element completed"),
                Some((s, _)) => {
                    DepStatus::Never(format!("aftercorr:{id}: element {index} ended {s}"))
                }
                None => {
                    DepStatus::Waiting(format!("aftercorr:{id}: element {index} has not ended"))
                }
            };
        }
        if self.arrays.contains(&id) {
            // An array's id (as in Slurm, even when its first element has the same id): the
            // dependency is on every element.
            return self.array_status(job, kind, id, delay, now);
        }
        self.element(kind, id, delay, now)
    }

    /// The dependency on the single job `id` (not an array as a whole).
    fn element(&self, kind: DepKind, id: JobId, delay: i64, now: i64) -> DepStatus {
        let after = |t: i64, what: &str| -> DepStatus {
            if now >= t.saturating_add(delay) {
                DepStatus::Satisfied
            } else {
                DepStatus::Waiting(format!(
                    "{kind}:{id}: {what}; waiting {}s more",
                    t + delay - now
                ))
            }
        };
        let Some(info) = self.by_id.get(&id) else {
            return DepStatus::Never(format!("{kind}:{id}: no job {id}"));
        };
        match (kind, info.ended) {
            (DepKind::After, _) => match (info.started, info.ended) {
                (Some(t), _) => after(t, "started"),
                (None, Some((_, t))) => after(t, "ended before starting"),
                (None, None) => DepStatus::Waiting(format!("after:{id}: job {id} has not started")),
            },
            (DepKind::AfterAny, Some((_, t))) => after(t, "ended"),
            (DepKind::AfterOk, Some((JobState::Completed, t))) => after(t, "completed"),
            (DepKind::AfterOk, Some((s, _))) => {
                DepStatus::Never(format!("afterok:{id}: job {id} ended {s}"))
            }
            (DepKind::AfterNotOk, Some((JobState::Completed, _))) => {
                DepStatus::Never(format!("afternotok:{id}: job {id} completed"))
            }
            (DepKind::AfterNotOk, Some((_, t))) => after(t, "did not complete"),
            (_, None) => DepStatus::Waiting(format!("{kind}:{id}: job {id} has not ended")),
            // Handled above (aftercorr) or never reaching here (singleton has no jobs).
            (DepKind::AfterCorr | DepKind::Singleton, Some(_)) => DepStatus::Satisfied,
        }
    }

    /// A dependency on an array job id (no job has that id itself): every element.
    fn array_status(
        &self,
        job: &PendingJob,
        kind: DepKind,
        array: JobId,
        delay: i64,
        now: i64,
    ) -> DepStatus {
        let elems: Vec<JobId> = self
            .by_element
            .range((array, 0)..=(array, u32::MAX))
            .map(|(_, &id)| id)
            .collect();
        let mut waiting = None;
        for e in elems {
            if e == job.id {
                continue;
            }
            match self.element(kind, e, delay, now) {
                DepStatus::Satisfied => {}
                DepStatus::Never(m) => return DepStatus::Never(m),
                DepStatus::Waiting(m) => waiting = waiting.or(Some(m)),
            }
        }
        waiting.map_or(DepStatus::Satisfied, DepStatus::Waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ArrayTask, FinishedJob, JobRequest, RunningJob};

    fn finished(id: JobId, name: &str, state: JobState, end: i64) -> FinishedJob {
        FinishedJob {
            id,
            name: name.into(),
            namespace: "default".into(),
            state,
            start_time: Some(end - 10),
            end_time: end,
            array_job_id: None,
            array_task_id: None,
        }
    }

    fn pending(id: JobId, dep: &str) -> PendingJob {
        let mut j = PendingJob::new(id, 0, JobRequest::gpus(1));
        j.dependency = Some(DependencySpec::parse(dep).unwrap());
        j
    }

    fn status(s: &Snapshot, j: &PendingJob, now: i64) -> DepStatus {
        JobTable::new(s).status(j, j.dependency.as_ref().unwrap(), now)
    }

    #[test]
    fn afterok_and_afternotok_follow_the_end_state() {
        let mut s = Snapshot::default();
        s.finished
            .push(finished(1, "train", JobState::Completed, 100));
        s.finished.push(finished(2, "bad", JobState::Failed, 100));
        assert_eq!(
            status(&s, &pending(10, "afterok:train"), 200),
            DepStatus::Satisfied
        );
        assert!(matches!(
            status(&s, &pending(10, "afterok:2"), 200),
            DepStatus::Never(_)
        ));
        assert_eq!(
            status(&s, &pending(10, "afternotok:bad"), 200),
            DepStatus::Satisfied
        );
        assert!(matches!(
            status(&s, &pending(10, "afternotok:1"), 200),
            DepStatus::Never(_)
        ));
        assert_eq!(
            status(&s, &pending(10, "afterany:1:2"), 200),
            DepStatus::Satisfied
        );
        // `?`: one satisfied item is enough even when another can never be.
        assert_eq!(
            status(&s, &pending(10, "afterok:2?afterok:1"), 200),
            DepStatus::Satisfied
        );
        // Delay: +5 minutes after the end.
        assert!(matches!(
            status(&s, &pending(10, "afterok:1+5"), 200),
            DepStatus::Waiting(_)
        ));
        assert_eq!(
            status(&s, &pending(10, "afterok:1+5"), 400),
            DepStatus::Satisfied
        );
    }

    #[test]
    fn unknown_names_wait_and_unknown_ids_never_run() {
        let s = Snapshot::default();
        assert!(matches!(
            status(&s, &pending(10, "afterok:later"), 0),
            DepStatus::Waiting(_)
        ));
        assert!(matches!(
            status(&s, &pending(10, "afterok:99"), 0),
            DepStatus::Never(_)
        ));
        assert!(matches!(
            status(&s, &pending(10, "afterok:10"), 0),
            DepStatus::Never(_)
        ));
    }

    #[test]
    fn after_needs_a_start_and_singleton_a_free_name() {
        let mut s = Snapshot::default();
        s.running.push(RunningJob {
            id: 1,
            name: "prep".into(),
            namespace: "default".into(),
            start_time: 50,
            ..Default::default()
        });
        s.pending.push(PendingJob::new(2, 0, JobRequest::gpus(1)));
        assert_eq!(
            status(&s, &pending(10, "after:prep"), 60),
            DepStatus::Satisfied
        );
        assert!(matches!(
            status(&s, &pending(10, "after:2"), 60),
            DepStatus::Waiting(_)
        ));
        assert!(matches!(
            status(&s, &pending(10, "afterany:prep"), 60),
            DepStatus::Waiting(_)
        ));
        let mut single = pending(10, "singleton");
        single.name = "prep".into();
        assert!(matches!(status(&s, &single, 60), DepStatus::Waiting(_)));
        single.namespace = "other".into();
        assert_eq!(status(&s, &single, 60), DepStatus::Satisfied);
    }

    #[test]
    fn aftercorr_matches_array_indices() {
        let mut s = Snapshot::default();
        for (i, st) in [(0, JobState::Completed), (1, JobState::Failed)] {
            let mut f = finished(100 + i as u64, "", st, 10);
            f.array_job_id = Some(100);
            f.array_task_id = Some(i);
            s.finished.push(f);
        }
        let mut j = pending(200, "aftercorr:100");
        j.array = Some(ArrayTask {
            array_job_id: 200,
            task_id: 0,
            max_running: None,
        });
        assert_eq!(status(&s, &j, 20), DepStatus::Satisfied);
        j.array.as_mut().unwrap().task_id = 1;
        assert!(matches!(status(&s, &j, 20), DepStatus::Never(_)));
        j.array.as_mut().unwrap().task_id = 7;
        assert!(matches!(status(&s, &j, 20), DepStatus::Never(_)));
        // afterok on the whole array: every element must complete.
        let j = pending(300, "afterok:100");
        assert!(matches!(status(&s, &j, 20), DepStatus::Never(_)));
    }
}

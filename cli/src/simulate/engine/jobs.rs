//! Applying a cycle's decisions and the jobs' ends: starts, stops, preemptions, requeues
//! and the final outcomes.

use super::*;

impl Engine<'_> {
    pub(super) fn apply(&mut self, d: Decisions, t: i64) {
        for s in &d.stops {
            self.stop(s.job, t, EndKind::Stop(s.state));
        }
        for p in &d.preemptions {
            for v in &p.victims {
                // The partition requeues its preempted jobs unless the job says --no-requeue.
                let requeue = v.requeue
                    && self
                        .w
                        .jobs
                        .get((v.job - 1) as usize)
                        .is_none_or(|j| j.requeue);
                if self.stop(v.job, t, EndKind::Preempt { requeue }) {
                    self.preemptions += 1;
                }
            }
        }
        for s in &d.starts {
            self.start(s, t);
        }
        for p in d.pending {
            let i = (p.job - 1) as usize;
            if i >= self.out.len() || self.qpos[i] == NONE {
                continue;
            }
            let o = &mut self.out[i];
            o.reason = Some(p.reason);
            if o.first_estimate.is_none() {
                o.first_estimate = p.start_estimate;
            }
            if never(p.reason) {
                o.outcome = Outcome::Rejected;
                o.message = Some(format!("{}: {}", p.reason, p.message));
                o.pending_message = Some(p.message);
                self.dequeue(i);
                self.finish(i, JobState::Cancelled, None, t);
                self.done();
            } else {
                o.pending_message = Some(p.message);
            }
        }
    }

    /// Keeps an ended job for dependencies (only when the workload has any).
    pub(super) fn finish(&mut self, i: usize, state: JobState, start: Option<i64>, t: i64) {
        if !self.w.dependencies {
            return;
        }
        let p = &self.w.jobs[i].pending;
        self.snap.finished.push(FinishedJob {
            id: p.id,
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            state,
            start_time: start,
            end_time: t,
            array_job_id: None,
            array_task_id: None,
        });
    }

    pub(super) fn done(&mut self) {
        self.finished += 1;
        if let Some(pb) = self.progress {
            pb.inc(1);
        }
    }

    /// Starts stopping running job `id`; false if it is not running or already stopping.
    fn stop(&mut self, id: u64, t: i64, kind: EndKind) -> bool {
        let i = (id - 1) as usize;
        if i >= self.rpos.len() || self.rpos[i] == NONE {
            return false;
        }
        let r = &mut self.snap.running[self.rpos[i] as usize];
        if r.stopping_since.is_some() {
            return false;
        }
        r.stopping_since = Some(t);
        self.occ.set_stopping(&self.prep, id, t);
        let grace = r
            .partition
            .and_then(|p| self.snap.partitions.get(p as usize))
            .map(|p| p.grace_time_secs)
            .unwrap_or(0);
        self.epoch[i] = self.epoch[i].wrapping_add(1);
        self.end_kind[i] = kind;
        self.heap.push(Reverse((
            t.saturating_add(grace as i64),
            i as u32,
            self.epoch[i],
        )));
        true
    }

    fn start(&mut self, s: &Start, t: i64) {
        let i = (s.job - 1) as usize;
        if i >= self.qpos.len() || self.qpos[i] == NONE {
            return;
        }
        let p = self.dequeue(i);
        let per_node = gpus_per_node(s.tasks.iter().map(|t| (t.node, t.gpus.as_slice())));
        let mut per_node = per_node;
        let mut held = 0u32;
        let mut leaf_gpus: BTreeMap<u32, u32> = BTreeMap::new();
        for &n in &s.nodes {
            per_node.entry(n).or_insert(0);
        }
        for (&n, &g) in &per_node {
            // An exclusive job holds the whole node whatever it uses.
            let take = if s.exclusive {
                self.node_total[n as usize]
            } else {
                g
            };
            self.hold(n as usize, take as i64);
            held += take;
            *leaf_gpus.entry(self.cl.leaf_of[n as usize]).or_insert(0) += take;
        }
        let job = &self.w.jobs[i];
        let (end, kind) = match s.time_limit {
            Some(l) if job.runtime > l => (t.saturating_add(l as i64), EndKind::Timeout),
            _ => (t.saturating_add(job.runtime as i64), EndKind::Complete),
        };
        self.epoch[i] = self.epoch[i].wrapping_add(1);
        self.end_kind[i] = kind;
        self.heap.push(Reverse((end, i as u32, self.epoch[i])));
        let o = &mut self.out[i];
        o.start = Some(t);
        o.gpus = held;
        o.nodes = per_node.len() as u32;
        o.node_ids = s.nodes.clone();
        o.leaves = leaf_gpus.len() as u32;
        o.leaf_gpus = leaf_gpus.into_iter().collect();
        o.tasks = s.tasks.iter().map(|t| (t.node, t.gpus.clone())).collect();
        o.reason = None;
        o.pending_message = None;
        self.rpos[i] = self.snap.running.len() as u32;
        self.snap.running.push(RunningJob {
            id: p.id,
            name: p.name,
            job_name: p.job_name,
            namespace: p.namespace,
            partition: p.partition,
            start_time: t,
            time_limit: s.time_limit,
            exclusive: s.exclusive,
            exclusive_user: p.request.exclusive_user && !s.exclusive,
            user: p.user,
            tasks: s
                .tasks
                .iter()
                .map(|task| TaskAlloc {
                    node: task.node,
                    gpus: task.gpus.clone(),
                    cpu_millis: task.cpu_millis,
                    memory_mib: task.memory_mib,
                })
                .collect(),
            stopping_since: None,
            array_job_id: p.array.as_ref().map(|a| a.array_job_id),
            array_task_id: p.array.as_ref().map(|a| a.task_id),
        });
        if let Some(r) = self.snap.running.last() {
            self.occ.add(&self.prep, &self.snap, r);
        }
    }

    /// Changes node `n`'s held GPUs by `delta`, keeping the busy and stranded totals.
    fn hold(&mut self, n: usize, delta: i64) {
        let total = self.node_total[n];
        let stranded = |used: u32| -> u64 {
            if used > 0 && used < total {
                u64::from(total - used)
            } else {
                0
            }
        };
        let before = self.node_used[n];
        let after = (i64::from(before) + delta).clamp(0, i64::from(total)) as u32;
        self.stranded = self.stranded - stranded(before) + stranded(after);
        self.busy = self.busy + u64::from(after) - u64::from(before);
        self.node_used[n] = after;
    }

    pub(super) fn end(&mut self, i: usize, t: i64) {
        let pos = self.rpos[i] as usize;
        let r = self.snap.running.swap_remove(pos);
        self.occ.remove_job(&self.prep, r.id);
        if let Some(moved) = self.snap.running.get(pos) {
            self.rpos[(moved.id - 1) as usize] = pos as u32;
        }
        self.rpos[i] = NONE;
        let leaf_gpus = self.out[i].leaf_gpus.clone();
        let per_node = gpus_per_node(r.tasks.iter().map(|t| (t.node, t.gpus.as_slice())));
        for (&n, &g) in &per_node {
            let give = if r.exclusive {
                self.node_total[n as usize]
            } else {
                g
            };
            self.hold(n as usize, -i64::from(give));
        }
        self.freed = true;
        self.mark_change();
        let kind = self.end_kind[i];
        let start = self.out[i].start.unwrap_or(t);
        match kind {
            EndKind::Preempt { requeue: true } => {
                self.lost_gpu_secs += f64::from(self.out[i].gpus) * (t - start) as f64;
                self.evicted.push(Evicted {
                    job: i as u32,
                    start,
                    end: t,
                    leaf_gpus,
                });
                let o = &mut self.out[i];
                o.requeues += 1;
                o.start = None;
                o.leaf_gpus.clear();
                o.node_ids.clear();
                o.tasks.clear();
                let mut p = self.w.jobs[i].pending.clone();
                p.eligible_time = Some(t);
                self.enqueue(i, p);
            }
            _ => {
                if let EndKind::Preempt { requeue: false } = kind {
                    self.lost_gpu_secs += f64::from(self.out[i].gpus) * (t - start) as f64;
                }
                let o = &mut self.out[i];
                o.end = Some(t);
                o.outcome = match kind {
                    EndKind::Complete => Outcome::Completed,
                    EndKind::Timeout | EndKind::Stop(JobState::Timeout) => Outcome::Timeout,
                    EndKind::Preempt { .. } => Outcome::Preempted,
                    EndKind::Stop(_) => Outcome::NodeFail,
                };
                let state = match o.outcome {
                    Outcome::Completed => JobState::Completed,
                    Outcome::Timeout => JobState::Timeout,
                    Outcome::Preempted => JobState::Preempted,
                    _ => JobState::NodeFail,
                };
                self.finish(i, state, Some(start), t);
                self.done();
            }
        }
    }
}

/// Pending reasons that can never clear in a replay (no node fails, no partition changes).
fn never(r: Reason) -> bool {
    matches!(
        r,
        Reason::BadConstraints
            | Reason::PartitionConfig
            | Reason::PartitionTimeLimit
            | Reason::PartitionNodeLimit
            | Reason::PartitionDown
            | Reason::PartitionInactive
            | Reason::AccountNotAllowed
            | Reason::ReqNodeNotAvail
            | Reason::DependencyNeverSatisfied
    )
}

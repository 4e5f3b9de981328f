//! The waiting queue and the scheduling cycles: whether a due cycle runs or is skipped, and
//! which waiting jobs the policy sees, in the core's order.

use super::*;

impl Engine<'_> {
    pub(super) fn enqueue(&mut self, i: usize, p: PendingJob) {
        if let Some(sw) = &p.request.switches {
            let wait = match sw.max_wait {
                None => Some(self.cfg.max_switch_wait_secs),
                Some(w) => w.seconds(),
            };
            if let Some(w) = wait {
                let from = p.eligible_time.unwrap_or(p.submit_time).max(self.now);
                self.wakes.push(Reverse(
                    from.saturating_add(i64::try_from(w).unwrap_or(i64::MAX)),
                ));
            }
        }
        self.qpos[i] = self.queue.len() as u32;
        self.queue.push(p);
        let m = self.w.jobs[i].min_gpus;
        *self.queue_min.entry(m).or_insert(0) += 1;
        self.arrival_min = self.arrival_min.min(if self.w.preemptive { 0 } else { m });
        self.mark_change();
    }

    pub(super) fn dequeue(&mut self, i: usize) -> PendingJob {
        let pos = self.qpos[i] as usize;
        let p = self.queue.swap_remove(pos);
        if let Some(moved) = self.queue.get(pos) {
            self.qpos[(moved.id - 1) as usize] = pos as u32;
        }
        self.qpos[i] = NONE;
        let m = self.w.jobs[i].min_gpus;
        if let Some(c) = self.queue_min.get_mut(&m) {
            *c -= 1;
            if *c == 0 {
                self.queue_min.remove(&m);
            }
        }
        p
    }

    fn free_gpus(&self) -> u64 {
        self.cl.total_gpus.saturating_sub(self.busy)
    }

    fn should_run(&self) -> bool {
        if self.queue.is_empty() {
            return false;
        }
        if self.rerun {
            return true;
        }
        let free = self.free_gpus();
        if u64::from(self.arrival_min) <= free {
            return true;
        }
        self.freed
            && self
                .queue_min
                .keys()
                .next()
                .is_some_and(|&m| u64::from(m) <= free)
    }

    pub(super) fn cycle(&mut self, t: i64) {
        self.advance(t);
        let run = self.should_run();
        let had_queue = !self.queue.is_empty();
        self.change_at = None;
        self.freed = false;
        self.arrival_min = u32::MAX;
        self.rerun = false;
        self.last_cycle = Some(t);
        if !run {
            if had_queue {
                self.stats.skipped += 1;
            }
            return;
        }
        self.stats.cycles += 1;
        if self.multi_ns && self.policy == Policy::Muster {
            self.snap.usage = decay_usage(
                &self.snap.usage,
                &self.snap.running,
                self.usage_at,
                t,
                self.cfg.fair_share_half_life_secs,
            );
            self.usage_at = t;
        }
        let picked = self.fill_pending(t);
        let t0 = Instant::now();
        let d = self
            .policy
            .decide(&self.prep, &mut self.occ, &self.snap, t, &self.cfg);
        self.stats.policy_secs += t0.elapsed().as_secs_f64();
        self.return_pending(picked.as_deref());
        let started = !d.starts.is_empty();
        self.apply(d, t);
        if picked.is_some() {
            self.stats.truncated += 1;
            if started {
                self.rerun = true;
                self.mark_change();
            }
        }
        self.sample();
    }

    /// Moves the waiting jobs the policy sees into the snapshot; returns the queue positions
    /// taken when the queue was cut to `max_queue`.
    fn fill_pending(&mut self, t: i64) -> Option<Vec<usize>> {
        if self.queue.len() <= self.opts.max_queue {
            std::mem::swap(&mut self.snap.pending, &mut self.queue);
            return None;
        }
        // The core's order: tier, priority, submit time, id.
        let active = self
            .queue
            .iter()
            .map(|j| j.namespace.as_str())
            .chain(self.snap.running.iter().map(|j| j.namespace.as_str()));
        let fs = if self.multi_ns {
            fair_share_factors(&self.snap.usage, active, &self.cfg)
        } else {
            BTreeMap::new()
        };
        let inputs: Vec<QueueInput> = self
            .queue
            .iter()
            .map(|j| {
                let sj = &self.w.jobs[(j.id - 1) as usize];
                QueueInput {
                    job: j,
                    tier: j
                        .partition
                        .and_then(|p| self.snap.partitions.get(p as usize))
                        .map(|p| p.priority_tier)
                        .unwrap_or(0),
                    limit_secs: sj.limit,
                    gang: sj.gang,
                    size_fraction: sj.size_fraction,
                }
            })
            .collect();
        let mut keyed = queue_keys(&inputs, &self.snap.running, &fs, t, &self.cfg);
        let k = self.opts.max_queue;
        if k > 0 {
            keyed.select_nth_unstable(k - 1);
        }
        keyed.truncate(k);
        let picked: Vec<usize> = keyed.iter().map(|x| x.5).collect();
        self.snap.pending.clear();
        for &pos in &picked {
            self.snap.pending.push(std::mem::take(&mut self.queue[pos]));
        }
        Some(picked)
    }

    fn return_pending(&mut self, picked: Option<&[usize]>) {
        match picked {
            None => std::mem::swap(&mut self.snap.pending, &mut self.queue),
            Some(ps) => {
                for (k, &pos) in ps.iter().enumerate() {
                    self.queue[pos] = std::mem::take(&mut self.snap.pending[k]);
                }
                self.snap.pending.clear();
            }
        }
    }
}

//! What the cycle holds on nodes now and later: starts, releases of running jobs, claims of
//! reservations, and the partitions' future events built from them.

use super::*;

impl Engine<'_> {
    /// Marks resources of node `n` busy now (an existing allocation, or a start), returning
    /// what was taken. `gpus` is a position mask; `whole` takes the whole node.
    pub fn hold(&mut self, n: NodeId, gpus: u64, cpu: u64, mem: u64, whole: bool) -> Res {
        self.save(n);
        let ns = &mut self.nodes[n as usize];
        let (taken, _) = ns.take(gpus, cpu, mem, whole);
        let sched = ns.sched;
        if !ns.claims.is_empty() {
            ns.rebuild_profile(self.now);
        }
        self.touch(n, if sched { taken.gpus } else { 0 });
        taken
    }

    /// Records that `res` of node `n` comes back at `t` (from running job `job`); `NEVER`
    /// is kept too, so that preempting the job can bring it forward.
    pub fn release_at(&mut self, n: NodeId, t: i64, res: Res, job: u32) {
        if res == Res::default() {
            return;
        }
        let t = t.max(self.now + 1);
        self.save(n);
        let ns = &mut self.nodes[n as usize];
        ns.releases.push((t, res, job));
        if !ns.claims.is_empty() {
            ns.rebuild_profile(self.now);
        }
        if t != NEVER {
            self.push_event(n, Event::new(t, 0, res, Res::default()));
        }
    }

    /// Brings the release of running job `job` on node `n` forward to `t` (preemption).
    pub fn move_release(&mut self, n: NodeId, job: u32, t: i64) {
        let t = t.max(self.now + 1);
        if !self.nodes[n as usize]
            .releases
            .iter()
            .any(|r| r.2 == job && r.0 > t)
        {
            return;
        }
        self.save(n);
        let mut moved = Vec::new();
        for r in &mut self.nodes[n as usize].releases {
            if r.2 == job && r.0 > t {
                moved.push((r.0, r.1));
                r.0 = t;
            }
        }
        if moved.is_empty() {
            return;
        }
        let ns = &mut self.nodes[n as usize];
        if !ns.claims.is_empty() {
            ns.rebuild_profile(self.now);
        }
        for (old, res) in moved {
            // Cancel the old event (if it was a real time) and add the new one.
            if old != NEVER {
                self.push_event(n, Event::new(old, 0, Res::default(), res));
            }
            self.push_event(n, Event::new(t, 0, res, Res::default()));
        }
    }

    /// Sets the release of running job `job` on node `n` to `t` whether earlier or later (a
    /// job this cycle stops: it gives its resources back when its grace time ends). Only
    /// before the partitions' future events are built.
    pub fn set_release(&mut self, n: NodeId, job: u32, t: i64) {
        let t = t.max(self.now + 1);
        self.save(n);
        let mut changed: SmallVec<[(i64, Res); 2]> = SmallVec::new();
        for r in &mut self.nodes[n as usize].releases {
            if r.2 == job && r.0 != t {
                changed.push((r.0, r.1));
                r.0 = t;
            }
        }
        let ns = &mut self.nodes[n as usize];
        if !ns.claims.is_empty() {
            ns.rebuild_profile(self.now);
        }
        for (old, res) in changed {
            if old != NEVER {
                self.push_event(n, Event::new(old, 0, Res::default(), res));
            }
            self.push_event(n, Event::new(t, 0, res, Res::default()));
        }
    }

    fn push_event(&mut self, n: NodeId, e: Event) {
        self.event_log.push((n, e));
        for &(p, pos) in self.member_of.of(n) {
            let ps = &mut self.parts[p as usize];
            if ps.events.is_some() {
                ps.new_events.push(Event { pos, ..e });
            }
        }
    }

    /// Brings the partition's future events up to date: `events` and `new_events` are then
    /// both sorted, and together hold every change.
    pub fn events(&mut self, part: u32) {
        let now = self.now;
        if self.parts[part as usize].events.is_none()
            && let Some(base) = self.base_events.get_mut(part as usize)
        {
            let sorted = base.settle();
            // Releases at or before now are read as now + 1 (see `release_at`); a list with
            // any is built afresh below.
            if sorted.first().is_none_or(|e| e.time > now) {
                let events = sorted.to_vec();
                let mut recent = Vec::new();
                for &(n, e) in &self.event_log {
                    for &(p, pos) in self.member_of.of(n) {
                        if p == part {
                            recent.push(Event { pos, ..e });
                        }
                    }
                }
                let ps = &mut self.parts[part as usize];
                ps.events = Some(events);
                ps.new_events = recent;
            }
        }
        if self.parts[part as usize].events.is_none() {
            let ps = &self.parts[part as usize];
            let mut ev = Vec::new();
            for (pos, &n) in ps.tree.nodes.iter().enumerate() {
                let ns = &self.nodes[n as usize];
                for &(t, r, _) in ns.releases.iter().filter(|r| r.0 != NEVER) {
                    // A base state's releases are not clamped to the cycle's time.
                    ev.push(Event::new(t.max(now + 1), pos as u32, r, Res::default()));
                }
                for c in &ns.claims {
                    if c.start > now {
                        ev.push(Event::new(c.start, pos as u32, Res::default(), c.res));
                    }
                    if c.end > now && c.end != NEVER {
                        ev.push(Event::new(c.end, pos as u32, c.res, Res::default()));
                    }
                }
            }
            ev.sort_unstable_by_key(|e| (e.time, e.pos));
            let ps = &mut self.parts[part as usize];
            ps.events = Some(ev);
            ps.new_events.clear();
        }
        let ps = &mut self.parts[part as usize];
        let main = ps.events.as_ref().map_or(0, Vec::len);
        ps.new_events.sort_unstable_by_key(|e| (e.time, e.pos));
        if ps.new_events.len() * 8 > main {
            // Fold the recent changes into the main list once they are many.
            let add = std::mem::take(&mut ps.new_events);
            let old = ps.events.take().unwrap_or_default();
            let mut merged = Vec::with_capacity(old.len() + add.len());
            let (mut i, mut j) = (0, 0);
            while i < old.len() || j < add.len() {
                if j >= add.len()
                    || (i < old.len() && (old[i].time, old[i].pos) <= (add[j].time, add[j].pos))
                {
                    merged.push(old[i]);
                    i += 1;
                } else {
                    merged.push(add[j]);
                    j += 1;
                }
            }
            ps.events = Some(merged);
        }
    }

    fn touch(&mut self, n: NodeId, gpus_taken: u32) {
        for &(p, pos) in self.member_of.of(n) {
            let ps = &mut self.parts[p as usize];
            let leaf = ps.tree.leaf_of[pos as usize] as usize;
            ps.leaf_version[leaf] = ps.leaf_version[leaf].wrapping_add(1);
            ps.version += 1;
            ps.changed.push(leaf as u32);
            ps.free_gpus = ps.free_gpus.saturating_sub(u64::from(gpus_taken));
        }
    }

    /// Adds a hold on node `n`.
    pub fn claim(&mut self, n: NodeId, c: Claim) {
        self.save(n);
        let now = self.now;
        if c.start > now {
            self.event_log
                .push((n, Event::new(c.start, 0, Res::default(), c.res)));
        }
        if c.end > now && c.end != NEVER {
            self.event_log
                .push((n, Event::new(c.end, 0, c.res, Res::default())));
        }
        let ns = &mut self.nodes[n as usize];
        ns.claims.push(c);
        ns.rebuild_profile(now);
        for &(p, pos) in self.member_of.of(n) {
            let ps = &mut self.parts[p as usize];
            let leaf = ps.tree.leaf_of[pos as usize] as usize;
            let starts = &mut ps.leaf_claims[leaf];
            let at = starts.partition_point(|&t| t <= c.start);
            starts.insert(at, c.start);
            ps.leaf_version[leaf] = ps.leaf_version[leaf].wrapping_add(1);
            ps.version += 1;
            // Logged like a start: kept per-leaf aggregates (the lookahead's) read it again.
            ps.changed.push(leaf as u32);
            if let Err(k) = ps.claimed_leaves.binary_search(&(leaf as u32)) {
                ps.claimed_leaves.insert(k, leaf as u32);
            }
            if c.start > now {
                let k = ps.claim_starts.partition_point(|&x| x <= (c.start, pos));
                ps.claim_starts.insert(k, (c.start, pos));
            }
            if ps.events.is_some() {
                if c.start > now {
                    ps.new_events
                        .push(Event::new(c.start, pos, Res::default(), c.res));
                }
                if c.end != NEVER {
                    ps.new_events
                        .push(Event::new(c.end, pos, c.res, Res::default()));
                }
            }
        }
    }
}

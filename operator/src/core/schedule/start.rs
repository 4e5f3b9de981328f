//! Starting a job now: finding room for it at the cycle's time (weighing a choice of leaves
//! against the later gangs) and binding its GPUs and tasks.

use super::*;

/// Candidate leaves a placement weighs against the later gangs.
const LOOKAHEAD_LEAVES: usize = 8;

/// `total` split into `k` near-equal parts; part `i` (the first ones get the remainder).
fn split(total: u64, k: u32, i: u32) -> u64 {
    let k = u64::from(k.max(1));
    total / k + u64::from(u64::from(i) < total % k)
}

impl Cycle<'_> {
    pub(super) fn try_now(
        &mut self,
        jc: &JobCtx,
        alt: &Alt,
        end: i64,
        max_leaves: Option<u32>,
    ) -> Option<Selection> {
        let cid = alt.cid;
        let d = &jc.demand;
        let part = jc.part as usize;
        if d.min_gpus() > self.e.parts[part].free_gpus {
            return None;
        }
        let key = (d.need(), d.min_nodes, d.max_nodes, end, max_leaves);
        let dominated = |f: &(u32, u32, u32, i64, Option<u32>)| {
            key.0 >= f.0
                && key.1 >= f.1
                && key.2 <= f.2
                && key.3 >= f.3
                && match (f.4, key.4) {
                    (None, _) => true,
                    (Some(a), Some(b)) => b <= a,
                    (Some(_), None) => false,
                }
        };
        let c = &self.e.classes[cid as usize];
        if c.failures.iter().any(dominated)
            || c.room.iter().any(|&(e, u, n)| {
                end >= e && (u64::from(d.need()) > u || u64::from(d.min_nodes) > n)
            })
        {
            return None;
        }
        let counts = self.count_masks(alt);
        let mut buf = std::mem::take(&mut self.buf);
        self.e.leaf_aggs_now(cid, end, &mut buf);
        let e = &self.e;
        let c = &e.classes[cid as usize];
        let ps = &e.parts[part];
        let inp = SelectInput {
            tree: ps.tree,
            levels: ps.levels,
            leaf_aggs: LeafView {
                base: &c.base,
                patch: &buf,
            },
            demand: d,
            max_leaves,
            counts: &counts,
            placement: e.placement,
            order: ps.node_order,
        };
        let node_fn = |p: u32| e.units_now(c, p, end);
        let sel = select(&inp, &node_fn);
        if let Some(first) = sel {
            // A choice of leaves, and later gangs of the cycle that a leaf may hold: weigh
            // the candidates against them.
            let one_leaf = first
                .iter()
                .all(|&(p, _)| ps.tree.leaf_of[p as usize] == ps.tree.leaf_of[first[0].0 as usize]);
            let view = inp.leaf_aggs;
            // The leaf scan last: with no later gang (every one-node job's case) it is not
            // needed, and it reads every leaf.
            let no_choice = || {
                view.iter()
                    .filter(|a| a.units >= d.need() && a.nodes >= d.min_nodes)
                    .nth(1)
                    .is_none()
            };
            if e.placement != Placement::Topology
                || !one_leaf
                || !counts.is_empty()
                || self.gangs.partition_point(|g| g.pos <= self.at) >= self.gangs.len()
                || no_choice()
            {
                self.buf = buf;
                return Some(first);
            }
            let ahead_ks = self.lookahead(jc.part);
            if ahead_ks.is_empty() {
                self.buf = buf;
                return Some(first);
            }
            // The lookahead may have refreshed this class's base (other classes share no
            // state with it, but its leaves could be patched again): read it afresh.
            self.e.leaf_aggs_now(cid, end, &mut buf);
            let e = &self.e;
            let c = &e.classes[cid as usize];
            let ps = &e.parts[part];
            let ahead: Vec<&Ahead> = ahead_ks
                .iter()
                .filter_map(|&k| self.gangs[k].ahead.as_ref().map(|(_, _, a)| a))
                .collect();
            let penalty = |s: &Selection| -> u64 { e.lookahead_penalty(d, s, &ahead, ps) };
            let inp = SelectInput {
                tree: ps.tree,
                levels: ps.levels,
                leaf_aggs: LeafView {
                    base: &c.base,
                    patch: &buf,
                },
                demand: d,
                max_leaves,
                counts: &counts,
                placement: e.placement,
                order: ps.node_order,
            };
            let node_fn = |p: u32| e.units_now(c, p, end);
            let sel = select_weighed(&inp, &node_fn, &penalty, LOOKAHEAD_LEAVES).or(Some(first));
            self.buf = buf;
            return sel;
        }
        let view = LeafView {
            base: &c.base,
            patch: &buf,
        };
        let (units, nodes) = view.iter().fold((0u64, 0u64), |(u, n), a| {
            (u + u64::from(a.units), n + u64::from(a.nodes))
        });
        self.buf = buf;
        // Keep the least room seen per window end (a few distinct time limits in practice).
        let room = &mut self.e.classes[cid as usize].room;
        match room.binary_search_by_key(&end, |r| r.0) {
            Ok(k) => {
                room[k].1 = room[k].1.min(units);
                room[k].2 = room[k].2.min(nodes);
            }
            Err(k) if room.len() < 32 => room.insert(k, (end, units, nodes)),
            Err(_) => {}
        }
        // A failure is remembered for the class only without node counts (`--nodelist`, a
        // constraint's `[a*2&b*2]`): the class does not include them, and a job of the class
        // without them may fit where this one could not.
        if !counts.is_empty() {
            return None;
        }
        let f = &mut self.e.classes[cid as usize].failures;
        if f.len() < 8 {
            f.push(key);
        } else {
            f[(key.0 as usize) % 8] = key;
        }
        None
    }

    /// Binds GPUs and records the start; `None` (nothing held) if some node cannot give the
    /// GPUs after all (a counting model disagreeing with the GPU masks — never expected).
    pub(super) fn commit_start(
        &mut self,
        job: &PendingJob,
        jc: &JobCtx,
        alt: &Alt,
        sel: &Selection,
    ) -> Option<Start> {
        let d = &jc.demand;
        let part = jc.part as usize;
        let end = end_of(self.now, jc.limit);
        let tree_nodes = &self.e.parts[part].tree.nodes;
        let leaf_of = &self.e.parts[part].tree.leaf_of;
        let mut picks: Vec<(NodeId, u32, u32)> = sel
            .iter()
            .map(|&(p, u)| (tree_nodes[p as usize], u, leaf_of[p as usize]))
            .collect();
        let names = &self.snap.nodes;
        sort_by_name(&mut picks, |p| &names[p.0 as usize].name);
        let mut leaves: Vec<u32> = picks.iter().map(|p| p.2).collect();
        leaves.sort_unstable();
        leaves.dedup();
        let filter = self.e.classes[alt.cid as usize].filter as usize;
        let bind = self.e.classes[alt.cid as usize].bind.clone();
        let mut tasks = Vec::new();
        let mut nodes = Vec::with_capacity(picks.len());
        // (node, GPUs, CPU, memory) to hold once every node is bound.
        let mut holds: Vec<(NodeId, u64, u64, u64)> = Vec::with_capacity(picks.len());
        let mut rank = 0u32;
        for (node_rank, &(n, units, _)) in picks.iter().enumerate() {
            nodes.push(n);
            let ns = &self.e.nodes[n as usize];
            let total = ns.total;
            let pos = self.e.member_of.position(n, part).unwrap_or(0);
            let f = &self.e.filters[filter];
            let usable = if f.all {
                ns.free_mask
            } else {
                ns.free_mask & f.gpu_mask[pos as usize]
            };
            let k = d.tasks_on_node(units);
            let node_gpus = d.unit.gpus * units + d.node.gpus;
            let node_cpu = d.unit.cpu * u64::from(units) + d.node.cpu;
            let node_mem = if d.whole_mem {
                total.mem
            } else {
                d.unit.mem * u64::from(units) + d.node.mem
            };
            let gt = &self.e.gpu_trees[ns.gtree as usize];
            let masks: Vec<u64> = match &bind {
                Some(sets) => (0..k as usize).map(|i| sets[i % sets.len()]).collect(),
                // More tasks than GPUs on the node: they share the node's GPUs (each task
                // sees all of them), as Slurm's tasks do.
                None if node_gpus > 0 && k > node_gpus => {
                    let m = gt.pick_tasks(&[node_gpus], usable)?;
                    vec![m[0]; k as usize]
                }
                None => {
                    let counts: Vec<u32> = (0..k)
                        .map(|i| split(u64::from(node_gpus), k, i) as u32)
                        .collect();
                    gt.pick_tasks(&counts, usable)?
                }
            };
            let mut all = 0u64;
            for (local, m) in masks.iter().enumerate() {
                all |= m;
                tasks.push(TaskAssignment {
                    rank,
                    node: n,
                    node_rank: node_rank as u32,
                    local_rank: local as u32,
                    gpus: gt.indices(*m),
                    cpu_millis: split(node_cpu, k, local as u32),
                    memory_mib: split(node_mem, k, local as u32),
                });
                rank += 1;
            }
            holds.push((n, all, node_cpu, node_mem));
        }
        for (n, all, cpu, mem) in holds {
            let taken = self.e.hold(n, all, cpu, mem, d.exclusive);
            self.e.release_at(n, end, taken, u32::MAX);
            if let (Some((user, exclusive_user)), Some(users)) = (jc.user, &mut self.e.users) {
                users[n as usize].count(user, exclusive_user, true);
            }
            if let Some(x) = &mut self.e.ext {
                x.add(n, jc.part, STARTED_NOW, end);
            }
        }
        Some(Start {
            job: job.id,
            nodes,
            tasks,
            time_limit: jc.limit,
            exclusive: d.exclusive,
            leaves: leaves.len() as u32,
            // The caller, which ordered the queue, sets it.
            priority: 0,
        })
    }
}

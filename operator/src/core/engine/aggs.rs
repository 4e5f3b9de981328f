//! Per-leaf aggregates of a class for a job starting now (a base per class kept current
//! with the change log, patched where holds begin) and its capacities with every node idle.

use super::*;

impl Engine<'_> {
    /// Units of class `c` on position `pos` now, for a job running until `end`.
    pub fn units_now(&self, c: &Class, pos: u32, end: i64) -> (u32, u32) {
        let n = self.parts[c.part as usize].tree.nodes[pos as usize];
        let ns = &self.nodes[n as usize];
        if !ns.sched {
            return (0, 0);
        }
        if let Some((user, excl)) = c.gate
            && let Some(users) = &self.users
            && !users[n as usize].admit(user, excl)
        {
            return (0, 0);
        }
        if let Some(x) = &self.ext
            && !x.admits(c.part, n, self.now, self.now, &|_| false)
        {
            return (0, 0);
        }
        let avail = ns.window_now(end);
        (
            self.units_for_count(c, pos, avail, ns.free_mask, ns.total),
            slack_of(c, avail),
        )
    }

    fn leaf_agg_now(&self, c: &Class, leaf: u32, end: i64) -> LeafAgg {
        let tree = &self.parts[c.part as usize].tree;
        let mut agg = LeafAgg::default();
        for pos in tree.leaf(leaf).nodes.clone() {
            let (u, slack) = self.units_now(c, pos, end);
            if u > 0 {
                agg.units += u;
                agg.nodes += 1;
                agg.slack += u64::from(slack);
            }
        }
        agg
    }

    /// Leaf `leaf`'s base aggregate for class `cid` (runs ending whenever), recording the
    /// units per node.
    pub(super) fn base_leaf(&mut self, cid: u32, leaf: u32) {
        let c = &self.classes[cid as usize];
        let tree = &self.parts[c.part as usize].tree;
        let mut agg = LeafAgg::default();
        let range = tree.leaf(leaf).nodes.clone();
        let mut units: SmallVec<[u32; 64]> = SmallVec::new();
        for pos in range.clone() {
            let (u, slack) = self.units_now(c, pos, NEVER);
            units.push(u);
            if u > 0 {
                agg.units += u;
                agg.nodes += 1;
                agg.slack += u64::from(slack);
            }
        }
        let c = &mut self.classes[cid as usize];
        c.base[leaf as usize] = agg;
        c.node_units[range.start as usize..range.end as usize].copy_from_slice(&units);
    }

    /// Brings class `cid`'s `base` up to date with the partition's change log.
    pub fn catch_up_base(&mut self, cid: u32) {
        let part = self.classes[cid as usize].part as usize;
        let nl = self.parts[part].tree.leaves.len();
        let logged = self.parts[part].changed.len();
        let seen = self.classes[cid as usize].base_seen;
        if seen == usize::MAX {
            for l in 0..nl {
                self.base_leaf(cid, l as u32);
            }
        } else if seen < logged {
            let mut dirty: Vec<u32> = self.parts[part].changed[seen..logged].to_vec();
            if dirty.len() > 1 {
                dirty.sort_unstable();
                dirty.dedup();
            }
            for l in dirty {
                if self.parts[part].leaf_claims[l as usize].is_empty() {
                    self.base_leaf(cid, l);
                }
            }
        }
        self.classes[cid as usize].base_seen = logged;
    }

    /// Leaf aggregates of class `cid` for a job starting now and running until `end`: the
    /// class's `base` (brought up to date here) with `patch` holding the leaves that have
    /// holds, read for this window.
    pub fn leaf_aggs_now(&mut self, cid: u32, end: i64, patch: &mut Vec<(u32, LeafAgg)>) {
        self.catch_up_base(cid);
        let part = self.classes[cid as usize].part as usize;
        patch.clear();
        for i in 0..self.parts[part].claimed_leaves.len() {
            let l = self.parts[part].claimed_leaves[i];
            patch.push((l, self.held_leaf_agg(cid, l, end)));
        }
    }

    /// Leaf `l` (one with holds) of class `cid` for a job starting now and running until
    /// `end`, read through the class's cache (valid while the leaf is unchanged and the
    /// same holds begin before `end`).
    pub fn held_leaf_agg(&mut self, cid: u32, l: u32, end: i64) -> LeafAgg {
        let l = l as usize;
        let ps = &self.parts[self.classes[cid as usize].part as usize];
        let ver = ps.leaf_version[l];
        let ways = &self.classes[cid as usize].cache[l];
        if let Some(e) = ways
            .iter()
            .find(|e| e.ver == ver && e.lo < end && end <= e.hi)
        {
            return e.agg;
        }
        // The ends for which the same holds matter: between consecutive hold starts.
        let starts = &ps.leaf_claims[l];
        let i = starts.partition_point(|&t| t < end);
        let lo = if i == 0 { i64::MIN } else { starts[i - 1] };
        let hi = starts.get(i).copied().unwrap_or(i64::MAX);
        let agg = self.leaf_agg_now(&self.classes[cid as usize], l as u32, end);
        let ways = &mut self.classes[cid as usize].cache[l];
        // Replace an outdated entry, else one chosen by the end (entries differ by end).
        let slot = ways
            .iter()
            .position(|e| e.ver != ver)
            .unwrap_or((end as usize) % CACHE_WAYS);
        ways[slot] = CacheEntry { ver, lo, hi, agg };
        agg
    }

    /// Capacity of class `cid` with every node idle, for (schedulable nodes with healthy
    /// GPUs, all nodes with all GPUs).
    pub fn statics(&mut self, cid: u32) -> &(Caps, Caps) {
        if self.classes[cid as usize].statics.is_none() {
            let key = self.cache_key(&self.classes[cid as usize].key);
            let c = &self.classes[cid as usize];
            let st = match self.statics_cache.get(&key) {
                Some(st) => st.clone(),
                None => {
                    let tree = &self.parts[c.part as usize].tree;
                    let mut up = Vec::new();
                    let mut all = Vec::new();
                    for (pos, &n) in tree.nodes.iter().enumerate() {
                        let ns = &self.nodes[n as usize];
                        all.push(self.units_for_count(
                            c,
                            pos as u32,
                            ns.all_total,
                            ns.all_mask,
                            ns.all_total,
                        ));
                        up.push(if ns.sched {
                            self.units_for_count(c, pos as u32, ns.total, ns.healthy_mask, ns.total)
                        } else {
                            0
                        });
                    }
                    let st = Arc::new((Caps::new(up), Caps::new(all)));
                    self.statics_cache.insert(key, st.clone());
                    st
                }
            };
            self.classes[cid as usize].statics = Some(st);
        }
        self.classes[cid as usize]
            .statics
            .as_deref()
            .expect("just set")
    }
}

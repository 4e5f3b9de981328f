//! Interned node filters and job classes, and how many units of a class fit on a node.

use super::*;

impl Engine<'_> {
    /// The filter id for a partition, GPU type and constraint (interned).
    pub fn filter(
        &mut self,
        part: u32,
        gpu_type: Option<&str>,
        constraint_key: &str,
        node_ok: &dyn Fn(&Node) -> bool,
    ) -> u32 {
        let ty_in = gpu_type.unwrap_or("");
        let plain = ty_in.is_empty() && constraint_key.is_empty();
        if plain && let Some(id) = self.plain_filter[part as usize] {
            return id;
        }
        if let Some(id) = self.filter_keys.iter().position(|(p, t, c)| {
            *p == part && t.eq_ignore_ascii_case(ty_in) && c == constraint_key
        }) {
            return id as u32;
        }
        let ty = ty_in.to_ascii_lowercase();
        let tree = self.parts[part as usize].tree;
        if plain {
            self.filters.push(Filter {
                all: true,
                ok: vec![true; tree.nodes.len()],
                gpu_mask: Vec::new(),
                typed: false,
            });
            self.filter_keys.push((part, String::new(), String::new()));
            let id = self.filters.len() as u32 - 1;
            self.plain_filter[part as usize] = Some(id);
            return id;
        }
        let mut ok = Vec::with_capacity(tree.nodes.len());
        let mut gpu_mask = Vec::with_capacity(tree.nodes.len());
        for &n in &tree.nodes {
            let node = &self.snap.nodes[n as usize];
            let gt = &self.gpu_trees[self.nodes[n as usize].gtree as usize];
            let mut m = 0u64;
            for (p, &idx) in gt.index.iter().enumerate() {
                let matches = ty.is_empty()
                    || node
                        .gpus
                        .iter()
                        .any(|g| g.index == idx && g.model.to_ascii_lowercase().contains(&ty));
                if matches {
                    m |= 1 << p;
                }
            }
            let good = node_ok(node) && (ty.is_empty() || m != 0);
            ok.push(good);
            gpu_mask.push(m);
        }
        self.filters.push(Filter {
            all: false,
            ok,
            gpu_mask,
            typed: !ty.is_empty(),
        });
        self.filter_keys
            .push((part, ty, constraint_key.to_string()));
        let id = self.filters.len() as u32 - 1;
        if plain {
            self.plain_filter[part as usize] = Some(id);
        }
        id
    }

    /// The class id for a demand (interned), with the user rule `gate` for placements now.
    pub fn class(
        &mut self,
        part: u32,
        filter: u32,
        d: &Demand,
        bind: Option<Vec<u64>>,
        gate: Gate,
    ) -> u32 {
        let key = ClassKey {
            part,
            filter,
            unit: d.unit,
            node: d.node,
            whole_mem: d.whole_mem,
            exclusive: d.exclusive,
            per_node: d.per_node_cap(),
            bundles: matches!(d.mode, Mode::Bundles { .. }),
            bind: bind.clone(),
            gate,
        };
        if let Some(&id) = self.class_ids.get(&key) {
            return id;
        }
        let cached = if self.base_cache.is_empty() {
            None
        } else {
            let k = self.cache_key(&key);
            self.base_cache.remove(&k)
        };
        let nl = self.parts[part as usize].tree.leaves.len();
        self.classes.push(Class {
            key: key.clone(),
            part,
            filter,
            demand: d.clone(),
            bind,
            gate,
            base: vec![LeafAgg::default(); nl],
            node_units: vec![0; self.parts[part as usize].tree.nodes.len()],
            base_seen: usize::MAX,
            cache: vec![[CacheEntry::default(); CACHE_WAYS]; nl],
            statics: None,
            failures: Vec::new(),
            room: Vec::new(),
        });
        let id = self.classes.len() as u32 - 1;
        self.class_ids.insert(key, id);
        if let Some(cb) = cached {
            // Leaves logged since the base was taken, and those this cycle changed, are read
            // again; the rest are as the base says (as a fresh class would compute them).
            let mut dirty: Vec<u32> = self
                .leaf_log
                .get(part as usize)
                .map(|l| l[cb.seen.min(l.len())..].to_vec())
                .unwrap_or_default();
            let logged = self.parts[part as usize].changed.len();
            dirty.extend_from_slice(&self.parts[part as usize].changed[..logged]);
            dirty.sort_unstable();
            dirty.dedup();
            let c = &mut self.classes[id as usize];
            c.base = cb.base;
            c.node_units = cb.node_units;
            for l in dirty {
                self.base_leaf(id, l);
            }
            self.classes[id as usize].base_seen = logged;
        }
        id
    }

    /// The key of a class's idle capacities and cached base: its key with the filter spelled
    /// out (filter ids are per cycle).
    pub(super) fn cache_key(&self, key: &ClassKey) -> (ClassKey, String, String) {
        let (_, ty, ck) = &self.filter_keys[key.filter as usize];
        (
            ClassKey {
                filter: u32::MAX,
                ..key.clone()
            },
            ty.clone(),
            ck.clone(),
        )
    }

    /// Units of class `c` that fit on tree position `pos` given `avail` (by count) and the
    /// GPUs that may be used (`mask`; all ones for a future time, when GPUs are counted).
    pub fn units_for_count(&self, c: &Class, pos: u32, avail: Res, mask: u64, total: Res) -> u32 {
        let f = &self.filters[c.filter as usize];
        if !f.all && !f.ok[pos as usize] {
            return 0;
        }
        let mut a = avail;
        if f.typed {
            a.gpus = a.gpus.min((mask & f.gpu_mask[pos as usize]).count_ones());
        }
        // Only an exclusive job asks whether the node is idle.
        let idle = !c.demand.exclusive || avail == total;
        let mut k = c.demand.units_fitting(a, total, idle);
        if let Some(sets) = &c.bind {
            // map_gpu/mask_gpu: local task i uses sets[i % len]; tasks may not share GPUs.
            let usable = if f.all {
                mask
            } else {
                mask & f.gpu_mask[pos as usize]
            };
            let tasks = c.demand.tasks_on_node(k.max(1)).max(k);
            let mut used = 0u64;
            let mut ok = 0;
            for i in 0..tasks {
                let s = sets[i as usize % sets.len()];
                if s & !usable != 0 || s & used != 0 {
                    break;
                }
                used |= s;
                ok += 1;
            }
            k = match c.demand.mode {
                Mode::Bundles { tasks_per_node } => {
                    if ok >= tasks_per_node {
                        k
                    } else {
                        0
                    }
                }
                Mode::Units { .. } => k.min(ok),
            };
        }
        k
    }
}

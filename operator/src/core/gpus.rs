//! Choosing GPUs within a node.
//!
//! A node's GPUs form a small hierarchy: the node, its NUMA nodes, and within a NUMA node the
//! groups of GPUs that share an NVLink island or a PCIe switch (`NV#`, `PIX`, `PXB` links),
//! when those groups are smaller than the NUMA node. Picking `g` GPUs walks down the
//! hierarchy like the switch tree: the smallest group that still holds `g` free GPUs (best
//! fit, so big groups stay whole for bigger tasks); when none does, the largest groups are
//! taken whole until the rest fits one group. Each task of a node is picked in turn from the
//! node's share, so every task's GPUs are as close as the free GPUs allow and no GPU is given
//! to two tasks.

use super::node::{Link, Node};

/// The GPU hierarchy of one node, by GPU *position* (index into the node's GPUs sorted by
/// NVML index).
#[derive(Clone, Debug)]
pub struct GpuTree {
    /// NVML index of each position.
    pub index: Vec<u32>,
    /// Group masks; `groups[0]` is the whole node.
    groups: Vec<Group>,
}

#[derive(Clone, Debug)]
struct Group {
    mask: u64,
    children: Vec<usize>,
}

fn components(members: &[usize], close: impl Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
    let mut seen = vec![false; members.len()];
    let mut out = Vec::new();
    for s in 0..members.len() {
        if seen[s] {
            continue;
        }
        seen[s] = true;
        let mut comp = vec![members[s]];
        let mut stack = vec![s];
        while let Some(a) = stack.pop() {
            for b in 0..members.len() {
                if !seen[b] && close(members[a], members[b]) {
                    seen[b] = true;
                    comp.push(members[b]);
                    stack.push(b);
                }
            }
        }
        comp.sort_unstable();
        out.push(comp);
    }
    out.sort();
    out
}

fn mask_of(ps: &[usize]) -> u64 {
    ps.iter().fold(0u64, |m, &p| m | (1u64 << p))
}

impl GpuTree {
    /// Builds the hierarchy of `node`'s GPUs (at most 64 are used).
    pub fn new(node: &Node) -> GpuTree {
        let mut order: Vec<usize> = (0..node.gpus.len()).collect();
        order.sort_by_key(|&i| node.gpus[i].index);
        order.truncate(64);
        let index: Vec<u32> = order.iter().map(|&i| node.gpus[i].index).collect();
        let n = order.len();
        let link = |a: usize, b: usize| -> Link { node.link(order[a], order[b]) };
        let positions: Vec<usize> = (0..n).collect();
        // NUMA groups: from the GPUs' NUMA ids, else from SYS links.
        let numa_known = order.iter().all(|&i| node.gpus[i].numa.is_some());
        let numa_groups = if numa_known {
            let mut ids: Vec<i32> = order
                .iter()
                .map(|&i| node.gpus[i].numa.unwrap_or(0))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids.iter()
                .map(|id| {
                    positions
                        .iter()
                        .copied()
                        .filter(|&p| node.gpus[order[p]].numa == Some(*id))
                        .collect::<Vec<_>>()
                })
                .collect()
        } else {
            components(&positions, |a, b| link(a, b) != Link::Sys)
        };
        let mut groups = vec![Group {
            mask: mask_of(&positions),
            children: Vec::new(),
        }];
        let add_level = |parent: usize, sets: Vec<Vec<usize>>, groups: &mut Vec<Group>| {
            let mut ids = Vec::new();
            for s in sets {
                groups.push(Group {
                    mask: mask_of(&s),
                    children: Vec::new(),
                });
                ids.push(groups.len() - 1);
            }
            groups[parent].children = ids.clone();
            ids
        };
        let numa_ids = if numa_groups.len() > 1 {
            add_level(0, numa_groups.clone(), &mut groups)
        } else {
            vec![0]
        };
        for (gid, members) in numa_ids.into_iter().zip(if numa_groups.len() > 1 {
            numa_groups
        } else {
            vec![positions.clone()]
        }) {
            let close = components(&members, |a, b| {
                link(a, b).distance() <= Link::Pxb.distance()
            });
            if close.len() > 1 {
                add_level(gid, close, &mut groups);
            }
        }
        GpuTree { index, groups }
    }

    /// Number of GPU positions.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the node has no GPUs.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Position of NVML index `idx`.
    pub fn position(&self, idx: u32) -> Option<usize> {
        self.index.iter().position(|&i| i == idx)
    }

    /// Picks `g` GPUs from `free` (a position mask), or `None` if fewer are free.
    pub fn pick(&self, g: u32, free: u64) -> Option<u64> {
        if free.count_ones() < g {
            return None;
        }
        if g == 0 {
            return Some(0);
        }
        Some(self.pick_in(0, g, free))
    }

    fn pick_in(&self, gid: usize, g: u32, free: u64) -> u64 {
        let grp = &self.groups[gid];
        let avail = grp.mask & free;
        if grp.children.is_empty() {
            return lowest_bits(avail, g);
        }
        let mut need = g;
        let mut taken = 0u64;
        let mut left = free;
        while need > 0 {
            let counts = grp
                .children
                .iter()
                .map(|&c| (c, (self.groups[c].mask & left).count_ones()));
            let best = counts
                .clone()
                .filter(|&(_, n)| n >= need)
                .min_by_key(|&(c, n)| (n, c));
            if let Some((c, _)) = best {
                taken |= self.pick_in(c, need, left);
                break;
            }
            let (c, n) = counts
                .max_by_key(|&(c, n)| (n, std::cmp::Reverse(c)))
                .expect("a group has children");
            if n == 0 {
                break;
            }
            let m = self.groups[c].mask & left;
            taken |= m;
            left &= !m;
            need -= n;
        }
        taken
    }

    /// Picks GPUs for each task in turn (`counts[i]` GPUs for local rank `i`) from `free`:
    /// first the node's share as one compact set, then each task's part of it.
    pub fn pick_tasks(&self, counts: &[u32], free: u64) -> Option<Vec<u64>> {
        let total: u32 = counts.iter().sum();
        let mut share = self.pick(total, free)?;
        let mut out = Vec::with_capacity(counts.len());
        for &c in counts {
            let m = self.pick(c, share)?;
            share &= !m;
            out.push(m);
        }
        Some(out)
    }

    /// NVML indices of a position mask, ascending.
    pub fn indices(&self, mask: u64) -> Vec<u32> {
        (0..self.index.len())
            .filter(|&p| mask & (1u64 << p) != 0)
            .map(|p| self.index[p])
            .collect()
    }
}

/// The `g` lowest set bits of `m`.
fn lowest_bits(mut m: u64, g: u32) -> u64 {
    let mut out = 0;
    for _ in 0..g {
        if m == 0 {
            break;
        }
        let b = m & m.wrapping_neg();
        out |= b;
        m &= !b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::cluster_spec::{ClusterSpec, GpuLayout};

    fn node(layout: GpuLayout) -> Node {
        let mut spec = ClusterSpec::sandbox();
        spec.node.layout = layout;
        spec.nodes().unwrap().remove(0)
    }

    fn set(t: &GpuTree, m: u64) -> Vec<u32> {
        t.indices(m)
    }

    #[test]
    fn dgx_tasks_stay_within_a_numa_node() {
        let t = GpuTree::new(&node(GpuLayout::Dgx));
        // Two tasks of four: one per NUMA node.
        let p = t.pick_tasks(&[4, 4], 0xff).unwrap();
        assert_eq!(set(&t, p[0]), [0, 1, 2, 3]);
        assert_eq!(set(&t, p[1]), [4, 5, 6, 7]);
        // GPUs 0 and 4 busy: a 3-GPU task fits either half; best fit keeps nothing split.
        let free = 0xff & !(1 | 1 << 4);
        let m = t.pick(3, free).unwrap();
        assert_eq!(set(&t, m), [1, 2, 3]);
        // A 4-GPU task when each half has 3 free must cross; takes one half whole.
        let m = t.pick(4, free).unwrap();
        assert_eq!(m.count_ones(), 4);
        assert_eq!(set(&t, m), [1, 2, 3, 5]);
    }

    #[test]
    fn pcie_pairs_are_preferred() {
        let t = GpuTree::new(&node(GpuLayout::Pcie));
        // GPU 0 busy: a 2-GPU task takes a whole pair, not 1+2.
        let free = 0xff & !1;
        let m = t.pick(2, free).unwrap();
        assert_eq!(set(&t, m), [2, 3]);
        // A 1-GPU task takes the lone GPU 1 (best fit), keeping pairs whole.
        let m = t.pick(1, free).unwrap();
        assert_eq!(set(&t, m), [1]);
        // Four 2-GPU tasks: each one a PCIe pair.
        let p = t.pick_tasks(&[2, 2, 2, 2], 0xff).unwrap();
        for (i, m) in p.iter().enumerate() {
            let s = set(&t, *m);
            assert_eq!(s[0] / 2, s[1] / 2, "task {i} got {s:?}");
        }
    }

    #[test]
    fn no_gpu_is_given_twice_and_shortage_is_none() {
        let t = GpuTree::new(&node(GpuLayout::None));
        let p = t.pick_tasks(&[3, 3, 2], 0xff).unwrap();
        assert_eq!(p.iter().fold(0, |a, m| a | m), 0xff);
        assert_eq!(p[0] & p[1], 0);
        assert!(t.pick_tasks(&[3, 3, 3], 0xff).is_none());
        assert!(t.pick(1, 0).is_none());
    }
}

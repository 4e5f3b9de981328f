//! A node as a cycle sees it: what is free now and what holds begin later
//! ([`NodeState`]), who holds it under `--exclusive=user` ([`NodeUsers`]), and the states
//! every cycle starts from, built from the snapshot's nodes.

use smallvec::SmallVec;

use super::engine::{Claim, NEVER};
use super::gpus::GpuTree;
use super::node::{Link, Node};
use super::prepared::Prepared;
use super::shape::Res;

/// One node during the cycle.
#[derive(Clone, Debug)]
pub struct NodeState {
    /// Allocatable CPU, memory and healthy GPUs.
    pub total: Res,
    /// Free now.
    pub free: Res,
    /// Free healthy GPUs (positions in the node's [`GpuTree`]).
    pub free_mask: u64,
    /// Ready and not cordoned.
    pub sched: bool,
    /// Index into [`Engine::gpu_trees`](super::engine::Engine::gpu_trees).
    pub gtree: u32,
    /// Allocatable CPU, memory and every GPU, healthy or not (for "could it ever fit").
    pub all_total: Res,
    /// Every GPU position.
    pub all_mask: u64,
    /// Healthy GPU positions.
    pub healthy_mask: u64,
    /// Resources coming back, `(time, res, running job index)`, time > now. Jobs started
    /// this cycle use index `u32::MAX`.
    pub releases: SmallVec<[(i64, Res, u32); 2]>,
    /// Holds of reservations.
    pub claims: Vec<Claim>,
    /// For nodes with holds: `(time, least free from now until just after time, free at
    /// time)` at now and at every hold start after now, so the free room over `[now, end)`
    /// is one binary search and over any window one count. Rebuilt whenever the node's
    /// holds or releases change.
    pub profile: Vec<(i64, Res, Res)>,
}

impl NodeState {
    /// Free at time `t >= now` by count: free now, plus releases by `t`, minus holds active
    /// at `t`.
    pub fn point(&self, t: i64, now: i64) -> Res {
        self.point_if(t, now, &|_| false)
    }

    /// [`NodeState::point`] with the releases of running jobs for which `early` holds
    /// counted as already done (preemption victims).
    pub fn point_if(&self, t: i64, now: i64, early: &dyn Fn(u32) -> bool) -> Res {
        let mut r = self.free;
        for &(rt, rr, j) in &self.releases {
            if (t > now && rt <= t && rt != NEVER) || early(j) {
                r = r.plus(rr);
            }
        }
        let mut held = Res::default();
        for c in &self.claims {
            if c.start <= t && t < c.end {
                held = held.plus(c.res);
            }
        }
        r.min(self.total).minus(held)
    }

    /// The least that is free over `[s, e)` (`s >= now`): availability only drops when a
    /// hold begins, and what is free at every hold start is kept with the profile, so this
    /// costs one count at `s` rather than one per hold start (with many reservations a node
    /// carries dozens of holds, and the reservation sweeps ask this of every node they pass).
    pub fn window(&self, s: i64, e: i64, now: i64) -> Res {
        let mut m = self.point(s, now);
        let first = self.profile.partition_point(|&(t, _, _)| t <= s);
        for &(t, _, p) in &self.profile[first..] {
            if t >= e {
                break;
            }
            m = m.min(p);
        }
        debug_assert_eq!(m, self.window_if(s, e, now, &|_| false));
        m
    }

    /// The least free over `[now, e)` (`e > now`), from the profile.
    pub fn window_now(&self, e: i64) -> Res {
        if self.profile.is_empty() {
            return self.free;
        }
        let i = self.profile.partition_point(|&(t, _, _)| t < e);
        self.profile[i.max(1) - 1].1
    }

    /// Marks resources busy now: GPU positions `gpus` (or everything, `whole`) and `cpu`,
    /// `mem`. Returns what was taken, by count and as GPU positions.
    pub fn take(&mut self, gpus: u64, cpu: u64, mem: u64, whole: bool) -> (Res, u64) {
        let before = self.free;
        let before_mask = self.free_mask;
        if whole {
            self.free = Res::default();
            self.free_mask = 0;
        } else {
            self.free_mask &= !gpus;
            self.free = Res {
                gpus: self.free_mask.count_ones(),
                cpu: self.free.cpu.saturating_sub(cpu),
                mem: self.free.mem.saturating_sub(mem),
            };
        }
        (before.minus(self.free), before_mask & !self.free_mask)
    }

    pub(crate) fn rebuild_profile(&mut self, now: i64) {
        self.profile.clear();
        if self.claims.is_empty() {
            return;
        }
        let mut times: Vec<i64> = self
            .claims
            .iter()
            .map(|c| c.start)
            .filter(|&t| t > now)
            .collect();
        times.sort_unstable();
        times.dedup();
        let mut m = self.point(now, now);
        self.profile.push((now, m, m));
        for t in times {
            let p = self.point(t, now);
            m = m.min(p);
            self.profile.push((t, m, p));
        }
    }

    /// [`NodeState::window`] with `early` as in [`NodeState::point_if`].
    pub fn window_if(&self, s: i64, e: i64, now: i64, early: &dyn Fn(u32) -> bool) -> Res {
        let mut m = self.point_if(s, now, early);
        for c in &self.claims {
            if c.start > s && c.start < e {
                m = m.min(self.point_if(c.start, now, early));
            }
        }
        m
    }
}

/// The jobs holding a node, as `--exclusive=user` needs them: how many, how many of each
/// known user, and the user whose `--exclusive=user` jobs keep the node to themselves.
/// User ids are an [`Occupancy`](super::occupancy::Occupancy)'s; 0 is "unknown", a user no
/// other job shares with. Built by a cycle only when some job is `--exclusive=user`
/// ([`Engine::users`](super::engine::Engine::users)), so other cycles pay nothing for the rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeUsers {
    /// Jobs with resources on the node.
    pub jobs: u32,
    /// `(user, jobs)` for jobs of known users.
    pub by_user: SmallVec<[(u32, u32); 1]>,
    /// `(user, jobs)` of the `--exclusive=user` jobs on the node (all of one user).
    pub lock: Option<(u32, u32)>,
}

impl NodeUsers {
    /// Records a job of `user` (0: unknown) arriving (`delta` 1) or leaving (-1);
    /// `exclusive_user` for an `--exclusive=user` job.
    pub fn count(&mut self, user: u32, exclusive_user: bool, arriving: bool) {
        let step = |v: &mut u32| {
            *v = if arriving {
                *v + 1
            } else {
                v.saturating_sub(1)
            }
        };
        step(&mut self.jobs);
        if user != 0 {
            match self.by_user.iter_mut().position(|x| x.0 == user) {
                Some(i) => {
                    step(&mut self.by_user[i].1);
                    if self.by_user[i].1 == 0 {
                        self.by_user.swap_remove(i);
                    }
                }
                None if arriving => self.by_user.push((user, 1)),
                None => {}
            }
        }
        if exclusive_user {
            match &mut self.lock {
                Some((u, n)) if *u == user => {
                    step(n);
                    if *n == 0 {
                        self.lock = None;
                    }
                }
                None if arriving => self.lock = Some((user, 1)),
                _ => {}
            }
        }
    }

    /// Whether a job of `user` may be placed here now: the node is not kept by another
    /// user's `--exclusive=user` job, and, for an `--exclusive=user` job (`exclusive_user`),
    /// no other user's job runs here.
    pub fn admit(&self, user: u32, exclusive_user: bool) -> bool {
        if let Some((u, _)) = self.lock
            && (u != user || user == 0)
        {
            return false;
        }
        if exclusive_user {
            let mine = if user == 0 {
                0
            } else {
                self.by_user.iter().find(|x| x.0 == user).map_or(0, |x| x.1)
            };
            return self.jobs == mine;
        }
        true
    }
}

fn node_total(node: &Node, tree: &GpuTree) -> (Res, u64) {
    let mut mask = 0u64;
    for (i, g) in node.gpus.iter().enumerate() {
        if !g.healthy {
            continue;
        }
        // GPUs usually come in index order, so position i is the first guess.
        let p = if tree.index.get(i) == Some(&g.index) {
            Some(i)
        } else {
            tree.position(g.index)
        };
        if let Some(p) = p {
            mask |= 1 << p;
        }
    }
    (
        Res {
            gpus: mask.count_ones(),
            cpu: node.cpu_millis,
            mem: node.memory_mib,
        },
        mask,
    )
}

/// Whether two nodes' GPUs are wired the same (indices, NUMA, NVLink peers, links).
pub(crate) fn same_gpu_layout(a: &Node, b: &Node) -> bool {
    // Element by element: the slices are a few entries long, where a library comparison
    // costs more in calls than in work (this runs for every node of every cycle's trees).
    fn same<T: PartialEq>(x: &[T], y: &[T]) -> bool {
        x.len() == y.len() && (0..x.len()).all(|i| x[i] == y[i])
    }
    let n = a.gpus.len();
    // Rows by the derived comparison: a tag compare per link (mapping each link to a
    // number first compiled to two indirect jumps per link).
    if n != b.gpus.len()
        || a.gpu_links.len() != b.gpu_links.len()
        || !(0..a.gpu_links.len()).all(|i| a.gpu_links[i] == b.gpu_links[i])
    {
        return false;
    }
    // With a whole link matrix, NVLink peers never decide a link (see `Node::link`): they
    // need not be compared (each GPU's list is a heap read of its own).
    let whole = a.gpu_links.len() == n && a.gpu_links.iter().all(|r| r.len() == n);
    a.gpus.iter().zip(&b.gpus).all(|(x, y)| {
        x.index == y.index && x.numa == y.numa && (whole || same(&x.nvlink_peers, &y.nvlink_peers))
    })
}

/// A key describing a node's GPU wiring, so identical nodes share one [`GpuTree`].
pub(crate) fn gpu_signature(node: &Node, s: &mut Vec<u8>) {
    s.clear();
    for g in &node.gpus {
        s.extend_from_slice(&g.index.to_le_bytes());
        s.extend_from_slice(&g.numa.unwrap_or(i32::MIN).to_le_bytes());
        s.extend_from_slice(&(g.nvlink_peers.len() as u32).to_le_bytes());
        for p in &g.nvlink_peers {
            s.extend_from_slice(&p.to_le_bytes());
        }
    }
    s.push(0xff);
    for row in &node.gpu_links {
        s.push(0xfe);
        for l in row {
            s.extend_from_slice(&match l {
                Link::Itself => [0, 0],
                Link::NvLink(n) => [1, *n],
                Link::Pix => [2, 0],
                Link::Pxb => [3, 0],
                Link::Phb => [4, 0],
                Link::Node => [5, 0],
                Link::Sys => [6, 0],
            });
        }
    }
}

/// Every node's state with nothing running: totals, healthy GPUs, schedulability.
pub fn base_nodes(nodes: &[Node], prep: &Prepared) -> Vec<NodeState> {
    let mut out = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let gt = prep.gtree_of[i];
        let (total, mask) = node_total(node, &prep.gpu_trees[gt as usize]);
        let ng = prep.gpu_trees[gt as usize].len() as u32;
        let all_mask = if ng >= 64 { u64::MAX } else { (1u64 << ng) - 1 };
        out.push(NodeState {
            all_total: Res {
                gpus: ng,
                cpu: node.cpu_millis,
                mem: node.memory_mib,
            },
            all_mask,
            healthy_mask: mask,
            total,
            free: total,
            free_mask: mask,
            sched: node.schedulable(),
            gtree: gt,
            releases: SmallVec::new(),
            claims: Vec::new(),
            profile: Vec::new(),
        });
    }
    out
}

/// Free healthy GPUs on the schedulable nodes of each partition.
pub fn part_free_gpus(prep: &Prepared, nodes: &[NodeState]) -> Vec<u64> {
    prep.trees
        .iter()
        .map(|(tree, _)| {
            tree.nodes
                .iter()
                .filter(|&&n| nodes[n as usize].sched)
                .map(|&n| u64::from(nodes[n as usize].free.gpus))
                .sum()
        })
        .collect()
}

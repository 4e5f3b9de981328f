//! What a cycle derives from the cluster's shape alone ([`Prepared`]), kept between cycles
//! by the operator and the simulator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::gpus::GpuTree;
use super::model::{Partition, Snapshot};
use super::node::{Node, NodeId};
use super::node_state::{gpu_signature, same_gpu_layout};
use super::tree::Tree;
use super::util::FnvBuild;

/// What a cycle derives from the cluster's shape alone — each partition's switch tree, node
/// memberships, GPU hierarchies — so that callers scheduling the same cluster again and
/// again (the operator between node changes, the simulator always) build it once. It
/// depends on node names, labels, taints and GPU wiring, and on partitions' selectors,
/// topologies and tolerations; build a new one when any of those change.
/// [`schedule_prepared`](super::schedule::schedule_prepared) checks node names and counts
/// and rebuilds on a mismatch.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Per partition: the tree and its switch ids per level.
    pub trees: Vec<(Tree, Vec<Vec<u32>>)>,
    /// Each node's partitions and positions.
    pub member_of: Members,
    /// Distinct GPU hierarchies (identical nodes share one).
    pub gpu_trees: Vec<GpuTree>,
    /// Each node's GPU hierarchy (index into `gpu_trees`).
    pub gtree_of: Vec<u32>,
    /// Per partition, tree positions in node-list order (by [`NodeId`]): the order the
    /// first-fit yardstick walks.
    pub node_order: Vec<Vec<u32>>,
    /// Number of nodes and a hash of their names, to check a snapshot against.
    names: (usize, u64),
    /// Which build this is (a clone shares it): state kept for one `Prepared`
    /// ([`KeptOccupancy`](super::KeptOccupancy)) notices a rebuild even when the node names
    /// are the same (a partition or a node's labels changed).
    build: u64,
}

/// Numbers [`Prepared`] builds (identity only: no decision reads it).
static BUILDS: AtomicU64 = AtomicU64::new(1);

impl Prepared {
    /// Builds the trees of `partitions` over `nodes`.
    pub fn new(nodes: &[Node], partitions: &[Partition]) -> Prepared {
        let mut gpu_trees = Vec::new();
        let mut sig_ids: HashMap<Vec<u8>, u32, FnvBuild> = HashMap::with_hasher(FnvBuild);
        let mut prev_gt = u32::MAX;
        let mut sig = Vec::new();
        let mut prev: Option<&Node> = None;
        let mut gtree_of = Vec::with_capacity(nodes.len());
        for node in nodes {
            // Neighbours are usually identical: compare with the previous node first.
            let gt = if prev_gt != u32::MAX && prev.is_some_and(|p| same_gpu_layout(p, node)) {
                prev_gt
            } else {
                gpu_signature(node, &mut sig);
                match sig_ids.get(sig.as_slice()) {
                    Some(&g) => g,
                    None => {
                        gpu_trees.push(GpuTree::new(node));
                        let g = gpu_trees.len() as u32 - 1;
                        sig_ids.insert(sig.clone(), g);
                        g
                    }
                }
            };
            prev = Some(node);
            prev_gt = gt;
            gtree_of.push(gt);
        }
        let mut triples = Vec::with_capacity(nodes.len());
        let trees: Vec<(Tree, Vec<Vec<u32>>)> = partitions
            .iter()
            .enumerate()
            .map(|(pi, p)| {
                let tree = Tree::build(nodes, p);
                for (pos, &n) in tree.nodes.iter().enumerate() {
                    triples.push((n, pi as u32, pos as u32));
                }
                let mut levels = vec![Vec::new(); tree.depth + 1];
                for (sid, s) in tree.switches.iter().enumerate() {
                    levels[s.level].push(sid as u32);
                }
                (tree, levels)
            })
            .collect();
        let node_order = trees
            .iter()
            .map(|(tree, _): &(Tree, Vec<Vec<u32>>)| {
                let mut o: Vec<u32> = (0..tree.nodes.len() as u32).collect();
                if !tree.nodes.windows(2).all(|w| w[0] < w[1]) {
                    o.sort_unstable_by_key(|&p| tree.nodes[p as usize]);
                }
                o
            })
            .collect();
        Prepared {
            trees,
            node_order,
            member_of: Members::build(nodes.len(), triples),
            gpu_trees,
            gtree_of,
            names: (nodes.len(), names_hash(nodes)),
            build: BUILDS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Which build this is: equal only for the same build (or a clone of it).
    pub(crate) fn build_id(&self) -> u64 {
        self.build
    }

    /// Node count and name hash this was built from.
    pub(crate) fn names(&self) -> (usize, u64) {
        self.names
    }

    /// Whether this was built from nodes with these names and this many partitions.
    pub fn fits(&self, snap: &Snapshot) -> bool {
        self.trees.len() == snap.partitions.len()
            && self.names.0 == snap.nodes.len()
            && self.names.1 == names_hash(&snap.nodes)
    }
}

/// A hash of the node names in order.
fn names_hash(nodes: &[Node]) -> u64 {
    nodes.iter().fold(crate::core::util::FNV_OFFSET, |h, n| {
        crate::core::util::fnv1a(h, n.name.as_bytes()) ^ 0xff
    })
}

/// Each node's `(partition, position)` memberships, stored flat (one allocation, not one per
/// node).
#[derive(Clone, Debug, Default)]
pub struct Members {
    start: Vec<u32>,
    list: Vec<(u32, u32)>,
}

impl Members {
    /// Memberships of node `n`.
    pub fn of(&self, n: NodeId) -> &[(u32, u32)] {
        let a = self.start[n as usize] as usize;
        let b = self.start[n as usize + 1] as usize;
        &self.list[a..b]
    }

    /// Position of node `n` in partition `part`'s tree (`None`: not a member).
    pub fn position(&self, n: NodeId, part: usize) -> Option<u32> {
        self.of(n)
            .iter()
            .find(|&&(p, _)| p as usize == part)
            .map(|&(_, pos)| pos)
    }

    /// Builds from `(node, partition, position)` triples.
    fn build(nodes: usize, mut triples: Vec<(NodeId, u32, u32)>) -> Members {
        triples.sort_unstable();
        let mut start = vec![0u32; nodes + 1];
        for &(n, _, _) in &triples {
            start[n as usize + 1] += 1;
        }
        for i in 0..nodes {
            start[i + 1] += start[i];
        }
        Members {
            start,
            list: triples.into_iter().map(|(_, p, q)| (p, q)).collect(),
        }
    }
}

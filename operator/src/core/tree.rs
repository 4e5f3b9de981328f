//! A partition's switch tree, built from node labels.
//!
//! Levels are the partition's topology keys (broadest first, `kubernetes.io/hostname`
//! dropped). A root switch spanning the whole partition sits above the first level, so a job
//! too big for any labelled switch can still be placed across them. A switch at level `j` is
//! identified by the label values of levels `0..=j`, so two leaves labelled `leaf1` under
//! different spines are different switches. A node without a level's label joins a synthetic
//! switch named `(unlabelled)` at that level under its parent; such switches sort after the
//! labelled ones. Within a leaf, nodes are in natural name order; leaves and switches are in
//! natural order of their label values, so every switch's nodes (and leaves) are contiguous.

use std::collections::HashMap;
use std::ops::Range;

use super::model::Partition;
use super::node::{Node, NodeId, TaintEffect};
use super::util::{FnvBuild, NameKey, natural_cmp, natural_cmp_keyed};

/// Name of the synthetic switch that holds nodes missing a level's label.
pub const UNLABELLED: &str = "(unlabelled)";

/// Most switch levels a tree has.
pub const MAX_LEVELS: usize = 8;

/// One switch.
#[derive(Clone, Debug)]
pub struct Switch {
    /// Label value (or [`UNLABELLED`], or the partition name for the root).
    pub name: String,
    /// 0 for the root, `j + 1` for topology level `j`.
    pub level: usize,
    /// Child switches (empty for leaves).
    pub children: Vec<u32>,
    /// The leaves under it (indices into [`Tree::leaves`]).
    pub leaves: Range<u32>,
    /// Its nodes (positions in [`Tree::nodes`]).
    pub nodes: Range<u32>,
}

/// A partition's switch tree.
#[derive(Clone, Debug)]
pub struct Tree {
    /// Switches; `switches[0]` is the root; parents come before children.
    pub switches: Vec<Switch>,
    /// Leaf switches in order (switch ids).
    pub leaves: Vec<u32>,
    /// The partition's nodes in tree order.
    pub nodes: Vec<NodeId>,
    /// Leaf index of each position.
    pub leaf_of: Vec<u32>,
    /// Depth of the leaves (number of labelled levels).
    pub depth: usize,
}

/// Whether `node` belongs to `part`: the selector matches and every `NoSchedule`/`NoExecute`
/// taint is tolerated.
pub fn in_partition(node: &Node, part: &Partition) -> bool {
    part.selector.matches(&node.labels)
        && node.taints.iter().all(|t| {
            t.effect == TaintEffect::PreferNoSchedule
                || part.tolerations.iter().any(|tol| tol.tolerates(t))
        })
}

impl Tree {
    /// Builds the tree of `part` over `nodes`.
    pub fn build(nodes: &[Node], part: &Partition) -> Tree {
        let keys: Vec<&str> = part
            .topology
            .iter()
            .map(String::as_str)
            .filter(|k| *k != muster_crds::labels::HOSTNAME)
            .collect();
        // The CRD allows 8 topology keys; more are ignored (the broadest ones kept).
        let keys = &keys[..keys.len().min(MAX_LEVELS)];
        let depth = keys.len();
        let members: Vec<NodeId> = (0..nodes.len() as NodeId)
            .filter(|&i| in_partition(&nodes[i as usize], part))
            .collect();
        let value = |n: NodeId, j: usize| nodes[n as usize].labels.get(keys[j]).map(String::as_str);
        // Sort keys read once per node, not once per comparison.
        type Keyed<'n> = ([Option<&'n str>; MAX_LEVELS], &'n str, NameKey, NodeId);
        let keyed: Vec<Keyed<'_>> = members
            .iter()
            .map(|&n| {
                let mut path = [None; MAX_LEVELS];
                for (j, v) in path.iter_mut().enumerate().take(depth) {
                    *v = value(n, j);
                }
                let name = nodes[n as usize].name.as_str();
                (path, name, NameKey::new(name), n)
            })
            .collect();
        // Label values ranked once per level (a few hundred distinct ones), so the sort
        // compares integers instead of strings in natural order.
        let mut ranks: Vec<HashMap<&str, u32, FnvBuild>> = Vec::with_capacity(depth);
        for j in 0..depth {
            let mut m: HashMap<&str, u32, FnvBuild> = HashMap::with_hasher(FnvBuild);
            for v in keyed.iter().filter_map(|k| k.0[j]) {
                m.entry(v).or_insert(0);
            }
            let mut vals: Vec<&str> = m.keys().copied().collect();
            vals.sort_by(|a, b| natural_cmp(a, b).then(a.cmp(b)));
            for (i, v) in vals.iter().enumerate() {
                m.insert(v, i as u32);
            }
            ranks.push(m);
        }
        let mut order: Vec<([u32; MAX_LEVELS], usize)> = Vec::with_capacity(keyed.len());
        let mut prev: Option<(&[Option<&str>; MAX_LEVELS], [u32; MAX_LEVELS])> = None;
        for (i, k) in keyed.iter().enumerate() {
            // Neighbours usually share their switches: reuse the last node's ranks.
            let r = match prev {
                Some((p, r)) if *p == k.0 => r,
                _ => {
                    let mut r = [u32::MAX; MAX_LEVELS];
                    for j in 0..depth {
                        if let Some(v) = k.0[j] {
                            r[j] = ranks[j][v];
                        }
                    }
                    r
                }
            };
            prev = Some((&k.0, r));
            order.push((r, i));
        }
        let cmp = |(ra, ia): &([u32; MAX_LEVELS], usize), (rb, ib): &([u32; MAX_LEVELS], usize)| {
            let (a, b) = (&keyed[*ia], &keyed[*ib]);
            ra.cmp(rb)
                .then_with(|| natural_cmp_keyed(a.1, a.2, b.1, b.2))
                .then(a.3.cmp(&b.3))
        };
        // Clusters usually list their nodes in order already: check before sorting.
        if !order.windows(2).all(|w| cmp(&w[0], &w[1]).is_le()) {
            order.sort_by(cmp);
        }
        let keyed: Vec<Keyed<'_>> = order.into_iter().map(|(_, i)| keyed[i]).collect();
        let members: Vec<NodeId> = keyed.iter().map(|k| k.3).collect();
        let paths: Vec<[Option<&str>; MAX_LEVELS]> = keyed.into_iter().map(|k| k.0).collect();
        let value = |pos: usize, j: usize| paths[pos][j];
        let n = members.len() as u32;
        let mut switches = vec![Switch {
            name: part.name.clone(),
            level: 0,
            children: Vec::new(),
            leaves: 0..0,
            nodes: 0..n,
        }];
        // Open switch at each level (switch id), as we scan nodes in order.
        let mut open: Vec<u32> = vec![0];
        let mut leaves = Vec::new();
        let mut leaf_of = Vec::with_capacity(members.len());
        for pos in 0..members.len() {
            let pos = pos as u32;
            let node = pos as usize;
            // The first level whose value path differs from the previous node's.
            let first_new = if pos == 0 {
                0
            } else {
                let prev = pos as usize - 1;
                (0..depth)
                    .find(|&j| value(prev, j) != value(node, j))
                    .unwrap_or(depth)
            };
            if pos == 0 || first_new < depth {
                // Close switches from level first_new+1 down, open new ones.
                open.truncate(first_new + 1);
                for j in first_new..depth {
                    let id = switches.len() as u32;
                    let parent = open[j];
                    switches[parent as usize].children.push(id);
                    switches.push(Switch {
                        name: value(node, j).unwrap_or(UNLABELLED).to_string(),
                        level: j + 1,
                        children: Vec::new(),
                        leaves: 0..0,
                        nodes: pos..pos,
                    });
                    open.push(id);
                }
                if depth == 0 && pos == 0 {
                    leaves.push(0);
                } else if depth > 0 {
                    leaves.push(*open.last().expect("open leaf"));
                }
            }
            for &s in &open {
                switches[s as usize].nodes.end = pos + 1;
            }
            leaf_of.push(leaves.len() as u32 - 1);
        }
        if leaves.is_empty() {
            leaves.push(0);
        }
        // Leaf ranges: leaves are in DFS order, so each switch's leaves are contiguous.
        for (li, &sid) in leaves.iter().enumerate() {
            let li = li as u32;
            switches[sid as usize].leaves = li..li + 1;
        }
        for sid in (0..switches.len()).rev() {
            if !switches[sid].children.is_empty() {
                let first = switches[sid].children[0] as usize;
                let last = *switches[sid].children.last().expect("children") as usize;
                switches[sid].leaves = switches[first].leaves.start..switches[last].leaves.end;
            }
        }
        Tree {
            switches,
            leaves,
            nodes: members,
            leaf_of,
            depth,
        }
    }

    /// The leaf switch of leaf index `l`.
    pub fn leaf(&self, l: u32) -> &Switch {
        &self.switches[self.leaves[l as usize] as usize]
    }

    /// Switch ids at `level`, in order.
    pub fn level(&self, level: usize) -> impl Iterator<Item = u32> + '_ {
        (0..self.switches.len() as u32).filter(move |&s| self.switches[s as usize].level == level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::cluster_spec::ClusterSpec;

    fn sandbox_part() -> (Vec<Node>, Partition) {
        let spec = ClusterSpec::sandbox();
        let part = Partition {
            name: "gpu".into(),
            topology: spec.topology(),
            ..Default::default()
        };
        (spec.nodes().unwrap(), part)
    }

    #[test]
    fn sandbox_tree_has_root_spine_and_four_leaves() {
        let (nodes, part) = sandbox_part();
        let t = Tree::build(&nodes, &part);
        assert_eq!(t.depth, 2);
        assert_eq!(t.leaves.len(), 4);
        assert_eq!(t.nodes.len(), 16);
        assert_eq!(t.switches[0].nodes, 0..16);
        assert_eq!(t.switches[0].leaves, 0..4);
        let spine = &t.switches[t.switches[0].children[0] as usize];
        assert_eq!(spine.name, "spine1");
        assert_eq!(spine.leaves, 0..4);
        assert_eq!(t.leaf(2).name, "leaf3");
        assert_eq!(t.leaf(2).nodes, 8..12);
        assert_eq!(t.leaf_of[9], 2);
        assert_eq!(nodes[t.nodes[8] as usize].name, "gpu009");
    }

    #[test]
    fn missing_labels_form_an_unlabelled_switch_last() {
        let (mut nodes, part) = sandbox_part();
        nodes[0].labels.remove("muster.dev/leaf");
        nodes[5].labels.remove("muster.dev/leaf");
        nodes[6].labels.remove("muster.dev/spine");
        let t = Tree::build(&nodes, &part);
        let names: Vec<&str> = (0..t.leaves.len() as u32)
            .map(|l| t.leaf(l).name.as_str())
            .collect();
        // spine1: leaf1..leaf4 then (unlabelled); then the (unlabelled) spine with leaf2.
        assert_eq!(
            names,
            ["leaf1", "leaf2", "leaf3", "leaf4", UNLABELLED, "leaf2"]
        );
        let unl = t.leaf(4);
        let members: Vec<&str> = (unl.nodes.start..unl.nodes.end)
            .map(|p| nodes[t.nodes[p as usize] as usize].name.as_str())
            .collect();
        assert_eq!(members, ["gpu001", "gpu006"]);
        let spines: Vec<&str> = t
            .level(1)
            .map(|s| t.switches[s as usize].name.as_str())
            .collect();
        assert_eq!(spines, ["spine1", UNLABELLED]);
    }

    #[test]
    fn flat_partition_is_one_leaf_and_taints_exclude_nodes() {
        let (mut nodes, mut part) = sandbox_part();
        part.topology.clear();
        nodes[3].taints.push(crate::core::node::Taint {
            key: "dedicated".into(),
            value: "x".into(),
            effect: TaintEffect::NoSchedule,
        });
        let t = Tree::build(&nodes, &part);
        assert_eq!(t.leaves, vec![0]);
        assert_eq!(t.nodes.len(), 15);
        assert!(!t.nodes.contains(&3));
        part.tolerations.push(crate::core::node::Toleration {
            key: "dedicated".into(),
            exists: true,
            ..Default::default()
        });
        assert_eq!(Tree::build(&nodes, &part).nodes.len(), 16);
    }
}

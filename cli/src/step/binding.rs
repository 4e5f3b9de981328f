//! Per-task GPU binding on one node: which of the node pod's GPUs each local task sees.
//!
//! The node pod sees the job's GPUs on its node (and nothing else); they are numbered inside
//! the pod by NVML index order, `0..n-1`, which is what `CUDA_VISIBLE_DEVICES` names. The
//! rules, as Slurm's GPU plugin applies them to a step:
//!
//! - no `--gpus-per-task` (a `--gres=gpu:N` or `--gpus-per-node` job) or `--gpu-bind=none`:
//!   every task sees every GPU of the node;
//! - `--gpus-per-task=g` (`closest`, `per_task:g` or no `--gpu-bind`): each task gets `g`
//!   GPUs of its own, chosen by the scheduling core's rule ([`GpuTree::pick_tasks`]: the
//!   node's share as one compact set, then each task's part of it, closest by NVLink/PCIe
//!   switch and NUMA node) — one source of truth with the operator's placement;
//! - `map_gpu:LIST` / `mask_gpu:LIST`: local task `i` gets entry `i % len` (NVML indices);
//! - `single:N`: tasks share GPUs, `N` per GPU, in the core's order.
//!
//! A GPU whose UUID starts with `MIG-` is named by UUID, as CUDA requires for MIG devices.

use muster_crds::slurm::{GpuBind, GpuBindMode};
use muster_operator::core::gpus::GpuTree;
use muster_operator::core::node::{Gpu, Link, Node};
use serde::{Deserialize, Serialize};

/// This node's GPUs of the job, as the operator gives them in `MUSTER_NODE_GPUS`: the core's
/// [`Gpu`] fields (camelCase; only `index` is required) and [`Link`]s, so the operator
/// serializes what it scheduled with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGpus {
    /// The GPUs (any order; each names its NVML index, UUID, NUMA node and NVLink peers).
    #[serde(default, deserialize_with = "lenient_gpus")]
    pub gpus: Vec<Gpu>,
    /// `nvidia-smi topo -m` links between them (`gpuLinks[i][j]` for `gpus[i]`, `gpus[j]`);
    /// empty: derived from NUMA ids and NVLink peers.
    #[serde(default)]
    pub gpu_links: Vec<Vec<Link>>,
}

/// A GPU entry with everything but the index optional.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GpuEntry {
    index: u32,
    #[serde(default)]
    uuid: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    memory_mib: u64,
    #[serde(default)]
    numa: Option<i32>,
    #[serde(default)]
    nvlink_peers: Vec<u32>,
}

fn lenient_gpus<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Gpu>, D::Error> {
    let v: Vec<GpuEntry> = Vec::deserialize(d)?;
    Ok(v.into_iter()
        .map(|g| Gpu {
            index: g.index,
            uuid: g.uuid,
            model: g.model.into(),
            memory_mib: g.memory_mib,
            healthy: true,
            numa: g.numa,
            nvlink_peers: g.nvlink_peers,
        })
        .collect())
}

impl NodeGpus {
    /// Parses the JSON of `MUSTER_NODE_GPUS`.
    pub fn parse(json: &str) -> Result<NodeGpus, String> {
        let g: NodeGpus = serde_json::from_str(json).map_err(|e| {
            format!("MUSTER_NODE_GPUS is not a GPU list ({e}); expected {{\"gpus\":[{{\"index\":0,\"uuid\":\"GPU-…\",\"numa\":0,\"nvlinkPeers\":[1]}}]}}")
        })?;
        if g.gpus.len() > 64 {
            return Err(format!(
                "MUSTER_NODE_GPUS lists {} GPUs; at most 64 per node",
                g.gpus.len()
            ));
        }
        Ok(g)
    }

    /// The GPUs sorted by NVML index (the pod-relative numbering).
    fn sorted(&self) -> Vec<&Gpu> {
        let mut v: Vec<&Gpu> = self.gpus.iter().collect();
        v.sort_by_key(|g| g.index);
        v
    }
}

/// One task's GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskGpus {
    /// Pod-relative positions (what `CUDA_VISIBLE_DEVICES` holds unless MIG).
    pub positions: Vec<usize>,
    /// NVML indices.
    pub indices: Vec<u32>,
    /// `CUDA_VISIBLE_DEVICES`.
    pub cuda: String,
}

/// The GPUs of each of `ntasks` local tasks (see the [module docs](self)); `Err` says why the
/// step cannot get them.
pub fn bind(
    node: &NodeGpus,
    ntasks: usize,
    gpus_per_task: Option<u32>,
    gpus_per_node: Option<u32>,
    bind: Option<&GpuBind>,
) -> Result<Vec<TaskGpus>, String> {
    let sorted = node.sorted();
    let n = sorted.len();
    let all: Vec<usize> = (0..n).collect();
    let by_positions = |ps: Vec<usize>| -> TaskGpus {
        let mig = ps.iter().any(|&p| sorted[p].uuid.starts_with("MIG-"));
        let cuda = ps
            .iter()
            .map(|&p| {
                if mig {
                    sorted[p].uuid.clone()
                } else {
                    p.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(",");
        TaskGpus {
            indices: ps.iter().map(|&p| sorted[p].index).collect(),
            positions: ps,
            cuda,
        }
    };
    let mode = bind.map(|b| &b.mode);
    if let Some(GpuBindMode::MapGpu(_) | GpuBindMode::MaskGpu(_)) = mode {
        let b = bind.expect("mode is some");
        return (0..ntasks)
            .map(|t| {
                let idx = b.task_gpus(t).unwrap_or_default();
                let ps = idx
                    .iter()
                    .map(|i| {
                        sorted.iter().position(|g| g.index == *i).ok_or_else(|| {
                            format!(
                                "--gpu-bind={} names GPU {i}, which this node's share of the job does not have (it has {})",
                                b.mode,
                                describe(&sorted)
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(by_positions(ps))
            })
            .collect();
    }
    if matches!(mode, Some(GpuBindMode::None)) {
        return Ok((0..ntasks).map(|_| by_positions(all.clone())).collect());
    }
    let per_task = match mode {
        Some(GpuBindMode::PerTask(g)) => Some(*g),
        _ => gpus_per_task,
    };
    if let Some(GpuBindMode::Single(k)) = mode {
        let order = pick_order(node, n);
        return Ok((0..ntasks)
            .map(|t| {
                let slot = t / (*k as usize).max(1);
                by_positions(order.get(slot).map(|&p| vec![p]).unwrap_or_default())
            })
            .collect());
    }
    let Some(g) = per_task.filter(|g| *g > 0) else {
        // `--gres=gpu:N` on the step: the node's N closest GPUs, shared by its tasks.
        let share = match gpus_per_node {
            Some(k) if (k as usize) < n => {
                let free = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
                let m = tree(node).pick(k, free).unwrap_or(free);
                (0..n).filter(|p| m & (1u64 << p) != 0).collect()
            }
            Some(k) if k as usize > n => {
                return Err(format!(
                    "Insufficient GPUs: --gres=gpu:{k} on a node whose share of the job has {n} ({})",
                    describe(&sorted)
                ));
            }
            _ => all,
        };
        return Ok((0..ntasks).map(|_| by_positions(share.clone())).collect());
    };
    let want = u64::from(g) * ntasks as u64;
    if want > n as u64 {
        return Err(format!(
            "Insufficient GPUs: {ntasks} task(s) x {g} GPU(s) per task on a node whose share of the job has {n} ({})",
            describe(&sorted)
        ));
    }
    let tree = tree(node);
    let free = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    let masks = tree
        .pick_tasks(&vec![g; ntasks], free)
        .ok_or_else(|| format!("cannot split {n} GPUs into {ntasks} task(s) of {g}"))?;
    Ok(masks
        .into_iter()
        .map(|m| by_positions((0..n).filter(|p| m & (1u64 << p) != 0).collect()))
        .collect())
}

fn tree(node: &NodeGpus) -> GpuTree {
    // The core's Node keeps GPUs in any order; GpuTree sorts positions by NVML index, which
    // is the pod-relative order used here.
    let mut gpus = node.gpus.clone();
    let mut order: Vec<usize> = (0..gpus.len()).collect();
    order.sort_by_key(|&i| gpus[i].index);
    let links = if node.gpu_links.len() == gpus.len() {
        order
            .iter()
            .map(|&a| {
                order
                    .iter()
                    .map(|&b| node.gpu_links[a].get(b).copied().unwrap_or(Link::Sys))
                    .collect()
            })
            .collect()
    } else {
        Vec::new()
    };
    gpus = order.iter().map(|&i| gpus[i].clone()).collect();
    GpuTree::new(&Node {
        gpus,
        gpu_links: links,
        ..Node::default()
    })
}

/// Positions in the order the core would hand out single GPUs.
fn pick_order(node: &NodeGpus, n: usize) -> Vec<usize> {
    let tree = tree(node);
    let mut free = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    let mut out = Vec::new();
    while let Some(m) = tree.pick(1, free).filter(|m| *m != 0) {
        out.push(m.trailing_zeros() as usize);
        free &= !m;
    }
    out
}

fn describe(sorted: &[&Gpu]) -> String {
    if sorted.is_empty() {
        return "no GPUs".into();
    }
    let idx: Vec<String> = sorted.iter().map(|g| g.index.to_string()).collect();
    format!("GPUs {}", idx.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DGX-like node share: GPUs 0-3 on NUMA 0 (NVLink pairs 0-1, 2-3), 4-7 on NUMA 1.
    fn eight() -> NodeGpus {
        NodeGpus {
            gpus: (0..8)
                .rev()
                .map(|i| Gpu {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    numa: Some(if i < 4 { 0 } else { 1 }),
                    nvlink_peers: vec![i ^ 1],
                    ..Gpu::default()
                })
                .collect(),
            gpu_links: Vec::new(),
        }
    }

    fn cuda(v: &[TaskGpus]) -> Vec<&str> {
        v.iter().map(|t| t.cuda.as_str()).collect()
    }

    #[test]
    fn gres_tasks_see_every_gpu() {
        let v = bind(&eight(), 2, None, None, None).unwrap();
        assert_eq!(cuda(&v), ["0,1,2,3,4,5,6,7"; 2]);
        let none = GpuBind::parse("none").unwrap();
        assert_eq!(
            cuda(&bind(&eight(), 2, Some(1), None, Some(&none)).unwrap()),
            ["0,1,2,3,4,5,6,7"; 2]
        );
    }

    #[test]
    fn gpus_per_task_gives_distinct_close_gpus() {
        let v = bind(&eight(), 4, Some(1), None, None).unwrap();
        assert_eq!(cuda(&v), ["0", "1", "2", "3"]);
        let v = bind(&eight(), 2, Some(2), None, None).unwrap();
        assert_eq!(cuda(&v), ["0,1", "2,3"], "NVLink pairs stay together");
        let v = bind(&eight(), 2, Some(4), None, None).unwrap();
        assert_eq!(cuda(&v), ["0,1,2,3", "4,5,6,7"], "one NUMA node each");
        let err = bind(&eight(), 3, Some(4), None, None).unwrap_err();
        assert!(
            err.contains("Insufficient GPUs") && err.contains("0,1,2,3,4,5,6,7"),
            "{err}"
        );
    }

    #[test]
    fn positions_are_pod_relative() {
        // A pod holding NVML GPUs 4 and 6 numbers them 0 and 1.
        let mut g = eight();
        g.gpus.retain(|x| x.index == 4 || x.index == 6);
        let v = bind(&g, 2, Some(1), None, None).unwrap();
        assert_eq!(cuda(&v), ["0", "1"]);
        assert_eq!(v[1].indices, [6]);
        let map = GpuBind::parse("map_gpu:6,4").unwrap();
        let v = bind(&g, 2, Some(1), None, Some(&map)).unwrap();
        assert_eq!(cuda(&v), ["1", "0"]);
        let bad = GpuBind::parse("map_gpu:0").unwrap();
        let e = bind(&g, 1, Some(1), None, Some(&bad)).unwrap_err();
        assert!(e.contains("GPU 0") && e.contains("GPUs 4,6"), "{e}");
    }

    #[test]
    fn step_gres_shares_the_closest_gpus() {
        let v = bind(&eight(), 2, None, Some(2), None).unwrap();
        assert_eq!(cuda(&v), ["0,1", "0,1"]);
        assert!(bind(&eight(), 1, None, Some(9), None).is_err());
    }

    #[test]
    fn single_shares_gpus() {
        let s = GpuBind::parse("single:2").unwrap();
        let v = bind(&eight(), 4, None, None, Some(&s)).unwrap();
        assert_eq!(cuda(&v), ["0", "0", "1", "1"]);
    }

    #[test]
    fn mig_devices_are_named_by_uuid() {
        let g = NodeGpus {
            gpus: vec![Gpu {
                index: 0,
                uuid: "MIG-abc".into(),
                ..Gpu::default()
            }],
            gpu_links: Vec::new(),
        };
        assert_eq!(
            cuda(&bind(&g, 1, Some(1), None, None).unwrap()),
            ["MIG-abc"]
        );
    }

    #[test]
    fn the_contract_json_parses() {
        let g = NodeGpus::parse(
            r#"{"gpus":[{"index":1,"uuid":"GPU-b","model":"H100","numa":0,"nvlinkPeers":[0]},{"index":0,"uuid":"GPU-a","model":"H100"}],"gpuLinks":[["X","NV18"],["NV18","X"]]}"#,
        )
        .unwrap();
        assert_eq!(g.gpus.len(), 2);
        assert_eq!(cuda(&bind(&g, 2, Some(1), None, None).unwrap()), ["0", "1"]);
        assert!(
            NodeGpus::parse("[1,2]")
                .unwrap_err()
                .contains("MUSTER_NODE_GPUS")
        );
    }
}

//! Nodes and their GpuNodes (or the NVIDIA DRA driver's devices) as core nodes, and the
//! node table they are looked up in.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::ResourceExt;
use muster_crds::v1alpha1::{GpuHealthState, GpuNode};

use crate::core::{self, Link, NodeId, Taint};

use crate::controller::compact::{StrTable, StrTableBuilder};
use crate::controller::quantity;

/// A Node whose GPUs the NVIDIA DRA driver publishes (`published`, from its ResourceSlices)
/// as a core node: the GPUs are the driver's (UUID, model, memory, PCIe root), with what only
/// the node agent knows (NVML index, NUMA, NVLink, health) joined by UUID from the GpuNode.
/// Also returns each GPU's `(pool, device)` by position.
pub fn node_dra(
    n: &KubeNode,
    g: Option<&GpuNode>,
    published: &[crate::controller::dra::inventory::SliceGpu],
) -> (core::Node, Vec<(String, String)>) {
    let agent = g.and_then(|g| g.status.as_ref()).map(agent_gpus);
    node_dra_with(&node_without_gpus(n), agent.as_ref(), published)
}

/// [`node_dra`] from the node's [`node_without_gpus`] and its GpuNode's [`agent_gpus`] (what
/// the operator caches of each).
pub fn node_dra_with(
    part: &core::Node,
    agent: Option<&AgentGpus>,
    published: &[crate::controller::dra::inventory::SliceGpu],
) -> (core::Node, Vec<(String, String)>) {
    let mut out = part.clone();
    let (gpus, links, names) = crate::controller::dra::inventory::core_gpus(published, agent);
    out.gpus = gpus;
    out.gpu_links = links;
    (out, names)
}

/// A Node and its GpuNode (if the node agent published one) as a core node. Values that do
/// not parse count as zero (the node then takes no work) rather than failing the cycle.
pub fn node(n: &KubeNode, g: Option<&GpuNode>) -> core::Node {
    let agent = g.and_then(|g| g.status.as_ref()).map(agent_gpus);
    node_with(&node_without_gpus(n), agent.as_ref())
}

/// [`node`] from the node's [`node_without_gpus`] and its GpuNode's [`agent_gpus`] (what the
/// operator caches of each).
pub fn node_with(part: &core::Node, agent: Option<&AgentGpus>) -> core::Node {
    let mut out = part.clone();
    if let Some(a) = agent {
        out.gpus = a.gpus.clone();
        out.gpu_links = a.links(&a.gpus);
    }
    out
}

/// What [`node`] reads of a Node: the core node without GPUs (those come from its GpuNode).
pub fn node_without_gpus(n: &KubeNode) -> core::Node {
    let status = n.status.as_ref();
    let alloc = status.and_then(|s| s.allocatable.as_ref());
    let cpu = alloc
        .and_then(|a| a.get("cpu"))
        .and_then(|q| quantity::cpu_millis(q).ok())
        .unwrap_or(0);
    let mem = alloc
        .and_then(|a| a.get("memory"))
        .and_then(|q| quantity::memory_mib(q).ok())
        .unwrap_or(0);
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let spec = n.spec.as_ref();
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .filter_map(|t| {
                    Some(Taint {
                        key: t.key.clone(),
                        value: t.value.clone().unwrap_or_default(),
                        effect: t.effect.parse().ok()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut labels: BTreeMap<String, String> = n.labels().clone();
    labels
        .entry(muster_crds::labels::HOSTNAME.to_string())
        .or_insert_with(|| n.name_any());
    core::Node {
        name: n.name_any(),
        labels,
        cpu_millis: cpu,
        memory_mib: mem,
        taints,
        ready,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        gpus: Vec::new(),
        gpu_links: Vec::new(),
        extended: alloc
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.contains('/'))
            .filter_map(|(k, q)| Some((k.clone(), quantity::count(q).ok()?)))
            .collect(),
    }
}

/// What [`node`] reads of a GpuNode's status: the GPUs as the node agent reports them, and
/// its `nvidia-smi topo -m` matrix with each cell parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentGpus {
    /// The GPUs, in the status's order.
    pub gpus: Vec<core::Gpu>,
    /// The matrix by NVML index, as reported; a cell that does not parse is `None`.
    pub topology: Vec<Vec<Option<Link>>>,
}

/// A GpuNode's status as [`AgentGpus`].
pub fn agent_gpus(gs: &muster_crds::v1alpha1::GpuNodeStatus) -> AgentGpus {
    AgentGpus {
        gpus: gs
            .gpus
            .iter()
            .map(|x| core::Gpu {
                index: x.index,
                uuid: x.uuid.clone(),
                model: x.model.as_str().into(),
                memory_mib: x.memory_mib,
                healthy: x.health.state == GpuHealthState::Healthy,
                numa: x.numa_node,
                nvlink_peers: x.nvlink_peers.clone(),
            })
            .collect(),
        topology: gs
            .topology
            .iter()
            .map(|row| row.iter().map(|c| c.parse::<Link>().ok()).collect())
            .collect(),
    }
}

impl AgentGpus {
    /// The agent's matrix (rows and columns by NVML index) re-indexed by position in `gpus`;
    /// empty when it is absent, not square, or any entry does not parse (the core then
    /// derives links from NUMA and NVLink peers).
    pub fn links(&self, gpus: &[core::Gpu]) -> Vec<Vec<Link>> {
        let matrix = &self.topology;
        if matrix.is_empty()
            || matrix.len() != gpus.len()
            || matrix.iter().any(|r| r.len() != gpus.len())
        {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(gpus.len());
        for a in gpus {
            let mut row = Vec::with_capacity(gpus.len());
            for b in gpus {
                match matrix
                    .get(a.index as usize)
                    .and_then(|r| r.get(b.index as usize))
                {
                    Some(Some(l)) => row.push(*l),
                    _ => return Vec::new(),
                }
            }
            out.push(row);
        }
        out
    }
}

/// Nodes by name, in natural name order; [`NodeId`] indexes `nodes`.
#[derive(Clone, Debug, Default)]
pub struct NodeTable {
    /// Core nodes, shared with every cycle's snapshot ([`core::Snapshot::nodes`]).
    pub nodes: Arc<Vec<core::Node>>,
    /// Index by name.
    pub index: HashMap<String, NodeId>,
    /// The NVIDIA DRA driver's devices by pool (see [`NodeTable::device`]).
    devices: HashMap<Box<str>, PoolDevices>,
}

/// One pool's devices: their names, and each one's node and GPU (NVML index). A pool is one
/// node's GPUs (the driver names it after the node): a few names, searched in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PoolDevices {
    names: StrTable,
    /// By name id: the node and the GPU's NVML index.
    gpus: Vec<(NodeId, u32)>,
}

impl NodeTable {
    /// Builds the table from translated nodes (sorted here).
    pub fn new(mut nodes: Vec<core::Node>) -> Self {
        nodes.sort_by(|a, b| core::util::natural_cmp(&a.name, &b.name));
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i as NodeId))
            .collect();
        NodeTable {
            nodes: Arc::new(nodes),
            index,
            devices: HashMap::new(),
        }
    }

    /// Adds the DRA devices of nodes: by node name, each GPU's `(pool, device)` by position
    /// in the node's GPUs.
    pub fn with_devices(mut self, names: HashMap<String, Vec<(String, String)>>) -> Self {
        // Per pool: its device names, and each device's (node, GPU index).
        type Pool = (StrTableBuilder, Vec<(NodeId, u32)>);
        let mut pools: HashMap<&str, Pool> = HashMap::new();
        // In node order, so that a device two nodes claim (never, from one driver) resolves
        // the same way every time.
        let mut named: Vec<(NodeId, &Vec<(String, String)>)> = names
            .iter()
            .filter_map(|(node, list)| Some((*self.index.get(node)?, list)))
            .collect();
        named.sort_unstable_by_key(|(id, _)| *id);
        for (id, list) in named {
            let gpus = &self.nodes[id as usize].gpus;
            for ((pool, device), g) in list.iter().zip(gpus) {
                let (b, rows) = pools.entry(pool.as_str()).or_default();
                let d = b.id(device) as usize;
                if d == rows.len() {
                    rows.push((id, g.index));
                } else {
                    rows[d] = (id, g.index);
                }
            }
        }
        self.devices = pools
            .into_iter()
            .map(|(pool, (b, gpus))| {
                (
                    pool.into(),
                    PoolDevices {
                        names: b.finish(),
                        gpus,
                    },
                )
            })
            .collect();
        self
    }

    /// The node and GPU (NVML index) of the NVIDIA DRA driver's device `device` of pool
    /// `pool` (what a ResourceClaim's allocation names, as the core counts it).
    pub fn device(&self, pool: &str, device: &str) -> Option<(NodeId, u32)> {
        let p = self.devices.get(pool)?;
        (0..p.gpus.len())
            .find(|&i| p.names.get(i as u32) == device)
            .map(|i| p.gpus[i])
    }

    /// Whether `self` and `other` know the same devices.
    pub fn same_devices(&self, other: &NodeTable) -> bool {
        self.devices == other.devices
    }

    /// The id of a node; a name not in the table maps past the end, which the core treats as
    /// a node that no longer exists (its jobs end as NODE_FAIL).
    pub fn id(&self, name: &str) -> NodeId {
        self.index.get(name).copied().unwrap_or(NodeId::MAX)
    }

    /// The node by name.
    pub fn get(&self, name: &str) -> Option<&core::Node> {
        self.index.get(name).map(|&i| &self.nodes[i as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::{gpu_node, kube_node};
    use super::*;
    use crate::core::TaintEffect;
    #[test]
    fn nodes_translate_with_gpus_and_health() {
        let n = node(
            &kube_node("gpu001", true),
            Some(&gpu_node("gpu001", 8, &[3])),
        );
        assert_eq!(n.name, "gpu001");
        assert_eq!(n.cpu_millis, 223_500);
        assert_eq!(n.memory_mib, 2 * 1024 * 1024);
        assert!(n.ready);
        assert_eq!(n.labels["kubernetes.io/hostname"], "gpu001");
        assert_eq!(n.taints[0].effect, TaintEffect::NoSchedule);
        assert_eq!(n.gpus.len(), 8);
        assert!(!n.gpus[3].healthy && n.gpus[2].healthy);
        assert_eq!(n.gpus[5].numa, Some(1));
        let cpu_only = node(&kube_node("cpu1", false), None);
        assert!(!cpu_only.ready);
        assert!(cpu_only.gpus.is_empty());
    }

    /// The agent's matrix `matrix` re-indexed for `gpus` (as [`node`] does).
    fn gpu_links(gpus: &[core::Gpu], matrix: &[Vec<String>]) -> Vec<Vec<Link>> {
        let status = muster_crds::v1alpha1::GpuNodeStatus {
            topology: matrix.to_vec(),
            ..Default::default()
        };
        agent_gpus(&status).links(gpus)
    }

    #[test]
    fn topology_matrix_is_reindexed_by_position() {
        let gpus: Vec<core::Gpu> = [1u32, 0]
            .iter()
            .map(|&i| core::Gpu {
                index: i,
                ..Default::default()
            })
            .collect();
        let m = vec![
            vec!["X".to_string(), "NV18".to_string()],
            vec!["PIX".to_string(), "X".to_string()],
        ];
        // position 0 is NVML index 1: its row is m[1].
        let l = gpu_links(&gpus, &m);
        assert_eq!(l[0][1], Link::Pix);
        assert_eq!(l[1][0], Link::NvLink(18));
        assert!(gpu_links(&gpus, &[vec!["X".into()]]).is_empty());
        let bad = vec![
            vec!["X".to_string(), "??".to_string()],
            vec!["PIX".to_string(), "X".to_string()],
        ];
        assert!(gpu_links(&gpus, &bad).is_empty());
    }
    #[test]
    fn dra_devices_resolve_to_their_node_and_gpu() {
        let mut a = node(&kube_node("gpu1", true), Some(&gpu_node("gpu1", 2, &[])));
        // Positions and NVML indices differ: the device at position 0 is GPU 1.
        a.gpus.reverse();
        let b = node(&kube_node("gpu2", true), Some(&gpu_node("gpu2", 2, &[])));
        let names = |pool: &str| {
            vec![
                (pool.to_string(), "gpu-0".to_string()),
                (pool.to_string(), "gpu-1".to_string()),
            ]
        };
        let t = NodeTable::new(vec![b, a]).with_devices(
            [
                ("gpu1".to_string(), names("gpu1")),
                ("gpu2".to_string(), names("gpu2")),
                ("gone".to_string(), names("gone")),
            ]
            .into(),
        );
        assert_eq!(t.device("gpu1", "gpu-0"), Some((0, 1)));
        assert_eq!(t.device("gpu1", "gpu-1"), Some((0, 0)));
        assert_eq!(t.device("gpu2", "gpu-1"), Some((1, 1)));
        assert_eq!(t.device("gpu2", "gpu-2"), None);
        assert_eq!(t.device("gone", "gpu-0"), None, "a node not in the table");
        assert!(t.same_devices(&t.clone()));
        assert!(!t.same_devices(&NodeTable::default()));
    }
}

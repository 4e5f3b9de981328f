//! Nodes and GpuNodes as the operator caches them, and the node table built from them.
//!
//! Each Node is read once per watch event into the core node without its GPUs
//! ([`translate::node_without_gpus`]) and each GpuNode into its agent's GPUs
//! ([`translate::agent_gpus`]): what the table is built from, and nothing else (a Node
//! object is ~1.5 KB before its labels and status, and 16,384 of them plus their GpuNodes
//! were ~90 MiB cached whole). Both are kept compact (each object's strings in one
//! `StrTable`, numbers in flat arrays) and expanded only while a table is built. The table
//! is built from these exactly as [`translate::node`] builds one node from the objects (one
//! translation), rebuilt when any Node, GpuNode or ResourceSlice event arrived since, and
//! shared: the leader's cycles and the admission webhook read the same table.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::watcher;
use muster_crds::v1alpha1::GpuNode;

use super::compact::{StrId, StrTable, StrTableBuilder, cached_lookup, share_last};
use super::dra::inventory::{self, SliceObs};
use super::translate::{self, AgentGpus, NodeTable};
use crate::core::{self, Link, Taint, TaintEffect};

/// A Node as cached: the core node without its GPUs ([`translate::node_without_gpus`]),
/// compact.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeObs {
    /// The name (string 0), label keys and values, taint keys and values, extended resource
    /// names.
    strs: StrTable,
    labels: Box<[(StrId, StrId)]>,
    taints: Box<[(StrId, StrId, TaintEffect)]>,
    extended: Box<[(StrId, u64)]>,
    cpu_millis: u64,
    memory_mib: u64,
    ready: bool,
    unschedulable: bool,
}

impl NodeObs {
    /// `n` as cached.
    pub fn new(n: &Node) -> NodeObs {
        NodeObs::of(&translate::node_without_gpus(n))
    }

    /// A core node without GPUs, compact.
    fn of(node: &core::Node) -> NodeObs {
        let mut b = StrTableBuilder::default();
        b.id(&node.name);
        let labels = node
            .labels
            .iter()
            .map(|(k, v)| (b.id(k), b.id(v)))
            .collect();
        let taints = node
            .taints
            .iter()
            .map(|t| (b.id(&t.key), b.id(&t.value), t.effect))
            .collect();
        let extended = node.extended.iter().map(|(k, v)| (b.id(k), *v)).collect();
        NodeObs {
            strs: b.finish(),
            labels,
            taints,
            extended,
            cpu_millis: node.cpu_millis,
            memory_mib: node.memory_mib,
            ready: node.ready,
            unschedulable: node.unschedulable,
        }
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        self.strs.get(0)
    }

    /// The core node without GPUs.
    pub fn node(&self) -> core::Node {
        let s = &self.strs;
        core::Node {
            name: self.name().to_string(),
            labels: self
                .labels
                .iter()
                .map(|&(k, v)| (s.get(k).to_string(), s.get(v).to_string()))
                .collect(),
            cpu_millis: self.cpu_millis,
            memory_mib: self.memory_mib,
            taints: self
                .taints
                .iter()
                .map(|&(k, v, effect)| Taint {
                    key: s.get(k).to_string(),
                    value: s.get(v).to_string(),
                    effect,
                })
                .collect(),
            ready: self.ready,
            unschedulable: self.unschedulable,
            gpus: Vec::new(),
            gpu_links: Vec::new(),
            extended: self
                .extended
                .iter()
                .map(|&(k, v)| (s.get(k).to_string(), v))
                .collect(),
        }
    }
}

cached_lookup!(NodeObs, "Node", "", "v1", "nodes", |o| name: Some(NodeObs::name(o)), namespace: None);

/// A GpuNode as cached: its name and its agent's GPUs ([`translate::agent_gpus`], `None`
/// before the agent reports), compact.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuObs {
    name: Box<str>,
    agent: Option<AgentObs>,
}

/// [`AgentGpus`], compact.
#[derive(Clone, Debug, PartialEq)]
struct AgentObs {
    /// UUIDs and models.
    strs: StrTable,
    gpus: Box<[GpuRow]>,
    /// Every GPU's NVLink peers, concatenated in GPU order.
    peers: Box<[u32]>,
    /// The matrix's cells, row after row.
    cells: Box<[Option<Link>]>,
    /// Where each row of the matrix ends in `cells`.
    rows: Box<[u32]>,
}

#[derive(Clone, Debug, PartialEq)]
struct GpuRow {
    index: u32,
    uuid: StrId,
    model: StrId,
    memory_mib: u64,
    healthy: bool,
    numa: Option<i32>,
    /// End of its peers in [`AgentObs::peers`] (they start at the previous GPU's end).
    peers_end: u32,
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("a GpuNode's GPUs are far below 4 billion")
}

impl AgentObs {
    fn of(a: &AgentGpus) -> AgentObs {
        let mut b = StrTableBuilder::default();
        let mut peers = Vec::new();
        let gpus = a
            .gpus
            .iter()
            .map(|g| {
                peers.extend_from_slice(&g.nvlink_peers);
                GpuRow {
                    index: g.index,
                    uuid: b.id(&g.uuid),
                    model: b.id(&g.model),
                    memory_mib: g.memory_mib,
                    healthy: g.healthy,
                    numa: g.numa,
                    peers_end: len32(peers.len()),
                }
            })
            .collect();
        let mut cells = Vec::new();
        let mut rows = Vec::with_capacity(a.topology.len());
        for row in &a.topology {
            cells.extend_from_slice(row);
            rows.push(len32(cells.len()));
        }
        AgentObs {
            strs: b.finish(),
            gpus,
            peers: peers.into_boxed_slice(),
            cells: cells.into_boxed_slice(),
            rows: rows.into_boxed_slice(),
        }
    }

    fn expand(&self) -> AgentGpus {
        let mut start = 0;
        let mut model = None;
        let gpus = self
            .gpus
            .iter()
            .map(|g| {
                let peers = self.peers[start..g.peers_end as usize].to_vec();
                start = g.peers_end as usize;
                core::Gpu {
                    index: g.index,
                    uuid: self.strs.get(g.uuid).to_string(),
                    model: share_last(&mut model, self.strs.get(g.model)),
                    memory_mib: g.memory_mib,
                    healthy: g.healthy,
                    numa: g.numa,
                    nvlink_peers: peers,
                }
            })
            .collect();
        let mut start = 0;
        let topology = self
            .rows
            .iter()
            .map(|&end| {
                let row = self.cells[start..end as usize].to_vec();
                start = end as usize;
                row
            })
            .collect();
        AgentGpus { gpus, topology }
    }
}

impl GpuObs {
    /// `g` as cached.
    pub fn new(g: &GpuNode) -> GpuObs {
        GpuObs {
            name: g.name_any().into_boxed_str(),
            agent: g
                .status
                .as_ref()
                .map(|st| AgentObs::of(&translate::agent_gpus(st))),
        }
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent's GPUs, once reported.
    pub fn agent(&self) -> Option<AgentGpus> {
        self.agent.as_ref().map(AgentObs::expand)
    }
}

cached_lookup!(GpuObs, "GpuNode", "muster.dev", "v1alpha1", "gpunodes", |o| name: Some(&*o.name), namespace: None);

/// A Node watch event as the node cache keeps it.
pub fn slim_node(ev: watcher::Event<Node>) -> Option<watcher::Event<NodeObs>> {
    Some(ev.map_obs(NodeObs::new))
}

/// A GpuNode watch event as the GpuNode cache keeps it.
pub fn slim_gpunode(ev: watcher::Event<GpuNode>) -> Option<watcher::Event<GpuObs>> {
    Some(ev.map_obs(GpuObs::new))
}

trait MapObs<K> {
    fn map_obs<S>(self, f: impl Fn(&K) -> S) -> watcher::Event<S>;
}

impl<K> MapObs<K> for watcher::Event<K> {
    fn map_obs<S>(self, f: impl Fn(&K) -> S) -> watcher::Event<S> {
        use watcher::Event as E;
        match self {
            E::Apply(k) => E::Apply(f(&k)),
            E::Delete(k) => E::Delete(f(&k)),
            E::InitApply(k) => E::InitApply(f(&k)),
            E::Init => E::Init,
            E::InitDone => E::InitDone,
        }
    }
}

/// The node table, built from the caches when they changed (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct NodeCache {
    /// What it was built from: the change counter's value and whether slices were read;
    /// `None` before the first build.
    built: Option<(u64, bool)>,
    table: Arc<NodeTable>,
}

/// Counts the Node, GpuNode and ResourceSlice events the caches applied: the node table is
/// rebuilt when it moved.
#[derive(Clone, Debug, Default)]
pub struct NodeEvents(Arc<AtomicU64>);

impl NodeEvents {
    /// One more event (after the cache applied it).
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl NodeCache {
    /// The node table of the caches' contents: each Node with its GpuNode and, where the
    /// NVIDIA DRA driver publishes its GPUs (`slices`, when `use_slices`), those (see
    /// [`translate::node_dra`]). `events` is read before the caches, so an event applied
    /// meanwhile rebuilds the table again next time.
    pub(crate) fn table(
        &mut self,
        events: &NodeEvents,
        nodes: impl FnOnce() -> Vec<Arc<NodeObs>>,
        gpus: impl FnOnce() -> Vec<Arc<GpuObs>>,
        slices: impl FnOnce() -> Vec<Arc<SliceObs>>,
        use_slices: bool,
    ) -> Arc<NodeTable> {
        let key = (events.get(), use_slices);
        if self.built == Some(key) {
            return self.table.clone();
        }
        let (nodes, gpus) = (nodes(), gpus());
        let slices = if use_slices { slices() } else { Vec::new() };
        self.table = Arc::new(build_table(&nodes, &gpus, &slices));
        self.built = Some(key);
        self.table.clone()
    }
}

/// The table of `nodes` with their GpuNodes and published GPUs.
pub fn build_table(
    nodes: &[Arc<NodeObs>],
    gpus: &[Arc<GpuObs>],
    slices: &[Arc<SliceObs>],
) -> NodeTable {
    let gpu_by: HashMap<&str, &GpuObs> = gpus.iter().map(|g| (g.name(), g.as_ref())).collect();
    let slices_by = inventory::by_node(slices.iter().map(|s| s.as_ref()));
    let mut devices = HashMap::new();
    let translated = nodes
        .iter()
        .map(|n| {
            let name = n.name();
            let part = n.node();
            let agent = gpu_by.get(name).and_then(|g| g.agent());
            match slices_by.get(name).and_then(|v| inventory::node_gpus(v)) {
                Some(published) => {
                    let (node, names) = translate::node_dra_with(&part, agent.as_ref(), &published);
                    devices.insert(name.to_string(), names);
                    node
                }
                None => translate::node_with(&part, agent.as_ref()),
            }
        })
        .collect();
    NodeTable::new(translated).with_devices(devices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::translate::tests_support::kube_node;
    use k8s_openapi::api::core::v1::NodeCondition;
    use kube::runtime::reflector;
    use muster_crds::v1alpha1::{GpuHealth, GpuInfo, GpuNodeSpec, GpuNodeStatus};

    fn gpu_node(name: &str, gpus: u32) -> GpuNode {
        let mut g = GpuNode::new(
            name,
            GpuNodeSpec {
                node_name: name.into(),
            },
        );
        g.status = Some(GpuNodeStatus {
            gpus: (0..gpus)
                .map(|i| GpuInfo {
                    index: i,
                    uuid: format!("GPU-{name}-{i}"),
                    model: "NVIDIA H100 80GB HBM3".into(),
                    memory_mib: 81_559,
                    numa_node: Some((i / 4) as i32),
                    nvlink_peers: (0..gpus).filter(|j| *j != i).collect(),
                    health: GpuHealth::default(),
                    ..Default::default()
                })
                .collect(),
            topology: (0..gpus)
                .map(|a| {
                    (0..gpus)
                        .map(|b| if a == b { "X".into() } else { "NV18".into() })
                        .collect()
                })
                .collect(),
            ..Default::default()
        });
        g
    }

    #[test]
    fn the_table_from_the_caches_is_the_one_from_the_objects() {
        let mut nodes: Vec<Node> = (1..=4)
            .map(|i| kube_node(&format!("gpu{i:03}"), true))
            .collect();
        nodes[1]
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(NodeCondition {
                type_: "MemoryPressure".into(),
                status: "False".into(),
                ..Default::default()
            });
        // gpu004 has no GpuNode; a GpuNode without a Node is not a node.
        let gpunodes: Vec<GpuNode> = ["gpu001", "gpu002", "gpu003", "gpu009"]
            .iter()
            .map(|n| gpu_node(n, 8))
            .collect();
        let by: HashMap<String, &GpuNode> = gpunodes.iter().map(|g| (g.name_any(), g)).collect();
        let direct = NodeTable::new(
            nodes
                .iter()
                .map(|n| translate::node(n, by.get(&n.name_any()).copied()))
                .collect(),
        );
        let cached = build_table(
            &nodes
                .iter()
                .map(|n| Arc::new(NodeObs::new(n)))
                .collect::<Vec<_>>(),
            &gpunodes
                .iter()
                .map(|g| Arc::new(GpuObs::new(g)))
                .collect::<Vec<_>>(),
            &[],
        );
        assert_eq!(cached.nodes, direct.nodes);
        assert_eq!(cached.nodes.len(), 4);
        assert_eq!(cached.get("gpu001").unwrap().gpus.len(), 8);
        assert_eq!(cached.get("gpu001").unwrap().gpu_links.len(), 8);
        assert!(cached.get("gpu004").unwrap().gpus.is_empty());
    }

    #[test]
    fn the_table_is_rebuilt_after_an_event_and_only_then() {
        let (nodes, mut wn) = reflector::store::<NodeObs>();
        let (gpus, mut wg) = reflector::store::<GpuObs>();
        let events = NodeEvents::default();
        let mut cache = NodeCache::default();
        let table = |cache: &mut NodeCache| {
            cache.table(&events, || nodes.state(), || gpus.state(), Vec::new, false)
        };
        let empty = table(&mut cache);
        assert!(empty.nodes.is_empty());
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(kube_node("gpu001", true)),
            watcher::Event::InitDone,
        ] {
            wn.apply_watcher_event(&slim_node(ev).unwrap());
        }
        // Not told of the events yet: the table it has.
        assert!(Arc::ptr_eq(&table(&mut cache), &empty));
        events.bump();
        let one = table(&mut cache);
        assert_eq!(one.nodes.len(), 1);
        assert!(one.nodes[0].gpus.is_empty());
        assert!(
            Arc::ptr_eq(&table(&mut cache), &one),
            "no event: the same table"
        );
        wg.apply_watcher_event(
            &slim_gpunode(watcher::Event::Apply(gpu_node("gpu001", 4))).unwrap(),
        );
        events.bump();
        let with_gpus = table(&mut cache);
        assert_eq!(with_gpus.nodes[0].gpus.len(), 4);
        wn.apply_watcher_event(
            &slim_node(watcher::Event::Delete(kube_node("gpu001", true))).unwrap(),
        );
        events.bump();
        assert!(table(&mut cache).nodes.is_empty());
    }
}

//! The cluster spec file: one YAML description of a GPU cluster — switch levels, nodes, GPUs —
//! shared by the simulator (`muster simulate`), the test control plane (which turns it into
//! Node and GpuNode objects) and the benchmarks.
//!
//! ```yaml
//! name: sandbox
//! levels:                        # broadest first; kubernetes.io/hostname is implicit last
//!   - key: muster.dev/spine      # node-label key of this switch level
//!     count: 1                   # switches under each switch of the level above
//!   - key: muster.dev/leaf
//!     count: 4
//! nodesPerLeaf: 4
//! nodeNamePrefix: gpu            # gpu001, gpu002, … (zero-padded to >= 3 digits)
//! node:
//!   cpus: 224
//!   memory: 2Ti                  # MiB as a bare integer, or Ki/Mi/Gi/Ti (binary), K/M/G/T (decimal)
//!   gpus: 8
//!   gpuModel: NVIDIA H100 80GB HBM3
//!   gpuMemoryMib: 81559
//!   layout: dgx                  # dgx | pcie | none
//!   extendedResources:           # allocatable extended resources (as a device plugin
//!     rdma/ib: 1                 #   advertises them), whole counts; none by default
//! labels: {}                     # extra labels on every node
//! taints: []                     # [{key, value, effect}]
//! overrides:                     # later entries win; `nodes` is a Slurm hostlist
//!   - nodes: gpu[013-016]
//!     gpuModel: NVIDIA A100-SXM4-80GB
//!     labels: {muster.dev/feature.a100: "true"}
//! ```
//!
//! Switch label values are the level's `valuePrefix` (default: the key's name after the `/`)
//! followed by a 1-based number counted across the whole level (`leaf1` … `leaf128`), so every
//! switch has a cluster-unique name. Every node also gets `kubernetes.io/hostname` and the GPU
//! labels the node agent would write (`muster.dev/gpu.product`, `gpu.count`, `gpu.memory`).
//! GPU UUIDs are derived from the node name and GPU index (a stable hash), so the same spec
//! always yields the same UUIDs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::model::Snapshot;
use super::node::{Gpu, Link, Node, Taint};
use super::util::{FNV_OFFSET, fnv1a};
use muster_crds::labels;

/// Label key of the spine level in the built-in specs.
pub const SPINE_LABEL: &str = "muster.dev/spine";
/// Label key of the leaf level in the built-in specs.
pub const LEAF_LABEL: &str = "muster.dev/leaf";

/// Most GPUs one node may have (the core keeps a node's GPUs in a 64-bit mask).
pub const MAX_GPUS_PER_NODE: u32 = 64;

/// A cluster description; see the [module docs](self) for the YAML format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// A name for reports.
    #[serde(default)]
    pub name: String,
    /// Switch levels, broadest first. Empty: one flat switch of `nodesPerLeaf` nodes.
    #[serde(default)]
    pub levels: Vec<LevelSpec>,
    /// Nodes under each leaf switch.
    pub nodes_per_leaf: u32,
    /// Node names are this prefix and a zero-padded number (`gpu001`).
    #[serde(default = "default_prefix")]
    pub node_name_prefix: String,
    /// Digits of the node number; default: enough for every node, at least 3.
    #[serde(default)]
    pub node_name_digits: Option<u32>,
    /// What every node looks like.
    pub node: NodeTemplate,
    /// Extra labels on every node.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taints on every node.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Changes for some nodes, applied in order.
    #[serde(default)]
    pub overrides: Vec<NodeOverride>,
}

fn default_prefix() -> String {
    "gpu".into()
}

/// One switch level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LevelSpec {
    /// Node-label key naming the switch a node hangs under at this level.
    pub key: String,
    /// Switches under each switch of the level above (fan-out).
    pub count: u32,
    /// Label value prefix; default: the part of `key` after the last `/`.
    #[serde(default)]
    pub value_prefix: Option<String>,
}

/// Hardware of a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeTemplate {
    /// Allocatable CPUs (cores or hardware threads, as the kubelet reports them).
    pub cpus: u32,
    /// Allocatable memory.
    pub memory: MemQuantity,
    /// GPUs per node.
    #[serde(default)]
    pub gpus: u32,
    /// GPU model as NVML names it.
    #[serde(default)]
    pub gpu_model: String,
    /// Memory of one GPU in MiB.
    #[serde(default)]
    pub gpu_memory_mib: u64,
    /// Intra-node GPU wiring.
    #[serde(default)]
    pub layout: GpuLayout,
    /// NVLinks between two GPUs for the `dgx` layout (`NV18` on H100, `NV12` on A100).
    #[serde(default = "default_nvlinks")]
    pub nvlinks: u8,
    /// Allocatable extended resources (`rdma/ib: 1`), as a device plugin advertises them:
    /// what partitions' `jobEnvironment.resources` draw on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended_resources: BTreeMap<String, u64>,
}

fn default_nvlinks() -> u8 {
    18
}

/// Changes applied to the nodes named by a hostlist.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOverride {
    /// The nodes, as a Slurm hostlist (`gpu[001-016,033]`).
    pub nodes: String,
    /// See [`NodeTemplate::cpus`].
    #[serde(default)]
    pub cpus: Option<u32>,
    /// See [`NodeTemplate::memory`].
    #[serde(default)]
    pub memory: Option<MemQuantity>,
    /// See [`NodeTemplate::gpus`].
    #[serde(default)]
    pub gpus: Option<u32>,
    /// See [`NodeTemplate::gpu_model`].
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// See [`NodeTemplate::gpu_memory_mib`].
    #[serde(default)]
    pub gpu_memory_mib: Option<u64>,
    /// See [`NodeTemplate::layout`].
    #[serde(default)]
    pub layout: Option<GpuLayout>,
    /// See [`NodeTemplate::nvlinks`].
    #[serde(default)]
    pub nvlinks: Option<u8>,
    /// Labels added (or replaced) on these nodes.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taints added to these nodes.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Extended resources added (or replaced; 0 removes one) on these nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended_resources: BTreeMap<String, u64>,
}

/// Intra-node GPU wiring presets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuLayout {
    /// DGX/HGX: every GPU pair on NVLink through NVSwitch; first half of the GPUs on NUMA
    /// node 0, second half on NUMA node 1.
    Dgx,
    /// PCIe server: GPU pairs (0,1), (2,3), … share a PCIe switch (`PIX`); pairs on one
    /// socket are `NODE` apart; first half on NUMA 0, second half on NUMA 1 (`SYS` across).
    Pcie,
    /// No topology information (no NUMA, no links): every GPU is equally close.
    #[default]
    None,
}

/// A memory size in MiB; in YAML a bare integer (MiB) or a string with a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemQuantity(pub u64);

impl Serialize for MemQuantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for MemQuantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(MemQuantity(n)),
            Raw::Str(s) => parse_mem(&s)
                .map(MemQuantity)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `2Ti`, `2048Gi`, `512G`, `64000` (MiB) into MiB.
fn parse_mem(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("invalid memory '{s}': expected an integer (MiB) or an integer with Ki, Mi, Gi, Ti, K, M, G or T")
    })?;
    const MI: u128 = 1 << 20;
    let bytes: u128 = match unit {
        "" | "Mi" => return Ok(n),
        "Ki" => u128::from(n) << 10,
        "Gi" => return Ok(n.saturating_mul(1 << 10)),
        "Ti" => return Ok(n.saturating_mul(1 << 20)),
        "K" => u128::from(n) * 1_000,
        "M" => u128::from(n) * 1_000_000,
        "G" => u128::from(n) * 1_000_000_000,
        "T" => u128::from(n) * 1_000_000_000_000,
        _ => {
            return Err(format!(
                "invalid memory unit '{unit}' in '{s}': expected Ki, Mi, Gi, Ti, K, M, G or T"
            ));
        }
    };
    Ok(u64::try_from(bytes / MI).unwrap_or(u64::MAX))
}

/// Why a cluster spec cannot be built.
#[derive(Debug, Error)]
pub enum SpecError {
    /// The YAML does not parse or has unknown fields.
    #[error("cluster spec: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A field has a value outside what is allowed.
    #[error("cluster spec: {field}: {message}")]
    Invalid {
        /// The field, as a path (`overrides[1].nodes`).
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// A node in a neutral form: everything the test control plane needs to create its Node and
/// GpuNode objects, and what [`ClusterSpec::nodes`] turns into core [`Node`]s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Labels, including `kubernetes.io/hostname`, the switch levels and the GPU labels.
    pub labels: BTreeMap<String, String>,
    /// Allocatable CPU in millicores.
    pub cpu_millis: u64,
    /// Allocatable memory in MiB.
    pub memory_mib: u64,
    /// Taints.
    pub taints: Vec<Taint>,
    /// GPUs by index.
    pub gpus: Vec<GpuInfo>,
    /// `nvidia-smi topo -m` matrix between the GPUs (`X`, `NV18`, `PIX`, `NODE`, `SYS`, …);
    /// empty for the `none` layout.
    pub topology: Vec<Vec<String>>,
    /// Allocatable extended resources (`rdma/ib: 1`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended_resources: BTreeMap<String, u64>,
}

/// One GPU in neutral form (the fields of the GpuNode CRD's `GpuInfo`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfo {
    /// NVML index.
    pub index: u32,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, stable for a node name and index.
    pub uuid: String,
    /// Model name.
    pub model: String,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// NUMA node, if the layout says.
    pub numa_node: Option<i32>,
    /// NVLink peers (indices).
    pub nvlink_peers: Vec<u32>,
    /// PCI bus id (`00000000:18:00.0`).
    pub pci_bus_id: String,
}

impl NodeInfo {
    /// The core's view of this node (ready, schedulable, every GPU healthy).
    pub fn to_node(&self) -> Node {
        let gpu_links = self
            .topology
            .iter()
            .map(|row| row.iter().map(|c| c.parse().unwrap_or(Link::Sys)).collect())
            .collect();
        Node {
            name: self.name.clone(),
            labels: self.labels.clone(),
            cpu_millis: self.cpu_millis,
            memory_mib: self.memory_mib,
            taints: self.taints.clone(),
            ready: true,
            unschedulable: false,
            gpus: self
                .gpus
                .iter()
                .map(|g| Gpu {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    model: g.model.as_str().into(),
                    memory_mib: g.memory_mib,
                    healthy: true,
                    numa: g.numa_node,
                    nvlink_peers: g.nvlink_peers.clone(),
                })
                .collect(),
            gpu_links,
            extended: self.extended_resources.clone(),
        }
    }
}

/// A GPU UUID derived from the node name and GPU index: `GPU-` and 32 hex digits in the
/// 8-4-4-4-12 grouping NVML uses.
pub fn gpu_uuid(node: &str, index: u32) -> String {
    let key = format!("{node}/{index}");
    let a = fnv1a(FNV_OFFSET, key.as_bytes());
    let b = fnv1a(a ^ 0x9e37_79b9_7f4a_7c15, key.as_bytes());
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// PCI bus ids of the eight GPUs of a DGX H100, in NVML order; other GPUs get synthetic ones.
const DGX_BUS: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

fn pci_bus_id(layout: GpuLayout, i: u32) -> String {
    let bus = match layout {
        GpuLayout::Dgx if i < 8 => DGX_BUS[i as usize],
        _ => 0x10 + i * 0x08,
    };
    format!("00000000:{bus:02x}:00.0")
}

/// The hardware of one node after overrides.
#[derive(Clone)]
struct Hw {
    cpus: u32,
    memory: u64,
    gpus: u32,
    model: String,
    gpu_mem: u64,
    layout: GpuLayout,
    nvlinks: u8,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    extended: BTreeMap<String, u64>,
}

fn gpus_for(name: &str, hw: &Hw) -> (Vec<GpuInfo>, Vec<Vec<String>>) {
    let n = hw.gpus;
    let half = n.div_ceil(2).max(1);
    let numa = |i: u32| -> Option<i32> {
        match hw.layout {
            GpuLayout::None => None,
            _ => Some(if n >= 2 && i >= half { 1 } else { 0 }),
        }
    };
    let gpus: Vec<GpuInfo> = (0..n)
        .map(|i| GpuInfo {
            index: i,
            uuid: gpu_uuid(name, i),
            model: hw.model.clone(),
            memory_mib: hw.gpu_mem,
            numa_node: numa(i),
            nvlink_peers: match hw.layout {
                GpuLayout::Dgx => (0..n).filter(|&j| j != i).collect(),
                _ => Vec::new(),
            },
            pci_bus_id: pci_bus_id(hw.layout, i),
        })
        .collect();
    let topology = match hw.layout {
        GpuLayout::None => Vec::new(),
        GpuLayout::Dgx => (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        if i == j {
                            "X".to_string()
                        } else {
                            format!("NV{}", hw.nvlinks)
                        }
                    })
                    .collect()
            })
            .collect(),
        GpuLayout::Pcie => (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        if i == j {
                            "X"
                        } else if i / 2 == j / 2 {
                            "PIX"
                        } else if numa(i) == numa(j) {
                            "NODE"
                        } else {
                            "SYS"
                        }
                        .to_string()
                    })
                    .collect()
            })
            .collect(),
    };
    (gpus, topology)
}

impl ClusterSpec {
    /// Parses a spec from YAML and checks it (so a returned spec always builds).
    pub fn from_yaml(text: &str) -> Result<ClusterSpec, SpecError> {
        let spec: ClusterSpec = serde_yaml::from_str(text)?;
        spec.validate()?;
        Ok(spec)
    }

    /// The spec as YAML.
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self).unwrap_or_default()
    }

    /// The built-in default: a DGX-SuperPOD-like fabric of 4 scalable units × 32 nodes ×
    /// 8 H100 GPUs. Each scalable unit is one leaf (`muster.dev/leaf=leaf1..leaf4`) and all
    /// four hang under a single spine (`muster.dev/spine=spine1`), as SuperPOD's spine layer
    /// joins every SU; the spine level is kept so partitions name it and larger specs add
    /// spines with the same keys. Nodes `gpu001`–`gpu128`: 224 CPUs, 2 TiB, DGX layout.
    pub fn superpod() -> ClusterSpec {
        ClusterSpec::tree("superpod", 1, 4, 32, 8)
    }

    /// A small sandbox: 4 leaves × 4 nodes × 8 H100 GPUs under one spine.
    pub fn sandbox() -> ClusterSpec {
        ClusterSpec::tree("sandbox", 1, 4, 4, 8)
    }

    /// A two-level tree of H100 DGX nodes: `spines` spines, `leaves_per_spine` leaves under
    /// each, `nodes_per_leaf` nodes under each leaf, `gpus` GPUs per node.
    pub fn tree(
        name: &str,
        spines: u32,
        leaves_per_spine: u32,
        nodes_per_leaf: u32,
        gpus: u32,
    ) -> ClusterSpec {
        ClusterSpec {
            name: name.into(),
            levels: vec![
                LevelSpec {
                    key: SPINE_LABEL.into(),
                    count: spines,
                    value_prefix: None,
                },
                LevelSpec {
                    key: LEAF_LABEL.into(),
                    count: leaves_per_spine,
                    value_prefix: None,
                },
            ],
            nodes_per_leaf,
            node_name_prefix: "gpu".into(),
            node_name_digits: None,
            node: NodeTemplate {
                cpus: 224,
                memory: MemQuantity(2 << 20),
                gpus,
                gpu_model: "NVIDIA H100 80GB HBM3".into(),
                gpu_memory_mib: 81559,
                layout: GpuLayout::Dgx,
                nvlinks: 18,
                extended_resources: BTreeMap::new(),
            },
            labels: BTreeMap::new(),
            taints: Vec::new(),
            overrides: Vec::new(),
        }
    }

    /// The topology a partition over this cluster lists: the level keys, then
    /// `kubernetes.io/hostname`.
    pub fn topology(&self) -> Vec<String> {
        self.levels
            .iter()
            .map(|l| l.key.clone())
            .chain([labels::HOSTNAME.to_string()])
            .collect()
    }

    /// Number of nodes the spec describes.
    pub fn node_count(&self) -> u64 {
        self.levels
            .iter()
            .fold(u64::from(self.nodes_per_leaf), |n, l| {
                n * u64::from(l.count)
            })
    }

    fn validate(&self) -> Result<(), SpecError> {
        if self.nodes_per_leaf == 0 {
            return Err(invalid("nodesPerLeaf", "must be at least 1"));
        }
        let mut seen = Vec::new();
        for (i, l) in self.levels.iter().enumerate() {
            if l.count == 0 {
                return Err(invalid(format!("levels[{i}].count"), "must be at least 1"));
            }
            if l.key.is_empty() || l.key == labels::HOSTNAME {
                return Err(invalid(
                    format!("levels[{i}].key"),
                    "must be a node-label key other than kubernetes.io/hostname (the node level is implicit)",
                ));
            }
            if seen.contains(&&l.key) {
                return Err(invalid(
                    format!("levels[{i}].key"),
                    format!("'{}' is listed twice", l.key),
                ));
            }
            seen.push(&l.key);
        }
        if self.node_count() > 1_000_000 {
            return Err(invalid(
                "levels",
                format!(
                    "describes {} nodes; at most 1,000,000 are allowed",
                    self.node_count()
                ),
            ));
        }
        if self.node_name_prefix.is_empty() {
            return Err(invalid("nodeNamePrefix", "must not be empty"));
        }
        check_hw("node", self.node.gpus, &self.node.gpu_model)?;
        check_extended("node.extendedResources", &self.node.extended_resources)?;
        for (i, o) in self.overrides.iter().enumerate() {
            if o.nodes.trim().is_empty() {
                return Err(invalid(
                    format!("overrides[{i}].nodes"),
                    "must name nodes as a hostlist such as gpu[001-004]",
                ));
            }
            let gpus = o.gpus.unwrap_or(self.node.gpus);
            let model = o.gpu_model.as_deref().unwrap_or(&self.node.gpu_model);
            check_hw(&format!("overrides[{i}]"), gpus, model)?;
            check_extended(
                &format!("overrides[{i}].extendedResources"),
                &o.extended_resources,
            )?;
        }
        // Building checks the override hostlists against the node names.
        self.build().map(|_| ())
    }

    /// Every node, in name order, in neutral form.
    pub fn build(&self) -> Result<Vec<NodeInfo>, SpecError> {
        let total = self.node_count();
        let digits =
            self.node_name_digits
                .unwrap_or_else(|| (total.to_string().len() as u32).max(3)) as usize;
        let base = Hw {
            cpus: self.node.cpus,
            memory: self.node.memory.0,
            gpus: self.node.gpus,
            model: self.node.gpu_model.clone(),
            gpu_mem: self.node.gpu_memory_mib,
            layout: self.node.layout,
            nvlinks: self.node.nvlinks,
            labels: self.labels.clone(),
            taints: self.taints.clone(),
            extended: self.node.extended_resources.clone(),
        };
        // Leaf switch index -> its label values at every level.
        let mut names = Vec::with_capacity(total as usize);
        let mut level_values: Vec<Vec<String>> = Vec::with_capacity(total as usize);
        let leaves = total / u64::from(self.nodes_per_leaf);
        for leaf in 0..leaves {
            // Switch number at level i (0-based, counted across the level).
            let mut values = Vec::with_capacity(self.levels.len());
            let mut below = leaves;
            for l in &self.levels {
                below /= u64::from(l.count);
                let idx = leaf / below.max(1);
                let prefix = l
                    .value_prefix
                    .clone()
                    .unwrap_or_else(|| l.key.rsplit('/').next().unwrap_or(&l.key).to_string());
                values.push(format!("{prefix}{}", idx + 1));
            }
            for k in 0..self.nodes_per_leaf {
                let n = leaf * u64::from(self.nodes_per_leaf) + u64::from(k) + 1;
                names.push(format!("{}{:0digits$}", self.node_name_prefix, n));
                level_values.push(values.clone());
            }
        }
        let mut hw: Vec<Hw> = vec![base; names.len()];
        if !self.overrides.is_empty() {
            let index: BTreeMap<&str, usize> = names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.as_str(), i))
                .collect();
            for (oi, o) in self.overrides.iter().enumerate() {
                let field = format!("overrides[{oi}].nodes");
                let hosts = expand_hostlist(&o.nodes).map_err(|m| invalid(&field, m))?;
                for h in hosts {
                    let Some(&i) = index.get(h.as_str()) else {
                        return Err(invalid(
                            &field,
                            format!(
                                "node '{h}' is not in the cluster (nodes are {}{:0digits$} to {}{:0digits$})",
                                self.node_name_prefix, 1, self.node_name_prefix, total
                            ),
                        ));
                    };
                    let t = &mut hw[i];
                    if let Some(v) = o.cpus {
                        t.cpus = v;
                    }
                    if let Some(v) = o.memory {
                        t.memory = v.0;
                    }
                    if let Some(v) = o.gpus {
                        t.gpus = v;
                    }
                    if let Some(v) = &o.gpu_model {
                        t.model = v.clone();
                    }
                    if let Some(v) = o.gpu_memory_mib {
                        t.gpu_mem = v;
                    }
                    if let Some(v) = o.layout {
                        t.layout = v;
                    }
                    if let Some(v) = o.nvlinks {
                        t.nvlinks = v;
                    }
                    t.labels
                        .extend(o.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                    t.taints.extend(o.taints.iter().cloned());
                    for (k, &v) in &o.extended_resources {
                        if v == 0 {
                            t.extended.remove(k);
                        } else {
                            t.extended.insert(k.clone(), v);
                        }
                    }
                }
            }
        }
        Ok(names
            .into_iter()
            .zip(level_values)
            .zip(hw)
            .map(|((name, values), hw)| {
                let mut labels = BTreeMap::new();
                for (l, v) in self.levels.iter().zip(values) {
                    labels.insert(l.key.clone(), v);
                }
                labels.insert(labels::HOSTNAME.to_string(), name.clone());
                if hw.gpus > 0 {
                    labels.insert(
                        labels::NODE_GPU_PRODUCT.to_string(),
                        hw.model.replace(' ', "-"),
                    );
                    labels.insert(labels::NODE_GPU_COUNT.to_string(), hw.gpus.to_string());
                    labels.insert(labels::NODE_GPU_MEMORY.to_string(), hw.gpu_mem.to_string());
                }
                labels.extend(hw.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                let (gpus, topology) = gpus_for(&name, &hw);
                NodeInfo {
                    labels,
                    cpu_millis: u64::from(hw.cpus) * 1000,
                    memory_mib: hw.memory,
                    taints: hw.taints.clone(),
                    gpus,
                    topology,
                    extended_resources: hw.extended.clone(),
                    name,
                }
            })
            .collect())
    }

    /// The nodes as core [`Node`]s (ready, every GPU healthy).
    pub fn nodes(&self) -> Result<Vec<Node>, SpecError> {
        Ok(self.build()?.iter().map(NodeInfo::to_node).collect())
    }

    /// An empty snapshot of this cluster with one partition, `gpu`, over every node with
    /// this spec's topology (what the simulator starts from).
    pub fn snapshot(&self) -> Result<Snapshot, SpecError> {
        Ok(Snapshot::with_nodes(self.nodes()?, self.topology()))
    }
}

/// Extended resource names as Kubernetes spells them: `<domain>/<name>` (`rdma/ib`,
/// `nvidia.com/hostdev`), not GPUs (the spec's `gpus` describe those).
fn check_extended(field: &str, res: &BTreeMap<String, u64>) -> Result<(), SpecError> {
    for k in res.keys() {
        let ok_chars = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        let valid = k
            .split_once('/')
            .is_some_and(|(domain, name)| ok_chars(domain) && ok_chars(name));
        if !valid {
            return Err(invalid(
                format!("{field}[{k}]"),
                "an extended resource is named <domain>/<name> (such as rdma/ib or nvidia.com/hostdev)",
            ));
        }
        if k == "nvidia.com/gpu" {
            return Err(invalid(
                format!("{field}[{k}]"),
                "GPUs are described by `gpus`, not as an extended resource",
            ));
        }
    }
    Ok(())
}

fn check_hw(field: &str, gpus: u32, model: &str) -> Result<(), SpecError> {
    if gpus > MAX_GPUS_PER_NODE {
        return Err(invalid(
            format!("{field}.gpus"),
            format!("{gpus} GPUs per node; at most {MAX_GPUS_PER_NODE} are supported"),
        ));
    }
    if gpus > 0 && model.trim().is_empty() {
        return Err(invalid(
            format!("{field}.gpuModel"),
            "must name the GPU model when the node has GPUs",
        ));
    }
    Ok(())
}

/// Expands a Slurm hostlist (`gpu[001-004,010],cpu1`) into names.
fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    muster_crds::slurm::hostlist::expand(list).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superpod_has_128_dgx_nodes_under_four_leaves() {
        let spec = ClusterSpec::superpod();
        let nodes = spec.build().unwrap();
        assert_eq!(nodes.len(), 128);
        assert_eq!(nodes[0].name, "gpu001");
        assert_eq!(nodes[127].name, "gpu128");
        assert_eq!(nodes[0].labels[LEAF_LABEL], "leaf1");
        assert_eq!(nodes[31].labels[LEAF_LABEL], "leaf1");
        assert_eq!(nodes[32].labels[LEAF_LABEL], "leaf2");
        assert_eq!(nodes[127].labels[LEAF_LABEL], "leaf4");
        assert!(nodes.iter().all(|n| n.labels[SPINE_LABEL] == "spine1"));
        assert_eq!(nodes[5].labels[labels::HOSTNAME], "gpu006");
        assert_eq!(
            nodes[0].labels[labels::NODE_GPU_PRODUCT],
            "NVIDIA-H100-80GB-HBM3"
        );
        let g = &nodes[0].gpus;
        assert_eq!(g.len(), 8);
        assert_eq!(g[3].numa_node, Some(0));
        assert_eq!(g[4].numa_node, Some(1));
        assert_eq!(g[0].nvlink_peers, vec![1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(g[0].pci_bus_id, "00000000:18:00.0");
        assert_eq!(nodes[0].topology[0][0], "X");
        assert_eq!(nodes[0].topology[0][7], "NV18");
        assert_eq!(spec.topology(), [SPINE_LABEL, LEAF_LABEL, labels::HOSTNAME]);
    }

    #[test]
    fn uuids_are_stable_and_distinct() {
        let a = gpu_uuid("gpu001", 0);
        assert_eq!(a, gpu_uuid("gpu001", 0));
        assert_ne!(a, gpu_uuid("gpu001", 1));
        assert_ne!(a, gpu_uuid("gpu002", 0));
        assert_eq!(a.len(), 4 + 36);
        assert!(a.starts_with("GPU-"));
        let groups: Vec<usize> = a[4..].split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        let nodes = ClusterSpec::superpod().build().unwrap();
        let mut all: Vec<&str> = nodes
            .iter()
            .flat_map(|n| n.gpus.iter().map(|g| g.uuid.as_str()))
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 128 * 8);
    }

    #[test]
    fn pcie_layout_pairs_gpus_under_switches() {
        let mut spec = ClusterSpec::sandbox();
        spec.node.layout = GpuLayout::Pcie;
        let n = spec.build().unwrap().remove(0);
        assert_eq!(n.topology[0][1], "PIX");
        assert_eq!(n.topology[0][2], "NODE");
        assert_eq!(n.topology[0][4], "SYS");
        assert_eq!(n.topology[6][7], "PIX");
        assert!(n.gpus[0].nvlink_peers.is_empty());
        let node = n.to_node();
        assert_eq!(node.link(0, 1), Link::Pix);
        assert_eq!(node.link(1, 5), Link::Sys);
    }

    #[test]
    fn memory_quantities_parse_with_units() {
        assert_eq!(parse_mem("2Ti").unwrap(), 2 << 20);
        assert_eq!(parse_mem("64000").unwrap(), 64000);
        assert_eq!(parse_mem("1Gi").unwrap(), 1024);
        assert_eq!(parse_mem("1G").unwrap(), 953);
        assert!(parse_mem("12Q").unwrap_err().contains("Ki, Mi"));
        assert!(parse_mem("lots").is_err());
    }

    #[test]
    fn bad_specs_name_the_field() {
        let err = ClusterSpec::from_yaml("nodesPerLeaf: 0\nnode: {cpus: 1, memory: 1}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("nodesPerLeaf"), "{err}");
        let err = ClusterSpec::from_yaml("nodesPerLeaf: 2\nnode: {cpus: 1, memory: 1, gpus: 2}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("node.gpuModel"), "{err}");
        let err = ClusterSpec::from_yaml("nodesPerLeaf: 2\nnode: {cpus: 1, memory: 1}\nbogus: 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
        let err = ClusterSpec::from_yaml(
            "nodesPerLeaf: 2\nnode: {cpus: 1, memory: 1}\noverrides: [{nodes: 'gpu[001-009]', cpus: 4}]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("overrides[0].nodes") && err.contains("gpu003"),
            "{err}"
        );
    }

    #[test]
    fn overrides_change_the_named_nodes_only() {
        let yaml = r#"
name: mixed
levels: [{key: muster.dev/leaf, count: 2}]
nodesPerLeaf: 2
node: {cpus: 64, memory: 512Gi, gpus: 8, gpuModel: NVIDIA H100 80GB HBM3, layout: dgx}
labels: {team: ml}
overrides:
  - nodes: gpu[003-004]
    gpus: 4
    gpuModel: NVIDIA A100-SXM4-80GB
    nvlinks: 12
    labels: {muster.dev/feature.a100: "true"}
    taints: [{key: old, value: "yes", effect: NoSchedule}]
"#;
        let spec = ClusterSpec::from_yaml(yaml).unwrap();
        let nodes = spec.build().unwrap();
        assert_eq!(nodes.len(), 4);
        assert_eq!(nodes[0].gpus.len(), 8);
        assert_eq!(nodes[2].gpus.len(), 4);
        assert_eq!(nodes[2].gpus[0].model, "NVIDIA A100-SXM4-80GB");
        assert_eq!(nodes[2].topology[0][1], "NV12");
        assert_eq!(nodes[2].labels["muster.dev/feature.a100"], "true");
        assert_eq!(nodes[2].labels["team"], "ml");
        assert_eq!(nodes[2].taints.len(), 1);
        assert!(nodes[1].taints.is_empty());
        assert_eq!(nodes[0].memory_mib, 512 * 1024);
        assert_eq!(nodes[3].labels["muster.dev/leaf"], "leaf2");
    }

    #[test]
    fn yaml_round_trips() {
        let spec = ClusterSpec::superpod();
        let back = ClusterSpec::from_yaml(&spec.to_yaml()).unwrap();
        assert_eq!(back, spec);
    }
}

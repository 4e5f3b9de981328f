//! The agent's own model of a node's GPUs: plain data that both inventory backends (NVML and
//! fixtures) produce and every pure stage (health, binding, publishing) consumes.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::topology::Link;

/// One GPU's static facts and current readings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gpu {
    /// NVML index.
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Product name as NVML reports it (`NVIDIA H100 80GB HBM3`).
    pub model: String,
    /// Total memory, MiB.
    pub memory_mib: u64,
    /// PCI bus id in NVML's form (`00000000:18:00.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// NUMA node, when the platform reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// CPUs local to the GPU as a cpuset list (`0-55,112-167`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_affinity: Option<String>,
    /// Indices of the GPUs this one reaches over NVLink (derived from the topology matrix).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlink_peers: Vec<u32>,
    /// Whether MIG mode is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_enabled: Option<bool>,
    /// UUIDs (`MIG-…`) of the MIG devices carved out of this GPU, so a pod given a MIG device
    /// is known to use this GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_uuids: Vec<String>,
    /// Memory in use, MiB (all processes, including host ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mib: Option<u64>,
}

/// Everything the inventory reports about a node at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInventory {
    /// NVIDIA driver version (`550.90.07`).
    pub driver_version: Option<String>,
    /// CUDA driver API version (`12.4`).
    pub cuda_version: Option<String>,
    /// GPUs in index order.
    pub gpus: Vec<Gpu>,
    /// `topology[i][j]`: how GPU i reaches GPU j (`nvidia-smi topo -m`); empty when unknown.
    pub topology: Vec<Vec<Link>>,
}

impl NodeInventory {
    /// The GPU with this NVML index.
    pub fn gpu(&self, index: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// The GPU index a device identifier names: a `GPU-…` UUID, a `MIG-…` UUID of one of its
    /// MIG devices, or a decimal index.
    pub fn resolve_device(&self, id: &str) -> Option<u32> {
        let id = id.trim();
        if let Ok(index) = id.parse::<u32>() {
            return self.gpu(index).map(|g| g.index);
        }
        self.gpus
            .iter()
            .find(|g| {
                g.uuid.eq_ignore_ascii_case(id)
                    || g.mig_uuids.iter().any(|m| m.eq_ignore_ascii_case(id))
            })
            .map(|g| g.index)
    }
}

/// A compute process holding a context on a GPU.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuProcess {
    /// GPU index.
    pub gpu: u32,
    /// Process id in the host PID namespace.
    pub pid: u32,
    /// GPU memory the process holds, MiB (unknown on some platforms).
    #[serde(default, rename = "usedMib", skip_serializing_if = "Option::is_none")]
    pub used_memory_mib: Option<u64>,
}

/// Something that happened to a GPU that bears on its health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuEvent {
    /// GPU index.
    pub gpu: u32,
    /// When it was observed.
    pub at: Timestamp,
    /// What happened.
    pub kind: GpuEventKind,
}

/// The kinds of health-relevant GPU events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuEventKind {
    /// An XID error (NVML's critical-XID event; whether it is critical to us is the XID
    /// policy's call). `None`: the driver reported an XID whose code it did not give.
    Xid(Option<u32>),
    /// Uncorrectable (double-bit) ECC errors; `count` new ones.
    DoubleBitEcc {
        /// How many new errors.
        count: u64,
    },
    /// The GPU does not answer (fallen off the bus, NVML `GPU_IS_LOST`); reported on every
    /// observation while it lasts.
    Lost,
    /// The GPU was reset (or the driver reloaded); `signal` says how that was detected.
    Reset {
        /// The evidence (`volatile ECC counters cleared`, `fixture reset event`, …).
        signal: String,
    },
}

/// One poll of the inventory backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// The node's GPUs and topology.
    pub inventory: NodeInventory,
    /// Compute processes on the GPUs.
    pub processes: Vec<GpuProcess>,
    /// Health events since the previous poll, oldest first.
    pub events: Vec<GpuEvent>,
}

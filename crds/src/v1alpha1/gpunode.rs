//! GpuNode: one per GPU node, written by the node agent — what NVML sees.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The GPU inventory of one Kubernetes Node; the object's name is the Node's name.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "GpuNode",
    plural = "gpunodes",
    singular = "gpunode",
    shortname = "gn",
    status = "GpuNodeStatus",
    category = "muster",
    doc = "GPU inventory and health of one node, published by the Muster node agent.",
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".status.gpuCount"),
    printcolumn(name = "Healthy", type_ = "integer", json_path = ".status.healthyGpus"),
    printcolumn(name = "Model", type_ = "string", json_path = ".status.gpus[0].model"),
    printcolumn(name = "Driver", type_ = "string", json_path = ".status.driverVersion"),
    printcolumn(name = "CUDA", type_ = "string", json_path = ".status.cudaVersion", priority = 1),
    printcolumn(name = "Violations", type_ = "integer", json_path = ".status.bindingViolations", priority = 1),
    printcolumn(name = "Heartbeat", type_ = "date", json_path = ".status.heartbeatTime"),
    validation = super::rules::rule(
        "self.metadata.name == self.spec.nodeName",
        "a GpuNode must be named after its Node: metadata.name must equal spec.nodeName"
    ),
    cel
)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodeSpec {
    /// The Node this inventory describes.
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
}

/// Health of one GPU.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
pub enum GpuHealthState {
    /// Usable.
    #[default]
    Healthy,
    /// Not scheduled; jobs on it end as NODE_FAIL.
    Unhealthy,
}

/// A GPU's health and why.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuHealth {
    /// Healthy or Unhealthy.
    pub state: GpuHealthState,
    /// Since when the GPU has been in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// The last critical XID error seen, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_xid: Option<u32>,
    /// What happened (`XID 79: GPU has fallen off the bus`, `double-bit ECC error`,
    /// `recovered after 300s quiet`, `reset detected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One GPU as NVML reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfo {
    /// NVML index on the node.
    pub index: u32,
    /// `GPU-…` UUID (what `NVIDIA_VISIBLE_DEVICES` takes).
    pub uuid: String,
    /// Model name (`NVIDIA H100 80GB HBM3`).
    pub model: String,
    /// Total memory in MiB.
    pub memory_mib: u64,
    /// PCI bus id (`00000000:18:00.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// NUMA node the GPU is attached to, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// CPUs local to the GPU, as a cpuset list (`0-47,96-143`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_affinity: Option<String>,
    /// Indices of the GPUs reachable over NVLink.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlink_peers: Vec<u32>,
    /// Whether MIG mode is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_enabled: Option<bool>,
    /// Health, as the agent last judged it.
    #[serde(default)]
    pub health: GpuHealth,
    /// GPU memory in use, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mib: Option<u64>,
}

/// GPU memory a pod holds on one GPU (for chasing CUDA out-of-memory).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGpuUsage {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// GPU index.
    pub gpu: u32,
    /// Memory the pod's processes hold on that GPU, MiB.
    pub memory_used_mib: u64,
    /// Whether the operator assigned this GPU to the pod.
    pub assigned: bool,
}

/// What the node agent observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodeStatus {
    /// NVIDIA driver version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// CUDA driver API version (`12.4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// Number of GPUs.
    #[serde(default)]
    pub gpu_count: u32,
    /// Number of healthy GPUs.
    #[serde(default)]
    pub healthy_gpus: u32,
    /// The GPUs, by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["index"]))]
    pub gpus: Vec<GpuInfo>,
    /// GPU-to-GPU connection matrix as `nvidia-smi topo -m` names it: row i, column j is
    /// `X` (self), `NV#` (# NVLinks), `PIX`, `PXB`, `PHB`, `NODE` or `SYS`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<Vec<String>>,
    /// Binding violations seen on this node (a process on a GPU its pod was not given); a
    /// restarted agent carries the count on from the published status.
    #[serde(default)]
    pub binding_violations: u64,
    /// GPU memory per pod and GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<PodGpuUsage>,
    /// Last time the agent published (a heartbeat; stale means the agent is gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_time: Option<Time>,
    /// `Ready` (NVML answered and the inventory is current).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

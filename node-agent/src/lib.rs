//! Muster's node agent: one per GPU node (a DaemonSet).
//!
//! - **Inventory** ([`inventory`]): NVML (or a YAML fixture) → the node's GPUs, topology,
//!   NVLink peers, NUMA/CPU affinity, MIG, driver/CUDA versions, published as the node's
//!   `GpuNode` by server-side apply, with a heartbeat, and as Node labels
//!   (`muster.dev/gpu.product`, `gpu.count`, `gpu.memory`).
//! - **Health** ([`health`], [`xid`]): critical XIDs, double-bit ECC errors and lost GPUs
//!   mark a GPU Unhealthy; a quiet period or a detected reset brings it back.
//! - **Binding enforcement** ([`binding`], [`cgroup`], [`enforce`]): every GPU compute process
//!   is traced to its pod through `/proc/PID/cgroup` and compared with the GPUs the operator
//!   assigned; a process on another GPU is an Event on the pod, a counter in the GpuNode and,
//!   under policy `kill`, a killed process. GPU memory per pod and GPU is published.
//!
//! The loop ([`agent`]) keeps Kubernetes I/O thin ([`kube_io`]): everything written is
//! computed by pure functions ([`publish`], [`binding`], [`health`]).

pub mod agent;
pub mod binding;
pub mod cgroup;
pub mod check;
pub mod cli;
pub mod enforce;
pub mod health;
pub mod inventory;
pub mod kube_io;
pub mod model;
pub mod procfs;
pub mod publish;
pub mod topology;
pub mod xid;

pub use agent::{Agent, AgentConfig, AgentError, CycleReport};
pub use enforce::{Policy, ProcessKiller, RecordingKiller, SignalKiller};
pub use health::HealthConfig;
pub use inventory::{FixtureInventory, GpuInventory, NvmlInventory};

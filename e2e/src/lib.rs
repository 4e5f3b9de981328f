//! Muster's test control plane and end-to-end suites.
//!
//! - [`apiserver`]: an in-process Kubernetes API server double serving the real REST protocol
//!   over HTTP, for kube-rs clients and `kubectl` alike.
//! - [`cluster`]: [`TestCluster`], the double plus simulated nodes ([`nodes`]), a
//!   kube-scheduler stand-in ([`scheduler`]) and a simulated kubelet ([`kubelet`]) on a
//!   [`clock`] that can run fast — or a real cluster when `MUSTER_E2E_KUBECONFIG` is set.
//! - [`dra`]: the NVIDIA DRA driver, simulated (its DeviceClass and each node's ResourceSlice).
//! - [`kstatus`]: kstatus' rules (as Flux and other GitOps tools read conditions), for tests.
//! - [`operator`]: the real operator in-process, as the chart deploys it (its service account,
//!   its admission webhooks behind a Service).

pub mod apiserver;
pub mod clock;
pub mod cluster;
pub mod dra;
pub mod exec;
pub mod kstatus;
pub mod kubelet;
pub mod nodes;
pub mod operator;
pub mod quantity;
pub mod scheduler;
pub mod stepjob;

pub use cluster::{TestCluster, TestClusterOptions};

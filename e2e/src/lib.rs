//! Muster's test control plane and end-to-end suites.
//!
//! - [`apiserver`]: an in-process Kubernetes API server double serving the real REST protocol
//!   over HTTP, for kube-rs clients and `kubectl` alike.

pub mod apiserver;
pub mod clock;
pub mod kubelet;
pub mod nodes;
pub mod quantity;
pub mod scheduler;

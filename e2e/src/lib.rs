//! Muster's test control plane and end-to-end suites.
//!
//! - [`apiserver`]: an in-process Kubernetes API server double serving the real REST protocol
//!   over HTTP, for kube-rs clients and `kubectl` alike.

pub mod apiserver;

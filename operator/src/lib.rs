//! Muster's operator crate: the pure scheduling [`core`], its benchmarks ([`bench`](mod@bench)), and
//! the kube-runtime [`controller`]s that feed the core snapshots and carry out
//! its decisions.

pub mod alloc;
pub mod bench;
pub mod controller;
pub mod core;

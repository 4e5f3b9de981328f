//! Muster's operator crate: the pure scheduling [`core`], its benchmarks ([`bench`]), and
//! (added separately) the kube-runtime controllers that feed the core snapshots and carry out
//! its decisions.

pub mod bench;
pub mod core;

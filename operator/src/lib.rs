//! Muster's operator crate: the pure scheduling [`core`] and (added separately) the
//! kube-runtime controllers that feed it snapshots and carry out its decisions.

pub mod controller;
pub mod core;

//! The scheduling core (module docs are completed with the scheduler).

pub mod cluster_spec;
pub mod node;
pub mod util;

pub use cluster_spec::{ClusterSpec, NodeInfo};
pub use node::{Gpu, Link, Node, NodeId, Taint, TaintEffect, Toleration};

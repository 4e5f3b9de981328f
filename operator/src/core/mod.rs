//! The scheduling core (module docs are completed with the scheduler).

pub mod baseline;
pub mod cluster_spec;
pub mod deps;
pub mod enforce;
pub mod engine;
pub mod gpus;
pub mod model;
pub mod node;
pub mod priority;
pub mod schedule;
pub mod shape;
pub mod synth;
pub mod timeline;
pub mod tree;
pub mod util;

pub use cluster_spec::{ClusterSpec, NodeInfo};
pub use model::*;
pub use node::{Gpu, Link, Node, NodeId, Taint, TaintEffect, Toleration};
pub use schedule::schedule;

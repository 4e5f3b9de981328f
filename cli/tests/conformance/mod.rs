//! The conformance harness: one BatchJob request run three ways — through the real operator
//! on the test control plane (the allocation and pods it writes), through `muster simulate`
//! (a native trace) and through `sbatch --test-only` — each turned into what a user can see
//! ([`Seen`]), compared with the row's expectation and with each other.
//!
//! What a user sees of a job is read in one place per way: [`World::observe`] (status and
//! pods), [`simulate`] (the jobs CSV), [`test_only`] (sbatch's line). When tasks become one pod
//! per node, only `World::observe` changes.

#![allow(dead_code)]

pub mod rows;
mod run;
mod sbatch;
mod sim;
mod world;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use muster_crds::labels;
use muster_crds::slurm::hostlist;
use muster_crds::v1alpha1::{BatchJob, GpuNode, JobState, Partition};
use muster_e2e::apiserver::auth::UserInfo;
use muster_e2e::{TestCluster, TestClusterOptions};
use muster_operator::controller::metrics::Metrics;
use muster_operator::controller::{self, Clock, Handle, Settings};
use muster_operator::core::cluster_spec::ClusterSpec;
use serde_json::{Value, json};

#[allow(unused_imports)] // e2e_examples uses the harness, not the table.
pub use rows::{Expect, Job, Row, rows};
#[allow(unused_imports)] // each test target uses a different part of the harness.
pub use run::*;
#[allow(unused_imports)]
pub use sbatch::*;
#[allow(unused_imports)]
pub use sim::*;
#[allow(unused_imports)]
pub use world::*;

/// The operator's namespace.
pub const OPERATOR_NS: &str = "muster-system";
/// Where the rows' jobs go.
pub const NS: &str = "default";

/// The suite's cluster: two leaves of two DGX nodes (8 GPUs, 64 CPUs, 512 GiB); gpu004's GPUs
/// are A100s (feature `a100`), gpu002 has feature `bigmem`, every node `ib`.
pub const SPEC: &str = r#"name: conformance
levels:
  - {key: muster.dev/spine, count: 1}
  - {key: muster.dev/leaf, count: 2}
nodesPerLeaf: 2
nodeNamePrefix: gpu
node: {cpus: 64, memory: 512Gi, gpus: 8, gpuModel: NVIDIA H100 80GB HBM3, gpuMemoryMib: 81559, layout: dgx}
labels: {muster.dev/feature.ib: "true"}
overrides:
  - nodes: gpu004
    gpuModel: NVIDIA A100-SXM4-80GB
    gpuMemoryMib: 81920
    labels: {muster.dev/feature.a100: "true"}
  - nodes: gpu002
    labels: {muster.dev/feature.bigmem: "true"}
"#;

/// The partitions: `gpu` (default; preempted jobs are requeued; at most a day) and `urgent`
/// (a higher tier that may preempt `gpu`'s jobs).
pub fn partitions() -> Vec<(String, Value)> {
    let topo = json!([
        "muster.dev/spine",
        "muster.dev/leaf",
        "kubernetes.io/hostname"
    ]);
    vec![
        (
            "gpu".into(),
            json!({"default": true, "defaultImage": "busybox:1.36", "topology": topo,
                   "preemptMode": "Requeue", "graceTimeSeconds": 0, "maxTime": "1-00:00:00"}),
        ),
        (
            "urgent".into(),
            json!({"priorityTier": 10, "defaultImage": "busybox:1.36", "topology": topo,
                   "preemptMode": "None", "graceTimeSeconds": 0}),
        ),
    ]
}

/// How long any wait may take (generous: CI's 2-core machine runs two tests at a time).
pub const WAIT: Duration = Duration::from_secs(60);

/// What a user can see of a job: the same shape from each of the three ways.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// Running: every task by rank, its node and GPU indices (`sbatch --test-only` gives the
    /// nodes only: `tasks` is empty then).
    Running {
        /// The nodes, as a hostlist.
        nodes: String,
        /// `(node, GPUs)` by rank.
        tasks: Vec<(String, Vec<u32>)>,
    },
    /// Not running, with Slurm's reason and its message; `start` is the estimated start in
    /// seconds from now, when one is known.
    Pending {
        /// Reason code.
        reason: String,
        /// Detail.
        message: String,
        /// Estimated start (seconds from now) and the planned nodes.
        start: Option<(i64, String)>,
    },
    /// Ended in this state (COMPLETED, CANCELLED, TIMEOUT, PREEMPTED, …).
    Ended(String),
    /// Refused as written: the error text.
    Refused(String),
}

//! `muster simulate` with partitions whose node pods request extended resources
//! (`jobEnvironment.resources`): the simulated nodes have what the cluster spec's
//! `extendedResources` give them, and the scheduling core counts what running jobs' node pods
//! hold, as in the operator.

use muster_cli::simulate::engine::{Cluster, Outcome, Policy, SimOptions, simulate};
use muster_cli::simulate::trace::{self, Format};
use muster_cli::simulate::workload::{self, Rules};
use muster_operator::core::ClusterSpec;

/// Two 8-GPU nodes under one leaf; `ib` gives each node `rdma/ib` (none when 0).
fn cluster(ib: u32) -> Cluster {
    let extended = if ib > 0 {
        format!("  extendedResources: {{rdma/ib: {ib}}}\n")
    } else {
        String::new()
    };
    let spec = ClusterSpec::from_yaml(&format!(
        "name: ib\nlevels: [{{key: muster.dev/leaf, count: 1}}]\nnodesPerLeaf: 2\n\
         node:\n  cpus: 64\n  memory: 512Gi\n  gpus: 8\n  gpuModel: NVIDIA H100 80GB HBM3\n{extended}"
    ))
    .unwrap();
    Cluster::from_spec(&spec).unwrap()
}

/// A two-node job for 10 minutes, then a one-node job at 10 s; both one GPU per node, so
/// GPUs never stop the second: only the partition's `rdma/ib` does.
const TRACE: &str = r#"
partitions:
  - name: ib
    spec: {default: true, jobEnvironment: {resources: {rdma/ib: 1}}}
jobs:
  - {name: first, submit: 0, runtime: 600, spec: {nodes: 2, gpusPerNode: 1, time: "20:00"}}
  - {name: second, submit: 10, runtime: 60, spec: {nodes: 1, gpusPerNode: 1, time: "5:00"}}
"#;

fn replay(cl: &Cluster) -> Vec<muster_cli::simulate::engine::JobOutcome> {
    replay_until(cl, None)
}

fn replay_until(cl: &Cluster, until: Option<i64>) -> Vec<muster_cli::simulate::engine::JobOutcome> {
    let t = trace::parse("ib.yaml", TRACE, Format::Native, false).unwrap();
    let w = workload::build(&t, cl, &Rules::default());
    let opts = SimOptions {
        interval: 0,
        until,
        ..SimOptions::default()
    };
    simulate(cl, &w, Policy::Muster, &opts, None).jobs
}

#[test]
fn a_job_waits_for_the_rdma_a_running_job_holds() {
    let jobs = replay(&cluster(1));
    assert_eq!(jobs[0].start, Some(0));
    assert_eq!(
        jobs[1].start,
        Some(600),
        "one rdma/ib per node: the second job starts when the first ends"
    );
    // Seen while it waits: the message names the resource.
    let jobs = replay_until(&cluster(1), Some(300));
    assert_eq!(jobs[1].outcome, Outcome::NeverStarted);
    assert!(
        jobs[1]
            .pending_message
            .as_deref()
            .is_some_and(|m| m.contains("rdma/ib: 1")),
        "{:?}",
        jobs[1].pending_message
    );
    // Two per node: both run at once.
    let jobs = replay(&cluster(2));
    assert_eq!((jobs[0].start, jobs[1].start), (Some(0), Some(10)));
}

#[test]
fn nodes_without_the_resource_cannot_take_the_partitions_jobs() {
    let jobs = replay(&cluster(0));
    for j in &jobs {
        assert_eq!(j.outcome, Outcome::Rejected, "{j:?}");
        assert!(
            j.message.as_deref().is_some_and(|m| m.contains("rdma/ib")),
            "{:?}",
            j.message
        );
    }
}

#[test]
fn bad_extended_resources_name_the_field() {
    let base = "name: x\nnodesPerLeaf: 1\nnode: {cpus: 8, memory: 8Gi";
    let err = ClusterSpec::from_yaml(&format!("{base}, extendedResources: {{ib: 1}}}}\n"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("node.extendedResources[ib]") && err.contains("<domain>/<name>"),
        "{err}"
    );
    let err = ClusterSpec::from_yaml(&format!(
        "{base}}}\noverrides: [{{nodes: gpu001, extendedResources: {{nvidia.com/gpu: 8}}}}]\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("overrides[0].extendedResources[nvidia.com/gpu]"),
        "{err}"
    );
    let err = ClusterSpec::from_yaml(&format!("{base}, extendedResources: {{rdma/ib: -1}}}}\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("extendedResources"), "{err}");
    // Overrides add and remove.
    let spec = ClusterSpec::from_yaml(
        "name: x\nnodesPerLeaf: 2\nnode: {cpus: 8, memory: 8Gi, extendedResources: {rdma/ib: 4}}\n\
         overrides: [{nodes: gpu002, extendedResources: {rdma/ib: 0, rdma/roce: 2}}]\n",
    )
    .unwrap();
    let nodes = spec.nodes().unwrap();
    assert_eq!(nodes[0].extended, [("rdma/ib".to_string(), 4)].into());
    assert_eq!(nodes[1].extended, [("rdma/roce".to_string(), 2)].into());
}

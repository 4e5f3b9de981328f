//! The sandbox cluster and small helpers shared by the known-answer, placement and yardstick
//! tests.
// Each test crate that includes this module uses a different subset of it.
#![allow(dead_code)]

use muster_operator::core::*;

pub const NOW: i64 = 1_000_000;

/// The sandbox: 4 leaves (gpu001-004, 005-008, 009-012, 013-016) of 8-GPU nodes.
pub fn sandbox() -> Snapshot {
    let spec = ClusterSpec::sandbox();
    Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology())
}

pub fn names(s: &Snapshot, nodes: &[NodeId]) -> Vec<String> {
    nodes
        .iter()
        .map(|&n| s.nodes[n as usize].name.clone())
        .collect()
}

pub fn node(s: &Snapshot, name: &str) -> NodeId {
    s.nodes.iter().position(|n| n.name == name).unwrap() as NodeId
}

/// A running job holding GPUs `0..gpus` on each named node, ending at `end`.
pub fn busy(s: &mut Snapshot, id: JobId, nodes: &[&str], gpus: u32, end: Option<i64>) {
    let tasks = nodes
        .iter()
        .map(|n| TaskAlloc {
            node: node(s, n),
            gpus: (0..gpus).collect(),
            cpu_millis: 1000,
            memory_mib: 1024,
        })
        .collect();
    s.running.push(RunningJob {
        id,
        name: format!("running-{id}"),
        namespace: "default".into(),
        partition: Some(0),
        start_time: NOW - 100,
        time_limit: end.map(|e| (e - (NOW - 100)) as u64),
        tasks,
        ..Default::default()
    });
}

pub fn started(d: &Decisions, job: JobId) -> &Start {
    d.starts
        .iter()
        .find(|s| s.job == job)
        .unwrap_or_else(|| panic!("job {job} did not start: {:?}", d.pending))
}

/// Nodes `gpu{a}`..=`gpu{b}`.
pub fn range(a: u32, b: u32) -> Vec<String> {
    (a..=b).map(|i| format!("gpu{i:03}")).collect()
}

/// Makes the named nodes fully busy until `end`.
pub fn fill(s: &mut Snapshot, id: JobId, nodes: &[String], end: i64) {
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    busy(s, id, &refs, 8, Some(end));
}

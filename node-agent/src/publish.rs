//! What the agent writes, computed purely: the GpuNode status and the Node's GPU labels.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use muster_crds::labels;
use muster_crds::v1alpha1::{
    GpuHealthState, GpuInfo, GpuNode, GpuNodeSpec, GpuNodeStatus, PodGpuUsage,
};
use serde_json::json;

use crate::health::HealthBook;
use crate::model::NodeInventory;
use crate::topology;

/// Field manager of the GpuNode (spec and status) server-side applies.
pub const FIELD_MANAGER: &str = "muster-node-agent";
/// Field manager of the Node label apply: separate, so the agent owns exactly its three
/// labels on an object many others write.
pub const LABELS_FIELD_MANAGER: &str = "muster-node-agent-labels";
/// The GpuNode condition the agent maintains.
pub const READY: &str = "Ready";

/// Whether the inventory is current.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// NVML (or the fixture) answered on the last poll.
    pub ready: bool,
    /// CamelCase reason (`InventoryCurrent`, `InventoryFailed`, `NvmlUnavailable`).
    pub reason: String,
    /// Human detail.
    pub message: String,
}

/// The GPUs as the status lists them, with health from `health`.
pub fn gpu_infos(inventory: &NodeInventory, health: &HealthBook) -> Vec<GpuInfo> {
    inventory
        .gpus
        .iter()
        .map(|g| GpuInfo {
            index: g.index,
            uuid: g.uuid.clone(),
            model: g.model.clone(),
            memory_mib: g.memory_mib,
            pci_bus_id: g.pci_bus_id.clone(),
            numa_node: g.numa_node,
            cpu_affinity: g.cpu_affinity.clone(),
            nvlink_peers: g.nvlink_peers.clone(),
            mig_enabled: g.mig_enabled,
            health: health.status(&g.uuid),
            memory_used_mib: g.memory_used_mib,
        })
        .collect()
}

/// The Ready condition; keeps `previous`'s transition time unless the status flips.
pub fn ready_condition(r: &Readiness, now: Timestamp, previous: Option<&Condition>) -> Condition {
    let status = if r.ready { "True" } else { "False" }.to_string();
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Time(now),
    };
    Condition {
        type_: READY.to_string(),
        status,
        reason: r.reason.clone(),
        message: r.message.clone(),
        last_transition_time,
        observed_generation: None,
    }
}

/// The whole GpuNode status. `previous` is what was last published (for condition times).
pub fn desired_status(
    inventory: &NodeInventory,
    health: &HealthBook,
    usage: Vec<PodGpuUsage>,
    binding_violations: u64,
    readiness: &Readiness,
    now: Timestamp,
    previous: Option<&GpuNodeStatus>,
) -> GpuNodeStatus {
    let gpus = gpu_infos(inventory, health);
    let healthy = gpus
        .iter()
        .filter(|g| g.health.state == GpuHealthState::Healthy)
        .count() as u32;
    let prev_ready = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == READY));
    GpuNodeStatus {
        driver_version: inventory.driver_version.clone(),
        cuda_version: inventory.cuda_version.clone(),
        gpu_count: gpus.len() as u32,
        healthy_gpus: healthy,
        gpus,
        topology: topology::matrix_strings(&inventory.topology),
        binding_violations,
        usage,
        heartbeat_time: Some(Time(now)),
        conditions: vec![ready_condition(readiness, now, prev_ready)],
    }
}

/// Whether two statuses differ in something worth writing at once: anything but the
/// heartbeat and the memory figures. Memory in use moves all the time while jobs run; writing
/// it every poll from every node would load the API server for little gain, so new memory
/// numbers ride along with the next heartbeat. (A pod starting or stopping on a GPU — an entry
/// appearing in or leaving `usage` — is news.)
pub fn status_changed(a: &GpuNodeStatus, b: &GpuNodeStatus) -> bool {
    let strip = |s: &GpuNodeStatus| {
        let mut s = GpuNodeStatus {
            heartbeat_time: None,
            ..s.clone()
        };
        s.gpus.iter_mut().for_each(|g| g.memory_used_mib = None);
        s.usage.iter_mut().for_each(|u| u.memory_used_mib = 0);
        s
    };
    strip(a) != strip(b)
}

/// Decides when the status is written: at once when it changed (beyond the heartbeat time),
/// otherwise when the heartbeat is due.
#[derive(Clone, Debug, Default)]
pub struct PublishGate {
    last: Option<(GpuNodeStatus, Timestamp)>,
}

impl PublishGate {
    /// A gate that knows what was published before (by an earlier agent: due at once, so the
    /// heartbeat is fresh).
    pub fn after(previous: Option<GpuNodeStatus>) -> Self {
        PublishGate {
            last: previous.map(|s| (s, Timestamp::UNIX_EPOCH)),
        }
    }

    /// The last status published.
    pub fn last(&self) -> Option<&GpuNodeStatus> {
        self.last.as_ref().map(|(s, _)| s)
    }

    /// Whether `status` should be written at `now`.
    pub fn due(
        &self,
        status: &GpuNodeStatus,
        now: Timestamp,
        heartbeat: jiff::SignedDuration,
    ) -> bool {
        match &self.last {
            None => true,
            Some((last, at)) => {
                status_changed(last, status) || now.duration_since(*at) >= heartbeat
            }
        }
    }

    /// Records a successful write.
    pub fn published(&mut self, status: GpuNodeStatus, now: Timestamp) {
        self.last = Some((status, now));
    }
}

/// A Kubernetes label value from a product name: spaces become `-`, any other character a
/// label value cannot hold becomes `_`, the ends are trimmed to alphanumerics and the result
/// cut to 63 characters (`NVIDIA H100 80GB HBM3` → `NVIDIA-H100-80GB-HBM3`).
pub fn label_value(product: &str) -> String {
    let mapped: String = product
        .trim()
        .chars()
        .map(|c| match c {
            ' ' => '-',
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') => c,
            _ => '_',
        })
        .collect();
    let mut v: String = mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .chars()
        .take(63)
        .collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    v
}

/// The Node labels: product (the model most GPUs have; ties go to the lowest index, so a
/// mixed node is labelled by its majority), count, and memory in MiB (the smallest GPU's, so a
/// selector on memory never promises more than every GPU has). A node without GPUs gets
/// `gpu.count=0` and no product or memory label.
pub fn node_labels(inventory: &NodeInventory) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert(
        labels::NODE_GPU_COUNT.to_string(),
        inventory.gpus.len().to_string(),
    );
    let mut counts: Vec<(&str, usize, u32)> = Vec::new();
    for g in &inventory.gpus {
        match counts.iter_mut().find(|(m, _, _)| *m == g.model) {
            Some(e) => e.1 += 1,
            None => counts.push((&g.model, 1, g.index)),
        }
    }
    if let Some((model, _, _)) = counts
        .iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
    {
        let v = label_value(model);
        if !v.is_empty() {
            out.insert(labels::NODE_GPU_PRODUCT.to_string(), v);
        }
    }
    if let Some(mem) = inventory.gpus.iter().map(|g| g.memory_mib).min() {
        out.insert(labels::NODE_GPU_MEMORY.to_string(), mem.to_string());
    }
    out
}

/// The server-side apply body creating/owning the GpuNode's spec.
pub fn gpunode_object(node: &str) -> GpuNode {
    GpuNode::new(
        node,
        GpuNodeSpec {
            node_name: node.to_string(),
        },
    )
}

/// The server-side apply body for the status subresource.
pub fn status_patch(node: &str, status: &GpuNodeStatus) -> serde_json::Value {
    json!({
        "apiVersion": format!("{}/{}", muster_crds::GROUP, muster_crds::VERSION),
        "kind": "GpuNode",
        "metadata": { "name": node },
        "status": status,
    })
}

/// The server-side apply body for the Node's labels.
pub fn labels_patch(node: &str, labels: &BTreeMap<String, String>) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": node, "labels": labels },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Gpu;
    use crate::topology::Link;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn inv(models: &[(&str, u64)]) -> NodeInventory {
        NodeInventory {
            driver_version: Some("550.90.07".into()),
            cuda_version: Some("12.4".into()),
            gpus: models
                .iter()
                .enumerate()
                .map(|(i, (m, mem))| Gpu {
                    index: i as u32,
                    uuid: format!("GPU-{i}"),
                    model: m.to_string(),
                    memory_mib: *mem,
                    ..Default::default()
                })
                .collect(),
            topology: vec![],
        }
    }

    #[test]
    fn label_values_are_valid() {
        assert_eq!(
            label_value("NVIDIA H100 80GB HBM3"),
            "NVIDIA-H100-80GB-HBM3"
        );
        assert_eq!(
            label_value("NVIDIA A100-SXM4-80GB"),
            "NVIDIA-A100-SXM4-80GB"
        );
        assert_eq!(label_value(" Tesla V100 (SXM2) "), "Tesla-V100-_SXM2");
        assert_eq!(label_value(&"A".repeat(80)).len(), 63);
        assert_eq!(label_value("((("), "");
    }

    #[test]
    fn labels_for_uniform_mixed_and_empty_nodes() {
        let l = node_labels(&inv(&[("NVIDIA H100 80GB HBM3", 81559); 8]));
        assert_eq!(l[labels::NODE_GPU_PRODUCT], "NVIDIA-H100-80GB-HBM3");
        assert_eq!(l[labels::NODE_GPU_COUNT], "8");
        assert_eq!(l[labels::NODE_GPU_MEMORY], "81559");

        let mixed = inv(&[
            ("NVIDIA A100-SXM4-40GB", 40960),
            ("NVIDIA L40S", 46068),
            ("NVIDIA L40S", 46068),
        ]);
        let l = node_labels(&mixed);
        assert_eq!(l[labels::NODE_GPU_PRODUCT], "NVIDIA-L40S");
        assert_eq!(l[labels::NODE_GPU_MEMORY], "40960");
        // A tie goes to the model of the lowest index.
        let tie = inv(&[("B", 1), ("A", 1)]);
        assert_eq!(node_labels(&tie)[labels::NODE_GPU_PRODUCT], "B");

        let none = node_labels(&inv(&[]));
        assert_eq!(none.len(), 1);
        assert_eq!(none[labels::NODE_GPU_COUNT], "0");
    }

    #[test]
    fn status_carries_health_topology_and_a_stable_ready_time() {
        let mut i = inv(&[("M", 1), ("M", 1)]);
        i.topology = vec![
            vec![Link::SelfLink, Link::NvLink(4)],
            vec![Link::NvLink(4), Link::SelfLink],
        ];
        let mut book = HealthBook::default();
        let ev = crate::model::GpuEvent {
            gpu: 1,
            at: t(0),
            kind: crate::model::GpuEventKind::Xid(Some(79)),
        };
        book.update(&i, &[ev], t(0), &Default::default());
        let ready = Readiness {
            ready: true,
            reason: "InventoryCurrent".into(),
            message: "2 GPUs".into(),
        };
        let s1 = desired_status(&i, &book, vec![], 3, &ready, t(10), None);
        assert_eq!(
            (s1.gpu_count, s1.healthy_gpus, s1.binding_violations),
            (2, 1, 3)
        );
        assert_eq!(s1.topology, vec![vec!["X", "NV4"], vec!["NV4", "X"]]);
        assert_eq!(s1.gpus[1].health.last_xid, Some(79));
        assert_eq!(s1.conditions[0].last_transition_time.0, t(10));

        let s2 = desired_status(&i, &book, vec![], 3, &ready, t(40), Some(&s1));
        assert_eq!(
            s2.conditions[0].last_transition_time.0,
            t(10),
            "no flip, same transition time"
        );
        assert!(!status_changed(&s1, &s2), "only the heartbeat moved");
        let down = Readiness {
            ready: false,
            reason: "InventoryFailed".into(),
            message: "x".into(),
        };
        let s3 = desired_status(&i, &book, vec![], 3, &down, t(50), Some(&s2));
        assert_eq!(s3.conditions[0].last_transition_time.0, t(50));
        assert!(status_changed(&s2, &s3));
    }

    #[test]
    fn publishes_on_change_or_heartbeat() {
        let hb = jiff::SignedDuration::from_secs(30);
        let ready = Readiness {
            ready: true,
            reason: "InventoryCurrent".into(),
            message: "".into(),
        };
        let book = HealthBook::default();
        let s = |n: u64, at: i64, gate: &PublishGate| {
            desired_status(
                &inv(&[("M", 1)]),
                &book,
                vec![],
                n,
                &ready,
                t(at),
                gate.last(),
            )
        };
        let mut gate = PublishGate::default();
        let first = s(0, 0, &gate);
        assert!(gate.due(&first, t(0), hb));
        gate.published(first, t(0));
        assert!(!gate.due(&s(0, 5, &gate), t(5), hb));
        assert!(
            gate.due(&s(1, 5, &gate), t(5), hb),
            "a change is published at once"
        );
        assert!(gate.due(&s(0, 30, &gate), t(30), hb), "heartbeat");
        // Memory figures alone wait for the heartbeat; a new usage entry does not.
        let mut more = s(0, 10, &gate);
        more.gpus[0].memory_used_mib = Some(4096);
        assert!(!gate.due(&more, t(10), hb));
        more.usage.push(PodGpuUsage {
            namespace: "ml".into(),
            pod: "p".into(),
            gpu: 0,
            memory_used_mib: 1,
            assigned: true,
        });
        assert!(gate.due(&more, t(10), hb));
        let restarted = PublishGate::after(gate.last().cloned());
        assert!(restarted.due(&s(0, 100, &restarted), t(100), hb));
        assert_eq!(restarted.last().map(|l| l.binding_violations), Some(0));
    }

    #[test]
    fn apply_bodies_name_the_object() {
        let s = status_patch("gpu-a", &GpuNodeStatus::default());
        assert_eq!(s["apiVersion"], "muster.dev/v1alpha1");
        assert_eq!(s["kind"], "GpuNode");
        assert_eq!(s["metadata"]["name"], "gpu-a");
        let l = labels_patch("gpu-a", &node_labels(&inv(&[("M", 5)])));
        assert_eq!(l["metadata"]["labels"][labels::NODE_GPU_COUNT], "1");
        assert_eq!(gpunode_object("gpu-a").spec.node_name, "gpu-a");
    }
}

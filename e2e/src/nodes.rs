//! Simulated nodes: a cluster spec's nodes as the Node objects a kubelet registers and the
//! GpuNode objects (and Node GPU labels) the Muster node agent publishes.
//!
//! Everything here is pure object building, plus [`register`] which writes the objects.
//! The [`kubelet`](crate::kubelet) keeps them current (GpuNode heartbeats, node failures).

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use muster_crds::v1alpha1::{
    GpuHealth, GpuHealthState, GpuInfo as CrdGpuInfo, GpuNode, GpuNodeStatus,
};
use muster_operator::core::cluster_spec::NodeInfo;
use serde_json::{Value, json};

use crate::quantity::{format_cpu_milli, format_mem_mib};

/// `nodeInfo.kubeletVersion` of simulated nodes.
pub const KUBELET_VERSION: &str = "v1.32.0";
/// Driver version simulated GpuNodes report.
pub const DRIVER_VERSION: &str = "550.54.15";
/// CUDA version simulated GpuNodes report.
pub const CUDA_VERSION: &str = "12.4";
/// Pods per node (the kubelet's default `maxPods`).
pub const MAX_PODS: u32 = 110;
/// `spec.providerID` prefix of simulated nodes.
pub const PROVIDER_PREFIX: &str = "muster-sim://";
/// Field manager of the GpuNode writes: the node agent's, so a real agent started later takes
/// the fields over cleanly.
pub const AGENT_FIELD_MANAGER: &str = "muster-node-agent";
/// Taint the node lifecycle controller puts on a node whose kubelet stopped reporting.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Taint the node lifecycle controller puts on a node that reports NotReady.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint `kubectl cordon` implies (the scheduler treats `spec.unschedulable` as this taint).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The node's `InternalIP`: `172.16.0.0/12`, by node index.
pub fn internal_ip(index: usize) -> String {
    let i = index as u32 + 1;
    format!(
        "172.{}.{}.{}",
        16 + ((i >> 16) & 0x0f),
        (i >> 8) & 0xff,
        i & 0xff
    )
}

/// The node's pod CIDR: one `/24` of `10.128.0.0/9` per node.
pub fn pod_cidr(index: usize) -> String {
    let i = index as u32;
    format!("10.{}.{}.0/24", 128 + ((i >> 8) & 0x7f), i & 0xff)
}

/// The `n`-th pod IP of a node (`n` from 0; wraps after 253 addresses).
pub fn pod_ip(index: usize, n: u32) -> String {
    let i = index as u32;
    format!(
        "10.{}.{}.{}",
        128 + ((i >> 8) & 0x7f),
        i & 0xff,
        2 + n % 253
    )
}

fn time(t: Timestamp) -> Value {
    json!(Time(t))
}

/// The four kubelet conditions of a healthy node.
pub fn ready_conditions(now: Timestamp) -> Value {
    let c = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": time(now), "lastTransitionTime": time(now)})
    };
    json!([
        c(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        c(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        c(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        c(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// The conditions the node lifecycle controller writes when a kubelet stops reporting: every
/// condition `Unknown`, reason `NodeStatusUnknown`.
pub fn unknown_conditions(now: Timestamp) -> Value {
    let c = |t: &str| {
        json!({"type": t, "status": "Unknown", "reason": "NodeStatusUnknown",
               "message": "Kubelet stopped posting node status.",
               "lastHeartbeatTime": time(now), "lastTransitionTime": time(now)})
    };
    json!([
        c("MemoryPressure"),
        c("DiskPressure"),
        c("PIDPressure"),
        c("Ready")
    ])
}

/// Taints of a node as the Node object lists them.
pub fn taints_json(info: &NodeInfo) -> Vec<Value> {
    info.taints
        .iter()
        .map(|t| {
            let effect = serde_json::to_value(t.effect).unwrap_or(json!("NoSchedule"));
            let mut v = json!({"key": t.key, "effect": effect});
            if !t.value.is_empty() {
                v["value"] = json!(t.value);
            }
            v
        })
        .collect()
}

/// The Node a kubelet would register for `info` (the `index`-th node of the cluster): labels
/// (the spec's, including `kubernetes.io/hostname`, the switch levels and the GPU labels, plus
/// the kubelet's os/arch labels), taints, capacity = allocatable (cpu, memory, 110 pods),
/// addresses, pod CIDR, `nodeInfo` and a `Ready` condition.
pub fn node_object(info: &NodeInfo, index: usize, now: Timestamp) -> Node {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    labels.extend(info.labels.clone());
    let mut resources = json!({
        "cpu": format_cpu_milli(info.cpu_millis),
        "memory": format_mem_mib(info.memory_mib),
        "pods": MAX_PODS.to_string(),
        "ephemeral-storage": "1Ti",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    });
    // Extended resources a device plugin would advertise (`rdma/ib`).
    for (k, v) in &info.extended_resources {
        resources[k] = json!(v.to_string());
    }
    let id = uuid_for(&info.name);
    let mut spec = json!({
        "podCIDR": pod_cidr(index),
        "podCIDRs": [pod_cidr(index)],
        "providerID": format!("{PROVIDER_PREFIX}{}", info.name),
    });
    let taints = taints_json(info);
    if !taints.is_empty() {
        spec["taints"] = json!(taints);
    }
    let v = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": info.name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": ready_conditions(now),
            "addresses": [
                {"type": "InternalIP", "address": internal_ip(index)},
                {"type": "Hostname", "address": info.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": id.replace('-', ""),
                "systemUUID": id,
                "bootID": uuid_for(&format!("{}/boot", info.name)),
                "kernelVersion": "6.8.0-muster-sim",
                "osImage": "Muster simulated node",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    });
    serde_json::from_value(v).expect("a well-formed Node")
}

/// A stable UUID-shaped id for a name.
fn uuid_for(name: &str) -> String {
    let h = |seed: u64| {
        name.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let (a, b) = (h(0xcbf2_9ce4_8422_2325), h(0x9e37_79b9_7f4a_7c15));
    let x = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    )
}

/// Health of every GPU of a node: healthy since `since`.
pub fn healthy_gpus(info: &NodeInfo, since: Timestamp) -> Vec<GpuHealth> {
    info.gpus
        .iter()
        .map(|_| GpuHealth {
            state: GpuHealthState::Healthy,
            since: Some(Time(since)),
            last_xid: None,
            reason: None,
        })
        .collect()
}

/// The GpuNode status the node agent would publish for `info` with GPU health `health`.
pub fn gpunode_status(info: &NodeInfo, health: &[GpuHealth], now: Timestamp) -> GpuNodeStatus {
    let gpus: Vec<CrdGpuInfo> = info
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| CrdGpuInfo {
            index: g.index,
            uuid: g.uuid.clone(),
            model: g.model.clone(),
            memory_mib: g.memory_mib,
            pci_bus_id: Some(g.pci_bus_id.clone()),
            numa_node: g.numa_node,
            cpu_affinity: None,
            nvlink_peers: g.nvlink_peers.clone(),
            mig_enabled: Some(false),
            health: health.get(i).cloned().unwrap_or_default(),
            memory_used_mib: Some(0),
        })
        .collect();
    let healthy = gpus
        .iter()
        .filter(|g| g.health.state == GpuHealthState::Healthy)
        .count() as u32;
    GpuNodeStatus {
        driver_version: Some(DRIVER_VERSION.into()),
        cuda_version: Some(CUDA_VERSION.into()),
        gpu_count: gpus.len() as u32,
        healthy_gpus: healthy,
        gpus,
        topology: info.topology.clone(),
        binding_violations: 0,
        usage: Vec::new(),
        heartbeat_time: Some(Time(now)),
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "InventoryCurrent".into(),
            message: "simulated inventory".into(),
            last_transition_time: Time(now),
            observed_generation: None,
        }],
    }
}

/// Server-side apply of a GpuNode's status (the agent's field manager).
pub async fn apply_gpunode_status(
    api: &Api<GpuNode>,
    node: &str,
    status: &GpuNodeStatus,
) -> kube::Result<()> {
    let body = json!({
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "GpuNode",
        "metadata": {"name": node},
        "status": status,
    });
    api.patch_status(
        node,
        &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
}

/// Create the Node objects of `infos` (and, with `gpunodes`, their GpuNodes with a current
/// status), `concurrency` writes at a time. Nodes that exist already are left as they are.
pub async fn register(
    client: &Client,
    infos: &[NodeInfo],
    now: Timestamp,
    gpunodes: bool,
    concurrency: usize,
) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let gns: Api<GpuNode> = Api::all(client.clone());
    futures::stream::iter(infos.iter().enumerate())
        .map(|(i, info)| {
            let (nodes, gns) = (nodes.clone(), gns.clone());
            async move {
                let node = node_object(info, i, now);
                match nodes.create(&PostParams::default(), &node).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e),
                }
                if gpunodes && !info.gpus.is_empty() {
                    let spec = json!({
                        "apiVersion": "muster.dev/v1alpha1",
                        "kind": "GpuNode",
                        "metadata": {"name": info.name},
                        "spec": {"nodeName": info.name},
                    });
                    gns.patch(
                        &info.name,
                        &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
                        &Patch::Apply(spec),
                    )
                    .await?;
                    let status = gpunode_status(info, &healthy_gpus(info, now), now);
                    apply_gpunode_status(&gns, &info.name, &status).await?;
                }
                Ok(())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_operator::core::cluster_spec::ClusterSpec;

    #[test]
    fn nodes_carry_the_spec_and_kubelet_fields() {
        let spec =
            ClusterSpec::from_yaml(include_str!("../../examples/clusters/mixed.yaml")).unwrap();
        let infos = spec.build().unwrap();
        let now = Timestamp::now();
        let n = node_object(&infos[24], 24, now);
        let labels = n.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "gpu025");
        assert_eq!(labels["muster.dev/leaf"], "leaf4");
        assert_eq!(labels["muster.dev/spine"], "spine2");
        assert_eq!(labels["muster.dev/gpu.product"], "NVIDIA-L40S");
        assert_eq!(labels["muster.dev/gpu.count"], "4");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        let st = n.status.as_ref().unwrap();
        assert_eq!(st.allocatable.as_ref().unwrap()["cpu"].0, "64");
        assert_eq!(st.allocatable.as_ref().unwrap()["memory"].0, "536870912Ki");
        assert_eq!(st.capacity.as_ref().unwrap()["pods"].0, "110");
        let ready = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        let taints = n.spec.as_ref().unwrap().taints.as_ref().unwrap();
        assert_eq!(taints[0].key, "muster.dev/pcie");
        assert_eq!(taints[0].effect, "NoSchedule");
        assert_eq!(taints[0].value.as_deref(), Some("true"));
        assert_ne!(internal_ip(0), internal_ip(1));
        assert_ne!(pod_cidr(0), pod_cidr(256));
    }

    #[test]
    fn gpunode_status_lists_gpus_topology_and_health() {
        let infos = ClusterSpec::sandbox().build().unwrap();
        let now = Timestamp::now();
        let mut health = healthy_gpus(&infos[0], now);
        health[3].state = GpuHealthState::Unhealthy;
        let s = gpunode_status(&infos[0], &health, now);
        assert_eq!(s.gpu_count, 8);
        assert_eq!(s.healthy_gpus, 7);
        assert_eq!(s.gpus[0].uuid, infos[0].gpus[0].uuid);
        assert_eq!(s.gpus[4].numa_node, Some(1));
        assert_eq!(s.gpus[0].nvlink_peers.len(), 7);
        assert_eq!(s.topology[0][1], "NV18");
        assert_eq!(s.heartbeat_time, Some(Time(now)));
    }
}

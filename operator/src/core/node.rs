//! Nodes and GPUs as the scheduling core sees them.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Index of a node in [`Snapshot::nodes`](crate::core::Snapshot::nodes).
pub type NodeId = u32;

/// One Kubernetes Node with its GPUs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Node name (`kubernetes.io/hostname`).
    pub name: String,
    /// Node labels (topology levels, features, GPU product, …).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Allocatable CPU in millicores.
    pub cpu_millis: u64,
    /// Allocatable memory in MiB.
    pub memory_mib: u64,
    /// Node taints; a partition only uses nodes whose `NoSchedule`/`NoExecute` taints it
    /// tolerates.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// The Node's `Ready` condition. A node that is not ready gets no new work and its running
    /// jobs end as NODE_FAIL.
    #[serde(default = "yes")]
    pub ready: bool,
    /// `spec.unschedulable` (cordoned): no new work; running jobs go on.
    #[serde(default)]
    pub unschedulable: bool,
    /// GPUs, in any order (each names its NVML index).
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// GPU-to-GPU links as `nvidia-smi topo -m` prints them: `gpu_links[i][j]` connects
    /// `gpus[i]` and `gpus[j]` (positions in `gpus`, not NVML indices). Empty: derived from
    /// each GPU's NUMA node and NVLink peers.
    #[serde(default)]
    pub gpu_links: Vec<Vec<Link>>,
    /// Allocatable extended resources (`rdma/ib: 64`), as whole counts. A partition whose
    /// job environment gives every node pod some (`spec.jobEnvironment.resources`) uses only
    /// the nodes that have them ([`Node::has_resources`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, u64>,
}

fn yes() -> bool {
    true
}

/// One GPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// NVML index on the node (what allocations name).
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Model name (`NVIDIA H100 80GB HBM3`). Shared: a node's GPUs are mostly one model, and
    /// the operator's node table holds 131,072 GPUs at 16,384 nodes.
    pub model: Arc<str>,
    /// Memory in MiB.
    #[serde(default)]
    pub memory_mib: u64,
    /// Unhealthy GPUs get no new work; jobs on them end as NODE_FAIL.
    #[serde(default = "yes")]
    pub healthy: bool,
    /// NUMA node, if known.
    #[serde(default)]
    pub numa: Option<i32>,
    /// NVML indices of the GPUs reachable over NVLink.
    #[serde(default)]
    pub nvlink_peers: Vec<u32>,
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    #[serde(default)]
    pub value: String,
    /// Taint effect.
    pub effect: TaintEffect,
}

/// What a taint does to pods that do not tolerate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    /// New pods are not placed here.
    NoSchedule,
    /// Soft: avoided when possible. The core ignores it (it never blocks placement).
    PreferNoSchedule,
    /// New pods are not placed here and running ones are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

impl FromStr for TaintEffect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "NoSchedule" => Ok(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
            "NoExecute" => Ok(TaintEffect::NoExecute),
            _ => Err(format!(
                "invalid taint effect '{s}': expected NoSchedule, PreferNoSchedule or NoExecute"
            )),
        }
    }
}

/// A partition's toleration (the subset of the Kubernetes fields that decides placement).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key; empty with `exists: true` tolerates every taint.
    #[serde(default)]
    pub key: String,
    /// `operator: Exists` (any value) rather than `Equal`.
    #[serde(default)]
    pub exists: bool,
    /// Value for `Equal`.
    #[serde(default)]
    pub value: String,
    /// Effect tolerated; `None` tolerates every effect.
    #[serde(default)]
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes' rules).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(e) = self.effect
            && e != taint.effect
        {
            return false;
        }
        if self.exists {
            self.key.is_empty() || self.key == taint.key
        } else {
            self.key == taint.key && self.value == taint.value
        }
    }
}

/// How two GPUs are connected, as `nvidia-smi topo -m` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    /// `X`: the GPU itself.
    Itself,
    /// `NV#`: # bonded NVLinks.
    NvLink(u8),
    /// `PIX`: at most one PCIe bridge.
    Pix,
    /// `PXB`: several PCIe bridges, no host bridge.
    Pxb,
    /// `PHB`: through a PCIe host bridge (the CPU).
    Phb,
    /// `NODE`: across host bridges within one NUMA node.
    Node,
    /// `SYS`: across NUMA nodes (the SMP interconnect).
    Sys,
}

impl Link {
    /// Distance rank used by GPU binding: lower is closer. NVLink 0, PIX 1, PXB 2, PHB 3,
    /// NODE 4, SYS 5.
    pub fn distance(self) -> u8 {
        match self {
            Link::Itself | Link::NvLink(_) => 0,
            Link::Pix => 1,
            Link::Pxb => 2,
            Link::Phb => 3,
            Link::Node => 4,
            Link::Sys => 5,
        }
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Link::Itself => f.write_str("X"),
            Link::NvLink(n) => write!(f, "NV{n}"),
            Link::Pix => f.write_str("PIX"),
            Link::Pxb => f.write_str("PXB"),
            Link::Phb => f.write_str("PHB"),
            Link::Node => f.write_str("NODE"),
            Link::Sys => f.write_str("SYS"),
        }
    }
}

impl FromStr for Link {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        match t {
            "X" => Ok(Link::Itself),
            "PIX" => Ok(Link::Pix),
            "PXB" => Ok(Link::Pxb),
            "PHB" => Ok(Link::Phb),
            "NODE" => Ok(Link::Node),
            "SYS" => Ok(Link::Sys),
            _ => t
                .strip_prefix("NV")
                .and_then(|n| n.parse::<u8>().ok())
                .filter(|&n| n > 0)
                .map(Link::NvLink)
                .ok_or_else(|| {
                    format!("invalid GPU link '{s}': expected X, NV<n>, PIX, PXB, PHB, NODE or SYS")
                }),
        }
    }
}

impl Serialize for Link {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Link {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Node {
    /// Whether new work may be placed here (ready and not cordoned).
    pub fn schedulable(&self) -> bool {
        self.ready && !self.unschedulable
    }

    /// The link between the GPUs at positions `a` and `b` of [`Node::gpus`]: from
    /// [`Node::gpu_links`] when given, else NVLink if either lists the other as a peer, else
    /// `NODE` within one NUMA node and `SYS` across (`PHB` when NUMA is unknown).
    pub fn link(&self, a: usize, b: usize) -> Link {
        if a == b {
            return Link::Itself;
        }
        if let Some(l) = self.gpu_links.get(a).and_then(|row| row.get(b)) {
            return *l;
        }
        let (ga, gb) = (&self.gpus[a], &self.gpus[b]);
        if ga.nvlink_peers.contains(&gb.index) || gb.nvlink_peers.contains(&ga.index) {
            return Link::NvLink(1);
        }
        match (ga.numa, gb.numa) {
            (Some(x), Some(y)) if x == y => Link::Node,
            (Some(_), Some(_)) => Link::Sys,
            _ => Link::Phb,
        }
    }

    /// Whether the node's allocatable holds `want` (resource → amount, for one pod).
    pub fn has_resources(&self, want: &BTreeMap<String, u64>) -> bool {
        want.iter()
            .all(|(k, v)| self.extended.get(k).is_some_and(|have| have >= v))
    }

    /// Whether the node has feature `f` for `--constraint`: a label
    /// `muster.dev/feature.<f>` whose value is not `false`, or any label whose value is `f`.
    pub fn has_feature(&self, f: &str) -> bool {
        let key = format!("{}{f}", muster_crds::labels::NODE_FEATURE_PREFIX);
        if let Some(v) = self.labels.get(&key) {
            return v != "false";
        }
        self.labels.values().any(|v| v == f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_round_trip_like_nvidia_smi() {
        for s in ["X", "NV18", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"] {
            assert_eq!(s.parse::<Link>().unwrap().to_string(), s);
        }
        let err = "NVX".parse::<Link>().unwrap_err();
        assert!(err.contains("NVX") && err.contains("PIX"), "{err}");
        assert!("NV0".parse::<Link>().is_err());
        assert!(Link::NvLink(4).distance() < Link::Pix.distance());
        assert!(Link::Node.distance() < Link::Sys.distance());
    }

    #[test]
    fn tolerations_follow_kubernetes_rules() {
        let t = Taint {
            key: "gpu".into(),
            value: "h100".into(),
            effect: TaintEffect::NoSchedule,
        };
        let eq = Toleration {
            key: "gpu".into(),
            value: "h100".into(),
            ..Default::default()
        };
        assert!(eq.tolerates(&t));
        let wrong_value = Toleration {
            value: "a100".into(),
            ..eq.clone()
        };
        assert!(!wrong_value.tolerates(&t));
        let any = Toleration {
            exists: true,
            ..Default::default()
        };
        assert!(any.tolerates(&t));
        let other_effect = Toleration {
            effect: Some(TaintEffect::NoExecute),
            ..eq
        };
        assert!(!other_effect.tolerates(&t));
    }

    #[test]
    fn features_come_from_feature_labels_or_label_values() {
        let mut n = Node::default();
        n.labels
            .insert("muster.dev/feature.ib".into(), "true".into());
        n.labels
            .insert("muster.dev/feature.old".into(), "false".into());
        n.labels.insert("muster.dev/leaf".into(), "leaf3".into());
        assert!(n.has_feature("ib"));
        assert!(!n.has_feature("old"));
        assert!(n.has_feature("leaf3"));
        assert!(!n.has_feature("leaf4"));
    }
}

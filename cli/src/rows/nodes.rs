//! Rows of sinfo and `scontrol show node|partition`: one per node and per partition, from
//! the Nodes, GpuNodes, Partitions and the running BatchJobs that hold them.

use std::collections::{BTreeMap, BTreeSet};

use muster_crds::labels;
use muster_crds::slurm::TimeLimit;
use muster_crds::v1alpha1::{BatchJob, Exclusive, JobState};

use super::limit_of;

/// Node states as sinfo names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeState {
    /// Unusable: not Ready, or no healthy GPU.
    Down,
    /// Nothing allocated.
    Idle,
    /// Fully allocated.
    Allocated,
    /// Partly allocated.
    Mixed,
    /// Cordoned, nothing allocated.
    Drained,
    /// Cordoned with jobs still on it.
    Draining,
}

impl NodeState {
    /// sinfo's `%t` (compact) name.
    pub fn compact(self) -> &'static str {
        match self {
            NodeState::Down => "down",
            NodeState::Idle => "idle",
            NodeState::Allocated => "alloc",
            NodeState::Mixed => "mix",
            NodeState::Drained => "drain",
            NodeState::Draining => "drng",
        }
    }

    /// sinfo's `%T` (long) name.
    pub fn long(self) -> &'static str {
        match self {
            NodeState::Down => "down",
            NodeState::Idle => "idle",
            NodeState::Allocated => "allocated",
            NodeState::Mixed => "mixed",
            NodeState::Drained => "drained",
            NodeState::Draining => "draining",
        }
    }

    /// Slurm's numeric state (base state plus the DRAIN flag), whose descending order is
    /// sinfo's default state order.
    pub fn slurm_value(self) -> u32 {
        const DRAIN: u32 = 0x200;
        match self {
            NodeState::Down => 1,
            NodeState::Idle => 2,
            NodeState::Allocated => 3,
            NodeState::Mixed => 5,
            NodeState::Drained => 2 | DRAIN,
            NodeState::Draining => 3 | DRAIN,
        }
    }

    /// Whether a `-t` state name selects this state.
    pub fn matches(self, name: &str) -> bool {
        let n = name.to_ascii_lowercase();
        match self {
            NodeState::Down => n == "down",
            NodeState::Idle => n == "idle",
            NodeState::Allocated => matches!(n.as_str(), "alloc" | "allocated"),
            NodeState::Mixed => matches!(n.as_str(), "mix" | "mixed"),
            NodeState::Drained => matches!(n.as_str(), "drain" | "drained"),
            NodeState::Draining => matches!(n.as_str(), "drain" | "draining" | "drng"),
        }
    }
}

/// What sinfo and scontrol show of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    /// Node name.
    pub name: String,
    /// State.
    pub state: NodeState,
    /// The node's kubelet is not reporting Ready (Slurm's `*` suffix).
    pub not_responding: bool,
    /// Allocatable CPUs.
    pub cpus: u32,
    /// CPUs held by running jobs.
    pub cpus_alloc: u32,
    /// Allocatable memory, MB.
    pub memory_mb: u64,
    /// Memory held by running jobs, MB.
    pub memory_alloc_mb: u64,
    /// Allocatable ephemeral storage, MB (Slurm's TmpDisk).
    pub tmp_disk_mb: u64,
    /// GPUs.
    pub gpus: u32,
    /// GPUs held by running jobs.
    pub gpus_alloc: u32,
    /// The indices of the GPUs running jobs hold.
    pub gpus_used: BTreeSet<u32>,
    /// GPU type as a Slurm gres type (`h100`).
    pub gpu_type: Option<String>,
    /// Features (labels `muster.dev/feature.NAME`).
    pub features: Vec<String>,
    /// Why the node is down or drained.
    pub reason: Option<String>,
    /// Who gave the reason (an administrator's drain), when known.
    pub reason_user: Option<String>,
    /// When the reason was given (a drain's time, or when the node stopped responding).
    pub reason_time: Option<jiff::Timestamp>,
    /// Partitions that hold the node.
    pub partitions: Vec<String>,
    /// Architecture label.
    pub arch: Option<String>,
    /// Kernel/OS as the kubelet reports it.
    pub os: Option<String>,
}

impl NodeRow {
    /// The state with Slurm's suffix for a node that does not respond (`down*`).
    pub fn compact_state(&self) -> String {
        format!(
            "{}{}",
            self.state.compact(),
            if self.not_responding { "*" } else { "" }
        )
    }

    /// Slurm's numeric node state with the NO_RESPOND flag (sinfo sorts on it).
    pub fn slurm_value(&self) -> u32 {
        const NO_RESPOND: u32 = 0x800;
        self.state.slurm_value() | if self.not_responding { NO_RESPOND } else { 0 }
    }

    /// The long state with the same suffix.
    pub fn long_state(&self) -> String {
        format!(
            "{}{}",
            self.state.long(),
            if self.not_responding { "*" } else { "" }
        )
    }

    /// Slurm's GresUsed: `gpu:h100:4(IDX:0-3)`, `gpu:h100:0(IDX:N/A)` when none is held.
    pub fn gres_used(&self) -> String {
        if self.gpus == 0 {
            return "(null)".to_string();
        }
        let n = self.gpus_used.len();
        let idx = if n == 0 {
            "N/A".to_string()
        } else {
            super::index_list(&self.gpus_used)
        };
        match &self.gpu_type {
            Some(t) => format!("gpu:{t}:{n}(IDX:{idx})"),
            None => format!("gpu:{n}(IDX:{idx})"),
        }
    }

    /// GPUs as Slurm's Gres (`gpu:h100:8`), or `(null)`.
    pub fn gres(&self) -> String {
        match (self.gpus, &self.gpu_type) {
            (0, _) => "(null)".to_string(),
            (n, Some(t)) => format!("gpu:{t}:{n}"),
            (n, None) => format!("gpu:{n}"),
        }
    }
}

/// A Slurm gres type from an NVML model name: the model family in lower case
/// (`NVIDIA H100 80GB HBM3` → `h100`, `NVIDIA A100-SXM4-80GB` → `a100`,
/// `Tesla V100-SXM2-16GB` → `v100`, `NVIDIA GeForce RTX 4090` → `rtx4090`).
pub fn gres_type(model: &str) -> Option<String> {
    let words: Vec<String> = model
        .split(|c: char| c.is_whitespace() || c == '-' || c == '_')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .filter(|w| !matches!(w.as_str(), "nvidia" | "tesla" | "geforce" | "quadro"))
        .collect();
    let first = words.first()?;
    if matches!(first.as_str(), "rtx" | "gtx") {
        return Some(format!(
            "{first}{}",
            words.get(1).map(String::as_str).unwrap_or("")
        ));
    }
    Some(first.clone())
}

/// Whether `labels` satisfy a Kubernetes label selector (empty selector: everything).
pub fn selector_matches(
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(sel) = sel else { return true };
    if let Some(ml) = &sel.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for e in sel.match_expressions.iter().flatten() {
        let vals = e.values.clone().unwrap_or_default();
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|v| vals.contains(v)),
            "NotIn" => have.is_none_or(|v| !vals.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// What sinfo and scontrol show of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartRow {
    /// Name.
    pub name: String,
    /// The default partition.
    pub default: bool,
    /// `up`, `down`, `drain` or `inactive`.
    pub avail: String,
    /// Longest time limit (`None`: unlimited).
    pub max_time: Option<TimeLimit>,
    /// Default time limit (`None`: not set).
    pub default_time: Option<TimeLimit>,
    /// Fewest nodes per job.
    pub min_nodes: Option<u32>,
    /// Most nodes per job.
    pub max_nodes: Option<u32>,
    /// Priority tier.
    pub priority_tier: u32,
    /// Preemption mode (`OFF`, `REQUEUE`, `CANCEL`).
    pub preempt_mode: String,
    /// Namespaces allowed (empty: all).
    pub allowed_namespaces: Vec<String>,
    /// Nodes in the partition, sorted.
    pub nodes: Vec<String>,
}

/// When the node's Ready condition last changed (for a node that stopped responding).
fn ready_since(node: &k8s_openapi::api::core::v1::Node) -> Option<jiff::Timestamp> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

fn node_ready(node: &k8s_openapi::api::core::v1::Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn quantity_u64(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<f64> {
    let s = q?.0.trim();
    let (num, mult) = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("m", 1e-3),
    ]
    .iter()
    .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n, *m)))
    .unwrap_or((s, 1.0));
    num.parse::<f64>().ok().map(|n| n * mult)
}

fn partition_avail(p: &muster_crds::v1alpha1::Partition) -> String {
    use muster_crds::v1alpha1::PartitionState;
    match p.state() {
        PartitionState::Up => "up",
        PartitionState::Down => "down",
        PartitionState::Drain => "drain",
        PartitionState::Inactive => "inactive",
    }
    .to_string()
}

/// Build partition and node rows from the cluster's objects.
pub fn cluster_rows(
    partitions: &[muster_crds::v1alpha1::Partition],
    nodes: &[k8s_openapi::api::core::v1::Node],
    gpunodes: &[muster_crds::v1alpha1::GpuNode],
    jobs: &[BatchJob],
) -> (Vec<PartRow>, Vec<NodeRow>) {
    use muster_crds::v1alpha1::PreemptMode;

    let mut part_rows: Vec<PartRow> = partitions
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let mut members: Vec<String> = nodes
                .iter()
                .filter(|n| {
                    selector_matches(
                        p.spec.node_selector.as_ref(),
                        &n.metadata.labels.clone().unwrap_or_default(),
                    )
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            members.sort();
            PartRow {
                name,
                default: p.spec.default.unwrap_or(false),
                avail: partition_avail(p),
                max_time: limit_of(&p.spec.max_time),
                default_time: limit_of(&p.spec.default_time),
                min_nodes: p.spec.min_nodes,
                max_nodes: p.spec.max_nodes,
                priority_tier: p.spec.priority_tier.unwrap_or(1),
                preempt_mode: match p.spec.preempt_mode.unwrap_or_default() {
                    PreemptMode::None => "OFF",
                    PreemptMode::Requeue => "REQUEUE",
                    PreemptMode::Cancel => "CANCEL",
                }
                .to_string(),
                allowed_namespaces: p.spec.allowed_namespaces.clone(),
                nodes: members,
            }
        })
        .collect();
    part_rows.sort_by(|a, b| a.name.cmp(&b.name));

    // Allocations of jobs that hold resources.
    // GPUs by index, so a GPU that tasks of one job share counts once.
    let mut gpus_alloc: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut cpus_alloc: BTreeMap<String, u64> = BTreeMap::new();
    let mut mem_alloc: BTreeMap<String, u64> = BTreeMap::new();
    let mut exclusive: BTreeSet<String> = BTreeSet::new();
    for j in jobs {
        if !matches!(j.state(), JobState::Running | JobState::Completing) {
            continue;
        }
        for t in j.status.iter().flat_map(|s| s.tasks.iter()) {
            gpus_alloc
                .entry(t.node.clone())
                .or_default()
                .extend(t.gpus.iter().copied());
            *cpus_alloc.entry(t.node.clone()).or_default() += t.cpu_millis;
            *mem_alloc.entry(t.node.clone()).or_default() += t.memory_mib;
            if j.spec.exclusive.is_some_and(Exclusive::is_node) {
                exclusive.insert(t.node.clone());
            }
        }
    }

    let mut node_rows: Vec<NodeRow> = nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let labels_map = n.metadata.labels.clone().unwrap_or_default();
            let gn = gpunodes
                .iter()
                .find(|g| g.metadata.name.as_deref() == Some(name.as_str()));
            let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
            let cap = n.status.as_ref().and_then(|s| s.capacity.as_ref());
            let cpus = quantity_u64(alloc.and_then(|a| a.get("cpu"))).unwrap_or(0.0) as u32;
            let tmp_disk_mb = (quantity_u64(alloc.and_then(|a| a.get("ephemeral-storage")))
                .unwrap_or(0.0)
                / 1048576.0) as u64;
            let memory_mb = (quantity_u64(alloc.and_then(|a| a.get("memory"))).unwrap_or(0.0)
                / 1048576.0) as u64;
            let gpus = gn
                .and_then(|g| g.status.as_ref())
                .map(|s| s.gpu_count)
                .or_else(|| {
                    labels_map
                        .get(labels::NODE_GPU_COUNT)
                        .and_then(|c| c.parse().ok())
                })
                .or_else(|| {
                    quantity_u64(cap.and_then(|c| c.get("nvidia.com/gpu"))).map(|g| g as u32)
                })
                .unwrap_or(0);
            let model = gn
                .and_then(|g| g.status.as_ref())
                .and_then(|s| s.gpus.first())
                .map(|g| g.model.clone())
                .or_else(|| labels_map.get(labels::NODE_GPU_PRODUCT).cloned())
                .or_else(|| labels_map.get("nvidia.com/gpu.product").cloned());
            let mut features: Vec<String> = labels_map
                .iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix(labels::NODE_FEATURE_PREFIX)
                        .filter(|_| v != "false")
                        .map(str::to_string)
                })
                .collect();
            features.sort();

            let ready = node_ready(n);
            let healthy = gn.and_then(|g| g.status.as_ref()).map(|s| s.healthy_gpus);
            let all_gpus_bad = gpus > 0 && healthy == Some(0) && gn.is_some();
            let cordoned = n
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
            let g_alloc = gpus_alloc.get(&name).map_or(0, |g| g.len() as u32);
            let c_alloc_millis = cpus_alloc.get(&name).copied().unwrap_or(0);
            let c_alloc = c_alloc_millis.div_ceil(1000) as u32;
            let busy = g_alloc > 0 || c_alloc_millis > 0 || exclusive.contains(&name);
            let full = exclusive.contains(&name)
                || (gpus > 0 && g_alloc >= gpus)
                || (gpus == 0 && cpus > 0 && c_alloc >= cpus);
            let ann = |k: &str| n.metadata.annotations.as_ref().and_then(|a| a.get(k));
            let mut reason_user = None;
            let mut reason_time = None;
            let (state, reason) = if !ready {
                reason_time = ready_since(n);
                (NodeState::Down, Some("Not responding".to_string()))
            } else if all_gpus_bad {
                let why = gn
                    .and_then(|g| g.status.as_ref())
                    .and_then(|s| s.gpus.iter().find_map(|g| g.health.reason.clone()))
                    .unwrap_or_else(|| "GPUs unhealthy".to_string());
                (NodeState::Down, Some(why))
            } else if cordoned {
                let st = if busy {
                    NodeState::Draining
                } else {
                    NodeState::Drained
                };
                // An administrator's drain (`scontrol update ... State=DRAIN Reason=...`)
                // says why; a plain `kubectl cordon` does not.
                reason_user = ann(labels::NODE_REASON_USER).cloned();
                reason_time = ann(labels::NODE_REASON_TIME).and_then(|t| t.parse().ok());
                let why = ann(labels::NODE_REASON).cloned();
                (st, Some(why.unwrap_or_else(|| "Cordoned".to_string())))
            } else if full {
                (NodeState::Allocated, None)
            } else if busy {
                (NodeState::Mixed, None)
            } else {
                (NodeState::Idle, None)
            };
            let partitions = part_rows
                .iter()
                .filter(|p| p.nodes.contains(&name))
                .map(|p| p.name.clone())
                .collect();
            let info = n.status.as_ref().and_then(|s| s.node_info.as_ref());
            NodeRow {
                name,
                state,
                not_responding: !ready,
                cpus,
                cpus_alloc: c_alloc,
                memory_mb,
                tmp_disk_mb,
                memory_alloc_mb: mem_alloc
                    .get(n.metadata.name.as_deref().unwrap_or(""))
                    .copied()
                    .unwrap_or(0),
                gpus,
                gpus_alloc: g_alloc,
                gpus_used: gpus_alloc
                    .get(n.metadata.name.as_deref().unwrap_or(""))
                    .cloned()
                    .unwrap_or_default(),
                gpu_type: model.as_deref().and_then(gres_type),
                features,
                reason,
                reason_user,
                reason_time,
                partitions,
                arch: labels_map.get("kubernetes.io/arch").cloned(),
                os: info.map(|i| format!("{} {}", i.operating_system, i.kernel_version)),
            }
        })
        .collect();
    node_rows.sort_by(|a, b| a.name.cmp(&b.name));
    (part_rows, node_rows)
}

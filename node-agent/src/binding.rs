//! Which GPUs each pod was given, and which GPU processes break that (pure).
//!
//! # Where a pod's GPUs come from
//! For a Muster task pod (label `muster.dev/batchjob`) the authority is the owning BatchJob's
//! `status.tasks` entries of the pod's node (`muster.dev/node-rank`; a node pod holds the
//! GPUs of every task of the job on its node) on this node: the operator
//! writes it before it creates any pod and the scheduler counts exactly those GPUs as taken,
//! so a process anywhere else is on a GPU the scheduler may hand to another job. The pod's
//! `NVIDIA_VISIBLE_DEVICES` is only derived from it (and is what the container runtime
//! exposed); if the two ever differ, the runtime exposed GPUs the scheduler thinks free —
//! precisely the violation to report. The env is the fallback when the BatchJob or its task
//! entry is gone (a pod still terminating after its job was deleted or requeued).
//!
//! Other pods: `NVIDIA_VISIBLE_DEVICES` in the spec of the process's container (or of any
//! container when the container is unknown): UUIDs, `MIG-…` UUIDs (they grant their parent
//! GPU), indices, `all`, or `none`/`void`. A pod that asks for an `nvidia.com/…` device-plugin
//! resource without that env is left alone: the kubelet chose its GPUs and they are not
//! visible in the API. Any other pod was given no GPU at all.
//!
//! # Processes outside pods
//! A GPU process whose cgroup is not a pod's (persistence daemon, DCGM, an admin's
//! `nvidia-smi`, a job run outside Kubernetes) is reported in the log only — never counted as a
//! binding violation nor killed: binding is a contract between the scheduler and pods, and the
//! node's own daemons are the administrator's business. Its memory still shows in the GPU's
//! `memoryUsedMib`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, PodGpuUsage, TaskAllocation};

use crate::cgroup::PodRef;
use crate::model::{GpuProcess, NodeInventory};
use crate::procfs::ProcessHome;

/// The env var the NVIDIA container runtime reads.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// Annotation the kubelet puts on a static pod's mirror: the UID its cgroup is named after.
pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";

/// Where an assignment was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The BatchJob's `status.tasks` entry.
    BatchJob {
        /// BatchJob name.
        name: String,
        /// The node pod's index in the job (`muster.dev/node-rank`).
        node: u32,
    },
    /// The container's `NVIDIA_VISIBLE_DEVICES`.
    PodEnv,
    /// Nothing gave the pod a GPU.
    Nothing,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::BatchJob { name, node } => write!(f, "BatchJob {name} node {node}"),
            Source::PodEnv => write!(f, "the pod's {VISIBLE_DEVICES}"),
            Source::Nothing => write!(
                f,
                "no GPU assignment (no BatchJob task entry, no {VISIBLE_DEVICES})"
            ),
        }
    }
}

/// The GPUs a pod may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assignment {
    /// Exactly these GPU indices.
    Gpus {
        /// GPU indices on this node.
        gpus: BTreeSet<u32>,
        /// Where this came from.
        source: Source,
    },
    /// Every GPU (`NVIDIA_VISIBLE_DEVICES=all`).
    All,
    /// Not enforced: the pod got GPUs through a device plugin (named here).
    DevicePlugin(String),
}

impl Assignment {
    /// Whether the pod may use GPU `gpu`; `None` when not enforced.
    pub fn allows(&self, gpu: u32) -> Option<bool> {
        match self {
            Assignment::Gpus { gpus, .. } => Some(gpus.contains(&gpu)),
            Assignment::All => Some(true),
            Assignment::DevicePlugin(_) => None,
        }
    }

    /// Human description (`GPUs 0,1 from BatchJob train node 2`).
    pub fn describe(&self) -> String {
        match self {
            Assignment::Gpus { gpus, source } if gpus.is_empty() => format!("no GPUs ({source})"),
            Assignment::Gpus { gpus, source } => format!(
                "GPUs {} from {source}",
                gpus.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Assignment::All => format!("all GPUs ({VISIBLE_DEVICES}=all)"),
            Assignment::DevicePlugin(r) => format!("device-plugin resource {r}"),
        }
    }
}

/// The BatchJob (namespace, name) whose status a pod's assignment is read from.
pub fn batchjob_of(pod: &Pod) -> Option<(String, String)> {
    let name = pod.labels().get(labels::BATCHJOB)?;
    Some((pod.namespace().unwrap_or_default(), name.clone()))
}

/// The name of the container with runtime id `container_id` (from the pod's status).
pub fn container_name(pod: &Pod, container_id: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .find(|cs| {
            cs.container_id
                .as_deref()
                .and_then(|id| id.rsplit_once("://").map(|(_, id)| id))
                .is_some_and(|id| id.eq_ignore_ascii_case(container_id))
        })
        .map(|cs| cs.name.clone())
}

/// The GPUs `pod` may use on node `node`; `container` narrows the env lookup.
pub fn assignment(
    pod: &Pod,
    batchjob: Option<&BatchJob>,
    node: &str,
    container: Option<&str>,
    inventory: &NodeInventory,
) -> Assignment {
    let muster = pod.labels().get(labels::BATCHJOB);
    if muster.is_some()
        && let Some(a) = batchjob.and_then(|bj| from_batchjob(pod, bj, node, inventory))
    {
        return a;
    }
    if let Some(a) = from_env(pod, container, inventory) {
        return a;
    }
    if muster.is_none()
        && let Some(resource) = device_plugin_resource(pod)
    {
        return Assignment::DevicePlugin(resource);
    }
    Assignment::Gpus {
        gpus: BTreeSet::new(),
        source: Source::Nothing,
    }
}

/// The BatchJob task entries that `pod` holds on `node`: those of the pod's node index (label
/// `muster.dev/node-rank`) on this node, recording the same pod name if they record one, of
/// the same admission attempt (a pod of an older attempt after a requeue holds nothing any
/// more). Empty when none describes the pod.
pub fn tasks_of<'a>(pod: &Pod, bj: &'a BatchJob, node: &str) -> Vec<&'a TaskAllocation> {
    let Some(index) = pod
        .labels()
        .get(labels::NODE_RANK)
        .and_then(|v| v.parse::<u32>().ok())
    else {
        return Vec::new();
    };
    let Some(status) = bj.status.as_ref() else {
        return Vec::new();
    };
    let pod_attempt = pod
        .labels()
        .get(labels::ATTEMPT)
        .and_then(|a| a.parse::<u32>().ok());
    if let (Some(p), Some(s)) = (pod_attempt, status.attempt)
        && p != s
    {
        return Vec::new();
    }
    let name = pod.name_any();
    status
        .tasks
        .iter()
        .filter(|t| {
            t.node_rank == index && t.node == node && t.pod.as_deref().is_none_or(|p| p == name)
        })
        .collect()
}

fn from_batchjob(
    pod: &Pod,
    bj: &BatchJob,
    node: &str,
    inventory: &NodeInventory,
) -> Option<Assignment> {
    let tasks = tasks_of(pod, bj, node);
    let first = tasks.first()?;
    let mut gpus: BTreeSet<u32> = BTreeSet::new();
    for task in &tasks {
        if task.gpu_uuids.is_empty() {
            gpus.extend(
                task.gpus
                    .iter()
                    .copied()
                    .filter(|i| inventory.gpu(*i).is_some()),
            );
        } else {
            gpus.extend(
                task.gpu_uuids
                    .iter()
                    .filter_map(|u| inventory.resolve_device(u)),
            );
        }
    }
    Some(Assignment::Gpus {
        gpus,
        source: Source::BatchJob {
            name: bj.name_any(),
            node: first.node_rank,
        },
    })
}

fn from_env(pod: &Pod, container: Option<&str>, inventory: &NodeInventory) -> Option<Assignment> {
    let spec = pod.spec.as_ref()?;
    let mut values = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter(|c| container.is_none_or(|name| c.name == name))
        .filter_map(|c| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == VISIBLE_DEVICES)
                .and_then(|e| e.value.clone())
        })
        .peekable();
    values.peek()?;
    let mut gpus = BTreeSet::new();
    for value in values {
        for id in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match id {
                "all" => return Some(Assignment::All),
                "none" | "void" => {}
                _ => match inventory.resolve_device(id) {
                    Some(i) => {
                        gpus.insert(i);
                    }
                    None => {
                        tracing::debug!(pod = %pod.name_any(), id, "{VISIBLE_DEVICES} names a device not on this node")
                    }
                },
            }
        }
    }
    Some(Assignment::Gpus {
        gpus,
        source: Source::PodEnv,
    })
}

fn device_plugin_resource(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().find_map(|c| {
        let res = c.resources.as_ref()?;
        res.limits
            .iter()
            .flatten()
            .chain(res.requests.iter().flatten())
            .map(|(k, _)| k)
            .find(|k| k.starts_with("nvidia.com/"))
            .cloned()
    })
}

/// A process on a GPU its pod was not given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The process.
    pub process: GpuProcess,
    /// GPU UUID.
    pub gpu_uuid: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Pod UID as the cgroup names it (a static pod's config hash).
    pub pod_uid: String,
    /// Pod UID in the API (for Event references).
    pub pod_api_uid: Option<String>,
    /// Container name, when known.
    pub container: Option<String>,
    /// What the pod was given.
    pub assignment: Assignment,
}

impl Violation {
    /// The BatchJob (namespace, name) the pod's assignment was read from, if any.
    pub fn batchjob(&self) -> Option<(String, String)> {
        match &self.assignment {
            Assignment::Gpus {
                source: Source::BatchJob { name, .. },
                ..
            } => Some((self.namespace.clone(), name.clone())),
            _ => None,
        }
    }

    /// The message for the pod's Event and the log.
    pub fn message(&self, comm: Option<&str>) -> String {
        format!(
            "process {}{}{} uses GPU {} ({}){}; the pod was given {}",
            self.process.pid,
            comm.map(|c| format!(" ({c})")).unwrap_or_default(),
            self.container
                .as_ref()
                .map(|c| format!(" in container {c}"))
                .unwrap_or_default(),
            self.process.gpu,
            self.gpu_uuid,
            self.process
                .used_memory_mib
                .map(|m| format!(", {m} MiB"))
                .unwrap_or_default(),
            self.assignment.describe(),
        )
    }
}

/// What the processes on the GPUs amount to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    /// Processes on GPUs their pods were not given.
    pub violations: Vec<Violation>,
    /// Memory per pod and GPU, sorted by namespace, pod, GPU.
    pub usage: Vec<PodGpuUsage>,
    /// Processes outside any pod.
    pub host_processes: Vec<GpuProcess>,
    /// Processes in a pod cgroup whose pod is not (yet) in the pod list; judged next time.
    pub unknown_pod: Vec<(GpuProcess, PodRef)>,
}

/// Judges every GPU process. `homes` maps a PID to where it lives (processes missing from it
/// count as gone); `batchjobs` are keyed by (namespace, name).
pub fn evaluate(
    node: &str,
    inventory: &NodeInventory,
    processes: &[GpuProcess],
    homes: &HashMap<u32, ProcessHome>,
    pods: &[Pod],
    batchjobs: &HashMap<(String, String), BatchJob>,
) -> Evaluation {
    let mut by_uid: HashMap<String, &Pod> = HashMap::new();
    for pod in pods {
        if let Some(uid) = &pod.metadata.uid {
            by_uid.insert(uid.to_ascii_lowercase(), pod);
        }
        if let Some(hash) = pod.annotations().get(CONFIG_HASH) {
            by_uid.insert(hash.to_ascii_lowercase(), pod);
        }
    }
    let mut eval = Evaluation::default();
    let mut usage: BTreeMap<(String, String, u32), (u64, bool)> = BTreeMap::new();
    for proc in processes {
        let pod_ref = match homes.get(&proc.pid) {
            Some(ProcessHome::Pod(r)) => r,
            Some(ProcessHome::Host) => {
                eval.host_processes.push(proc.clone());
                continue;
            }
            Some(ProcessHome::Gone) | None => continue,
        };
        let Some(pod) = by_uid.get(&pod_ref.pod_uid) else {
            eval.unknown_pod.push((proc.clone(), pod_ref.clone()));
            continue;
        };
        let container = pod_ref
            .container_id
            .as_deref()
            .and_then(|id| container_name(pod, id));
        let bj = batchjob_of(pod).and_then(|key| batchjobs.get(&key));
        let assignment = assignment(pod, bj, node, container.as_deref(), inventory);
        let allowed = assignment.allows(proc.gpu);
        let entry = usage
            .entry((
                pod.namespace().unwrap_or_default(),
                pod.name_any(),
                proc.gpu,
            ))
            .or_insert((0, allowed == Some(true)));
        entry.0 += proc.used_memory_mib.unwrap_or(0);
        if allowed == Some(false) {
            eval.violations.push(Violation {
                process: proc.clone(),
                gpu_uuid: inventory
                    .gpu(proc.gpu)
                    .map(|g| g.uuid.clone())
                    .unwrap_or_default(),
                namespace: pod.namespace().unwrap_or_default(),
                pod: pod.name_any(),
                pod_uid: pod_ref.pod_uid.clone(),
                pod_api_uid: pod.metadata.uid.clone(),
                container,
                assignment,
            });
        }
    }
    eval.usage = usage
        .into_iter()
        .map(
            |((namespace, pod, gpu), (memory_used_mib, assigned))| PodGpuUsage {
                namespace,
                pod,
                gpu,
                memory_used_mib,
                assigned,
            },
        )
        .collect();
    eval
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Gpu;
    use k8s_openapi::api::core::v1::{
        Container, ContainerStatus, EnvVar, PodSpec, PodStatus, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;
    use muster_crds::v1alpha1::{BatchJobSpec, BatchJobStatus};

    const NODE: &str = "gpu-a";
    const CID: &str = "4c01db0b339c9d5e2ff7b8a6d1e2c3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0";

    fn inv() -> NodeInventory {
        NodeInventory {
            gpus: (0..4)
                .map(|i| Gpu {
                    index: i,
                    uuid: format!("GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd"),
                    mig_uuids: if i == 3 {
                        vec!["MIG-3a3a3a3a-0000-1111-2222-333333333333".into()]
                    } else {
                        vec![]
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn uuid(i: u32) -> String {
        format!("GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd")
    }

    fn pod(name: &str, uid: &str, labels: &[(&str, &str)], env: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ml".into()),
                uid: Some(uid.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(NODE.into()),
                containers: vec![Container {
                    name: "task".into(),
                    env: env.map(|v| {
                        vec![EnvVar {
                            name: VISIBLE_DEVICES.into(),
                            value: Some(v.into()),
                            ..Default::default()
                        }]
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "task".into(),
                    container_id: Some(format!("containerd://{CID}")),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn job(name: &str, tasks: Vec<TaskAllocation>, attempt: Option<u32>) -> BatchJob {
        let mut bj = BatchJob::new(name, BatchJobSpec::default());
        bj.metadata.namespace = Some("ml".into());
        bj.status = Some(BatchJobStatus {
            tasks,
            attempt,
            ..Default::default()
        });
        bj
    }

    fn task(rank: u32, node: &str, gpus: &[u32], uuids: bool) -> TaskAllocation {
        TaskAllocation {
            rank,
            node: node.into(),
            node_rank: rank,
            gpus: gpus.to_vec(),
            gpu_uuids: if uuids {
                gpus.iter().map(|g| uuid(*g)).collect()
            } else {
                vec![]
            },
            ..Default::default()
        }
    }

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn batchjob_status_is_authoritative_over_env() {
        let p = pod(
            "train-1",
            "u1",
            &[(labels::BATCHJOB, "train"), (labels::NODE_RANK, "1")],
            Some(&uuid(3)),
        );
        let bj = job(
            "train",
            vec![task(0, NODE, &[0], true), task(1, NODE, &[1, 2], true)],
            None,
        );
        let a = assignment(&p, Some(&bj), NODE, None, &inv());
        assert_eq!(
            a,
            Assignment::Gpus {
                gpus: set(&[1, 2]),
                source: Source::BatchJob {
                    name: "train".into(),
                    node: 1
                }
            }
        );
        assert_eq!(a.describe(), "GPUs 1,2 from BatchJob train node 1");
        // Indices only (no UUIDs recorded) work too.
        let bj = job("train", vec![task(1, NODE, &[2], false)], None);
        assert_eq!(
            assignment(&p, Some(&bj), NODE, None, &inv()).allows(2),
            Some(true)
        );
    }

    #[test]
    fn env_is_the_fallback_when_the_task_entry_is_gone() {
        let p = pod(
            "train-1",
            "u1",
            &[(labels::BATCHJOB, "train"), (labels::NODE_RANK, "1")],
            Some(&uuid(3)),
        );
        // No BatchJob, a task for another node, another attempt, another pod name.
        let other_node = job("train", vec![task(1, "gpu-b", &[0], true)], None);
        let mut other_pod = task(1, NODE, &[0], true);
        other_pod.pod = Some("train-1-x".into());
        let renamed = job("train", vec![other_pod], None);
        let mut old_attempt = pod(
            "train-1",
            "u1",
            &[
                (labels::BATCHJOB, "train"),
                (labels::NODE_RANK, "1"),
                (labels::ATTEMPT, "1"),
            ],
            Some(&uuid(3)),
        );
        old_attempt.metadata.name = Some("train-1".into());
        let requeued = job("train", vec![task(1, NODE, &[0], true)], Some(2));
        for (p, bj) in [
            (&p, None),
            (&p, Some(&other_node)),
            (&p, Some(&renamed)),
            (&old_attempt, Some(&requeued)),
        ] {
            assert_eq!(
                assignment(p, bj, NODE, None, &inv()),
                Assignment::Gpus {
                    gpus: set(&[3]),
                    source: Source::PodEnv
                }
            );
        }
    }

    #[test]
    fn env_values() {
        let cases: &[(&str, Assignment)] = &[
            ("all", Assignment::All),
            (
                "none",
                Assignment::Gpus {
                    gpus: set(&[]),
                    source: Source::PodEnv,
                },
            ),
            (
                "0,2",
                Assignment::Gpus {
                    gpus: set(&[0, 2]),
                    source: Source::PodEnv,
                },
            ),
            (
                "MIG-3a3a3a3a-0000-1111-2222-333333333333",
                Assignment::Gpus {
                    gpus: set(&[3]),
                    source: Source::PodEnv,
                },
            ),
            // A UUID of another node's GPU grants nothing here.
            (
                "GPU-ffffffff-0000-0000-0000-000000000000",
                Assignment::Gpus {
                    gpus: set(&[]),
                    source: Source::PodEnv,
                },
            ),
        ];
        for (env, want) in cases {
            let p = pod("p", "u", &[], Some(env));
            assert_eq!(
                &assignment(&p, None, NODE, Some("task"), &inv()),
                want,
                "{env}"
            );
        }
        let mixed = format!("{}, {}", uuid(1), uuid(0).to_lowercase());
        let p = pod("p", "u", &[], Some(&mixed));
        assert_eq!(
            assignment(&p, None, NODE, None, &inv()).allows(0),
            Some(true)
        );
    }

    #[test]
    fn device_plugin_pods_are_not_enforced_and_bare_pods_get_nothing() {
        let mut p = pod("dp", "u", &[], None);
        p.spec.as_mut().unwrap().containers[0].resources = Some(ResourceRequirements {
            limits: Some([("nvidia.com/gpu".to_string(), Quantity("1".into()))].into()),
            ..Default::default()
        });
        assert_eq!(
            assignment(&p, None, NODE, None, &inv()),
            Assignment::DevicePlugin("nvidia.com/gpu".into())
        );
        assert_eq!(assignment(&p, None, NODE, None, &inv()).allows(0), None);
        let bare = pod("bare", "u", &[], None);
        assert_eq!(
            assignment(&bare, None, NODE, None, &inv()).allows(0),
            Some(false)
        );
    }

    #[test]
    fn evaluation_finds_violations_usage_and_host_processes() {
        let pods = vec![
            pod(
                "train-0",
                "uid-0",
                &[(labels::BATCHJOB, "train"), (labels::NODE_RANK, "0")],
                Some(&uuid(0)),
            ),
            pod(
                "train-1",
                "uid-1",
                &[(labels::BATCHJOB, "train"), (labels::NODE_RANK, "1")],
                Some(&uuid(1)),
            ),
        ];
        let bj = job(
            "train",
            vec![task(0, NODE, &[0], true), task(1, NODE, &[1], true)],
            None,
        );
        let batchjobs = HashMap::from([(("ml".to_string(), "train".to_string()), bj)]);
        let procs = vec![
            GpuProcess {
                gpu: 0,
                pid: 10,
                used_memory_mib: Some(1000),
            },
            GpuProcess {
                gpu: 0,
                pid: 11,
                used_memory_mib: Some(500),
            },
            GpuProcess {
                gpu: 1,
                pid: 20,
                used_memory_mib: Some(2000),
            },
            GpuProcess {
                gpu: 0,
                pid: 21,
                used_memory_mib: Some(300),
            }, // train-1 on GPU 0
            GpuProcess {
                gpu: 2,
                pid: 30,
                used_memory_mib: Some(100),
            }, // host
            GpuProcess {
                gpu: 2,
                pid: 40,
                used_memory_mib: None,
            }, // exited
            GpuProcess {
                gpu: 3,
                pid: 50,
                used_memory_mib: Some(7),
            }, // unknown pod
        ];
        let home = |uid: &str| {
            ProcessHome::Pod(PodRef {
                pod_uid: uid.into(),
                container_id: Some(CID.into()),
            })
        };
        let homes = HashMap::from([
            (10, home("uid-0")),
            (11, home("uid-0")),
            (20, home("uid-1")),
            (21, home("uid-1")),
            (30, ProcessHome::Host),
            (40, ProcessHome::Gone),
            (50, home("uid-9")),
        ]);
        let e = evaluate(NODE, &inv(), &procs, &homes, &pods, &batchjobs);
        assert_eq!(e.violations.len(), 1);
        let v = &e.violations[0];
        assert_eq!(
            (v.process.pid, v.process.gpu, v.pod.as_str()),
            (21, 0, "train-1")
        );
        assert_eq!(v.container.as_deref(), Some("task"));
        assert_eq!(
            v.message(Some("python")),
            format!(
                "process 21 (python) in container task uses GPU 0 ({}), 300 MiB; the pod was given GPUs 1 from BatchJob train node 1",
                uuid(0)
            )
        );
        let usage: Vec<_> = e
            .usage
            .iter()
            .map(|u| (u.pod.as_str(), u.gpu, u.memory_used_mib, u.assigned))
            .collect();
        assert_eq!(
            usage,
            vec![
                ("train-0", 0, 1500, true),
                ("train-1", 0, 300, false),
                ("train-1", 1, 2000, true)
            ]
        );
        assert_eq!(
            e.host_processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![30]
        );
        assert_eq!(e.unknown_pod.len(), 1);
    }

    #[test]
    fn static_pods_match_by_config_hash() {
        let hash = "6d2f9e8c1b3a4d5e6f708192a3b4c5d6";
        let mut p = pod("static", "mirror-uid", &[], Some("0"));
        p.metadata.annotations = Some([(CONFIG_HASH.to_string(), hash.to_string())].into());
        let procs = vec![GpuProcess {
            gpu: 1,
            pid: 5,
            used_memory_mib: Some(1),
        }];
        let homes = HashMap::from([(
            5,
            ProcessHome::Pod(PodRef {
                pod_uid: hash.into(),
                container_id: None,
            }),
        )]);
        let e = evaluate(NODE, &inv(), &procs, &homes, &[p], &HashMap::new());
        assert_eq!(e.violations.len(), 1);
        assert_eq!(e.violations[0].pod, "static");
    }
}

//! Building a job's task pods and its headless Service (pure: no client calls).
//!
//! One pod per task (rank), owned by the BatchJob (controller ownerReference, so deleting the
//! job deletes its pods). Placement is a *required node affinity* on `kubernetes.io/hostname`
//! — never `nodeName` — so kube-scheduler still binds the pod and quotas, admission and
//! scheduler plugins apply. GPUs are bound through the pod's ResourceClaim in `dra` mode (see
//! [`dra`]) or `NVIDIA_VISIBLE_DEVICES` in `env` mode; pods never request `nvidia.com/*`
//! resources, which would let the kubelet's device plugin pick other GPUs.
//!
//! # Environment
//! Every container (and init container) gets the binding variables below. They are set by the
//! operator and **cannot be overridden** by the template: any template `env` entry of the same
//! name is dropped (and `env` beats `envFrom` in Kubernetes), because ranks that disagree about
//! `WORLD_SIZE` or a container that sees other GPUs would break the gang or the binding.
//!
//! `SLURM_JOB_ID`/`SLURM_JOBID`, `SLURM_JOB_NAME`, `SLURM_JOB_NODELIST`/`SLURM_NODELIST`,
//! `SLURM_NNODES`/`SLURM_JOB_NUM_NODES`, `SLURM_NTASKS`/`SLURM_NPROCS`,
//! `SLURM_TASKS_PER_NODE`, `SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NODEID`,
//! `SLURMD_NODENAME`, `SLURM_JOB_PARTITION`, `SLURM_CPUS_PER_TASK` (when asked),
//! `SLURM_ARRAY_JOB_ID`/`SLURM_ARRAY_TASK_ID` (array elements), `SLURM_GPUS_PER_NODE` /
//! `SLURM_GPUS_PER_TASK` (echoing the request), `SLURM_GPUS_ON_NODE` and `SLURM_JOB_GPUS`
//! (the job's GPUs on this node: count and NVML indices, as Slurm sets them),
//! `MASTER_ADDR`, `WORLD_SIZE`, `RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `NODE_RANK`,
//! `NVIDIA_VISIBLE_DEVICES` and `CUDA_VISIBLE_DEVICES`.
//!
//! `MASTER_PORT` is the exception: it defaults to 29500 and may be changed by the BatchJob
//! annotation [`MASTER_PORT_ANNOTATION`] or by a `MASTER_PORT` entry in the first container's
//! template env (which is then kept as written).
//!
//! GPU binding (`env` mode): `NVIDIA_VISIBLE_DEVICES` is the task's GPU UUIDs, comma-joined,
//! or `void` for a task without GPUs — the NVIDIA container toolkit then behaves like plain
//! runc and exposes neither GPUs nor driver libraries (`none` would still mount the driver).
//! Setting it on every container matters: CUDA base images default to `all`. In `dra` mode a
//! pod with GPUs gets no `NVIDIA_VISIBLE_DEVICES` (every container references the pod's claim
//! and the DRA driver injects exactly its devices); a pod without GPUs still gets `void`, so
//! a CUDA image's `all` cannot reach GPUs where the toolkit honours the variable. `CUDA_VISIBLE_DEVICES` is
//! `0..n-1`, indices relative to the devices the container sees (what Slurm sets under
//! `ConstrainDevices`), and empty for a task without GPUs.
//!
//! `MASTER_ADDR` is rank 0's stable DNS name `<job>-0.<service>` (resolvable in the namespace
//! through the pod's DNS search path, so no cluster domain is assumed); a one-task job uses
//! `localhost`. Jobs with more than one task get the headless Service (ranks in different
//! pods cannot reach each other over `localhost`, even on one node).
//!
//! `SLURM_JOB_NODELIST` lists, in node order, the DNS name of each node's first task pod
//! (`train-0.train,train-1.train,…`), not the Kubernetes node names: inside a pod only pod
//! names are reachable, and scripts take the rendezvous host from it
//! (`scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1`), which must keep working.
//! The Kubernetes node is in `SLURMD_NODENAME`, and the job's status `nodeList` (what
//! `squeue` shows) keeps the node names.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Pod, ResourceRequirements, Service, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, GpuBinding, Partition, TaskAllocation};

use super::{dra, quantity};

/// BatchJob annotation overriding `MASTER_PORT` (default 29500).
pub const MASTER_PORT_ANNOTATION: &str = "muster.dev/master-port";
/// Pod annotation with the task's allocation (JSON of a `TaskAllocation`), so that a pod
/// whose BatchJob or attempt is gone still tells what it holds until it terminates.
pub const TASK_ANNOTATION: &str = "muster.dev/task";
/// The default rendezvous port (torchrun's).
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// Name of the container created when the template has none.
pub const TASK_CONTAINER: &str = "task";

/// Variables the operator owns on every container; template entries of these names are
/// dropped.
pub const BINDING_VARS: &[&str] = &[
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_NNODES",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_TASKS_PER_NODE",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURMD_NODENAME",
    "SLURM_JOB_PARTITION",
    "SLURM_CPUS_PER_TASK",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "MASTER_ADDR",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
];

/// Why a pod cannot be built from the job (reported on the job; the allocation is released).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Nothing to run.
    #[error(
        "spec.template has no containers and spec.script is empty: give a script or a container to run"
    )]
    NothingToRun,
    /// A container without an image and no default.
    #[error(
        "{container} has no image and partition {partition} has no defaultImage: set the container's image"
    )]
    NoImage {
        /// Which container.
        container: String,
        /// The partition.
        partition: String,
    },
    /// The job's name cannot label its pods.
    #[error(
        "metadata.name {name:?} is longer than 63 characters; it labels the task pods ({key}), so it must fit a label value"
    )]
    NameTooLong {
        /// The name.
        name: String,
        /// The label key.
        key: &'static str,
    },
    /// A rank without an allocation.
    #[error("rank {0} has no allocation in status.tasks")]
    NoSuchRank(u32),
    /// The pod cannot take the partition's job environment.
    #[error("partition {partition}: {source}")]
    JobEnv {
        /// The partition.
        partition: String,
        /// The conflict.
        source: super::jobenv::JobEnvError,
    },
    /// A pod's ResourceClaim cannot be built (`dra` mode).
    #[error(transparent)]
    Claim(#[from] dra::DraError),
}

/// Everything the pods of one admission are built from.
#[derive(Clone, Copy, Debug)]
pub struct JobContext<'a> {
    /// The BatchJob (template, name, namespace, uid, annotations).
    pub job: &'a BatchJob,
    /// Its Slurm job id.
    pub job_id: u64,
    /// The admission attempt (1 for the first).
    pub attempt: u32,
    /// Every task's allocation, by rank.
    pub tasks: &'a [TaskAllocation],
    /// The partition the job runs in (tolerations, runtime class, default image, grace time).
    pub partition: Option<&'a Partition>,
    /// The partition's name.
    pub partition_name: &'a str,
    /// `(array job id, index)` for an array element.
    pub array: Option<(u64, u32)>,
    /// `--gpus-per-node` as given (for `SLURM_GPUS_PER_NODE`).
    pub gpus_per_node: Option<&'a str>,
    /// `--gpus-per-task` as given (for `SLURM_GPUS_PER_TASK`).
    pub gpus_per_task: Option<&'a str>,
    /// How the pods get their GPUs (recorded with the allocation): `env` sets
    /// `NVIDIA_VISIBLE_DEVICES`; `dra` references the pod's ResourceClaim
    /// ([`dra::claim_name`]) instead.
    pub gpu_binding: GpuBinding,
}

/// Short stable hash for names that must be shortened.
fn short_hash(s: &str) -> String {
    let h = crate::core::util::fnv1a(crate::core::util::FNV_OFFSET, s.as_bytes());
    format!("{:05x}", h & 0xfffff)
}

/// `s` as a DNS-1123 label fragment: lowercase alphanumerics and `-` (`.` becomes `-`).
fn label_chars(s: &str) -> String {
    s.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() { c } else { '-' }
        })
        .collect()
}

/// `base` + `suffix` as a DNS label of at most 63 characters: `base` shortened with a hash
/// when needed, so distinct long names stay distinct.
pub(crate) fn fit_label(base: &str, suffix: &str) -> String {
    let b = label_chars(base);
    if b.len() + suffix.len() <= 63 {
        return format!("{b}{suffix}");
    }
    let keep = 63 - suffix.len() - 6;
    let head = b[..keep].trim_end_matches('-');
    format!("{head}-{}{suffix}", short_hash(base))
}

/// The name of a task pod: `<job>-<rank>` for the first attempt, `<job>-<rank>-a<attempt>`
/// after a requeue (old pods may still be terminating under the first name).
pub fn pod_name(job: &str, attempt: u32, rank: u32) -> String {
    if attempt <= 1 {
        format!("{job}-{rank}")
    } else {
        format!("{job}-{rank}-a{attempt}")
    }
}

/// The headless Service of a job: its name when that is a DNS-1035 label (starts with a
/// letter, at most 63 characters, no dots), else a sanitized, hashed form.
pub fn service_name(job: &str) -> String {
    let ok = job.len() <= 63
        && job.starts_with(|c: char| c.is_ascii_lowercase())
        && job
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        return job.to_string();
    }
    let mut s = label_chars(job);
    if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        s = format!("j{s}");
    }
    if s.len() <= 63 && s != job {
        // Sanitizing changed it: add the hash so that `a.b` and `a-b` stay distinct.
        return fit_label(&s, &format!("-{}", short_hash(job)));
    }
    fit_label(&s, "")
}

/// A task pod's hostname (DNS label): `<job>-<rank>`, shortened with a hash when too long.
pub fn hostname(job: &str, rank: u32) -> String {
    fit_label(job, &format!("-{rank}"))
}

/// `SLURM_TASKS_PER_NODE`: `2(x3),1` — task counts per node in node order, runs compressed.
pub fn tasks_per_node(counts: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let mut j = i;
        while j < counts.len() && counts[j] == counts[i] {
            j += 1;
        }
        if j - i > 1 {
            out.push(format!("{}(x{})", counts[i], j - i));
        } else {
            out.push(counts[i].to_string());
        }
        i = j;
    }
    out.join(",")
}

/// Node names in node-rank order (first occurrence of each node rank).
pub fn job_nodes(tasks: &[TaskAllocation]) -> Vec<String> {
    let mut by_rank: BTreeMap<u32, &str> = BTreeMap::new();
    for t in tasks {
        by_rank.entry(t.node_rank).or_insert(&t.node);
    }
    by_rank.into_values().map(str::to_string).collect()
}

/// The job's nodes as a Slurm hostlist (`gpu[001-004]`), in node-rank order.
pub fn node_list(tasks: &[TaskAllocation]) -> String {
    muster_crds::slurm::hostlist::compress(job_nodes(tasks))
}

/// The reachable name of each node's first task pod, in node-rank order: `<host>.<service>`
/// for jobs with a Service, the pod's own hostname for a one-task job.
pub fn rank_hosts(job: &str, tasks: &[TaskAllocation]) -> Vec<String> {
    let mut first: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    for t in tasks {
        let e = first.entry(t.node_rank).or_insert((t.local_rank, t.rank));
        if t.local_rank < e.0 {
            *e = (t.local_rank, t.rank);
        }
    }
    let svc = service_name(job);
    first
        .into_values()
        .map(|(_, rank)| {
            if tasks.len() > 1 {
                format!("{}.{svc}", hostname(job, rank))
            } else {
                hostname(job, rank)
            }
        })
        .collect()
}

/// The environment of one task, in the order it is set.
pub fn task_env(ctx: &JobContext<'_>, rank: u32) -> Result<Vec<(String, String)>, BuildError> {
    let task = ctx
        .tasks
        .iter()
        .find(|t| t.rank == rank)
        .ok_or(BuildError::NoSuchRank(rank))?;
    let job_name = ctx.job.job_name().to_string();
    let name = ctx.job.name_any();
    let nodes = job_nodes(ctx.tasks);
    let counts: Vec<u32> = (0..nodes.len() as u32)
        .map(|nr| ctx.tasks.iter().filter(|t| t.node_rank == nr).count() as u32)
        .collect();
    let on_node: Vec<&TaskAllocation> = ctx
        .tasks
        .iter()
        .filter(|t| t.node_rank == task.node_rank)
        .collect();
    let mut node_gpus: Vec<u32> = on_node
        .iter()
        .flat_map(|t| t.gpus.iter().copied())
        .collect();
    node_gpus.sort_unstable();
    // Tasks outnumbering the node's GPUs share them: each GPU once.
    node_gpus.dedup();
    let join = |v: &[u32]| {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let ntasks = ctx.tasks.len();
    let master = if ntasks > 1 {
        format!("{}.{}", hostname(&name, 0), service_name(&name))
    } else {
        "localhost".to_string()
    };
    let hl = muster_crds::slurm::hostlist::compress(rank_hosts(&name, ctx.tasks));
    let mut env: Vec<(String, String)> = vec![
        ("SLURM_JOB_ID".into(), ctx.job_id.to_string()),
        ("SLURM_JOBID".into(), ctx.job_id.to_string()),
        ("SLURM_JOB_NAME".into(), job_name),
        ("SLURM_JOB_NODELIST".into(), hl.clone()),
        ("SLURM_NODELIST".into(), hl),
        ("SLURM_NNODES".into(), nodes.len().to_string()),
        ("SLURM_JOB_NUM_NODES".into(), nodes.len().to_string()),
        ("SLURM_NTASKS".into(), ntasks.to_string()),
        ("SLURM_NPROCS".into(), ntasks.to_string()),
        ("SLURM_TASKS_PER_NODE".into(), tasks_per_node(&counts)),
        ("SLURM_PROCID".into(), rank.to_string()),
        ("SLURM_LOCALID".into(), task.local_rank.to_string()),
        ("SLURM_NODEID".into(), task.node_rank.to_string()),
        ("SLURMD_NODENAME".into(), task.node.clone()),
        ("SLURM_JOB_PARTITION".into(), ctx.partition_name.to_string()),
    ];
    if let Some(c) = ctx.job.spec.cpus_per_task {
        env.push(("SLURM_CPUS_PER_TASK".into(), c.to_string()));
    }
    if let Some((a, i)) = ctx.array {
        env.push(("SLURM_ARRAY_JOB_ID".into(), a.to_string()));
        env.push(("SLURM_ARRAY_TASK_ID".into(), i.to_string()));
    }
    if let Some(g) = ctx.gpus_per_node {
        env.push(("SLURM_GPUS_PER_NODE".into(), g.to_string()));
    }
    if let Some(g) = ctx.gpus_per_task {
        env.push(("SLURM_GPUS_PER_TASK".into(), g.to_string()));
    }
    if !node_gpus.is_empty() {
        env.push(("SLURM_GPUS_ON_NODE".into(), node_gpus.len().to_string()));
        env.push(("SLURM_JOB_GPUS".into(), join(&node_gpus)));
    }
    env.extend([
        ("MASTER_ADDR".into(), master),
        ("WORLD_SIZE".into(), ntasks.to_string()),
        ("RANK".into(), rank.to_string()),
        ("LOCAL_RANK".into(), task.local_rank.to_string()),
        ("LOCAL_WORLD_SIZE".into(), on_node.len().to_string()),
        ("NODE_RANK".into(), task.node_rank.to_string()),
    ]);
    let (nvidia, cuda) = if task.gpus.is_empty() {
        (Some("void".to_string()), String::new())
    } else {
        let uuids = if task.gpu_uuids.len() == task.gpus.len() {
            task.gpu_uuids.join(",")
        } else {
            // No UUIDs known (no GpuNode inventory): fall back to NVML indices.
            join(&task.gpus)
        };
        let cuda = (0..task.gpus.len())
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        // Under DRA the kubelet gives the container its claim's devices (the NVIDIA driver's
        // CDI spec sets the variable itself): nothing is set by hand.
        let nvidia = (ctx.gpu_binding == GpuBinding::Env).then_some(uuids);
        (nvidia, cuda)
    };
    if let Some(nvidia) = nvidia {
        env.push(("NVIDIA_VISIBLE_DEVICES".into(), nvidia));
    }
    env.push(("CUDA_VISIBLE_DEVICES".into(), cuda));
    Ok(env)
}

fn set_env(c: &mut Container, ours: &[(String, String)], master_port: Option<&str>) {
    let mut env: Vec<EnvVar> = c
        .env
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !BINDING_VARS.contains(&e.name.as_str()))
        .collect();
    let has_port = env.iter().any(|e| e.name == "MASTER_PORT");
    env.extend(ours.iter().map(|(k, v)| EnvVar {
        name: k.clone(),
        value: Some(v.clone()),
        value_from: None,
    }));
    if let Some(p) = master_port
        && !has_port
    {
        env.push(EnvVar {
            name: "MASTER_PORT".into(),
            value: Some(p.to_string()),
            value_from: None,
        });
    }
    c.env = Some(env);
}

fn strip_device_resources(r: &mut Option<ResourceRequirements>) {
    if let Some(r) = r {
        for m in [&mut r.requests, &mut r.limits].into_iter().flatten() {
            m.retain(|k, _| !k.starts_with("nvidia.com/"));
        }
    }
}

/// The owner reference every object of the job carries.
pub fn owner_ref(job: &BatchJob) -> OwnerReference {
    job.controller_owner_ref(&())
        .unwrap_or_else(|| OwnerReference {
            api_version: BatchJob::api_version(&()).to_string(),
            kind: BatchJob::kind(&()).to_string(),
            name: job.name_any(),
            uid: job.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        })
}

/// The labels every pod of the job carries.
pub fn pod_labels(ctx: &JobContext<'_>, rank: u32) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(labels::BATCHJOB.to_string(), ctx.job.name_any());
    l.insert(labels::JOB_ID.to_string(), ctx.job_id.to_string());
    l.insert(labels::RANK.to_string(), rank.to_string());
    l.insert(labels::ATTEMPT.to_string(), ctx.attempt.to_string());
    if let Some((_, i)) = ctx.array {
        if let Some(p) = ctx.job.labels().get(labels::ARRAY_PARENT) {
            l.insert(labels::ARRAY_PARENT.to_string(), p.clone());
        }
        l.insert(labels::ARRAY_TASK_ID.to_string(), i.to_string());
    }
    l
}

/// Checks that the job's name can label its pods.
pub fn check_name(job: &BatchJob) -> Result<(), BuildError> {
    let name = job.name_any();
    if name.len() > 63 {
        return Err(BuildError::NameTooLong {
            name,
            key: labels::BATCHJOB,
        });
    }
    Ok(())
}

/// Whether pods can be built for the job in this partition at all (name, something to run,
/// images), without building them: checked before a job is offered to the scheduler, so an
/// allocation is never made for a job whose pods cannot exist.
pub fn check_buildable(
    job: &BatchJob,
    partition: Option<&Partition>,
    partition_name: &str,
) -> Result<(), BuildError> {
    check_name(job)?;
    let has_default = partition.is_some_and(|p| p.spec.default_image.is_some());
    let spec = job.spec.template.as_ref().and_then(|t| t.spec.as_ref());
    let script = job
        .spec
        .script
        .as_deref()
        .is_some_and(|s| !s.trim().is_empty());
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    if containers.is_empty() && !script {
        return Err(BuildError::NothingToRun);
    }
    if !has_default && let Some(c) = container_without_image(job) {
        return Err(BuildError::NoImage {
            container: format!("container {c:?}"),
            partition: partition_name.to_string(),
        });
    }
    if let Some(p) = partition {
        // The template as a pod: what conflicts with the partition's environment here
        // conflicts in every pod built from it.
        let template = job.spec.template.clone().unwrap_or_default();
        let pod = Pod {
            metadata: template.metadata.unwrap_or_default(),
            spec: template.spec,
            status: None,
        };
        super::jobenv::apply(&p.spec, pod).map_err(|source| BuildError::JobEnv {
            partition: partition_name.to_string(),
            source,
        })?;
    }
    Ok(())
}

/// The first task container (or init container) that gives no image, which then needs the
/// partition's `defaultImage` ([`TASK_CONTAINER`] when the template has no containers).
pub fn container_without_image(job: &BatchJob) -> Option<String> {
    let spec = job.spec.template.as_ref().and_then(|t| t.spec.as_ref());
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    if containers.is_empty() {
        return Some(TASK_CONTAINER.to_string());
    }
    containers
        .iter()
        .chain(
            spec.and_then(|s| s.init_containers.as_ref())
                .into_iter()
                .flatten(),
        )
        .find(|c| c.image.as_deref().is_none_or(str::is_empty))
        .map(|c| c.name.clone())
}

/// The pod of task `rank`.
pub fn build_pod(ctx: &JobContext<'_>, rank: u32) -> Result<Pod, BuildError> {
    check_name(ctx.job)?;
    let task = ctx
        .tasks
        .iter()
        .find(|t| t.rank == rank)
        .ok_or(BuildError::NoSuchRank(rank))?
        .clone();
    let name = ctx.job.name_any();
    let template = ctx.job.spec.template.clone().unwrap_or_default();
    let mut meta = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let part_name = ctx.partition_name.to_string();
    let default_image = ctx.partition.and_then(|p| p.spec.default_image.clone());
    let script = ctx.job.spec.script.clone().filter(|s| !s.trim().is_empty());

    if spec.containers.is_empty() {
        let script = script.clone().ok_or(BuildError::NothingToRun)?;
        spec.containers.push(Container {
            name: TASK_CONTAINER.into(),
            command: Some(vec!["/bin/bash".into(), "-c".into(), script, "bash".into()]),
            ..Default::default()
        });
    } else if let Some(script) = &script {
        let c = &mut spec.containers[0];
        if c.command.as_ref().is_none_or(|v| v.is_empty()) {
            // The script runs in the first container; its template args become $1, $2, ...
            c.command = Some(vec![
                "/bin/bash".into(),
                "-c".into(),
                script.clone(),
                "bash".into(),
            ]);
        }
    }
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if c.image.as_deref().is_none_or(str::is_empty) {
            c.image = Some(default_image.clone().ok_or_else(|| BuildError::NoImage {
                container: format!("container {:?}", c.name),
                partition: part_name.clone(),
            })?);
        }
        strip_device_resources(&mut c.resources);
    }

    // Requests of the task container from the allocation; memory limited to what was
    // allocated (Slurm's ConstrainRAMSpace) unless the template sets a limit itself.
    {
        let c = &mut spec.containers[0];
        let r = c.resources.get_or_insert_with(Default::default);
        let req = r.requests.get_or_insert_with(Default::default);
        if task.cpu_millis > 0 {
            req.insert("cpu".into(), quantity::cpu_quantity(task.cpu_millis));
        }
        if task.memory_mib > 0 {
            req.insert("memory".into(), quantity::memory_quantity(task.memory_mib));
            let lim = r.limits.get_or_insert_with(Default::default);
            lim.entry("memory".into())
                .or_insert_with(|| quantity::memory_quantity(task.memory_mib));
        }
    }

    let env = task_env(ctx, rank)?;
    // MASTER_PORT: the task container's template value, else the annotation, else 29500;
    // every container gets the same unless it sets its own.
    let port = spec.containers[0]
        .env
        .as_ref()
        .and_then(|e| e.iter().find(|v| v.name == "MASTER_PORT"))
        .and_then(|v| v.value.clone())
        .or_else(|| ctx.job.annotations().get(MASTER_PORT_ANNOTATION).cloned())
        .unwrap_or_else(|| DEFAULT_MASTER_PORT.to_string());
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        set_env(c, &env, Some(&port));
    }

    // Placement: required affinity to the node, ANDed into every term the template gives.
    let req = NodeSelectorRequirement {
        key: labels::HOSTNAME.into(),
        operator: "In".into(),
        values: Some(vec![task.node.clone()]),
    };
    let aff = spec.affinity.get_or_insert_with(Affinity::default);
    let na = aff.node_affinity.get_or_insert_with(NodeAffinity::default);
    let sel = na
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(|| NodeSelector {
            node_selector_terms: Vec::new(),
        });
    if sel.node_selector_terms.is_empty() {
        sel.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for t in &mut sel.node_selector_terms {
        t.match_expressions
            .get_or_insert_with(Vec::new)
            .push(req.clone());
    }
    spec.node_name = None;

    if let Some(p) = ctx.partition {
        if !p.spec.tolerations.is_empty() {
            spec.tolerations
                .get_or_insert_with(Vec::new)
                .extend(p.spec.tolerations.iter().cloned());
        }
        if let Some(rc) = &p.spec.runtime_class_name {
            spec.runtime_class_name = Some(rc.clone());
        }
        if let Some(g) = p.spec.grace_time_seconds {
            spec.termination_grace_period_seconds = Some(i64::from(g));
        }
    }
    spec.restart_policy = Some("Never".into());
    spec.hostname = Some(hostname(&name, rank));
    if ctx.tasks.len() > 1 {
        spec.subdomain = Some(service_name(&name));
    } else {
        spec.subdomain = None;
    }
    if spec.enable_service_links.is_none() {
        // Service links put one variable per Service of the namespace into every pod: noise
        // for batch tasks, and slow with thousands of job Services.
        spec.enable_service_links = Some(false);
    }

    let pod_name = pod_name(&name, ctx.attempt, rank);
    let mut lbl = meta.labels.take().unwrap_or_default();
    lbl.extend(pod_labels(ctx, rank));
    let mut ann = meta.annotations.take().unwrap_or_default();
    let mut record = task.clone();
    record.pod = None;
    ann.insert(
        TASK_ANNOTATION.into(),
        serde_json::to_string(&record).unwrap_or_default(),
    );
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(pod_name.clone()),
            namespace: ctx.job.namespace(),
            labels: Some(lbl),
            annotations: Some(ann),
            owner_references: Some(vec![owner_ref(ctx.job)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    if let Some(p) = ctx.partition {
        pod = super::jobenv::apply(&p.spec, pod).map_err(|source| BuildError::JobEnv {
            partition: part_name.clone(),
            source,
        })?;
    }
    if ctx.gpu_binding == GpuBinding::Dra && !task.gpus.is_empty() {
        dra::attach_claim(&mut pod, &dra::claim_name(&pod_name));
    }
    Ok(pod)
}

/// The headless Service giving every rank a stable DNS name (`<job>-<rank>.<service>`), for
/// jobs with more than one task. Not-ready pods are published so that ranks resolve each
/// other while they start.
pub fn build_service(job: &BatchJob) -> Service {
    let name = job.name_any();
    Service {
        metadata: ObjectMeta {
            name: Some(service_name(&name)),
            namespace: job.namespace(),
            labels: Some([(labels::BATCHJOB.to_string(), name.clone())].into()),
            owner_references: Some(vec![owner_ref(job)]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some([(labels::BATCHJOB.to_string(), name)].into()),
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        status: None,
    }
}

/// The allocation a pod records in its [`TASK_ANNOTATION`].
pub fn pod_allocation(pod: &Pod) -> Option<TaskAllocation> {
    serde_json::from_str(pod.annotations().get(TASK_ANNOTATION)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use muster_crds::v1alpha1::{BatchJobSpec, PartitionSpec};

    fn spec_of(p: &Pod) -> &PodSpec {
        p.spec.as_ref().unwrap()
    }

    fn env_of(c: &Container) -> BTreeMap<String, String> {
        c.env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    fn job(name: &str, spec: BatchJobSpec) -> BatchJob {
        let mut j = BatchJob::new(name, spec);
        j.metadata.namespace = Some("ml".into());
        j.metadata.uid = Some("uid-1".into());
        j
    }

    /// 2 nodes x 2 tasks x 1 GPU.
    fn gang() -> Vec<TaskAllocation> {
        (0..4)
            .map(|r| TaskAllocation {
                rank: r,
                node: format!("gpu00{}", r / 2 + 1),
                node_rank: r / 2,
                local_rank: r % 2,
                cpu_millis: 4000,
                memory_mib: 8192,
                gpus: vec![r % 2 + 2],
                gpu_uuids: vec![format!("GPU-{r}")],
                pod: None,
            })
            .collect()
    }

    fn partition() -> Partition {
        Partition::new(
            "gpu",
            PartitionSpec {
                default_image: Some("nvcr.io/nvidia/pytorch:24.01-py3".into()),
                runtime_class_name: Some("nvidia".into()),
                grace_time_seconds: Some(45),
                tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                    key: Some("nvidia.com/gpu".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
    }

    fn ctx<'a>(
        j: &'a BatchJob,
        tasks: &'a [TaskAllocation],
        p: Option<&'a Partition>,
    ) -> JobContext<'a> {
        JobContext {
            job: j,
            job_id: 1234,
            attempt: 1,
            tasks,
            partition: p,
            partition_name: "gpu",
            array: None,
            gpus_per_node: None,
            gpus_per_task: Some("1"),
            gpu_binding: GpuBinding::Env,
        }
    }

    #[test]
    fn gang_pods_carry_rank_env_and_binding() {
        let j = job(
            "train",
            BatchJobSpec {
                script: Some("python train.py".into()),
                cpus_per_task: Some(4),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let c = ctx(&j, &tasks, Some(&p));
        let pod = build_pod(&c, 3).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("train-3"));
        let s = spec_of(&pod);
        let e = env_of(&s.containers[0]);
        assert_eq!(e["SLURM_JOB_ID"], "1234");
        assert_eq!(e["SLURM_JOB_NAME"], "train");
        // Reachable names of each node's first pod, rendezvous host first.
        assert_eq!(e["SLURM_JOB_NODELIST"], "train-0.train,train-2.train");
        assert_eq!(e["SLURM_NNODES"], "2");
        assert_eq!(e["SLURM_NTASKS"], "4");
        assert_eq!(e["SLURM_TASKS_PER_NODE"], "2(x2)");
        assert_eq!(e["SLURM_PROCID"], "3");
        assert_eq!(e["SLURM_LOCALID"], "1");
        assert_eq!(e["SLURM_NODEID"], "1");
        assert_eq!(e["SLURMD_NODENAME"], "gpu002");
        assert_eq!(e["SLURM_CPUS_PER_TASK"], "4");
        assert_eq!(e["SLURM_GPUS_PER_TASK"], "1");
        assert_eq!(e["SLURM_GPUS_ON_NODE"], "2");
        assert_eq!(e["SLURM_JOB_GPUS"], "2,3");
        assert_eq!(e["SLURM_JOB_PARTITION"], "gpu");
        assert_eq!(e["MASTER_ADDR"], "train-0.train");
        assert_eq!(e["MASTER_PORT"], "29500");
        assert_eq!(e["WORLD_SIZE"], "4");
        assert_eq!(e["RANK"], "3");
        assert_eq!(e["LOCAL_RANK"], "1");
        assert_eq!(e["LOCAL_WORLD_SIZE"], "2");
        assert_eq!(e["NODE_RANK"], "1");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "GPU-3");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0");
        assert!(!e.contains_key("SLURM_ARRAY_TASK_ID"));
        // DNS for ranks.
        assert_eq!(s.hostname.as_deref(), Some("train-3"));
        assert_eq!(s.subdomain.as_deref(), Some("train"));
        // Default container runs the script with the partition's image.
        assert_eq!(s.containers[0].name, TASK_CONTAINER);
        assert_eq!(
            s.containers[0].image.as_deref(),
            Some("nvcr.io/nvidia/pytorch:24.01-py3")
        );
        assert_eq!(
            s.containers[0].command.as_ref().unwrap()[..3],
            ["/bin/bash", "-c", "python train.py"]
        );
    }

    #[test]
    fn placement_is_required_affinity_never_node_name() {
        let tmpl = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                node_name: Some("elsewhere".into()),
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("busybox".into()),
                    command: Some(vec!["sleep".into(), "1".into()]),
                    resources: Some(ResourceRequirements {
                        limits: Some([("nvidia.com/gpu".to_string(), Quantity("8".into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let j = job(
            "train",
            BatchJobSpec {
                template: Some(tmpl),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let pod = build_pod(&ctx(&j, &tasks, Some(&p)), 2).unwrap();
        let s = spec_of(&pod);
        assert_eq!(s.node_name, None);
        let terms = &s
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        let m = &terms[0].match_expressions.as_ref().unwrap()[0];
        assert_eq!(m.key, "kubernetes.io/hostname");
        assert_eq!(m.values.as_deref(), Some(&["gpu002".to_string()][..]));
        let r = s.containers[0].resources.as_ref().unwrap();
        assert!(
            r.limits
                .as_ref()
                .unwrap()
                .keys()
                .all(|k| !k.starts_with("nvidia.com/"))
        );
        assert_eq!(r.requests.as_ref().unwrap()["cpu"].0, "4");
        assert_eq!(r.requests.as_ref().unwrap()["memory"].0, "8192Mi");
        assert_eq!(r.limits.as_ref().unwrap()["memory"].0, "8192Mi");
        assert_eq!(s.runtime_class_name.as_deref(), Some("nvidia"));
        assert_eq!(s.termination_grace_period_seconds, Some(45));
        assert_eq!(s.restart_policy.as_deref(), Some("Never"));
        assert_eq!(s.tolerations.as_ref().unwrap().len(), 1);
        // The user's own command is kept (no script given).
        assert_eq!(s.containers[0].command.as_ref().unwrap()[0], "sleep");
        // Ownership and labels.
        let o = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(o.kind, "BatchJob");
        assert_eq!(o.uid, "uid-1");
        assert_eq!(o.controller, Some(true));
        let l = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(l[labels::BATCHJOB], "train");
        assert_eq!(l[labels::JOB_ID], "1234");
        assert_eq!(l[labels::RANK], "2");
        assert_eq!(l[labels::ATTEMPT], "1");
        let rec = pod_allocation(&pod).unwrap();
        assert_eq!(rec.node, "gpu002");
        assert_eq!(rec.gpus, vec![2]);
    }

    #[test]
    fn template_cannot_override_binding_vars_but_may_set_master_port() {
        let mut tmpl = PodTemplateSpec::default();
        let env = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| EnvVar {
                        name: k.to_string(),
                        value: Some(v.to_string()),
                        value_from: None,
                    })
                    .collect::<Vec<_>>(),
            )
        };
        tmpl.spec = Some(PodSpec {
            containers: vec![
                Container {
                    name: "main".into(),
                    image: Some("img".into()),
                    env: env(&[
                        ("NVIDIA_VISIBLE_DEVICES", "all"),
                        ("RANK", "99"),
                        ("MASTER_PORT", "1234"),
                        ("MY_VAR", "x"),
                    ]),
                    ..Default::default()
                },
                Container {
                    name: "sidecar".into(),
                    image: Some("side".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let mut j = job(
            "train",
            BatchJobSpec {
                template: Some(tmpl),
                script: Some("echo hi".into()),
                ..Default::default()
            },
        );
        j.metadata.annotations = Some([(MASTER_PORT_ANNOTATION.to_string(), "5555".into())].into());
        let tasks = gang();
        let pod = build_pod(&ctx(&j, &tasks, None), 0).unwrap();
        let s = spec_of(&pod);
        let main = env_of(&s.containers[0]);
        assert_eq!(main["NVIDIA_VISIBLE_DEVICES"], "GPU-0");
        assert_eq!(main["RANK"], "0");
        assert_eq!(
            main["MASTER_PORT"], "1234",
            "template env wins over the annotation"
        );
        assert_eq!(main["MY_VAR"], "x");
        let names: Vec<&str> = s.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(names.iter().filter(|n| **n == "RANK").count(), 1);
        // The sidecar sees the same GPU binding (a CUDA image would default to all).
        let side = env_of(&s.containers[1]);
        assert_eq!(side["NVIDIA_VISIBLE_DEVICES"], "GPU-0");
        assert_eq!(side["MASTER_PORT"], "1234");
        // The script runs in the first container since it has no command.
        assert_eq!(s.containers[0].command.as_ref().unwrap()[2], "echo hi");
        assert!(s.containers[1].command.is_none());
    }

    #[test]
    fn annotation_sets_master_port_and_single_task_uses_localhost() {
        let mut j = job(
            "solo",
            BatchJobSpec {
                script: Some("true".into()),
                ..Default::default()
            },
        );
        j.metadata.annotations = Some([(MASTER_PORT_ANNOTATION.to_string(), "5555".into())].into());
        let tasks = vec![TaskAllocation {
            node: "n1".into(),
            ..Default::default()
        }];
        let p = partition();
        let pod = build_pod(&ctx(&j, &tasks, Some(&p)), 0).unwrap();
        let s = spec_of(&pod);
        let e = env_of(&s.containers[0]);
        assert_eq!(e["MASTER_PORT"], "5555");
        assert_eq!(e["MASTER_ADDR"], "localhost");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "void");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "");
        assert!(!e.contains_key("SLURM_GPUS_ON_NODE"));
        assert_eq!(s.subdomain, None);
        // No cpu/memory allocation: no requests invented.
        let r = s.containers[0].resources.as_ref().unwrap();
        assert!(r.requests.as_ref().unwrap().is_empty());
    }

    #[test]
    fn arrays_and_attempts_show_in_names_env_and_labels() {
        let mut j = job(
            "sweep-3",
            BatchJobSpec {
                script: Some("true".into()),
                ..Default::default()
            },
        );
        j.metadata.labels = Some([(labels::ARRAY_PARENT.to_string(), "sweep".into())].into());
        let tasks = vec![TaskAllocation {
            node: "n1".into(),
            gpus: vec![5, 6],
            gpu_uuids: vec!["GPU-a".into(), "GPU-b".into()],
            ..Default::default()
        }];
        let p = partition();
        let mut c = ctx(&j, &tasks, Some(&p));
        c.array = Some((100, 3));
        c.attempt = 2;
        let pod = build_pod(&c, 0).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("sweep-3-0-a2"));
        let e = env_of(&spec_of(&pod).containers[0]);
        assert_eq!(e["SLURM_ARRAY_JOB_ID"], "100");
        assert_eq!(e["SLURM_ARRAY_TASK_ID"], "3");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "GPU-a,GPU-b");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1");
        let l = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(l[labels::ATTEMPT], "2");
        assert_eq!(l[labels::ARRAY_PARENT], "sweep");
        assert_eq!(l[labels::ARRAY_TASK_ID], "3");
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let j = job("empty", BatchJobSpec::default());
        let tasks = gang();
        assert_eq!(
            build_pod(&ctx(&j, &tasks, None), 0).unwrap_err(),
            BuildError::NothingToRun
        );
        let j = job(
            "noimg",
            BatchJobSpec {
                script: Some("x".into()),
                ..Default::default()
            },
        );
        let e = build_pod(&ctx(&j, &tasks, None), 0).unwrap_err();
        assert!(e.to_string().contains("defaultImage"), "{e}");
        let p = partition();
        assert_eq!(
            build_pod(&ctx(&j, &tasks, Some(&p)), 9).unwrap_err(),
            BuildError::NoSuchRank(9)
        );
        let long = job(&"x".repeat(70), BatchJobSpec::default());
        assert!(matches!(
            build_pod(&ctx(&long, &tasks, Some(&p)), 0).unwrap_err(),
            BuildError::NameTooLong { .. }
        ));
    }

    #[test]
    fn buildability_is_checked_without_building() {
        let p = partition();
        let ok = job(
            "a",
            BatchJobSpec {
                script: Some("x".into()),
                ..Default::default()
            },
        );
        assert_eq!(check_buildable(&ok, Some(&p), "gpu"), Ok(()));
        assert!(matches!(
            check_buildable(&ok, None, "gpu"),
            Err(BuildError::NoImage { .. })
        ));
        let empty = job("b", BatchJobSpec::default());
        assert_eq!(
            check_buildable(&empty, Some(&p), "gpu"),
            Err(BuildError::NothingToRun)
        );
        let tmpl = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("img".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let own = job(
            "c",
            BatchJobSpec {
                template: Some(tmpl),
                ..Default::default()
            },
        );
        assert_eq!(check_buildable(&own, None, "gpu"), Ok(()));
    }

    #[test]
    fn names_fit_dns_rules() {
        assert_eq!(service_name("train"), "train");
        let s = service_name("7b.run");
        assert!(s.starts_with("j7b-run-"), "{s}");
        assert_ne!(service_name("a.b"), service_name("a-b"));
        let long = "a".repeat(63);
        assert_eq!(service_name(&long), long);
        let h = hostname(&long, 31);
        assert!(h.len() <= 63 && h.ends_with("-31"), "{h}");
        assert_ne!(
            hostname(&format!("{long}x"), 1),
            hostname(&format!("{long}y"), 1)
        );
        assert_eq!(hostname("train", 0), "train-0");
        assert_eq!(pod_name("train", 1, 7), "train-7");
        assert_eq!(pod_name("train", 3, 7), "train-7-a3");
    }

    #[test]
    fn node_lists_expand_to_reachable_rank_hosts() {
        let tasks = gang();
        let hl = muster_crds::slurm::hostlist::compress(rank_hosts("run2", &tasks));
        let hosts = muster_crds::slurm::hostlist::expand(&hl).unwrap();
        assert_eq!(hosts, ["run2-0.run2", "run2-2.run2"]);
        assert_eq!(node_list(&tasks), "gpu[001-002]");
        let solo = vec![TaskAllocation::default()];
        assert_eq!(rank_hosts("x", &solo), ["x-0"]);
    }

    #[test]
    fn tasks_per_node_compresses_runs() {
        assert_eq!(tasks_per_node(&[2, 2, 2, 1]), "2(x3),1");
        assert_eq!(tasks_per_node(&[1]), "1");
        assert_eq!(tasks_per_node(&[1, 2, 1]), "1,2,1");
        assert_eq!(tasks_per_node(&[]), "");
    }

    #[test]
    fn service_is_headless_and_publishes_not_ready() {
        let j = job("train", BatchJobSpec::default());
        let s = build_service(&j);
        let sp = s.spec.unwrap();
        assert_eq!(sp.cluster_ip.as_deref(), Some("None"));
        assert_eq!(sp.publish_not_ready_addresses, Some(true));
        assert_eq!(sp.selector.unwrap()[labels::BATCHJOB], "train");
        assert_eq!(s.metadata.owner_references.unwrap()[0].name, "train");
    }
}

//! Pure translation between the `muster.dev` objects (and core/v1 Nodes) and the scheduling
//! core's types. No client calls: everything here is a function of its arguments, so it is
//! unit-tested without a server.
//!
//! - [`job_request`]: **the** translation of a BatchJob spec into the core's request — the
//!   operator, the simulator's native traces and `sbatch --test-only` all call it; every Slurm
//!   field is parsed once with [`muster_crds::slurm`] and errors name the field and what is
//!   allowed.
//! - [`partitions`]: the Partition objects as core partitions, with the default resolved.
//! - [`node`]: a Node and its GpuNode as a core node; [`node_dra`] with the GPUs the NVIDIA
//!   DRA driver publishes for it (see [`dra::inventory`](super::dra::inventory)).
//! - [`running_job`], [`pending_job`]: a BatchJob's status/spec as core jobs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::compact::{StrTable, StrTableBuilder};

use k8s_openapi::api::core::v1::Node as KubeNode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as KubeSelector, Time as KubeTime,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use muster_crds::slurm::{
    ArraySpec, Constraint, DependencySpec, GpuBind, GpuCount, MemSize, NodeRange, Switches,
    SyntaxError, TimeLimit, gpus_from_gres, hostlist, parse_gres,
};
use muster_crds::v1alpha1::{
    BatchJob, BatchJobSpec, BatchJobStatus, Exclusive, GpuHealthState, GpuNode, Partition,
};

use crate::core::{
    self, ArrayTask, JobId, JobRequest, LabelSelector, Link, MemoryRequest, NodeId, PartitionId,
    PendingJob, RunningJob, SelectorOperator, SelectorRequirement, Taint, TaintEffect, TaskAlloc,
    Toleration,
};

use super::quantity;

/// A spec field that does not parse or contradicts another.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field's path, e.g. `spec.gpusPerTask`.
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl FieldError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }

    fn syntax(field: &str, e: SyntaxError) -> Self {
        FieldError::new(field, e.to_string())
    }
}

/// Every error of a spec, joined for a status message.
pub fn join_errors(errs: &[FieldError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A BatchJob spec translated for the scheduling core: [`job_request`]'s result.
///
/// Everything a spec field asks of the scheduler is in here — in `request` when the core
/// places by it — so no caller reads a spec field of its own accord.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedJob {
    /// What the core schedules: shape, GPUs and their type, memory, time, constraint,
    /// switches, GPU binding, nodelist, exclude, exclusivity.
    pub request: JobRequest,
    /// `--partition` (`None`: the default partition).
    pub partition: Option<String>,
    /// `--time` as given (`None`: the partition's default).
    pub time: Option<TimeLimit>,
    /// `--array`.
    pub array: Option<ArraySpec>,
    /// `--dependency`.
    pub dependency: Option<DependencySpec>,
    /// `--hold`.
    pub hold: bool,
    /// `--nice`.
    pub nice: i32,
    /// `--priority`.
    pub priority: Option<u32>,
    /// `--requeue` (default) / `--no-requeue`.
    pub requeue: bool,
    /// `spec.cancel` (set by `scancel`): the job is to stop, or never start.
    pub cancel: bool,
    /// `--gpus-per-node` (or the gres count) as given, echoed as `SLURM_GPUS_PER_NODE`.
    pub gpus_per_node_echo: Option<String>,
    /// `--gpus-per-task` as given, echoed as `SLURM_GPUS_PER_TASK`.
    pub gpus_per_task_echo: Option<String>,
}

fn int_or_string(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

fn parse_ios<T>(
    field: &str,
    v: &Option<IntOrString>,
    from_int: impl Fn(i64) -> Result<T, SyntaxError>,
    parse: impl Fn(&str) -> Result<T, SyntaxError>,
    errs: &mut Vec<FieldError>,
) -> Option<T> {
    let r = match v.as_ref()? {
        IntOrString::Int(i) => from_int(i64::from(*i)),
        IntOrString::String(s) => parse(s),
    };
    r.map_err(|e| errs.push(FieldError::syntax(field, e))).ok()
}

fn parse_str<T>(
    field: &str,
    v: &Option<String>,
    parse: impl Fn(&str) -> Result<T, SyntaxError>,
    errs: &mut Vec<FieldError>,
) -> Option<T> {
    parse(v.as_deref()?)
        .map_err(|e| errs.push(FieldError::syntax(field, e)))
        .ok()
}

/// A hostlist field (`nodelist`, `exclude`) as Node names, without repeats, in its order.
fn node_names(field: &str, v: &Option<String>, errs: &mut Vec<FieldError>) -> Vec<String> {
    let Some(text) = v.as_deref() else {
        return Vec::new();
    };
    if text.contains('/') {
        errs.push(FieldError::new(
            field,
            format!(
                "{text:?} looks like a file: sbatch reads a file of node names (-w FILE, -x FILE); a BatchJob lists the names as a hostlist, e.g. gpu[001-004]"
            ),
        ));
        return Vec::new();
    }
    let names = match hostlist::expand(text) {
        Ok(n) => n,
        Err(e) => {
            errs.push(FieldError::syntax(field, e));
            return Vec::new();
        }
    };
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        if !is_node_name(&n) {
            errs.push(FieldError::new(
                field,
                format!(
                    "{n:?} is not a Node name (lower-case letters, digits, '-' and '.', at most 253 characters)"
                ),
            ));
            return Vec::new();
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Whether `s` can name a Kubernetes Node (a DNS-1123 subdomain).
fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The one translation of a BatchJob spec into what the scheduling core schedules
/// ([`ParsedJob::request`]) and the rest of what the job asks for. The operator, the
/// simulator's native traces and `sbatch --test-only` all call this, so a field takes
/// effect the same way everywhere; the partition's defaults (time, CPUs and memory per GPU)
/// are applied by the core against the job's partition ([`ParsedJob::partition`]).
///
/// Every error is returned, each naming its field (`spec.gpusPerTask`) and what is allowed.
pub fn job_request(spec: &BatchJobSpec) -> Result<ParsedJob, Vec<FieldError>> {
    let mut errs = Vec::new();
    let mut req = JobRequest::default();

    if let Some(n) = parse_ios(
        "spec.nodes",
        &spec.nodes,
        NodeRange::from_int,
        NodeRange::parse,
        &mut errs,
    ) {
        req.min_nodes = Some(n.min);
        req.max_nodes = Some(n.max);
    }
    req.ntasks = spec.ntasks;
    req.ntasks_per_node = spec.ntasks_per_node;
    req.cpus_per_task = spec.cpus_per_task;
    for (field, v) in [
        ("spec.ntasks", spec.ntasks),
        ("spec.ntasksPerNode", spec.ntasks_per_node),
        ("spec.cpusPerTask", spec.cpus_per_task),
    ] {
        if v == Some(0) {
            errs.push(FieldError::new(field, "must be at least 1"));
        }
    }

    // Memory: at most one form.
    let mems = [
        ("spec.mem", &spec.mem),
        ("spec.memPerCpu", &spec.mem_per_cpu),
        ("spec.memPerGpu", &spec.mem_per_gpu),
    ];
    let given: Vec<&str> = mems
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(f, _)| *f)
        .collect();
    if given.len() > 1 {
        errs.push(FieldError::new(
            given[1],
            format!(
                "{} are mutually exclusive (as sbatch's --mem, --mem-per-cpu and --mem-per-gpu): give one",
                given.join(" and ")
            ),
        ));
    } else {
        if let Some(m) = parse_str("spec.mem", &spec.mem, MemSize::parse, &mut errs) {
            req.memory = Some(if m.is_zero() {
                MemoryRequest::WholeNode
            } else {
                MemoryRequest::PerNode(m.mib())
            });
        }
        if let Some(m) = parse_str(
            "spec.memPerCpu",
            &spec.mem_per_cpu,
            MemSize::parse,
            &mut errs,
        ) {
            req.memory = Some(MemoryRequest::PerCpu(m.mib()));
        }
        if let Some(m) = parse_str(
            "spec.memPerGpu",
            &spec.mem_per_gpu,
            MemSize::parse,
            &mut errs,
        ) {
            req.memory = Some(MemoryRequest::PerGpu(m.mib()));
        }
    }
    if req
        .memory
        .is_some_and(|m| matches!(m, MemoryRequest::PerGpu(_)))
        && spec.gpus.is_none()
        && spec.gpus_per_node.is_none()
        && spec.gpus_per_task.is_none()
        && spec.gres.is_none()
    {
        errs.push(FieldError::new(
            "spec.memPerGpu",
            "needs a GPU request (gpus, gpusPerNode, gpusPerTask or gres)",
        ));
    }

    // GPUs and their type.
    let mut types: Vec<(&str, String)> = Vec::new();
    if let Some(t) = &spec.gpu_type {
        types.push(("spec.gpuType", t.clone()));
    }
    let mut gpu_count = |field: &'static str, v: &Option<IntOrString>, errs: &mut Vec<_>| {
        let c: Option<GpuCount> = parse_ios(field, v, GpuCount::from_int, GpuCount::parse, errs);
        if let Some(c) = &c {
            if let Some(t) = &c.gpu_type {
                types.push((field, t.clone()));
            }
            if c.count == 0 {
                errs.push(FieldError::new(field, "GPU count must be at least 1"));
            }
        }
        c.map(|c| c.count)
    };
    req.gpus = gpu_count("spec.gpus", &spec.gpus, &mut errs);
    req.gpus_per_node = gpu_count("spec.gpusPerNode", &spec.gpus_per_node, &mut errs);
    req.gpus_per_task = gpu_count("spec.gpusPerTask", &spec.gpus_per_task, &mut errs);
    let mut gpus_per_node_echo = spec.gpus_per_node.as_ref().map(int_or_string);
    if let Some(g) = &spec.gres {
        match parse_gres(g).and_then(|items| gpus_from_gres(&items)) {
            Ok(Some(c)) => {
                if req.gpus_per_node.is_some() {
                    errs.push(FieldError::new(
                        "spec.gres",
                        "gres and gpusPerNode both set GPUs per node: give one of them",
                    ));
                } else {
                    req.gpus_per_node = Some(c.count);
                    gpus_per_node_echo = Some(match &c.gpu_type {
                        Some(t) => format!("{t}:{}", c.count),
                        None => c.count.to_string(),
                    });
                }
                if let Some(t) = c.gpu_type {
                    types.push(("spec.gres", t));
                }
            }
            Ok(None) => {}
            Err(e) => errs.push(FieldError::syntax("spec.gres", e)),
        }
    }
    if let Some((f0, t0)) = types.first() {
        if let Some((f1, t1)) = types.iter().find(|(_, t)| !t.eq_ignore_ascii_case(t0)) {
            errs.push(FieldError::new(
                *f1,
                format!("GPU type {t1:?} contradicts {t0:?} from {f0}: give the type once"),
            ));
        }
        req.gpu_type = Some(t0.clone());
    }
    if req.gpus_per_task.is_some() && req.ntasks.is_none() && req.ntasks_per_node.is_none() {
        errs.push(FieldError::new(
            "spec.gpusPerTask",
            "needs a task count: set ntasks or ntasksPerNode (as sbatch's --gpus-per-task needs -n)",
        ));
    }

    match spec.exclusive.unwrap_or_default() {
        Exclusive::Shared => {}
        Exclusive::Node => req.exclusive = true,
        Exclusive::User => req.exclusive_user = true,
    }
    req.nodelist = node_names("spec.nodelist", &spec.nodelist, &mut errs);
    req.exclude = node_names("spec.exclude", &spec.exclude, &mut errs);
    if let Some(n) = req.nodelist.iter().find(|n| req.exclude.contains(n)) {
        errs.push(FieldError::new(
            "spec.exclude",
            format!("{n} is in both nodelist and exclude: a node cannot be required and refused"),
        ));
    }
    let time = parse_ios(
        "spec.time",
        &spec.time,
        TimeLimit::from_int,
        TimeLimit::parse,
        &mut errs,
    );
    req.time_limit = time;

    let array = parse_ios(
        "spec.array",
        &spec.array,
        ArraySpec::from_int,
        ArraySpec::parse,
        &mut errs,
    );
    let dependency = parse_str(
        "spec.dependency",
        &spec.dependency,
        DependencySpec::parse,
        &mut errs,
    );
    req.constraint = parse_str(
        "spec.constraint",
        &spec.constraint,
        Constraint::parse,
        &mut errs,
    );
    req.switches = parse_ios(
        "spec.switches",
        &spec.switches,
        Switches::from_int,
        Switches::parse,
        &mut errs,
    );
    req.gpu_bind = parse_str("spec.gpuBind", &spec.gpu_bind, GpuBind::parse, &mut errs);
    // Read by the step runtime (the warning before the time limit); checked here once.
    parse_str(
        "spec.signal",
        &spec.signal,
        muster_crds::slurm::WarnSignal::parse,
        &mut errs,
    );

    if errs.is_empty() {
        Ok(ParsedJob {
            request: req,
            partition: spec.partition.clone(),
            time,
            array,
            dependency,
            hold: spec.hold.unwrap_or(false),
            nice: spec.nice.unwrap_or(0),
            priority: spec.priority,
            requeue: spec.requeue.unwrap_or(true),
            cancel: spec.cancel.unwrap_or(false),
            gpus_per_node_echo,
            gpus_per_task_echo: spec.gpus_per_task.as_ref().map(int_or_string),
        })
    } else {
        Err(errs)
    }
}

/// The submitting user of a BatchJob, as the operator knows it: the `muster.dev/user`
/// annotation (`sbatch` sets it). `None` when absent or empty.
pub fn job_user(job: &BatchJob) -> Option<String> {
    job.annotations()
        .get(muster_crds::labels::USER)
        .filter(|u| !u.is_empty())
        .cloned()
}

/// The Partition objects as the core sees them.
#[derive(Clone, Debug, Default)]
pub struct PartitionTable {
    /// Core partitions; [`PartitionId`] indexes this list (sorted by name).
    pub parts: Vec<core::Partition>,
    /// Index by name.
    pub by_name: HashMap<String, PartitionId>,
    /// The default partition: the one with `default: true` (the first by name when several
    /// claim it).
    pub default: Option<PartitionId>,
    /// Names of every partition claiming `default: true`, when more than one does.
    pub default_conflict: Vec<String>,
    /// Partitions left out because a field does not parse (CEL normally refuses these).
    pub invalid: BTreeMap<String, Vec<FieldError>>,
}

impl PartitionTable {
    /// The partition a job runs in: its `spec.partition`, else the default. `Err` carries the
    /// name that does not resolve (empty when there is no default).
    pub fn resolve(&self, name: Option<&str>) -> Result<PartitionId, String> {
        match name {
            Some(n) => self.by_name.get(n).copied().ok_or_else(|| n.to_string()),
            None => self.default.ok_or_else(String::new),
        }
    }

    /// The partition's name.
    pub fn name(&self, id: PartitionId) -> &str {
        self.parts
            .get(id as usize)
            .map(|p| p.name.as_str())
            .unwrap_or("")
    }
}

fn time_limit(
    field: &str,
    v: &Option<IntOrString>,
    errs: &mut Vec<FieldError>,
) -> Option<TimeLimit> {
    parse_ios(field, v, TimeLimit::from_int, TimeLimit::parse, errs)
}

/// A Kubernetes label selector as the core's.
pub fn selector(s: &KubeSelector, field: &str) -> Result<LabelSelector, FieldError> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let operator = match e.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            o => {
                return Err(FieldError::new(
                    format!("{field}.matchExpressions[{i}].operator"),
                    format!(
                        "{o:?} is not a selector operator: use In, NotIn, Exists or DoesNotExist"
                    ),
                ));
            }
        };
        out.match_expressions.push(SelectorRequirement {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

/// A Kubernetes toleration as the core's.
pub fn toleration(
    t: &k8s_openapi::api::core::v1::Toleration,
    field: &str,
) -> Result<Toleration, FieldError> {
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(
            e.parse::<TaintEffect>()
                .map_err(|m| FieldError::new(format!("{field}.effect"), m))?,
        ),
    };
    let exists = match t.operator.as_deref() {
        None | Some("Equal") => false,
        Some("Exists") => true,
        Some(o) => {
            return Err(FieldError::new(
                format!("{field}.operator"),
                format!("{o:?} is not a toleration operator: use Equal or Exists"),
            ));
        }
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        exists,
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

/// One Partition as the core's.
pub fn partition(p: &Partition) -> Result<core::Partition, Vec<FieldError>> {
    let s = &p.spec;
    let mut errs = Vec::new();
    let sel = match &s.node_selector {
        Some(ls) => selector(ls, "spec.nodeSelector")
            .map_err(|e| errs.push(e))
            .unwrap_or_default(),
        None => LabelSelector::default(),
    };
    let tolerations = s
        .tolerations
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            toleration(t, &format!("spec.tolerations[{i}]"))
                .map_err(|e| errs.push(e))
                .ok()
        })
        .collect();
    let default_time = time_limit("spec.defaultTime", &s.default_time, &mut errs);
    let max_time = time_limit("spec.maxTime", &s.max_time, &mut errs);
    let def_mem = parse_str(
        "spec.defMemPerGpu",
        &s.def_mem_per_gpu,
        MemSize::parse,
        &mut errs,
    );
    let node_resources = node_resources(s)
        .map_err(|e| errs.push(e))
        .unwrap_or_default();
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(core::Partition {
        name: p.name_any(),
        selector: sel,
        topology: s.topology.clone(),
        state: p.state(),
        default_time,
        max_time,
        min_nodes: s.min_nodes,
        max_nodes: s.max_nodes,
        priority_tier: s.priority_tier.unwrap_or(0),
        preempt_mode: s.preempt_mode.unwrap_or_default(),
        allowed_namespaces: s.allowed_namespaces.clone(),
        tolerations,
        def_cpu_per_gpu: s.def_cpu_per_gpu,
        def_mem_per_gpu_mib: def_mem.map(|m| m.mib()),
        grace_time_secs: u64::from(s.grace_time_seconds.unwrap_or(0)),
        default_image: s.default_image.clone(),
        node_resources,
    })
}

/// `spec.jobEnvironment.resources` as the core's per-node-pod counts (extended resources are
/// whole numbers).
pub fn node_resources(
    s: &muster_crds::v1alpha1::PartitionSpec,
) -> Result<BTreeMap<String, u64>, FieldError> {
    let mut out = BTreeMap::new();
    for (k, q) in s.job_environment.iter().flat_map(|e| e.resources.iter()) {
        let field = format!("spec.jobEnvironment.resources[{k}]");
        let n = quantity::count(q).map_err(|e| FieldError {
            field: field.clone(),
            message: e.to_string(),
        })?;
        if n == 0 {
            continue;
        }
        out.insert(k.clone(), n);
    }
    Ok(out)
}

/// Every Partition, sorted by name, with the default resolved.
pub fn partitions<'a>(list: impl IntoIterator<Item = &'a Partition>) -> PartitionTable {
    let mut all: Vec<&Partition> = list.into_iter().collect();
    all.sort_by_key(|p| p.name_any());
    let mut t = PartitionTable::default();
    let mut defaults = Vec::new();
    for p in all {
        match partition(p) {
            Ok(cp) => {
                let id = t.parts.len() as PartitionId;
                if p.spec.default == Some(true) {
                    defaults.push(id);
                }
                t.by_name.insert(cp.name.clone(), id);
                t.parts.push(cp);
            }
            Err(e) => {
                t.invalid.insert(p.name_any(), e);
            }
        }
    }
    t.default = defaults.first().copied();
    if defaults.len() > 1 {
        t.default_conflict = defaults
            .iter()
            .map(|&d| t.parts[d as usize].name.clone())
            .collect();
    }
    t
}

/// Whether a node belongs to a partition: its selector matches and every `NoSchedule` /
/// `NoExecute` taint is tolerated (the rule the core applies).
pub fn in_partition(p: &core::Partition, n: &core::Node) -> bool {
    p.selector.matches(&n.labels)
        && n.taints.iter().all(|t| {
            t.effect == TaintEffect::PreferNoSchedule
                || p.tolerations.iter().any(|tol| tol.tolerates(t))
        })
}

/// A Node whose GPUs the NVIDIA DRA driver publishes (`published`, from its ResourceSlices)
/// as a core node: the GPUs are the driver's (UUID, model, memory, PCIe root), with what only
/// the node agent knows (NVML index, NUMA, NVLink, health) joined by UUID from the GpuNode.
/// Also returns each GPU's `(pool, device)` by position.
pub fn node_dra(
    n: &KubeNode,
    g: Option<&GpuNode>,
    published: &[super::dra::inventory::SliceGpu],
) -> (core::Node, Vec<(String, String)>) {
    let agent = g.and_then(|g| g.status.as_ref()).map(agent_gpus);
    node_dra_with(&node_without_gpus(n), agent.as_ref(), published)
}

/// [`node_dra`] from the node's [`node_without_gpus`] and its GpuNode's [`agent_gpus`] (what
/// the operator caches of each).
pub fn node_dra_with(
    part: &core::Node,
    agent: Option<&AgentGpus>,
    published: &[super::dra::inventory::SliceGpu],
) -> (core::Node, Vec<(String, String)>) {
    let mut out = part.clone();
    let (gpus, links, names) = super::dra::inventory::core_gpus(published, agent);
    out.gpus = gpus;
    out.gpu_links = links;
    (out, names)
}

/// A Node and its GpuNode (if the node agent published one) as a core node. Values that do
/// not parse count as zero (the node then takes no work) rather than failing the cycle.
pub fn node(n: &KubeNode, g: Option<&GpuNode>) -> core::Node {
    let agent = g.and_then(|g| g.status.as_ref()).map(agent_gpus);
    node_with(&node_without_gpus(n), agent.as_ref())
}

/// [`node`] from the node's [`node_without_gpus`] and its GpuNode's [`agent_gpus`] (what the
/// operator caches of each).
pub fn node_with(part: &core::Node, agent: Option<&AgentGpus>) -> core::Node {
    let mut out = part.clone();
    if let Some(a) = agent {
        out.gpus = a.gpus.clone();
        out.gpu_links = a.links(&a.gpus);
    }
    out
}

/// What [`node`] reads of a Node: the core node without GPUs (those come from its GpuNode).
pub fn node_without_gpus(n: &KubeNode) -> core::Node {
    let status = n.status.as_ref();
    let alloc = status.and_then(|s| s.allocatable.as_ref());
    let cpu = alloc
        .and_then(|a| a.get("cpu"))
        .and_then(|q| quantity::cpu_millis(q).ok())
        .unwrap_or(0);
    let mem = alloc
        .and_then(|a| a.get("memory"))
        .and_then(|q| quantity::memory_mib(q).ok())
        .unwrap_or(0);
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let spec = n.spec.as_ref();
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .filter_map(|t| {
                    Some(Taint {
                        key: t.key.clone(),
                        value: t.value.clone().unwrap_or_default(),
                        effect: t.effect.parse().ok()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut labels: BTreeMap<String, String> = n.labels().clone();
    labels
        .entry(muster_crds::labels::HOSTNAME.to_string())
        .or_insert_with(|| n.name_any());
    core::Node {
        name: n.name_any(),
        labels,
        cpu_millis: cpu,
        memory_mib: mem,
        taints,
        ready,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        gpus: Vec::new(),
        gpu_links: Vec::new(),
        extended: alloc
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.contains('/'))
            .filter_map(|(k, q)| Some((k.clone(), quantity::count(q).ok()?)))
            .collect(),
    }
}

/// What [`node`] reads of a GpuNode's status: the GPUs as the node agent reports them, and
/// its `nvidia-smi topo -m` matrix with each cell parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentGpus {
    /// The GPUs, in the status's order.
    pub gpus: Vec<core::Gpu>,
    /// The matrix by NVML index, as reported; a cell that does not parse is `None`.
    pub topology: Vec<Vec<Option<Link>>>,
}

/// A GpuNode's status as [`AgentGpus`].
pub fn agent_gpus(gs: &muster_crds::v1alpha1::GpuNodeStatus) -> AgentGpus {
    AgentGpus {
        gpus: gs
            .gpus
            .iter()
            .map(|x| core::Gpu {
                index: x.index,
                uuid: x.uuid.clone(),
                model: x.model.as_str().into(),
                memory_mib: x.memory_mib,
                healthy: x.health.state == GpuHealthState::Healthy,
                numa: x.numa_node,
                nvlink_peers: x.nvlink_peers.clone(),
            })
            .collect(),
        topology: gs
            .topology
            .iter()
            .map(|row| row.iter().map(|c| c.parse::<Link>().ok()).collect())
            .collect(),
    }
}

impl AgentGpus {
    /// The agent's matrix (rows and columns by NVML index) re-indexed by position in `gpus`;
    /// empty when it is absent, not square, or any entry does not parse (the core then
    /// derives links from NUMA and NVLink peers).
    pub fn links(&self, gpus: &[core::Gpu]) -> Vec<Vec<Link>> {
        let matrix = &self.topology;
        if matrix.is_empty()
            || matrix.len() != gpus.len()
            || matrix.iter().any(|r| r.len() != gpus.len())
        {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(gpus.len());
        for a in gpus {
            let mut row = Vec::with_capacity(gpus.len());
            for b in gpus {
                match matrix
                    .get(a.index as usize)
                    .and_then(|r| r.get(b.index as usize))
                {
                    Some(Some(l)) => row.push(*l),
                    _ => return Vec::new(),
                }
            }
            out.push(row);
        }
        out
    }
}

/// Nodes by name, in natural name order; [`NodeId`] indexes `nodes`.
#[derive(Clone, Debug, Default)]
pub struct NodeTable {
    /// Core nodes, shared with every cycle's snapshot ([`core::Snapshot::nodes`]).
    pub nodes: Arc<Vec<core::Node>>,
    /// Index by name.
    pub index: HashMap<String, NodeId>,
    /// The NVIDIA DRA driver's devices by pool (see [`NodeTable::device`]).
    devices: HashMap<Box<str>, PoolDevices>,
}

/// One pool's devices: their names, and each one's node and GPU (NVML index). A pool is one
/// node's GPUs (the driver names it after the node): a few names, searched in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PoolDevices {
    names: StrTable,
    /// By name id: the node and the GPU's NVML index.
    gpus: Vec<(NodeId, u32)>,
}

impl NodeTable {
    /// Builds the table from translated nodes (sorted here).
    pub fn new(mut nodes: Vec<core::Node>) -> Self {
        nodes.sort_by(|a, b| core::util::natural_cmp(&a.name, &b.name));
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i as NodeId))
            .collect();
        NodeTable {
            nodes: Arc::new(nodes),
            index,
            devices: HashMap::new(),
        }
    }

    /// Adds the DRA devices of nodes: by node name, each GPU's `(pool, device)` by position
    /// in the node's GPUs.
    pub fn with_devices(mut self, names: HashMap<String, Vec<(String, String)>>) -> Self {
        // Per pool: its device names, and each device's (node, GPU index).
        type Pool = (StrTableBuilder, Vec<(NodeId, u32)>);
        let mut pools: HashMap<&str, Pool> = HashMap::new();
        // In node order, so that a device two nodes claim (never, from one driver) resolves
        // the same way every time.
        let mut named: Vec<(NodeId, &Vec<(String, String)>)> = names
            .iter()
            .filter_map(|(node, list)| Some((*self.index.get(node)?, list)))
            .collect();
        named.sort_unstable_by_key(|(id, _)| *id);
        for (id, list) in named {
            let gpus = &self.nodes[id as usize].gpus;
            for ((pool, device), g) in list.iter().zip(gpus) {
                let (b, rows) = pools.entry(pool.as_str()).or_default();
                let d = b.id(device) as usize;
                if d == rows.len() {
                    rows.push((id, g.index));
                } else {
                    rows[d] = (id, g.index);
                }
            }
        }
        self.devices = pools
            .into_iter()
            .map(|(pool, (b, gpus))| {
                (
                    pool.into(),
                    PoolDevices {
                        names: b.finish(),
                        gpus,
                    },
                )
            })
            .collect();
        self
    }

    /// The node and GPU (NVML index) of the NVIDIA DRA driver's device `device` of pool
    /// `pool` (what a ResourceClaim's allocation names, as the core counts it).
    pub fn device(&self, pool: &str, device: &str) -> Option<(NodeId, u32)> {
        let p = self.devices.get(pool)?;
        (0..p.gpus.len())
            .find(|&i| p.names.get(i as u32) == device)
            .map(|i| p.gpus[i])
    }

    /// Whether `self` and `other` know the same devices.
    pub fn same_devices(&self, other: &NodeTable) -> bool {
        self.devices == other.devices
    }

    /// The id of a node; a name not in the table maps past the end, which the core treats as
    /// a node that no longer exists (its jobs end as NODE_FAIL).
    pub fn id(&self, name: &str) -> NodeId {
        self.index.get(name).copied().unwrap_or(NodeId::MAX)
    }

    /// The node by name.
    pub fn get(&self, name: &str) -> Option<&core::Node> {
        self.index.get(name).map(|&i| &self.nodes[i as usize])
    }
}

/// Seconds since the epoch of a Kubernetes time.
pub fn secs(t: &KubeTime) -> i64 {
    t.0.as_second()
}

/// A Kubernetes time from seconds since the epoch.
pub fn time(secs: i64) -> KubeTime {
    KubeTime(jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}

/// A job holding an allocation (from its `status.tasks`) as a core running job.
/// The time limit the admission recorded in `st` (`status.timeLimit`), in seconds; `None`
/// when unlimited or not admitted. The scheduler's timeout and the step's `--signal` both
/// read it here.
pub fn status_limit_secs(st: &BatchJobStatus) -> Option<u64> {
    TimeLimit::parse(st.time_limit.as_deref()?).ok()?.seconds()
}

/// `stopping_since` is set when the operator is stopping it (its resources stay busy until its
/// pods are gone, at least the partition's grace time).
pub fn running_job(
    job: &BatchJob,
    id: JobId,
    partition: Option<PartitionId>,
    nodes: &NodeTable,
    stopping_since: Option<i64>,
) -> RunningJob {
    let tasks = job
        .status
        .as_ref()
        .map(|st| core_tasks(&st.tasks, nodes))
        .unwrap_or_default();
    running_job_with(job, tasks, id, partition, stopping_since)
}

/// Task records as the core's running job holds them (a node not in `nodes` maps past the
/// end: see [`NodeTable::id`]).
pub fn core_tasks(
    tasks: &[muster_crds::v1alpha1::TaskAllocation],
    nodes: &NodeTable,
) -> Vec<TaskAlloc> {
    tasks
        .iter()
        .map(|t| TaskAlloc {
            node: nodes.id(&t.node),
            gpus: t.gpus.clone(),
            cpu_millis: t.cpu_millis,
            memory_mib: t.memory_mib,
        })
        .collect()
}

/// [`running_job`] with its tasks given (the operator's job cache keeps a status's task
/// records apart from the object).
pub fn running_job_with(
    job: &BatchJob,
    tasks: Vec<TaskAlloc>,
    id: JobId,
    partition: Option<PartitionId>,
    stopping_since: Option<i64>,
) -> RunningJob {
    let empty = BatchJobStatus::default();
    let st = job.status.as_ref().unwrap_or(&empty);
    let time_limit = status_limit_secs(st);
    RunningJob {
        id,
        name: job.name_any(),
        job_name: job.spec.job_name.clone(),
        namespace: job.namespace().unwrap_or_default(),
        partition,
        start_time: st.start_time.as_ref().map(secs).unwrap_or(0),
        time_limit,
        exclusive: job.spec.exclusive.is_some_and(Exclusive::is_node),
        exclusive_user: job.spec.exclusive == Some(Exclusive::User),
        user: job_user(job),
        tasks,
        stopping_since,
        array_job_id: st.array_job_id,
        array_task_id: st.array_task_id,
    }
}

/// A waiting job as a core pending job.
pub fn pending_job(
    job: &BatchJob,
    id: JobId,
    parsed: &ParsedJob,
    partition: Option<PartitionId>,
    submit_time: i64,
    eligible_time: Option<i64>,
    array: Option<ArrayTask>,
) -> PendingJob {
    PendingJob {
        id,
        name: job.name_any(),
        job_name: job.spec.job_name.clone(),
        namespace: job.namespace().unwrap_or_default(),
        user: job_user(job),
        partition,
        submit_time,
        eligible_time,
        request: parsed.request.clone(),
        hold: parsed.hold,
        begin_time: job.spec.begin.as_ref().map(|t| t.0.as_second()),
        nice: parsed.nice,
        priority: parsed.priority,
        array,
        // The controller evaluates dependencies itself (it sees finished jobs the snapshot
        // does not keep) and queues a job only once its dependency is met.
        dependency: None,
    }
}

/// The time limit a job runs with, in Slurm's format: the job's own, else the partition's
/// default, else its maximum, else `UNLIMITED` (the rule the core applies).
pub fn effective_time_limit(parsed: &ParsedJob, part: Option<&core::Partition>) -> Option<u64> {
    match part {
        Some(p) => p.effective_limit(parsed.request.time_limit),
        None => parsed.request.time_limit.and_then(|t| t.seconds()),
    }
}

/// A limit in seconds as Slurm prints it (`1:00:00`, `UNLIMITED`).
pub fn format_limit(secs: Option<u64>) -> String {
    match secs {
        Some(s) => muster_crds::slurm::time::format_duration_secs(s),
        None => "UNLIMITED".to_string(),
    }
}

/// Test fixtures shared by the controller's unit tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use muster_crds::v1alpha1::{GpuHealth, GpuInfo, GpuNodeSpec, GpuNodeStatus};

    pub(crate) fn kube_node(name: &str, ready: bool) -> KubeNode {
        let mut n = KubeNode::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some([("muster.dev/leaf".to_string(), "leaf1".to_string())].into());
        n.spec = Some(NodeSpec {
            taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                key: "nvidia.com/gpu".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n.status = Some(NodeStatus {
            allocatable: Some(
                [
                    ("cpu".to_string(), Quantity("223500m".into())),
                    ("memory".to_string(), Quantity("2Ti".into())),
                ]
                .into(),
            ),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n
    }

    pub(crate) fn gpu_node(name: &str, n: u32, unhealthy: &[u32]) -> GpuNode {
        let mut g = GpuNode::new(
            name,
            GpuNodeSpec {
                node_name: name.into(),
            },
        );
        g.status = Some(GpuNodeStatus {
            gpu_count: n,
            gpus: (0..n)
                .map(|i| GpuInfo {
                    index: i,
                    uuid: format!("GPU-{name}-{i}"),
                    model: "NVIDIA H100 80GB HBM3".into(),
                    memory_mib: 81559,
                    numa_node: Some((i / 4) as i32),
                    health: GpuHealth {
                        state: if unhealthy.contains(&i) {
                            GpuHealthState::Unhealthy
                        } else {
                            GpuHealthState::Healthy
                        },
                        ..Default::default()
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        g
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::{gpu_node, kube_node};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use muster_crds::v1alpha1::{PartitionSpec, PartitionState, PreemptMode, TaskAllocation};

    fn s(v: &str) -> Option<IntOrString> {
        Some(IntOrString::String(v.into()))
    }
    fn i(v: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(v))
    }

    #[test]
    fn sbatch_patterns_parse_to_requests() {
        // gres_mpirun.sh: --nodes=2 --ntasks-per-node=2 --gres=gpu:4
        let p = job_request(&BatchJobSpec {
            nodes: i(2),
            ntasks_per_node: Some(2),
            gres: Some("gpu:4".into()),
            time: s("00:10:00"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.request.min_nodes, Some(2));
        assert_eq!(p.request.max_nodes, Some(2));
        assert_eq!(p.request.ntasks_per_node, Some(2));
        assert_eq!(p.request.gpus_per_node, Some(4));
        assert_eq!(p.request.time_limit, Some(TimeLimit::from_minutes(10)));
        assert_eq!(p.gpus_per_node_echo.as_deref(), Some("4"));

        // typed_gpu_constraint.sh: --gres=gpu:tesla:v100:1 is refused by Slurm too; the typed
        // form is gpu:v100:1.
        let e = job_request(&BatchJobSpec {
            gres: Some("gpu:tesla:v100:1".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.gres");
        let p = job_request(&BatchJobSpec {
            gres: Some("gpu:v100:1".into()),
            constraint: Some("tesla_v100".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.request.gpu_type.as_deref(), Some("v100"));
        assert_eq!(p.request.gpus_per_node, Some(1));
        assert!(p.request.constraint.is_some());

        // torchrun: 8 nodes x 8 GPUs, exclusive, 96 CPUs per task.
        let p = job_request(&BatchJobSpec {
            nodes: i(8),
            ntasks_per_node: Some(1),
            gpus_per_node: i(8),
            cpus_per_task: Some(96),
            exclusive: Some(Exclusive::Node),
            ..Default::default()
        })
        .unwrap();
        assert!(p.request.exclusive);
        assert_eq!(p.request.gpus_per_node, Some(8));
        assert_eq!(p.request.cpus_per_task, Some(96));

        // gpus_per_task.sh
        let p = job_request(&BatchJobSpec {
            nodes: i(2),
            ntasks_per_node: Some(2),
            gpus_per_task: i(1),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.request.gpus_per_task, Some(1));
        assert_eq!(p.gpus_per_task_echo.as_deref(), Some("1"));
    }

    #[test]
    fn placement_fields_reach_the_request() {
        let p = job_request(&BatchJobSpec {
            constraint: Some("[leaf1|leaf2]".into()),
            switches: s("1@10:00"),
            gpu_bind: Some("map_gpu:7,6".into()),
            nodelist: Some("gpu[001-002],gpu001".into()),
            exclude: Some("gpu003 gpu004".into()),
            exclusive: Some(Exclusive::User),
            ..Default::default()
        })
        .unwrap();
        let r = &p.request;
        assert_eq!(r.constraint.as_ref().unwrap().to_string(), "[leaf1|leaf2]");
        assert_eq!(r.switches.unwrap().count, 1);
        assert!(r.gpu_bind.is_some());
        assert_eq!(r.nodelist, ["gpu001", "gpu002"], "repeats dropped");
        assert_eq!(r.exclude, ["gpu003", "gpu004"]);
        assert!(r.exclusive_user && !r.exclusive);
        let whole = job_request(&BatchJobSpec {
            exclusive: Some(Exclusive::Node),
            ..Default::default()
        })
        .unwrap();
        assert!(whole.request.exclusive && !whole.request.exclusive_user);
    }

    #[test]
    fn bad_node_lists_are_named() {
        for (spec, field, words) in [
            (
                BatchJobSpec {
                    nodelist: Some("./nodes.txt".into()),
                    ..Default::default()
                },
                "spec.nodelist",
                "looks like a file",
            ),
            (
                BatchJobSpec {
                    exclude: Some("gpu[001-".into()),
                    ..Default::default()
                },
                "spec.exclude",
                "hostlist",
            ),
            (
                BatchJobSpec {
                    nodelist: Some("GPU1".into()),
                    ..Default::default()
                },
                "spec.nodelist",
                "not a Node name",
            ),
            (
                BatchJobSpec {
                    nodelist: Some("gpu1".into()),
                    exclude: Some("gpu[1-2]".into()),
                    ..Default::default()
                },
                "spec.exclude",
                "both nodelist and exclude",
            ),
        ] {
            let e = job_request(&spec).unwrap_err();
            assert_eq!(e[0].field, field, "{e:?}");
            assert!(e[0].message.contains(words), "{}", e[0]);
        }
    }

    #[test]
    fn the_user_is_the_submitters_annotation() {
        let mut j = BatchJob::new("a", BatchJobSpec::default());
        assert_eq!(job_user(&j), None);
        j.metadata.annotations =
            Some([(muster_crds::labels::USER.to_string(), "dana".to_string())].into());
        assert_eq!(job_user(&j).as_deref(), Some("dana"));
        let p = job_request(&j.spec).unwrap();
        assert_eq!(
            pending_job(&j, 1, &p, Some(0), 0, None, None)
                .user
                .as_deref(),
            Some("dana")
        );
    }

    #[test]
    fn memory_forms() {
        let m = |spec: BatchJobSpec| job_request(&spec).unwrap().request.memory;
        assert_eq!(
            m(BatchJobSpec {
                mem: Some("16G".into()),
                ..Default::default()
            }),
            Some(MemoryRequest::PerNode(16 * 1024))
        );
        assert_eq!(
            m(BatchJobSpec {
                mem: Some("0".into()),
                ..Default::default()
            }),
            Some(MemoryRequest::WholeNode)
        );
        assert_eq!(
            m(BatchJobSpec {
                mem_per_cpu: Some("512M".into()),
                ..Default::default()
            }),
            Some(MemoryRequest::PerCpu(512))
        );
        assert_eq!(
            m(BatchJobSpec {
                mem_per_gpu: Some("64000".into()),
                gpus: i(2),
                ..Default::default()
            }),
            Some(MemoryRequest::PerGpu(64000))
        );
        let e = job_request(&BatchJobSpec {
            mem: Some("1G".into()),
            mem_per_cpu: Some("1G".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e[0].message.contains("mutually exclusive"), "{}", e[0]);
    }

    #[test]
    fn times_and_unlimited() {
        let t = |v| {
            job_request(&BatchJobSpec {
                time: v,
                ..Default::default()
            })
            .unwrap()
            .request
            .time_limit
        };
        assert_eq!(t(i(30)), Some(TimeLimit::from_minutes(30)));
        assert_eq!(t(s("1-00:00:00")), Some(TimeLimit::from_minutes(1440)));
        assert_eq!(t(s("UNLIMITED")), Some(TimeLimit::Unlimited));
        assert_eq!(t(None), None);
    }

    #[test]
    fn every_bad_field_is_named() {
        let e = job_request(&BatchJobSpec {
            nodes: s("4-2"),
            time: s("1h"),
            gpus: s("lots"),
            array: s("5-1"),
            dependency: Some("afterwards:x".into()),
            constraint: Some("a&&b".into()),
            switches: s("0"),
            gpu_bind: Some("nearest".into()),
            mem: Some("1.5G".into()),
            ..Default::default()
        })
        .unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "spec.nodes",
            "spec.time",
            "spec.gpus",
            "spec.array",
            "spec.dependency",
            "spec.constraint",
            "spec.switches",
            "spec.gpuBind",
            "spec.mem",
        ] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
        // Each message says what is allowed.
        let time = e.iter().find(|e| e.field == "spec.time").unwrap();
        assert!(time.message.contains("expected"), "{time}");
        assert!(join_errors(&e).contains("spec.time: "));
    }

    #[test]
    fn contradicting_gpu_types_are_refused() {
        let e = job_request(&BatchJobSpec {
            gpu_type: Some("a100".into()),
            gpus: s("h100:2"),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.gpus");
        assert!(e[0].message.contains("a100"));
        // The same type given twice, in any case, is fine.
        let p = job_request(&BatchJobSpec {
            gpu_type: Some("A100".into()),
            gpus: s("a100:2"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.request.gpus, Some(2));
        let e = job_request(&BatchJobSpec {
            gpus_per_task: i(1),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.gpusPerTask");
        let e = job_request(&BatchJobSpec {
            gres: Some("gpu:2".into()),
            gpus_per_node: i(2),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.gres");
        let e = job_request(&BatchJobSpec {
            gres: Some("mps:2".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e[0].message.contains("GPUs only"), "{}", e[0]);
    }

    #[test]
    fn arrays_and_dependencies_parse() {
        let p = job_request(&BatchJobSpec {
            array: s("0-15%4"),
            dependency: Some("afterok:train".into()),
            ..Default::default()
        })
        .unwrap();
        let a = p.array.unwrap();
        assert_eq!(a.indices.len(), 16);
        assert_eq!(a.max_running, Some(4));
        assert_eq!(p.dependency.unwrap().items.len(), 1);
        let p = job_request(&BatchJobSpec {
            array: i(7),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.array.unwrap().indices, vec![7]);
    }

    fn part(name: &str, spec: PartitionSpec) -> Partition {
        Partition::new(name, spec)
    }

    #[test]
    fn partitions_resolve_the_default_and_report_conflicts() {
        let t = partitions(&[
            part(
                "b",
                PartitionSpec {
                    default: Some(true),
                    ..Default::default()
                },
            ),
            part(
                "a",
                PartitionSpec {
                    default: Some(true),
                    ..Default::default()
                },
            ),
            part("c", PartitionSpec::default()),
        ]);
        assert_eq!(t.name(0), "a");
        assert_eq!(t.default, Some(0));
        assert_eq!(t.default_conflict, vec!["a", "b"]);
        assert_eq!(t.resolve(None), Ok(0));
        assert_eq!(t.resolve(Some("c")), Ok(2));
        assert_eq!(t.resolve(Some("zz")), Err("zz".into()));
        let none = partitions(&[part("x", PartitionSpec::default())]);
        assert_eq!(none.resolve(None), Err(String::new()));
    }

    #[test]
    fn partition_fields_translate() {
        let p = part(
            "gpu",
            PartitionSpec {
                node_selector: Some(KubeSelector {
                    match_labels: Some([("pool".to_string(), "h100".to_string())].into()),
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "zone".into(),
                        operator: "In".into(),
                        values: Some(vec!["a".into()]),
                    }]),
                }),
                topology: vec!["muster.dev/leaf".into(), "kubernetes.io/hostname".into()],
                state: Some(PartitionState::Drain),
                default_time: s("1:00:00"),
                max_time: s("1-00:00:00"),
                min_nodes: Some(1),
                max_nodes: Some(64),
                priority_tier: Some(5),
                preempt_mode: Some(PreemptMode::Requeue),
                allowed_namespaces: vec!["ml".into()],
                tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                    key: Some("nvidia.com/gpu".into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoSchedule".into()),
                    ..Default::default()
                }],
                def_cpu_per_gpu: Some(12),
                def_mem_per_gpu: Some("64G".into()),
                grace_time_seconds: Some(30),
                ..Default::default()
            },
        );
        let c = partition(&p).unwrap();
        assert_eq!(c.name, "gpu");
        assert_eq!(c.selector.match_labels["pool"], "h100");
        assert_eq!(
            c.selector.match_expressions[0].operator,
            SelectorOperator::In
        );
        assert_eq!(c.state, PartitionState::Drain);
        assert_eq!(c.default_time, Some(TimeLimit::from_minutes(60)));
        assert_eq!(c.max_time, Some(TimeLimit::from_minutes(1440)));
        assert_eq!(c.priority_tier, 5);
        assert_eq!(c.preempt_mode, PreemptMode::Requeue);
        assert!(c.tolerations[0].exists);
        assert_eq!(c.tolerations[0].effect, Some(TaintEffect::NoSchedule));
        assert_eq!(c.def_mem_per_gpu_mib, Some(64 * 1024));
        assert_eq!(c.grace_time_secs, 30);

        let bad = part(
            "bad",
            PartitionSpec {
                max_time: s("soon"),
                tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                    operator: Some("Maybe".into()),
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        let e = partition(&bad).unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.maxTime"));
        assert!(fields.contains(&"spec.tolerations[0].operator"));
        let t = partitions(&[bad]);
        assert!(t.parts.is_empty());
        assert!(t.invalid.contains_key("bad"));
    }

    #[test]
    fn nodes_translate_with_gpus_and_health() {
        let n = node(
            &kube_node("gpu001", true),
            Some(&gpu_node("gpu001", 8, &[3])),
        );
        assert_eq!(n.name, "gpu001");
        assert_eq!(n.cpu_millis, 223_500);
        assert_eq!(n.memory_mib, 2 * 1024 * 1024);
        assert!(n.ready);
        assert_eq!(n.labels["kubernetes.io/hostname"], "gpu001");
        assert_eq!(n.taints[0].effect, TaintEffect::NoSchedule);
        assert_eq!(n.gpus.len(), 8);
        assert!(!n.gpus[3].healthy && n.gpus[2].healthy);
        assert_eq!(n.gpus[5].numa, Some(1));
        let cpu_only = node(&kube_node("cpu1", false), None);
        assert!(!cpu_only.ready);
        assert!(cpu_only.gpus.is_empty());
    }

    /// The agent's matrix `matrix` re-indexed for `gpus` (as [`node`] does).
    fn gpu_links(gpus: &[core::Gpu], matrix: &[Vec<String>]) -> Vec<Vec<Link>> {
        let status = muster_crds::v1alpha1::GpuNodeStatus {
            topology: matrix.to_vec(),
            ..Default::default()
        };
        agent_gpus(&status).links(gpus)
    }

    #[test]
    fn topology_matrix_is_reindexed_by_position() {
        let gpus: Vec<core::Gpu> = [1u32, 0]
            .iter()
            .map(|&i| core::Gpu {
                index: i,
                ..Default::default()
            })
            .collect();
        let m = vec![
            vec!["X".to_string(), "NV18".to_string()],
            vec!["PIX".to_string(), "X".to_string()],
        ];
        // position 0 is NVML index 1: its row is m[1].
        let l = gpu_links(&gpus, &m);
        assert_eq!(l[0][1], Link::Pix);
        assert_eq!(l[1][0], Link::NvLink(18));
        assert!(gpu_links(&gpus, &[vec!["X".into()]]).is_empty());
        let bad = vec![
            vec!["X".to_string(), "??".to_string()],
            vec!["PIX".to_string(), "X".to_string()],
        ];
        assert!(gpu_links(&gpus, &bad).is_empty());
    }

    #[test]
    fn membership_needs_selector_and_tolerated_taints() {
        let n = node(&kube_node("gpu001", true), None);
        let mut p = core::Partition::new("p", vec![]);
        assert!(!in_partition(&p, &n), "NoSchedule taint not tolerated");
        p.tolerations.push(Toleration {
            key: "nvidia.com/gpu".into(),
            exists: true,
            ..Default::default()
        });
        assert!(in_partition(&p, &n));
        p.selector
            .match_labels
            .insert("muster.dev/leaf".into(), "leaf2".into());
        assert!(!in_partition(&p, &n));
    }

    #[test]
    fn dra_devices_resolve_to_their_node_and_gpu() {
        let mut a = node(&kube_node("gpu1", true), Some(&gpu_node("gpu1", 2, &[])));
        // Positions and NVML indices differ: the device at position 0 is GPU 1.
        a.gpus.reverse();
        let b = node(&kube_node("gpu2", true), Some(&gpu_node("gpu2", 2, &[])));
        let names = |pool: &str| {
            vec![
                (pool.to_string(), "gpu-0".to_string()),
                (pool.to_string(), "gpu-1".to_string()),
            ]
        };
        let t = NodeTable::new(vec![b, a]).with_devices(
            [
                ("gpu1".to_string(), names("gpu1")),
                ("gpu2".to_string(), names("gpu2")),
                ("gone".to_string(), names("gone")),
            ]
            .into(),
        );
        assert_eq!(t.device("gpu1", "gpu-0"), Some((0, 1)));
        assert_eq!(t.device("gpu1", "gpu-1"), Some((0, 0)));
        assert_eq!(t.device("gpu2", "gpu-1"), Some((1, 1)));
        assert_eq!(t.device("gpu2", "gpu-2"), None);
        assert_eq!(t.device("gone", "gpu-0"), None, "a node not in the table");
        assert!(t.same_devices(&t.clone()));
        assert!(!t.same_devices(&NodeTable::default()));
    }

    #[test]
    fn running_jobs_come_from_status_tasks() {
        let table = NodeTable::new(vec![
            node(&kube_node("gpu10", true), None),
            node(&kube_node("gpu2", true), None),
        ]);
        assert_eq!(table.nodes[0].name, "gpu2", "natural order");
        let mut j = BatchJob::new("train", BatchJobSpec::default());
        j.metadata.namespace = Some("ml".into());
        j.status = Some(muster_crds::v1alpha1::BatchJobStatus {
            time_limit: Some("1:00:00".into()),
            start_time: Some(time(1000)),
            array_job_id: Some(7),
            tasks: vec![
                TaskAllocation {
                    rank: 0,
                    node: "gpu10".into(),
                    gpus: vec![0, 1],
                    cpu_millis: 2000,
                    memory_mib: 100,
                    ..Default::default()
                },
                TaskAllocation {
                    rank: 1,
                    node: "gone".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let r = running_job(&j, 42, Some(0), &table, None);
        assert_eq!(r.id, 42);
        assert_eq!(r.namespace, "ml");
        assert_eq!(r.start_time, 1000);
        assert_eq!(r.time_limit, Some(3600));
        assert_eq!(r.tasks[0].node, 1);
        assert_eq!(r.tasks[0].gpus, vec![0, 1]);
        assert_eq!(r.tasks[1].node, NodeId::MAX);
        assert_eq!(r.array_job_id, Some(7));
    }

    #[test]
    fn effective_limits_follow_the_partition() {
        let parsed = job_request(&BatchJobSpec::default()).unwrap();
        let mut p = core::Partition::new("p", vec![]);
        assert_eq!(effective_time_limit(&parsed, Some(&p)), None);
        p.max_time = Some(TimeLimit::from_minutes(120));
        assert_eq!(effective_time_limit(&parsed, Some(&p)), Some(7200));
        p.default_time = Some(TimeLimit::from_minutes(10));
        assert_eq!(effective_time_limit(&parsed, Some(&p)), Some(600));
        assert_eq!(format_limit(Some(3600)), "1:00:00");
        assert_eq!(format_limit(None), "UNLIMITED");
        let own = job_request(&BatchJobSpec {
            time: i(5),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(effective_time_limit(&own, Some(&p)), Some(300));
    }
}

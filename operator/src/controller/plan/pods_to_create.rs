//! The pods a job needs created, built lazily from what the cycle derived.

use super::*;

/// Node pods to create, built only when they are written: a cycle that admits 1,400 gangs
/// would otherwise hold thousands of complete pod objects (each with its environment) until
/// its last write; built one job at a time, at most the writer's concurrency exist at once.
#[derive(Clone, Debug, Default)]
pub struct PodsToCreate {
    pub(super) src: Option<Arc<PodSource>>,
    pub(super) nodes: Vec<u32>,
    /// Nodes whose pod needs a claim created first (`dra` mode, the node holds GPUs).
    pub(super) claim_nodes: Vec<u32>,
}

/// What a job's pods are built from (an owned [`JobContext`]). A cycle that admits thousands
/// of gangs holds every admitted job's source until its writes: the job, its partition and
/// the node table are shared with the cycle's inputs, the task records compact, and what is
/// derived from them (the records, their layout, the nodes' GPU topologies) computed when the
/// first pod is built (and dropped with the plan once written).
#[derive(Debug)]
pub(super) struct PodSource {
    pub(super) job: Arc<JobObs>,
    pub(super) job_id: u64,
    pub(super) attempt: u32,
    pub(super) tasks: Arc<TaskRecords>,
    pub(super) partition: Option<Arc<Partition>>,
    pub(super) partition_name: String,
    pub(super) array: Option<(u64, u32)>,
    pub(super) gpus_per_node: Option<String>,
    pub(super) gpus_per_task: Option<String>,
    pub(super) gpu_binding: GpuBinding,
    pub(super) device_class: String,
    pub(super) gang: Option<GangRef>,
    pub(super) step: StepSettings,
    pub(super) table: Arc<NodeTable>,
    pub(super) limit_end: Option<i64>,
    pub(super) built: std::sync::OnceLock<Derived>,
}

/// What the pods of a [`PodSource`] are built from, derived once.
#[derive(Debug)]
pub(super) struct Derived {
    pub(super) tasks: Vec<TaskAllocation>,
    pub(super) layout: pods::JobLayout,
    pub(super) node_gpus: Vec<String>,
}

impl PodSource {
    pub(super) fn derived(&self) -> &Derived {
        self.built.get_or_init(|| {
            let tasks = self.tasks.to_vec();
            let layout = pods::JobLayout::new(self.job.job(), self.attempt, &tasks);
            let node_gpus = node_gpus(&layout, &self.table);
            Derived {
                tasks,
                layout,
                node_gpus,
            }
        })
    }

    pub(super) fn layout(&self) -> &pods::JobLayout {
        &self.derived().layout
    }
}

/// Each node's GPUs with their topology (`MUSTER_NODE_GPUS`), by node index (empty for a node
/// without GPUs).
pub(super) fn node_gpus(layout: &pods::JobLayout, table: &NodeTable) -> Vec<String> {
    let mut node_gpus = Vec::new();
    for share in layout.shares() {
        let n = share.node_rank;
        if node_gpus.len() < n as usize {
            node_gpus.resize(n as usize, String::new());
        }
        node_gpus.push(if share.gpus.is_empty() {
            String::new()
        } else {
            pods::node_gpus_json(share, table.get(&share.node))
        });
    }
    node_gpus
}

/// What [`PodsToCreate::new`] keeps of the cycle (shared, not copied).
pub(super) struct Shared {
    pub(super) job: Arc<JobObs>,
    pub(super) tasks: Arc<TaskRecords>,
    pub(super) partition: Option<Arc<Partition>>,
    pub(super) table: Arc<NodeTable>,
}

impl PodsToCreate {
    /// The pods of `nodes` (node indices; with their claims in `dra` mode, and `gang` naming
    /// their group), checked to be buildable: every node allocated, every claim buildable
    /// (GPUs with UUIDs), and the first pod built (everything else that can fail is the same
    /// for every node). `table` gives `MUSTER_NODE_GPUS` the GPUs' topology.
    /// `ctx` is the job's context (its tasks those of `shared.tasks`).
    pub(super) fn new(
        ctx: &JobContext<'_>,
        shared: Shared,
        nodes: Vec<u32>,
        device_class: &str,
        gang: Option<GangRef>,
    ) -> Result<PodsToCreate, pods::BuildError> {
        let mut claim_nodes = Vec::new();
        let layout = pods::JobLayout::new(ctx.job, ctx.attempt, ctx.tasks);
        let node_gpus = node_gpus(&layout, &shared.table);
        for n in &nodes {
            let t = layout.share(*n).ok_or(pods::BuildError::NoSuchNode(*n))?;
            if ctx.gpu_binding == GpuBinding::Dra && !t.gpus.is_empty() {
                if t.gpu_uuids.len() != t.gpus.len() || t.gpu_uuids.iter().any(|u| u.is_empty()) {
                    let i = (0..t.gpus.len())
                        .find(|&i| t.gpu_uuids.get(i).is_none_or(|u| u.is_empty()))
                        .unwrap_or(0);
                    return Err(dra::DraError::NoUuid {
                        node: t.node.clone(),
                        index: t.gpus[i],
                    }
                    .into());
                }
                claim_nodes.push(*n);
            }
        }
        if let Some(n) = nodes.first() {
            let mut c = *ctx;
            c.node_gpus = &node_gpus;
            pods::build_pod_in(&c, &layout, *n)?;
        }
        Ok(PodsToCreate {
            src: Some(Arc::new(PodSource {
                job: shared.job,
                job_id: ctx.job_id,
                attempt: ctx.attempt,
                tasks: shared.tasks,
                partition: shared.partition,
                partition_name: ctx.partition_name.to_string(),
                array: ctx.array,
                gpus_per_node: ctx.gpus_per_node.map(str::to_string),
                gpus_per_task: ctx.gpus_per_task.map(str::to_string),
                gpu_binding: ctx.gpu_binding,
                device_class: device_class.to_string(),
                gang,
                step: ctx.step.clone(),
                table: shared.table,
                built: std::sync::OnceLock::new(),
                limit_end: ctx.limit_end,
            })),
            nodes,
            claim_nodes,
        })
    }

    /// Nodes whose pod's claim must exist before the pod is created.
    pub fn claim_nodes(&self) -> &[u32] {
        &self.claim_nodes
    }

    /// The ResourceClaim of node `node`'s pod, with that node's GPUs of the job (`None` in
    /// `env` mode or without GPUs).
    pub fn build_claim(&self, node: u32) -> Result<Option<ResourceClaim>, pods::BuildError> {
        let s = self
            .src
            .as_ref()
            .ok_or(pods::BuildError::NoSuchNode(node))?;
        if s.gpu_binding != GpuBinding::Dra {
            return Ok(None);
        }
        let t = s
            .layout()
            .share(node)
            .ok_or(pods::BuildError::NoSuchNode(node))?;
        let pod = pods::pod_name(&s.job.job().name_any(), s.attempt, node);
        let gpus: Vec<dra::HeldGpu<'_>> = t
            .gpus
            .iter()
            .zip(
                t.gpu_uuids
                    .iter()
                    .map(String::as_str)
                    .chain(std::iter::repeat("")),
            )
            .map(|(&index, uuid)| dra::HeldGpu { index, uuid })
            .collect();
        let c = dra::ClaimFor {
            job: s.job.job(),
            job_id: s.job_id,
            attempt: s.attempt,
            pod: &pod,
            node: &t.node,
            device_class: &s.device_class,
        };
        Ok(dra::build_claim(&c, &gpus)?)
    }

    /// The group the pods belong to, where Kubernetes' gang API is used.
    pub fn gang(&self) -> Option<&GangRef> {
        self.src.as_ref().and_then(|s| s.gang.as_ref())
    }

    /// No pods.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many pods.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The node indices, in order.
    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// Builds the pod of node `node`.
    pub fn build(&self, node: u32) -> Result<Pod, pods::BuildError> {
        let s = self
            .src
            .as_ref()
            .ok_or(pods::BuildError::NoSuchNode(node))?;
        let d = s.derived();
        let ctx = JobContext {
            job: s.job.job(),
            job_id: s.job_id,
            attempt: s.attempt,
            tasks: &d.tasks,
            partition: s.partition.as_deref(),
            partition_name: &s.partition_name,
            array: s.array,
            gpus_per_node: s.gpus_per_node.as_deref(),
            gpus_per_task: s.gpus_per_task.as_deref(),
            gpu_binding: s.gpu_binding,
            step: &s.step,
            node_gpus: &d.node_gpus,
            limit_end: s.limit_end,
        };
        pods::build_pod_in(&ctx, &d.layout, node)
    }

    /// Builds every pod.
    pub fn build_all(&self) -> Result<Vec<Pod>, pods::BuildError> {
        self.nodes.iter().map(|n| self.build(*n)).collect()
    }
}

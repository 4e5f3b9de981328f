//! How pods are bound to their GPUs this cycle (env, DRA claims) and which claims hold devices.

use super::*;

/// How each partition binds GPUs this cycle, and Kubernetes' gang API.
pub(super) struct BindCtx {
    /// The Partitions by name.
    pub(super) partitions: HashMap<String, Arc<Partition>>,
    /// By partition name: the binding, or why its explicit `dra` cannot be had.
    pub(super) by_partition: HashMap<String, Result<GpuBinding, String>>,
    /// DeviceClass by partition name.
    pub(super) class: HashMap<String, String>,
    /// The gang API, where served.
    pub(super) gang: Option<GangApi>,
}

impl BindCtx {
    pub(super) fn new(inp: &Inputs<'_>) -> Self {
        let mut by_partition = HashMap::default();
        let mut class = HashMap::default();
        let mut partitions = HashMap::default();
        for p in inp.partitions {
            let name = p.name_any();
            partitions.insert(name.clone(), p.clone());
            let c = p.spec.device_class_name.as_deref();
            by_partition.insert(name.clone(), dra::resolve(p.spec.gpu_binding, c, inp.dra));
            class.insert(name, c.unwrap_or(dra::DEFAULT_DEVICE_CLASS).to_string());
        }
        BindCtx {
            partitions,
            by_partition,
            class,
            gang: inp.gang,
        }
    }

    /// Partition `p`, shared.
    pub(super) fn partition(&self, p: &str) -> Option<Arc<Partition>> {
        self.partitions.get(p).cloned()
    }

    /// The binding of partition `p` (`env` for one that cannot have its `dra`, whose jobs
    /// do not start anyway).
    pub(super) fn binding(&self, p: &str) -> GpuBinding {
        match self.by_partition.get(p) {
            Some(Ok(b)) => *b,
            _ => GpuBinding::Env,
        }
    }

    pub(super) fn device_class(&self, p: &str) -> &str {
        self.class
            .get(p)
            .map(String::as_str)
            .unwrap_or(dra::DEFAULT_DEVICE_CLASS)
    }

    /// The group of attempt `attempt` of `job`, where the gang API is served.
    pub(super) fn gang_ref(&self, job: &str, attempt: u32) -> Option<GangRef> {
        self.gang.map(|api| GangRef {
            api,
            name: gang::group_name(job, attempt),
        })
    }
}

/// Synthetic running jobs for GPUs allocated to ResourceClaims that no allocation Muster keeps
/// (`held`) and nothing in `running` already counts: a claim someone made by hand, or one of
/// Muster's of an ended attempt whose pods are still live.
///
/// A claim of Muster's whose attempt has no live pod left does not hold its GPUs: its
/// processes are gone, Muster deletes it this cycle, and kube-scheduler (whose resourceclaim
/// controller deallocates it once no pod uses it) gives a new claim pinned to the same devices
/// nothing until then — the new pod just waits in the scheduling queue for a moment. Counting
/// it would place the next job elsewhere than the simulator and `--test-only` predict.
pub(super) fn claim_holds(
    inp: &Inputs<'_>,
    held: &HashSet<(String, u32)>,
    running: &[RunningJob],
    now: i64,
    synthetic: &mut JobId,
) -> Vec<RunningJob> {
    let mut taken: HashSet<(core::NodeId, u32)> = HashSet::default();
    for r in running {
        for t in &r.tasks {
            taken.extend(t.gpus.iter().map(|g| (t.node, *g)));
        }
    }
    let live: HashSet<(&str, u32)> = inp
        .pods
        .iter()
        .filter(|p| p.live())
        .filter_map(|p| Some((p.owner_uid()?, p.attempt?)))
        .collect();
    let mut out = Vec::new();
    for c in inp.claims.iter() {
        if c.devices().len() == 0 {
            continue;
        }
        if let (Some(u), Some(a)) = (c.owner_uid(), c.attempt)
            && c.is_musters()
            && (held.contains(&(u.to_string(), a)) || !live.contains(&(u, a)))
        {
            continue;
        }
        let mut by_node: BTreeMap<core::NodeId, Vec<u32>> = BTreeMap::new();
        for (driver, pool, device) in c.devices() {
            if driver != dra::NVIDIA_DRIVER {
                continue;
            }
            if let Some((node, gpu)) = inp.nodes.device(pool, device)
                && taken.insert((node, gpu))
            {
                by_node.entry(node).or_default().push(gpu);
            }
        }
        if by_node.is_empty() {
            continue;
        }
        out.push(RunningJob {
            id: *synthetic,
            name: c.name().to_string(),
            namespace: c.namespace().to_string(),
            partition: None,
            start_time: now,
            // One of Muster's lets go once its pod is gone; someone else's has no known end
            // (no reservation counts on it).
            stopping_since: c.is_musters().then_some(now),
            tasks: by_node
                .into_iter()
                .map(|(node, gpus)| TaskAlloc {
                    node,
                    gpus,
                    cpu_millis: 0,
                    memory_mib: 0,
                })
                .collect(),
            ..Default::default()
        });
        *synthetic -= 1;
    }
    out
}

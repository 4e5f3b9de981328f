//! Whether a queued job may be considered this cycle, and what it needs: holds,
//! dependencies, begin times, limits, partition checks and the demand with its node
//! filters (a [`JobCtx`] or the pending reason and message).

use super::*;

impl Cycle<'_> {
    /// Whether the job may be considered now, and what it needs.
    pub(super) fn eligible(
        &mut self,
        idx: usize,
        job: &PendingJob,
    ) -> Result<JobCtx, (Reason, String)> {
        if job.hold {
            return Err((Reason::JobHeldUser, "held".into()));
        }
        if job.begin_time.is_some_and(|b| b > self.now) {
            // No clock time in the message: a replay's clock is not the wall's (the time is
            // the job's spec.begin).
            return Err((
                Reason::BeginTime,
                "its --begin time has not come yet".into(),
            ));
        }
        if let (Some(spec), Some(index)) = (&job.dependency, &self.deps) {
            match deps::evaluate(spec, &Asker::of(job), index, self.now) {
                DepState::Satisfied => {}
                DepState::Waiting(m) | DepState::Missing(m) => {
                    return Err((Reason::Dependency, m));
                }
                DepState::Never(m) => return Err((Reason::DependencyNeverSatisfied, m)),
            }
        }
        let Some(pi) = job
            .partition
            .filter(|&p| (p as usize) < self.snap.partitions.len())
        else {
            return Err((
                Reason::PartitionConfig,
                "the job's partition does not exist".into(),
            ));
        };
        let part = &self.snap.partitions[pi as usize];
        if !part.allowed_namespaces.is_empty() && !part.allowed_namespaces.contains(&job.namespace)
        {
            return Err((
                Reason::AccountNotAllowed,
                format!(
                    "namespace {} may not use partition {}",
                    job.namespace, part.name
                ),
            ));
        }
        match part.state {
            PartitionState::Down => {
                return Err((
                    Reason::PartitionDown,
                    format!("partition {} is down", part.name),
                ));
            }
            PartitionState::Inactive => {
                return Err((
                    Reason::PartitionInactive,
                    format!("partition {} is inactive", part.name),
                ));
            }
            PartitionState::Up | PartitionState::Drain => {}
        }
        let limit = part.effective_limit(job.request.time_limit);
        if let Some(max) = part.max_time {
            let asked = job.request.time_limit.or(part.default_time).unwrap_or(max);
            if asked > max {
                return Err((
                    Reason::PartitionTimeLimit,
                    format!(
                        "time limit {asked} exceeds partition {}'s maximum of {max}",
                        part.name
                    ),
                ));
            }
        }
        let r = &job.request;
        if let Some(min) = r.min_nodes
            && part.max_nodes.is_some_and(|m| min > m)
        {
            return Err((
                Reason::PartitionNodeLimit,
                format!(
                    "{min} nodes exceed partition {}'s maximum of {}",
                    part.name,
                    part.max_nodes.unwrap_or(0)
                ),
            ));
        }
        if let Some(pmin) = part.min_nodes {
            let most = r.max_nodes.or(r.min_nodes).or(r.ntasks).unwrap_or(1);
            if most < pmin {
                return Err((
                    Reason::PartitionNodeLimit,
                    format!(
                        "partition {} needs jobs of at least {pmin} nodes",
                        part.name
                    ),
                ));
            }
        }
        let mut demand = match self.demands.get_mut(idx).and_then(Option::take) {
            Some(d) => d,
            None => normalize(&job.request, part),
        }
        .map_err(|m| (Reason::BadConstraints, m))?;
        if let Some(a) = &job.array
            && let Some(max) = a.max_running
            && self
                .array_running
                .get(&a.array_job_id)
                .copied()
                .unwrap_or(0)
                >= max
        {
            return Err((
                Reason::JobArrayTaskLimit,
                format!("{max} elements of array {} already run", a.array_job_id),
            ));
        }
        let r = &job.request;
        // --exclusive=user: nodes shared only with the user's own jobs. A job of an unknown
        // user can share with no one, so it takes whole nodes.
        let mut exclusive_user = r.exclusive_user && !r.exclusive;
        if exclusive_user && job.user.is_none() {
            demand.exclusive = true;
            exclusive_user = false;
        }
        let user = self.users.get(idx).map(|&u| (u, exclusive_user));
        let bind = bind_sets(r, &demand).map_err(|m| (Reason::BadConstraints, m))?;
        let gpu_type = r.gpu_type.as_deref();
        let alternatives: Vec<Option<Constraint>> = match &r.constraint {
            None => vec![None],
            Some(c) => match c.matching_or_alternatives() {
                Some(alts) => alts.into_iter().map(Some).collect(),
                None => vec![Some(c.clone())],
            },
        };
        // --exclude: never these nodes (a filter like a constraint's).
        let mut excluded: Vec<&str> = Vec::new();
        let mut exclude_key = String::new();
        if !r.exclude.is_empty() {
            excluded.extend(r.exclude.iter().map(String::as_str));
            excluded.sort_unstable();
            exclude_key = format!("|x:{}", excluded.join(","));
        }
        // The partition's per-node-pod resources (`rdma/ib`): only nodes that have them.
        let needs = &self.snap.partitions[pi as usize].node_resources;
        for (k, v) in needs {
            exclude_key.push_str(&format!("|r:{k}={v}"));
        }
        let mut alts = Vec::with_capacity(alternatives.len());
        for alt in &alternatives {
            let mut key = alt.as_ref().map(|c| c.to_string()).unwrap_or_default();
            key.push_str(&exclude_key);
            let fits = |n: &crate::core::node::Node| {
                alt.as_ref().is_none_or(|c| c.matches(|f| n.has_feature(f)))
                    && excluded.binary_search(&n.name.as_str()).is_err()
                    && n.has_resources(needs)
            };
            let filter = if key.is_empty() {
                self.e.filter(pi, gpu_type, "", &|_| true)
            } else {
                self.e.filter(pi, gpu_type, &key, &fits)
            };
            let mut counts = Vec::new();
            if let Some(c) = alt {
                for (term, n) in c.node_counts() {
                    let k = term.to_string();
                    let f = self
                        .e
                        .filter(pi, None, &k, &|node| term.matches(|f| node.has_feature(f)));
                    counts.push((f, n));
                }
            }
            // --nodelist: each named node is a count of one, among the nodes the job may use.
            let mut required = Vec::with_capacity(r.nodelist.len());
            for name in &r.nodelist {
                let f = self
                    .e
                    .filter(pi, gpu_type, &format!("={name}|{key}"), &|n| {
                        n.name == *name && fits(n)
                    });
                counts.push((f, 1));
                required.push(f);
            }
            let cid = self.e.class(pi, filter, &demand, bind.clone(), user);
            alts.push(Alt {
                cid,
                counts,
                required,
            });
        }
        let mut implicit = false;
        let (max_leaves, leaves_deadline) = match &job.request.switches {
            None if self.cfg.topology_wait_secs > 0 && alts.iter().all(|a| a.counts.is_empty()) => {
                if self.fits_one_leaf(pi, &demand) {
                    implicit = true;
                    (Some(1), NEVER)
                } else {
                    (None, NEVER)
                }
            }
            None => (None, NEVER),
            Some(sw) => {
                let wait = match sw.max_wait {
                    None => i64::try_from(self.cfg.max_switch_wait_secs).unwrap_or(i64::MAX),
                    Some(t) => t.seconds().map_or(NEVER, |s| s as i64),
                };
                let from = job.eligible_time.unwrap_or(job.submit_time);
                (Some(sw.count), from.saturating_add(wait))
            }
        };
        Ok(JobCtx {
            part: pi,
            demand,
            limit,
            alts,
            max_leaves,
            leaves_deadline,
            implicit,
            user,
        })
    }

    /// Whether a gang of `d` spans nodes but fits one leaf of the partition: its fewest
    /// nodes (by the widest node for packed tasks) are at least two and at most the largest
    /// leaf's. Such a gang prefers a single leaf (see [`Config::topology_wait_secs`]).
    pub(super) fn fits_one_leaf(&self, part: u32, d: &Demand) -> bool {
        let k = match d.mode {
            Mode::Bundles { .. } => u64::from(d.min_nodes),
            Mode::Units { .. } => {
                let per = self
                    .widest_node
                    .checked_div(d.unit.gpus)
                    .map_or(d.per_node_cap(), |k| k.min(d.per_node_cap()));
                u64::from(d.need())
                    .div_ceil(u64::from(per.max(1)))
                    .max(u64::from(d.min_nodes))
            }
        };
        if k < 2 {
            return false;
        }
        k <= self.widest_leaf.get(part as usize).copied().unwrap_or(0)
    }
}

/// GPU position sets per local task for `map_gpu`/`mask_gpu`, after checking the binding
/// agrees with the request (NVML indices are 0..n on every node, so an index is a position).
fn bind_sets(req: &JobRequest, d: &Demand) -> Result<Option<Vec<u64>>, String> {
    use muster_crds::slurm::GpuBindMode;
    let Some(bind) = &req.gpu_bind else {
        return Ok(None);
    };
    // GPUs each task gets, when every task gets the same number.
    let per_task = match d.mode {
        Mode::Units {
            merge: false,
            tasks_per_unit: 1,
            ..
        } if d.node.gpus == 0 => Some(d.unit.gpus),
        Mode::Units { .. } => None,
        Mode::Bundles { tasks_per_node } => d
            .unit
            .gpus
            .is_multiple_of(tasks_per_node)
            .then(|| d.unit.gpus / tasks_per_node),
    };
    let want = |n: u32, what: &str| -> Result<(), String> {
        match per_task {
            Some(p) if p == n => Ok(()),
            Some(p) => Err(format!(
                "gpu-bind {what} gives each task {n} GPU(s) but the job gives each task {p}"
            )),
            None => Err(format!(
                "gpu-bind {what} needs the same GPU count for every task (give gpus-per-task)"
            )),
        }
    };
    match &bind.mode {
        GpuBindMode::Closest | GpuBindMode::None => Ok(None),
        GpuBindMode::PerTask(n) => want(*n, "per_task").map(|_| None),
        GpuBindMode::Single(1) => want(1, "single:1").map(|_| None),
        GpuBindMode::Single(n) => Err(format!(
            "gpu-bind single:{n} puts {n} tasks on one GPU; Muster never shares a GPU between tasks"
        )),
        GpuBindMode::MapGpu(list) => {
            want(1, "map_gpu")?;
            list.iter()
                .map(|&i| {
                    (i < 64).then(|| 1u64 << i).ok_or_else(|| {
                        format!("gpu-bind map_gpu names GPU {i}; at most 64 GPUs per node")
                    })
                })
                .collect::<Result<Vec<u64>, String>>()
                .map(Some)
        }
        GpuBindMode::MaskGpu(list) => {
            for m in list {
                want(m.count_ones(), "mask_gpu")?;
            }
            Ok(Some(list.clone()))
        }
    }
}

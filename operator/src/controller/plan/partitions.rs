//! The Partitions' statuses: node and GPU counts, states, pending jobs.

use super::*;

#[allow(clippy::too_many_arguments)]
pub(super) fn partition_statuses(
    inp: &Inputs<'_>,
    bind: &BindCtx,
    table: &PartitionTable,
    snap: &Snapshot,
    decisions: &Decisions,
    works: &[Work<'_>],
    gauges: &mut Gauges,
    mem: &mut PlanMemory,
    cfg: &PlanSettings,
) -> Vec<PartitionWrite> {
    let now = inp.now;
    // GPUs held per node (running jobs, holds, and this cycle's starts).
    let mut used: HashMap<u32, HashSet<u32>> = HashMap::default();
    for r in &snap.running {
        for t in &r.tasks {
            used.entry(t.node)
                .or_default()
                .extend(t.gpus.iter().copied());
        }
    }
    for s in &decisions.starts {
        for t in &s.tasks {
            used.entry(t.node)
                .or_default()
                .extend(t.gpus.iter().copied());
        }
    }
    let mut counts: HashMap<&str, (u32, u32)> = HashMap::default();
    for w in works {
        if w.skip || w.is_parent || w.job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(p) = w.st.partition.as_deref() else {
            continue;
        };
        let e = counts.entry(p).or_default();
        match w.st.state {
            Some(JobState::Pending) | None => e.0 += 1,
            Some(JobState::Running) => e.1 += 1,
            _ => {}
        }
    }
    let mut out = Vec::new();
    for p in inp.partitions {
        let name = p.name_any();
        let mut st = PartitionStatus {
            observed_generation: p.metadata.generation,
            ..Default::default()
        };
        let mut conds: Vec<Condition> = Vec::new();
        let prev = p.status.as_ref();
        let prev_conds = prev.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
        let mk = |t: &str, on: bool, reason: &str, msg: String| {
            let status = if on { "True" } else { "False" };
            Condition {
                type_: t.into(),
                status: status.into(),
                reason: status::condition_reason(reason),
                message: status::clip(&msg),
                observed_generation: p.metadata.generation,
                last_transition_time: prev_conds
                    .iter()
                    .find(|c| c.type_ == t && c.status == status)
                    .map(|c| c.last_transition_time.clone())
                    .unwrap_or_else(|| time(now)),
            }
        };
        if let Some(&pid) = table.by_name.get(&name) {
            let cp = &table.parts[pid as usize];
            let mut names = Vec::new();
            let (mut total, mut alloc, mut bad) = (0u32, 0u32, 0u32);
            for (ni, n) in inp.nodes.nodes.iter().enumerate() {
                if !translate::in_partition(cp, n) {
                    continue;
                }
                names.push(n.name.clone());
                let u = used.get(&(ni as u32));
                for g in &n.gpus {
                    total += 1;
                    if !g.healthy {
                        bad += 1;
                    }
                    if u.is_some_and(|u| u.contains(&g.index)) {
                        alloc += 1;
                    }
                }
            }
            st.nodes = names.len() as u32;
            st.node_list =
                (!names.is_empty()).then(|| muster_crds::slurm::hostlist::compress_sorted(&names));
            st.gpus_total = total;
            st.gpus_allocated = alloc;
            st.gpus_unhealthy = bad;
            let (pend, run) = counts.get(name.as_str()).copied().unwrap_or_default();
            st.pending_jobs = pend;
            st.running_jobs = run;
            for (s, v) in [("total", total), ("allocated", alloc), ("unhealthy", bad)] {
                gauges.gpus.insert((name.clone(), s.into()), u64::from(v));
            }
            let state = p.state();
            let binding = bind.by_partition.get(&name);
            st.gpu_binding = binding.and_then(|b| b.as_ref().ok().copied());
            conds.push(if let Some(Err(why)) = binding {
                mk(
                    "Ready",
                    false,
                    "GpuBindingUnavailable",
                    format!("gpuBinding is dra, but {why}"),
                )
            } else if state == PartitionState::Up {
                mk(
                    "Ready",
                    true,
                    "Up",
                    format!("{} node(s), {total} GPU(s)", st.nodes),
                )
            } else {
                mk(
                    "Ready",
                    false,
                    &format!("{state:?}"),
                    format!("partition is {state:?}"),
                )
            });
        } else {
            let errs = table.invalid.get(&name).cloned().unwrap_or_default();
            conds.push(mk(
                "Ready",
                false,
                "InvalidSpec",
                translate::join_errors(&errs),
            ));
        }
        if table.default_conflict.contains(&name) {
            let msg = format!(
                "partitions {} all claim default: true; new jobs without a partition go to {} (pending jobs keep theirs)",
                table.default_conflict.join(", "),
                table.default_conflict[0]
            );
            // Shown in `kubectl get partitions` (the Ready column) as well as in its own
            // condition.
            conds.retain(|c| c.type_ != "Ready");
            conds.push(mk("Ready", false, "DefaultConflict", msg.clone()));
            conds.push(mk("DefaultConflict", true, "SeveralDefaults", msg));
        }
        st.conditions = conds;
        let write = match prev {
            None => true,
            Some(prev) if *prev == st => false,
            Some(prev) => {
                let hard = |s: &PartitionStatus| {
                    let mut s = s.clone();
                    s.gpus_allocated = 0;
                    s.pending_jobs = 0;
                    s.running_jobs = 0;
                    for c in &mut s.conditions {
                        c.message.clear();
                    }
                    s
                };
                let last = mem
                    .last_partition_write
                    .get(&name)
                    .copied()
                    .unwrap_or(i64::MIN);
                hard(prev) != hard(&st) || now.saturating_sub(last) >= cfg.status_refresh_secs
            }
        };
        if write {
            out.push(PartitionWrite { name, status: st });
        }
    }
    out
}

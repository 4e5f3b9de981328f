//! From a trace and a cluster to the jobs the engine replays: requests shaped by the gang
//! rule, time limits resolved, the clock moved so the first submit is second 0 (and divided
//! by `--speedup`), and jobs the cluster can never hold rejected up front (the same way for
//! every policy).

use std::collections::BTreeMap;

use muster_operator::core::priority::{size_fraction, spans_nodes};
use muster_operator::core::shape::normalize;
use muster_operator::core::tree::in_partition;
use muster_operator::core::{ArrayTask, Partition, PendingJob};

use super::engine::{Cluster, SimJob, Workload, preemptive};
use super::shape::{GangRule, LimitRule, limit_for, request_for};
use super::trace::Trace;
use super::trace::TraceLimit;

/// How trace jobs become requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    /// GPU counts to gangs.
    pub gang: GangRule,
    /// Limits for jobs without one.
    pub limit: LimitRule,
    /// The `auto` limit's factor.
    pub limit_factor: f64,
    /// Submit times are divided by this (arrivals come faster; run times are unchanged).
    pub speedup: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            gang: GangRule::Nodes,
            limit: LimitRule::Auto,
            limit_factor: 1.5,
            speedup: 1.0,
        }
    }
}

/// Builds the workload of `trace` on `cl`.
pub fn build(trace: &Trace, cl: &Cluster, rules: &Rules) -> Workload {
    let partitions: Vec<Partition> = if trace.partitions.is_empty() {
        vec![Partition::new("gpu", cl.topology.clone())]
    } else {
        trace
            .partitions
            .iter()
            .map(|p| {
                let mut p = p.partition.clone();
                if p.topology.is_empty() {
                    p.topology = cl.topology.clone();
                }
                p
            })
            .collect()
    };
    let default_part = if trace.partitions.is_empty() {
        Some(0)
    } else {
        trace
            .partitions
            .iter()
            .position(|p| p.default)
            .map(|p| p as u32)
    };
    // GPUs and nodes of each partition, and its largest node.
    let sizes: Vec<(u64, u64, u32)> = partitions
        .iter()
        .map(|p| {
            cl.nodes
                .iter()
                .filter(|n| in_partition(n, p))
                .fold((0, 0, 0), |(g, c, m), n| {
                    (g + n.gpus.len() as u64, c + 1, m.max(n.gpus.len() as u32))
                })
        })
        .collect();
    // The core's widest node (any partition): what makes a request a gang for priority.
    let widest = cl
        .nodes
        .iter()
        .map(|n| n.gpus.len() as u32)
        .max()
        .unwrap_or(0);
    let first = trace.jobs.first().map(|j| j.submit).unwrap_or(0);
    let speed = if rules.speedup > 0.0 {
        rules.speedup
    } else {
        1.0
    };
    let mut jobs = Vec::with_capacity(trace.jobs.len());
    for (i, tj) in trace.jobs.iter().enumerate() {
        let mut request = request_for(&tj.ask, rules.gang, cl.gpus_per_node);
        let partition = if trace.partitions.is_empty() {
            Some(0)
        } else {
            match &tj.partition {
                Some(name) => partitions
                    .iter()
                    .position(|p| p.name == *name)
                    .map(|p| p as u32),
                None => default_part,
            }
        };
        // A BatchJob spec without `time` runs with its partition's default (else maximum)
        // time, as on a cluster; the run's rule decides only where neither is set.
        let partition_limit = partition
            .and_then(|p| partitions.get(p as usize))
            .is_some_and(|p| p.default_time.is_some() || p.max_time.is_some());
        request.time_limit = if tj.limit == TraceLimit::Partition && partition_limit {
            None
        } else {
            Some(limit_for(
                tj.limit,
                tj.runtime,
                rules.limit,
                rules.limit_factor,
            ))
        };
        let submit = ((tj.submit - first) as f64 / speed).round() as i64;
        let id = i as u64 + 1;
        let mut pending = PendingJob::new(id, submit, request);
        pending.name = tj.name.clone().unwrap_or_default();
        pending.namespace = tj.namespace.clone().unwrap_or_else(|| "default".into());
        pending.partition = partition;
        pending.nice = tj.nice;
        pending.priority = tj.priority;
        pending.hold = tj.hold;
        // On the replay's clock, as submit times are.
        pending.begin_time = tj
            .begin
            .map(|b| ((b - first) as f64 / speed).round() as i64);
        pending.dependency = tj.dependency.clone();
        pending.user = tj.user.clone();
        let mut min_gpus = 0;
        let mut size = 0.0;
        let mut limit = None;
        let mut gang = false;
        let mut reject = None;
        match partition {
            _ if tj.cancel => {
                reject = Some("Cancelled: spec.cancel is set, so the job never runs".into());
            }
            None => {
                reject = Some(format!(
                    "PartitionConfig: partition {:?} is not defined by the trace",
                    tj.partition.as_deref().unwrap_or("")
                ));
            }
            Some(p) => {
                let part = &partitions[p as usize];
                let (pg, pn, max_node) = sizes[p as usize];
                limit = part.effective_limit(pending.request.time_limit);
                match normalize(&pending.request, part) {
                    Err(m) => reject = Some(format!("BadConstraints: {m}")),
                    Ok(d) => {
                        gang = spans_nodes(&d, widest);
                        min_gpus = u32::try_from(d.min_gpus()).unwrap_or(u32::MAX);
                        size = size_fraction(&d, pg, pn);
                        // A unit (a node's share of a gang, or one task) must fit on one node.
                        if d.min_gpus() > pg
                            || u64::from(d.min_nodes) > pn
                            || d.unit.gpus.max(d.node.gpus) > max_node
                        {
                            reject = Some(format!(
                                "BadConstraints: {} GPU(s) on at least {} node(s) do not fit partition {} ({} nodes, {} GPUs)",
                                d.min_gpus(),
                                d.min_nodes,
                                part.name,
                                pn,
                                pg
                            ));
                        }
                    }
                }
            }
        }
        jobs.push(SimJob {
            requeue: tj.requeue,
            array: tj.array.clone(),
            trace_id: tj.id.clone(),
            submit,
            runtime: tj.runtime,
            pending,
            min_gpus,
            size_fraction: size,
            limit,
            gang,
            reject,
        });
    }
    // Speedup rounding keeps the order; the engine needs it sorted all the same.
    jobs.sort_by_key(|j| j.submit);
    for (i, j) in jobs.iter_mut().enumerate() {
        j.pending.id = i as u64 + 1;
    }
    // Array elements: the array's job id is its first element's (as the operator gives the
    // array the id its elements share).
    let mut array_ids: BTreeMap<String, u64> = BTreeMap::new();
    for j in &jobs {
        if let Some(a) = &j.array {
            array_ids.entry(a.parent.clone()).or_insert(j.pending.id);
        }
    }
    for j in &mut jobs {
        if let Some(a) = &j.array {
            j.pending.array = Some(ArrayTask {
                array_job_id: array_ids[&a.parent],
                task_id: a.index,
                max_running: a.max_running,
            });
        }
    }
    Workload {
        preemptive: preemptive(&partitions),
        dependencies: jobs.iter().any(|j| j.pending.dependency.is_some()),
        jobs,
        partitions,
    }
}

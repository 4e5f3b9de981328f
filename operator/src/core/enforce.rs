//! Running jobs that must stop: past their time limit (TIMEOUT) or on a node that is not
//! ready or a GPU that is unhealthy or gone (NODE_FAIL). Jobs already being stopped are left
//! alone. [`schedule`](super::schedule()) includes these in its decisions; the operator may
//! also call [`stops`] on its own (e.g. on a node event) without a full cycle.

use super::model::{JobState, RunningJob, Snapshot, Stop};
use super::node::Node;

/// Why `job` must stop now, if it must.
pub fn stop_for(snap: &Snapshot, job: &RunningJob, now: i64) -> Option<Stop> {
    if job.stopping_since.is_some() {
        return None;
    }
    for t in &job.tasks {
        let Some(node) = snap.nodes.get(t.node as usize) else {
            return Some(Stop {
                job: job.id,
                state: JobState::NodeFail,
                message: format!("node #{} no longer exists", t.node),
            });
        };
        if !node.ready {
            return Some(Stop {
                job: job.id,
                state: JobState::NodeFail,
                message: format!("node {} is not ready", node.name),
            });
        }
        for g in &t.gpus {
            match node.gpus.iter().find(|x| x.index == *g) {
                None => {
                    return Some(Stop {
                        job: job.id,
                        state: JobState::NodeFail,
                        message: format!("GPU {g} of node {} is gone", node.name),
                    });
                }
                Some(x) if !x.healthy => {
                    return Some(Stop {
                        job: job.id,
                        state: JobState::NodeFail,
                        message: format!("GPU {g} ({}) of node {} is unhealthy", x.uuid, node.name),
                    });
                }
                _ => {}
            }
        }
    }
    if let Some(end) = job.end_time()
        && end <= now
    {
        return Some(Stop {
            job: job.id,
            state: JobState::Timeout,
            message: format!("time limit of {}s reached", job.time_limit.unwrap_or(0)),
        });
    }
    None
}

/// Each ready node's healthy GPU indices as a bit set (`None`: not ready, or an index past
/// 63). The common case — a job on ready nodes and healthy GPUs — then costs a bit test per
/// GPU instead of a search of the node's GPU list (which dominated cycles on large
/// clusters); anything else goes through [`stop_for`], which says why.
pub fn healthy_masks(nodes: &[Node]) -> Vec<Option<u64>> {
    nodes
        .iter()
        .map(|n| {
            if !n.ready {
                return None;
            }
            n.gpus.iter().try_fold(0u64, |m, g| {
                (g.index < 64).then(|| if g.healthy { m | 1 << g.index } else { m })
            })
        })
        .collect()
}

/// Whether every task of `j` is on a ready node and healthy GPUs, by [`healthy_masks`]
/// (false also when the masks cannot tell: then [`stop_for`] decides).
pub fn placed_well(healthy: &[Option<u64>], j: &RunningJob) -> bool {
    j.tasks.iter().all(|t| match healthy.get(t.node as usize) {
        Some(Some(m)) => t.gpus.iter().all(|&g| g < 64 && m & (1 << g) != 0),
        _ => false,
    })
}

/// Every running job that must stop now, by job id.
pub fn stops(snap: &Snapshot, now: i64) -> Vec<Stop> {
    let healthy = healthy_masks(&snap.nodes);
    let mut out: Vec<Stop> = snap
        .running
        .iter()
        .filter_map(|j| {
            let expired = j.end_time().is_some_and(|end| end <= now);
            if j.stopping_since.is_some() || (!expired && placed_well(&healthy, j)) {
                None
            } else {
                stop_for(snap, j, now)
            }
        })
        .collect();
    out.sort_by_key(|s| s.job);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::cluster_spec::ClusterSpec;
    use crate::core::model::TaskAlloc;

    fn snap() -> Snapshot {
        Snapshot {
            nodes: ClusterSpec::sandbox().nodes().unwrap().into(),
            ..Default::default()
        }
    }

    fn job(id: u64, node: u32, gpu: u32, start: i64, limit: Option<u64>) -> RunningJob {
        RunningJob {
            id,
            start_time: start,
            time_limit: limit,
            tasks: vec![TaskAlloc {
                node,
                gpus: vec![gpu],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn timeouts_and_node_failures_are_found() {
        let mut s = snap();
        let nodes = std::sync::Arc::make_mut(&mut s.nodes);
        nodes[1].ready = false;
        nodes[2].gpus[3].healthy = false;
        s.running = vec![
            job(1, 0, 0, 0, Some(100)),
            job(2, 0, 1, 0, Some(99)),
            job(3, 1, 0, 0, None),
            job(4, 2, 3, 0, None),
            job(5, 2, 4, 0, None),
            job(6, 3, 9, 0, None),
        ];
        s.running[0].stopping_since = Some(50);
        let st = stops(&s, 100);
        let got: Vec<(u64, JobState)> = st.iter().map(|s| (s.job, s.state)).collect();
        assert_eq!(
            got,
            [
                (2, JobState::Timeout),
                (3, JobState::NodeFail),
                (4, JobState::NodeFail),
                (6, JobState::NodeFail)
            ]
        );
        assert!(st[2].message.contains("unhealthy"), "{}", st[2].message);
    }

    #[test]
    fn cordoned_nodes_do_not_kill_jobs() {
        let mut s = snap();
        std::sync::Arc::make_mut(&mut s.nodes)[0].unschedulable = true;
        s.running = vec![job(1, 0, 0, 0, None)];
        assert!(stops(&s, 10).is_empty());
    }
}

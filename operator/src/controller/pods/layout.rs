//! Where an admission's tasks sit: its nodes in order, each node's share of the allocation,
//! and the layout all its pods share.

use std::collections::BTreeMap;

use kube::ResourceExt;
use muster_crds::v1alpha1::{BatchJob, TaskAllocation};

use super::hostname;

/// Node names in node-rank order (first occurrence of each node rank).
pub fn job_nodes(tasks: &[TaskAllocation]) -> Vec<String> {
    let mut by_rank: BTreeMap<u32, &str> = BTreeMap::new();
    for t in tasks {
        by_rank.entry(t.node_rank).or_insert(&t.node);
    }
    by_rank.into_values().map(str::to_string).collect()
}

/// The job's node indices (`node_rank`s), in order: one pod each.
pub fn node_ranks(tasks: &[TaskAllocation]) -> Vec<u32> {
    let mut v: Vec<u32> = tasks.iter().map(|t| t.node_rank).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The job's nodes as a Slurm hostlist (`gpu[001-004]`), in node-rank order.
pub fn node_list(tasks: &[TaskAllocation]) -> String {
    muster_crds::slurm::hostlist::compress(job_nodes(tasks))
}

/// The host names of the node pods, in node order (what `SLURM_JOB_NODELIST` lists).
pub fn node_hosts(job: &str, attempt: u32, tasks: &[TaskAllocation]) -> Vec<String> {
    node_ranks(tasks)
        .into_iter()
        .map(|n| hostname(job, attempt, n))
        .collect()
}

/// Node `node`'s share of the allocation, as its pod holds it: the node, the sum of its tasks'
/// CPUs and memory, their GPUs (each once, NVML index order, UUIDs alongside when every GPU
/// has one), `rank` the node's first task's, `local_rank` 0.
pub fn node_share(tasks: &[TaskAllocation], node: u32) -> Option<TaskAllocation> {
    let on: Vec<&TaskAllocation> = tasks.iter().filter(|t| t.node_rank == node).collect();
    share_of(node, &on)
}

/// The share of node `node` holding the tasks `on` (see [`node_share`]).
fn share_of(node: u32, on: &[&TaskAllocation]) -> Option<TaskAllocation> {
    let first = on.iter().min_by_key(|t| t.rank)?;
    let mut gpus: BTreeMap<u32, String> = BTreeMap::new();
    let mut all_uuids = true;
    for t in on {
        all_uuids &= t.gpu_uuids.len() == t.gpus.len();
        for (i, g) in t.gpus.iter().enumerate() {
            let u = t.gpu_uuids.get(i).cloned().unwrap_or_default();
            gpus.entry(*g).or_insert(u);
        }
    }
    Some(TaskAllocation {
        rank: first.rank,
        node: first.node.clone(),
        node_rank: node,
        local_rank: 0,
        cpu_millis: on.iter().map(|t| t.cpu_millis).sum(),
        memory_mib: on.iter().map(|t| t.memory_mib).sum(),
        gpus: gpus.keys().copied().collect(),
        gpu_uuids: if all_uuids {
            gpus.into_values().collect()
        } else {
            Vec::new()
        },
        pod: first.pod.clone(),
    })
}

/// What all node pods of one admission share, computed in one pass over its tasks: every pod
/// needs the whole job's node list, tasks and CPUs per node, and scanning the tasks for each
/// node of each pod made a 512-node gang's pods cost 512 x 512 x 4,096 steps.
#[derive(Clone, Debug)]
pub struct JobLayout {
    /// The node indices (`node_rank`s), in order: one pod each.
    pub(super) ranks: Vec<u32>,
    /// Each node's share ([`node_share`]), in `ranks` order.
    pub(super) shares: Vec<TaskAllocation>,
    /// Tasks per node, in `ranks` order.
    pub(super) counts: Vec<u32>,
    /// CPUs per node (`SLURM_CPUS_ON_NODE`), in `ranks` order.
    pub(super) cpus: Vec<u32>,
    /// The pods' host names, in `ranks` order.
    pub(super) hosts: Vec<String>,
    /// `hosts` as a Slurm hostlist (`SLURM_JOB_NODELIST`).
    pub(super) hostlist: String,
}

impl JobLayout {
    /// The layout of `job`'s admission `attempt` with `tasks`.
    pub fn new(job: &BatchJob, attempt: u32, tasks: &[TaskAllocation]) -> JobLayout {
        let mut by_node: BTreeMap<u32, Vec<&TaskAllocation>> = BTreeMap::new();
        for t in tasks {
            by_node.entry(t.node_rank).or_default().push(t);
        }
        let cpt = job.spec.cpus_per_task.unwrap_or(1).max(1);
        let name = job.name_any();
        let n = by_node.len();
        let mut l = JobLayout {
            ranks: Vec::with_capacity(n),
            shares: Vec::with_capacity(n),
            counts: Vec::with_capacity(n),
            cpus: Vec::with_capacity(n),
            hosts: Vec::with_capacity(n),
            hostlist: String::new(),
        };
        for (node, on) in by_node {
            let count = on.len() as u32;
            let millis: u64 = on.iter().map(|t| t.cpu_millis).sum();
            l.ranks.push(node);
            l.counts.push(count);
            l.cpus.push(if millis == 0 {
                count * cpt
            } else {
                millis.div_ceil(1000).min(u64::from(u32::MAX)) as u32
            });
            l.hosts.push(hostname(&name, attempt, node));
            if let Some(s) = share_of(node, &on) {
                l.shares.push(s);
            }
        }
        l.hostlist = muster_crds::slurm::hostlist::compress(l.hosts.iter().cloned());
        l
    }

    /// The node indices, in order.
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// Node `node`'s share ([`node_share`]).
    pub fn share(&self, node: u32) -> Option<&TaskAllocation> {
        self.position(node).map(|i| &self.shares[i])
    }

    /// Each node's share, in node order.
    pub fn shares(&self) -> &[TaskAllocation] {
        &self.shares
    }

    pub(super) fn position(&self, node: u32) -> Option<usize> {
        self.ranks.binary_search(&node).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::gang;
    use super::*;

    #[test]
    fn node_shares_sum_their_tasks_and_name_each_gpu_once() {
        let mut tasks = gang();
        // Two tasks sharing one GPU (more tasks than GPUs).
        tasks[1].gpus = vec![2];
        tasks[1].gpu_uuids = vec!["GPU-0".into()];
        let s = node_share(&tasks, 0).unwrap();
        assert_eq!((s.cpu_millis, s.memory_mib), (8000, 16384));
        assert_eq!(s.gpus, vec![2]);
        assert_eq!(s.gpu_uuids, vec!["GPU-0"]);
        assert_eq!(node_share(&tasks, 5), None);
        assert_eq!(node_list(&tasks), "gpu[001-002]");
        assert_eq!(node_hosts("run2", 1, &tasks), ["run2-0", "run2-1"]);
    }
}

//! Where a step's tasks go: Slurm 22.05's rules, on the job's nodes.
//!
//! [`resolve`] follows srun's `_opt_verify` (how `-n`, `-N`, `--ntasks-per-node` and `-w`
//! given on the command line or inherited from the job's environment combine, with Slurm's
//! warnings), then picks the step's nodes (the `-w` nodes first, then the job's nodes in
//! order) and lays tasks out with Slurm's `block` distribution (`_task_layout_block`: a
//! cyclic pass over the nodes to decide how many tasks each node gets — at most its CPUs
//! divided by `--cpus-per-task` until every node is full — then consecutive ranks per node).
//! Checked against real Slurm (`srun -n 3` in a 2×2 job gives `2,1`; `-n 1` warns and uses
//! one node; `-N 1` with four tasks on two CPUs is refused) by the tests below.

/// A count and whether it came from the environment (`SLURM_NTASKS`, …) rather than the
/// command line: Slurm treats both alike except in its messages.
pub type Given<T> = Option<T>;

/// The step request after option parsing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `-n`.
    pub ntasks: Given<u32>,
    /// `-N MIN[-MAX]`.
    pub nodes: Given<(u32, Option<u32>)>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Given<u32>,
    /// `-c`.
    pub cpus_per_task: Given<u32>,
    /// `-w` (expanded, in the order given).
    pub nodelist: Vec<String>,
    /// `-O`: more tasks than CPUs allowed.
    pub overcommit: bool,
}

/// The job's allocation as the step sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Job id (for messages).
    pub job_id: String,
    /// Node names in order.
    pub nodes: Vec<String>,
    /// CPUs of the job on each node.
    pub cpus: Vec<u32>,
}

/// A laid-out step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The step's nodes, in job order.
    pub nodes: Vec<String>,
    /// Tasks on each of them.
    pub tasks: Vec<u32>,
    /// `--ntasks-per-node` if it was honoured.
    pub ntasks_per_node: Option<u32>,
    /// Slurm's warnings (`srun: Warning: ...` lines, without the prefix).
    pub warnings: Vec<String>,
}

impl Layout {
    /// Tasks in all.
    pub fn total(&self) -> u32 {
        self.tasks.iter().sum()
    }

    /// Global ranks of node `i`'s tasks.
    pub fn ranks(&self, i: usize) -> std::ops::Range<u32> {
        let start: u32 = self.tasks[..i].iter().sum();
        start..start + self.tasks[i]
    }
}

/// Slurm's `2(x3),1` for per-node counts.
pub fn compress_counts(counts: &[u32]) -> String {
    muster_operator::controller::pods::tasks_per_node(counts)
}

/// Reads `2(x3),1` (as in `SLURM_TASKS_PER_NODE`, `SLURM_JOB_CPUS_PER_NODE`).
pub fn expand_counts(s: &str) -> Result<Vec<u32>, String> {
    let bad = || format!("{s:?} is not a per-node count list such as 2(x3),1");
    let mut out = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        let (n, reps) = match item.split_once('(') {
            Some((n, rest)) => {
                let reps = rest
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|r| r.parse::<u32>().ok())
                    .filter(|r| *r >= 1)
                    .ok_or_else(bad)?;
                (n, reps)
            }
            None => (item, 1),
        };
        let n = n.parse::<u32>().map_err(|_| bad())?;
        if out.len() + reps as usize > 1 << 20 {
            return Err(bad());
        }
        out.extend(std::iter::repeat_n(n, reps as usize));
    }
    Ok(out)
}

/// Lays out a step (see the [module docs](self)); `Err` is Slurm's message without the
/// `srun: error: ` prefix, after the warnings Slurm prints before it.
pub fn resolve(alloc: &Allocation, req: &Request) -> Result<Layout, (String, Vec<String>)> {
    let mut warnings = Vec::new();
    resolve_into(alloc, req, &mut warnings)
        .map(|mut l| {
            l.warnings = warnings.clone();
            l
        })
        .map_err(|e| (e, warnings))
}

fn resolve_into(
    alloc: &Allocation,
    req: &Request,
    warnings: &mut Vec<String>,
) -> Result<Layout, String> {
    let mut ntasks = req.ntasks;
    let mut tpn = req.ntasks_per_node;
    let (mut min_nodes, mut max_nodes) = match req.nodes {
        Some((lo, hi)) => (Some(lo), hi),
        None => (None, None),
    };
    let cpt = req.cpus_per_task.unwrap_or(1).max(1);
    if matches!(ntasks, Some(0)) {
        return Err("invalid number of tasks (-n 0)".into());
    }
    if matches!(tpn, Some(0)) {
        return Err("ntasks-per-node is 0".into());
    }
    if let (Some(lo), Some(hi)) = (min_nodes, max_nodes)
        && lo > hi
    {
        return Err(format!("invalid number of nodes (-N {lo}-{hi})"));
    }
    let mut wanted: Vec<String> = Vec::new();
    for n in &req.nodelist {
        if !wanted.contains(n) {
            wanted.push(n.clone());
        }
    }
    if !wanted.is_empty() {
        let hl = wanted.len() as u32;
        min_nodes = Some(min_nodes.map_or(hl, |m| m.max(hl)));
    }
    let nodes_set = min_nodes.is_some();
    if nodes_set && (max_nodes.is_none() || max_nodes == min_nodes) && ntasks.is_none() {
        let m = min_nodes.unwrap_or(1);
        ntasks = Some(m * tpn.unwrap_or(1));
    } else if let (Some(m), Some(n)) = (min_nodes, ntasks) {
        if let Some(hi) = max_nodes
            && n < hi
        {
            max_nodes = Some(n);
        }
        let mut m = m;
        if n < m {
            warnings.push(format!(
                "can't run {n} processes on {m} nodes, setting nnodes to {n}"
            ));
            m = n;
            if let Some(hi) = max_nodes
                && m > hi
            {
                max_nodes = Some(m);
            }
            // Slurm pops the excess hosts off the end of the -w list.
            wanted.truncate(m as usize);
            min_nodes = Some(m);
        }
        if let Some(t) = tpn
            && m > 0
            && t != n / m
        {
            if n > t {
                warnings.push(format!(
                    "can't honor --ntasks-per-node set to {t} which doesn't match the requested tasks {n} with the number of requested nodes {m}. Ignoring --ntasks-per-node."
                ));
            }
            tpn = None;
        }
    }
    if let (Some(t), None) = (tpn, ntasks) {
        ntasks = Some(min_nodes.unwrap_or(1) * t);
    }
    let total_nodes = alloc.nodes.len() as u32;
    let ntasks = match ntasks {
        Some(n) => n,
        // Nothing said how many: one task per CPU of the allocation (srun's _set_ntasks).
        None => {
            let cnt: u32 = alloc.cpus.iter().map(|c| c / cpt).sum();
            cnt.max(total_nodes)
        }
    };
    let min = min_nodes.unwrap_or_else(|| ntasks.min(total_nodes)).max(1);
    if min > total_nodes {
        return Err(format!(
            "Only allocated {total_nodes} nodes asked for {min}"
        ));
    }
    for w in &wanted {
        if !alloc.nodes.contains(w) {
            return Err(format!(
                "Unable to create step for job {}: Requested node configuration is not available (node {w} is not in the job's allocation {})",
                alloc.job_id,
                muster_crds::slurm::hostlist::compress(&alloc.nodes)
            ));
        }
    }
    let step_cap = |count: u32, wanted: &[String]| -> Vec<usize> {
        // The -w nodes, then the job's other nodes in order, up to `count`; in job order.
        let mut chosen: Vec<usize> = alloc
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| wanted.contains(n))
            .map(|(i, _)| i)
            .collect();
        for i in 0..alloc.nodes.len() {
            if chosen.len() >= count as usize {
                break;
            }
            if !chosen.contains(&i) {
                chosen.push(i);
            }
        }
        chosen.sort_unstable();
        chosen
    };
    let cpus_of = |idx: &[usize]| -> u64 { idx.iter().map(|&i| u64::from(alloc.cpus[i])).sum() };
    let need = u64::from(ntasks) * u64::from(cpt);
    // With a range (-N 1-2), the fewest nodes whose CPUs hold the tasks.
    let hi = max_nodes.unwrap_or(min).clamp(min, total_nodes);
    let mut count = min;
    while count < hi && !req.overcommit && cpus_of(&step_cap(count, &wanted)) < need {
        count += 1;
    }
    let chosen = step_cap(count, &wanted);
    if !req.overcommit && cpus_of(&chosen) < need {
        return Err(format!(
            "Unable to create step for job {}: More processors requested than permitted",
            alloc.job_id
        ));
    }
    let cpus: Vec<u32> = chosen
        .iter()
        .map(|&i| {
            let mut c = (alloc.cpus[i] / cpt).max(1);
            if let Some(t) = tpn {
                // Slurm compares the per-task count with ntasks_per_node * cpus_per_task.
                c = c.min(t.saturating_mul(cpt));
            }
            c
        })
        .collect();
    let tasks = block(ntasks, &cpus);
    Ok(Layout {
        nodes: chosen.iter().map(|&i| alloc.nodes[i].clone()).collect(),
        tasks,
        ntasks_per_node: tpn,
        warnings: Vec::new(),
    })
}

/// Slurm's `_task_layout_block` without node packing: a fake cyclic pass decides the count
/// per node (each node up to its CPUs, then oversubscribing all alike).
fn block(ntasks: u32, cpus: &[u32]) -> Vec<u32> {
    let mut tasks = vec![0u32; cpus.len()];
    let mut placed = 0;
    let mut over = false;
    let mut j = 0;
    while placed < ntasks {
        let mut space = false;
        for (i, &c) in cpus.iter().enumerate() {
            if placed >= ntasks {
                break;
            }
            if j < c || over {
                tasks[i] += 1;
                placed += 1;
                if j + 1 < c {
                    space = true;
                }
            }
        }
        if !space {
            over = true;
        }
        j += 1;
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 2-node job of the oracle runs: 2 tasks and 2 CPUs per node.
    fn job() -> Allocation {
        Allocation {
            job_id: "1".into(),
            nodes: vec!["n001".into(), "n002".into()],
            cpus: vec![2, 2],
        }
    }

    /// What the job's environment gives srun (SLURM_NTASKS=4, SLURM_JOB_NUM_NODES=2,
    /// SLURM_NTASKS_PER_NODE=2).
    fn env() -> Request {
        Request {
            ntasks: Some(4),
            nodes: Some((2, None)),
            ntasks_per_node: Some(2),
            ..Default::default()
        }
    }

    #[test]
    fn counts_round_trip() {
        assert_eq!(expand_counts("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(compress_counts(&[2, 2, 2, 1]), "2(x3),1");
        assert_eq!(expand_counts("4").unwrap(), [4]);
        assert!(expand_counts("2(x0)").is_err());
        assert!(expand_counts("x").is_err());
    }

    #[test]
    fn the_default_step_is_the_job_layout() {
        let l = resolve(&job(), &env()).unwrap();
        assert_eq!((l.nodes.len(), l.tasks.clone()), (2, vec![2, 2]));
        assert!(l.warnings.is_empty());
        assert_eq!(l.ranks(1), 2..4);
    }

    // Each case below is what real Slurm 22.05 did for the same srun line in the same job.
    #[test]
    fn n3_is_two_then_one_and_drops_ntasks_per_node() {
        let l = resolve(
            &job(),
            &Request {
                ntasks: Some(3),
                ..env()
            },
        )
        .unwrap();
        assert_eq!(l.tasks, [2, 1]);
        assert_eq!(
            l.warnings,
            [
                "can't honor --ntasks-per-node set to 2 which doesn't match the requested tasks 3 with the number of requested nodes 2. Ignoring --ntasks-per-node."
            ]
        );
        assert_eq!(l.ntasks_per_node, None);
    }

    #[test]
    fn n1_uses_one_node_with_a_warning() {
        let l = resolve(
            &job(),
            &Request {
                ntasks: Some(1),
                ..env()
            },
        )
        .unwrap();
        assert_eq!((l.nodes, l.tasks), (vec!["n001".to_string()], vec![1]));
        assert_eq!(
            l.warnings,
            ["can't run 1 processes on 2 nodes, setting nnodes to 1"]
        );
    }

    #[test]
    fn one_node_for_four_tasks_is_too_many_processors() {
        let e = resolve(
            &job(),
            &Request {
                nodes: Some((1, None)),
                ..env()
            },
        )
        .unwrap_err();
        assert_eq!(
            e.0,
            "Unable to create step for job 1: More processors requested than permitted"
        );
        assert_eq!(
            e.1,
            [
                "can't honor --ntasks-per-node set to 2 which doesn't match the requested tasks 4 with the number of requested nodes 1. Ignoring --ntasks-per-node."
            ],
            "Slurm warns before the error"
        );
        let l = resolve(
            &job(),
            &Request {
                nodes: Some((1, None)),
                ntasks: Some(1),
                ..env()
            },
        )
        .unwrap();
        assert_eq!(l.tasks, [1]);
    }

    #[test]
    fn nodelist_adds_to_the_node_count() {
        let w = Request {
            nodelist: vec!["n002".into()],
            ..env()
        };
        let l = resolve(&job(), &w).unwrap();
        assert_eq!(l.tasks, [2, 2], "-N 2 from the job still applies");
        let l = resolve(
            &job(),
            &Request {
                ntasks: Some(1),
                ..w
            },
        )
        .unwrap();
        assert_eq!((l.nodes, l.tasks), (vec!["n002".to_string()], vec![1]));
        let e = resolve(
            &job(),
            &Request {
                nodelist: vec!["n009".into()],
                ..env()
            },
        )
        .unwrap_err()
        .0;
        assert!(e.contains("n009") && e.contains("n[001-002]"), "{e}");
    }

    #[test]
    fn more_nodes_than_allocated_and_more_cpus_are_refused() {
        assert_eq!(
            resolve(
                &job(),
                &Request {
                    nodes: Some((3, None)),
                    ..env()
                }
            )
            .unwrap_err()
            .0,
            "Only allocated 2 nodes asked for 3"
        );
        assert!(
            resolve(
                &job(),
                &Request {
                    ntasks: Some(5),
                    ..env()
                }
            )
            .is_err()
        );
        assert!(
            resolve(
                &job(),
                &Request {
                    cpus_per_task: Some(2),
                    ..env()
                }
            )
            .is_err()
        );
        let o = Request {
            ntasks: Some(5),
            overcommit: true,
            ..env()
        };
        assert_eq!(resolve(&job(), &o).unwrap().tasks, [3, 2]);
    }

    #[test]
    fn ntasks_per_node_with_nodes_and_no_ntasks_multiplies() {
        // Open MPI: srun --ntasks-per-node=1 --nodes=1 --nodelist=n002 --ntasks=1 orted
        let r = Request {
            ntasks: Some(1),
            nodes: Some((1, None)),
            ntasks_per_node: Some(1),
            nodelist: vec!["n002".into()],
            ..Default::default()
        };
        let l = resolve(&job(), &r).unwrap();
        assert_eq!((l.nodes, l.tasks), (vec!["n002".to_string()], vec![1]));
        assert!(l.warnings.is_empty());
        let r = Request {
            ntasks: None,
            nodes: Some((2, None)),
            ntasks_per_node: Some(1),
            ..Default::default()
        };
        assert_eq!(resolve(&job(), &r).unwrap().tasks, [1, 1]);
    }

    #[test]
    fn block_fills_cyclically_then_numbers_in_blocks() {
        assert_eq!(block(5, &[4, 4]), [3, 2]);
        assert_eq!(block(3, &[1, 4]), [1, 2]);
        assert_eq!(block(6, &[1, 1]), [3, 3], "oversubscribes evenly");
    }
}

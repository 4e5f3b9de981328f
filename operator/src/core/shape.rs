//! From a job's sbatch-style request to a gang *shape*: what one placement unit needs and how
//! many units go on how many nodes. See the [module docs](super#job-shapes) for the rules.

use super::model::{JobRequest, MemoryRequest, Partition};

/// CPU millicores, memory MiB and a GPU count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Res {
    /// GPUs.
    pub gpus: u32,
    /// CPU millicores.
    pub cpu: u64,
    /// Memory MiB.
    pub mem: u64,
}

impl Res {
    /// `self + o`.
    pub fn plus(self, o: Res) -> Res {
        Res {
            gpus: self.gpus + o.gpus,
            cpu: self.cpu + o.cpu,
            mem: self.mem + o.mem,
        }
    }

    /// `self - o`, saturating at zero.
    pub fn minus(self, o: Res) -> Res {
        Res {
            gpus: self.gpus.saturating_sub(o.gpus),
            cpu: self.cpu.saturating_sub(o.cpu),
            mem: self.mem.saturating_sub(o.mem),
        }
    }

    /// Component-wise minimum.
    pub fn min(self, o: Res) -> Res {
        Res {
            gpus: self.gpus.min(o.gpus),
            cpu: self.cpu.min(o.cpu),
            mem: self.mem.min(o.mem),
        }
    }

    /// `self * k`.
    pub fn times(self, k: u32) -> Res {
        Res {
            gpus: self.gpus * k,
            cpu: self.cpu * u64::from(k),
            mem: self.mem * u64::from(k),
        }
    }

    /// Whether every component of `o` fits in `self`.
    pub fn covers(self, o: Res) -> bool {
        self.gpus >= o.gpus && self.cpu >= o.cpu && self.mem >= o.mem
    }
}

/// How units become nodes and tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One unit per node; each node runs `tasks_per_node` tasks that split the unit.
    /// Node count in `[min_nodes, max_nodes]`, as many as are free within the range.
    Bundles {
        /// Tasks on every node.
        tasks_per_node: u32,
    },
    /// `total` units packed onto as few nodes as possible (at most `max_per_node` each),
    /// node count in `[min_nodes, max_nodes]`.
    Units {
        /// Units in the job.
        total: u32,
        /// Most units on one node.
        max_per_node: u32,
        /// All units on a node form one task (`--gpus=N` alone); else `tasks_per_unit` tasks
        /// per unit.
        merge: bool,
        /// Tasks of one unit (1 but for `--gpus=G --ntasks=N` where N does not divide G:
        /// `gcd(G, N)` units of `N / gcd` tasks).
        tasks_per_unit: u32,
    },
}

/// A normalized gang request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Demand {
    /// What one unit needs.
    pub unit: Res,
    /// What every node of the placement takes once, on top of its units: the memory of
    /// `--mem` with `--ntasks`, and the GPUs of `--gpus-per-node`/`--gres` with `--ntasks`
    /// when the tasks per node are not fixed (with the CPUs and memory those GPUs bring).
    pub node: Res,
    /// `--mem=0`: the node's whole memory, so nothing else may hold memory there.
    pub whole_mem: bool,
    /// Whole nodes.
    pub exclusive: bool,
    /// Units and tasks.
    pub mode: Mode,
    /// Fewest nodes.
    pub min_nodes: u32,
    /// Most nodes.
    pub max_nodes: u32,
}

impl Demand {
    /// Units the placement must find (bundles: the minimum node count).
    pub fn need(&self) -> u32 {
        match self.mode {
            Mode::Bundles { .. } => self.min_nodes,
            Mode::Units { total, .. } => total,
        }
    }

    /// Most units one node may take.
    pub fn per_node_cap(&self) -> u32 {
        match self.mode {
            Mode::Bundles { .. } => 1,
            Mode::Units { max_per_node, .. } => max_per_node,
        }
    }

    /// GPUs of the smallest placement (for quick rejections).
    pub fn min_gpus(&self) -> u64 {
        u64::from(self.unit.gpus) * u64::from(self.need())
            + u64::from(self.node.gpus) * u64::from(self.min_nodes)
    }

    /// CPU millicores of the smallest placement.
    pub fn min_cpu(&self) -> u64 {
        self.unit.cpu * u64::from(self.need()) + self.node.cpu * u64::from(self.min_nodes)
    }

    /// Number of tasks for `units` units on one node.
    pub fn tasks_on_node(&self, units: u32) -> u32 {
        match self.mode {
            Mode::Bundles { tasks_per_node } => tasks_per_node,
            Mode::Units { merge: true, .. } => 1,
            Mode::Units { tasks_per_unit, .. } => units * tasks_per_unit,
        }
    }

    /// Tasks of the smallest placement (`--gpus=G` alone: one per node, so at least one).
    pub fn min_tasks(&self) -> u32 {
        match self.mode {
            Mode::Bundles { tasks_per_node } => self.min_nodes * tasks_per_node,
            Mode::Units {
                total, merge: true, ..
            } => self.min_nodes.max(1).min(total),
            Mode::Units {
                total,
                tasks_per_unit,
                ..
            } => total * tasks_per_unit,
        }
    }

    /// Units that fit in `avail` on a node of `total` capacity (ignoring which GPUs).
    #[inline]
    pub fn units_fitting(&self, avail: Res, total: Res, idle: bool) -> u32 {
        if self.exclusive && !idle {
            return 0;
        }
        // What the units may use once the node's own share is set aside (this is the hot
        // path of every placement search: no more than a subtraction per resource).
        let (Some(gpus), Some(cpu)) = (
            avail.gpus.checked_sub(self.node.gpus),
            avail.cpu.checked_sub(self.node.cpu),
        ) else {
            return 0;
        };
        let mem = if self.whole_mem {
            if avail.mem < total.mem {
                return 0;
            }
            u64::MAX
        } else {
            match avail.mem.checked_sub(self.node.mem) {
                Some(m) => m,
                None => return 0,
            }
        };
        let mut k = self.per_node_cap();
        if let Some(n) = gpus.checked_div(self.unit.gpus) {
            k = k.min(n);
        }
        if let Some(n) = cpu.checked_div(self.unit.cpu) {
            k = k.min(u32::try_from(n).unwrap_or(u32::MAX));
        }
        if self.unit.mem > 0 && !self.whole_mem {
            k = k.min(u32::try_from(mem / self.unit.mem).unwrap_or(u32::MAX));
        }
        k
    }

    /// What `units` units take from a node (memory: the whole node when `whole_mem`).
    pub fn take(&self, units: u32, total: Res) -> Res {
        let mut r = self.unit.times(units).plus(self.node);
        if self.whole_mem {
            r.mem = total.mem;
        }
        r
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Normalizes a request against its partition's defaults. Errors say what is contradictory.
/// The rules are the [module docs'](super#job-shapes).
pub fn normalize(req: &JobRequest, part: &Partition) -> Result<Demand, String> {
    let nonzero = |v: Option<u32>, what: &str| -> Result<Option<u32>, String> {
        match v {
            Some(0) => Err(format!("{what} must be at least 1")),
            v => Ok(v),
        }
    };
    let ntasks = nonzero(req.ntasks, "ntasks")?;
    let tpn = nonzero(req.ntasks_per_node, "ntasks-per-node")?;
    let min_nodes = nonzero(req.min_nodes, "nodes")?;
    let max_nodes = nonzero(req.max_nodes, "nodes maximum")?;
    let cpt = nonzero(req.cpus_per_task, "cpus-per-task")?;
    if let (Some(a), Some(b)) = (min_nodes, max_nodes)
        && a > b
    {
        return Err(format!("nodes minimum {a} exceeds maximum {b}"));
    }
    let nodes_given = min_nodes.is_some() || max_nodes.is_some();
    let mut nmin = min_nodes.unwrap_or(1);
    let mut nmax = max_nodes.unwrap_or(nmin);
    // `--nodelist`: the job gets at least those nodes (sbatch raises the node count to them).
    let required = u32::try_from(req.nodelist.len()).unwrap_or(u32::MAX);
    if required > 0 {
        if nodes_given && nmax < required {
            return Err(format!(
                "nodelist names {required} nodes but the job asks for at most {nmax}"
            ));
        }
        nmin = nmin.max(required);
        nmax = nmax.max(required);
    }
    if req.gpus_per_task.is_some() && ntasks.is_none() && tpn.is_none() {
        return Err("gpus-per-task needs a task count (ntasks or ntasks-per-node)".into());
    }
    if let (Some(g), Some(t)) = (req.gpus, req.gpus_per_task)
        && ntasks.is_none()
        && g % t != 0
    {
        return Err(format!("gpus {g} is not a multiple of gpus-per-task {t}"));
    }
    // `--gpus=G --gpus-per-task=T` without -n: G/T tasks (sbatch derives the count too).
    let ntasks = match (ntasks, req.gpus, req.gpus_per_task) {
        (None, Some(g), Some(t)) if t > 0 => Some(g / t),
        (n, _, _) => n,
    };
    let mem_given = req.memory.is_some();
    // CPU millicores for a unit of `tasks` tasks holding `gpus` GPUs together.
    let cpus_for = |gpus: u32, tasks: u32| -> u64 {
        let c = match (cpt, part.def_cpu_per_gpu) {
            (Some(c), _) => c * tasks,
            (None, Some(d)) if !mem_given && gpus > 0 => d * gpus,
            _ => tasks,
        };
        u64::from(c) * 1000
    };
    // Memory for a unit with `gpus` GPUs and `cpu` millicores (per-node memory is separate).
    let mem_for = |gpus: u32, cpu: u64| -> u64 {
        match req.memory {
            Some(MemoryRequest::PerCpu(m)) => m * cpu.div_ceil(1000),
            Some(MemoryRequest::PerGpu(m)) => m * u64::from(gpus),
            Some(MemoryRequest::PerNode(_)) | Some(MemoryRequest::WholeNode) => 0,
            None => part.def_mem_per_gpu_mib.unwrap_or(0) * u64::from(gpus),
        }
    };
    let whole_mem = req.memory == Some(MemoryRequest::WholeNode);
    let per_node_mem = match req.memory {
        Some(MemoryRequest::PerNode(m)) => m,
        _ => 0,
    };
    let bundle = |gpus: u32, tasks_per_node: u32, nodes: (u32, u32)| -> Demand {
        let cpu = cpus_for(gpus, tasks_per_node);
        let mem = mem_for(gpus, cpu) + per_node_mem;
        Demand {
            unit: Res { gpus, cpu, mem },
            node: Res::default(),
            whole_mem,
            exclusive: req.exclusive,
            mode: Mode::Bundles { tasks_per_node },
            min_nodes: nodes.0,
            max_nodes: nodes.1,
        }
    };
    let bundles = ntasks.is_none()
        && (nodes_given || required > 0 || tpn.is_some() || req.gpus_per_node.is_some());
    let d = if bundles {
        let p = tpn.unwrap_or(1);
        let gpus = if let Some(g) = req.gpus_per_node {
            g
        } else if let Some(t) = req.gpus_per_task {
            t * p
        } else if let Some(g) = req.gpus {
            if nmin != nmax {
                return Err("gpus with a node range: give gpus-per-node instead".into());
            }
            if g % nmin != 0 {
                return Err(format!(
                    "gpus {g} cannot be split evenly over {nmin} nodes: give gpus-per-node"
                ));
            }
            g / nmin
        } else {
            0
        };
        bundle(gpus, p, (nmin, nmax))
    } else if let Some(n) = ntasks {
        // Node range of a task count: the one given (raised to the nodelist), else 1..=n.
        let (lo, hi) = if nodes_given {
            (nmin, nmax)
        } else {
            (required.max(1), n)
        };
        if required > n {
            return Err(format!(
                "nodelist names {required} nodes but the job has only {n} task(s)"
            ));
        }
        if lo > n {
            return Err(format!("ntasks {n} is less than the {lo} nodes asked for"));
        }
        let exact = nodes_given && nmin == nmax;
        let per_node_res = Res {
            mem: per_node_mem,
            ..Res::default()
        };
        // (unit, per node, units, most units per node, tasks per unit)
        let (unit, node, total, per_node, tasks_per_unit) = if let Some(t) = req.gpus_per_task {
            let cpu = cpus_for(t, 1);
            let unit = Res {
                gpus: t,
                cpu,
                mem: mem_for(t, cpu),
            };
            (unit, per_node_res, n, tpn.unwrap_or(n), 1)
        } else if let Some(m) = req.gpus_per_node {
            // GPUs per node with a task count. When every node's task count is known, each
            // node is a bundle (its GPUs split between its tasks, `map_gpu` applies): one
            // task, an exact node count dividing the tasks, or --ntasks-per-node dividing
            // them. Otherwise the tasks are packed as for --gpus-per-task and each node of
            // the placement takes the M GPUs once.
            let fixed = if exact && n % nmin == 0 && tpn.is_none_or(|p| n / nmin <= p) {
                Some(nmin)
            } else if !nodes_given && n == 1 {
                Some(1)
            } else if let Some(p) = tpn
                && n % p == 0
                && lo <= n / p
                && n / p <= hi
            {
                Some(n / p)
            } else {
                None
            };
            if let Some(k) = fixed {
                return finish(bundle(m, n / k, (k, k)), part);
            }
            let task_cpu = u64::from(cpt.unwrap_or(1)) * 1000;
            // DefCpuPerGPU: a node's tasks together get at least its GPUs' default CPUs.
            let node_cpu = match (cpt, part.def_cpu_per_gpu) {
                (None, Some(d)) if !mem_given => u64::from((d * m).saturating_sub(1)) * 1000,
                _ => 0,
            };
            let unit = Res {
                gpus: 0,
                cpu: task_cpu,
                mem: mem_for(0, task_cpu),
            };
            let node = Res {
                gpus: m,
                cpu: node_cpu,
                mem: mem_for(m, node_cpu) + per_node_mem,
            };
            (unit, node, n, tpn.unwrap_or(n), 1)
        } else if let Some(g) = req.gpus {
            // GPUs for the job with a task count: gcd(G, N) equal units, each N/gcd tasks
            // sharing G/gcd GPUs (one task per G/N GPUs when N divides G).
            let u = gcd(g, n);
            let (gpus, tasks) = (g / u, n / u);
            let per_node = match tpn {
                Some(p) if p < tasks => {
                    return Err(format!(
                        "gpus {g} over {n} tasks groups {tasks} tasks on {gpus} GPU(s), more than ntasks-per-node {p}: give gpus-per-task"
                    ));
                }
                Some(p) => p / tasks,
                None => u,
            };
            let cpu = cpus_for(gpus, tasks);
            let unit = Res {
                gpus,
                cpu,
                mem: mem_for(gpus, cpu),
            };
            (unit, per_node_res, u, per_node, tasks)
        } else {
            let cpu = cpus_for(0, 1);
            let unit = Res {
                gpus: 0,
                cpu,
                mem: mem_for(0, cpu),
            };
            (unit, per_node_res, n, tpn.unwrap_or(n), 1)
        };
        let per_node = per_node.max(1);
        // --ntasks-per-node is a maximum with --ntasks: at least ceil(N / it) nodes, over
        // which the tasks are then spread evenly (as srun lays them out).
        let lo = lo.max(total.div_ceil(per_node));
        if lo > total {
            return Err(format!(
                "{n} tasks in {total} group(s) of {tasks_per_unit} cannot cover {lo} nodes: give gpus-per-task"
            ));
        }
        let hi = hi.min(total);
        if lo > hi {
            return Err(format!(
                "{n} tasks do not fit on {hi} nodes at {} per node",
                per_node * tasks_per_unit
            ));
        }
        Demand {
            unit,
            node,
            whole_mem,
            exclusive: req.exclusive,
            mode: Mode::Units {
                total,
                max_per_node: per_node,
                merge: false,
                tasks_per_unit,
            },
            min_nodes: lo,
            max_nodes: hi,
        }
    } else if let Some(g) = req.gpus {
        // `--gpus=G` alone: G one-GPU units on as few nodes as possible, one task per node.
        if g == 0 {
            return Err("gpus must be at least 1".into());
        }
        let cpu = cpus_for(1, 1);
        let mem = mem_for(1, cpu);
        Demand {
            unit: Res { gpus: 1, cpu, mem },
            node: Res {
                mem: per_node_mem,
                ..Res::default()
            },
            whole_mem,
            exclusive: req.exclusive,
            mode: Mode::Units {
                total: g,
                max_per_node: g,
                merge: true,
                tasks_per_unit: 1,
            },
            min_nodes: 1,
            max_nodes: g,
        }
    } else {
        bundle(0, 1, (1, 1))
    };
    finish(d, part)
}

/// Applies the partition's node cap to jobs that gave no exact count.
fn finish(mut d: Demand, part: &Partition) -> Result<Demand, String> {
    if let Some(m) = part.max_nodes {
        d.max_nodes = d.max_nodes.min(m.max(d.min_nodes));
    }
    if let Mode::Units {
        total,
        max_per_node,
        ..
    } = d.mode
        && u64::from(max_per_node) * u64::from(d.max_nodes) < u64::from(total)
    {
        return Err(format!(
            "{total} tasks do not fit on {} nodes at {max_per_node} per node",
            d.max_nodes
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> JobRequest {
        JobRequest::default()
    }

    fn part() -> Partition {
        Partition::default()
    }

    #[test]
    fn nodes_and_gpus_per_node_make_bundles() {
        // torchrun: 8 nodes x 1 task x 8 GPUs, 96 CPUs per task, exclusive.
        let r = JobRequest {
            min_nodes: Some(8),
            ntasks_per_node: Some(1),
            gpus_per_node: Some(8),
            cpus_per_task: Some(96),
            exclusive: true,
            ..req()
        };
        let d = normalize(&r, &part()).unwrap();
        assert_eq!(d.mode, Mode::Bundles { tasks_per_node: 1 });
        assert_eq!((d.min_nodes, d.max_nodes), (8, 8));
        assert_eq!(
            d.unit,
            Res {
                gpus: 8,
                cpu: 96_000,
                mem: 0
            }
        );
        assert!(d.exclusive);
    }

    #[test]
    fn gres_with_tasks_per_node_splits_the_node_share() {
        // --nodes=2 --ntasks-per-node=2 --gres=gpu:4: 4 GPUs per node for 2 tasks.
        let r = JobRequest {
            min_nodes: Some(2),
            ntasks_per_node: Some(2),
            gpus_per_node: Some(4),
            ..req()
        };
        let d = normalize(&r, &part()).unwrap();
        assert_eq!(d.mode, Mode::Bundles { tasks_per_node: 2 });
        assert_eq!(d.unit.gpus, 4);
        assert_eq!(d.unit.cpu, 2000);
        assert_eq!(d.tasks_on_node(1), 2);
    }

    #[test]
    fn gpus_per_task_with_tasks_per_node_is_per_node_bundle() {
        // --nodes=2 --ntasks-per-node=2 --gpus-per-task=1
        let r = JobRequest {
            min_nodes: Some(2),
            ntasks_per_node: Some(2),
            gpus_per_task: Some(1),
            ..req()
        };
        let d = normalize(&r, &part()).unwrap();
        assert_eq!(d.unit.gpus, 2);
        assert_eq!(d.need(), 2);
    }

    #[test]
    fn ntasks_pack_units() {
        let r = JobRequest {
            ntasks: Some(16),
            gpus_per_task: Some(1),
            cpus_per_task: Some(4),
            memory: Some(MemoryRequest::PerCpu(1024)),
            ..req()
        };
        let d = normalize(&r, &part()).unwrap();
        assert_eq!(
            d.mode,
            Mode::Units {
                total: 16,
                max_per_node: 16,
                merge: false,
                tasks_per_unit: 1
            }
        );
        assert_eq!(
            d.unit,
            Res {
                gpus: 1,
                cpu: 4000,
                mem: 4096
            }
        );
        assert_eq!((d.min_nodes, d.max_nodes), (1, 16));
    }

    #[test]
    fn gpus_alone_are_merged_per_node() {
        let r = JobRequest {
            gpus: Some(12),
            ..req()
        };
        let d = normalize(&r, &part()).unwrap();
        assert_eq!(
            d.mode,
            Mode::Units {
                total: 12,
                max_per_node: 12,
                merge: true,
                tasks_per_unit: 1
            }
        );
        assert_eq!(d.tasks_on_node(8), 1);
    }

    #[test]
    fn partition_defaults_apply_when_nothing_is_asked() {
        let p = Partition {
            def_cpu_per_gpu: Some(16),
            def_mem_per_gpu_mib: Some(100_000),
            ..part()
        };
        let r = JobRequest {
            gpus: Some(2),
            ..req()
        };
        let d = normalize(&r, &p).unwrap();
        assert_eq!(
            d.unit,
            Res {
                gpus: 1,
                cpu: 16_000,
                mem: 100_000
            }
        );
    }

    #[test]
    fn contradictions_are_errors() {
        let bad = [
            JobRequest {
                gpus_per_task: Some(1),
                ..req()
            },
            JobRequest {
                gpus: Some(7),
                ntasks: Some(2),
                ntasks_per_node: Some(1),
                ..req()
            },
            JobRequest {
                ntasks: Some(2),
                min_nodes: Some(4),
                ..req()
            },
            JobRequest {
                min_nodes: Some(4),
                max_nodes: Some(2),
                ..req()
            },
            JobRequest {
                ntasks: Some(0),
                ..req()
            },
            JobRequest {
                ntasks: Some(9),
                ntasks_per_node: Some(2),
                min_nodes: Some(4),
                ..req()
            },
        ];
        for r in bad {
            assert!(normalize(&r, &part()).is_err(), "{r:?}");
        }
    }

    #[test]
    fn units_fitting_respects_every_resource() {
        let d = Demand {
            unit: Res {
                gpus: 2,
                cpu: 8000,
                mem: 1000,
            },
            node: Res::default(),
            whole_mem: false,
            exclusive: false,
            mode: Mode::Units {
                total: 8,
                max_per_node: 8,
                merge: false,
                tasks_per_unit: 1,
            },
            min_nodes: 1,
            max_nodes: 8,
        };
        let total = Res {
            gpus: 8,
            cpu: 64_000,
            mem: 10_000,
        };
        assert_eq!(d.units_fitting(total, total, true), 4);
        let cpu_bound = Res {
            cpu: 16_000,
            ..total
        };
        assert_eq!(d.units_fitting(cpu_bound, total, false), 2);
        let ex = Demand {
            exclusive: true,
            ..d.clone()
        };
        assert_eq!(ex.units_fitting(total, total, false), 0);
        let whole = Demand {
            whole_mem: true,
            ..d
        };
        assert_eq!(
            whole.units_fitting(
                Res {
                    mem: 9_999,
                    ..total
                },
                total,
                true
            ),
            0
        );
        assert_eq!(whole.units_fitting(total, total, true), 4);
        assert_eq!(whole.take(4, total).mem, 10_000);
    }
}

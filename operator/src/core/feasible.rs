//! Whether a request can ever run in a partition, and if not, which resource it asks too much
//! of and the largest that exists: the one judgement behind `sbatch`'s refusal ("Requested
//! node configuration is not available"), `sbatch --test-only`, the operator's admission
//! webhook and the reason of a pending job whose partition can no longer hold it.
//!
//! The check is with every node of the partition idle and up (down, cordoned and unhealthy
//! ones included: they may come back), so it refuses only what no amount of waiting can
//! start. It is a set of necessary conditions on the normalized request ([`normalize`]): a
//! request it passes may still never start (a `map_gpu` binding, feature counts), which the
//! scheduling cycle then reports as `BadConstraints`; a request it refuses the cycle could
//! never start either.

use std::collections::BTreeSet;
use std::fmt;

use super::model::{JobRequest, Partition};
use super::node::Node;
use super::shape::{Demand, Mode, Res, normalize};
use super::tree::in_partition;

/// Why a request can never run in a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Infeasible {
    /// The partition's name.
    pub partition: String,
    /// What cannot be met.
    pub shortfall: Shortfall,
}

/// The resource a request asks too much of, with what it asks and the largest that exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// The request contradicts itself (`--nodes=3-2`); the text says how.
    Request(String),
    /// A container gives no image and the partition has no `defaultImage`.
    Image {
        /// The container.
        container: String,
    },
    /// The partition has no nodes at all.
    NoNodes,
    /// No node of the partition has a GPU of the type.
    GpuType {
        /// The type asked for.
        asked: String,
        /// The GPU models the partition has.
        models: Vec<String>,
    },
    /// No node of the partition has the features of the constraint.
    Feature {
        /// The constraint.
        constraint: String,
    },
    /// Nodes have the GPU type and nodes have the features, but none has both.
    TypeAndFeature {
        /// The type asked for.
        gpu_type: String,
        /// The constraint.
        constraint: String,
    },
    /// More GPUs on one node (or for one task) than any node has.
    GpusPerNode {
        /// What one node (or task) is asked to hold.
        asked: u32,
        /// The most GPUs (of the type) on one node.
        largest: u32,
        /// `node` or `task`.
        per: &'static str,
    },
    /// More CPUs on one node (or for one task) than any node has.
    Cpus {
        /// Millicores asked on one node (or for one task).
        asked_millis: u64,
        /// The most millicores on one node.
        largest_millis: u64,
        /// `node` or `task`.
        per: &'static str,
    },
    /// More memory on one node (or for one task) than any node has.
    Memory {
        /// MiB asked on one node (or for one task).
        asked_mib: u64,
        /// The most MiB on one node.
        largest_mib: u64,
        /// `node` or `task`.
        per: &'static str,
    },
    /// Some node has enough of each resource, but none has all of them together.
    NodeShape {
        /// What one node (or task) is asked to hold.
        asked: Res,
        /// The node that comes closest, and what it has.
        closest: (String, Res),
        /// `node` or `task`.
        per: &'static str,
    },
    /// More nodes than the partition has (that match the job's GPU type and constraint and
    /// can hold the job's share of one node).
    Nodes {
        /// Nodes asked for.
        asked: u32,
        /// Nodes that can hold one node's share.
        fitting: u32,
        /// Nodes that match the job's GPU type and constraint.
        matching: u32,
        /// Nodes of the partition.
        total: u32,
        /// What the matching nodes match (`constraint ib`, `GPU type a100`), empty for none.
        filter: String,
    },
    /// A `--nodelist` node the job can never have.
    Nodelist {
        /// The node.
        node: String,
        /// Why not (`is not a node of partition gpu`, `is also excluded`, …).
        why: String,
    },
    /// More GPUs in total than the partition's nodes hold (within the job's node limit).
    Gpus {
        /// GPUs asked for.
        asked: u64,
        /// The most the job could get.
        largest: u64,
    },
    /// No node of the partition has the extended resources its job environment gives every
    /// node pod (`spec.jobEnvironment.resources`).
    NodeResource {
        /// The resource (`rdma/ib`).
        name: String,
        /// The amount every node pod requests.
        asked: u64,
        /// The most of it on one node of the partition (0: none has it).
        largest: u64,
        /// The extended resources the partition's nodes do have.
        present: Vec<String>,
    },
    /// More tasks in total than the partition's nodes hold (within the job's node limit).
    Tasks {
        /// Tasks asked for.
        asked: u64,
        /// The most the job could get.
        largest: u64,
    },
}

impl Shortfall {
    /// The resource, as one word for messages and metrics: `GPUs`, `CPUs`, `memory`, `nodes`,
    /// `nodelist`, `tasks`, `type`, `feature`, `image` or `request`.
    pub fn resource(&self) -> &'static str {
        match self {
            Shortfall::Request(_) => "request",
            Shortfall::Image { .. } => "image",
            Shortfall::NoNodes | Shortfall::Nodes { .. } => "nodes",
            Shortfall::Nodelist { .. } => "nodelist",
            Shortfall::GpuType { .. } => "type",
            Shortfall::Feature { .. } | Shortfall::TypeAndFeature { .. } => "feature",
            Shortfall::GpusPerNode { .. } | Shortfall::Gpus { .. } => "GPUs",
            Shortfall::Cpus { .. } => "CPUs",
            Shortfall::Memory { .. } => "memory",
            Shortfall::NodeShape { .. } => "node",
            Shortfall::Tasks { .. } => "tasks",
            Shortfall::NodeResource { .. } => "resource",
        }
    }
}

/// CPUs as Slurm counts them: whole cores when whole, else with decimals.
fn cpus(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{:.1}", millis as f64 / 1000.0)
    }
}

/// Memory in Slurm's units (`512M`, `64G`, `2T`).
pub fn mem(mib: u64) -> String {
    const G: u64 = 1024;
    const T: u64 = 1024 * 1024;
    if mib >= T && mib.is_multiple_of(T) {
        format!("{}T", mib / T)
    } else if mib >= G && mib.is_multiple_of(G) {
        format!("{}G", mib / G)
    } else {
        format!("{mib}M")
    }
}

fn res(r: &Res) -> String {
    let mut parts = Vec::new();
    if r.gpus > 0 {
        parts.push(format!("{} GPU(s)", r.gpus));
    }
    parts.push(format!("{} CPU(s)", cpus(r.cpu)));
    if r.mem > 0 {
        parts.push(format!("{} memory", mem(r.mem)));
    }
    parts.join(", ")
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.partition;
        match &self.shortfall {
            Shortfall::Request(m) => write!(f, "{m}"),
            Shortfall::Image { container } => write!(
                f,
                "image: container {container:?} gives none and partition {p} has no defaultImage"
            ),
            Shortfall::NoNodes => write!(
                f,
                "nodes: partition {p} has no nodes (no node matches its nodeSelector and has only taints it tolerates)"
            ),
            Shortfall::GpuType { asked, models } => {
                write!(f, "GPU type {asked}: no node of partition {p} has one")?;
                if models.is_empty() {
                    write!(f, " (it has no GPUs)")
                } else {
                    write!(f, " (its GPUs: {})", models.join(", "))
                }
            }
            Shortfall::Feature { constraint } => write!(
                f,
                "feature: no node of partition {p} matches constraint {constraint}"
            ),
            Shortfall::TypeAndFeature {
                gpu_type,
                constraint,
            } => write!(
                f,
                "type and feature: no node of partition {p} has GPU type {gpu_type} and matches constraint {constraint}"
            ),
            Shortfall::GpusPerNode {
                asked,
                largest,
                per,
            } => write!(
                f,
                "GPUs: {asked} per {per} requested, the most on one node of partition {p} is {largest}"
            ),
            Shortfall::Cpus {
                asked_millis,
                largest_millis,
                per,
            } => write!(
                f,
                "CPUs: {} per {per} requested, the most on one node of partition {p} is {}",
                cpus(*asked_millis),
                cpus(*largest_millis)
            ),
            Shortfall::Memory {
                asked_mib,
                largest_mib,
                per,
            } => write!(
                f,
                "memory: {} per {per} requested, the most on one node of partition {p} is {}",
                mem(*asked_mib),
                mem(*largest_mib)
            ),
            Shortfall::NodeShape {
                asked,
                closest,
                per,
            } => write!(
                f,
                "node: {} per {per} requested together, no node of partition {p} has all of it (e.g. {} has {})",
                res(asked),
                closest.0,
                res(&closest.1)
            ),
            Shortfall::Nodes {
                asked,
                fitting,
                matching,
                total,
                filter,
            } => {
                write!(f, "nodes: {asked} requested, ")?;
                match (fitting == total, fitting == matching, filter.is_empty()) {
                    (true, _, _) => write!(f, "partition {p} has {total}"),
                    (false, true, false) => write!(
                        f,
                        "{fitting} of partition {p}'s {total} nodes match {filter}"
                    ),
                    (false, false, false) => write!(
                        f,
                        "{fitting} of partition {p}'s {total} nodes match {filter} and can hold one node's share of the job"
                    ),
                    (false, _, true) => write!(
                        f,
                        "{fitting} of partition {p}'s {total} nodes can hold one node's share of the job"
                    ),
                }
            }
            Shortfall::Nodelist { node, why } => write!(f, "nodelist: node {node} {why}"),
            Shortfall::Gpus { asked, largest } => write!(
                f,
                "GPUs: {asked} requested, the most partition {p} can give the job is {largest}"
            ),
            Shortfall::NodeResource {
                name,
                asked,
                largest,
                present,
            } => {
                write!(
                    f,
                    "resource {name}: partition {p}'s jobEnvironment gives every node pod {asked}, "
                )?;
                if *largest == 0 {
                    write!(f, "no node of partition {p} has any")?;
                } else {
                    write!(f, "the most on one node of partition {p} is {largest}")?;
                }
                if present.is_empty() {
                    write!(f, " (its nodes have no extended resources)")
                } else {
                    write!(f, " (its nodes have: {})", present.join(", "))
                }
            }
            Shortfall::Tasks { asked, largest } => write!(
                f,
                "tasks: {asked} requested, the most partition {p} can hold is {largest}"
            ),
        }
    }
}

/// What the nodes a job may use are filtered by, for messages (`GPU type a100 and constraint
/// ib and not excluded (gpu[001-002])`); empty for nothing.
fn node_filter(req: &JobRequest, part: &Partition) -> String {
    let mut filter = Vec::new();
    for k in part.node_resources.keys() {
        filter.push(format!("resource {k}"));
    }
    if let Some(t) = &req.gpu_type {
        filter.push(format!("GPU type {t}"));
    }
    if let Some(c) = &req.constraint {
        filter.push(format!("constraint {c}"));
    }
    if !req.exclude.is_empty() {
        filter.push(format!(
            "not excluded ({})",
            muster_crds::slurm::hostlist::compress(req.exclude.iter())
        ));
    }
    filter.join(" and ")
}

/// GPUs of `n` whose model contains `ty` (case-insensitive, lower-cased already); every GPU
/// when `ty` is empty.
fn typed_gpus(n: &Node, ty: &str) -> u32 {
    if ty.is_empty() {
        return n.gpus.len() as u32;
    }
    n.gpus
        .iter()
        .filter(|g| g.model.to_ascii_lowercase().contains(ty))
        .count() as u32
}

/// Whether `req` can ever run in `part` over `nodes` (every node of the cluster; the
/// partition's are picked here as the scheduler picks them). `container_without_image`
/// names a task container that gives no image, if any (it needs the partition's default).
pub fn check(
    req: &JobRequest,
    part: &Partition,
    nodes: &[Node],
    container_without_image: Option<&str>,
) -> Result<(), Infeasible> {
    let fail = |shortfall| {
        Err(Infeasible {
            partition: part.name.clone(),
            shortfall,
        })
    };
    let d = match normalize(req, part) {
        Ok(d) => d,
        Err(m) => return fail(Shortfall::Request(m)),
    };
    if let Some(c) = container_without_image
        && part.default_image.is_none()
    {
        return fail(Shortfall::Image {
            container: c.to_string(),
        });
    }
    match shortfall(req, &d, part, nodes) {
        Some(s) => fail(s),
        None => Ok(()),
    }
}

/// What `d` (normalized from `req`) cannot get from `part`'s nodes, if anything.
pub fn shortfall(
    req: &JobRequest,
    d: &Demand,
    part: &Partition,
    nodes: &[Node],
) -> Option<Shortfall> {
    let members: Vec<&Node> = nodes.iter().filter(|n| in_partition(n, part)).collect();
    if members.is_empty() {
        return Some(Shortfall::NoNodes);
    }
    // The partition's per-node-pod resources: nodes without them are not the job's to have.
    for (name, &asked) in &part.node_resources {
        let largest = members
            .iter()
            .map(|n| n.extended.get(name).copied().unwrap_or(0))
            .max()
            .unwrap_or(0);
        if largest < asked {
            let present: BTreeSet<String> = members
                .iter()
                .flat_map(|n| n.extended.keys().cloned())
                .collect();
            return Some(Shortfall::NodeResource {
                name: name.clone(),
                asked,
                largest,
                present: present.into_iter().collect(),
            });
        }
    }
    let partition_nodes = members.len() as u32;
    let members: Vec<&Node> = members
        .into_iter()
        .filter(|n| n.has_resources(&part.node_resources))
        .collect();
    let ty = req.gpu_type.as_deref().unwrap_or("").to_ascii_lowercase();
    let matches = |n: &Node| match &req.constraint {
        None => true,
        Some(c) => match c.matching_or_alternatives() {
            Some(alts) => alts.iter().any(|a| a.matches(|f| n.has_feature(f))),
            None => c.matches(|f| n.has_feature(f)),
        },
    };
    let typed = |n: &Node| ty.is_empty() || typed_gpus(n, &ty) > 0;
    let excluded = |n: &Node| req.exclude.contains(&n.name);
    let total = |n: &Node| Res {
        gpus: typed_gpus(n, &ty),
        cpu: n.cpu_millis,
        mem: n.memory_mib,
    };
    // --nodelist: each named node must be one the job could be given.
    for name in &req.nodelist {
        let why = match members.iter().find(|n| n.name == *name) {
            None => format!("is not a node of partition {}", part.name),
            Some(_) if req.exclude.contains(name) => "is also excluded".to_string(),
            Some(n) if !typed(n) => format!(
                "has no GPU of type {}",
                req.gpu_type.as_deref().unwrap_or_default()
            ),
            Some(n) if !matches(n) => format!(
                "does not match constraint {}",
                req.constraint
                    .as_ref()
                    .map(|c| c.to_string())
                    .unwrap_or_default()
            ),
            Some(n) if d.units_fitting(total(n), total(n), true) == 0 => {
                "cannot hold one node's share of the job".to_string()
            }
            Some(_) => continue,
        };
        return Some(Shortfall::Nodelist {
            node: name.clone(),
            why,
        });
    }
    let cands: Vec<&Node> = members
        .iter()
        .copied()
        .filter(|n| typed(n) && matches(n))
        .collect();
    if cands.is_empty() {
        let constraint = req.constraint.as_ref().map(|c| c.to_string());
        let any_typed = members.iter().any(|n| typed(n));
        let any_matching = members.iter().any(|n| matches(n));
        return Some(match (any_typed, any_matching, constraint) {
            (false, _, _) => {
                let models: BTreeSet<String> = members
                    .iter()
                    .flat_map(|n| n.gpus.iter().map(|g| g.model.to_string()))
                    .collect();
                Shortfall::GpuType {
                    asked: req.gpu_type.clone().unwrap_or_default(),
                    models: models.into_iter().collect(),
                }
            }
            (true, false, Some(c)) => Shortfall::Feature { constraint: c },
            (_, _, c) => Shortfall::TypeAndFeature {
                gpu_type: req.gpu_type.clone().unwrap_or_default(),
                constraint: c.unwrap_or_default(),
            },
        });
    }
    // --exclude: those nodes are out (judged after type and feature, which name what the
    // partition lacks; the count below says what exclusion leaves).
    let matching = cands.len() as u32;
    let cands: Vec<&Node> = cands.into_iter().filter(|n| !excluded(n)).collect();
    let mut units: Vec<u32> = cands
        .iter()
        .map(|n| {
            let t = total(n);
            d.units_fitting(t, t, true)
        })
        .filter(|&u| u > 0)
        .collect();
    // A node's share: one unit plus what every node takes once (`--gpus-per-node` with a
    // task count), so it is judged per node whenever the latter is not empty.
    let per = match d.mode {
        Mode::Units { merge: false, .. } if d.node == Res::default() => "task",
        _ => "node",
    };
    if units.is_empty() && cands.is_empty() {
        return Some(Shortfall::Nodes {
            asked: d.min_nodes,
            fitting: 0,
            matching: 0,
            total: partition_nodes,
            filter: node_filter(req, part),
        });
    }
    if units.is_empty() {
        let asked = Res {
            gpus: d.unit.gpus + d.node.gpus,
            cpu: d.unit.cpu + d.node.cpu,
            mem: if d.whole_mem {
                0
            } else {
                d.unit.mem + d.node.mem
            },
        };
        let max_g = cands.iter().map(|n| typed_gpus(n, &ty)).max().unwrap_or(0);
        let max_c = cands.iter().map(|n| n.cpu_millis).max().unwrap_or(0);
        let max_m = cands.iter().map(|n| n.memory_mib).max().unwrap_or(0);
        return Some(if asked.gpus > max_g {
            Shortfall::GpusPerNode {
                asked: asked.gpus,
                largest: max_g,
                per,
            }
        } else if asked.cpu > max_c {
            Shortfall::Cpus {
                asked_millis: asked.cpu,
                largest_millis: max_c,
                per,
            }
        } else if asked.mem > max_m {
            Shortfall::Memory {
                asked_mib: asked.mem,
                largest_mib: max_m,
                per,
            }
        } else {
            // Each resource exists somewhere, never all on one node: name the node that
            // lacks the fewest of them.
            let closest = cands
                .iter()
                .map(|n| {
                    let t = total(n);
                    let short = u32::from(t.gpus < asked.gpus)
                        + u32::from(t.cpu < asked.cpu)
                        + u32::from(t.mem < asked.mem);
                    (short, n.name.clone(), t)
                })
                .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)))
                .map(|(_, name, t)| (name, t))
                .unwrap_or_default();
            Shortfall::NodeShape {
                asked,
                closest,
                per,
            }
        });
    }
    let fitting = units.len() as u32;
    if fitting < d.min_nodes {
        return Some(Shortfall::Nodes {
            asked: d.min_nodes,
            fitting,
            matching: if req.exclude.is_empty() {
                matching
            } else {
                cands.len() as u32
            },
            total: partition_nodes,
            filter: node_filter(req, part),
        });
    }
    if let Mode::Units { total, merge, .. } = d.mode {
        units.sort_unstable_by(|a, b| b.cmp(a));
        let k = (d.max_nodes as usize).min(units.len());
        let most: u64 = units[..k].iter().map(|&u| u64::from(u)).sum();
        if most < u64::from(total) {
            return Some(if d.unit.gpus > 0 {
                let g = u64::from(d.unit.gpus);
                Shortfall::Gpus {
                    asked: u64::from(total) * g,
                    largest: most * g,
                }
            } else {
                let _ = merge;
                Shortfall::Tasks {
                    asked: u64::from(total),
                    largest: most,
                }
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::MemoryRequest;
    use crate::core::node::Gpu;
    use muster_crds::slurm::Constraint;

    fn node(name: &str, gpus: u32, model: &str, labels: &[(&str, &str)]) -> Node {
        Node {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cpu_millis: 224_000,
            memory_mib: 2 * 1024 * 1024,
            gpus: (0..gpus)
                .map(|i| Gpu {
                    index: i,
                    uuid: format!("GPU-{name}-{i}"),
                    model: model.into(),
                    healthy: true,
                    ..Default::default()
                })
                .collect(),
            ready: true,
            ..Default::default()
        }
    }

    fn cluster() -> Vec<Node> {
        (1..=16)
            .map(|i| node(&format!("gpu{i:03}"), 8, "NVIDIA H100 80GB HBM3", &[]))
            .collect()
    }

    fn gpu() -> Partition {
        Partition {
            name: "gpu".into(),
            default_image: Some("busybox".into()),
            ..Default::default()
        }
    }

    fn why(req: JobRequest) -> Infeasible {
        check(&req, &gpu(), &cluster(), None).expect_err("infeasible")
    }

    #[test]
    fn what_fits_passes() {
        for r in [
            JobRequest::default(),
            JobRequest {
                min_nodes: Some(16),
                gpus_per_node: Some(8),
                exclusive: true,
                ..Default::default()
            },
            JobRequest {
                gpus: Some(128),
                ..Default::default()
            },
            JobRequest {
                ntasks: Some(128),
                gpus_per_task: Some(1),
                ..Default::default()
            },
            JobRequest {
                gpu_type: Some("h100".into()),
                gpus: Some(1),
                ..Default::default()
            },
        ] {
            assert_eq!(check(&r, &gpu(), &cluster(), None), Ok(()), "{r:?}");
        }
    }

    #[test]
    fn each_shortfall_names_its_resource_and_the_largest() {
        let e = why(JobRequest {
            min_nodes: Some(20),
            ..Default::default()
        });
        assert_eq!(e.shortfall.resource(), "nodes");
        assert_eq!(e.to_string(), "nodes: 20 requested, partition gpu has 16");

        let e = why(JobRequest {
            gpus: Some(200),
            ..Default::default()
        });
        assert_eq!(
            e.to_string(),
            "GPUs: 200 requested, the most partition gpu can give the job is 128"
        );

        let e = why(JobRequest {
            gpus_per_node: Some(9),
            ..Default::default()
        });
        assert_eq!(
            e.to_string(),
            "GPUs: 9 per node requested, the most on one node of partition gpu is 8"
        );

        let e = why(JobRequest {
            cpus_per_task: Some(1000),
            ..Default::default()
        });
        assert_eq!(
            e.to_string(),
            "CPUs: 1000 per node requested, the most on one node of partition gpu is 224"
        );

        let e = why(JobRequest {
            memory: Some(MemoryRequest::PerNode(10 * 1024 * 1024)),
            ..Default::default()
        });
        assert_eq!(
            e.to_string(),
            "memory: 10T per node requested, the most on one node of partition gpu is 2T"
        );

        let e = why(JobRequest {
            gpu_type: Some("a100".into()),
            gpus: Some(1),
            ..Default::default()
        });
        assert_eq!(e.shortfall.resource(), "type");
        assert_eq!(
            e.to_string(),
            "GPU type a100: no node of partition gpu has one (its GPUs: NVIDIA H100 80GB HBM3)"
        );

        let e = why(JobRequest {
            constraint: Some(Constraint::parse("ib").unwrap()),
            ..Default::default()
        });
        assert_eq!(e.shortfall.resource(), "feature");
        assert!(e.to_string().contains("constraint ib"), "{e}");

        let e = why(JobRequest {
            ntasks: Some(40),
            gpus_per_task: Some(4),
            ..Default::default()
        });
        assert_eq!(
            e.to_string(),
            "GPUs: 160 requested, the most partition gpu can give the job is 128"
        );
    }

    #[test]
    fn tasks_are_judged_per_task() {
        let e = why(JobRequest {
            ntasks: Some(4),
            gpus_per_task: Some(16),
            ..Default::default()
        });
        assert_eq!(
            e.to_string(),
            "GPUs: 16 per task requested, the most on one node of partition gpu is 8"
        );
    }

    #[test]
    fn resources_apart_but_never_together() {
        let mut nodes = cluster();
        nodes[0].cpu_millis = 512_000;
        nodes[0].gpus.truncate(2);
        let e = check(
            &JobRequest {
                gpus_per_node: Some(8),
                cpus_per_task: Some(300),
                ..Default::default()
            },
            &gpu(),
            &nodes,
            None,
        )
        .unwrap_err();
        assert_eq!(e.shortfall.resource(), "node");
        assert!(e.to_string().contains("gpu"), "{e}");
    }

    #[test]
    fn type_and_feature_apart() {
        let mut nodes = cluster();
        nodes[0] = node("gpu001", 8, "NVIDIA A100-SXM4-80GB", &[]);
        nodes[1]
            .labels
            .insert("muster.dev/feature.ib".into(), "true".into());
        let e = check(
            &JobRequest {
                gpu_type: Some("a100".into()),
                constraint: Some(Constraint::parse("ib").unwrap()),
                ..Default::default()
            },
            &gpu(),
            &nodes,
            None,
        )
        .unwrap_err();
        assert!(
            matches!(e.shortfall, Shortfall::TypeAndFeature { .. }),
            "{e}"
        );
    }

    #[test]
    fn images_contradictions_and_empty_partitions() {
        let mut p = gpu();
        p.default_image = None;
        let e = check(&JobRequest::default(), &p, &cluster(), Some("task")).unwrap_err();
        assert_eq!(e.shortfall.resource(), "image");
        assert!(check(&JobRequest::default(), &gpu(), &cluster(), Some("task")).is_ok());
        let e = check(
            &JobRequest {
                min_nodes: Some(3),
                max_nodes: Some(2),
                ..Default::default()
            },
            &gpu(),
            &cluster(),
            None,
        )
        .unwrap_err();
        assert_eq!(e.shortfall.resource(), "request");
        assert_eq!(e.to_string(), "nodes minimum 3 exceeds maximum 2");
        let e = check(&JobRequest::default(), &gpu(), &[], None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("nodes: partition gpu has no nodes"),
            "{e}"
        );
    }

    #[test]
    fn nodelist_and_exclude() {
        let w = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = why(JobRequest {
            nodelist: w(&["gpu017"]),
            ..Default::default()
        });
        assert_eq!(e.shortfall.resource(), "nodelist");
        assert_eq!(
            e.to_string(),
            "nodelist: node gpu017 is not a node of partition gpu"
        );
        let e = why(JobRequest {
            nodelist: w(&["gpu003"]),
            exclude: w(&["gpu003"]),
            ..Default::default()
        });
        assert_eq!(e.to_string(), "nodelist: node gpu003 is also excluded");
        let e = why(JobRequest {
            nodelist: w(&["gpu003"]),
            constraint: Some(Constraint::parse("ib").unwrap()),
            ..Default::default()
        });
        assert!(e.to_string().contains("constraint ib"), "{e}");
        assert!(
            check(
                &JobRequest {
                    nodelist: w(&["gpu003", "gpu016"]),
                    exclude: w(&["gpu001"]),
                    ..Default::default()
                },
                &gpu(),
                &cluster(),
                None
            )
            .is_ok()
        );
        let all: Vec<String> = (1..=16).map(|i| format!("gpu{i:03}")).collect();
        let e = why(JobRequest {
            exclude: all.clone(),
            ..Default::default()
        });
        assert_eq!(e.shortfall.resource(), "nodes");
        assert_eq!(
            e.to_string(),
            "nodes: 1 requested, 0 of partition gpu's 16 nodes match not excluded (gpu[001-016])"
        );
        let e = why(JobRequest {
            min_nodes: Some(4),
            exclude: all[..14].to_vec(),
            ..Default::default()
        });
        assert_eq!(
            e.to_string(),
            "nodes: 4 requested, 2 of partition gpu's 16 nodes match not excluded (gpu[001-014])"
        );
    }

    #[test]
    fn memory_units_read_like_slurm() {
        assert_eq!(mem(512), "512M");
        assert_eq!(mem(65536), "64G");
        assert_eq!(mem(2 * 1024 * 1024), "2T");
        assert_eq!(mem(1500), "1500M");
    }

    #[test]
    fn a_partitions_node_resources_pick_its_nodes() {
        let mut nodes = cluster();
        for n in &mut nodes[..4] {
            n.extended.insert("rdma/ib".into(), 8);
        }
        let mut p = gpu();
        p.node_resources.insert("rdma/ib".into(), 1);
        let r = |n: u32| JobRequest {
            min_nodes: Some(n),
            gpus_per_node: Some(8),
            ..Default::default()
        };
        assert_eq!(check(&r(4), &p, &nodes, None), Ok(()));
        let e = check(&r(5), &p, &nodes, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nodes: 5 requested, 4 of partition gpu's 16 nodes match resource rdma/ib"
        );
        // No node has it: the resource, what is asked and what the nodes have.
        p.node_resources = [("rdma/roce".to_string(), 1)].into();
        let e = check(&r(1), &p, &nodes, None).unwrap_err();
        assert_eq!(e.shortfall.resource(), "resource");
        assert_eq!(
            e.to_string(),
            "resource rdma/roce: partition gpu's jobEnvironment gives every node pod 1, no node of partition gpu has any (its nodes have: rdma/ib)"
        );
        p.node_resources = [("rdma/ib".to_string(), 16)].into();
        let e = check(&r(1), &p, &nodes, None).unwrap_err();
        assert!(
            e.to_string()
                .contains("the most on one node of partition gpu is 8"),
            "{e}"
        );
        let e = check(&r(1), &p, &cluster(), None).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("(its nodes have no extended resources)"),
            "{e}"
        );
    }
}

//! What submission refuses (pure): the one judgement `sbatch`, `sbatch --test-only` and the
//! admission webhook share, so a job that can never run is refused at `sbatch` and at
//! `kubectl apply` alike, with Slurm's reason and the resource named.
//!
//! Refused (as Slurm refuses at submission):
//! - a spec the operator cannot run: a field that does not parse or contradicts another
//!   (most are caught by the CRD's CEL rules first), nothing to run, a name too long;
//! - a request no node of the partition can ever hold — more nodes, GPUs, CPUs or memory than
//!   exist, a GPU type or feature no node has, no image for a container
//!   ([`core::feasible`](crate::core::feasible)): "Requested node configuration is not
//!   available";
//! - a partition that accepts no new jobs (Drain, Inactive), or that the job's namespace may
//!   not use;
//! - a job on more than one node in a partition whose shared filesystem is a claim (of the
//!   job's namespace) that only one node can mount at a time: not ReadWriteMany (nor
//!   ReadOnlyMany, mounted read-only). Its pods on the second node would wait forever for the
//!   volume to attach. A job that may spread over nodes gets a warning instead. Judged on the
//!   job, not on the Partition, because a partition names a claim that each namespace
//!   provides for itself.
//!
//! Accepted with a warning: a partition that does not exist (yet), or no default partition;
//! such a job waits, shown as stalled, until the partition exists (GitOps may apply the
//! Partition after the job). A job that becomes impossible later (nodes removed) is never
//! refused after the fact: it waits with reason `BadConstraints`.

use muster_crds::v1alpha1::{BatchJob, PartitionState};

use super::pods;
use super::translate::{self, NodeTable, PartitionTable};
use crate::core::feasible;

/// Slurm's error for a request no node configuration can satisfy.
pub const NODE_CONFIG_UNAVAILABLE: &str = "Requested node configuration is not available";
/// Slurm's error for a partition that takes no new jobs.
pub const PARTITION_UNAVAILABLE: &str = "Required partition not available (inactive or drain)";
/// Slurm's error for an account (namespace) the partition does not allow.
pub const ACCOUNT_NOT_ALLOWED: &str = "Invalid account or account/partition combination specified";
/// Slurm's error for a `--nodelist` node the cluster does not have.
pub const INVALID_NODE_NAME: &str = "Invalid node name specified";
/// The error for a spec that cannot run.
pub const INVALID_SPEC: &str = "Invalid job specification";

/// Why a submission is refused: Slurm's error and the detail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{slurm}: {detail}")]
pub struct Refusal {
    /// Slurm's error text (`Requested node configuration is not available`).
    pub slurm: &'static str,
    /// What exactly: the field, or the resource asked and the largest that exists.
    pub detail: String,
    /// The resource, for infeasible requests (`GPUs`, `CPUs`, `memory`, `nodes`, `nodelist`,
    /// `type`, `feature`, `image`); empty otherwise.
    pub resource: &'static str,
}

/// What the cluster holds, as submission checks it.
#[derive(Clone, Copy, Debug)]
pub struct World<'a> {
    /// Partitions, translated.
    pub partitions: &'a PartitionTable,
    /// The Partition objects (for `defaultImage`), by name.
    pub partition_objects: &'a [&'a muster_crds::v1alpha1::Partition],
    /// Nodes with their GPUs, translated.
    pub nodes: &'a NodeTable,
    /// The claims submission knows, with their access modes (those of the job's namespace
    /// are enough; an unknown claim is not judged).
    pub volume_claims: &'a [ClaimModes],
}

/// A PersistentVolumeClaim's access modes, as submission judges a partition's shared
/// filesystem.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimModes {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.accessModes` (`ReadWriteOnce`, `ReadOnlyMany`, `ReadWriteMany`,
    /// `ReadWriteOncePod`).
    pub access_modes: Vec<String>,
}

impl ClaimModes {
    /// The claim's.
    pub fn of(c: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> ClaimModes {
        use kube::ResourceExt;
        ClaimModes {
            namespace: c.namespace().unwrap_or_default(),
            name: c.name_any(),
            access_modes: c
                .spec
                .as_ref()
                .and_then(|s| s.access_modes.clone())
                .unwrap_or_default(),
        }
    }
}

/// Refuses a job that needs more than one node of a partition whose shared filesystem is a
/// claim only one node can mount; warns when the job may spread over nodes.
fn check_claims(
    spec: &muster_crds::v1alpha1::PartitionSpec,
    namespace: &str,
    claims: &[ClaimModes],
    req: &crate::core::JobRequest,
    cp: &crate::core::Partition,
    warnings: &mut Vec<String>,
) -> Result<(), Refusal> {
    let Ok(d) = crate::core::shape::normalize(req, cp) else {
        return Ok(());
    };
    if d.max_nodes <= 1 {
        return Ok(());
    }
    for v in super::jobenv::shared_volumes(spec) {
        let Some(claim) = v.claim_name.as_deref() else {
            continue;
        };
        let Some(c) = claims
            .iter()
            .find(|c| c.namespace == namespace && c.name == claim)
        else {
            continue;
        };
        let has = |m: &str| c.access_modes.iter().any(|a| a == m);
        let ro = v.read_only == Some(true);
        if has("ReadWriteMany") || (ro && has("ReadOnlyMany")) {
            continue;
        }
        let need = if ro {
            "ReadWriteMany or ReadOnlyMany"
        } else {
            "ReadWriteMany"
        };
        let what = format!(
            "partition {}'s shared filesystem {:?} is PersistentVolumeClaim {claim} of namespace {namespace}, which is {} (one node mounts it at a time)",
            cp.name,
            v.name,
            if c.access_modes.is_empty() {
                "without access modes".to_string()
            } else {
                c.access_modes.join(", ")
            }
        );
        if d.min_nodes > 1 {
            return Err(Refusal {
                slurm: NODE_CONFIG_UNAVAILABLE,
                detail: format!(
                    "volume {}: {what}; a job on {} nodes needs it {need}: run on one node (--nodes=1) or have the claim made {need}",
                    v.name, d.min_nodes
                ),
                resource: "volume",
            });
        }
        warnings.push(format!(
            "{what}: if the job is placed on more than one node, its pods on the others wait for the volume; give --nodes=1"
        ));
    }
    Ok(())
}

/// Judges a job about to be submitted in `namespace`: `Ok` with warnings for the user, or the
/// refusal.
pub fn submission(job: &BatchJob, namespace: &str, w: World<'_>) -> Result<Vec<String>, Refusal> {
    let mut warnings = Vec::new();
    let parsed = translate::job_request(&job.spec).map_err(|e| Refusal {
        slurm: INVALID_SPEC,
        detail: translate::join_errors(&e),
        resource: "",
    })?;
    let part = match w.partitions.resolve(job.spec.partition.as_deref()) {
        Ok(p) => p,
        Err(name) => {
            warnings.push(if name.is_empty() {
                "no partition given and no Partition is the default: the job waits (PartitionConfig) until one is".to_string()
            } else {
                format!(
                    "partition {name} does not exist: the job waits (PartitionConfig) until it does"
                )
            });
            // Only what depends on the spec alone can be judged.
            if let Err(e) = pods::check_buildable(job, None, "")
                && !matches!(e, pods::BuildError::NoImage { .. })
            {
                return Err(Refusal {
                    slurm: INVALID_SPEC,
                    detail: e.to_string(),
                    resource: "",
                });
            }
            return Ok(warnings);
        }
    };
    let cp = &w.partitions.parts[part as usize];
    let object = w
        .partition_objects
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(cp.name.as_str()))
        .copied();
    if let Err(e) = pods::check_buildable(job, object, &cp.name)
        && !matches!(e, pods::BuildError::NoImage { .. })
    {
        return Err(Refusal {
            slurm: INVALID_SPEC,
            detail: e.to_string(),
            resource: "",
        });
    }
    match cp.state {
        PartitionState::Drain | PartitionState::Inactive => {
            return Err(Refusal {
                slurm: PARTITION_UNAVAILABLE,
                detail: format!(
                    "partition {} is {:?} and accepts no new jobs",
                    cp.name, cp.state
                ),
                resource: "",
            });
        }
        PartitionState::Up | PartitionState::Down => {}
    }
    if !cp.allowed_namespaces.is_empty() && !cp.allowed_namespaces.iter().any(|n| n == namespace) {
        return Err(Refusal {
            slurm: ACCOUNT_NOT_ALLOWED,
            detail: format!(
                "namespace {namespace} may not use partition {} (allowed: {})",
                cp.name,
                cp.allowed_namespaces.join(", ")
            ),
            resource: "",
        });
    }
    if let Some(p) = object {
        check_claims(
            &p.spec,
            namespace,
            w.volume_claims,
            &parsed.request,
            cp,
            &mut warnings,
        )?;
    }
    let missing = pods::container_without_image(job);
    feasible::check(&parsed.request, cp, &w.nodes.nodes, missing.as_deref()).map_err(|e| {
        Refusal {
            slurm: match &e.shortfall {
                feasible::Shortfall::Image { .. } | feasible::Shortfall::Request(_) => INVALID_SPEC,
                feasible::Shortfall::Nodelist { node, .. }
                    if !w.nodes.nodes.iter().any(|n| n.name == *node) =>
                {
                    INVALID_NODE_NAME
                }
                _ => NODE_CONFIG_UNAVAILABLE,
            },
            resource: e.shortfall.resource(),
            detail: e.to_string(),
        }
    })?;
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::translate::tests_support::{gpu_node, kube_node};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use muster_crds::v1alpha1::{BatchJobSpec, Partition, PartitionSpec};

    fn world(parts: &[Partition]) -> (PartitionTable, NodeTable) {
        let table = translate::partitions(parts.iter());
        let nodes = NodeTable::new(
            (1..=4)
                .map(|i| {
                    let name = format!("gpu{i:03}");
                    translate::node(&kube_node(&name, true), Some(&gpu_node(&name, 8, &[])))
                })
                .collect(),
        );
        (table, nodes)
    }

    fn part(name: &str, spec: PartitionSpec) -> Partition {
        Partition::new(name, spec)
    }

    fn claims() -> Vec<ClaimModes> {
        vec![
            ClaimModes {
                namespace: "ml".into(),
                name: "rwo".into(),
                access_modes: vec!["ReadWriteOnce".into()],
            },
            ClaimModes {
                namespace: "ml".into(),
                name: "rox".into(),
                access_modes: vec!["ReadOnlyMany".into()],
            },
            ClaimModes {
                namespace: "ml".into(),
                name: "rwx".into(),
                access_modes: vec!["ReadWriteMany".into()],
            },
        ]
    }

    #[test]
    fn multi_node_jobs_need_claims_every_node_can_mount() {
        let with = |claim: &str, ro: bool| {
            let mut p = gpu();
            p.spec.job_environment = Some(
                serde_json::from_value(serde_json::json!({"volumes": [
                    {"name": "scratch", "mountPath": "/scratch", "claimName": claim,
                     "readOnly": ro}]}))
                .unwrap(),
            );
            p
        };
        let two = || spec(|s| s.nodes = Some(IntOrString::Int(2)));
        let e = judge(two(), &[with("rwo", false)]).unwrap_err();
        assert_eq!(e.slurm, NODE_CONFIG_UNAVAILABLE);
        assert_eq!(e.resource, "volume");
        assert_eq!(
            e.detail,
            "volume scratch: partition gpu's shared filesystem \"scratch\" is PersistentVolumeClaim rwo of namespace ml, which is ReadWriteOnce (one node mounts it at a time); a job on 2 nodes needs it ReadWriteMany: run on one node (--nodes=1) or have the claim made ReadWriteMany"
        );
        assert_eq!(judge(two(), &[with("rwx", false)]), Ok(vec![]));
        assert_eq!(judge(two(), &[with("rox", true)]), Ok(vec![]));
        assert!(judge(two(), &[with("rox", false)]).is_err());
        // An unknown claim (another namespace's, or not yet created) is not judged.
        assert_eq!(judge(two(), &[with("elsewhere", false)]), Ok(vec![]));
        // One node: nothing to say. A job that may spread: a warning.
        assert_eq!(
            judge(
                spec(|s| s.nodes = Some(IntOrString::Int(1))),
                &[with("rwo", false)]
            ),
            Ok(vec![])
        );
        let w = judge(
            spec(|s| {
                s.ntasks = Some(4);
                s.gpus_per_task = Some(IntOrString::Int(1));
            }),
            &[with("rwo", false)],
        );
        assert!(
            w.as_ref()
                .is_ok_and(|w| w.len() == 1 && w[0].contains("give --nodes=1")),
            "{w:?}"
        );
    }

    fn judge(spec: BatchJobSpec, parts: &[Partition]) -> Result<Vec<String>, Refusal> {
        let (t, n) = world(parts);
        let objs: Vec<&Partition> = parts.iter().collect();
        let job = BatchJob::new("j", spec);
        submission(
            &job,
            "ml",
            World {
                partitions: &t,
                partition_objects: &objs,
                nodes: &n,
                volume_claims: &claims(),
            },
        )
    }

    fn gpu() -> Partition {
        part(
            "gpu",
            PartitionSpec {
                default: Some(true),
                default_image: Some("busybox".into()),
                tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                    key: Some("nvidia.com/gpu".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
    }

    fn spec(f: impl FnOnce(&mut BatchJobSpec)) -> BatchJobSpec {
        let mut s = BatchJobSpec {
            script: Some("hostname".into()),
            ..Default::default()
        };
        f(&mut s);
        s
    }

    #[test]
    fn what_can_run_passes_and_what_cannot_names_the_resource() {
        assert_eq!(judge(spec(|_| {}), &[gpu()]), Ok(vec![]));
        let e = judge(
            spec(|s| s.gpus_per_node = Some(IntOrString::Int(9))),
            &[gpu()],
        )
        .unwrap_err();
        assert_eq!(e.slurm, NODE_CONFIG_UNAVAILABLE);
        assert_eq!(e.resource, "GPUs");
        assert!(
            e.to_string()
                .contains("the most on one node of partition gpu is 8"),
            "{e}"
        );
        let e = judge(spec(|s| s.nodes = Some(IntOrString::Int(20))), &[gpu()]).unwrap_err();
        assert_eq!(e.resource, "nodes");
    }

    #[test]
    fn nodelist_and_exclude_are_judged_as_slurm_does() {
        // A node the cluster lacks: Slurm's own error for it.
        let e = judge(spec(|s| s.nodelist = Some("gpu009".into())), &[gpu()]).unwrap_err();
        assert_eq!(e.slurm, INVALID_NODE_NAME);
        assert_eq!(e.resource, "nodelist");
        assert_eq!(
            e.detail,
            "nodelist: node gpu009 is not a node of partition gpu"
        );
        // A node both required and excluded: the spec contradicts itself.
        let e = judge(
            spec(|s| {
                s.nodelist = Some("gpu002".into());
                s.exclude = Some("gpu[001-002]".into());
            }),
            &[gpu()],
        )
        .unwrap_err();
        assert_eq!(e.slurm, INVALID_SPEC);
        assert!(
            e.detail.contains("gpu002 is in both nodelist and exclude"),
            "{e}"
        );
        // Excluding every node.
        let e = judge(spec(|s| s.exclude = Some("gpu[001-004]".into())), &[gpu()]).unwrap_err();
        assert_eq!(e.resource, "nodes");
        assert_eq!(
            judge(
                spec(|s| {
                    s.nodelist = Some("gpu003".into());
                    s.exclude = Some("gpu001".into());
                }),
                &[gpu()]
            ),
            Ok(vec![])
        );
    }

    #[test]
    fn invalid_specs_and_closed_partitions_are_refused() {
        let e = judge(
            spec(|s| s.time = Some(IntOrString::String("1h".into()))),
            &[gpu()],
        )
        .unwrap_err();
        assert_eq!(e.slurm, INVALID_SPEC);
        assert!(e.detail.starts_with("spec.time"), "{e}");
        let e = judge(spec(|s| s.script = None), &[gpu()]).unwrap_err();
        assert!(e.detail.contains("give a script"), "{e}");
        let mut drain = gpu();
        drain.spec.state = Some(PartitionState::Drain);
        assert_eq!(
            judge(spec(|_| {}), &[drain]).unwrap_err().slurm,
            PARTITION_UNAVAILABLE
        );
        let mut closed = gpu();
        closed.spec.allowed_namespaces = vec!["hpc".into()];
        assert_eq!(
            judge(spec(|_| {}), &[closed]).unwrap_err().slurm,
            ACCOUNT_NOT_ALLOWED
        );
        let mut no_image = gpu();
        no_image.spec.default_image = None;
        let e = judge(spec(|_| {}), &[no_image]).unwrap_err();
        assert_eq!(e.resource, "image");
    }

    #[test]
    fn missing_partitions_are_warned_about_not_refused() {
        let w = judge(spec(|s| s.partition = Some("nosuch".into())), &[gpu()]).unwrap();
        assert!(w[0].contains("partition nosuch does not exist"), "{w:?}");
        let w = judge(spec(|_| {}), &[]).unwrap();
        assert!(w[0].contains("no Partition is the default"), "{w:?}");
    }
}

//! The job's task template with pyxis's fields applied, and whether pods can be built from it
//! at all (checked before the scheduler sees the job).

use k8s_openapi::api::core::v1::{Container, Pod, PodTemplateSpec};
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, Partition};

use super::{BuildError, TASK_CONTAINER};

/// The job's task template with pyxis's `containerImage` and `containerWorkdir` given to its
/// first container (created when the template has none): the one place these fields become
/// the pod's, for building, for the buildability check and for `SLURM_SUBMIT_DIR`.
pub fn task_template(job: &BatchJob) -> Result<PodTemplateSpec, BuildError> {
    let mut t = job.spec.template.as_deref().cloned().unwrap_or_default();
    let image = job
        .spec
        .container_image
        .as_deref()
        .map(|i| {
            muster_crds::slurm::pyxis::image(i).map_err(|source| BuildError::Pyxis {
                field: "containerImage",
                source,
            })
        })
        .transpose()?;
    let workdir = job
        .spec
        .container_workdir
        .as_deref()
        .map(|w| {
            muster_crds::slurm::pyxis::workdir(w).map_err(|source| BuildError::Pyxis {
                field: "containerWorkdir",
                source,
            })
        })
        .transpose()?;
    if let Some(m) = job.spec.container_mounts.as_deref() {
        muster_crds::slurm::pyxis::mounts(m).map_err(|source| BuildError::Pyxis {
            field: "containerMounts",
            source,
        })?;
    }
    if image.is_none() && workdir.is_none() {
        return Ok(t);
    }
    let spec = t.spec.get_or_insert_with(Default::default);
    if spec.containers.is_empty() {
        spec.containers.push(Container {
            name: TASK_CONTAINER.into(),
            ..Default::default()
        });
    }
    let c = &mut spec.containers[0];
    for (field, template_field, ours, theirs) in [
        ("containerImage", "image", image, &mut c.image),
        (
            "containerWorkdir",
            "workingDir",
            workdir,
            &mut c.working_dir,
        ),
    ] {
        let Some(ours) = ours else { continue };
        match theirs.as_deref().filter(|t| !t.is_empty()) {
            Some(t) if t != ours => {
                return Err(BuildError::PyxisConflict {
                    field,
                    template_field,
                    ours,
                    theirs: t.to_string(),
                });
            }
            _ => *theirs = Some(ours),
        }
    }
    Ok(t)
}

/// The job's `containerMounts`, parsed (checked by [`task_template`]).
pub(super) fn container_mounts(job: &BatchJob) -> Vec<muster_crds::slurm::pyxis::ContainerMount> {
    job.spec
        .container_mounts
        .as_deref()
        .and_then(|m| muster_crds::slurm::pyxis::mounts(m).ok())
        .unwrap_or_default()
}

/// Checks that the job's name can label its pods.
pub fn check_name(job: &BatchJob) -> Result<(), BuildError> {
    let name = job.name_any();
    if name.len() > 63 {
        return Err(BuildError::NameTooLong {
            name,
            key: labels::BATCHJOB,
        });
    }
    Ok(())
}

/// Whether pods can be built for the job in this partition at all (name, something to run,
/// images), without building them: checked before a job is offered to the scheduler, so an
/// allocation is never made for a job whose pods cannot exist.
pub fn check_buildable(
    job: &BatchJob,
    partition: Option<&Partition>,
    partition_name: &str,
) -> Result<(), BuildError> {
    check_name(job)?;
    let has_default = partition.is_some_and(|p| p.spec.default_image.is_some());
    let task = task_template(job)?;
    let spec = task.spec.as_ref();
    let script = job
        .spec
        .script
        .as_deref()
        .is_some_and(|s| !s.trim().is_empty());
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    if containers.is_empty() && !script {
        return Err(BuildError::NothingToRun);
    }
    if !script
        && let Some(c) = containers.first()
        && c.command.as_ref().is_none_or(|v| v.is_empty())
    {
        return Err(BuildError::NoCommand {
            container: c.name.clone(),
        });
    }
    if !has_default && let Some(c) = container_without_image(job) {
        return Err(BuildError::NoImage {
            container: format!("container {c:?}"),
            partition: partition_name.to_string(),
        });
    }
    if let Some(p) = partition {
        // The template as a pod: what conflicts with the partition's environment here
        // conflicts in every pod built from it.
        let pod = Pod {
            metadata: task.metadata.unwrap_or_default(),
            spec: task.spec,
            status: None,
        };
        crate::controller::jobenv::apply(&p.spec, &container_mounts(job), pod).map_err(
            |source| BuildError::JobEnv {
                partition: partition_name.to_string(),
                source,
            },
        )?;
    }
    Ok(())
}

/// The first task container (or init container) that gives no image, which then needs the
/// partition's `defaultImage` ([`TASK_CONTAINER`] when the template has no containers).
pub fn container_without_image(job: &BatchJob) -> Option<String> {
    let task = task_template(job).ok();
    let task = task.as_ref().or(job.spec.template.as_deref());
    let spec = task.and_then(|t| t.spec.as_ref());
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    if containers.is_empty() {
        return Some(TASK_CONTAINER.to_string());
    }
    containers
        .iter()
        .chain(
            spec.and_then(|s| s.init_containers.as_ref())
                .into_iter()
                .flatten(),
        )
        .find(|c| c.image.as_deref().is_none_or(str::is_empty))
        .map(|c| c.name.clone())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{job, partition};
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use muster_crds::v1alpha1::BatchJobSpec;

    #[test]
    fn buildability_is_checked_without_building() {
        let p = partition();
        let ok = job(
            "a",
            BatchJobSpec {
                script: Some("x".into()),
                ..Default::default()
            },
        );
        assert_eq!(check_buildable(&ok, Some(&p), "gpu"), Ok(()));
        assert!(matches!(
            check_buildable(&ok, None, "gpu"),
            Err(BuildError::NoImage { .. })
        ));
        let empty = job("b", BatchJobSpec::default());
        assert_eq!(
            check_buildable(&empty, Some(&p), "gpu"),
            Err(BuildError::NothingToRun)
        );
        let tmpl = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("img".into()),
                    command: Some(vec!["true".into()]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let own = job(
            "c",
            BatchJobSpec {
                template: Some(Box::new(tmpl)),
                ..Default::default()
            },
        );
        assert_eq!(check_buildable(&own, None, "gpu"), Ok(()));
    }
}

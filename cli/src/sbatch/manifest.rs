//! From parsed options to the BatchJob a Slurm user expects: each option to the spec field of
//! the same name, the script to `spec.script`, script arguments to the `task` container.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use muster_crds::labels;
use muster_crds::slurm::{GpuCount, gpus_from_gres, parse_gres};
use muster_crds::v1alpha1::{BatchJob, BatchJobSpec, Exclusive, OpenMode};

use super::parse::{Merged, Origin, SbatchError};
use super::values;

/// The name of the task container in the pod template.
pub const TASK_CONTAINER: &str = "task";

/// What is being submitted besides the options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobSource {
    /// The batch script text.
    pub script: String,
    /// Slurm's default job name: the script's file name, `wrap` for `--wrap`, `sbatch` for a
    /// script read from standard input.
    pub default_name: String,
    /// Arguments after the script name.
    pub args: Vec<String>,
}

/// Where the job is submitted. Who submits it is not written by the client: the API server
/// records the authenticated user at admission (annotation `muster.dev/user`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Submitter {
    /// Namespace to put in the manifest (omitted: the one kubectl/muster is pointed at).
    pub namespace: Option<String>,
    /// The directory relative file names are read from (`-w FILE`, `-x FILE`); `None`: the
    /// process's.
    pub cwd: Option<std::path::PathBuf>,
}

/// The script `sbatch --wrap` submits (Slurm's own wording).
pub fn wrap_script(command: &str) -> String {
    format!("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n")
}

/// Longest name prefix kept for `metadata.generateName`, leaving room for the random suffix
/// and for the names of the pods derived from it.
const NAME_PREFIX_MAX: usize = 40;

/// A DNS-1123 label form of a job name (`gpus_per_task_test` → `gpus-per-task-test`).
pub fn dns_safe_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    out.truncate(NAME_PREFIX_MAX);
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("job");
    }
    out
}

/// The Kubernetes name of a Slurm partition: lower case, `_` as `-` (`gpu_partition` →
/// `gpu-partition`), since Partition objects cannot have upper case or `_` in their names.
pub fn partition_object_name(partition: &str) -> String {
    partition.to_ascii_lowercase().replace('_', "-")
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// A hostlist option as the BatchJob's field: the names compressed into one hostlist
/// (options may separate names with spaces, which the field does not take).
pub(crate) fn hostlist_field(v: &str) -> String {
    match muster_crds::slurm::hostlist::expand(v) {
        Ok(names) => muster_crds::slurm::hostlist::compress(names),
        Err(_) => v.to_string(),
    }
}

/// An int-or-string field: a plain number stays a number, anything else is Slurm syntax.
pub(crate) fn int_or_string(s: &str) -> IntOrString {
    match s.parse::<i32>() {
        Ok(n) if !s.starts_with('+') && !s.starts_with('-') => IntOrString::Int(n),
        _ => IntOrString::String(s.to_string()),
    }
}

/// Check what no single option can check alone, naming the line of the option at fault: every
/// problem found.
pub fn check(merged: &Merged) -> Vec<SbatchError> {
    let o = &merged.options;
    let mut errors = Vec::new();

    // Values sbatch checks once all options are read (the rest are checked as given).
    type Check = fn(&str) -> Result<String, String>;
    let lazy: [(&str, &Option<String>, Check); 8] = [
        ("gres", &o.gres, values::gres),
        ("gpus", &o.gpus, values::gpus),
        ("gpus-per-node", &o.gpus_per_node, values::gpus),
        ("gpus-per-task", &o.gpus_per_task, values::gpus),
        ("constraint", &o.constraint, values::constraint),
        ("dependency", &o.dependency, values::dependency),
        ("array", &o.array, values::array),
        ("gpu-bind", &o.gpu_bind, values::gpu_bind),
    ];
    for (opt, value, check) in lazy {
        if let Some(v) = value
            && let Err(why) = check(v)
        {
            let message = if opt == "gres" {
                // Slurm's own wording, so the error reads as sbatch users know it.
                format!("invalid generic resource (gres) specification '{v}': {why}")
            } else {
                format!("invalid value '{v}' for --{opt}: {why}")
            };
            errors.push(SbatchError::at(merged.origin(opt), message));
        }
    }

    let mems: Vec<&str> = [
        ("mem", o.mem.is_some()),
        ("mem-per-cpu", o.mem_per_cpu.is_some()),
        ("mem-per-gpu", o.mem_per_gpu.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, given)| given.then_some(k))
    .collect();
    if mems.len() > 1 {
        errors.push(SbatchError::at(
            merged.origin(mems[1]),
            format!(
                "--{} and --{} are mutually exclusive: give one of --mem, --mem-per-cpu and --mem-per-gpu",
                mems[0], mems[1]
            ),
        ));
    }

    if o.gpus_per_task.is_some() && o.ntasks.is_none() && o.ntasks_per_node.is_none() {
        errors.push(SbatchError::at(
            merged.origin("gpus-per-task"),
            "--gpus-per-task needs a task count: add --ntasks (-n) or --ntasks-per-node",
        ));
    }

    if o.gres.is_some() && o.gpus_per_node.is_some() {
        errors.push(SbatchError::at(
            merged.origin("gpus-per-node"),
            "--gres=gpu:… and --gpus-per-node both set GPUs per node: give one of them",
        ));
    }

    if o.mem_per_gpu.is_some()
        && o.gpus.is_none()
        && o.gpus_per_node.is_none()
        && o.gpus_per_task.is_none()
        && o.gres.is_none()
    {
        errors.push(SbatchError::at(
            merged.origin("mem-per-gpu"),
            "--mem-per-gpu needs a GPU request: add --gpus, --gpus-per-node, --gpus-per-task or --gres=gpu:N",
        ));
    }

    // One GPU type per job: every typed GPU request must name the same type.
    let typed: Vec<(&str, String)> = [
        (
            "gpus",
            o.gpus
                .as_deref()
                .and_then(|g| GpuCount::parse(g).ok()?.gpu_type),
        ),
        (
            "gpus-per-node",
            o.gpus_per_node
                .as_deref()
                .and_then(|g| GpuCount::parse(g).ok()?.gpu_type),
        ),
        (
            "gpus-per-task",
            o.gpus_per_task
                .as_deref()
                .and_then(|g| GpuCount::parse(g).ok()?.gpu_type),
        ),
        (
            "gres",
            o.gres
                .as_deref()
                .and_then(|g| gpus_from_gres(&parse_gres(g).ok()?).ok()??.gpu_type),
        ),
    ]
    .into_iter()
    .filter_map(|(k, t)| t.map(|t| (k, t)))
    .collect();
    if let [(k1, t1), .., (k2, t2)] = typed.as_slice()
        && !t1.eq_ignore_ascii_case(t2)
    {
        errors.push(SbatchError::at(
            merged.origin(k2),
            format!(
                "--{k2} asks for {t2} GPUs but --{k1} ({}) asks for {t1}: a job runs on one GPU type",
                merged.origin(k1)
            ),
        ));
    }

    // pyxis's options Muster refuses, given on the command line (directives are refused as
    // they are read).
    for why in o.pyxis.refusals() {
        errors.push(SbatchError::at(Origin::CommandLine, why));
    }
    if o.image.is_some() && o.container_image.is_some() {
        errors.push(SbatchError::at(
            merged.origin("container-image"),
            format!(
                "--image ({}) and --container-image both set the job's image: give one of them",
                merged.origin("image")
            ),
        ));
    }

    if let Some(p) = &o.partition {
        let name = partition_object_name(p);
        if !is_dns_subdomain(&name) {
            errors.push(SbatchError::at(
                merged.origin("partition"),
                format!(
                    "partition '{p}' cannot name a Partition object: use lower-case letters, \
                     digits, '-', '_' and '.'"
                ),
            ));
        }
    }
    errors
}

/// pyxis's `--container-env`: each named variable set in the submitting environment `env`
/// is given to the job's container with that value (over the image's); an unset one is left
/// to the image, as pyxis leaves it.
pub fn add_container_env(
    job: &mut BatchJob,
    names: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) {
    let mut vars: Vec<EnvVar> = Vec::new();
    for list in names {
        // Checked when parsed.
        for name in muster_crds::slurm::pyxis::env_names(list).unwrap_or_default() {
            if vars.iter().any(|v| v.name == name) {
                continue;
            }
            if let Some(value) = env(&name) {
                vars.push(EnvVar {
                    name,
                    value: Some(value),
                    ..EnvVar::default()
                });
            }
        }
    }
    if vars.is_empty() {
        return;
    }
    let template = job.spec.template.get_or_insert_with(Default::default);
    let spec = template.spec.get_or_insert_with(Default::default);
    if spec.containers.is_empty() {
        spec.containers.push(Container {
            name: TASK_CONTAINER.to_string(),
            ..Container::default()
        });
    }
    let env_list = spec.containers[0].env.get_or_insert_with(Vec::new);
    for v in vars {
        // --container-env wins over --export's value of the same variable, as pyxis's
        // variables are set last.
        env_list.retain(|e| e.name != v.name);
        env_list.push(v);
    }
}

/// Build the BatchJob for a submission. [`check`] must have passed.
pub fn build(merged: &Merged, source: &JobSource, who: &Submitter) -> BatchJob {
    let o = &merged.options;
    let job_name = o
        .job_name
        .clone()
        .unwrap_or_else(|| source.default_name.clone());

    let mut annotations = BTreeMap::new();
    if let Some(c) = &o.comment {
        annotations.insert(labels::COMMENT.to_string(), c.clone());
    }

    // Validated when parsed; an invalid value cannot reach here.
    let env: Vec<EnvVar> = o
        .export
        .as_deref()
        .and_then(|e| super::values::export_vars(e).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| EnvVar {
            name,
            value: Some(value),
            ..EnvVar::default()
        })
        .collect();
    let template = (o.image.is_some() || !source.args.is_empty() || !env.is_empty()).then(|| {
        PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: TASK_CONTAINER.to_string(),
                    image: o.image.clone(),
                    args: (!source.args.is_empty()).then(|| source.args.clone()),
                    env: (!env.is_empty()).then_some(env),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
        }
    });

    let spec = BatchJobSpec {
        partition: o.partition.as_deref().map(partition_object_name),
        job_name: Some(job_name.clone()),
        nodes: o.nodes.as_deref().map(int_or_string),
        ntasks: o.ntasks,
        ntasks_per_node: o.ntasks_per_node,
        cpus_per_task: o.cpus_per_task,
        mem: o.mem.clone(),
        mem_per_cpu: o.mem_per_cpu.clone(),
        mem_per_gpu: o.mem_per_gpu.clone(),
        gpus: o.gpus.as_deref().map(int_or_string),
        gpus_per_node: o.gpus_per_node.as_deref().map(int_or_string),
        gpus_per_task: o.gpus_per_task.as_deref().map(int_or_string),
        gres: o.gres.clone(),
        gpu_type: None,
        constraint: o.constraint.clone(),
        nodelist: o.nodelist.as_deref().map(hostlist_field),
        exclude: o.exclude.as_deref().map(hostlist_field),
        exclusive: o.exclusive.as_deref().map(|e| {
            if e == "user" {
                Exclusive::User
            } else {
                Exclusive::Node
            }
        }),
        // `-1` is Slurm's other spelling of no limit; the field takes `UNLIMITED`.
        time: o
            .time
            .as_deref()
            .map(|t| if t == "-1" { "UNLIMITED" } else { t })
            .map(int_or_string),
        array: o.array.as_deref().map(int_or_string),
        dependency: o.dependency.clone(),
        switches: o.switches.as_deref().map(int_or_string),
        gpu_bind: o.gpu_bind.clone(),
        nice: o.nice,
        priority: o.priority,
        requeue: if o.requeue {
            Some(true)
        } else if o.no_requeue {
            Some(false)
        } else {
            None
        },
        // Only `scontrol requeue` raises it.
        requeue_requests: None,
        hold: o.hold.then_some(true),
        account: o.account.clone(),
        // Checked when parsed; resolved here against the submitter's clock, as sbatch does.
        begin: o.begin.as_deref().and_then(|b| {
            muster_crds::slurm::begin::parse(b, &jiff::Zoned::now())
                .ok()
                .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
        }),
        signal: o.signal.clone(),
        output: o.output.clone(),
        error: o.error.clone(),
        chdir: o.chdir.clone(),
        open_mode: o.open_mode.as_deref().map(|m| {
            if m == "append" {
                OpenMode::Append
            } else {
                OpenMode::Truncate
            }
        }),
        cancel: None,
        script: Some(source.script.clone()),
        container_image: o.container_image.clone(),
        container_mounts: (!o.container_mounts.is_empty()).then(|| o.container_mounts.join(",")),
        container_workdir: o.container_workdir.clone(),
        template: template.map(Box::new),
    };

    BatchJob {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", dns_safe_name(&job_name))),
            namespace: who.namespace.clone(),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_dns_labels() {
        assert_eq!(dns_safe_name("gpus_per_task_test"), "gpus-per-task-test");
        assert_eq!(dns_safe_name("train.sh"), "train-sh");
        assert_eq!(dns_safe_name("My Job #1"), "my-job-1");
        assert_eq!(dns_safe_name("__x__"), "x");
        assert_eq!(dns_safe_name("日本"), "job");
        assert_eq!(dns_safe_name(&"a".repeat(100)).len(), NAME_PREFIX_MAX);
        assert_eq!(
            dns_safe_name(&format!("{}_b", "a".repeat(39))),
            "a".repeat(39)
        );
    }

    #[test]
    fn partitions_get_kubernetes_names() {
        assert_eq!(partition_object_name("gpu_partition"), "gpu-partition");
        assert_eq!(partition_object_name("Blackwell"), "blackwell");
        assert!(is_dns_subdomain("gpu-partition"));
        assert!(!is_dns_subdomain("gpu partition"));
        assert!(!is_dns_subdomain("-gpu"));
    }

    #[test]
    fn numbers_stay_numbers() {
        assert_eq!(int_or_string("2"), IntOrString::Int(2));
        assert_eq!(int_or_string("2-4"), IntOrString::String("2-4".into()));
        assert_eq!(
            int_or_string("00:10:00"),
            IntOrString::String("00:10:00".into())
        );
        assert_eq!(int_or_string("+5"), IntOrString::String("+5".into()));
    }
}

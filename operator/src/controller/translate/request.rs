//! The one translation of a BatchJob spec into the core's request: every Slurm field parsed
//! once, every error naming its field.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use muster_crds::slurm::{
    ArraySpec, Constraint, DependencySpec, GpuBind, GpuCount, MemSize, NodeRange, Switches,
    TimeLimit, gpus_from_gres, hostlist, parse_gres,
};
use muster_crds::v1alpha1::{BatchJob, BatchJobSpec, Exclusive};

use crate::core::{JobRequest, MemoryRequest};

use super::{FieldError, parse_ios, parse_str};

/// A BatchJob spec translated for the scheduling core: [`job_request`]'s result.
///
/// Everything a spec field asks of the scheduler is in here — in `request` when the core
/// places by it — so no caller reads a spec field of its own accord.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedJob {
    /// What the core schedules: shape, GPUs and their type, memory, time, constraint,
    /// switches, GPU binding, nodelist, exclude, exclusivity.
    pub request: JobRequest,
    /// `--partition` (`None`: the default partition).
    pub partition: Option<String>,
    /// `--time` as given (`None`: the partition's default).
    pub time: Option<TimeLimit>,
    /// `--array`.
    pub array: Option<ArraySpec>,
    /// `--dependency`.
    pub dependency: Option<DependencySpec>,
    /// `--hold`.
    pub hold: bool,
    /// `--nice`.
    pub nice: i32,
    /// `--priority`.
    pub priority: Option<u32>,
    /// `--requeue` (default) / `--no-requeue`.
    pub requeue: bool,
    /// `spec.cancel` (set by `scancel`): the job is to stop, or never start.
    pub cancel: bool,
    /// `--gpus-per-node` (or the gres count) as given, echoed as `SLURM_GPUS_PER_NODE`.
    pub gpus_per_node_echo: Option<String>,
    /// `--gpus-per-task` as given, echoed as `SLURM_GPUS_PER_TASK`.
    pub gpus_per_task_echo: Option<String>,
}

fn int_or_string(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// A hostlist field (`nodelist`, `exclude`) as Node names, without repeats, in its order.
fn node_names(field: &str, v: &Option<String>, errs: &mut Vec<FieldError>) -> Vec<String> {
    let Some(text) = v.as_deref() else {
        return Vec::new();
    };
    if text.contains('/') {
        errs.push(FieldError::new(
            field,
            format!(
                "{text:?} looks like a file: sbatch reads a file of node names (-w FILE, -x FILE); a BatchJob lists the names as a hostlist, e.g. gpu[001-004]"
            ),
        ));
        return Vec::new();
    }
    let names = match hostlist::expand(text) {
        Ok(n) => n,
        Err(e) => {
            errs.push(FieldError::syntax(field, e));
            return Vec::new();
        }
    };
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        if !is_node_name(&n) {
            errs.push(FieldError::new(
                field,
                format!(
                    "{n:?} is not a Node name (lower-case letters, digits, '-' and '.', at most 253 characters)"
                ),
            ));
            return Vec::new();
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Whether `s` can name a Kubernetes Node (a DNS-1123 subdomain).
fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The one translation of a BatchJob spec into what the scheduling core schedules
/// ([`ParsedJob::request`]) and the rest of what the job asks for. The operator, the
/// simulator's native traces and `sbatch --test-only` all call this, so a field takes
/// effect the same way everywhere; the partition's defaults (time, CPUs and memory per GPU)
/// are applied by the core against the job's partition ([`ParsedJob::partition`]).
///
/// Every error is returned, each naming its field (`spec.gpusPerTask`) and what is allowed.
pub fn job_request(spec: &BatchJobSpec) -> Result<ParsedJob, Vec<FieldError>> {
    let mut errs = Vec::new();
    let mut req = JobRequest::default();

    if let Some(n) = parse_ios(
        "spec.nodes",
        &spec.nodes,
        NodeRange::from_int,
        NodeRange::parse,
        &mut errs,
    ) {
        req.min_nodes = Some(n.min);
        req.max_nodes = Some(n.max);
    }
    req.ntasks = spec.ntasks;
    req.ntasks_per_node = spec.ntasks_per_node;
    req.cpus_per_task = spec.cpus_per_task;
    for (field, v) in [
        ("spec.ntasks", spec.ntasks),
        ("spec.ntasksPerNode", spec.ntasks_per_node),
        ("spec.cpusPerTask", spec.cpus_per_task),
    ] {
        if v == Some(0) {
            errs.push(FieldError::new(field, "must be at least 1"));
        }
    }

    // Memory: at most one form.
    let mems = [
        ("spec.mem", &spec.mem),
        ("spec.memPerCpu", &spec.mem_per_cpu),
        ("spec.memPerGpu", &spec.mem_per_gpu),
    ];
    let given: Vec<&str> = mems
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(f, _)| *f)
        .collect();
    if given.len() > 1 {
        errs.push(FieldError::new(
            given[1],
            format!(
                "{} are mutually exclusive (as sbatch's --mem, --mem-per-cpu and --mem-per-gpu): give one",
                given.join(" and ")
            ),
        ));
    } else {
        if let Some(m) = parse_str("spec.mem", &spec.mem, MemSize::parse, &mut errs) {
            req.memory = Some(if m.is_zero() {
                MemoryRequest::WholeNode
            } else {
                MemoryRequest::PerNode(m.mib())
            });
        }
        if let Some(m) = parse_str(
            "spec.memPerCpu",
            &spec.mem_per_cpu,
            MemSize::parse,
            &mut errs,
        ) {
            req.memory = Some(MemoryRequest::PerCpu(m.mib()));
        }
        if let Some(m) = parse_str(
            "spec.memPerGpu",
            &spec.mem_per_gpu,
            MemSize::parse,
            &mut errs,
        ) {
            req.memory = Some(MemoryRequest::PerGpu(m.mib()));
        }
    }

    // GPUs and their type.
    let mut types: Vec<(&str, String)> = Vec::new();
    if let Some(t) = &spec.gpu_type {
        types.push(("spec.gpuType", t.clone()));
    }
    // A count of 0 asks for no GPUs, as Slurm reads `--gpus=0` and `--gres=gpu:0` (its type
    // then constrains nothing).
    let mut gpu_count = |field: &'static str, v: &Option<IntOrString>, errs: &mut Vec<_>| {
        let c: Option<GpuCount> =
            parse_ios(field, v, GpuCount::from_int, GpuCount::parse, errs).filter(|c| c.count > 0);
        if let Some(t) = c.as_ref().and_then(|c| c.gpu_type.clone()) {
            types.push((field, t));
        }
        c.map(|c| c.count)
    };
    req.gpus = gpu_count("spec.gpus", &spec.gpus, &mut errs);
    req.gpus_per_node = gpu_count("spec.gpusPerNode", &spec.gpus_per_node, &mut errs);
    req.gpus_per_task = gpu_count("spec.gpusPerTask", &spec.gpus_per_task, &mut errs);
    let mut gpus_per_node_echo = spec.gpus_per_node.as_ref().map(int_or_string);
    if let Some(g) = &spec.gres {
        match parse_gres(g).and_then(|items| gpus_from_gres(&items)) {
            Ok(Some(c)) if c.count == 0 => {}
            Ok(Some(c)) => {
                if req.gpus_per_node.is_some() {
                    errs.push(FieldError::new(
                        "spec.gres",
                        "gres and gpusPerNode both set GPUs per node: give one of them",
                    ));
                } else {
                    req.gpus_per_node = Some(c.count);
                    gpus_per_node_echo = Some(match &c.gpu_type {
                        Some(t) => format!("{t}:{}", c.count),
                        None => c.count.to_string(),
                    });
                }
                if let Some(t) = c.gpu_type {
                    types.push(("spec.gres", t));
                }
            }
            Ok(None) => {}
            Err(e) => errs.push(FieldError::syntax("spec.gres", e)),
        }
    }
    if req
        .memory
        .is_some_and(|m| matches!(m, MemoryRequest::PerGpu(_)))
        && req.gpus.is_none()
        && req.gpus_per_node.is_none()
        && req.gpus_per_task.is_none()
    {
        errs.push(FieldError::new(
            "spec.memPerGpu",
            "needs a GPU request (gpus, gpusPerNode, gpusPerTask or gres)",
        ));
    }
    if let Some((f0, t0)) = types.first() {
        if let Some((f1, t1)) = types.iter().find(|(_, t)| !t.eq_ignore_ascii_case(t0)) {
            errs.push(FieldError::new(
                *f1,
                format!("GPU type {t1:?} contradicts {t0:?} from {f0}: give the type once"),
            ));
        }
        req.gpu_type = Some(t0.clone());
    }
    if req.gpus_per_task.is_some() && req.ntasks.is_none() && req.ntasks_per_node.is_none() {
        errs.push(FieldError::new(
            "spec.gpusPerTask",
            "needs a task count: set ntasks or ntasksPerNode (as sbatch's --gpus-per-task needs -n)",
        ));
    }

    match spec.exclusive.unwrap_or_default() {
        Exclusive::Shared => {}
        Exclusive::Node => req.exclusive = true,
        Exclusive::User => req.exclusive_user = true,
    }
    req.nodelist = node_names("spec.nodelist", &spec.nodelist, &mut errs);
    req.exclude = node_names("spec.exclude", &spec.exclude, &mut errs);
    if let Some(n) = req.nodelist.iter().find(|n| req.exclude.contains(n)) {
        errs.push(FieldError::new(
            "spec.exclude",
            format!("{n} is in both nodelist and exclude: a node cannot be required and refused"),
        ));
    }
    let time = parse_ios(
        "spec.time",
        &spec.time,
        TimeLimit::from_int,
        TimeLimit::parse,
        &mut errs,
    );
    req.time_limit = time;

    let array = parse_ios(
        "spec.array",
        &spec.array,
        ArraySpec::from_int,
        ArraySpec::parse,
        &mut errs,
    );
    let dependency = parse_str(
        "spec.dependency",
        &spec.dependency,
        DependencySpec::parse,
        &mut errs,
    );
    req.constraint = parse_str(
        "spec.constraint",
        &spec.constraint,
        Constraint::parse,
        &mut errs,
    );
    req.switches = parse_ios(
        "spec.switches",
        &spec.switches,
        Switches::from_int,
        Switches::parse,
        &mut errs,
    );
    req.gpu_bind = parse_str("spec.gpuBind", &spec.gpu_bind, GpuBind::parse, &mut errs);
    // Read by the step runtime (the warning before the time limit); checked here once.
    parse_str(
        "spec.signal",
        &spec.signal,
        muster_crds::slurm::WarnSignal::parse,
        &mut errs,
    );

    if errs.is_empty() {
        Ok(ParsedJob {
            request: req,
            partition: spec.partition.clone(),
            time,
            array,
            dependency,
            hold: spec.hold.unwrap_or(false),
            nice: spec.nice.unwrap_or(0),
            priority: spec.priority,
            requeue: spec.requeue.unwrap_or(true),
            cancel: spec.cancel.unwrap_or(false),
            gpus_per_node_echo,
            gpus_per_task_echo: spec.gpus_per_task.as_ref().map(int_or_string),
        })
    } else {
        Err(errs)
    }
}

/// The submitting user of a BatchJob, as the operator knows it: the `muster.dev/user`
/// annotation (`sbatch` sets it). `None` when absent or empty.
pub fn job_user(job: &BatchJob) -> Option<String> {
    job.annotations()
        .get(muster_crds::labels::USER)
        .filter(|u| !u.is_empty())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::{i, s};
    use super::super::{join_errors, pending_job};
    use super::*;

    #[test]
    fn sbatch_patterns_parse_to_requests() {
        // gres_mpirun.sh: --nodes=2 --ntasks-per-node=2 --gres=gpu:4
        let p = job_request(&BatchJobSpec {
            nodes: i(2),
            ntasks_per_node: Some(2),
            gres: Some("gpu:4".into()),
            time: s("00:10:00"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.request.min_nodes, Some(2));
        assert_eq!(p.request.max_nodes, Some(2));
        assert_eq!(p.request.ntasks_per_node, Some(2));
        assert_eq!(p.request.gpus_per_node, Some(4));
        assert_eq!(p.request.time_limit, Some(TimeLimit::from_minutes(10)));
        assert_eq!(p.gpus_per_node_echo.as_deref(), Some("4"));

        // typed_gpu_constraint.sh: --gres=gpu:tesla:v100:1 is refused by Slurm too; the typed
        // form is gpu:v100:1.
        let e = job_request(&BatchJobSpec {
            gres: Some("gpu:tesla:v100:1".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.gres");
        let p = job_request(&BatchJobSpec {
            gres: Some("gpu:v100:1".into()),
            constraint: Some("tesla_v100".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.request.gpu_type.as_deref(), Some("v100"));
        assert_eq!(p.request.gpus_per_node, Some(1));
        assert!(p.request.constraint.is_some());

        // torchrun: 8 nodes x 8 GPUs, exclusive, 96 CPUs per task.
        let p = job_request(&BatchJobSpec {
            nodes: i(8),
            ntasks_per_node: Some(1),
            gpus_per_node: i(8),
            cpus_per_task: Some(96),
            exclusive: Some(Exclusive::Node),
            ..Default::default()
        })
        .unwrap();
        assert!(p.request.exclusive);
        assert_eq!(p.request.gpus_per_node, Some(8));
        assert_eq!(p.request.cpus_per_task, Some(96));

        // gpus_per_task.sh
        let p = job_request(&BatchJobSpec {
            nodes: i(2),
            ntasks_per_node: Some(2),
            gpus_per_task: i(1),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.request.gpus_per_task, Some(1));
        assert_eq!(p.gpus_per_task_echo.as_deref(), Some("1"));
    }

    #[test]
    fn placement_fields_reach_the_request() {
        let p = job_request(&BatchJobSpec {
            constraint: Some("[leaf1|leaf2]".into()),
            switches: s("1@10:00"),
            gpu_bind: Some("map_gpu:7,6".into()),
            nodelist: Some("gpu[001-002],gpu001".into()),
            exclude: Some("gpu003 gpu004".into()),
            exclusive: Some(Exclusive::User),
            ..Default::default()
        })
        .unwrap();
        let r = &p.request;
        assert_eq!(r.constraint.as_ref().unwrap().to_string(), "[leaf1|leaf2]");
        assert_eq!(r.switches.unwrap().count, 1);
        assert!(r.gpu_bind.is_some());
        assert_eq!(r.nodelist, ["gpu001", "gpu002"], "repeats dropped");
        assert_eq!(r.exclude, ["gpu003", "gpu004"]);
        assert!(r.exclusive_user && !r.exclusive);
        let whole = job_request(&BatchJobSpec {
            exclusive: Some(Exclusive::Node),
            ..Default::default()
        })
        .unwrap();
        assert!(whole.request.exclusive && !whole.request.exclusive_user);
    }

    #[test]
    fn bad_node_lists_are_named() {
        for (spec, field, words) in [
            (
                BatchJobSpec {
                    nodelist: Some("./nodes.txt".into()),
                    ..Default::default()
                },
                "spec.nodelist",
                "looks like a file",
            ),
            (
                BatchJobSpec {
                    exclude: Some("gpu[001-".into()),
                    ..Default::default()
                },
                "spec.exclude",
                "hostlist",
            ),
            (
                BatchJobSpec {
                    nodelist: Some("GPU1".into()),
                    ..Default::default()
                },
                "spec.nodelist",
                "not a Node name",
            ),
            (
                BatchJobSpec {
                    nodelist: Some("gpu1".into()),
                    exclude: Some("gpu[1-2]".into()),
                    ..Default::default()
                },
                "spec.exclude",
                "both nodelist and exclude",
            ),
        ] {
            let e = job_request(&spec).unwrap_err();
            assert_eq!(e[0].field, field, "{e:?}");
            assert!(e[0].message.contains(words), "{}", e[0]);
        }
    }

    #[test]
    fn the_user_is_the_submitters_annotation() {
        let mut j = BatchJob::new("a", BatchJobSpec::default());
        assert_eq!(job_user(&j), None);
        j.metadata.annotations =
            Some([(muster_crds::labels::USER.to_string(), "dana".to_string())].into());
        assert_eq!(job_user(&j).as_deref(), Some("dana"));
        let p = job_request(&j.spec).unwrap();
        assert_eq!(
            pending_job(&j, 1, &p, Some(0), 0, None, None)
                .user
                .as_deref(),
            Some("dana")
        );
    }

    #[test]
    fn memory_forms() {
        let m = |spec: BatchJobSpec| job_request(&spec).unwrap().request.memory;
        assert_eq!(
            m(BatchJobSpec {
                mem: Some("16G".into()),
                ..Default::default()
            }),
            Some(MemoryRequest::PerNode(16 * 1024))
        );
        assert_eq!(
            m(BatchJobSpec {
                mem: Some("0".into()),
                ..Default::default()
            }),
            Some(MemoryRequest::WholeNode)
        );
        assert_eq!(
            m(BatchJobSpec {
                mem_per_cpu: Some("512M".into()),
                ..Default::default()
            }),
            Some(MemoryRequest::PerCpu(512))
        );
        assert_eq!(
            m(BatchJobSpec {
                mem_per_gpu: Some("64000".into()),
                gpus: i(2),
                ..Default::default()
            }),
            Some(MemoryRequest::PerGpu(64000))
        );
        let e = job_request(&BatchJobSpec {
            mem: Some("1G".into()),
            mem_per_cpu: Some("1G".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e[0].message.contains("mutually exclusive"), "{}", e[0]);
    }

    #[test]
    fn times_and_unlimited() {
        let t = |v| {
            job_request(&BatchJobSpec {
                time: v,
                ..Default::default()
            })
            .unwrap()
            .request
            .time_limit
        };
        assert_eq!(t(i(30)), Some(TimeLimit::from_minutes(30)));
        assert_eq!(t(s("1-00:00:00")), Some(TimeLimit::from_minutes(1440)));
        assert_eq!(t(s("UNLIMITED")), Some(TimeLimit::Unlimited));
        assert_eq!(t(None), None);
    }

    #[test]
    fn every_bad_field_is_named() {
        let e = job_request(&BatchJobSpec {
            nodes: s("4-2"),
            time: s("1h"),
            gpus: s("lots"),
            array: s("5-1"),
            dependency: Some("afterwards:x".into()),
            constraint: Some("a&&b".into()),
            switches: s("0"),
            gpu_bind: Some("nearest".into()),
            mem: Some("1.5G".into()),
            ..Default::default()
        })
        .unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "spec.nodes",
            "spec.time",
            "spec.gpus",
            "spec.array",
            "spec.dependency",
            "spec.constraint",
            "spec.switches",
            "spec.gpuBind",
            "spec.mem",
        ] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
        // Each message says what is allowed.
        let time = e.iter().find(|e| e.field == "spec.time").unwrap();
        assert!(time.message.contains("expected"), "{time}");
        assert!(join_errors(&e).contains("spec.time: "));
    }

    /// A count of 0 asks for no GPUs, as Slurm takes `--gpus=0` and `--gres=gpu:0`.
    #[test]
    fn zero_gpus_are_none() {
        for spec in [
            BatchJobSpec {
                gpus: i(0),
                ..Default::default()
            },
            BatchJobSpec {
                gpus_per_node: s("h100:0"),
                ..Default::default()
            },
            BatchJobSpec {
                gres: Some("gpu:0".into()),
                ..Default::default()
            },
            BatchJobSpec {
                gpus_per_task: s("0"),
                ntasks: Some(2),
                ..Default::default()
            },
        ] {
            let p = job_request(&spec).unwrap();
            let r = &p.request;
            assert_eq!(
                (
                    r.gpus,
                    r.gpus_per_node,
                    r.gpus_per_task,
                    r.gpu_type.as_deref()
                ),
                (None, None, None, None),
                "{spec:?}"
            );
        }
        let e = job_request(&BatchJobSpec {
            gpus: i(0),
            mem_per_gpu: Some("10G".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.memPerGpu");
    }

    #[test]
    fn contradicting_gpu_types_are_refused() {
        let e = job_request(&BatchJobSpec {
            gpu_type: Some("a100".into()),
            gpus: s("h100:2"),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.gpus");
        assert!(e[0].message.contains("a100"));
        // The same type given twice, in any case, is fine.
        let p = job_request(&BatchJobSpec {
            gpu_type: Some("A100".into()),
            gpus: s("a100:2"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.request.gpus, Some(2));
        let e = job_request(&BatchJobSpec {
            gpus_per_task: i(1),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.gpusPerTask");
        let e = job_request(&BatchJobSpec {
            gres: Some("gpu:2".into()),
            gpus_per_node: i(2),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e[0].field, "spec.gres");
        let e = job_request(&BatchJobSpec {
            gres: Some("mps:2".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e[0].message.contains("GPUs only"), "{}", e[0]);
    }

    #[test]
    fn arrays_and_dependencies_parse() {
        let p = job_request(&BatchJobSpec {
            array: s("0-15%4"),
            dependency: Some("afterok:train".into()),
            ..Default::default()
        })
        .unwrap();
        let a = p.array.unwrap();
        assert_eq!(a.indices.len(), 16);
        assert_eq!(a.max_running, Some(4));
        assert_eq!(p.dependency.unwrap().items.len(), 1);
        let p = job_request(&BatchJobSpec {
            array: i(7),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.array.unwrap().indices, vec![7]);
    }
}

//! One node pod of an admission: the template turned into the node daemon's pod, with the
//! node's share, its environment, the step runtime's volumes, placement and the partition's
//! settings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource,
    KeyToPath, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectFieldSelector, Pod, PodDNSConfig, ResourceRequirements, SecretVolumeSource, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use muster_crds::labels;
use muster_crds::step;
use muster_crds::v1alpha1::{BatchJob, GpuBinding, TaskAllocation};

use super::env::set_env;
use super::template::container_mounts;

/// The pods' [`step::END_TIME_ANNOTATION`]: when the time limit ends (`limit_end`), for a job
/// with `--signal` (whose warning follows it); `None` otherwise.
pub fn warning_end(job: &BatchJob, limit_end: Option<i64>) -> Option<String> {
    job.spec.signal.as_ref()?;
    limit_end.map(|e| e.to_string())
}
use super::{
    BuildError, DEFAULT_MASTER_PORT, JobContext, JobLayout, MASTER_PORT_ANNOTATION,
    TASK_ANNOTATION, TASK_CONTAINER, check_name, hostname, node_env_in, pod_name, service_name,
    task_template,
};
use crate::controller::{dra, quantity};

fn strip_device_resources(r: &mut Option<ResourceRequirements>) {
    if let Some(r) = r {
        for m in [&mut r.requests, &mut r.limits].into_iter().flatten() {
            m.retain(|k, _| !k.starts_with("nvidia.com/"));
        }
    }
}

/// The owner reference every object of the job carries.
pub fn owner_ref(job: &BatchJob) -> OwnerReference {
    job.controller_owner_ref(&())
        .unwrap_or_else(|| OwnerReference {
            api_version: BatchJob::api_version(&()).to_string(),
            kind: BatchJob::kind(&()).to_string(),
            name: job.name_any(),
            uid: job.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        })
}

/// The labels every pod of the job carries.
pub fn pod_labels(ctx: &JobContext<'_>, node: u32) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(labels::BATCHJOB.to_string(), ctx.job.name_any());
    l.insert(labels::JOB_ID.to_string(), ctx.job_id.to_string());
    l.insert(labels::NODE_RANK.to_string(), node.to_string());
    l.insert(labels::ATTEMPT.to_string(), ctx.attempt.to_string());
    if let Some((_, i)) = ctx.array {
        if let Some(p) = ctx.job.labels().get(labels::ARRAY_PARENT) {
            l.insert(labels::ARRAY_PARENT.to_string(), p.clone());
        }
        l.insert(labels::ARRAY_TASK_ID.to_string(), i.to_string());
    }
    l
}
/// Kubernetes expands `$(VAR)` and turns `$$` into `$` in `command` and `args`: a script must
/// reach bash as written, so every `$` is escaped.
fn escape_dollars(s: &str) -> String {
    s.replace('$', "$$")
}

/// The main container's command: the node daemon, running the batch step on node 0.
fn daemon_command(
    first: bool,
    script: Option<&str>,
    user: Option<Vec<String>>,
) -> Result<Vec<String>, BuildError> {
    let mut cmd = vec![step::POD_BINARY.to_string(), "node".to_string()];
    if !first {
        return Ok(cmd);
    }
    cmd.extend(["--batch".to_string(), "--".to_string()]);
    match script {
        Some(s) => cmd.extend([
            "/bin/bash".into(),
            "-c".into(),
            escape_dollars(s),
            "bash".into(),
        ]),
        None => {
            // A job without a script: its command is one step over every task.
            let user = user
                .filter(|u| !u.is_empty())
                .ok_or(BuildError::NoCommand {
                    container: TASK_CONTAINER.into(),
                })?;
            cmd.push(step::POD_SRUN.into());
            cmd.extend(user);
        }
    }
    Ok(cmd)
}

/// The pod of node `node` (its index in the job, `node_rank`).
pub fn build_pod(ctx: &JobContext<'_>, node: u32) -> Result<Pod, BuildError> {
    build_pod_in(ctx, &JobLayout::new(ctx.job, ctx.attempt, ctx.tasks), node)
}

/// [`build_pod`] with the job's [`JobLayout`] computed already (once for all its pods).
pub fn build_pod_in(
    ctx: &JobContext<'_>,
    layout: &JobLayout,
    node: u32,
) -> Result<Pod, BuildError> {
    check_name(ctx.job)?;
    let share = layout.share(node).ok_or(BuildError::NoSuchNode(node))?;
    let first = layout.ranks.first() == Some(&node);
    let name = ctx.job.name_any();
    let template = task_template(ctx.job)?;
    let mut meta = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let part_name = ctx.partition_name.to_string();
    let default_image = ctx.partition.and_then(|p| p.spec.default_image.clone());
    let script = ctx.job.spec.script.clone().filter(|s| !s.trim().is_empty());

    if spec.containers.is_empty() {
        if script.is_none() {
            return Err(BuildError::NothingToRun);
        }
        spec.containers.push(Container {
            name: TASK_CONTAINER.into(),
            ..Default::default()
        });
    }
    {
        let c = &mut spec.containers[0];
        if script.is_none() && c.command.as_ref().is_none_or(|v| v.is_empty()) {
            return Err(BuildError::NoCommand {
                container: c.name.clone(),
            });
        }
        let user = c.command.take();
        c.command = Some(daemon_command(first, script.as_deref(), user)?);
        if !first {
            // The daemon takes no arguments; the batch step's are node 0's ($1, $2, ...).
            c.args = None;
        }
    }
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if c.image.as_deref().is_none_or(str::is_empty) {
            c.image = Some(default_image.clone().ok_or_else(|| BuildError::NoImage {
                container: format!("container {:?}", c.name),
                partition: part_name.clone(),
            })?);
        }
        strip_device_resources(&mut c.resources);
    }

    // Requests of the node's share from the allocation; memory limited to what was
    // allocated (Slurm's ConstrainRAMSpace) unless the template sets a limit itself.
    {
        let c = &mut spec.containers[0];
        let r = c.resources.get_or_insert_with(Default::default);
        let req = r.requests.get_or_insert_with(Default::default);
        if share.cpu_millis > 0 {
            req.insert("cpu".into(), quantity::cpu_quantity(share.cpu_millis));
        }
        if share.memory_mib > 0 {
            req.insert("memory".into(), quantity::memory_quantity(share.memory_mib));
            let lim = r.limits.get_or_insert_with(Default::default);
            lim.entry("memory".into())
                .or_insert_with(|| quantity::memory_quantity(share.memory_mib));
        }
    }

    let env = node_env_in(ctx, layout, node)?;
    // MASTER_PORT: the task container's template value, else the annotation, else 29500;
    // every container gets the same unless it sets its own.
    let port = spec.containers[0]
        .env
        .as_ref()
        .and_then(|e| e.iter().find(|v| v.name == "MASTER_PORT"))
        .and_then(|v| v.value.clone())
        .or_else(|| ctx.job.annotations().get(MASTER_PORT_ANNOTATION).cloned())
        .unwrap_or_else(|| DEFAULT_MASTER_PORT.to_string());
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        set_env(c, &env, Some(&port));
    }

    // The step runtime: the binary from the operator image, the job's credential.
    let bin_mount = VolumeMount {
        name: step::BIN_VOLUME.into(),
        mount_path: step::BIN_DIR.into(),
        ..Default::default()
    };
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    volumes.retain(|v| {
        v.name != step::BIN_VOLUME && v.name != step::KEY_VOLUME && v.name != step::SIGNALS_VOLUME
    });
    // `scancel --signal`: the pod's signal requests as a file the kubelet keeps current.
    volumes.push(Volume {
        name: step::SIGNALS_VOLUME.into(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(
                [
                    ("requests", muster_crds::signals::ANNOTATION),
                    ("end-time", step::END_TIME_ANNOTATION),
                ]
                .into_iter()
                .map(|(path, key)| DownwardAPIVolumeFile {
                    path: path.into(),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.annotations['{key}']"),
                        api_version: None,
                    }),
                    ..Default::default()
                })
                .collect(),
            ),
            default_mode: None,
        }),
        ..Default::default()
    });
    volumes.push(Volume {
        name: step::BIN_VOLUME.into(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    });
    let local_key = step::key_in_pod(layout.ranks.len());
    volumes.push(if local_key {
        // One node: the daemon writes its own key here (memory-backed, this pod's only).
        Volume {
            name: step::KEY_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity("1Mi".into())),
            }),
            ..Default::default()
        }
    } else {
        Volume {
            name: step::KEY_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(step::secret_name(&name)),
                default_mode: Some(0o400),
                items: Some(vec![KeyToPath {
                    key: step::SECRET_KEY.into(),
                    path: step::SECRET_KEY.into(),
                    mode: None,
                }]),
                optional: None,
            }),
            ..Default::default()
        }
    });
    {
        let c = &mut spec.containers[0];
        let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
        mounts.retain(|m| {
            m.mount_path != step::BIN_DIR
                && m.mount_path != step::KEY_DIR
                && m.mount_path != step::SIGNALS_DIR
        });
        mounts.push(bin_mount.clone());
        mounts.push(VolumeMount {
            name: step::SIGNALS_VOLUME.into(),
            mount_path: step::SIGNALS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: step::KEY_VOLUME.into(),
            mount_path: step::KEY_DIR.into(),
            read_only: Some(!local_key),
            ..Default::default()
        });
    }
    spec.init_containers.get_or_insert_with(Vec::new).insert(
        0,
        Container {
            name: step::INSTALL_CONTAINER.into(),
            image: Some(ctx.step.image.clone()),
            command: Some(vec![
                step::IMAGE_BINARY.into(),
                "install".into(),
                step::BIN_DIR.into(),
            ]),
            volume_mounts: Some(vec![bin_mount]),
            ..Default::default()
        },
    );

    // Placement: required affinity to the node, ANDed into every term the template gives.
    let req = NodeSelectorRequirement {
        key: labels::HOSTNAME.into(),
        operator: "In".into(),
        values: Some(vec![share.node.clone()]),
    };
    let aff = spec.affinity.get_or_insert_with(Affinity::default);
    let na = aff.node_affinity.get_or_insert_with(NodeAffinity::default);
    let sel = na
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(|| NodeSelector {
            node_selector_terms: Vec::new(),
        });
    if sel.node_selector_terms.is_empty() {
        sel.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for t in &mut sel.node_selector_terms {
        t.match_expressions
            .get_or_insert_with(Vec::new)
            .push(req.clone());
    }
    spec.node_name = None;

    if let Some(p) = ctx.partition {
        if !p.spec.tolerations.is_empty() {
            spec.tolerations
                .get_or_insert_with(Vec::new)
                .extend(p.spec.tolerations.iter().cloned());
        }
        if let Some(rc) = &p.spec.runtime_class_name {
            spec.runtime_class_name = Some(rc.clone());
        }
        if let Some(g) = p.spec.grace_time_seconds {
            spec.termination_grace_period_seconds = Some(i64::from(g));
        }
    }
    spec.restart_policy = Some("Never".into());
    spec.hostname = Some(hostname(&name, ctx.attempt, node));
    if layout.ranks.len() > 1 {
        let svc = service_name(&name);
        let ns = ctx.job.namespace().unwrap_or_else(|| "default".into());
        let search = format!("{svc}.{ns}.svc.{}", ctx.step.cluster_domain);
        let dns = spec.dns_config.get_or_insert_with(PodDNSConfig::default);
        let searches = dns.searches.get_or_insert_with(Vec::new);
        if !searches.contains(&search) {
            searches.insert(0, search);
        }
        spec.subdomain = Some(svc);
    } else {
        spec.subdomain = None;
    }
    if spec.enable_service_links.is_none() {
        // Service links put one variable per Service of the namespace into every pod: noise
        // for batch jobs, and slow with thousands of job Services.
        spec.enable_service_links = Some(false);
    }

    let pod_name = pod_name(&name, ctx.attempt, node);
    let mut lbl = meta.labels.take().unwrap_or_default();
    lbl.extend(pod_labels(ctx, node));
    let mut ann = meta.annotations.take().unwrap_or_default();
    // The job's signal requests so far: the step runtime treats these as already sent.
    if let Some(s) = ctx.job.annotations().get(muster_crds::signals::ANNOTATION) {
        ann.insert(muster_crds::signals::ANNOTATION.into(), s.clone());
    }
    if let Some(end) = warning_end(ctx.job, ctx.limit_end) {
        ann.insert(step::END_TIME_ANNOTATION.into(), end);
    }
    let mut record = share.clone();
    record.pod = None;
    ann.insert(
        TASK_ANNOTATION.into(),
        serde_json::to_string(&record).unwrap_or_default(),
    );
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(pod_name.clone()),
            namespace: ctx.job.namespace(),
            labels: Some(lbl),
            annotations: Some(ann),
            owner_references: Some(vec![owner_ref(ctx.job)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    if let Some(p) = ctx.partition {
        pod = crate::controller::jobenv::apply(&p.spec, &container_mounts(ctx.job), pod).map_err(
            |source| BuildError::JobEnv {
                partition: part_name.clone(),
                source,
            },
        )?;
    }
    if ctx.gpu_binding == GpuBinding::Dra && !share.gpus.is_empty() {
        dra::attach_claim(&mut pod, &dra::claim_name(&pod_name));
    }
    Ok(pod)
}

/// The allocation a pod records in its [`TASK_ANNOTATION`].
pub fn pod_allocation(pod: &Pod) -> Option<TaskAllocation> {
    serde_json::from_str(pod.annotations().get(TASK_ANNOTATION)?).ok()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{ctx, gang, job, partition};
    use super::super::{check_buildable, node_ranks};
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, PodSpec, PodTemplateSpec};
    use muster_crds::v1alpha1::BatchJobSpec;

    fn spec_of(p: &Pod) -> &PodSpec {
        p.spec.as_ref().unwrap()
    }

    fn env_of(c: &Container) -> BTreeMap<String, String> {
        c.env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn one_pod_per_node_holds_the_nodes_share_and_the_batch_environment() {
        let j = job(
            "train",
            BatchJobSpec {
                script: Some("srun python train.py $1".into()),
                cpus_per_task: Some(4),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let c = ctx(&j, &tasks, Some(&p));
        assert_eq!(node_ranks(&tasks), [0, 1]);
        let pod = build_pod(&c, 1).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("train-1"));
        let s = spec_of(&pod);
        let e = env_of(&s.containers[0]);
        assert_eq!(e["SLURM_JOB_ID"], "1234");
        assert_eq!(e["SLURM_JOB_NAME"], "train");
        // Host names of the node pods, as Slurm lists nodes.
        assert_eq!(e["SLURM_JOB_NODELIST"], "train-[0-1]");
        assert_eq!(e["SLURM_NNODES"], "2");
        assert_eq!(e["SLURM_NTASKS"], "4");
        assert_eq!(e["SLURM_TASKS_PER_NODE"], "2(x2)");
        assert_eq!(e["SLURM_JOB_CPUS_PER_NODE"], "8(x2)");
        assert_eq!(e["SLURM_CPUS_ON_NODE"], "8");
        assert_eq!(e["SLURM_NODEID"], "1");
        assert_eq!(e["SLURMD_NODENAME"], "train-1");
        assert_eq!(e["SLURM_CPUS_PER_TASK"], "4");
        assert_eq!(e["SLURM_GPUS_PER_TASK"], "1");
        assert_eq!(e["SLURM_GPUS_ON_NODE"], "2");
        assert_eq!(e["SLURM_JOB_GPUS"], "2,3");
        assert_eq!(e["SLURM_JOB_PARTITION"], "gpu");
        assert_eq!(e["MASTER_ADDR"], "train-0");
        assert_eq!(e["MASTER_PORT"], "29500");
        assert_eq!(e["WORLD_SIZE"], "4");
        assert_eq!(e["NODE_RANK"], "1");
        assert_eq!(e["LOCAL_WORLD_SIZE"], "2");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "GPU-2,GPU-3");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(e[step::ENV_PORT], step::DEFAULT_PORT.to_string());
        assert_eq!(e[step::ENV_KEY_FILE], step::KEY_FILE);
        assert_eq!(e[step::ENV_KILL_WAIT], "40");
        let gpus: serde_json::Value = serde_json::from_str(&e[step::ENV_NODE_GPUS]).unwrap();
        assert_eq!(
            gpus,
            serde_json::json!({"gpus": [{"index": 2, "uuid": "GPU-2"}, {"index": 3, "uuid": "GPU-3"}]})
        );
        let ip = s.containers[0]
            .env
            .iter()
            .flatten()
            .find(|v| v.name == step::ENV_POD_IP)
            .unwrap();
        assert_eq!(
            ip.value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "status.podIP"
        );
        // Names resolve under the Service.
        assert_eq!(s.hostname.as_deref(), Some("train-1"));
        assert_eq!(s.subdomain.as_deref(), Some("train"));
        assert_eq!(
            s.dns_config.as_ref().unwrap().searches.as_deref(),
            Some(&["train.ml.svc.cluster.local".to_string()][..])
        );
        // The node's share: both tasks' CPUs, memory and GPUs.
        let r = s.containers[0].resources.as_ref().unwrap();
        assert_eq!(r.requests.as_ref().unwrap()["cpu"].0, "8");
        assert_eq!(r.requests.as_ref().unwrap()["memory"].0, "16384Mi");
        let rec = pod_allocation(&pod).unwrap();
        assert_eq!((rec.node.as_str(), rec.node_rank), ("gpu002", 1));
        assert_eq!(rec.gpus, vec![2, 3]);
        assert_eq!(rec.gpu_uuids, vec!["GPU-2", "GPU-3"]);
        // Not the batch host: the daemon only, waiting for steps.
        assert_eq!(
            s.containers[0].command.as_deref().unwrap(),
            [step::POD_BINARY, "node"]
        );
        // The step binary from the operator image; the credential mounted read-only.
        let init = &s.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.name, step::INSTALL_CONTAINER);
        assert_eq!(init.image.as_deref(), Some("muster/operator:test"));
        assert_eq!(
            init.command.as_deref().unwrap(),
            [step::IMAGE_BINARY, "install", step::BIN_DIR]
        );
        let mounts = s.containers[0].volume_mounts.as_ref().unwrap();
        assert!(mounts.iter().any(|m| m.mount_path == step::BIN_DIR));
        let key = mounts
            .iter()
            .find(|m| m.mount_path == step::KEY_DIR)
            .unwrap();
        assert_eq!(key.read_only, Some(true));
        let vol = s
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == key.name)
            .unwrap();
        let sv = vol.secret.as_ref().unwrap();
        assert_eq!(sv.secret_name.as_deref(), Some("train-step"));
        assert_eq!(sv.default_mode, Some(0o400));
        assert!(!env_of(&s.containers[0]).contains_key(step::ENV_LOCAL_KEY));
    }

    #[test]
    fn the_first_node_runs_the_script_once_through_the_daemon() {
        let j = job(
            "train",
            BatchJobSpec {
                script: Some("echo $HOSTNAME $$".into()),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let pod = build_pod(&ctx(&j, &tasks, Some(&p)), 0).unwrap();
        let s = spec_of(&pod);
        assert_eq!(s.containers[0].name, TASK_CONTAINER);
        assert_eq!(
            s.containers[0].image.as_deref(),
            Some("nvcr.io/nvidia/pytorch:24.01-py3")
        );
        assert_eq!(
            s.containers[0].command.as_deref().unwrap(),
            [
                step::POD_BINARY,
                "node",
                "--batch",
                "--",
                "/bin/bash",
                "-c",
                "echo $$HOSTNAME $$$$",
                "bash"
            ]
        );
        let e = env_of(&s.containers[0]);
        assert_eq!(e["SLURM_NODEID"], "0");
        assert_eq!(e["SLURM_PROCID"], "0");
        assert_eq!(e["SLURMD_NODENAME"], "train-0");
    }

    #[test]
    fn a_job_without_a_script_runs_its_command_as_one_step() {
        let tmpl = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("img".into()),
                    command: Some(vec!["python".into(), "-m".into(), "train".into()]),
                    args: Some(vec!["--lr=1".into()]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let j = job(
            "torch",
            BatchJobSpec {
                template: Some(Box::new(tmpl)),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p0 = build_pod(&ctx(&j, &tasks, None), 0).unwrap();
        let c0 = &spec_of(&p0).containers[0];
        assert_eq!(
            c0.command.as_deref().unwrap(),
            [
                step::POD_BINARY,
                "node",
                "--batch",
                "--",
                step::POD_SRUN,
                "python",
                "-m",
                "train"
            ]
        );
        assert_eq!(c0.args.as_deref(), Some(&["--lr=1".to_string()][..]));
        let p1 = build_pod(&ctx(&j, &tasks, None), 1).unwrap();
        let c1 = &spec_of(&p1).containers[0];
        assert_eq!(c1.command.as_deref().unwrap(), [step::POD_BINARY, "node"]);
        assert_eq!(c1.args, None);
        // An image's entrypoint cannot become a step: refused before any allocation.
        let mut no_cmd = j.clone();
        no_cmd
            .spec
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .command = None;
        let e = check_buildable(&no_cmd, None, "gpu").unwrap_err();
        assert!(matches!(e, BuildError::NoCommand { .. }), "{e}");
        assert!(e.to_string().contains("containers[0]"), "{e}");
    }

    #[test]
    fn placement_is_required_affinity_never_node_name() {
        let tmpl = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                node_name: Some("elsewhere".into()),
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("busybox".into()),
                    command: Some(vec!["sleep".into(), "1".into()]),
                    resources: Some(ResourceRequirements {
                        limits: Some([("nvidia.com/gpu".to_string(), Quantity("8".into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let j = job(
            "train",
            BatchJobSpec {
                template: Some(Box::new(tmpl)),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let pod = build_pod(&ctx(&j, &tasks, Some(&p)), 1).unwrap();
        let s = spec_of(&pod);
        assert_eq!(s.node_name, None);
        let terms = &s
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        let m = &terms[0].match_expressions.as_ref().unwrap()[0];
        assert_eq!(m.key, "kubernetes.io/hostname");
        assert_eq!(m.values.as_deref(), Some(&["gpu002".to_string()][..]));
        let r = s.containers[0].resources.as_ref().unwrap();
        assert!(
            r.limits
                .as_ref()
                .unwrap()
                .keys()
                .all(|k| !k.starts_with("nvidia.com/"))
        );
        assert_eq!(r.limits.as_ref().unwrap()["memory"].0, "16384Mi");
        assert_eq!(s.runtime_class_name.as_deref(), Some("nvidia"));
        assert_eq!(s.termination_grace_period_seconds, Some(45));
        assert_eq!(s.restart_policy.as_deref(), Some("Never"));
        assert_eq!(s.tolerations.as_ref().unwrap().len(), 1);
        // Ownership and labels.
        let o = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(o.kind, "BatchJob");
        assert_eq!(o.uid, "uid-1");
        assert_eq!(o.controller, Some(true));
        let l = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(l[labels::BATCHJOB], "train");
        assert_eq!(l[labels::JOB_ID], "1234");
        assert_eq!(l[labels::NODE_RANK], "1");
        assert_eq!(l[labels::ATTEMPT], "1");
    }

    #[test]
    fn template_cannot_override_binding_vars_but_may_set_master_port() {
        let mut tmpl = PodTemplateSpec::default();
        let env = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| EnvVar {
                        name: k.to_string(),
                        value: Some(v.to_string()),
                        value_from: None,
                    })
                    .collect::<Vec<_>>(),
            )
        };
        tmpl.spec = Some(PodSpec {
            containers: vec![
                Container {
                    name: "main".into(),
                    image: Some("img".into()),
                    env: env(&[
                        ("NVIDIA_VISIBLE_DEVICES", "all"),
                        ("WORLD_SIZE", "99"),
                        ("MUSTER_STEP_PORT", "1"),
                        ("MASTER_PORT", "1234"),
                        ("MY_VAR", "x"),
                    ]),
                    ..Default::default()
                },
                Container {
                    name: "sidecar".into(),
                    image: Some("side".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let mut j = job(
            "train",
            BatchJobSpec {
                template: Some(Box::new(tmpl)),
                script: Some("echo hi".into()),
                ..Default::default()
            },
        );
        j.metadata.annotations = Some([(MASTER_PORT_ANNOTATION.to_string(), "5555".into())].into());
        let tasks = gang();
        let pod = build_pod(&ctx(&j, &tasks, None), 0).unwrap();
        let s = spec_of(&pod);
        let main = env_of(&s.containers[0]);
        assert_eq!(main["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
        assert_eq!(main["WORLD_SIZE"], "4");
        assert_eq!(main["MUSTER_STEP_PORT"], step::DEFAULT_PORT.to_string());
        assert_eq!(
            main["MASTER_PORT"], "1234",
            "template env wins over the annotation"
        );
        assert_eq!(main["MY_VAR"], "x");
        let names: Vec<&str> = s.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(names.iter().filter(|n| **n == "WORLD_SIZE").count(), 1);
        // The sidecar sees the same GPU binding (a CUDA image would default to all).
        let side = env_of(&s.containers[1]);
        assert_eq!(side["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
        assert_eq!(side["MASTER_PORT"], "1234");
        // The script runs in the first container through the daemon.
        assert_eq!(s.containers[0].command.as_ref().unwrap()[6], "echo hi");
        assert!(s.containers[1].command.is_none());
    }

    #[test]
    fn a_one_node_job_has_no_service_and_a_gpuless_pod_sees_no_gpu() {
        let mut j = job(
            "solo",
            BatchJobSpec {
                script: Some("true".into()),
                ..Default::default()
            },
        );
        j.metadata.annotations = Some([(MASTER_PORT_ANNOTATION.to_string(), "5555".into())].into());
        let tasks = vec![TaskAllocation {
            node: "n1".into(),
            ..Default::default()
        }];
        let p = partition();
        let pod = build_pod(&ctx(&j, &tasks, Some(&p)), 0).unwrap();
        let s = spec_of(&pod);
        let e = env_of(&s.containers[0]);
        assert_eq!(e["MASTER_PORT"], "5555");
        assert_eq!(e["MASTER_ADDR"], "solo-0");
        assert_eq!(e["SLURM_JOB_NODELIST"], "solo-0");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "void");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "");
        assert_eq!(e["SLURM_CPUS_ON_NODE"], "1");
        assert!(!e.contains_key("SLURM_GPUS_ON_NODE"));
        assert!(!e.contains_key(step::ENV_NODE_GPUS));
        assert_eq!(s.subdomain, None);
        assert_eq!(s.dns_config, None);
        // No cpu/memory allocation: no requests invented.
        let r = s.containers[0].resources.as_ref().unwrap();
        assert!(r.requests.as_ref().unwrap().is_empty());
        // Its steps stay in the pod: the daemon makes the key, on a writable in-memory
        // emptyDir at the key path; no Secret is referenced.
        assert_eq!(e[step::ENV_LOCAL_KEY], "1");
        assert_eq!(e[step::ENV_KEY_FILE], step::KEY_FILE);
        let key = s.containers[0]
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.mount_path == step::KEY_DIR)
            .unwrap();
        assert_eq!(key.read_only, Some(false));
        let vol = s
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == key.name)
            .unwrap();
        assert!(vol.secret.is_none());
        assert_eq!(
            vol.empty_dir.as_ref().unwrap().medium.as_deref(),
            Some("Memory")
        );
        // Only the main container mounts it.
        assert!(
            s.init_containers.iter().flatten().all(|c| c
                .volume_mounts
                .iter()
                .flatten()
                .all(|m| m.name != key.name))
        );
    }

    #[test]
    fn arrays_and_attempts_show_in_names_env_and_labels() {
        let mut j = job(
            "sweep-3",
            BatchJobSpec {
                script: Some("true".into()),
                ..Default::default()
            },
        );
        j.metadata.labels = Some([(labels::ARRAY_PARENT.to_string(), "sweep".into())].into());
        let tasks = vec![TaskAllocation {
            node: "n1".into(),
            gpus: vec![5, 6],
            gpu_uuids: vec!["GPU-a".into(), "GPU-b".into()],
            ..Default::default()
        }];
        let p = partition();
        let mut c = ctx(&j, &tasks, Some(&p));
        c.array = Some((100, 3));
        c.attempt = 2;
        let gj = vec![r#"{"gpus":[{"index":5,"uuid":"GPU-a","numa":1}]}"#.to_string()];
        c.node_gpus = &gj;
        let pod = build_pod(&c, 0).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("sweep-3-0-a2"));
        let s = spec_of(&pod);
        assert_eq!(s.hostname.as_deref(), Some("sweep-3-0-a2"));
        let e = env_of(&s.containers[0]);
        assert_eq!(e["SLURM_JOB_NODELIST"], "sweep-3-0-a2");
        assert_eq!(e["SLURM_ARRAY_JOB_ID"], "100");
        assert_eq!(e["SLURM_ARRAY_TASK_ID"], "3");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "GPU-a,GPU-b");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(e[step::ENV_NODE_GPUS], gj[0]);
        let l = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(l[labels::ATTEMPT], "2");
        assert_eq!(l[labels::ARRAY_PARENT], "sweep");
        assert_eq!(l[labels::ARRAY_TASK_ID], "3");
    }

    #[test]
    fn dra_pods_reference_one_claim_with_the_nodes_gpus() {
        let j = job(
            "train",
            BatchJobSpec {
                script: Some("true".into()),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let mut c = ctx(&j, &tasks, Some(&p));
        c.gpu_binding = GpuBinding::Dra;
        let pod = build_pod(&c, 0).unwrap();
        let s = spec_of(&pod);
        let claims = s.resource_claims.as_ref().unwrap();
        assert_eq!(claims.len(), 1);
        let e = env_of(&s.containers[0]);
        assert!(!e.contains_key("NVIDIA_VISIBLE_DEVICES"));
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1");
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let j = job("empty", BatchJobSpec::default());
        let tasks = gang();
        assert_eq!(
            build_pod(&ctx(&j, &tasks, None), 0).unwrap_err(),
            BuildError::NothingToRun
        );
        let j = job(
            "noimg",
            BatchJobSpec {
                script: Some("x".into()),
                ..Default::default()
            },
        );
        let e = build_pod(&ctx(&j, &tasks, None), 0).unwrap_err();
        assert!(e.to_string().contains("defaultImage"), "{e}");
        let p = partition();
        assert_eq!(
            build_pod(&ctx(&j, &tasks, Some(&p)), 9).unwrap_err(),
            BuildError::NoSuchNode(9)
        );
        let long = job(&"x".repeat(70), BatchJobSpec::default());
        assert!(matches!(
            build_pod(&ctx(&long, &tasks, Some(&p)), 0).unwrap_err(),
            BuildError::NameTooLong { .. }
        ));
    }
}

//! The environment of a node pod: what sbatch gives a batch script, the step runtime's
//! variables and the rendezvous ones, set by the operator over the template's.

use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector};
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::step;
use muster_crds::v1alpha1::{GpuBinding, TaskAllocation};

use super::{BuildError, JobContext, JobLayout, node_ranks};

/// Seconds left between SIGTERM to the steps and the kubelet's SIGKILL at the grace period.
const KILL_MARGIN_SECS: u32 = 5;

/// Variables the operator owns on every container; template entries of these names are
/// dropped.
pub const BINDING_VARS: &[&str] = &[
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_NNODES",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_TASKS_PER_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_CPUS_ON_NODE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURMD_NODENAME",
    "SLURM_JOB_PARTITION",
    "SLURM_SUBMIT_DIR",
    "SLURM_JOB_ACCOUNT",
    "SLURM_CPUS_PER_TASK",
    "SLURM_GPU_BIND",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "MASTER_ADDR",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    step::ENV_NODE_GPUS,
    step::ENV_POD_IP,
    step::ENV_PORT,
    step::ENV_KEY_FILE,
    step::ENV_LOCAL_KEY,
    step::ENV_KILL_WAIT,
    step::ENV_STDOUT,
    step::ENV_STDERR,
    step::ENV_STDOUT_DEFAULT,
    step::ENV_OPEN_MODE,
    step::ENV_SHARED_DIRS,
    step::ENV_CHDIR,
    step::ENV_SIGNAL,
    step::ENV_END_TIME,
];
/// When the time limit of the admission in `st` ends: its start plus its limit.
pub fn limit_end(st: &muster_crds::v1alpha1::BatchJobStatus) -> Option<i64> {
    let start = st.start_time.as_ref()?.0.as_second();
    let secs = i64::try_from(crate::controller::translate::status_limit_secs(st)?).ok()?;
    start.checked_add(secs)
}

/// The batch step's output files and open mode (node 0), and the warning signal (every
/// node): the step runtime's variables ([`step::ENV_STDOUT`] ...). The file names are
/// expanded here with the same fields `scontrol show job` uses, so the file lands where
/// `StdOut=` says.
fn stdio_env(ctx: &JobContext<'_>, batch_host: bool) -> Vec<(String, String)> {
    use muster_crds::slurm::fname;
    let spec = &ctx.job.spec;
    let mut env = Vec::new();
    if let (Some(sig), Some(end)) = (spec.signal.as_deref(), ctx.limit_end) {
        env.push((step::ENV_SIGNAL.into(), sig.to_string()));
        env.push((step::ENV_END_TIME.into(), end.to_string()));
    }
    if !batch_host {
        return env;
    }
    let user = ctx
        .job
        .annotations()
        .get(labels::USER)
        .cloned()
        .unwrap_or_default();
    let first = ctx
        .tasks
        .iter()
        .find(|t| t.node_rank == node_ranks(ctx.tasks).first().copied().unwrap_or(0))
        .map(|t| t.node.clone());
    let fields = fname::StdioFields {
        job_id: ctx.job_id,
        array: ctx.array,
        job_name: ctx.job.job_name(),
        user: &user,
        first_node: first.as_deref(),
        work_dir: None,
    };
    if let Some(d) = spec.chdir.as_deref().filter(|d| !d.is_empty()) {
        env.push((step::ENV_CHDIR.into(), d.to_string()));
    }
    let out = fname::output_pattern(spec.output.as_deref(), ctx.array.is_some());
    env.push((step::ENV_STDOUT.into(), fname::expand(out, &fields)));
    if spec.output.as_deref().is_none_or(str::is_empty) {
        env.push((step::ENV_STDOUT_DEFAULT.into(), "1".into()));
    }
    if let Some(e) = spec.error.as_deref().filter(|e| !e.is_empty()) {
        env.push((step::ENV_STDERR.into(), fname::expand(e, &fields)));
    }
    // A requeued run truncates too unless --open-mode=append: checked with Slurm 22.05 (a
    // requeued job's file holds only its last run).
    let append = spec.open_mode == Some(muster_crds::v1alpha1::OpenMode::Append);
    env.push((
        step::ENV_OPEN_MODE.into(),
        if append { "append" } else { "truncate" }.into(),
    ));
    let dirs: Vec<&str> = ctx
        .partition
        .map(|p| crate::controller::jobenv::shared_volumes(&p.spec))
        .unwrap_or_default()
        .iter()
        .filter(|v| v.read_only != Some(true))
        .map(|v| v.mount_path.as_str())
        .collect();
    if !dirs.is_empty() {
        env.push((step::ENV_SHARED_DIRS.into(), dirs.join(":")));
    }
    env
}

/// `SLURM_TASKS_PER_NODE`: `2(x3),1` — task counts per node in node order, runs compressed.
pub fn tasks_per_node(counts: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let mut j = i;
        while j < counts.len() && counts[j] == counts[i] {
            j += 1;
        }
        if j - i > 1 {
            out.push(format!("{}(x{})", counts[i], j - i));
        } else {
            out.push(counts[i].to_string());
        }
        i = j;
    }
    out.join(",")
}

/// `MUSTER_NODE_GPUS` of a node's share without topology: indices and UUIDs.
pub fn plain_node_gpus(share: &TaskAllocation) -> String {
    let gpus: Vec<serde_json::Value> = share
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut v = serde_json::json!({ "index": g });
            if let Some(u) = share.gpu_uuids.get(i) {
                v["uuid"] = u.clone().into();
            }
            v
        })
        .collect();
    serde_json::json!({ "gpus": gpus }).to_string()
}

/// `MUSTER_NODE_GPUS` of a node's share with the topology the scheduler placed with: each
/// GPU's NUMA node and NVLink peers (the core's [`crate::core::node::Gpu`] fields).
pub fn node_gpus_json(share: &TaskAllocation, node: Option<&crate::core::Node>) -> String {
    let Some(node) = node else {
        return plain_node_gpus(share);
    };
    let gpus: Vec<serde_json::Value> = share
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let known = node.gpus.iter().find(|x| x.index == *g);
            let uuid = share
                .gpu_uuids
                .get(i)
                .cloned()
                .or_else(|| known.map(|k| k.uuid.clone()))
                .unwrap_or_default();
            let mut v = serde_json::json!({ "index": g, "uuid": uuid });
            if let Some(k) = known {
                if let Some(n) = k.numa {
                    v["numa"] = n.into();
                }
                if !k.nvlink_peers.is_empty() {
                    v["nvlinkPeers"] = k.nvlink_peers.clone().into();
                }
            }
            v
        })
        .collect();
    serde_json::json!({ "gpus": gpus }).to_string()
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The environment of node `node`'s pod (the batch step's on node 0), in the order it is set.
pub fn node_env(ctx: &JobContext<'_>, node: u32) -> Result<Vec<(String, String)>, BuildError> {
    node_env_in(ctx, &JobLayout::new(ctx.job, ctx.attempt, ctx.tasks), node)
}

/// [`node_env`] with the job's [`JobLayout`] computed already (once for all its pods).
pub fn node_env_in(
    ctx: &JobContext<'_>,
    layout: &JobLayout,
    node: u32,
) -> Result<Vec<(String, String)>, BuildError> {
    let here = layout.position(node).ok_or(BuildError::NoSuchNode(node))?;
    let share = &layout.shares[here];
    let job_name = ctx.job.job_name().to_string();
    let (ranks, counts, cpus, hosts) = (&layout.ranks, &layout.counts, &layout.cpus, &layout.hosts);
    let ntasks = ctx.tasks.len();
    let hl = layout.hostlist.clone();
    // The batch script starts in the container's working directory, which is what
    // SLURM_SUBMIT_DIR names in Slurm (the directory the script started in); pyxis's
    // --container-workdir sets it.
    let main = ctx
        .job
        .spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.containers.first());
    let submit_dir = ctx
        .job
        .spec
        .container_workdir
        .clone()
        .or_else(|| main.and_then(|c| c.working_dir.clone()))
        .unwrap_or_else(|| "/".into());
    let mut env: Vec<(String, String)> = vec![
        ("SLURM_JOB_ID".into(), ctx.job_id.to_string()),
        ("SLURM_JOBID".into(), ctx.job_id.to_string()),
        ("SLURM_JOB_NAME".into(), job_name),
        ("SLURM_JOB_NODELIST".into(), hl.clone()),
        ("SLURM_NODELIST".into(), hl),
        ("SLURM_JOB_NUM_NODES".into(), ranks.len().to_string()),
        ("SLURM_NNODES".into(), ranks.len().to_string()),
        ("SLURM_NTASKS".into(), ntasks.to_string()),
        ("SLURM_NPROCS".into(), ntasks.to_string()),
        ("SLURM_TASKS_PER_NODE".into(), tasks_per_node(counts)),
        ("SLURM_JOB_CPUS_PER_NODE".into(), tasks_per_node(cpus)),
        ("SLURM_NODEID".into(), here.to_string()),
        ("SLURM_PROCID".into(), "0".into()),
        ("SLURM_LOCALID".into(), "0".into()),
        ("SLURMD_NODENAME".into(), hosts[here].clone()),
        ("SLURM_CPUS_ON_NODE".into(), cpus[here].to_string()),
        ("SLURM_JOB_PARTITION".into(), ctx.partition_name.to_string()),
        ("SLURM_SUBMIT_DIR".into(), submit_dir),
        (
            "SLURM_JOB_ACCOUNT".into(),
            ctx.job
                .spec
                .account
                .clone()
                .or_else(|| ctx.job.namespace())
                .unwrap_or_default(),
        ),
    ];
    if let Some(c) = ctx.job.spec.cpus_per_task {
        env.push(("SLURM_CPUS_PER_TASK".into(), c.to_string()));
    }
    if let Some(n) = ctx.job.spec.ntasks_per_node {
        env.push(("SLURM_NTASKS_PER_NODE".into(), n.to_string()));
    }
    if let Some(b) = ctx.job.spec.gpu_bind.as_deref().filter(|b| !b.is_empty()) {
        env.push(("SLURM_GPU_BIND".into(), b.to_string()));
    }
    if let Some((a, i)) = ctx.array {
        env.push(("SLURM_ARRAY_JOB_ID".into(), a.to_string()));
        env.push(("SLURM_ARRAY_TASK_ID".into(), i.to_string()));
    }
    if let Some(g) = ctx.gpus_per_node {
        env.push(("SLURM_GPUS_PER_NODE".into(), g.to_string()));
    }
    if let Some(g) = ctx.gpus_per_task {
        env.push(("SLURM_GPUS_PER_TASK".into(), g.to_string()));
    }
    if !share.gpus.is_empty() {
        env.push(("SLURM_GPUS_ON_NODE".into(), share.gpus.len().to_string()));
        env.push(("SLURM_JOB_GPUS".into(), join(&share.gpus)));
        let gj = ctx
            .node_gpus
            .get(node as usize)
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| plain_node_gpus(share));
        env.push((step::ENV_NODE_GPUS.into(), gj));
    }
    env.push((step::ENV_PORT.into(), step::DEFAULT_PORT.to_string()));
    env.push((step::ENV_KEY_FILE.into(), step::KEY_FILE.into()));
    if step::key_in_pod(ranks.len()) {
        env.push((step::ENV_LOCAL_KEY.into(), "1".into()));
    }
    if let Some(g) = ctx.partition.and_then(|p| p.spec.grace_time_seconds) {
        // The daemon's SIGKILL comes before the kubelet's, so steps end as it reports.
        env.push((
            step::ENV_KILL_WAIT.into(),
            g.saturating_sub(KILL_MARGIN_SECS).max(1).to_string(),
        ));
    }
    env.extend(stdio_env(ctx, here == 0));
    env.extend([
        ("MASTER_ADDR".into(), hosts[0].clone()),
        ("WORLD_SIZE".into(), ntasks.to_string()),
        ("NODE_RANK".into(), here.to_string()),
        ("LOCAL_WORLD_SIZE".into(), counts[here].to_string()),
    ]);
    if share.gpus.is_empty() {
        env.push(("NVIDIA_VISIBLE_DEVICES".into(), "void".into()));
        env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
    } else {
        // Under DRA the kubelet gives the container its claim's devices (the NVIDIA driver's
        // CDI spec sets the variable itself): nothing is set by hand.
        if ctx.gpu_binding == GpuBinding::Env {
            let uuids = if share.gpu_uuids.len() == share.gpus.len() {
                share.gpu_uuids.join(",")
            } else {
                // No UUIDs known (no GpuNode inventory): fall back to NVML indices.
                join(&share.gpus)
            };
            env.push(("NVIDIA_VISIBLE_DEVICES".into(), uuids));
        }
        let cuda: Vec<usize> = (0..share.gpus.len()).collect();
        env.push(("CUDA_VISIBLE_DEVICES".into(), join(&cuda)));
    }
    Ok(env)
}

pub(super) fn set_env(c: &mut Container, ours: &[(String, String)], master_port: Option<&str>) {
    let mut env: Vec<EnvVar> = c
        .env
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !BINDING_VARS.contains(&e.name.as_str()))
        .collect();
    let has_port = env.iter().any(|e| e.name == "MASTER_PORT");
    env.extend(ours.iter().map(|(k, v)| EnvVar {
        name: k.clone(),
        value: Some(v.clone()),
        value_from: None,
    }));
    env.push(EnvVar {
        name: step::ENV_POD_IP.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: "status.podIP".into(),
            }),
            ..Default::default()
        }),
    });
    if let Some(p) = master_port
        && !has_port
    {
        env.push(EnvVar {
            name: "MASTER_PORT".into(),
            value: Some(p.to_string()),
            value_from: None,
        });
    }
    c.env = Some(env);
}
#[cfg(test)]
mod tests {
    use super::super::fixtures::{ctx, gang, job, partition};
    use super::*;
    use muster_crds::v1alpha1::BatchJobSpec;
    use std::collections::BTreeMap;

    /// The batch host gets the expanded output files, the open mode and the partition's
    /// writable shared directories; every node gets the warning signal and the limit's end;
    /// the account is `--account`, else the namespace.
    #[test]
    fn output_files_signal_and_account_reach_the_step_runtime() {
        let mut j = job(
            "train",
            BatchJobSpec {
                job_name: Some("tr".into()),
                output: Some("/scratch/%x-%j-%N-%u.out".into()),
                error: Some("e-%j.err".into()),
                open_mode: Some(muster_crds::v1alpha1::OpenMode::Append),
                signal: Some("B:USR1@90".into()),
                account: Some("physics".into()),
                ..Default::default()
            },
        );
        j.annotations_mut()
            .insert(labels::USER.into(), "alice".into());
        let tasks = gang();
        let mut p = partition();
        p.spec.job_environment = Some(
            serde_json::from_value(serde_json::json!({"volumes": [
                {"name": "scratch", "mountPath": "/scratch", "claimName": "s"},
                {"name": "data", "mountPath": "/data", "claimName": "d", "readOnly": true},
                {"name": "home", "mountPath": "/home", "hostPath": "/home"}]}))
            .unwrap(),
        );
        let mut c = ctx(&j, &tasks, Some(&p));
        c.limit_end = Some(5000);
        let env0: BTreeMap<String, String> = node_env(&c, 0).unwrap().into_iter().collect();
        assert_eq!(env0[step::ENV_STDOUT], "/scratch/tr-1234-gpu001-alice.out");
        assert_eq!(env0[step::ENV_STDERR], "e-1234.err");
        assert_eq!(env0[step::ENV_OPEN_MODE], "append");
        assert_eq!(env0[step::ENV_SHARED_DIRS], "/scratch:/home");
        assert_eq!(env0[step::ENV_SIGNAL], "B:USR1@90");
        assert_eq!(env0[step::ENV_END_TIME], "5000");
        assert_eq!(env0["SLURM_JOB_ACCOUNT"], "physics");
        assert!(!env0.contains_key(step::ENV_STDOUT_DEFAULT));
        let env1: BTreeMap<String, String> = node_env(&c, 1).unwrap().into_iter().collect();
        assert!(
            !env1.contains_key(step::ENV_STDOUT),
            "only the batch host writes files"
        );
        assert_eq!(env1[step::ENV_SIGNAL], "B:USR1@90");

        // Defaults: slurm-%j.out, truncate, no signal without one; the namespace as account.
        let j = job("plain", BatchJobSpec::default());
        let env: BTreeMap<String, String> = node_env(&ctx(&j, &tasks, None), 0)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(env[step::ENV_STDOUT], "slurm-1234.out");
        assert_eq!(env[step::ENV_STDOUT_DEFAULT], "1");
        assert_eq!(env[step::ENV_OPEN_MODE], "truncate");
        assert!(!env.contains_key(step::ENV_SIGNAL));
        assert!(!env.contains_key(step::ENV_SHARED_DIRS));
        assert_eq!(env["SLURM_JOB_ACCOUNT"], "ml");
    }

    #[test]
    fn the_limit_ends_at_start_plus_limit() {
        let st = muster_crds::v1alpha1::BatchJobStatus {
            start_time: Some(crate::controller::translate::time(1000)),
            time_limit: Some("1:00:00".into()),
            ..Default::default()
        };
        assert_eq!(limit_end(&st), Some(4600));
        let unlimited = muster_crds::v1alpha1::BatchJobStatus {
            time_limit: Some("UNLIMITED".into()),
            ..st
        };
        assert_eq!(limit_end(&unlimited), None);
    }

    #[test]
    fn tasks_per_node_compresses_runs() {
        assert_eq!(tasks_per_node(&[2, 2, 2, 1]), "2(x3),1");
        assert_eq!(tasks_per_node(&[1]), "1");
        assert_eq!(tasks_per_node(&[1, 2, 1]), "1,2,1");
        assert_eq!(tasks_per_node(&[]), "");
    }
}

//! Issue 14's "done when": every sbatch script users run (`../shared/sbatch/`, kept as
//! `tests/scripts/howto/`, and `examples/sbatch/`) that needs only bash, coreutils and Open MPI
//! runs unmodified — `muster sbatch FILE`, as a user submits it — on the test control plane
//! with the real operator, its pods running for real (exec mode: one node pod per node, the
//! script once on the first, `srun` and `mpirun` across the node pods), to the state a Slurm
//! user expects, and its output shows the GPU visibility Slurm gives: with `--gres=gpu:N`
//! every task of a node sees the node's N GPUs of the job, with `--gpus-per-task=1` each task
//! one GPU of its own.
//!
//! The scripts' own programs (`nvidia-smi`, `./gpu_aware_app`, `my_mpi_program`) are small
//! stand-ins in the job image that print the GPUs a CUDA program of that process would use:
//! the node's devices its `CUDA_VISIBLE_DEVICES` selects (real `nvidia-smi` reads NVML, which
//! ignores that variable, and there is no GPU here). Everything else — bash, `srun`,
//! `scontrol`, Open MPI's `mpirun` and its daemons — is the real thing. Scripts that need
//! something else are named in [`SKIPPED`] with the reason, and every script is in one list
//! or the other.

mod e2e_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use e2e_support::Sim;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{LogParams, PostParams};
use muster_crds::v1alpha1::Partition;
use serde_json::json;

/// What a walked script's run must show.
#[derive(Clone, Copy, Debug)]
enum Shows {
    /// `srun nvidia-smi` with `--gpus-per-task=1`: `tasks` tasks, each one GPU of its own.
    OneGpuPerTask { tasks: usize },
    /// `srun nvidia-smi` with `--gres=gpu:N`: `tasks` tasks, each seeing its node's N GPUs.
    NodeGpusPerTask { tasks: usize, gpus: usize },
    /// `mpirun -np R PROGRAM`: R ranks, `per_node` on each node, each seeing `gpus` GPUs of
    /// its node — `host_gpus` on the batch host, where mpirun starts its ranks itself from
    /// the batch step (which has all the node's GPUs of the job, as in Slurm); elsewhere they
    /// inherit what Open MPI's daemon, one srun task per node, was given.
    MpiRanks {
        ranks: usize,
        per_node: usize,
        gpus: usize,
        host_gpus: usize,
    },
    /// `echo ...; exec sleep infinity`: a line naming rank 0, its node and its GPUs, then it
    /// runs until `scancel`.
    ReadyUntilCancelled,
}

/// The walk: (script, what its output must show, the state it ends in).
const WALK: &[(&str, Shows, &str)] = &[
    (
        "howto/gpus_per_task.sh",
        Shows::OneGpuPerTask { tasks: 4 },
        "COMPLETED",
    ),
    (
        "howto/gres_srun.sh",
        Shows::NodeGpusPerTask { tasks: 4, gpus: 4 },
        "COMPLETED",
    ),
    (
        "howto/gres_mpirun.sh",
        Shows::MpiRanks {
            ranks: 4,
            per_node: 2,
            gpus: 4,
            host_gpus: 4,
        },
        "COMPLETED",
    ),
    (
        "howto/multi_node_mpi.sh",
        Shows::MpiRanks {
            ranks: 4,
            per_node: 2,
            gpus: 4,
            host_gpus: 4,
        },
        "COMPLETED",
    ),
    (
        "examples/mpirun-2x2.sh",
        // --gpus-per-task=1: the batch host's ranks see its 2 GPUs of the job, the other
        // node's ranks the one GPU its daemon's task was given.
        Shows::MpiRanks {
            ranks: 4,
            per_node: 2,
            gpus: 1,
            host_gpus: 2,
        },
        "COMPLETED",
    ),
    (
        "examples/interactive.sh",
        Shows::ReadyUntilCancelled,
        "CANCELLED",
    ),
];

/// Scripts not walked, and why: each needs more than bash, coreutils and Open MPI.
const SKIPPED: &[(&str, &str)] = &[
    (
        "howto/single_gpu_task.sh",
        "runs python (my_gpu_program.py)",
    ),
    (
        "howto/typed_gpu_constraint.sh",
        "runs python, and asks for a Tesla V100 node this cluster has not",
    ),
    (
        "howto/torchrun_multinode.sh",
        "runs torchrun (PyTorch) on 8 whole nodes",
    ),
    (
        "howto/ray_on_cluster.sh",
        "runs ray and python (train_rl.py)",
    ),
    ("examples/array-sweep.sh", "runs python (sweep.py)"),
    (
        "examples/eval.sh",
        "runs python (eval.py); with stand-ins in e2e_partition_env",
    ),
    (
        "examples/train.sh",
        "runs torchrun (PyTorch); with stand-ins in e2e_partition_env",
    ),
    (
        "examples/single-gpu.sh",
        "runs nvidia-smi -L, whose listing is NVML's (the node pod's GPUs), not a task's",
    ),
    (
        "examples/typed-gpu-constraint.sh",
        "runs nvidia-smi --query-gpu and python (my_gpu_program.py), and needs an A100 node",
    ),
    (
        "examples/torchrun-8-nodes.sh",
        "runs torchrun (PyTorch) on 8 whole nodes",
    ),
    ("examples/ray-cluster.sh", "runs ray and python"),
];

fn path_of(script: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match script.split_once('/') {
        Some(("howto", f)) => root.join("tests/scripts/howto").join(f),
        Some(("examples", f)) => root.join("../examples/sbatch").join(f),
        _ => panic!("{script}"),
    }
}

/// Prints one line per device the process's CUDA_VISIBLE_DEVICES selects:
/// `WHO sees GPU K = NODE:INDEX` (INDEX: the node's GPU index, from the job's GPUs there).
const SEES: &str = r#"gpus=(${SLURM_JOB_GPUS//,/ })
IFS=, read -ra cvd <<< "${CUDA_VISIBLE_DEVICES:-}"
for k in "${!cvd[@]}"; do
  echo "$who sees GPU $k = $(hostname):${gpus[${cvd[$k]}]}"
done
"#;

/// The job image: the scripts' programs as stand-ins.
fn job_image() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, body: String| {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write(
        "usr/local/bin/nvidia-smi",
        format!("#!/bin/bash\nwho=\"task $SLURM_PROCID\"\n{SEES}"),
    );
    let mpi_app = format!(
        "#!/bin/bash\n\
         who=\"rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE\"\n\
         echo \"$who on $(hostname) local $OMPI_COMM_WORLD_LOCAL_RANK\"\n{SEES}"
    );
    // `./gpu_aware_app` in the image's working directory (/), the others on PATH or by path.
    write("gpu_aware_app", mpi_app.clone());
    write("opt/app/gpu_aware_app", mpi_app.clone());
    write("usr/local/bin/my_mpi_program", mpi_app);
    dir
}

/// A line `WHO sees GPU K = NODE:INDEX` → (who, (node, index)).
fn sightings(log: &str) -> BTreeMap<String, BTreeSet<(String, u32)>> {
    let mut out: BTreeMap<String, BTreeSet<(String, u32)>> = BTreeMap::new();
    for l in log.lines() {
        let Some((who, rest)) = l.split_once(" sees GPU ") else {
            continue;
        };
        let (_, dev) = rest.split_once(" = ").unwrap_or_else(|| panic!("{l}"));
        let (node, idx) = dev.rsplit_once(':').unwrap_or_else(|| panic!("{l}"));
        let idx = idx.parse().unwrap_or_else(|_| panic!("{l}"));
        out.entry(who.to_string())
            .or_default()
            .insert((node.to_string(), idx));
    }
    out
}

fn node_of(seen: &BTreeSet<(String, u32)>) -> &str {
    let nodes: BTreeSet<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        nodes.len(),
        1,
        "one process sees GPUs of one node: {seen:?}"
    );
    nodes.into_iter().next().unwrap()
}

fn check(script: &str, shows: Shows, log: &str, job_id: u64) {
    let seen = sightings(log);
    let ctx = format!("{script}'s output:\n{log}");
    match shows {
        Shows::OneGpuPerTask { tasks } => {
            let want: BTreeSet<String> = (0..tasks).map(|t| format!("task {t}")).collect();
            assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), want, "{ctx}");
            let mut all = BTreeSet::new();
            for s in seen.values() {
                assert_eq!(s.len(), 1, "each task one GPU: {ctx}");
                all.extend(s.iter().cloned());
            }
            assert_eq!(all.len(), tasks, "each task a GPU of its own: {ctx}");
        }
        Shows::NodeGpusPerTask { tasks, gpus } => {
            let want: BTreeSet<String> = (0..tasks).map(|t| format!("task {t}")).collect();
            assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), want, "{ctx}");
            let mut by_node: BTreeMap<&str, BTreeSet<&BTreeSet<(String, u32)>>> = BTreeMap::new();
            for s in seen.values() {
                assert_eq!(
                    s.len(),
                    gpus,
                    "each task sees the node's {gpus} GPUs: {ctx}"
                );
                by_node.entry(node_of(s)).or_default().insert(s);
            }
            assert!(by_node.len() > 1, "tasks on several nodes: {ctx}");
            for sets in by_node.values() {
                assert_eq!(sets.len(), 1, "tasks of a node see the same GPUs: {ctx}");
            }
        }
        Shows::MpiRanks {
            ranks,
            per_node,
            gpus,
            host_gpus,
        } => {
            let want: BTreeSet<String> =
                (0..ranks).map(|r| format!("rank {r} of {ranks}")).collect();
            assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), want, "{ctx}");
            let mut per: BTreeMap<&str, usize> = BTreeMap::new();
            for s in seen.values() {
                let node = node_of(s);
                // Node pods are named `<job>-<node index>`: `-0` is the batch host.
                let want = if node.ends_with("-0") {
                    host_gpus
                } else {
                    gpus
                };
                assert_eq!(
                    s.len(),
                    want,
                    "each rank on {node} sees {want} GPUs of its node: {ctx}"
                );
                *per.entry(node).or_default() += 1;
            }
            assert!(
                per.values().all(|&n| n == per_node),
                "{per_node} ranks a node: {per:?} in {ctx}"
            );
        }
        Shows::ReadyUntilCancelled => {
            let line = log
                .lines()
                .find(|l| l.starts_with("rank 0 of job "))
                .unwrap_or_else(|| panic!("{ctx}"));
            // `--gres=gpu:2`: the batch step names the node's two GPUs of the job.
            let gpus = line
                .strip_prefix(&format!("rank 0 of job {job_id} ready on "))
                .and_then(|l| l.split_once(" (GPUs "))
                .and_then(|(_, g)| g.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{ctx}"));
            let ids: BTreeSet<u32> = gpus.split(',').map(|g| g.parse().unwrap()).collect();
            assert_eq!(ids.len(), 2, "{ctx}");
        }
    }
}

/// How long a walked job may take on a loaded 2-core machine (Open MPI's start is the slowest).
const LIMIT: Duration = Duration::from_secs(240);

async fn batch_log(sim: &Sim, id: u64) -> String {
    let Some(pod) = sim.pods_of(id).await.into_iter().next() else {
        return String::new();
    };
    Api::<Pod>::namespaced(sim.cluster.client(), "default")
        .logs(
            &pod,
            &LogParams {
                container: Some("task".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_default()
}

async fn state(sim: &Sim, id: u64) -> String {
    let (ok, out, err) = sim
        .run(&["sacct", "-P", "-n", "-j", &id.to_string(), "-o", "State"])
        .await;
    assert!(ok, "{err}");
    out.trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_that_needs_only_bash_and_open_mpi_runs_with_slurms_gpu_visibility() {
    // Every script is walked or skipped with its reason.
    let mut all: BTreeSet<String> = BTreeSet::new();
    for (dir, under) in [
        ("howto", path_of("howto/x").parent().unwrap().to_path_buf()),
        (
            "examples",
            path_of("examples/x").parent().unwrap().to_path_buf(),
        ),
    ] {
        for e in std::fs::read_dir(under).unwrap() {
            let f = e.unwrap().file_name().into_string().unwrap();
            if f.ends_with(".sh") {
                all.insert(format!("{dir}/{f}"));
            }
        }
    }
    let listed: BTreeSet<String> = WALK
        .iter()
        .map(|w| w.0.to_string())
        .chain(SKIPPED.iter().map(|s| s.0.to_string()))
        .collect();
    assert_eq!(
        all, listed,
        "every script is walked or skipped with a reason"
    );
    for (s, why) in SKIPPED {
        eprintln!("not walked: {s}: {why}");
    }

    let image = job_image();
    let exec = muster_e2e::exec::ExecOptions {
        images: vec![("busybox".into(), image.path().to_path_buf())],
        ..Default::default()
    };
    // Open MPI refuses root unless told; pods of the exec kubelet run as root. A site would
    // set this in its partition; here the partition does it.
    let mpi_env = json!({"env": [
        {"name": "OMPI_ALLOW_RUN_AS_ROOT", "value": "1"},
        {"name": "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "value": "1"}]});
    // CPUs per GPU as GPU sites set them (Slurm's DefCpuPerGPU): `--gres=gpu:4` on 2 nodes
    // with no task count is one task and, without it, one CPU a node, and `srun -n 4` then
    // fails under real Slurm too ("More processors requested than permitted", checked with
    // ../shared/slurm/peer.sh); real GPU nodes also give a whole core, two CPUs with SMT.
    let sim = Sim::start_opts(
        true,
        Some(exec),
        json!({"jobEnvironment": mpi_env, "defCpuPerGpu": 4}),
    )
    .await;
    // The partition the how-to scripts name (`gpu_partition`, as Kubernetes spells it).
    let p: Partition = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "gpu-partition"},
        "spec": {"defaultImage": "busybox:1.36", "jobEnvironment": mpi_env, "defCpuPerGpu": 4,
                 "topology": ["muster.dev/leaf", "kubernetes.io/hostname"]}}))
    .unwrap();
    Api::<Partition>::all(sim.cluster.client())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();

    // Submitted one after another, as a user would; they run side by side.
    let mut jobs = Vec::new();
    for &(script, shows, end) in WALK {
        let path = path_of(script);
        let (ok, out, err) = sim
            .run(&["sbatch", "--parsable", path.to_str().unwrap()])
            .await;
        assert!(ok, "sbatch {script}: {err}");
        let id: u64 = out
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("sbatch --parsable {script}: {out:?}"));
        jobs.push((script, shows, end, id));
    }
    let deadline = tokio::time::Instant::now() + LIMIT;
    for &(script, shows, end, id) in &jobs {
        loop {
            let st = state(&sim, id).await;
            let log = batch_log(&sim, id).await;
            let ready = match shows {
                Shows::ReadyUntilCancelled => st == "RUNNING" && log.contains(" ready on "),
                _ => !matches!(st.as_str(), "PENDING" | "RUNNING" | ""),
            };
            if ready {
                check(script, shows, &log, id);
                if matches!(shows, Shows::ReadyUntilCancelled) {
                    let (ok, _, err) = sim.run(&["scancel", &id.to_string()]).await;
                    assert!(ok, "{err}");
                    while state(&sim, id).await == "RUNNING" {
                        assert!(tokio::time::Instant::now() < deadline, "{script}: scancel");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
                let st = state(&sim, id).await;
                assert_eq!(st, end, "{script} ended {st}; its output:\n{log}");
                eprintln!("ok {script}: {end}");
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "{script} is still {st} after {LIMIT:?}; its output:\n{log}\n{}",
                    sim.describe(id).await
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    sim.stop().await;
}

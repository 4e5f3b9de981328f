//! Issue 16's "done when": every script users bring — `examples/sbatch/*.sh` and the how-to
//! scripts of `../shared/sbatch/` (kept as `tests/scripts/howto/`) — submits with `muster
//! sbatch` alone (no YAML, no option added) to a cluster whose only Partition is the one a
//! default `helm install` creates (`partitions.gpu` of `charts/muster/values.yaml`, which the
//! chart renders verbatim as the Partition's spec), and reaches COMPLETED; scripts Slurm
//! itself would refuse on such a cluster are refused, each with the reason.
//!
//! The cluster is `examples/clusters/mixed.yaml` (H100 and A100 nodes, and tainted L40S
//! nodes the chart's partition does not tolerate). Execution is simulated (the scripts run
//! python, torchrun and ray, which are not here): each task runs `MUSTER_SIM_RUN_SECONDS`,
//! which the test passes with `--export` — the simulated kubelet's knob, not something a
//! script needs. Real execution of the scripts that need only bash and Open MPI is
//! `e2e_scripts_run.rs`.

mod conformance;

use std::path::PathBuf;

use conformance::{Seen, World};
use kube::Api;
use serde_json::Value;

/// Seconds a simulated task runs.
const RUN: &str = "2";

fn cli_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The chart's default Partition: its name and spec, from `values.yaml`.
fn chart_partition() -> (String, Value) {
    let text = std::fs::read_to_string(cli_dir().join("../charts/muster/values.yaml")).unwrap();
    let values: Value = serde_yaml::from_str(&text).unwrap();
    let parts = values["partitions"].as_object().expect("partitions");
    let live: Vec<(&String, &Value)> = parts.iter().filter(|(_, v)| !v.is_null()).collect();
    assert_eq!(live.len(), 1, "the chart installs one Partition");
    let (name, spec) = live[0];
    assert_eq!(spec["default"], true, "and it is the default");
    (name.clone(), spec.clone())
}

/// What happens to a script on the chart's default partition.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// COMPLETED after its simulated run.
    Completes,
    /// Refused by sbatch with these words, as Slurm refuses it; then, with the options given
    /// here on the command line (which win over `#SBATCH` lines, as in Slurm), COMPLETED.
    RefusedLikeSlurm {
        words: &'static str,
        why: &'static str,
        then: &'static [&'static str],
    },
}

/// Every script, and its fate (the test fails on a script missing here).
const SCRIPTS: &[(&str, Fate)] = &[
    ("examples/array-sweep.sh", Fate::Completes),
    ("examples/eval.sh", Fate::Completes),
    ("examples/interactive.sh", Fate::Completes),
    ("examples/mpirun-2x2.sh", Fate::Completes),
    ("examples/ray-cluster.sh", Fate::Completes),
    ("examples/single-gpu.sh", Fate::Completes),
    ("examples/torchrun-8-nodes.sh", Fate::Completes),
    ("examples/train.sh", Fate::Completes),
    ("examples/typed-gpu-constraint.sh", Fate::Completes),
    ("howto/gpus_per_task.sh", Fate::Completes),
    ("howto/gres_mpirun.sh", Fate::Completes),
    ("howto/gres_srun.sh", Fate::Completes),
    (
        "howto/multi_node_mpi.sh",
        Fate::RefusedLikeSlurm {
            words: "invalid partition specified: gpu_partition",
            why: "it names partition gpu_partition, which this cluster has not (Slurm: the same error)",
            then: &["-p", "gpu"],
        },
    ),
    ("howto/ray_on_cluster.sh", Fate::Completes),
    (
        "howto/single_gpu_task.sh",
        Fate::RefusedLikeSlurm {
            words: "invalid partition specified: gpu_partition",
            why: "it names partition gpu_partition, which this cluster has not (Slurm: the same error)",
            then: &["-p", "gpu"],
        },
    ),
    (
        "howto/torchrun_multinode.sh",
        Fate::RefusedLikeSlurm {
            words: "invalid partition specified: blackwell",
            why: "it names partition blackwell, which this cluster has not (Slurm: the same error)",
            then: &["-p", "gpu"],
        },
    ),
    (
        "howto/typed_gpu_constraint.sh",
        Fate::RefusedLikeSlurm {
            words: "invalid generic resource (gres) specification 'gpu:tesla:v100:1'",
            why: "--gres=gpu:tesla:v100:1 is not NAME:TYPE:COUNT (Slurm: the same error, checked in sbatch_oracle.rs)",
            then: &["-p", "gpu", "--gres=gpu:a100:1", "--constraint=a100_80gb"],
        },
    ),
];

fn path_of(script: &str) -> String {
    match script.split_once('/') {
        Some(("howto", f)) => format!("tests/scripts/howto/{f}"),
        Some(("examples", f)) => format!("../examples/sbatch/{f}"),
        _ => panic!("{script}"),
    }
}

/// `muster sbatch --parsable [ARGS] SCRIPT` as user dana: Ok(the BatchJob's name) or Err(the
/// error output).
async fn sbatch(w: &World, script: &str, args: &[&str]) -> Result<String, String> {
    let export = format!("--export=ALL,MUSTER_SIM_RUN_SECONDS={RUN}");
    let path = path_of(script);
    let mut a = vec!["sbatch", "--parsable", export.as_str()];
    a.extend_from_slice(args);
    a.push(&path);
    let (ok, out, err) = w.muster("dana", &a).await;
    if !ok {
        return Err(err);
    }
    let id: u64 = out.trim().parse().unwrap_or_else(|_| panic!("{out:?}"));
    let jobs: Api<muster_crds::v1alpha1::BatchJob> = Api::namespaced(w.cluster.client(), "default");
    Ok(jobs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|j| j.status.as_ref().and_then(|s| s.job_id) == Some(id))
        .and_then(|j| j.metadata.name)
        .expect("the submitted job"))
}

async fn completes(w: &World, name: &str, what: &str) {
    let seen = w
        .until(name, "COMPLETED", |s| matches!(s, Seen::Ended(_)))
        .await;
    assert_eq!(seen, Seen::Ended("COMPLETED".into()), "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_runs_on_the_charts_default_partition() {
    let mut found: Vec<String> = Vec::new();
    for (dir, prefix) in [
        (cli_dir().join("../examples/sbatch"), "examples"),
        (cli_dir().join("tests/scripts/howto"), "howto"),
    ] {
        for e in std::fs::read_dir(dir).unwrap() {
            let f = e.unwrap().file_name().into_string().unwrap();
            if f.ends_with(".sh") {
                found.push(format!("{prefix}/{f}"));
            }
        }
    }
    found.sort();
    let listed: Vec<String> = SCRIPTS.iter().map(|s| s.0.to_string()).collect();
    assert_eq!(found, listed, "every script has its fate here");

    let spec = std::fs::read_to_string(cli_dir().join("../examples/clusters/mixed.yaml")).unwrap();
    let w = World::start_with(&spec, vec![chart_partition()]).await;
    for &(script, fate) in SCRIPTS {
        match fate {
            Fate::Completes => {
                let name = sbatch(&w, script, &[])
                    .await
                    .unwrap_or_else(|e| panic!("sbatch {script}: {e}"));
                completes(&w, &name, script).await;
            }
            Fate::RefusedLikeSlurm { words, why, then } => {
                let err = sbatch(&w, script, &[])
                    .await
                    .expect_err(&format!("{script} is refused: {why}"));
                assert!(err.contains(words), "{script} ({why}): {err}");
                let name = sbatch(&w, script, then)
                    .await
                    .unwrap_or_else(|e| panic!("sbatch {} {script}: {e}", then.join(" ")));
                completes(&w, &name, script).await;
            }
        }
        eprintln!("ok {script}");
    }
    w.stop().await;
}

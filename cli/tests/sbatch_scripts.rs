//! Every script of `../shared/sbatch/` becomes (dry run) the BatchJob a Slurm user expects.

mod common;

use std::path::Path;

use common::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use muster_cli::sbatch::{ManifestFormat, render_manifest};
use muster_crds::v1alpha1::{BatchJob, BatchJobSpec};

fn job(name: &str) -> BatchJob {
    ours("howto", name, &["--dry-run"], &[])
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .job
}

fn annotation<'a>(j: &'a BatchJob, key: &str) -> Option<&'a str> {
    j.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn script_of(name: &str) -> String {
    std::fs::read_to_string(script_path("howto", name)).unwrap()
}

/// The fields a test does not set explicitly must stay unset: compare whole specs.
fn assert_spec(name: &str, want: BatchJobSpec) {
    let got = job(name).spec;
    assert_eq!(
        got,
        BatchJobSpec {
            script: Some(script_of(name)),
            ..want
        },
        "{name}"
    );
}

#[test]
fn gpus_per_task() {
    let j = job("gpus_per_task.sh");
    assert_eq!(
        j.metadata.generate_name.as_deref(),
        Some("gpus-per-task-test-")
    );
    assert_eq!(j.metadata.name, None);
    assert_eq!(j.spec.output.as_deref(), Some("gpus_per_task_test.out"));
    assert_eq!(j.spec.error.as_deref(), Some("gpus_per_task_test.err"));
    // Who submits is recorded by the API server at admission, never written by the client.
    assert_eq!(annotation(&j, "muster.dev/user"), None);
    assert_spec(
        "gpus_per_task.sh",
        BatchJobSpec {
            job_name: Some("gpus_per_task_test".into()),
            output: Some("gpus_per_task_test.out".into()),
            error: Some("gpus_per_task_test.err".into()),
            nodes: Some(IntOrString::Int(2)),
            ntasks_per_node: Some(2),
            gpus_per_task: Some(IntOrString::Int(1)),
            time: Some(IntOrString::String("00:10:00".into())),
            ..Default::default()
        },
    );
}

#[test]
fn gres_mpirun() {
    let j = job("gres_mpirun.sh");
    assert_eq!(j.metadata.generate_name.as_deref(), Some("mpirun-test-"));
    assert_eq!(j.spec.output.as_deref(), Some("mpirun_test.out"));
    assert_eq!(j.spec.error.as_deref(), Some("mpirun_test.err"));
    assert_spec(
        "gres_mpirun.sh",
        BatchJobSpec {
            job_name: Some("mpirun_test".into()),
            output: Some("mpirun_test.out".into()),
            error: Some("mpirun_test.err".into()),
            nodes: Some(IntOrString::Int(2)),
            ntasks_per_node: Some(2),
            gres: Some("gpu:4".into()),
            time: Some(IntOrString::String("00:10:00".into())),
            ..Default::default()
        },
    );
}

#[test]
fn gres_srun() {
    let j = job("gres_srun.sh");
    assert_eq!(j.metadata.generate_name.as_deref(), Some("gres-test-"));
    assert_eq!(j.spec.output.as_deref(), Some("gres_test.out"));
    assert_spec(
        "gres_srun.sh",
        BatchJobSpec {
            job_name: Some("gres_test".into()),
            output: Some("gres_test.out".into()),
            error: Some("gres_test.err".into()),
            nodes: Some(IntOrString::Int(2)),
            gres: Some("gpu:4".into()),
            time: Some(IntOrString::String("00:10:00".into())),
            ..Default::default()
        },
    );
}

#[test]
fn multi_node_mpi() {
    let j = job("multi_node_mpi.sh");
    assert_eq!(j.metadata.generate_name.as_deref(), Some("multi-gpu-task-"));
    assert_eq!(j.spec.output.as_deref(), None);
    assert_spec(
        "multi_node_mpi.sh",
        BatchJobSpec {
            // A Partition object cannot be named gpu_partition.
            partition: Some("gpu-partition".into()),
            job_name: Some("multi_gpu_task".into()),
            nodes: Some(IntOrString::Int(2)),
            ntasks_per_node: Some(2),
            gres: Some("gpu:4".into()),
            ..Default::default()
        },
    );
}

#[test]
fn ray_on_cluster() {
    let j = job("ray_on_cluster.sh");
    // No --job-name: Slurm names the job after the script file.
    assert_eq!(
        j.metadata.generate_name.as_deref(),
        Some("ray-on-cluster-sh-")
    );
    assert_spec(
        "ray_on_cluster.sh",
        BatchJobSpec {
            job_name: Some("ray_on_cluster.sh".into()),
            nodes: Some(IntOrString::Int(4)),
            ntasks_per_node: Some(1),
            gpus_per_node: Some(IntOrString::Int(8)),
            exclusive: Some(muster_crds::v1alpha1::Exclusive::Node),
            ..Default::default()
        },
    );
}

#[test]
fn single_gpu_task() {
    assert_spec(
        "single_gpu_task.sh",
        BatchJobSpec {
            partition: Some("gpu-partition".into()),
            job_name: Some("single_gpu_task".into()),
            nodes: Some(IntOrString::Int(1)),
            ntasks_per_node: Some(1),
            gres: Some("gpu:1".into()),
            ..Default::default()
        },
    );
}

#[test]
fn torchrun_multinode() {
    let j = job("torchrun_multinode.sh");
    assert_eq!(j.metadata.generate_name.as_deref(), Some("train-"));
    assert_spec(
        "torchrun_multinode.sh",
        BatchJobSpec {
            partition: Some("blackwell".into()),
            job_name: Some("train".into()),
            nodes: Some(IntOrString::Int(8)),
            ntasks_per_node: Some(1),
            gpus_per_node: Some(IntOrString::Int(8)),
            cpus_per_task: Some(96),
            exclusive: Some(muster_crds::v1alpha1::Exclusive::Node),
            ..Default::default()
        },
    );
}

#[test]
fn typed_gpu_constraint_is_refused_like_slurm() {
    let e = ours("howto", "typed_gpu_constraint.sh", &["--dry-run"], &[]).unwrap_err();
    let msg = e.to_string();
    // Slurm's words, the line, what is wrong, what is allowed, and how to ask for a V100.
    assert!(
        msg.starts_with(
            "typed_gpu_constraint.sh: line 3: invalid generic resource (gres) specification \
             'gpu:tesla:v100:1': "
        ),
        "{msg}"
    );
    assert!(msg.contains("a type name cannot contain ':'"), "{msg}");
    assert!(msg.contains("NAME:TYPE:COUNT"), "{msg}");
    assert!(msg.contains("did you mean gpu:v100:1?"), "{msg}");
}

#[test]
fn image_and_script_arguments_go_to_the_task_container() {
    let p = ours(
        "howto",
        "torchrun_multinode.sh",
        &["--dry-run", "--image=nvcr.io/nvidia/pytorch:24.05-py3"],
        &[],
    )
    .unwrap();
    let t = p.job.spec.template.expect("template");
    let c = &t.spec.expect("pod spec").containers[0];
    assert_eq!(c.name, "task");
    assert_eq!(c.image.as_deref(), Some("nvcr.io/nvidia/pytorch:24.05-py3"));
    assert_eq!(c.args, None);

    // Arguments after the script; no image: left to the partition's default.
    let args = sbatch_args(&["--dry-run", "x.sh", "--lr", "0.1", "-N", "3"]);
    assert_eq!(args.command, ["x.sh", "--lr", "0.1", "-N", "3"]);
    assert_eq!(
        args.options.nodes, None,
        "options after the script belong to it"
    );
}

#[test]
fn export_sets_task_variables_and_refuses_bare_names() {
    let p = ours(
        "howto",
        "torchrun_multinode.sh",
        &["--dry-run", "--export=ALL,NCCL_DEBUG=INFO,EMPTY="],
        &[],
    )
    .unwrap();
    let c = &p
        .job
        .spec
        .template
        .expect("template")
        .spec
        .unwrap()
        .containers[0];
    let env: Vec<(&str, Option<&str>)> = c
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.as_str(), e.value.as_deref()))
        .collect();
    assert_eq!(env, [("NCCL_DEBUG", Some("INFO")), ("EMPTY", Some(""))]);
    assert_eq!(c.image, None, "the image stays the partition's default");

    // A bare name would copy the submitting shell's value, which Muster never does.
    let refused = |arg: &str| {
        let argv = ["muster", "sbatch", arg, "x.sh"].map(Into::into).to_vec();
        muster_cli::parse_args(argv)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let msg = refused("--export=ALL,HOME");
    assert!(
        msg.contains("--export") && msg.contains("HOME=VALUE"),
        "{msg}"
    );
    let msg = refused("--export=1X=2");
    assert!(msg.contains("not a variable name"), "{msg}");
}

#[test]
fn manifests_render_as_yaml_and_json() {
    let j = job("gres_mpirun.sh");
    let yaml = render_manifest(&j, ManifestFormat::Yaml).unwrap();
    assert!(
        yaml.starts_with("apiVersion: muster.dev/v1alpha1\nkind: BatchJob\n"),
        "{yaml}"
    );
    let back: BatchJob = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(back.spec, j.spec);
    let json = render_manifest(&j, ManifestFormat::Json).unwrap();
    let back: BatchJob = serde_json::from_str(&json).unwrap();
    assert_eq!(back.spec, j.spec);
}

#[test]
fn kubectl_style_output_flag_selects_the_format() {
    let p = ours("howto", "gres_srun.sh", &["--dry-run", "-o", "json"], &[]).unwrap();
    assert_eq!(p.dry_run, Some(ManifestFormat::Json));
    // The script's own --output stays the Slurm output file.
    assert_eq!(p.job.spec.output.as_deref(), Some("gres_test.out"));
    let p = ours("howto", "gres_srun.sh", &["-o", "json"], &[]).unwrap();
    assert_eq!(p.dry_run, None);
    assert_eq!(p.job.spec.output.as_deref(), Some("json"));
}

/// The copies under tests/scripts/howto are the shared scripts, and none is missing.
#[test]
fn copies_match_the_shared_scripts() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/sbatch"))
        .find(|p| p.is_dir());
    let Some(shared) = shared else {
        eprintln!("note: shared/sbatch not found next to the repository; using the copies");
        return;
    };
    let mut names: Vec<String> = std::fs::read_dir(&shared)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sh"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        scripts("howto"),
        "scripts added to or removed from shared/sbatch"
    );
    for n in names {
        assert_eq!(
            std::fs::read(shared.join(&n)).unwrap(),
            std::fs::read(script_path("howto", &n)).unwrap(),
            "{n} differs from shared/sbatch/{n}"
        );
    }
}

#[test]
fn one_gpu_type_per_job() {
    let e = ours(
        "howto",
        "gres_srun.sh",
        &[
            "--dry-run",
            "--gres=gpu:a100:1",
            "-n",
            "2",
            "--gpus-per-task=h100:1",
        ],
        &[],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "command line: --gres asks for a100 GPUs but --gpus-per-task (command line) asks for \
         h100: a job runs on one GPU type"
    );
    // An untyped request goes with a typed one; the command line's --gres replaces the
    // script's.
    let p = ours(
        "howto",
        "gres_srun.sh",
        &[
            "--dry-run",
            "--gres=gpu:a100:1",
            "-n",
            "2",
            "--gpus-per-task=1",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(p.job.spec.gres.as_deref(), Some("gpu:a100:1"));
    // As in sbatch, --gres is checked in its final value: the command line can fix the
    // script's; a --time Slurm refuses is refused wherever it is.
    let p = ours(
        "howto",
        "typed_gpu_constraint.sh",
        &["--dry-run", "--gres=gpu:v100:1"],
        &[],
    )
    .unwrap();
    assert_eq!(p.job.spec.gres.as_deref(), Some("gpu:v100:1"));
    let e = ours(
        "edge",
        "bad_time_overridden.sh",
        &["--dry-run", "--time=5"],
        &[],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("bad_time_overridden.sh: line 2: invalid value '1h' for --time"),
        "{e}"
    );
}

#[test]
fn environment_layer_and_ignored_variables() {
    let p = ours(
        "howto",
        "gres_srun.sh",
        &["--dry-run"],
        &[
            ("SBATCH_PARTITION", "batch"),
            ("SBATCH_ACCOUNT", "physics"),
            ("SBATCH_REQ_SWITCH", "2"),
            ("SBATCH_WAIT4SWITCH", "10:00"),
        ],
    )
    .unwrap();
    assert_eq!(p.job.spec.partition.as_deref(), Some("batch"));
    assert_eq!(
        p.job.spec.switches,
        Some(IntOrString::String("2@10:00".into()))
    );
    // SBATCH_ACCOUNT is --account: the job's account.
    assert_eq!(p.job.spec.account.as_deref(), Some("physics"));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let e = ours(
        "howto",
        "gres_srun.sh",
        &["--dry-run"],
        &[("SBATCH_TIMELIMIT", "1h")],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("environment variable SBATCH_TIMELIMIT: invalid value '1h' for --time"),
        "{e}"
    );
}

/// A script carrying every option of other sites (each with a value where it takes one) and
/// the directives Muster gives their Slurm meaning: it is accepted, each option without an
/// effect gets exactly one warning line, the others land in the spec; bad values of several
/// options are all reported in one run.
#[test]
fn other_sites_directives_are_read_and_all_problems_reported_at_once() {
    use muster_cli::sbatch::options::NO_EFFECT;
    use muster_crds::slurm::getopt::{HasArg, SBATCH_OPTIONS};
    let mut text = String::from("#!/bin/bash\n");
    let mut no_effect = 0;
    for (long, _) in NO_EFFECT {
        if ["help", "usage", "version"].contains(long) {
            continue;
        }
        let o = SBATCH_OPTIONS.iter().find(|o| o.long == *long).unwrap();
        match o.has_arg {
            HasArg::No => text.push_str(&format!("#SBATCH --{long}\n")),
            HasArg::Required => text.push_str(&format!("#SBATCH --{long}=x1\n")),
            HasArg::Optional => text.push_str(&format!("#SBATCH --{long}=x1\n")),
        }
        no_effect += 1;
    }
    text.push_str(
        "#SBATCH -A physics\n#SBATCH --begin=now+1hour\n#SBATCH --signal=B:USR1@90\n\
         #SBATCH --open-mode=append\n#SBATCH -o logs/%x-%j.out\n#SBATCH -n 1\necho hi\n",
    );
    let run = |text: &str| {
        muster_cli::sbatch::prepare(
            &common::sbatch_args(&["--dry-run"]),
            Some(muster_cli::sbatch::ScriptInput {
                name: "sites.sh".into(),
                default_job_name: "sites.sh".into(),
                text: text.to_string(),
            }),
            &|_: &str| None::<String>,
            &muster_cli::sbatch::manifest::Submitter {
                namespace: None,
                cwd: None,
            },
        )
    };
    let p = run(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.warnings.len(), no_effect, "{:#?}", p.warnings);
    for w in &p.warnings {
        assert!(w.contains("has no effect in Muster"), "{w}");
    }
    let s = &p.job.spec;
    assert_eq!(s.account.as_deref(), Some("physics"));
    assert_eq!(s.signal.as_deref(), Some("B:USR1@90"));
    assert_eq!(s.output.as_deref(), Some("logs/%x-%j.out"));
    assert_eq!(s.open_mode, Some(muster_crds::v1alpha1::OpenMode::Append));
    let begin = s.begin.as_ref().unwrap().0.as_second();
    let now = jiff::Timestamp::now().as_second();
    assert!(
        (now + 3590..=now + 3610).contains(&begin),
        "{begin} vs {now}"
    );

    let bad = text
        .replace("--signal=B:USR1@90", "--signal=FOO")
        .replace("--begin=now+1hour", "--begin=now+1h")
        .replace("--open-mode=append", "--open-mode=sideways");
    let e = run(&bad).unwrap_err();
    let msg = e.to_string();
    for want in ["--signal", "--begin", "--open-mode"] {
        assert!(msg.contains(want), "{want} missing from {msg}");
    }
}

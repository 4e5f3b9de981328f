//! `sbatch --dry-run -o yaml` prints YAML that reads back as the same BatchJob, for YAML 1.2
//! readers and for YAML 1.1 ones (PyYAML here; kubectl's reader in `e2e_test_only.rs`), which
//! take an unquoted `10:00` for the sexagesimal integer 600 and `yes` for `true`.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use common::*;
use muster_cli::sbatch::{ManifestFormat, render_manifest};
use muster_crds::v1alpha1::BatchJob;
use serde_json::Value;

/// Options that give every int-or-string field (and a few other values) a form a YAML 1.1
/// reader would misread if it were left plain.
const TRICKY: &[&str] = &[
    "--dry-run",
    "-o",
    "yaml",
    "--time=10:00",
    "--nodes=2-4",
    "--gpus=8",
    "--gpus-per-node=4",
    "--array=0-3%2",
    "--switches=1@10:00",
    "--mem=100",
    "-J",
    "yes",
];

/// YAML 1.1 (PyYAML's safe_load_all) of a YAML stream as a JSON list of its documents, or
/// `None` without python3 + PyYAML.
fn pyyaml(yaml: &str) -> Option<Value> {
    let child = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; json.dump(list(yaml.safe_load_all(sys.stdin)), sys.stdout)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        return None;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No module named 'yaml'") {
            return None;
        }
        panic!("PyYAML could not read our YAML: {err}\n{yaml}");
    }
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn pyyaml_or_skip(test: &str, yaml: &str) -> Option<Value> {
    let v = pyyaml(yaml);
    if v.is_none() {
        assert!(
            std::env::var_os("MUSTER_REQUIRE_PYYAML").is_none(),
            "{test}: python3 with PyYAML is required (MUSTER_REQUIRE_PYYAML is set)"
        );
        eprintln!("{test}: skipped, python3 with PyYAML not available");
    }
    v
}

fn dry_run(argv: &[&str]) -> BatchJob {
    let mut full = argv.to_vec();
    full.push("--wrap=srun hostname");
    let args = sbatch_args(&full);
    muster_cli::sbatch::prepare(
        &args,
        None,
        &|_: &str| None::<String>,
        &muster_cli::sbatch::manifest::Submitter {
            namespace: None,
            cwd: None,
        },
    )
    .unwrap()
    .job
}

#[test]
fn int_or_string_values_are_quoted() {
    let job = dry_run(TRICKY);
    let yaml = render_manifest(&job, ManifestFormat::Yaml).unwrap();
    for line in [
        "  time: \"10:00\"\n",
        "  nodes: \"2-4\"\n",
        // Counts are stored as integers (IntOrString::Int) and stay numbers.
        "  gpus: 8\n",
        "  gpusPerNode: 4\n",
        "  array: \"0-3%2\"\n",
        "  switches: \"1@10:00\"\n",
        "  mem: \"100\"\n",
        "  jobName: \"yes\"\n",
    ] {
        assert!(yaml.contains(line), "missing {line:?} in\n{yaml}");
    }
    // YAML 1.2 (serde_yaml) reads the same object back.
    let back: BatchJob = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(
        serde_json::to_value(&back).unwrap(),
        serde_json::to_value(&job).unwrap()
    );
}

#[test]
fn yaml_1_1_reads_the_same_batchjob() {
    let mut yamls = vec![("tricky".to_string(), dry_run(TRICKY))];
    for sub in ["howto", "edge"] {
        for name in scripts(sub) {
            if let Ok(p) = ours(sub, &name, &["--dry-run"], &[]) {
                yamls.push((format!("{sub}/{name}"), p.job));
            }
        }
    }
    assert!(yamls.len() >= 20, "{} manifests", yamls.len());
    let texts: Vec<String> = yamls
        .iter()
        .map(|(_, job)| render_manifest(job, ManifestFormat::Yaml).unwrap())
        .collect();
    let Some(read) = pyyaml_or_skip("yaml_1_1_reads_the_same_batchjob", &texts.join("---\n"))
    else {
        return;
    };
    let read = read.as_array().expect("a list of documents");
    assert_eq!(read.len(), yamls.len());
    for (((what, job), yaml), read) in yamls.iter().zip(&texts).zip(read) {
        assert_eq!(
            read,
            &serde_json::to_value(job).unwrap(),
            "{what}: a YAML 1.1 reader sees something else in\n{yaml}"
        );
    }
}

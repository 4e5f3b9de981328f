//! Every example a user copies (`examples/`, except `clusters/` and `traces/`, which have their
//! own tests) must be accepted as written:
//! - each object parses as its type (muster-crds for BatchJob/Partition, k8s-openapi for the
//!   rest) with no unknown field;
//! - muster.dev objects pass their CRD's schema and CEL rules (the API server's checks at
//!   `kubectl apply`), and every Slurm value parses with `muster_crds::slurm` (what CEL cannot
//!   express, such as a constraint's brackets);
//! - each sbatch script in `examples/sbatch/` mirrors its BatchJob: real Slurm (`sbatch -vv`)
//!   reads the same request from its `#SBATCH` lines, and its body is the BatchJob's script.

mod chart_common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use chart_common::{crd_errors, root, typed};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use muster_crds::slurm;
use muster_crds::v1alpha1::{BatchJob, Partition};
use serde_json::Value;

fn examples_dir() -> PathBuf {
    root().join("examples")
}

/// Every YAML document under examples/ (but clusters/ and traces/), with its file.
fn documents() -> Vec<(PathBuf, Value)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                let name = p.file_name().unwrap().to_str().unwrap();
                if name != "clusters" && name != "traces" {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&examples_dir(), &mut files);
    files.sort();
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut n = 0;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = <Value as serde::Deserialize>::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: invalid YAML: {e}", f.display()));
            if v.is_null() {
                continue;
            }
            n += 1;
            docs.push((f.clone(), v));
        }
        assert!(n > 0, "{} holds no object", f.display());
    }
    docs
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap().display().to_string()
}

/// Parses every Slurm-syntax field with the library the operator and the CLI use.
fn slurm_values_parse(job: &BatchJob) -> Result<(), String> {
    let s = &job.spec;
    let text = |v: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match v {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
    };
    let e = |r: Result<(), slurm::SyntaxError>| r.map_err(|e| e.to_string());
    if let Some(v) = &s.time {
        e(slurm::TimeLimit::parse(&text(v)).map(drop))?;
    }
    if let Some(v) = &s.nodes {
        e(slurm::NodeRange::parse(&text(v)).map(drop))?;
    }
    if let Some(v) = &s.array {
        e(slurm::ArraySpec::parse(&text(v)).map(drop))?;
    }
    if let Some(v) = &s.switches {
        e(slurm::Switches::parse(&text(v)).map(drop))?;
    }
    for v in [&s.gpus, &s.gpus_per_node, &s.gpus_per_task]
        .into_iter()
        .flatten()
    {
        e(slurm::GpuCount::parse(&text(v)).map(drop))?;
    }
    for v in [&s.mem, &s.mem_per_cpu, &s.mem_per_gpu]
        .into_iter()
        .flatten()
    {
        e(slurm::MemSize::parse(v).map(drop))?;
    }
    if let Some(v) = &s.gres {
        e(slurm::parse_gres(v).map(drop))?;
    }
    if let Some(v) = &s.constraint {
        e(slurm::Constraint::parse(v).map(drop))?;
    }
    if let Some(v) = &s.dependency {
        e(slurm::DependencySpec::parse(v).map(drop))?;
    }
    if let Some(v) = &s.gpu_bind {
        e(slurm::GpuBind::parse(v).map(drop))?;
    }
    Ok(())
}

#[test]
fn every_example_is_accepted_as_written() {
    let docs = documents();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut names = BTreeSet::new();
    for (file, v) in &docs {
        let kind = v["kind"].as_str().unwrap_or("?").to_string();
        let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
        let at = format!("{} ({kind} {name})", rel(file));
        assert!(
            v["metadata"]["namespace"].is_null(),
            "{at}: examples name no namespace (users apply them with -n)"
        );
        assert!(
            names.insert((kind.clone(), name.clone())),
            "{at}: a second {kind} named {name}"
        );
        *kinds.entry(kind.clone()).or_default() += 1;
        match (v["apiVersion"].as_str().unwrap_or(""), kind.as_str()) {
            ("muster.dev/v1alpha1", "BatchJob") => {
                let job: BatchJob = typed(v).unwrap_or_else(|e| panic!("{at}: {e}"));
                let errs = crd_errors(v);
                assert!(
                    errs.is_empty(),
                    "{at}: the API server would refuse it: {errs:?}"
                );
                slurm_values_parse(&job).unwrap_or_else(|e| panic!("{at}: {e}"));
                let script = job.spec.script.as_deref().unwrap_or("");
                assert!(
                    script.starts_with("#!/bin/bash\n"),
                    "{at}: the script runs under /bin/bash; start it with #!/bin/bash"
                );
                let containers = job
                    .spec
                    .template
                    .as_ref()
                    .and_then(|t| t.spec.as_ref())
                    .map(|s| s.containers.clone())
                    .unwrap_or_default();
                assert!(
                    containers.iter().all(|c| c.image.is_some()),
                    "{at}: every container names its image (partitions need no defaultImage)"
                );
                for c in &containers {
                    let env = c.env.clone().unwrap_or_default();
                    assert!(
                        !env.iter().any(|e| e.name == "NVIDIA_VISIBLE_DEVICES"
                            || e.name == "CUDA_VISIBLE_DEVICES"),
                        "{at}: GPU binding variables are the operator's to set"
                    );
                    let res = c.resources.clone().unwrap_or_default();
                    for m in [res.requests, res.limits].into_iter().flatten() {
                        assert!(
                            !m.keys().any(|k| k.starts_with("nvidia.com/")),
                            "{at}: ask for GPUs with gres/gpus*, not a device-plugin resource"
                        );
                    }
                }
            }
            ("muster.dev/v1alpha1", "Partition") => {
                typed::<Partition>(v).unwrap_or_else(|e| panic!("{at}: {e}"));
                let errs = crd_errors(v);
                assert!(
                    errs.is_empty(),
                    "{at}: the API server would refuse it: {errs:?}"
                );
            }
            ("v1", "PersistentVolumeClaim") => {
                typed::<PersistentVolumeClaim>(v).unwrap_or_else(|e| panic!("{at}: {e}"));
            }
            ("v1", "ConfigMap") => {
                typed::<ConfigMap>(v).unwrap_or_else(|e| panic!("{at}: {e}"));
            }
            ("v1", "Secret") => {
                typed::<Secret>(v).unwrap_or_else(|e| panic!("{at}: {e}"));
            }
            (api, k) => panic!("{at}: no check for {api} {k}; add one"),
        }
    }
    assert!(kinds["BatchJob"] >= 9, "{kinds:?}");
    assert!(kinds["Partition"] >= 4, "{kinds:?}");
}

#[test]
fn examples_cover_what_users_ask_for() {
    let jobs: BTreeMap<String, BatchJob> = documents()
        .into_iter()
        .filter(|(_, v)| v["kind"] == "BatchJob")
        .map(|(_, v)| {
            let j: BatchJob = serde_json::from_value(v).unwrap();
            (j.metadata.name.clone().unwrap(), j)
        })
        .collect();
    let s = |n: &str| &jobs.get(n).unwrap_or_else(|| panic!("no example {n}")).spec;
    let int = |v: &Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>| {
        v.as_ref().map(|v| match v {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
        })
    };
    // One GPU.
    assert_eq!(s("single-gpu").gres.as_deref(), Some("gpu:1"));
    // 2 nodes x 2 tasks x 1 GPU, launched by mpirun.
    let m = s("mpirun-2x2");
    assert_eq!(
        (
            int(&m.nodes).as_deref(),
            m.ntasks_per_node,
            int(&m.gpus_per_task).as_deref()
        ),
        (Some("2"), Some(2), Some("1"))
    );
    assert!(m.script.as_deref().unwrap().contains("mpirun"));
    // A typed GPU with a constraint.
    let t = s("typed-gpu");
    let gres = slurm::parse_gres(t.gres.as_deref().unwrap()).unwrap();
    assert!(gres[0].gpu_type.is_some() && t.constraint.is_some());
    // An exclusive 8-node torchrun gang under one leaf.
    let g = s("train-llm");
    assert_eq!(int(&g.nodes).as_deref(), Some("8"));
    assert_eq!(g.exclusive, Some(muster_crds::v1alpha1::Exclusive::Node));
    assert_eq!(
        slurm::Switches::parse(&int(&g.switches).unwrap())
            .unwrap()
            .count,
        1
    );
    assert!(g.script.as_deref().unwrap().contains("torchrun"));
    // An array with a throttle.
    let a = slurm::ArraySpec::parse(&int(&s("sweep-lr").array).unwrap()).unwrap();
    assert_eq!((a.len(), a.max_running), (16, Some(4)));
    // train -> eval afterok.
    let d = slurm::DependencySpec::parse(s("eval").dependency.as_deref().unwrap()).unwrap();
    assert_eq!(d.to_string(), "afterok:train");
    assert!(jobs.contains_key("train"));
    // Ray head and workers over one allocation.
    let r = s("ray-rl");
    assert!(r.script.as_deref().unwrap().contains("ray symmetric-run"));
    assert_eq!(int(&r.nodes).as_deref(), Some("4"));
    // An interactive gang of sleeping pods.
    let i = s("interactive");
    assert!(i.script.as_deref().unwrap().contains("sleep infinity"));
    assert_eq!(int(&i.nodes).as_deref(), Some("2"));
}

#[test]
fn superpod_partitions_use_the_simulated_fabric_labels() {
    // examples/clusters/superpod.yaml (the simulator's SuperPOD) labels nodes with these keys,
    // broadest first; the partitions must place jobs with the same ones.
    let mut want: Vec<String> = vec!["muster.dev/spine".into(), "muster.dev/leaf".into()];
    let cluster = examples_dir().join("clusters").join("superpod.yaml");
    if cluster.exists() {
        let spec: Value =
            serde_yaml::from_str(&std::fs::read_to_string(&cluster).unwrap()).unwrap();
        want = spec["levels"]
            .as_array()
            .expect("levels in examples/clusters/superpod.yaml")
            .iter()
            .map(|l| l["key"].as_str().unwrap().to_string())
            .collect();
    }
    want.push(muster_crds::labels::HOSTNAME.into());
    let parts: Vec<Partition> = documents()
        .into_iter()
        .filter(|(f, v)| f.ends_with("partitions/superpod.yaml") && v["kind"] == "Partition")
        .map(|(_, v)| serde_json::from_value(v).unwrap())
        .collect();
    assert_eq!(parts.len(), 3);
    for p in &parts {
        assert_eq!(p.spec.topology, want, "{:?}", p.metadata.name);
    }
    let defaults: Vec<_> = parts
        .iter()
        .filter(|p| p.spec.default == Some(true))
        .collect();
    assert_eq!(defaults.len(), 1, "exactly one default partition");
    // Preemption needs a lower tier that allows it.
    let tier = |p: &Partition| p.spec.priority_tier.unwrap_or(1);
    let low = parts.iter().min_by_key(|p| tier(p)).unwrap();
    assert_eq!(
        low.spec.preempt_mode,
        Some(muster_crds::v1alpha1::PreemptMode::Requeue)
    );
}

/// sbatch script -> (YAML file, BatchJob name).
const MIRRORS: [(&str, &str, &str); 9] = [
    ("single-gpu.sh", "batchjobs/single-gpu.yaml", "single-gpu"),
    ("mpirun-2x2.sh", "batchjobs/mpirun-2x2.yaml", "mpirun-2x2"),
    (
        "typed-gpu-constraint.sh",
        "batchjobs/typed-gpu-constraint.yaml",
        "typed-gpu",
    ),
    (
        "torchrun-8-nodes.sh",
        "batchjobs/torchrun-8-nodes.yaml",
        "train-llm",
    ),
    ("array-sweep.sh", "batchjobs/array-sweep.yaml", "sweep-lr"),
    ("train.sh", "batchjobs/train-eval-chain.yaml", "train"),
    ("eval.sh", "batchjobs/train-eval-chain.yaml", "eval"),
    ("ray-cluster.sh", "batchjobs/ray-cluster.yaml", "ray-rl"),
    (
        "interactive.sh",
        "batchjobs/interactive.yaml",
        "interactive",
    ),
];

fn job(file: &str, name: &str) -> BatchJob {
    documents()
        .into_iter()
        .filter(|(f, v)| f.ends_with(file) && v["kind"] == "BatchJob")
        .map(|(_, v)| serde_json::from_value::<BatchJob>(v).unwrap())
        .find(|j| j.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no BatchJob {name} in {file}"))
}

#[test]
fn sbatch_scripts_mirror_their_batchjobs() {
    let dir = examples_dir().join("sbatch");
    let scripts: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let listed: BTreeSet<String> = MIRRORS.iter().map(|m| m.0.to_string()).collect();
    assert_eq!(scripts, listed, "every sbatch example mirrors a BatchJob");
    for (script, file, name) in MIRRORS {
        let text = std::fs::read_to_string(dir.join(script)).unwrap();
        let body: String = text
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("#SBATCH"))
            .collect();
        let j = job(file, name);
        assert_eq!(
            j.spec.script.as_deref(),
            Some(body.as_str()),
            "examples/sbatch/{script} without its #SBATCH lines must be the script of {name} in {file}"
        );
    }
}

/// Real Slurm's reading of a script's `#SBATCH` lines (`sbatch -vv`'s "defined options"), or
/// `None` when Slurm's client is not installed (and MUSTER_REQUIRE_SLURM is not 1).
fn slurm_options(script: &Path) -> Option<BTreeMap<String, String>> {
    // A minimal slurm.conf so the client parses without a controller (sbatch prints its
    // parse, then fails to submit).
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("slurm.conf");
    std::fs::write(
        &conf,
        "ClusterName=oracle\nSlurmctldHost=localhost\nAuthType=auth/none\nCredType=cred/none\n\
         NodeName=gpu[001-128] CPUs=8 State=UNKNOWN\n\
         PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
    )
    .unwrap();
    let out = Command::new("sbatch")
        .arg("-vv")
        .arg(script)
        .env("SLURM_CONF", &conf)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            assert!(
                std::env::var("MUSTER_REQUIRE_SLURM").as_deref() != Ok("1"),
                "MUSTER_REQUIRE_SLURM=1 but sbatch cannot run: {e}"
            );
            eprintln!("note: skipping the sbatch oracle: {e} (apt-get install slurm-client)");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut opts = BTreeMap::new();
    let mut inside = false;
    for line in stderr.lines() {
        let line = line.trim_start_matches("sbatch: ");
        if line.starts_with("defined options") {
            inside = true;
        } else if line.starts_with("end of defined options") {
            break;
        } else if inside && !line.starts_with("---") {
            let (k, v) = line.split_once(':').expect("option : value");
            opts.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    assert!(
        inside,
        "sbatch printed no options for {}: {stderr}",
        script.display()
    );
    opts.remove("verbose");
    Some(opts)
}

/// A BatchJob's request as the sbatch options that make it.
fn as_sbatch_options(j: &BatchJob) -> BTreeMap<String, String> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let s = &j.spec;
    let text = |v: &IntOrString| match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    let mut o = BTreeMap::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            o.insert(k.to_string(), v);
        }
    };
    put("partition", s.partition.clone());
    put("job-name", s.job_name.clone());
    put("nodes", s.nodes.as_ref().map(text));
    put("ntasks", s.ntasks.map(|n| n.to_string()));
    put("ntasks-per-node", s.ntasks_per_node.map(|n| n.to_string()));
    put("cpus-per-task", s.cpus_per_task.map(|n| n.to_string()));
    put("mem", s.mem.clone());
    put("mem-per-cpu", s.mem_per_cpu.clone());
    put("mem-per-gpu", s.mem_per_gpu.clone());
    put("gpus", s.gpus.as_ref().map(text));
    put("gpus-per-node", s.gpus_per_node.as_ref().map(text));
    put("gpus-per-task", s.gpus_per_task.as_ref().map(text));
    put("gres", s.gres.clone());
    put("constraint", s.constraint.clone());
    put(
        "exclusive",
        s.exclusive.and_then(|e| match e {
            muster_crds::v1alpha1::Exclusive::Shared => None,
            muster_crds::v1alpha1::Exclusive::Node => Some("exclusive".into()),
            muster_crds::v1alpha1::Exclusive::User => Some("user".into()),
        }),
    );
    put("time", s.time.as_ref().map(text));
    put("array", s.array.as_ref().map(text));
    put("dependency", s.dependency.clone());
    put("switches", s.switches.as_ref().map(text));
    put("gpu-bind", s.gpu_bind.clone());
    put("nice", s.nice.map(|n| n.to_string()));
    put("hold", s.hold.filter(|h| *h).map(|_| "set".into()));
    o
}

/// Slurm prints some values in a canonical form; compare through Muster's Slurm parsers.
fn same_value(key: &str, slurm_says: &str, ours: &str) -> bool {
    match key {
        "time" => slurm::TimeLimit::parse(slurm_says) == slurm::TimeLimit::parse(ours),
        "switches" => slurm::Switches::parse(slurm_says) == slurm::Switches::parse(ours),
        "gres" => {
            slurm::parse_gres(slurm_says.trim_start_matches("gres:")) == slurm::parse_gres(ours)
        }
        "mem" | "mem-per-cpu" | "mem-per-gpu" => {
            slurm::MemSize::parse(slurm_says) == slurm::MemSize::parse(ours)
        }
        "nodes" => slurm::NodeRange::parse(slurm_says) == slurm::NodeRange::parse(ours),
        "array" => slurm::ArraySpec::parse(slurm_says) == slurm::ArraySpec::parse(ours),
        "constraint" => slurm::Constraint::parse(slurm_says) == slurm::Constraint::parse(ours),
        _ => slurm_says == ours,
    }
}

#[test]
fn real_sbatch_reads_the_same_request_as_the_batchjob() {
    for (script, file, name) in MIRRORS {
        let Some(slurm) = slurm_options(&examples_dir().join("sbatch").join(script)) else {
            return;
        };
        let mut ours = as_sbatch_options(&job(file, name));
        // eval.sh takes its dependency on the command line (sbatch --dependency=afterok:ID
        // eval.sh): sbatch gives train a generated name, so a name in the script could not
        // find it.
        if script == "eval.sh" {
            assert_eq!(ours.remove("dependency").as_deref(), Some("afterok:train"));
        }
        let keys: BTreeSet<&String> = slurm.keys().chain(ours.keys()).collect();
        for k in keys {
            match (slurm.get(k), ours.get(k)) {
                (Some(a), Some(b)) => assert!(
                    same_value(k, a, b),
                    "{script} vs {name}: Slurm reads --{k}={a}, the BatchJob says {b}"
                ),
                (a, b) => {
                    panic!("{script} vs {name}: --{k} is {a:?} for Slurm but {b:?} in the BatchJob")
                }
            }
        }
    }
}

#[test]
fn readme_lists_every_example() {
    let readme = std::fs::read_to_string(examples_dir().join("README.md")).unwrap();
    let mut missing = Vec::new();
    for sub in ["batchjobs", "partitions", "sbatch"] {
        for e in std::fs::read_dir(examples_dir().join(sub)).unwrap() {
            let f = e.unwrap().file_name().into_string().unwrap();
            if !readme.contains(&format!("`{f}`")) {
                missing.push(format!("{sub}/{f}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "examples/README.md does not mention {missing:?}"
    );
}

//! Every CEL rule of the committed CRDs, evaluated the way an API server does (kube's client-side
//! CEL engine over the CRD's own openAPIV3Schema): each accepts good values and refuses a bad one
//! with a message saying what is allowed.

use kube::core::cel::{ScopeContext, Validator, WarningKind, analyze_rule, compile_schema};
use serde_json::{Value, json};
use std::path::PathBuf;

fn schema(file: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("yaml")
        .join(file);
    let crd: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// A BatchJob named `train` with `spec` (and a script, unless `spec` gives a template or a
/// script of its own).
fn bj(spec: Value) -> Value {
    bj_named("train", spec)
}

fn bj_named(name: &str, mut spec: Value) -> Value {
    if spec.get("script").is_none() && spec.get("template").is_none() {
        spec["script"] = json!("#!/bin/bash\nsrun hostname\n");
    }
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
           "metadata": {"name": name, "namespace": "ml"}, "spec": spec})
}

/// Errors from validating `obj` (and, for updates, `old`) against `file`'s schema.
fn errors(file: &str, obj: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(&schema(file), obj, old) {
        Ok(()) => vec![],
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    }
}

fn accepts(file: &str, obj: Value) {
    let errs = errors(file, &obj, None);
    assert!(errs.is_empty(), "{obj} was refused: {errs:?}");
}

fn refuses(file: &str, obj: Value, message_part: &str) {
    let errs = errors(file, &obj, None);
    assert!(
        errs.iter().any(|e| e.contains(message_part)),
        "{obj} should be refused with '{message_part}', got {errs:?}"
    );
}

const BJ: &str = "batchjobs.muster.dev.yaml";
const PART: &str = "partitions.muster.dev.yaml";
const GN: &str = "gpunodes.muster.dev.yaml";

/// (field, good values, bad values, words of the message)
fn field_cases() -> Vec<(&'static str, Vec<Value>, Vec<Value>, &'static str)> {
    vec![
        (
            "time",
            vec![
                json!(30),
                json!("30"),
                json!("10:00"),
                json!("1:00:00"),
                json!("2-00:00:00"),
                json!("1-0"),
                json!("3-12:30"),
                json!("UNLIMITED"),
                json!("infinite"),
                json!(0),
            ],
            vec![
                json!("1h"),
                json!("-5"),
                json!("1:2:3:4"),
                json!("2-"),
                json!(-1),
                json!("1-2-3"),
            ],
            "time must be MINUTES",
        ),
        (
            "nodes",
            vec![json!(1), json!("4"), json!("2-8"), json!("3-3")],
            vec![
                json!(0),
                json!("0"),
                json!("8-2"),
                json!("a"),
                json!("2-"),
                json!("0-4"),
            ],
            "nodes must be a count",
        ),
        (
            "mem",
            vec![
                json!("16G"),
                json!("64000"),
                json!("512m"),
                json!("1TB"),
                json!("0"),
            ],
            vec![json!("16GiB"), json!("-1"), json!("1.5G"), json!("G")],
            "memory must be an integer",
        ),
        (
            "gpusPerNode",
            // 0 asks for no GPUs, as Slurm's --gpus-per-node=0.
            vec![
                json!(8),
                json!("8"),
                json!("a100:8"),
                json!("h100-80gb:4"),
                json!(0),
                json!("a100:0"),
                json!("00"),
            ],
            vec![
                json!("8:a100"),
                json!(-1),
                json!("a100"),
                json!("a100:"),
                json!("eight"),
            ],
            "GPU counts must be COUNT or TYPE:COUNT",
        ),
        (
            "gres",
            vec![
                json!("gpu:4"),
                json!("gpu:a100:2"),
                json!("gpu"),
                json!("gpu:a100"),
            ],
            vec![
                json!("mps:100"),
                json!("gpu:tesla:v100:1"),
                json!("gpu:4:2:1"),
                json!("shard"),
            ],
            "gres must be gpu[:TYPE][:COUNT]",
        ),
        (
            "constraint",
            vec![
                json!("a100&ib"),
                json!("[rack1*2&rack2*2]"),
                json!("a|b"),
                json!("(a|b)&c"),
                json!("[a|b]"),
            ],
            vec![
                json!("a&&b"),
                json!("&a"),
                json!("a b"),
                json!("a|"),
                json!("a;b"),
            ],
            "constraint must be node features",
        ),
        (
            "array",
            vec![
                json!("0-15%4"),
                json!("1,3,5-7"),
                json!(7),
                json!("0-15:4"),
                json!("0-15:4%2"),
            ],
            vec![
                json!("0-15%0"),
                json!("a-b"),
                json!("1,,2"),
                json!("%4"),
                json!("0-15:0"),
                json!(-3),
            ],
            "array must be indices",
        ),
        (
            "dependency",
            vec![
                json!("afterok:train"),
                json!("afterok:123:456,afterany:prep"),
                json!("singleton"),
                json!("123"),
                json!("afterok:a?afterany:b"),
                json!("after:prep+10"),
            ],
            vec![
                json!("afterfoo:1"),
                json!("afterok:"),
                json!("afterok:a,afterany:b?afterok:c"),
                json!("afterok:Train"),
                json!(""),
            ],
            "dependency must be TYPE:JOB",
        ),
        (
            "switches",
            vec![
                json!(1),
                json!("2"),
                json!("2@10:00"),
                json!("1@1-00:00:00"),
            ],
            vec![
                json!(0),
                json!("2@"),
                json!("@5"),
                json!("0@5"),
                json!("2@1h"),
            ],
            "switches must be COUNT or COUNT@MAX_WAIT",
        ),
        (
            "gpuBind",
            vec![
                json!("closest"),
                json!("map_gpu:0,1"),
                json!("map_gpu:0*2,1*2"),
                json!("verbose,per_task:2"),
                json!("none"),
                json!("mask_gpu:0x3,0xC"),
                json!("single:1"),
            ],
            vec![
                json!("nearest"),
                json!("map_gpu:"),
                json!("per_task:0"),
                json!("closest,verbose"),
            ],
            "gpuBind must be closest",
        ),
        (
            "partition",
            vec![json!("gpu"), json!("gpu-a100.west")],
            vec![json!("GPU_Partition"), json!("-gpu")],
            "partition must be a Partition name",
        ),
        (
            "gpuType",
            vec![json!("a100"), json!("H100-80GB")],
            vec![json!("a100:80"), json!("tesla v100")],
            "gpuType must be letters",
        ),
        (
            "nodelist",
            vec![
                json!("gpu001"),
                json!("gpu[001-004],gpu010"),
                json!("node-1.rack2,gpu[1,3]"),
                json!("gpu001 gpu002"),
            ],
            vec![
                json!("/etc/nodes"),
                json!("GPU001"),
                json!("gpu[001-"),
                json!("gpu_001"),
            ],
            "nodelist must be a Slurm hostlist of Node names",
        ),
        (
            "exclude",
            vec![json!("gpu[001-002]")],
            vec![json!("./bad-nodes"), json!("gpu_1")],
            "exclude must be a Slurm hostlist of Node names",
        ),
    ]
}

/// `exclusive` is `true`, `false` or `"user"`: a typeless field the schema's enum checks (a
/// CEL rule cannot reach it, see `Exclusive`).
#[test]
fn exclusive_takes_a_boolean_or_user() {
    // The enum is the API server's to check (e2e/tests conformance: `exclusive: users` is
    // refused at apply); here, the schema's shape and the Rust type's reading.
    let s = schema(BJ);
    let ex = &s["properties"]["spec"]["properties"]["exclusive"];
    assert_eq!(ex["x-kubernetes-preserve-unknown-fields"], json!(true));
    assert_eq!(ex["enum"], json!([false, true, "user"]));
    assert!(ex.get("type").is_none() && ex.get("x-kubernetes-validations").is_none());
    use muster_crds::v1alpha1::{BatchJobSpec, Exclusive};
    for (v, want) in [
        (json!(true), Exclusive::Node),
        (json!(false), Exclusive::Shared),
        (json!("user"), Exclusive::User),
    ] {
        let spec: BatchJobSpec = serde_json::from_value(json!({ "exclusive": v })).unwrap();
        assert_eq!(spec.exclusive, Some(want));
        assert_eq!(serde_json::to_value(&spec).unwrap()["exclusive"], v);
    }
    for v in [json!("users"), json!("true"), json!(1)] {
        let e = serde_json::from_value::<BatchJobSpec>(json!({ "exclusive": v })).unwrap_err();
        assert!(e.to_string().contains("true, false or \"user\""), "{e}");
    }
}

#[test]
fn batchjob_field_rules_accept_slurm_syntax_and_refuse_the_rest() {
    for (field, good, bad, message) in field_cases() {
        for v in good {
            accepts(BJ, bj(json!({ field: v })));
        }
        for v in bad {
            refuses(BJ, bj(json!({ field: v })), message);
        }
    }
}

#[test]
fn batchjob_cross_field_rules() {
    accepts(
        BJ,
        bj(json!({"nodes": 2, "ntasksPerNode": 4, "gpusPerTask": 1, "mem": "64G"})),
    );
    refuses(
        BJ,
        bj(json!({"mem": "1G", "memPerCpu": "1G"})),
        "mutually exclusive",
    );
    refuses(
        BJ,
        bj(json!({"memPerCpu": "1G", "memPerGpu": "1G", "gpus": 1})),
        "mutually exclusive",
    );
    refuses(
        BJ,
        bj(json!({"gpusPerTask": 1})),
        "gpusPerTask needs a task count",
    );
    accepts(BJ, bj(json!({"gpusPerTask": 1, "ntasks": 4})));
    refuses(
        BJ,
        bj(json!({"gres": "gpu:4", "gpusPerNode": 4})),
        "gres and gpusPerNode",
    );
    refuses(
        BJ,
        bj(json!({"gpuType": "a100", "gpus": "h100:2"})),
        "give the type once",
    );
    refuses(
        BJ,
        bj(json!({"gpuType": "a100", "gres": "gpu:h100:2"})),
        "give the type once",
    );
    refuses(
        BJ,
        bj(json!({"gpuType": "a100", "gres": "gpu:h100"})),
        "give the type once",
    );
    accepts(BJ, bj(json!({"gpuType": "a100", "gres": "gpu:2"})));
    accepts(BJ, bj(json!({"gpuType": "a100", "gpus": 2})));
    refuses(
        BJ,
        bj(json!({"memPerGpu": "8G"})),
        "memPerGpu needs a GPU request",
    );
    accepts(BJ, bj(json!({"memPerGpu": "8G", "gpusPerNode": 2})));
}

#[test]
fn arrays_stay_within_max_array_size_and_ranges_go_up() {
    for good in [
        json!("0-1000"),
        json!(1000),
        json!("5-5"),
        json!("0-15:4%2"),
        json!("1,3,999"),
    ] {
        accepts(BJ, bj(json!({ "array": good })));
    }
    for bad in [
        json!("0-1000000"),
        json!(1001),
        json!("1,2,3-2000"),
        json!("01001"),
    ] {
        refuses(BJ, bj(json!({ "array": bad })), "MaxArraySize");
    }
    for bad in [json!("5-1"), json!("1,2,30-20:2"), json!("0-15,9-8%2")] {
        refuses(BJ, bj(json!({ "array": bad })), "LO <= HI");
    }
    // A step or throttle above 1000 is no index.
    accepts(BJ, bj(json!({ "array": "0-10:2000%5000" })));
}

#[test]
fn names_must_fit_pod_labels_and_array_elements() {
    accepts(BJ, bj_named(&"a".repeat(63), json!({})));
    refuses(
        BJ,
        bj_named(&"a".repeat(64), json!({})),
        "metadata.name must be at most 63 characters",
    );
    // Elements are NAME-INDEX: 58 + 1 + 4 digits fits; 60 + 1 + 4 does not.
    accepts(BJ, bj_named(&"a".repeat(58), json!({"array": "0-1000"})));
    accepts(BJ, bj_named(&"a".repeat(60), json!({"array": "0-15"})));
    refuses(
        BJ,
        bj_named(&"a".repeat(60), json!({"array": "0-1000"})),
        "elements are named NAME-INDEX",
    );
}

#[test]
fn a_job_must_have_something_to_run() {
    refuses(
        BJ,
        bj(json!({"template": {"metadata": {}}})),
        "nothing to run",
    );
    refuses(BJ, bj(json!({"script": "  \n "})), "nothing to run");
    refuses(
        BJ,
        bj(json!({"template": {"spec": {"containers": []}}})),
        "nothing to run",
    );
    accepts(
        BJ,
        bj(json!({"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}})),
    );
    accepts(BJ, bj(json!({"script": "hostname"})));
}

#[test]
fn cancel_cannot_be_undone() {
    let old = bj(json!({"cancel": true}));
    let undo = bj(json!({"cancel": false}));
    let errs = errors(BJ, &undo, Some(&old));
    assert!(
        errs.iter().any(|e| e.contains("cancel cannot be undone")),
        "{errs:?}"
    );
    let removed = bj(json!({}));
    let errs = errors(BJ, &removed, Some(&old));
    assert!(
        errs.iter().any(|e| e.contains("cancel cannot be undone")),
        "{errs:?}"
    );
    assert!(errors(BJ, &bj(json!({"cancel": true})), Some(&bj(json!({})))).is_empty());
    // A requeue request clears it (scontrol requeue of a cancelled job), and only grows.
    let requeued = bj(json!({"requeueRequests": 1}));
    let errs = errors(BJ, &requeued, Some(&old));
    assert!(errs.is_empty(), "{errs:?}");
    let again = bj(json!({"cancel": true, "requeueRequests": 1}));
    let errs = errors(BJ, &bj(json!({"requeueRequests": 1})), Some(&again));
    assert!(
        errs.iter().any(|e| e.contains("cancel cannot be undone")),
        "{errs:?}"
    );
    for back in [json!({}), json!({"requeueRequests": 0})] {
        let errs = errors(BJ, &bj(back), Some(&requeued));
        assert!(
            errs.iter()
                .any(|e| e.contains("requeueRequests only grows")),
            "{errs:?}"
        );
    }
}

fn part(spec: Value) -> Value {
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition", "metadata": {"name": "gpu"}, "spec": spec})
}

#[test]
fn partition_rules() {
    accepts(
        PART,
        part(json!({
            "topology": ["muster.dev/spine", "muster.dev/leaf", "kubernetes.io/hostname"],
            "defaultTime": "1:00:00", "maxTime": "7-00:00:00", "minNodes": 1, "maxNodes": 64,
            "allowedNamespaces": ["ml", "research"], "state": "Up", "preemptMode": "Requeue"
        })),
    );
    refuses(
        PART,
        part(json!({"topology": ["muster.dev/leaf"]})),
        "end with kubernetes.io/hostname",
    );
    refuses(
        PART,
        part(json!({"topology": ["bad key!", "kubernetes.io/hostname"]})),
        "Kubernetes label keys",
    );
    refuses(
        PART,
        part(json!({"minNodes": 8, "maxNodes": 4})),
        "minNodes must not exceed maxNodes",
    );
    refuses(
        PART,
        part(json!({"maxTime": "forever"})),
        "time must be MINUTES",
    );
    refuses(
        PART,
        part(json!({"defaultTime": "1h"})),
        "time must be MINUTES",
    );
    refuses(
        PART,
        part(json!({"allowedNamespaces": ["ML"]})),
        "namespace names",
    );
    refuses(
        PART,
        part(json!({"runtimeClassName": "Nvidia"})),
        "RuntimeClass name",
    );
    refuses(
        PART,
        part(json!({"defMemPerGpu": "lots"})),
        "memory must be an integer",
    );
}

#[test]
fn partition_job_environment_rules() {
    let env = |e: Value| part(json!({"jobEnvironment": e}));
    accepts(
        PART,
        env(json!({
            "volumes": [
                {"name": "scratch", "mountPath": "/scratch", "claimName": "scratch"},
                {"name": "datasets", "mountPath": "/datasets", "hostPath": "/lustre/datasets", "readOnly": true}],
            "shmSize": "64Gi", "resources": {"rdma/ib": 1}, "capabilities": ["IPC_LOCK"],
            "hostNetwork": true, "annotations": {"k8s.v1.cni.cncf.io/networks": "ib"},
            "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}], "serviceAccountName": "trainer"
        })),
    );
    refuses(
        PART,
        env(json!({"volumes": [{"name": "scratch", "mountPath": "/scratch"}]})),
        "exactly one of claimName and hostPath",
    );
    refuses(
        PART,
        env(
            json!({"volumes": [{"name": "s", "mountPath": "/s", "claimName": "c", "hostPath": "/s"}]}),
        ),
        "exactly one of claimName and hostPath",
    );
    refuses(
        PART,
        env(json!({"volumes": [{"name": "s", "mountPath": "scratch", "claimName": "c"}]})),
        "mountPath must be an absolute path",
    );
    refuses(
        PART,
        env(json!({"volumes": [{"name": "s", "mountPath": "/dev/shm", "claimName": "c"}]})),
        "mountPath must be an absolute path other than / and /dev/shm",
    );
    refuses(
        PART,
        env(json!({"volumes": [{"name": "muster-shm", "mountPath": "/x", "claimName": "c"}]})),
        "not starting with muster-",
    );
    refuses(
        PART,
        env(json!({"volumes": [{"name": "s", "mountPath": "/s", "hostPath": "relative"}]})),
        "hostPath must be an absolute directory",
    );
    refuses(
        PART,
        env(json!({"resources": {"nvidia.com/gpu": 1}})),
        "extended resources such as rdma/ib",
    );
    refuses(
        PART,
        env(json!({"resources": {"memory": "1Gi"}})),
        "extended resources such as rdma/ib",
    );
    refuses(
        PART,
        env(json!({"capabilities": ["CAP_IPC_LOCK", "ipc_lock"]})),
        "Linux capability names",
    );
    refuses(
        PART,
        env(json!({"serviceAccountName": "Trainer"})),
        "ServiceAccount name",
    );
}

#[test]
fn gpunode_must_be_named_after_its_node() {
    let ok = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "GpuNode",
                    "metadata": {"name": "gpu001"}, "spec": {"nodeName": "gpu001"}});
    accepts(GN, ok);
    let bad = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "GpuNode",
                     "metadata": {"name": "gpu001"}, "spec": {"nodeName": "gpu002"}});
    refuses(GN, bad, "must be named after its Node");
}

/// The typed client-side check kube generates (`#[kube(cel)]`) agrees with the YAML.
#[test]
fn typed_validate_cel_agrees() {
    use muster_crds::v1alpha1::{BatchJob, BatchJobSpec};
    let mut job = BatchJob::new(
        "x",
        BatchJobSpec {
            mem: Some("1G".into()),
            script: Some("hostname".into()),
            ..Default::default()
        },
    );
    job.validate_cel().expect("valid");
    job.spec.mem_per_cpu = Some("1G".into());
    let err = job.validate_cel().unwrap_err();
    assert!(err.iter().any(|e| e.message.contains("mutually exclusive")));
}

/// Every rule compiles, uses only CRD-scope variables, and stays inside the API server's cost
/// budget (strings carry maxLength, lists maxItems), so a real API server accepts the CRDs.
#[test]
fn every_rule_compiles_in_scope_and_within_budget() {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(rules)) = m.get("x-kubernetes-validations") {
                    for r in rules {
                        out.push(r["rule"].as_str().unwrap().to_string());
                    }
                }
                m.values().for_each(|c| walk(c, out));
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    let mut total = 0;
    for file in [BJ, PART, GN] {
        let s = schema(file);
        let compiled = compile_schema(&s);
        assert!(
            !compiled.has_errors(),
            "{file}: {:?}",
            compiled.compilation_errors()
        );
        let mut rules = vec![];
        walk(&s, &mut rules);
        total += rules.len();
        for rule in rules {
            // The analyser does not know comprehension variables (`self.all(k, ...)`): a
            // WrongScope warning for a variable the rule itself binds is not a finding.
            let warnings: Vec<_> = analyze_rule(&rule, &compiled, ScopeContext::CrdValidation)
                .into_iter()
                .filter(|w| {
                    !(w.kind == WarningKind::WrongScope
                        && w.message.split('\'').nth(1).is_some_and(|var| {
                            rule.contains(&format!("({var}, "))
                                || rule.contains(&format!("({var},"))
                        }))
                })
                .collect();
            assert!(warnings.is_empty(), "{file}: rule {rule}: {warnings:?}");
        }
    }
    assert!(
        total >= 25,
        "expected every Slurm syntax to carry a rule, found {total}"
    );
}

/// What the API server admits, the operator must understand: every value the CEL rules accept
/// in these cases parses with the Slurm library, and every value they refuse is refused there
/// too (the library is the full grammar; CEL is its first line).
#[test]
fn cel_rules_and_slurm_parsers_agree() {
    use muster_crds::slurm::*;
    fn parse(field: &str, v: &Value) -> Result<(), SyntaxError> {
        let s = match v {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            other => panic!("unexpected {other}"),
        };
        match field {
            "time" => TimeLimit::parse(&s).map(drop),
            "nodes" => NodeRange::parse(&s).map(drop),
            "mem" => MemSize::parse(&s).map(drop),
            // Slurm's count syntax; 0 asks for no GPUs (the operator's translation).
            "gpusPerNode" => GpuCount::parse(&s).map(drop),
            "gres" => parse_gres(&s).and_then(|g| gpus_from_gres(&g)).map(drop),
            "constraint" => Constraint::parse(&s).map(drop),
            "array" => ArraySpec::parse(&s).map(drop),
            "dependency" => DependencySpec::parse(&s).map(drop),
            "switches" => Switches::parse(&s).map(drop),
            "gpuBind" => GpuBind::parse(&s).map(drop),
            "nodelist" | "exclude" if s.contains('/') => {
                Err(SyntaxError::new("hostlist", &s, "a file, not node names"))
            }
            // What the operator's translation takes: a hostlist of Node names.
            "nodelist" | "exclude" => hostlist::expand(&s).and_then(|names| {
                match names.iter().find(|n| {
                    !n.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                    })
                }) {
                    Some(n) => Err(SyntaxError::new("hostlist", n, "not a Node name")),
                    None => Ok(()),
                }
            }),
            _ => Ok(()),
        }
    }
    for (field, good, bad, _) in field_cases() {
        if matches!(field, "partition" | "gpuType") {
            continue; // names, not Slurm syntax
        }
        for v in &good {
            if let Err(e) = parse(field, v) {
                panic!("{field}: CEL admits {v} but the parser refuses it: {e}");
            }
        }
        for v in &bad {
            // Negative integers never reach the parser (the schema's int form); skip them.
            if v.as_i64().is_some_and(|i| i < 0) {
                continue;
            }
            assert!(
                parse(field, v).is_err(),
                "{field}: CEL refuses {v} but the parser accepts it"
            );
        }
    }
}

//! The values schema (bad values refused naming the key, kept in step with the CRD and the
//! operator's scheduler keys), templates' own refusals, and the chart's CRDs.

use super::*;

#[test]
fn values_schema_refuses_bad_values_naming_the_key() {
    let bad = [
        (
            json!({"nodeAgent": {"policy": "maim"}}),
            "/nodeAgent/policy",
        ),
        (json!({"operator": {"replicas": 0}}), "/operator/replicas"),
        (json!({"operatr": {}}), "operatr"),
        (
            json!({"operator": {"cycleInterval": "soon"}}),
            "/operator/cycleInterval",
        ),
        (
            json!({"operator": {"logFormat": "xml"}}),
            "/operator/logFormat",
        ),
        (
            json!({"operator": {"image": {"pullPolicy": "Sometimes"}}}),
            "/operator/image/pullPolicy",
        ),
        (
            json!({"operator": {"image": {"digest": "latest"}}}),
            "/operator/image/digest",
        ),
        (
            json!({"nodeAgent": {"quietPeriod": "5 min"}}),
            "/nodeAgent/quietPeriod",
        ),
        (
            json!({"nodeAgent": {"criticalXids": "48,x"}}),
            "/nodeAgent/criticalXids",
        ),
        (
            json!({"nodeAgent": {"fixture": {"name": "dgx-a100"}}}),
            "/nodeAgent/fixture/name",
        ),
        (
            json!({"nodeAgent": {"runtimeClassName": "NVIDIA"}}),
            "/nodeAgent/runtimeClassName",
        ),
        (
            json!({"partitions": {"gpu": {"state": "Sideways"}}}),
            "/partitions/gpu/state",
        ),
        (
            json!({"partitions": {"gpu": {"priorityTier": -1}}}),
            "/partitions/gpu/priorityTier",
        ),
        (json!({"partitions": {"GPU_A": {}}}), "GPU_A"),
        (
            json!({"admissionPolicies": {"gpuBinding": {"validationActions": ["Deny", "Warn"]}}}),
            "/admissionPolicies/gpuBinding/validationActions",
        ),
        (
            json!({"admissionPolicies": {"gpuBinding": {"validationActions": ["Block"]}}}),
            "/admissionPolicies/gpuBinding/validationActions",
        ),
        (
            json!({"admissionPolicies": {"gpuBinding": {"exemptNamespaces": ["Kube System"]}}}),
            "/admissionPolicies/gpuBinding/exemptNamespaces",
        ),
        (
            json!({"scheduler": {"maxReservation": 4}}),
            "maxReservation",
        ),
        (
            json!({"scheduler": {"backfill": "no"}}),
            "/scheduler/backfill",
        ),
        (
            json!({"scheduler": {"maxReservations": -1}}),
            "/scheduler/maxReservations",
        ),
        (
            json!({"scheduler": {"shares": {"team-a": 0}}}),
            "/scheduler/shares/team-a",
        ),
    ];
    // One Helm process for all of it: validate, and render (helm install/template refuse
    // bad values too).
    let mut reqs = Vec::new();
    for (values, _) in &bad {
        reqs.push(json!({"op": "schema", "values": values}));
        reqs.push(render_request(values.clone(), "muster", NAMESPACE));
    }
    for (_, values) in scenarios() {
        reqs.push(json!({"op": "schema", "values": values}));
    }
    let Some(answers) = helm_many(reqs) else {
        return;
    };
    for (i, (values, key)) in bad.iter().enumerate() {
        let schema = &answers[2 * i];
        assert_eq!(schema["ok"], false, "{values} was accepted");
        let msg = schema["error"].as_str().unwrap();
        assert!(
            msg.contains(key),
            "{values}: message does not name {key}: {msg}"
        );
        let err = rendered(&answers[2 * i + 1]).expect_err(&format!("{values} rendered"));
        assert!(err.contains(key), "{values}: {err}");
    }
    for (n, (what, _)) in scenarios().iter().enumerate() {
        let answer = &answers[2 * bad.len() + n];
        assert_eq!(answer["ok"], true, "{what}: {answer}");
    }
}

#[test]
fn templates_refuse_incoherent_values_with_a_clear_message() {
    let cases = [
        (
            json!({"operator": {"leaderElection": {"enabled": false}}}),
            "two operators without leader election",
        ),
        (
            json!({"nodeAgent": {"policy": "kill", "fixture": {"name": "dgx-h100"}}}),
            "nodeAgent.policy=kill with nodeAgent.fixture",
        ),
    ];
    for (values, msg) in cases {
        let Some(r) = render_as(values.clone(), "muster", NAMESPACE) else {
            return;
        };
        let err = r.expect_err(&format!("{values} rendered"));
        assert!(err.contains(msg), "{values}: {err}");
    }
}

#[test]
fn chart_crds_are_crds_yaml() {
    // Byte for byte: regenerate crds/yaml with crdgen, then copy to charts/muster/crds/.
    let ours = chart_dir().join("crds");
    let theirs = root().join("crds").join("yaml");
    let names = |d: &std::path::Path| -> BTreeSet<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    assert_eq!(
        names(&ours),
        names(&theirs),
        "charts/muster/crds/ and crds/yaml/ list different CRDs"
    );
    for name in names(&theirs) {
        assert!(
            std::fs::read(ours.join(&name)).unwrap() == std::fs::read(theirs.join(&name)).unwrap(),
            "charts/muster/crds/{name} drifted from crds/yaml/{name}: cp crds/yaml/*.yaml charts/muster/crds/"
        );
    }
    // Helm sees all three as CRDs of the chart (installed before the templates).
    let Some(answer) = helm(json!({"op": "chart"})) else {
        return;
    };
    let crds = answer["crds"].as_array().unwrap();
    let kinds: BTreeSet<String> = crds
        .iter()
        .map(|c| {
            let obj = Object {
                template: c["filename"].as_str().unwrap().to_string(),
                value: serde_yaml::from_str(c["data"].as_str().unwrap()).unwrap(),
            };
            parse_as_kind(&obj).unwrap();
            obj.value["spec"]["names"]["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        ["BatchJob", "GpuNode", "Partition"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

fn values_schema() -> Value {
    serde_json::from_str(&std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap())
        .unwrap()
}

fn partition_spec_schema() -> Value {
    crd_schema("partitions.muster.dev.yaml")["properties"]["spec"].clone()
}

#[test]
fn values_schema_checks_partitions_with_the_crd_schema() {
    assert!(
        values_schema()["definitions"]["partitionSpec"] == partition_spec_schema(),
        "values.schema.json definitions.partitionSpec differs from the Partition CRD's spec schema: \
         run `cargo test -p muster-e2e --test chart -- --ignored bless_values_schema`"
    );
}

/// The chart refuses the scheduler keys and values the operator refuses: its schema is the
/// operator's own (`scheduler_config::json_schema`).
#[test]
fn values_schema_checks_scheduler_with_the_operators_keys() {
    use muster_operator::controller::scheduler_config;
    assert!(
        values_schema()["definitions"]["schedulerConfig"] == scheduler_config::json_schema(),
        "values.schema.json definitions.schedulerConfig differs from the operator's scheduler \
         keys: run `cargo test -p muster-e2e --test chart -- --ignored bless_values_schema`"
    );
    assert_eq!(
        values_schema()["properties"]["scheduler"]["$ref"],
        "#/definitions/schedulerConfig"
    );
}

/// Rewrites values.schema.json's copies of the Partition spec schema (from the CRD) and of
/// the scheduler configuration's (from the operator).
#[test]
#[ignore = "writes charts/muster/values.schema.json; run by hand after a CRD or scheduler-key change"]
fn bless_values_schema() {
    let mut schema = values_schema();
    schema["definitions"]["partitionSpec"] = partition_spec_schema();
    schema["definitions"]["schedulerConfig"] =
        muster_operator::controller::scheduler_config::json_schema();
    std::fs::write(
        chart_dir().join("values.schema.json"),
        serde_json::to_string_pretty(&schema).unwrap() + "\n",
    )
    .unwrap();
}

#[test]
fn rendered_partitions_pass_the_crd_schema_and_cel() {
    let Some(r) = render(superpod_values()) else {
        return;
    };
    let parts = r.all("Partition");
    let names: BTreeSet<&str> = parts.iter().map(|o| o.name()).collect();
    assert_eq!(names, BTreeSet::from(["scavenger", "train"]));
    for p in &parts {
        assert_eq!(crd_errors(&p.value), Vec::<String>::new(), "{}", p.name());
        let typed: muster_crds::v1alpha1::Partition = typed(&p.value).unwrap();
        assert_eq!(
            typed.spec.topology,
            [
                "muster.dev/spine",
                "muster.dev/leaf",
                "kubernetes.io/hostname"
            ]
        );
    }
    // A topology the API server would refuse fails the same check here.
    let Some(r) = render(json!({"partitions": {"gpu": {"topology": ["muster.dev/leaf"]}}})) else {
        return;
    };
    let errs = crd_errors(r.get("Partition", "gpu"));
    assert!(
        errs.iter()
            .any(|e| e.contains("end with kubernetes.io/hostname")),
        "{errs:?}"
    );
}

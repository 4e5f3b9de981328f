//! The committed CRD YAML is what `crdgen` writes, and is a well-formed
//! `apiextensions.k8s.io/v1` CustomResourceDefinition with what kubectl users rely on.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::path::PathBuf;

fn yaml_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("yaml")
}

#[test]
fn committed_yaml_matches_the_rust_types() {
    for crd in muster_crds::crds() {
        let name = muster_crds::crd_file_name(&crd);
        let committed = std::fs::read_to_string(yaml_dir().join(&name)).unwrap_or_else(|e| {
            panic!("crds/yaml/{name} missing ({e}): run `cargo run -p muster-crds --bin crdgen`")
        });
        let generated = muster_crds::crd_yaml(&crd).unwrap();
        assert!(
            committed == generated,
            "crds/yaml/{name} has drifted from the Rust types: run `cargo run -p muster-crds --bin crdgen` and commit"
        );
    }
    let files = std::fs::read_dir(yaml_dir()).unwrap().count();
    assert_eq!(files, muster_crds::crds().len(), "stray files in crds/yaml");
}

fn load(name: &str) -> CustomResourceDefinition {
    let text = std::fs::read_to_string(yaml_dir().join(name)).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name} is not a CRD: {e}"))
}

#[test]
fn every_crd_parses_with_status_subresource_printer_columns_and_cel() {
    for (file, kind, scope, short) in [
        ("partitions.muster.dev.yaml", "Partition", "Cluster", "part"),
        ("batchjobs.muster.dev.yaml", "BatchJob", "Namespaced", "bj"),
        ("gpunodes.muster.dev.yaml", "GpuNode", "Cluster", "gn"),
    ] {
        let crd = load(file);
        assert_eq!(crd.spec.group, "muster.dev");
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(crd.spec.scope, scope);
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .unwrap()
                .contains(&short.to_string())
        );
        assert_eq!(crd.spec.versions.len(), 1);
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(v.served && v.storage);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{kind}: no status subresource"
        );
        let cols = v
            .additional_printer_columns
            .as_ref()
            .expect("printer columns");
        assert!(cols.len() >= 5, "{kind}: too few printer columns");
        let schema = serde_json::to_string(v.schema.as_ref().unwrap()).unwrap();
        if kind != "GpuNode" {
            assert!(
                schema.contains("x-kubernetes-validations"),
                "{kind}: no CEL rules"
            );
        }
    }
}

#[test]
fn batchjob_columns_show_what_squeue_shows() {
    let crd = load("batchjobs.muster.dev.yaml");
    let cols: Vec<String> = crd.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    for want in ["JobID", "State", "Reason", "Nodes", "GPUs", "NodeList"] {
        assert!(
            cols.contains(&want.to_string()),
            "missing column {want}: {cols:?}"
        );
    }
}

//! Every example cluster under `examples/clusters/` parses and builds, and the built-in
//! defaults equal their example files.

use std::path::Path;

use muster_operator::core::ClusterSpec;

fn examples() -> Vec<(String, ClusterSpec)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/clusters");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).expect("examples/clusters exists") {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "yaml") {
            let text = std::fs::read_to_string(&p).unwrap();
            let spec =
                ClusterSpec::from_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            out.push((p.file_name().unwrap().to_string_lossy().into_owned(), spec));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_example_cluster_parses_and_builds() {
    let ex = examples();
    let names: Vec<&str> = ex.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["mixed.yaml", "sandbox.yaml", "superpod.yaml"]);
    for (file, spec) in &ex {
        let nodes = spec.build().unwrap();
        assert_eq!(nodes.len() as u64, spec.node_count(), "{file}");
        assert!(!nodes.is_empty(), "{file}");
        for n in &nodes {
            assert_eq!(n.labels["kubernetes.io/hostname"], n.name, "{file}");
            for key in spec.topology() {
                assert!(
                    n.labels.contains_key(&key),
                    "{file}: {} lacks {key}",
                    n.name
                );
            }
        }
    }
}

#[test]
fn superpod_example_is_the_builtin_default() {
    let ex = examples();
    let (_, file) = ex.iter().find(|(n, _)| n == "superpod.yaml").unwrap();
    assert_eq!(
        file.build().unwrap(),
        ClusterSpec::superpod().build().unwrap()
    );
    let (_, sandbox) = ex.iter().find(|(n, _)| n == "sandbox.yaml").unwrap();
    assert_eq!(
        sandbox.build().unwrap(),
        ClusterSpec::sandbox().build().unwrap()
    );
}

#[test]
fn mixed_example_has_three_kinds_of_node() {
    let ex = examples();
    let (_, mixed) = ex.iter().find(|(n, _)| n == "mixed.yaml").unwrap();
    let nodes = mixed.build().unwrap();
    assert_eq!(nodes.len(), 32);
    let model = |i: usize| nodes[i].gpus[0].model.as_str();
    assert_eq!(model(0), "NVIDIA H100 80GB HBM3");
    assert_eq!(model(16), "NVIDIA A100-SXM4-80GB");
    assert_eq!(model(24), "NVIDIA L40S");
    assert_eq!(nodes[24].gpus.len(), 4);
    assert_eq!(nodes[24].topology[0][1], "PIX");
    assert_eq!(nodes[24].taints.len(), 1);
    assert_eq!(nodes[16].topology[0][1], "NV12");
    assert_eq!(nodes[31].labels["muster.dev/spine"], "spine2");
    assert_eq!(nodes[31].labels["muster.dev/leaf"], "leaf4");
}

//! Conformance: every BatchJob spec field and every Slurm request shape, each run three ways —
//! through the real operator on the test control plane (the allocation and the pods it
//! writes), through `muster simulate` (a native trace) and through `sbatch --test-only` — and
//! the three must agree with each other and with the outcome the row names (nodes, GPUs per
//! rank, pod environment, pending reason and message, or the refusal).
//!
//! The list of fields comes from the CRD's schema: a field added to the spec without a row
//! fails `every_spec_field_has_a_row`, so no field can again be accepted and ignored.
//!
//! `MUSTER_CONFORMANCE_ROW=WORDS` runs only the rows whose name contains WORDS. With
//! `MUSTER_E2E_KUBECONFIG` set the operator arm runs on that cluster (the Muster chart
//! installed, at least four GPU nodes in two leaves; see e2e/README.md) — the simulator arm
//! always models the suite's cluster.

mod conformance;

use std::collections::BTreeSet;

use conformance::{rows, run_row};
use kube::CustomResourceExt;
use muster_crds::v1alpha1::BatchJob;

/// The spec fields the CRD declares.
fn spec_fields() -> BTreeSet<String> {
    let crd = serde_json::to_value(BatchJob::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        .as_object()
        .expect("spec properties")
        .keys()
        .cloned()
        .collect()
}

#[test]
fn every_spec_field_has_a_row() {
    let fields = spec_fields();
    assert!(fields.len() >= 30, "{fields:?}");
    let covered: BTreeSet<String> = rows()
        .iter()
        .flat_map(|r| r.covers.iter().map(|c| c.to_string()))
        .collect();
    let missing: Vec<&String> = fields.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "spec fields without a conformance row: {missing:?} (add rows to cli/tests/conformance/rows/)"
    );
    let unknown: Vec<&String> = covered.difference(&fields).collect();
    assert!(
        unknown.is_empty(),
        "rows name fields the spec lacks: {unknown:?}"
    );
    let mut names = BTreeSet::new();
    for r in rows() {
        assert!(names.insert(r.name), "two rows named {:?}", r.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_agrees_three_ways() {
    let only = std::env::var("MUSTER_CONFORMANCE_ROW").ok();
    let mut failed = Vec::new();
    let mut ran = 0;
    for row in rows() {
        if only.as_deref().is_some_and(|o| !row.name.contains(o)) {
            continue;
        }
        ran += 1;
        let t = std::time::Instant::now();
        let r = run_row(&row).await;
        eprintln!(
            "{} {} ({:.1}s)",
            if r.is_ok() { "ok  " } else { "FAIL" },
            row.name,
            t.elapsed().as_secs_f64()
        );
        if let Err(e) = r {
            failed.push(format!("{}: {e}", row.name));
        }
    }
    assert!(ran > 0, "no row ran");
    assert!(
        failed.is_empty(),
        "{} row(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

//! Rows refused as written.

use super::*;

/// Rows: refusals.
pub(super) fn rows() -> Vec<Row> {
    vec![
        // ---- refusals ----
        row(
            "nodelist and exclude naming one node",
            &["nodelist", "exclude"],
            job(
                &["-w", "gpu001", "-x", "gpu001", "-n", "1"],
                json!({"nodelist": "gpu001", "exclude": "gpu001", "ntasks": 1}),
            ),
            Expect::Refused {
                field: "exclude",
                words: "both nodelist and exclude",
            },
        ),
    ]
}

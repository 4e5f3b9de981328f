//! `muster.dev/v1alpha1`.

// kube's `printcolumn(..)` repeats `type_ = ..` by design; clippy reads that as a duplicate.
#![allow(clippy::duplicated_attributes)]

mod batchjob;
mod gpunode;
mod partition;
pub mod rules;

pub use batchjob::*;
pub use gpunode::*;
pub use partition::*;

/// Schema for an embedded object whose own schema the API server already knows (the pod
/// template): kept open so the CRD stays small; the API server validates the pods the
/// operator creates from it.
pub(crate) fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

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

/// Schema of a BatchJob's pod template: open like [`preserve_unknown_object`], with just the
/// path `spec.containers` declared so that a CEL rule can see whether there is a container
/// (Kubernetes hides preserved unknown fields from CEL).
pub(crate) fn pod_template(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "containers": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true
                        }
                    }
                }
            }
        }
    })
}

//! Pure translation between the `muster.dev` objects (and core/v1 Nodes) and the scheduling
//! core's types. No client calls: everything here is a function of its arguments, so it is
//! unit-tested without a server.
//!
//! - [`job_request`]: **the** translation of a BatchJob spec into the core's request — the
//!   operator, the simulator's native traces and `sbatch --test-only` all call it; every Slurm
//!   field is parsed once with [`muster_crds::slurm`] and errors name the field and what is
//!   allowed.
//! - [`partitions`]: the Partition objects as core partitions, with the default resolved.
//! - [`node`]: a Node and its GpuNode as a core node; [`node_dra`] with the GPUs the NVIDIA
//!   DRA driver publishes for it (see [`dra::inventory`](super::dra::inventory)).
//! - [`running_job`], [`pending_job`]: a BatchJob's status/spec as core jobs.

mod nodes;
mod partitioning;
mod request;
mod running;

pub use nodes::{
    AgentGpus, NodeTable, agent_gpus, node, node_dra, node_dra_with, node_with, node_without_gpus,
};
pub use partitioning::{
    PartitionTable, in_partition, node_resources, partition, partitions, selector, toleration,
};
pub use request::{ParsedJob, job_request, job_user};
pub use running::{
    core_tasks, effective_time_limit, format_limit, pending_job, running_job, running_job_with,
    secs, status_limit_secs, time,
};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use muster_crds::slurm::SyntaxError;

/// A spec field that does not parse or contradicts another.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field's path, e.g. `spec.gpusPerTask`.
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl FieldError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }

    fn syntax(field: &str, e: SyntaxError) -> Self {
        FieldError::new(field, e.to_string())
    }
}

/// Every error of a spec, joined for a status message.
pub fn join_errors(errs: &[FieldError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn parse_ios<T>(
    field: &str,
    v: &Option<IntOrString>,
    from_int: impl Fn(i64) -> Result<T, SyntaxError>,
    parse: impl Fn(&str) -> Result<T, SyntaxError>,
    errs: &mut Vec<FieldError>,
) -> Option<T> {
    let r = match v.as_ref()? {
        IntOrString::Int(i) => from_int(i64::from(*i)),
        IntOrString::String(s) => parse(s),
    };
    r.map_err(|e| errs.push(FieldError::syntax(field, e))).ok()
}

fn parse_str<T>(
    field: &str,
    v: &Option<String>,
    parse: impl Fn(&str) -> Result<T, SyntaxError>,
    errs: &mut Vec<FieldError>,
) -> Option<T> {
    parse(v.as_deref()?)
        .map_err(|e| errs.push(FieldError::syntax(field, e)))
        .ok()
}

/// Test fixtures shared by the controller's unit tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use k8s_openapi::api::core::v1::Node as KubeNode;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use muster_crds::v1alpha1::{
        GpuHealth, GpuHealthState, GpuInfo, GpuNode, GpuNodeSpec, GpuNodeStatus, Partition,
        PartitionSpec,
    };

    pub(crate) fn kube_node(name: &str, ready: bool) -> KubeNode {
        let mut n = KubeNode::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some([("muster.dev/leaf".to_string(), "leaf1".to_string())].into());
        n.spec = Some(NodeSpec {
            taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                key: "nvidia.com/gpu".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n.status = Some(NodeStatus {
            allocatable: Some(
                [
                    ("cpu".to_string(), Quantity("223500m".into())),
                    ("memory".to_string(), Quantity("2Ti".into())),
                ]
                .into(),
            ),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n
    }

    pub(crate) fn gpu_node(name: &str, n: u32, unhealthy: &[u32]) -> GpuNode {
        let mut g = GpuNode::new(
            name,
            GpuNodeSpec {
                node_name: name.into(),
            },
        );
        g.status = Some(GpuNodeStatus {
            gpu_count: n,
            gpus: (0..n)
                .map(|i| GpuInfo {
                    index: i,
                    uuid: format!("GPU-{name}-{i}"),
                    model: "NVIDIA H100 80GB HBM3".into(),
                    memory_mib: 81559,
                    numa_node: Some((i / 4) as i32),
                    health: GpuHealth {
                        state: if unhealthy.contains(&i) {
                            GpuHealthState::Unhealthy
                        } else {
                            GpuHealthState::Healthy
                        },
                        ..Default::default()
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        g
    }

    pub(super) fn s(v: &str) -> Option<IntOrString> {
        Some(IntOrString::String(v.into()))
    }
    pub(super) fn i(v: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(v))
    }

    pub(super) fn part(name: &str, spec: PartitionSpec) -> Partition {
        Partition::new(name, spec)
    }
}

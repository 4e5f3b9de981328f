//! The kube-runtime side of the operator: reflectors feed the scheduling [`core`](crate::core),
//! the leader carries out its decisions.
//!
//! | module | what |
//! |---|---|
//! | [`translate`] | CRD objects ⇄ core types (pure) |
//! | [`admission`] | the admission webhooks' answers and configurations (pure) |
//! | [`pods`] | task pods and the headless Service (pure) |
//! | [`jobenv`] | the partition's job environment merged into a pod (pure) |
//! | [`discovery`] | what the API server serves: DRA, Kubernetes' gang API |
//! | [`dra`] | GPU binding by DRA: a pod's ResourceClaim, inventory from ResourceSlices (pure) |
//! | [`gang`] | Kubernetes' own gang (Workload/PodGroup) of an admission (pure) |
//! | [`status`] | status transitions and kstatus conditions (pure) |
//! | [`deps`](crate::core::deps) | `--dependency` evaluation (pure; shared with the core) |
//! | [`plan`] | one cycle: objects in, writes out (pure) |
//! | `cluster_cache` | the core's trees, kept between cycles |
//! | [`jobobs`] | BatchJobs as cached: task records compact (pure) |
//! | [`nodeobs`] | Nodes and GpuNodes as cached, and the node table built from them |
//! | [`exec`] | carrying a plan out, in crash-safe order, with fault injection |
//! | [`events`] | core/v1 Events with `eventTime`, `lastTimestamp` and series |
//! | [`kube_api`] | the writes over kube |
//! | [`runner`] | reflectors, the leader's loop, own-write overlay |
//! | [`leader`] | Lease-based leader election |
//! | [`jobids`] | the job id counter (ConfigMap, blocks) |
//! | [`usage`] | fair-share usage persistence |
//! | [`scheduler_config`] | the scheduler's configuration file (`--scheduler-config`), shared with the simulator |
//! | [`validate`] | what submission refuses: shared by sbatch, `--test-only` and admission (pure) |
//! | [`metrics`], [`http`] | Prometheus metrics, `/metrics` `/healthz` `/readyz` |
//! | [`webhook`] | the admission webhooks over HTTPS, their certificate and `caBundle` |

pub mod admission;
mod cluster_cache;
mod compact;
pub mod discovery;
pub mod dra;
pub mod early;
pub mod events;
pub mod exec;
pub mod gang;
pub mod holders;
pub mod http;
pub mod jobenv;
pub mod jobids;
pub mod jobobs;
pub mod kube_api;
pub mod leader;
pub mod metrics;
pub mod nodeobs;
pub mod plan;
pub mod pods;
pub mod quantity;
pub mod runner;
pub mod scheduler_config;
pub mod status;
pub mod taskpod;
pub mod translate;
pub mod usage;
pub mod validate;
pub mod webhook;

pub use runner::{Clock, Handle, Settings, start};

#[cfg(test)]
mod fake;
#[cfg(test)]
mod plan_dra_tests;
#[cfg(test)]
mod plan_tests;

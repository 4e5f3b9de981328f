//! The chart's two ValidatingAdmissionPolicies, rendered by Helm and evaluated on admission
//! requests a real API server would send — allowed and denied, with their messages.
//!
//! Two CEL engines:
//! - `kube_cel::VapEvaluator` (kube-cel 0.8), for the GPU-binding policy. It binds `object`,
//!   `oldObject`, `namespaceObject` and `request` with `userInfo.{username,uid,groups}`.
//! - [`FullEngine`]: the same CEL library (`kube_cel::cel` with every Kubernetes extension) with
//!   the whole admission request bound, for the node-agent policy, which needs what
//!   VapEvaluator 0.8 does not provide: `request.userInfo.extra` (the token's node-name claim),
//!   `request.subResource` and the policy's `variables`. VapEvaluator also escapes every map key
//!   (`muster.dev/gpu.count` becomes `muster__dot__dev__slash__gpu__dot__count`), which
//!   Kubernetes does only for schema property names, never for map keys such as labels; the
//!   full engine keeps keys as they are. Both engines must agree on the GPU-binding cases.
//!
//! What neither checks: Kubernetes type-checks policies when they are created (cel-go with
//! the OpenAPI types); the CEL engine here is dynamically typed. The expressions avoid
//! constructs whose typing is in doubt (no ternaries mixing object and map types, no
//! reserved words such as `namespace` as field names).

#[path = "../chart_common/mod.rs"]
mod chart_common;

use std::collections::BTreeMap;

use chart_common::*;
use kube_cel::cel::{Context, Program, Value as Cel};
use kube_cel::{AdmissionRequest, GroupVersionKind, GroupVersionResource, KubeCelExt};
use kube_cel::{VapEvaluator, VapExpression};
use serde_json::{Value, json};

const OPERATOR: &str = "system:serviceaccount:muster-system:muster-operator";
const AGENT: &str = "system:serviceaccount:muster-system:muster-node-agent";
const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";

mod engine;
mod gpu_binding;
mod node_agent;

use engine::*;

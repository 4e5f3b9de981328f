//! The API operations with kube-apiserver's semantics, independent of HTTP: create, update
//! (with the GuaranteedUpdate retry loop patches and applies use), delete with finalizers and
//! grace periods, pod binding. The HTTP layer and the garbage collector both call these.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::auth::{Tokens, UserInfo};
use super::builtin;
use super::error::ApiError;
use super::faults::FaultState;
use super::gc::GcWork;
use super::resources::{Registry, ResourceType};
use super::schema::obj_mut;
use super::store::{CommitError, Key, Store, Stored, Write};

mod admit;
mod delete;
mod write;

/// State shared by the HTTP handlers, the watchers and the garbage collector.
pub struct Shared {
    /// Served types.
    pub registry: Registry,
    /// Objects.
    pub store: Store,
    /// Fault injection.
    pub faults: Arc<FaultState>,
    /// Garbage collector queue.
    pub gc: mpsc::UnboundedSender<GcWork>,
    /// Flips to true on shutdown.
    pub shutdown: watch::Receiver<bool>,
    /// Pods on a node get a grace period on deletion.
    pub graceful_pods: AtomicBool,
    /// Interval of watch bookmarks.
    pub bookmark_interval: Duration,
    /// Next service cluster IP.
    pub next_ip: AtomicU32,
    /// `host:port` the server listens on.
    pub addr: String,
    /// Pod logs set by tests or a kubelet.
    pub logs: super::logs::PodLogs,
    /// Bearer tokens and their users.
    pub tokens: Tokens,
    /// Optional API groups served.
    pub features: super::resources::Features,
}

/// `fieldValidation`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop them with a warning (the server default).
    #[default]
    Warn,
    /// Refuse them.
    Strict,
}

/// Options of a write.
#[derive(Clone, Debug, Default)]
pub struct WriteOpts {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `fieldValidation`.
    pub validation: FieldValidation,
    /// `force` (apply).
    pub force: bool,
    /// PUT: the body must carry a resourceVersion unless the kind allows unconditional updates.
    pub is_put: bool,
    /// Server-side apply: managedFields come from the apply, not from the old object.
    pub apply: bool,
    /// The requesting user, for admission webhooks; `None` for the double's own writes
    /// (garbage collection, setup), which no webhook sees.
    pub user: Option<UserInfo>,
}

/// A response object: stored bytes, or a value never stored (dry run).
#[derive(Clone, Debug)]
pub enum Body {
    /// Committed.
    Stored(Stored),
    /// Not stored.
    Value(Value),
}

impl Body {
    /// The object.
    pub fn value(&self) -> Value {
        match self {
            Body::Stored(s) => s.value(),
            Body::Value(v) => v.clone(),
        }
    }
}

/// Result of a write.
pub struct Written {
    /// The object.
    pub body: Body,
    /// Whether the write created it.
    pub created: bool,
    /// `Warning` headers.
    pub warnings: Vec<String>,
}

/// Which part of the object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The main resource.
    Main,
    /// The status subresource.
    Status,
}

/// What a mutation wants.
pub enum Mutation {
    /// The object does not exist and should be created as this.
    Create(Value),
    /// The object becomes this.
    Update(Value),
}

/// Current time as an RFC 3339 `metav1.Time`.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn time_plus(secs: i64) -> String {
    let t = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(secs);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn key_for(rt: &ResourceType, ns: Option<&str>, name: &str) -> Key {
    Key::new(if rt.namespaced { ns.unwrap_or("") } else { "" }, name)
}

fn meta(v: &Value) -> &Value {
    &v["metadata"]
}

fn str_at<'a>(v: &'a Value, k: &str) -> &'a str {
    v["metadata"][k].as_str().unwrap_or("")
}

fn finalizers(v: &Value) -> Vec<String> {
    meta(v)["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl Shared {
    /// The object or 404.
    pub fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Result<Stored, ApiError> {
        self.store
            .collection(&rt.storage)
            .get(&key_for(rt, ns, name))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// Bind a pod to a node (`pods/binding`).
    pub fn bind(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        node: &str,
    ) -> Result<(), ApiError> {
        let coll = self.store.collection(&rt.storage);
        let key = key_for(rt, ns, name);
        let fields = builtin::fields_fn(&rt.storage);
        loop {
            let cur = coll
                .get(&key)
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            let mut pod = cur.value();
            if meta(&pod)["deletionTimestamp"].is_string() {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    "pod is being deleted, cannot be assigned to a host",
                ));
            }
            if let Some(n) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!("pod {name} is already assigned to node \"{n}\""),
                ));
            }
            pod["spec"]["nodeName"] = json!(node);
            let conds = obj_mut(&mut pod, "status")
                .entry("conditions")
                .or_insert_with(|| json!([]));
            if let Some(c) = conds.as_array_mut() {
                c.retain(|c| c["type"] != "PodScheduled");
                c.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now()}));
            }
            match coll.commit(&self.store, Write::Update(&mut pod, cur.meta.rv), fields) {
                Ok(_) => return Ok(()),
                Err(CommitError::NotFound) => return Err(ApiError::not_found(rt, name)),
                Err(_) => continue,
            }
        }
    }
}

/// Finalizer of foreground deletion.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer the API server puts on CRDs.
pub const CRD_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// `DeleteOptions`.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    /// `gracePeriodSeconds`.
    pub grace: Option<i64>,
    /// `propagationPolicy`.
    pub propagation: Option<String>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_rv: Option<String>,
    /// `dryRun`.
    pub dry_run: bool,
    /// The requesting user, for admission webhooks (`None`: the double's own deletions).
    pub user: Option<UserInfo>,
}

/// Outcome of a delete.
pub enum Deleted {
    /// Removed.
    Gone(Body),
    /// Marked for deletion (finalizers or a grace period pending).
    Pending(Body),
}

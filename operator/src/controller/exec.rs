//! Carrying out a [`CyclePlan`]: the API writes, in the order that keeps every crash point
//! safe, behind a small [`ClusterApi`] trait (implemented over kube in
//! [`super::kube_api`], and in memory by the unit tests' fake cluster).
//!
//! Per job, strictly in order: add finalizer → write status (server-side apply, with the
//! resourceVersion precondition) → create the step credential Secret (jobs on more than one
//! node; a fresh random key, kept if it exists) → create the Service → create the gang group (Workload or
//! PodGroup, where served) → create the ResourceClaims (`dra` mode) → create pods → delete
//! pods → delete claims and groups → create array elements → patch elements → remove
//! finalizer → events. A failed finalizer or status write skips the job's remaining steps
//! (claims and pods exist only for a recorded allocation; they are deleted only once the
//! reason is recorded); a failed Secret or claim creation skips the pods (a pod never exists
//! before its credential and claim). Jobs run concurrently (bounded). New jobs' finalizers
//! may be written ahead, while the cycle plans ([`add_finalizers`], [`super::early`]).
//!
//! # Crash injection
//! [`Faults`] is consulted before every write: returning [`Fault::Crash`] stops the whole
//! cycle at that point, as if the process had been killed (no cleanup, no further write), and
//! [`Fault::Error`] fails just that write. The ≥100-iteration crash tests use it to kill the
//! operator after the N-th write of an admission.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use muster_crds::v1alpha1::{BatchJob, PartitionStatus};

use super::dra::ResourceClaim;
use super::gang::{GangApi, GangRef};
use super::jobobs::{JobObs, Versions};
use super::plan::{CyclePlan, Effect, JobEvent, JobPlan, PodObs, StatusWrite};

/// Why an API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 409: the object changed since it was read (or already exists).
    #[error("conflict: {0}")]
    Conflict(String),
    /// 404.
    #[error("not found: {0}")]
    NotFound(String),
    /// Any other answer from the server.
    #[error("API error {code}: {message}")]
    Status {
        /// HTTP status.
        code: u16,
        /// Server's message.
        message: String,
    },
    /// No answer (connection, timeout, decoding).
    #[error("transport: {0}")]
    Transport(String),
    /// Injected by [`Faults`].
    #[error("injected failure")]
    Injected,
}

impl ApiError {
    /// The `kind` label of `muster_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ApiError::Conflict(_) => "conflict",
            ApiError::NotFound(_) => "not_found",
            ApiError::Status { code, .. } if *code == 429 => "throttled",
            ApiError::Status { code, .. } if *code >= 500 => "server",
            ApiError::Status { .. } => "rejected",
            ApiError::Transport(_) => "transport",
            ApiError::Injected => "injected",
        }
    }
}

/// The writes the operator makes. Creations treat "already exists" as success and deletions
/// treat "not found" as success (both are retried across cycles).
pub trait ClusterApi: Send + Sync {
    /// Adds the allocation finalizer, if `resource_version` is still current; returns the
    /// updated object.
    fn add_finalizer<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        existing: &'a [String],
    ) -> BoxFuture<'a, Result<BatchJob, ApiError>>;
    /// Removes the allocation finalizer.
    fn remove_finalizer<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        existing: &'a [String],
    ) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Writes a BatchJob's whole status (server-side apply on the status subresource),
    /// failing with a conflict if `w.resource_version` is set and stale.
    fn apply_status<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        w: &'a StatusWrite,
    ) -> BoxFuture<'a, Result<BatchJob, ApiError>>;
    /// Creates a pod; `gang` names the group it belongs to (added to its spec as the served
    /// gang API spells it).
    fn create_pod<'a>(
        &'a self,
        pod: &'a Pod,
        gang: Option<&'a GangRef>,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Creates a ResourceClaim.
    fn create_claim<'a>(&'a self, claim: &'a ResourceClaim) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Deletes a ResourceClaim.
    fn delete_claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Creates a gang group (a Workload or PodGroup object, as JSON).
    fn create_group<'a>(
        &'a self,
        api: GangApi,
        group: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Deletes a gang group.
    fn delete_group<'a>(
        &'a self,
        ns: &'a str,
        api: GangApi,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Deletes a pod (its own grace period).
    fn delete_pod<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Sets (or, with `None`, removes) annotations of a pod (a merge patch; a pod that is
    /// gone is no error).
    fn annotate_pod<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        annotations: &'a BTreeMap<String, Option<String>>,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Creates a Secret (one that exists is kept as it is: its key is the job's).
    fn create_secret<'a>(&'a self, secret: &'a Secret) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Creates a Service.
    fn create_service<'a>(&'a self, svc: &'a Service) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Creates a BatchJob (an array element).
    fn create_batchjob<'a>(&'a self, job: &'a BatchJob) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Merge-patches a BatchJob's spec.
    fn patch_batchjob<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Writes a Partition's status.
    fn apply_partition_status<'a>(
        &'a self,
        name: &'a str,
        status: &'a PartitionStatus,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
    /// Publishes an Event about a BatchJob.
    fn publish_event<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        uid: &'a str,
        ev: &'a JobEvent,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
}

/// The write kinds counted in `muster_api_writes_total{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WriteKind {
    /// Finalizer added or removed.
    Finalizer,
    /// BatchJob status.
    Status,
    /// Pod created.
    PodCreate,
    /// Pod deleted.
    PodDelete,
    /// Pod annotated (signal requests).
    PodAnnotate,
    /// Service created.
    Service,
    /// Step credential Secret created.
    Secret,
    /// ResourceClaim created.
    ClaimCreate,
    /// ResourceClaim deleted.
    ClaimDelete,
    /// Gang group (Workload/PodGroup) created or deleted.
    Group,
    /// BatchJob created (array element).
    BatchJobCreate,
    /// BatchJob spec patched (array element cancel/hold).
    BatchJobPatch,
    /// Partition status.
    PartitionStatus,
    /// Event.
    Event,
    /// ConfigMap (job id counter, fair-share usage).
    ConfigMap,
    /// Lease (leader election).
    Lease,
}

impl WriteKind {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            WriteKind::Finalizer => "finalizer",
            WriteKind::Status => "status",
            WriteKind::PodCreate => "pod_create",
            WriteKind::PodDelete => "pod_delete",
            WriteKind::PodAnnotate => "pod_annotate",
            WriteKind::Service => "service",
            WriteKind::Secret => "secret",
            WriteKind::ClaimCreate => "claim_create",
            WriteKind::ClaimDelete => "claim_delete",
            WriteKind::Group => "gang_group",
            WriteKind::BatchJobCreate => "batchjob_create",
            WriteKind::BatchJobPatch => "batchjob_patch",
            WriteKind::PartitionStatus => "partition_status",
            WriteKind::Event => "event",
            WriteKind::ConfigMap => "configmap",
            WriteKind::Lease => "lease",
        }
    }
}

/// What to do at a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Carry on.
    None,
    /// Fail this write with [`ApiError::Injected`].
    Error,
    /// Die here: no more writes this cycle.
    Crash,
}

/// Fault injection, consulted before every write.
pub trait Faults: Send + Sync {
    /// The fault for the next write of `kind` for object `name`.
    fn at(&self, kind: WriteKind, name: &str) -> Fault;
}

/// No faults.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFaults;

impl Faults for NoFaults {
    fn at(&self, _: WriteKind, _: &str) -> Fault {
        Fault::None
    }
}

/// Crash after a given number of writes (counting every kind).
#[derive(Debug)]
pub struct CrashAfter {
    left: AtomicU64,
}

impl CrashAfter {
    /// Allows `n` writes, then crashes at the next.
    pub fn new(n: u64) -> Self {
        CrashAfter {
            left: AtomicU64::new(n),
        }
    }
}

impl Faults for CrashAfter {
    fn at(&self, _: WriteKind, _: &str) -> Fault {
        match self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        {
            Ok(_) => Fault::None,
            Err(_) => Fault::Crash,
        }
    }
}

/// A status write that succeeded: the object as the server returned it, as the job cache
/// keeps it (task records compact: a cycle that admits thousands of gangs holds every answer
/// until the overlay takes it).
#[derive(Clone, Debug)]
pub struct Written {
    /// The updated BatchJob (its new resourceVersion keeps the next cycle's view current).
    pub job: Arc<JobObs>,
    /// Metrics to record.
    pub effects: Vec<Effect>,
}

/// What a cycle's execution did.
#[derive(Clone, Debug, Default)]
pub struct ExecReport {
    /// Writes attempted, by kind.
    pub writes: BTreeMap<WriteKind, u64>,
    /// Failures, by `ApiError::metric_label`.
    pub errors: BTreeMap<&'static str, u64>,
    /// Successful status (and finalizer) writes.
    pub written: Vec<Written>,
    /// Pods created, as the planner will see them once the watch delivers them.
    pub created_pods: Vec<PodObs>,
    /// BatchJobs created (array elements): (namespace, name).
    pub created_jobs: Vec<(String, String)>,
    /// Pods deleted (namespace, name).
    pub deleted_pods: Vec<(String, String)>,
    /// ResourceClaims deleted (namespace, name).
    pub deleted_claims: Vec<(String, String)>,
    /// Partitions whose status was written.
    pub partitions_written: Vec<String>,
    /// Events to publish (namespace, name, uid, event): for jobs whose writes went through.
    /// Published apart from the cycle ([`publish_events`]) so they never slow admissions.
    pub events: Vec<(String, String, String, JobEvent)>,
    /// Whether an injected crash stopped the cycle.
    pub crashed: bool,
}

struct Ctx<'a> {
    api: &'a dyn ClusterApi,
    faults: &'a dyn Faults,
    /// Where written answers are shared with the job cache.
    versions: &'a Versions,
    dead: AtomicBool,
    report: std::sync::Mutex<ExecReport>,
    /// Pods being built or written, across jobs (see [`PODS_IN_FLIGHT_PER_JOB`] and
    /// [`POD_SLOTS_PER_JOB`]).
    pod_slots: tokio::sync::Semaphore,
}

/// Pods in flight (built, being written) per job slot of the writer's concurrency. Each is a
/// complete pod object, its request body and the server's answer (~20 KB): 64 jobs of 32 pods
/// all at once were 50 MB, and a burst that size leaves the heap fragmented for good. Four
/// per job slot (256 at the default) keeps small jobs' pods one round trip deep, and the API
/// server busy.
const PODS_IN_FLIGHT_PER_JOB: usize = 4;

/// A job takes the pod slots for all of its pods at once (so its pods are written in one
/// round trip, not in waves shared with other jobs), up to this many: the pool is at least
/// this large, so a gang of up to 512 nodes goes out at once, and the pool stays the memory
/// bound (512 pods ~ 10 MB).
const POD_SLOTS_PER_JOB: usize = 512;

impl Ctx<'_> {
    /// Counts and gates one write; `Err` stops the caller.
    fn gate(&self, kind: WriteKind, name: &str) -> Result<(), ApiError> {
        tracing::trace!(kind = kind.label(), name, "write");
        if self.dead.load(Ordering::SeqCst) {
            return Err(ApiError::Injected);
        }
        match self.faults.at(kind, name) {
            Fault::None => {}
            Fault::Error => {
                self.count(kind);
                self.fail(&ApiError::Injected);
                return Err(ApiError::Injected);
            }
            Fault::Crash => {
                self.dead.store(true, Ordering::SeqCst);
                self.report
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .crashed = true;
                return Err(ApiError::Injected);
            }
        }
        self.count(kind);
        Ok(())
    }

    fn count(&self, kind: WriteKind) {
        *self
            .report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .writes
            .entry(kind)
            .or_default() += 1;
    }

    fn fail(&self, e: &ApiError) {
        *self
            .report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .errors
            .entry(e.metric_label())
            .or_default() += 1;
        tracing::debug!(error = %e, "write failed");
    }

    fn with<R>(&self, f: impl FnOnce(&mut ExecReport) -> R) -> R {
        f(&mut self.report.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

async fn exec_job(ctx: &Ctx<'_>, jp: JobPlan, existing_finalizers: Vec<String>) {
    let (ns, name) = (jp.namespace.as_str(), jp.name.as_str());
    let mut rv: Option<String> = jp.status.as_ref().and_then(|s| s.resource_version.clone());
    let mut finalizers = existing_finalizers;
    if jp.add_finalizer {
        if ctx.gate(WriteKind::Finalizer, name).is_err() {
            return;
        }
        match ctx
            .api
            .add_finalizer(ns, name, rv.as_deref(), &finalizers)
            .await
        {
            Ok(obj) => {
                rv = obj.metadata.resource_version.clone();
                finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
                if jp.status.is_none() {
                    let job = Arc::new(ctx.versions.written(obj));
                    ctx.with(|r| {
                        r.written.push(Written {
                            job,
                            effects: Vec::new(),
                        })
                    });
                }
            }
            Err(e) => {
                ctx.fail(&e);
                return;
            }
        }
    }
    if let Some(sw) = &jp.status {
        if ctx.gate(WriteKind::Status, name).is_err() {
            return;
        }
        let w = sw.to_write(rv.clone());
        let res = ctx.api.apply_status(ns, name, &w).await;
        tracing::debug!(
            job = name,
            rv = ?w.resource_version,
            state = ?w.status.state,
            ok = res.is_ok(),
            new_rv = ?res.as_ref().ok().and_then(|o| o.metadata.resource_version.clone()),
            "status write"
        );
        match res {
            Ok(obj) => {
                let job = Arc::new(ctx.versions.written(obj));
                ctx.with(|r| {
                    r.written.push(Written {
                        job,
                        effects: jp.effects.clone(),
                    })
                })
            }
            Err(e) => {
                ctx.fail(&e);
                return;
            }
        }
    }
    if let Some(sec) = &jp.secret {
        if ctx.gate(WriteKind::Secret, name).is_err() {
            return;
        }
        match fresh_key() {
            Ok(key) => {
                let sec = super::pods::with_key((**sec).clone(), &key);
                if let Err(e) = ctx.api.create_secret(&sec).await {
                    // No pod may start without its credential: the next cycle tries again.
                    ctx.fail(&e);
                    return;
                }
            }
            Err(e) => {
                ctx.fail(&ApiError::Transport(format!(
                    "no random source for the step key: {e}"
                )));
                return;
            }
        }
    }
    if let Some(svc) = &jp.service {
        if ctx.gate(WriteKind::Service, name).is_err() {
            return;
        }
        if let Err(e) = ctx.api.create_service(svc).await {
            // No pod without it: the batch step reaches the other nodes by these names, and
            // the Service is planned only while the job has no pod, so the next cycle tries
            // the admission's writes again.
            ctx.fail(&e);
            return;
        }
    }
    if let Some(g) = &jp.group {
        let api = jp.create.gang().map(|g| g.api);
        if let Some(api) = api {
            if ctx.gate(WriteKind::Group, name).is_err() {
                return;
            }
            if let Err(e) = ctx.api.create_group(api, g).await {
                // Kubernetes' gang is a safety net: Muster's own placement stands without it,
                // and the pods wait for the group (the next cycle creates it) rather than
                // start without.
                ctx.fail(&e);
                return;
            }
        }
    }
    // A pod's claim exists before the pod: every claim of the admission first (concurrently),
    // and no pod unless all were created.
    let create = &jp.create;
    let claims = create.claim_nodes().iter().map(|&node| async move {
        let c = match create.build_claim(node) {
            Ok(Some(c)) => c,
            Ok(None) => return true,
            Err(e) => {
                ctx.fail(&ApiError::Status {
                    code: 422,
                    message: e.to_string(),
                });
                return false;
            }
        };
        let cname = c.metadata.name.clone().unwrap_or_default();
        if ctx.gate(WriteKind::ClaimCreate, &cname).is_err() {
            return false;
        }
        match ctx.api.create_claim(&c).await {
            Ok(()) => true,
            Err(e) => {
                ctx.fail(&e);
                false
            }
        }
    });
    if futures::future::join_all(claims).await.iter().any(|ok| !ok) {
        return;
    }
    // Pods of one gang are created concurrently: the job takes the slots for all its pods
    // at once, so a gang (up to `POD_SLOTS_PER_JOB` nodes) is one round trip deep; a larger
    // one takes them pod by pod. Each pod is built just before it is written (see
    // `PodsToCreate`). The semaphore is never closed, so acquiring only waits.
    let n = create.nodes().len();
    let whole = n <= POD_SLOTS_PER_JOB;
    let _job_slots = if whole && n > 0 {
        ctx.pod_slots.acquire_many(n as u32).await.ok()
    } else {
        None
    };
    let creates = create.nodes().iter().map(|&node| async move {
        let _slot = if whole {
            None
        } else {
            ctx.pod_slots.acquire().await.ok()
        };
        let p = match create.build(node) {
            Ok(p) => p,
            Err(e) => {
                // The planner checked the job builds; nothing is written for it this cycle.
                ctx.fail(&ApiError::Status {
                    code: 422,
                    message: e.to_string(),
                });
                return false;
            }
        };
        let pname = p.metadata.name.clone().unwrap_or_default();
        if ctx.gate(WriteKind::PodCreate, &pname).is_err() {
            return false;
        }
        match ctx.api.create_pod(&p, create.gang()).await {
            Ok(()) => {
                if let Some(o) = PodObs::from_pod(&p) {
                    ctx.with(|r| r.created_pods.push(o));
                }
                true
            }
            Err(e) => {
                ctx.fail(&e);
                true
            }
        }
    });
    let results: Vec<bool> = futures::future::join_all(creates).await;
    if results.iter().any(|ok| !ok) {
        return;
    }
    let deletes = jp.delete.iter().map(|p| async move {
        if ctx.gate(WriteKind::PodDelete, p).is_err() {
            return false;
        }
        match ctx.api.delete_pod(ns, p).await {
            Ok(()) => ctx.with(|r| r.deleted_pods.push((ns.to_string(), p.clone()))),
            Err(e) => ctx.fail(&e),
        }
        true
    });
    if futures::future::join_all(deletes)
        .await
        .iter()
        .any(|ok| !ok)
    {
        return;
    }
    let annotates = jp.annotate_pods.iter().map(|(p, v)| async move {
        if ctx.gate(WriteKind::PodAnnotate, p).is_err() {
            return false;
        }
        if let Err(e) = ctx.api.annotate_pod(ns, p, v).await {
            ctx.fail(&e);
        }
        true
    });
    if futures::future::join_all(annotates)
        .await
        .iter()
        .any(|ok| !ok)
    {
        return;
    }
    let claim_deletes = jp.delete_claims.iter().map(|c| async move {
        if ctx.gate(WriteKind::ClaimDelete, c).is_err() {
            return false;
        }
        match ctx.api.delete_claim(ns, c).await {
            Ok(()) => ctx.with(|r| r.deleted_claims.push((ns.to_string(), c.clone()))),
            Err(e) => ctx.fail(&e),
        }
        true
    });
    if futures::future::join_all(claim_deletes)
        .await
        .iter()
        .any(|ok| !ok)
    {
        return;
    }
    for (api, g) in &jp.delete_groups {
        if ctx.gate(WriteKind::Group, g).is_err() {
            return;
        }
        if let Err(e) = ctx.api.delete_group(ns, *api, g).await {
            ctx.fail(&e);
        }
    }
    for c in &jp.children {
        if ctx.gate(WriteKind::BatchJobCreate, name).is_err() {
            return;
        }
        match ctx.api.create_batchjob(c).await {
            Ok(()) => ctx.with(|r| {
                r.created_jobs
                    .push((ns.to_string(), c.metadata.name.clone().unwrap_or_default()))
            }),
            Err(e) => ctx.fail(&e),
        }
    }
    for (child, patch) in &jp.child_patches {
        if ctx.gate(WriteKind::BatchJobPatch, child).is_err() {
            return;
        }
        if let Err(e) = ctx.api.patch_batchjob(ns, child, patch).await {
            ctx.fail(&e);
        }
    }
    if jp.remove_finalizer {
        if ctx.gate(WriteKind::Finalizer, name).is_err() {
            return;
        }
        if let Err(e) = ctx.api.remove_finalizer(ns, name, &finalizers).await {
            ctx.fail(&e);
        }
    }
    if !jp.events.is_empty() {
        ctx.with(|r| {
            let uid = jp.uid.clone();
            r.events.extend(
                jp.events
                    .iter()
                    .cloned()
                    .map(|e| (ns.to_string(), name.to_string(), uid.clone(), e)),
            )
        });
    }
}

/// Adds the allocation finalizer to new jobs while the cycle plans (see [`super::early`]),
/// at most `concurrency` at once, each gated like any write; returns the report and, for each
/// job written, its new resourceVersion and finalizers (not the object: a burst of 6,250
/// gangs would hold them all through the plan).
pub async fn add_finalizers(
    jobs: Vec<super::early::EarlyFinalizer>,
    api: &dyn ClusterApi,
    faults: &dyn Faults,
    concurrency: usize,
) -> (ExecReport, Vec<super::early::Added>) {
    let no_sharing = Versions::default();
    let state = Ctx {
        api,
        faults,
        versions: &no_sharing,
        dead: AtomicBool::new(false),
        report: std::sync::Mutex::new(ExecReport::default()),
        pod_slots: tokio::sync::Semaphore::new(1),
    };
    let added = std::sync::Mutex::new(Vec::new());
    let (ctx, out) = (&state, &added);
    stream::iter(jobs)
        .for_each_concurrent(concurrency.max(1), |j| async move {
            if ctx.gate(WriteKind::Finalizer, &j.name).is_err() {
                return;
            }
            let res = ctx
                .api
                .add_finalizer(
                    &j.namespace,
                    &j.name,
                    j.resource_version.as_deref(),
                    &j.finalizers,
                )
                .await;
            match res {
                Ok(obj) => {
                    out.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(super::early::Added {
                            uid: j.uid,
                            resource_version: obj.metadata.resource_version,
                            finalizers: obj.metadata.finalizers.unwrap_or_default(),
                        })
                }
                Err(e) => ctx.fail(&e),
            }
        })
        .await;
    (
        state.report.into_inner().unwrap_or_else(|e| e.into_inner()),
        added.into_inner().unwrap_or_else(|e| e.into_inner()),
    )
}

/// A fresh step credential: 32 random bytes, hex (what `muster-step` reads).
fn fresh_key() -> Result<String, ring::error::Unspecified> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Publishes events (best effort), `concurrency` at a time; returns how many were attempted
/// and the failures by kind.
pub async fn publish_events(
    api: &dyn ClusterApi,
    events: Vec<(String, String, String, JobEvent)>,
    concurrency: usize,
) -> (u64, BTreeMap<&'static str, u64>) {
    let n = events.len() as u64;
    let errors = std::sync::Mutex::new(BTreeMap::new());
    stream::iter(events)
        .for_each_concurrent(concurrency.max(1), |(ns, name, uid, ev)| {
            let errors = &errors;
            async move {
                if let Err(e) = api.publish_event(&ns, &name, &uid, &ev).await {
                    *errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(e.metric_label())
                        .or_insert(0) += 1;
                }
            }
        })
        .await;
    (n, errors.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// Carries out a plan with at most `concurrency` jobs in flight. `finalizers` gives each
/// job's current finalizers by uid (needed to add or remove ours without a read).
pub async fn execute(
    plan: CyclePlan,
    api: &dyn ClusterApi,
    faults: &dyn Faults,
    concurrency: usize,
    finalizers: &(dyn Fn(&str) -> Vec<String> + Sync),
    versions: &Versions,
) -> ExecReport {
    // Sized up front: grown by doubling, 45,000 created pods would briefly need room for
    // 65,536 twice over while reallocating.
    let mut report = ExecReport::default();
    report
        .created_pods
        .reserve_exact(plan.jobs.iter().map(|j| j.create.len()).sum());
    let state = Ctx {
        api,
        faults,
        versions,
        dead: AtomicBool::new(false),
        report: std::sync::Mutex::new(report),
        pod_slots: tokio::sync::Semaphore::new(
            (concurrency.max(1) * PODS_IN_FLIGHT_PER_JOB).max(POD_SLOTS_PER_JOB),
        ),
    };
    let ctx = &state;
    stream::iter(plan.jobs)
        .for_each_concurrent(concurrency.max(1), |jp| {
            let fin = finalizers(&jp.uid);
            async move { exec_job(ctx, jp, fin).await }
        })
        .await;
    for pw in &plan.partitions {
        if ctx.gate(WriteKind::PartitionStatus, &pw.name).is_err() {
            break;
        }
        match ctx.api.apply_partition_status(&pw.name, &pw.status).await {
            Ok(()) => ctx.with(|r| r.partitions_written.push(pw.name.clone())),
            Err(e) => ctx.fail(&e),
        }
    }
    state.report.into_inner().unwrap_or_else(|e| e.into_inner())
}

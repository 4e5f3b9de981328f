//! The operator's admission webhooks (pure): what they answer, and the webhook configurations
//! the chart installs (built here once; the chart's templates are checked against them).
//!
//! - **Mutating, BatchJob CREATE and UPDATE** ([`mutate_batchjob`]): records who submitted the
//!   job, from the API server's `request.userInfo.username`, in the annotation
//!   [`labels::USER`] — whatever a client wrote there is replaced, and an update can never
//!   change it. Array elements, which the operator creates, keep their array's submitter.
//! - **Validating, BatchJob CREATE and UPDATE** ([`validate_batchjob`]): refuses what can never
//!   run ([`validate::submission`], the check `sbatch` makes too), with Slurm's reason and the
//!   resource named, so `kubectl apply` and GitOps syncs fail at once. An update is judged
//!   again only when it changes what the job asks for; once the job has left `PENDING` such
//!   an update is refused, naming the fields (its pods were built from the request; an
//!   array stays editable for the elements it has yet to create); elements the operator
//!   creates are not judged again.
//!   A requeue request (`spec.requeueRequests`, `scontrol requeue`) is refused for a job
//!   that has not run, a `requeue: false` one, an array or with `cancel` set.
//!   A fixed priority or a negative nice is refused unless the user is one of the
//!   [`Admins`] (Slurm's operators and administrators; [`privilege`]).
//!   Signal requests (`scancel --signal`, the annotation `muster.dev/signals`) are refused
//!   when malformed, and a new one for a job that is not running or for an array.
//! - **Validating, Partition CREATE and UPDATE** ([`validate_partition`]): refuses a second
//!   `default: true`.
//!
//! The BatchJob webhooks fail closed (`failurePolicy: Fail`): a submission whose user could
//! not be recorded must not be admitted, and both operator replicas serve them. The Partition
//! webhook fails open: Helm creates the chart's Partitions in the install that starts the
//! operator. They cover only `batchjobs` and `partitions` (not their status), so nothing else
//! in the cluster depends on the operator being up.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, BatchJobSpec, JobState, Partition};

use super::validate::{self, World};

mod privilege;
pub use privilege::{Admins, MASTERS};

/// Path of the mutating BatchJob webhook.
pub const MUTATE_BATCHJOBS: &str = "/mutate/batchjobs";
/// Path of the validating BatchJob webhook.
pub const VALIDATE_BATCHJOBS: &str = "/validate/batchjobs";
/// Path of the validating Partition webhook.
pub const VALIDATE_PARTITIONS: &str = "/validate/partitions";

/// Name of the mutating BatchJob webhook (as refusals quote it).
pub const MUTATING_BATCHJOBS: &str = "batchjobs.mutate.muster.dev";
/// Name of the validating BatchJob webhook.
pub const VALIDATING_BATCHJOBS: &str = "batchjobs.validate.muster.dev";
/// Name of the validating Partition webhook.
pub const VALIDATING_PARTITIONS: &str = "partitions.validate.muster.dev";

/// A JSON pointer segment (`muster.dev/user` → `muster.dev~1user`).
fn pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn object<T: serde::de::DeserializeOwned>(o: &Option<DynamicObject>) -> Option<T> {
    let v = serde_json::to_value(o.as_ref()?).ok()?;
    serde_json::from_value(v).ok()
}

fn deny(req: &AdmissionRequest<DynamicObject>, message: String) -> AdmissionResponse {
    let mut r = AdmissionResponse::from(req).deny(message);
    r.result.code = 403;
    r.result.reason = "Forbidden".into();
    r
}

/// The annotation patch that makes `current` (an object's annotations) carry `want` for the
/// submitter (`None`: no such annotation).
fn user_patch(
    current: Option<&BTreeMap<String, String>>,
    want: Option<&str>,
) -> Option<json_patch::Patch> {
    let have = current
        .and_then(|a| a.get(labels::USER))
        .map(String::as_str);
    if have == want {
        return None;
    }
    let ops = match (current, want) {
        (None, Some(w)) => serde_json::json!([{
            "op": "add", "path": "/metadata/annotations",
            "value": { labels::USER: w }
        }]),
        (Some(_), Some(w)) => serde_json::json!([{
            "op": "add", "path": format!("/metadata/annotations/{}", pointer(labels::USER)),
            "value": w
        }]),
        (_, None) => serde_json::json!([{
            "op": "remove", "path": format!("/metadata/annotations/{}", pointer(labels::USER))
        }]),
    };
    serde_json::from_value(ops).ok()
}

/// The mutating BatchJob webhook: see the [module docs](self). `operator` is the operator's
/// own user name (it creates array elements), when known.
pub fn mutate_batchjob(
    req: &AdmissionRequest<DynamicObject>,
    operator: Option<&str>,
) -> AdmissionResponse {
    let ok = AdmissionResponse::from(req);
    let Some(job) = object::<BatchJob>(&req.object) else {
        return ok;
    };
    let user = req.user_info.username.as_deref().unwrap_or("");
    let want: Option<String> = match req.operation {
        Operation::Create => {
            let elem = job
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(labels::ARRAY_PARENT));
            if elem && operator.is_some_and(|o| o == user) {
                // An array element: its array's submitter, copied by the operator.
                return ok;
            }
            Some(user.to_string())
        }
        Operation::Update => object::<BatchJob>(&req.old_object)
            .and_then(|o| o.metadata.annotations)
            .and_then(|a| a.get(labels::USER).cloned()),
        _ => return ok,
    };
    match user_patch(job.metadata.annotations.as_ref(), want.as_deref()) {
        None => ok,
        Some(p) => match ok.clone().with_patch(p) {
            Ok(r) => r,
            Err(e) => deny(req, format!("cannot record the submitter: {e}")),
        },
    }
}

/// The spec without what may change freely (cancel, hold, nice, priority, dependency, requeue
/// requests): what decides whether the job can run.
fn request_part(s: &BatchJobSpec) -> BatchJobSpec {
    let mut s = s.clone();
    s.cancel = None;
    s.hold = None;
    s.nice = None;
    s.priority = None;
    s.dependency = None;
    s.requeue_requests = None;
    s
}

/// Why `scontrol requeue` (a higher `spec.requeueRequests`) may not requeue `old`, if it may
/// not, in Slurm's words where it has them.
fn requeue_refusal(old: &BatchJob, new: &BatchJob) -> Option<String> {
    let (was, now) = (
        old.spec.requeue_requests.unwrap_or(0),
        new.spec.requeue_requests.unwrap_or(0),
    );
    if now == was {
        return None;
    }
    Some(if now < was {
        format!(
            "spec.requeueRequests only grows (it is {was}): each increase requeues the job once"
        )
    } else if old.spec.array.is_some() {
        "an array is requeued element by element (scontrol requeue ID_TASK)".to_string()
    } else if old.state() == JobState::Pending {
        "Job is pending execution: only a running or ended job can be requeued".to_string()
    } else if new.spec.requeue == Some(false) {
        "Requested operation is presently disabled: the job was submitted with --no-requeue \
         (spec.requeue: false)"
            .to_string()
    } else if new.spec.cancel == Some(true) {
        "spec.cancel is true: clear it to requeue the job".to_string()
    } else {
        return None;
    })
}

/// Whether `new` changes only `spec.time` of running `old`, to a limit no later than the one
/// it runs under (`status.timeLimit`): as Slurm lets a user lower a running job's limit, and
/// the operator applies it.
fn lowers_only_the_limit(old: &BatchJob, new: &BatchJob) -> bool {
    let without_time = |s: &BatchJobSpec| BatchJobSpec {
        time: None,
        ..request_part(s)
    };
    if without_time(&old.spec) != without_time(&new.spec) {
        return false;
    }
    // Read as the plan reads it when it applies the lower limit.
    let Some(wanted) = super::translate::job_request(&new.spec)
        .ok()
        .and_then(|p| p.request.time_limit)
        .and_then(|t| t.seconds())
    else {
        return false;
    };
    let current = old.status.as_ref().map(super::translate::status_limit_secs);
    match current {
        Some(Some(now)) => wanted <= now,
        // Running without a limit.
        Some(None) => true,
        None => false,
    }
}

/// Why a change to what a started job asks for is refused: the fields changed (as
/// `spec.<name>`) and what may still change.
fn started_change(old: &BatchJob, new: &BatchJob) -> String {
    let (a, b) = (
        serde_json::to_value(request_part(&old.spec)).unwrap_or_default(),
        serde_json::to_value(request_part(&new.spec)).unwrap_or_default(),
    );
    let empty = serde_json::Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let mut fields: Vec<&str> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    fields.dedup();
    let fields: Vec<String> = fields.iter().map(|f| format!("spec.{f}")).collect();
    let state = old.state();
    let why = if state.is_terminal() {
        format!("the job has ended ({})", state.as_str())
    } else {
        format!(
            "the job is {} and its pods were built from what it asked for",
            state.as_str()
        )
    };
    format!(
        "{} cannot change once a job has left PENDING: {why}; only cancel, hold, nice, \
         priority and dependency may change, and a running job's time may be lowered. Submit \
         a new job for a different request",
        fields.join(", ")
    )
}

/// Why the signal requests (`scancel --signal`, annotation [`muster_crds::signals::ANNOTATION`])
/// of `job` are refused, if they are: malformed, or a new one for a job that is not running
/// (its pods would take it as sent before they started, and it would reach nothing; Slurm's
/// scancel refuses that too). Removing requests is always allowed.
fn signal_refusal(old: Option<&BatchJob>, job: &BatchJob) -> Option<String> {
    use muster_crds::signals::{self, ANNOTATION};
    let get = |j: &BatchJob| {
        j.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION).cloned())
    };
    let new = get(job)?;
    let old_text = old.and_then(get);
    if old_text.as_deref() == Some(new.as_str()) {
        return None;
    }
    let reqs = match signals::parse(&new) {
        Ok(r) => r,
        Err(e) => return Some(format!("metadata.annotations[{ANNOTATION}]: {e}")),
    };
    let before = old_text
        .and_then(|t| signals::parse(&t).ok())
        .unwrap_or_default();
    let state = old.map(BatchJob::state).unwrap_or(JobState::Pending);
    let added = reqs.iter().any(|r| !before.iter().any(|b| b.id == r.id));
    if added && job.spec.array.is_some() {
        return Some(format!(
            "metadata.annotations[{ANNOTATION}]: an array's elements are signalled one by one, not the array"
        ));
    }
    (added && state != JobState::Running).then(|| {
        format!(
            "metadata.annotations[{ANNOTATION}]: a signal goes only to a running job; this job is {state}"
        )
    })
}

/// The validating BatchJob webhook: see the [module docs](self). `admins` may raise a
/// job's priority ([`privilege`]).
pub fn validate_batchjob(
    req: &AdmissionRequest<DynamicObject>,
    operator: Option<&str>,
    admins: &Admins,
    world: World<'_>,
) -> AdmissionResponse {
    let ok = AdmissionResponse::from(req);
    let Some(job) = object::<BatchJob>(&req.object) else {
        return ok;
    };
    let user = req.user_info.username.as_deref().unwrap_or("");
    let trusted = operator.is_some_and(|o| o == user);
    let admin = trusted || admins.contains(user, req.user_info.groups.as_deref().unwrap_or(&[]));
    let ns = req.namespace.clone().unwrap_or_default();
    match req.operation {
        Operation::Create if trusted => return ok,
        Operation::Create => {
            if let Some(e) = privilege::raise(None, &job.spec, admins).filter(|_| !admin) {
                return deny(req, e);
            }
            if let Some(e) = signal_refusal(None, &job) {
                return deny(req, e);
            }
        }
        Operation::Update => {
            let Some(old) = object::<BatchJob>(&req.old_object) else {
                return ok;
            };
            let ann = |j: &BatchJob| {
                j.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(labels::USER).cloned())
            };
            if ann(&old) != ann(&job) && !trusted {
                return deny(
                    req,
                    format!(
                        "metadata.annotations[{}] records who submitted the job and cannot be changed",
                        labels::USER
                    ),
                );
            }
            if let Some(e) = privilege::raise(Some(&old.spec), &job.spec, admins).filter(|_| !admin)
            {
                return deny(req, e);
            }
            if let Some(e) = requeue_refusal(&old, &job) {
                return deny(req, e);
            }
            if let Some(e) = signal_refusal(Some(&old), &job) {
                return deny(req, e);
            }
            if request_part(&old.spec) == request_part(&job.spec) {
                return ok;
            }
            // Once a job has started, its pods are built from what it asked for: a change
            // would be accepted and never take effect. An array's spec is read again for
            // each element it creates, so an array stays editable (as Slurm's pending tasks).
            if old.state() != JobState::Pending && old.spec.array.is_none() && !trusted {
                if old.state() == JobState::Running && lowers_only_the_limit(&old, &job) {
                    return ok;
                }
                return deny(req, started_change(&old, &job));
            }
            if old.state().is_terminal() {
                return ok;
            }
        }
        _ => return ok,
    }
    match validate::submission(&job, &ns, world) {
        Ok(warnings) => {
            let mut r = ok;
            if !warnings.is_empty() {
                r.warnings = Some(warnings);
            }
            r
        }
        Err(e) => deny(req, e.to_string()),
    }
}

/// The validating Partition webhook: a second `default: true` is refused (an update of a
/// partition that was already the default is not).
pub fn validate_partition(
    req: &AdmissionRequest<DynamicObject>,
    partitions: &[&Partition],
) -> AdmissionResponse {
    let ok = AdmissionResponse::from(req);
    let Some(p) = object::<Partition>(&req.object) else {
        return ok;
    };
    if p.spec.default != Some(true) {
        return ok;
    }
    if let Some(old) = object::<Partition>(&req.old_object)
        && old.spec.default == Some(true)
    {
        return ok;
    }
    let name = p.metadata.name.clone().unwrap_or_default();
    let others: Vec<&str> = partitions
        .iter()
        .filter(|q| q.spec.default == Some(true))
        .filter_map(|q| q.metadata.name.as_deref())
        .filter(|n| *n != name)
        .collect();
    if others.is_empty() {
        return ok;
    }
    deny(
        req,
        format!(
            "partition {} is already the default (default: true): at most one partition is the default; set default: false on it first",
            others.join(", ")
        ),
    )
}

/// How the webhooks are reached and how the API server treats a failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Name of both configuration objects.
    pub name: String,
    /// The webhook Service's namespace.
    pub namespace: String,
    /// The webhook Service's name.
    pub service: String,
    /// The Service's port.
    pub port: i32,
    /// `Fail` or `Ignore`.
    pub failure_policy: String,
    /// Seconds the API server waits for an answer (1 to 30).
    pub timeout_seconds: i32,
}

fn client(c: &WebhookConfig, path: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        service: Some(ServiceReference {
            namespace: c.namespace.clone(),
            name: c.service.clone(),
            path: Some(path.to_string()),
            port: Some(c.port),
        }),
        ..Default::default()
    }
}

fn rule(resource: &str) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![muster_crds::GROUP.into()]),
        api_versions: Some(vec!["*".into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        resources: Some(vec![resource.into()]),
        scope: Some("*".into()),
    }
}

/// The MutatingWebhookConfiguration (its `caBundle` is set by the operator).
pub fn mutating_configuration(c: &WebhookConfig) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(c.name.clone()),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: MUTATING_BATCHJOBS.into(),
            admission_review_versions: vec!["v1".into()],
            client_config: client(c, MUTATE_BATCHJOBS),
            failure_policy: Some(c.failure_policy.clone()),
            match_policy: Some("Equivalent".into()),
            reinvocation_policy: Some("Never".into()),
            rules: Some(vec![rule("batchjobs")]),
            side_effects: "None".into(),
            timeout_seconds: Some(c.timeout_seconds),
            ..Default::default()
        }]),
    }
}

/// The ValidatingWebhookConfiguration (its `caBundle` is set by the operator).
pub fn validating_configuration(c: &WebhookConfig) -> ValidatingWebhookConfiguration {
    let hook = |name: &str, path: &str, resource: &str, policy: &str| ValidatingWebhook {
        name: name.into(),
        admission_review_versions: vec!["v1".into()],
        client_config: client(c, path),
        failure_policy: Some(policy.to_string()),
        match_policy: Some("Equivalent".into()),
        rules: Some(vec![rule(resource)]),
        side_effects: "None".into(),
        timeout_seconds: Some(c.timeout_seconds),
        ..Default::default()
    };
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(c.name.clone()),
            ..Default::default()
        },
        webhooks: Some(vec![
            hook(
                VALIDATING_BATCHJOBS,
                VALIDATE_BATCHJOBS,
                "batchjobs",
                &c.failure_policy,
            ),
            // Fails open: Helm creates the chart's Partitions in the same install as the
            // operator, before any replica can answer; a conflict the webhook could not refuse
            // is still shown on the partitions (Ready: DefaultConflict).
            hook(
                VALIDATING_PARTITIONS,
                VALIDATE_PARTITIONS,
                "partitions",
                "Ignore",
            ),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::translate::{self, NodeTable};
    use kube::core::admission::AdmissionReview;
    use muster_crds::v1alpha1::PartitionSpec;
    use serde_json::{Value, json};

    fn request(op: &str, user: &str, object: Value, old: Value) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "muster.dev", "version": "v1alpha1", "kind": "BatchJob"},
                "resource": {"group": "muster.dev", "version": "v1alpha1", "resource": "batchjobs"},
                "name": "j", "namespace": "ml", "operation": op,
                "userInfo": {"username": user, "groups": ["system:authenticated"]},
                "object": object, "oldObject": old, "dryRun": false
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    fn bj(annotations: Value, spec: Value) -> Value {
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
               "metadata": {"name": "j", "namespace": "ml", "annotations": annotations},
               "spec": spec})
    }

    fn patched(r: &AdmissionResponse, obj: &Value) -> Value {
        let mut o = obj.clone();
        if let Some(p) = &r.patch {
            let p: json_patch::Patch = serde_json::from_slice(p).unwrap();
            json_patch::patch(&mut o, &p).unwrap();
        }
        o
    }

    #[test]
    fn the_submitter_comes_from_the_api_server_not_the_client() {
        let forged = bj(json!({"muster.dev/user": "root"}), json!({"script": "x"}));
        let r = mutate_batchjob(
            &request("CREATE", "alice", forged.clone(), Value::Null),
            None,
        );
        assert!(r.allowed);
        assert_eq!(
            patched(&r, &forged)["metadata"]["annotations"]["muster.dev/user"],
            "alice"
        );
        let bare = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
                          "metadata": {"name": "j"}, "spec": {"script": "x"}});
        let r = mutate_batchjob(&request("CREATE", "bob", bare.clone(), Value::Null), None);
        assert_eq!(
            patched(&r, &bare)["metadata"]["annotations"]["muster.dev/user"],
            "bob"
        );
        // An update keeps what admission recorded, whoever tries to change it.
        let old = bj(json!({"muster.dev/user": "alice"}), json!({"script": "x"}));
        let r = mutate_batchjob(&request("UPDATE", "mallory", forged.clone(), old), None);
        assert_eq!(
            patched(&r, &forged)["metadata"]["annotations"]["muster.dev/user"],
            "alice"
        );
        // Array elements the operator creates keep their array's submitter.
        let elem = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
            "metadata": {"name": "j-1", "labels": {"muster.dev/array-parent": "j"},
                         "annotations": {"muster.dev/user": "alice"}}, "spec": {"script": "x"}});
        let op = "system:serviceaccount:muster-system:muster-operator";
        let r = mutate_batchjob(&request("CREATE", op, elem.clone(), Value::Null), Some(op));
        assert!(r.patch.is_none());
        // ...but nobody else may pass one off as such.
        let r = mutate_batchjob(
            &request("CREATE", "mallory", elem.clone(), Value::Null),
            Some(op),
        );
        assert_eq!(
            patched(&r, &elem)["metadata"]["annotations"]["muster.dev/user"],
            "mallory"
        );
    }

    fn world_parts() -> (Vec<Partition>, NodeTable) {
        let p = Partition::new(
            "gpu",
            PartitionSpec {
                default: Some(true),
                default_image: Some("busybox".into()),
                tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                    operator: Some("Exists".into()),
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        let nodes = NodeTable::new(
            (1..=2)
                .map(|i| {
                    let n = format!("gpu{i:03}");
                    translate::node(
                        &translate::tests_support::kube_node(&n, true),
                        Some(&translate::tests_support::gpu_node(&n, 8, &[])),
                    )
                })
                .collect(),
        );
        (vec![p], nodes)
    }

    /// [`world_parts`] as admission sees it (leaked: a test's world lives as long as it).
    fn test_world() -> World<'static> {
        let (parts, nodes) = world_parts();
        let parts: &'static [Partition] = Box::leak(parts.into_boxed_slice());
        let table = Box::leak(Box::new(translate::partitions(parts.iter())));
        let objs: &'static [&'static Partition] =
            Box::leak(parts.iter().collect::<Vec<_>>().into_boxed_slice());
        World {
            partitions: table,
            partition_objects: objs,
            nodes: Box::leak(Box::new(nodes)),
            volume_claims: &[],
        }
    }

    #[test]
    fn what_can_never_run_is_refused_with_the_resource() {
        let w = test_world();
        let job = bj(json!({}), json!({"script": "x", "gpusPerNode": 9}));
        let r = validate_batchjob(
            &request("CREATE", "alice", job.clone(), Value::Null),
            None,
            &Admins::default(),
            w,
        );
        assert!(!r.allowed);
        assert!(
            r.result
                .message
                .starts_with("Requested node configuration is not available: GPUs: 9"),
            "{}",
            r.result.message
        );
        // An update that changes only cancel is not judged again; one that changes the request is.
        let fine = bj(json!({}), json!({"script": "x", "gpusPerNode": 8}));
        let mut cancelled = fine.clone();
        cancelled["spec"]["cancel"] = json!(true);
        let r = validate_batchjob(
            &request("UPDATE", "alice", cancelled, fine.clone()),
            None,
            &Admins::default(),
            w,
        );
        assert!(r.allowed);
        let r = validate_batchjob(
            &request("UPDATE", "alice", job, fine.clone()),
            None,
            &Admins::default(),
            w,
        );
        assert!(!r.allowed);
        // Once started, a change to the request is refused, naming the fields; cancel is not
        // a request change; an array's spec stays editable for the elements it creates.
        let started = |mut v: Value, state: &str| {
            v["status"] = json!({"state": state});
            v
        };
        let wider = bj(
            json!({}),
            json!({"script": "x", "gpusPerNode": 4, "nodes": 2}),
        );
        let r = validate_batchjob(
            &request(
                "UPDATE",
                "alice",
                started(wider.clone(), "RUNNING"),
                started(fine.clone(), "RUNNING"),
            ),
            None,
            &Admins::default(),
            w,
        );
        assert!(!r.allowed);
        assert!(
            r.result.message.starts_with(
                "spec.gpusPerNode, spec.nodes cannot change once a job has left PENDING: the job \
                 is RUNNING"
            ),
            "{}",
            r.result.message
        );
        let r = validate_batchjob(
            &request(
                "UPDATE",
                "alice",
                started(wider.clone(), "COMPLETED"),
                started(fine.clone(), "COMPLETED"),
            ),
            None,
            &Admins::default(),
            w,
        );
        assert!(
            r.result.message.contains("the job has ended (COMPLETED)"),
            "{}",
            r.result.message
        );
        // A running job's limit may be lowered, not raised, and nothing else with it.
        let limited = |time: Value, status_limit: &str| {
            let mut v = fine.clone();
            v["spec"]["time"] = time;
            v["status"] = json!({"state": "RUNNING", "timeLimit": status_limit});
            v
        };
        let judge = |new: Value, old: Value| {
            validate_batchjob(
                &request("UPDATE", "alice", new, old),
                None,
                &Admins::default(),
                w,
            )
            .allowed
        };
        assert!(judge(
            limited(json!(20), "30:00"),
            limited(json!(30), "30:00")
        ));
        assert!(judge(
            limited(json!("0:20:00"), "UNLIMITED"),
            limited(Value::Null, "UNLIMITED")
        ));
        assert!(!judge(
            limited(json!(40), "30:00"),
            limited(json!(30), "30:00")
        ));
        assert!(!judge(
            limited(json!("UNLIMITED"), "30:00"),
            limited(json!(30), "30:00")
        ));
        let mut both = limited(json!(20), "30:00");
        both["spec"]["nodes"] = json!(2);
        assert!(!judge(both, limited(json!(30), "30:00")));
        let mut done = limited(json!(20), "30:00");
        done["status"]["state"] = json!("COMPLETED");
        let mut was = limited(json!(30), "30:00");
        was["status"]["state"] = json!("COMPLETED");
        assert!(!judge(done, was));
        let mut cancelled = started(fine.clone(), "RUNNING");
        cancelled["spec"]["cancel"] = json!(true);
        let r = validate_batchjob(
            &request(
                "UPDATE",
                "alice",
                cancelled,
                started(fine.clone(), "RUNNING"),
            ),
            None,
            &Admins::default(),
            w,
        );
        assert!(r.allowed);
        let array = |v: &Value| {
            let mut v = v.clone();
            v["spec"]["array"] = json!("0-3");
            started(v, "RUNNING")
        };
        let r = validate_batchjob(
            &request("UPDATE", "alice", array(&wider), array(&fine)),
            None,
            &Admins::default(),
            w,
        );
        assert!(r.allowed, "{}", r.result.message);
        // The operator's own updates are not judged.
        let r = validate_batchjob(
            &request(
                "UPDATE",
                "system:serviceaccount:muster-system:muster-operator",
                started(wider, "RUNNING"),
                started(fine.clone(), "RUNNING"),
            ),
            Some("system:serviceaccount:muster-system:muster-operator"),
            &Admins::default(),
            w,
        );
        assert!(r.allowed);
        // A missing partition is a warning.
        let elsewhere = bj(json!({}), json!({"script": "x", "partition": "later"}));
        let r = validate_batchjob(
            &request("CREATE", "alice", elsewhere, Value::Null),
            None,
            &Admins::default(),
            w,
        );
        assert!(r.allowed);
        assert!(r.warnings.unwrap()[0].contains("partition later does not exist"));
    }

    #[test]
    fn only_administrators_raise_a_priority() {
        let w = test_world();
        let admins = Admins {
            groups: vec!["hpc-admins".into()],
            users: vec!["root".into()],
        };
        let op = "system:serviceaccount:muster-system:muster-operator";
        let judge = |user: &str, groups: &[&str], op_: &str, new: Value, old: Value| {
            let mut req = request(op_, user, new, old);
            req.user_info.groups = Some(groups.iter().map(|g| g.to_string()).collect());
            validate_batchjob(&req, Some(op), &admins, w)
        };
        let top = bj(json!({}), json!({"script": "x", "priority": 900}));
        let r = judge("alice", &["ml-team"], "CREATE", top.clone(), Value::Null);
        assert!(!r.allowed);
        assert!(
            r.result.message.starts_with(
                "Access/permission denied: spec.priority (--priority) 900 would replace the \
                 computed priority; only administrators (group hpc-admins, user root)"
            ),
            "{}",
            r.result.message
        );
        for (user, groups) in [("bob", &["hpc-admins"][..]), ("root", &[]), (op, &[])] {
            assert!(
                judge(user, groups, "CREATE", top.clone(), Value::Null).allowed,
                "{user}"
            );
        }
        // Updates: nice and priority are judged although they are not the request.
        let plain = bj(json!({}), json!({"script": "x"}));
        let mut negative = plain.clone();
        negative["spec"]["nice"] = json!(-1);
        let r = judge("alice", &[], "UPDATE", negative.clone(), plain.clone());
        assert!(
            r.result
                .message
                .starts_with("Access/permission denied: spec.nice (--nice) -1"),
            "{}",
            r.result.message
        );
        assert!(judge("bob", &["hpc-admins"], "UPDATE", negative, plain.clone()).allowed);
        let mut lower = top.clone();
        lower["spec"]["priority"] = json!(100);
        assert!(judge("alice", &[], "UPDATE", lower.clone(), top.clone()).allowed);
        assert!(!judge("alice", &[], "UPDATE", top, lower).allowed);
    }

    #[test]
    fn a_requeue_request_needs_a_job_that_ran_and_may_be_requeued() {
        let w = test_world();
        let judge = |old: Value, new: Value| {
            let r = validate_batchjob(
                &request("UPDATE", "alice", new, old),
                None,
                &Admins::default(),
                w,
            );
            (!r.allowed).then_some(r.result.message)
        };
        let job = |spec: Value, state: &str| {
            let mut v = bj(json!({}), spec);
            v["status"] = json!({"state": state});
            v
        };
        let plain = json!({"script": "x"});
        let asked = json!({"script": "x", "requeueRequests": 1});
        for state in ["RUNNING", "COMPLETED", "FAILED", "TIMEOUT"] {
            assert_eq!(
                judge(job(plain.clone(), state), job(asked.clone(), state)),
                None,
                "{state}"
            );
        }
        assert_eq!(
            judge(job(plain.clone(), "PENDING"), job(asked.clone(), "PENDING")).unwrap(),
            "Job is pending execution: only a running or ended job can be requeued"
        );
        let e = judge(job(asked.clone(), "RUNNING"), job(plain.clone(), "RUNNING")).unwrap();
        assert!(
            e.starts_with("spec.requeueRequests only grows (it is 1)"),
            "{e}"
        );
        let no = json!({"script": "x", "requeue": false});
        let no_asked = json!({"script": "x", "requeue": false, "requeueRequests": 1});
        let e = judge(job(no, "RUNNING"), job(no_asked, "RUNNING")).unwrap();
        assert!(
            e.starts_with(
                "Requested operation is presently disabled: the job was submitted with --no-requeue"
            ),
            "{e}"
        );
        // A cancelled job is requeued with its cancel cleared, not with it set.
        let cancelled = json!({"script": "x", "cancel": true});
        let still = json!({"script": "x", "cancel": true, "requeueRequests": 1});
        let e = judge(job(cancelled.clone(), "CANCELLED"), job(still, "CANCELLED")).unwrap();
        assert_eq!(e, "spec.cancel is true: clear it to requeue the job");
        assert_eq!(
            judge(job(cancelled, "CANCELLED"), job(asked.clone(), "CANCELLED")),
            None
        );
        let array = json!({"script": "x", "array": "0-3"});
        let array_asked = json!({"script": "x", "array": "0-3", "requeueRequests": 1});
        assert!(
            judge(job(array, "RUNNING"), job(array_asked, "RUNNING"))
                .unwrap()
                .contains("element by element")
        );
    }

    #[test]
    fn a_signal_goes_only_to_a_running_job_and_must_be_well_formed() {
        let w = test_world();
        let judge = |op: &str, old: Value, new: Value| {
            let r = validate_batchjob(&request(op, "alice", new, old), None, &Admins::default(), w);
            (!r.allowed).then_some(r.result.message)
        };
        let job = |signals: Option<&str>, state: &str| {
            let ann = match signals {
                Some(s) => json!({"muster.dev/signals": s}),
                None => json!({}),
            };
            let mut v = bj(ann, json!({"script": "x"}));
            v["status"] = json!({"state": state});
            v
        };
        let one = "2026-12-02T10:00:00Z USR1 batch\n";
        let two = "2026-12-02T10:00:00Z USR1 batch\n2026-12-02T10:00:05Z TERM steps\n";
        assert_eq!(
            judge("UPDATE", job(None, "RUNNING"), job(Some(one), "RUNNING")),
            None
        );
        assert_eq!(
            judge(
                "UPDATE",
                job(Some(one), "RUNNING"),
                job(Some(two), "RUNNING")
            ),
            None
        );
        for state in ["PENDING", "COMPLETED"] {
            let e = judge("UPDATE", job(Some(one), state), job(Some(two), state)).unwrap();
            assert_eq!(
                e,
                format!(
                    "metadata.annotations[muster.dev/signals]: a signal goes only to a running job; this job is {state}"
                )
            );
            // Taking requests away, or leaving them, is always allowed.
            assert_eq!(
                judge("UPDATE", job(Some(two), state), job(Some(one), state)),
                None
            );
            assert_eq!(
                judge("UPDATE", job(Some(two), state), job(Some(two), state)),
                None
            );
        }
        // An array is signalled element by element.
        let arr = |sig: Option<&str>| {
            let mut v = job(sig, "RUNNING");
            v["spec"]["array"] = json!("0-3");
            v
        };
        let e = judge("UPDATE", arr(None), arr(Some(one))).unwrap();
        assert!(
            e.contains("an array's elements are signalled one by one"),
            "{e}"
        );
        let e = judge("CREATE", Value::Null, job(Some(one), "PENDING")).unwrap();
        assert!(e.contains("a signal goes only to a running job"), "{e}");
        let e = judge(
            "UPDATE",
            job(None, "RUNNING"),
            job(Some("2026-12-02T10:00:00Z FOO batch"), "RUNNING"),
        )
        .unwrap();
        assert_eq!(
            e,
            "metadata.annotations[muster.dev/signals]: line 1: signal \"FOO\": expected a name (USR1, SIGTERM, ...) or a number 1-64"
        );
    }

    #[test]
    fn a_second_default_partition_is_refused() {
        let (parts, _) = world_parts();
        let objs: Vec<&Partition> = parts.iter().collect();
        let p = |name: &str, default: bool| {
            json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
                   "metadata": {"name": name}, "spec": {"default": default}})
        };
        let r = validate_partition(
            &request("CREATE", "admin", p("b", true), Value::Null),
            &objs,
        );
        assert!(!r.allowed);
        assert!(
            r.result
                .message
                .contains("partition gpu is already the default")
        );
        let r = validate_partition(
            &request("CREATE", "admin", p("b", false), Value::Null),
            &objs,
        );
        assert!(r.allowed);
        let r = validate_partition(
            &request("UPDATE", "admin", p("gpu", true), p("gpu", true)),
            &objs,
        );
        assert!(r.allowed);
    }

    #[test]
    fn configurations_cover_only_muster_objects_and_fail_closed() {
        let c = WebhookConfig {
            name: "muster".into(),
            namespace: "muster-system".into(),
            service: "muster-operator-webhook".into(),
            port: 443,
            failure_policy: "Fail".into(),
            timeout_seconds: 5,
        };
        let m = mutating_configuration(&c);
        let v = validating_configuration(&c);
        let mw = &m.webhooks.as_ref().unwrap()[0];
        assert_eq!(mw.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(mw.side_effects, "None");
        assert_eq!(
            mw.rules.as_ref().unwrap()[0].resources.as_deref(),
            Some(&["batchjobs".to_string()][..])
        );
        let vw = v.webhooks.unwrap();
        assert_eq!(vw.len(), 2);
        assert!(vw.iter().all(|w| w.timeout_seconds == Some(5)));
    }
}

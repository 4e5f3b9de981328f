//! The API operations with kube-apiserver's semantics, independent of HTTP: create, update
//! (with the GuaranteedUpdate retry loop patches and applies use), delete with finalizers and
//! grace periods, pod binding. The HTTP layer and the garbage collector both call these.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use super::admission::{self, Attributes, Operation};
use super::auth::{Tokens, UserInfo};
use super::builtin;
use super::error::{ApiError, FieldError, FieldErrorKind};
use super::faults::FaultState;
use super::gc::GcWork;
use super::resources::{Builtin, Registry, ResourceType};
use super::schema::{self, obj_mut};
use super::store::{CommitError, Key, Store, Stored, Write};

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

    fn check_namespace(&self, ns: &str) -> Result<(), ApiError> {
        let nss = self
            .store
            .collection(&super::resources::GroupResource::new("", "namespaces"));
        match nss.get(&Key::new("", ns)) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(s) if s.meta.deleting => Err(ApiError::forbidden(format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ))),
            Some(_) => Ok(()),
        }
    }

    fn check_type_meta(&self, rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
        let Some(m) = obj.as_object_mut() else {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        };
        let av = rt.api_version();
        match m.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("apiVersion".into(), json!(av));
            }
            Some(v) if v != av => {
                let (g, _) = super::resources::split_api_version(v);
                if g != rt.group {
                    return Err(ApiError::bad_request(format!(
                        "the API version in the data ({v}) does not match the expected API version ({av})"
                    )));
                }
                m.insert("apiVersion".into(), json!(av));
            }
            _ => {}
        }
        match m.get("kind").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("kind".into(), json!(rt.kind));
            }
            Some(k) if k != rt.kind => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    rt.kind
                )));
            }
            _ => {}
        }
        if !m.get("metadata").is_some_and(Value::is_object) {
            m.insert("metadata".into(), json!({}));
        }
        Ok(())
    }

    /// Prune and default a custom resource (what decoding does before admission).
    fn default_only(&self, rt: &ResourceType, obj: &mut Value) {
        if let Some(s) = rt.crd.as_ref().and_then(|c| c.schema.as_ref()) {
            schema::prune_and_default(s, obj);
        }
    }

    /// Decode, prune, default and validate an object about to be written.
    fn admit(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOpts,
    ) -> Result<Vec<String>, ApiError> {
        let mut warnings = Vec::new();
        let handle_unknown = |unknown: Vec<String>,
                              warnings: &mut Vec<String>|
         -> Result<(), ApiError> {
            if unknown.is_empty() {
                return Ok(());
            }
            match opts.validation {
                FieldValidation::Ignore => Ok(()),
                FieldValidation::Warn => {
                    warnings.extend(unknown.iter().map(|u| format!("unknown field \"{u}\"")));
                    Ok(())
                }
                FieldValidation::Strict => {
                    let list: Vec<String> = unknown
                        .iter()
                        .map(|u| format!("unknown field \"{u}\""))
                        .collect();
                    Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        rt.kind,
                        rt.version,
                        rt.kind,
                        list.join(", ")
                    )))
                }
            }
        };
        let mut errs: Vec<FieldError> = Vec::new();
        if let Some(crd) = &rt.crd {
            if let Some(s) = &crd.schema {
                let pruned = schema::prune_and_default(s, obj);
                handle_unknown(pruned, &mut warnings)?;
                // Ratcheting at top-level-field granularity: unchanged fields are not re-checked
                // (not walked, and errors found through root-level rules on them dropped).
                let mut all = Vec::new();
                match old {
                    None => schema::validate(s, obj, "", &mut all),
                    Some(o) => {
                        let unchanged = |k: &str| o.get(k) == obj.get(k);
                        schema::validate_changed(s, obj, &mut all, &unchanged);
                    }
                }
                errs.extend(all.into_iter().filter(|e| {
                    let top = e.field.split(['.', '[']).next().unwrap_or("");
                    old.is_none_or(|o| top.is_empty() || o.get(top) != obj.get(top))
                }));
            } else {
                let m = obj_mut(obj, "metadata");
                m.retain(|k, _| schema::OBJECT_META_FIELDS.contains(&k.as_str()));
            }
            if let Some(v) = &crd.validation {
                // As kube-apiserver: values of the wrong type keep the rules from running.
                if errs.iter().any(|e| e.kind == FieldErrorKind::TypeInvalid) {
                    errs.push(FieldError::invalid(
                        "<nil>",
                        Value::Null,
                        "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                    ));
                } else {
                    errs.extend(v.validate(obj, old));
                }
            }
        } else if rt.builtin == Builtin::Pod
            && old.is_some_and(|o| builtin::same_but_status(o, obj))
        {
            // A status write (kubelet, scheduler conditions): only the status is new.
            let unknown = builtin::normalize_pod_status(obj).map_err(|e| {
                ApiError::bad_request(format!(
                    "{} in version \"{}\" cannot be handled as a {}: {e}",
                    rt.kind, rt.version, rt.kind
                ))
            })?;
            handle_unknown(unknown, &mut warnings)?;
        } else {
            let mut taken = std::mem::take(obj);
            // Pod fields of optional APIs that k8s-openapi's v1_32 Pod does not know: kept
            // where the API is served (dropped otherwise, as a server without it drops them).
            let kept = if rt.builtin == Builtin::Pod {
                builtin::take_feature_pod_fields(&mut taken, self.features)
            } else {
                Vec::new()
            };
            let (mut norm, unknown) = builtin::normalize(rt, taken).map_err(|e| {
                ApiError::bad_request(format!(
                    "{} in version \"{}\" cannot be handled as a {}: {e}",
                    rt.kind, rt.version, rt.kind
                ))
            })?;
            if rt.builtin == Builtin::Pod {
                builtin::restore_feature_pod_fields(&mut norm, kept, self.features);
            }
            *obj = norm;
            handle_unknown(unknown, &mut warnings)?;
            if rt.builtin == Builtin::Crd
                && let Err(e) = builtin::crd_types(obj)
            {
                errs.extend(e);
            }
        }
        errs.extend(builtin::validate(rt, obj, old));
        if !errs.is_empty() {
            return Err(ApiError::invalid(rt, str_at(obj, "name"), &errs));
        }
        Ok(warnings)
    }

    fn prepare_create(&self, rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
        let name = str_at(obj, "name").to_string();
        match rt.builtin {
            Builtin::Pod => {
                let priority = match obj["spec"]["priorityClassName"].as_str() {
                    None | Some("") => None,
                    Some(pc) => {
                        let pcs = self.store.collection(&super::resources::GroupResource::new(
                            "scheduling.k8s.io",
                            "priorityclasses",
                        ));
                        match pcs.get(&Key::new("", pc)) {
                            Some(s) => s.value()["value"].as_i64(),
                            None => {
                                return Err(ApiError::forbidden(format!(
                                    "pods \"{name}\" is forbidden: no PriorityClass with name {pc} was found"
                                )));
                            }
                        }
                    }
                };
                builtin::default_pod(obj, priority);
            }
            Builtin::Namespace => {
                obj["spec"] = json!({ "finalizers": ["kubernetes"] });
                obj["status"] = json!({ "phase": "Active" });
                obj_mut(obj_mut_v(obj, "metadata"), "labels")
                    .insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            Builtin::Service => {
                let spec = obj_mut(obj, "spec");
                let typ = spec
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("ClusterIP")
                    .to_string();
                spec.insert("type".into(), json!(typ));
                if typ != "ExternalName" {
                    let ip = match spec.get("clusterIP").and_then(Value::as_str) {
                        Some(ip) if !ip.is_empty() => ip.to_string(),
                        _ => {
                            let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
                            format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
                        }
                    };
                    spec.insert("clusterIP".into(), json!(ip));
                    spec.insert("clusterIPs".into(), json!([ip]));
                    spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
                    spec.entry("ipFamilyPolicy")
                        .or_insert_with(|| json!("SingleStack"));
                    spec.entry("internalTrafficPolicy")
                        .or_insert_with(|| json!("Cluster"));
                }
                spec.entry("sessionAffinity")
                    .or_insert_with(|| json!("None"));
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        let port = p["port"].clone();
                        if let Some(p) = p.as_object_mut() {
                            p.entry("protocol").or_insert_with(|| json!("TCP"));
                            p.entry("targetPort").or_insert(port);
                        }
                    }
                }
                obj["status"] = json!({ "loadBalancer": {} });
            }
            Builtin::Secret => {
                obj.as_object_mut()
                    .expect("object")
                    .entry("type")
                    .or_insert_with(|| json!("Opaque"));
            }
            Builtin::Crd => {
                let m = obj_mut(obj, "metadata");
                let f = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = f.as_array_mut()
                    && !a.iter().any(|x| x == CRD_FINALIZER)
                {
                    a.push(json!(CRD_FINALIZER));
                }
                let status = builtin::crd_status(obj, &Value::Null, &now());
                obj["status"] = status;
            }
            Builtin::Node => {}
            _ => {
                if rt.status
                    && let Some(m) = obj.as_object_mut()
                {
                    m.remove("status");
                }
            }
        }
        Ok(())
    }

    /// Create an object (POST, or PUT/apply of a missing object).
    pub async fn create(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        mut obj: Value,
        opts: &WriteOpts,
        keep_managed_fields: bool,
    ) -> Result<Written, ApiError> {
        self.check_type_meta(rt, &mut obj)?;
        let md = obj_mut(&mut obj, "metadata");
        if rt.namespaced {
            let url_ns = ns.unwrap_or("");
            match md.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
            md.insert("namespace".into(), json!(url_ns));
        } else {
            md.remove("namespace");
        }
        if md
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        md.remove("resourceVersion");
        let mut name = md
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let generate = md
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            if generate.is_empty() {
                return Err(ApiError::invalid(
                    rt,
                    "",
                    &[FieldError::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
            name = generate_name(&generate);
            md.insert("name".into(), json!(name));
        }
        md.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        md.insert("creationTimestamp".into(), json!(now()));
        md.remove("deletionTimestamp");
        md.remove("deletionGracePeriodSeconds");
        md.remove("selfLink");
        if !keep_managed_fields {
            md.remove("managedFields");
        }
        if rt.generation {
            md.insert("generation".into(), json!(1));
        } else {
            md.remove("generation");
        }
        if let Some(e) = builtin::validate_name(rt, &name) {
            return Err(ApiError::invalid(rt, &name, &[e]));
        }
        if rt.namespaced {
            self.check_namespace(ns.unwrap_or(""))?;
        }
        self.prepare_create(rt, &mut obj)?;
        let mut warnings = Vec::new();
        let user = opts.user.as_ref().filter(|_| admission::any(self));
        if let Some(user) = user {
            // Webhooks see the object decoded and defaulted, as kube-apiserver sends it.
            self.default_only(rt, &mut obj);
            let ns = str_at(&obj, "namespace").to_string();
            let a = Attributes {
                rt,
                sub: None,
                namespace: &ns,
                name: &name,
                op: Operation::Create,
                user,
                dry_run: opts.dry_run,
                old: None,
            };
            let (o, w) = admission::mutate(self, &a, obj).await?;
            obj = o;
            warnings.extend(w);
        }
        warnings.extend(self.admit(rt, &mut obj, None, opts)?);
        if let Some(user) = user {
            let ns = str_at(&obj, "namespace").to_string();
            let a = Attributes {
                rt,
                sub: None,
                namespace: &ns,
                name: &name,
                op: Operation::Create,
                user,
                dry_run: opts.dry_run,
                old: None,
            };
            warnings.extend(admission::validate(self, &a, Some(&obj)).await?);
        }
        if opts.dry_run {
            return Ok(Written {
                body: Body::Value(obj),
                created: true,
                warnings,
            });
        }
        let coll = self.store.collection(&rt.storage);
        let fields = builtin::fields_fn(&rt.storage);
        for attempt in 0.. {
            match coll.commit(&self.store, Write::Create(&mut obj), fields) {
                Ok(stored) => {
                    self.after_write(rt, None, Some(&obj), false);
                    return Ok(Written {
                        body: Body::Stored(stored),
                        created: true,
                        warnings,
                    });
                }
                Err(CommitError::Exists) if !generate.is_empty() && attempt < 8 => {
                    let n = generate_name(&generate);
                    obj["metadata"]["name"] = json!(n);
                }
                Err(_) => return Err(ApiError::already_exists(rt, str_at(&obj, "name"))),
            }
        }
        unreachable!("the loop returns")
    }

    /// Update an object through `mutate`, retrying when it changed underneath (as
    /// GuaranteedUpdate does). `mutate` sees the current object (None when absent).
    pub async fn update(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        part: Part,
        opts: &WriteOpts,
        mutate: &mut (dyn FnMut(Option<&Value>) -> Result<Mutation, ApiError> + Send),
    ) -> Result<Written, ApiError> {
        let coll = self.store.collection(&rt.storage);
        let key = key_for(rt, ns, name);
        let fields = builtin::fields_fn(&rt.storage);
        loop {
            let cur = coll.get(&key);
            let old = cur.as_ref().map(Stored::value);
            let new = match mutate(old.as_ref())? {
                Mutation::Create(v) => {
                    if cur.is_some() {
                        continue;
                    }
                    match Box::pin(self.create(rt, ns, v, opts, opts.apply)).await {
                        Err(e) if e.reason == "AlreadyExists" => continue,
                        r => return r,
                    }
                }
                Mutation::Update(v) => v,
            };
            let (Some(cur), Some(old)) = (cur, old) else {
                return Err(ApiError::not_found(rt, name));
            };
            let mut new = new;
            self.check_type_meta(rt, &mut new)?;
            // Preconditions and identity.
            let body_rv = str_at(&new, "resourceVersion").to_string();
            if !body_rv.is_empty() {
                if body_rv != cur.meta.rv.to_string() {
                    return Err(ApiError::conflict(rt, name));
                }
            } else if opts.is_put && !rt.unconditional_update {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    &[FieldError::invalid(
                        "metadata.resourceVersion",
                        json!("0x0"),
                        "must be specified for an update",
                    )],
                ));
            }
            let body_name = str_at(&new, "name");
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            let body_ns = str_at(&new, "namespace");
            if rt.namespaced && !body_ns.is_empty() && Some(body_ns) != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            let body_uid = str_at(&new, "uid");
            if !body_uid.is_empty() && body_uid != str_at(&old, "uid") {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {body_uid}, UID in object meta: {}",
                        str_at(&old, "uid")
                    ),
                ));
            }
            let mut new = self.carry_over(rt, part, &old, new, opts);
            if meta(&old)["deletionTimestamp"].is_string() {
                let old_f = finalizers(&old);
                if finalizers(&new).iter().any(|f| !old_f.contains(f)) {
                    return Err(ApiError::invalid(
                        rt,
                        name,
                        &[FieldError::forbidden(
                            "metadata.finalizers",
                            "no new finalizers can be added if the object is being deleted",
                        )],
                    ));
                }
            }
            let mut warnings = Vec::new();
            let user = opts.user.as_ref().filter(|_| admission::any(self));
            let sub = (part == Part::Status).then_some("status");
            let obj_ns = str_at(&old, "namespace").to_string();
            if let Some(user) = user {
                self.default_only(rt, &mut new);
                let a = Attributes {
                    rt,
                    sub,
                    namespace: &obj_ns,
                    name,
                    op: Operation::Update,
                    user,
                    dry_run: opts.dry_run,
                    old: Some(&old),
                };
                let (o, w) = admission::mutate(self, &a, new).await?;
                new = o;
                warnings.extend(w);
            }
            warnings.extend(self.admit(rt, &mut new, Some(&old), opts)?);
            if let Some(user) = user {
                let a = Attributes {
                    rt,
                    sub,
                    namespace: &obj_ns,
                    name,
                    op: Operation::Update,
                    user,
                    dry_run: opts.dry_run,
                    old: Some(&old),
                };
                warnings.extend(admission::validate(self, &a, Some(&new)).await?);
            }
            if rt.generation {
                let g = meta(&old)["generation"].as_i64().unwrap_or(1);
                let changed = spec_changed(rt, &new, &old);
                new["metadata"]["generation"] = json!(if changed { g + 1 } else { g });
            }
            new["metadata"]["resourceVersion"] = json!(cur.meta.rv.to_string());
            if new == old {
                return Ok(Written {
                    body: Body::Stored(cur),
                    created: false,
                    warnings,
                });
            }
            if opts.dry_run {
                return Ok(Written {
                    body: Body::Value(new),
                    created: false,
                    warnings,
                });
            }
            let remove = meta(&new)["deletionTimestamp"].is_string()
                && finalizers(&new).is_empty()
                && meta(&new)["deletionGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(0)
                    == 0;
            let write = if remove {
                Write::Delete(&mut new, cur.meta.rv)
            } else {
                Write::Update(&mut new, cur.meta.rv)
            };
            match coll.commit(&self.store, write, fields) {
                Ok(stored) => {
                    self.after_write(rt, Some(&old), Some(&new), remove);
                    return Ok(Written {
                        body: Body::Stored(stored),
                        created: false,
                        warnings,
                    });
                }
                Err(CommitError::NotFound) => return Err(ApiError::not_found(rt, name)),
                Err(_) => continue,
            }
        }
    }

    /// Apply the parts of `new` a write may change onto `old`.
    fn carry_over(
        &self,
        rt: &ResourceType,
        part: Part,
        old: &Value,
        mut new: Value,
        opts: &WriteOpts,
    ) -> Value {
        let is_apply = opts.apply;
        if rt.status {
            match part {
                Part::Main => match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                },
                Part::Status => {
                    // Taken out of the written object (not copied): everything else is the
                    // stored object's.
                    let status = new.as_object_mut().and_then(|m| m.remove("status"));
                    let managed = new
                        .get_mut("metadata")
                        .and_then(Value::as_object_mut)
                        .and_then(|m| m.remove("managedFields"))
                        .unwrap_or(Value::Null);
                    new = clone_but_status(old, is_apply);
                    match status {
                        Some(s) => new["status"] = s,
                        None => {
                            new.as_object_mut().expect("object").remove("status");
                        }
                    }
                    if is_apply {
                        new["metadata"]["managedFields"] = managed;
                    }
                    return new;
                }
            }
        }
        let om = meta(old);
        let nm = obj_mut(&mut new, "metadata");
        for k in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match om.get(k) {
                Some(v) => {
                    nm.insert(k.into(), v.clone());
                }
                None => {
                    nm.remove(k);
                }
            }
        }
        nm.remove("selfLink");
        if !is_apply {
            match om.get("managedFields") {
                Some(v) => {
                    nm.insert("managedFields".into(), v.clone());
                }
                None => {
                    nm.remove("managedFields");
                }
            }
        }
        match rt.builtin {
            Builtin::Service => {
                for k in ["clusterIP", "clusterIPs"] {
                    if new["spec"][k].is_null() && !old["spec"][k].is_null() {
                        new["spec"][k] = old["spec"][k].clone();
                    }
                }
            }
            Builtin::Namespace => {
                new["spec"] = old["spec"].clone();
            }
            Builtin::Crd => {
                let status = builtin::crd_status(&new, &old["status"], &now());
                new["status"] = status;
            }
            _ => {}
        }
        new
    }

    /// Delete an object.
    pub async fn delete(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        o: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        let coll = self.store.collection(&rt.storage);
        let key = key_for(rt, ns, name);
        let fields = builtin::fields_fn(&rt.storage);
        loop {
            let cur = coll
                .get(&key)
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            let mut obj = cur.value();
            if let Some(user) = o.user.as_ref().filter(|_| admission::any(self)) {
                let obj_ns = str_at(&obj, "namespace").to_string();
                let a = Attributes {
                    rt,
                    sub: None,
                    namespace: &obj_ns,
                    name,
                    op: Operation::Delete,
                    user,
                    dry_run: o.dry_run,
                    old: Some(&obj),
                };
                admission::mutate(self, &a, Value::Null).await?;
                admission::validate(self, &a, None).await?;
            }
            if let Some(uid) = &o.precondition_uid
                && uid != str_at(&obj, "uid")
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        str_at(&obj, "uid")
                    ),
                ));
            }
            if let Some(rv) = &o.precondition_rv
                && *rv != cur.meta.rv.to_string()
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        cur.meta.rv
                    ),
                ));
            }
            let grace = if rt.builtin == Builtin::Pod {
                self.pod_grace(&obj, o.grace)
            } else {
                0
            };
            let mut fins = finalizers(&obj);
            let deleting = meta(&obj)["deletionTimestamp"].is_string();
            if o.propagation.as_deref() == Some("Orphan") && !o.dry_run {
                self.orphan_dependents(&cur.meta.uid).await;
            }
            let foreground = o.propagation.as_deref() == Some("Foreground");
            if foreground
                && !fins.iter().any(|f| f == FOREGROUND)
                && !self.store.dependents(&cur.meta.uid).is_empty()
            {
                fins.push(FOREGROUND.into());
            }
            // Namespaces wait for their content to go (spec.finalizers, emptied by the collector).
            let immediate = fins.is_empty() && grace == 0 && rt.builtin != Builtin::Namespace;
            if deleting && !immediate {
                let old_grace = meta(&obj)["deletionGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(0);
                if grace >= old_grace || rt.builtin != Builtin::Pod {
                    return Ok(Deleted::Pending(Body::Stored(cur)));
                }
            }
            if o.dry_run {
                return Ok(if immediate {
                    Deleted::Gone(Body::Value(obj))
                } else {
                    Deleted::Pending(Body::Value(obj))
                });
            }
            let old = obj.clone();
            let write = if immediate {
                Write::Delete(&mut obj, cur.meta.rv)
            } else {
                let m = obj_mut(&mut obj, "metadata");
                m.insert("deletionTimestamp".into(), json!(time_plus(grace)));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                m.insert("finalizers".into(), json!(fins));
                if !deleting && let Some(g) = m.get("generation").and_then(Value::as_i64) {
                    m.insert("generation".into(), json!(g + 1));
                }
                if rt.builtin == Builtin::Namespace {
                    obj["status"]["phase"] = json!("Terminating");
                }
                Write::Update(&mut obj, cur.meta.rv)
            };
            match coll.commit(&self.store, write, fields) {
                Ok(stored) => {
                    self.after_write(rt, Some(&old), Some(&obj), immediate);
                    return Ok(if immediate {
                        Deleted::Gone(Body::Stored(stored))
                    } else {
                        Deleted::Pending(Body::Stored(stored))
                    });
                }
                Err(CommitError::NotFound) => return Err(ApiError::not_found(rt, name)),
                Err(_) => continue,
            }
        }
    }

    /// Remove an object whatever its finalizers (the last step of namespace deletion).
    pub fn purge(&self, gr: &super::resources::GroupResource, key: &Key) {
        let coll = self.store.collection(gr);
        let fields = builtin::fields_fn(gr);
        while let Some(cur) = coll.get(key) {
            let mut v = cur.value();
            match coll.commit(&self.store, Write::Delete(&mut v, cur.meta.rv), fields) {
                Ok(_) => {
                    let _ = self.gc.send(GcWork::OwnerGone(cur.meta.uid.to_string()));
                    if gr.group == "apiextensions.k8s.io" {
                        self.registry.remove_crd(&cur.meta.name);
                    }
                    return;
                }
                Err(CommitError::NotFound) => return,
                Err(_) => continue,
            }
        }
    }

    fn pod_grace(&self, pod: &Value, requested: Option<i64>) -> i64 {
        if !self.graceful_pods.load(Ordering::Relaxed) {
            return 0;
        }
        let on_node = pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        let done = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        if !on_node || done {
            return 0;
        }
        requested
            .or(pod["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30)
            .max(0)
    }

    /// Remove the owner references to `owner_uid` from its dependents.
    pub async fn orphan_dependents(&self, owner_uid: &str) {
        for dep in self.store.dependents(owner_uid) {
            let Some(rt) = self.registry.catalog().by_storage(&dep.gr) else {
                continue;
            };
            let ns = (!dep.key.ns.is_empty()).then_some(dep.key.ns.as_str());
            let _ = self
                .update(
                    &rt,
                    ns,
                    &dep.key.name,
                    Part::Main,
                    &WriteOpts::default(),
                    &mut |cur| {
                        let mut v = cur
                            .cloned()
                            .ok_or_else(|| ApiError::not_found(&rt, &dep.key.name))?;
                        if let Some(refs) = v["metadata"]["ownerReferences"].as_array_mut() {
                            refs.retain(|r| r["uid"] != owner_uid);
                        }
                        Ok(Mutation::Update(v))
                    },
                )
                .await;
        }
    }

    /// Remove one finalizer from an object (used by the garbage collector).
    pub async fn remove_finalizer(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        fin: &str,
    ) {
        let _ = self
            .update(
                rt,
                ns,
                name,
                Part::Main,
                &WriteOpts::default(),
                &mut |cur| {
                    let mut v = cur.cloned().ok_or_else(|| ApiError::not_found(rt, name))?;
                    if let Some(f) = v["metadata"]["finalizers"].as_array_mut() {
                        f.retain(|x| x != fin);
                    }
                    Ok(Mutation::Update(v))
                },
            )
            .await;
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

    fn after_write(
        &self,
        rt: &ResourceType,
        old: Option<&Value>,
        new: Option<&Value>,
        removed: bool,
    ) {
        let Some(new) = new else { return };
        match rt.builtin {
            Builtin::Crd => {
                let name = str_at(new, "name");
                if removed {
                    self.registry.remove_crd(name);
                } else if let Ok(types) = builtin::crd_types(new) {
                    self.registry.set_crd(name, types);
                }
            }
            Builtin::Namespace if old.is_none() => {
                let ns = str_at(new, "name").to_string();
                let _ = self.gc.send(GcWork::NewNamespace(ns));
            }
            _ => {}
        }
        if removed {
            let _ = self
                .gc
                .send(GcWork::OwnerGone(str_at(new, "uid").to_string()));
            return;
        }
        let owners = &meta(new)["ownerReferences"];
        if owners.is_array() && old.is_none_or(|o| &meta(o)["ownerReferences"] != owners) {
            let _ = self.gc.send(GcWork::CheckOwners(
                rt.storage.clone(),
                Key::new(str_at(new, "namespace"), str_at(new, "name")),
            ));
        }
        let started = meta(new)["deletionTimestamp"].is_string()
            && old.is_none_or(|o| !meta(o)["deletionTimestamp"].is_string());
        if started {
            let _ = self.gc.send(GcWork::Finalize(
                rt.storage.clone(),
                Key::new(str_at(new, "namespace"), str_at(new, "name")),
            ));
        }
    }
}

/// `v` without its status (and without `metadata.managedFields` when `no_managed`): the part of
/// a stored object a status write keeps, copied without the parts it replaces.
fn clone_but_status(v: &Value, no_managed: bool) -> Value {
    let Some(m) = v.as_object() else {
        return v.clone();
    };
    let mut out = Map::new();
    for (k, x) in m {
        match (k.as_str(), x) {
            ("status", _) => {}
            ("metadata", Value::Object(md)) if no_managed => {
                let md: Map<String, Value> = md
                    .iter()
                    .filter(|(f, _)| *f != "managedFields")
                    .map(|(f, y)| (f.clone(), y.clone()))
                    .collect();
                out.insert(k.clone(), Value::Object(md));
            }
            _ => {
                out.insert(k.clone(), x.clone());
            }
        }
    }
    Value::Object(out)
}

fn obj_mut_v<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    obj_mut(v, key);
    &mut v[key]
}

/// Finalizer of foreground deletion.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer the API server puts on CRDs.
pub const CRD_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Whether two versions of an object differ outside metadata, type and (where it is a
/// subresource) status: what bumps `metadata.generation`. Compared in place, not copied.
fn spec_changed(rt: &ResourceType, a: &Value, b: &Value) -> bool {
    let empty = Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let counts = |k: &String| {
        !(matches!(k.as_str(), "metadata" | "apiVersion" | "kind") || rt.status && k == "status")
    };
    a.iter().filter(|(k, _)| counts(k)).count() != b.iter().filter(|(k, _)| counts(k)).count()
        || a.iter()
            .filter(|(k, _)| counts(k))
            .any(|(k, v)| b.get(k) != Some(v))
}

fn generate_name(prefix: &str) -> String {
    use rand::RngExt;
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHA[rng.random_range(0..ALPHA.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

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

//! Create and update (the GuaranteedUpdate loop), what an update carries over from the stored
//! object, and what every committed write sets off (CRD registration, garbage collection).

use serde_json::{Map, Value, json};

use super::{
    Body, Mutation, Part, Shared, WriteOpts, Written, finalizers, key_for, meta, now, str_at,
};
use crate::apiserver::admission::{self, Attributes, Operation};
use crate::apiserver::builtin;
use crate::apiserver::error::{ApiError, FieldError};
use crate::apiserver::gc::GcWork;
use crate::apiserver::resources::{Builtin, ResourceType};
use crate::apiserver::schema::obj_mut;
use crate::apiserver::store::{CommitError, Key, Stored, Write};

impl Shared {
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

    pub(super) fn after_write(
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

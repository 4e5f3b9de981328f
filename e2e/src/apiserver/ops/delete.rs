//! Delete with preconditions, grace periods, finalizers and propagation; and the garbage
//! collector's helpers (purge, orphaning, finalizer removal).

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::{
    Body, DeleteOpts, Deleted, FOREGROUND, Mutation, Part, Shared, WriteOpts, finalizers, key_for,
    meta, str_at, time_plus,
};
use crate::apiserver::admission::{self, Attributes, Operation};
use crate::apiserver::builtin;
use crate::apiserver::error::ApiError;
use crate::apiserver::gc::GcWork;
use crate::apiserver::resources;
use crate::apiserver::resources::{Builtin, ResourceType};
use crate::apiserver::schema::obj_mut;
use crate::apiserver::store::{CommitError, Key, Write};

impl Shared {
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
    pub fn purge(&self, gr: &resources::GroupResource, key: &Key) {
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
}

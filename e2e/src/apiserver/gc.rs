//! The controllers a real control plane runs that API clients can observe: the garbage
//! collector (background cascade, dangling owner references, foreground deletion), namespace
//! deletion (content first, then the namespace), CRD deletion (instances first) and each new
//! namespace's `default` ServiceAccount.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::ops::{CRD_FINALIZER, DeleteOpts, FOREGROUND, Part, Shared, WriteOpts};
use super::resources::{Builtin, GroupResource};
use super::store::Key;

/// Work for the collector.
#[derive(Debug)]
pub enum GcWork {
    /// An object with this UID is gone: collect its dependents.
    OwnerGone(String),
    /// An object got owner references: collect it if none of its owners exists.
    CheckOwners(GroupResource, Key),
    /// Deletion started: drive namespaces, CRDs and foreground deletion to completion.
    Finalize(GroupResource, Key),
    /// A namespace was created.
    NewNamespace(String),
}

/// Run the collector until shutdown.
pub async fn run(sh: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<GcWork>) {
    let mut pending: HashSet<(GroupResource, Key)> = HashSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut shutdown = sh.shutdown.clone();
    loop {
        tokio::select! {
            w = rx.recv() => match w {
                Some(w) => handle(&sh, w, &mut pending).await,
                None => return,
            },
            _ = tick.tick(), if !pending.is_empty() => {
                let items: Vec<_> = pending.iter().cloned().collect();
                for (gr, key) in items {
                    if finalize(&sh, &gr, &key).await {
                        pending.remove(&(gr, key));
                    }
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Do the work queued while the server was being set up (the built-in namespaces' `default`
/// ServiceAccounts) before it serves, so a client's first look sees a settled store, as it
/// does on a real cluster that has been up for a while.
pub async fn settle(sh: &Shared, rx: &mut mpsc::UnboundedReceiver<GcWork>) {
    let mut pending = HashSet::new();
    while let Ok(w) = rx.try_recv() {
        handle(sh, w, &mut pending).await;
    }
    debug_assert!(pending.is_empty(), "startup queues no deletions");
}

async fn handle(sh: &Shared, w: GcWork, pending: &mut HashSet<(GroupResource, Key)>) {
    match w {
        GcWork::OwnerGone(uid) => {
            for dep in sh.store.dependents(&uid) {
                collect_if_orphaned(sh, &dep.gr, &dep.key).await;
            }
        }
        GcWork::CheckOwners(gr, key) => collect_if_orphaned(sh, &gr, &key).await,
        GcWork::Finalize(gr, key) => {
            if !finalize(sh, &gr, &key).await {
                pending.insert((gr, key));
            }
        }
        GcWork::NewNamespace(ns) => {
            let cat = sh.registry.catalog();
            if let Some(rt) = cat.get("", "v1", "serviceaccounts") {
                let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
                let _ = sh
                    .create(&rt, Some(&ns), sa, &WriteOpts::default(), false)
                    .await;
            }
        }
    }
}

fn ns_of(key: &Key) -> Option<&str> {
    (!key.ns.is_empty()).then_some(key.ns.as_str())
}

/// Delete an object whose owners are all gone; drop references to gone owners otherwise.
async fn collect_if_orphaned(sh: &Shared, gr: &GroupResource, key: &Key) {
    let Some(cur) = sh.store.collection(gr).get(key) else {
        return;
    };
    if cur.meta.owners.is_empty() {
        return;
    }
    let alive: Vec<bool> = cur
        .meta
        .owners
        .iter()
        .map(|u| sh.store.by_uid(u).is_some())
        .collect();
    let Some(rt) = sh.registry.catalog().by_storage(gr) else {
        return;
    };
    if alive.iter().all(|a| !a) {
        if !cur.meta.deleting {
            let _ = sh
                .delete(&rt, ns_of(key), &key.name, &DeleteOpts::default())
                .await;
        }
    } else if alive.iter().any(|a| !a) {
        let _ = sh
            .update(
                &rt,
                ns_of(key),
                &key.name,
                Part::Main,
                &WriteOpts::default(),
                &mut |c| {
                    let mut v: Value = c
                        .cloned()
                        .ok_or_else(|| super::error::ApiError::not_found(&rt, &key.name))?;
                    if let Some(refs) = v["metadata"]["ownerReferences"].as_array_mut() {
                        refs.retain(|r| {
                            r["uid"]
                                .as_str()
                                .is_some_and(|u| sh.store.by_uid(u).is_some())
                        });
                    }
                    Ok(super::ops::Mutation::Update(v))
                },
            )
            .await;
    }
}

/// One step of a pending deletion; true when nothing is left to do.
async fn finalize(sh: &Shared, gr: &GroupResource, key: &Key) -> bool {
    let Some(cur) = sh.store.collection(gr).get(key) else {
        return true;
    };
    if !cur.meta.deleting {
        return true;
    }
    let obj = cur.value();
    let Some(rt) = sh.registry.catalog().by_storage(gr) else {
        return true;
    };
    let fins: Vec<String> = obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    match rt.builtin {
        Builtin::Namespace => {
            let ns = key.name.as_str();
            let mut left = 0usize;
            for coll in sh.store.collections() {
                if coll.gr.resource == "namespaces" && coll.gr.group.is_empty() {
                    continue;
                }
                let page = coll.list(&sh.store, Some(ns), None, None, false, |_| true);
                for item in page.items {
                    left += 1;
                    if item.meta.deleting {
                        continue;
                    }
                    match sh.registry.catalog().by_storage(&coll.gr) {
                        Some(crt) => {
                            let _ = sh
                                .delete(&crt, Some(ns), &item.meta.name, &DeleteOpts::default())
                                .await;
                        }
                        None => sh.purge(&coll.gr, &Key::new(ns, &item.meta.name)),
                    }
                }
            }
            if left == 0 {
                sh.purge(gr, key);
                return true;
            }
            false
        }
        Builtin::Crd if fins.iter().any(|f| f == CRD_FINALIZER) => {
            let group = obj["spec"]["group"].as_str().unwrap_or("");
            let plural = obj["spec"]["names"]["plural"].as_str().unwrap_or("");
            let cgr = GroupResource::new(group, plural);
            let coll = sh.store.collection(&cgr);
            let page = coll.list(&sh.store, None, None, None, false, |_| true);
            if page.items.is_empty() {
                // Stop serving the kind before the CRD disappears, so no client sees the CRD
                // gone while its kind still answers.
                sh.registry.remove_crd(&key.name);
                sh.remove_finalizer(&rt, None, &key.name, CRD_FINALIZER)
                    .await;
                return true;
            }
            let crt = sh.registry.catalog().by_storage(&cgr);
            for item in page.items {
                if item.meta.deleting {
                    continue;
                }
                let ik = Key::new(&item.meta.ns, &item.meta.name);
                match &crt {
                    Some(crt) => {
                        let _ = sh
                            .delete(crt, ns_of(&ik), &ik.name, &DeleteOpts::default())
                            .await;
                    }
                    None => sh.purge(&cgr, &ik),
                }
            }
            false
        }
        _ if fins.iter().any(|f| f == FOREGROUND) => {
            let deps = sh.store.dependents(&cur.meta.uid);
            let mut blocking = 0;
            for dep in &deps {
                let Some(d) = sh.store.collection(&dep.gr).get(&dep.key) else {
                    continue;
                };
                blocking += 1;
                if !d.meta.deleting
                    && let Some(drt) = sh.registry.catalog().by_storage(&dep.gr)
                {
                    let _ = sh
                        .delete(
                            &drt,
                            ns_of(&dep.key),
                            &dep.key.name,
                            &DeleteOpts {
                                propagation: Some("Foreground".into()),
                                ..Default::default()
                            },
                        )
                        .await;
                }
            }
            if blocking == 0 {
                sh.remove_finalizer(&rt, ns_of(key), &key.name, FOREGROUND)
                    .await;
                return true;
            }
            false
        }
        _ => true,
    }
}

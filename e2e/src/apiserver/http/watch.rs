//! Watches: events filtered to the watcher's scope, bookmarks, and the chunked stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body as HttpBody;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use super::Req;
use super::format::{Format, View, negotiate};
use super::list::selectors;
use crate::apiserver::builtin;
use crate::apiserver::error;
use crate::apiserver::error::ApiError;
use crate::apiserver::ops::Shared;
use crate::apiserver::resources::ResourceType;
use crate::apiserver::selectors::{FieldSelector, Selectors};
use crate::apiserver::store;
use crate::apiserver::store::{EventType, Meta, Since, watch_frame};
use crate::apiserver::table;

fn status_frame(e: &ApiError) -> Bytes {
    watch_frame("ERROR", e.status().to_string().as_bytes())
}

struct WatchCtx {
    served: Arc<ResourceType>,
    view: View,
    ns: Option<String>,
    sel: Selectors,
    fmt: Format,
    sent_columns: bool,
}

impl WatchCtx {
    fn in_scope(&self, m: &Meta) -> bool {
        self.ns.as_deref().is_none_or(|n| &*m.ns == n) && self.sel.matches(m)
    }

    fn frame(&mut self, typ: &str, obj: &[u8], natural: Option<&store::Event>) -> Bytes {
        if let (Format::Object, View::Plain, Some(ev)) = (&self.fmt, self.view, natural)
            && ev.typ.as_str() == typ
        {
            return ev.frame();
        }
        if let (Format::Object, View::Plain) = (&self.fmt, self.view) {
            return watch_frame(typ, obj);
        }
        let v: Value = serde_json::from_slice(obj).unwrap_or(Value::Null);
        let v = self.view.out(v);
        let out = match &self.fmt {
            Format::Object => v,
            Format::Partial => table::partial(&v),
            Format::Table(av, include) => {
                let with = !self.sent_columns;
                self.sent_columns = true;
                let rv = v["metadata"]["resourceVersion"].clone();
                table::table(
                    &self.served,
                    std::slice::from_ref(&v),
                    json!({"resourceVersion": rv}),
                    with,
                    av,
                    *include,
                )
            }
        };
        watch_frame(typ, out.to_string().as_bytes())
    }

    fn event(&mut self, ev: &store::Event) -> Option<Bytes> {
        let cur = ev.typ != EventType::Deleted && self.in_scope(&ev.obj.meta);
        let old = match ev.typ {
            EventType::Added => false,
            EventType::Modified => ev.prev.as_ref().is_some_and(|p| self.in_scope(&p.meta)),
            EventType::Deleted => self.in_scope(&ev.obj.meta),
        };
        match (cur, old) {
            (true, false) => Some(self.frame("ADDED", &ev.obj.bytes, Some(ev))),
            (true, true) => Some(self.frame("MODIFIED", &ev.obj.bytes, Some(ev))),
            (false, true) if ev.typ == EventType::Deleted => {
                Some(self.frame("DELETED", &ev.obj.bytes, Some(ev)))
            }
            (false, true) => {
                // Stopped matching: DELETED with the previous state at this event's version.
                let prev = ev.prev.as_ref()?;
                let mut v: Value = serde_json::from_slice(&prev.bytes).ok()?;
                v["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                let bytes = serde_json::to_vec(&v).ok()?;
                Some(self.frame("DELETED", &bytes, None))
            }
            (false, false) => None,
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let (kind, av) = (self.served.kind.clone(), self.served.api_version());
        let mut md = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        watch_frame(
            "BOOKMARK",
            json!({"kind": kind, "apiVersion": av, "metadata": md})
                .to_string()
                .as_bytes(),
        )
    }
}

/// Most bytes of watch events sent as one chunk.
const CHUNK: usize = 64 * 1024;

struct WatchState {
    sh: Arc<Shared>,
    coll: Arc<store::Collection>,
    ctx: WatchCtx,
    notify: tokio::sync::watch::Receiver<u64>,
    drops: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    tick: tokio::time::Interval,
    last: u64,
    initial: std::collections::VecDeque<store::Stored>,
    initial_bookmark: bool,
    bookmarks: bool,
    done: bool,
}

fn join(parts: Vec<Bytes>) -> Bytes {
    if parts.len() == 1 {
        return parts.into_iter().next().expect("one part");
    }
    let mut v = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
    for p in parts {
        v.extend_from_slice(&p);
    }
    Bytes::from(v)
}

impl WatchState {
    /// The next chunk of the stream: every event available now (up to [`CHUNK`] bytes), or
    /// the next one to come; `None` ends the watch.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut parts: Vec<Bytes> = Vec::new();
        let mut size = 0;
        while let Some(s) = self.initial.pop_front() {
            let f = self.ctx.frame("ADDED", &s.bytes, None);
            size += f.len();
            parts.push(f);
            if size >= CHUNK {
                return Some(join(parts));
            }
        }
        if self.initial_bookmark {
            self.initial_bookmark = false;
            parts.push(self.ctx.bookmark(self.last, true));
        }
        loop {
            self.notify.borrow_and_update();
            let (ns, sel) = (&self.ctx.ns, &self.ctx.sel);
            let scope = |m: &Meta| ns.as_deref().is_none_or(|n| &*m.ns == n) && sel.matches(m);
            let relevant = |e: &store::Event| {
                scope(&e.obj.meta) || e.prev.as_ref().is_some_and(|p| scope(&p.meta))
            };
            match self.coll.since_matching(self.last, 256, relevant) {
                Since::Expired(oldest) => {
                    let e = ApiError::expired(format!(
                        "too old resource version: {} ({oldest})",
                        self.last
                    ));
                    parts.push(status_frame(&e));
                    self.done = true;
                    return Some(join(parts));
                }
                Since::Events(evs, read_to, more) => {
                    let full = more;
                    for ev in &evs {
                        if let Some(f) = self.ctx.event(ev) {
                            size += f.len();
                            parts.push(f);
                            if self.sh.faults.drop_watch_now() {
                                self.done = true;
                                return Some(join(parts));
                            }
                        }
                    }
                    self.last = read_to;
                    if full && size < CHUNK {
                        continue;
                    }
                }
            }
            if !parts.is_empty() {
                return Some(join(parts));
            }
            tokio::select! {
                r = self.notify.changed() => if r.is_err() { return None },
                _ = &mut self.deadline => return None,
                _ = self.tick.tick() => {
                    if self.bookmarks {
                        return Some(self.ctx.bookmark(self.last, false));
                    }
                }
                _ = self.drops.changed() => return None,
                _ = self.shutdown.changed() => return None,
            }
        }
    }
}

pub(super) fn watch(
    sh: &Arc<Shared>,
    rt: &ResourceType,
    served: &Arc<ResourceType>,
    view: View,
    ns: Option<&str>,
    name: Option<&str>,
    req: &Req,
) -> Result<Response, ApiError> {
    let fmt = negotiate(req)?;
    let mut sel = selectors(req, served)?;
    if let Some(n) = name {
        let extra = FieldSelector::parse(&format!("metadata.name={n}"), &[], false)
            .map_err(ApiError::bad_request)?;
        sel.fields = if sel.fields.is_empty() {
            extra
        } else {
            let raw = format!("{},metadata.name={n}", req.q("fieldSelector").unwrap_or(""));
            FieldSelector::parse(
                &raw,
                builtin::selectable_fields(served),
                served.crd.is_some(),
            )
            .map_err(ApiError::bad_request)?
        };
    }
    let send_initial = req.flag("sendInitialEvents");
    let bookmarks = req.flag("allowWatchBookmarks");
    if send_initial && req.q("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::invalid(
            served,
            "",
            &[error::FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        ));
    }
    let rv_param = req.q("resourceVersion").unwrap_or("");
    let timeout = match req.q("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t}")))?,
        ),
        None => Duration::from_secs(1800),
    };
    let coll = sh.store.collection(&rt.storage);
    let scope_ns = if rt.namespaced {
        ns.map(str::to_string)
    } else {
        None
    };
    let ctx = WatchCtx {
        served: served.clone(),
        view,
        ns: scope_ns.clone(),
        sel,
        fmt,
        sent_columns: false,
    };
    let (initial, start_rv) = if send_initial || rv_param.is_empty() || rv_param == "0" {
        let page = coll.list(&sh.store, scope_ns.as_deref(), None, None, false, |m| {
            ctx.sel.matches(m)
        });
        (page.items, page.rv)
    } else {
        let rv = rv_param
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv_param}")))?;
        (Vec::new(), rv)
    };
    let mut drops = sh.faults.drops();
    drops.borrow_and_update();
    let notify = match ctx.sel.fields.indexed(store::INDEXED_FIELDS) {
        Some((f, v)) => coll.subscribe_keyed(f, v),
        None => coll.subscribe(),
    };
    let st = WatchState {
        sh: sh.clone(),
        notify,
        coll,
        ctx,
        drops,
        shutdown: sh.shutdown.clone(),
        deadline: Box::pin(tokio::time::sleep(timeout)),
        tick: {
            let mut t = tokio::time::interval_at(
                tokio::time::Instant::now() + sh.bookmark_interval,
                sh.bookmark_interval,
            );
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        },
        last: start_rv,
        initial: initial.into(),
        initial_bookmark: send_initial && bookmarks,
        bookmarks,
        done: false,
    };
    // The stream runs in the connection's own task: no hop through a channel per event.
    let stream = futures::stream::unfold(st, |mut st| async move {
        let chunk = st.next_chunk().await?;
        Some((Ok::<Bytes, Infallible>(chunk), st))
    });
    let mut r = Response::new(HttpBody::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

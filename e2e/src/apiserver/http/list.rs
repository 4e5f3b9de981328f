//! Lists: label and field selectors, continue tokens, and list bodies spliced from stored
//! bytes.

use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::format::{Format, View, negotiate};
use super::{Req, response};
use crate::apiserver::builtin;
use crate::apiserver::error::ApiError;
use crate::apiserver::ops::Shared;
use crate::apiserver::resources;
use crate::apiserver::resources::{Builtin, ResourceType};
use crate::apiserver::selectors::{FieldSelector, LabelSelector, Selectors};
use crate::apiserver::store::{Key, Meta, Since};
use crate::apiserver::table;

pub(super) fn selectors(req: &Req, served: &ResourceType) -> Result<Selectors, ApiError> {
    let labels = LabelSelector::parse(req.q("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let raw = req.q("fieldSelector").unwrap_or("");
    let fields = if served.builtin == Builtin::EventV1 {
        FieldSelector::parse(raw, builtin::selectable_fields(served), false)
            .map_err(ApiError::bad_request)?;
        let translated: Vec<String> = raw
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|p| {
                let i = p.find(['=', '!']).unwrap_or(p.len());
                format!("{}{}", builtin::event_v1_field(&p[..i]), &p[i..])
            })
            .collect();
        let core = resources::ResourceType {
            builtin: Builtin::Event,
            ..clone_rt(served)
        };
        FieldSelector::parse(
            &translated.join(","),
            builtin::selectable_fields(&core),
            false,
        )
        .map_err(ApiError::bad_request)?
    } else {
        FieldSelector::parse(
            raw,
            builtin::selectable_fields(served),
            served.crd.is_some(),
        )
        .map_err(ApiError::bad_request)?
    };
    Ok(Selectors { labels, fields })
}

fn clone_rt(rt: &ResourceType) -> ResourceType {
    ResourceType {
        group: rt.group.clone(),
        version: rt.version.clone(),
        plural: rt.plural.clone(),
        singular: rt.singular.clone(),
        kind: rt.kind.clone(),
        namespaced: rt.namespaced,
        short_names: rt.short_names.clone(),
        categories: rt.categories.clone(),
        status: rt.status,
        generation: rt.generation,
        unconditional_update: rt.unconditional_update,
        create_on_update: rt.create_on_update,
        extra_subresources: rt.extra_subresources,
        builtin: rt.builtin,
        storage: rt.storage.clone(),
        crd: rt.crd.clone(),
    }
}

fn encode_continue(rv: u64, key: &Key) -> String {
    let start = if key.ns.is_empty() {
        key.name.clone()
    } else {
        format!("{}/{}", key.ns, key.name)
    };
    let doc = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{start}\u{0}")});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(doc.to_string())
}

fn decode_continue(tok: &str) -> Result<(u64, Key), ApiError> {
    let bad =
        || ApiError::bad_request("continue key is not valid: the continue token is malformed");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tok.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let start = v["start"]
        .as_str()
        .ok_or_else(bad)?
        .trim_end_matches('\u{0}');
    let key = match start.split_once('/') {
        Some((ns, name)) => Key::new(ns, name),
        None => Key::new("", start),
    };
    Ok((rv, key))
}

pub(super) fn list(
    sh: &Shared,
    rt: &ResourceType,
    served: &ResourceType,
    view: View,
    ns: Option<&str>,
    req: &Req,
) -> Result<Response, ApiError> {
    let fmt = negotiate(req)?;
    let sel = selectors(req, served)?;
    let limit = match req.q("limit") {
        Some(l) if !l.is_empty() => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?,
        )
        .filter(|l| *l > 0),
        _ => None,
    };
    let coll = sh.store.collection(&rt.storage);
    let (after, token_rv) = match req.q("continue") {
        Some(c) if !c.is_empty() => {
            let (rv, k) = decode_continue(c)?;
            (Some(k), Some(rv))
        }
        _ => (None, None),
    };
    let scope_ns = if rt.namespaced { ns } else { None };
    let page = coll.list(
        &sh.store,
        scope_ns,
        after.as_ref(),
        limit,
        sel.is_empty(),
        |m: &Meta| sel.matches(m),
    );
    if req.q("resourceVersionMatch") == Some("Exact")
        && let Some(want) = req.q("resourceVersion").and_then(|r| r.parse::<u64>().ok())
    {
        let changed_since = match coll.since(want, 1) {
            Since::Events(evs, _, _) => !evs.is_empty(),
            Since::Expired(_) => true,
        };
        if changed_since {
            return Err(ApiError::expired(format!(
                "too old resource version: {want} ({})",
                page.rv
            )));
        }
    }
    let rv = token_rv.unwrap_or(page.rv);
    let mut lm = json!({"resourceVersion": rv.to_string()});
    if let Some(k) = &page.next {
        lm["continue"] = json!(encode_continue(rv, k));
        if let Some(r) = page.remaining {
            lm["remainingItemCount"] = json!(r);
        }
    }
    let kind = format!("{}List", served.kind);
    let bytes = match (&fmt, view) {
        (Format::Object, View::Plain) => {
            let head = json!({"kind": kind, "apiVersion": served.api_version(), "metadata": lm})
                .to_string();
            let mut out = Vec::with_capacity(
                head.len() + page.items.iter().map(|s| s.bytes.len() + 1).sum::<usize>() + 16,
            );
            out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
            out.extend_from_slice(b",\"items\":[");
            for (i, s) in page.items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&s.bytes);
            }
            out.extend_from_slice(b"]}");
            out
        }
        _ => {
            let objs: Vec<Value> = page.items.iter().map(|s| view.out(s.value())).collect();
            let v = match &fmt {
                Format::Object => {
                    json!({"kind": kind, "apiVersion": served.api_version(), "metadata": lm, "items": objs})
                }
                Format::Partial => {
                    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": lm,
                    "items": objs.iter().map(table::partial).collect::<Vec<_>>()})
                }
                Format::Table(av, include) => table::table(served, &objs, lm, true, av, *include),
            };
            serde_json::to_vec(&v).unwrap_or_default()
        }
    };
    Ok(response(200, "application/json", bytes, &[]))
}

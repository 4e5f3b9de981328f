//! Content negotiation: which encoding a client asked for (object, Table,
//! PartialObjectMetadata), the events.k8s.io view of core Events, request bodies decoded and
//! responses encoded.

use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use super::{Req, response};
use crate::apiserver::builtin;
use crate::apiserver::error::ApiError;
use crate::apiserver::ops::Body;
use crate::apiserver::proto;
use crate::apiserver::resources::ResourceType;
use crate::apiserver::table;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Format {
    Object,
    Table(String, table::Include),
    Partial,
}

pub(super) fn negotiate(req: &Req) -> Result<Format, ApiError> {
    let accept = req.accept.as_str();
    // What each Table row carries as `object` (`includeObject`): metadata unless asked.
    let include = match req.q("includeObject") {
        Some("None") => table::Include::None,
        Some("Object") => table::Include::Object,
        _ => table::Include::Metadata,
    };
    for a in accept.split(',') {
        let a = a.trim();
        if a.contains("as=Table") && a.contains("g=meta.k8s.io") {
            let v = if a.contains("v=v1beta1") {
                "meta.k8s.io/v1beta1"
            } else {
                "meta.k8s.io/v1"
            };
            return Ok(Format::Table(v.into(), include));
        }
        if a.contains("as=PartialObjectMetadata") {
            return Ok(Format::Partial);
        }
        if a.is_empty()
            || a.starts_with("application/json")
            || a.starts_with("*/*")
            || a.starts_with("application/yaml")
            || a.starts_with("application/*")
        {
            return Ok(Format::Object);
        }
    }
    if accept.trim().is_empty() {
        return Ok(Format::Object);
    }
    Err(ApiError::new(
        406,
        "NotAcceptable",
        format!(
            "only the following media types are accepted: application/json, application/yaml (asked: {accept})"
        ),
    ))
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum View {
    Plain,
    EventV1,
}

impl View {
    pub(super) fn out(self, v: Value) -> Value {
        match self {
            View::Plain => v,
            View::EventV1 => builtin::event_to_v1(&v),
        }
    }
    pub(super) fn inp(self, v: Value) -> Value {
        match self {
            View::Plain => v,
            View::EventV1 => builtin::event_from_v1(&v),
        }
    }
}

pub(super) fn parse_body(req: &Req) -> Result<Value, ApiError> {
    if req.content_type.contains("protobuf") {
        return proto::decode(&req.body).map_err(|e| {
            ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"
            ))
        });
    }
    if req.body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    let v: Value = if req.content_type.contains("yaml") {
        serde_yaml::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(v)
}

/// The response body: a stored object as it is stored (shared, not copied), anything else
/// encoded.
fn render(rt: &ResourceType, view: View, fmt: &Format, body: &Body) -> Bytes {
    match (fmt, view, body) {
        (Format::Object, View::Plain, Body::Stored(s)) => s.bytes.clone(),
        _ => {
            let v = view.out(body.value());
            let out = match fmt {
                Format::Object => v,
                Format::Partial => table::partial(&v),
                Format::Table(av, include) => {
                    let rv = v["metadata"]["resourceVersion"].clone();
                    table::table(
                        rt,
                        std::slice::from_ref(&v),
                        json!({"resourceVersion": rv}),
                        true,
                        av,
                        *include,
                    )
                }
            };
            Bytes::from(serde_json::to_vec(&out).unwrap_or_default())
        }
    }
}

pub(super) fn obj_resp(
    code: u16,
    rt: &ResourceType,
    view: View,
    fmt: &Format,
    body: &Body,
    warnings: &[String],
) -> Response {
    response(
        code,
        "application/json",
        render(rt, view, fmt, body),
        warnings,
    )
}

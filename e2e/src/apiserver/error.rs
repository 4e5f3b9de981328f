//! API errors as the real API server reports them: a `v1.Status` body with the same `reason`,
//! `code`, `message` and `details` a kube-apiserver would send, so clients (kube-rs' `Error::Api`,
//! kubectl's error printer) behave exactly as against a real cluster.

use serde_json::{Value, json};

use super::resources::ResourceType;

/// One field-level validation failure (`field.Error` in Kubernetes).
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// Field path as Kubernetes prints it: `spec.containers[0].image`, `metadata.labels[app]`.
    pub field: String,
    /// What kind of failure.
    pub kind: FieldErrorKind,
    /// The offending value, printed as Kubernetes does (`"1h"`, `0`, `null`); `None` omits it.
    pub value: Option<Value>,
    /// Free-form detail after the value.
    pub detail: String,
}

/// The `field.ErrorType`s the double reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Required value`.
    Required,
    /// `Invalid value`.
    Invalid,
    /// `Invalid value` for a value of the wrong type (blocks CEL evaluation).
    TypeInvalid,
    /// `Unsupported value` (enum).
    NotSupported,
    /// `Too long`.
    TooLong,
    /// `Too many`.
    TooMany,
    /// `Duplicate value`.
    Duplicate,
    /// `Forbidden`.
    Forbidden,
}

impl FieldErrorKind {
    fn reason(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::TypeInvalid => "FieldValueTypeInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Forbidden => "FieldValueForbidden",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Self::Required => "Required value",
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::Duplicate => "Duplicate value",
            Self::Forbidden => "Forbidden",
        }
    }
}

impl FieldError {
    /// A field error with a value.
    pub fn new(
        kind: FieldErrorKind,
        field: impl Into<String>,
        value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            kind,
            value,
            detail: detail.into(),
        }
    }
    /// `field: Required value[: detail]`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Required, field, None, detail)
    }
    /// `field: Invalid value: VALUE: detail`.
    pub fn invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Invalid, field, Some(value), detail)
    }
    /// `field: Forbidden: detail`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Forbidden, field, None, detail)
    }

    /// The message without the field (`ErrorBody` in Kubernetes), as in `details.causes[].message`.
    pub fn body(&self) -> String {
        let mut s = self.kind.label().to_string();
        let shows_value = !matches!(
            self.kind,
            FieldErrorKind::Required | FieldErrorKind::Forbidden | FieldErrorKind::TooLong
        );
        if shows_value && let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(&go_value(v));
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Print a JSON value the way Go's field errors print a bad value: strings quoted, numbers and
/// booleans bare, `null` for null, JSON for composites.
pub fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Null => "\"null\"".to_string(),
        other => other.to_string(),
    }
}

/// An error the API answers with: HTTP status code, Status `reason`, message and details.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// `Status.reason` (`NotFound`, `Conflict`, `Invalid`, ...).
    pub reason: &'static str,
    /// Human readable message.
    pub message: String,
    /// `Status.details`, when the real server sends them.
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

fn details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": rt.plural });
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d
}

impl ApiError {
    /// A bare error.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }
    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }
    /// 404 for a path that serves nothing.
    pub fn not_found_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }
    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }
    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }
    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }
    /// 404 NotFound for an object: `pods "x" not found`.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", rt.qualified_resource()),
            details: Some(details(rt, name)),
        }
    }
    /// 404 NotFound for a missing namespace.
    pub fn namespace_not_found(ns: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("namespaces \"{ns}\" not found"),
            details: Some(json!({ "name": ns, "kind": "namespaces" })),
        }
    }
    /// 409 AlreadyExists.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} \"{name}\" already exists", rt.qualified_resource()),
            details: Some(details(rt, name)),
        }
    }
    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        Self::conflict_msg(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }
    /// 409 Conflict with a custom reason text.
    pub fn conflict_msg(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                rt.qualified_resource()
            ),
            details: Some(details(rt, name)),
        }
    }
    /// 422 Invalid with `details.causes`.
    pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        let agg = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            format!(
                "[{}]",
                errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({ "reason": e.kind.reason(), "message": e.body(), "field": e.field }))
            .collect();
        let mut d = json!({ "name": name, "kind": rt.kind, "causes": causes });
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        Self {
            code: 422,
            reason: "Invalid",
            message: format!("{} \"{name}\" is invalid: {agg}", rt.qualified_kind()),
            details: Some(d),
        }
    }
    /// 410 Expired: a watch or list from a resourceVersion outside the event window.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    /// 429 TooManyRequests.
    pub fn too_many_requests() -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        e.details = Some(json!({ "retryAfterSeconds": 1 }));
        e
    }
    /// 503 ServiceUnavailable.
    pub fn unavailable() -> Self {
        Self::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        )
    }

    /// The `v1.Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

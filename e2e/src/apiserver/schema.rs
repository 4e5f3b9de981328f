//! Structural schemas of CustomResourceDefinitions: pruning, defaulting and OpenAPI v3
//! validation (hand-written: no maintained Rust crate implements Kubernetes' structural-schema
//! dialect — `nullable`, `x-kubernetes-int-or-string`, list types, pruning — or its error
//! wording). CEL rules (`x-kubernetes-validations`) are [`super::cel`]'s.
//!
//! Error texts follow kube-apiserver 1.32 (`spec.x: Invalid value: 0: spec.x in body should be
//! greater than or equal to 1`).

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::error::{FieldError, FieldErrorKind, go_value};

/// `x-kubernetes-list-type`.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ListType {
    /// Replaced as a whole (the default).
    #[default]
    Atomic,
    /// Scalars, unique.
    Set,
    /// Objects keyed by these fields, unique.
    Map(Vec<String>),
}

/// One node of a structural schema.
#[derive(Debug, Default)]
pub struct Schema {
    typ: Option<String>,
    nullable: bool,
    properties: BTreeMap<String, Schema>,
    additional: Option<Box<Schema>>,
    additional_any: bool,
    items: Option<Box<Schema>>,
    required: Vec<String>,
    enum_values: Option<Vec<Value>>,
    pattern: Option<(String, Regex)>,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    maximum: Option<f64>,
    exclusive_maximum: bool,
    multiple_of: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    format: Option<String>,
    default: Option<Value>,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded: bool,
    /// List semantics for apply.
    pub list_type: ListType,
    /// `x-kubernetes-map-type: atomic`.
    pub atomic_map: bool,
    all_of: Vec<Schema>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    not: Option<Box<Schema>>,
}

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}
fn unum(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

/// Go's `%v` for a float64.
fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

impl Schema {
    /// Parse an `openAPIV3Schema` (already known to be an object).
    pub fn parse(v: &Value) -> Result<Schema, String> {
        Self::parse_at(v, "openAPIV3Schema")
    }

    fn parse_at(v: &Value, path: &str) -> Result<Schema, String> {
        let Some(o) = v.as_object() else {
            return Err(format!("{path}: must be an object"));
        };
        let mut s = Schema {
            typ: o.get("type").and_then(Value::as_str).map(str::to_string),
            nullable: o.get("nullable").and_then(Value::as_bool).unwrap_or(false),
            required: o
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            enum_values: o.get("enum").and_then(Value::as_array).cloned(),
            minimum: num(v, "minimum"),
            exclusive_minimum: o
                .get("exclusiveMinimum")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            maximum: num(v, "maximum"),
            exclusive_maximum: o
                .get("exclusiveMaximum")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            multiple_of: num(v, "multipleOf"),
            min_length: unum(v, "minLength"),
            max_length: unum(v, "maxLength"),
            min_items: unum(v, "minItems"),
            max_items: unum(v, "maxItems"),
            min_properties: unum(v, "minProperties"),
            max_properties: unum(v, "maxProperties"),
            format: o.get("format").and_then(Value::as_str).map(str::to_string),
            default: o.get("default").cloned(),
            int_or_string: o
                .get("x-kubernetes-int-or-string")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            preserve_unknown: o
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            embedded: o
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            atomic_map: o.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
            ..Default::default()
        };
        if let Some(p) = o.get("pattern").and_then(Value::as_str) {
            let re =
                Regex::new(p).map_err(|e| format!("{path}.pattern: Invalid value: {p:?}: {e}"))?;
            s.pattern = Some((p.to_string(), re));
        }
        s.list_type = match o.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(
                o.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| {
                        k.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            _ => ListType::Atomic,
        };
        if let Some(props) = o.get("properties").and_then(Value::as_object) {
            for (k, pv) in props {
                s.properties.insert(
                    k.clone(),
                    Self::parse_at(pv, &format!("{path}.properties[{k}]"))?,
                );
            }
        }
        match o.get("additionalProperties") {
            Some(Value::Bool(true)) => s.additional_any = true,
            Some(a @ Value::Object(_)) => {
                s.additional = Some(Box::new(Self::parse_at(
                    a,
                    &format!("{path}.additionalProperties"),
                )?))
            }
            _ => {}
        }
        if let Some(items) = o.get("items") {
            s.items = Some(Box::new(Self::parse_at(items, &format!("{path}.items"))?));
        }
        for (key, dst) in [
            ("allOf", &mut s.all_of),
            ("anyOf", &mut s.any_of),
            ("oneOf", &mut s.one_of),
        ] {
            if let Some(arr) = o.get(key).and_then(Value::as_array) {
                for (i, b) in arr.iter().enumerate() {
                    dst.push(Self::parse_at(b, &format!("{path}.{key}[{i}]"))?);
                }
            }
        }
        if let Some(n) = o.get("not") {
            s.not = Some(Box::new(Self::parse_at(n, &format!("{path}.not"))?));
        }
        Ok(s)
    }

    /// The schema of a child field (object property or map value).
    pub fn child(&self, field: &str) -> Option<&Schema> {
        self.properties.get(field).or(self.additional.as_deref())
    }

    /// The schema of list items.
    pub fn item(&self) -> Option<&Schema> {
        self.items.as_deref()
    }

    /// Whether this node is an object with declared properties (a "struct").
    pub fn is_struct(&self) -> bool {
        !self.properties.is_empty()
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// Fields of `ObjectMeta`; other keys under `metadata` are dropped, as decoding into the Go type
/// drops them.
pub const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Prune unknown fields and apply defaults to a whole custom resource. Returns the paths of
/// pruned fields.
pub fn prune_and_default(schema: &Schema, obj: &mut Value) -> Vec<String> {
    let mut pruned = Vec::new();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, _| {
            let keep = OBJECT_META_FIELDS.contains(&k.as_str());
            if !keep {
                pruned.push(format!("metadata.{k}"));
            }
            keep
        });
    }
    walk_prune(schema, obj, "", &mut pruned, true);
    pruned
}

fn walk_prune(s: &Schema, v: &mut Value, path: &str, pruned: &mut Vec<String>, root: bool) {
    match v {
        Value::Object(m) => {
            let keep_meta = root || s.embedded;
            if !s.preserve_unknown && s.additional.is_none() && !s.additional_any {
                m.retain(|k, _| {
                    let keep = s.properties.contains_key(k)
                        || (keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
                    if !keep {
                        pruned.push(join(path, k));
                    }
                    keep
                });
            }
            for (k, ps) in &s.properties {
                if keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let missing = match m.get(k) {
                    None => true,
                    Some(Value::Null) => !ps.nullable && ps.default.is_some(),
                    _ => false,
                };
                if missing && let Some(d) = &ps.default {
                    m.insert(k.clone(), d.clone());
                }
                if let Some(child) = m.get_mut(k) {
                    walk_prune(ps, child, &join(path, k), pruned, false);
                }
            }
            if let Some(a) = &s.additional {
                for (k, child) in m.iter_mut() {
                    if !s.properties.contains_key(k) {
                        walk_prune(a, child, &format!("{path}[{k}]"), pruned, false);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = &s.items {
                for (i, item) in items.iter_mut().enumerate() {
                    if item.is_null()
                        && !is.nullable
                        && let Some(d) = &is.default
                    {
                        *item = d.clone();
                    }
                    walk_prune(is, item, &format!("{path}[{i}]"), pruned, false);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(s: &Schema, v: &Value) -> bool {
    if v.is_null() {
        return s.nullable || (s.typ.is_none() && !s.int_or_string);
    }
    if s.int_or_string {
        return matches!(type_name(v), "integer" | "string");
    }
    match s.typ.as_deref() {
        None => true,
        Some("number") => v.is_number(),
        Some(t) => type_name(v) == t,
    }
}

fn check_format(f: &str, s: &str) -> bool {
    match f {
        "date-time" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => uuid::Uuid::parse_str(s).is_ok(),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        _ => true,
    }
}

/// Validate a pruned and defaulted custom resource against its schema.
pub fn validate(s: &Schema, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    validate_node(s, v, path, errs, true);
}

/// Validate an update of a custom resource with ratcheting at top-level-field granularity:
/// the top-level fields `unchanged` accepts are not walked (their errors would be dropped:
/// the object was admitted with them), everything else is checked as by [`validate`].
pub fn validate_changed(
    s: &Schema,
    v: &Value,
    errs: &mut Vec<FieldError>,
    unchanged: &dyn Fn(&str) -> bool,
) {
    validate_at(s, v, "", errs, true, Some(unchanged));
}

fn validate_node(s: &Schema, v: &Value, path: &str, errs: &mut Vec<FieldError>, root: bool) {
    validate_at(s, v, path, errs, root, None);
}

fn validate_at(
    s: &Schema,
    v: &Value,
    path: &str,
    errs: &mut Vec<FieldError>,
    root: bool,
    unchanged: Option<&dyn Fn(&str) -> bool>,
) {
    let skip = |k: &str| unchanged.is_some_and(|u| u(k));
    if !type_ok(s, v) {
        let want = if s.int_or_string {
            "integer-or-string".to_string()
        } else {
            s.typ.clone().unwrap_or_default()
        };
        let got = type_name(v);
        errs.push(FieldError::new(
            FieldErrorKind::TypeInvalid,
            path,
            Some(Value::String(got.into())),
            format!("{path} in body must be of type {want}: \"{got}\""),
        ));
        return;
    }
    if v.is_null() {
        return;
    }
    if let Some(values) = &s.enum_values
        && !values.contains(v)
    {
        let list = values.iter().map(go_value).collect::<Vec<_>>().join(", ");
        errs.push(FieldError::new(
            FieldErrorKind::NotSupported,
            path,
            Some(v.clone()),
            format!("supported values: {list}"),
        ));
    }
    match v {
        Value::String(st) => {
            let len = st.chars().count() as u64;
            if let Some(max) = s.max_length
                && len > max
            {
                errs.push(FieldError::new(
                    FieldErrorKind::TooLong,
                    path,
                    None,
                    format!("may not be longer than {max}"),
                ));
            }
            if let Some(min) = s.min_length
                && len < min
            {
                errs.push(FieldError::invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some((p, re)) = &s.pattern
                && !re.is_match(st)
            {
                errs.push(FieldError::invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should match '{p}'"),
                ));
            }
            if let Some(f) = &s.format
                && !check_format(f, st)
            {
                errs.push(FieldError::invalid(
                    path,
                    v.clone(),
                    format!("{path} in body must be of type {f}: {}", go_value(v)),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(m) = s.multiple_of
                && m != 0.0
                && (x / m).fract() != 0.0
            {
                errs.push(FieldError::invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should be a multiple of {}", fmt_num(m)),
                ));
            }
            if let Some(max) = s.maximum
                && (x > max || (s.exclusive_maximum && x >= max))
            {
                let op = if s.exclusive_maximum {
                    "less than"
                } else {
                    "less than or equal to"
                };
                errs.push(FieldError::invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should be {op} {}", fmt_num(max)),
                ));
            }
            if let Some(min) = s.minimum
                && (x < min || (s.exclusive_minimum && x <= min))
            {
                let op = if s.exclusive_minimum {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                errs.push(FieldError::invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should be {op} {}", fmt_num(min)),
                ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = s.max_items
                && n > max
            {
                errs.push(FieldError::new(
                    FieldErrorKind::TooMany,
                    path,
                    Some(Value::from(n)),
                    format!("must have at most {max} items"),
                ));
            }
            if let Some(min) = s.min_items
                && n < min
            {
                errs.push(FieldError::invalid(
                    path,
                    Value::from(n),
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            match &s.list_type {
                ListType::Set => {
                    for (i, it) in items.iter().enumerate() {
                        if items[..i].contains(it) {
                            errs.push(FieldError::new(
                                FieldErrorKind::Duplicate,
                                format!("{path}[{i}]"),
                                Some(it.clone()),
                                "",
                            ));
                        }
                    }
                }
                ListType::Map(keys) => {
                    let key_of = |it: &Value| -> Value {
                        Value::Object(keys.iter().map(|k| (k.clone(), it[k].clone())).collect())
                    };
                    for (i, it) in items.iter().enumerate() {
                        let k = key_of(it);
                        if items[..i].iter().any(|o| key_of(o) == k) {
                            errs.push(FieldError::new(
                                FieldErrorKind::Duplicate,
                                format!("{path}[{i}]"),
                                Some(k),
                                "",
                            ));
                        }
                    }
                }
                ListType::Atomic => {}
            }
            if let Some(is) = &s.items {
                for (i, it) in items.iter().enumerate() {
                    validate_node(is, it, &format!("{path}[{i}]"), errs, false);
                }
            }
        }
        Value::Object(m) => {
            for r in &s.required {
                if root && matches!(r.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if !m.contains_key(r) && !skip(r) {
                    errs.push(FieldError::required(join(path, r), ""));
                }
            }
            let nprops = m.len() as u64;
            if let Some(max) = s.max_properties
                && nprops > max
            {
                errs.push(FieldError::new(
                    FieldErrorKind::TooMany,
                    path,
                    Some(Value::from(nprops)),
                    format!("must have at most {max} items"),
                ));
            }
            if let Some(min) = s.min_properties
                && nprops < min
            {
                errs.push(FieldError::invalid(
                    path,
                    Value::from(nprops),
                    format!("{path} in body should have at least {min} properties"),
                ));
            }
            for (k, child) in m {
                if (root || s.embedded) && matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                {
                    continue;
                }
                if let Some(ps) = s.properties.get(k) {
                    if skip(k) {
                        continue;
                    }
                    validate_node(ps, child, &join(path, k), errs, false);
                } else if let Some(a) = &s.additional {
                    validate_node(a, child, &format!("{path}[{k}]"), errs, false);
                }
            }
        }
        _ => {}
    }
    for b in &s.all_of {
        validate_node(b, v, path, errs, false);
    }
    if !s.any_of.is_empty() {
        let ok = s.any_of.iter().any(|b| {
            let mut e = Vec::new();
            validate_node(b, v, path, &mut e, false);
            e.is_empty()
        });
        if !ok {
            errs.push(FieldError::invalid(
                path,
                v.clone(),
                format!("{path} in body must validate at least one schema (anyOf)"),
            ));
        }
    }
    if !s.one_of.is_empty() {
        let n = s
            .one_of
            .iter()
            .filter(|b| {
                let mut e = Vec::new();
                validate_node(b, v, path, &mut e, false);
                e.is_empty()
            })
            .count();
        if n != 1 {
            errs.push(FieldError::invalid(
                path,
                v.clone(),
                format!("{path} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if let Some(n) = &s.not {
        let mut e = Vec::new();
        validate_node(n, v, path, &mut e, false);
        if e.is_empty() {
            errs.push(FieldError::invalid(
                path,
                v.clone(),
                format!("{path} in body must not validate the schema (not)"),
            ));
        }
    }
}

/// A JSON object's map, creating it when absent.
pub fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.get(key).is_some_and(Value::is_object) {
        v[key] = Value::Object(Map::new());
    }
    v[key].as_object_mut().expect("just made an object")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse(&json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1.0, "maximum": 10.0},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "name": {"type": "string", "maxLength": 3, "pattern": "^[a-z]+$"},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "io": {"x-kubernetes-int-or-string": true}
                    }
                }
            }
        }))
        .unwrap()
    }

    fn errors(v: &mut Value) -> Vec<String> {
        let s = schema();
        prune_and_default(&s, v);
        let mut e = Vec::new();
        validate(&s, v, "", &mut e);
        e.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn updates_skip_unchanged_top_level_fields_only() {
        let s = Schema::parse(&json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer", "maximum": 10.0}}},
                "status": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10.0}}}
            }
        }))
        .unwrap();
        let check = |new: &Value, old: &Value| {
            let mut e = Vec::new();
            validate_changed(&s, new, &mut e, &|k: &str| old.get(k) == new.get(k));
            e.iter().map(|e| e.field.clone()).collect::<Vec<_>>()
        };
        // Admitted before the rule (or by a looser one): a status write keeps it.
        let old = json!({"spec": {"size": 11}, "status": {"n": 1}});
        assert!(check(&json!({"spec": {"size": 11}, "status": {"n": 2}}), &old).is_empty());
        // The changed field is checked, whatever else is unchanged.
        assert_eq!(
            check(&json!({"spec": {"size": 11}, "status": {"n": 12}}), &old),
            ["status.n"]
        );
        assert_eq!(
            check(&json!({"spec": {"size": 12}, "status": {"n": 1}}), &old),
            ["spec.size"]
        );
        // A required field missing before and after is not reported; one removed is.
        let old = json!({"status": {"n": 1}});
        assert!(check(&json!({"status": {"n": 2}}), &old).is_empty());
        assert_eq!(
            check(&json!({"status": {"n": 2}}), &json!({"spec": {}})),
            ["spec"]
        );
        // Same as a full validation of a new object.
        let mut full = Vec::new();
        validate(
            &s,
            &json!({"spec": {"size": 12}, "status": {"n": 1}}),
            "",
            &mut full,
        );
        assert_eq!(full.len(), 1);
    }

    #[test]
    fn prunes_defaults_and_validates() {
        let mut v = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "junk": 1},
            "spec": {"size": 3, "extra": true, "free": {"any": {"thing": 1}}, "io": "5"}, "top": 1});
        let pruned = prune_and_default(&schema(), &mut v);
        assert_eq!(pruned, vec!["metadata.junk", "top", "spec.extra"]);
        assert_eq!(v["spec"]["mode"], "a");
        assert_eq!(v["spec"]["free"]["any"]["thing"], 1);
        assert!(errors(&mut v).is_empty());
    }

    #[test]
    fn error_texts_match_the_api_server() {
        let mut v = json!({"spec": {"size": 0, "mode": "c", "name": "ABCD", "tags": ["x", "x"], "io": true}});
        let e = errors(&mut v);
        assert!(e.contains(&"spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1".to_string()), "{e:?}");
        assert!(
            e.contains(
                &"spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"".to_string()
            ),
            "{e:?}"
        );
        assert!(
            e.contains(&"spec.name: Too long: may not be longer than 3".to_string()),
            "{e:?}"
        );
        assert!(
            e.contains(
                &"spec.name: Invalid value: \"ABCD\": spec.name in body should match '^[a-z]+$'"
                    .to_string()
            ),
            "{e:?}"
        );
        assert!(
            e.contains(&"spec.tags[1]: Duplicate value: \"x\"".to_string()),
            "{e:?}"
        );
        assert!(e.contains(&"spec.io: Invalid value: \"boolean\": spec.io in body must be of type integer-or-string: \"boolean\"".to_string()), "{e:?}");
        let mut v = json!({"spec": {}});
        assert_eq!(errors(&mut v), vec!["spec.size: Required value"]);
        let mut v = json!({"spec": {"size": "3"}});
        assert_eq!(
            errors(&mut v),
            vec![
                "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""
            ]
        );
    }
}

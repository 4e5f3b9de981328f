//! Decoding of the few protobuf request bodies kubectl sends for built-in kinds
//! (`kubectl create namespace|configmap|secret|serviceaccount` and evictions from
//! `kubectl drain`). Kubernetes wraps them in a `runtime.Unknown` envelope after the magic
//! `k8s\0`. Hand-written (a table of field numbers from Kubernetes' `generated.proto`) because
//! there is no maintained Rust crate with Kubernetes' protobuf schema that maps to its JSON
//! form; kinds outside the table are refused with 415, as a server would refuse an unknown
//! media type.

use base64::Engine;
use serde_json::{Map, Value, json};

#[derive(Clone, Copy)]
enum T {
    Str,
    Int,
    Bool,
    RepStr,
    MapStr,
    MapBytes,
    Time,
    Msg(&'static [F]),
    RepMsg(&'static [F]),
}

type F = (u64, &'static str, T);

const OWNER_REF: &[F] = &[
    (1, "kind", T::Str),
    (3, "name", T::Str),
    (4, "uid", T::Str),
    (5, "apiVersion", T::Str),
    (6, "controller", T::Bool),
    (7, "blockOwnerDeletion", T::Bool),
];

const OBJECT_META: &[F] = &[
    (1, "name", T::Str),
    (2, "generateName", T::Str),
    (3, "namespace", T::Str),
    (5, "uid", T::Str),
    (6, "resourceVersion", T::Str),
    (7, "generation", T::Int),
    (8, "creationTimestamp", T::Time),
    (9, "deletionTimestamp", T::Time),
    (10, "deletionGracePeriodSeconds", T::Int),
    (11, "labels", T::MapStr),
    (12, "annotations", T::MapStr),
    (13, "ownerReferences", T::RepMsg(OWNER_REF)),
    (14, "finalizers", T::RepStr),
];

const NAMESPACE_SPEC: &[F] = &[(1, "finalizers", T::RepStr)];

const NAMESPACE: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "spec", T::Msg(NAMESPACE_SPEC)),
];

const CONFIG_MAP: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "data", T::MapStr),
    (3, "binaryData", T::MapBytes),
    (4, "immutable", T::Bool),
];

const SECRET: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "data", T::MapBytes),
    (3, "type", T::Str),
    (4, "stringData", T::MapStr),
    (5, "immutable", T::Bool),
];

const OBJECT_REF: &[F] = &[
    (1, "kind", T::Str),
    (2, "namespace", T::Str),
    (3, "name", T::Str),
    (4, "uid", T::Str),
    (5, "apiVersion", T::Str),
    (6, "resourceVersion", T::Str),
    (7, "fieldPath", T::Str),
];

const LOCAL_REF: &[F] = &[(1, "name", T::Str)];

const SERVICE_ACCOUNT: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "secrets", T::RepMsg(OBJECT_REF)),
    (3, "imagePullSecrets", T::RepMsg(LOCAL_REF)),
    (4, "automountServiceAccountToken", T::Bool),
];

const PRECONDITIONS: &[F] = &[(1, "uid", T::Str), (2, "resourceVersion", T::Str)];

const DELETE_OPTIONS: &[F] = &[
    (1, "gracePeriodSeconds", T::Int),
    (2, "preconditions", T::Msg(PRECONDITIONS)),
    (3, "orphanDependents", T::Bool),
    (4, "propagationPolicy", T::Str),
    (5, "dryRun", T::RepStr),
];

const EVICTION: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "deleteOptions", T::Msg(DELETE_OPTIONS)),
];

fn schema_of(api_version: &str, kind: &str) -> Option<&'static [F]> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("policy/v1", "Eviction") => EVICTION,
        ("v1", "DeleteOptions") | ("meta.k8s.io/v1", "DeleteOptions") => DELETE_OPTIONS,
        _ => return None,
    })
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.i).ok_or("truncated varint")?;
            self.i += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.varint()? as usize;
        let s = self.b.get(self.i..self.i + n).ok_or("truncated field")?;
        self.i += n;
        Ok(s)
    }
    fn skip(&mut self, wire: u64) -> Result<(), String> {
        match wire {
            0 => {
                self.varint()?;
            }
            1 => self.i += 8,
            2 => {
                self.bytes()?;
            }
            5 => self.i += 4,
            w => return Err(format!("unsupported wire type {w}")),
        }
        Ok(())
    }
    fn done(&self) -> bool {
        self.i >= self.b.len()
    }
}

fn utf8(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| e.to_string())
}

fn map_entry(b: &[u8], bytes: bool) -> Result<(String, Value), String> {
    let mut r = Reader { b, i: 0 };
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    while !r.done() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 2) => k = utf8(r.bytes()?)?,
            (2, 2) => {
                let raw = r.bytes()?;
                v = if bytes {
                    json!(base64::engine::general_purpose::STANDARD.encode(raw))
                } else {
                    json!(utf8(raw)?)
                };
            }
            (_, w) => r.skip(w)?,
        }
    }
    Ok((k, v))
}

fn time(b: &[u8]) -> Result<Value, String> {
    let mut r = Reader { b, i: 0 };
    let mut secs = 0i64;
    while !r.done() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 0) => secs = r.varint()? as i64,
            (_, w) => r.skip(w)?,
        }
    }
    let t = jiff::Timestamp::from_second(secs).map_err(|e| e.to_string())?;
    Ok(json!(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn message(b: &[u8], fields: &[F]) -> Result<Value, String> {
    let mut out = Map::new();
    let mut r = Reader { b, i: 0 };
    while !r.done() {
        let key = r.varint()?;
        let (num, wire) = (key >> 3, key & 7);
        let Some((_, name, t)) = fields.iter().find(|(n, _, _)| *n == num) else {
            r.skip(wire)?;
            continue;
        };
        let name = (*name).to_string();
        match (*t, wire) {
            (T::Str, 2) => {
                // Go marshals empty non-pointer strings; JSON omits them.
                let v = utf8(r.bytes()?)?;
                if !v.is_empty() {
                    out.insert(name, json!(v));
                }
            }
            (T::Int, 0) => {
                out.insert(name, json!(r.varint()? as i64));
            }
            (T::Bool, 0) => {
                out.insert(name, json!(r.varint()? != 0));
            }
            (T::RepStr, 2) => {
                let s = utf8(r.bytes()?)?;
                push(&mut out, name, json!(s));
            }
            (T::MapStr | T::MapBytes, 2) => {
                let (k, v) = map_entry(r.bytes()?, matches!(t, T::MapBytes))?;
                if let Value::Object(m) = out.entry(name).or_insert_with(|| json!({})) {
                    m.insert(k, v);
                }
            }
            (T::Time, 2) => {
                let t = time(r.bytes()?)?;
                if t != json!("0001-01-01T00:00:00Z") {
                    out.insert(name, t);
                }
            }
            (T::Msg(f), 2) => {
                out.insert(name, message(r.bytes()?, f)?);
            }
            (T::RepMsg(f), 2) => {
                let m = message(r.bytes()?, f)?;
                push(&mut out, name, m);
            }
            (_, w) => return Err(format!("field {name}: unexpected wire type {w}")),
        }
    }
    Ok(Value::Object(out))
}

fn push(out: &mut Map<String, Value>, name: String, v: Value) {
    if let Value::Array(a) = out.entry(name).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

/// Decode a `application/vnd.kubernetes.protobuf` body into the JSON form of the object.
/// `Err` names what is not supported or malformed.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or("missing the k8s protobuf magic prefix")?;
    let mut r = Reader { b: rest, i: 0 };
    let (mut api_version, mut kind, mut raw): (String, String, &[u8]) =
        (String::new(), String::new(), &[]);
    while !r.done() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 2) => {
                let tm = message(
                    r.bytes()?,
                    &[(1, "apiVersion", T::Str), (2, "kind", T::Str)],
                )?;
                api_version = tm["apiVersion"].as_str().unwrap_or("").to_string();
                kind = tm["kind"].as_str().unwrap_or("").to_string();
            }
            (2, 2) => raw = r.bytes()?,
            (_, w) => r.skip(w)?,
        }
    }
    let fields = schema_of(&api_version, &kind).ok_or_else(|| {
        format!("protobuf bodies of {api_version} {kind} are not supported; send JSON")
    })?;
    let mut v = message(raw, fields)?;
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((num << 3) | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [
            field(1, b"cfg"),
            field(11, &[field(1, b"app"), field(2, b"web")].concat()),
        ]
        .concat();
        let cm = [
            field(1, &meta),
            field(2, &[field(1, b"k"), field(2, b"v")].concat()),
        ]
        .concat();
        let tm = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &tm), field(2, &cm)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "labels": {"app": "web"}}, "data": {"k": "v"}})
        );
        let tm = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &tm)].concat();
        assert!(decode(&body).unwrap_err().contains("not supported"));
    }
}

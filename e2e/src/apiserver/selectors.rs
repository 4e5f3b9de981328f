//! Label and field selectors, with the grammar of `k8s.io/apimachinery/pkg/labels` and
//! `pkg/fields`: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`
//! for labels; `f=v`, `f==v`, `f!=v` (comma = and) for fields.

use super::store::Meta;

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Exists,
    NotExists,
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector (an empty one matches everything).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<(String, Op)>);

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_label_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl LabelSelector {
    /// Parse `labelSelector`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_top_level(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(format!("found '', expected: identifier in {s:?}"));
            }
            let value_check = |v: &str| -> Result<String, String> {
                let v = v.trim();
                if valid_label_value(v) {
                    Ok(v.to_string())
                } else {
                    Err(format!(
                        "invalid label value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                    ))
                }
            };
            let set = |rest: &str| -> Result<Vec<String>, String> {
                let rest = rest.trim();
                let inner = rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| format!("found '{rest}', expected: '(' in selector {s:?}"))?;
                inner.split(',').map(value_check).collect()
            };
            let (key, op) = if let Some(k) = p.strip_prefix('!') {
                (k.trim().to_string(), Op::NotExists)
            } else if let Some((k, v)) = p.split_once("!=") {
                (k.trim().to_string(), Op::NotEq(value_check(v)?))
            } else if let Some((k, v)) = p.split_once("==") {
                (k.trim().to_string(), Op::Eq(value_check(v)?))
            } else if let Some((k, v)) = p.split_once('=') {
                (k.trim().to_string(), Op::Eq(value_check(v)?))
            } else if let Some((k, v)) = p.split_once(" notin ") {
                (k.trim().to_string(), Op::NotIn(set(v)?))
            } else if let Some((k, v)) = p.split_once(" in ") {
                (k.trim().to_string(), Op::In(set(v)?))
            } else if let Some((k, v)) = p.split_once('>') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid integer value {v:?} in selector {s:?}"))?;
                (k.trim().to_string(), Op::Gt(n))
            } else if let Some((k, v)) = p.split_once('<') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid integer value {v:?} in selector {s:?}"))?;
                (k.trim().to_string(), Op::Lt(n))
            } else {
                (p.to_string(), Op::Exists)
            };
            if !valid_label_key(&key) {
                return Err(format!("invalid label key {key:?} in selector {s:?}"));
            }
            reqs.push((key, op));
        }
        Ok(Self(reqs))
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether labels match.
    pub fn matches(&self, labels: &[(Box<str>, Box<str>)]) -> bool {
        let get = |k: &str| labels.iter().find(|(lk, _)| &**lk == k).map(|(_, v)| &**v);
        self.0.iter().all(|(k, op)| {
            let v = get(k);
            match op {
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Eq(x) => v == Some(x.as_str()),
                Op::NotEq(x) => v != Some(x.as_str()),
                Op::In(xs) => v.is_some_and(|v| xs.iter().any(|x| x == v)),
                Op::NotIn(xs) => v.is_none_or(|v| xs.iter().all(|x| x != v)),
                Op::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                Op::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }
}

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

fn unescape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl FieldSelector {
    /// Parse `fieldSelector`, checking every field is one of `supported` (plus metadata.name and
    /// metadata.namespace). `custom` selects the error wording of custom resources.
    pub fn parse(s: &str, supported: &[&str], custom: bool) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        // Split on unescaped commas.
        let mut parts = Vec::new();
        let mut cur = String::new();
        let mut esc = false;
        for c in s.chars() {
            if esc {
                cur.push('\\');
                cur.push(c);
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == ',' {
                parts.push(std::mem::take(&mut cur));
            } else {
                cur.push(c);
            }
        }
        parts.push(cur);
        for p in parts {
            let (f, eq, v) = if let Some((f, v)) = p.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = p.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = p.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: '{p}'; can't understand '{p}'"));
            };
            let f = f.trim();
            if f != "metadata.name" && f != "metadata.namespace" && !supported.contains(&f) {
                return Err(if custom {
                    format!(
                        "\"{f}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    )
                } else {
                    format!("field label not supported: {f}")
                });
            }
            reqs.push((f.to_string(), eq, unescape(v.trim())));
        }
        Ok(Self(reqs))
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object matches.
    pub fn matches(&self, meta: &Meta) -> bool {
        self.0.iter().all(|(f, eq, v)| {
            let actual = meta.field(f).unwrap_or("");
            (actual == v) == *eq
        })
    }
}

/// Both selectors of a request.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    /// labelSelector.
    pub labels: LabelSelector,
    /// fieldSelector.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether an object matches both.
    pub fn matches(&self, meta: &Meta) -> bool {
        self.labels.matches(&meta.labels) && self.fields.matches(meta)
    }
    /// Whether both are empty.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(Box<str>, Box<str>)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn label_selector_grammar() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&l);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db),tier notin (back)"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(!m("missing"));
        assert!(m("n>4"));
        assert!(!m("n<5"));
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a=b c").is_err());
    }

    #[test]
    fn field_selector_checks_fields() {
        let f = FieldSelector::parse(
            "spec.nodeName=n1,status.phase!=Failed",
            &["spec.nodeName", "status.phase"],
            false,
        )
        .unwrap();
        let meta = Meta {
            name: "p".into(),
            fields: vec![
                ("spec.nodeName", "n1".into()),
                ("status.phase", "Running".into()),
            ]
            .into(),
            ..Default::default()
        };
        assert!(f.matches(&meta));
        let err = FieldSelector::parse("spec.foo=x", &[], false).unwrap_err();
        assert_eq!(err, "field label not supported: spec.foo");
        let err = FieldSelector::parse("spec.foo=x", &[], true).unwrap_err();
        assert!(err.contains("is not a known field selector"));
        let empty_node = FieldSelector::parse("spec.nodeName=", &["spec.nodeName"], false).unwrap();
        assert!(empty_node.matches(&Meta::default()));
    }
}

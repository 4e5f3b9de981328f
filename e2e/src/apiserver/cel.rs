//! CEL validation rules of custom resources (`x-kubernetes-validations`): compiled once per CRD
//! version by `kube-cel`, evaluated here.
//!
//! The evaluation follows kube-apiserver rather than `kube_cel::validate_compiled`, whose walk
//! converted the value below every schema node into CEL (rules or not) and recompiled the
//! regular expression of every `matches()` call — 28% of the test control plane's CPU when
//! the operator benchmark submits one-node jobs. Here:
//! - only nodes that carry rules convert their value, once per write;
//! - `matches()` with the same pattern reuses its compiled expression, as kube-apiserver's
//!   programs do (`cel.OptimizeRegex`: constant patterns compiled once, when the rule is);
//! - root-level rules see `metadata.name` and `metadata.generateName` only (kube-apiserver's
//!   `WithTypeAndObjectMeta`), trimmed further to the top-level fields they read;
//! - rules below the root run per top-level field, only where the field changed (validation
//!   ratcheting at top-level-field granularity), as before.
//!
//! What a rule sees, its messages (`message`, `messageExpression`, `reason`, `fieldPath`),
//! transition rules (`oldSelf`, `optionalOldSelf`) and the error texts are those of
//! `kube-cel`'s validator, which the module's tests compare against. Failures show the
//! offending scalar value (`spec.time: Invalid value: "1h": time must be ...`) as current
//! Kubernetes releases do; 1.32 printed the schema type (`"string"`) there instead.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::{Key, Map as CelMap};
use kube_cel::cel::{self, Context, ExecutionError, FunctionContext};
use kube_cel::{CompilationError, CompilationResult, CompiledSchema, KubeCelExt, SchemaFormat};
use serde_json::Value;

use super::error::{FieldError, FieldErrorKind};

/// The compiled CEL rules of one CRD version's `openAPIV3Schema`.
pub struct CrdValidation {
    /// The whole schema compiled: rules per node, and the formats, map and embedded-resource
    /// marks the values are converted with.
    shape: CompiledSchema,
    /// The root's rules read these top-level fields only (`None`: any).
    root_reads: Option<Vec<String>>,
    /// Where rules are below each top-level field.
    props: Vec<(String, RuleTree)>,
    /// The root's rules read `oldSelf` (transition rules, messages).
    root_old: bool,
    /// The raw schema, when what rules see of it declares defaults: rules see values defaulted
    /// (a no-op for new objects, which were defaulted on decoding; an old one may predate a
    /// default).
    defaults: Option<Value>,
    /// The root's view has defaults.
    root_defaults: bool,
}

impl std::fmt::Debug for CrdValidation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdValidation")
            .field("root_rules", &self.shape.validations.len())
            .field("root_reads", &self.root_reads)
            .field(
                "props",
                &self.props.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Which schema nodes below a top-level field carry rules: the walk visits those and the nodes
/// on the way to them, nothing else.
#[derive(Debug, Default)]
struct RuleTree {
    here: bool,
    /// A rule here reads `oldSelf` (the old value is converted for those only).
    old: bool,
    /// Defaults are declared at or below this field (top-level fields only).
    defaults: bool,
    props: Vec<(String, RuleTree)>,
    items: Option<Box<RuleTree>>,
    additional: Option<Box<RuleTree>>,
    /// `allOf`, `oneOf`, `anyOf` branches: (which, index, rules).
    branches: Vec<(Junctor, usize, RuleTree)>,
}

#[derive(Clone, Copy, Debug)]
enum Junctor {
    All,
    One,
    Any,
}

impl RuleTree {
    /// `None` when nothing at or below `c` has rules.
    fn of(c: &CompiledSchema) -> Option<RuleTree> {
        let mut props: Vec<(String, RuleTree)> = c
            .properties
            .iter()
            .filter_map(|(k, p)| Some((k.clone(), RuleTree::of(p)?)))
            .collect();
        props.sort_by(|a, b| a.0.cmp(&b.0));
        let items = c.items.as_deref().and_then(RuleTree::of).map(Box::new);
        let additional = c
            .additional_properties
            .as_deref()
            .and_then(RuleTree::of)
            .map(Box::new);
        let mut branches = Vec::new();
        for (j, list) in [
            (Junctor::All, &c.all_of),
            (Junctor::One, &c.one_of),
            (Junctor::Any, &c.any_of),
        ] {
            for (i, b) in list.iter().enumerate() {
                if let Some(t) = RuleTree::of(b) {
                    branches.push((j, i, t));
                }
            }
        }
        let t = RuleTree {
            here: !c.validations.is_empty(),
            old: reads_old(c),
            defaults: false,
            props,
            items,
            additional,
            branches,
        };
        let any = t.here
            || !t.props.is_empty()
            || t.items.is_some()
            || t.additional.is_some()
            || !t.branches.is_empty();
        any.then_some(t)
    }
}

/// Whether a rule of this node (or its message) reads `oldSelf`: otherwise the old value is
/// not converted, which nothing could observe.
fn reads_old(c: &CompiledSchema) -> bool {
    c.validations.iter().any(|r| match r {
        Ok(cr) => {
            cr.is_transition_rule
                || cr.rule.optional_old_self == Some(true)
                || cr
                    .message_program
                    .as_ref()
                    .is_some_and(|p| p.references().has_variable("oldSelf"))
        }
        Err(_) => false,
    })
}

fn has_rules(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("x-kubernetes-validations") || m.values().any(has_rules),
        Value::Array(a) => a.iter().any(has_rules),
        _ => false,
    }
}

fn has_defaults(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("default") || m.values().any(has_defaults),
        Value::Array(a) => a.iter().any(has_defaults),
        _ => false,
    }
}

/// The top-level fields CEL expressions read, when every use of `self` and `oldSelf` in them
/// is a plain field selection (`self.spec...`, `has(self.spec)`); `None` otherwise (`self`
/// alone, indexed, or with a method or macro such as `self.all(...)`). Words inside string
/// literals count too, which can only add fields or give up: never miss one.
pub(super) fn top_level_reads(exprs: &[&str]) -> Option<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out: Vec<String> = vec!["apiVersion".into(), "kind".into(), "metadata".into()];
    for e in exprs {
        let b: Vec<char> = e.chars().collect();
        let mut i = 0;
        while i < b.len() {
            if !ident(b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            if word != "self" && word != "oldSelf" {
                continue;
            }
            let mut j = i;
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            if b.get(j) != Some(&'.') {
                return None;
            }
            j += 1;
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            let fs = j;
            while j < b.len() && ident(b[j]) {
                j += 1;
            }
            if fs == j {
                return None;
            }
            let field: String = b[fs..j].iter().collect();
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            if b.get(j) == Some(&'(') {
                return None;
            }
            if !out.contains(&field) {
                out.push(field);
            }
            i = j;
        }
    }
    Some(out)
}

/// What root-level rules see of an object: the top-level fields in `keep` (all when `None`),
/// `metadata` reduced to `name` and `generateName`, the only metadata kube-apiserver gives
/// CEL.
fn root_view(v: &Value, keep: Option<&[String]>) -> Value {
    let Some(m) = v.as_object() else {
        return v.clone();
    };
    let mut out = serde_json::Map::new();
    let mut put = |k: &str, x: &Value| {
        let x = if k == "metadata" {
            match x.as_object() {
                Some(md) => Value::Object(
                    ["name", "generateName"]
                        .iter()
                        .filter_map(|f| Some((f.to_string(), md.get(*f)?.clone())))
                        .collect(),
                ),
                None => x.clone(),
            }
        } else {
            x.clone()
        };
        out.insert(k.to_string(), x);
    };
    match keep {
        Some(keep) => {
            for k in keep {
                if let Some(x) = m.get(k) {
                    put(k, x);
                }
            }
        }
        None => {
            for (k, x) in m {
                put(k, x);
            }
        }
    }
    Value::Object(out)
}

fn compile_errors(c: &CompiledSchema, path: &str, out: &mut Vec<String>) {
    for e in c.compilation_errors() {
        out.push(format!("{path}: {e}"));
    }
    let mut props: Vec<_> = c.properties.iter().collect();
    props.sort_by(|a, b| a.0.cmp(b.0));
    for (k, p) in props {
        compile_errors(p, &format!("{path}.properties[{k}]"), out);
    }
    if let Some(i) = &c.items {
        compile_errors(i, &format!("{path}.items"), out);
    }
    if let Some(a) = &c.additional_properties {
        compile_errors(a, &format!("{path}.additionalProperties"), out);
    }
}

impl CrdValidation {
    /// Compile the rules of an `openAPIV3Schema`; `None` when it has none. Errors name the rule
    /// that does not compile.
    pub fn compile(schema: &Value) -> Result<Option<Self>, Vec<String>> {
        if !has_rules(schema) {
            return Ok(None);
        }
        let shape = kube_cel::compile_schema(schema);
        let mut errors = Vec::new();
        compile_errors(&shape, "openAPIV3Schema", &mut errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        let exprs: Vec<&str> = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|r| ["rule", "messageExpression"].map(|k| r.get(k)))
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let field_defaults = |k: &str| has_defaults(&schema["properties"][k]);
        let mut props: Vec<(String, RuleTree)> = shape
            .properties
            .iter()
            .filter_map(|(k, p)| {
                let mut t = RuleTree::of(p)?;
                t.defaults = field_defaults(k);
                Some((k.clone(), t))
            })
            .collect();
        props.sort_by(|a, b| a.0.cmp(&b.0));
        let root_reads = top_level_reads(&exprs);
        let root_defaults = !shape.validations.is_empty()
            && match &root_reads {
                Some(keep) => keep.iter().any(|k| field_defaults(k)),
                None => has_defaults(schema),
            };
        Ok(Some(Self {
            root_old: reads_old(&shape),
            root_reads,
            root_defaults,
            defaults: has_defaults(schema).then(|| schema.clone()),
            props,
            shape,
        }))
    }

    /// Evaluate the rules on a new object (and its old version on update).
    pub fn validate(&self, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if !self.shape.validations.is_empty() {
            let keep = self.root_reads.as_deref();
            let view = |v: &Value| match self.defaults.as_ref().filter(|_| self.root_defaults) {
                Some(s) => kube_cel::apply_defaults(s, &root_view(v, keep)),
                None => root_view(v, keep),
            };
            let n = view(new);
            let o = old.filter(|_| self.root_old).map(view);
            eval_node(&self.shape, &n, o.as_ref(), old.is_some(), "", &mut errs);
        }
        for (k, tree) in &self.props {
            let Some(nv) = new.get(k).filter(|v| !v.is_null()) else {
                continue;
            };
            let ov = old.and_then(|o| o.get(k)).filter(|v| !v.is_null());
            if ov == Some(nv) {
                continue;
            }
            let shape = &self.shape.properties[k];
            match self.defaults.as_ref().filter(|_| tree.defaults) {
                Some(s) => {
                    let sub = &s["properties"][k];
                    let nv = kube_cel::apply_defaults(sub, nv);
                    let ov = ov.map(|o| kube_cel::apply_defaults(sub, o));
                    walk(tree, shape, &nv, ov.as_ref(), k.clone(), &mut errs);
                }
                None => walk(tree, shape, nv, ov, k.clone(), &mut errs),
            }
        }
        errs.into_iter().map(|e| e.into_field_error(new)).collect()
    }
}

/// One failed rule, before its value is looked up.
struct CelError {
    path: String,
    message: String,
    reason: Option<String>,
}

impl CelError {
    fn into_field_error(self, root: &Value) -> FieldError {
        let value = value_at(root, &self.path)
            .filter(|v| !v.is_object() && !v.is_array())
            .cloned();
        let kind = match self.reason.as_deref() {
            Some("FieldValueForbidden") => FieldErrorKind::Forbidden,
            Some("FieldValueRequired") => FieldErrorKind::Required,
            Some("FieldValueDuplicate") => FieldErrorKind::Duplicate,
            _ => FieldErrorKind::Invalid,
        };
        let detail = if kind == FieldErrorKind::Duplicate {
            String::new()
        } else {
            self.message
        };
        FieldError::new(kind, self.path, value, detail)
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// Visit the nodes of `tree`, evaluating the rules where there are some.
fn walk(
    tree: &RuleTree,
    shape: &CompiledSchema,
    v: &Value,
    old: Option<&Value>,
    path: String,
    errs: &mut Vec<CelError>,
) {
    if tree.here {
        eval_node(
            shape,
            v,
            old.filter(|_| tree.old),
            old.is_some(),
            &path,
            errs,
        );
    }
    if let Some(obj) = v.as_object() {
        for (k, t) in &tree.props {
            if let Some(cv) = obj.get(k) {
                let co = old.and_then(|o| o.get(k));
                walk(t, &shape.properties[k], cv, co, join(&path, k), errs);
            }
        }
        if let Some(t) = &tree.additional
            && !shape.preserve_unknown_fields
            && let Some(s) = &shape.additional_properties
        {
            for (k, cv) in obj {
                if shape.properties.contains_key(k) {
                    continue;
                }
                let co = old.and_then(|o| o.get(k));
                walk(t, s, cv, co, join(&path, k), errs);
            }
        }
    }
    if let (Some(t), Some(s), Some(arr)) = (&tree.items, &shape.items, v.as_array()) {
        for (i, it) in arr.iter().enumerate() {
            let co = old.and_then(Value::as_array).and_then(|a| a.get(i));
            let p = if path.is_empty() {
                format!("[{i}]")
            } else {
                format!("{path}[{i}]")
            };
            walk(t, s, it, co, p, errs);
        }
    }
    for (j, i, t) in &tree.branches {
        let s = match j {
            Junctor::All => &shape.all_of[*i],
            Junctor::One => &shape.one_of[*i],
            Junctor::Any => &shape.any_of[*i],
        };
        walk(t, s, v, old, path.clone(), errs);
    }
}

thread_local! {
    /// The functions rules call: CEL's standard library, Kubernetes' extension libraries,
    /// and `matches` over [`REGEXES`].
    static ROOT: Context<'static> = {
        let mut ctx = Context::default();
        ctx.register_all();
        ctx.add_function("matches", matches);
        ctx
    };
    /// Compiled `matches()` patterns. Rules name a bounded set of constant patterns; the
    /// cache starts again if patterns built from data ever fill it.
    static REGEXES: RefCell<HashMap<String, regex::Regex>> = RefCell::new(HashMap::new());
}

/// Most patterns [`REGEXES`] keeps.
const REGEX_CACHE: usize = 1024;

/// `string.matches(pattern)`: CEL's own, with the compiled pattern kept.
fn matches(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    pattern: Arc<String>,
) -> Result<bool, ExecutionError> {
    REGEXES.with(|cache| {
        if let Some(re) = cache.borrow().get(pattern.as_str()) {
            return Ok(re.is_match(&this));
        }
        match regex::Regex::new(&pattern) {
            Ok(re) => {
                let hit = re.is_match(&this);
                let mut c = cache.borrow_mut();
                if c.len() >= REGEX_CACHE {
                    c.clear();
                }
                c.insert(pattern.to_string(), re);
                Ok(hit)
            }
            Err(err) => Err(ftx.error(format!("'{pattern}' not a valid regex:\n{err}"))),
        }
    })
}

/// Evaluate the rules of one schema node on its value. `old` is given when a rule reads it,
/// `has_old` tells whether there is one (an update).
fn eval_node(
    shape: &CompiledSchema,
    v: &Value,
    old: Option<&Value>,
    has_old: bool,
    path: &str,
    errs: &mut Vec<CelError>,
) {
    let this = to_cel(v, Some(shape));
    let before = old.map(|o| to_cel(o, Some(shape)));
    ROOT.with(|root| {
        let mut ctx = root.new_inner_scope();
        ctx.add_variable_from_value("self", this);
        if let Some(b) = before {
            ctx.add_variable_from_value("oldSelf", b);
        }
        for r in &shape.validations {
            match r {
                Ok(cr) => eval_rule(cr, &ctx, has_old, path, errs),
                Err(e) => errs.push(CelError {
                    path: path.to_string(),
                    message: compile_message(e),
                    reason: None,
                }),
            }
        }
    });
}

fn compile_message(e: &CompilationError) -> String {
    match e {
        CompilationError::Parse { rule, source } => {
            format!("failed to compile rule \"{rule}\": {source}")
        }
        CompilationError::MessageExpressionParse {
            rule,
            message_expression,
            source,
        } => format!(
            "failed to compile messageExpression \"{message_expression}\" for rule \"{rule}\": {source}"
        ),
        CompilationError::InvalidRule(e) => format!("invalid rule definition: {e}"),
        other => other.to_string(),
    }
}

fn eval_rule(
    cr: &CompilationResult,
    ctx: &Context<'_>,
    has_old: bool,
    path: &str,
    errs: &mut Vec<CelError>,
) {
    let optional_old = cr.rule.optional_old_self == Some(true);
    // A transition rule without an old value is skipped, unless oldSelf is optional (then it
    // is null).
    if cr.is_transition_rule && !has_old && !optional_old {
        return;
    }
    let null_old;
    let ctx: &Context<'_> = if !has_old && optional_old {
        null_old = {
            let mut s = ctx.new_inner_scope();
            s.add_variable_from_value("oldSelf", cel::Value::Null);
            s
        };
        &null_old
    } else {
        ctx
    };
    let at = match cr.rule.field_path.as_deref() {
        Some(fp) if fp.starts_with('.') => format!("{path}{fp}"),
        Some(fp) if !path.is_empty() => format!("{path}.{fp}"),
        Some(fp) => fp.to_string(),
        None => path.to_string(),
    };
    let (message, reason) = match cr.program.execute(ctx) {
        Ok(cel::Value::Bool(true)) => return,
        Ok(cel::Value::Bool(false)) => {
            let dynamic = cr
                .message_program
                .as_ref()
                .and_then(|p| match p.execute(ctx) {
                    Ok(cel::Value::String(s)) => Some((*s).clone()),
                    _ => None,
                });
            let message = dynamic
                .or_else(|| cr.rule.message.clone())
                .unwrap_or_else(|| format!("failed rule: {}", cr.rule.rule));
            (message, cr.rule.reason.clone())
        }
        Ok(_) => (
            format!("rule \"{}\" did not evaluate to bool", cr.rule.rule),
            None,
        ),
        Err(ExecutionError::UndeclaredReference(name)) => (
            format!(
                "rule references '{name}', which this kube-cel build does not support \
                 (an unsupported CEL macro, or a feature disabled at compile time); \
                 it cannot be evaluated client-side"
            ),
            None,
        ),
        Err(e) => (format!("rule evaluation error: {e}"), None),
    };
    errs.push(CelError {
        path: at,
        message,
        reason,
    });
}

/// CEL's name for an object field: reserved words and the characters `_ . - /` are escaped
/// (`__namespace__`, `a__dash__b`), map keys (`additionalProperties`) are not.
fn escape(name: &str) -> String {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    if RESERVED.contains(&name) {
        return format!("__{name}__");
    }
    if !name.contains(['_', '.', '-', '/']) {
        return name.to_string();
    }
    let mut out = String::with_capacity(name.len() * 2);
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as CEL sees it, typed by the schema where there is one: `date-time` strings
/// become timestamps, `duration` strings durations, `byte` strings bytes (each left a string
/// when it does not parse).
fn to_cel(v: &Value, shape: Option<&CompiledSchema>) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => string_as(s, shape.map(|c| &c.format)),
        Value::Array(a) => {
            let items = shape.and_then(|c| c.items.as_deref());
            cel::Value::List(Arc::new(a.iter().map(|x| to_cel(x, items)).collect()))
        }
        Value::Object(o) => {
            let mut map = HashMap::with_capacity(o.len() + 3);
            for (k, x) in o {
                let child =
                    shape.and_then(|c| c.properties.get(k).or(c.additional_properties.as_deref()));
                let key = if shape.is_some_and(|c| c.is_map) {
                    k.clone()
                } else {
                    escape(k)
                };
                map.insert(Key::String(Arc::new(key)), to_cel(x, child));
            }
            if shape.is_some_and(|c| c.embedded_resource) {
                let empty = || cel::Value::String(Arc::new(String::new()));
                map.entry(Key::String(Arc::new("apiVersion".into())))
                    .or_insert_with(empty);
                map.entry(Key::String(Arc::new("kind".into())))
                    .or_insert_with(empty);
                map.entry(Key::String(Arc::new("metadata".into())))
                    .or_insert_with(|| {
                        cel::Value::Map(CelMap {
                            map: Arc::new(HashMap::new()),
                        })
                    });
            }
            cel::Value::Map(CelMap { map: Arc::new(map) })
        }
    }
}

fn string_as(s: &str, format: Option<&SchemaFormat>) -> cel::Value {
    use base64::Engine;
    let plain = || cel::Value::String(Arc::new(s.to_string()));
    match format {
        Some(SchemaFormat::DateTime) => chrono::DateTime::parse_from_rfc3339(s)
            .map(cel::Value::Timestamp)
            .unwrap_or_else(|_| plain()),
        Some(SchemaFormat::Duration) => go_duration(s).map_or_else(plain, cel::Value::Duration),
        Some(SchemaFormat::Bytes) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(|b| cel::Value::Bytes(Arc::new(b)))
            .unwrap_or_else(|_| plain()),
        _ => plain(),
    }
}

/// A Go duration (`1h30m`, `-1.5s`, `300ms`; units h, m, s, ms, us, ns; `0` alone).
fn go_duration(s: &str) -> Option<chrono::Duration> {
    let (mut rest, negative) = match s.strip_prefix('-') {
        Some(r) => (r, true),
        None => (s, false),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    if rest.is_empty() {
        return None;
    }
    let mut nanos: i64 = 0;
    while !rest.is_empty() {
        let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        if end == 0 {
            return None;
        }
        let n: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let (unit, len) = [
            ("ms", 1_000_000i64),
            ("us", 1_000),
            ("ns", 1),
            ("h", 3_600_000_000_000),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
        ]
        .into_iter()
        .find_map(|(u, ns)| rest.starts_with(u).then_some((ns, u.len())))?;
        rest = &rest[len..];
        nanos += (n * unit as f64).trunc() as i64;
    }
    Some(chrono::Duration::nanoseconds(if negative {
        -nanos
    } else {
        nanos
    }))
}

/// The value at a Kubernetes field path (`a.b[0].c`) relative to `root`.
fn value_at<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = root;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, rest) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        for idx in rest.split('[').filter(|s| !s.is_empty()) {
            let idx = idx.trim_end_matches(']');
            cur = match idx.parse::<usize>() {
                Ok(i) => cur.get(i)?,
                Err(_) => cur.get(idx)?,
            };
        }
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cel_rules_report_value_and_message() {
        let raw = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "time": {"x-kubernetes-int-or-string": true, "x-kubernetes-validations": [
                {"rule": "string(self).matches('^[0-9]+$')", "message": "time must be MINUTES", "reason": "FieldValueInvalid"}]},
            "n": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "n may not decrease"}]}
        }}}});
        let c = CrdValidation::compile(&raw).unwrap().unwrap();
        let errs = c.validate(&json!({"spec": {"time": "1h"}}), None);
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "spec.time: Invalid value: \"1h\": time must be MINUTES"
        );
        assert!(
            c.validate(&json!({"spec": {"time": 30, "n": 1}}), None)
                .is_empty()
        );
        let old = json!({"spec": {"time": 30, "n": 5}});
        let errs = c.validate(&json!({"spec": {"time": 30, "n": 4}}), Some(&old));
        assert_eq!(
            errs[0].to_string(),
            "spec.n: Invalid value: 4: n may not decrease"
        );
        let bad = json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.("}]}}});
        assert!(CrdValidation::compile(&bad).is_err());
    }

    #[test]
    fn root_rules_read_what_they_name() {
        assert_eq!(
            top_level_reads(&[
                "size(self.metadata.name) <= 3",
                "!has(self.spec) || self.spec.n > 0"
            ]),
            Some(vec![
                "apiVersion".into(),
                "kind".into(),
                "metadata".into(),
                "spec".into()
            ])
        );
        for whole in [
            "self.all(k, k != 'x')",
            "self['status'] != null",
            "has(self)",
            "oldSelf == self",
        ] {
            assert_eq!(top_level_reads(&[whole]), None, "{whole}");
        }
        // Root rules see the fields they read, every write; nested rules run where changed.
        let raw = json!({"type": "object",
            "x-kubernetes-validations": [
                {"rule": "size(self.metadata.name) <= 3", "message": "short names"},
                {"rule": "!has(self.status) || self.status.n <= self.spec.max", "message": "n <= max"}],
            "properties": {
                "spec": {"type": "object", "properties": {"max": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.max >= 0", "message": "max >= 0"}]},
                "status": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "other": {"type": "array", "items": {"type": "string"}}}});
        let c = CrdValidation::compile(&raw).unwrap().unwrap();
        let msgs = |new: &Value, old: Option<&Value>| -> Vec<String> {
            c.validate(new, old).iter().map(|e| e.to_string()).collect()
        };
        let old = json!({"metadata": {"name": "abcd"}, "spec": {"max": -1}, "status": {"n": 1}, "other": ["x"]});
        let new = json!({"metadata": {"name": "abcd"}, "spec": {"max": -1}, "status": {"n": 2}, "other": ["x"]});
        let e = msgs(&new, Some(&old));
        // The root's rules fail; the unchanged spec's own rule is ratcheted.
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e.iter().any(|m| m.contains("short names")), "{e:?}");
        assert!(e.iter().any(|m| m.contains("n <= max")), "{e:?}");
        let e = msgs(&new, None);
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e.iter().any(|m| m.contains("max >= 0")), "{e:?}");
    }

    #[test]
    fn root_rules_see_name_and_generate_name_only() {
        let raw = json!({"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.metadata.name.startsWith('a')", "message": "a name"},
                {"rule": "!has(self.metadata.labels)", "message": "labels are not visible"}],
            "properties": {"spec": {"type": "object"}}});
        let c = CrdValidation::compile(&raw).unwrap().unwrap();
        let obj = json!({"metadata": {"name": "abc", "labels": {"x": "y"},
            "managedFields": [{"manager": "m"}]}, "spec": {}});
        assert!(c.validate(&obj, None).is_empty());
        let e: Vec<String> = c
            .validate(&json!({"metadata": {"name": "b"}}), None)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(e, [": Invalid value: a name"]);
    }

    /// The same rules, objects and old objects through `kube_cel::validate_compiled` (what the
    /// double evaluated with before) and through this module: the same errors. Root-level
    /// rules are left out: this module gives them less metadata, on purpose.
    #[test]
    fn agrees_with_kube_cel() {
        let raw = json!({"type": "object", "properties": {
        "spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "!has(self.a) || !has(self.b)", "message": "a or b", "fieldPath": ".a"},
                {"rule": "self.n <= 3", "messageExpression": "'n is ' + string(self.n)", "reason": "FieldValueForbidden"},
                {"rule": "!has(oldSelf.n) || self.n >= oldSelf.n", "message": "n may not decrease"},
                {"rule": "has(self.n)", "optionalOldSelf": true, "message": "n is required"},
                {"rule": "!has(self.n) || self.n != 2", "messageExpression": "'2, was ' + string(oldSelf.n)"}],
            "properties": {
                "a": {"type": "string", "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')"}]},
                "b": {"type": "string"},
                "n": {"type": "integer"},
                "when": {"type": "string", "format": "date-time", "x-kubernetes-validations": [
                    {"rule": "self > timestamp('2020-01-01T00:00:00Z')", "message": "after 2020"}]},
                "wait": {"type": "string", "format": "duration", "x-kubernetes-validations": [
                    {"rule": "self < duration('1h')", "message": "under an hour"}]},
                "list": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "x-y": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.x__dash__y > 0", "message": "positive"}]}},
                "labels": {"type": "object", "additionalProperties": {"type": "string",
                    "x-kubernetes-validations": [{"rule": "size(self) < 4", "message": "short"}]},
                    "x-kubernetes-validations": [{"rule": "!('bad-key' in self)", "message": "no bad-key"}]},
                "both": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-validations": [{"rule": "string(self) != '0'", "message": "not zero"}]}
            }}}});
        let ours = CrdValidation::compile(&raw).unwrap().unwrap();
        let theirs = kube_cel::compile_schema(&raw["properties"]["spec"]);
        let specs = [
            json!({"a": "abc", "n": 1}),
            json!({"a": "ABC", "b": "x", "n": 7}),
            json!({"n": 2, "when": "2019-05-01T00:00:00Z", "wait": "2h"}),
            json!({"n": 2, "when": "2021-05-01T00:00:00Z", "wait": "90m", "both": 0}),
            json!({"b": "x", "list": [{"name": "p", "x-y": 1}, {"name": "q", "x-y": 0}]}),
            json!({"n": 1, "labels": {"bad-key": "v", "ok": "long value"}, "both": "0"}),
            json!({"n": 1, "wait": "not a duration", "when": "yesterday"}),
        ];
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        for (i, spec) in specs.iter().enumerate() {
            for old in [None, specs.get((i + 1) % specs.len())] {
                let got: Vec<String> = ours
                    .validate(
                        &json!({"spec": spec}),
                        old.map(|o| json!({"spec": o})).as_ref(),
                    )
                    .iter()
                    .map(|e| e.to_string())
                    .collect();
                let want: Vec<String> = match kube_cel::validate_compiled(&theirs, spec, old) {
                    Ok(()) => Vec::new(),
                    Err(es) => es
                        .into_iter()
                        .map(|e| {
                            let path = match e.field_path.as_str() {
                                "" => "spec".to_string(),
                                // (The double joined ".a" as "spec..a" before.)
                                p if p.starts_with(['[', '.']) => format!("spec{p}"),
                                p => format!("spec.{p}"),
                            };
                            CelError {
                                path,
                                message: e.message.clone(),
                                reason: e.reason.clone(),
                            }
                            .into_field_error(&json!({"spec": spec}))
                            .to_string()
                        })
                        .collect(),
                };
                assert_eq!(sorted(got), sorted(want), "spec {spec}, old {old:?}");
            }
        }
    }

    #[test]
    fn matches_keeps_compiled_patterns_and_reports_bad_ones() {
        let raw = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "s": {"type": "string", "x-kubernetes-validations": [
                {"rule": "self.matches('^[a-c]+$')", "message": "a to c"},
                {"rule": "self.matches('(')", "message": "never"}]}}}}});
        let c = CrdValidation::compile(&raw).unwrap().unwrap();
        for _ in 0..3 {
            let e: Vec<String> = c
                .validate(&json!({"spec": {"s": "abd"}}), None)
                .iter()
                .map(|e| e.to_string())
                .collect();
            assert_eq!(e.len(), 2, "{e:?}");
            assert!(e.iter().any(|m| m.ends_with("a to c")), "{e:?}");
            assert!(
                e.iter()
                    .any(|m| m.contains("rule evaluation error") && m.contains("not a valid regex")),
                "{e:?}"
            );
        }
        assert!(REGEXES.with(|r| r.borrow().contains_key("^[a-c]+$")));
        assert!(REGEXES.with(|r| !r.borrow().contains_key("(")));
    }

    #[test]
    fn go_durations() {
        let ms = |s: &str| go_duration(s).map(|d| d.num_milliseconds());
        assert_eq!(ms("1h30m"), Some(5_400_000));
        assert_eq!(ms("-1.5s"), Some(-1_500));
        assert_eq!(ms("300ms"), Some(300));
        assert_eq!(ms("0"), Some(0));
        for bad in ["", "5", "1d", "h", "-"] {
            assert_eq!(ms(bad), None, "{bad}");
        }
    }
}

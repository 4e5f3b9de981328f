//! The evaluation harness: admission requests as the API server builds them, the two CEL
//! engines, and the rendered policies they evaluate (whose expressions must all compile).

use super::*;

/// One admission request, as the API server builds it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Req {
    pub(crate) operation: &'static str,
    pub(crate) username: String,
    pub(crate) extra: BTreeMap<String, Vec<String>>,
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) resource: &'static str,
    pub(crate) sub_resource: &'static str,
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) object: Value,
    pub(crate) old_object: Value,
}

impl Req {
    pub(crate) fn namespace_object(&self) -> Option<Value> {
        (!self.namespace.is_empty()).then(|| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": self.namespace,
                                "labels": {"kubernetes.io/metadata.name": self.namespace}}})
        })
    }

    /// The `request` variable with every field Kubernetes gives it.
    pub(crate) fn full_request(&self) -> Value {
        json!({
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": self.group, "version": self.version, "kind": self.kind},
            "resource": {"group": self.group, "version": self.version, "resource": self.resource},
            "subResource": self.sub_resource,
            "requestKind": {"group": self.group, "version": self.version, "kind": self.kind},
            "requestResource": {"group": self.group, "version": self.version, "resource": self.resource},
            "requestSubResource": self.sub_resource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": {
                "username": self.username,
                "uid": "uid-of-".to_string() + &self.username,
                "groups": self.groups(),
                "extra": self.extra,
            },
            "dryRun": false,
        })
    }

    pub(crate) fn groups(&self) -> Vec<String> {
        if self.username.starts_with("system:serviceaccount:") {
            let ns = self.username.split(':').nth(2).unwrap_or("");
            vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ]
        } else {
            vec!["system:authenticated".into()]
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// The policy does not apply (rules, binding selector or a matchCondition).
    NotMatched,
    Allowed,
    Denied(Vec<String>),
}

impl Outcome {
    pub(crate) fn admitted(&self) -> bool {
        !matches!(self, Outcome::Denied(_))
    }
    pub(crate) fn message(&self) -> String {
        match self {
            Outcome::Denied(m) => m.join(" | "),
            _ => String::new(),
        }
    }
}

/// Evaluates one CEL expression to a bool (or an error), or a message to a string.
pub(crate) trait Engine {
    fn eval_bool(&self, req: &Req, vars: &[(String, String)], expr: &str) -> Result<bool, String>;
    fn eval_message(&self, req: &Req, vars: &[(String, String)], expr: &str) -> Option<String>;
}

/// kube-cel's VapEvaluator.
pub(crate) struct VapEngine;

impl VapEngine {
    pub(crate) fn evaluator(req: &Req) -> VapEvaluator {
        let mut b = VapEvaluator::builder()
            .object(req.object.clone())
            .request(AdmissionRequest {
                operation: req.operation.into(),
                username: req.username.clone(),
                uid: format!("uid-of-{}", req.username),
                groups: req.groups(),
                name: req.name.clone(),
                namespace: req.namespace.clone(),
                dry_run: false,
                kind: GroupVersionKind {
                    group: req.group.into(),
                    version: req.version.into(),
                    kind: req.kind.into(),
                },
                resource: GroupVersionResource {
                    group: req.group.into(),
                    version: req.version.into(),
                    resource: req.resource.into(),
                },
            });
        if !req.old_object.is_null() {
            b = b.old_object(req.old_object.clone());
        }
        if let Some(ns) = req.namespace_object() {
            b = b.namespace_object(ns);
        }
        b.build()
    }
}

impl Engine for VapEngine {
    fn eval_bool(&self, req: &Req, vars: &[(String, String)], expr: &str) -> Result<bool, String> {
        assert!(vars.is_empty(), "VapEvaluator 0.8 has no policy variables");
        let r = Self::evaluator(req).evaluate(&[VapExpression {
            expression: expr.into(),
            message: Some("false".into()),
            message_expression: None,
        }]);
        let r = &r[0];
        match (r.passed, r.message.as_deref()) {
            (true, _) => Ok(true),
            (false, Some("false")) => Ok(false),
            (false, m) => Err(m.unwrap_or("?").to_string()),
        }
    }

    fn eval_message(&self, req: &Req, _: &[(String, String)], expr: &str) -> Option<String> {
        // VapEvaluator computes a messageExpression only for a failing expression.
        let r = Self::evaluator(req).evaluate(&[VapExpression {
            expression: "false".into(),
            message: None,
            message_expression: Some(expr.into()),
        }]);
        r[0].message.clone()
    }
}

/// The CEL library of kube-cel with the whole request bound.
pub(crate) struct FullEngine;

impl FullEngine {
    pub(crate) fn context(
        req: &Req,
        vars: &[(String, String)],
    ) -> Result<Context<'static>, String> {
        let mut ctx = Context::default().with_all();
        let bind = |ctx: &mut Context<'static>, name: &str, v: &Value| {
            ctx.add_variable(name.to_string(), v.clone())
                .map_err(|e| format!("binding {name}: {e}"))
        };
        bind(&mut ctx, "object", &req.object)?;
        bind(&mut ctx, "oldObject", &req.old_object)?;
        bind(&mut ctx, "request", &req.full_request())?;
        bind(
            &mut ctx,
            "namespaceObject",
            &req.namespace_object().unwrap_or(Value::Null),
        )?;
        // Variables in order, each seeing the ones before it (Kubernetes evaluates them
        // lazily; these are pure, so eager evaluation gives the same values). A variable that
        // fails is left out, so a reference to it fails too.
        let mut computed: BTreeMap<String, Cel> = BTreeMap::new();
        for (name, expr) in vars {
            ctx.add_variable_from_value("variables", cel_map(&computed));
            let program = Program::compile(expr).map_err(|e| format!("variable {name}: {e}"))?;
            if let Ok(v) = program.execute(&ctx) {
                computed.insert(name.clone(), v);
            }
        }
        ctx.add_variable_from_value("variables", cel_map(&computed));
        Ok(ctx)
    }
}

pub(crate) fn cel_map(m: &BTreeMap<String, Cel>) -> Cel {
    let map: std::collections::HashMap<kube_cel::cel::objects::Key, Cel> = m
        .iter()
        .map(|(k, v)| (kube_cel::cel::objects::Key::from(k.as_str()), v.clone()))
        .collect();
    Cel::Map(kube_cel::cel::objects::Map {
        map: std::sync::Arc::new(map),
    })
}

impl Engine for FullEngine {
    fn eval_bool(&self, req: &Req, vars: &[(String, String)], expr: &str) -> Result<bool, String> {
        let ctx = Self::context(req, vars)?;
        let program = Program::compile(expr).map_err(|e| format!("compile: {e}"))?;
        match program.execute(&ctx) {
            Ok(Cel::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("not a bool: {other:?}")),
            Err(e) => Err(format!("evaluation error: {e}")),
        }
    }

    fn eval_message(&self, req: &Req, vars: &[(String, String)], expr: &str) -> Option<String> {
        let ctx = Self::context(req, vars).ok()?;
        match Program::compile(expr).ok()?.execute(&ctx) {
            Ok(Cel::String(s)) => Some(s.to_string()),
            _ => None,
        }
    }
}

/// A rendered policy with its binding.
pub(crate) struct Policy {
    pub(crate) vap: Value,
    pub(crate) binding: Value,
}

impl Policy {
    pub(crate) fn variables(&self) -> Vec<(String, String)> {
        self.vap["spec"]["variables"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| {
                        (
                            v["name"].as_str().unwrap().to_string(),
                            v["expression"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(crate) fn rules_match(&self, req: &Req) -> bool {
        let resource = if req.sub_resource.is_empty() {
            req.resource.to_string()
        } else {
            format!("{}/{}", req.resource, req.sub_resource)
        };
        let has = |list: &Value, x: &str| {
            list.as_array()
                .unwrap()
                .iter()
                .any(|v| v == "*" || v.as_str() == Some(x))
        };
        self.vap["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| {
                has(&r["apiGroups"], req.group)
                    && has(&r["apiVersions"], req.version)
                    && has(&r["operations"], req.operation)
                    && has(&r["resources"], &resource)
            })
    }

    pub(crate) fn binding_matches(&self, req: &Req) -> bool {
        let Some(exprs) =
            self.binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
                .as_array()
        else {
            return true;
        };
        if req.namespace.is_empty() {
            return true; // namespace selectors do not restrict cluster-scoped objects
        }
        exprs.iter().all(|e| {
            assert_eq!(e["key"], "kubernetes.io/metadata.name");
            let values: Vec<&str> = e["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            match e["operator"].as_str().unwrap() {
                "NotIn" => !values.contains(&req.namespace.as_str()),
                "In" => values.contains(&req.namespace.as_str()),
                op => panic!("operator {op} not modelled"),
            }
        })
    }

    /// What the API server decides for `req` (failurePolicy Fail: an error denies).
    pub(crate) fn decide(&self, engine: &dyn Engine, req: &Req) -> Outcome {
        assert_eq!(self.vap["spec"]["failurePolicy"], "Fail");
        if !self.rules_match(req) || !self.binding_matches(req) {
            return Outcome::NotMatched;
        }
        let vars = self.variables();
        for c in self.vap["spec"]["matchConditions"].as_array().unwrap() {
            match engine.eval_bool(req, &vars, c["expression"].as_str().unwrap()) {
                Ok(true) => {}
                Ok(false) => return Outcome::NotMatched,
                Err(e) => {
                    return Outcome::Denied(vec![format!("matchCondition {}: {e}", c["name"])]);
                }
            }
        }
        let mut denied = Vec::new();
        for v in self.vap["spec"]["validations"].as_array().unwrap() {
            match engine.eval_bool(req, &vars, v["expression"].as_str().unwrap()) {
                Ok(true) => {}
                Ok(false) => {
                    assert_eq!(v["reason"], "Forbidden");
                    let msg = v["messageExpression"]
                        .as_str()
                        .and_then(|m| engine.eval_message(req, &vars, m))
                        .or_else(|| v["message"].as_str().map(String::from))
                        .unwrap_or_else(|| "no message".into());
                    denied.push(msg);
                }
                Err(e) => denied.push(format!("error: {e}")),
            }
        }
        if denied.is_empty() {
            Outcome::Allowed
        } else {
            Outcome::Denied(denied)
        }
    }
}

pub(crate) fn policy(r: &Rendered, name: &str) -> Policy {
    let vap = r.get("ValidatingAdmissionPolicy", name).clone();
    let binding = r.get("ValidatingAdmissionPolicyBinding", name).clone();
    assert_eq!(binding["spec"]["policyName"], name);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    Policy { vap, binding }
}

/// Every CEL expression of every rendered policy compiles.
pub(crate) fn all_expressions_compile(p: &Policy) {
    let spec = &p.vap["spec"];
    let mut exprs = Vec::new();
    for key in ["matchConditions", "variables"] {
        for x in spec[key].as_array().into_iter().flatten() {
            exprs.push(x["expression"].as_str().unwrap().to_string());
        }
    }
    for v in spec["validations"].as_array().unwrap() {
        exprs.push(v["expression"].as_str().unwrap().to_string());
        if let Some(m) = v["messageExpression"].as_str() {
            exprs.push(m.to_string());
        }
    }
    assert!(!exprs.is_empty());
    for e in exprs {
        Program::compile(&e).unwrap_or_else(|err| panic!("{e} does not compile: {err}"));
    }
}

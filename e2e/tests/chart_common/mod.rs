//! Shared by the chart tests: Helm's own engine (through `charts/muster/tests/helm.py`, which
//! calls helm-python-sdk), typed parsing of rendered objects, and CRD schema + CEL validation.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use k8s_openapi::api::{admissionregistration, apps, core, policy, rbac};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// The chart directory.
pub fn chart_dir() -> PathBuf {
    root().join("charts").join("muster")
}

/// Namespace every test installs into unless it says otherwise.
pub const NAMESPACE: &str = "muster-system";

/// Calls Helm with one request (answers are remembered per test process: the same values
/// render the same). `None` when helm-python-sdk is not installed and MUSTER_REQUIRE_HELM is
/// not 1 (the test then returns early, with a note on stderr); with MUSTER_REQUIRE_HELM=1 (CI)
/// a missing Helm fails the test.
pub fn helm(req: Value) -> Option<Value> {
    static MEMO: std::sync::Mutex<BTreeMap<String, Value>> = std::sync::Mutex::new(BTreeMap::new());
    let key = req.to_string();
    if let Some(a) = MEMO.lock().unwrap().get(&key) {
        return Some(a.clone());
    }
    let answer = helm_call(req)?;
    MEMO.lock().unwrap().insert(key, answer.clone());
    Some(answer)
}

/// Many requests in one Helm process.
pub fn helm_many(reqs: Vec<Value>) -> Option<Vec<Value>> {
    let answer = helm_call(json!({"op": "batch", "requests": reqs}))?;
    Some(answer["answers"].as_array().expect("batch answers").clone())
}

fn with_chart(mut req: Value) -> Value {
    if req["op"] == "batch" {
        let reqs: Vec<Value> = req["requests"]
            .as_array()
            .unwrap()
            .iter()
            .cloned()
            .map(with_chart)
            .collect();
        req["requests"] = Value::Array(reqs);
    } else {
        req["chart"] = json!(chart_dir());
    }
    req
}

fn helm_call(req: Value) -> Option<Value> {
    let req = with_chart(req);
    let python = std::env::var("MUSTER_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = chart_dir().join("tests").join("helm.py");
    let require = std::env::var("MUSTER_REQUIRE_HELM").as_deref() == Ok("1");
    let child = Command::new(&python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return missing(require, &format!("cannot run {python}: {e}")),
    };
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(req.to_string().as_bytes())
        .expect("writing the request to helm.py");
    let out = child.wait_with_output().expect("waiting for helm.py");
    if out.status.code() == Some(3) {
        return missing(require, &String::from_utf8_lossy(&out.stdout));
    }
    assert!(
        out.status.success(),
        "helm.py failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("helm.py answers JSON"))
}

fn missing(require: bool, why: &str) -> Option<Value> {
    assert!(
        !require,
        "MUSTER_REQUIRE_HELM=1 but Helm is unavailable: {why} (install it: pip install helm-python-sdk==0.2.2)"
    );
    eprintln!(
        "note: skipping a chart test, Helm is unavailable: {why} (pip install helm-python-sdk==0.2.2; MUSTER_REQUIRE_HELM=1 makes this fatal)"
    );
    None
}

/// One rendered object and the template it came from.
#[derive(Clone, Debug)]
pub struct Object {
    /// `muster/templates/….yaml`.
    pub template: String,
    /// The object.
    pub value: Value,
}

impl Object {
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or("")
    }
    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or("")
    }
    pub fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or("")
    }
}

/// What `helm template` would print: every object (CRDs excluded: Helm installs them from
/// `crds/` on its own), and NOTES.txt.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub objects: Vec<Object>,
    pub notes: String,
}

impl Rendered {
    /// Every object of a kind.
    pub fn all(&self, kind: &str) -> Vec<&Object> {
        self.objects.iter().filter(|o| o.kind() == kind).collect()
    }

    /// The one object of `kind` named `name`.
    pub fn get(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<_> = self
            .objects
            .iter()
            .filter(|o| o.kind() == kind && o.name() == name)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "expected exactly one {kind} {name}, found {}; rendered: {:?}",
            found.len(),
            self.summary()
        );
        &found[0].value
    }

    /// Whether an object of `kind` named `name` was rendered.
    pub fn has(&self, kind: &str, name: &str) -> bool {
        self.objects
            .iter()
            .any(|o| o.kind() == kind && o.name() == name)
    }

    /// `Kind/name` of every object, sorted.
    pub fn summary(&self) -> BTreeSet<String> {
        self.objects
            .iter()
            .map(|o| format!("{}/{}", o.kind(), o.name()))
            .collect()
    }
}

/// Renders the chart with `values` as release `name` in `namespace`. `Err` carries Helm's
/// message (schema violations, `fail` in a template). `None`: Helm unavailable (see [`helm`]).
pub fn render_as(values: Value, name: &str, namespace: &str) -> Option<Result<Rendered, String>> {
    let answer = helm(render_request(values, name, namespace))?;
    Some(rendered(&answer))
}

/// The request [`render_as`] sends (for [`helm_many`]).
pub fn render_request(values: Value, name: &str, namespace: &str) -> Value {
    json!({"op": "render", "values": values, "name": name, "namespace": namespace})
}

/// A render answer as objects, or Helm's error.
pub fn rendered(answer: &Value) -> Result<Rendered, String> {
    if answer["ok"] != json!(true) {
        return Err(answer["error"].as_str().unwrap_or("?").to_string());
    }
    let manifests = answer["manifests"].as_object().expect("manifests map");
    let mut objects = Vec::new();
    let mut notes = String::new();
    for (template, text) in manifests {
        let text = text.as_str().expect("manifest text");
        if template.ends_with("NOTES.txt") {
            notes = text.to_string();
            continue;
        }
        for doc in serde_yaml::Deserializer::from_str(text) {
            let value = <Value as serde::Deserialize>::deserialize(doc)
                .unwrap_or_else(|e| panic!("{template} renders invalid YAML: {e}\n{text}"));
            if value.is_null() {
                continue;
            }
            objects.push(Object {
                template: template.clone(),
                value,
            });
        }
    }
    Ok(Rendered { objects, notes })
}

/// [`render_as`] for release `muster` in [`NAMESPACE`], which must succeed.
pub fn render(values: Value) -> Option<Rendered> {
    render_as(values.clone(), "muster", NAMESPACE)
        .map(|r| r.unwrap_or_else(|e| panic!("rendering with {values} failed: {e}")))
}

/// Fields of `input` that did not survive a typed round trip (`output`): misspelt or misplaced
/// keys a real API server would drop. Nulls and empty lists/maps are not reported (typed
/// serialisation omits them).
pub fn unknown_fields(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                let empty = v.is_null()
                    || v.as_array().is_some_and(|a| a.is_empty())
                    || v.as_object().is_some_and(|m| m.is_empty());
                if empty {
                    continue;
                }
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match o.get(k) {
                    None => out.push(p),
                    Some(ov) => unknown_fields(v, ov, &p, out),
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (a, b)) in i.iter().zip(o).enumerate() {
                unknown_fields(a, b, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

/// Decodes `v` as `T` and reports fields `T` does not have.
pub fn typed<T: DeserializeOwned + Serialize>(v: &Value) -> Result<T, String> {
    let t: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&t).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    unknown_fields(v, &back, "", &mut unknown);
    if !unknown.is_empty() {
        return Err(format!("unknown fields {unknown:?}"));
    }
    Ok(t)
}

/// The openAPIV3Schema of a committed CRD (crds/yaml/<file>).
pub fn crd_schema(file: &str) -> Value {
    let text = std::fs::read_to_string(root().join("crds").join("yaml").join(file))
        .unwrap_or_else(|e| panic!("crds/yaml/{file}: {e}"));
    let crd: Value = serde_yaml::from_str(&text).expect("CRD YAML");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Validates a muster.dev object against its CRD's schema and CEL rules, as the API server
/// does at `kubectl apply` time. Returns the errors.
pub fn crd_errors(obj: &Value) -> Vec<String> {
    let file = match obj["kind"].as_str() {
        Some("BatchJob") => "batchjobs.muster.dev.yaml",
        Some("Partition") => "partitions.muster.dev.yaml",
        Some("GpuNode") => "gpunodes.muster.dev.yaml",
        other => return vec![format!("not a muster.dev kind: {other:?}")],
    };
    match kube_cel::Validator::new().validate(&crd_schema(file), obj, None) {
        Ok(()) => vec![],
        Err(errs) => errs.into_vec().iter().map(|e| e.to_string()).collect(),
    }
}

/// Parses a rendered object as its Kubernetes type (k8s-openapi, muster-crds, or a generic
/// shape check for kinds with no Rust type), reporting unknown fields.
pub fn parse_as_kind(obj: &Object) -> Result<(), String> {
    let v = &obj.value;
    let r = match (obj.api_version(), obj.kind()) {
        ("v1", "ServiceAccount") => typed::<core::v1::ServiceAccount>(v).map(drop),
        ("v1", "Service") => typed::<core::v1::Service>(v).map(drop),
        ("v1", "ConfigMap") => typed::<core::v1::ConfigMap>(v).map(drop),
        ("apps/v1", "Deployment") => typed::<apps::v1::Deployment>(v).map(drop),
        ("apps/v1", "DaemonSet") => typed::<apps::v1::DaemonSet>(v).map(drop),
        ("policy/v1", "PodDisruptionBudget") => {
            typed::<policy::v1::PodDisruptionBudget>(v).map(drop)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            typed::<rbac::v1::ClusterRole>(v).map(drop)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            typed::<rbac::v1::ClusterRoleBinding>(v).map(drop)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => typed::<rbac::v1::Role>(v).map(drop),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            typed::<rbac::v1::RoleBinding>(v).map(drop)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            typed::<admissionregistration::v1::ValidatingAdmissionPolicy>(v).map(drop)
        }
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
            typed::<admissionregistration::v1::MutatingWebhookConfiguration>(v).map(drop)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            typed::<admissionregistration::v1::ValidatingWebhookConfiguration>(v).map(drop)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            typed::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(v).map(drop)
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            typed::<CustomResourceDefinition>(v).map(drop)
        }
        ("muster.dev/v1alpha1", "Partition") => typed::<muster_crds::v1alpha1::Partition>(v)
            .and_then(|_| {
                let errs = crd_errors(v);
                if errs.is_empty() {
                    Ok(())
                } else {
                    Err(format!("refused by the CRD schema/CEL: {errs:?}"))
                }
            }),
        ("monitoring.coreos.com/v1", "ServiceMonitor") => service_monitor_shape(v),
        (api, kind) => Err(format!("no type known for {api} {kind}")),
    };
    r.map_err(|e| format!("{} {} ({}): {e}", obj.kind(), obj.name(), obj.template))
}

/// The Prometheus Operator's ServiceMonitor has no Rust type here: check the fields it needs.
fn service_monitor_shape(v: &Value) -> Result<(), String> {
    typed::<kube::api::DynamicObject>(v)?;
    let spec = &v["spec"];
    let endpoints = spec["endpoints"]
        .as_array()
        .filter(|e| !e.is_empty())
        .ok_or("spec.endpoints must be a non-empty list")?;
    for e in endpoints {
        if e["port"].as_str().is_none_or(str::is_empty) {
            return Err("every endpoint needs a named port".into());
        }
    }
    typed::<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>(&spec["selector"])
        .map_err(|e| format!("spec.selector: {e}"))?;
    if spec["selector"]["matchLabels"]
        .as_object()
        .is_none_or(|m| m.is_empty())
    {
        return Err("spec.selector.matchLabels must select the metrics Service".into());
    }
    Ok(())
}

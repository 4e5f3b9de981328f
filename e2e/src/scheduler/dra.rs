//! Dynamic Resource Allocation in the scheduler stand-in: what kube-scheduler's
//! `DynamicResources` plugin does for pods that reference ResourceClaims
//! (`resource.k8s.io/v1`, structured parameters), as pure state over the watched
//! DeviceClasses, ResourceSlices and ResourceClaims.
//!
//! - **PreFilter**: every claim of the pod exists (`resourceclaim.resource.k8s.io "x" not
//!   found`), is not being deleted (`resourceclaim "x" is being deleted`), and an allocated one
//!   can still be reserved for the pod (at most 256 users: `resourceclaim in use`); the device
//!   class of every request exists (`request r: device class c does not exist`).
//! - **Filter**, per node: an allocated claim's node selector must match the node (`resourceclaim
//!   not available on the node`); unallocated claims are allocated from the devices the node's
//!   slices publish (the newest generation of each pool), none allocated to another claim,
//!   each passing its class's and its request's CEL selectors — evaluated with kube-cel, the
//!   engine the API server double uses for CRD validation, over kube-scheduler's `device`
//!   variable (`driver`, `attributes[domain]`, `capacity[domain]` as quantities, versions as
//!   semvers). A node that cannot hold them all: `cannot allocate all claims`. A selector
//!   that fails at run time aborts the attempt with its error, as there.
//! - **Reserve/PreBind**: the allocation (with the node as its selector) and the pod in
//!   `reservedFor` are written to the claim's status, and the `delete-protection` finalizer to
//!   its metadata, before the pod is bound; until the watch shows it the allocation is assumed,
//!   so no other pod gets the devices.
//!
//! Not done: `firstAvailable` requests, constraints (`matchAttribute`), device taints, admin
//! access beyond not taking the device, partitionable devices and counters, claim templates.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube_cel::KubeCelExt;
use kube_cel::cel::{self, Context, Program};
use muster_operator::controller::dra::{
    AllocationResult, DeviceAllocationResult, DeviceClass, DeviceRequestAllocationResult,
    ResourceClaim, ResourceClaimConsumerReference, ResourceSlice,
};
use serde_json::{Value, json};

/// Most users of one claim (`ResourceClaimReservedForMaxSize`).
pub const RESERVED_FOR_MAX: usize = 256;
/// kube-scheduler's Filter reason when a node cannot hold a pod's claims.
pub const CANNOT_ALLOCATE: &str = "cannot allocate all claims";
/// Its reason when an allocated claim is bound to another node.
pub const NOT_AVAILABLE: &str = "resourceclaim not available on the node";

/// A device, named across the cluster: (driver, pool, device).
pub type DeviceId = (String, String, String);
/// A claim: (namespace, name).
pub type ClaimKey = (String, String);

/// What a pod's claims need on the node chosen for it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimWrite {
    /// The claim.
    pub key: ClaimKey,
    /// Its resourceVersion as read (the write's precondition).
    pub resource_version: String,
    /// The allocation to record, for a claim not allocated yet.
    pub allocation: Option<AllocationResult>,
    /// `reservedFor` after adding the pod.
    pub reserved_for: Vec<ResourceClaimConsumerReference>,
    /// The claim's finalizers with `delete-protection` added (`None`: already there).
    pub finalizers: Option<Vec<String>>,
}

impl ClaimWrite {
    /// The merge patch of the claim's status subresource.
    pub fn status_patch(&self) -> Value {
        let mut st = json!({ "reservedFor": self.reserved_for });
        if let Some(a) = &self.allocation {
            st["allocation"] = json!(a);
        }
        json!({"metadata": {"resourceVersion": self.resource_version}, "status": st})
    }
}

/// Why a node cannot take the pod's claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The node is unsuitable (a Filter reason, counted per node in the message).
    Node(&'static str),
    /// The attempt fails with this error (a broken selector).
    Error(String),
}

/// CEL programs by expression, compiled once.
#[derive(Default)]
struct Cel {
    programs: HashMap<String, Result<Arc<Program>, String>>,
    ctor: HashMap<&'static str, Arc<Program>>,
}

impl Cel {
    fn program(&mut self, expr: &str) -> Result<Arc<Program>, String> {
        self.programs
            .entry(expr.to_string())
            .or_insert_with(|| {
                Program::compile(expr)
                    .map(Arc::new)
                    .map_err(|e| format!("compilation failed: {e}"))
            })
            .clone()
    }

    /// `f(s)` for a kube-cel constructor (`quantity`, `semver`): the opaque value the
    /// functions of that type take.
    fn construct(&mut self, f: &'static str, s: &str) -> cel::Value {
        let p = self
            .ctor
            .entry(f)
            .or_insert_with(|| Arc::new(Program::compile(&format!("{f}(s)")).expect("constructor")))
            .clone();
        let mut ctx = Context::default().with_all();
        ctx.add_variable_from_value("s", s.to_string());
        p.execute(&ctx)
            .unwrap_or_else(|_| cel::Value::String(Arc::new(s.to_string())))
    }

    /// Whether `expr` holds for `device`.
    fn eval(&mut self, expr: &str, device: &cel::Value) -> Result<bool, String> {
        let p = self.program(expr)?;
        let mut ctx = Context::default().with_all();
        ctx.add_variable_from_value("device", device.clone());
        match p.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("expression did not return a bool: {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The DRA state the stand-in keeps.
#[derive(Default)]
pub struct Dra {
    classes: HashMap<String, DeviceClass>,
    slices: HashMap<String, ResourceSlice>,
    claims: HashMap<ClaimKey, ResourceClaim>,
    /// Devices allocated, from claims' status or assumed, with the claim holding them.
    allocated: HashMap<DeviceId, ClaimKey>,
    /// Allocations written (or being written) that the watch has not shown yet.
    assumed: HashMap<ClaimKey, AllocationResult>,
    /// `device` values by (pool, device, generation).
    devices: HashMap<(String, String, i64), cel::Value>,
    cel: Cel,
}

fn node_selector(node: &str) -> k8s_openapi::api::core::v1::NodeSelector {
    serde_json::from_value(json!({"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}))
    .expect("a node selector")
}

/// Whether an allocation's node selector admits `node` (only `metadata.name` fields and
/// `kubernetes.io/hostname` expressions are looked at; anything else admits).
fn selector_admits(a: &AllocationResult, node: &str, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = &a.node_selector else {
        return true;
    };
    sel.node_selector_terms.iter().any(|t| {
        let fields = t
            .match_fields
            .iter()
            .flatten()
            .all(|r| r.key != "metadata.name" || r.values.iter().flatten().any(|v| v == node));
        let exprs = t.match_expressions.iter().flatten().all(|r| {
            let v = labels.get(&r.key);
            match r.operator.as_str() {
                "In" => v.is_some_and(|v| r.values.iter().flatten().any(|x| x == v)),
                "NotIn" => v.is_none_or(|v| !r.values.iter().flatten().any(|x| x == v)),
                "Exists" => v.is_some(),
                "DoesNotExist" => v.is_none(),
                _ => true,
            }
        });
        fields && exprs
    })
}

fn results(a: &AllocationResult) -> impl Iterator<Item = &DeviceRequestAllocationResult> {
    a.devices.iter().flat_map(|d| d.results.iter())
}

impl Dra {
    /// A DeviceClass was added or changed.
    pub fn apply_class(&mut self, c: DeviceClass) {
        self.classes.insert(c.name_any(), c);
    }
    /// A DeviceClass was deleted.
    pub fn delete_class(&mut self, name: &str) {
        self.classes.remove(name);
    }
    /// A ResourceSlice was added or changed.
    pub fn apply_slice(&mut self, s: ResourceSlice) {
        self.slices.insert(s.name_any(), s);
    }
    /// A ResourceSlice was deleted.
    pub fn delete_slice(&mut self, name: &str) {
        self.slices.remove(name);
    }
    /// Keeps only the named slices, classes or claims (after a relist).
    pub fn retain_slices(&mut self, keep: &HashSet<String>) {
        self.slices.retain(|k, _| keep.contains(k));
    }
    /// Keeps only the named classes (after a relist).
    pub fn retain_classes(&mut self, keep: &HashSet<String>) {
        self.classes.retain(|k, _| keep.contains(k));
    }

    /// A ResourceClaim was added or changed: its allocation (if any) replaces an assumed one.
    pub fn apply_claim(&mut self, c: ResourceClaim) {
        let key = (c.namespace().unwrap_or_default(), c.name_any());
        self.release(&key);
        if let Some(a) = c.status.as_ref().and_then(|s| s.allocation.as_ref()) {
            self.assumed.remove(&key);
            self.take(&key, a);
        } else if let Some(a) = self.assumed.get(&key).cloned() {
            self.take(&key, &a);
        }
        self.claims.insert(key, c);
    }

    /// A ResourceClaim was deleted: its devices are free.
    pub fn delete_claim(&mut self, ns: &str, name: &str) {
        let key = (ns.to_string(), name.to_string());
        self.release(&key);
        self.assumed.remove(&key);
        self.claims.remove(&key);
    }

    /// Keeps only these claims (after a relist).
    pub fn retain_claims(&mut self, keep: &HashSet<ClaimKey>) {
        let gone: Vec<ClaimKey> = self
            .claims
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.delete_claim(&k.0, &k.1);
        }
    }

    fn take(&mut self, key: &ClaimKey, a: &AllocationResult) {
        for r in results(a) {
            if r.admin_access != Some(true) {
                self.allocated.insert(
                    (r.driver.clone(), r.pool.clone(), r.device.clone()),
                    key.clone(),
                );
            }
        }
    }

    fn release(&mut self, key: &ClaimKey) {
        self.allocated.retain(|_, k| k != key);
    }

    /// Records allocations written for a pod before the watch shows them.
    pub fn assume(&mut self, writes: &[ClaimWrite]) {
        for w in writes {
            if let Some(a) = &w.allocation {
                self.assumed.insert(w.key.clone(), a.clone());
                self.take(&w.key, a);
            }
        }
    }

    /// Forgets allocations whose write failed.
    pub fn forget(&mut self, writes: &[ClaimWrite]) {
        for w in writes {
            if w.allocation.is_some() && self.assumed.remove(&w.key).is_some() {
                self.release(&w.key);
                if let Some(a) = self
                    .claims
                    .get(&w.key)
                    .and_then(|c| c.status.as_ref())
                    .and_then(|s| s.allocation.clone())
                {
                    self.take(&w.key, &a);
                }
            }
        }
    }

    /// Every claim (for the resourceclaim controller).
    pub fn claims(&self) -> impl Iterator<Item = (&ClaimKey, &ResourceClaim)> {
        self.claims.iter()
    }

    /// PreFilter: the pod's claims, each checked as kube-scheduler checks them. `Err` is the
    /// message (the pod is unschedulable on every node).
    pub fn prefilter(
        &self,
        ns: &str,
        pod_uid: &str,
        names: &[String],
    ) -> Result<Vec<ClaimKey>, String> {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let key = (ns.to_string(), n.clone());
            let Some(c) = self.claims.get(&key) else {
                return Err(format!("resourceclaim.resource.k8s.io \"{n}\" not found"));
            };
            if c.metadata.deletion_timestamp.is_some() {
                return Err(format!("resourceclaim \"{n}\" is being deleted"));
            }
            let allocated = self.allocation(&key).is_some();
            let reserved = c
                .status
                .as_ref()
                .map(|s| s.reserved_for.as_slice())
                .unwrap_or(&[]);
            if allocated
                && reserved.len() >= RESERVED_FOR_MAX
                && !reserved.iter().any(|r| r.uid == pod_uid)
            {
                return Err("resourceclaim in use".into());
            }
            if !allocated {
                for r in &c.spec.devices.requests {
                    let Some(e) = &r.exactly else {
                        return Err(format!("request {}: unsupported request type", r.name));
                    };
                    if !self.classes.contains_key(&e.device_class_name) {
                        return Err(format!(
                            "request {}: device class {} does not exist",
                            r.name, e.device_class_name
                        ));
                    }
                }
            }
            out.push(key);
        }
        Ok(out)
    }

    fn allocation(&self, key: &ClaimKey) -> Option<&AllocationResult> {
        self.claims
            .get(key)
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.allocation.as_ref())
            .or_else(|| self.assumed.get(key))
    }

    /// The `device` variable of a device (cached by pool generation).
    fn device_value(
        &mut self,
        driver: &str,
        s_pool: &str,
        generation: i64,
        d: &muster_operator::controller::dra::Device,
    ) -> cel::Value {
        let k = (s_pool.to_string(), d.name.clone(), generation);
        if let Some(v) = self.devices.get(&k) {
            return v.clone();
        }
        let mut attrs: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
        for (name, a) in &d.attributes {
            let (domain, short) = match name.split_once('/') {
                Some((dom, n)) => (dom.to_string(), n.to_string()),
                None => (driver.to_string(), name.clone()),
            };
            let v = if let Some(i) = a.int {
                cel::Value::Int(i)
            } else if let Some(b) = a.bool {
                cel::Value::Bool(b)
            } else if let Some(s) = &a.string {
                cel::Value::String(Arc::new(s.clone()))
            } else if let Some(v) = &a.version {
                self.cel.construct("semver", v)
            } else {
                continue;
            };
            attrs.entry(domain).or_default().insert(short, v);
        }
        let mut caps: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
        for (name, c) in &d.capacity {
            let (domain, short) = match name.split_once('/') {
                Some((dom, n)) => (dom.to_string(), n.to_string()),
                None => (driver.to_string(), name.clone()),
            };
            let q = self.cel.construct("quantity", &c.value.0);
            caps.entry(domain).or_default().insert(short, q);
        }
        let mut m: HashMap<String, cel::Value> = HashMap::new();
        m.insert(
            "driver".into(),
            cel::Value::String(Arc::new(driver.to_string())),
        );
        m.insert(
            "attributes".into(),
            attrs
                .into_iter()
                .map(|(k, v)| (k, cel::Value::from(v)))
                .collect::<HashMap<String, cel::Value>>()
                .into(),
        );
        m.insert(
            "capacity".into(),
            caps.into_iter()
                .map(|(k, v)| (k, cel::Value::from(v)))
                .collect::<HashMap<String, cel::Value>>()
                .into(),
        );
        m.insert("allowMultipleAllocations".into(), cel::Value::Bool(false));
        let v: cel::Value = m.into();
        self.devices.insert(k, v.clone());
        v
    }

    /// Filter: what the pod's claims need on `node` (labels: its labels), or why it cannot
    /// have them. Allocates the unallocated claims from the node's devices.
    pub fn filter(
        &mut self,
        node: &str,
        labels: &BTreeMap<String, String>,
        pod: (&str, &str),
        claims: &[ClaimKey],
    ) -> Result<Vec<ClaimWrite>, Refusal> {
        let (pod_name, pod_uid) = pod;
        // Devices on the node: the newest generation of each pool of the node's slices.
        let mut newest: HashMap<(String, String), i64> = HashMap::new();
        for s in self.slices.values() {
            if s.spec.node_name.as_deref() == Some(node) || s.spec.all_nodes == Some(true) {
                let g = newest
                    .entry((s.spec.driver.clone(), s.spec.pool.name.clone()))
                    .or_insert(i64::MIN);
                *g = (*g).max(s.spec.pool.generation);
            }
        }
        let mut candidates: Vec<(DeviceId, i64, muster_operator::controller::dra::Device)> =
            Vec::new();
        let mut names: Vec<&String> = self.slices.keys().collect();
        names.sort();
        for n in names {
            let s = &self.slices[n];
            let key = (s.spec.driver.clone(), s.spec.pool.name.clone());
            if newest.get(&key) != Some(&s.spec.pool.generation) {
                continue;
            }
            for d in &s.spec.devices {
                candidates.push((
                    (key.0.clone(), key.1.clone(), d.name.clone()),
                    s.spec.pool.generation,
                    d.clone(),
                ));
            }
        }
        let mut chosen: HashSet<DeviceId> = HashSet::new();
        let mut out = Vec::with_capacity(claims.len());
        for key in claims {
            let c = self
                .claims
                .get(key)
                .cloned()
                .ok_or(Refusal::Node(CANNOT_ALLOCATE))?;
            let mut reserved = c
                .status
                .as_ref()
                .map(|s| s.reserved_for.clone())
                .unwrap_or_default();
            if !reserved.iter().any(|r| r.uid == pod_uid) {
                reserved.push(ResourceClaimConsumerReference {
                    api_group: None,
                    resource: "pods".into(),
                    name: pod_name.to_string(),
                    uid: pod_uid.to_string(),
                });
            }
            let finalizers = (!c
                .finalizers()
                .iter()
                .any(|f| f == muster_operator::controller::dra::DELETE_PROTECTION))
            .then(|| {
                let mut f = c.finalizers().to_vec();
                f.push(muster_operator::controller::dra::DELETE_PROTECTION.to_string());
                f
            });
            if let Some(a) = self.allocation(key) {
                if !selector_admits(a, node, labels) {
                    return Err(Refusal::Node(NOT_AVAILABLE));
                }
                out.push(ClaimWrite {
                    key: key.clone(),
                    resource_version: c.resource_version().unwrap_or_default(),
                    allocation: None,
                    reserved_for: reserved,
                    finalizers,
                });
                continue;
            }
            let mut results = Vec::new();
            for (ri, r) in c.spec.devices.requests.iter().enumerate() {
                let e = r.exactly.as_ref().ok_or_else(|| {
                    Refusal::Error(format!("request {}: unsupported request type", r.name))
                })?;
                let class = self
                    .classes
                    .get(&e.device_class_name)
                    .cloned()
                    .ok_or(Refusal::Node(CANNOT_ALLOCATE))?;
                let all = e.allocation_mode.as_deref() == Some("All");
                let want = if all {
                    usize::MAX
                } else {
                    e.count.unwrap_or(1).max(1) as usize
                };
                let mut got = 0usize;
                for (id, generation, d) in &candidates {
                    if got >= want {
                        break;
                    }
                    if chosen.contains(id) || self.allocated.contains_key(id) {
                        if all {
                            // `All` needs every matching device: one taken fails it.
                            let v = self.device_value(&id.0, &id.1, *generation, d);
                            if self.passes(&class, e, &v, key, ri)? {
                                return Err(Refusal::Node(CANNOT_ALLOCATE));
                            }
                        }
                        continue;
                    }
                    let v = self.device_value(&id.0, &id.1, *generation, d);
                    if !self.passes(&class, e, &v, key, ri)? {
                        continue;
                    }
                    chosen.insert(id.clone());
                    results.push(DeviceRequestAllocationResult {
                        request: r.name.clone(),
                        driver: id.0.clone(),
                        pool: id.1.clone(),
                        device: id.2.clone(),
                        admin_access: e.admin_access.filter(|a| *a),
                    });
                    got += 1;
                }
                if got == 0 || (!all && got < want) {
                    return Err(Refusal::Node(CANNOT_ALLOCATE));
                }
            }
            out.push(ClaimWrite {
                key: key.clone(),
                resource_version: c.resource_version().unwrap_or_default(),
                allocation: Some(AllocationResult {
                    devices: Some(DeviceAllocationResult { results }),
                    node_selector: Some(node_selector(node)),
                    allocation_timestamp: None,
                }),
                reserved_for: reserved,
                finalizers,
            });
        }
        Ok(out)
    }

    /// Whether a device passes a class's selectors and a request's.
    fn passes(
        &mut self,
        class: &DeviceClass,
        e: &muster_operator::controller::dra::ExactDeviceRequest,
        device: &cel::Value,
        key: &ClaimKey,
        ri: usize,
    ) -> Result<bool, Refusal> {
        for (si, s) in class.spec.selectors.iter().enumerate() {
            if let Some(c) = &s.cel {
                let ok = self.cel.eval(&c.expression, device).map_err(|err| {
                    Refusal::Error(format!(
                        "class {}: selector #{si}: CEL runtime error: {err}",
                        class.name_any()
                    ))
                })?;
                if !ok {
                    return Ok(false);
                }
            }
        }
        for (si, s) in e.selectors.iter().enumerate() {
            if let Some(c) = &s.cel {
                let ok = self.cel.eval(&c.expression, device).map_err(|err| {
                    Refusal::Error(format!(
                        "claim {}/{}, request #{ri}: selector #{si}: CEL runtime error: {err}",
                        key.0, key.1
                    ))
                })?;
                if !ok {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// The names of the claims a pod references (`spec.resourceClaims[].resourceClaimName`).
/// Claims from templates are not supported by the stand-in (an error naming the field).
pub fn pod_claims(pod: &k8s_openapi::api::core::v1::Pod) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (i, c) in pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        match (&c.resource_claim_name, &c.resource_claim_template_name) {
            (Some(n), _) => out.push(n.clone()),
            (None, Some(_)) => {
                return Err(format!(
                    "spec.resourceClaims[{i}].resourceClaimTemplateName: claims from templates are not supported by the test control plane's scheduler"
                ));
            }
            (None, None) => {}
        }
    }
    Ok(out)
}

//! What kube-scheduler's default filter plugins decide, as pure functions over parsed pods and
//! nodes: NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector and required node
//! affinity) and NodeResourcesFit, in that order (a node's diagnosis is the first plugin that
//! rejects it, as in kube-scheduler), with kube-scheduler's reason strings and its
//! `0/N nodes are available: …` message.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::nodes::{TAINT_NOT_READY, TAINT_UNREACHABLE, TAINT_UNSCHEDULABLE};
use crate::quantity::parse_milli;

/// Resource amounts in thousandths (millicores, millibytes), pods as a plain count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Res {
    /// CPU, millicores.
    pub cpu: i128,
    /// Memory, millibytes.
    pub memory: i128,
    /// Ephemeral storage, millibytes.
    pub storage: i128,
    /// Pod slots.
    pub pods: i128,
    /// Every other resource (extended resources, hugepages), in thousandths.
    pub other: BTreeMap<String, i128>,
}

impl Res {
    fn set(&mut self, name: &str, milli: i128) {
        match name {
            "cpu" => self.cpu = milli,
            "memory" => self.memory = milli,
            "ephemeral-storage" => self.storage = milli,
            "pods" => self.pods = milli / 1000,
            other => {
                self.other.insert(other.to_string(), milli);
            }
        }
    }

    fn get(&self, name: &str) -> i128 {
        match name {
            "cpu" => self.cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.storage,
            "pods" => self.pods * 1000,
            other => self.other.get(other).copied().unwrap_or(0),
        }
    }

    fn max_with(&mut self, o: &Res) {
        self.cpu = self.cpu.max(o.cpu);
        self.memory = self.memory.max(o.memory);
        self.storage = self.storage.max(o.storage);
        for (k, v) in &o.other {
            let e = self.other.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// Add `o` to `self`.
    pub fn add(&mut self, o: &Res) {
        self.cpu += o.cpu;
        self.memory += o.memory;
        self.storage += o.storage;
        self.pods += o.pods;
        for (k, v) in &o.other {
            *self.other.entry(k.clone()).or_insert(0) += v;
        }
    }

    /// Take `o` from `self`.
    pub fn sub(&mut self, o: &Res) {
        self.cpu -= o.cpu;
        self.memory -= o.memory;
        self.storage -= o.storage;
        self.pods -= o.pods;
        for (k, v) in &o.other {
            *self.other.entry(k.clone()).or_insert(0) -= v;
        }
    }
}

/// Node-selector requirement operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Label value is one of the values.
    In,
    /// Label absent or its value is none of the values.
    NotIn,
    /// Label present.
    Exists,
    /// Label absent.
    DoesNotExist,
    /// Label value, as an integer, greater than the single value.
    Gt,
    /// Label value, as an integer, less than the single value.
    Lt,
}

/// One requirement of a node selector term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Req {
    /// Label key (or `metadata.name` for a field requirement).
    pub key: String,
    /// Operator.
    pub op: Op,
    /// Values.
    pub values: Vec<String>,
}

impl Req {
    fn matches(&self, value: Option<&str>) -> bool {
        let int = |s: &str| s.parse::<i64>().ok();
        match self.op {
            Op::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Gt | Op::Lt => {
                let (Some(v), Some(bound)) = (
                    value.and_then(int),
                    self.values.first().and_then(|s| int(s)),
                ) else {
                    return false;
                };
                if self.op == Op::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

/// A node selector term: every expression and field requirement must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// `matchExpressions` on labels.
    pub exprs: Vec<Req>,
    /// `matchFields` (`metadata.name` only).
    pub fields: Vec<Req>,
}

impl Term {
    fn matches(&self, node: &NodeView) -> bool {
        if self.exprs.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.exprs
            .iter()
            .all(|r| r.matches(node.labels.get(&r.key).map(String::as_str)))
            && self
                .fields
                .iter()
                .all(|r| r.key == "metadata.name" && r.matches(Some(node.name.as_str())))
    }

    /// Node names (`by_name`) or hostname label values (`by_host`) this term is limited to.
    fn pin(&self) -> Option<Pin> {
        let host = self
            .exprs
            .iter()
            .find(|r| r.key == muster_crds::labels::HOSTNAME && r.op == Op::In);
        let name = self
            .fields
            .iter()
            .find(|r| r.key == "metadata.name" && r.op == Op::In);
        match (host, name) {
            (_, Some(n)) => Some(Pin {
                names: n.values.clone(),
                hosts: Vec::new(),
            }),
            (Some(h), None) => Some(Pin {
                names: Vec::new(),
                hosts: h.values.clone(),
            }),
            (None, None) => None,
        }
    }
}

/// The nodes a pod can only go to, by name or by `kubernetes.io/hostname` value (a superset:
/// every candidate is still filtered in full).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pin {
    /// Node names.
    pub names: Vec<String>,
    /// `kubernetes.io/hostname` values.
    pub hosts: Vec<String>,
}

/// A taint or a toleration's view of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintV {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// A toleration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tol {
    /// Key; empty with `Exists` tolerates every key.
    pub key: String,
    /// `Exists` or `Equal`.
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; empty tolerates every effect.
    pub effect: String,
    /// `tolerationSeconds` (NoExecute): how long the pod stays once tainted.
    pub seconds: Option<i64>,
}

impl Tol {
    /// Whether this toleration tolerates `t` (Kubernetes' `ToleratesTaint`).
    pub fn tolerates(&self, t: &TaintV) -> bool {
        if !self.effect.is_empty() && self.effect != t.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != t.key {
            return false;
        }
        if self.exists {
            return true;
        }
        // An empty key needs Exists (API validation); Equal compares values.
        !self.key.is_empty() && self.value == t.value
    }
}

/// What a pod needs from a node, parsed once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNeeds {
    /// Effective requests (containers, init containers, overhead), one pod slot.
    pub requests: Res,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity terms (ORed); `None` when there is none.
    pub terms: Option<Vec<Term>>,
    /// Tolerations.
    pub tolerations: Vec<Tol>,
    /// The nodes the pod is limited to, when its selector or every affinity term names them.
    pub pin: Option<Pin>,
    /// The ResourceClaims it references (`spec.resourceClaims[].resourceClaimName`).
    pub claims: Vec<String>,
    /// The gang group it belongs to (see [`super::gang`]).
    pub group: Option<String>,
}

fn parse_op(s: &str) -> Result<Op, String> {
    Ok(match s {
        "In" => Op::In,
        "NotIn" => Op::NotIn,
        "Exists" => Op::Exists,
        "DoesNotExist" => Op::DoesNotExist,
        "Gt" => Op::Gt,
        "Lt" => Op::Lt,
        other => {
            return Err(format!(
                "unknown node selector operator {other:?}: expected In, NotIn, Exists, DoesNotExist, Gt or Lt"
            ));
        }
    })
}

fn requests_of(
    c_req: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    c_lim: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    what: &str,
) -> Result<Res, String> {
    let mut r = Res::default();
    // A limit without a request means a request of the limit (API defaulting).
    if let Some(lim) = c_lim {
        for (k, q) in lim {
            r.set(
                k,
                parse_milli(&q.0).map_err(|e| format!("{what}.limits.{k}: {e}"))?,
            );
        }
    }
    if let Some(req) = c_req {
        for (k, q) in req {
            r.set(
                k,
                parse_milli(&q.0).map_err(|e| format!("{what}.requests.{k}: {e}"))?,
            );
        }
    }
    Ok(r)
}

impl PodNeeds {
    /// Parse a pod's scheduling needs; an error names the field that cannot be understood.
    pub fn from_pod(pod: &Pod) -> Result<PodNeeds, String> {
        let spec = pod.spec.as_ref().ok_or("pod has no spec")?;
        let mut sum = Res::default();
        for (i, c) in spec.containers.iter().enumerate() {
            let r = c.resources.as_ref();
            sum.add(&requests_of(
                r.and_then(|r| r.requests.as_ref()),
                r.and_then(|r| r.limits.as_ref()),
                &format!("spec.containers[{i}].resources"),
            )?);
        }
        let mut init_max = Res::default();
        let mut sidecars = Res::default();
        for (i, c) in spec.init_containers.iter().flatten().enumerate() {
            let r = c.resources.as_ref();
            let req = requests_of(
                r.and_then(|r| r.requests.as_ref()),
                r.and_then(|r| r.limits.as_ref()),
                &format!("spec.initContainers[{i}].resources"),
            )?;
            if c.restart_policy.as_deref() == Some("Always") {
                sidecars.add(&req);
            } else {
                let mut with = req;
                with.add(&sidecars);
                init_max.max_with(&with);
            }
        }
        sum.add(&sidecars);
        sum.max_with(&init_max);
        if let Some(o) = &spec.overhead {
            sum.add(&requests_of(Some(o), None, "spec.overhead")?);
        }
        sum.pods = 1;
        let mut terms = None;
        if let Some(req) = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
        {
            let mut out = Vec::new();
            for (ti, t) in req.node_selector_terms.iter().enumerate() {
                let conv = |list: &Option<
                    Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>,
                >,
                            kind: &str|
                 -> Result<Vec<Req>, String> {
                    list.iter()
                        .flatten()
                        .enumerate()
                        .map(|(ri, r)| {
                            Ok(Req {
                                key: r.key.clone(),
                                op: parse_op(&r.operator).map_err(|e| {
                                    format!("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{ti}].{kind}[{ri}].operator: {e}")
                                })?,
                                values: r.values.clone().unwrap_or_default(),
                            })
                        })
                        .collect()
                };
                out.push(Term {
                    exprs: conv(&t.match_expressions, "matchExpressions")?,
                    fields: conv(&t.match_fields, "matchFields")?,
                });
            }
            terms = Some(out);
        }
        let node_selector: BTreeMap<String, String> =
            spec.node_selector.clone().unwrap_or_default();
        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| Tol {
                key: t.key.clone().unwrap_or_default(),
                exists: t.operator.as_deref() == Some("Exists"),
                value: t.value.clone().unwrap_or_default(),
                effect: t.effect.clone().unwrap_or_default(),
                seconds: t.toleration_seconds,
            })
            .collect();
        let pin = match node_selector.get(muster_crds::labels::HOSTNAME) {
            Some(h) => Some(Pin {
                names: Vec::new(),
                hosts: vec![h.clone()],
            }),
            None => terms.as_ref().and_then(|ts: &Vec<Term>| {
                let mut all = Pin::default();
                for t in ts {
                    let p = t.pin()?;
                    all.names.extend(p.names);
                    all.hosts.extend(p.hosts);
                }
                Some(all)
            }),
        };
        Ok(PodNeeds {
            requests: sum,
            node_selector,
            terms,
            tolerations,
            pin,
            claims: super::dra::pod_claims(pod)?,
            group: None,
        })
    }
}

/// A node as the filters see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints, plus the not-ready/unreachable taint the node lifecycle controller would add
    /// when the Ready condition is not True and the node has neither.
    pub taints: Vec<TaintV>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.allocatable`.
    pub allocatable: Res,
}

impl NodeView {
    /// The filter view of a Node object.
    pub fn from_node(node: &Node) -> NodeView {
        let name = node.metadata.name.clone().unwrap_or_default();
        let spec = node.spec.as_ref();
        let mut taints: Vec<TaintV> = spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .map(|t| TaintV {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: t.effect.clone(),
            })
            .collect();
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        let has = |k: &str| {
            taints
                .iter()
                .any(|t| t.key == k && t.effect == "NoSchedule")
        };
        let implied = match ready.as_deref() {
            Some("True") => None,
            Some("Unknown") if !has(TAINT_UNREACHABLE) => Some(TAINT_UNREACHABLE),
            Some("Unknown") => None,
            _ if !has(TAINT_NOT_READY) && !has(TAINT_UNREACHABLE) => Some(TAINT_NOT_READY),
            _ => None,
        };
        if let Some(k) = implied {
            taints.push(TaintV {
                key: k.into(),
                value: String::new(),
                effect: "NoSchedule".into(),
            });
        }
        let mut allocatable = Res::default();
        for (k, q) in node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .into_iter()
            .flatten()
        {
            if let Ok(v) = parse_milli(&q.0) {
                allocatable.set(k, v);
            }
        }
        NodeView {
            name,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable,
        }
    }

    /// The node's `kubernetes.io/hostname` label.
    pub fn hostname(&self) -> Option<&str> {
        self.labels
            .get(muster_crds::labels::HOSTNAME)
            .map(String::as_str)
    }
}

/// Why a node was rejected, worded as kube-scheduler words it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// `spec.unschedulable` without a toleration.
    Unschedulable,
    /// A NoSchedule/NoExecute taint the pod does not tolerate (`{key: value}`).
    Taint(String, String),
    /// nodeSelector or required node affinity does not match.
    Affinity,
    /// Not enough of a resource.
    Insufficient(String),
    /// No pod slot left.
    TooManyPods,
    /// The DynamicResources plugin's reason (`cannot allocate all claims`, ...).
    Dra(&'static str),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unschedulable => write!(f, "node(s) were unschedulable"),
            Reason::Taint(k, v) => write!(f, "node(s) had untolerated taint {{{k}: {v}}}"),
            Reason::Affinity => write!(f, "node(s) didn't match Pod's node affinity/selector"),
            Reason::Insufficient(r) => write!(f, "Insufficient {r}"),
            Reason::TooManyPods => write!(f, "Too many pods"),
            Reason::Dra(r) => f.write_str(r),
        }
    }
}

/// Run the filters for `pod` on `node` with `requested` already taken there.
pub fn check(pod: &PodNeeds, node: &NodeView, requested: &Res) -> Result<(), Vec<Reason>> {
    // NodeUnschedulable.
    if node.unschedulable {
        let t = TaintV {
            key: TAINT_UNSCHEDULABLE.into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        };
        if !pod.tolerations.iter().any(|tol| tol.tolerates(&t)) {
            return Err(vec![Reason::Unschedulable]);
        }
    }
    // TaintToleration.
    if let Some(t) = node.taints.iter().find(|t| {
        (t.effect == "NoSchedule" || t.effect == "NoExecute")
            && !pod.tolerations.iter().any(|tol| tol.tolerates(t))
    }) {
        return Err(vec![Reason::Taint(t.key.clone(), t.value.clone())]);
    }
    // NodeAffinity.
    let selector_ok = pod
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let terms_ok = pod
        .terms
        .as_ref()
        .is_none_or(|ts| ts.iter().any(|t| t.matches(node)));
    if !(selector_ok && terms_ok) {
        return Err(vec![Reason::Affinity]);
    }
    // NodeResourcesFit.
    let mut out = Vec::new();
    let a = &node.allocatable;
    let p = &pod.requests;
    if requested.pods + p.pods > a.pods {
        out.push(Reason::TooManyPods);
    }
    for (name, want) in [
        ("cpu", p.cpu),
        ("memory", p.memory),
        ("ephemeral-storage", p.storage),
    ] {
        if want > 0 && a.get(name) < want + requested.get(name) {
            out.push(Reason::Insufficient(name.into()));
        }
    }
    for (name, &want) in &p.other {
        if want > 0 && a.get(name) < want + requested.get(name) {
            out.push(Reason::Insufficient(name.clone()));
        }
    }
    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// kube-scheduler's LeastAllocated score (0-100): the mean free fraction of CPU and memory
/// after placing the pod. Pods that request nothing count as 100m CPU and 200Mi, as there.
pub fn score(pod: &PodNeeds, node: &NodeView, requested: &Res) -> i64 {
    let cpu = if pod.requests.cpu > 0 {
        pod.requests.cpu
    } else {
        100
    };
    let mem = if pod.requests.memory > 0 {
        pod.requests.memory
    } else {
        200 * (1 << 20) * 1000
    };
    let free = |alloc: i128, used: i128| -> i128 {
        if alloc <= 0 {
            0
        } else {
            ((alloc - used).max(0) * 100) / alloc
        }
    };
    let s = (free(node.allocatable.cpu, requested.cpu + cpu)
        + free(node.allocatable.memory, requested.memory + mem))
        / 2;
    s as i64
}

/// kube-scheduler's `numFeasibleNodesToFind`: every node below 100, else an adaptive share
/// (50% minus 1% per 125 nodes, at least 5%), at least 100.
pub fn feasible_to_find(nodes: usize) -> usize {
    if nodes < 100 {
        return nodes;
    }
    let pct = (50 - (nodes / 125) as i64).max(5) as usize;
    (nodes * pct / 100).max(100)
}

/// kube-scheduler's FitError message: `0/N nodes are available: <count> <reason>, ….`
/// (reasons sorted as strings, as kube-scheduler sorts them).
pub fn fit_error(total: usize, reasons: &HashMap<Reason, usize>) -> String {
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    if parts.is_empty() {
        format!("0/{total} nodes are available.")
    } else {
        format!("0/{total} nodes are available: {}.", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> PodNeeds {
        let mut spec = spec;
        spec.as_object_mut()
            .unwrap()
            .entry("containers")
            .or_insert(json!([{"name": "c", "image": "x"}]));
        let p: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
        PodNeeds::from_pod(&p).unwrap()
    }

    fn node(
        name: &str,
        labels: serde_json::Value,
        taints: serde_json::Value,
        ready: &str,
    ) -> NodeView {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "3"},
                       "conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap();
        NodeView::from_node(&n)
    }

    #[test]
    fn requests_combine_containers_init_containers_and_overhead() {
        let p = pod(json!({
            "containers": [
                {"name": "a", "image": "x", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "b", "image": "x", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}}
            ],
            "initContainers": [
                {"name": "i", "image": "x", "resources": {"requests": {"cpu": "3"}}}
            ],
            "overhead": {"cpu": "100m"}
        }));
        assert_eq!(p.requests.cpu, 3100);
        assert_eq!(p.requests.memory, (1i128 << 30) * 1000);
        assert_eq!(p.requests.other["nvidia.com/gpu"], 2000);
        assert_eq!(p.requests.pods, 1);
    }

    #[test]
    fn affinity_operators_and_fields() {
        let n = node(
            "gpu001",
            json!({"kubernetes.io/hostname": "gpu001", "tier": "5"}),
            json!([]),
            "True",
        );
        let req = |exprs: serde_json::Value, fields: serde_json::Value| {
            pod(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": exprs, "matchFields": fields}]}}}}),
            )
        };
        let ok = |p: &PodNeeds| check(p, &n, &Res::default()).is_ok();
        assert!(ok(&req(
            json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu001"]}]),
            json!([])
        )));
        assert!(!ok(&req(
            json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu002"]}]),
            json!([])
        )));
        assert!(ok(&req(
            json!([{"key": "zone", "operator": "NotIn", "values": ["a"]}]),
            json!([])
        )));
        assert!(ok(&req(
            json!([{"key": "zone", "operator": "DoesNotExist"}]),
            json!([])
        )));
        assert!(!ok(&req(
            json!([{"key": "zone", "operator": "Exists"}]),
            json!([])
        )));
        assert!(ok(&req(
            json!([{"key": "tier", "operator": "Gt", "values": ["4"]}]),
            json!([])
        )));
        assert!(!ok(&req(
            json!([{"key": "tier", "operator": "Lt", "values": ["4"]}]),
            json!([])
        )));
        assert!(ok(&req(
            json!([]),
            json!([{"key": "metadata.name", "operator": "In", "values": ["gpu001"]}])
        )));
        assert!(!ok(&req(
            json!([]),
            json!([{"key": "metadata.name", "operator": "NotIn", "values": ["gpu001"]}])
        )));
        assert!(
            !ok(&req(json!([]), json!([]))),
            "an empty term matches nothing"
        );
        let pinned = req(
            json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu001"]}]),
            json!([]),
        );
        assert_eq!(pinned.pin.unwrap().hosts, vec!["gpu001"]);
        let sel = pod(json!({"nodeSelector": {"tier": "5"}}));
        assert!(ok(&sel));
        assert!(!ok(&pod(json!({"nodeSelector": {"tier": "6"}}))));
    }

    #[test]
    fn taints_tolerations_and_readiness() {
        let tainted = node(
            "n",
            json!({}),
            json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
            "True",
        );
        let plain = pod(json!({}));
        assert_eq!(
            check(&plain, &tainted, &Res::default()).unwrap_err(),
            vec![Reason::Taint("gpu".into(), "yes".into())]
        );
        for tol in [
            json!({"key": "gpu", "operator": "Equal", "value": "yes"}),
            json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}),
            json!({"operator": "Exists"}),
        ] {
            let p = pod(json!({"tolerations": [tol]}));
            assert!(check(&p, &tainted, &Res::default()).is_ok(), "{tol}");
        }
        let wrong =
            pod(json!({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "no"}]}));
        assert!(check(&wrong, &tainted, &Res::default()).is_err());
        let soft = node(
            "n",
            json!({}),
            json!([{"key": "x", "effect": "PreferNoSchedule"}]),
            "True",
        );
        assert!(check(&plain, &soft, &Res::default()).is_ok());
        let down = node("n", json!({}), json!([]), "Unknown");
        assert_eq!(
            check(&plain, &down, &Res::default()).unwrap_err(),
            vec![Reason::Taint(TAINT_UNREACHABLE.into(), String::new())]
        );
        let not_ready = node("n", json!({}), json!([]), "False");
        assert_eq!(
            check(&plain, &not_ready, &Res::default()).unwrap_err()[0].to_string(),
            "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        );
        let mut cordoned = node("n", json!({}), json!([]), "True");
        cordoned.unschedulable = true;
        assert_eq!(
            check(&plain, &cordoned, &Res::default()).unwrap_err(),
            vec![Reason::Unschedulable]
        );
    }

    #[test]
    fn resources_fit_against_what_is_taken() {
        let n = node("n", json!({}), json!([]), "True");
        let p = pod(
            json!({"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "3", "memory": "8Gi"}}}]}),
        );
        assert!(check(&p, &n, &Res::default()).is_ok());
        let taken = Res {
            cpu: 2000,
            memory: 1,
            pods: 1,
            ..Res::default()
        };
        assert_eq!(
            check(&p, &n, &taken).unwrap_err(),
            vec![
                Reason::Insufficient("cpu".into()),
                Reason::Insufficient("memory".into())
            ]
        );
        let full = Res {
            pods: 3,
            ..Res::default()
        };
        assert_eq!(check(&p, &n, &full).unwrap_err(), vec![Reason::TooManyPods]);
        let gpu = pod(
            json!({"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
        );
        assert_eq!(
            check(&gpu, &n, &Res::default()).unwrap_err(),
            vec![Reason::Insufficient("nvidia.com/gpu".into())]
        );
    }

    #[test]
    fn message_matches_kube_scheduler() {
        let mut r = HashMap::new();
        r.insert(Reason::Affinity, 15);
        r.insert(Reason::Insufficient("cpu".into()), 1);
        assert_eq!(
            fit_error(16, &r),
            "0/16 nodes are available: 1 Insufficient cpu, 15 node(s) didn't match Pod's node affinity/selector."
        );
        assert_eq!(feasible_to_find(50), 50);
        assert_eq!(feasible_to_find(1000), 420);
        assert_eq!(feasible_to_find(5000), 500);
        assert_eq!(feasible_to_find(100_000), 5000);
    }

    #[test]
    fn bad_operators_name_the_field() {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]}}}}}))
        .unwrap();
        let e = PodNeeds::from_pod(&p).unwrap_err();
        assert!(
            e.contains("nodeSelectorTerms[0].matchExpressions[0].operator") && e.contains("Near"),
            "{e}"
        );
    }
}

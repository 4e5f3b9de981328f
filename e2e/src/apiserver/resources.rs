//! The kinds the double serves: a fixed table of built-in Kubernetes resources plus whatever
//! CustomResourceDefinitions have been created. Everything else (storage, watch, patching) is
//! generic over JSON; the [`Builtin`] tag selects the few kind-specific behaviours.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::cel::CrdValidation;
use super::schema::Schema;

/// A group and resource (plural): the storage identity of a kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// API group, `""` for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// A group/resource pair.
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// Kinds with behaviour beyond generic storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// No special behaviour.
    Generic,
    /// core/v1 Pod: defaults, status on create, binding, graceful deletion, spec immutability.
    Pod,
    /// core/v1 Node.
    Node,
    /// core/v1 Namespace: finalizer, phase, content deletion.
    Namespace,
    /// core/v1 Service: cluster IP allocation.
    Service,
    /// core/v1 Event.
    Event,
    /// events.k8s.io/v1 Event: a view on core/v1 Events (one storage, as in Kubernetes).
    EventV1,
    /// core/v1 Secret.
    Secret,
    /// apiextensions.k8s.io/v1 CustomResourceDefinition: serves its kind.
    Crd,
    /// An instance of a CustomResourceDefinition.
    Custom,
    /// resource.k8s.io/v1 ResourceClaim: spec immutable.
    ResourceClaim,
    /// resource.k8s.io/v1 ResourceSlice: field selectors on driver, node and pool.
    ResourceSlice,
}

/// Optional API groups, as feature gates and `--runtime-config` switch them on a real API
/// server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// Serve `resource.k8s.io/v1` (DeviceClasses, ResourceSlices, ResourceClaims,
    /// ResourceClaimTemplates) and keep pods' `spec.resourceClaims` (Kubernetes 1.34 and
    /// later). Off: those pod fields are dropped, as with the `DynamicResourceAllocation` gate
    /// off.
    pub dra: bool,
    /// Serve Kubernetes' gang API (the `GenericWorkload` gate): which shape.
    pub workload: Option<WorkloadApi>,
}

/// The shapes of the Workload/PodGroup API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadApi {
    /// Kubernetes 1.35: `scheduling.k8s.io/v1alpha1` Workload; pods' `spec.workloadRef`.
    V1alpha1,
    /// Kubernetes 1.36: `scheduling.k8s.io/v1alpha2` Workload and PodGroup; pods'
    /// `spec.schedulingGroup`.
    V1alpha2,
}

/// A printer column of a CRD version (`additionalPrinterColumns`).
#[derive(Clone, Debug)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: integer, number, string, boolean, date.
    pub typ: String,
    /// Optional format.
    pub format: String,
    /// Description.
    pub description: String,
    /// 0 = shown by default, >0 only with `-o wide`.
    pub priority: i64,
    /// Simple JSONPath.
    pub json_path: String,
}

/// What a CRD version adds to its resource type.
#[derive(Debug)]
pub struct CrdVersion {
    /// Name of the CRD object.
    pub crd_name: String,
    /// The version's raw `openAPIV3Schema` (for OpenAPI documents).
    pub raw_schema: Option<Value>,
    /// Structural schema (validation, pruning, defaulting, list semantics).
    pub schema: Option<Arc<Schema>>,
    /// Compiled CEL rules.
    pub validation: Option<Arc<CrdValidation>>,
    /// Printer columns.
    pub columns: Vec<PrinterColumn>,
    /// Whether this is the storage version.
    pub storage: bool,
}

/// One served group/version/resource.
#[derive(Debug)]
pub struct ResourceType {
    /// API group (`""` for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`po`, `bj`).
    pub short_names: Vec<String>,
    /// Categories (`all`, `muster`).
    pub categories: Vec<String>,
    /// Has a status subresource.
    pub status: bool,
    /// Keeps `metadata.generation`.
    pub generation: bool,
    /// PUT without resourceVersion allowed.
    pub unconditional_update: bool,
    /// PUT creates a missing object.
    pub create_on_update: bool,
    /// Extra subresources (`binding`, `eviction`, `log`).
    pub extra_subresources: &'static [&'static str],
    /// Kind-specific behaviour.
    pub builtin: Builtin,
    /// Where the objects are stored (differs from this resource only for views).
    pub storage: GroupResource,
    /// CRD data for custom resources.
    pub crd: Option<Arc<CrdVersion>>,
}

impl ResourceType {
    /// `apiVersion` of this resource's objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    /// Group/resource of this type.
    pub fn gr(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }
    /// `pods`, `batchjobs.muster.dev`: how error messages name the resource.
    pub fn qualified_resource(&self) -> String {
        self.gr().to_string()
    }
    /// `Pod`, `BatchJob.muster.dev`: how Invalid errors name the kind.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
    /// The verbs of the collection and objects.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
    /// Whether strategic merge patch is accepted (built-ins only, as in Kubernetes).
    pub fn accepts_strategic_merge(&self) -> bool {
        self.crd.is_none()
    }
}

struct Spec {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    generation: bool,
    create_on_update: bool,
    extra: &'static [&'static str],
    builtin: Builtin,
}

const fn spec(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Spec {
    Spec {
        group,
        version,
        plural,
        singular,
        kind,
        namespaced,
        short: &[],
        categories: &[],
        status: false,
        generation: false,
        create_on_update: false,
        extra: &[],
        builtin: Builtin::Generic,
    }
}

impl Spec {
    const fn short(mut self, s: &'static [&'static str]) -> Self {
        self.short = s;
        self
    }
    const fn cat(mut self, c: &'static [&'static str]) -> Self {
        self.categories = c;
        self
    }
    const fn status(mut self) -> Self {
        self.status = true;
        self
    }
    const fn generation(mut self) -> Self {
        self.generation = true;
        self
    }
    const fn upsert(mut self) -> Self {
        self.create_on_update = true;
        self
    }
    const fn extra(mut self, e: &'static [&'static str]) -> Self {
        self.extra = e;
        self
    }
    const fn builtin(mut self, b: Builtin) -> Self {
        self.builtin = b;
        self
    }
}

const ALL: &[&str] = &["all"];

fn builtin_specs() -> Vec<Spec> {
    use Builtin as B;
    vec![
        spec("", "v1", "pods", "pod", "Pod", true)
            .short(&["po"])
            .cat(ALL)
            .status()
            .extra(&["binding", "eviction", "log"])
            .builtin(B::Pod),
        spec("", "v1", "nodes", "node", "Node", false)
            .short(&["no"])
            .status()
            .builtin(B::Node),
        spec("", "v1", "namespaces", "namespace", "Namespace", false)
            .short(&["ns"])
            .status()
            .builtin(B::Namespace),
        spec("", "v1", "services", "service", "Service", true)
            .short(&["svc"])
            .cat(ALL)
            .status()
            .builtin(B::Service),
        spec("", "v1", "configmaps", "configmap", "ConfigMap", true).short(&["cm"]),
        spec("", "v1", "secrets", "secret", "Secret", true).builtin(B::Secret),
        spec(
            "",
            "v1",
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
            true,
        )
        .short(&["sa"]),
        spec("", "v1", "events", "event", "Event", true)
            .short(&["ev"])
            .upsert()
            .builtin(B::Event),
        spec("", "v1", "endpoints", "endpoints", "Endpoints", true)
            .short(&["ep"])
            .upsert(),
        spec(
            "",
            "v1",
            "resourcequotas",
            "resourcequota",
            "ResourceQuota",
            true,
        )
        .short(&["quota"])
        .status(),
        spec("", "v1", "limitranges", "limitrange", "LimitRange", true).short(&["limits"]),
        spec(
            "",
            "v1",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            "PersistentVolumeClaim",
            true,
        )
        .short(&["pvc"])
        .status(),
        spec(
            "",
            "v1",
            "persistentvolumes",
            "persistentvolume",
            "PersistentVolume",
            false,
        )
        .short(&["pv"])
        .status(),
        spec(
            "apps",
            "v1",
            "deployments",
            "deployment",
            "Deployment",
            true,
        )
        .short(&["deploy"])
        .cat(ALL)
        .status()
        .generation(),
        spec("apps", "v1", "daemonsets", "daemonset", "DaemonSet", true)
            .short(&["ds"])
            .cat(ALL)
            .status()
            .generation(),
        spec(
            "apps",
            "v1",
            "replicasets",
            "replicaset",
            "ReplicaSet",
            true,
        )
        .short(&["rs"])
        .cat(ALL)
        .status()
        .generation(),
        spec(
            "apps",
            "v1",
            "statefulsets",
            "statefulset",
            "StatefulSet",
            true,
        )
        .short(&["sts"])
        .cat(ALL)
        .status()
        .generation(),
        spec(
            "apps",
            "v1",
            "controllerrevisions",
            "controllerrevision",
            "ControllerRevision",
            true,
        ),
        spec("batch", "v1", "jobs", "job", "Job", true)
            .cat(ALL)
            .status()
            .generation(),
        spec("batch", "v1", "cronjobs", "cronjob", "CronJob", true)
            .short(&["cj"])
            .cat(ALL)
            .status()
            .generation(),
        spec(
            "coordination.k8s.io",
            "v1",
            "leases",
            "lease",
            "Lease",
            true,
        )
        .upsert(),
        spec("events.k8s.io", "v1", "events", "event", "Event", true)
            .short(&["ev"])
            .upsert()
            .builtin(B::EventV1),
        spec(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "customresourcedefinition",
            "CustomResourceDefinition",
            false,
        )
        .short(&["crd", "crds"])
        .cat(&["api-extensions"])
        .status()
        .generation()
        .builtin(B::Crd),
        spec(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "validatingadmissionpolicy",
            "ValidatingAdmissionPolicy",
            false,
        )
        .cat(&["api-extensions"])
        .status()
        .generation(),
        spec(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "validatingadmissionpolicybinding",
            "ValidatingAdmissionPolicyBinding",
            false,
        )
        .cat(&["api-extensions"])
        .generation(),
        spec(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "validatingwebhookconfiguration",
            "ValidatingWebhookConfiguration",
            false,
        )
        .cat(&["api-extensions"])
        .generation(),
        spec(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "mutatingwebhookconfiguration",
            "MutatingWebhookConfiguration",
            false,
        )
        .cat(&["api-extensions"])
        .generation(),
        spec(
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            "role",
            "Role",
            true,
        ),
        spec(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "rolebinding",
            "RoleBinding",
            true,
        ),
        spec(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "clusterrole",
            "ClusterRole",
            false,
        ),
        spec(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
            false,
        ),
        spec(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "priorityclass",
            "PriorityClass",
            false,
        )
        .short(&["pc"]),
        spec(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            "PodDisruptionBudget",
            true,
        )
        .short(&["pdb"])
        .status()
        .generation(),
        spec(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "endpointslice",
            "EndpointSlice",
            true,
        ),
        spec(
            "node.k8s.io",
            "v1",
            "runtimeclasses",
            "runtimeclass",
            "RuntimeClass",
            false,
        ),
        spec(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "storageclass",
            "StorageClass",
            false,
        )
        .short(&["sc"]),
        spec(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "networkpolicy",
            "NetworkPolicy",
            true,
        )
        .short(&["netpol"])
        .generation(),
        spec(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "ingress",
            "Ingress",
            true,
        )
        .short(&["ing"])
        .status()
        .generation(),
    ]
}

/// The kinds of the optional groups that `features` switch on.
fn feature_specs(features: Features) -> Vec<Spec> {
    use Builtin as B;
    let mut out = Vec::new();
    if features.dra {
        out.extend([
            spec(
                "resource.k8s.io",
                "v1",
                "deviceclasses",
                "deviceclass",
                "DeviceClass",
                false,
            )
            .generation(),
            spec(
                "resource.k8s.io",
                "v1",
                "resourceslices",
                "resourceslice",
                "ResourceSlice",
                false,
            )
            .generation()
            .builtin(B::ResourceSlice),
            spec(
                "resource.k8s.io",
                "v1",
                "resourceclaims",
                "resourceclaim",
                "ResourceClaim",
                true,
            )
            .status()
            .builtin(B::ResourceClaim),
            spec(
                "resource.k8s.io",
                "v1",
                "resourceclaimtemplates",
                "resourceclaimtemplate",
                "ResourceClaimTemplate",
                true,
            ),
        ]);
    }
    match features.workload {
        Some(WorkloadApi::V1alpha1) => out.push(spec(
            "scheduling.k8s.io",
            "v1alpha1",
            "workloads",
            "workload",
            "Workload",
            true,
        )),
        Some(WorkloadApi::V1alpha2) => out.extend([
            spec(
                "scheduling.k8s.io",
                "v1alpha2",
                "workloads",
                "workload",
                "Workload",
                true,
            ),
            spec(
                "scheduling.k8s.io",
                "v1alpha2",
                "podgroups",
                "podgroup",
                "PodGroup",
                true,
            )
            .status(),
        ]),
        None => {}
    }
    out
}

fn builtin_types(features: Features) -> Vec<Arc<ResourceType>> {
    builtin_specs()
        .into_iter()
        .chain(feature_specs(features))
        .map(|s| {
            let storage = if s.builtin == Builtin::EventV1 {
                GroupResource::new("", "events")
            } else {
                GroupResource::new(s.group, s.plural)
            };
            Arc::new(ResourceType {
                group: s.group.into(),
                version: s.version.into(),
                plural: s.plural.into(),
                singular: s.singular.into(),
                kind: s.kind.into(),
                namespaced: s.namespaced,
                short_names: s.short.iter().map(|x| x.to_string()).collect(),
                categories: s.categories.iter().map(|x| x.to_string()).collect(),
                status: s.status,
                generation: s.generation,
                unconditional_update: true,
                create_on_update: s.create_on_update,
                extra_subresources: s.extra,
                builtin: s.builtin,
                storage,
                crd: None,
            })
        })
        .collect()
}

/// An immutable snapshot of everything served; replaced whole when CRDs change.
#[derive(Debug, Default)]
pub struct Catalog {
    /// All types in discovery order (core, built-in groups, then CRD groups).
    pub types: Vec<Arc<ResourceType>>,
    by_gvr: HashMap<(String, String, String), Arc<ResourceType>>,
}

impl Catalog {
    fn build(
        builtins: &[Arc<ResourceType>],
        crds: &BTreeMap<String, Vec<Arc<ResourceType>>>,
    ) -> Self {
        let mut types: Vec<Arc<ResourceType>> = builtins.to_vec();
        for ts in crds.values() {
            types.extend(ts.iter().cloned());
        }
        let by_gvr = types
            .iter()
            .map(|t| {
                (
                    (t.group.clone(), t.version.clone(), t.plural.clone()),
                    t.clone(),
                )
            })
            .collect();
        Self { types, by_gvr }
    }

    /// The type served at group/version/plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.by_gvr
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Any served version of a storage group/resource.
    pub fn by_storage(&self, gr: &GroupResource) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| &t.storage == gr && t.builtin != Builtin::EventV1)
            .cloned()
    }

    /// Groups in discovery order with their versions in preference order.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in &self.types {
            match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, vs)) => {
                    if !vs.contains(&t.version) {
                        vs.push(t.version.clone());
                    }
                }
                None => out.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        out
    }

    /// Types of one group/version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ResourceType>> + 'a {
        self.types
            .iter()
            .filter(move |t| t.group == group && t.version == version)
    }
}

/// Split `apps/v1` into (`apps`, `v1`) and `v1` into (`""`, `v1`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// The mutable registry: built-ins plus the types of established CRDs.
#[derive(Debug)]
pub struct Registry {
    builtins: Vec<Arc<ResourceType>>,
    crds: RwLock<BTreeMap<String, Vec<Arc<ResourceType>>>>,
    catalog: RwLock<Arc<Catalog>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new(Features::default())
    }
}

impl Registry {
    /// The built-in kinds plus those `features` switch on.
    pub fn new(features: Features) -> Self {
        let builtins = builtin_types(features);
        let catalog = Arc::new(Catalog::build(&builtins, &BTreeMap::new()));
        Self {
            builtins,
            crds: RwLock::new(BTreeMap::new()),
            catalog: RwLock::new(catalog),
        }
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().expect("catalog lock").clone()
    }

    /// Serve (or re-serve) the types of a CRD.
    pub fn set_crd(&self, crd_name: &str, types: Vec<Arc<ResourceType>>) {
        let mut crds = self.crds.write().expect("crd lock");
        crds.insert(crd_name.to_string(), types);
        *self.catalog.write().expect("catalog lock") =
            Arc::new(Catalog::build(&self.builtins, &crds));
    }

    /// Stop serving a CRD's types.
    pub fn remove_crd(&self, crd_name: &str) {
        let mut crds = self.crds.write().expect("crd lock");
        crds.remove(crd_name);
        *self.catalog.write().expect("catalog lock") =
            Arc::new(Catalog::build(&self.builtins, &crds));
    }
}

//! Partition objects as the core's partitions (the default resolved), and which nodes
//! belong to one.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use muster_crds::slurm::{MemSize, TimeLimit};
use muster_crds::v1alpha1::Partition;

use crate::core::{
    self, LabelSelector, PartitionId, SelectorOperator, SelectorRequirement, TaintEffect,
    Toleration,
};

use super::{FieldError, parse_ios, parse_str};
use crate::controller::quantity;

/// The Partition objects as the core sees them.
#[derive(Clone, Debug, Default)]
pub struct PartitionTable {
    /// Core partitions; [`PartitionId`] indexes this list (sorted by name).
    pub parts: Vec<core::Partition>,
    /// Index by name.
    pub by_name: HashMap<String, PartitionId>,
    /// The default partition: the one with `default: true` (the first by name when several
    /// claim it).
    pub default: Option<PartitionId>,
    /// Names of every partition claiming `default: true`, when more than one does.
    pub default_conflict: Vec<String>,
    /// Partitions left out because a field does not parse (CEL normally refuses these).
    pub invalid: BTreeMap<String, Vec<FieldError>>,
}

impl PartitionTable {
    /// The partition a job runs in: its `spec.partition`, else the default. `Err` carries the
    /// name that does not resolve (empty when there is no default).
    pub fn resolve(&self, name: Option<&str>) -> Result<PartitionId, String> {
        match name {
            Some(n) => self.by_name.get(n).copied().ok_or_else(|| n.to_string()),
            None => self.default.ok_or_else(String::new),
        }
    }

    /// The partition's name.
    pub fn name(&self, id: PartitionId) -> &str {
        self.parts
            .get(id as usize)
            .map(|p| p.name.as_str())
            .unwrap_or("")
    }
}

fn time_limit(
    field: &str,
    v: &Option<IntOrString>,
    errs: &mut Vec<FieldError>,
) -> Option<TimeLimit> {
    parse_ios(field, v, TimeLimit::from_int, TimeLimit::parse, errs)
}

/// A Kubernetes label selector as the core's.
pub fn selector(s: &KubeSelector, field: &str) -> Result<LabelSelector, FieldError> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let operator = match e.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            o => {
                return Err(FieldError::new(
                    format!("{field}.matchExpressions[{i}].operator"),
                    format!(
                        "{o:?} is not a selector operator: use In, NotIn, Exists or DoesNotExist"
                    ),
                ));
            }
        };
        out.match_expressions.push(SelectorRequirement {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

/// A Kubernetes toleration as the core's.
pub fn toleration(
    t: &k8s_openapi::api::core::v1::Toleration,
    field: &str,
) -> Result<Toleration, FieldError> {
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(
            e.parse::<TaintEffect>()
                .map_err(|m| FieldError::new(format!("{field}.effect"), m))?,
        ),
    };
    let exists = match t.operator.as_deref() {
        None | Some("Equal") => false,
        Some("Exists") => true,
        Some(o) => {
            return Err(FieldError::new(
                format!("{field}.operator"),
                format!("{o:?} is not a toleration operator: use Equal or Exists"),
            ));
        }
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        exists,
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

/// One Partition as the core's.
pub fn partition(p: &Partition) -> Result<core::Partition, Vec<FieldError>> {
    let s = &p.spec;
    let mut errs = Vec::new();
    let sel = match &s.node_selector {
        Some(ls) => selector(ls, "spec.nodeSelector")
            .map_err(|e| errs.push(e))
            .unwrap_or_default(),
        None => LabelSelector::default(),
    };
    let tolerations = s
        .tolerations
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            toleration(t, &format!("spec.tolerations[{i}]"))
                .map_err(|e| errs.push(e))
                .ok()
        })
        .collect();
    let default_time = time_limit("spec.defaultTime", &s.default_time, &mut errs);
    let max_time = time_limit("spec.maxTime", &s.max_time, &mut errs);
    let def_mem = parse_str(
        "spec.defMemPerGpu",
        &s.def_mem_per_gpu,
        MemSize::parse,
        &mut errs,
    );
    let node_resources = node_resources(s)
        .map_err(|e| errs.push(e))
        .unwrap_or_default();
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(core::Partition {
        name: p.name_any(),
        selector: sel,
        topology: s.topology.clone(),
        state: p.state(),
        default_time,
        max_time,
        min_nodes: s.min_nodes,
        max_nodes: s.max_nodes,
        priority_tier: s.priority_tier.unwrap_or(0),
        preempt_mode: s.preempt_mode.unwrap_or_default(),
        allowed_namespaces: s.allowed_namespaces.clone(),
        tolerations,
        def_cpu_per_gpu: s.def_cpu_per_gpu,
        def_mem_per_gpu_mib: def_mem.map(|m| m.mib()),
        grace_time_secs: u64::from(s.grace_time_seconds.unwrap_or(0)),
        default_image: s.default_image.clone(),
        node_resources,
    })
}

/// `spec.jobEnvironment.resources` as the core's per-node-pod counts (extended resources are
/// whole numbers).
pub fn node_resources(
    s: &muster_crds::v1alpha1::PartitionSpec,
) -> Result<BTreeMap<String, u64>, FieldError> {
    let mut out = BTreeMap::new();
    for (k, q) in s.job_environment.iter().flat_map(|e| e.resources.iter()) {
        let field = format!("spec.jobEnvironment.resources[{k}]");
        let n = quantity::count(q).map_err(|e| FieldError {
            field: field.clone(),
            message: e.to_string(),
        })?;
        if n == 0 {
            continue;
        }
        out.insert(k.clone(), n);
    }
    Ok(out)
}

/// Every Partition, sorted by name, with the default resolved.
pub fn partitions<'a>(list: impl IntoIterator<Item = &'a Partition>) -> PartitionTable {
    let mut all: Vec<&Partition> = list.into_iter().collect();
    all.sort_by_key(|p| p.name_any());
    let mut t = PartitionTable::default();
    let mut defaults = Vec::new();
    for p in all {
        match partition(p) {
            Ok(cp) => {
                let id = t.parts.len() as PartitionId;
                if p.spec.default == Some(true) {
                    defaults.push(id);
                }
                t.by_name.insert(cp.name.clone(), id);
                t.parts.push(cp);
            }
            Err(e) => {
                t.invalid.insert(p.name_any(), e);
            }
        }
    }
    t.default = defaults.first().copied();
    if defaults.len() > 1 {
        t.default_conflict = defaults
            .iter()
            .map(|&d| t.parts[d as usize].name.clone())
            .collect();
    }
    t
}

/// Whether a node belongs to a partition: its selector matches and every `NoSchedule` /
/// `NoExecute` taint is tolerated (the rule the core applies).
pub fn in_partition(p: &core::Partition, n: &core::Node) -> bool {
    p.selector.matches(&n.labels)
        && n.taints.iter().all(|t| {
            t.effect == TaintEffect::PreferNoSchedule
                || p.tolerations.iter().any(|tol| tol.tolerates(t))
        })
}

#[cfg(test)]
mod tests {
    use super::super::node;
    use super::super::tests_support::{kube_node, part, s};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use muster_crds::v1alpha1::{PartitionSpec, PartitionState, PreemptMode};

    #[test]
    fn partitions_resolve_the_default_and_report_conflicts() {
        let t = partitions(&[
            part(
                "b",
                PartitionSpec {
                    default: Some(true),
                    ..Default::default()
                },
            ),
            part(
                "a",
                PartitionSpec {
                    default: Some(true),
                    ..Default::default()
                },
            ),
            part("c", PartitionSpec::default()),
        ]);
        assert_eq!(t.name(0), "a");
        assert_eq!(t.default, Some(0));
        assert_eq!(t.default_conflict, vec!["a", "b"]);
        assert_eq!(t.resolve(None), Ok(0));
        assert_eq!(t.resolve(Some("c")), Ok(2));
        assert_eq!(t.resolve(Some("zz")), Err("zz".into()));
        let none = partitions(&[part("x", PartitionSpec::default())]);
        assert_eq!(none.resolve(None), Err(String::new()));
    }

    #[test]
    fn partition_fields_translate() {
        let p = part(
            "gpu",
            PartitionSpec {
                node_selector: Some(KubeSelector {
                    match_labels: Some([("pool".to_string(), "h100".to_string())].into()),
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "zone".into(),
                        operator: "In".into(),
                        values: Some(vec!["a".into()]),
                    }]),
                }),
                topology: vec!["muster.dev/leaf".into(), "kubernetes.io/hostname".into()],
                state: Some(PartitionState::Drain),
                default_time: s("1:00:00"),
                max_time: s("1-00:00:00"),
                min_nodes: Some(1),
                max_nodes: Some(64),
                priority_tier: Some(5),
                preempt_mode: Some(PreemptMode::Requeue),
                allowed_namespaces: vec!["ml".into()],
                tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                    key: Some("nvidia.com/gpu".into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoSchedule".into()),
                    ..Default::default()
                }],
                def_cpu_per_gpu: Some(12),
                def_mem_per_gpu: Some("64G".into()),
                grace_time_seconds: Some(30),
                ..Default::default()
            },
        );
        let c = partition(&p).unwrap();
        assert_eq!(c.name, "gpu");
        assert_eq!(c.selector.match_labels["pool"], "h100");
        assert_eq!(
            c.selector.match_expressions[0].operator,
            SelectorOperator::In
        );
        assert_eq!(c.state, PartitionState::Drain);
        assert_eq!(c.default_time, Some(TimeLimit::from_minutes(60)));
        assert_eq!(c.max_time, Some(TimeLimit::from_minutes(1440)));
        assert_eq!(c.priority_tier, 5);
        assert_eq!(c.preempt_mode, PreemptMode::Requeue);
        assert!(c.tolerations[0].exists);
        assert_eq!(c.tolerations[0].effect, Some(TaintEffect::NoSchedule));
        assert_eq!(c.def_mem_per_gpu_mib, Some(64 * 1024));
        assert_eq!(c.grace_time_secs, 30);

        let bad = part(
            "bad",
            PartitionSpec {
                max_time: s("soon"),
                tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                    operator: Some("Maybe".into()),
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        let e = partition(&bad).unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.maxTime"));
        assert!(fields.contains(&"spec.tolerations[0].operator"));
        let t = partitions(&[bad]);
        assert!(t.parts.is_empty());
        assert!(t.invalid.contains_key("bad"));
    }

    #[test]
    fn membership_needs_selector_and_tolerated_taints() {
        let n = node(&kube_node("gpu001", true), None);
        let mut p = core::Partition::new("p", vec![]);
        assert!(!in_partition(&p, &n), "NoSchedule taint not tolerated");
        p.tolerations.push(Toleration {
            key: "nvidia.com/gpu".into(),
            exists: true,
            ..Default::default()
        });
        assert!(in_partition(&p, &n));
        p.selector
            .match_labels
            .insert("muster.dev/leaf".into(), "leaf2".into());
        assert!(!in_partition(&p, &n));
    }
}

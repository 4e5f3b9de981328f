//! Rendering: every object of every value set parses as its Kubernetes type, the default
//! install has every component, and `helm lint` is clean.

use super::*;

#[test]
fn every_rendered_object_parses_as_its_kubernetes_type() {
    for (what, values) in scenarios() {
        let Some(r) = render(values) else { return };
        assert!(!r.objects.is_empty(), "{what}: nothing rendered");
        let errors: Vec<String> = r
            .objects
            .iter()
            .filter_map(|o| parse_as_kind(o).err())
            .collect();
        assert!(errors.is_empty(), "{what}: {errors:#?}");
        // Names are unique per kind and namespace, as the API server requires.
        let mut seen = BTreeSet::new();
        for o in &r.objects {
            let key = format!(
                "{}/{}/{}",
                o.kind(),
                o.value["metadata"]["namespace"].as_str().unwrap_or(""),
                o.name()
            );
            assert!(seen.insert(key.clone()), "{what}: {key} rendered twice");
        }
        assert!(r.notes.contains("kubectl"), "{what}: NOTES.txt is empty");
    }
}

#[test]
fn default_install_has_every_component() {
    let Some(r) = render(json!({})) else { return };
    let want: BTreeSet<String> = [
        "ServiceAccount/muster-operator",
        "ServiceAccount/muster-node-agent",
        "ClusterRole/muster-operator",
        "ClusterRoleBinding/muster-operator",
        "Role/muster-operator",
        "RoleBinding/muster-operator",
        "ClusterRole/muster-node-agent",
        "ClusterRoleBinding/muster-node-agent",
        "Deployment/muster-operator",
        "ConfigMap/muster-operator-scheduler",
        "Service/muster-operator-metrics",
        "PodDisruptionBudget/muster-operator",
        "DaemonSet/muster-node-agent",
        "ValidatingAdmissionPolicy/muster-gpu-binding",
        "ValidatingAdmissionPolicyBinding/muster-gpu-binding",
        "ValidatingAdmissionPolicy/muster-node-agent-scope",
        "ValidatingAdmissionPolicyBinding/muster-node-agent-scope",
        "Service/muster-operator-webhook",
        "MutatingWebhookConfiguration/muster-operator",
        "ValidatingWebhookConfiguration/muster-operator",
        "Partition/gpu",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(r.summary(), want);
    // Namespaced objects go to the release namespace; cluster-scoped ones carry none.
    for o in &r.objects {
        let ns = o.value["metadata"]["namespace"].as_str();
        let cluster_scoped = matches!(
            o.kind(),
            "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingWebhookConfiguration"
                | "ValidatingWebhookConfiguration"
                | "Partition"
        );
        if cluster_scoped {
            assert_eq!(ns, None, "{} {} is cluster-scoped", o.kind(), o.name());
        } else {
            assert_eq!(ns, Some(NAMESPACE), "{} {}", o.kind(), o.name());
        }
        assert_eq!(
            o.value["metadata"]["labels"]["app.kubernetes.io/instance"],
            "muster",
            "{} {} lacks the instance label",
            o.kind(),
            o.name()
        );
    }
}

#[test]
fn helm_lint_is_clean() {
    for (what, values) in scenarios() {
        let Some(answer) = helm(json!({"op": "lint", "values": values})) else {
            return;
        };
        assert_eq!(answer["ok"], true, "{what}: {answer}");
        let report = &answer["report"];
        assert_eq!(report["total_charts_linted"], 1, "{what}: {report}");
        assert!(
            report["errors"].as_array().is_none_or(|e| e.is_empty()),
            "{what}: {report}"
        );
        for m in report["messages"].as_array().unwrap() {
            // Severity 1 is INFO; the only one is Helm's "icon is recommended" (no public
            // icon URL exists yet).
            assert!(
                m["severity"].as_i64().unwrap() < 2,
                "{what}: helm lint (strict) says {m}"
            );
        }
    }
}

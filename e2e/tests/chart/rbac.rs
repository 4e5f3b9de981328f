//! RBAC: exactly the documented verbs, bound to the service accounts the pods run as.

use super::*;

/// (apiGroup, resource, verb, resourceName or "*") — one atomic permission.
pub(crate) type Perm = (String, String, String, String);

pub(crate) fn perms(role: &Value) -> BTreeSet<Perm> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        let names: Vec<String> = rule["resourceNames"]
            .as_array()
            .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
            .unwrap_or_else(|| vec!["*".to_string()]);
        for g in rule["apiGroups"].as_array().unwrap() {
            for res in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    for n in &names {
                        out.insert((
                            g.as_str().unwrap().to_string(),
                            res.as_str().unwrap().to_string(),
                            v.as_str().unwrap().to_string(),
                            n.clone(),
                        ));
                    }
                }
            }
        }
    }
    out
}

fn expect(list: &[(&str, &str, &[&str], &str)]) -> BTreeSet<Perm> {
    let mut out = BTreeSet::new();
    for (g, r, verbs, n) in list {
        for v in *verbs {
            out.insert((g.to_string(), r.to_string(), v.to_string(), n.to_string()));
        }
    }
    out
}

/// The operator's API calls (operator/src/controller: reflectors on partitions, batchjobs,
/// pods, nodes, gpunodes and persistentvolumeclaims; kube_api.rs, leader.rs, jobids.rs, usage.rs): any change to the
/// chart's RBAC must change this list too.
fn operator_cluster_perms() -> BTreeSet<Perm> {
    expect(&[
        ("muster.dev", "partitions", &["list", "watch"], "*"),
        ("muster.dev", "gpunodes", &["list", "watch"], "*"),
        (
            "muster.dev",
            "batchjobs",
            &["list", "watch", "create", "patch"],
            "*",
        ),
        ("muster.dev", "batchjobs/status", &["patch"], "*"),
        ("muster.dev", "partitions/status", &["patch"], "*"),
        (
            "",
            "pods",
            &["list", "watch", "create", "delete", "patch"],
            "*",
        ),
        ("", "services", &["create"], "*"),
        // Each job's step credential Secret, in the job's namespace: create only, never read.
        ("", "secrets", &["create"], "*"),
        ("", "nodes", &["list", "watch"], "*"),
        ("", "persistentvolumeclaims", &["list", "watch"], "*"),
        ("", "events", &["create", "patch"], "*"),
        (
            "resource.k8s.io",
            "resourceclaims",
            &["list", "watch", "create", "delete"],
            "*",
        ),
        ("resource.k8s.io", "resourceslices", &["list", "watch"], "*"),
        ("resource.k8s.io", "deviceclasses", &["list", "watch"], "*"),
        ("scheduling.k8s.io", "workloads", &["create", "delete"], "*"),
        ("scheduling.k8s.io", "podgroups", &["create", "delete"], "*"),
        (
            "authentication.k8s.io",
            "selfsubjectreviews",
            &["create"],
            "*",
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            &["get", "patch"],
            "muster-operator",
        ),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            &["get", "patch"],
            "muster-operator",
        ),
    ])
}

fn operator_namespace_perms(lease: &str, secret: &str) -> BTreeSet<Perm> {
    expect(&[
        ("", "secrets", &["get", "update"], secret),
        ("", "secrets", &["create"], "*"),
        ("coordination.k8s.io", "leases", &["get", "update"], lease),
        ("coordination.k8s.io", "leases", &["create"], "*"),
        (
            "",
            "configmaps",
            &["get", "update", "patch"],
            "muster-job-ids",
        ),
        (
            "",
            "configmaps",
            &["get", "update", "patch"],
            "muster-fairshare",
        ),
        ("", "configmaps", &["create"], "*"),
    ])
}

fn node_agent_perms() -> BTreeSet<Perm> {
    expect(&[
        ("muster.dev", "gpunodes", &["get", "create", "patch"], "*"),
        ("muster.dev", "gpunodes/status", &["patch"], "*"),
        ("muster.dev", "batchjobs", &["get"], "*"),
        ("", "nodes", &["get", "patch"], "*"),
        ("", "pods", &["list", "watch"], "*"),
        ("events.k8s.io", "events", &["create"], "*"),
    ])
}

#[test]
fn rbac_grants_exactly_the_documented_verbs() {
    let Some(r) = render(json!({})) else { return };
    assert_eq!(
        perms(r.get("ClusterRole", "muster-operator")),
        operator_cluster_perms()
    );
    assert_eq!(
        perms(r.get("Role", "muster-operator")),
        operator_namespace_perms("muster-operator", "muster-webhook-tls")
    );
    assert_eq!(
        perms(r.get("ClusterRole", "muster-node-agent")),
        node_agent_perms()
    );
    // No wildcards, no privilege-escalation verbs anywhere; secrets are only created
    // cluster-wide (the jobs' step credentials), and of them only the webhook certificate, in
    // the release namespace, may be read.
    for o in r.all("ClusterRole").into_iter().chain(r.all("Role")) {
        for (g, res, v, n) in perms(&o.value) {
            assert!(g != "*" && res != "*" && v != "*", "{}: wildcard", o.name());
            assert!(
                !["clusterroles", "roles", "serviceaccounts/token"].contains(&res.as_str()),
                "{}: {res}",
                o.name()
            );
            if res == "secrets" {
                assert!(
                    o.kind() == "Role" || v == "create",
                    "{}: {v} on secrets cluster-wide",
                    o.name()
                );
                assert!(
                    v == "create" || n == "muster-webhook-tls",
                    "{}: {v} on secrets {n}",
                    o.name()
                );
            }
            assert!(
                !["escalate", "bind", "impersonate"].contains(&v.as_str()),
                "{}: {v}",
                o.name()
            );
        }
    }
}

#[test]
fn rbac_bindings_name_the_service_accounts_the_pods_run_as() {
    // Another release name and namespace: names derive from both.
    let Some(r) = render_as(json!({}), "gpu-sched", "batch-system") else {
        return;
    };
    let r = r.unwrap();
    let d = r.get("Deployment", "gpu-sched-muster-operator");
    let op_sa = d["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    assert_eq!(op_sa, "gpu-sched-muster-operator");
    let ds = r.get("DaemonSet", "gpu-sched-muster-node-agent");
    let agent_sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    let subject = |kind: &str, name: &str| r.get(kind, name)["subjects"].clone();
    let want =
        |sa: &str| json!([{"kind": "ServiceAccount", "name": sa, "namespace": "batch-system"}]);
    assert_eq!(
        subject("ClusterRoleBinding", "gpu-sched-muster-operator"),
        want(op_sa)
    );
    assert_eq!(
        subject("RoleBinding", "gpu-sched-muster-operator"),
        want(op_sa)
    );
    assert_eq!(
        subject("ClusterRoleBinding", "gpu-sched-muster-node-agent"),
        want(agent_sa)
    );
    assert_eq!(
        r.get("ClusterRoleBinding", "gpu-sched-muster-operator")["roleRef"]["name"],
        "gpu-sched-muster-operator"
    );
    assert_eq!(
        perms(r.get("Role", "gpu-sched-muster-operator")),
        operator_namespace_perms("gpu-sched-muster-operator", "gpu-sched-muster-webhook-tls"),
        "the Role names the lease the operator is told to use"
    );
    assert!(
        args(container(d, "operator")).contains(&"--lease-name=gpu-sched-muster-operator".into())
    );
    // The policies exempt exactly these accounts.
    let vap = r.get("ValidatingAdmissionPolicy", "gpu-sched-muster-gpu-binding");
    let conds = vap["spec"]["matchConditions"].to_string();
    assert!(conds.contains("system:serviceaccount:batch-system:gpu-sched-muster-operator"));
    assert!(conds.contains("'batch-system'") && conds.contains(&format!("'{agent_sa}'")));

    // Without the agent: no agent account, role, DaemonSet or agent policy.
    let Some(r) = render(scenarios()[5].1.clone()) else {
        return;
    };
    for (kind, name) in [
        ("ServiceAccount", "muster-node-agent"),
        ("ClusterRole", "muster-node-agent"),
        ("ClusterRoleBinding", "muster-node-agent"),
        ("DaemonSet", "muster-node-agent"),
        ("ValidatingAdmissionPolicy", "muster-node-agent-scope"),
        ("ValidatingAdmissionPolicy", "muster-gpu-binding"),
        ("Partition", "gpu"),
    ] {
        assert!(!r.has(kind, name), "{kind} {name} rendered");
    }
}

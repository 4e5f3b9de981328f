//! `scontrol update NodeName=LIST State=DRAIN|RESUME|UNDRAIN Reason=TEXT`: an administrator
//! drains nodes as in Slurm. A drain is a cordon (`spec.unschedulable`: running jobs finish,
//! no new pod lands, which is Slurm's DRAIN and not `kubectl drain`'s eviction) with the
//! reason, who gave it and when in annotations, which `sinfo -R` and `scontrol show node`
//! show; RESUME and UNDRAIN uncordon and clear them. A node that does not respond stays
//! down until its kubelet reports again, as Slurm's does until its slurmd does.

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use muster_crds::labels;
use muster_crds::slurm::hostlist;
use serde_json::{Value, json};

use crate::Io;

/// What to do to the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Cordon, with a reason.
    Drain,
    /// Uncordon, clearing the reason.
    Resume,
}

/// A parsed node update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeUpdate {
    /// The nodes (`NodeName=gpu[001-004]`, expanded).
    pub nodes: Vec<String>,
    /// `State=`.
    pub action: Option<Action>,
    /// `Reason=`.
    pub reason: Option<String>,
}

/// Whether an update names nodes rather than jobs (its first key is `NodeName`).
pub fn is_node_update(args: &[String]) -> bool {
    args.first()
        .and_then(|a| a.split_once('='))
        .is_some_and(|(k, _)| k.eq_ignore_ascii_case("NodeName"))
}

/// Parses `NodeName=LIST State=... Reason=...`; the error is the line scontrol prints.
pub fn parse(args: &[String]) -> Result<NodeUpdate, String> {
    let mut u = NodeUpdate {
        nodes: Vec::new(),
        action: None,
        reason: None,
    };
    for a in args {
        let Some((k, v)) = a.split_once('=') else {
            return Err(format!("Invalid input: {a}: expected KEY=VALUE"));
        };
        if k.eq_ignore_ascii_case("NodeName") {
            u.nodes = hostlist::expand(v).map_err(|e| format!("Invalid NodeName {v}: {e}"))?;
        } else if k.eq_ignore_ascii_case("State") {
            u.action = Some(match v.to_ascii_uppercase().as_str() {
                "DRAIN" => Action::Drain,
                "RESUME" | "UNDRAIN" => Action::Resume,
                _ => {
                    return Err(format!(
                        "Invalid input: State={v}: Muster's node states are DRAIN, RESUME and \
                         UNDRAIN (a node is DOWN while its kubelet does not report)"
                    ));
                }
            });
        } else if k.eq_ignore_ascii_case("Reason") {
            u.reason = Some(v.to_string()).filter(|r| !r.is_empty());
        } else {
            return Err(format!(
                "Update of this parameter is not supported: {k} (Muster updates a node's State \
                 and Reason)"
            ));
        }
    }
    if u.action == Some(Action::Drain) && u.reason.is_none() {
        return Err(
            "You must specify a reason when DOWNING or DRAINING a node. Request denied".into(),
        );
    }
    if u.action.is_none() && u.reason.is_none() {
        return Err("No changes specified: give State=DRAIN Reason=... or State=RESUME".into());
    }
    Ok(u)
}

/// The merge patch for one node; `who` and `now` record a reason's author and time.
pub fn patch(u: &NodeUpdate, who: &str, now: jiff::Timestamp) -> Value {
    let annotations = |reason: Option<&str>| match reason {
        Some(r) => json!({
            labels::NODE_REASON: r,
            labels::NODE_REASON_USER: who,
            labels::NODE_REASON_TIME: now.to_string(),
        }),
        None => json!({
            labels::NODE_REASON: Value::Null,
            labels::NODE_REASON_USER: Value::Null,
            labels::NODE_REASON_TIME: Value::Null,
        }),
    };
    match u.action {
        Some(Action::Drain) => json!({
            "spec": {"unschedulable": true},
            "metadata": {"annotations": annotations(u.reason.as_deref())},
        }),
        Some(Action::Resume) => json!({
            "spec": {"unschedulable": Value::Null},
            "metadata": {"annotations": annotations(None)},
        }),
        None => json!({"metadata": {"annotations": annotations(u.reason.as_deref())}}),
    }
}

/// Applies `u` to each node; false if any failed (an unknown node, or no right to patch).
pub async fn run(
    cluster: &crate::cluster::Cluster,
    u: &NodeUpdate,
    io: &mut Io<'_>,
) -> anyhow::Result<bool> {
    let api: Api<Node> = Api::all(cluster.client.clone());
    let who = crate::cluster::whoami(&cluster.client)
        .await
        .unwrap_or_else(|| "unknown".to_string());
    let body = patch(u, &who, jiff::Timestamp::now());
    let mut ok = true;
    for n in &u.nodes {
        if let Err(e) = api
            .patch(n, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            let why = match &e {
                kube::Error::Api(s) if s.code == 404 => "Invalid node name specified".to_string(),
                kube::Error::Api(s) => s.message.clone(),
                other => other.to_string(),
            };
            writeln!(io.err, "scontrol: error: node {n}: {why}")?;
            ok = false;
        }
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<NodeUpdate, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn a_drain_needs_a_reason_and_names_the_states_that_work() {
        let u = p(&["NodeName=gpu[001-002]", "State=drain", "Reason=bad fan"]).unwrap();
        assert_eq!(u.nodes, ["gpu001", "gpu002"]);
        assert_eq!(u.action, Some(Action::Drain));
        assert_eq!(
            p(&["NodeName=gpu001", "State=DRAIN"]).unwrap_err(),
            "You must specify a reason when DOWNING or DRAINING a node. Request denied"
        );
        assert!(
            p(&["NodeName=gpu001", "State=DOWN", "Reason=x"])
                .unwrap_err()
                .starts_with("Invalid input: State=DOWN: Muster's node states are DRAIN, RESUME")
        );
        assert!(
            p(&["NodeName=gpu001", "Weight=3"])
                .unwrap_err()
                .starts_with("Update of this parameter is not supported: Weight")
        );
        assert!(p(&["NodeName=gpu001"]).is_err());
        assert_eq!(
            p(&["nodename=gpu001", "state=undrain"]).unwrap().action,
            Some(Action::Resume)
        );
        assert!(is_node_update(&["NodeName=gpu001".to_string()]));
        assert!(!is_node_update(&["JobId=1".to_string()]));
    }

    #[test]
    fn a_drain_cordons_and_records_why_who_and_when_and_a_resume_clears_them() {
        let now: jiff::Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let drain = p(&["NodeName=gpu001", "State=DRAIN", "Reason=bad fan"]).unwrap();
        assert_eq!(
            patch(&drain, "alice", now),
            json!({"spec": {"unschedulable": true}, "metadata": {"annotations": {
                "muster.dev/reason": "bad fan", "muster.dev/reason-user": "alice",
                "muster.dev/reason-time": "2026-12-01T10:00:00Z"}}})
        );
        let resume = p(&["NodeName=gpu001", "State=RESUME"]).unwrap();
        assert_eq!(
            patch(&resume, "alice", now),
            json!({"spec": {"unschedulable": null}, "metadata": {"annotations": {
                "muster.dev/reason": null, "muster.dev/reason-user": null,
                "muster.dev/reason-time": null}}})
        );
    }
}

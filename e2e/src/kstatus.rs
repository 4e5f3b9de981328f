//! kstatus (`sigs.k8s.io/cli-utils/pkg/kstatus/status`), ported rule for rule, for tests: the
//! status Flux, `kubectl`-based tools and kpt compute for an object from its conditions.
//!
//! `Compute`: (1) `deletionTimestamp` set → Terminating; (2) `status.observedGeneration`
//! present and not `metadata.generation` → InProgress (`LatestGenerationNotObserved`); (3) a
//! condition `Reconciling` True → InProgress, else `Stalled` True → Failed (in list order,
//! the first that matches); (4) the built-in kinds' rules (here: `batch/v1` Job, what Muster's
//! conditions are modelled on); (5) a `Ready` condition: True → Current, False or Unknown →
//! InProgress; (6) otherwise Current.

use serde_json::Value;

/// kstatus' statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not yet where it should be.
    InProgress,
    /// Failed, or will not get there without a change.
    Failed,
    /// Where it should be.
    Current,
    /// Being deleted.
    Terminating,
}

/// What kstatus says of an object: the status, with the reason and message it took it from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Result {
    /// The status.
    pub status: Status,
    /// The condition reason it came from (empty when none).
    pub reason: String,
    /// The message.
    pub message: String,
}

fn result(status: Status, reason: &str, message: &str) -> Result {
    Result {
        status,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

fn conditions(obj: &Value) -> Vec<&Value> {
    obj["status"]["conditions"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn text<'a>(c: &'a Value, k: &str) -> &'a str {
    c[k].as_str().unwrap_or("")
}

/// `status.Compute` for `obj`.
pub fn compute(obj: &Value) -> Result {
    if obj["metadata"]["deletionTimestamp"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        return result(Status::Terminating, "", "Resource scheduled for deletion");
    }
    if let Some(g) = obj["metadata"]["generation"].as_i64()
        && let Some(og) = obj["status"]["observedGeneration"].as_i64()
        && og != g
    {
        let kind = text(obj, "kind");
        return result(
            Status::InProgress,
            "LatestGenerationNotObserved",
            &format!("{kind} generation is {g}, but latest observed generation is {og}"),
        );
    }
    for c in conditions(obj) {
        if text(c, "type") == "Reconciling" && text(c, "status") == "True" {
            return result(Status::InProgress, text(c, "reason"), text(c, "message"));
        }
        if text(c, "type") == "Stalled" && text(c, "status") == "True" {
            return result(Status::Failed, text(c, "reason"), text(c, "message"));
        }
    }
    if text(obj, "apiVersion") == "batch/v1" && text(obj, "kind") == "Job" {
        return job(obj);
    }
    for c in conditions(obj) {
        if text(c, "type") != "Ready" {
            continue;
        }
        match text(c, "status") {
            "True" => return result(Status::Current, "", "Resource is Ready"),
            "False" | "Unknown" => {
                return result(Status::InProgress, text(c, "reason"), text(c, "message"));
            }
            _ => {}
        }
    }
    result(Status::Current, "", "Resource is current")
}

/// `jobConditions`: the rules for `batch/v1` Job.
fn job(obj: &Value) -> Result {
    let suspended = obj["spec"]["suspend"].as_bool().unwrap_or(false);
    for c in conditions(obj) {
        let on = text(c, "status") == "True";
        match text(c, "type") {
            "Complete" if on => return result(Status::Current, "", "Job Completed"),
            "Failed" if on => return result(Status::Failed, "JobFailed", "Job Failed"),
            "Suspended" if on && suspended => {
                return result(Status::Current, "", "Job is suspended");
            }
            _ => {}
        }
    }
    if obj["status"]["startTime"].as_str().unwrap_or("").is_empty() {
        return result(Status::InProgress, "JobNotStarted", "Job not started");
    }
    result(Status::Current, "", "Job in progress")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(conds: Value) -> Value {
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
               "metadata": {"name": "j", "generation": 2},
               "status": {"observedGeneration": 2, "conditions": conds}})
    }

    #[test]
    fn rules_in_kstatus_order() {
        let c = |t: &str, s: &str| json!({"type": t, "status": s, "reason": format!("R{t}")});
        assert_eq!(compute(&obj(json!([]))).status, Status::Current);
        assert_eq!(
            compute(&obj(json!([c("Ready", "True")]))).status,
            Status::Current
        );
        assert_eq!(
            compute(&obj(json!([c("Ready", "False")]))).status,
            Status::InProgress
        );
        // Reconciling and Stalled win over Ready.
        assert_eq!(
            compute(&obj(json!([c("Ready", "True"), c("Stalled", "True")]))).status,
            Status::Failed
        );
        assert_eq!(
            compute(&obj(json!([
                c("Stalled", "True"),
                c("Reconciling", "True")
            ])))
            .status,
            Status::Failed,
            "the first abnormal condition listed decides"
        );
        let mut stale = obj(json!([c("Ready", "True")]));
        stale["status"]["observedGeneration"] = json!(1);
        let r = compute(&stale);
        assert_eq!(
            (r.status, r.reason.as_str()),
            (Status::InProgress, "LatestGenerationNotObserved")
        );
        let mut gone = obj(json!([]));
        gone["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(compute(&gone).status, Status::Terminating);
        let job = |conds: Value, start: bool| {
            let mut j = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {},
                               "status": {"conditions": conds}});
            if start {
                j["status"]["startTime"] = json!("2026-01-01T00:00:00Z");
            }
            j
        };
        assert_eq!(compute(&job(json!([]), false)).status, Status::InProgress);
        assert_eq!(compute(&job(json!([]), true)).status, Status::Current);
        assert_eq!(
            compute(&job(json!([c("Failed", "True")]), true)).status,
            Status::Failed
        );
        assert_eq!(
            compute(&job(json!([c("Complete", "True")]), true)).status,
            Status::Current
        );
    }
}

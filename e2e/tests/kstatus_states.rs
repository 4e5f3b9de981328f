//! kstatus (ported in `muster_e2e::kstatus`) over every state a BatchJob can be in, as the
//! operator writes its conditions: GitOps tools see a waiting job in progress, one that cannot
//! start without a change, or that ended badly, failed, and a running, completed or held job
//! current (as they see a `batch/v1` Job).

use muster_crds::v1alpha1::{BatchJobStatus, JobState};
use muster_e2e::kstatus::{Status, compute};
use muster_operator::controller::status::{self, Why};
use serde_json::json;

fn job(state: JobState, reason: Option<&str>, known: Option<Why>) -> serde_json::Value {
    let mut st = BatchJobStatus {
        state: Some(state),
        reason: reason.map(str::to_string),
        message: Some("why".into()),
        ..Default::default()
    };
    status::finish(&mut st, None, Some(3), 1_000, known);
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
           "metadata": {"name": "j", "generation": 3}, "status": st})
}

/// A state, its Slurm reason, what the planner knows besides, kstatus' verdict and reason.
type Case<'a> = (JobState, Option<&'a str>, Option<Why>, Status, &'a str);

#[test]
fn every_state_reads_as_gitops_tools_expect() {
    use JobState::*;
    let cases: &[Case<'_>] = &[
        (
            Pending,
            Some("Resources"),
            None,
            Status::InProgress,
            "WaitingForResources",
        ),
        (
            Pending,
            Some("Priority"),
            None,
            Status::InProgress,
            "WaitingForPriority",
        ),
        (
            Pending,
            Some("Dependency"),
            None,
            Status::InProgress,
            "WaitingForDependency",
        ),
        (
            Pending,
            Some("JobLaunchFailure"),
            None,
            Status::InProgress,
            "GangStartBackoff",
        ),
        (
            Pending,
            Some("ReqNodeNotAvail"),
            None,
            Status::InProgress,
            "NodesNotAvailable",
        ),
        (
            Pending,
            Some("PartitionDown"),
            None,
            Status::InProgress,
            "PartitionDown",
        ),
        (
            Pending,
            Some("NodeFail"),
            None,
            Status::InProgress,
            "RequeuedAfterNodeFail",
        ),
        (
            Pending,
            Some("BadConstraints"),
            None,
            Status::Failed,
            "RequestCannotBeMet",
        ),
        (
            Pending,
            Some("PartitionConfig"),
            None,
            Status::Failed,
            "PartitionNotFound",
        ),
        (
            Pending,
            Some("PartitionConfig"),
            Some(Why::NoImage),
            Status::Failed,
            "NoImage",
        ),
        (
            Pending,
            Some("Dependency"),
            Some(Why::DependencyNotFound),
            Status::Failed,
            "DependencyNotFound",
        ),
        (
            Pending,
            Some("DependencyNeverSatisfied"),
            None,
            Status::Failed,
            "DependencyNeverSatisfied",
        ),
        (
            Pending,
            Some("PartitionTimeLimit"),
            None,
            Status::Failed,
            "PartitionTimeLimit",
        ),
        (
            Pending,
            Some("AccountNotAllowed"),
            None,
            Status::Failed,
            "NamespaceNotAllowed",
        ),
        (Pending, Some("JobHeldUser"), None, Status::Current, ""),
        (Running, None, None, Status::Current, ""),
        (Completed, None, None, Status::Current, ""),
        (
            Failed,
            Some("NonZeroExitCode"),
            None,
            Status::Failed,
            "NonZeroExitCode",
        ),
        (
            Failed,
            Some("InvalidSpec"),
            None,
            Status::Failed,
            "InvalidSpec",
        ),
        (
            Timeout,
            Some("TimeLimit"),
            None,
            Status::Failed,
            "TimeLimit",
        ),
        (NodeFail, Some("NodeFail"), None, Status::Failed, "NodeFail"),
        (Cancelled, None, None, Status::Failed, "Cancelled"),
        (
            Preempted,
            Some("Preempted"),
            None,
            Status::Failed,
            "Preempted",
        ),
    ];
    for (state, reason, known, want, why) in cases {
        let obj = job(*state, *reason, *known);
        let r = compute(&obj);
        assert_eq!(r.status, *want, "{state} {reason:?}: {r:?}");
        assert_eq!(r.reason, *why, "{state} {reason:?}");
        // batch/v1 Job's conditions: Complete only on success, Failed on every bad end.
        let has = |t: &str| {
            obj["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == t && c["status"] == "True")
        };
        assert_eq!(has("Complete"), *state == Completed, "{state}");
        assert_eq!(
            has("Failed"),
            matches!(state, Failed | Timeout | NodeFail | Cancelled | Preempted),
            "{state}"
        );
        // Every reason is CamelCase.
        for c in obj["status"]["conditions"].as_array().unwrap() {
            let r = c["reason"].as_str().unwrap();
            assert!(
                r.starts_with(|ch: char| ch.is_ascii_uppercase())
                    && r.chars().all(|ch| ch.is_ascii_alphanumeric()),
                "{state}: reason {r:?}"
            );
        }
    }
    // A spec change not yet observed is in progress, whatever the conditions say.
    let mut j = job(Completed, None, None);
    j["metadata"]["generation"] = json!(4);
    assert_eq!(compute(&j).status, Status::InProgress);
}

//! BatchJob status: state transitions and conditions (pure).
//!
//! The operator owns the whole status and always writes all of it (server-side apply with
//! field manager `muster-operator`), so a field left out of a write is removed: releasing an
//! allocation is writing a status without `tasks`.
//!
//! # Conditions
//! Written so that kstatus-based tools (Flux, Argo CD, `kubectl wait`) read a job's health:
//!
//! | state | Ready | Reconciling | Stalled | Admitted | Complete |
//! |---|---|---|---|---|---|
//! | PENDING (will start by itself) | False | True | False | False | False |
//! | PENDING (cannot start without a change¹) | False | False | True | False | False |
//! | RUNNING | True | False | False | True | False |
//! | COMPLETED | True | False | False | False | True |
//! | FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, CANCELLED | False | False | True | False | True |
//!
//! ¹ reasons [`NEEDS_CHANGE`]: the request can never be met, or a dependency never will be.
//! `lastTransitionTime` changes only when a condition's status does; every condition carries
//! the `observedGeneration` it describes, as does the status itself.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use muster_crds::v1alpha1::{BatchJobStatus, JobState};

use super::translate::time;

/// Pending reasons that need a change to the job or the cluster before the job can start.
pub const NEEDS_CHANGE: &[&str] = &[
    "BadConstraints",
    "DependencyNeverSatisfied",
    "PartitionConfig",
    "AccountNotAllowed",
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "InvalidSpec",
];

/// Reason of a pending job whose gang did not start in time and that waits out its backoff
/// (Slurm's `JobLaunchFailure`).
pub const LAUNCH_FAILURE: &str = "JobLaunchFailure";
/// Reason of a pending job whose spec does not parse (the message names the field).
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Reason of a job whose dependency does not hold yet.
pub const DEPENDENCY: &str = "Dependency";
/// Reason of a job whose dependency can never hold.
pub const DEPENDENCY_NEVER: &str = "DependencyNeverSatisfied";
/// Reason of a held job (`--hold`, `scontrol hold`).
pub const HELD: &str = "JobHeldUser";
/// Reasons the planner gives before the scheduling core sees a job: a job waiting for one of
/// them is not in the core's queue, so it holds no place ahead of others (`sbatch
/// --test-only` leaves such jobs out as well).
pub const NOT_QUEUED: &[&str] = &[DEPENDENCY, DEPENDENCY_NEVER, INVALID_SPEC, HELD];

/// Longest status message written (longer ones are cut, with `…`).
pub const MAX_MESSAGE: usize = 2048;

/// `m` cut to [`MAX_MESSAGE`] bytes at a character boundary.
pub fn clip(m: &str) -> String {
    if m.len() <= MAX_MESSAGE {
        return m.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &m[..end])
}

fn cond(type_: &str, on: bool, reason: &str, message: &str, generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if on { "True" } else { "False" }.to_string(),
        reason: condition_reason(reason),
        message: clip(message),
        observed_generation: generation,
        last_transition_time: time(0),
    }
}

/// A condition reason as Kubernetes allows it (`[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?`).
pub fn condition_reason(r: &str) -> String {
    let mut s: String = r
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ',' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    while s.ends_with([',', ':']) {
        s.pop();
    }
    if !s.starts_with(|c: char| c.is_ascii_alphabetic()) {
        s.insert(0, 'R');
    }
    s
}

/// The conditions for a status, reusing `prev`'s transition times where a condition's status
/// did not change.
pub fn conditions(
    st: &BatchJobStatus,
    generation: Option<i64>,
    now: i64,
    prev: &[Condition],
) -> Vec<Condition> {
    let state = st.state.unwrap_or(JobState::Pending);
    let reason = st
        .reason
        .clone()
        .unwrap_or_else(|| state.as_str().to_string());
    let msg = st.message.clone().unwrap_or_default();
    let s = state.as_str();
    let needs_change = state == JobState::Pending && NEEDS_CHANGE.contains(&reason.as_str());
    let mut out = match state {
        JobState::Pending => vec![
            cond("Ready", false, &reason, &msg, generation),
            cond("Reconciling", !needs_change, &reason, &msg, generation),
            cond("Stalled", needs_change, &reason, &msg, generation),
            cond("Admitted", false, &reason, &msg, generation),
            cond("Complete", false, s, "", generation),
        ],
        JobState::Running | JobState::Completing => vec![
            cond("Ready", true, s, &msg, generation),
            cond("Reconciling", false, s, "", generation),
            cond("Stalled", false, s, "", generation),
            cond("Admitted", true, s, &msg, generation),
            cond("Complete", false, s, "", generation),
        ],
        JobState::Completed => vec![
            cond("Ready", true, s, &msg, generation),
            cond("Reconciling", false, s, "", generation),
            cond("Stalled", false, s, "", generation),
            cond("Admitted", false, s, "", generation),
            cond("Complete", true, s, &msg, generation),
        ],
        _ => vec![
            cond("Ready", false, s, &msg, generation),
            cond("Reconciling", false, s, "", generation),
            cond("Stalled", true, s, &msg, generation),
            cond("Admitted", false, s, "", generation),
            cond("Complete", true, s, &msg, generation),
        ],
    };
    for c in &mut out {
        c.last_transition_time = prev
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
            .map(|p| p.last_transition_time.clone())
            .unwrap_or_else(|| time(now));
    }
    out
}

/// Sets the conditions and `observedGeneration` of `st` from its state, against the
/// currently stored status `prev`.
pub fn finish(
    st: &mut BatchJobStatus,
    prev: Option<&BatchJobStatus>,
    generation: Option<i64>,
    now: i64,
) {
    st.observed_generation = generation;
    if let Some(m) = &st.message {
        st.message = Some(clip(m));
    }
    let prev_conds = prev.map(|p| p.conditions.as_slice()).unwrap_or(&[]);
    st.conditions = conditions(st, generation, now, prev_conds);
}

/// A status moved to PENDING for another admission: attempt and restarts bumped, the
/// allocation released (tasks, node list, start and end cleared).
pub fn requeued(
    prev: &BatchJobStatus,
    reason: &str,
    message: &str,
    eligible_at: i64,
) -> BatchJobStatus {
    let mut st = prev.clone();
    st.state = Some(JobState::Pending);
    st.reason = Some(reason.to_string());
    st.message = Some(message.to_string());
    st.attempt = Some(prev.attempt.unwrap_or(1).max(1) + 1);
    st.restarts = Some(prev.restarts.unwrap_or(0) + 1);
    st.tasks.clear();
    st.node_list = None;
    st.start_time = None;
    st.end_time = None;
    st.exit_code = None;
    st.exit_signal = None;
    st.eligible_time = Some(time(eligible_at));
    st
}

/// A status moved to a terminal state at `now`; the allocation record (tasks, node list) is
/// kept for `sacct`-style history.
pub fn ended(
    prev: &BatchJobStatus,
    state: JobState,
    reason: &str,
    message: &str,
    now: i64,
) -> BatchJobStatus {
    let mut st = prev.clone();
    st.state = Some(state);
    st.reason = Some(reason.to_string());
    st.message = Some(message.to_string());
    st.end_time = Some(time(now));
    st
}

/// Backoff before a job whose gang did not start may try again: 30 s doubling per earlier
/// restart, at most 10 minutes.
pub fn launch_backoff(restarts: u32) -> i64 {
    (30i64 << restarts.min(5)).min(600)
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_crds::v1alpha1::TaskAllocation;

    fn get<'a>(c: &'a [Condition], t: &str) -> &'a Condition {
        c.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn kstatus_reads_each_state() {
        let mut st = BatchJobStatus {
            state: Some(JobState::Pending),
            reason: Some("Resources".into()),
            ..Default::default()
        };
        let c = conditions(&st, Some(3), 100, &[]);
        assert_eq!(get(&c, "Reconciling").status, "True");
        assert_eq!(get(&c, "Stalled").status, "False");
        assert_eq!(get(&c, "Ready").reason, "Resources");
        assert!(c.iter().all(|c| c.observed_generation == Some(3)));

        st.reason = Some("DependencyNeverSatisfied".into());
        let c = conditions(&st, Some(3), 100, &[]);
        assert_eq!(get(&c, "Stalled").status, "True");
        assert_eq!(get(&c, "Reconciling").status, "False");

        st.state = Some(JobState::Running);
        let c = conditions(&st, Some(3), 100, &[]);
        assert_eq!(get(&c, "Ready").status, "True");
        assert_eq!(get(&c, "Admitted").status, "True");

        st.state = Some(JobState::Completed);
        let c = conditions(&st, Some(3), 100, &[]);
        assert_eq!(get(&c, "Complete").status, "True");
        assert_eq!(get(&c, "Ready").status, "True");
        assert_eq!(get(&c, "Stalled").status, "False");

        for s in [
            JobState::Failed,
            JobState::Timeout,
            JobState::NodeFail,
            JobState::Cancelled,
            JobState::Preempted,
        ] {
            st.state = Some(s);
            let c = conditions(&st, Some(3), 100, &[]);
            assert_eq!(get(&c, "Stalled").status, "True", "{s}");
            assert_eq!(get(&c, "Stalled").reason, s.as_str());
            assert_eq!(get(&c, "Complete").status, "True");
            assert_eq!(get(&c, "Ready").status, "False");
        }
    }

    #[test]
    fn transition_times_move_only_with_status() {
        let pending = BatchJobStatus {
            state: Some(JobState::Pending),
            reason: Some("Resources".into()),
            ..Default::default()
        };
        let c1 = conditions(&pending, Some(1), 100, &[]);
        let mut p2 = pending.clone();
        p2.reason = Some("Priority".into());
        let c2 = conditions(&p2, Some(1), 200, &c1);
        assert_eq!(get(&c2, "Ready").last_transition_time, time(100));
        assert_eq!(get(&c2, "Ready").reason, "Priority");
        let mut r = pending;
        r.state = Some(JobState::Running);
        let c3 = conditions(&r, Some(1), 300, &c2);
        assert_eq!(get(&c3, "Ready").last_transition_time, time(300));
        assert_eq!(get(&c3, "Complete").last_transition_time, time(100));
    }

    #[test]
    fn requeue_releases_the_allocation_and_bumps_attempt() {
        let running = BatchJobStatus {
            job_id: Some(5),
            state: Some(JobState::Running),
            attempt: Some(1),
            tasks: vec![TaskAllocation::default()],
            node_list: Some("n1".into()),
            start_time: Some(time(10)),
            ..Default::default()
        };
        let r = requeued(&running, "NodeFail", "node n1 is not ready", 50);
        assert_eq!(r.state, Some(JobState::Pending));
        assert_eq!(r.attempt, Some(2));
        assert_eq!(r.restarts, Some(1));
        assert!(r.tasks.is_empty());
        assert_eq!(r.node_list, None);
        assert_eq!(r.start_time, None);
        assert_eq!(r.job_id, Some(5));
        assert_eq!(r.eligible_time, Some(time(50)));
        let r2 = requeued(&r, "x", "y", 60);
        assert_eq!(r2.attempt, Some(3));
        assert_eq!(r2.restarts, Some(2));
        let e = ended(
            &running,
            JobState::Timeout,
            "TimeLimit",
            "time limit reached",
            99,
        );
        assert_eq!(e.tasks.len(), 1, "record kept");
        assert_eq!(e.end_time, Some(time(99)));
    }

    #[test]
    fn reasons_and_messages_are_made_valid() {
        assert_eq!(condition_reason("NODE_FAIL"), "NODE_FAIL");
        assert_eq!(condition_reason("9lives"), "R9lives");
        assert_eq!(condition_reason("a b:"), "a_b");
        let long = "é".repeat(3000);
        let c = clip(&long);
        assert!(c.len() <= MAX_MESSAGE + 3);
        assert!(c.ends_with('…'));
        assert_eq!(launch_backoff(0), 30);
        assert_eq!(launch_backoff(1), 60);
        assert_eq!(launch_backoff(10), 600);
    }
}

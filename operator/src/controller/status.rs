//! BatchJob status: state transitions and conditions (pure).
//!
//! The operator owns the whole status and always writes all of it (server-side apply with
//! field manager `muster-operator`), so a field left out of a write is removed: releasing an
//! allocation is writing a status without `tasks`.
//!
//! # Conditions
//! Modelled on `batch/v1` Job (`Complete`, `Failed`, `Suspended`, present only once true, so
//! `kubectl wait --for=condition=Complete` waits for success and never returns for a failed
//! job) and on kstatus (`Reconciling`, `Stalled`, `Ready`), which Flux, `kubectl` and other
//! GitOps tools read: kstatus computes InProgress while `Reconciling` is True, Failed while
//! `Stalled` is True, then InProgress while `Ready` is False, else Current — so a running or
//! completed job is Current (as kstatus reads a `batch/v1` Job) and a failed one is Failed.
//!
//! | state | Ready | Reconciling | Stalled | Admitted | Complete | Failed | Suspended |
//! |---|---|---|---|---|---|---|---|
//! | PENDING, will start by itself | False | True | False | False | – | – | – |
//! | PENDING, cannot start without a change¹ | False | False | True | False | – | – | – |
//! | PENDING, held (`--hold`) | – | False | False | False | – | – | True |
//! | RUNNING | True | False | False | True | – | – | – |
//! | COMPLETED | – | False | False | False | True | – | – |
//! | FAILED, TIMEOUT, NODE_FAIL, CANCELLED, PREEMPTED (not requeued) | – | False | True | False | – | True | – |
//!
//! `–`: absent. `Ready` is absent once a job ended: kstatus reads a `Ready` that is False as
//! in progress, and an ended job's tasks are not ready (they are gone). ¹ The reasons in
//! [`NEEDS_CHANGE`], a dependency on a job that does not exist, or a partition without an
//! image for the job. Reasons are CamelCase and say why ([`why`]): `WaitingForResources`,
//! `WaitingForDependency`, `DependencyNotFound`, `PartitionNotFound`, `RequestCannotBeMet`,
//! `Running`, `Completed`, `NonZeroExitCode`, `TimeLimit`, `Cancelled`, … (a Slurm reason
//! code that already says it is kept). `lastTransitionTime` changes only when a condition's
//! status does; every condition carries the `observedGeneration` it describes, as does the
//! status itself.

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
    INVALID_SPEC,
];

/// Reason of a pending job whose gang did not start in time and that waits out its backoff
/// (Slurm's `JobLaunchFailure`).
pub const LAUNCH_FAILURE: &str = "JobLaunchFailure";
/// Reason of a job whose spec cannot run (the message names the field); it ends FAILED.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Reason of a job whose dependency does not hold yet.
pub const DEPENDENCY: &str = "Dependency";
/// Reason of a job whose dependency can never hold.
pub const DEPENDENCY_NEVER: &str = "DependencyNeverSatisfied";
/// Reason of a held job (`--hold`, `scontrol hold`).
pub const HELD: &str = "JobHeldUser";
/// Reason of a job whose partition cannot run it as configured (Slurm's `PartitionConfig`:
/// no such partition, or no image for a container that gives none).
pub const PARTITION_CONFIG: &str = "PartitionConfig";
/// Reasons the planner gives before the scheduling core sees a job: a job waiting for one of
/// them is not in the core's queue, so it holds no place ahead of others (`sbatch
/// --test-only` leaves such jobs out as well).
pub const NOT_QUEUED: &[&str] = &[DEPENDENCY, DEPENDENCY_NEVER, INVALID_SPEC, HELD];

/// Condition reasons the planner knows better than the Slurm reason says (the Slurm reason
/// stays in `status.reason`, where squeue shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// A dependency names a job that does not exist (Slurm reason `Dependency`): stalled
    /// until it does.
    DependencyNotFound,
    /// The job's partition does not exist (`PartitionConfig`).
    PartitionNotFound,
    /// A container gives no image and the partition has none (`PartitionConfig`).
    NoImage,
    /// The partition asks for `gpuBinding: dra` and the cluster cannot give it
    /// (`PartitionConfig`).
    GpuBindingUnavailable,
}

impl Why {
    /// The condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::DependencyNotFound => "DependencyNotFound",
            Why::PartitionNotFound => "PartitionNotFound",
            Why::NoImage => "NoImage",
            Why::GpuBindingUnavailable => "GpuBindingUnavailable",
        }
    }
}

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

/// The CamelCase condition reason for a job in `state` with Slurm reason `reason`: what it
/// waits for, why it is stalled or how it ended.
pub fn why(state: JobState, reason: Option<&str>) -> String {
    let r = reason.unwrap_or("None");
    let s = match state {
        JobState::Pending => match r {
            "Resources" => "WaitingForResources",
            "Priority" => "WaitingForPriority",
            DEPENDENCY => "WaitingForDependency",
            "BeginTime" => "WaitingForBeginTime",
            "JobArrayTaskLimit" => "ArrayTaskLimit",
            LAUNCH_FAILURE => "GangStartBackoff",
            "ReqNodeNotAvail" => "NodesNotAvailable",
            "NodeFail" => "RequeuedAfterNodeFail",
            "Preempted" => "RequeuedAfterPreemption",
            "BadConstraints" => "RequestCannotBeMet",
            "AccountNotAllowed" => "NamespaceNotAllowed",
            PARTITION_CONFIG => "PartitionNotFound",
            HELD => HELD,
            "None" | "" => "Queued",
            other => return condition_reason(other),
        },
        JobState::Running | JobState::Completing => "Running",
        JobState::Completed => "Completed",
        JobState::Cancelled => "Cancelled",
        JobState::Timeout => "TimeLimit",
        JobState::NodeFail => "NodeFail",
        JobState::Preempted => "Preempted",
        JobState::Failed => match r {
            "None" | "" => "Failed",
            other => return condition_reason(other),
        },
    };
    s.to_string()
}

/// The conditions for a status, reusing `prev`'s transition times where a condition's status
/// did not change. `known` overrides the reason the Slurm reason would give (and a pending
/// job with one is stalled).
pub fn conditions(
    st: &BatchJobStatus,
    generation: Option<i64>,
    now: i64,
    prev: &[Condition],
    known: Option<Why>,
) -> Vec<Condition> {
    let state = st.state.unwrap_or(JobState::Pending);
    let reason = st.reason.as_deref();
    let r = match known {
        Some(k) => k.as_str().to_string(),
        None => why(state, reason),
    };
    let msg = st.message.clone().unwrap_or_default();
    let g = generation;
    let mut out = match state {
        JobState::Pending if reason == Some(HELD) => vec![
            cond("Reconciling", false, &r, &msg, g),
            cond("Stalled", false, &r, &msg, g),
            cond("Admitted", false, &r, &msg, g),
            cond("Suspended", true, &r, &msg, g),
        ],
        JobState::Pending => {
            let stalled = known.is_some() || reason.is_some_and(|x| NEEDS_CHANGE.contains(&x));
            vec![
                cond("Ready", false, &r, &msg, g),
                cond("Reconciling", !stalled, &r, &msg, g),
                cond("Stalled", stalled, &r, &msg, g),
                cond("Admitted", false, &r, &msg, g),
            ]
        }
        JobState::Running | JobState::Completing => {
            let running = match (&st.message, st.num_tasks, &st.node_list) {
                (Some(m), _, _) => m.clone(),
                (None, Some(t), Some(n)) => format!("{t} task(s) running on {n}"),
                _ => "running".to_string(),
            };
            vec![
                cond("Ready", true, &r, &running, g),
                cond("Reconciling", false, &r, "", g),
                cond("Stalled", false, &r, "", g),
                cond("Admitted", true, &r, &running, g),
            ]
        }
        JobState::Completed => vec![
            cond("Reconciling", false, &r, "", g),
            cond("Stalled", false, &r, "", g),
            cond("Admitted", false, &r, "", g),
            cond("Complete", true, &r, &msg, g),
        ],
        JobState::Failed
        | JobState::Cancelled
        | JobState::Timeout
        | JobState::NodeFail
        | JobState::Preempted => vec![
            cond("Reconciling", false, &r, "", g),
            cond("Stalled", true, &r, &msg, g),
            cond("Admitted", false, &r, "", g),
            cond("Failed", true, &r, &msg, g),
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
/// currently stored status `prev` (`known`: see [`conditions`]).
pub fn finish(
    st: &mut BatchJobStatus,
    prev: Option<&BatchJobStatus>,
    generation: Option<i64>,
    now: i64,
    known: Option<Why>,
) {
    st.observed_generation = generation;
    if let Some(m) = &st.message {
        st.message = Some(clip(m));
    }
    let prev_conds = prev.map(|p| p.conditions.as_slice()).unwrap_or(&[]);
    st.conditions = conditions(st, generation, now, prev_conds, known);
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
/// kept for `sacct`-style history. A job that ends while pending starts and ends at `now`,
/// as Slurm records it: its start time was the scheduler's estimate, which would otherwise
/// stay, after its end.
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
    if prev.state.is_none_or(|s| s == JobState::Pending) {
        st.start_time = Some(time(now));
    }
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

    fn get<'a>(c: &'a [Condition], t: &str) -> Option<&'a Condition> {
        c.iter().find(|c| c.type_ == t)
    }

    fn status_of(c: &[Condition], t: &str) -> &'static str {
        match get(c, t).map(|c| c.status.as_str()) {
            Some("True") => "True",
            Some("False") => "False",
            _ => "-",
        }
    }

    #[test]
    fn each_state_gets_the_table_of_conditions() {
        let mut st = BatchJobStatus {
            state: Some(JobState::Pending),
            reason: Some("Resources".into()),
            ..Default::default()
        };
        let c = conditions(&st, Some(3), 100, &[], None);
        assert_eq!(status_of(&c, "Reconciling"), "True");
        assert_eq!(status_of(&c, "Stalled"), "False");
        assert_eq!(get(&c, "Ready").unwrap().reason, "WaitingForResources");
        assert_eq!(status_of(&c, "Complete"), "-");
        assert!(c.iter().all(|c| c.observed_generation == Some(3)));

        st.reason = Some("DependencyNeverSatisfied".into());
        let c = conditions(&st, Some(3), 100, &[], None);
        assert_eq!(status_of(&c, "Stalled"), "True");
        assert_eq!(status_of(&c, "Reconciling"), "False");

        st.reason = Some("Dependency".into());
        let c = conditions(&st, Some(3), 100, &[], Some(Why::DependencyNotFound));
        assert_eq!(status_of(&c, "Stalled"), "True");
        assert_eq!(get(&c, "Stalled").unwrap().reason, "DependencyNotFound");

        st.reason = Some(HELD.into());
        let c = conditions(&st, Some(3), 100, &[], None);
        assert_eq!(status_of(&c, "Suspended"), "True");
        assert_eq!(status_of(&c, "Ready"), "-");

        st.state = Some(JobState::Running);
        st.reason = None;
        let c = conditions(&st, Some(3), 100, &[], None);
        assert_eq!(status_of(&c, "Ready"), "True");
        assert_eq!(status_of(&c, "Admitted"), "True");
        assert_eq!(get(&c, "Stalled").unwrap().reason, "Running");

        st.state = Some(JobState::Completed);
        let c = conditions(&st, Some(3), 100, &[], None);
        assert_eq!(status_of(&c, "Complete"), "True");
        assert_eq!(status_of(&c, "Failed"), "-");
        assert_eq!(status_of(&c, "Ready"), "-");
        assert_eq!(status_of(&c, "Stalled"), "False");

        for (s, r, want) in [
            (JobState::Failed, Some("NonZeroExitCode"), "NonZeroExitCode"),
            (JobState::Failed, Some(INVALID_SPEC), "InvalidSpec"),
            (JobState::Timeout, Some("TimeLimit"), "TimeLimit"),
            (JobState::NodeFail, Some("NodeFail"), "NodeFail"),
            (JobState::Cancelled, None, "Cancelled"),
            (JobState::Preempted, Some("Preempted"), "Preempted"),
        ] {
            st.state = Some(s);
            st.reason = r.map(str::to_string);
            let c = conditions(&st, Some(3), 100, &[], None);
            assert_eq!(status_of(&c, "Stalled"), "True", "{s}");
            assert_eq!(get(&c, "Failed").unwrap().reason, want, "{s}");
            assert_eq!(get(&c, "Stalled").unwrap().reason, want, "{s}");
            assert_eq!(status_of(&c, "Complete"), "-", "{s}");
            assert_eq!(status_of(&c, "Ready"), "-", "{s}");
        }
    }

    #[test]
    fn reasons_are_camel_case_and_say_why() {
        for (state, reason) in [
            (JobState::Pending, Some("Resources")),
            (JobState::Pending, Some("Priority")),
            (JobState::Pending, Some("Dependency")),
            (JobState::Pending, Some("JobLaunchFailure")),
            (JobState::Pending, None),
            (JobState::Running, None),
            (JobState::Completed, None),
            (JobState::NodeFail, Some("NodeFail")),
        ] {
            let r = why(state, reason);
            assert!(r.starts_with(|c: char| c.is_ascii_uppercase()), "{r}");
            assert!(r.chars().all(|c| c.is_ascii_alphanumeric()), "{r}");
            assert_ne!(r, state.as_str(), "a reason says more than the state");
        }
    }

    #[test]
    fn transition_times_move_only_with_status() {
        let pending = BatchJobStatus {
            state: Some(JobState::Pending),
            reason: Some("Resources".into()),
            ..Default::default()
        };
        let c1 = conditions(&pending, Some(1), 100, &[], None);
        let mut p2 = pending.clone();
        p2.reason = Some("Priority".into());
        let c2 = conditions(&p2, Some(1), 200, &c1, None);
        assert_eq!(get(&c2, "Ready").unwrap().last_transition_time, time(100));
        assert_eq!(get(&c2, "Ready").unwrap().reason, "WaitingForPriority");
        let mut r = pending;
        r.state = Some(JobState::Running);
        let c3 = conditions(&r, Some(1), 300, &c2, None);
        assert_eq!(get(&c3, "Ready").unwrap().last_transition_time, time(300));
        assert_eq!(get(&c3, "Stalled").unwrap().last_transition_time, time(100));
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
        assert_eq!(
            e.start_time,
            Some(time(10)),
            "a job that ran keeps its start"
        );
        // Cancelled while pending: its start was an estimate (after now); it starts and ends
        // now, as Slurm records it.
        let pending = BatchJobStatus {
            state: Some(JobState::Pending),
            start_time: Some(time(500)),
            ..Default::default()
        };
        let c = ended(&pending, JobState::Cancelled, "None", "", 99);
        assert_eq!((c.start_time, c.end_time), (Some(time(99)), Some(time(99))));
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

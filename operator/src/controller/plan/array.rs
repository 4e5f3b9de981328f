//! Array parents: elements created within the throttle, cancel and hold passed on, a summary.

use super::*;

/// Array parents: create elements within the throttle, propagate cancel and hold, summarise.
pub(super) fn step_parent(
    works: &mut [Work<'_>],
    wi: usize,
    kids: &[usize],
    dep_index: &DepIndex,
    expected: &std::collections::HashSet<(String, String)>,
    cfg: &PlanSettings,
    now: i64,
) {
    let (ns, name) = (works[wi].ns.clone(), works[wi].name.clone());
    let job = works[wi].job;
    if job.metadata.deletion_timestamp.is_some() {
        if has_finalizer(job) {
            works[wi].plan.remove_finalizer = true;
        }
        return;
    }
    // Elements.
    let mut elems: BTreeMap<u32, (&BatchJob, BatchJobStatus)> = BTreeMap::new();
    for &i in kids {
        let w = &works[i];
        if i == wi || w.ns != ns {
            continue;
        }
        if let Some(idx) = w
            .job
            .labels()
            .get(labels::ARRAY_TASK_ID)
            .and_then(|v| v.parse::<u32>().ok())
        {
            elems.insert(idx, (w.job, w.st.clone()));
        }
    }
    // A spec that cannot run ends the array (cancelled, if it was): it never has elements.
    let ended_invalid = |w: &mut Work<'_>, m: &str| {
        if w.st.state.is_some_and(|s| s.is_terminal()) {
            return;
        }
        if w.job.spec.cancel == Some(true) {
            end(w, JobState::Cancelled, None, "cancelled", now);
        } else {
            invalid(w, m, now);
        }
    };
    let parsed = match works[wi].parsed.as_deref() {
        Some(Ok(p)) => p.clone(),
        Some(Err(errs)) => {
            let m = translate::join_errors(errs);
            ended_invalid(&mut works[wi], &m);
            return;
        }
        None => return,
    };
    let Some(array) = parsed.array.clone() else {
        return;
    };
    let max_idx = array.indices.iter().copied().max().unwrap_or(0);
    if name.len() + 1 + max_idx.to_string().len() > 63 {
        let m = format!(
            "metadata.name {name:?} is too long for array elements named {name}-{max_idx}: at most {} characters",
            62 - max_idx.to_string().len()
        );
        ended_invalid(&mut works[wi], &m);
        return;
    }
    let w = &mut works[wi];
    let cancel = job.spec.cancel == Some(true);
    let hold = job.spec.hold == Some(true);

    // Summary.
    let mut sum = ArrayTaskSummary {
        total: array.indices.len() as u32,
        ..Default::default()
    };
    let mut active = 0usize;
    let mut first_fail: Option<(u32, BatchJobStatus)> = None;
    let mut first_pending_reason: Option<(String, String)> = None;
    let mut min_start: Option<i64> = None;
    let mut max_end: Option<i64> = None;
    for idx in &array.indices {
        match elems.get(idx) {
            None => sum.pending += 1,
            Some((ej, est)) => {
                let s = est.state.unwrap_or(JobState::Pending);
                if let Some(t) = est.start_time.as_ref().filter(|_| s != JobState::Pending) {
                    min_start = Some(min_start.map_or(secs(t), |m: i64| m.min(secs(t))));
                }
                if let Some(t) = &est.end_time {
                    max_end = Some(max_end.map_or(secs(t), |m: i64| m.max(secs(t))));
                }
                match s {
                    JobState::Pending => {
                        sum.pending += 1;
                        active += 1;
                        if first_pending_reason.is_none() {
                            first_pending_reason = Some((
                                est.reason.clone().unwrap_or_else(|| "None".into()),
                                est.message.clone().unwrap_or_default(),
                            ));
                        }
                    }
                    JobState::Running | JobState::Completing => {
                        sum.running += 1;
                        active += 1;
                    }
                    JobState::Completed => sum.completed += 1,
                    JobState::Cancelled => sum.cancelled += 1,
                    _ => {
                        sum.failed += 1;
                        if first_fail.is_none() {
                            first_fail = Some((*idx, est.clone()));
                        }
                    }
                }
                // Propagate cancel and hold to elements that have not ended.
                if !s.is_terminal() {
                    let mut patch = serde_json::Map::new();
                    if cancel && ej.spec.cancel != Some(true) {
                        patch.insert("cancel".into(), true.into());
                    }
                    if !cancel && s == JobState::Pending && ej.spec.hold.unwrap_or(false) != hold {
                        patch.insert("hold".into(), hold.into());
                    }
                    if !patch.is_empty() {
                        w.plan
                            .child_patches
                            .push((ej.name_any(), serde_json::json!({ "spec": patch })));
                    }
                }
            }
        }
    }

    // Create elements within the throttle, once the parent has its id and its dependency
    // allows.
    let mut throttled = false;
    let mut dep_wait: Option<(String, String)> = None;
    let mut dep_missing = false;
    let has_id = w.prev.and_then(|p| p.job_id).is_some();
    if has_id && !cancel && !hold {
        let limit = array.max_running.map(|m| m as usize).unwrap_or(usize::MAX);
        let mut created = 0usize;
        for idx in &array.indices {
            if elems.contains_key(idx) {
                continue;
            }
            if expected.contains(&(ns.clone(), format!("{name}-{idx}"))) {
                // Created, not yet seen: counts as a pending element.
                active += 1;
                continue;
            }
            if active >= limit {
                throttled = true;
                break;
            }
            if created >= cfg.max_children_per_cycle {
                break;
            }
            if let Some(dep) = &parsed.dependency {
                let who = Asker {
                    namespace: &ns,
                    name: &name,
                    slurm_name: job.job_name(),
                    id: w.id,
                    array_index: Some(*idx),
                };
                match deps::evaluate(dep, &who, dep_index, now) {
                    DepState::Satisfied => {}
                    DepState::Waiting(m) => {
                        dep_wait.get_or_insert((DEPENDENCY.into(), m));
                        continue;
                    }
                    DepState::Missing(m) => {
                        if dep_wait.is_none() {
                            dep_missing = true;
                        }
                        dep_wait.get_or_insert((DEPENDENCY.into(), m));
                        continue;
                    }
                    DepState::Never(m) => {
                        dep_wait.get_or_insert((DEPENDENCY_NEVER.into(), m));
                        continue;
                    }
                }
            }
            w.plan.children.push(child_job(job, *idx));
            created += 1;
            active += 1;
        }
    }

    // The array's own state.
    let st = &mut w.st;
    // Eligible, as Slurm's pending record of an array shows it, from when it may create
    // elements: its id given, not held or cancelled, no dependency in the way.
    if st.eligible_time.is_none() && has_id && !cancel && !hold && dep_wait.is_none() {
        st.eligible_time = Some(time(now));
    }
    st.array_tasks = Some(sum.clone());
    st.start_time = min_start.map(time);
    let done = sum.completed + sum.failed + sum.cancelled;
    let prev_state = w.prev.and_then(|p| p.state);
    let (state, reason, message): (JobState, Option<String>, String) = if cancel {
        (JobState::Cancelled, None, "cancelled".into())
    } else if done == sum.total && elems.len() as u32 >= sum.total {
        if sum.completed == sum.total {
            (JobState::Completed, None, "every element completed".into())
        } else if let Some((idx, est)) = &first_fail {
            st.exit_code = est.exit_code;
            st.exit_signal = est.exit_signal;
            (
                JobState::Failed,
                Some("NonZeroExitCode".into()),
                format!(
                    "{} of {} elements did not complete; first: element {idx} {}",
                    sum.failed + sum.cancelled,
                    sum.total,
                    est.state.unwrap_or(JobState::Failed)
                ),
            )
        } else {
            (
                JobState::Cancelled,
                None,
                format!("{} of {} elements cancelled", sum.cancelled, sum.total),
            )
        }
    } else if sum.running > 0 {
        (
            JobState::Running,
            None,
            format!("{} element(s) running", sum.running),
        )
    } else if hold {
        (JobState::Pending, Some(HELD.into()), "held".into())
    } else if let Some((r, m)) = dep_wait.filter(|_| active == 0) {
        if dep_missing {
            w.known = Some(Why::DependencyNotFound);
        }
        (JobState::Pending, Some(r), m)
    } else if throttled && first_pending_reason.is_none() {
        (
            JobState::Pending,
            Some("JobArrayTaskLimit".into()),
            format!(
                "{} element(s) may run at once",
                array.max_running.unwrap_or(0)
            ),
        )
    } else if let Some((r, m)) = first_pending_reason {
        (JobState::Pending, Some(r), m)
    } else {
        (JobState::Pending, Some("None".into()), String::new())
    };
    if state.is_terminal() {
        st.end_time = max_end.map(time).or_else(|| Some(time(now)));
        if state == JobState::Completed {
            st.exit_code = Some(0);
        }
    } else {
        st.end_time = None;
    }
    st.state = Some(state);
    st.reason = reason;
    st.message = Some(message.clone()).filter(|m| !m.is_empty());
    if prev_state != Some(state) && prev_state.is_some() {
        let warning = matches!(state, JobState::Failed);
        w.plan.events.push(event(
            warning,
            &format!("Array{}", state_word(state)),
            message,
        ));
        w.plan.effects.push(Effect::Transition(state));
    }
}

pub(super) fn state_word(s: JobState) -> &'static str {
    match s {
        JobState::Pending => "Pending",
        JobState::Running => "Running",
        JobState::Completing => "Completing",
        JobState::Completed => "Completed",
        JobState::Failed => "Failed",
        JobState::Cancelled => "Cancelled",
        JobState::Timeout => "Timeout",
        JobState::NodeFail => "NodeFail",
        JobState::Preempted => "Preempted",
    }
}

/// The BatchJob running element `idx` of an array: the parent's spec without `array` and
/// `dependency` (evaluated by the parent), the array's job name, owned by the parent, labelled
/// with the parent and index, and created with the allocation finalizer already on.
pub fn child_job(parent: &BatchJob, idx: u32) -> BatchJob {
    let mut spec = parent.spec.clone();
    spec.array = None;
    spec.dependency = None;
    spec.job_name = Some(parent.job_name().to_string());
    let pname = parent.name_any();
    let mut lbl = parent.labels().clone();
    lbl.insert(labels::ARRAY_PARENT.into(), pname.clone());
    lbl.insert(labels::ARRAY_TASK_ID.into(), idx.to_string());
    let ann = parent.annotations().clone();
    let mut owner = pods::owner_ref(parent);
    owner.block_owner_deletion = Some(true);
    BatchJob {
        metadata: ObjectMeta {
            name: Some(format!("{pname}-{idx}")),
            namespace: parent.namespace(),
            labels: Some(lbl),
            annotations: (!ann.is_empty()).then_some(ann),
            owner_references: Some(vec![owner]),
            finalizers: Some(vec![labels::FINALIZER.to_string()]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

//! One job's step through its states (dereference, validate, build).

use super::*;

#[allow(clippy::too_many_arguments)]
pub(super) fn step_job(
    w: &mut Work<'_>,
    pods: &[&PodObs],
    snap: &Snapshot,
    crd_parts: &HashMap<String, &Partition>,
    bind: &BindCtx,
    by_uid: &HashMap<String, &BatchJob>,
    max_running: &HashMap<String, Option<u32>>,
    dep_index: &DepIndex,
    nodes_table: &Arc<NodeTable>,
    cfg: &PlanSettings,
    now: i64,
) {
    let job = w.job;
    let attempt = w.st.attempt.unwrap_or(0);
    let state = w.st.state.unwrap_or(JobState::Pending);
    let is_cur = |p: &PodObs| attempt >= 1 && p.attempt == Some(attempt);

    // Pods of other attempts never belong to the gang: stop them.
    for p in pods {
        if !is_cur(p) && p.live() && !p.deleting {
            w.plan.delete.push(p.name().to_string());
        }
    }

    if job.metadata.deletion_timestamp.is_some() {
        for p in pods {
            if is_cur(p) && p.live() && !p.deleting {
                w.plan.delete.push(p.name().to_string());
            }
        }
        if has_finalizer(job) && !pods.iter().any(|p| p.live()) {
            w.plan.remove_finalizer = true;
        }
        return;
    }

    // Array element: its array.
    if let Some(parent) = parent_of(job, by_uid)
        && let Some(aid) = parent.status.as_ref().and_then(|s| s.job_id)
    {
        let idx = job
            .labels()
            .get(labels::ARRAY_TASK_ID)
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0);
        w.array = Some(ArrayTask {
            array_job_id: aid,
            task_id: idx,
            max_running: parent
                .uid()
                .and_then(|u| max_running.get(&u).copied())
                .flatten(),
        });
        w.st.array_job_id = Some(aid);
        w.st.array_task_id = Some(idx);
    }

    let cur: Vec<&PodObs> = pods.iter().copied().filter(|p| is_cur(p)).collect();
    let delete_cur = |w: &mut Work<'_>| {
        for p in &cur {
            if p.live() && !p.deleting && !w.plan.delete.iter().any(|d| d == p.name()) {
                w.plan.delete.push(p.name().to_string());
            }
        }
    };

    if requeue_requested(w, now) {
        delete_cur(w);
        queue_pending(w, crd_parts, bind, dep_index, now);
        return;
    }

    match state {
        JobState::Running if w.has_tasks() => {
            let nodes = w.node_ranks();
            let npods = nodes.len();
            let mut by_node: BTreeMap<u32, &PodObs> = BTreeMap::new();
            for p in &cur {
                if let Some(n) = p.node {
                    by_node.entry(n).or_insert(p);
                }
            }
            // The batch host's pod: its batch step's end is the job's (as in Slurm).
            let batch = nodes.first().and_then(|n| by_node.get(n)).copied();
            let rj = translate::running_job_with(
                job,
                w.core_tasks(nodes_table),
                w.id.unwrap_or(0),
                w.part,
                None,
            );
            let start = w.st.start_time.as_ref().map(secs).unwrap_or(now);
            if batch.is_some_and(|p| p.phase == Phase::Succeeded) {
                end(
                    w,
                    JobState::Completed,
                    None,
                    "the batch script exited 0",
                    now,
                );
                w.st.exit_code = Some(0);
                w.st.exit_signal = None;
                delete_cur(w);
                return;
            }
            if job.spec.cancel == Some(true) {
                end(w, JobState::Cancelled, None, "cancelled", now);
                delete_cur(w);
                return;
            }
            // `scancel --signal`: the pods carry the job's requests, and the kubelet hands
            // them to the step runtime on each node; `--signal`'s warning follows the time
            // limit as it is now (`scontrol update TimeLimit=`) the same way.
            let signals = job
                .annotations()
                .get(muster_crds::signals::ANNOTATION)
                .map(String::as_str);
            let end_at = pods::warning_end(job, pods::limit_end(&w.st));
            for p in &cur {
                if !p.live() || p.deleting {
                    continue;
                }
                let mut set = BTreeMap::new();
                if p.signals.as_deref() != signals {
                    set.insert(
                        muster_crds::signals::ANNOTATION.to_string(),
                        signals.map(str::to_string),
                    );
                }
                if p.end_time.as_deref() != end_at.as_deref() {
                    set.insert(
                        muster_crds::step::END_TIME_ANNOTATION.to_string(),
                        end_at.clone(),
                    );
                }
                if !set.is_empty() {
                    w.plan.annotate_pods.push((p.name().to_string(), set));
                }
            }
            if let Some(stop) = core::enforce::stop_for(snap, &rj, now) {
                match stop.state {
                    JobState::Timeout => {
                        end(w, JobState::Timeout, Some("TimeLimit"), &stop.message, now);
                        delete_cur(w);
                    }
                    _ => {
                        node_fail(w, &stop.message, now);
                        delete_cur(w);
                        if w.st.state == Some(JobState::Pending) {
                            queue_pending(w, crd_parts, bind, dep_index, now);
                        }
                    }
                }
                return;
            }
            // The batch pod failing decides; another node's daemon failing ends the job too
            // (its steps cannot run there any more).
            let failed = batch.filter(|p| p.phase == Phase::Failed).or_else(|| {
                nodes
                    .iter()
                    .filter_map(|n| by_node.get(n))
                    .find(|p| p.phase == Phase::Failed)
                    .copied()
            });
            if let Some(p) = failed {
                let what = if Some(p.name()) == batch.map(|b| b.name()) {
                    format!("the batch script (pod {})", p.name())
                } else {
                    format!(
                        "the node daemon of node {} (pod {})",
                        p.node.unwrap_or(0),
                        p.name()
                    )
                };
                match &p.exit {
                    Some(x) => {
                        let msg = match x.signal {
                            Some(sig) => {
                                format!("{what} exited with code {} (signal {sig})", x.code)
                            }
                            None => format!("{what} exited with code {}", x.code),
                        };
                        end(w, JobState::Failed, Some("NonZeroExitCode"), &msg, now);
                        w.st.exit_code = Some(x.code);
                        w.st.exit_signal = x.signal;
                        delete_cur(w);
                    }
                    // Like a Slurm prolog failing: the job could not be launched there. Requeued
                    // with a backoff: requeued at once, a failure that repeats (a step binary
                    // that cannot run on the node) would spin.
                    None if p.init_failed => {
                        let msg = format!(
                            "pod {} could not start: {}",
                            p.name(),
                            p.failure().unwrap_or_default()
                        );
                        launch_failure(w, "LaunchFailed", &msg, now);
                        delete_cur(w);
                    }
                    None => {
                        let msg = format!(
                            "pod {} failed without an exit ({})",
                            p.name(),
                            p.failure().unwrap_or_default()
                        );
                        node_fail(w, &msg, now);
                        delete_cur(w);
                    }
                }
                return;
            }
            let missing: Vec<u32> = nodes
                .iter()
                .copied()
                .filter(|n| !by_node.contains_key(n))
                .collect();
            let late = now.saturating_sub(start) >= cfg.gang_start_timeout_secs;
            if !missing.is_empty() {
                if late {
                    launch_failure(
                        w,
                        "GangStartTimeout",
                        &format!(
                            "gang start timeout: {} of {npods} node pods missing {}s after admission",
                            missing.len(),
                            cfg.gang_start_timeout_secs
                        ),
                        now,
                    );
                    delete_cur(w);
                    return;
                }
                // Finish the admission: create the pods it lacks.
                let pname = w.st.partition.clone().unwrap_or_default();
                // Decoded for the pods only (a job whose pods are missing: few per cycle).
                let tasks = w.task_records().to_vec();
                let shared = Shared {
                    job: w.obs.clone(),
                    tasks: match &w.tasks {
                        Tasks::Kept => Arc::new(w.records.clone()),
                        Tasks::New(r) => r.clone(),
                    },
                    partition: bind.partition(&pname),
                    table: nodes_table.clone(),
                };
                let ctx = w.job_context(attempt, &tasks, crd_parts, &cfg.step);
                let gang = bind.gang_ref(&w.name, attempt);
                let built = match PodsToCreate::new(
                    &ctx,
                    shared,
                    missing,
                    bind.device_class(&pname),
                    gang.clone(),
                ) {
                    Ok(b) => b,
                    Err(e) => {
                        launch_failure(
                            w,
                            "LaunchFailed",
                            &format!("cannot build node pods: {e}"),
                            now,
                        );
                        delete_cur(w);
                        return;
                    }
                };
                plan_pod_objects(w, job, gang.as_ref(), attempt, npods, cur.is_empty());
                w.plan.create = built;
                w.holds = true;
                return;
            }
            // `Unknown` (the kubelet stopped reporting) is left to node failure detection.
            let waiting: Vec<&str> = cur
                .iter()
                .filter(|p| p.phase == Phase::Pending)
                .map(|p| p.name())
                .collect();
            if late && !waiting.is_empty() {
                launch_failure(
                    w,
                    "GangStartTimeout",
                    &format!(
                        "gang start timeout: {} of {npods} node pods not running {}s after admission: {}",
                        waiting.len(),
                        cfg.gang_start_timeout_secs,
                        waiting.join(", ")
                    ),
                    now,
                );
                delete_cur(w);
                return;
            }
            w.holds = true;
        }
        JobState::Running => {
            // RUNNING without an allocation cannot be honoured: queue it again.
            w.st.state = Some(JobState::Pending);
            queue_pending(w, crd_parts, bind, dep_index, now);
        }
        JobState::Pending => {
            delete_cur(w);
            queue_pending(w, crd_parts, bind, dep_index, now);
        }
        _ => {
            // Ended (COMPLETING is never written by Muster; treated as ended).
            delete_cur(w);
        }
    }
}

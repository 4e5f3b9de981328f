//! Queueing, admission, preemption and the ends of a job: the status changes each makes.

use super::*;

/// A PENDING job: cancelled, invalid (it ends FAILED), its partition missing or unable to run
/// it, backing off, waiting on a dependency, or queued.
pub(super) fn queue_pending(
    w: &mut Work<'_>,
    crd_parts: &HashMap<String, &Partition>,
    bind: &BindCtx,
    dep_index: &DepIndex,
    now: i64,
) {
    let job = w.job;
    w.known = None;
    if job.spec.cancel == Some(true) {
        end(
            w,
            JobState::Cancelled,
            None,
            "cancelled before it started",
            now,
        );
        return;
    }
    let parsed = match w.parsed.as_deref() {
        Some(Ok(p)) => p.clone(),
        Some(Err(errs)) => {
            invalid(w, &translate::join_errors(errs), now);
            return;
        }
        None => return,
    };
    let pname = w.part_name.clone().unwrap_or_default();
    if w.part.is_none() {
        let m = if pname.is_empty() {
            "no partition given and no Partition is the default".to_string()
        } else {
            format!("partition {pname} does not exist")
        };
        set_pending(w, PARTITION_CONFIG, &m);
        w.known = Some(Why::PartitionNotFound);
        return;
    }
    match pods::check_buildable(job, crd_parts.get(&pname).copied(), &pname) {
        Ok(()) => {}
        Err(e @ pods::BuildError::NoImage { .. }) => {
            // The partition may get a default image: wait, stalled, rather than fail.
            set_pending(w, PARTITION_CONFIG, &e.to_string());
            w.known = Some(Why::NoImage);
            return;
        }
        Err(e) => {
            invalid(w, &e.to_string(), now);
            return;
        }
    }
    if let Some(Err(why)) = bind.by_partition.get(&pname) {
        // The partition asks for DRA the cluster cannot give: wait, stalled, until it can
        // (the driver installed) or the partition changes.
        let m = format!("partition {pname} has gpuBinding: dra, but {why}");
        set_pending(w, PARTITION_CONFIG, &m);
        w.known = Some(Why::GpuBindingUnavailable);
        return;
    }
    if let Some(t) = &w.st.eligible_time
        && secs(t) > now
    {
        // Backing off after a launch failure: keep the recorded reason.
        return;
    }
    if let Some(dep) = &parsed.dependency {
        let who = Asker {
            namespace: &w.ns,
            name: &w.name,
            slurm_name: job.job_name(),
            id: w.id,
            array_index: w.array.as_ref().map(|a| a.task_id),
        };
        match deps::evaluate(dep, &who, dep_index, now) {
            DepState::Satisfied => {}
            DepState::Waiting(m) => {
                set_pending(w, DEPENDENCY, &m);
                return;
            }
            DepState::Missing(m) => {
                set_pending(w, DEPENDENCY, &m);
                w.known = Some(Why::DependencyNotFound);
                return;
            }
            DepState::Never(m) => {
                set_pending(w, DEPENDENCY_NEVER, &m);
                return;
            }
        }
    }
    w.queued = true;
}

/// A job whose spec cannot run ends FAILED with reason `InvalidSpec` and the message naming
/// the field (the API's CEL rules and the admission webhook refuse most such specs first).
pub(super) fn invalid(w: &mut Work<'_>, message: &str, now: i64) {
    if w.st.state == Some(JobState::Failed) && w.st.reason.as_deref() == Some(INVALID_SPEC) {
        return;
    }
    end(w, JobState::Failed, Some(INVALID_SPEC), message, now);
}

pub(super) fn set_pending(w: &mut Work<'_>, reason: &str, message: &str) {
    w.st.state = Some(JobState::Pending);
    w.st.reason = Some(reason.to_string());
    w.st.message = Some(message.to_string());
    w.st.start_time = None;
}

pub(super) fn end(
    w: &mut Work<'_>,
    state: JobState,
    reason: Option<&str>,
    message: &str,
    now: i64,
) {
    let st = status::ended(&w.st, state, reason.unwrap_or("None"), message, now);
    w.st = st;
    if reason.is_none() {
        w.st.reason = None;
    }
    let (warning, ev) = match state {
        JobState::Completed => (false, "Completed"),
        JobState::Cancelled => (false, "Cancelled"),
        JobState::Failed => (true, "Failed"),
        JobState::Timeout => (true, "Timeout"),
        JobState::NodeFail => (true, "NodeFail"),
        JobState::Preempted => (true, "Preempted"),
        _ => (false, "Ended"),
    };
    w.plan.events.push(event(warning, ev, message));
    w.plan.effects.push(Effect::Transition(state));
}

pub(super) fn node_fail(w: &mut Work<'_>, message: &str, now: i64) {
    if w.job.spec.requeue == Some(false) {
        end(w, JobState::NodeFail, Some("NodeFail"), message, now);
        return;
    }
    // A first failure is requeued at once (another node will do); again after a restart, a
    // growing backoff: a failure that follows the job (a kubelet refusing its pods) would
    // otherwise requeue it many times a second. Slurm holds every requeued batch job ~2 min.
    let restarts = w.st.restarts.unwrap_or(0);
    let backoff = if restarts == 0 {
        0
    } else {
        status::launch_backoff(restarts - 1)
    };
    let msg = if backoff == 0 {
        format!("requeued after NODE_FAIL: {message}")
    } else {
        format!("requeued after NODE_FAIL: {message}; eligible again in {backoff}s")
    };
    w.st = status::requeued(&w.st, "NodeFail", &msg, now + backoff);
    w.set_tasks(&[]);
    w.plan.events.push(event(true, "NodeFail", message));
    w.plan.events.push(event(false, "Requeued", &msg));
    w.plan.effects.push(Effect::Transition(JobState::NodeFail));
    w.plan.effects.push(Effect::Transition(JobState::Pending));
}

/// The job's pods could not all start (`event`: why, as the event's reason): requeued with a
/// backoff that grows with its restarts.
pub(super) fn launch_failure(w: &mut Work<'_>, event_reason: &str, message: &str, now: i64) {
    let backoff = status::launch_backoff(w.st.restarts.unwrap_or(0));
    let msg = format!("{message}; requeued, eligible again in {backoff}s");
    w.st = status::requeued(&w.st, LAUNCH_FAILURE, &msg, now + backoff);
    w.set_tasks(&[]);
    w.plan.events.push(event(true, event_reason, &msg));
    w.plan.effects.push(Effect::Transition(JobState::Pending));
}

pub(super) fn admit(
    w: &mut Work<'_>,
    s: &core::Start,
    nodes: &Arc<NodeTable>,
    crd_parts: &HashMap<String, &Partition>,
    bind: &BindCtx,
    cfg: &PlanSettings,
    now: i64,
) {
    let job = w.job;
    let attempt = w.st.attempt.unwrap_or(0).max(1);
    let name = w.name.clone();
    let tasks: Vec<TaskAllocation> = s
        .tasks
        .iter()
        .map(|t| {
            let node = &nodes.nodes[t.node as usize];
            let uuids: Vec<String> = t
                .gpus
                .iter()
                .filter_map(|g| {
                    node.gpus
                        .iter()
                        .find(|x| x.index == *g)
                        .map(|x| x.uuid.clone())
                })
                .collect();
            TaskAllocation {
                rank: t.rank,
                node: node.name.clone(),
                node_rank: t.node_rank,
                local_rank: t.local_rank,
                cpu_millis: t.cpu_millis,
                memory_mib: t.memory_mib,
                gpus: t.gpus.clone(),
                gpu_uuids: if uuids.len() == t.gpus.len() {
                    uuids
                } else {
                    Vec::new()
                },
                pod: Some(pods::pod_name(&name, attempt, t.node_rank)),
            }
        })
        .collect();
    let submit = w.st.submit_time.as_ref().map(secs).unwrap_or(now);
    // Admitted in the cycle that first saw it: one event says both.
    let new = w.prev.and_then(|p| p.job_id).is_none();
    if new {
        w.plan.events.retain(|e| e.reason != "Submitted");
    }
    let st = &mut w.st;
    st.state = Some(JobState::Running);
    st.reason = None;
    st.message = None;
    st.attempt = Some(attempt);
    st.priority = Some(s.priority);
    st.start_time = Some(time(now));
    st.end_time = None;
    st.exit_code = None;
    st.exit_signal = None;
    if st.eligible_time.is_none() {
        st.eligible_time = Some(time(now));
    }
    st.time_limit = Some(format_limit(s.time_limit));
    st.node_list = Some(pods::node_list(&tasks));
    st.num_nodes = Some(s.nodes.len() as u32);
    st.num_tasks = Some(tasks.len() as u32);
    // Tasks that share their node's GPUs hold each GPU once.
    st.num_gpus = Some(
        core::distinct_gpus(s.tasks.iter().map(|t| (t.node, t.gpus.as_slice())))
            .min(u64::from(u32::MAX)) as u32,
    );
    // As Slurm's AllocCPUS: an exclusive job holds its nodes' every CPU, not just those asked.
    let cpu_millis: u64 = if s.exclusive {
        s.nodes
            .iter()
            .map(|&n| nodes.nodes[n as usize].cpu_millis)
            .sum()
    } else {
        tasks.iter().map(|t| t.cpu_millis).sum()
    };
    st.num_cpus = Some(cpu_millis.div_ceil(1000).min(u64::from(u32::MAX)) as u32);
    tracing::debug!(
        job = %w.name,
        id = w.id.unwrap_or(0),
        attempt,
        gpus = ?tasks.iter().map(|t| (t.node.as_str(), t.gpus.clone())).collect::<Vec<_>>(),
        "admit"
    );
    let records = Arc::new(TaskRecords::new(&tasks));
    w.tasks = Tasks::New(records.clone());
    let pname = w.st.partition.clone().unwrap_or_default();
    let gpu_binding = bind.binding(&pname);
    w.st.gpu_binding = Some(gpu_binding);
    let ctx = w.job_context(attempt, &tasks, crd_parts, &cfg.step);
    let node_ranks = records.node_ranks();
    let npods = node_ranks.len();
    let gang = bind.gang_ref(&name, attempt);
    let shared = Shared {
        job: w.obs.clone(),
        tasks: records,
        partition: bind.partition(&pname),
        table: nodes.clone(),
    };
    let built = match PodsToCreate::new(
        &ctx,
        shared,
        node_ranks,
        bind.device_class(&pname),
        gang.clone(),
    ) {
        Ok(b) => b,
        Err(e) => {
            // check_buildable ran before queueing, so this is not expected; keep the job
            // pending rather than record an allocation without pods.
            let prev = w.prev.cloned().unwrap_or_default();
            w.st.state = Some(JobState::Pending);
            // The stored records again (as they were before this admission).
            w.tasks = Tasks::Kept;
            w.st.start_time = None;
            w.st.node_list = None;
            w.st.gpu_binding = prev.gpu_binding;
            set_pending(w, PARTITION_CONFIG, &e.to_string());
            return;
        }
    };
    plan_pod_objects(w, job, gang.as_ref(), attempt, npods, true);
    w.plan.create = built;
    w.plan.add_finalizer = !has_finalizer(job);
    w.holds = true;
    w.queued = false;
    let nl = w.st.node_list.clone().unwrap_or_default();
    w.plan.events.push(event(
        false,
        "Started",
        format!(
            "job {} allocated {nl}: {} task(s), {} GPU(s); attempt {attempt}",
            w.id.unwrap_or(0),
            w.task_records().len(),
            w.st.num_gpus.unwrap_or(0)
        ),
    ));
    w.plan.effects.push(Effect::Transition(JobState::Running));
    w.plan.effects.push(Effect::TimeToStart {
        partition: pname,
        secs: (now - submit).max(0) as f64,
    });
}

/// `scontrol requeue`: whether a request not yet honoured requeued the job (running or
/// ended) as a new attempt, eligible at once; the caller stops its pods and queues it. A
/// request for a pending job, a `requeue: false` one or a cancelled one is only recorded
/// (admission refuses them, so only a write that bypassed it gets here).
pub(super) fn requeue_requested(w: &mut Work<'_>, now: i64) -> bool {
    let asked = w.job.spec.requeue_requests.unwrap_or(0);
    if asked <= w.st.requeue_requests.unwrap_or(0) {
        return false;
    }
    w.st.requeue_requests = Some(asked);
    let state = w.st.state.unwrap_or(JobState::Pending);
    if state == JobState::Pending
        || w.job.spec.requeue == Some(false)
        || w.job.spec.cancel == Some(true)
    {
        return false;
    }
    let msg = format!("requeued on request (was {})", state.as_str());
    w.st = status::requeued(&w.st, "Requeued", &msg, now);
    w.set_tasks(&[]);
    w.holds = false;
    w.plan.events.push(event(false, "Requeued", &msg));
    w.plan.effects.push(Effect::Transition(JobState::Pending));
    true
}

pub(super) fn preempt(w: &mut Work<'_>, for_job: JobId, requeue: bool, pods: &[&PodObs], now: i64) {
    if w.st.state != Some(JobState::Running) {
        return;
    }
    let attempt = w.st.attempt.unwrap_or(0);
    let part = w.st.partition.clone().unwrap_or_default();
    let msg = format!("preempted by job {for_job}");
    if requeue && w.job.spec.requeue != Some(false) {
        let m = format!("{msg}; requeued");
        w.st = status::requeued(&w.st, "Preempted", &m, now);
        w.set_tasks(&[]);
        w.plan.events.push(event(true, "Preempted", &m));
        w.plan.effects.push(Effect::Transition(JobState::Preempted));
        w.plan.effects.push(Effect::Transition(JobState::Pending));
    } else {
        end(w, JobState::Preempted, Some("Preempted"), &msg, now);
    }
    w.plan.effects.push(Effect::Preempted { partition: part });
    w.holds = false;
    for p in pods {
        if p.owner_uid() == Some(w.uid.as_str())
            && p.attempt == Some(attempt)
            && p.live()
            && !p.deleting
            && !w.plan.delete.iter().any(|d| d == p.name())
        {
            w.plan.delete.push(p.name().to_string());
        }
    }
}

/// The objects a job's `npods` pods need before any of them is created: the step credential
/// (kept if it exists: a crash after it; a one-node job's pod makes its own) and, when no pod
/// of the attempt exists yet (`first`), the Service that names a multi-node job's pods and
/// the gang's group (created before the first pod; a crash after it finds it there).
pub(super) fn plan_pod_objects(
    w: &mut Work<'_>,
    job: &BatchJob,
    gang: Option<&GangRef>,
    attempt: u32,
    npods: usize,
    first: bool,
) {
    if !muster_crds::step::key_in_pod(npods) {
        w.plan.secret = Some(Box::new(pods::build_secret(job)));
    }
    if !first {
        return;
    }
    if npods > 1 {
        w.plan.service = Some(Box::new(pods::build_service(job)));
    }
    if let Some(g) = gang {
        w.plan.group = Some(gang::build_group(
            g,
            job,
            w.id.unwrap_or(0),
            attempt,
            npods as u32,
        ));
    }
}

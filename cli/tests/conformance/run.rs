//! One row run three ways, each checked against the row's expectation and the others.

use super::*;

/// Runs one row three ways and checks each against the expectation and the others.
pub async fn run_row(row: &Row) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    // --- sbatch reads the row's options as its spec ---
    if let Some(args) = &row.job.sbatch {
        match (sbatch_spec(args, row.job.user).await, &row.expect) {
            (Ok(spec), _) => {
                let mut want = row.job.spec.clone();
                if let Some(j) = want.get("jobName").cloned() {
                    want.as_object_mut().unwrap().remove("jobName");
                    let _ = j;
                }
                if spec != want {
                    return Err(format!(
                        "sbatch {args:?} gives spec {spec} but the row is {want}"
                    ));
                }
            }
            (Err(e), Expect::Refused { field, .. }) if e.contains(field) => {}
            (Err(e), _) => return Err(format!("sbatch {args:?} refused: {e}")),
        }
    }
    // --- the simulator ---
    let sim = simulate(tmp.path(), &trace(row)).await;
    // --- the operator, and sbatch --test-only on the cluster it runs ---
    let w = World::start().await;
    let r = operator_and_test_only(&w, row, &sim).await;
    w.stop().await;
    r
}

fn matches_nodes(got: &str, want: &str) -> bool {
    hostlist::expand(got).ok() == hostlist::expand(want).ok()
}

async fn operator_and_test_only(
    w: &World,
    row: &Row,
    sim: &Result<BTreeMap<String, SimJob>, String>,
) -> Result<(), String> {
    for b in &row.background {
        w.submit(b)
            .await
            .map_err(|e| format!("background {}: {e}", b.name))?;
        if b.queued {
            w.until(b.name, "queued", |s| matches!(s, Seen::Pending { reason, .. } if !reason.is_empty() && reason != "None"))
                .await;
        } else {
            w.until(b.name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
        }
    }
    // sbatch --test-only, before the job exists.
    let test_only = match &row.job.sbatch {
        Some(args) => {
            let mut a: Vec<&str> = vec!["sbatch", "--test-only"];
            a.extend(args.iter().copied());
            a.push("--wrap=true");
            let now = w.now();
            let (ok, _, err) = w.muster(row.job.user, &a).await;
            test_only_line(ok, &err, now, w)
        }
        None => w.test_only_job(&row.job).await,
    };
    let submitted = w.submit(&row.job).await;
    let sim_job = |name: &str| -> Result<SimJob, String> {
        match sim {
            Ok(m) => m
                .get(name)
                .cloned()
                .ok_or_else(|| format!("simulate: no job {name} in {m:?}")),
            Err(e) => Err(format!("simulate refused the trace: {e}")),
        }
    };
    let name = row.job.name;
    let waiting = |s: &Seen| matches!(s, Seen::Pending { reason, .. } if !reason.is_empty() && reason != "None");
    match &row.expect {
        Expect::Runs { nodes, ranks, env } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w
                .until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            let Seen::Running { nodes: got, tasks } = &seen else {
                unreachable!()
            };
            if !matches_nodes(got, nodes) {
                return Err(format!("operator: runs on {got}, expected {nodes}"));
            }
            if let Some(r) = ranks {
                let want: Vec<(String, Vec<u32>)> =
                    r.iter().map(|(n, g)| (n.to_string(), g.clone())).collect();
                if *tasks != want {
                    return Err(format!("operator: ranks {tasks:?}, expected {want:?}"));
                }
            }
            let s = sim_job(name)?;
            if s.start != Some(s.submit) || !matches_nodes(&s.nodes, nodes) || s.tasks != *tasks {
                return Err(format!(
                    "simulate: start {:?} on {} with {:?}; the operator: {got} with {tasks:?}",
                    s.start, s.nodes, s.tasks
                ));
            }
            match &test_only {
                Seen::Running { nodes: t, .. } if matches_nodes(t, nodes) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}, expected to start now on {nodes}"
                    ));
                }
            }
            if !env.is_empty() {
                let deadline = tokio::time::Instant::now() + WAIT;
                loop {
                    let e = w.env(name).await;
                    let missing: Vec<String> = env
                        .iter()
                        .filter(|(rank, k, v)| {
                            e.get(rank).and_then(|m| m.get(*k)).map(String::as_str) != Some(*v)
                        })
                        .map(|(rank, k, v)| {
                            format!(
                                "node {rank} {k}={v} (has {:?})",
                                e.get(rank).and_then(|m| m.get(*k))
                            )
                        })
                        .collect();
                    if missing.is_empty() {
                        break;
                    }
                    if tokio::time::Instant::now() > deadline {
                        return Err(format!("operator pods: {missing:?}"));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        Expect::Waits { reason, words } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w.until(name, "a pending reason", waiting).await;
            let Seen::Pending {
                reason: r, message, ..
            } = &seen
            else {
                return Err(format!("operator: {seen:?}"));
            };
            if r != reason || !message.contains(words) {
                return Err(format!(
                    "operator: {r}: {message}; expected {reason} with {words:?}"
                ));
            }
            // It stays so: a few more cycles do not start it (an estimate, counted from now,
            // may read a second less).
            tokio::time::sleep(Duration::from_millis(600)).await;
            let again = w.observe(name).await;
            let still = matches!(&again, Some(Seen::Pending { reason: r2, message: m2, .. })
                if r2 == r && m2 == message);
            if !still {
                return Err(format!("operator: {seen:?} then {again:?}"));
            }
            let s = sim_job(name)?;
            let sim_reason = s.reason.split(':').next().unwrap_or("").to_string();
            if s.start.is_some() || sim_reason != *reason || s.message != *message {
                return Err(format!(
                    "simulate: {} {:?} reason {:?} message {:?}; the operator: {r}: {message}",
                    s.state, s.start, s.reason, s.message
                ));
            }
            match &test_only {
                Seen::Pending {
                    reason: tr,
                    message: tm,
                    ..
                } if tr == reason && tm == message => {}
                // As Slurm's --test-only: a job waiting for its --begin gets the begin time
                // as its start, the operator's estimate too (scontrol's StartTime=).
                Seen::Pending {
                    start: Some((ts, _)),
                    ..
                } if *reason == "BeginTime"
                    && matches!(&seen, Seen::Pending { start: Some((os, _)), .. }
                        if (ts - os).abs() <= 2) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}; the operator: {r}: {message}"
                    ));
                }
            }
        }
        Expect::Infeasible { words } => {
            // The cycle's reason for an admitted job is the submission check's text.
            let message = match submitted {
                // A real cluster's operator refuses it at admission (webhook).
                Err(e) if e.contains(words) => {
                    let at = e.find(words).unwrap_or(0);
                    e[at..].trim_end_matches(')').to_string()
                }
                Err(e) => return Err(format!("operator: refused: {e}; expected {words:?}")),
                Ok(()) => {
                    let seen = w.until(name, "a pending reason", waiting).await;
                    match &seen {
                        Seen::Pending {
                            reason: r, message, ..
                        } if r == "BadConstraints" && message.contains(words) => message.clone(),
                        other => {
                            return Err(format!(
                                "operator: {other:?}; expected BadConstraints with {words:?}"
                            ));
                        }
                    }
                }
            };
            let s = sim_job(name)?;
            if s.start.is_some() || !s.reason.starts_with("BadConstraints") || s.message != message
            {
                return Err(format!(
                    "simulate: {} {:?} reason {:?} message {:?}; the operator: {message}",
                    s.state, s.start, s.reason, s.message
                ));
            }
            match &test_only {
                Seen::Refused(t)
                    if t.contains("Job submit/allocate failed") && t.contains(message.as_str()) => {
                }
                other => {
                    return Err(format!(
                        "test-only: {other:?}; expected refused with {message:?}"
                    ));
                }
            }
        }
        Expect::RunsAfterWait { secs, nodes } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w.until(name, "waiting", waiting).await;
            if !matches!(&seen, Seen::Pending { reason, .. } if reason == "Resources") {
                return Err(format!("operator: {seen:?} before the wait is over"));
            }
            tokio::time::sleep(Duration::from_millis(600)).await;
            if let Some(Seen::Running { .. }) = w.observe(name).await {
                return Err("operator: started before its wait was over".into());
            }
            w.shift(*secs + 1);
            let seen = w
                .until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            let Seen::Running { nodes: got, .. } = &seen else {
                unreachable!()
            };
            if !matches_nodes(got, nodes) {
                return Err(format!("operator: runs on {got}, expected {nodes}"));
            }
            let s = sim_job(name)?;
            if s.start != Some(s.submit + secs) || !matches_nodes(&s.nodes, nodes) {
                return Err(format!("simulate: start {:?} on {}", s.start, s.nodes));
            }
            match &test_only {
                Seen::Pending {
                    start: Some((t, n)),
                    ..
                } if (t - secs).abs() <= 3 && matches_nodes(n, nodes) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}, expected +{secs}s on {nodes}"
                    ));
                }
            }
        }
        Expect::RunsFirstWhenFreed { nodes, rival } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w
                .until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            let Seen::Running { nodes: got, .. } = &seen else {
                unreachable!()
            };
            if !matches_nodes(got, nodes) {
                return Err(format!("operator: runs on {got}, expected {nodes}"));
            }
            let r = w.observe(rival).await;
            if !matches!(r, Some(Seen::Pending { .. })) {
                return Err(format!(
                    "operator: the rival is {r:?} while the row's job runs"
                ));
            }
            let s = sim_job(name)?;
            let sr = sim_job(rival)?;
            if !(s.start.is_some_and(|t| t > s.submit) && matches_nodes(&s.nodes, nodes))
                || sr.start.is_some_and(|t| Some(t) < s.end)
            {
                return Err(format!(
                    "simulate: the row starts {:?} on {} (ends {:?}), the rival starts {:?}",
                    s.start, s.nodes, s.end, sr.start
                ));
            }
            match &test_only {
                Seen::Pending {
                    start: Some((t, n)),
                    ..
                } if *t > 0 && matches_nodes(n, nodes) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}, expected a later start on {nodes}"
                    ));
                }
            }
        }
        Expect::RunsAfterDependency { nodes } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w
                .until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            let Seen::Running { nodes: got, .. } = &seen else {
                unreachable!()
            };
            if !matches_nodes(got, nodes) {
                return Err(format!("operator: runs on {got}, expected {nodes}"));
            }
            let first = w.observe(row.background[0].name).await;
            if first != Some(Seen::Ended("COMPLETED".into())) {
                return Err(format!(
                    "operator: started while its dependency is {first:?}"
                ));
            }
            let s = sim_job(name)?;
            let b = sim_job(row.background[0].name)?;
            if !(s.start.is_some_and(|t| b.end.is_some_and(|e| t >= e))
                && matches_nodes(&s.nodes, nodes))
            {
                return Err(format!(
                    "simulate: starts {:?} on {} (dependency ends {:?})",
                    s.start, s.nodes, b.end
                ));
            }
            match &test_only {
                Seen::Running { .. } | Seen::Pending { start: Some(_), .. } => {}
                other => return Err(format!("test-only: {other:?}, expected an estimate")),
            }
        }
        Expect::Held { nodes } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w.until(name, "held", waiting).await;
            let Seen::Pending {
                reason, message, ..
            } = &seen
            else {
                unreachable!()
            };
            if reason != "JobHeldUser" {
                return Err(format!("operator: {reason}: {message}"));
            }
            tokio::time::sleep(Duration::from_millis(600)).await;
            if w.observe(name).await.as_ref() != Some(&seen) {
                return Err("operator: a held job changed".into());
            }
            let s = sim_job(name)?;
            if s.start.is_some() || s.reason != "JobHeldUser" || s.message != *message {
                return Err(format!(
                    "simulate: {s:?}; the operator: {reason}: {message}"
                ));
            }
            match &test_only {
                Seen::Running { nodes: t, .. } if matches_nodes(t, nodes) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}, expected {nodes} once released"
                    ));
                }
            }
        }
        Expect::Ends {
            shift,
            state,
            sim: sim_state,
        } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            if *shift > 0 {
                w.until(name, "running", |s| matches!(s, Seen::Running { .. }))
                    .await;
                w.shift(*shift);
            }
            w.until(name, state, |s| *s == Seen::Ended(state.to_string()))
                .await;
            let s = sim_job(name)?;
            if s.state != *sim_state {
                return Err(format!("simulate: {}, expected {sim_state}", s.state));
            }
            match (&test_only, *state) {
                (Seen::Pending { reason, .. }, "CANCELLED") if reason == "Cancelled" => {}
                (Seen::Running { .. }, s) if s != "CANCELLED" => {}
                (other, _) => return Err(format!("test-only: {other:?}")),
            }
        }
        Expect::Preempted { requeued } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            w.until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            for l in &row.later {
                w.submit(l)
                    .await
                    .map_err(|e| format!("later {}: {e}", l.name))?;
            }
            if *requeued {
                w.until(name, "requeued", |s| matches!(s, Seen::Pending { .. }))
                    .await;
                let restarts = w
                    .job(name)
                    .await
                    .and_then(|j| j.status)
                    .and_then(|s| s.restarts)
                    .unwrap_or(0);
                if restarts == 0 {
                    return Err("operator: pending again without a restart".into());
                }
            } else {
                w.until(name, "PREEMPTED", |s| *s == Seen::Ended("PREEMPTED".into()))
                    .await;
            }
            let s = sim_job(name)?;
            let ok = if *requeued {
                s.requeues > 0
            } else {
                s.state == "PREEMPTED"
            };
            if !ok {
                return Err(format!(
                    "simulate: {} after {} requeues",
                    s.state, s.requeues
                ));
            }
            if !matches!(test_only, Seen::Running { .. }) {
                return Err(format!("test-only: {test_only:?}"));
            }
        }
        Expect::Array { total, running } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let mut states = Vec::new();
                for i in 0..*total {
                    states.push(w.observe(&format!("{name}-{i}")).await);
                }
                let run = states
                    .iter()
                    .filter(|s| matches!(s, Some(Seen::Running { .. })))
                    .count();
                // What squeue shows of the indices not started: one pending record held back
                // by the throttle (`123_[2-3%2] PENDING JobArrayTaskLimit`).
                let (_, q, _) = w.muster("dana", &["squeue", "-h", "-o", "%i|%T|%r"]).await;
                let want = format!(
                    "_[{}-{}%{running}]|PENDING|JobArrayTaskLimit",
                    running,
                    total - 1
                );
                if run as u32 == *running && q.lines().any(|l| l.ends_with(&want)) {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!("operator: elements {states:?}, squeue {q:?}"));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut at_once = 0;
            for i in 0..*total {
                let s = sim_job(&format!("{name}_{i}"))?;
                if s.start == Some(s.submit) {
                    at_once += 1;
                } else if s.start.is_none() {
                    return Err(format!("simulate: element {i} never ran: {s:?}"));
                }
            }
            if at_once != *running {
                return Err(format!("simulate: {at_once} elements started together"));
            }
            if !matches!(test_only, Seen::Running { .. }) {
                return Err(format!("test-only: {test_only:?}"));
            }
        }
        Expect::Refused { field, words } => {
            let op = match submitted {
                Err(e) => e,
                Ok(()) => match w
                    .until(name, "refused", |s| matches!(s, Seen::Refused(_)))
                    .await
                {
                    Seen::Refused(m) => m,
                    _ => unreachable!(),
                },
            };
            if !op.contains(field) || !op.contains(words) {
                return Err(format!(
                    "operator: {op:?} does not name {field} and {words:?}"
                ));
            }
            match sim {
                Err(e) if e.contains(field) => {}
                other => return Err(format!("simulate: {other:?}")),
            }
            match &test_only {
                Seen::Refused(m) if m.contains(field) => {}
                other => return Err(format!("test-only: {other:?}")),
            }
        }
    }
    Ok(())
}

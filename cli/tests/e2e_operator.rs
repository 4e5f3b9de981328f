//! End to end: the commands against the test control plane of `muster-e2e` (API server double,
//! simulated nodes, scheduler stand-in and kubelet) with the real operator running in-process,
//! reached through a kubeconfig file as a user's shell would.
//!
//! The cluster: 2 leaves x 4 nodes x 8 GPUs (`gpu[001-008]`), one default partition
//! `blackwell` (the partition the howto script `torchrun_multinode.sh` asks for).

mod e2e_support;

use e2e_support::Sim;

/// sbatch -> squeue PENDING (reason Resources) -> RUNNING with a hostlist -> scancel -> sacct
/// CANCELLED. PENDING is made certain by filling the cluster first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_running_cancelled() {
    let sim = Sim::start().await;

    // A whole-cluster job: 8 nodes x 8 GPUs.
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--parsable",
            "-J",
            "filler",
            "-N",
            "8",
            "--gpus-per-node=8",
            "--wrap",
            "sleep 1000",
        ])
        .await;
    assert!(ok, "{err}");
    let filler: u64 = out.trim().parse().unwrap_or_else(|_| panic!("{out:?}"));
    sim.until_state(filler, "RUNNING").await;

    // The job under test cannot start while the filler holds every GPU. It asks for one leaf
    // switch, so it waits for two nodes under one leaf whatever order the filler's pods end in.
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "-J",
            "train",
            "-N",
            "2",
            "--gpus-per-node=8",
            "--switches=1",
            "--wrap",
            "hostname",
        ])
        .await;
    assert!(ok, "{err}");
    let id: u64 = out
        .strip_prefix("Submitted batch job ")
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(id > filler, "ids increase: {filler} then {id}");
    let reason = sim
        .until_squeue(id, "%T %r", |line| {
            line.starts_with("PENDING ") && !line.ends_with(" None")
        })
        .await;
    assert_eq!(reason, "PENDING Resources");
    // The default format shows the reason in parentheses in NODELIST(REASON).
    let (ok, out, _) = sim.run(&["squeue", "-j", &id.to_string()]).await;
    assert!(ok);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    );
    assert_eq!(
        lines[1],
        format!("{id:>18} blackwell    train     dana PD       0:00      2 (Resources)")
    );

    // Freeing the cluster lets it start on two nodes of one leaf, shown as a Slurm hostlist.
    let (ok, _, err) = sim.run(&["scancel", &filler.to_string()]).await;
    assert!(ok, "{err}");
    let running = sim
        .until_squeue(id, "%T %D %N", |line| line.starts_with("RUNNING "))
        .await;
    let nodelist = running
        .strip_prefix("RUNNING 2 ")
        .unwrap_or_else(|| panic!("{running:?}"))
        .to_string();
    let nodelist = nodelist.as_str();
    let (ok, out, _) = sim.run(&["scontrol", "show", "hostnames", nodelist]).await;
    assert!(ok);
    let names: Vec<&str> = out.lines().collect();
    let leaf = |n: &str| (n[3..].parse::<u32>().unwrap() - 1) / 4;
    assert!(
        names.len() == 2 && names[0] != names[1] && leaf(names[0]) == leaf(names[1]),
        "two nodes of one leaf: {nodelist} = {names:?}"
    );
    assert_eq!(
        nodelist,
        muster_crds::slurm::hostlist::compress(&names),
        "the node list is a compressed Slurm hostlist"
    );
    assert!(
        nodelist.starts_with("gpu[") && nodelist.ends_with(']'),
        "{nodelist}"
    );

    // The filler is recorded as cancelled; cancel the job under test too.
    let (ok, _, err) = sim.run(&["scancel", &id.to_string()]).await;
    assert!(ok, "{err}");
    let ids = format!("{filler},{id}");
    let acct = sim
        .until_sacct(&ids, "JobID,JobName,State,NNodes,NodeList", |out| {
            out.lines().skip(1).all(|l| l.contains("|CANCELLED|"))
        })
        .await;
    assert_eq!(
        acct,
        format!(
            "JobID|JobName|State|NNodes|NodeList\n\
             {filler}|filler|CANCELLED|8|gpu[001-008]\n\
             {id}|train|CANCELLED|2|{nodelist}\n"
        )
    );
    // Cancelled jobs leave the queue.
    let (ok, out, _) = sim.run(&["squeue", "-h", "-o", "%i"]).await;
    assert!(ok);
    assert_eq!(out, "");
    // And a second scancel says what Slurm says.
    let (ok, _, err) = sim.run(&["scancel", &id.to_string()]).await;
    assert!(!ok);
    assert_eq!(
        err,
        format!(
            "scancel: error: Kill job error on job id {id}: Job/step already completing or completed\n"
        )
    );
    sim.stop().await;
}

/// A real batch script (`torchrun_multinode.sh` from the howto set: 8 nodes x 8 GPUs,
/// exclusive, partition blackwell) runs, and COMPLETED once every rank's pod exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn howto_script_runs_to_completion() {
    let sim = Sim::start().await;
    let script = e2e_support::howto("torchrun_multinode.sh");
    let (ok, out, err) = sim
        .run(&["sbatch", "--parsable", script.to_str().unwrap()])
        .await;
    assert!(ok, "{err}");
    let id: u64 = out.trim().parse().unwrap_or_else(|_| panic!("{out:?}"));
    let line = sim
        .until_squeue(id, "%j %P %T %D %C %b %N", |l| l.contains(" RUNNING "))
        .await;
    // 8 nodes x 1 task x 96 CPUs, but --exclusive holds every CPU of its 8 nodes (224 each),
    // and %C shows what is held, as Slurm's AllocCPUS; 8 GPUs per node (Slurm 22.05 spells
    // it gres:gpu:8).
    assert_eq!(
        line,
        "train blackwell RUNNING 8 1792 gres:gpu:8 gpu[001-008]"
    );

    // One pod per node; the script runs on the first (the batch host), and its exit 0 is the
    // job's: the operator then stops the other nodes' pods, whose daemons only wait for steps.
    let pods = sim.pods_of(id).await;
    assert_eq!(pods.len(), 8, "{pods:?}");
    sim.finish(&pods[0], 0).await;
    let acct = sim
        .until_sacct(
            &id.to_string(),
            "JobID,JobName,State,ExitCode,NNodes,NodeList",
            |out| out.contains("|COMPLETED|"),
        )
        .await;
    assert_eq!(
        acct,
        format!(
            "JobID|JobName|State|ExitCode|NNodes|NodeList\n{id}|train|COMPLETED|0:0|8|gpu[001-008]\n"
        )
    );
    sim.until_stopped(&pods[1..]).await;
    sim.stop().await;
}

/// `sbatch --wait` returns when the job ends, with its exit code (as Slurm's does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sbatch_wait_exits_with_the_jobs_exit_code() {
    let sim = Sim::start().await;
    let submit = sim.run_code(
        &[
            "sbatch", "--wait", "-J", "waiter", "-N", "2", "--wrap", "exit 3",
        ],
        b"",
    );
    let finish = async {
        let deadline = tokio::time::Instant::now() + e2e_support::WAIT;
        loop {
            let pods = sim
                .pods_where(|j| j.spec.job_name.as_deref() == Some("waiter"))
                .await
                .unwrap_or_default();
            if pods.len() == 2 {
                // The batch host (rank 0's node pod) fails with 3: its exit is the job's, as
                // in Slurm; the other node's pod succeeds.
                sim.finish(&pods[1], 0).await;
                sim.finish(&pods[0], 3).await;
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "the job never ran");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    let ((code, out, err), ()) = tokio::join!(submit, finish);
    assert_eq!(code, std::process::ExitCode::from(3), "{out}{err}");
    let id = out
        .strip_prefix("Submitted batch job ")
        .unwrap_or_else(|| panic!("{out:?}"))
        .trim()
        .to_string();
    let (ok, out, _) = sim
        .run(&["sacct", "-P", "-n", "-j", &id, "-o", "State,ExitCode"])
        .await;
    assert!(ok);
    assert_eq!(out, "FAILED|3:0\n");

    // A job that completes: exit status 0.
    let submit = sim.run_code(&["sbatch", "--wait", "-J", "ok", "--wrap", "true"], b"");
    let finish = async {
        loop {
            let pods = sim
                .pods_where(|j| j.spec.job_name.as_deref() == Some("ok"))
                .await
                .unwrap_or_default();
            if let Some(p) = pods.first() {
                sim.finish(p, 0).await;
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    let ((code, _, err), ()) = tokio::join!(submit, finish);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{err}");
    sim.stop().await;
}

/// The sandbox's advice works: `--export` gives the (simulated) tasks a run time, after which
/// they exit 0 and the job completes on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_run_time_ends_the_job() {
    let sim = Sim::start().await;
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--parsable",
            "-N",
            "2",
            "--ntasks-per-node=2",
            "--gpus-per-task=1",
            &format!("--export=ALL,{}=1", muster_e2e::kubelet::ENV_RUN_SECONDS),
            "--wrap",
            "mpirun hostname",
        ])
        .await;
    assert!(ok, "{err}");
    let id = out.trim().to_string();
    let done = sim
        .until_sacct(&id, "JobID,State,ExitCode,NNodes", |o| {
            o.contains("COMPLETED")
        })
        .await;
    assert_eq!(
        done,
        format!("JobID|State|ExitCode|NNodes\n{id}|COMPLETED|0:0|2\n")
    );
    sim.stop().await;
}

/// sacct's fields, window and filters over what the operator recorded of an ended job: its
/// derived exit code, limit in minutes, CPU time (CPUs times the time held), directory;
/// `-S now-1hour` keeps it and `-E now-1hour` does not; `-A` keeps its account's jobs alone;
/// `--delimiter` separates the fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sacct_reports_an_ended_job_as_slurm_names_it() {
    use muster_e2e::kubelet::{ENV_EXIT_CODE, ENV_RUN_SECONDS};
    let sim = Sim::start().await;
    let export = format!("--export=ALL,{ENV_RUN_SECONDS}=2,{ENV_EXIT_CODE}=3");
    let id = sbatch(
        &sim,
        vec![
            "-n",
            "2",
            "-t",
            "10",
            "--chdir=/tmp",
            &export,
            "--wrap",
            "exit 3",
        ],
    )
    .await
    .to_string();
    sim.until_sacct(&id, "State", |o| o.contains("FAILED"))
        .await;
    let sacct = |extra: &[&str]| {
        let mut a = vec!["sacct", "-n", "-P", "--delimiter=,", "-j", &id];
        a.extend_from_slice(extra);
        a.extend([
            "-o",
            "JobID,DerivedExitCode,TimelimitRaw,WorkDir,AllocCPUS,ElapsedRaw,CPUTimeRAW",
        ]);
        let s = &sim;
        let a: Vec<String> = a.iter().map(|x| x.to_string()).collect();
        async move {
            let refs: Vec<&str> = a.iter().map(String::as_str).collect();
            let (ok, out, err) = s.run(&refs).await;
            assert!(ok, "{err}");
            out
        }
    };
    let out = sacct(&["-S", "now-1hour", "-A", "default"]).await;
    let cells: Vec<&str> = out.trim_end().split(',').collect();
    assert_eq!(cells[..5], [id.as_str(), "3:0", "10", "/tmp", "2"], "{out}");
    let (cpus, elapsed, cpu_time): (i64, i64, i64) = (
        cells[4].parse().unwrap(),
        cells[5].parse().unwrap(),
        cells[6].parse().unwrap(),
    );
    assert!(elapsed >= 2, "{out}");
    assert_eq!(cpu_time, cpus * elapsed, "{out}");
    assert_eq!(sacct(&["-E", "now-1hour"]).await, "");
    assert_eq!(sacct(&["-A", "someone-else"]).await, "");
    sim.stop().await;
}

/// `sbatch --parsable ARGS`, which must succeed; the job's id.
async fn sbatch(sim: &Sim, args: Vec<&str>) -> u64 {
    let mut all = vec!["sbatch", "--parsable"];
    all.extend(args);
    let (ok, out, err) = sim.run(&all).await;
    assert!(ok, "{err}");
    out.trim()
        .parse::<u64>()
        .unwrap_or_else(|_| panic!("{out:?}"))
}

/// Polls `scontrol show job ID` until its `Message=` line contains `needle`; returns the line.
async fn until_message(sim: &Sim, id: u64, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + e2e_support::WAIT;
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        let (ok, out, err) = sim.run(&["scontrol", "show", "job", &id.to_string()]).await;
        assert!(ok, "{err}");
        last = out;
        let line = last
            .find("Message=")
            .map(|i| last[i..].lines().next().unwrap_or_default());
        if let Some(line) = line
            && line.contains(needle)
        {
            return line.to_string();
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("job {id}: no message with {needle:?}: {last}");
}

/// A gang that waits for one leaf switch while a node is idle on each leaf says so, and for
/// how long, in `scontrol show job`: with `--switches=1@1:00:00`, and with Muster's own
/// preference for one leaf (no `--switches`, a job queued behind it, the leaves free within
/// the 8 h topology wait). Otherwise the idle nodes would look like a scheduler fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waiting_for_one_leaf_says_why_idle_nodes_stay_idle() {
    let sim = Sim::start().await;
    let submit = |args: Vec<&'static str>| sbatch(&sim, args);
    // Two 3-node fillers, each on its own leaf (4 nodes a leaf): one node idle on each.
    for name in ["left", "right"] {
        let id = submit(vec![
            "-J",
            name,
            "-N",
            "3",
            "--gpus-per-node=8",
            "--time=1:00:00",
            "--wrap",
            "sleep 1000",
        ])
        .await;
        sim.until_state(id, "RUNNING").await;
    }
    let (ok, idle, err) = sim.run(&["sinfo", "-h", "-t", "idle", "-o", "%D %N"]).await;
    assert!(ok, "{err}");
    assert_eq!(idle.trim(), "2 gpu[004,008]");

    // The user's own preference.
    let switches = submit(vec![
        "-J",
        "switches",
        "-N",
        "2",
        "--gpus-per-node=8",
        "--switches=1@1:00:00",
        "--time=10:00",
        "--wrap",
        "hostname",
    ])
    .await;
    let line = until_message(&sim, switches, "leaf switch").await;
    assert!(
        line.starts_with(
            "Message=waiting for 2 node(s) with 8 GPU(s) each; it waits for at most 1 leaf \
             switch(es) (--switches) up to "
        ) && line.ends_with(" more: on more leaves it could start now"),
        "{line}"
    );
    let (ok, _, err) = sim.run(&["scancel", &switches.to_string()]).await;
    assert!(ok, "{err}");

    // Muster's preference: a 4-node job (lower priority: longer limit, niced) queues behind.
    let behind = submit(vec![
        "-J",
        "behind",
        "-N",
        "4",
        "--gpus-per-node=8",
        "--time=1:00:00",
        "--nice=1000",
        "--wrap",
        "hostname",
    ])
    .await;
    let gang = submit(vec![
        "-J",
        "gang",
        "-N",
        "2",
        "--gpus-per-node=8",
        "--time=10:00",
        "--wrap",
        "hostname",
    ])
    .await;
    let line = until_message(&sim, gang, "leaf switch").await;
    assert_eq!(
        line,
        "Message=waiting for 2 node(s) with 8 GPU(s) each; it waits for one leaf switch: spread \
         over leaves it could start now, and a gang waits up to 8:00:00 longer for one leaf"
    );
    let (ok, reason, err) = sim
        .run(&["squeue", "-h", "-j", &gang.to_string(), "-o", "%T %r"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(reason.trim(), "PENDING Resources");
    let (ok, still, err) = sim.run(&["sinfo", "-h", "-t", "idle", "-o", "%D %N"]).await;
    assert!(ok, "{err}");
    assert_eq!(still, idle, "the idle nodes stay idle while the gang waits");
    let (ok, _, err) = sim
        .run(&["scancel", &gang.to_string(), &behind.to_string()])
        .await;
    assert!(ok, "{err}");
    sim.stop().await;
}

/// The short-limit credit puts shorter jobs first, but not past the job that would end last:
/// a week-long job, queued before a one-hour job while every running job ends within two
/// hours, takes the first node that frees (`priority::ends_last`); by its limit alone the
/// one-hour job would pass it, and longest jobs were passed for days under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_that_would_end_last_is_not_passed_for_its_long_limit() {
    let sim = Sim::start().await;
    let submit = |mut args: Vec<&'static str>| {
        args.insert(0, "--gpus-per-node=8");
        sbatch(&sim, args)
    };
    // Every node busy: 7 nodes for up to 2 h, one for up to 10 minutes.
    let seven = submit(vec!["-N", "7", "--time=2:00:00", "--wrap", "sleep 1000"]).await;
    let one = submit(vec!["-N", "1", "--time=10:00", "--wrap", "sleep 1000"]).await;
    sim.until_state(seven, "RUNNING").await;
    sim.until_state(one, "RUNNING").await;
    let week = submit(vec![
        "-J",
        "week",
        "-N",
        "1",
        "--time=7-00:00:00",
        "--wrap",
        "hostname",
    ])
    .await;
    let hour = submit(vec![
        "-J",
        "hour",
        "-N",
        "1",
        "--time=1:00:00",
        "--wrap",
        "hostname",
    ])
    .await;
    sim.until_state(week, "PENDING").await;
    sim.until_state(hour, "PENDING").await;
    // The user frees a node.
    let (ok, _, err) = sim.run(&["scancel", &one.to_string()]).await;
    assert!(ok, "{err}");
    sim.until_state(week, "RUNNING").await;
    let (ok, out, err) = sim
        .run(&[
            "squeue",
            "-h",
            "-j",
            &format!("{week},{hour}"),
            "-o",
            "%j %T",
        ])
        .await;
    assert!(ok, "{err}");
    let mut lines: Vec<&str> = out.lines().map(str::trim).collect();
    lines.sort_unstable();
    assert_eq!(lines, ["hour PENDING", "week RUNNING"]);
    let (ok, _, err) = sim
        .run(&[
            "scancel",
            &seven.to_string(),
            &week.to_string(),
            &hour.to_string(),
        ])
        .await;
    assert!(ok, "{err}");
    sim.stop().await;
}

/// A job pinned to a busy node (`sbatch -w`) waits; jobs of the same shape submitted after
/// it, with no time limit or with one, start at once on the idle nodes. (The scheduler once
/// remembered the pinned job's failed try for every job of its shape, so later jobs without
/// a node list stayed PENDING with reason Priority beside idle nodes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pinned_to_a_busy_node_does_not_hold_back_the_queue() {
    let sim = Sim::start().await;
    let busy = sbatch(
        &sim,
        vec![
            "--exclusive",
            "-N",
            "2",
            "-w",
            "gpu[003-004]",
            "--time=1-00:00:00",
            "--wrap",
            "sleep 1000",
        ],
    )
    .await;
    sim.until_state(busy, "RUNNING").await;
    let pinned = sbatch(&sim, vec!["-w", "gpu003", "--wrap", "hostname"]).await;
    let unlimited = sbatch(&sim, vec!["--wrap", "hostname"]).await;
    let limited = sbatch(&sim, vec!["--time=10:00", "--wrap", "hostname"]).await;
    sim.until_state(unlimited, "RUNNING").await;
    sim.until_state(limited, "RUNNING").await;
    let (ok, out, err) = sim
        .run(&["squeue", "-h", "-j", &pinned.to_string(), "-o", "%T %r"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "PENDING Resources");
    let (ok, out, err) = sim.run(&["squeue", "-h", "-t", "R", "-o", "%i %N"]).await;
    assert!(ok, "{err}");
    for line in out.lines() {
        let (id, nodes) = line.trim().split_once(' ').unwrap();
        if id != busy.to_string() {
            assert!(!nodes.contains("003") && !nodes.contains("004"), "{out}");
        }
    }
    sim.stop().await;
}

/// `scontrol update` as a Slurm user runs it: a held job's limit, node count and name
/// change and it runs with them once released; a running job's node count is refused with
/// the fields named (its pods were built from it) while its nice value changes; an array's
/// throttle lets one more element run; an unknown key is named with the keys that work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scontrol_update_changes_a_pending_job_and_refuses_what_a_started_one_cannot_take() {
    let sim = Sim::start().await;
    let held = sbatch(
        &sim,
        vec![
            "-H",
            "-N",
            "1",
            "--gpus-per-node=8",
            "--time=10",
            "--wrap",
            "sleep 1000",
        ],
    )
    .await;
    let id = held.to_string();
    let jobid = format!("JobId={id}");
    let (ok, _, err) = sim
        .run(&[
            "scontrol",
            "update",
            &jobid,
            "TimeLimit=30",
            "NumNodes=2",
            "JobName=renamed",
        ])
        .await;
    assert!(ok, "{err}");
    // The operator reads the new generation and shows its limit.
    let wants = ["JobName=renamed", "TimeLimit=00:30:00", "JobState=PENDING"];
    sim.until_output(&["scontrol", "show", "job", &id], |out| {
        wants.iter().all(|w| out.contains(w))
    })
    .await;
    let (ok, _, err) = sim.run(&["scontrol", "release", &id]).await;
    assert!(ok, "{err}");
    sim.until_state(held, "RUNNING").await;
    let (ok, out, err) = sim
        .run(&["squeue", "-h", "-j", &id, "-o", "%j %D %l"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "renamed 2 30:00");

    // Started: the request is fixed, nice is not.
    let (ok, _, err) = sim.run(&["scontrol", "update", &jobid, "NumNodes=1"]).await;
    assert!(!ok);
    assert!(
        err.starts_with(&format!(
            "scontrol: error: job {id}: spec.nodes cannot change once a job has left PENDING: \
             the job is RUNNING"
        )),
        "{err}"
    );
    let (ok, _, err) = sim.run(&["scontrol", "update", &jobid, "Nice=5"]).await;
    assert!(ok, "{err}");
    // Its limit may be lowered (the operator applies it), not raised.
    let (ok, _, err) = sim
        .run(&["scontrol", "update", &jobid, "TimeLimit=20"])
        .await;
    assert!(ok, "{err}");
    sim.until_squeue(held, "%l", |l| l == "20:00").await;
    let (ok, _, err) = sim
        .run(&["scontrol", "update", &jobid, "TimeLimit=1:00:00"])
        .await;
    assert!(!ok);
    assert!(err.contains("spec.time cannot change once"), "{err}");
    let (ok, out, _) = sim.run(&["scontrol", "show", "job", &id]).await;
    assert!(ok && out.contains("Nice=5"), "{out}");

    // An array of long elements, one at a time, then two.
    let array = sbatch(
        &sim,
        vec!["--array=0-3%1", "--gpus-per-node=1", "--wrap", "sleep 1000"],
    )
    .await;
    let running = |out: &str| out.lines().filter(|l| l.trim().ends_with(" R")).count();
    let squeue = ["squeue", "-h", "-o", "%i %t"];
    let out = sim
        .until_output(&squeue, |out| out.contains(&format!("{array}_0 R")))
        .await;
    assert_eq!(running(&out), 2, "{out}");
    let (ok, _, err) = sim
        .run(&[
            "scontrol",
            "update",
            &format!("JobId={array}"),
            "ArrayTaskThrottle=2",
        ])
        .await;
    assert!(ok, "{err}");
    let out = sim.until_output(&squeue, |out| running(out) == 3).await;
    assert!(out.contains(&format!("{array}_1 R")), "{out}");

    let (ok, _, err) = sim.run(&["scontrol", "update", &jobid, "Comment=x"]).await;
    assert!(!ok);
    assert!(
        err.starts_with("scontrol: error: Update of this parameter is not supported: Comment (Muster updates TimeLimit,"),
        "{err}"
    );
    sim.stop().await;
}

/// A job cancelled while pending starts and ends when it is cancelled, as Slurm records it:
/// its start time had been the scheduler's estimate (after the cancel), and squeue showed
/// its time as INVALID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cancelled_while_pending_shows_no_time() {
    let sim = Sim::start().await;
    let filler = sbatch(
        &sim,
        vec![
            "-N",
            "8",
            "--gpus-per-node=8",
            "--time=1:00:00",
            "--wrap",
            "sleep 1000",
        ],
    )
    .await;
    sim.until_state(filler, "RUNNING").await;
    let waiting = sbatch(&sim, vec!["--gpus=1", "--time=10", "--wrap", "hostname"]).await;
    let id = waiting.to_string();
    // It has an estimate: the filler's end.
    sim.until_output(&["squeue", "-h", "-j", &id, "-o", "%T %S"], |l| {
        l.starts_with("PENDING 20")
    })
    .await;
    let (ok, _, err) = sim.run(&["scancel", &id]).await;
    assert!(ok, "{err}");
    let line = sim
        .until_output(
            &["squeue", "-h", "-t", "all", "-j", &id, "-o", "%T %M"],
            |l| l.starts_with("CANCELLED"),
        )
        .await;
    assert_eq!(line, "CANCELLED 0:00");
    let (ok, out, err) = sim.run(&["scontrol", "show", "job", &id]).await;
    assert!(ok, "{err}");
    let field = |k: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k} in {out}"))
            .to_string()
    };
    assert_eq!(field("StartTime="), field("EndTime="), "{out}");
    // Never allocated: sacct counts none of its CPUs or nodes.
    let acct = sim
        .until_sacct(&id, "State,AllocCPUS,AllocNodes", |o| {
            o.contains("CANCELLED")
        })
        .await;
    assert_eq!(acct, "State|AllocCPUS|AllocNodes\nCANCELLED|0|0\n");
    sim.stop().await;
}

/// Priorities as Slurm guards them: a user's `--priority` or negative `--nice` is refused
/// naming the field and who may; an administrator's `scontrol update Priority=` puts a later
/// job first, and the user may lower that priority but not raise it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_administrator_raises_a_priority_and_it_orders_the_queue() {
    let sim = Sim::start().await;
    let whole = ["-N", "8", "--gpus-per-node=8", "--wrap", "sleep 1000"];
    let filler = sbatch(&sim, whole.to_vec()).await;
    sim.until_state(filler, "RUNNING").await;

    let (ok, _, err) = sim
        .run(&["sbatch", "--priority=100", "--wrap", "hostname"])
        .await;
    assert!(!ok);
    assert!(
        err.starts_with(
            "sbatch: error: Batch job submission failed: Access/permission denied \
             (spec.priority (--priority) 100 would replace the computed priority; only \
             administrators (group system:masters) may set, raise or clear it"
        ),
        "{err}"
    );
    let (ok, _, err) = sim
        .run(&["sbatch", "--nice=-5", "--wrap", "hostname"])
        .await;
    assert!(!ok);
    assert!(
        err.contains(
            "Access/permission denied (spec.nice (--nice) -5 raises the job's priority; only \
             administrators"
        ),
        "{err}"
    );

    // Two whole-cluster jobs wait behind the filler: the first submitted would start first.
    let first = sbatch(&sim, whole.to_vec()).await;
    let second = sbatch(&sim, whole.to_vec()).await;
    let (id1, id2) = (format!("JobId={first}"), format!("JobId={second}"));
    let (ok, _, err) = sim.run(&["scontrol", "update", &id1, "Nice=-1"]).await;
    assert!(!ok && err.contains("only administrators"), "{err}");
    let top = ["scontrol", "update", &id2, "Priority=4000000000"];
    let (ok, _, err) = sim.run(&top).await;
    assert!(!ok && err.contains("only administrators"), "{err}");
    let (ok, _, err) = sim.run_admin(&top).await;
    assert!(ok, "{err}");
    // squeue shows the priority (%Q) and lists waiting jobs highest first, as Slurm's P,t,-p.
    let pending = ["squeue", "-h", "-t", "PD", "-o", "%i %Q"];
    let out = sim
        .until_output(&pending, |o| {
            o.starts_with(&format!("{second} 4000000000\n"))
        })
        .await;
    let computed: u32 = out
        .lines()
        .nth(1)
        .and_then(|l| l.strip_prefix(&format!("{first} ")))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(computed < 4_000_000_000, "{out}");
    // The user lowers what the administrator set, and cannot raise it back.
    let (ok, _, err) = sim
        .run(&["scontrol", "update", &id2, "Priority=3000000000"])
        .await;
    assert!(ok, "{err}");
    let (ok, _, err) = sim
        .run(&["scontrol", "update", &id2, "Priority=3000000001"])
        .await;
    assert!(!ok);
    assert!(
        err.contains("3000000001 would raise the job's priority from 3000000000"),
        "{err}"
    );
    sim.until_output(&["scontrol", "show", "job", &second.to_string()], |o| {
        o.contains("Priority=3000000000 Nice=0")
    })
    .await;

    let (ok, _, err) = sim.run(&["scancel", &filler.to_string()]).await;
    assert!(ok, "{err}");
    sim.until_state(second, "RUNNING").await;
    let (ok, out, err) = sim
        .run(&["squeue", "-h", "-j", &first.to_string(), "-o", "%T"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "PENDING");
    sim.stop().await;
}

/// The other `scontrol update` keys reach what the user sees once a held job is released:
/// its partition, excluded and required nodes, GPUs per node, tasks, account, memory and
/// requeue flag; its features (a leaf's label); a dependency cleared; a begin time set and
/// brought forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scontrol_update_keys_reach_the_job_they_change() {
    let sim = Sim::start().await;
    let p: muster_crds::v1alpha1::Partition = serde_json::from_value(serde_json::json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "hopper"},
        "spec": {"defaultImage": "busybox:1.36",
                 "topology": ["muster.dev/leaf", "kubernetes.io/hostname"]}}))
    .unwrap();
    kube::Api::<muster_crds::v1alpha1::Partition>::all(sim.cluster.client())
        .create(&Default::default(), &p)
        .await
        .unwrap();
    let update = |id: u64, kvs: &[&str]| {
        let mut a = vec![
            "scontrol".to_string(),
            "update".into(),
            format!("JobId={id}"),
        ];
        a.extend(kvs.iter().map(|s| s.to_string()));
        a
    };
    let s = &sim;
    let run = |a: Vec<String>| async move {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let (ok, _, err) = s.run(&refs).await;
        assert!(ok, "{a:?}: {err}");
    };
    let held = |extra: &[&'static str]| {
        let mut a = vec!["-H"];
        a.extend_from_slice(extra);
        a.extend(["--wrap", "sleep 1000"]);
        a
    };

    let one = sbatch(&sim, held(&["--gres=gpu:1"])).await;
    run(update(
        one,
        &[
            "Partition=hopper",
            "ExcNodeList=gpu[001-007]",
            "Gres=gpu:2",
            "NumTasks=2",
            "Account=research",
            "MinMemoryNode=10G",
            "Requeue=0",
        ],
    ))
    .await;
    let two = sbatch(&sim, held(&[])).await;
    run(update(two, &["ReqNodeList=gpu005"])).await;
    for id in [one, two] {
        run(vec!["scontrol".into(), "release".into(), id.to_string()]).await;
        sim.until_state(id, "RUNNING").await;
    }
    let (ok, out, err) = sim
        .run(&[
            "squeue",
            "-h",
            "-j",
            &format!("{one},{two}"),
            "-o",
            "%i %P %N %a",
        ])
        .await;
    assert!(ok, "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            format!("{one} hopper gpu008 research"),
            format!("{two} blackwell gpu005 default")
        ]
    );
    let (ok, out, err) = sim
        .run(&["scontrol", "show", "job", &one.to_string()])
        .await;
    assert!(ok, "{err}");
    for want in [
        "Requeue=0",
        "NumTasks=2",
        "gres/gpu=2",
        "MinMemoryNode=10G",
        "TresPerNode=gres:gpu:2",
    ] {
        assert!(out.contains(want), "{want} in {out}");
    }

    // Features: with leaf 2 partly used, a whole node asked of leaf 1 is on leaf 1.
    let three = sbatch(&sim, held(&["--gpus-per-node=8"])).await;
    run(update(three, &["Features=leaf1"])).await;
    run(vec!["scontrol".into(), "release".into(), three.to_string()]).await;
    let line = sim
        .until_squeue(three, "%T %N", |l| l.starts_with("RUNNING "))
        .await;
    let node: u32 = line.trim_start_matches("RUNNING gpu").parse().unwrap();
    assert!((1..=4).contains(&node), "{line}");

    // A dependency on a job that runs on, then none.
    let after = format!("--dependency=afterok:{one}");
    let dep = sbatch(&sim, vec![&after, "--wrap", "hostname"]).await;
    sim.until_squeue(dep, "%T %r", |l| l == "PENDING Dependency")
        .await;
    run(update(dep, &["Dependency="])).await;
    sim.until_state(dep, "RUNNING").await;

    // A begin time an hour away, then now.
    let later = sbatch(&sim, held(&[])).await;
    run(update(later, &["StartTime=now+1hours"])).await;
    run(vec!["scontrol".into(), "release".into(), later.to_string()]).await;
    sim.until_squeue(later, "%T %r", |l| l == "PENDING BeginTime")
        .await;
    run(update(later, &["StartTime=now"])).await;
    sim.until_state(later, "RUNNING").await;

    // A time limit moved by +/- as Slurm's scontrol does (-1 is a minute less), and a
    // decrement past it refused with Slurm's words; a running job takes the lower one.
    let timed = sbatch(&sim, held(&["-t", "30"])).await;
    run(update(timed, &["TimeLimit=-10"])).await;
    run(update(timed, &["TimeLimit=-1"])).await;
    run(update(timed, &["TimeLimit=+1-0"])).await;
    sim.until_squeue(timed, "%l", |l| l == "1-00:19:00").await;
    run(vec!["scontrol".into(), "release".into(), timed.to_string()]).await;
    sim.until_state(timed, "RUNNING").await;
    run(update(timed, &["TimeLimit=-1-0"])).await;
    sim.until_squeue(timed, "%l", |l| l == "19:00").await;
    let (ok, _, err) = sim
        .run(&[
            "scontrol",
            "update",
            &format!("JobId={timed}"),
            "TimeLimit=-100",
        ])
        .await;
    assert!(!ok);
    assert_eq!(
        err,
        format!(
            "scontrol: error: job {timed}: TimeLimit decrement larger than current time limit (100 > 19)\n"
        )
    );
    sim.stop().await;
}

/// `scontrol requeue` as Slurm's: a running job stops and runs again under its id as a new
/// attempt (new pods, `Restarts=1`); a failed one runs again, held by `requeuehold` until
/// released; a cancelled one runs again; a pending job and a `--no-requeue` one refuse with
/// Slurm's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scontrol_requeue_runs_a_job_again_under_its_id() {
    let sim = Sim::start().await;
    let job = sbatch(&sim, vec!["--gpus-per-node=8", "--wrap", "sleep 1000"]).await;
    let id = job.to_string();
    let first: Vec<String> = sim
        .until_pods_running(job)
        .await
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    let (ok, _, err) = sim.run(&["scontrol", "requeue", &id]).await;
    assert!(ok, "{err}");
    sim.until_output(&["scontrol", "show", "job", &id], |o| {
        o.contains("JobState=RUNNING") && o.contains("Restarts=1")
    })
    .await;
    sim.until_stopped(&first).await;
    let second: Vec<String> = sim
        .until_pods_running(job)
        .await
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert!(
        second.iter().all(|p| !first.contains(p)),
        "{first:?} {second:?}"
    );

    // Failed, then requeued and held, then released.
    sim.finish(&second[0], 3).await;
    sim.until_state(job, "FAILED").await;
    let (ok, _, err) = sim.run(&["scontrol", "requeuehold", &id]).await;
    assert!(ok, "{err}");
    sim.until_squeue(job, "%T %r", |l| l == "PENDING JobHeldUser")
        .await;
    let (ok, _, err) = sim.run(&["scontrol", "release", &id]).await;
    assert!(ok, "{err}");
    sim.until_state(job, "RUNNING").await;

    // Cancelled, then requeued.
    let (ok, _, err) = sim.run(&["scancel", &id]).await;
    assert!(ok, "{err}");
    sim.until_sacct(&id, "State", |o| o.contains("CANCELLED"))
        .await;
    let (ok, _, err) = sim.run(&["scontrol", "requeue", &id]).await;
    assert!(ok, "{err}");
    sim.until_output(&["scontrol", "show", "job", &id], |o| {
        o.contains("JobState=RUNNING") && o.contains("Restarts=3")
    })
    .await;

    // A pending job and a --no-requeue one cannot be requeued.
    let held = sbatch(&sim, vec!["-H", "--wrap", "hostname"]).await;
    let (ok, _, err) = sim.run(&["scontrol", "requeue", &held.to_string()]).await;
    assert!(!ok);
    assert_eq!(
        err,
        format!(
            "scontrol: error: job {held}: Job is pending execution: only a running or ended job \
             can be requeued\n"
        )
    );
    let never = sbatch(&sim, vec!["--no-requeue", "--wrap", "sleep 1000"]).await;
    sim.until_state(never, "RUNNING").await;
    let (ok, _, err) = sim.run(&["scontrol", "requeue", &never.to_string()]).await;
    assert!(!ok);
    assert!(
        err.starts_with(&format!(
            "scontrol: error: job {never}: Requested operation is presently disabled"
        )),
        "{err}"
    );
    sim.stop().await;
}

/// Array task ranges as Slurm's commands take them: `scancel ID_[4-5]` takes two tasks not
/// started yet out of the array; `scancel ID_[0-1]` cancels two running elements, so the next
/// two start, and `squeue -j ID_[2,3]` lists just them; a malformed range is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn array_task_ranges_select_elements() {
    let sim = Sim::start().await;
    let a = sbatch(
        &sim,
        vec!["--array=0-5%2", "--gpus-per-node=1", "--wrap", "sleep 1000"],
    )
    .await;
    sim.until_output(&["squeue", "-h", "-t", "R", "-o", "%i"], |o| {
        o.lines().count() == 2
    })
    .await;
    let (ok, _, err) = sim.run(&["scancel", &format!("{a}_[4-5]")]).await;
    assert!(ok, "{err}");
    sim.until_output(&["squeue", "-h", "-t", "PD", "-o", "%i"], |o| {
        o == format!("{a}_[2-3%2]")
    })
    .await;
    let (ok, _, err) = sim.run(&["scancel", &format!("{a}_[0-1]")]).await;
    assert!(ok, "{err}");
    let two = format!("{a}_[2,3]");
    let out = sim
        .until_output(&["squeue", "-h", "-j", &two, "-t", "R", "-o", "%i"], |o| {
            o.lines().count() == 2
        })
        .await;
    let mut got: Vec<&str> = out.lines().map(str::trim).collect();
    got.sort_unstable();
    assert_eq!(got, [format!("{a}_2"), format!("{a}_3")]);
    let (ok, out, _) = sim
        .run(&[
            "squeue",
            "-h",
            "-t",
            "all",
            "-j",
            &format!("{a}_[0-1]"),
            "-o",
            "%i %T",
        ])
        .await;
    assert!(ok);
    let mut got: Vec<&str> = out.lines().map(str::trim).collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [format!("{a}_0 CANCELLED"), format!("{a}_1 CANCELLED")]
    );
    // Tasks 4 and 5 never run: nothing of the array waits.
    let (ok, out, _) = sim.run(&["squeue", "-h", "-t", "PD", "-o", "%i"]).await;
    assert!(ok);
    assert_eq!(out, "");
    let (ok, _, err) = sim.run(&["scancel", &format!("{a}_[2-3")]).await;
    assert!(!ok);
    assert_eq!(
        err,
        format!("scancel: error: Kill job error on job id {a}_[2-3: Invalid job id specified\n")
    );
    sim.stop().await;
}

/// An array's waiting tasks say what they wait for as Slurm's squeue does (checked against
/// Slurm 22.05): behind a job holding every node, the array waits for resources, and no task
/// says `JobArrayTaskLimit` until `%N` of them run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arrays_waiting_tasks_wait_for_the_throttle_only_while_it_is_full() {
    let sim = Sim::start().await;
    let all = sbatch(&sim, vec!["-N", "8", "--exclusive", "--wrap", "sleep 1000"]).await;
    sim.until_state(all, "RUNNING").await;
    let a = sbatch(
        &sim,
        vec!["--array=0-3%2", "--gpus-per-node=1", "--wrap", "sleep 1000"],
    )
    .await;
    let folded = ["squeue", "-h", "-t", "PD", "-o", "%i %r"];
    sim.until_output(&folded, |o| o == format!("{a}_[0-3%2] Resources"))
        .await;
    let (ok, out, _) = sim
        .run(&["squeue", "-h", "-r", "-t", "PD", "-o", "%i %r"])
        .await;
    assert!(ok);
    // Created elements are jobs of their own: the second waits behind the first (Priority).
    let mut got: Vec<&str> = out.lines().collect();
    got.sort_unstable();
    let want: Vec<String> = ["Resources", "Priority", "Resources", "Resources"]
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{a}_{i} {r}"))
        .collect();
    assert_eq!(got, want);
    let (ok, _, err) = sim.run(&["scancel", &all.to_string()]).await;
    assert!(ok, "{err}");
    sim.until_output(&folded, |o| o == format!("{a}_[2-3%2] JobArrayTaskLimit"))
        .await;
    sim.stop().await;
}

/// `scontrol -d show job` (the flag before or after `show`) names each node's GPUs as Slurm's
/// `GRES=gpu:4(IDX:0-3)`, and `sinfo -O GresUsed` the same per node; `scontrol write batch_script` gives back the script submitted, to a
/// file (with Slurm's message) or to standard output, and names a job that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scontrol_details_and_the_batch_script_come_back() {
    let sim = Sim::start().await;
    let script = "#!/bin/bash\n#SBATCH -N 2 --gpus-per-node=4\nsrun hostname\n";
    let (ok, out, err) = sim
        .run_stdin(&["sbatch", "--parsable"], script.as_bytes())
        .await;
    assert!(ok, "{err}");
    let id: u64 = out.trim().parse().unwrap();
    sim.until_state(id, "RUNNING").await;
    for argv in [
        vec!["scontrol", "-d", "show", "job", &id.to_string()[..]],
        vec!["scontrol", "show", "job", "-d", &id.to_string()[..]],
    ] {
        let (ok, out, err) = sim.run(&argv).await;
        assert!(ok, "{err}");
        assert!(out.contains("\n   JOB_GRES=gpu:8\n"), "{out}");
        let nodes: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("     Nodes="))
            .collect();
        assert_eq!(nodes.len(), 1, "{out}");
        assert!(
            nodes[0].ends_with(" GRES=gpu:4(IDX:0-3)") && nodes[0].contains(" CPU_IDs=N/A Mem="),
            "{out}"
        );
    }
    let (ok, out, _) = sim.run(&["scontrol", "show", "job", &id.to_string()]).await;
    assert!(ok);
    assert!(!out.contains("JOB_GRES"), "{out}");
    // The same GPUs as sinfo -O GresUsed shows them on the job's nodes, and squeue -O.
    let (ok, out, err) = sim
        .run(&["sinfo", "-h", "-N", "-O", "NodeList:8,GresUsed:.24"])
        .await;
    assert!(ok, "{err}");
    let used: Vec<&str> = out.lines().filter(|l| l.contains("IDX:0-3")).collect();
    assert_eq!(used.len(), 2, "{out}");
    assert!(used[0].ends_with("     gpu:h100:4(IDX:0-3)"), "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.ends_with("gpu:h100:0(IDX:N/A)"))
            .count(),
        6,
        "{out}"
    );
    let (ok, out, err) = sim
        .run(&[
            "squeue",
            "-h",
            "-j",
            &id.to_string(),
            "-O",
            "JobID:6,tres-per-node,NumNodes:.3",
        ])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, format!("{id:<6}gres:gpu:4            2\n"));

    let (ok, out, err) = sim
        .run(&["scontrol", "write", "batch_script", &id.to_string(), "-"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, script);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("again.sh");
    let file = file.to_str().unwrap();
    let (ok, out, err) = sim
        .run(&["scontrol", "write", "batch_script", &id.to_string(), file])
        .await;
    assert!(ok, "{err}");
    assert_eq!(
        out,
        format!("batch script for job {id} written to {file}\n")
    );
    assert_eq!(std::fs::read_to_string(file).unwrap(), script);
    let (ok, out, err) = sim
        .run(&["scontrol", "write", "batch_script", "9999"])
        .await;
    assert!(!ok);
    assert_eq!(out, "");
    assert_eq!(
        err,
        "job script retrieval failed: Invalid job id specified\n"
    );
    sim.stop().await;
}

/// An administrator drains nodes as in Slurm: `scontrol update NodeName=... State=DRAIN
/// Reason=...` cordons them; sinfo shows them draining (a job still runs) and drained, `sinfo
/// -R` the reason with who and when, `scontrol show node` its `Reason=`; new jobs go
/// elsewhere; RESUME makes them idle again. A drain without a reason is refused as Slurm does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrator_drains_and_resumes_nodes() {
    let sim = Sim::start().await;
    let busy = sbatch(&sim, vec!["-w", "gpu001", "--wrap", "sleep 1000"]).await;
    sim.until_state(busy, "RUNNING").await;
    let (ok, _, err) = sim
        .run_admin(&["scontrol", "update", "NodeName=gpu[001-002]", "State=DRAIN"])
        .await;
    assert!(!ok);
    assert_eq!(
        err,
        "scontrol: error: You must specify a reason when DOWNING or DRAINING a node. Request \
         denied\n"
    );
    let (ok, _, err) = sim
        .run_admin(&[
            "scontrol",
            "update",
            "NodeName=gpu[001-002]",
            "State=DRAIN",
            "Reason=bad fan",
        ])
        .await;
    assert!(ok, "{err}");
    let (ok, out, err) = sim
        .run(&["sinfo", "-N", "-h", "-n", "gpu[001-003]", "-o", "%N %t"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, "gpu001 drng\ngpu002 drain\ngpu003 idle\n");
    let (ok, out, err) = sim.run(&["sinfo", "-R"]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "REASON               USER      TIMESTAMP           NODELIST"
    );
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[1].starts_with("bad fan              kubernete 20")
            && lines[1].ends_with(" gpu[001-002]"),
        "{out}"
    );
    let (ok, out, err) = sim.run(&["scontrol", "show", "node", "gpu002"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("Reason=bad fan [kubernetes-admin@20"), "{out}");
    // New work goes elsewhere.
    let wide = sbatch(&sim, vec!["--exclusive", "-N", "6", "--wrap", "sleep 1000"]).await;
    let line = sim
        .until_squeue(wide, "%T %N", |l| l.starts_with("RUNNING "))
        .await;
    assert_eq!(line, "RUNNING gpu[003-008]");
    let (ok, _, err) = sim
        .run_admin(&[
            "scontrol",
            "update",
            "NodeName=gpu[001-002]",
            "State=RESUME",
        ])
        .await;
    assert!(ok, "{err}");
    let (ok, out, _) = sim
        .run(&["sinfo", "-N", "-h", "-n", "gpu[001-002]", "-o", "%N %t"])
        .await;
    assert!(ok);
    assert_eq!(out, "gpu001 mix\ngpu002 idle\n");
    let (ok, out, _) = sim.run(&["sinfo", "-R", "-h"]).await;
    assert!(ok);
    assert_eq!(out, "");
    let (ok, _, err) = sim
        .run_admin(&["scontrol", "update", "NodeName=gpu099", "State=RESUME"])
        .await;
    assert!(!ok);
    assert_eq!(
        err,
        "scontrol: error: node gpu099: Invalid node name specified\n"
    );
    sim.stop().await;
}

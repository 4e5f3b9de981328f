//! Directives of other sites' scripts with their Slurm meaning, end to end: `muster sbatch`
//! with no YAML against the test control plane with the real operator, checked where the user
//! sees it. In the kubelet's exec mode (pods run as local processes, `muster-step` the real
//! step runtime) the partition's shared filesystem is a directory of this machine: `--output`
//! files land at their expanded path there, `--signal` reaches the script before its time
//! limit. `--begin` holds a job (`BeginTime`) until the operator's clock passes it.

mod e2e_support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use e2e_support::Sim;
use muster_operator::controller::Clock;
use serde_json::json;

fn submitted(out: &str) -> u64 {
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("sbatch --parsable printed {out:?}"))
}

/// A cluster in exec mode whose partition mounts `shared` at `/shared`; the job image is this
/// machine's root (its bash, sleep and date).
async fn exec_sim(shared: &Path, image: &Path) -> Sim {
    let exec = muster_e2e::exec::ExecOptions {
        images: vec![("busybox".into(), image.to_path_buf())],
        ..Default::default()
    };
    Sim::start_opts(
        true,
        Some(exec),
        json!({"jobEnvironment": {
            "volumes": [{"name": "shared", "mountPath": "/shared",
                         "hostPath": shared.to_str().unwrap()}]}}),
    )
    .await
}

async fn submit_script(sim: &Sim, dir: &Path, name: &str, body: &str) -> (u64, String) {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    let (ok, out, err) = sim
        .run(&["sbatch", "--parsable", path.to_str().unwrap()])
        .await;
    assert!(ok, "{err}");
    (submitted(&out), err)
}

fn ended(o: &str, id: u64) -> bool {
    o.lines().any(|l| {
        l.starts_with(&format!("{id}|")) && !l.contains("|PENDING|") && !l.contains("|RUNNING|")
    })
}

async fn until_ended(sim: &Sim, id: u64) -> String {
    sim.until_sacct(&id.to_string(), "JobID,State,ExitCode,Account", |o| {
        ended(o, id)
    })
    .await
}

/// Polls sacct until the job ended, for at most `secs` seconds (jobs that run a while).
async fn until_ended_within(sim: &Sim, id: u64, secs: u64) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let (ok, out, err) = sim
            .run(&[
                "sacct",
                "-P",
                "-j",
                &id.to_string(),
                "-o",
                "JobID,State,ExitCode",
            ])
            .await;
        assert!(ok, "{err}");
        if ended(&out, id) {
            return out;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job {id} did not end in {secs} s: {out}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// `--output` with Slurm's patterns lands at the expanded path on the partition's shared
/// filesystem with the script's standard output and error in order (as real Slurm 22.05 writes
/// them for the same script); `scontrol show job` names that file; `muster logs` still has the
/// output; `--error` splits the streams; a file off the shared filesystems is announced by
/// sbatch and the job still runs; `--open-mode=append` keeps what was there, the default
/// truncates; `--account` shows in squeue, sacct and the job's environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_files_land_where_slurm_puts_them() {
    let shared = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    std::fs::create_dir(shared.path().join("logs")).unwrap();
    let sim = exec_sim(shared.path(), image.path()).await;

    // Merged: the file has both streams in the order written.
    let (id, _) = submit_script(
        &sim,
        scripts.path(),
        "merged.sh",
        "#!/bin/bash\n#SBATCH -J mergedjob\n#SBATCH -o /shared/logs/%x-%j-%u-%%.out\n#SBATCH -A proj-x\n\
         echo \"out line 1\"\necho \"err line 1\" >&2\necho \"out line 2 account=$SLURM_JOB_ACCOUNT\"\n",
    )
    .await;
    let done = until_ended(&sim, id).await;
    assert!(
        done.lines()
            .any(|l| l == format!("{id}|COMPLETED|0:0|proj-x")),
        "{done}"
    );
    let file = shared
        .path()
        .join(format!("logs/mergedjob-{id}-dana-%.out"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; logs dir has {:?}",
            file.display(),
            std::fs::read_dir(shared.path().join("logs"))
                .unwrap()
                .collect::<Vec<_>>()
        )
    });
    assert_eq!(text, "out line 1\nerr line 1\nout line 2 account=proj-x\n");
    let (ok, out, err) = sim.run(&["scontrol", "show", "job", &id.to_string()]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("StdOut=/shared/logs/mergedjob-{id}-dana-%.out")),
        "{out}"
    );
    let (ok, out, err) = sim
        .run(&[
            "squeue",
            "-h",
            "-t",
            "all",
            "-j",
            &id.to_string(),
            "-o",
            "%a",
        ])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "proj-x");
    let (ok, out, err) = sim.run(&["logs", &id.to_string()]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("out line 1") && out.contains("out line 2"),
        "{out}"
    );

    // Split, and an --error off the shared filesystem: announced, not written, the job runs.
    let (id, warn) = submit_script(
        &sim,
        scripts.path(),
        "split.sh",
        "#!/bin/bash\n#SBATCH -o /shared/split-%j.out\n#SBATCH -e /tmp/split-%j.err\n\
         echo to stdout\necho to stderr >&2\n",
    )
    .await;
    assert!(
        warn.contains("sbatch: warning: --error=/tmp/split-%j.err: /tmp/split-%j.err is on no shared filesystem (the shared filesystems of partition blackwell are /shared)"),
        "{warn}"
    );
    let done = until_ended(&sim, id).await;
    assert!(done.contains(&format!("{id}|COMPLETED|0:0")), "{done}");
    let out = std::fs::read_to_string(shared.path().join(format!("split-{id}.out"))).unwrap();
    assert_eq!(out, "to stdout\n");

    // Truncate (the default), then append.
    let fixed = shared.path().join("fixed.out");
    std::fs::write(&fixed, "from an earlier run\n").unwrap();
    let (id, _) = submit_script(
        &sim,
        scripts.path(),
        "one.sh",
        "#!/bin/bash\n#SBATCH -o /shared/fixed.out\necho one\n",
    )
    .await;
    until_ended(&sim, id).await;
    assert_eq!(std::fs::read_to_string(&fixed).unwrap(), "one\n");
    let (id, _) = submit_script(
        &sim,
        scripts.path(),
        "two.sh",
        "#!/bin/bash\n#SBATCH -o /shared/fixed.out\n#SBATCH --open-mode=append\necho two\n",
    )
    .await;
    until_ended(&sim, id).await;
    assert_eq!(std::fs::read_to_string(&fixed).unwrap(), "one\ntwo\n");
    sim.stop().await;
}

/// `--signal=B:USR1@150` with a three-minute limit: the batch script gets SIGUSR1 about 30
/// seconds after the job starts (and, as in Slurm, its steps do not); `--signal=USR1@150`
/// reaches a step's tasks instead. The margin leaves room for a loaded machine to start the
/// pods; the test ends as soon as both jobs do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warning_signal_comes_before_the_time_limit() {
    let shared = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let sim = exec_sim(shared.path(), image.path()).await;
    let (batch, _) = submit_script(
        &sim,
        scripts.path(),
        "batch.sh",
        "#!/bin/bash\n#SBATCH -t 3\n#SBATCH --signal=B:USR1@150\n#SBATCH -o /shared/batch-%j.out\n\
         trap 'echo batch got USR1; exit 0' USR1\necho started\n\
         for i in $(seq 1 400); do sleep 0.25; done\necho no signal\nexit 3\n",
    )
    .await;
    let (steps, _) = submit_script(
        &sim,
        scripts.path(),
        "steps.sh",
        "#!/bin/bash\n#SBATCH -t 3\n#SBATCH --signal=USR1@150\n#SBATCH -o /shared/steps-%j.out\n\
         trap 'echo the batch shell got USR1' USR1\n\
         srun bash -c 'trap \"echo step got USR1; exit 0\" USR1; for i in $(seq 1 400); do sleep 0.25; done; exit 4'\n\
         echo srun exited $?\n",
    )
    .await;
    for id in [batch, steps] {
        let done = until_ended_within(&sim, id, 150).await;
        assert!(done.contains(&format!("{id}|COMPLETED|0:0")), "{done}");
    }
    let b = std::fs::read_to_string(shared.path().join(format!("batch-{batch}.out"))).unwrap();
    assert_eq!(b, "started\nbatch got USR1\n");
    let s = std::fs::read_to_string(shared.path().join(format!("steps-{steps}.out"))).unwrap();
    // The tasks' whole process group gets it, as Slurm signals every process of a step: bash
    // may also report its `sleep` child killed by the signal.
    assert!(
        s.contains("step got USR1\n") && s.ends_with("srun exited 0\n"),
        "{s:?}"
    );
    assert!(!s.contains("the batch shell got USR1"), "{s:?}");
    sim.stop().await;
}

/// `scancel ID.STEP` ends that step alone (SIGKILL: its srun exits 137) and the batch script
/// goes on; `scancel -s SIGNAL ID.STEP` signals that step's tasks; as Slurm 22.05's scancel
/// (checked on a slurmctld: `Terminating step 7.1`, `Signal 10 to step 7.0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scancel_ends_or_signals_one_step() {
    let shared = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let sim = exec_sim(shared.path(), image.path()).await;
    let (id, _) = submit_script(
        &sim,
        scripts.path(),
        "steps.sh",
        "#!/bin/bash\n#SBATCH -o /shared/steps-%j.out\n\
         srun bash -c 'touch /shared/s0-$SLURM_JOB_ID; while true; do sleep 0.1; done'\n\
         echo step 0 srun exited $?\n\
         srun bash -c 'trap \"echo step 1 got USR1; exit 0\" USR1; touch /shared/s1-$SLURM_JOB_ID; while true; do sleep 0.1; done'\n\
         echo step 1 srun exited $?\n",
    )
    .await;
    until_file(&sim, &shared.path().join(format!("s0-{id}")), |_| true).await;
    let (ok, _, err) = sim.run(&["scancel", "-v", &format!("{id}.0")]).await;
    assert!(ok, "{err}");
    assert_eq!(err, format!("scancel: Terminating step {id}.0\n"));
    until_file(&sim, &shared.path().join(format!("s1-{id}")), |_| true).await;
    let (ok, _, err) = sim
        .run(&["scancel", "-v", "-s", "USR1", &format!("{id}.1")])
        .await;
    assert!(ok, "{err}");
    assert_eq!(err, format!("scancel: Signal 10 to step {id}.1\n"));
    let done = until_ended_within(&sim, id, 120).await;
    assert!(done.contains(&format!("{id}|COMPLETED|0:0")), "{done}");
    let text = std::fs::read_to_string(shared.path().join(format!("steps-{id}.out"))).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(
        lines,
        [
            "step 0 srun exited 137",
            "step 1 got USR1",
            "step 1 srun exited 0"
        ],
        "{text:?}"
    );
    let (ok, _, err) = sim.run(&["scancel", "999.0"]).await;
    assert!(!ok);
    assert_eq!(
        err,
        "scancel: error: Kill job error on job step id 999.0: Invalid job id specified\n"
    );
    sim.stop().await;
}

/// `--signal`'s warning follows the time limit as it changes: `-t 10` with
/// `--signal=B:USR1@170` is due 7m10s after the start; `scontrol update TimeLimit=3` on the
/// running job brings it to 10 s after the start (as slurmctld, which checks the warning
/// against the job's end as it is, does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warning_signal_follows_a_lowered_time_limit() {
    let shared = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let sim = exec_sim(shared.path(), image.path()).await;
    let (id, _) = submit_script(
        &sim,
        scripts.path(),
        "lowered.sh",
        "#!/bin/bash\n#SBATCH -t 10\n#SBATCH --signal=B:USR1@170\n#SBATCH -o /shared/lowered-%j.out\n\
         trap 'echo batch got USR1; exit 0' USR1\ntouch /shared/started-$SLURM_JOB_ID\n\
         for i in $(seq 1 2400); do sleep 0.25; done\necho no signal\nexit 3\n",
    )
    .await;
    until_file(&sim, &shared.path().join(format!("started-{id}")), |_| true).await;
    let (ok, _, err) = sim
        .run(&["scontrol", "update", &format!("JobId={id}"), "TimeLimit=3"])
        .await;
    assert!(ok, "{err}");
    let done = until_ended_within(&sim, id, 150).await;
    assert!(done.contains(&format!("{id}|COMPLETED|0:0")), "{done}");
    let text = std::fs::read_to_string(shared.path().join(format!("lowered-{id}.out"))).unwrap();
    assert_eq!(text, "batch got USR1\n");
    sim.stop().await;
}

/// Waits until `path` exists and `done` holds for its text (at most two minutes); on timeout
/// says where the jobs and their pods were.
async fn until_file(sim: &Sim, path: &Path, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let read = std::fs::read_to_string(path);
        if let Ok(text) = &read
            && done(text)
        {
            return text.clone();
        }
        let text = read.unwrap_or_default();
        if tokio::time::Instant::now() >= deadline {
            let (_, jobs, _) = sim.run(&["squeue", "-t", "all"]).await;
            let pods = sim
                .kubectl(
                    true,
                    &[
                        "get",
                        "pods",
                        "-A",
                        "-o",
                        "custom-columns=NAME:.metadata.name,PHASE:.status.phase,SIGNALS:.metadata.annotations.muster\\.dev/signals",
                    ],
                    None,
                )
                .await;
            panic!("{}: {text:?}\n{jobs}\n{pods:?}", path.display());
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// `scancel --signal` as real Slurm 22.05's scancel does it (checked on a slurmctld): by
/// default the steps' tasks get the signal and the batch shell does not; `-b` the batch shell
/// alone; `-v` says `Signal N to [batch ]job ID`; the job's state does not change. A job that
/// is not running cannot be signalled (`Job can not be altered now, try again later`, exit 1),
/// an unknown signal is refused before anything is done, and `-s KILL` cancels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scancel_signals_the_steps_or_the_batch_shell_of_a_running_job() {
    let shared = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let sim = exec_sim(shared.path(), image.path()).await;
    // The batch shell has no USR2 trap: were USR2 sent to it, it would die of it and the job
    // would fail.
    let (id, _) = submit_script(
        &sim,
        scripts.path(),
        "sig.sh",
        "#!/bin/bash\n#SBATCH -o /shared/sig-%j.out\n\
         trap 'echo batch got USR1; exit 0' USR1\n\
         srun bash -c 'trap \"echo step got USR2; exit 0\" USR2; touch /shared/ready-$SLURM_JOB_ID; while true; do sleep 0.1; done'\n\
         echo srun exited $?\n\
         for i in $(seq 1 1200); do sleep 0.1; done\necho no signal\nexit 3\n",
    )
    .await;
    until_file(&sim, &shared.path().join(format!("ready-{id}")), |_| true).await;
    let (ok, _, err) = sim
        .run(&["scancel", "-v", "--signal=USR2", &id.to_string()])
        .await;
    assert!(ok, "{err}");
    assert_eq!(err, format!("scancel: Signal 12 to job {id}\n"));
    let out = shared.path().join(format!("sig-{id}.out"));
    until_file(&sim, &out, |t| t.contains("srun exited")).await;
    let line = sim.until_squeue(id, "%T", |l| !l.is_empty()).await;
    assert_eq!(line, "RUNNING", "a signal changes no state");
    let (ok, _, err) = sim
        .run(&["scancel", "-v", "-b", "-s", "SIGUSR1", &id.to_string()])
        .await;
    assert!(ok, "{err}");
    assert_eq!(err, format!("scancel: Signal 10 to batch job {id}\n"));
    let done = until_ended_within(&sim, id, 120).await;
    assert!(done.contains(&format!("{id}|COMPLETED|0:0")), "{done}");
    // The step's whole process group gets the signal, as Slurm signals every process of a
    // step: bash may also report its `sleep` child killed by it.
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("User defined signal 2"))
        .collect();
    assert_eq!(
        lines,
        ["step got USR2", "srun exited 0", "batch got USR1"],
        "{text:?}"
    );

    // -f: the batch shell and its children, and every step.
    let (full, _) = submit_script(
        &sim,
        scripts.path(),
        "full.sh",
        "#!/bin/bash\n#SBATCH -o /shared/full-%j.out\n\
         trap 'echo batch got USR1' USR1\n\
         srun bash -c 'trap \"echo step got USR1; exit 0\" USR1; touch /shared/ready-$SLURM_JOB_ID; while true; do sleep 0.1; done'\n\
         echo srun exited $?\n",
    )
    .await;
    until_file(&sim, &shared.path().join(format!("ready-{full}")), |_| true).await;
    let (ok, _, err) = sim
        .run(&["scancel", "-v", "-f", "-s", "10", &full.to_string()])
        .await;
    assert!(ok, "{err}");
    assert_eq!(err, format!("scancel: Signal 10 to full job {full}\n"));
    let done = until_ended_within(&sim, full, 120).await;
    assert!(done.contains(&format!("{full}|COMPLETED|0:0")), "{done}");
    let text = std::fs::read_to_string(shared.path().join(format!("full-{full}.out"))).unwrap();
    assert!(
        text.contains("step got USR1\n")
            && text.contains("batch got USR1\n")
            && text.ends_with("srun exited 0\n"),
        "{text:?}"
    );

    // Not running: nothing to signal.
    let (ok, out, err) = sim
        .run(&["sbatch", "--parsable", "--hold", "--wrap=sleep 600"])
        .await;
    assert!(ok, "{err}");
    let held = submitted(&out);
    let (ok, _, err) = sim.run(&["scancel", "-s", "USR1", &held.to_string()]).await;
    assert!(!ok);
    assert_eq!(
        err,
        format!(
            "scancel: error: Kill job error on job id {held}: Job can not be altered now, try again later\n"
        )
    );
    let (ok, _, err) = sim.run(&["scancel", "-s", "FOO", &held.to_string()]).await;
    assert!(!ok);
    assert_eq!(err, "Unknown job signal: FOO\n");
    let (ok, _, err) = sim.run(&["scancel", "-s", "KILL", &held.to_string()]).await;
    assert!(ok, "{err}");
    let line = sim.until_squeue(held, "%T", |l| l == "CANCELLED").await;
    assert_eq!(line, "CANCELLED");
    sim.stop().await;
}

/// `--begin=now+1hour`: pending with reason `BeginTime` (as squeue shows it in Slurm); once
/// the operator's clock passes the time, the job starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_does_not_start_before_its_begin_time() {
    let offset = Arc::new(AtomicI64::new(0));
    let sim = Sim::start_clock(true, None, json!({}), Clock::shifted(offset.clone())).await;
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--parsable",
            "--begin=now+1hour",
            "-n",
            "1",
            "--wrap=sleep 600",
        ])
        .await;
    assert!(ok, "{err}");
    let id = submitted(&out);
    let line = sim
        .until_squeue(id, "%T %r", |l| l == "PENDING BeginTime")
        .await;
    assert_eq!(line, "PENDING BeginTime");
    // Other cycles do not start it.
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;
    let (ok, out, _) = sim
        .run(&["squeue", "-h", "-j", &id.to_string(), "-o", "%T %r"])
        .await;
    assert!(ok);
    assert_eq!(out.trim(), "PENDING BeginTime");
    // scontrol shows it starting, and eligible, at its begin time (as Slurm does).
    let (ok, out, err) = sim
        .run(&["scontrol", "show", "job", &id.to_string(), "--oneliner"])
        .await;
    assert!(ok, "{err}");
    let field = |k: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {out}"))
            .to_string()
    };
    let (submit, start) = (field("SubmitTime="), field("StartTime="));
    assert_eq!(field("EligibleTime="), start, "{out}");
    let secs = |t: &str| {
        let t: jiff::civil::DateTime = t.parse().unwrap();
        t.to_zoned(jiff::tz::TimeZone::system())
            .unwrap()
            .timestamp()
            .as_second()
    };
    let lead = secs(&start) - secs(&submit);
    assert!((3595..=3605).contains(&lead), "{out}");
    offset.store(3700, Ordering::SeqCst);
    sim.until_state(id, "RUNNING").await;
    sim.stop().await;
}

/// `--chdir` / `-D`: the batch script and its `srun` steps run in that directory (a step's own
/// `--chdir` wins), relative output files land under it, `SLURM_SUBMIT_DIR` stays the
/// container's directory, and `scontrol show job` shows `WorkDir=` and the file's full path;
/// a directory that does not exist sends the script to `/tmp` with Slurm's notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chdir_moves_the_script_its_steps_and_its_output() {
    let shared = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    std::fs::create_dir(shared.path().join("run")).unwrap();
    let sim = exec_sim(shared.path(), image.path()).await;
    let (id, warn) = submit_script(
        &sim,
        scripts.path(),
        "cd.sh",
        "#!/bin/bash\n#SBATCH -D /shared/run\n#SBATCH -o out-%j.log\n\
         echo \"script in $(pwd) PWD=$PWD submit=$SLURM_SUBMIT_DIR\"\n\
         srun -n 1 bash -c 'echo \"step in $(pwd)\"'\n\
         srun -n 1 --chdir=/shared bash -c 'echo \"own step in $(pwd)\"'\n",
    )
    .await;
    assert!(!warn.contains("chdir"), "--chdir has an effect: {warn}");
    let done = until_ended_within(&sim, id, 120).await;
    assert!(done.contains(&format!("{id}|COMPLETED|0:0")), "{done}");
    let file = shared.path().join(format!("run/out-{id}.log"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(
        text,
        "script in /shared/run PWD=/shared/run submit=/\nstep in /shared/run\nown step in /shared\n"
    );
    let (ok, out, err) = sim.run(&["scontrol", "show", "job", &id.to_string()]).await;
    assert!(ok, "{err}");
    assert!(out.contains("WorkDir=/shared/run"), "{out}");
    assert!(
        out.contains(&format!("StdOut=/shared/run/out-{id}.log")),
        "{out}"
    );

    // A directory that is not there: /tmp, with slurmstepd's notice in the pod log.
    let (id, _) = submit_script(
        &sim,
        scripts.path(),
        "gone.sh",
        "#!/bin/bash\n#SBATCH --chdir=/shared/nowhere\necho \"in $(pwd)\"\n",
    )
    .await;
    let done = until_ended_within(&sim, id, 120).await;
    assert!(done.contains(&format!("{id}|COMPLETED|0:0")), "{done}");
    let (ok, out, err) = sim.run(&["logs", &id.to_string()]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "couldn't chdir to `/shared/nowhere': No such file or directory: going to /tmp instead"
        ) && out.contains("in /tmp"),
        "{out}"
    );
    sim.stop().await;
}

//! The step runtime on the test control plane in exec mode: node pods as the operator will
//! create them (one per node, the batch script on the first), `srun` steps across them,
//! compared with what real Slurm 22.05 prints for the same scripts.

mod step_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, PostParams};
use muster_e2e::stepjob::StepJob;
use serde_json::json;
use step_support::*;

/// Open MPI refuses to run as root without these (MPI images set them the same way).
fn ompi_root_env() -> Vec<(String, String)> {
    vec![
        ("OMPI_ALLOW_RUN_AS_ROOT".into(), "1".into()),
        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM".into(), "1".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srun_hostname_runs_every_task_on_its_node() {
    let env = start().await;
    let ns = env.namespace("hostname").await;
    let job = StepJob::new("job", &ns, env.nodes(2, 2, 0), "srun hostname; echo rc=$?");
    let (code, log) = env.run(&job, 60).await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        sorted(&log),
        ["job-0", "job-0", "job-1", "job-1", "rc=0"],
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srun_gives_gres_tasks_every_gpu_and_gpus_per_task_tasks_their_own() {
    let env = start().await;
    let ns = env.namespace("gpus").await;
    let script = "srun -l printenv SLURM_PROCID SLURM_LOCALID CUDA_VISIBLE_DEVICES; echo rc=$?";
    // --gres=gpu:4 --ntasks-per-node=2: every task sees its node's four GPUs.
    let gres = StepJob::new("gres", &ns, env.nodes(2, 2, 4), script);
    let (code, log) = env.run(&gres, 60).await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        sorted(&log),
        [
            "0: 0",
            "0: 0",
            "0: 0,1,2,3",
            "1: 0,1,2,3",
            "1: 1",
            "1: 1",
            "2: 0",
            "2: 0,1,2,3",
            "2: 2",
            "3: 0,1,2,3",
            "3: 1",
            "3: 3",
            "rc=0"
        ],
        "{log}"
    );
    // --gpus-per-task=1 (seed 001): each task sees one distinct GPU of its node.
    let mut per_task = StepJob::new("pertask", &ns, env.nodes(2, 2, 2), script);
    per_task.gpus_per_task = Some(1);
    let (code, log) = env.run(&per_task, 60).await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        sorted(&log),
        [
            "0: 0", "0: 0", "0: 0", "1: 1", "1: 1", "1: 1", "2: 0", "2: 0", "2: 2", "3: 1", "3: 1",
            "3: 3", "rc=0"
        ],
        "{log}"
    );
    // The seed's own script (`srun nvidia-smi` there): one line per task with its GPU.
    let seed = include_str!("scripts/howto/gpus_per_task.sh").replace(
        "srun nvidia-smi",
        "srun bash -c 'echo task $SLURM_PROCID on $(hostname) sees GPU $CUDA_VISIBLE_DEVICES of $SLURM_JOB_GPUS'",
    );
    let mut seed_job = StepJob::new("seed", &ns, env.nodes(2, 2, 2), &seed);
    seed_job.gpus_per_task = Some(1);
    let (code, log) = env.run(&seed_job, 60).await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        sorted(&log),
        [
            "task 0 on seed-0 sees GPU 0 of 0,1",
            "task 1 on seed-0 sees GPU 1 of 0,1",
            "task 2 on seed-1 sees GPU 0 of 0,1",
            "task 3 on seed-1 sees GPU 1 of 0,1"
        ],
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_addr_from_the_nodelist_is_a_working_rendezvous() {
    let env = start().await;
    let ns = env.namespace("master").await;
    // Rank 0 listens on MASTER_ADDR; every other rank connects to it by that name, as
    // torch.distributed's TCP store does.
    let script = r#"
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_PORT=29500
echo "master=$MASTER_ADDR"
srun python3 -c '
import os, socket, time
rank, n = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
if rank == 0:
    s = socket.create_server(addr)
    got = sorted(int(s.accept()[0].recv(16)) for _ in range(n - 1))
    print("rank 0 heard from", got, flush=True)
else:
    for _ in range(200):
        try:
            c = socket.create_connection(addr); break
        except OSError:
            time.sleep(0.05)
    c.sendall(str(rank).encode())
'
echo rc=$?
"#;
    let job = StepJob::new("rdzv", &ns, env.nodes(2, 2, 0), script);
    let (code, log) = env.run(&job, 60).await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(log, "master=rdzv-0\nrank 0 heard from [1, 2, 3]\nrc=0\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpirun_and_an_mpi_program_run_through_srun_without_ssh() {
    let env = start().await;
    let ns = env.namespace("mpi").await;
    // Build the MPI program on the host; pods mount it with a hostPath volume.
    let build = tempfile::Builder::new()
        .prefix("muster-mpi-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let out = std::process::Command::new("mpicc")
        .args(["-O1", "-o"])
        .arg(build.path().join("ring"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/step_oracle/ring.c"
        ))
        .output()
        .expect("mpicc (libopenmpi-dev) is installed");
    assert!(
        out.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = r#"
echo "== hostname"
mpirun -np 4 hostname
echo "rc=$?"
echo "== ring"
mpirun -np 4 /opt/mpi/ring
echo "rc=$?"
echo "== no ssh"
test -z "$(command -v ssh)" -o -n "$OMPI_MCA_plm_rsh_agent" || true
echo "plm=$(ompi_info --parsable --param plm all 2>/dev/null | grep -c slurm)"
"#;
    let mut job = StepJob::new("mpi", &ns, env.nodes(2, 2, 0), script);
    job.env = ompi_root_env();
    job.volumes = vec![(
        json!({"name": "mpi", "hostPath": {"path": build.path(), "type": "Directory"}}),
        json!({"name": "mpi", "mountPath": "/opt/mpi", "readOnly": true}),
    )];
    let (code, log) = env.run(&job, 120).await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        sorted(&section(&log, "hostname")),
        ["mpi-0", "mpi-0", "mpi-1", "mpi-1", "rc=0"],
        "{log}"
    );
    let ring = sorted(&section(&log, "ring"));
    assert_eq!(
        ring,
        [
            "rank 0 of 4 on mpi-0: sum=6 token=4",
            "rank 1 of 4 on mpi-0: sum=6",
            "rank 2 of 4 on mpi-1: sum=6",
            "rank 3 of 4 on mpi-1: sum=6",
            "rc=0"
        ],
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpich_hydra_launches_through_srun() {
    let env = start().await;
    let ns = env.namespace("hydra").await;
    // hydra's Slurm bootstrap starts its proxies with `srun -N 2 -n 2 --input none`; the
    // proxies start the ranks with their PMI identity. (An MPICH program itself is not run:
    // Debian's MPICH 4.0.2 over UCX 1.13 TCP hangs now and then in MPI_Finalize when all
    // "nodes" share one kernel, as here.)
    let script = r#"
echo "== hostname"
mpiexec.hydra -np 4 hostname
echo "rc=$?"
echo "== ranks"
mpiexec.hydra -np 4 bash -c 'echo "pmi rank $PMI_RANK of $PMI_SIZE on $(hostname)"'
echo "rc=$?"
"#;
    let job = StepJob::new("hydra", &ns, env.nodes(2, 2, 0), script);
    let (code, log) = env.run(&job, 120).await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        sorted(&section(&log, "hostname")),
        ["hydra-0", "hydra-0", "hydra-1", "hydra-1", "rc=0"],
        "{log}"
    );
    assert_eq!(
        sorted(&section(&log, "ranks")),
        [
            "pmi rank 0 of 4 on hydra-0",
            "pmi rank 1 of 4 on hydra-0",
            "pmi rank 2 of 4 on hydra-1",
            "pmi rank 3 of 4 on hydra-1",
            "rc=0"
        ],
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_task_fails_the_step_and_the_job_with_its_exit_code() {
    let env = start().await;
    let ns = env.namespace("failing").await;
    let script = "srun bash -c 'exit $((SLURM_PROCID + 1))'; rc=$?; echo rc=$rc; exit $rc";
    let job = StepJob::new("fail", &ns, env.nodes(2, 2, 0), script);
    env.submit(&job).await;
    let p = env.finished(&job, "fail-0", 60).await;
    let log = env.log(&job, "fail-0", "node").await;
    assert_eq!(
        exit_code(&p),
        4,
        "the batch script's exit code is the job's: {log}"
    );
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Failed"));
    assert_eq!(
        sorted(&log),
        [
            "rc=4",
            "srun: error: fail-0: task 0: Exited with exit code 1",
            "srun: error: fail-0: task 1: Exited with exit code 2",
            "srun: error: fail-1: task 2: Exited with exit code 3",
            "srun: error: fail-1: task 3: Exited with exit code 4"
        ],
        "{log}"
    );
    // A task killed by a signal: srun exits 128 + the signal.
    let script =
        "srun bash -c 'if [ $SLURM_PROCID = 3 ]; then kill -9 $$; fi; sleep 0.2'; echo rc=$?";
    let job = StepJob::new("sig", &ns, env.nodes(2, 2, 0), script);
    let (code, log) = env.run(&job, 60).await;
    assert_eq!(code, 0);
    assert_eq!(
        sorted(&log),
        [
            "rc=137",
            "srun: Force Terminated StepId=1.0",
            "srun: error: sig-1: task 3: Killed"
        ],
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_every_task_through_srun() {
    let env = start().await;
    let ns = env.namespace("signals").await;
    // SIGUSR1 to srun is forwarded to every task; SIGTERM to srun ends the step.
    let script = r#"
srun bash -c 'trap "echo got USR1 on $SLURM_PROCID; exit 0" USR1; echo ready > /dev/null; while true; do sleep 0.05; done' &
pid=$!
sleep 1
kill -USR1 $pid
wait $pid
echo "usr1 rc=$?"
srun bash -c 'while true; do sleep 0.05; done' &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
echo "term rc=$?"
"#;
    let job = StepJob::new("sig", &ns, env.nodes(2, 2, 0), script);
    let (code, log) = env.run(&job, 60).await;
    assert_eq!(code, 0, "{log}");
    let lines = sorted(&log);
    for r in 0..4 {
        assert!(lines.contains(&format!("got USR1 on {r}")), "{log}");
    }
    assert!(lines.contains(&"usr1 rc=0".to_string()), "{log}");
    assert!(
        lines.contains(&"srun: forcing job termination".to_string()),
        "{log}"
    );
    assert!(
        lines.contains(&"term rc=137".to_string()),
        "every task was killed: {log}"
    );
    assert!(
        lines.contains(&"srun: error: sig-0: tasks 0-1: Killed".to_string())
            || lines.iter().filter(|l| l.contains("Killed")).count() >= 2,
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_job_ends_every_task_on_every_node() {
    let env = start().await;
    let ns = env.namespace("cancel").await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.cluster.client(), &ns);
    pvcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
        "metadata": {"name": "shared"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    // Scancel and the time limit delete the job's pods: every node's daemon gets SIGTERM and
    // passes it to its tasks and the batch step; task 3 ignores it and is killed after the
    // kill wait. Each task keeps a heartbeat on the shared claim.
    let script = r#"
srun bash -c '
if [ $SLURM_PROCID = 3 ]; then trap "" TERM; fi
while true; do date +%s%N > /data/.alive-$SLURM_PROCID; mv /data/.alive-$SLURM_PROCID /data/alive-$SLURM_PROCID; sleep 0.05; done'
"#;
    let mut job = StepJob::new("cancel", &ns, env.nodes(2, 2, 0), script);
    job.env = vec![("MUSTER_STEP_KILL_WAIT".into(), "1".into())];
    // A grace period far past the wait below: pods that end at all ended after the kill wait.
    job.grace_seconds = 600;
    job.volumes = vec![(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}),
        json!({"name": "data", "mountPath": "/data"}),
    )];
    env.submit(&job).await;
    let pods = env.pods(&job);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = claim_files(&env, &ns, "cat /data/alive-* 2>/dev/null | wc -l").await;
        if out.trim() == "4" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tasks did not start: {out}\n{}",
            env.all_logs(&job).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Record how each pod ends (they are deleted right after).
    let ends = tokio::spawn({
        let pods = pods.clone();
        async move {
            use futures::StreamExt;
            let mut seen = std::collections::BTreeMap::new();
            let mut w = pods
                .watch(&kube::api::WatchParams::default(), "0")
                .await
                .unwrap()
                .boxed();
            while seen.len() < 2 {
                let Some(Ok(ev)) = w.next().await else { break };
                if let kube::api::WatchEvent::Modified(p) | kube::api::WatchEvent::Deleted(p) = ev {
                    let code = exit_code(&p);
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if code >= 0 && name.starts_with("cancel-") {
                        seen.entry(name).or_insert(code);
                    }
                }
            }
            seen
        }
    });
    for i in 0..2 {
        pods.delete(&job.pod_name(i), &DeleteParams::default())
            .await
            .unwrap();
    }
    let ends = tokio::time::timeout(Duration::from_secs(120), ends)
        .await
        .expect("pods end after the kill wait, not the 600 s grace period")
        .unwrap();
    // The batch step (srun) got SIGTERM and killed its tasks (137), or was killed itself.
    assert!(matches!(ends["cancel-0"], 137 | 143), "{ends:?}");
    assert!(matches!(ends["cancel-1"], 0 | 143), "{ends:?}");
    // No task survives: the heartbeats stop.
    let beats = "for f in /data/alive-*; do echo \"$f $(cat $f)\"; done";
    let a = claim_files(&env, &ns, beats).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = claim_files(&env, &ns, beats).await;
    assert_eq!(a, b, "no task is alive after the job ended");
    assert_eq!(a.lines().count(), 4);
}

/// The output of `cmd` in a throwaway pod mounting the `shared` claim of `ns` at `/data`.
async fn claim_files(env: &Env, ns: &str, cmd: &str) -> String {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(env.cluster.client(), ns);
    let name = format!(
        "ls-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never",
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}],
            "containers": [{"name": "ls", "image": "busybox", "command": ["sh", "-c", cmd],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let job = StepJob::new("x", ns, Vec::new(), "");
    env.finished(&job, &name, 30).await;
    let out = env.log(&job, &name, "ls").await;
    let _ = pods.delete(&name, &DeleteParams::default()).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_without_the_jobs_credential_starts_a_process() {
    let env = start().await;
    let ns = env.namespace("auth").await;
    let job = StepJob::new("auth", &ns, env.nodes(2, 1, 0), "sleep 30");
    env.submit(&job).await;
    let pods = env.pods(&job);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ip = loop {
        if let Some(p) = pods.get_opt("auth-1").await.unwrap()
            && let Some(i) = p.status.as_ref().and_then(|s| s.pod_ip.clone())
        {
            break i;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "auth-1 never got an address"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Another credential (another job's, or a guess) is refused before any request is read.
    let wrong =
        muster_cli::step::proto::Credential::from_bytes(b"not-this-jobs-key-not-this-jobs-key")
            .unwrap();
    let right = muster_cli::step::proto::Credential::from_bytes(job.key.as_bytes()).unwrap();
    let addr = format!("{ip}:{}", muster_e2e::stepjob::PORT);
    // The pod has its address before its daemon listens.
    let mut refused = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        match tokio::net::TcpStream::connect(&addr).await {
            Ok(s) => {
                refused = Some(
                    muster_cli::step::proto::Channel::connect(s, &wrong)
                        .await
                        .err(),
                );
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let refused = refused.expect("the daemon listens").expect("refused");
    assert!(
        matches!(refused, muster_cli::step::proto::ProtoError::Auth),
        "{refused}"
    );
    // The job's own credential is accepted.
    let s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut ch = muster_cli::step::proto::Channel::connect(s, &right)
        .await
        .unwrap();
    ch.send(&muster_cli::step::proto::Msg::Ping).await.unwrap();
    assert_eq!(
        ch.recv().await.unwrap(),
        muster_cli::step::proto::Frame::Msg(muster_cli::step::proto::Msg::Pong {
            node: "auth-1".into()
        })
    );
    let log = env.log(&job, "auth-1", "node").await;
    assert!(
        log.contains("refused a connection")
            && log.contains("does not hold this job's step credential"),
        "{log}"
    );
    for i in 0..2 {
        pods.delete(&job.pod_name(i), &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// `KEY=VALUE` lines of a section (with an optional `N: ` label) as a map.
fn vars(section_text: &str) -> std::collections::BTreeMap<String, String> {
    section_text
        .lines()
        .map(|l| {
            l.split_once(": ")
                .filter(|(n, _)| n.parse::<u32>().is_ok())
                .map_or(l, |(_, r)| r)
        })
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_tasks_environment_is_what_slurm_gives_it() {
    let env = start().await;
    let ns = env.namespace("stepenv").await;
    let script = include_str!("data/step_oracle/env.sh");
    let real = include_str!("data/step_oracle/env.out")
        .replace("n[001-002]", "job-[0-1]")
        .replace("n001", "job-0")
        .replace("n002", "job-1");
    let mut job = StepJob::new("job", &ns, env.nodes(2, 2, 0), script);
    job.ntasks_per_node = Some(2);
    let (code, log) = env.run(&job, 60).await;
    assert_eq!(code, 0, "{log}");
    let (ours, theirs) = (
        vars(&section(&log, "srun env task0")),
        vars(&section(&real, "srun env task0")),
    );
    // Everything srun and slurmstepd set for a task, with Slurm's values.
    for k in [
        "SLURMD_NODENAME",
        "SLURM_CPUS_ON_NODE",
        "SLURM_DISTRIBUTION",
        "SLURM_GTIDS",
        "SLURM_JOB_CPUS_PER_NODE",
        "SLURM_JOB_ID",
        "SLURM_JOBID",
        "SLURM_JOB_NODELIST",
        "SLURM_JOB_NUM_NODES",
        "SLURM_LABELIO",
        "SLURM_LOCALID",
        "SLURM_NNODES",
        "SLURM_NODEID",
        "SLURM_NODELIST",
        "SLURM_NPROCS",
        "SLURM_NTASKS",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_PROCID",
        "SLURM_STEPID",
        "SLURM_STEP_ID",
        "SLURM_STEP_NODELIST",
        "SLURM_STEP_NUM_NODES",
        "SLURM_STEP_NUM_TASKS",
        "SLURM_STEP_TASKS_PER_NODE",
        "SLURM_TASKS_PER_NODE",
        "SLURM_UMASK",
    ] {
        assert_eq!(
            ours.get(k),
            theirs.get(k),
            "{k}: ours {ours:#?}\nSlurm's {theirs:#?}"
        );
    }
    // Set, with our own values: addresses of the launching srun.
    for k in ["SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_HOST"] {
        assert!(
            ours.get(k).is_some_and(|v| v.starts_with("127.")),
            "{k}: {ours:#?}"
        );
    }
    // What Slurm has that a Muster step does not: ports of srun's own I/O protocol, and
    // heterogeneous-job and cluster bookkeeping the operator's batch
    // environment may or may not carry.
    let missing: Vec<&String> = theirs.keys().filter(|k| !ours.contains_key(*k)).collect();
    assert_eq!(
        missing,
        [
            "SLURM_CLUSTER_NAME",
            "SLURM_CONF",
            "SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0",
            "SLURM_JOB_GID",
            "SLURM_JOB_NAME",
            "SLURM_JOB_PARTITION",
            "SLURM_JOB_UID",
            "SLURM_JOB_USER",
            "SLURM_NODE_ALIASES",
            "SLURM_PRIO_PROCESS",
            "SLURM_SRUN_COMM_PORT",
            "SLURM_STEP_LAUNCHER_PORT",
            "SLURM_SUBMIT_DIR",
            "SLURM_SUBMIT_HOST",
            "SLURM_TOPOLOGY_ADDR",
            "SLURM_TOPOLOGY_ADDR_PATTERN",
            "SLURM_WORKING_CLUSTER"
        ]
        .iter()
        .map(|s| s.to_string())
        .filter(|k| !ours.contains_key(k))
        .collect::<Vec<_>>()
        .iter()
        .collect::<Vec<_>>(),
        "ours: {ours:#?}"
    );
    // srun hostname and -l printenv, as Slurm printed them (PROCID/LOCALID lines).
    assert_eq!(
        sorted(&section(&log, "hostname")),
        sorted(&section(&real, "hostname"))
    );
    let pl = |s: &str| -> Vec<String> {
        sorted(&section(s, "-l printenv"))
            .into_iter()
            .filter(|l| !l.contains("srun:") && !l.starts_with("rc=") && !l.contains(','))
            .collect()
    };
    assert_eq!(pl(&log), pl(&real), "{log}");
}

/// `SLURM_TASK_PID` is the task's own process, in the batch script and in every `srun` task,
/// as real Slurm gives it (22.05, `peer.sh`: `echo $$ $SLURM_TASK_PID` printed the same
/// number twice in both places).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_and_the_batch_script_see_their_own_pid() {
    let env = start().await;
    let ns = env.namespace("taskpid").await;
    let script = "echo \"batch $$ $SLURM_TASK_PID\"\n\
                  srun sh -c 'echo \"task $$ $SLURM_TASK_PID\"'\n\
                  srun bash -c 'exec printenv SLURM_TASK_PID' | sort -u | wc -l\n";
    let (code, log) = env
        .run(&StepJob::new("job", &ns, env.nodes(2, 2, 0), script), 60)
        .await;
    assert_eq!(code, 0, "{log}");
    let pids: Vec<(&str, &str, &str)> = log
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3 && (w[0] == "batch" || w[0] == "task")).then(|| (w[0], w[1], w[2]))
        })
        .collect();
    assert_eq!(pids.iter().filter(|p| p.0 == "batch").count(), 1, "{log}");
    assert_eq!(pids.iter().filter(|p| p.0 == "task").count(), 4, "{log}");
    for (what, pid, task_pid) in &pids {
        assert!(pid.parse::<u32>().is_ok(), "{what}: {log}");
        assert_eq!(
            pid, task_pid,
            "{what}: SLURM_TASK_PID is not its pid\n{log}"
        );
    }
    // Four tasks, four processes: four distinct values.
    assert!(log.lines().any(|l| l.trim() == "4"), "{log}");
}

/// The sections of an output as sets of lines, with the run-specific lines left out (bash's
/// `time`, slurmstepd's cancellation banner with its time stamp, our extra hint after a bad
/// option).
fn sections(out: &str) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut m: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    let mut cur = String::new();
    for l in out.lines() {
        if let Some(n) = l.strip_prefix("== ") {
            cur = n.to_string();
            m.entry(cur.clone()).or_default();
            continue;
        }
        let skip = l.starts_with("real\t")
            || l.starts_with("user\t")
            || l.starts_with("sys\t")
            || l.contains("*** STEP")
            || l.starts_with("srun: Muster's srun supports")
            || l.is_empty();
        if skip {
            continue;
        }
        // `tasks 0-1: X` is `task 0: X` and `task 1: X` reported together (which tasks end
        // within one reaping pass is timing).
        let set = m.entry(cur.clone()).or_default();
        match l
            .split_once(": tasks ")
            .and_then(|(head, rest)| rest.split_once(": ").map(|(ids, msg)| (head, ids, msg)))
        {
            Some((head, ids, msg)) => {
                for part in ids.split(',') {
                    let (a, b) = part.split_once('-').unwrap_or((part, part));
                    for t in a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap() {
                        set.insert(format!("{head}: task {t}: {msg}"));
                    }
                }
            }
            None => {
                set.insert(l.to_string());
            }
        }
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_behave_as_real_slurms_for_the_same_script() {
    let env = start().await;
    let ns = env.namespace("oracle").await;
    let mut job = StepJob::new(
        "oracle",
        &ns,
        env.nodes(2, 2, 0),
        include_str!("data/step_oracle/steps.sh"),
    );
    // The nodes of the recorded run, so the outputs compare as they are.
    job.hosts = Some(vec!["n001".into(), "n002".into()]);
    job.ntasks_per_node = Some(2);
    job.env = ompi_root_env();
    job.env.push(("MUSTER_STEP_KILL_WAIT".into(), "2".into()));
    // The recorded run's working directory.
    job.volumes = vec![(
        json!({"name": "wd", "emptyDir": {}}),
        json!({"name": "wd", "mountPath": "/tmp/i14a"}),
    )];
    let (code, log) = env.run(&job, 120).await;
    assert_eq!(code, 0, "{log}");
    let ours = sections(&log);
    let theirs = sections(include_str!("data/step_oracle/steps.out"));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "{log}"
    );
    let mut diffs = Vec::new();
    for (name, want) in &theirs {
        let got = &ours[name];
        if got != want {
            diffs.push(format!(
                "== {name}\n  only Slurm: {:?}\n  only ours:  {:?}",
                want.difference(got).collect::<Vec<_>>(),
                got.difference(want).collect::<Vec<_>>()
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "differences from real Slurm:\n{}\n\nour output:\n{log}",
        diffs.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints how long a step takes (a figure, not a test)"]
async fn step_launch_figures() {
    let env = start().await;
    let ns = env.namespace("figures").await;
    let script = r#"
s=$(date +%s%N); for i in $(seq 20); do srun true; done; e=$(date +%s%N)
echo "srun true, 4 tasks on 2 nodes: $(( (e - s) / 20000000 )) ms a step"
s=$(date +%s%N); for i in $(seq 20); do mpirun -np 4 true; done; e=$(date +%s%N)
echo "mpirun -np 4 true over srun: $(( (e - s) / 20000000 )) ms a run"
"#;
    let mut job = StepJob::new("fig", &ns, env.nodes(2, 2, 0), script);
    job.env = ompi_root_env();
    let t0 = std::time::Instant::now();
    let (code, log) = env.run(&job, 300).await;
    println!(
        "exit {code} after {:?} (pods created to batch end)\n{log}",
        t0.elapsed()
    );
}

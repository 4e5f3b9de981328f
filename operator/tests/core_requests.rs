//! Known answers for Slurm's request shapes and node choices: `--gres=gpu:M` /
//! `--gpus-per-node=M` with `-n`, `--gpus=G` with `-n`, `--gpus-per-task` with and without
//! `-N`, tasks sharing a node's GPUs, `--nodelist`, `--exclude` and `--exclusive=user`.
//!
//! The cases follow `../shared/slurm/FACTS.md` ("How a request becomes an allocation"); the
//! task layouts were checked against real Slurm 22.05 (`peer.sh`, see ARCHITECTURE.md
//! "Request shapes").

use muster_operator::core::*;

const NOW: i64 = 1_000_000;

/// 2 leaves x 2 nodes x 8 GPUs, `cpus` CPUs per node.
fn cluster(cpus: u32) -> Snapshot {
    let mut spec = ClusterSpec::tree("t", 1, 2, 2, 8);
    spec.node.cpus = cpus;
    Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology())
}

fn req() -> JobRequest {
    JobRequest::default()
}

/// Starts one job alone on `s`; per task: (node name, local rank, GPU indices).
fn run(s: &Snapshot, r: JobRequest) -> Vec<(String, u32, Vec<u32>)> {
    let mut s = s.clone();
    s.pending = vec![PendingJob::new(1, NOW, r)];
    let d = schedule(&s, NOW, &Config::default());
    let st = d
        .starts
        .iter()
        .find(|x| x.job == 1)
        .unwrap_or_else(|| panic!("did not start: {:?}", d.pending));
    st.tasks
        .iter()
        .map(|t| {
            (
                s.nodes[t.node as usize].name.clone(),
                t.local_rank,
                t.gpus.clone(),
            )
        })
        .collect()
}

/// Tasks per node, in node order (Slurm's SLURM_TASKS_PER_NODE, expanded).
fn layout(tasks: &[(String, u32, Vec<u32>)]) -> Vec<usize> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for (n, _, _) in tasks {
        match out.iter_mut().find(|x| &x.0 == n) {
            Some(x) => x.1 += 1,
            None => out.push((n.clone(), 1)),
        }
    }
    out.into_iter().map(|x| x.1).collect()
}

fn refused(s: &Snapshot, r: JobRequest) -> PendingInfo {
    let mut s = s.clone();
    s.pending = vec![PendingJob::new(1, NOW, r)];
    let d = schedule(&s, NOW, &Config::default());
    assert!(d.starts.is_empty(), "started: {:?}", d.starts);
    d.pending[0].clone()
}

#[test]
fn gres_with_ntasks_takes_as_few_nodes_as_hold_the_tasks() {
    let s = cluster(224);
    // -n 1 --gres=gpu:1: one node, one GPU.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(1),
            gpus_per_node: Some(1),
            ..req()
        },
    );
    assert_eq!(t, [("gpu001".to_string(), 0, vec![0])]);
    // -n 4 --gres=gpu:4: one node, four GPUs, one per task.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(4),
            gpus_per_node: Some(4),
            ..req()
        },
    );
    assert_eq!(layout(&t), [4]);
    let mut all: Vec<u32> = t.iter().flat_map(|x| x.2.clone()).collect();
    all.sort_unstable();
    assert_eq!(all, [0, 1, 2, 3]);
    assert!(t.iter().all(|x| x.2.len() == 1));
    // -n 2 --gpus-per-node=2: one node, one GPU each.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(2),
            gpus_per_node: Some(2),
            ..req()
        },
    );
    assert_eq!(layout(&t), [2]);
    assert!(t.iter().all(|x| x.2.len() == 1) && t[0].2 != t[1].2);
}

#[test]
fn tasks_outnumbering_a_nodes_gpus_share_them() {
    let s = cluster(224);
    // -N 1-2 -n 4 --gres=gpu:2: the fewest nodes (one), its two GPUs seen by all four tasks.
    let t = run(
        &s,
        JobRequest {
            min_nodes: Some(1),
            max_nodes: Some(2),
            ntasks: Some(4),
            gpus_per_node: Some(2),
            ..req()
        },
    );
    assert_eq!(layout(&t), [4]);
    for x in &t {
        assert_eq!(x.2, [0, 1], "every task sees the node's GPUs: {t:?}");
    }
    // -N 1 --ntasks-per-node=4 --gres=gpu:1: a bundle with more tasks than GPUs.
    let t = run(
        &s,
        JobRequest {
            min_nodes: Some(1),
            ntasks_per_node: Some(4),
            gpus_per_node: Some(1),
            ..req()
        },
    );
    assert_eq!(t.len(), 4);
    assert!(t.iter().all(|x| x.2 == [0]), "{t:?}");
}

#[test]
fn tasks_per_node_is_a_maximum_and_the_tasks_are_spread_evenly() {
    let s = cluster(224);
    // -n 3 --ntasks-per-node=2 --gres=gpu:2: two nodes (2 + 1 tasks), two GPUs each.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(3),
            ntasks_per_node: Some(2),
            gpus_per_node: Some(2),
            ..req()
        },
    );
    assert_eq!(layout(&t), [2, 1]);
    assert_eq!(t[2].2.len(), 2, "the lone task has its node's two GPUs");
    // -n 5 --ntasks-per-node=4 --gpus-per-task=1: two nodes, 3 + 2 (as srun lays them out).
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(5),
            ntasks_per_node: Some(4),
            gpus_per_task: Some(1),
            ..req()
        },
    );
    assert_eq!(layout(&t), [3, 2]);
    // -N 2 -n 3 --gres=gpu:2: the exact node count, tasks 2 + 1.
    let t = run(
        &s,
        JobRequest {
            min_nodes: Some(2),
            ntasks: Some(3),
            gpus_per_node: Some(2),
            ..req()
        },
    );
    assert_eq!(layout(&t), [2, 1]);
}

#[test]
fn cpus_bound_how_many_tasks_a_node_holds() {
    let s = cluster(8);
    // -n 12 --gres=gpu:1 on 8-CPU nodes: 8 + 4 tasks, each node one GPU shared by its tasks.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(12),
            gpus_per_node: Some(1),
            ..req()
        },
    );
    assert_eq!(layout(&t), [8, 4]);
    assert!(t.iter().all(|x| x.2.len() == 1));
    // -c 4: two tasks per node.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(6),
            cpus_per_task: Some(4),
            gpus_per_node: Some(1),
            ..req()
        },
    );
    assert_eq!(layout(&t), [2, 2, 2]);
}

#[test]
fn gpus_for_the_job_with_a_task_count() {
    let s = cluster(224);
    // --gpus=8 -n 4: two GPUs per task.
    let t = run(
        &s,
        JobRequest {
            gpus: Some(8),
            ntasks: Some(4),
            ..req()
        },
    );
    assert!(t.iter().all(|x| x.2.len() == 2), "{t:?}");
    // --gpus=3 -n 2: one node and three GPUs for the two tasks (split 2 + 1: tasks share
    // GPUs only when they outnumber them).
    let t = run(
        &s,
        JobRequest {
            gpus: Some(3),
            ntasks: Some(2),
            ..req()
        },
    );
    assert_eq!(layout(&t), [2]);
    assert_eq!((t[0].2.len(), t[1].2.len()), (2, 1), "{t:?}");
    // --gpus=2 -n 4: four tasks on two GPUs.
    let t = run(
        &s,
        JobRequest {
            gpus: Some(2),
            ntasks: Some(4),
            ..req()
        },
    );
    assert_eq!(layout(&t), [4]);
    assert!(t.iter().all(|x| x.2 == t[0].2 && x.2.len() == 2), "{t:?}");
}

#[test]
fn gpus_per_task_with_and_without_a_node_count() {
    let s = cluster(224);
    // -n 3 --gpus-per-task=2: one node, two GPUs each, none shared.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(3),
            gpus_per_task: Some(2),
            ..req()
        },
    );
    assert_eq!(layout(&t), [3]);
    let mut all: Vec<u32> = t.iter().flat_map(|x| x.2.clone()).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 6);
    // -N 3 -n 6 --gpus-per-task=1: three nodes, two tasks each.
    let t = run(
        &s,
        JobRequest {
            min_nodes: Some(3),
            ntasks: Some(6),
            gpus_per_task: Some(1),
            ..req()
        },
    );
    assert_eq!(layout(&t), [2, 2, 2]);
    // -n 12 --gpus-per-task=1: more than one node holds: 8 + 4.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(12),
            gpus_per_task: Some(1),
            ..req()
        },
    );
    assert_eq!(layout(&t), [8, 4]);
}

#[test]
fn nodelist_nodes_are_always_in_the_allocation() {
    let s = cluster(224);
    let nodes = |t: &[(String, u32, Vec<u32>)]| {
        let mut v: Vec<String> = t.iter().map(|x| x.0.clone()).collect();
        v.dedup();
        v
    };
    // -w gpu003 -n 1
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(1),
            nodelist: vec!["gpu003".into()],
            ..req()
        },
    );
    assert_eq!(nodes(&t), ["gpu003"]);
    // -w gpu[001,003] -n 2: both, one task each.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(2),
            nodelist: vec!["gpu001".into(), "gpu003".into()],
            ..req()
        },
    );
    assert_eq!(nodes(&t), ["gpu001", "gpu003"]);
    // -w gpu004 -n 12 --gpus-per-task=1: gpu004 takes what it holds, a neighbour the rest.
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(12),
            gpus_per_task: Some(1),
            nodelist: vec!["gpu004".into()],
            ..req()
        },
    );
    assert_eq!(layout(&t), [4, 8]);
    assert!(nodes(&t).contains(&"gpu004".to_string()));
    assert_eq!(t.len(), 12, "no unit beyond the twelve tasks");
    // -w gpu002 -N 3: gpu002 and two more.
    let t = run(
        &s,
        JobRequest {
            min_nodes: Some(3),
            gpus_per_node: Some(8),
            nodelist: vec!["gpu002".into()],
            ..req()
        },
    );
    assert_eq!(nodes(&t).len(), 3);
    assert!(nodes(&t).contains(&"gpu002".to_string()));
    // -w gpu[001-002] alone: both nodes, one task each (sbatch raises the node count).
    let t = run(
        &s,
        JobRequest {
            nodelist: vec!["gpu001".into(), "gpu002".into()],
            ..req()
        },
    );
    assert_eq!(nodes(&t), ["gpu001", "gpu002"]);
}

#[test]
fn a_nodelist_that_cannot_be_met_says_why() {
    let s = cluster(224);
    // A node that is not in the partition: never.
    let p = refused(
        &s,
        JobRequest {
            ntasks: Some(1),
            nodelist: vec!["gpu099".into()],
            ..req()
        },
    );
    assert_eq!(p.reason, Reason::BadConstraints);
    assert_eq!(
        p.message,
        "nodelist: node gpu099 is not a node of partition gpu"
    );
    // More named nodes than the job may use.
    let p = refused(
        &s,
        JobRequest {
            min_nodes: Some(1),
            nodelist: vec!["gpu001".into(), "gpu002".into()],
            ..req()
        },
    );
    assert_eq!(p.reason, Reason::BadConstraints);
    assert!(
        p.message.contains("nodelist names 2 nodes"),
        "{}",
        p.message
    );
    // A named node too small for its part of the job.
    let p = refused(
        &s,
        JobRequest {
            min_nodes: Some(1),
            gpus_per_node: Some(8),
            cpus_per_task: Some(300),
            nodelist: vec!["gpu001".into()],
            ..req()
        },
    );
    assert_eq!(p.reason, Reason::BadConstraints);
    // A named node that is busy: the job waits for it.
    let mut busy = s.clone();
    busy.running.push(RunningJob {
        id: 9,
        partition: Some(0),
        start_time: NOW - 10,
        time_limit: Some(3600),
        exclusive: true,
        tasks: vec![TaskAlloc {
            node: 0,
            gpus: (0..8).collect(),
            cpu_millis: 1000,
            memory_mib: 10,
        }],
        ..Default::default()
    });
    let p = refused(
        &busy,
        JobRequest {
            ntasks: Some(1),
            gpus_per_node: Some(1),
            nodelist: vec!["gpu001".into()],
            ..req()
        }
        .time(600),
    );
    assert_eq!(p.reason, Reason::Resources);
    assert_eq!(p.start_estimate, Some(NOW - 10 + 3600));
}

#[test]
fn excluded_nodes_are_never_used() {
    let s = cluster(224);
    let t = run(
        &s,
        JobRequest {
            ntasks: Some(1),
            exclude: vec!["gpu001".into()],
            ..req()
        },
    );
    assert_eq!(t[0].0, "gpu002");
    let t = run(
        &s,
        JobRequest {
            min_nodes: Some(2),
            gpus_per_node: Some(8),
            exclude: vec!["gpu001".into(), "gpu003".into()],
            ..req()
        },
    );
    let names: Vec<&str> = t.iter().map(|x| x.0.as_str()).collect();
    assert_eq!(names, ["gpu002", "gpu004"]);
    let p = refused(
        &s,
        JobRequest {
            min_nodes: Some(4),
            exclude: vec!["gpu004".into()],
            ..req()
        },
    );
    assert_eq!(p.reason, Reason::BadConstraints);
    assert_eq!(
        p.message,
        "nodes: 4 requested, 3 of partition gpu's 4 nodes match not excluded (gpu004)"
    );
}

/// One GPU of `node` held by a running job of `user`.
fn held_by(s: &mut Snapshot, id: JobId, node: NodeId, user: Option<&str>, exclusive_user: bool) {
    s.running.push(RunningJob {
        id,
        partition: Some(0),
        start_time: NOW - 10,
        time_limit: Some(3600),
        exclusive_user,
        user: user.map(str::to_string),
        tasks: vec![TaskAlloc {
            node,
            gpus: vec![0],
            cpu_millis: 1000,
            memory_mib: 10,
        }],
        ..Default::default()
    });
}

fn start_of(s: &Snapshot, jobs: Vec<PendingJob>) -> Decisions {
    let mut s = s.clone();
    s.pending = jobs;
    schedule(&s, NOW, &Config::default())
}

fn job(id: JobId, user: Option<&str>, exclusive_user: bool) -> PendingJob {
    let mut j = PendingJob::new(id, NOW - id as i64, JobRequest::gpus(1).time(600));
    j.user = user.map(str::to_string);
    j.request.exclusive_user = exclusive_user;
    j
}

fn node_of(d: &Decisions, job: JobId) -> NodeId {
    d.starts
        .iter()
        .find(|x| x.job == job)
        .expect("started")
        .nodes[0]
}

#[test]
fn exclusive_user_nodes_take_only_that_users_jobs() {
    let mut s = cluster(224);
    // alice's --exclusive=user job holds one GPU of gpu001.
    held_by(&mut s, 9, 0, Some("alice"), true);
    let d = start_of(
        &s,
        vec![job(1, Some("bob"), false), job(2, Some("alice"), false)],
    );
    assert_ne!(node_of(&d, 1), 0, "bob's job stays off alice's node");
    assert_eq!(node_of(&d, 2), 0, "alice's own job may share it");
    // A job of no known user stays off it too.
    let d = start_of(&s, vec![job(3, None, false)]);
    assert_ne!(node_of(&d, 3), 0);
}

#[test]
fn an_exclusive_user_job_goes_where_only_its_user_runs() {
    let mut s = cluster(224);
    held_by(&mut s, 8, 0, Some("bob"), false);
    held_by(&mut s, 9, 1, Some("alice"), false);
    // alice --exclusive=user: not bob's gpu001, but her own gpu002.
    let d = start_of(&s, vec![job(1, Some("alice"), true)]);
    assert_eq!(node_of(&d, 1), 1);
    // Started in the same cycle: bob's job after it avoids its node, alice's may join.
    let mut joins = job(1, Some("alice"), false);
    joins.request.nodelist = vec!["gpu002".into()];
    let mut barred = job(5, Some("bob"), false);
    barred.request.nodelist = vec!["gpu002".into()];
    barred.submit_time = NOW;
    let d = start_of(
        &s,
        vec![
            job(3, Some("alice"), true),
            job(2, Some("bob"), false),
            joins,
            barred,
        ],
    );
    assert_eq!(node_of(&d, 3), 1);
    assert_ne!(node_of(&d, 2), 1);
    assert_eq!(node_of(&d, 1), 1);
    assert!(
        d.pending.iter().any(|p| p.job == 5),
        "bob cannot join: {:?}",
        d.starts
    );
    // An --exclusive=user job of no known user shares with no one: an idle node, whole.
    let d = start_of(&s, vec![job(4, None, true)]);
    let st = d.starts.iter().find(|x| x.job == 4).unwrap();
    assert!(st.exclusive);
    assert!(st.nodes[0] >= 2);
}

#[test]
fn an_exclusive_user_job_waits_while_every_node_has_other_users() {
    let mut s = cluster(224);
    for n in 0..4 {
        held_by(&mut s, 10 + n as u64, n, Some("bob"), false);
    }
    let d = start_of(&s, vec![job(1, Some("alice"), true)]);
    assert!(d.starts.is_empty());
    assert_eq!(d.pending[0].reason, Reason::Resources);
    // Bob's own --exclusive=user job goes anywhere.
    let d = start_of(&s, vec![job(2, Some("bob"), true)]);
    assert_eq!(d.starts.len(), 1);
}

#[test]
fn occupancy_forgets_a_users_lock_when_the_job_ends() {
    let mut s = cluster(224);
    held_by(&mut s, 9, 0, Some("alice"), true);
    let prep = Prepared::new(&s.nodes, &s.partitions);
    let mut occ = Occupancy::new(&prep, &s);
    s.pending = vec![job(1, Some("bob"), false)];
    let d = schedule_incremental(&prep, &mut occ, &s, NOW, &Config::default());
    assert_ne!(d.starts[0].nodes[0], 0);
    occ.remove_job(&prep, 9);
    s.running.clear();
    let d = schedule_incremental(&prep, &mut occ, &s, NOW, &Config::default());
    assert_eq!(d.starts[0].nodes[0], 0, "gpu001 is bob's to use again");
    assert_eq!(d, schedule(&s, NOW, &Config::default()));
}

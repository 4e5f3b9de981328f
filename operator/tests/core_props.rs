//! Property tests of the scheduling core over random clusters and queues: no resource is
//! given twice, gangs start whole or not at all, a gang that fits one leaf is never spread,
//! exclusive nodes are not shared, backfilled jobs never delay a reservation, and decisions
//! do not depend on the order of the input.

use std::collections::{BTreeMap, BTreeSet};

use muster_operator::core::shape::{Mode, Res, normalize};
use muster_operator::core::*;
use proptest::prelude::*;

const NOW: i64 = 10_000_000;
const LEAF: &str = "muster.dev/leaf";

/// What a random job asks for.
#[derive(Clone, Debug)]
struct JobGen {
    kind: u8,
    a: u32,
    b: u32,
    exclusive: bool,
    minutes: u32,
    cpus: Option<u32>,
    mem_gib: Option<u32>,
    typed: bool,
    /// The user (`None`: unknown) and `--exclusive=user`.
    user: Option<u8>,
    exclusive_user: bool,
    /// `--nodelist` and `--exclude` as node numbers (names `gpu001`…).
    nodelist: Option<u8>,
    exclude: Option<u8>,
}

fn job_gen() -> impl Strategy<Value = JobGen> {
    (
        (
            0u8..9,
            1u32..=6,
            1u32..=4,
            prop::bool::weighted(0.2),
            1u32..=240,
            prop::option::weighted(0.3, 1u32..=64),
            prop::option::weighted(0.3, 1u32..=256),
            prop::bool::weighted(0.15),
        ),
        (
            prop::option::weighted(0.8, 0u8..3),
            prop::bool::weighted(0.2),
            prop::option::weighted(0.1, 1u8..=20),
            prop::option::weighted(0.1, 1u8..=20),
        ),
    )
        .prop_map(
            |(
                (kind, a, b, exclusive, minutes, cpus, mem_gib, typed),
                (user, exclusive_user, nodelist, exclude),
            )| JobGen {
                kind,
                a,
                b,
                exclusive,
                minutes,
                cpus,
                mem_gib,
                typed,
                user,
                exclusive_user,
                nodelist,
                exclude,
            },
        )
}

/// The user name of a generated job.
fn user(g: &JobGen) -> Option<String> {
    g.user.map(|u| format!("user{u}"))
}

fn request(g: &JobGen) -> JobRequest {
    let mut r = match g.kind {
        0 => JobRequest::gpus(g.a.min(4)),
        1 => JobRequest::gpus(g.a + 6),
        2 => JobRequest::nodes(g.a, [1, 2, 4, 8][g.b as usize % 4]),
        3 => JobRequest::tasks(g.a * 2, g.b.min(2)),
        4 => JobRequest {
            min_nodes: Some(g.a.div_ceil(2)),
            ntasks_per_node: Some(g.b.min(2)),
            gpus_per_task: Some(1),
            ..Default::default()
        },
        // --ntasks with --gres=gpu:M (packed tasks, M GPUs per node, shared when fewer).
        6 => JobRequest {
            ntasks: Some(g.a + g.b),
            gpus_per_node: Some([1, 2, 4][g.b as usize % 3]),
            ntasks_per_node: g.a.is_multiple_of(3).then_some(g.b + 1),
            ..Default::default()
        },
        // --gpus=G --ntasks=N, N not always dividing G.
        7 => JobRequest {
            gpus: Some(g.a + 1),
            ntasks: Some(g.b + 1),
            ..Default::default()
        },
        // A node range and a task count with GPUs per node.
        8 => JobRequest {
            min_nodes: Some(1),
            max_nodes: Some(g.b),
            ntasks: Some(g.a + 1),
            gpus_per_node: Some(g.b.min(2)),
            ..Default::default()
        },
        _ => JobRequest::nodes(1, 0),
    };
    r.exclusive = g.exclusive;
    r.exclusive_user = g.exclusive_user;
    r.nodelist = g
        .nodelist
        .map(|n| format!("gpu{n:03}"))
        .into_iter()
        .collect();
    r.exclude = g
        .exclude
        .filter(|x| Some(*x) != g.nodelist)
        .map(|n| format!("gpu{n:03}"))
        .into_iter()
        .collect();
    r.cpus_per_task = g.cpus;
    r.memory = g
        .mem_gib
        .map(|m| MemoryRequest::PerNode(u64::from(m) * 1024));
    if g.typed {
        r.gpu_type = Some("a100".into());
    }
    r.time(u64::from(g.minutes) * 60)
}

/// A random cluster: leaves × nodes, a tenth of the nodes A100s, some nodes without a leaf
/// label, some down, some GPUs unhealthy.
#[derive(Clone, Debug)]
struct World {
    leaves: u32,
    per_leaf: u32,
    gpus: u32,
    layout: u8,
    flaws: Vec<u8>,
    running: Vec<(JobGen, u32)>,
    pending: Vec<JobGen>,
}

fn world() -> impl Strategy<Value = World> {
    (
        1u32..=4,
        1u32..=5,
        prop::sample::select(vec![4u32, 8]),
        0u8..3,
        prop::collection::vec(any::<u8>(), 20),
        prop::collection::vec((job_gen(), 0u32..100), 0..12),
        prop::collection::vec(job_gen(), 0..20),
    )
        .prop_map(
            |(leaves, per_leaf, gpus, layout, flaws, running, pending)| World {
                leaves,
                per_leaf,
                gpus,
                layout,
                flaws,
                running,
                pending,
            },
        )
}

fn build(w: &World, cfg: &Config) -> Snapshot {
    let mut spec = ClusterSpec::tree("prop", 1, w.leaves, w.per_leaf, w.gpus);
    spec.node.layout = [
        cluster_spec::GpuLayout::Dgx,
        cluster_spec::GpuLayout::Pcie,
        cluster_spec::GpuLayout::None,
    ][w.layout as usize];
    spec.node.cpus = 64;
    spec.node.memory = cluster_spec::MemQuantity(512 * 1024);
    let mut nodes = spec.nodes().unwrap();
    for (i, n) in nodes.iter_mut().enumerate() {
        let f = w.flaws[i % w.flaws.len()];
        if i % 10 == 3 {
            for g in &mut n.gpus {
                g.model = "NVIDIA A100-SXM4-80GB".into();
            }
        }
        match f % 16 {
            0 => {
                n.labels.remove(LEAF);
            }
            1 => n.ready = false,
            2 => {
                if let Some(g) = n.gpus.get_mut((f / 16) as usize % w.gpus as usize) {
                    g.healthy = false;
                }
            }
            _ => {}
        }
    }
    let mut s = Snapshot::with_nodes(nodes, spec.topology());
    // Running jobs: placed by the core itself a while ago, started at various times.
    s.pending = w
        .running
        .iter()
        .enumerate()
        .map(|(i, (g, _))| {
            let mut j = PendingJob::new(1000 + i as u64, NOW - 5000, request(g));
            j.user = user(g);
            j
        })
        .collect();
    let fill = Config {
        max_reservations: 0,
        ..cfg.clone()
    };
    let d = schedule(&s, NOW - 5000, &fill);
    s.apply(&d, NOW - 5000);
    s.pending.clear();
    for (r, (_, back)) in s.running.iter_mut().zip(&w.running) {
        r.start_time = NOW - 60 * i64::from(*back) - 1;
    }
    s.pending = w
        .pending
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut j = PendingJob::new(i as u64 + 1, NOW - 60 * i as i64, request(g));
            j.namespace = format!("team-{}", i % 3);
            j.user = user(g);
            j
        })
        .collect();
    s
}

/// Every GPU, CPU and MiB held on each node by running jobs (that are not being stopped
/// right now) plus the starts of `d`; panics on a GPU given twice or an unhealthy GPU given.
fn check_no_overallocation(s: &Snapshot, d: &Decisions) {
    let stopping: BTreeSet<JobId> = d.stops.iter().map(|x| x.job).collect();
    let mut gpus: BTreeMap<(NodeId, u32), JobId> = BTreeMap::new();
    let mut cpu: BTreeMap<NodeId, u64> = BTreeMap::new();
    let mut mem: BTreeMap<NodeId, u64> = BTreeMap::new();
    let mut jobs_on: BTreeMap<NodeId, BTreeSet<JobId>> = BTreeMap::new();
    let mut exclusive: BTreeSet<(NodeId, JobId)> = BTreeSet::new();
    let mut add = |job: JobId, node: NodeId, g: &[u32], c: u64, m: u64, ex: bool, new: bool| {
        for &x in g {
            if let Some(other) = gpus.insert((node, x), job) {
                assert_eq!(
                    other, job,
                    "GPU {x} of node {node} given to {other} and {job}"
                );
            }
            if new {
                let gpu = s.nodes[node as usize]
                    .gpus
                    .iter()
                    .find(|y| y.index == x)
                    .unwrap();
                assert!(
                    gpu.healthy,
                    "job {job} got unhealthy GPU {x} on node {node}"
                );
                assert!(
                    s.nodes[node as usize].schedulable(),
                    "job {job} placed on down node {node}"
                );
            }
        }
        *cpu.entry(node).or_default() += c;
        *mem.entry(node).or_default() += m;
        jobs_on.entry(node).or_default().insert(job);
        if ex {
            exclusive.insert((node, job));
        }
    };
    for r in &s.running {
        let _ = &stopping;
        for t in &r.tasks {
            add(
                r.id,
                t.node,
                &t.gpus,
                t.cpu_millis,
                t.memory_mib,
                r.exclusive,
                false,
            );
        }
    }
    for st in &d.starts {
        for t in &st.tasks {
            add(
                st.job,
                t.node,
                &t.gpus,
                t.cpu_millis,
                t.memory_mib,
                st.exclusive,
                true,
            );
        }
    }
    for (&n, &c) in &cpu {
        assert!(
            c <= s.nodes[n as usize].cpu_millis,
            "node {n}: {c} millicores allocated"
        );
    }
    for (&n, &m) in &mem {
        assert!(
            m <= s.nodes[n as usize].memory_mib,
            "node {n}: {m} MiB allocated"
        );
    }
    for (n, j) in exclusive {
        assert_eq!(
            jobs_on[&n].len(),
            1,
            "exclusive job {j} shares node {n} with {:?}",
            jobs_on[&n]
        );
    }
    // --exclusive=user: a node with such a job has jobs of that user only.
    let mut user_of: BTreeMap<JobId, Option<String>> = BTreeMap::new();
    let mut locks: BTreeSet<(NodeId, JobId)> = BTreeSet::new();
    for r in &s.running {
        user_of.insert(r.id, r.user.clone());
        if r.exclusive_user {
            locks.extend(r.tasks.iter().map(|t| (t.node, r.id)));
        }
    }
    for st in &d.starts {
        let job = s.pending.iter().find(|j| j.id == st.job).unwrap();
        user_of.insert(st.job, job.user.clone());
        if job.request.exclusive_user && !st.exclusive {
            assert!(job.user.is_some(), "job {} of no user shares nodes", st.job);
            locks.extend(st.tasks.iter().map(|t| (t.node, st.job)));
        }
        // --nodelist nodes are in, --exclude nodes are out.
        let names: BTreeSet<&str> = st
            .nodes
            .iter()
            .map(|&n| s.nodes[n as usize].name.as_str())
            .collect();
        for w in &job.request.nodelist {
            assert!(names.contains(w.as_str()), "job {} lacks {w}", st.job);
        }
        for x in &job.request.exclude {
            assert!(
                !names.contains(x.as_str()),
                "job {} on excluded {x}",
                st.job
            );
        }
    }
    for (n, j) in locks {
        for other in &jobs_on[&n] {
            assert!(
                user_of[other].is_some() && user_of[other] == user_of[&j],
                "node {n}: job {other} of {:?} beside exclusive=user job {j} of {:?}",
                user_of[other],
                user_of[&j]
            );
        }
    }
}

/// Whether some job (running or pending) keeps nodes to its user: estimates do not see that
/// rule (ARCHITECTURE.md), so checks that replay estimates skip such worlds.
fn any_user_rule(s: &Snapshot) -> bool {
    s.running.iter().any(|r| r.exclusive_user)
        || s.pending
            .iter()
            .any(|p| p.request.exclusive_user && !p.request.exclusive)
}

/// Tasks and GPUs of a start match what the job asked for.
fn check_whole_gang(s: &Snapshot, d: &Decisions) {
    let seen: BTreeSet<JobId> = d
        .starts
        .iter()
        .map(|x| x.job)
        .chain(d.pending.iter().map(|p| p.job))
        .collect();
    assert_eq!(
        seen.len(),
        d.starts.len() + d.pending.len(),
        "a job decided twice"
    );
    assert_eq!(
        seen.len(),
        s.pending.len(),
        "a pending job without a decision"
    );
    for st in &d.starts {
        let job = s.pending.iter().find(|j| j.id == st.job).unwrap();
        let dm = normalize(&job.request, &s.partitions[0]).unwrap();
        let nodes: BTreeSet<NodeId> = st.tasks.iter().map(|t| t.node).collect();
        assert_eq!(nodes.len(), st.nodes.len());
        let n = nodes.len() as u32;
        assert!(
            n >= dm.min_nodes && n <= dm.max_nodes,
            "job {}: {n} nodes",
            st.job
        );
        let gpus = distinct_gpus(st.tasks.iter().map(|t| (t.node, t.gpus.as_slice()))) as u32;
        match dm.mode {
            Mode::Bundles { tasks_per_node } => {
                assert_eq!(st.tasks.len() as u32, n * tasks_per_node, "job {}", st.job);
                assert_eq!(gpus, n * dm.unit.gpus, "job {}", st.job);
            }
            Mode::Units {
                total,
                merge,
                tasks_per_unit,
                ..
            } => {
                let tasks = if merge { n } else { total * tasks_per_unit };
                assert_eq!(st.tasks.len() as u32, tasks, "job {}", st.job);
                assert_eq!(
                    gpus,
                    total * dm.unit.gpus + n * dm.node.gpus,
                    "job {}",
                    st.job
                );
            }
        }
        // Every task has GPUs when the job has (shared when they outnumber the node's).
        if dm.unit.gpus > 0 || dm.node.gpus > 0 {
            assert!(
                st.tasks.iter().all(|t| !t.gpus.is_empty()),
                "job {}",
                st.job
            );
        }
        for (i, t) in st.tasks.iter().enumerate() {
            assert_eq!(t.rank as usize, i);
            assert_eq!(st.nodes[t.node_rank as usize], t.node);
        }
        if let Some(ty) = &job.request.gpu_type {
            for t in &st.tasks {
                for g in &t.gpus {
                    let gpu = s.nodes[t.node as usize]
                        .gpus
                        .iter()
                        .find(|x| x.index == *g)
                        .unwrap();
                    assert!(gpu.model.to_lowercase().contains(ty), "wrong GPU type");
                }
            }
        }
    }
}

/// Without reservations, replays the starts in order and checks that a job that could
/// have fit under one leaf was not spread over several.
fn check_single_leaf_fits_stay_whole(s: &Snapshot, d: &Decisions) {
    let part = &s.partitions[0];
    // Free resources now, by node.
    let mut free: Vec<(Res, BTreeSet<u32>, bool)> = s
        .nodes
        .iter()
        .map(|n| {
            (
                Res {
                    gpus: 0,
                    cpu: n.cpu_millis,
                    mem: n.memory_mib,
                },
                n.gpus
                    .iter()
                    .filter(|g| g.healthy)
                    .map(|g| g.index)
                    .collect(),
                true,
            )
        })
        .collect();
    fn take(
        free: &mut [(Res, BTreeSet<u32>, bool)],
        node: NodeId,
        g: &[u32],
        c: u64,
        m: u64,
        ex: bool,
    ) {
        let f = &mut free[node as usize];
        for x in g {
            f.1.remove(x);
        }
        f.0.cpu = f.0.cpu.saturating_sub(c);
        f.0.mem = f.0.mem.saturating_sub(m);
        f.2 = false;
        if ex {
            f.1.clear();
            f.0 = Res::default();
        }
    }
    for r in &s.running {
        for t in &r.tasks {
            take(
                &mut free,
                t.node,
                &t.gpus,
                t.cpu_millis,
                t.memory_mib,
                r.exclusive,
            );
        }
    }
    let leaf_of = |n: NodeId| s.nodes[n as usize].labels.get(LEAF).cloned();
    for st in &d.starts {
        let job = s.pending.iter().find(|j| j.id == st.job).unwrap();
        let dm = normalize(&job.request, part).unwrap();
        let placed_by_rules =
            !job.request.nodelist.is_empty() || !job.request.exclude.is_empty() || any_user_rule(s);
        if st.leaves > 1 && job.request.gpu_type.is_none() && !placed_by_rules {
            // Capacity of each labelled leaf for this job at this point.
            let mut per_leaf: BTreeMap<String, (u64, u32)> = BTreeMap::new();
            for (i, n) in s.nodes.iter().enumerate() {
                if !n.schedulable() {
                    continue;
                }
                let Some(l) = leaf_of(i as NodeId) else {
                    continue;
                };
                let f = &free[i];
                let total = Res {
                    gpus: n.gpus.iter().filter(|g| g.healthy).count() as u32,
                    cpu: n.cpu_millis,
                    mem: n.memory_mib,
                };
                let avail = Res {
                    gpus: f.1.len() as u32,
                    ..f.0
                };
                let u = dm.units_fitting(avail, total, f.2);
                let e = per_leaf.entry(l).or_default();
                if u > 0 {
                    e.0 += u64::from(u);
                    e.1 += 1;
                }
            }
            for (l, (units, nodes)) in per_leaf {
                let fits = units >= u64::from(dm.need())
                    && nodes >= dm.min_nodes
                    && match dm.mode {
                        Mode::Bundles { .. } => true,
                        Mode::Units { max_per_node, .. } => {
                            u64::from(max_per_node) * u64::from(dm.max_nodes.min(nodes))
                                >= u64::from(dm.need())
                        }
                    };
                prop_assert_no_spread(fits, st, &l);
            }
        }
        for t in &st.tasks {
            take(
                &mut free,
                t.node,
                &t.gpus,
                t.cpu_millis,
                t.memory_mib,
                st.exclusive,
            );
        }
    }
}

fn prop_assert_no_spread(fits: bool, st: &Start, leaf: &str) {
    assert!(
        !fits,
        "job {} spans {} leaves although leaf {leaf} could hold it whole",
        st.job, st.leaves
    );
}

/// At the top reservation's time, with every job that started now still running until its
/// limit, the reserved job can start.
fn check_reservation_not_delayed(s: &Snapshot, d: &Decisions, cfg: &Config) {
    let Some(r) = d.reservations.first() else {
        return;
    };
    if any_user_rule(s) {
        return;
    }
    let mut later = s.clone();
    later.apply(d, NOW);
    let t = r.start_time;
    later.running.retain(|j| {
        let stopping = d.stops.iter().any(|x| x.job == j.id)
            || d.preemptions
                .iter()
                .any(|p| p.victims.iter().any(|v| v.job == j.id));
        !stopping && j.end_time().is_none_or(|e| e > t)
    });
    let job = later
        .pending
        .iter()
        .find(|j| j.id == r.job)
        .unwrap()
        .clone();
    later.pending = vec![job];
    let d2 = schedule(&later, t, cfg);
    assert!(
        d2.starts.iter().any(|x| x.job == r.job),
        "reserved job {} cannot start at its reserved time {}: {:?}",
        r.job,
        t - NOW,
        d2.pending
    );
}

/// Decisions as names, so that snapshots with renumbered nodes compare.
fn canonical(s: &Snapshot, d: &Decisions) -> String {
    let name = |n: NodeId| s.nodes[n as usize].name.clone();
    let mut out = String::new();
    for st in &d.starts {
        out += &format!(
            "start {} {:?} {}\n",
            st.job,
            st.nodes.iter().map(|&n| name(n)).collect::<Vec<_>>(),
            st.leaves
        );
        for t in &st.tasks {
            out += &format!(
                "  {} {} {:?} {} {}\n",
                t.rank,
                name(t.node),
                t.gpus,
                t.cpu_millis,
                t.memory_mib
            );
        }
    }
    for r in &d.reservations {
        out += &format!(
            "reserve {} {} {:?}\n",
            r.job,
            r.start_time,
            r.nodes.iter().map(|&n| name(n)).collect::<Vec<_>>()
        );
    }
    out += &format!("{:?}\n{:?}\n{:?}\n", d.preemptions, d.stops, d.pending);
    out
}

fn cfg_plain() -> Config {
    Config {
        max_reservations: 0,
        preemption: false,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn nothing_is_overallocated_and_gangs_are_whole(w in world()) {
        let cfg = Config::default();
        let s = build(&w, &cfg);
        let d = schedule(&s, NOW, &cfg);
        check_no_overallocation(&s, &d);
        check_whole_gang(&s, &d);
    }

    #[test]
    fn a_gang_that_fits_one_leaf_is_not_spread(w in world()) {
        let cfg = cfg_plain();
        let s = build(&w, &cfg);
        let d = schedule(&s, NOW, &cfg);
        check_single_leaf_fits_stay_whole(&s, &d);
    }

    #[test]
    fn backfill_never_delays_the_top_reservation(w in world()) {
        let cfg = Config::default();
        let s = build(&w, &cfg);
        let d = schedule(&s, NOW, &cfg);
        check_reservation_not_delayed(&s, &d, &cfg);
    }

    #[test]
    fn decisions_are_deterministic_and_order_free(w in world(), rot in 0usize..50) {
        let cfg = Config::default();
        let s = build(&w, &cfg);
        let d = schedule(&s, NOW, &cfg);
        prop_assert_eq!(&schedule(&s, NOW, &cfg), &d);
        // Same jobs in another order.
        let mut p = s.clone();
        let k = rot % p.pending.len().max(1);
        p.pending.rotate_left(k);
        p.running.reverse();
        prop_assert_eq!(&schedule(&p, NOW, &cfg), &d);
        // Same nodes in another order (ids renumbered).
        let mut q = s.clone();
        let n = q.nodes.len();
        let perm: Vec<usize> = (0..n).map(|i| (i * 7 + rot) % n).collect();
        if perm.iter().collect::<BTreeSet<_>>().len() == n {
            let mut inv = vec![0u32; n];
            for (new, &old) in perm.iter().enumerate() {
                inv[old] = new as u32;
            }
            q.nodes = std::sync::Arc::new(perm.iter().map(|&old| s.nodes[old].clone()).collect());
            for r in &mut q.running {
                for t in &mut r.tasks {
                    t.node = inv[t.node as usize];
                }
            }
            let dq = schedule(&q, NOW, &cfg);
            prop_assert_eq!(canonical(&q, &dq), canonical(&s, &d));
        }
    }
}

/// All-exclusive whole-node gangs: every reservation (not only the top one) still fits at
/// its time when the jobs reserved before it hold their planned nodes.
#[derive(Clone, Debug)]
struct Gangs {
    leaves: u32,
    per_leaf: u32,
    running: Vec<(u32, u32, u32)>,
    pending: Vec<(u32, u32)>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_reservation_holds_for_exclusive_gangs(
        g in (1u32..=4, 2u32..=5,
              prop::collection::vec((1u32..=6, 1u32..=60, 0u32..=59), 0..8),
              prop::collection::vec((1u32..=8, 1u32..=120), 1..12))
            .prop_map(|(leaves, per_leaf, running, pending)| Gangs { leaves, per_leaf, running, pending })
    ) {
        let spec = ClusterSpec::tree("gangs", 1, g.leaves, g.per_leaf, 8);
        let mut s = Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology());
        let cfg = Config::default();
        s.pending = g.running.iter().enumerate().map(|(i, &(n, m, _))| {
            PendingJob::new(1000 + i as u64, NOW - 10_000, JobRequest::nodes(n, 8).exclusive().time(u64::from(m) * 60))
        }).collect();
        let d0 = schedule(&s, NOW - 10_000, &Config { max_reservations: 0, ..cfg.clone() });
        s.apply(&d0, NOW - 10_000);
        s.pending.clear();
        for (r, &(_, m, back)) in s.running.iter_mut().zip(&g.running) {
            r.start_time = NOW - 60 * i64::from(back.min(m - 1));
        }
        s.pending = g.pending.iter().enumerate().map(|(i, &(n, m))| {
            PendingJob::new(i as u64 + 1, NOW - i as i64, JobRequest::nodes(n, 8).exclusive().time(u64::from(m) * 60))
        }).collect();
        let d = schedule(&s, NOW, &cfg);
        check_no_overallocation(&s, &d);
        let mut after = s.clone();
        after.apply(&d, NOW);
        for (k, r) in d.reservations.iter().enumerate() {
            let t = r.start_time;
            let mut at = after.clone();
            at.running.retain(|j| j.end_time().is_none_or(|e| e > t));
            // Earlier reservations that still run at t hold their nodes.
            for (i, e) in d.reservations[..k].iter().enumerate() {
                let job = &after.pending.iter().find(|j| j.id == e.job).unwrap();
                let lim = job.request.time_limit.and_then(|x| x.seconds()).unwrap() as i64;
                if e.start_time <= t && t < e.start_time + lim {
                    at.running.push(RunningJob {
                        id: 90_000 + i as u64,
                        start_time: e.start_time,
                        time_limit: Some(lim as u64),
                        exclusive: true,
                        tasks: e.nodes.iter().map(|&n| TaskAlloc { node: n, ..Default::default() }).collect(),
                        ..Default::default()
                    });
                }
            }
            let job = after.pending.iter().find(|j| j.id == r.job).unwrap().clone();
            at.pending = vec![job];
            let d2 = schedule(&at, t, &cfg);
            prop_assert!(d2.starts.iter().any(|x| x.job == r.job),
                "reservation {k} (job {}) at +{}s does not fit then: {:?}", r.job, t - NOW, d2.pending);
        }
    }
}

/// Seconds to the next cycle, jobs that end, arrivals `(job, high tier)`.
type Step = (u32, u8, Vec<(JobGen, bool)>);

/// A random history: cycles at increasing times, each followed by some jobs ending and new
/// ones arriving, in two partitions of different tiers over the same nodes (so preemption
/// and its grace times happen).
#[derive(Clone, Debug)]
struct History {
    world: World,
    /// Per step: seconds to the next cycle, how many running jobs end (oldest first by a
    /// rotation), arrivals (with their partition: 0 low, 1 high).
    steps: Vec<Step>,
}

fn history() -> impl Strategy<Value = History> {
    (
        world(),
        prop::collection::vec(
            (
                1u32..=3600,
                0u8..4,
                prop::collection::vec((job_gen(), prop::bool::weighted(0.3)), 0..4),
            ),
            1..8,
        ),
    )
        .prop_map(|(world, steps)| History { world, steps })
}

/// The snapshot a history starts from: its world in two partitions of different tiers over
/// the same nodes (the low one preemptible with a 90 s grace time).
fn history_start(h: &History) -> Snapshot {
    let mut s = build(&h.world, &cfg_plain());
    s.partitions[0].preempt_mode = PreemptMode::Requeue;
    s.partitions[0].grace_time_secs = 90;
    let mut high = s.partitions[0].clone();
    high.name = "high".into();
    high.priority_tier = 10;
    high.preempt_mode = PreemptMode::None;
    s.partitions.push(high);
    s
}

/// After a history step's cycle: the clock moves to `now`; jobs being stopped whose grace has
/// passed end, and the `ends` newest running jobs too (returned, for callers that keep an
/// occupancy); `arrivals` join the queue with ids from `next_id`.
fn history_step(
    s: &mut Snapshot,
    now: i64,
    ends: u8,
    arrivals: &[(JobGen, bool)],
    next_id: &mut JobId,
) -> Vec<JobId> {
    let mut gone: Vec<JobId> = s
        .running
        .iter()
        .filter(|j| j.stopping_since.is_some_and(|t| t + 90 <= now))
        .map(|j| j.id)
        .collect();
    let mut ids: Vec<JobId> = s.running.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    gone.extend(ids.iter().rev().take(usize::from(ends)));
    s.running.retain(|j| !gone.contains(&j.id));
    for (g, hi) in arrivals {
        *next_id += 1;
        let mut p = PendingJob::new(*next_id, now, request(g));
        p.user = user(g);
        p.partition = Some(u32::from(*hi));
        p.namespace = format!("team-{}", *next_id % 3);
        s.pending.push(p);
    }
    gone
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The simulator's path (an `Occupancy` kept between cycles and updated as jobs start,
    /// stop and end) decides exactly what a fresh cycle over the same snapshot decides.
    #[test]
    fn an_occupancy_kept_between_cycles_decides_like_a_fresh_cycle(h in history()) {
        let cfg = Config::default();
        let mut s = history_start(&h);
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let mut occ = Occupancy::new(&prep, &s);
        // The reference: future events derived from the node states in every cycle.
        let mut plain = Occupancy::new_uncached(&prep, &s);
        let mut now = NOW;
        let mut next_id = 5_000u64;
        for (dt, ends, arrivals) in &h.steps {
            let fresh = schedule_prepared(&prep, &s, now, &cfg);
            let inc = schedule_incremental(&prep, &mut occ, &s, now, &cfg);
            prop_assert_eq!(&inc, &fresh);
            prop_assert_eq!(&schedule_incremental(&prep, &mut plain, &s, now, &cfg), &fresh);
            // A second call sees the occupancy unchanged by the first.
            prop_assert_eq!(&schedule_incremental(&prep, &mut occ, &s, now, &cfg), &fresh);
            let before: BTreeSet<JobId> = s.running.iter().map(|j| j.id).collect();
            s.apply(&fresh, now);
            for j in &s.running {
                if !before.contains(&j.id) {
                    occ.add(&prep, &s, j);
                    plain.add(&prep, &s, j);
                } else if let Some(since) = j.stopping_since {
                    occ.set_stopping(&prep, j.id, since);
                    plain.set_stopping(&prep, j.id, since);
                }
            }
            prop_assert_eq!(occ.len(), s.running.len());
            now += i64::from(*dt);
            for id in history_step(&mut s, now, *ends, arrivals, &mut next_id) {
                occ.remove_job(&prep, id);
                plain.remove_job(&prep, id);
            }
        }
    }

    /// The operator's path: a `KeptOccupancy` that is only ever shown whole snapshots (the
    /// running list in any order, jobs gone, new, or changed — being stopped) decides
    /// exactly what a fresh cycle over the same snapshot decides.
    #[test]
    fn a_kept_occupancy_over_fresh_snapshots_decides_like_a_fresh_cycle(
        h in history(),
        rot in 0usize..50,
    ) {
        let cfg = Config::default();
        let mut s = history_start(&h);
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let mut kept = KeptOccupancy::new();
        let mut now = NOW;
        let mut next_id = 5_000u64;
        for (i, (dt, ends, arrivals)) in h.steps.iter().enumerate() {
            // The snapshot as the operator builds it: its running list in any order.
            if !s.running.is_empty() {
                let r = (rot + i) % s.running.len();
                s.running.rotate_left(r);
            }
            let fresh = schedule_prepared(&prep, &s, now, &cfg);
            prop_assert_eq!(&kept.schedule(&prep, &s, now, &cfg), &fresh);
            // Nothing changed: the same again.
            prop_assert_eq!(&kept.schedule(&prep, &s, now, &cfg), &fresh);
            s.apply(&fresh, now);
            now += i64::from(*dt);
            history_step(&mut s, now, *ends, arrivals, &mut next_id);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// `feasible::check` (what sbatch and admission refuse) and the cycle agree: a request it
    /// refuses the cycle can never start (BadConstraints), and one it accepts the cycle does
    /// not call impossible — on any cluster, with nodes down and GPUs unhealthy.
    #[test]
    fn feasibility_agrees_with_the_cycle(w in world(), g in job_gen(), scale in 1u32..=6) {
        let cfg = Config::default();
        let mut big = g.clone();
        big.a *= scale;
        big.cpus = big.cpus.map(|c| c * scale);
        big.mem_gib = big.mem_gib.map(|m| m * scale * scale);
        let empty = World { running: vec![], pending: vec![], ..w };
        let mut s = build(&empty, &cfg);
        let req = request(&big);
        s.pending = vec![PendingJob::new(1, NOW, req.clone())];
        let d = schedule(&s, NOW, &cfg);
        let refused = feasible::check(&req, &s.partitions[0], &s.nodes, None);
        let never = d.pending.iter().find(|p| p.reason == Reason::BadConstraints);
        prop_assert_eq!(
            refused.is_err(),
            never.is_some(),
            "check: {:?}, cycle: {:?}",
            refused,
            d.pending
        );
        if let (Err(e), Some(p)) = (refused, never) {
            // The cycle says the same, naming the resource.
            prop_assert_eq!(&p.message, &e.to_string());
        }
    }
}

/// Time limits of the order property's jobs (`None`: unlimited).
const LIMITS: [Option<u64>; 8] = [
    None,
    Some(600),
    Some(1_800),
    Some(3_600),
    Some(8 * 3_600),
    Some(86_400),
    Some(7 * 86_400),
    Some(40 * 86_400),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The short-limit credit's bounds (`priority`'s docs), on random queues of one-node jobs
    /// and two-node gangs submitted up to 12 days apart, for several credits: a job passes
    /// one submitted before it only with a larger short-limit factor (or the earlier one's was
    /// capped by an older gang) and less than the credit later, and a one-node job never
    /// passes a gang.
    #[test]
    fn the_short_limit_credit_is_bounded_and_one_node_jobs_never_pass_a_gang(
        jobs in prop::collection::vec((0u32..12 * 86_400, 0usize..LIMITS.len(), prop::bool::weighted(0.25)), 1..40),
        credit in prop::sample::select(vec![0u64, 3_600, 86_400, 7 * 86_400]),
    ) {
        let spec = ClusterSpec::tree("order", 1, 2, 2, 8);
        let mut s = Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology());
        // Held, so each job is listed as the cycle reaches it: the queue order.
        s.pending = jobs
            .iter()
            .enumerate()
            .map(|(i, &(back, l, gang))| {
                let r = JobRequest::nodes(if gang { 2 } else { 1 }, 8);
                let r = match LIMITS[l] {
                    Some(t) => r.time(t),
                    None => r,
                };
                let mut j = PendingJob::new(i as u64 + 1, NOW - i64::from(back), r);
                j.hold = true;
                j
            })
            .collect();
        let cfg = Config { short_limit_age_secs: credit, ..Config::default() };
        let d = schedule(&s, NOW, &cfg);
        let info = |id: JobId| -> (i64, f64, bool) {
            let (back, l, gang) = jobs[(id - 1) as usize];
            let f = priority::short_limit_factor(LIMITS[l]);
            (NOW - i64::from(back), f, gang)
        };
        let order: Vec<JobId> = d.pending.iter().map(|p| p.job).collect();
        prop_assert_eq!(order.len(), jobs.len());
        for (a, &j) in order.iter().enumerate() {
            let (sj, fj, gang_j) = info(j);
            for &k in &order[a + 1..] {
                let (sk, fk, gang_k) = info(k);
                if sj <= sk {
                    continue;
                }
                // j was submitted after k and is ahead of it.
                prop_assert!(gang_j || !gang_k, "one-node job {} passed gang {}: {:?}", j, k, order);
                // With a larger factor — or k is a one-node job whose credit an older gang
                // capped.
                let capped = !gang_k
                    && jobs.iter().any(|&(back, _, gang)| gang && NOW - i64::from(back) <= sk);
                prop_assert!(
                    fj > fk || capped,
                    "job {} (factor {}) passed {} (factor {})", j, fj, k, fk
                );
                prop_assert!(
                    sj - sk <= credit as i64,
                    "job {} passed {} submitted {} s before it (credit {})",
                    j, k, sj - sk, credit
                );
            }
        }
    }
}

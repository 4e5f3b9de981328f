//! The random inputs: jobs, clusters with running and pending jobs (worlds) and
//! histories of cycles, and the snapshots built from them.

use super::*;

/// What a random job asks for.
#[derive(Clone, Debug)]
pub(crate) struct JobGen {
    pub(crate) kind: u8,
    pub(crate) a: u32,
    pub(crate) b: u32,
    pub(crate) exclusive: bool,
    pub(crate) minutes: u32,
    pub(crate) cpus: Option<u32>,
    pub(crate) mem_gib: Option<u32>,
    pub(crate) typed: bool,
    /// The user (`None`: unknown) and `--exclusive=user`.
    pub(crate) user: Option<u8>,
    pub(crate) exclusive_user: bool,
    /// `--nodelist` and `--exclude` as node numbers (names `gpu001`…).
    pub(crate) nodelist: Option<u8>,
    pub(crate) exclude: Option<u8>,
}

pub(crate) fn job_gen() -> impl Strategy<Value = JobGen> {
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
pub(crate) fn user(g: &JobGen) -> Option<String> {
    g.user.map(|u| format!("user{u}"))
}

pub(crate) fn request(g: &JobGen) -> JobRequest {
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
pub(crate) struct World {
    pub(crate) leaves: u32,
    pub(crate) per_leaf: u32,
    pub(crate) gpus: u32,
    pub(crate) layout: u8,
    pub(crate) flaws: Vec<u8>,
    pub(crate) running: Vec<(JobGen, u32)>,
    pub(crate) pending: Vec<JobGen>,
}

pub(crate) fn world() -> impl Strategy<Value = World> {
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

pub(crate) fn build(w: &World, cfg: &Config) -> Snapshot {
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

pub(crate) fn cfg_plain() -> Config {
    Config {
        max_reservations: 0,
        preemption: false,
        ..Config::default()
    }
}

/// Seconds to the next cycle, jobs that end, arrivals `(job, high tier)`.
pub(crate) type Step = (u32, u8, Vec<(JobGen, bool)>);

/// A random history: cycles at increasing times, each followed by some jobs ending and new
/// ones arriving, in two partitions of different tiers over the same nodes (so preemption
/// and its grace times happen).
#[derive(Clone, Debug)]
pub(crate) struct History {
    pub(crate) world: World,
    /// Per step: seconds to the next cycle, how many running jobs end (oldest first by a
    /// rotation), arrivals (with their partition: 0 low, 1 high).
    pub(crate) steps: Vec<Step>,
}

pub(crate) fn history() -> impl Strategy<Value = History> {
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
pub(crate) fn history_start(h: &History) -> Snapshot {
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
pub(crate) fn history_step(
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

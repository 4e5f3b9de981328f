//! Speed, memory and placement-quality figures for the scheduling core, with a naive
//! topology-unaware first-fit baseline run on the same inputs (and, for placement quality,
//! the Slurm-like backfill baseline too; `muster bench`,
//! `cargo run --release -p muster-operator --example bench`, and the criterion benches use
//! these scenarios). Lives outside [`crate::core`] because it reads the clock.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use crate::core::baseline::Yardstick;
use crate::core::synth;
use crate::core::util::SplitMix64;
use crate::core::{
    Config, Decisions, JobId, KeptOccupancy, Occupancy, PendingJob, Prepared, RunningJob, Snapshot,
    schedule, schedule_prepared,
};

/// A global allocator that can count the heap bytes a piece of code leaves allocated, for
/// memory figures. Install it in a binary with
/// `#[global_allocator] static A: CountingAllocator = CountingAllocator::new();` and pass
/// `Some(&A)` as [`BenchOptions::memory`].
///
/// It counts only inside [`CountingAllocator::measure`]: counting every allocation of the
/// process (as it once did, with a peak too) put two contended atomic operations on every
/// allocation of every thread, 30% of `muster bench --quality`'s CPU time with its replays
/// on two threads. Outside a measurement an allocation costs one relaxed load of a flag
/// that is never written then, which every core keeps in its cache.
pub struct CountingAllocator {
    counting: AtomicBool,
    /// Bytes allocated less bytes freed while counting (wrapping: blocks allocated before
    /// and freed during a measurement count negative).
    net: AtomicUsize,
}

impl CountingAllocator {
    /// An allocator that is not counting.
    pub const fn new() -> Self {
        CountingAllocator {
            counting: AtomicBool::new(false),
            net: AtomicUsize::new(0),
        }
    }

    /// Runs `f` and returns its value with the heap bytes allocated during it and not yet
    /// freed when it returns (what the value holds, for a builder), by every thread: measure
    /// while no other thread allocates. Blocks freed during `f` but allocated before it
    /// lower the figure; it is reported as 0 if they outweigh the rest.
    pub fn measure<T>(&self, f: impl FnOnce() -> T) -> (T, usize) {
        self.net.store(0, Ordering::SeqCst);
        self.counting.store(true, Ordering::SeqCst);
        let value = f();
        self.counting.store(false, Ordering::SeqCst);
        let net = self.net.load(Ordering::SeqCst) as isize;
        (value, net.max(0) as usize)
    }

    fn add(&self, bytes: usize) {
        if self.counting.load(Ordering::Relaxed) {
            self.net.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    fn sub(&self, bytes: usize) {
        if self.counting.load(Ordering::Relaxed) {
            self.net.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

impl Default for CountingAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for CountingAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingAllocator")
            .field("counting", &self.counting.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

// SAFETY: delegates every call to `System` and only adds counters.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            self.add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        self.sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.sub(layout.size());
            self.add(new_size);
        }
        p
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Nodes of the main cluster (8 GPUs each, 32 per leaf).
    pub nodes: u32,
    /// Pending jobs in the main cycle.
    pub jobs: usize,
    /// Seed of every synthetic input.
    pub seed: u64,
    /// Timed repetitions per case (the median is reported).
    pub runs: u32,
    /// Cluster sizes for the scaling series (queue scaled with the cluster).
    pub scales: Vec<u32>,
    /// Nodes of the big gang placed on a half-fragmented cluster.
    pub gang_nodes: u32,
    /// One-GPU jobs placed in one cycle on an empty cluster.
    pub many_jobs: usize,
    /// Nodes of the cluster for `many_jobs`.
    pub many_nodes: u32,
    /// Nodes and jobs of the placement-quality simulation.
    pub quality_nodes: u32,
    /// Jobs of the placement-quality simulation.
    pub quality_jobs: usize,
    /// The process's global allocator, if it is a [`CountingAllocator`]: the memory figure
    /// is left out without it.
    pub memory: Option<&'static CountingAllocator>,
    /// The scheduler's settings.
    pub config: Config,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            nodes: 4096,
            jobs: 10_000,
            seed: 42,
            runs: 5,
            scales: vec![512, 4096, 16_384],
            gang_nodes: 512,
            many_jobs: 100_000,
            many_nodes: 16_384,
            quality_nodes: 256,
            quality_jobs: 1_500,
            memory: None,
            config: Config::default(),
        }
    }
}

/// Timing of one case, for Muster and the baseline.
#[derive(Clone, Debug, Default)]
pub struct CaseTiming {
    /// What was measured.
    pub name: String,
    /// Median milliseconds of Muster's cycle as the operator and the simulator run it every
    /// cycle: snapshot to decisions, with the cluster's trees ([`Prepared`]) and the running
    /// jobs' layout on them ([`KeptOccupancy`]) kept from the cycle before (the trees are
    /// rebuilt only when nodes or partitions change; running jobs that started, ended or
    /// changed are laid on again — none here: the same snapshot each time).
    pub muster_ms: f64,
    /// The same cycle with the trees kept but every running job laid out afresh
    /// ([`schedule_prepared`]): a cycle in which every running job changed.
    pub relaid_ms: f64,
    /// The same cycle cold ([`schedule()`]): the trees built from the snapshot first, as in
    /// the first cycle after a Node, GpuNode or Partition change.
    pub cold_ms: f64,
    /// Median milliseconds of the first-fit baseline (trees and layout kept too).
    pub baseline_ms: f64,
    /// Jobs Muster started / reserved.
    pub started: usize,
    /// Reservations made.
    pub reserved: usize,
    /// Jobs the baseline started.
    pub baseline_started: usize,
    /// Target, if the case has one.
    pub target_ms: Option<f64>,
}

/// Placement quality over a small simulated workload: the same arrivals under Muster, the
/// Slurm-like backfill baseline and first fit ([`Yardstick`]).
#[derive(Clone, Debug, Default)]
pub struct Quality {
    /// Muster with the bench's configuration.
    pub muster: PolicyFigures,
    /// The Slurm-like EASY backfill baseline ([`Yardstick::SlurmBackfill`]).
    pub slurm_like: PolicyFigures,
    /// Topology-unaware first fit ([`Yardstick::FirstFit`]).
    pub first_fit: PolicyFigures,
}

/// One policy's figures over the placement-quality workload.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PolicyFigures {
    /// Multi-node jobs started.
    pub multi_node_jobs: usize,
    /// Mean leaf switches per multi-node job.
    pub mean_leaves: f64,
    /// Mean of each multi-node job's lower bound, ceil(nodes / nodes per leaf).
    pub mean_lower_bound: f64,
    /// Mean wait in seconds.
    pub mean_wait: f64,
    /// Largest wait of a gang of 8+ nodes, seconds.
    pub max_big_wait: f64,
    /// Simulated seconds until the last job ended.
    pub makespan: f64,
    /// GPU-hours left idle while some job waited, cycle to cycle: the room that reservations
    /// and topology waits hold, most of a longer makespan.
    pub idle_gpu_hours: f64,
}

impl PolicyFigures {
    /// Mean leaf switches over the mean lower bound (1 when there is no multi-node job).
    pub fn leaf_ratio(&self) -> f64 {
        if self.mean_lower_bound > 0.0 {
            self.mean_leaves / self.mean_lower_bound
        } else {
            1.0
        }
    }
}

/// One cluster size of the scaling series (milliseconds as in [`CaseTiming`]).
#[derive(Clone, Debug, Default)]
pub struct Scaling {
    /// Nodes.
    pub nodes: u32,
    /// Pending jobs.
    pub jobs: usize,
    /// Muster, trees and running layout kept.
    pub muster_ms: f64,
    /// Muster, trees kept, running jobs laid out afresh.
    pub relaid_ms: f64,
    /// Muster, cold.
    pub cold_ms: f64,
    /// First fit, trees and running layout kept.
    pub baseline_ms: f64,
}

/// The four timings of one snapshot: Muster kept, relaid and cold, and first fit kept.
struct Timings {
    muster: (f64, Decisions),
    relaid: f64,
    cold: f64,
    baseline: (f64, Decisions),
}

/// Times `s` every way the report shows, each the median of `runs` (the kept states warmed
/// by one untimed cycle, as the operator's are by the cycle before).
fn time_all(s: &Snapshot, runs: u32, cfg: &Config) -> Timings {
    let (cold, _) = median_ms(runs, || schedule(s, NOW, cfg));
    let prep = Prepared::new(&s.nodes, &s.partitions);
    let (relaid, _) = median_ms(runs, || schedule_prepared(&prep, s, NOW, cfg));
    let mut kept = KeptOccupancy::new();
    kept.schedule(&prep, s, NOW, cfg);
    let muster = median_ms(runs, || kept.schedule(&prep, s, NOW, cfg));
    drop(kept);
    let mut occ = Occupancy::new(&prep, s);
    let ff = Config::default();
    let baseline = median_ms(runs, || {
        Yardstick::FirstFit.schedule_incremental(&prep, &mut occ, s, NOW, &ff)
    });
    Timings {
        muster,
        relaid,
        cold,
        baseline,
    }
}

/// Everything [`run`] measured.
#[derive(Clone, Debug, Default)]
pub struct BenchReport {
    /// Main cycle, big gang, many small jobs.
    pub cases: Vec<CaseTiming>,
    /// Cycle time by cluster size.
    pub scaling: Vec<Scaling>,
    /// Heap bytes of the main snapshot and queue, if a probe was given.
    pub snapshot_bytes: Option<usize>,
    /// Nodes and jobs of that snapshot.
    pub snapshot_size: (u32, usize),
    /// Placement quality.
    pub quality: Quality,
}

/// CPU time of the calling thread, in seconds: what one core spends, unaffected by other
/// processes competing for the machine (a shared CI box). Falls back to wall time where the
/// thread clock is unavailable.
pub fn thread_cpu_secs() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// Median milliseconds of `f` (thread CPU time, else wall time) over `runs` runs, and the
/// last result.
fn median_ms(runs: u32, mut f: impl FnMut() -> Decisions) -> (f64, Decisions) {
    let mut times = Vec::new();
    let mut last = Decisions::default();
    for _ in 0..runs.max(1) {
        let (c0, w0) = (thread_cpu_secs(), Instant::now());
        last = f();
        let ms = match (c0, thread_cpu_secs()) {
            (Some(a), Some(b)) => (b - a) * 1e3,
            _ => w0.elapsed().as_secs_f64() * 1e3,
        };
        times.push(ms);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], last)
}

/// The time every scenario runs at.
pub const NOW: i64 = 1_700_000_000;

/// Nodes from which a gang counts as big: the benchmarks' "longest wait of a gang of 8+
/// nodes" (issue 17's target holds Muster's to the Slurm-like baseline's), here and in
/// `muster simulate` and `muster bench --quality`.
pub const BIG_GANG_NODES: usize = 8;

/// The main scenario: `nodes` nodes (32 per leaf) about 85% busy and fragmented by churn, and
/// `jobs` pending jobs from 1 GPU to 256 nodes.
pub fn cycle_scenario(nodes: u32, jobs: usize, seed: u64) -> Snapshot {
    let mut rng = SplitMix64::new(seed);
    let mut s = synth::cluster((nodes / 32).max(1), 32.min(nodes));
    synth::fill(&mut s, &mut rng, 0.95, 0.10, NOW, 10_000_000);
    s.pending = synth::queue(&mut rng, jobs, 1, NOW, 256);
    s
}

/// A `gang`-node exclusive job on a `nodes`-node cluster where every other node has 4 GPUs
/// taken.
pub fn gang_scenario(nodes: u32, gang: u32) -> Snapshot {
    let mut s = synth::half_fragmented((nodes / 32).max(1), 32.min(nodes), 4, NOW);
    s.pending.push(PendingJob::new(
        1,
        NOW,
        crate::core::JobRequest::nodes(gang, 8)
            .exclusive()
            .time(3600),
    ));
    s
}

/// `jobs` one-GPU jobs on an empty `nodes`-node cluster.
pub fn many_scenario(nodes: u32, jobs: usize) -> Snapshot {
    let mut s = synth::cluster((nodes / 32).max(1), 32.min(nodes));
    s.pending = (0..jobs)
        .map(|i| {
            PendingJob::new(
                i as JobId + 1,
                NOW - 10,
                crate::core::JobRequest::gpus(1).time(3600),
            )
        })
        .collect();
    s
}

/// Runs every case and returns the figures.
pub fn run(opts: &BenchOptions) -> BenchReport {
    let cfg = opts.config.clone();
    let mut report = BenchReport::default();
    let case = |name: String, t: Timings, target_ms: Option<f64>| CaseTiming {
        name,
        muster_ms: t.muster.0,
        relaid_ms: t.relaid,
        cold_ms: t.cold,
        baseline_ms: t.baseline.0,
        started: t.muster.1.starts.len(),
        reserved: t.muster.1.reservations.len(),
        baseline_started: t.baseline.1.starts.len(),
        target_ms,
    };

    let build = || cycle_scenario(opts.nodes, opts.jobs, opts.seed);
    let main = match opts.memory {
        Some(a) => {
            let (main, bytes) = a.measure(build);
            report.snapshot_bytes = Some(bytes);
            main
        }
        None => build(),
    };
    report.snapshot_size = (opts.nodes, opts.jobs);
    let name = format!(
        "full cycle with backfill: {} nodes, {} running, {} pending",
        opts.nodes,
        main.running.len(),
        opts.jobs
    );
    report
        .cases
        .push(case(name, time_all(&main, opts.runs, &cfg), Some(50.0)));
    drop(main);

    let gang = gang_scenario(opts.nodes, opts.gang_nodes);
    let name = format!(
        "{}-node gang, {} nodes half fragmented",
        opts.gang_nodes, opts.nodes
    );
    report
        .cases
        .push(case(name, time_all(&gang, opts.runs, &cfg), Some(2.0)));
    drop(gang);

    let many = many_scenario(opts.many_nodes, opts.many_jobs);
    let runs = opts.runs.min(3);
    let name = format!(
        "{} one-GPU jobs, {} empty nodes",
        opts.many_jobs, opts.many_nodes
    );
    report
        .cases
        .push(case(name, time_all(&many, runs, &cfg), Some(1000.0)));
    drop(many);

    for &n in &opts.scales {
        let jobs = (opts.jobs as u64 * u64::from(n) / u64::from(opts.nodes.max(1))) as usize;
        let s = cycle_scenario(n, jobs, opts.seed);
        let t = time_all(&s, runs, &cfg);
        report.scaling.push(Scaling {
            nodes: n,
            jobs,
            muster_ms: t.muster.0,
            relaid_ms: t.relaid,
            cold_ms: t.cold,
            baseline_ms: t.baseline.0,
        });
    }

    report.quality = quality(opts.quality_nodes, opts.quality_jobs, opts.seed, &cfg);
    report
}

/// A small event simulation run three times on the same arrivals, under Muster, the
/// Slurm-like baseline and first fit (one thread each), scheduling every 60 simulated
/// seconds. Jobs run 20–100% of their limit.
pub fn quality(nodes: u32, jobs: usize, seed: u64, cfg: &Config) -> Quality {
    let per_leaf = 32.min(nodes.max(1));
    let mut rng = SplitMix64::new(seed ^ 0x5eed);
    let max_nodes = (nodes / 4).max(1);
    let start = NOW;
    // Arrivals over a span that keeps the cluster busy.
    let arrivals: Vec<(i64, PendingJob, i64)> = (0..jobs)
        .map(|i| {
            let t = start + (i as i64) * 40 + rng.below(40) as i64;
            let mut j = PendingJob::new(i as JobId + 1, t, synth::request(&mut rng, max_nodes));
            j.namespace = format!("team-{}", rng.below(4));
            let lim = j
                .request
                .time_limit
                .and_then(|t| t.seconds())
                .unwrap_or(3600) as f64;
            let run = (lim * (0.2 + 0.8 * rng.unit())).max(1.0) as i64;
            (t, j, run)
        })
        .collect();
    let sim = |policy: Option<Yardstick>| -> PolicyFigures {
        let mut s = synth::cluster((nodes / per_leaf).max(1), per_leaf);
        let total_gpus: u64 = s.nodes.iter().map(|n| n.gpus.len() as u64).sum();
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let mut next = 0;
        let mut runtime: std::collections::BTreeMap<JobId, i64> = Default::default();
        let mut submit: std::collections::BTreeMap<JobId, i64> = Default::default();
        // GPUs in use and whether a job waited, from the last cycle until the next.
        let (mut busy, mut waiting, mut idle, mut since) = (0u64, false, 0f64, start);
        let (mut multi, mut leaves, mut lower) = (0usize, 0u64, 0u64);
        let (mut waits, mut nwait, mut big_wait) = (0f64, 0usize, 0f64);
        let mut t = start;
        let mut last_end = start;
        loop {
            if waiting {
                idle += (t - since) as f64 * total_gpus.saturating_sub(busy) as f64;
            }
            since = t;
            // Ends.
            s.running.retain(|r: &RunningJob| {
                let end = r.start_time + runtime[&r.id];
                if end <= t {
                    last_end = last_end.max(end);
                    false
                } else {
                    true
                }
            });
            while next < arrivals.len() && arrivals[next].0 <= t {
                let (at, j, run) = &arrivals[next];
                runtime.insert(j.id, *run);
                submit.insert(j.id, *at);
                s.pending.push(j.clone());
                next += 1;
            }
            if next >= arrivals.len() && s.pending.is_empty() && s.running.is_empty() {
                break;
            }
            let d = match policy {
                None => schedule_prepared(&prep, &s, t, cfg),
                Some(y) => {
                    y.schedule_incremental(&prep, &mut Occupancy::new(&prep, &s), &s, t, cfg)
                }
            };
            for st in &d.starts {
                let w = (t - submit[&st.job]) as f64;
                waits += w;
                nwait += 1;
                if st.nodes.len() >= BIG_GANG_NODES {
                    big_wait = big_wait.max(w);
                }
                if st.nodes.len() > 1 {
                    multi += 1;
                    leaves += u64::from(st.leaves);
                    lower += (st.nodes.len() as u64).div_ceil(u64::from(per_leaf));
                }
            }
            s.apply(&d, t);
            // Stopped jobs (time limits) end now in this model.
            s.running.retain(|r| r.stopping_since.is_none());
            busy = s
                .running
                .iter()
                .flat_map(|r| &r.tasks)
                .map(|a| a.gpus.len() as u64)
                .sum();
            waiting = !s.pending.is_empty();
            // Next cycle: 60 s on, or later if nothing happens before then.
            let next_end = s
                .running
                .iter()
                .map(|r| r.start_time + runtime[&r.id])
                .min();
            let next_arrival = arrivals.get(next).map(|a| a.0);
            match next_end.into_iter().chain(next_arrival).min() {
                Some(e) => t = (t + 60).max(e),
                None => break,
            }
        }
        let mean = |a: u64| {
            if multi > 0 {
                a as f64 / multi as f64
            } else {
                0.0
            }
        };
        PolicyFigures {
            multi_node_jobs: multi,
            mean_leaves: mean(leaves),
            mean_lower_bound: mean(lower),
            mean_wait: if nwait > 0 { waits / nwait as f64 } else { 0.0 },
            max_big_wait: big_wait,
            makespan: (last_end - start) as f64,
            idle_gpu_hours: idle / 3600.0,
        }
    };
    std::thread::scope(|scope| {
        let slurm_like = scope.spawn(|| sim(Some(Yardstick::SlurmBackfill)));
        let first_fit = scope.spawn(|| sim(Some(Yardstick::FirstFit)));
        let muster = sim(None);
        Quality {
            muster,
            slurm_like: slurm_like
                .join()
                .expect("the Slurm-like simulation panicked"),
            first_fit: first_fit.join().expect("the first-fit simulation panicked"),
        }
    })
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Muster scheduling core benchmark (CPU time on one core; baseline = topology-unaware first fit; placement quality also against Slurm-like backfill)"
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "{:<58} {:>9} {:>8} {:>9} {:>9} {:>10} {:>7} {:>13}",
            "case",
            "muster ms",
            "target",
            "relaid ms",
            "cold ms",
            "first-fit",
            "ratio",
            "started m/ff"
        )?;
        for c in &self.cases {
            let target = c
                .target_ms
                .map(|t| format!("{}{t}", if c.muster_ms <= t { "<=" } else { "> " }))
                .unwrap_or_default();
            writeln!(
                f,
                "{:<58} {:>9.2} {:>8} {:>9.2} {:>9.2} {:>10.2} {:>6.2}x {:>6}/{:<6}",
                c.name,
                c.muster_ms,
                target,
                c.relaid_ms,
                c.cold_ms,
                c.baseline_ms,
                c.muster_ms / c.baseline_ms.max(1e-9),
                c.started,
                c.baseline_started
            )?;
        }
        writeln!(
            f,
            "(muster ms: snapshot to decisions as the operator and the simulator run every cycle, \
             the cluster's switch trees and GPU layouts and the running jobs' layout on them kept \
             from the cycle before;\n relaid ms: the trees kept, every running job laid out again \
             (a cycle in which all of them changed); cold ms: the first cycle after a Node, \
             GpuNode or Partition change, which builds the trees first; first-fit: trees and \
             layout kept too)"
        )?;
        writeln!(f)?;
        writeln!(f, "cycle time by cluster size (queue scaled with it):")?;
        for sc in &self.scaling {
            writeln!(
                f,
                "  {:>6} nodes {:>6} jobs: muster {:>9.2} ms ({:>6.2} us/node), relaid {:>9.2} ms, cold {:>9.2} ms, first-fit {:>8.2} ms",
                sc.nodes,
                sc.jobs,
                sc.muster_ms,
                sc.muster_ms * 1000.0 / f64::from(sc.nodes),
                sc.relaid_ms,
                sc.cold_ms,
                sc.baseline_ms
            )?;
        }
        if let Some(b) = self.snapshot_bytes {
            writeln!(f)?;
            writeln!(
                f,
                "snapshot + queue at {} nodes / {} jobs: {:.1} MiB (target <= 64 MiB)",
                self.snapshot_size.0,
                self.snapshot_size.1,
                b as f64 / (1024.0 * 1024.0)
            )?;
        }
        let q = &self.quality;
        // One row per figure: its name and how to print it for one policy.
        type Cell = fn(&PolicyFigures) -> String;
        let rows: [(&str, Cell); 8] = [
            ("multi-node jobs", |p| p.multi_node_jobs.to_string()),
            ("mean leaf switches per multi-node job", |p| {
                format!("{:.3}", p.mean_leaves)
            }),
            ("lower bound (mean ceil(nodes/leaf size))", |p| {
                format!("{:.3}", p.mean_lower_bound)
            }),
            ("ratio to lower bound", |p| format!("{:.3}", p.leaf_ratio())),
            ("mean wait (s)", |p| format!("{:.0}", p.mean_wait)),
            ("longest wait of an 8+ node gang (s)", |p| {
                format!("{:.0}", p.max_big_wait)
            }),
            ("makespan (s)", |p| format!("{:.0}", p.makespan)),
            ("idle GPU-hours while a job waited", |p| {
                format!("{:.0}", p.idle_gpu_hours)
            }),
        ];
        writeln!(f)?;
        writeln!(
            f,
            "{:<46} {:>9} {:>11} {:>10}",
            "placement quality (simulated workload):", "muster", "slurm-like", "first-fit"
        )?;
        for (name, cell) in rows {
            writeln!(
                f,
                "  {:<44} {:>9} {:>11} {:>10}",
                name,
                cell(&q.muster),
                cell(&q.slurm_like),
                cell(&q.first_fit)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_idle_room_is_counted_when_no_job_waits() {
        // 20 jobs on 4,096 nodes: each starts in the first cycle after it arrives (cycles
        // are 60 s apart), so no job is left waiting after a cycle.
        let q = quality(4096, 20, 7, &Config::default());
        for p in [q.muster, q.slurm_like, q.first_fit] {
            assert!(p.mean_wait < 60.0, "{q:?}");
            assert_eq!(p.idle_gpu_hours, 0.0, "{q:?}");
        }
    }

    #[test]
    fn idle_room_while_jobs_wait_is_counted_and_bounded() {
        let q = quality(32, 150, 7, &Config::default());
        for p in [q.muster, q.slurm_like, q.first_fit] {
            // Gangs of up to 8 of the 32 nodes wait for room, which idles meanwhile; never
            // more than the whole cluster for the whole run.
            assert!(p.idle_gpu_hours > 0.0, "{q:?}");
            assert!(p.idle_gpu_hours < 32.0 * 8.0 * p.makespan / 3600.0, "{q:?}");
        }
    }

    #[test]
    fn the_three_policies_replay_the_same_arrivals_their_own_way() {
        let q = quality(64, 300, 3, &Config::default());
        // The Slurm-like baseline orders by submit time and reserves for every job it tests,
        // first fit reserves for none: on a loaded cluster the three schedules differ.
        assert_ne!(q.slurm_like, q.first_fit, "{q:?}");
        assert_ne!(q.muster, q.slurm_like, "{q:?}");
        // Slurm's tree placement keeps gangs nearer their fewest leaves than first fit.
        assert!(
            q.slurm_like.leaf_ratio() < q.first_fit.leaf_ratio(),
            "{q:?}"
        );
    }
}

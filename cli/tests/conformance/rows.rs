//! The conformance table: one row per BatchJob spec field and per request shape, each with
//! the outcome a user can observe. Node names are the suite's cluster's ([`super::SPEC`]):
//! leaf 1 = gpu001, gpu002 (bigmem); leaf 2 = gpu003, gpu004 (A100). The rows' jobs run as
//! user `dana` unless they say otherwise.

mod placement;
mod queue;
mod refusals;
mod tasks;

use serde_json::{Value, json};

/// A job of a row.
#[derive(Clone, Debug)]
pub struct Job {
    /// BatchJob name (and trace id).
    pub name: &'static str,
    /// Submitting user.
    pub user: &'static str,
    /// The same request as `sbatch` options, when sbatch can express it (then `sbatch
    /// --dry-run` must give `spec`, and `sbatch --test-only` is asked).
    pub sbatch: Option<Vec<&'static str>>,
    /// The BatchJob spec.
    pub spec: Value,
    /// Seconds its tasks run (`None`: until the row ends).
    pub runtime: Option<u64>,
    /// Submitted without waiting for it to start (a job that queues behind others).
    pub queued: bool,
}

/// What the row's job does, seen the same way through every path.
#[derive(Clone, Debug)]
pub enum Expect {
    /// Starts at once on `nodes`; `ranks` (node, GPUs) when given; `env` (rank, variable,
    /// value) on the operator's pods (`(command)` is the task's command line).
    Runs {
        /// Hostlist.
        nodes: &'static str,
        /// By rank.
        ranks: Option<Vec<(&'static str, Vec<u32>)>>,
        /// Pod environment.
        env: Vec<(u32, &'static str, &'static str)>,
    },
    /// Does not start: Slurm's reason and words of its message (the three messages must be
    /// the same text where each way gives one).
    Waits {
        /// Reason code.
        reason: &'static str,
        /// In the message.
        words: &'static str,
    },
    /// Waits (reason `Resources`) until `secs` have passed, then starts on `nodes`.
    RunsAfterWait {
        /// Seconds.
        secs: i64,
        /// Hostlist.
        nodes: &'static str,
    },
    /// Waits behind the background jobs, then starts on `nodes` before `rival` (a queued
    /// background job) does.
    RunsFirstWhenFreed {
        /// Hostlist.
        nodes: &'static str,
        /// The job it must beat.
        rival: &'static str,
    },
    /// Held (reason `JobHeldUser`, never started by the simulator); `sbatch --test-only`, as
    /// Slurm's, answers when it would start on `nodes` once released.
    Held {
        /// Hostlist.
        nodes: &'static str,
    },
    /// Waits (reason `Dependency`) until the background job it depends on completes, then
    /// starts on `nodes`; `sbatch --test-only`, as Slurm's, gives an estimate regardless of
    /// the dependency.
    RunsAfterDependency {
        /// Hostlist.
        nodes: &'static str,
    },
    /// Ends in `state` (after the operator's clock moves `shift` seconds); `sim` is the
    /// simulator's word for it.
    Ends {
        /// Seconds.
        shift: i64,
        /// Job state.
        state: &'static str,
        /// Simulator outcome.
        sim: &'static str,
    },
    /// Preempted by the row's `later` job: requeued (pending again) or ended PREEMPTED.
    Preempted {
        /// Requeued.
        requeued: bool,
    },
    /// An array: this many elements run at once, the others wait (JobArrayTaskLimit).
    Array {
        /// Elements.
        total: u32,
        /// At once.
        running: u32,
    },
    /// Can never run where it is sent: `sbatch`, `--test-only` and the admission webhook refuse
    /// it ("Requested node configuration is not available", [`validate::submission`]); a job
    /// already admitted (an operator without webhooks, the simulator) waits `BadConstraints`
    /// — all with the same text, which contains `words`.
    ///
    /// [`validate::submission`]: muster_operator::controller::validate::submission
    Infeasible {
        /// In the message.
        words: &'static str,
    },
    /// Refused as written, by the API server, the operator, the trace reader and sbatch:
    /// every message names `field` and says `words`.
    Refused {
        /// Field name (in the messages).
        field: &'static str,
        /// In the messages.
        words: &'static str,
    },
}

/// One row.
#[derive(Clone, Debug)]
pub struct Row {
    /// Name.
    pub name: &'static str,
    /// The spec fields the row exercises.
    pub covers: &'static [&'static str],
    /// The job under test.
    pub job: Job,
    /// Jobs running (or queued) before it is submitted.
    pub background: Vec<Job>,
    /// Jobs submitted once it runs (preemption).
    pub later: Vec<Job>,
    /// The outcome.
    pub expect: Expect,
}

fn job(sbatch: &[&'static str], spec: Value) -> Job {
    Job {
        name: "row",
        user: "dana",
        sbatch: Some(sbatch.to_vec()),
        spec,
        runtime: None,
        queued: false,
    }
}

fn spec_only(spec: Value) -> Job {
    Job {
        sbatch: None,
        ..job(&[], spec)
    }
}

/// A background job pinned to `nodes` holding `gpus` GPUs on each, as `user`.
fn pinned(name: &'static str, user: &'static str, nodes: &'static str, n: u32, gpus: u32) -> Job {
    Job {
        name,
        user,
        sbatch: None,
        spec: json!({"nodes": n, "gpusPerNode": gpus, "nodelist": nodes}),
        runtime: None,
        queued: false,
    }
}

fn runs(nodes: &'static str, ranks: &[(&'static str, &[u32])]) -> Expect {
    Expect::Runs {
        nodes,
        ranks: Some(ranks.iter().map(|(n, g)| (*n, g.to_vec())).collect()),
        env: Vec::new(),
    }
}

fn runs_on(nodes: &'static str) -> Expect {
    Expect::Runs {
        nodes,
        ranks: None,
        env: Vec::new(),
    }
}

fn row(name: &'static str, covers: &'static [&'static str], job: Job, expect: Expect) -> Row {
    Row {
        name,
        covers,
        job,
        background: Vec::new(),
        later: Vec::new(),
        expect,
    }
}

/// Every row.
pub fn rows() -> Vec<Row> {
    let mut v: Vec<Row> = [
        placement::rows(),
        queue::rows(),
        tasks::rows(),
        refusals::rows(),
    ]
    .into_iter()
    .flatten()
    .collect();
    // Rows without sbatch options (template, gpuType, cancel, script) are asked of the
    // test-only estimate directly.
    for r in &mut v {
        if r.job.name.is_empty() {
            r.job.name = "row";
        }
    }
    v
}

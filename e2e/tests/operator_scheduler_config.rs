//! The operator's scheduler configuration (`--scheduler-config`, the chart's `scheduler:`
//! values) end to end: the file is read by the operator's own loader and the change shows in
//! what a user sees in BatchJob status. The scenario, on two 8-GPU nodes:
//!
//! - `long` holds one node for an hour;
//! - `big` (2 nodes) waits for it: reason Resources, and with reservations an estimated start;
//! - `small` (1 node, 10 minutes) is submitted last.
//!
//! With the defaults `small` backfills onto the free node (it ends long before `big` could
//! start); with `backfill: false` it waits behind `big` (reason Priority, as Slurm's
//! sched/builtin); with `maxReservations: 0` `big` has no estimated start. Negative outcomes
//! are checked after the operator has run further cycles (its cycle counter), not after a
//! wall-clock delay. The short-limit order (`shortLimitAgeSecs`) has its own scenario at the
//! end: two jobs wait for one node, and the one with the shorter limit gets it first unless the
//! credit is off; and the gang cap (`passGangsAfterSecs`, `gangFirmAfterSecs`) has one too:
//! a 10-minute one-node job submitted after a waiting gang stays behind it, unless it may
//! pass gangs that are not yet firm. The spread-at-once bound (`spreadAtOnceMaxLimitSecs`)
//! has the last: a gang no job waits behind starts spread over two leaves at once by
//! default, and waits for one leaf when its limit is over the bound. (The refusal of bad
//! keys at startup is the binary's: `operator/tests/operator_cli.rs`.)

mod operator_support;

use muster_crds::v1alpha1::JobState;
use muster_operator::controller::Handle;
use muster_operator::controller::scheduler_config;
use muster_operator::core::Config;
use operator_support::{Env, NodeDef, batchjob};
use serde_json::json;

/// The scheduler configuration as the operator loads it: a file, read by the loader
/// `muster-operator --scheduler-config` uses. Each call has a directory of its own: tests
/// run in parallel, and two of them load the same text.
fn load(text: &str) -> Config {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scheduler.yaml");
    std::fs::write(&path, text).unwrap();
    scheduler_config::load(&path).unwrap()
}

/// Scheduling cycles the operator has completed.
fn cycles(op: &Handle) -> u64 {
    op.metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix("muster_scheduling_cycle_duration_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until the operator has run `n` more cycles.
async fn more_cycles(env: &Env, op: &Handle, n: u64) {
    let from = cycles(op);
    env.until(60, "more scheduling cycles", || async {
        cycles(op) >= from + n
    })
    .await;
}

async fn reason(env: &Env, name: &str) -> Option<String> {
    env.job(name).await.status.and_then(|s| s.reason)
}

/// A test control plane with `nodes` in the default partition, and the operator on it with
/// the scheduler configuration `config`.
async fn start(nodes: &[NodeDef<'_>], config: &str) -> (Env, Handle) {
    let env = Env::start().await;
    env.add_nodes(nodes).await;
    env.default_partition().await;
    let mut settings = env.settings();
    settings.plan.scheduler = load(config);
    let op = env.start_operator(settings);
    (env, op)
}

/// [`start`] on two 8-GPU nodes of one leaf.
async fn start_two(config: &str) -> (Env, Handle) {
    start(
        &[
            NodeDef::new("gpu001", 8, "leaf1"),
            NodeDef::new("gpu002", 8, "leaf1"),
        ],
        config,
    )
    .await
}

/// Submits `name`: one whole node, a limit of `minutes`, running `runtime` seconds.
async fn submit_node_job(env: &Env, name: &str, minutes: u32, runtime: u32) {
    env.submit(batchjob(
        name,
        json!({"nodes": 1, "gres": "gpu:8", "time": minutes}),
        runtime,
    ))
    .await;
}

/// Starts the operator with `config` and runs the scenario up to `small`'s submission.
async fn scenario(config: &str) -> (Env, Handle) {
    let (env, op) = start_two(config).await;
    submit_node_job(&env, "long", 60, 3600).await;
    env.until_state("long", JobState::Running, 30).await;
    env.submit(batchjob(
        "big",
        json!({"nodes": 2, "gres": "gpu:8", "time": 60}),
        3600,
    ))
    .await;
    env.until(30, "big waits for resources", || async {
        reason(&env, "big").await.as_deref() == Some("Resources")
    })
    .await;
    submit_node_job(&env, "small", 10, 3600).await;
    (env, op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_config_backfills_and_estimates_starts() {
    let (env, op) = scenario("# defaults\n").await;
    env.until_state("small", JobState::Running, 30).await;
    let big = env.job("big").await.status.unwrap();
    assert_eq!(big.state, Some(JobState::Pending));
    let long = env.job("long").await.status.unwrap();
    let (est, long_start) = (big.start_time.unwrap().0, long.start_time.unwrap().0);
    // The estimate is long's end by its time limit (60 minutes after it started).
    let gap = est.duration_since(long_start).as_secs();
    assert!((3590..=3610).contains(&gap), "estimate {gap}s after long");
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_off_keeps_later_jobs_behind_the_blocked_one() {
    let (env, op) = scenario("backfill: false\n").await;
    env.until(30, "small waits behind big", || async {
        reason(&env, "small").await.as_deref() == Some("Priority")
    })
    .await;
    more_cycles(&env, &op, 3).await;
    let small = env.job("small").await.status.unwrap();
    assert_eq!(small.state, Some(JobState::Pending));
    assert_eq!(small.reason.as_deref(), Some("Priority"));
    assert!(env.pods_of("small").await.is_empty());
    // The head of the queue still gets its estimate.
    assert!(env.job("big").await.status.unwrap().start_time.is_some());
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reservations_means_no_estimated_starts() {
    let (env, op) = scenario("maxReservations: 0\n").await;
    // Nothing is held for big, so small starts (as with the defaults).
    env.until_state("small", JobState::Running, 30).await;
    more_cycles(&env, &op, 3).await;
    let big = env.job("big").await.status.unwrap();
    assert_eq!(big.state, Some(JobState::Pending));
    assert_eq!(big.reason.as_deref(), Some("Resources"));
    assert_eq!(big.start_time, None, "no reservation, no estimated start");
    op.shutdown().await.unwrap();
}

/// Submits `waiting` (`nodes` whole nodes, a 7-day limit) and, once it waits for resources,
/// `quick` (one node, 10 minutes) a second later; returns which of the two runs first and
/// stops the operator.
async fn first_of_waiting_and_quick(
    env: Env,
    op: Handle,
    waiting: &'static str,
    nodes: u32,
) -> &'static str {
    env.submit(batchjob(
        waiting,
        json!({"nodes": nodes, "gres": "gpu:8", "time": "7-00:00:00"}),
        3600,
    ))
    .await;
    env.until(30, "the first job waits", || async {
        reason(&env, waiting).await.as_deref() == Some("Resources")
    })
    .await;
    // Submit times are whole seconds: quick's must be later than the waiting job's.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    submit_node_job(&env, "quick", 10, 3600).await;
    let running = |name: &'static str| {
        let env = &env;
        async move { env.job(name).await.status.and_then(|s| s.state) == Some(JobState::Running) }
    };
    env.until(60, "one of the waiting jobs starts", || async {
        running(waiting).await || running("quick").await
    })
    .await;
    let first = if running("quick").await {
        "quick"
    } else {
        waiting
    };
    op.shutdown().await.unwrap();
    first
}

/// One node held for a few seconds; `week` (7-day limit) is submitted, then `quick`
/// (10 minutes). Returns which of the two got the node when it freed.
async fn first_of_two_waiting(config: &str) -> &'static str {
    let (env, op) = start(&[NodeDef::new("gpu001", 8, "leaf1")], config).await;
    submit_node_job(&env, "long", 60, 4).await;
    env.until_state("long", JobState::Running, 30).await;
    first_of_waiting_and_quick(env, op, "week", 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shorter_limit_gets_the_freed_node_first() {
    assert_eq!(first_of_two_waiting("# defaults\n").await, "quick");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_short_limit_credit_keeps_submit_order() {
    assert_eq!(first_of_two_waiting("shortLimitAgeSecs: 0\n").await, "week");
}

/// Two nodes, each held by a job (`a` for a few seconds, `b` longer, with a 5-minute limit);
/// `gang` (both nodes, a 7-day limit) is submitted, then `quick` (one node, 10 minutes).
/// Returns which of the two ran first. `quick` cannot backfill on `a`'s node: it would end
/// after `gang`'s reservation at `b`'s limit. So it starts first only if its short-limit
/// credit puts it ahead of the gang.
async fn first_of_gang_and_quick(config: &str) -> &'static str {
    let (env, op) = start_two(config).await;
    submit_node_job(&env, "a", 60, 3).await;
    submit_node_job(&env, "b", 5, 15).await;
    env.until_state("a", JobState::Running, 30).await;
    env.until_state("b", JobState::Running, 30).await;
    first_of_waiting_and_quick(env, op, "gang", 2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_one_node_job_does_not_pass_a_waiting_gang() {
    assert_eq!(first_of_gang_and_quick("# defaults\n").await, "gang");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_node_job_passes_a_gang_that_is_not_yet_firm_once_it_has_waited() {
    // Passing from the first second, gangs firm after an hour: quick goes first.
    let pass = "passGangsAfterSecs: 0\ngangFirmAfterSecs: 3600\n";
    assert_eq!(first_of_gang_and_quick(pass).await, "quick");
    // Gangs firm from their start: the cap holds again.
    let firm = "passGangsAfterSecs: 0\ngangFirmAfterSecs: 0\n";
    assert_eq!(first_of_gang_and_quick(firm).await, "gang");
}

/// Three nodes: `gpu001` and `gpu002` under `leaf1`, `gpu003` under `leaf2`. `first` holds
/// `gpu001` for 20 seconds (40 with `earlier_waits`; a 10-minute limit); `gang` (two nodes,
/// an hour's limit) is submitted while it runs, with no job behind it. With `earlier_waits`,
/// `leaf2` has a fourth node, `gpu004`, held for two minutes by `other` (an hour's limit),
/// and `pinned` (`--nodelist gpu004`, 10 minutes) is submitted before the gang and waits for
/// it. Returns the gang's nodes once it runs, and its reason and estimated start (seconds
/// after `first` started) while it waited, if it did.
async fn gang_beside_a_short_job(
    config: &str,
    earlier_waits: bool,
) -> (Vec<String>, Option<(String, i64)>) {
    let mut nodes = vec![
        NodeDef::new("gpu001", 8, "leaf1"),
        NodeDef::new("gpu002", 8, "leaf1"),
        NodeDef::new("gpu003", 8, "leaf2"),
    ];
    if earlier_waits {
        nodes.push(NodeDef::new("gpu004", 8, "leaf2"));
    }
    let (env, op) = start(&nodes, config).await;
    env.submit(batchjob(
        "first",
        json!({"nodes": 1, "gres": "gpu:8", "time": 10, "nodelist": "gpu001"}),
        // Long enough that the gang is considered while it runs, even on a loaded machine
        // (and after the two more submissions of `earlier_waits`).
        if earlier_waits { 40 } else { 20 },
    ))
    .await;
    env.until_state("first", JobState::Running, 30).await;
    let first = env.job("first").await.status.unwrap().start_time.unwrap().0;
    if earlier_waits {
        let on_gpu004 =
            |minutes| json!({"nodes": 1, "gres": "gpu:8", "time": minutes, "nodelist": "gpu004"});
        env.submit(batchjob("other", on_gpu004(60), 120)).await;
        env.until_state("other", JobState::Running, 30).await;
        // A shorter limit than the gang's: ahead of it in the queue.
        env.submit(batchjob("pinned", on_gpu004(10), 1)).await;
        env.until(30, "pinned waits for gpu004", || async {
            reason(&env, "pinned").await.is_some()
        })
        .await;
        // Times are in whole seconds, and a one-node job is not queued ahead of a gang
        // submitted in the same second (the gang cap).
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    env.submit(batchjob(
        "gang",
        json!({"nodes": 2, "gres": "gpu:8", "time": 60}),
        3600,
    ))
    .await;
    // Written by the polling closure below, read after it.
    let waited = std::cell::RefCell::new(None);
    env.until(60, "the gang starts", || async {
        let st = env.job("gang").await.status.unwrap_or_default();
        if st.state == Some(JobState::Running) {
            return true;
        }
        if let (Some(r), Some(est)) = (st.reason, st.start_time) {
            *waited.borrow_mut() = Some((r, est.0.duration_since(first).as_secs()));
        }
        false
    })
    .await;
    let mut nodes: Vec<String> = env
        .until_pods("gang", 2, 30)
        .await
        .iter()
        .map(Env::node_of)
        .collect();
    nodes.sort();
    op.shutdown().await.unwrap();
    (nodes, waited.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_no_job_waits_behind_starts_spread_at_once() {
    // The one-leaf room is 10 minutes off by first's limit, but waiting would delay only
    // the gang: it starts at once on the two free nodes, over both leaves.
    let (nodes, waited) = gang_beside_a_short_job("# defaults\n", false).await;
    assert_eq!(nodes, ["gpu002", "gpu003"]);
    assert_eq!(waited, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_over_the_spread_at_once_bound_waits_for_one_leaf() {
    // The gang's hour is over the 30-minute bound: it waits for leaf1, estimated at first's
    // limit, and starts there when first ends.
    let (nodes, waited) = gang_beside_a_short_job("spreadAtOnceMaxLimitSecs: 1800\n", false).await;
    assert_eq!(nodes, ["gpu001", "gpu002"]);
    let (reason, est) = waited.expect("the gang waited with an estimated start");
    assert_eq!(reason, "Resources");
    assert!((590..=610).contains(&est), "estimate {est}s after first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waits_for_one_leaf_while_an_earlier_job_waits() {
    // gpu002 and gpu003 are free, but pinned, queued before the gang, waits for gpu004: the
    // queue has not drained, so the gang waits for leaf1 (estimated at first's limit) and
    // starts there when first ends.
    let (nodes, waited) = gang_beside_a_short_job("# defaults\n", true).await;
    assert_eq!(nodes, ["gpu001", "gpu002"]);
    let (_, est) = waited.expect("the gang waited with an estimated start");
    assert!((590..=610).contains(&est), "estimate {est}s after first");
}

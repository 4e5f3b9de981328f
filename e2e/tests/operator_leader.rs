//! Two replicas: one leads (Lease), the other keeps warm caches and takes over when the
//! leader dies (after the lease expires) or steps down (at once).

mod operator_support;

use std::time::Duration;

use muster_crds::v1alpha1::JobState;
use muster_operator::controller::leader::LeaseTimings;
use operator_support::{Env, batchjob, cluster};
use serde_json::json;

fn replica(env: &Env, id: &str) -> muster_operator::controller::Handle {
    replica_with_lease(env, id, Duration::from_secs(2))
}

/// A replica whose lease, while it leads, lasts `lease_duration` (the others wait that long
/// for it to expire).
fn replica_with_lease(
    env: &Env,
    id: &str,
    lease_duration: Duration,
) -> muster_operator::controller::Handle {
    let mut s = env.settings();
    s.leader_election = true;
    s.identity = id.into();
    s.lease = LeaseTimings {
        lease_duration,
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    };
    env.start_operator(s)
}

fn leads(h: &muster_operator::controller::Handle) -> bool {
    *h.leading.borrow()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_takeover() {
    let env = Env::start().await;
    env.add_cluster(&cluster(2, 2), 8).await;
    env.default_partition().await;
    let a = replica(&env, "replica-a");
    let b = replica(&env, "replica-b");
    env.until(20, "a leader", || async { leads(&a) || leads(&b) })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(leads(&a) ^ leads(&b), "exactly one leader");
    let (leader, follower) = if leads(&a) { (a, b) } else { (b, a) };
    assert!(leader.metrics.render().contains("muster_leader 1"));
    assert!(follower.metrics.render().contains("muster_leader 0"));
    env.submit(batchjob("first", json!({"gpus": 1}), 1)).await;
    env.until_state("first", JobState::Completed, 30).await;
    // The follower's caches are warm: it saw the job too.
    assert!(follower.ready.load(std::sync::atomic::Ordering::SeqCst));
    assert!(
        follower
            .stores
            .jobs
            .state()
            .iter()
            .any(|j| j.job().metadata.name.as_deref() == Some("first"))
    );

    // The leader dies without releasing its lease: the follower takes over once it expires.
    let t = std::time::Instant::now();
    leader.kill();
    env.until(20, "takeover", || async { leads(&follower) })
        .await;
    // The follower counts the lease's 2 s from when it first saw the leader's last renewal,
    // and a live leader renewed at most `renew_deadline` (1.5 s) before the kill (it steps
    // down otherwise): the takeover comes at least 0.5 s after the kill, usually ~1.8-2 s;
    // taking over at once (as after a step-down) would be milliseconds.
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "waited out the lease: {:?}",
        t.elapsed()
    );
    env.submit(batchjob("second", json!({"gpus": 1}), 1)).await;
    env.until_state("second", JobState::Completed, 30).await;
    let ids: Vec<u64> = [env.job("first").await, env.job("second").await]
        .iter()
        .map(|j| j.status.as_ref().unwrap().job_id.unwrap())
        .collect();
    assert!(
        ids[1] > ids[0],
        "ids keep increasing across leaders: {ids:?}"
    );

    // A clean shutdown releases the lease: a new replica leads without waiting it out. c
    // writes an hour-long lease, so d leading at all after c's shutdown proves the release
    // (no wall-clock bound that a loaded machine could miss).
    let c = replica_with_lease(&env, "replica-c", Duration::from_secs(3600));
    follower.shutdown().await.unwrap();
    env.until(60, "c leads", || async { leads(&c) }).await;
    let d = replica(&env, "replica-d");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!leads(&d));
    c.shutdown().await.unwrap();
    env.until(60, "d leads", || async { leads(&d) }).await;
    d.shutdown().await.unwrap();
}

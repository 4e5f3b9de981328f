//! The operator killed at injected points during admission, over and over, and the API
//! failing one request in ten: no partial gang, no GPU given twice, every job ends right.

mod operator_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use muster_crds::v1alpha1::JobState;
use muster_e2e::apiserver::{FaultRule, Verbs};
use muster_operator::controller::exec::CrashAfter;
use operator_support::{Env, batchjob, cluster};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_admission_100_times() {
    let env = Env::start().await;
    env.add_cluster(&cluster(4, 4), 4).await;
    env.default_partition().await;
    let mut crashes = 0;
    let mut it = 0u64;
    while crashes < 100 {
        it += 1;
        let names = [format!("g{it}a"), format!("g{it}b"), format!("s{it}")];
        env.submit(batchjob(
            &names[0],
            json!({"nodes": 2, "ntasksPerNode": 2, "gpusPerTask": 1}),
            0,
        ))
        .await;
        env.submit(batchjob(
            &names[1],
            json!({"nodes": 2, "ntasksPerNode": 1, "gpusPerNode": 2}),
            0,
        ))
        .await;
        env.submit(batchjob(&names[2], json!({"gpus": 1}), 0)).await;
        // Die after n writes: within the first cycle's admissions (finalizers, statuses,
        // Services, pods).
        let n = it % 17;
        let t0 = std::time::Instant::now();
        eprintln!("=== iteration {it} crash after {n}");
        let mut s = env.settings();
        s.faults = Arc::new(CrashAfter::new(n));
        let mut dying = env.start_operator(s);
        let crashed = tokio::time::timeout(Duration::from_secs(10), dying.wait())
            .await
            .is_ok();
        if crashed {
            crashes += 1;
        } else {
            dying.kill();
        }
        env.check_no_double_gpu().await.unwrap();
        // A fresh operator takes over; every third time only after the gang start timeout.
        if it.is_multiple_of(3) {
            env.offset.fetch_add(400, Ordering::SeqCst);
        }
        let next = env.start_operator(env.settings());
        for name in &names {
            env.until(
                30,
                &format!("{name} completes (iteration {it}, crash after {n})"),
                || async {
                    env.check_no_double_gpu().await.unwrap();
                    let j = env.job(name).await;
                    let st = j.status.unwrap_or_default();
                    if st.reason.as_deref() == Some("JobLaunchFailure") {
                        // Rolled back: skip its backoff.
                        env.offset.fetch_add(40, Ordering::SeqCst);
                    }
                    st.state == Some(JobState::Completed)
                },
            )
            .await;
        }
        env.check_settled_gangs().await.unwrap();
        env.check_no_double_gpu().await.unwrap();
        // DRA: the claims go with their finished attempts, whatever the crash left.
        env.until(30, "the finished jobs' claims are deleted", || async {
            env.live_claims().await.is_empty()
        })
        .await;
        // Delete them (the finalizer is removed once their pods are gone) to keep the
        // cluster small.
        for name in &names {
            env.jobs().delete(name, &Default::default()).await.unwrap();
        }
        env.until(30, "jobs deleted", || async {
            let mut gone = true;
            for name in &names {
                gone &= env.jobs().get_opt(name).await.unwrap().is_none();
            }
            gone
        })
        .await;
        next.shutdown().await.unwrap();
        eprintln!("=== iteration {it} took {:?}", t0.elapsed());
    }
    assert!(crashes >= 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_percent_api_errors_every_job_ends_right() {
    let env = Env::start().await;
    env.add_cluster(&cluster(4, 4), 4).await;
    env.default_partition().await;
    // The first two pod creates (only the operator creates pods) fail for certain, so the
    // error metric is exercised whatever the 10% draw gives the operator's own requests.
    env.server.faults().add(
        FaultRule::new(500, 1.0)
            .resource("pods")
            .verbs(Verbs::Only(vec!["create".into()]))
            .times(2),
    );
    env.server.faults().add(FaultRule::new(500, 0.10));
    let op = env.start_operator(env.settings());
    // The test's own calls retry through the faults.
    async fn retry<F, Fut>(mut f: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        for _ in 0..50 {
            if f().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("gave up");
    }
    let submit = |name: String, spec: serde_json::Value| {
        let env = &env;
        async move {
            let j: muster_crds::v1alpha1::BatchJob =
                serde_json::from_value(batchjob(&name, spec, 1)).unwrap();
            retry(|| async {
                env.jobs().create(&Default::default(), &j).await.is_ok()
                    || env.jobs().get(&name).await.is_ok()
            })
            .await;
        }
    };
    for i in 0..6 {
        submit(
            format!("ok{i}"),
            json!({"nodes": 2, "ntasksPerNode": 1, "gpusPerNode": 2}),
        )
        .await;
    }
    let mut fail = batchjob("fails", json!({"gpus": 1}), 1);
    fail["spec"]["template"]["metadata"]["annotations"]["sim/exit"] = json!("7");
    let fail: muster_crds::v1alpha1::BatchJob = serde_json::from_value(fail).unwrap();
    retry(|| async {
        env.jobs().create(&Default::default(), &fail).await.is_ok()
            || env.jobs().get("fails").await.is_ok()
    })
    .await;
    submit("cancelled".into(), json!({"gpus": 1})).await;
    retry(|| async {
        env.jobs()
            .patch(
                "cancelled",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await
            .is_ok()
    })
    .await;
    let state = |name: &'static str| {
        let env = &env;
        async move {
            match env.jobs().get(name).await {
                Ok(j) => j.status.and_then(|s| s.state),
                Err(_) => None,
            }
        }
    };
    env.until(90, "every job ended", || async {
        let _ = env.check_no_double_gpu().await;
        let mut done = true;
        for n in [
            "ok0",
            "ok1",
            "ok2",
            "ok3",
            "ok4",
            "ok5",
            "fails",
            "cancelled",
        ] {
            done &= state(n).await.is_some_and(|s| s.is_terminal());
        }
        done
    })
    .await;
    env.server.faults().clear();
    for i in 0..6 {
        assert_eq!(
            env.state(&format!("ok{i}")).await,
            Some(JobState::Completed)
        );
    }
    assert_eq!(env.state("fails").await, Some(JobState::Failed));
    assert_eq!(env.job("fails").await.status.unwrap().exit_code, Some(7));
    assert_eq!(env.state("cancelled").await, Some(JobState::Cancelled));
    env.check_no_double_gpu().await.unwrap();
    let m = op.metrics.render();
    assert!(
        m.contains("muster_errors_total{kind=\"server\"}"),
        "errors were injected and counted"
    );
    op.shutdown().await.unwrap();
}

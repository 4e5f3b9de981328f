//! The simulated kubelet: pods run to Succeeded after their run time, to Failed with their
//! exit code, restart under their restart policy, terminate gracefully on deletion, and freeze
//! on a lost node; the clock can run fast.

mod testcluster_common;

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use muster_e2e::kubelet::{EXIT_CODE, RUN_SECONDS, STOP_SECONDS};
use muster_e2e::{TestCluster, TestClusterOptions};
use serde_json::json;
use testcluster_common::*;

fn secs_between(
    a: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    b: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> i64 {
    b.0.duration_since(a.0).as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_to_succeeded_after_their_duration() {
    let c = start().await;
    let ns = namespace(&c, "succeed").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    pods.create(
        &PostParams::default(),
        &pod("ok", &[("MUSTER_SIM_RUN_SECONDS", "2")], json!({})),
    )
    .await
    .unwrap();
    let running = wait(&pods, "ok", "Running", timeout(&c, 10), |p| {
        p.is_some_and(|p| phase(p) != "Pending")
    })
    .await
    .unwrap();
    assert_eq!(phase(&running), "Running");
    let st = running.status.as_ref().unwrap();
    assert!(st.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()));
    assert!(st.host_ip.is_some() && st.start_time.is_some());
    assert_eq!(condition(&running, "Ready").unwrap().status, "True");
    assert_eq!(condition(&running, "PodScheduled").unwrap().status, "True");
    let cs = &st.container_statuses.as_ref().unwrap()[0];
    assert!(cs.ready && cs.started == Some(true));
    assert!(
        cs.state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at
            .is_some()
    );
    let done = wait(&pods, "ok", "Succeeded", timeout(&c, 10), |p| {
        p.is_some_and(|p| matches!(phase(p), "Succeeded" | "Failed"))
    })
    .await
    .unwrap();
    assert_eq!(phase(&done), "Succeeded");
    let t = terminated(&done).unwrap();
    assert_eq!(t.exit_code, 0);
    assert_eq!(t.reason.as_deref(), Some("Completed"));
    let ran = secs_between(
        t.started_at.as_ref().unwrap(),
        t.finished_at.as_ref().unwrap(),
    );
    assert!((2..=4).contains(&ran), "ran {ran} s");
    assert_eq!(condition(&done, "Ready").unwrap().status, "False");
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_fail_with_their_exit_code() {
    let c = start().await;
    let ns = namespace(&c, "fail").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let env = [
        ("MUSTER_SIM_RUN_SECONDS", "0"),
        ("MUSTER_SIM_EXIT_CODE", "3"),
    ];
    pods.create(&PostParams::default(), &pod("bad", &env, json!({})))
        .await
        .unwrap();
    let done = wait(&pods, "bad", "finished", timeout(&c, 10), |p| {
        p.is_some_and(|p| matches!(phase(p), "Succeeded" | "Failed"))
    })
    .await
    .unwrap();
    assert_eq!(phase(&done), "Failed");
    let t = terminated(&done).unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_and_finish_pod_drive_the_simulation() {
    let c = start().await;
    if real_cluster_skips(
        &c,
        "annotations and finish_pod drive the simulated kubelet only",
    ) {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let mut p = pod("annotated", &[("MUSTER_SIM_EXIT_CODE", "1")], json!({}));
    p.metadata.annotations = Some(
        [
            (RUN_SECONDS.to_string(), "0.2".to_string()),
            (EXIT_CODE.to_string(), "42".to_string()),
        ]
        .into(),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    let done = wait(&pods, "annotated", "failed", timeout(&c, 10), |p| {
        p.is_some_and(|p| phase(p) == "Failed")
    })
    .await
    .unwrap();
    assert_eq!(
        terminated(&done).unwrap().exit_code,
        42,
        "the annotation beats the env"
    );
    // A pod that would run for a day, finished on demand.
    pods.create(
        &PostParams::default(),
        &pod("long", &[("MUSTER_SIM_RUN_SECONDS", "86400")], json!({})),
    )
    .await
    .unwrap();
    wait(&pods, "long", "Running", timeout(&c, 10), |p| {
        p.is_some_and(|p| phase(p) == "Running")
    })
    .await;
    c.finish_pod("default", "long", 7).await.unwrap();
    let done = wait(&pods, "long", "failed", timeout(&c, 10), |p| {
        p.is_some_and(|p| phase(p) == "Failed")
    })
    .await
    .unwrap();
    assert_eq!(terminated(&done).unwrap().exit_code, 7);
    // Bad values are reported on the pod, naming the key.
    let mut p = pod("typo", &[], json!({}));
    p.metadata.annotations = Some([(RUN_SECONDS.to_string(), "ten".to_string())].into());
    pods.create(&PostParams::default(), &p).await.unwrap();
    let ev = wait_events(&c, "default", "typo", "InvalidSimulation").await;
    let msg = ev[0].message.clone().unwrap();
    assert!(
        msg.contains("sim.muster.dev/run-seconds") && msg.contains("\"ten\""),
        "{msg}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policy_restarts_with_back_off() {
    let c = TestCluster::start_with(TestClusterOptions::new(spec()).speed(20.0))
        .await
        .unwrap();
    if real_cluster_skips(&c, "uses the fast simulated clock") {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let p = pod(
        "crashy",
        &[
            ("MUSTER_SIM_RUN_SECONDS", "1"),
            ("MUSTER_SIM_EXIT_CODE", "2"),
        ],
        json!({"restartPolicy": "OnFailure"}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    // 1 s run, 10 s back-off, 1 s run, 20 s back-off: two restarts within ~35 simulated s.
    let p = wait(
        &pods,
        "crashy",
        "restarted twice",
        Duration::from_secs(10),
        |p| {
            p.and_then(|p| {
                p.status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()
                    .map(|c| c.restart_count)
            })
            .is_some_and(|n| n >= 2)
        },
    )
    .await
    .unwrap();
    assert_eq!(phase(&p), "Running");
    let cs = &p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.exit_code, 2);
    let waiting = wait(
        &pods,
        "crashy",
        "in back-off",
        Duration::from_secs(10),
        |p| {
            p.and_then(|p| {
                p.status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .state
                    .as_ref()?
                    .waiting
                    .as_ref()
                    .map(|w| w.reason.clone())
            })
            .flatten()
            .is_some_and(|r| r == "CrashLoopBackOff")
        },
    )
    .await
    .unwrap();
    assert_eq!(condition(&waiting, "Ready").unwrap().status, "False");
    c.shutdown().await;
}

/// Watch pod `name` until it is deleted; the last state seen before. Sends on `listed` once
/// the watch has listed the pod: a test deletes it only then (a watch that lists after the pod
/// is gone never sees it, however long the test sleeps before deleting).
async fn last_state_before_deletion(
    pods: &Api<Pod>,
    name: &str,
    within: Duration,
    listed: tokio::sync::oneshot::Sender<()>,
) -> (Pod, bool) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut s = std::pin::pin!(watcher(pods.clone(), cfg).default_backoff());
    let mut last: Option<Pod> = None;
    let mut saw_terminating = false;
    let mut listed = Some(listed);
    let t0 = Instant::now();
    loop {
        let ev = tokio::time::timeout(within.saturating_sub(t0.elapsed()), s.next())
            .await
            .unwrap_or_else(|_| panic!("{name} not deleted in {within:?}; last {last:#?}"))
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                saw_terminating |= p.metadata.deletion_timestamp.is_some();
                last = Some(p);
            }
            watcher::Event::InitDone => {
                assert!(last.is_some(), "{name} was not listed");
                if let Some(l) = listed.take() {
                    let _ = l.send(());
                }
            }
            watcher::Event::Delete(p) => return (last.unwrap_or(p), saw_terminating),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_terminates_gracefully_then_removes_the_pod() {
    let c = start().await;
    let ns = namespace(&c, "graceful").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    pods.create(
        &PostParams::default(),
        &pod("term", &[], json!({"terminationGracePeriodSeconds": 30})),
    )
    .await
    .unwrap();
    wait(&pods, "term", "Running", timeout(&c, 10), |p| {
        p.is_some_and(|p| phase(p) == "Running")
    })
    .await;
    let (listed, watching) = tokio::sync::oneshot::channel();
    let watch = {
        let pods = pods.clone();
        let within = timeout(&c, 10);
        tokio::spawn(async move { last_state_before_deletion(&pods, "term", within, listed).await })
    };
    watching.await.expect("the watch lists the pod");
    pods.delete("term", &DeleteParams::default()).await.unwrap();
    let (last, saw_terminating) = watch.await.unwrap();
    assert!(
        saw_terminating,
        "the pod showed deletionTimestamp before it went"
    );
    assert_eq!(phase(&last), "Failed");
    let t = terminated(&last).unwrap();
    assert_eq!(t.exit_code, 143, "SIGTERM");
    assert!(pods.get_opt("term").await.unwrap().is_none());
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_ignoring_sigterm_are_killed_at_the_grace_period() {
    let c = start().await;
    if real_cluster_skips(&c, "stop-seconds is a simulation annotation") {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let mut p = pod("stubborn", &[], json!({"terminationGracePeriodSeconds": 1}));
    p.metadata.annotations = Some([(STOP_SECONDS.to_string(), "600".to_string())].into());
    pods.create(&PostParams::default(), &p).await.unwrap();
    wait(&pods, "stubborn", "Running", timeout(&c, 10), |p| {
        p.is_some_and(|p| phase(p) == "Running")
    })
    .await;
    let (listed, watching) = tokio::sync::oneshot::channel();
    let watch = {
        let pods = pods.clone();
        tokio::spawn(async move {
            last_state_before_deletion(&pods, "stubborn", Duration::from_secs(10), listed).await
        })
    };
    watching.await.expect("the watch lists the pod");
    let t0 = Instant::now();
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    let (last, _) = watch.await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "waited out the grace period"
    );
    assert_eq!(terminated(&last).unwrap().exit_code, 137, "SIGKILL");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_freezes_its_pods_and_evicts_them_later() {
    let c = start().await;
    if real_cluster_skips(&c, "uses the simulated clock to pass tolerationSeconds") {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let nodes: Api<Node> = Api::all(c.client());
    let pin = json!({"nodeSelector": {"kubernetes.io/hostname": "gpu003"}});
    pods.create(
        &PostParams::default(),
        &pod("victim", &[("MUSTER_SIM_RUN_SECONDS", "5")], pin.clone()),
    )
    .await
    .unwrap();
    let mut patient = pin.clone();
    patient["tolerations"] = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}]);
    pods.create(&PostParams::default(), &pod("patient", &[], patient))
        .await
        .unwrap();
    for p in ["victim", "patient"] {
        wait(&pods, p, "Running", timeout(&c, 10), |p| {
            p.is_some_and(|p| phase(p) == "Running")
        })
        .await;
    }
    c.fail_node("gpu003").await.unwrap();
    let n = nodes.get("gpu003").await.unwrap();
    let ready = n
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("Unknown", Some("NodeStatusUnknown"))
    );
    let taints = n.spec.unwrap().taints.unwrap();
    for effect in ["NoSchedule", "NoExecute"] {
        assert!(
            taints
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable"
                    && t.effect == effect
                    && t.time_added.is_some()),
            "{taints:?}"
        );
    }
    let v = wait(&pods, "victim", "not ready", timeout(&c, 10), |p| {
        p.and_then(|p| condition(p, "Ready"))
            .is_some_and(|c| c.status == "False")
    })
    .await
    .unwrap();
    assert_eq!(
        phase(&v),
        "Running",
        "a lost node's pods are not marked Failed"
    );
    // Its 5 s run time passes, but nothing runs the pod: it stays Running.
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.clock().advance(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(phase(&pods.get("victim").await.unwrap()), "Running");
    // After the default 300 s toleration, the taint manager evicts; with no kubelet the pod
    // stays Terminating.
    c.clock().advance(Duration::from_secs(300));
    let v = wait(&pods, "victim", "evicted", timeout(&c, 10), |p| {
        p.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await
    .unwrap();
    let dt = condition(&v, "DisruptionTarget").unwrap();
    assert_eq!(dt.reason.as_deref(), Some("DeletionByTaintManager"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        pods.get_opt("victim").await.unwrap().is_some(),
        "Terminating until the node returns"
    );
    let patient = pods.get("patient").await.unwrap();
    assert!(
        patient.metadata.deletion_timestamp.is_none(),
        "tolerates unreachable for ever"
    );
    // The node comes back: the kubelet finishes the deletion, the other pod is Ready again.
    c.recover_node("gpu003").await.unwrap();
    wait(&pods, "victim", "gone", timeout(&c, 10), |p| p.is_none()).await;
    wait(&pods, "patient", "ready again", timeout(&c, 10), |p| {
        p.and_then(|p| condition(p, "Ready"))
            .is_some_and(|c| c.status == "True")
    })
    .await;
    let n = nodes.get("gpu003").await.unwrap();
    assert!(n.spec.unwrap().taints.is_none_or(|t| t.is_empty()));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_clock_runs_long_jobs_quickly() {
    let c = TestCluster::start_with(TestClusterOptions::new(spec()).speed(600.0))
        .await
        .unwrap();
    if real_cluster_skips(&c, "uses the fast simulated clock") {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let t0 = Instant::now();
    pods.create(
        &PostParams::default(),
        &pod("hour", &[("MUSTER_SIM_RUN_SECONDS", "1800")], json!({})),
    )
    .await
    .unwrap();
    let done = wait(&pods, "hour", "Succeeded", Duration::from_secs(60), |p| {
        p.is_some_and(|p| phase(p) == "Succeeded")
    })
    .await
    .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "half an hour at 600x is 3 s, not 30 min"
    );
    let t = terminated(&done).unwrap();
    let ran = secs_between(
        t.started_at.as_ref().unwrap(),
        t.finished_at.as_ref().unwrap(),
    );
    assert!(
        (1799..=1801).contains(&ran),
        "the timestamps are in simulated time: {ran}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_through_injected_api_errors() {
    let c = start().await;
    if real_cluster_skips(&c, "fault injection is the double's") {
        return;
    }
    c.faults().unwrap().add(
        muster_e2e::apiserver::FaultRule::new(500, 0.2)
            .verbs(muster_e2e::apiserver::Verbs::Writes)
            .resource("pods"),
    );
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    for i in 0..20 {
        let p = pod(
            &format!("rough-{i}"),
            &[("MUSTER_SIM_RUN_SECONDS", "0.2")],
            json!({}),
        );
        while pods.create(&PostParams::default(), &p).await.is_err() {}
    }
    for i in 0..20 {
        wait(
            &pods,
            &format!("rough-{i}"),
            "Succeeded",
            Duration::from_secs(20),
            |p| p.is_some_and(|p| phase(p) == "Succeeded"),
        )
        .await;
    }
    c.shutdown().await;
}

//! Health transitions through the API: the scripted-faults fixture fails GPUs (critical XID,
//! double-bit ECC, lost) and they come back after the quiet period or a reset; the GpuNode
//! status and Events say so. A restarted agent carries on from the published status.

use std::sync::Arc;

use muster_crds::v1alpha1::{GpuHealth, GpuHealthState};
use muster_node_agent::agent::{RECOVERED_REASON, UNHEALTHY_REASON};
use muster_node_agent::inventory::FixtureInventory;
use muster_node_agent::inventory::fixture::Action;
use muster_node_agent::{Policy, RecordingKiller};

use crate::support::*;

fn health(st: &muster_crds::v1alpha1::GpuNodeStatus, gpu: usize) -> GpuHealth {
    st.gpus[gpu].health.clone()
}

fn since(h: &GpuHealth) -> Option<jiff::Timestamp> {
    h.since.as_ref().map(|t| t.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_faults_fail_and_recover_gpus_in_the_gpunode() {
    let (_server, client) = api().await;
    register_node(&client, NODE).await;
    let dir = tempfile::tempdir().unwrap();
    let t = t0();
    // A 2-minute quiet period; the agent's clock is the `now` each poll is given.
    let mut agent = agent(
        &client,
        config(Policy::Report, 120, dir.path()),
        fixture_inventory("scripted-faults", t),
        Arc::new(RecordingKiller::default()),
        t,
    )
    .await;
    let gpu_events = || events_about(&client, "default", NODE);

    agent.cycle(t).await.unwrap();
    let st = status(&client).await;
    assert_eq!((st.gpu_count, st.healthy_gpus), (2, 2));

    // +30s: XID 13 (an application error) changes nothing.
    let r = agent.cycle(at(t, 30)).await.unwrap();
    assert!(r.health_changes.is_empty());
    assert_eq!(status(&client).await.healthy_gpus, 2);
    assert!(gpu_events().await.is_empty());

    // +1m: XID 63 (row remapping) on GPU 0.
    let r = agent.cycle(at(t, 60)).await.unwrap();
    assert!(r.published);
    let st = status(&client).await;
    assert_eq!(st.healthy_gpus, 1);
    let h = health(&st, 0);
    assert_eq!(h.state, GpuHealthState::Unhealthy);
    assert_eq!(h.last_xid, Some(63));
    assert_eq!(since(&h), Some(at(t, 60)));
    assert!(h.reason.as_deref().unwrap().contains("XID 63"), "{h:?}");
    assert_eq!(health(&st, 1).state, GpuHealthState::Healthy);
    let evs = gpu_events().await;
    assert_eq!(reasons(&evs), [UNHEALTHY_REASON]);
    let ev = &evs[0];
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let regarding = ev.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("GpuNode"));
    assert_eq!(regarding.uid, gpunode(&client).await.metadata.uid);
    assert!(ev.note.as_deref().unwrap().contains("GPU 0"), "{ev:?}");

    // +2m: a double-bit ECC error on GPU 1.
    agent.cycle(at(t, 120)).await.unwrap();
    let st = status(&client).await;
    assert_eq!(st.healthy_gpus, 0);
    let h1 = health(&st, 1);
    assert_eq!(h1.state, GpuHealthState::Unhealthy);
    assert_eq!(since(&h1), Some(at(t, 120)));
    assert!(
        h1.reason.as_deref().unwrap().contains("double-bit ECC"),
        "{h1:?}"
    );

    // +2m50s: GPU 0 has been quiet for less than the quiet period.
    let r = agent.cycle(at(t, 170)).await.unwrap();
    assert!(r.health_changes.is_empty());
    assert_eq!(
        health(&status(&client).await, 0).state,
        GpuHealthState::Unhealthy
    );

    // +3m: GPU 0 quiet for 2 minutes: Healthy again, and the status says why. GPU 1 gets
    // XID 79 and falls off the bus.
    agent.cycle(at(t, 180)).await.unwrap();
    let st = status(&client).await;
    let h0 = health(&st, 0);
    assert_eq!(h0.state, GpuHealthState::Healthy);
    assert_eq!(since(&h0), Some(at(t, 180)));
    assert_eq!(
        h0.reason.as_deref(),
        Some("recovered: no critical error for 2m")
    );
    assert_eq!(h0.last_xid, Some(63), "the last XID stays on record");
    let h1 = health(&st, 1);
    assert_eq!(h1.state, GpuHealthState::Unhealthy);
    assert_eq!(h1.last_xid, Some(79));
    assert_eq!(
        since(&h1),
        Some(at(t, 120)),
        "still out since the first fault"
    );
    assert_eq!(st.healthy_gpus, 1);
    let evs = gpu_events().await;
    assert_eq!(
        reasons(&evs),
        [UNHEALTHY_REASON, UNHEALTHY_REASON, RECOVERED_REASON]
    );
    assert_eq!(evs[2].type_.as_deref(), Some("Normal"));

    // A lost GPU cannot go quiet: long past the quiet period it is still Unhealthy.
    for secs in [300, 420, 540] {
        let r = agent.cycle(at(t, secs)).await.unwrap();
        assert!(
            r.health_changes.is_empty(),
            "+{secs}s: {:?}",
            r.health_changes
        );
    }
    let h1 = health(&status(&client).await, 1);
    assert_eq!(h1.state, GpuHealthState::Unhealthy);
    assert!(h1.reason.as_deref().unwrap().contains("lost"), "{h1:?}");

    // +10m: GPU 1 is reset: Healthy at once.
    agent.cycle(at(t, 600)).await.unwrap();
    let st = status(&client).await;
    assert_eq!(st.healthy_gpus, 2);
    let h1 = health(&st, 1);
    assert_eq!(h1.state, GpuHealthState::Healthy);
    assert_eq!(since(&h1), Some(at(t, 600)));
    assert_eq!(
        h1.reason.as_deref(),
        Some("reset detected: fixture reset event")
    );
    assert_eq!(
        reasons(&gpu_events().await),
        [
            UNHEALTHY_REASON,
            UNHEALTHY_REASON,
            RECOVERED_REASON,
            RECOVERED_REASON
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gpus_failing_in_one_poll_get_an_event_each() {
    let (_server, client) = api().await;
    register_node(&client, NODE).await;
    let dir = tempfile::tempdir().unwrap();
    let t = t0();
    let inv = fixture_inventory("dgx-h100", t);
    let script = inv.handle();
    let mut agent = agent(
        &client,
        config(Policy::Report, 0, dir.path()),
        inv,
        Arc::new(RecordingKiller::default()),
        t,
    )
    .await;
    agent.cycle(t).await.unwrap();
    script.inject(Action::Xid { gpu: 2, code: 48 });
    script.inject(Action::DoubleBitEcc { gpu: 5, count: 3 });
    let r = agent.cycle(at(t, 5)).await.unwrap();
    assert_eq!(r.health_changes.len(), 2);
    let st = status(&client).await;
    assert_eq!(st.healthy_gpus, 6);
    let evs = events_about(&client, "default", NODE).await;
    assert_eq!(reasons(&evs), [UNHEALTHY_REASON, UNHEALTHY_REASON]);
    let notes: Vec<&str> = evs.iter().map(|e| e.note.as_deref().unwrap()).collect();
    assert!(notes.iter().any(|n| n.starts_with("GPU 2 ")), "{notes:?}");
    assert!(notes.iter().any(|n| n.starts_with("GPU 5 ")), "{notes:?}");
    // Quiet period 0: only a reset brings a GPU back, however long it is quiet.
    agent.cycle(at(t, 86_400)).await.unwrap();
    assert_eq!(status(&client).await.healthy_gpus, 6);
    script.inject(Action::Reset { gpu: 5 });
    agent.cycle(at(t, 86_405)).await.unwrap();
    let st = status(&client).await;
    assert_eq!(st.healthy_gpus, 7);
    assert_eq!(st.gpus[5].health.state, GpuHealthState::Healthy);
    assert_eq!(st.gpus[2].health.state, GpuHealthState::Unhealthy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_keeps_an_unhealthy_gpu_unhealthy() {
    let (_server, client) = api().await;
    register_node(&client, NODE).await;
    let dir = tempfile::tempdir().unwrap();
    let t = t0();
    let inv = fixture_inventory("pcie-4gpu-2socket", t);
    let script = inv.handle();
    let mut first = agent(
        &client,
        config(Policy::Report, 120, dir.path()),
        inv,
        Arc::new(RecordingKiller::default()),
        t,
    )
    .await;
    first.cycle(t).await.unwrap();
    script.inject(Action::Xid { gpu: 1, code: 79 });
    first.cycle(at(t, 10)).await.unwrap();
    drop(first);

    // A new agent (a new pod of the DaemonSet) with a fresh backend that saw no fault: the
    // GPU stays Unhealthy, its quiet period restarting from the new agent's start.
    let restart = at(t, 100);
    let mut second = agent(
        &client,
        config(Policy::Report, 120, dir.path()),
        FixtureInventory::load(&fixture_path("pcie-4gpu-2socket")).unwrap(),
        Arc::new(RecordingKiller::default()),
        restart,
    )
    .await;
    second.cycle(restart).await.unwrap();
    let h = status(&client).await.gpus[1].health.clone();
    assert_eq!(h.state, GpuHealthState::Unhealthy);
    assert_eq!(h.last_xid, Some(79));
    assert_eq!(since(&h), Some(at(t, 10)));
    // 2 minutes after the first fault, but not after the restart: still out.
    second.cycle(at(t, 140)).await.unwrap();
    assert_eq!(
        status(&client).await.gpus[1].health.state,
        GpuHealthState::Unhealthy
    );
    second.cycle(at(restart, 120)).await.unwrap();
    let h = status(&client).await.gpus[1].health.clone();
    assert_eq!(h.state, GpuHealthState::Healthy);
    assert_eq!(since(&h), Some(at(restart, 120)));
}

//! The leader's loop: a scheduling cycle on every watch event (debounced) and every
//! `cycle_interval` while it leads, dropped at once when leadership is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::{Recent, RunError, Settings, Stores};
use crate::controller::early;
use crate::controller::exec;
use crate::controller::jobids::JobIds;
use crate::controller::kube_api::KubeApi;
use crate::controller::metrics::Metrics;
use crate::controller::plan::{self, Inputs, PlanMemory};
use crate::controller::usage::Usage;

/// The leader's state.
pub(super) struct Leader {
    pub(super) api: KubeApi,
    pub(super) ids: JobIds,
    pub(super) usage: Usage,
    pub(super) mem: PlanMemory,
    pub(super) recent: Recent,
    pub(super) last_running: Vec<crate::core::priority::UsageSpan>,
    /// When freed memory was last returned to the system.
    pub(super) trimmed: Instant,
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn main_loop(
    mut leader: Leader,
    stores: Stores,
    settings: Settings,
    metrics: Metrics,
    notify: Arc<Notify>,
    mut leading: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
    ready: Arc<AtomicBool>,
) -> Result<(), RunError> {
    let mut term_started = false;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let is_leader = *leading.borrow();
        if !is_leader || !ready.load(Ordering::SeqCst) {
            if term_started && !is_leader {
                term_started = false;
                metrics.clear_gauges();
                tracing::info!("not leading: scheduling stopped");
            }
            tokio::select! {
                _ = leading.changed() => {}
                _ = shutdown.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            continue;
        }
        if !term_started {
            // A new term: nothing remembered from an earlier one is trusted.
            term_started = true;
            leader.mem = PlanMemory::default();
            leader.recent.clear();
            leader.ids.forget();
            if let Err(e) = leader.usage.load(settings.clock.now()).await {
                metrics.error(e.metric_label());
                tracing::warn!(error = %e, "could not load fair-share usage; starting empty");
            }
            tracing::info!("leading: scheduling");
        }
        let cycle = run_cycle(&mut leader, &stores, &settings, &metrics);
        let crashed = tokio::select! {
            r = cycle => r,
            _ = wait_lost(&mut leading) => {
                tracing::warn!("leadership lost during a cycle: stopped");
                false
            }
        };
        if crashed {
            return Err(RunError::Crashed);
        }
        tokio::select! {
            _ = notify.notified() => {
                tokio::time::sleep(settings.debounce).await;
            }
            _ = tokio::time::sleep(settings.cycle_interval) => {}
            _ = shutdown.changed() => {}
            _ = leading.changed() => {}
        }
    }
}

async fn wait_lost(leading: &mut watch::Receiver<bool>) {
    loop {
        if !*leading.borrow() {
            return;
        }
        if leading.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A cycle that wrote this much built and dropped that many objects (pods, request and
/// response bodies): worth handing the freed memory back to the system afterwards.
const TRIM_AFTER_WRITES: u64 = 1_000;

/// Otherwise the heap is trimmed at most this often (the reflectors' bursts of decoded
/// objects leave freed memory too).
const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Returns freed heap pages to the system where the allocator is glibc's (this library's
/// users, tests included; the `muster-operator` binary runs on mimalloc, which hands freed
/// pages back itself, and there this trims an almost empty glibc heap). glibc keeps what a
/// burst freed (per-thread arenas, fragmented heaps) mapped, so after admitting 1,000 gangs
/// in one cycle the resident size would stay at that cycle's peak for good; `malloc_trim`
/// releases it (a few ms on a large heap, only after big cycles).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A spawned task aborted when its handle is dropped (a cycle dropped at leadership loss
/// must not go on writing).
struct AbortTask<T>(JoinHandle<T>);

impl<T> Drop for AbortTask<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One cycle; returns whether an injected crash stopped it.
async fn run_cycle(
    leader: &mut Leader,
    stores: &Stores,
    settings: &Settings,
    metrics: &Metrics,
) -> bool {
    let t0 = Instant::now();
    let now = settings.clock.now();
    let partitions = stores.partitions.state();
    let caps = stores.capabilities();
    let table = stores.node_table();
    let jobs = leader.recent.merge_jobs(stores.jobs.state());
    let pods = leader.recent.merge_pods(stores.pods.state());
    let claims = if caps.resource_v1 {
        leader.recent.merge_claims(stores.claims.state())
    } else {
        Vec::new()
    };
    let dra = stores.dra_support();
    let expected = leader.recent.expected_jobs();

    let need = plan::new_job_count(&jobs);
    if need > 0
        && let Err(e) = leader.ids.reserve(need).await
    {
        metrics.error(e.metric_label());
        tracing::warn!(error = %e, "could not reserve job ids");
    }
    leader.usage.accrue(&leader.last_running, now);
    let usage = leader.usage.record.usage.clone();
    let inp = Inputs {
        now,
        partitions: &partitions,
        nodes: &table,
        jobs: &jobs,
        pods: &pods,
        expected_jobs: &expected,
        usage: &usage,
        claims: &claims,
        dra: &dra,
        gang: caps.gang,
    };
    // New jobs get the finalizer while the plan runs (`early`): the writes wait on the API
    // server, the plan on this thread's CPU. Yielding once lets the writes' task send its
    // first requests before the plan takes this thread; their answers wake it on the other
    // worker. (Not `block_in_place`: under glibc's malloc the thread it adds got an arena of
    // its own, +10 MiB resident at 4,096 nodes.)
    let early_jobs = early::select(&jobs);
    let early_task = (!early_jobs.is_empty()).then(|| {
        let (api, faults) = (leader.api.clone(), settings.faults.clone());
        let conc = settings.write_concurrency;
        AbortTask(tokio::spawn(async move {
            exec::add_finalizers(early_jobs, &api, faults.as_ref(), conc).await
        }))
    });
    if early_task.is_some() {
        tokio::task::yield_now().await;
    }
    let ids = &mut leader.ids;
    let mut cp = plan::plan(&inp, &settings.plan, &mut leader.mem, &mut || ids.take());
    let early = match early_task {
        Some(mut t) => (&mut t.0).await.unwrap_or_default(),
        None => Default::default(),
    };
    leader.last_running = std::mem::take(&mut cp.running);
    metrics.set_gauges(&cp.gauges);
    let (starts, queued) = (cp.starts, cp.queued);
    let (n_jobs, n_pods) = (jobs.len(), pods.len());
    let mut report = early::execute_after(
        cp,
        early,
        jobs,
        &leader.api,
        settings.faults.as_ref(),
        settings.write_concurrency,
        &stores.job_versions,
    )
    .await;
    metrics.record(&report);
    for w in &report.written {
        leader.mem.wrote_status(&w.job.uid(), now);
    }
    leader.recent.record(&mut report);
    stores.job_versions.prune();
    if !report.events.is_empty() {
        // Events are best effort and must not hold up the next cycle: published in the
        // background, at most a bounded number at once (older batches still in flight are
        // not waited for).
        let api = leader.api.clone();
        let events = std::mem::take(&mut report.events);
        let m = metrics.clone();
        let conc = settings.write_concurrency;
        tokio::spawn(async move {
            let (n, errors) = exec::publish_events(&api, events, conc).await;
            m.write(exec::WriteKind::Event, n);
            for (k, v) in errors {
                m.errors
                    .get_or_create(&[("kind", format!("event_{k}"))])
                    .inc_by(v);
            }
        });
    }
    for n in &report.partitions_written {
        leader.mem.wrote_partition(n, now);
    }
    if report.crashed {
        return true;
    }
    let written: u64 = report.writes.values().sum();
    drop(report);
    if written >= TRIM_AFTER_WRITES || leader.trimmed.elapsed() >= TRIM_INTERVAL {
        release_free_memory();
        leader.trimmed = Instant::now();
    }
    if let Err(e) = leader.usage.maybe_persist(now).await {
        metrics.error(e.metric_label());
        tracing::warn!(error = %e, "could not persist fair-share usage");
    }
    let dt = t0.elapsed();
    metrics.cycle.observe(dt.as_secs_f64());
    tracing::debug!(
        elapsed_ms = dt.as_millis() as u64,
        jobs = n_jobs,
        pods = n_pods,
        queued,
        starts,
        writes = written,
        "cycle"
    );
    false
}

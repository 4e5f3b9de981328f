//! The operator's Prometheus metrics (prometheus-client), served at `/metrics`.
//!
//! Names are a contract with the chart's Grafana dashboard; do not rename:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `muster_queue_jobs` | gauge | `partition`, `reason` |
//! | `muster_running_jobs` | gauge | `partition` |
//! | `muster_scheduling_cycle_duration_seconds` | histogram | |
//! | `muster_job_time_to_start_seconds` | histogram | `partition` |
//! | `muster_gpus` | gauge | `partition`, `state` = total, allocated, unhealthy |
//! | `muster_preemptions_total` | counter | `partition` |
//! | `muster_job_transitions_total` | counter | `state` |
//! | `muster_errors_total` | counter | `kind` |
//! | `muster_leader` | gauge | |
//! | `muster_api_writes_total` | counter | `kind` (see [`super::exec::WriteKind`]) |
//!
//! Gauges are the leader's view after its last cycle; a replica that does not lead reports
//! `muster_leader 0` and leaves the job gauges empty.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::exec::{ExecReport, WriteKind};
use super::plan::{Effect, Gauges};

type L1 = [(&'static str, String); 1];
type L2 = [(&'static str, String); 2];

/// Every metric of the operator.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// `muster_queue_jobs{partition,reason}`.
    pub queue: Family<L2, Gauge>,
    /// `muster_running_jobs{partition}`.
    pub running: Family<L1, Gauge>,
    /// `muster_scheduling_cycle_duration_seconds`.
    pub cycle: Histogram,
    /// `muster_job_time_to_start_seconds{partition}`.
    pub time_to_start: Family<L1, Histogram>,
    /// `muster_gpus{partition,state}`.
    pub gpus: Family<L2, Gauge>,
    /// `muster_preemptions_total{partition}`.
    pub preemptions: Family<L1, Counter>,
    /// `muster_job_transitions_total{state}`.
    pub transitions: Family<L1, Counter>,
    /// `muster_errors_total{kind}`.
    pub errors: Family<L1, Counter>,
    /// `muster_leader`.
    pub leader: Gauge,
    /// `muster_api_writes_total{kind}`.
    pub writes: Family<L1, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut r = Registry::default();
        let queue = Family::<L2, Gauge>::default();
        let running = Family::<L1, Gauge>::default();
        // 1 ms .. ~33 s.
        let cycle = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        // 1 s .. ~9 days.
        let time_to_start = Family::<L1, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(1.0, 3.0, 14))
        });
        let gpus = Family::<L2, Gauge>::default();
        let preemptions = Family::<L1, Counter>::default();
        let transitions = Family::<L1, Counter>::default();
        let errors = Family::<L1, Counter>::default();
        let leader = Gauge::default();
        let writes = Family::<L1, Counter>::default();
        r.register(
            "muster_queue_jobs",
            "Pending jobs by partition and Slurm reason",
            queue.clone(),
        );
        r.register(
            "muster_running_jobs",
            "Running jobs by partition",
            running.clone(),
        );
        r.register(
            "muster_scheduling_cycle_duration_seconds",
            "Duration of a scheduling cycle: snapshot, schedule and writes",
            cycle.clone(),
        );
        r.register(
            "muster_job_time_to_start_seconds",
            "Time from submission to start",
            time_to_start.clone(),
        );
        r.register(
            "muster_gpus",
            "GPUs by partition and state (total, allocated, unhealthy)",
            gpus.clone(),
        );
        r.register(
            "muster_preemptions",
            "Gangs preempted, by the victim's partition",
            preemptions.clone(),
        );
        r.register(
            "muster_job_transitions",
            "Job state transitions, by the state entered",
            transitions.clone(),
        );
        r.register("muster_errors", "Errors by kind", errors.clone());
        r.register(
            "muster_leader",
            "1 when this replica leads (schedules and writes)",
            leader.clone(),
        );
        r.register(
            "muster_api_writes",
            "API writes attempted, by kind",
            writes.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            queue,
            running,
            cycle,
            time_to_start,
            gpus,
            preemptions,
            transitions,
            errors,
            leader,
            writes,
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if encode(&mut s, &self.registry).is_err() {
            s.clear();
        }
        s
    }

    /// Counts a write.
    pub fn write(&self, kind: WriteKind, n: u64) {
        self.writes
            .get_or_create(&[("kind", kind.label().to_string())])
            .inc_by(n);
    }

    /// Counts an error.
    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&[("kind", kind.to_string())])
            .inc();
    }

    /// Replaces the gauges with a cycle's values.
    pub fn set_gauges(&self, g: &Gauges) {
        self.queue.clear();
        for ((p, r), v) in &g.queue {
            self.queue
                .get_or_create(&[("partition", p.clone()), ("reason", r.clone())])
                .set(*v as i64);
        }
        self.running.clear();
        for (p, v) in &g.running {
            self.running
                .get_or_create(&[("partition", p.clone())])
                .set(*v as i64);
        }
        self.gpus.clear();
        for ((p, s), v) in &g.gpus {
            self.gpus
                .get_or_create(&[("partition", p.clone()), ("state", s.clone())])
                .set(*v as i64);
        }
    }

    /// Clears the job gauges (when leadership is lost: another replica reports them).
    pub fn clear_gauges(&self) {
        self.queue.clear();
        self.running.clear();
        self.gpus.clear();
    }

    /// Records what a cycle's execution did.
    pub fn record(&self, r: &ExecReport) {
        for (k, n) in &r.writes {
            self.write(*k, *n);
        }
        for (k, n) in &r.errors {
            self.errors
                .get_or_create(&[("kind", (*k).to_string())])
                .inc_by(*n);
        }
        for w in &r.written {
            for e in &w.effects {
                match e {
                    Effect::Transition(s) => {
                        self.transitions
                            .get_or_create(&[("state", s.as_str().to_string())])
                            .inc();
                    }
                    Effect::TimeToStart { partition, secs } => self
                        .time_to_start
                        .get_or_create(&[("partition", partition.clone())])
                        .observe(*secs),
                    Effect::Preempted { partition } => {
                        self.preemptions
                            .get_or_create(&[("partition", partition.clone())])
                            .inc();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::exec::Written;
    use muster_crds::v1alpha1::{BatchJob, JobState};

    #[test]
    fn names_match_the_dashboard_contract() {
        let m = Metrics::new();
        let mut g = Gauges::default();
        g.queue.insert(("gpu".into(), "Resources".into()), 3);
        g.running.insert("gpu".into(), 2);
        g.gpus.insert(("gpu".into(), "total".into()), 16);
        m.set_gauges(&g);
        m.cycle.observe(0.01);
        m.leader.set(1);
        let mut r = ExecReport::default();
        r.writes.insert(WriteKind::PodCreate, 4);
        r.errors.insert("conflict", 1);
        r.written.push(Written {
            job: std::sync::Arc::new(crate::controller::jobobs::JobObs::new(BatchJob::new(
                "x",
                Default::default(),
            ))),
            effects: vec![
                Effect::Transition(JobState::Running),
                Effect::TimeToStart {
                    partition: "gpu".into(),
                    secs: 2.0,
                },
                Effect::Preempted {
                    partition: "low".into(),
                },
            ],
        });
        m.record(&r);
        let t = m.render();
        for needle in [
            "muster_queue_jobs{partition=\"gpu\",reason=\"Resources\"} 3",
            "muster_running_jobs{partition=\"gpu\"} 2",
            "muster_scheduling_cycle_duration_seconds_count 1",
            "muster_job_time_to_start_seconds_count{partition=\"gpu\"} 1",
            "muster_gpus{partition=\"gpu\",state=\"total\"} 16",
            "muster_preemptions_total{partition=\"low\"} 1",
            "muster_job_transitions_total{state=\"RUNNING\"} 1",
            "muster_errors_total{kind=\"conflict\"} 1",
            "muster_leader 1",
            "muster_api_writes_total{kind=\"pod_create\"} 4",
        ] {
            assert!(t.contains(needle), "missing {needle} in\n{t}");
        }
        // Gauges are replaced, not accumulated.
        m.set_gauges(&Gauges::default());
        assert!(!m.render().contains("muster_queue_jobs{"));
    }
}

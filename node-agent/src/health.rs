//! GPU health as a state machine with time as an argument.
//!
//! A GPU turns Unhealthy on a critical XID (see [`crate::xid`]), a double-bit ECC error, or
//! when it stops answering NVML (lost). Unlike NVIDIA's device plugin, which never takes a GPU
//! back, it returns to Healthy
//! - after a quiet period with no new fault (`--quiet-period`, default 300s; `0` turns this
//!   off), or
//! - at once when a reset is detected (see the inventory backends for the evidence used).
//!
//! A lost GPU reports `Lost` on every observation, so it cannot "recover" by going quiet while
//! it is still gone. Each transition carries a reason and since-when, published in the GpuNode.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_crds::v1alpha1::{GpuHealth, GpuHealthState};

use crate::model::{GpuEventKind, NodeInventory};
use crate::xid::{self, XidPolicy};

/// What drives health decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// Fault-free time after which an Unhealthy GPU is taken back; zero disables this.
    pub quiet_period: SignedDuration,
    /// Which XIDs are critical.
    pub xids: XidPolicy,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            quiet_period: SignedDuration::from_secs(300),
            xids: XidPolicy::default(),
        }
    }
}

/// One GPU's health over time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuHealthTracker {
    state: GpuHealthState,
    since: Option<Timestamp>,
    last_xid: Option<u32>,
    reason: Option<String>,
    /// The latest fault; the quiet period counts from here.
    last_fault: Option<Timestamp>,
}

/// A change of a GPU's health state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthChange {
    /// GPU index.
    pub gpu: u32,
    /// GPU UUID.
    pub uuid: String,
    /// The new state.
    pub to: GpuHealthState,
    /// Why.
    pub reason: String,
    /// When.
    pub at: Timestamp,
}

impl Default for GpuHealthTracker {
    fn default() -> Self {
        Self::healthy()
    }
}

impl GpuHealthTracker {
    /// A GPU with no history.
    pub fn healthy() -> Self {
        GpuHealthTracker {
            state: GpuHealthState::Healthy,
            since: None,
            last_xid: None,
            reason: None,
            last_fault: None,
        }
    }

    /// Picks up where a previous agent left off (its published status), so a restart never
    /// forgets an Unhealthy GPU. The quiet period restarts at `now`: the old agent's last
    /// fault time is not published, and recovering too early is the worse mistake.
    pub fn from_status(h: &GpuHealth, now: Timestamp) -> Self {
        GpuHealthTracker {
            state: h.state,
            since: h.since.as_ref().map(|t| t.0),
            last_xid: h.last_xid,
            reason: h.reason.clone(),
            last_fault: (h.state == GpuHealthState::Unhealthy).then_some(now),
        }
    }

    /// The current state.
    pub fn state(&self) -> GpuHealthState {
        self.state
    }

    /// Feeds one event observed at `at`; returns the new state and reason if it changed.
    pub fn observe(
        &mut self,
        kind: &GpuEventKind,
        at: Timestamp,
        cfg: &HealthConfig,
    ) -> Option<(GpuHealthState, String)> {
        let (reason, xid) = match kind {
            GpuEventKind::Xid(x) if cfg.xids.is_critical(*x) => (xid::reason(*x), *x),
            GpuEventKind::Xid(_) => return None,
            GpuEventKind::DoubleBitEcc { count } => {
                (format!("double-bit ECC error ({count} new)"), None)
            }
            GpuEventKind::Lost => (
                "GPU is lost: it does not answer NVML (fallen off the bus or failed)".to_string(),
                None,
            ),
            GpuEventKind::Reset { signal } => {
                if self.state == GpuHealthState::Unhealthy {
                    let reason = format!("reset detected: {signal}");
                    self.become_state(GpuHealthState::Healthy, at, reason.clone());
                    self.last_fault = None;
                    return Some((GpuHealthState::Healthy, reason));
                }
                return None;
            }
        };
        if xid.is_some() {
            self.last_xid = xid;
        }
        self.last_fault = Some(self.last_fault.map_or(at, |t| t.max(at)));
        if self.state == GpuHealthState::Unhealthy {
            // Still out of service; the latest fault explains why, `since` stays.
            self.reason = Some(reason);
            return None;
        }
        self.become_state(GpuHealthState::Unhealthy, at, reason.clone());
        Some((GpuHealthState::Unhealthy, reason))
    }

    /// Lets time pass: an Unhealthy GPU quiet for the whole quiet period turns Healthy.
    pub fn tick(&mut self, now: Timestamp, cfg: &HealthConfig) -> Option<(GpuHealthState, String)> {
        if self.state != GpuHealthState::Unhealthy || cfg.quiet_period.is_zero() {
            return None;
        }
        let last = self.last_fault?;
        if now.duration_since(last) < cfg.quiet_period {
            return None;
        }
        let reason = format!("recovered: no critical error for {:#}", cfg.quiet_period);
        self.become_state(GpuHealthState::Healthy, now, reason.clone());
        self.last_fault = None;
        Some((GpuHealthState::Healthy, reason))
    }

    fn become_state(&mut self, state: GpuHealthState, at: Timestamp, reason: String) {
        self.state = state;
        self.since = Some(at);
        self.reason = Some(reason);
    }

    /// The status the GpuNode carries for this GPU.
    pub fn status(&self) -> GpuHealth {
        GpuHealth {
            state: self.state,
            since: self.since.map(Time),
            last_xid: self.last_xid,
            reason: self.reason.clone(),
        }
    }
}

/// The health of every GPU on the node, keyed by UUID (indices can change across reboots).
#[derive(Clone, Debug, Default)]
pub struct HealthBook {
    trackers: BTreeMap<String, GpuHealthTracker>,
}

impl HealthBook {
    /// Seeds trackers from a previously published status (`uuid → health`).
    pub fn seeded<'a>(
        previous: impl IntoIterator<Item = (&'a str, &'a GpuHealth)>,
        now: Timestamp,
    ) -> Self {
        HealthBook {
            trackers: previous
                .into_iter()
                .map(|(uuid, h)| (uuid.to_string(), GpuHealthTracker::from_status(h, now)))
                .collect(),
        }
    }

    /// Feeds the events of one observation (in time order), then lets time pass to `now`.
    /// GPUs no longer in the inventory are forgotten.
    pub fn update(
        &mut self,
        inventory: &NodeInventory,
        events: &[crate::model::GpuEvent],
        now: Timestamp,
        cfg: &HealthConfig,
    ) -> Vec<HealthChange> {
        self.trackers
            .retain(|uuid, _| inventory.gpus.iter().any(|g| &g.uuid == uuid));
        let mut sorted: Vec<_> = events.iter().collect();
        sorted.sort_by_key(|e| e.at);
        let mut changes = Vec::new();
        for ev in sorted {
            let Some(gpu) = inventory.gpu(ev.gpu) else {
                tracing::warn!(gpu = ev.gpu, ?ev.kind, "event for a GPU index not in the inventory; ignored");
                continue;
            };
            if let GpuEventKind::Xid(x) = &ev.kind
                && !cfg.xids.is_critical(*x)
            {
                tracing::info!(
                    gpu = gpu.index,
                    uuid = %gpu.uuid,
                    "{} (not critical; health unchanged)",
                    xid::reason(*x)
                );
            }
            let tracker = self.trackers.entry(gpu.uuid.clone()).or_default();
            if let Some((to, reason)) = tracker.observe(&ev.kind, ev.at, cfg) {
                changes.push(HealthChange {
                    gpu: gpu.index,
                    uuid: gpu.uuid.clone(),
                    to,
                    reason,
                    at: ev.at,
                });
            }
        }
        for gpu in &inventory.gpus {
            let tracker = self.trackers.entry(gpu.uuid.clone()).or_default();
            if let Some((to, reason)) = tracker.tick(now, cfg) {
                changes.push(HealthChange {
                    gpu: gpu.index,
                    uuid: gpu.uuid.clone(),
                    to,
                    reason,
                    at: now,
                });
            }
        }
        changes
    }

    /// The health of the GPU with this UUID (Healthy if never seen).
    pub fn status(&self, uuid: &str) -> GpuHealth {
        self.trackers
            .get(uuid)
            .map(GpuHealthTracker::status)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Gpu, GpuEvent};

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn cfg(quiet: i64) -> HealthConfig {
        HealthConfig {
            quiet_period: SignedDuration::from_secs(quiet),
            ..Default::default()
        }
    }

    #[test]
    fn critical_xid_fails_then_quiet_period_recovers() {
        let c = cfg(300);
        let mut h = GpuHealthTracker::healthy();
        let (to, reason) = h.observe(&GpuEventKind::Xid(Some(79)), t(10), &c).unwrap();
        assert_eq!(to, GpuHealthState::Unhealthy);
        assert_eq!(reason, "XID 79: GPU has fallen off the bus");
        let s = h.status();
        assert_eq!((s.last_xid, s.since.unwrap().0), (Some(79), t(10)));

        // A second fault at 200s restarts the quiet clock but keeps `since`.
        assert_eq!(
            h.observe(&GpuEventKind::DoubleBitEcc { count: 2 }, t(200), &c),
            None
        );
        assert_eq!(h.status().since.unwrap().0, t(10));
        assert_eq!(
            h.status().reason.as_deref(),
            Some("double-bit ECC error (2 new)")
        );
        assert_eq!(h.status().last_xid, Some(79));
        assert_eq!(h.tick(t(310), &c), None, "only 110s quiet");
        assert_eq!(h.tick(t(499), &c), None);
        let (to, reason) = h.tick(t(500), &c).unwrap();
        assert_eq!(to, GpuHealthState::Healthy);
        assert_eq!(reason, "recovered: no critical error for 5m");
        assert_eq!(h.status().since.unwrap().0, t(500));
        assert_eq!(h.tick(t(9999), &c), None);
    }

    #[test]
    fn application_xids_do_not_fail_a_gpu() {
        let mut h = GpuHealthTracker::healthy();
        for x in [13, 31, 43, 45, 68, 109] {
            assert_eq!(
                h.observe(&GpuEventKind::Xid(Some(x)), t(1), &cfg(300)),
                None
            );
        }
        assert_eq!(h.state(), GpuHealthState::Healthy);
        assert_eq!(h.status().last_xid, None);
    }

    #[test]
    fn reset_recovers_at_once_and_is_reported() {
        let c = cfg(300);
        let mut h = GpuHealthTracker::healthy();
        h.observe(&GpuEventKind::Xid(Some(48)), t(0), &c).unwrap();
        let (to, reason) = h
            .observe(
                &GpuEventKind::Reset {
                    signal: "volatile ECC counters cleared".into(),
                },
                t(5),
                &c,
            )
            .unwrap();
        assert_eq!(to, GpuHealthState::Healthy);
        assert_eq!(reason, "reset detected: volatile ECC counters cleared");
        assert_eq!(h.status().since.unwrap().0, t(5));
        // A reset of a healthy GPU is not news.
        assert_eq!(
            h.observe(&GpuEventKind::Reset { signal: "x".into() }, t(6), &c),
            None
        );
    }

    #[test]
    fn a_lost_gpu_never_goes_quiet() {
        let c = cfg(60);
        let mut h = GpuHealthTracker::healthy();
        h.observe(&GpuEventKind::Lost, t(0), &c).unwrap();
        for s in (5..600).step_by(5) {
            assert_eq!(h.observe(&GpuEventKind::Lost, t(s), &c), None);
            assert_eq!(h.tick(t(s), &c), None, "at {s}s");
        }
        assert_eq!(h.state(), GpuHealthState::Unhealthy);
        // Answers again: the quiet period now runs.
        assert!(h.tick(t(655), &c).is_some());
    }

    #[test]
    fn zero_quiet_period_means_only_a_reset_recovers() {
        let c = cfg(0);
        let mut h = GpuHealthTracker::healthy();
        h.observe(&GpuEventKind::Xid(Some(95)), t(0), &c).unwrap();
        assert_eq!(h.tick(t(1_000_000), &c), None);
        assert!(
            h.observe(
                &GpuEventKind::Reset { signal: "s".into() },
                t(1_000_001),
                &c
            )
            .is_some()
        );
    }

    #[test]
    fn restart_keeps_unhealthy_and_restarts_the_quiet_clock() {
        let published = GpuHealth {
            state: GpuHealthState::Unhealthy,
            since: Some(Time(t(0))),
            last_xid: Some(74),
            reason: Some("XID 74: NVLink error".into()),
        };
        let c = cfg(300);
        let mut h = GpuHealthTracker::from_status(&published, t(1000));
        assert_eq!(h.status(), published);
        assert_eq!(h.tick(t(1299), &c), None);
        assert!(h.tick(t(1300), &c).is_some());
    }

    fn inv() -> NodeInventory {
        NodeInventory {
            gpus: (0..2)
                .map(|i| Gpu {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn book_orders_events_and_reports_changes_by_gpu() {
        let c = cfg(300);
        let mut book = HealthBook::default();
        let events = vec![
            GpuEvent {
                gpu: 1,
                at: t(20),
                kind: GpuEventKind::Reset {
                    signal: "fixture reset".into(),
                },
            },
            GpuEvent {
                gpu: 1,
                at: t(10),
                kind: GpuEventKind::Xid(Some(63)),
            },
            GpuEvent {
                gpu: 7,
                at: t(10),
                kind: GpuEventKind::Xid(Some(63)),
            },
        ];
        let changes = book.update(&inv(), &events, t(30), &c);
        let summary: Vec<_> = changes.iter().map(|c| (c.gpu, c.to, c.at)).collect();
        assert_eq!(
            summary,
            vec![
                (1, GpuHealthState::Unhealthy, t(10)),
                (1, GpuHealthState::Healthy, t(20))
            ]
        );
        assert_eq!(book.status("GPU-0").state, GpuHealthState::Healthy);
        assert_eq!(book.status("GPU-1").last_xid, Some(63));
    }
}

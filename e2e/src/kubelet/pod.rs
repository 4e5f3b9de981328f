//! A pod as the kubelet tracks it, and its lifecycle: what it does next, and when.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::plan::Plan;
use crate::clock::after;
use crate::exec::ContainerEnd;
use crate::nodes::TAINT_UNREACHABLE;
use crate::scheduler::filter::Tol;

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Exited {
    pub(super) code: i32,
    pub(super) started: Timestamp,
    pub(super) finished: Timestamp,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum State {
    /// Bound, containers not started.
    Pending,
    Running {
        started: Timestamp,
    },
    /// Between two runs of a restarting container.
    BackOff {
        until: Timestamp,
    },
    Terminated,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Action {
    Start,
    Exit(i32),
    /// Terminate for deletion: exit code (143 SIGTERM, 137 killed), or `None` if never
    /// started.
    Kill(Option<i32>),
    FinalDelete,
    Evict,
}

pub(super) struct SimPod {
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) node: String,
    pub(super) containers: Vec<(String, String)>,
    pub(super) init_containers: Vec<(String, String)>,
    pub(super) restart_policy: String,
    pub(super) host_network: bool,
    pub(super) tolerations: Vec<Tol>,
    pub(super) plan: Plan,
    pub(super) reported_problems: bool,
    pub(super) state: State,
    pub(super) start_time: Timestamp,
    pub(super) start_at: Timestamp,
    /// Deletion seen at, and the grace period.
    pub(super) deleting: Option<(Timestamp, i64)>,
    pub(super) evicted: bool,
    pub(super) final_delete_sent: bool,
    pub(super) ip: Option<String>,
    pub(super) restarts: u32,
    pub(super) last: Option<Exited>,
    pub(super) busy: bool,
    pub(super) retry_after: Option<Timestamp>,
    pub(super) seq: u64,
    /// Exec mode: what the pod's supervisor reported.
    pub(super) exec: Option<ExecPod>,
}

/// An exec-mode pod as the kubelet loop tracks it.
#[derive(Default)]
pub(super) struct ExecPod {
    /// The pod as last seen (what its supervisor is started with).
    pub(super) snapshot: Option<Pod>,
    /// A supervisor runs.
    pub(super) supervisor: bool,
    /// A (re)start was asked for and its `Started` has not been written yet.
    pub(super) awaiting: bool,
    /// Containers started at (status write pending).
    pub(super) started_at: Option<Timestamp>,
    /// How the init containers ended.
    pub(super) inits: Option<Vec<ContainerEnd>>,
    /// How the containers ended (status write pending or done).
    pub(super) ends: Option<Vec<ContainerEnd>>,
    /// An init container failed: the pod fails, no restart.
    pub(super) init_failed: bool,
    /// SIGTERM was sent.
    pub(super) terminating: bool,
}

impl ExecPod {
    /// The pod's exit code as the sim models it: the first non-zero container code.
    fn code(&self) -> i32 {
        if self.init_failed {
            return self
                .inits
                .iter()
                .flatten()
                .map(|e| e.code)
                .find(|c| *c != 0)
                .unwrap_or(1);
        }
        self.ends
            .iter()
            .flatten()
            .map(|e| e.code)
            .find(|c| *c != 0)
            .unwrap_or(0)
    }
}

impl SimPod {
    pub(super) fn should_restart(&self, code: i32) -> bool {
        match self.restart_policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        }
    }

    /// Seconds the taint manager waits before evicting this pod from an unreachable node
    /// (`None`: never).
    fn eviction_delay(&self) -> Option<i64> {
        let t = crate::scheduler::filter::TaintV {
            key: TAINT_UNREACHABLE.into(),
            value: String::new(),
            effect: "NoExecute".into(),
        };
        // The taint manager's getMinTolerationTime: not tolerated -> now; the shortest
        // tolerationSeconds among the tolerations that match; none given -> never.
        let matching: Vec<&Tol> = self
            .tolerations
            .iter()
            .filter(|tol| tol.tolerates(&t))
            .collect();
        if matching.is_empty() {
            return Some(0);
        }
        matching
            .iter()
            .filter_map(|t| t.seconds)
            .map(|s| s.max(0))
            .min()
    }

    /// The next thing to do and when.
    pub(super) fn next(
        &self,
        node_failed: Option<Timestamp>,
        max_grace: Option<Duration>,
        now: Timestamp,
    ) -> Option<(Timestamp, Action)> {
        if self.busy {
            return None;
        }
        let at = |t: Timestamp| match self.retry_after {
            Some(r) if r > t => r,
            _ => t,
        };
        if let (Some(x), None) = (&self.exec, node_failed) {
            return self.next_exec(x, now, at);
        }
        if let Some(failed) = node_failed {
            if self.deleting.is_some() || self.evicted || self.state == State::Terminated {
                return None;
            }
            let delay = self.eviction_delay()?;
            return Some((at(after(failed, delay as f64)), Action::Evict));
        }
        if let Some((seen, grace)) = self.deleting {
            return match &self.state {
                State::Terminated if self.final_delete_sent => None,
                State::Terminated => Some((at(now), Action::FinalDelete)),
                State::Pending | State::BackOff { .. } => Some((at(now), Action::Kill(None))),
                State::Running { .. } => {
                    let mut g = grace.max(0) as f64;
                    if let Some(cap) = max_grace {
                        g = g.min(cap.as_secs_f64());
                    }
                    if self.plan.stop < g {
                        Some((at(after(seen, self.plan.stop)), Action::Kill(Some(143))))
                    } else {
                        Some((at(after(seen, g)), Action::Kill(Some(137))))
                    }
                }
            };
        }
        match &self.state {
            State::Pending => Some((at(self.start_at), Action::Start)),
            State::Running { started } => self
                .plan
                .run
                .map(|r| (at(after(*started, r)), Action::Exit(self.plan.exit))),
            State::BackOff { until } => Some((at(*until), Action::Start)),
            State::Terminated => None,
        }
    }
}

impl SimPod {
    /// The next action of an exec-mode pod: its supervisor's reports drive it.
    fn next_exec(
        &self,
        x: &ExecPod,
        now: Timestamp,
        at: impl Fn(Timestamp) -> Timestamp,
    ) -> Option<(Timestamp, Action)> {
        if self.deleting.is_some() {
            return match &self.state {
                State::Terminated if self.final_delete_sent => None,
                State::Terminated => Some((at(now), Action::FinalDelete)),
                _ if x.ends.is_some() => Some((at(now), Action::Kill(Some(x.code())))),
                _ if !x.supervisor
                    || !x.awaiting
                        && x.started_at.is_none()
                        && matches!(self.state, State::BackOff { .. }) =>
                {
                    Some((at(now), Action::Kill(None)))
                }
                _ => None,
            };
        }
        match &self.state {
            State::Terminated => None,
            // A start is written before the exit that may have followed it at once.
            _ if x.started_at.is_some() => Some((at(x.started_at.unwrap_or(now)), Action::Start)),
            _ if x.ends.is_some() => Some((at(now), Action::Exit(x.code()))),
            State::Pending if !x.supervisor => Some((at(self.start_at), Action::Start)),
            State::BackOff { until } if !x.awaiting => Some((at(*until), Action::Start)),
            _ => None,
        }
    }
}

/// kubelet's container restart back-off: 10 s doubling per restart, at most 300 s.
pub(super) fn restart_backoff(restarts: u32) -> f64 {
    (10.0 * 2f64.powi(restarts.min(10) as i32)).min(300.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_backoff_doubles_to_five_minutes() {
        assert_eq!(restart_backoff(0), 10.0);
        assert_eq!(restart_backoff(1), 20.0);
        assert_eq!(restart_backoff(9), 300.0);
    }
}

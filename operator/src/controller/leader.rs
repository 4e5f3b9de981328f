//! Leader election on a `coordination.k8s.io/v1` Lease, with optimistic concurrency.
//!
//! Hand-written: `kube-lease-manager` 0.13 pins kube 5 / k8s-openapi 0.29 (Muster is on kube
//! 4.2 / 0.28), and `kube-leader-election` 0.44 — which does build on kube 4 — acquires and
//! renews with merge patches that carry no resourceVersion, so two replicas that both see an
//! expired lease can both "acquire" it. Here every acquire and renew is a `replace` of the
//! Lease read just before (a stale copy gets 409 Conflict and loses), as client-go's
//! leaderelection does.
//!
//! Timing follows client-go: a candidate takes over only after it has watched the same lease
//! record unchanged for `lease_duration` on its *own* monotonic clock (so clock skew between
//! nodes does not matter); the leader renews every `retry_period` and steps down as soon as it
//! has failed to renew for `renew_deadline` (< `lease_duration`, so it stops before anyone
//! else may start). On shutdown it releases the lease (empty holder) so the other replica
//! takes over at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use super::exec::{ApiError, WriteKind};
use super::kube_api::api_error;
use super::metrics::Metrics;

/// Lease timings.
#[derive(Clone, Copy, Debug)]
pub struct LeaseTimings {
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// The leader gives up after failing to renew for this long.
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate remembers of the lease it observes.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The holder and renew time last seen, and when (local clock) that record was first seen.
    record: Option<(String, Option<String>)>,
    since: Option<Instant>,
    /// Last successful renew or acquire by us.
    pub last_renew: Option<Instant>,
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No Lease yet: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Expired or released: take it over.
    Acquire,
    /// Someone else holds a live lease.
    Wait,
}

fn holder(l: &Lease) -> String {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

fn renew_stamp(l: &Lease) -> Option<String> {
    l.spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.to_string())
}

/// Decides the next step from the lease as read (`None`: does not exist) — pure.
pub fn decide(
    lease: Option<&Lease>,
    me: &str,
    obs: &mut Observed,
    timings: &LeaseTimings,
    now: Instant,
) -> Step {
    let Some(l) = lease else {
        return Step::Create;
    };
    let h = holder(l);
    if h == me {
        return Step::Renew;
    }
    if h.is_empty() {
        return Step::Acquire;
    }
    let rec = (h, renew_stamp(l));
    if obs.record.as_ref() != Some(&rec) {
        obs.record = Some(rec);
        obs.since = Some(now);
        return Step::Wait;
    }
    let duration = l
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .map(|s| Duration::from_secs(s.max(1) as u64))
        .unwrap_or(timings.lease_duration);
    match obs.since {
        Some(t) if now.duration_since(t) > duration => Step::Acquire,
        _ => Step::Wait,
    }
}

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// The elector.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaseTimings,
    metrics: Metrics,
}

impl LeaderElector {
    /// An elector for Lease `name` in `namespace`, as `identity`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timings: LeaseTimings,
        metrics: Metrics,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            timings,
            metrics,
        }
    }

    async fn try_once(&self, obs: &mut Observed) -> Result<bool, ApiError> {
        let cur = match self.api.get_opt(&self.name).await {
            Ok(l) => l,
            Err(e) => return Err(api_error(e)),
        };
        let step = decide(
            cur.as_ref(),
            &self.identity,
            obs,
            &self.timings,
            Instant::now(),
        );
        let secs = self.timings.lease_duration.as_secs() as i32;
        match step {
            Step::Wait => Ok(false),
            Step::Create => {
                let l = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(now_micro()),
                        renew_time: Some(now_micro()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.metrics.write(WriteKind::Lease, 1);
                self.api
                    .create(&PostParams::default(), &l)
                    .await
                    .map_err(api_error)?;
                Ok(true)
            }
            Step::Renew | Step::Acquire => {
                let mut l = cur.unwrap_or_default();
                let spec = l.spec.get_or_insert_with(Default::default);
                if step == Step::Acquire {
                    spec.holder_identity = Some(self.identity.clone());
                    spec.acquire_time = Some(now_micro());
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.renew_time = Some(now_micro());
                spec.lease_duration_seconds = Some(secs);
                self.metrics.write(WriteKind::Lease, 1);
                // `replace` sends the resourceVersion just read: a concurrent change wins.
                self.api
                    .replace(&self.name, &PostParams::default(), &l)
                    .await
                    .map_err(api_error)?;
                Ok(true)
            }
        }
    }

    /// Runs until `shutdown` turns true, publishing whether this replica leads on `leading`.
    /// Releases the lease on shutdown if it holds it.
    pub async fn run(self, leading: watch::Sender<bool>, mut shutdown: watch::Receiver<bool>) {
        let mut obs = Observed::default();
        loop {
            let ok = match self.try_once(&mut obs).await {
                Ok(true) => {
                    obs.last_renew = Some(Instant::now());
                    true
                }
                Ok(false) => false,
                Err(e) => {
                    self.metrics.error("lease");
                    tracing::debug!(error = %e, "lease attempt failed");
                    // Keep leading while within the renew deadline.
                    *leading.borrow()
                        && obs
                            .last_renew
                            .is_some_and(|t| t.elapsed() < self.timings.renew_deadline)
                }
            };
            if ok != *leading.borrow() {
                if ok {
                    tracing::info!(identity = %self.identity, lease = %self.name, "became leader");
                } else {
                    tracing::warn!(identity = %self.identity, lease = %self.name, "lost leadership");
                }
                let _ = leading.send(ok);
            }
            self.metrics.leader.set(i64::from(ok));
            tokio::select! {
                _ = tokio::time::sleep(self.timings.retry_period) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                break;
            }
        }
        if *leading.borrow() {
            let _ = leading.send(false);
            self.metrics.leader.set(0);
            self.release().await;
        }
    }

    /// Gives the lease up (empty holder) so another replica takes over without waiting.
    async fn release(&self) {
        let Ok(Some(mut l)) = self.api.get_opt(&self.name).await else {
            return;
        };
        if holder(&l) != self.identity {
            return;
        }
        if let Some(s) = l.spec.as_mut() {
            s.holder_identity = None;
            s.renew_time = Some(now_micro());
        }
        self.metrics.write(WriteKind::Lease, 1);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &l)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.name, "released leadership"),
            Err(e) => tracing::warn!(error = %e, "could not release the lease"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renew: i64) -> Lease {
        Lease {
            metadata: Default::default(),
            spec: Some(LeaseSpec {
                holder_identity: (!holder.is_empty()).then(|| holder.to_string()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(jiff::Timestamp::from_second(renew).unwrap())),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn candidates_wait_a_full_lease_duration_on_their_own_clock() {
        let t = LeaseTimings::default();
        let mut obs = Observed::default();
        let t0 = Instant::now();
        assert_eq!(decide(None, "a", &mut obs, &t, t0), Step::Create);
        let l = lease("b", 100);
        assert_eq!(decide(Some(&l), "a", &mut obs, &t, t0), Step::Wait);
        assert_eq!(
            decide(Some(&l), "a", &mut obs, &t, t0 + Duration::from_secs(10)),
            Step::Wait
        );
        // The holder renewed: the clock restarts.
        let l2 = lease("b", 110);
        assert_eq!(
            decide(Some(&l2), "a", &mut obs, &t, t0 + Duration::from_secs(14)),
            Step::Wait
        );
        assert_eq!(
            decide(Some(&l2), "a", &mut obs, &t, t0 + Duration::from_secs(28)),
            Step::Wait
        );
        assert_eq!(
            decide(Some(&l2), "a", &mut obs, &t, t0 + Duration::from_secs(30)),
            Step::Acquire
        );
        // Our own lease is renewed; a released one is taken at once.
        assert_eq!(
            decide(Some(&lease("a", 1)), "a", &mut obs, &t, t0),
            Step::Renew
        );
        let mut fresh = Observed::default();
        assert_eq!(
            decide(Some(&lease("", 1)), "a", &mut fresh, &t, t0),
            Step::Acquire
        );
    }

    #[test]
    fn renew_deadline_is_shorter_than_the_lease() {
        let t = LeaseTimings::default();
        assert!(t.renew_deadline < t.lease_duration);
        assert!(t.retry_period < t.renew_deadline);
    }
}

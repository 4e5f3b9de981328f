//! Fault injection: error rates, latency, dropped watches and a paused server, drawn from one
//! seeded random generator so a test run is repeatable (up to the order concurrent requests
//! arrive in).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::watch;

use super::error::ApiError;

/// Which requests a rule applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verbs {
    /// Every request.
    All,
    /// create, update, patch, delete, deletecollection.
    Writes,
    /// These verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`).
    Only(Vec<String>),
}

impl Verbs {
    fn matches(&self, verb: &str) -> bool {
        match self {
            Verbs::All => true,
            Verbs::Writes => matches!(
                verb,
                "create" | "update" | "patch" | "delete" | "deletecollection"
            ),
            Verbs::Only(v) => v.iter().any(|x| x == verb),
        }
    }
}

/// An injected error: answer `code` to a fraction `rate` of matching requests.
#[derive(Clone, Debug)]
pub struct FaultRule {
    /// 409, 429, 500 or 503 (any code is answered with a fitting Status).
    pub code: u16,
    /// Probability in [0, 1].
    pub rate: f64,
    /// Verbs it applies to.
    pub verbs: Verbs,
    /// Resource (plural, e.g. `pods`) it applies to; all when `None`.
    pub resource: Option<String>,
    /// Fires at most this many times, then is spent; unlimited when `None`. With rate 1.0 this
    /// makes a fault certain rather than likely (the first N matching requests fail).
    pub times: Option<u32>,
}

impl FaultRule {
    /// A rule for every request.
    pub fn new(code: u16, rate: f64) -> Self {
        Self {
            code,
            rate,
            verbs: Verbs::All,
            resource: None,
            times: None,
        }
    }
    /// Restrict to verbs.
    pub fn verbs(mut self, verbs: Verbs) -> Self {
        self.verbs = verbs;
        self
    }
    /// Restrict to one resource (plural name).
    pub fn resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.to_string());
        self
    }
    /// Fire at most `n` times.
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }
}

struct Inner {
    rng: StdRng,
    rules: Vec<FaultRule>,
    latency: Duration,
    watch_drop_rate: f64,
}

/// Shared fault state.
pub struct FaultState {
    inner: Mutex<Inner>,
    paused: watch::Sender<bool>,
    drops: watch::Sender<u64>,
}

impl FaultState {
    /// No faults, seeded.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                rng: StdRng::seed_from_u64(seed),
                rules: Vec::new(),
                latency: Duration::ZERO,
                watch_drop_rate: 0.0,
            }),
            paused: watch::channel(false).0,
            drops: watch::channel(0).0,
        }
    }

    /// Gate a request: wait while paused, add latency, maybe fail it.
    pub async fn gate(&self, verb: &str, resource: &str) -> Option<ApiError> {
        let mut paused = self.paused.subscribe();
        while *paused.borrow_and_update() {
            if paused.changed().await.is_err() {
                break;
            }
        }
        let (latency, err) = {
            let mut g = self.inner.lock().expect("faults lock");
            let latency = g.latency;
            let mut err = None;
            let Inner { rng, rules, .. } = &mut *g;
            for r in rules.iter_mut() {
                if r.times != Some(0)
                    && r.verbs.matches(verb)
                    && r.resource.as_deref().is_none_or(|x| x == resource)
                    && rng.random_bool(r.rate.clamp(0.0, 1.0))
                {
                    err = Some(r.code);
                    if let Some(n) = &mut r.times {
                        *n -= 1;
                    }
                    break;
                }
            }
            (latency, err)
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        err.map(|code| match code {
            409 => ApiError::new(409, "Conflict", "injected fault: the object has been modified; please apply your changes to the latest version and try again"),
            429 => ApiError::too_many_requests(),
            503 => ApiError::unavailable(),
            500 => ApiError::internal("injected fault: internal error"),
            other => ApiError::new(other, "InternalError", format!("injected fault {other}")),
        })
    }

    /// Whether a watch should end after delivering an event.
    pub fn drop_watch_now(&self) -> bool {
        let mut g = self.inner.lock().expect("faults lock");
        let p = g.watch_drop_rate;
        p > 0.0 && g.rng.random_bool(p.clamp(0.0, 1.0))
    }

    /// Receiver that changes whenever all watches must drop.
    pub fn drops(&self) -> watch::Receiver<u64> {
        self.drops.subscribe()
    }
}

/// Handle to inject faults into a running [`super::ApiServer`].
#[derive(Clone)]
pub struct Faults(pub(crate) Arc<FaultState>);

impl Faults {
    /// Add an error rule.
    pub fn add(&self, rule: FaultRule) -> &Self {
        self.0.inner.lock().expect("faults lock").rules.push(rule);
        self
    }
    /// Answer `code` to a fraction `rate` of the requests with these verbs.
    pub fn error_rate(&self, code: u16, rate: f64, verbs: Verbs) -> &Self {
        self.add(FaultRule::new(code, rate).verbs(verbs))
    }
    /// Add latency to every request.
    pub fn latency(&self, d: Duration) -> &Self {
        self.0.inner.lock().expect("faults lock").latency = d;
        self
    }
    /// End each watch stream after an event with probability `p`.
    pub fn watch_drop_rate(&self, p: f64) -> &Self {
        self.0.inner.lock().expect("faults lock").watch_drop_rate = p;
        self
    }
    /// End every open watch stream now.
    pub fn drop_watches(&self) {
        self.0.drops.send_modify(|n| *n += 1);
    }
    /// Make requests hang until [`Faults::resume`].
    pub fn pause(&self) {
        self.0.paused.send_replace(true);
    }
    /// Release paused requests.
    pub fn resume(&self) {
        self.0.paused.send_replace(false);
    }
    /// Reseed the random generator.
    pub fn reseed(&self, seed: u64) {
        self.0.inner.lock().expect("faults lock").rng = StdRng::seed_from_u64(seed);
    }
    /// Remove every rule, latency and drop rate, and resume.
    pub fn clear(&self) {
        let mut g = self.0.inner.lock().expect("faults lock");
        g.rules.clear();
        g.latency = Duration::ZERO;
        g.watch_drop_rate = 0.0;
        drop(g);
        self.resume();
    }
}

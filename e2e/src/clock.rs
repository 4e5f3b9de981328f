//! The simulated cluster's clock: wall time run faster by a constant factor, and able to jump.
//!
//! Every timestamp the simulated kubelet and node agent write (`startedAt`, `finishedAt`,
//! heartbeats, taint `timeAdded`) and every duration they honour (`sim.muster.dev/run-seconds`,
//! grace periods, `tolerationSeconds`) is in this clock's time. With [`SimClock::speed`] 1 and
//! no [`SimClock::advance`], it is the wall clock, so a component reading real time (the
//! operator, `kubectl`) agrees with it. With a speed-up factor, a 10-minute job finishes in
//! 10 real seconds at speed 60; a component that judges durations (time limits, stale
//! heartbeats) must then read this clock too — pass it [`SimClock::now`] — or its view of
//! elapsed time is `speed` times shorter than the simulated nodes'.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

/// A shared simulated clock; clones read the same time.
#[derive(Clone, Debug)]
pub struct SimClock(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    origin_real: Instant,
    origin: Timestamp,
    speed: f64,
    /// Nanoseconds added by [`SimClock::advance`].
    offset_ns: AtomicI64,
    /// Bumped on every jump, so sleepers recompute their deadlines.
    jumps: watch::Sender<u64>,
}

impl Default for SimClock {
    fn default() -> Self {
        SimClock::real()
    }
}

impl SimClock {
    /// The wall clock (speed 1).
    pub fn real() -> SimClock {
        SimClock::with_speed(1.0)
    }

    /// Wall time from now on, running `speed` times faster (values below 0.001 or not finite
    /// are taken as 1).
    pub fn with_speed(speed: f64) -> SimClock {
        let speed = if speed.is_finite() && speed >= 0.001 {
            speed
        } else {
            1.0
        };
        SimClock(Arc::new(Inner {
            origin_real: Instant::now(),
            origin: Timestamp::now(),
            speed,
            offset_ns: AtomicI64::new(0),
            jumps: watch::channel(0).0,
        }))
    }

    /// The speed-up factor.
    pub fn speed(&self) -> f64 {
        self.0.speed
    }

    /// The simulated time now.
    pub fn now(&self) -> Timestamp {
        let real = self.0.origin_real.elapsed().as_secs_f64() * self.0.speed;
        let offset = self.0.offset_ns.load(Ordering::Relaxed);
        let ns = (real * 1e9) as i64 + offset;
        self.0
            .origin
            .checked_add(SignedDuration::from_nanos(ns))
            .unwrap_or(Timestamp::MAX)
    }

    /// Jump forward by `by` of simulated time: timers due within it fire at once.
    pub fn advance(&self, by: Duration) {
        let ns = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        self.0.offset_ns.fetch_add(ns, Ordering::Relaxed);
        self.0.jumps.send_modify(|n| *n += 1);
    }

    /// Real time until the simulated time `t` (zero when it has passed).
    pub fn real_until(&self, t: Timestamp) -> Duration {
        let d = t.duration_since(self.now());
        if d <= SignedDuration::ZERO {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(d.as_secs_f64() / self.0.speed)
    }

    /// Real time a simulated duration takes.
    pub fn real_duration(&self, simulated: Duration) -> Duration {
        Duration::from_secs_f64(simulated.as_secs_f64() / self.0.speed)
    }

    /// A receiver that changes whenever the clock jumps ([`SimClock::advance`]).
    pub fn jumps(&self) -> watch::Receiver<u64> {
        self.0.jumps.subscribe()
    }

    /// Sleep until simulated time `t` (wakes early on a jump and sleeps on as needed).
    pub async fn sleep_until(&self, t: Timestamp) {
        let mut jumps = self.jumps();
        loop {
            let d = self.real_until(t);
            if d.is_zero() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                r = jumps.changed() => { if r.is_err() { tokio::time::sleep(d).await; } }
            }
        }
    }
}

/// `t + seconds` (fractional seconds allowed; saturates).
pub fn after(t: Timestamp, seconds: f64) -> Timestamp {
    let d = SignedDuration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(SignedDuration::MAX);
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_scales_elapsed_time_and_advance_jumps() {
        let c = SimClock::with_speed(1000.0);
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(20));
        let dt = c.now().duration_since(t0).as_secs_f64();
        assert!(dt >= 19.0, "20 ms at 1000x is about 20 s, got {dt}");
        assert_eq!(
            c.real_duration(Duration::from_secs(10)),
            Duration::from_millis(10)
        );
        let before = c.now();
        c.advance(Duration::from_secs(3600));
        assert!(c.now().duration_since(before).as_secs() >= 3600);
        assert_eq!(c.real_until(before), Duration::ZERO);
    }

    #[test]
    fn bad_speeds_mean_real_time() {
        assert_eq!(SimClock::with_speed(0.0).speed(), 1.0);
        assert_eq!(SimClock::with_speed(f64::NAN).speed(), 1.0);
    }

    #[tokio::test]
    async fn sleepers_wake_on_a_jump() {
        let c = SimClock::real();
        let due = after(c.now(), 3600.0);
        let c2 = c.clone();
        let h = tokio::spawn(async move { c2.sleep_until(due).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.advance(Duration::from_secs(3601));
        tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .expect("woke up")
            .unwrap();
    }
}

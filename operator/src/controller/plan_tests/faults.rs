//! Through the planner with injected API errors and crashes: every job still ends right and
//! no gang is left half admitted.

use super::*;

/// Fails one write in ten, deterministically spread.
struct EveryTenth(std::sync::atomic::AtomicU64);
impl Faults for EveryTenth {
    fn at(&self, _: WriteKind, _: &str) -> Fault {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if (n * 7919) % 10 == 3 {
            Fault::Error
        } else {
            Fault::None
        }
    }
}

#[test]
fn ten_percent_api_errors_still_end_every_job_right() {
    let mut h = harness(4, 8);
    for i in 0..6 {
        h.cluster
            .submit(job(&format!("ok{i}"), gang(2, 1, 2), 20, None));
    }
    h.cluster.submit(job("fails", gpus(1), 20, Some((0, 7))));
    let mut t = job("tl", gpus(1), 3600, None);
    t.spec.time = int(1);
    h.cluster.submit(t);
    let faults = EveryTenth(Default::default());
    for _ in 0..60 {
        h.now += 5;
        h.cluster.tick(h.now);
        h.cycle_with(&faults);
        h.cluster.check_no_double_gpu().unwrap();
    }
    for i in 0..6 {
        assert_eq!(h.cluster.state(&format!("ok{i}")), JobState::Completed);
    }
    assert_eq!(h.cluster.state("fails"), JobState::Failed);
    assert_eq!(h.cluster.job("fails").status.unwrap().exit_code, Some(7));
    assert_eq!(h.cluster.state("tl"), JobState::Timeout);
    h.cluster.check_gangs().unwrap();
}

/// The operator dies after the n-th write of a cycle, for every n that falls inside the
/// admissions of three gangs and a single job (on an idle cluster, and on one where an earlier
/// wave is running); a fresh operator (no memory) takes over, right away or after the gang
/// start timeout, with jobs written one at a time or interleaved. No GPU is ever held twice,
/// no gang is left partial, every job completes.
#[test]
fn killed_at_every_admission_write_leaves_no_partial_gang() {
    let mut iterations = 0;
    for (wave, conc) in [(false, 1), (false, 8), (true, 1), (true, 8)] {
        for n in 0..=30u64 {
            for gap in [0i64, 400] {
                let mut h = harness(6, 4);
                h.concurrency = conc;
                h.cfg.gang_start_timeout_secs = 300;
                let mut names: Vec<String> = Vec::new();
                if wave {
                    for i in 0..2 {
                        h.cluster
                            .submit(job(&format!("w{i}"), gang(2, 1, 2), 300, None));
                        names.push(format!("w{i}"));
                    }
                    h.cycle();
                    h.step(1);
                }
                for i in 0..3 {
                    h.cluster
                        .submit(job(&format!("g{i}"), gang(2, 2, 1), 30, None));
                    names.push(format!("g{i}"));
                }
                h.cluster.submit(job("solo", gpus(2), 30, None));
                names.push("solo".into());
                let r = h.cycle_with(&CrashAfter::new(n));
                h.cluster.check_no_double_gpu().unwrap();
                if !r.crashed {
                    continue;
                }
                iterations += 1;
                // A new leader: fresh memory, possibly after the gang start timeout.
                h.mem = Default::default();
                h.now += gap;
                for _ in 0..200 {
                    h.step(5);
                    h.cluster.check_no_double_gpu().unwrap();
                    if names
                        .iter()
                        .all(|n| h.cluster.state(n) == JobState::Completed)
                    {
                        break;
                    }
                }
                h.cluster.check_gangs().unwrap();
                for name in &names {
                    assert_eq!(
                        h.cluster.state(name),
                        JobState::Completed,
                        "wave={wave} conc={conc} n={n} gap={gap} {name}"
                    );
                }
                // No live pod of a superseded attempt is left.
                let s = h.cluster.lock();
                for p in s.pods.values() {
                    let o = PodObs::from_pod(p).unwrap();
                    let j = s
                        .jobs
                        .values()
                        .find(|j| j.uid().as_deref() == o.owner_uid())
                        .unwrap();
                    assert!(
                        !o.live() || o.attempt == j.status.as_ref().unwrap().attempt,
                        "stray pod {}",
                        o.name()
                    );
                }
            }
        }
    }
    assert!(iterations >= 100, "{iterations} crash points exercised");
}

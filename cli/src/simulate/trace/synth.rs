//! Synthetic traces shaped like a real one, for sizing runs and the speed benchmark.
//!
//! Each job draws one `(GPUs, run time)` pair uniformly from a model trace (by default the
//! bundled ITP trace), so the joint distribution of sizes and run times — 45% one-GPU jobs,
//! 45% eight-GPU jobs, a tail of 16–64-GPU gangs, run times from ten minutes to ten days — is
//! the model's. Arrivals are a Poisson process whose rate makes the offered load equal
//! `load`: the GPU-seconds the jobs would run inside the arrival span (work past its end is
//! not counted, or a trace shorter than its longest jobs would never fill the cluster) over
//! the span times the cluster's GPUs. The rate starts at `load × GPUs / mean(GPUs × run
//! time)` and the arrival times are rescaled until the offered load is within 1% of the
//! target. Everything follows from `seed`.

use muster_operator::core::util::SplitMix64;

use super::{Ask, Format, Skipped, Trace, TraceJob};

/// Generates `n` jobs for a cluster of `cluster_gpus` GPUs at offered `load`, drawing sizes
/// and run times from `model`.
pub fn generate(n: usize, seed: u64, cluster_gpus: u64, load: f64, model: &Trace) -> Trace {
    let pairs: Vec<(u32, u64)> = model
        .jobs
        .iter()
        .map(|j| {
            let g = match &j.ask {
                Ask::Gpus { gpus, .. } => *gpus,
                Ask::Request(r) => r.gpus.unwrap_or(1),
            };
            (g.max(1), j.runtime.max(1))
        })
        .collect();
    let mean_work = if pairs.is_empty() {
        1.0
    } else {
        pairs
            .iter()
            .map(|&(g, d)| f64::from(g) * d as f64)
            .sum::<f64>()
            / pairs.len() as f64
    };
    let rate = (load.max(1e-6) * cluster_gpus.max(1) as f64 / mean_work).max(1e-12);
    let mut rng = SplitMix64::new(seed);
    let mut t = 0.0f64;
    let mut jobs = Vec::with_capacity(n);
    for i in 0..n {
        // Exponential inter-arrival times (inverse transform; 1 - u avoids ln(0)).
        t += -(1.0 - rng.unit()).ln() / rate;
        let (gpus, runtime) = if pairs.is_empty() {
            (1, 3600)
        } else {
            pairs[rng.below(pairs.len() as u64) as usize]
        };
        jobs.push(TraceJob::gpus(
            format!("s{}", i + 1),
            0,
            t.floor() as i64,
            runtime,
            gpus,
        ));
    }
    // Rescale arrivals until the work clipped to the span matches the load (a fixed point:
    // compressing arrivals raises the clipped work, so a few rounds converge).
    let mut times: Vec<f64> = jobs.iter().map(|j| j.submit as f64).collect();
    for _ in 0..30 {
        let span = times.last().copied().unwrap_or(0.0).max(1.0);
        let work: f64 = jobs
            .iter()
            .zip(&times)
            .map(|(j, &s)| {
                let g = match j.ask {
                    Ask::Gpus { gpus, .. } => f64::from(gpus),
                    Ask::Request(_) => 1.0,
                };
                g * (j.runtime as f64).min(span - s)
            })
            .sum();
        let offered = work / (span * cluster_gpus.max(1) as f64);
        if offered <= 0.0 || (offered / load - 1.0).abs() < 0.01 {
            break;
        }
        let f = offered / load;
        for t in &mut times {
            *t *= f;
        }
    }
    for (j, t) in jobs.iter_mut().zip(&times) {
        j.submit = t.floor() as i64;
    }
    Trace {
        source: format!(
            "synthetic ({n} jobs shaped like {}, load {load}, seed {seed})",
            model.source
        ),
        format: Format::Synthetic,
        jobs,
        skipped: Skipped::default(),
        partitions: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Trace {
        Trace {
            source: "m".into(),
            format: Format::Itp,
            jobs: vec![
                TraceJob::gpus("a", 2, 0, 100, 1),
                TraceJob::gpus("b", 3, 0, 1000, 8),
            ],
            skipped: Skipped::default(),
            partitions: Vec::new(),
        }
    }

    #[test]
    fn same_seed_same_trace_and_load_sets_the_rate() {
        let a = generate(2000, 7, 64, 0.5, &model());
        let b = generate(2000, 7, 64, 0.5, &model());
        assert_eq!(a, b);
        let c = generate(2000, 8, 64, 0.5, &model());
        assert_ne!(a.jobs, c.jobs);
        // Offered load over the arrival span (work clipped to it) is close to the target.
        let span = a.jobs.last().unwrap().submit as f64;
        let work: f64 = a
            .jobs
            .iter()
            .map(|j| match j.ask {
                Ask::Gpus { gpus, .. } => {
                    f64::from(gpus) * (j.runtime as f64).min(span - j.submit as f64)
                }
                _ => 0.0,
            })
            .sum();
        let load = work / span / 64.0;
        assert!((0.49..0.51).contains(&load), "{load}");
        assert!(a.jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
    }
}

//! Queue order: each pending job's priority (fair share, age, size, short-limit credit) and
//! the order the cycle considers the jobs in.

use super::*;

impl Cycle<'_> {
    /// Pending jobs in queue order with their priorities: partition tier, priority, submit
    /// time, job id.
    pub(super) fn order(
        &mut self,
        sizes: &[(u64, u64)],
        fs: &BTreeMap<String, f64>,
    ) -> Vec<(usize, u32)> {
        let snap = self.snap;
        let demands: Vec<Option<Result<Demand, String>>> = snap
            .pending
            .iter()
            .map(|j| {
                j.partition
                    .and_then(|p| snap.partitions.get(p as usize))
                    .map(|p| normalize(&j.request, p))
            })
            .collect();
        let widest = self.widest_node;
        let shorts: Vec<ShortLimitInput> = snap
            .pending
            .iter()
            .zip(&demands)
            .map(|(j, demand)| {
                let part = j.partition.and_then(|p| snap.partitions.get(p as usize));
                let gang = matches!(demand, Some(Ok(d)) if spans_nodes(d, widest));
                ShortLimitInput {
                    since: age_start(j),
                    partition: j.partition,
                    factor: short_limit_factor(
                        part.and_then(|p| p.effective_limit(j.request.time_limit)),
                    ),
                    gang,
                }
            })
            .collect();
        let shorts = capped_short_limit_factors(&shorts, self.cfg);
        let mut keyed: Vec<QueueKey> = snap
            .pending
            .iter()
            .zip(&demands)
            .enumerate()
            .map(|(i, (j, demand))| {
                let part = j.partition.and_then(|p| snap.partitions.get(p as usize));
                let tier = part.map(|p| p.priority_tier).unwrap_or(0);
                let short = shorts[i];
                let size = match (demand, j.partition) {
                    (Some(dm), Some(pi)) => match dm {
                        Ok(d) => {
                            let (g, n) = sizes[pi as usize];
                            if d.unit.gpus > 0 && g > 0 {
                                d.min_gpus() as f64 / g as f64
                            } else if n > 0 {
                                f64::from(d.min_nodes) / n as f64
                            } else {
                                0.0
                            }
                        }
                        Err(_) => 0.0,
                    },
                    _ => 0.0,
                };
                let pr = priority(
                    &PriorityInput {
                        namespace: &j.namespace,
                        age_secs: self.now - age_start(j),
                        size_fraction: size,
                        nice: j.nice,
                        fixed: j.priority,
                        short_limit: short,
                    },
                    fs,
                    self.cfg,
                );
                queue_key(j, tier, pr, short, self.cfg, i)
            })
            .collect();
        self.demands = demands;
        keyed.sort_unstable();
        keyed.into_iter().map(|k| (k.5, k.1.0)).collect()
    }
}

//! Queue order: each pending job's priority (fair share, age, size, short-limit credit) and
//! the order the cycle considers the jobs in.

use super::*;

/// Queue order: tier (high first), priority (high first), queued time (submit time less the
/// short-limit credit, [`queued_since`]), submit time, job id, then the pending index.
type OrderKey = (Reverse<u32>, Reverse<u32>, i64, i64, JobId, usize);

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
                    since: j.eligible_time.unwrap_or(j.submit_time),
                    partition: j.partition,
                    factor: short_limit_factor(
                        part.and_then(|p| p.effective_limit(j.request.time_limit)),
                    ),
                    gang,
                }
            })
            .collect();
        let shorts = capped_short_limit_factors(&shorts, self.cfg);
        let mut keyed: Vec<OrderKey> = snap
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
                        age_secs: self.now - j.eligible_time.unwrap_or(j.submit_time),
                        size_fraction: size,
                        nice: j.nice,
                        fixed: j.priority,
                        short_limit: short,
                    },
                    fs,
                    self.cfg,
                );
                let since = queued_since(j.submit_time, short, self.cfg);
                (Reverse(tier), Reverse(pr), since, j.submit_time, j.id, i)
            })
            .collect();
        self.demands = demands;
        keyed.sort_unstable();
        keyed.into_iter().map(|k| (k.5, k.1.0)).collect()
    }
}

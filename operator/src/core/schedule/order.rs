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
        let inputs: Vec<QueueInput> = snap
            .pending
            .iter()
            .zip(&demands)
            .map(|(j, demand)| {
                let part = j.partition.and_then(|p| snap.partitions.get(p as usize));
                let size_fraction = match (demand, j.partition) {
                    (Some(Ok(d)), Some(pi)) => {
                        let (g, n) = sizes[pi as usize];
                        size_fraction(d, g, n)
                    }
                    _ => 0.0,
                };
                QueueInput {
                    job: j,
                    tier: part.map(|p| p.priority_tier).unwrap_or(0),
                    limit_secs: part.and_then(|p| p.effective_limit(j.request.time_limit)),
                    gang: matches!(demand, Some(Ok(d)) if spans_nodes(d, widest)),
                    size_fraction,
                }
            })
            .collect();
        let mut keyed = queue_keys(&inputs, &snap.running, fs, self.now, self.cfg);
        self.demands = demands;
        keyed.sort_unstable();
        keyed.into_iter().map(|k| (k.5, k.1.0)).collect()
    }
}

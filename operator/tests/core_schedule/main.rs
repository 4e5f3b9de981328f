//! Known-answer tests: each Slurm behaviour the core implements, on small hand-built
//! clusters where the right answer is obvious.

use muster_operator::core::*;

#[path = "../support/mod.rs"]
mod support;
use support::*;

mod decisions;
mod eligibility;
mod placement;
mod preemption;
mod queue;

fn pending(d: &Decisions, job: JobId) -> &PendingInfo {
    d.pending
        .iter()
        .find(|p| p.job == job)
        .unwrap_or_else(|| panic!("job {job} is not pending"))
}

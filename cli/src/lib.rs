//! `muster` / `kubectl-muster`: Slurm-compatible commands for Muster.

/// Entry point shared by the `muster` and `kubectl-muster` binaries.
pub fn run() -> anyhow::Result<()> {
    Ok(())
}

//! `muster` / `kubectl-muster`: Slurm-compatible commands for Muster.

pub mod simulate;

use clap::{Parser, Subcommand};

/// `muster`: Slurm's commands for Muster.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(name = "muster", version, propagate_version = true)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand, Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Replay a job trace through the scheduler on a modelled cluster.
    Simulate(simulate::SimulateArgs),
}

/// Entry point shared by the `muster` and `kubectl-muster` binaries.
pub fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match &cli.command {
        Command::Simulate(args) => simulate::run(args, &mut std::io::stdout().lock()),
    }
}

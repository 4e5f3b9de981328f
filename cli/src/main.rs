//! `muster`: Slurm's commands for Muster.
fn main() -> std::process::ExitCode {
    muster_cli::run()
}

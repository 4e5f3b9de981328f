//! `muster` / `kubectl-muster`: Slurm's commands for a Kubernetes cluster running Muster.
//!
//! Each command lives in its own module with a clap `Args` struct and an async `run`; the
//! [`Command`] enum lists them, so adding a command is adding a module and a variant. Output
//! formatting is pure (over plain rows in [`rows`]) and tested without a cluster; the kube
//! part fetches objects and calls it.
//!
//! The binary may also be installed under a Slurm command's name (`ln -s muster squeue`):
//! it then behaves as that command.

pub mod cluster;
pub mod sbatch;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use cluster::ClusterArgs;

/// `muster`: Slurm's commands for Muster.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(
    name = "muster",
    version,
    propagate_version = true,
    about = "Slurm's commands (sbatch, squeue, scancel, sinfo, scontrol, sacct) for Muster",
    after_help = "Also works as a kubectl plugin: kubectl muster squeue"
)]
pub struct Cli {
    /// Cluster and namespace selection.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands. Each variant's module owns its arguments and its `run`.
#[derive(Subcommand, Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Submit a batch script (Slurm's sbatch).
    Sbatch(sbatch::SbatchArgs),
}

/// Slurm command names the binary answers to when installed under them.
pub const SLURM_NAMES: &[&str] = &["sbatch", "squeue", "scancel", "sinfo", "scontrol", "sacct"];

/// What a command reads and writes, passed in so tests can run commands in memory.
pub struct Io<'a> {
    /// Standard output.
    pub out: &'a mut dyn Write,
    /// Standard error.
    pub err: &'a mut dyn Write,
    /// Standard input (sbatch reads a script from it).
    pub stdin: &'a mut dyn Read,
    /// Environment lookup (`SBATCH_*`, `USER`, `SLURM_JOB_NODELIST`, …).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Directory relative paths are resolved against.
    pub cwd: PathBuf,
}

/// The argument list as clap should see it: `kubectl-muster` shows as `kubectl muster`, and a
/// binary called `squeue` (say) runs `muster squeue`.
fn normalize_argv(argv: Vec<OsString>) -> (String, Vec<OsString>) {
    let argv0 = argv
        .first()
        .map(|a| {
            std::path::Path::new(a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let stem = argv0.strip_suffix(".exe").unwrap_or(&argv0).to_string();
    if SLURM_NAMES.contains(&stem.as_str()) {
        let mut v = vec![OsString::from("muster"), OsString::from(stem)];
        v.extend(argv.into_iter().skip(1));
        return ("muster".into(), v);
    }
    let bin = if stem == "kubectl-muster" {
        "kubectl muster"
    } else {
        "muster"
    };
    (bin.to_string(), argv)
}

/// Parse arguments. Help and version requests come back as `Err` (clap prints them).
pub fn parse_args(argv: Vec<OsString>) -> Result<Cli, clap::Error> {
    let (bin, argv) = normalize_argv(argv);
    let mut cmd = Cli::command().bin_name(bin);
    let matches = cmd.try_get_matches_from_mut(argv)?;
    Cli::from_arg_matches(&matches)
}

/// Run a parsed command.
pub async fn execute(cli: &Cli, io: &mut Io<'_>) -> anyhow::Result<()> {
    match &cli.command {
        Command::Sbatch(args) => sbatch::run(args, &cli.cluster, io).await,
    }
}

/// The Slurm-style name of a command, for error prefixes (`sbatch: error: …`).
fn command_name(cli: &Cli) -> &'static str {
    match cli.command {
        Command::Sbatch(_) => "sbatch",
    }
}

/// Parse `argv` and run it with `io`; returns the process exit status (1 on error, like Slurm).
pub async fn run_with(argv: Vec<OsString>, io: &mut Io<'_>) -> ExitCode {
    let cli = match parse_args(argv) {
        Ok(cli) => cli,
        Err(e) => {
            let code = e.exit_code();
            let text = e.render().ansi().to_string();
            let _ = if e.use_stderr() {
                write!(io.err, "{text}")
            } else {
                write!(io.out, "{text}")
            };
            return ExitCode::from(code as u8);
        }
    };
    match execute(&cli, io).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io.err, "{}: error: {e:#}", command_name(&cli));
            ExitCode::FAILURE
        }
    }
}

/// Entry point shared by the `muster` and `kubectl-muster` binaries.
pub fn run() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MUSTER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("muster: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let mut stdin = std::io::stdin();
    let env = |k: &str| std::env::var(k).ok();
    let mut io = Io {
        out: &mut out,
        err: &mut err,
        stdin: &mut stdin,
        env: &env,
        cwd: std::env::current_dir().unwrap_or_default(),
    };
    runtime.block_on(run_with(std::env::args_os().collect(), &mut io))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_tree_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn slurm_names_run_their_command() {
        let (bin, argv) = normalize_argv(vec!["/usr/bin/sbatch".into(), "--wrap=true".into()]);
        assert_eq!(bin, "muster");
        assert_eq!(
            argv,
            vec![
                OsString::from("muster"),
                "sbatch".into(),
                "--wrap=true".into()
            ]
        );
        let (bin, _) = normalize_argv(vec!["/x/kubectl-muster".into()]);
        assert_eq!(bin, "kubectl muster");
    }

    #[test]
    fn namespace_short_flag_only_before_the_command() {
        let cli = parse_args(
            ["muster", "-n", "team", "sbatch", "-n", "4", "--wrap=true"]
                .map(OsString::from)
                .to_vec(),
        )
        .unwrap();
        assert_eq!(cli.cluster.namespace().as_deref(), Some("team"));
        let Command::Sbatch(s) = cli.command;
        assert_eq!(s.options.ntasks, Some(4));
    }
}

//! `muster` / `kubectl-muster`: Slurm's commands for a Kubernetes cluster running Muster.
//!
//! Each command lives in its own module with a clap `Args` struct and an async
//! `run(&Args, &Target, &mut Io)`; the [`Command`] enum lists them. Adding a command (say
//! `simulate`) is: a module `simulate.rs` with `SimulateArgs` and `run`, a variant
//! `Simulate(simulate::SimulateArgs)`, and one arm each in [`execute`] and `command_name`.
//! Output formatting is pure (over plain rows in [`rows`]) and tested without a cluster; the
//! kube part ([`fetch`]) gets objects and calls it. [`run_on`] runs any command line on an
//! already connected cluster, which is how the end-to-end suites drive the commands.
//!
//! The binary may also be installed under a Slurm command's name (`ln -s muster squeue`):
//! it then behaves as that command.

pub mod bench;
pub mod cluster;
pub mod fetch;
pub mod format;
pub mod job_patch;
pub mod logs;
pub mod quality;
pub mod rows;
pub mod sacct;
pub mod sandbox;
pub mod sbatch;
pub mod scancel;
pub mod scontrol;
pub mod scontrol_node;
pub mod scontrol_requeue;
pub mod scontrol_update;
pub mod scontrol_write;
pub mod simulate;
pub mod sinfo;
pub mod squeue;
pub mod step;
pub mod yaml;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use cluster::{Cluster, ClusterArgs, Target};

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
    Sbatch(Box<sbatch::SbatchArgs>),
    /// Show the job queue (Slurm's squeue).
    Squeue(squeue::SqueueArgs),
    /// Cancel jobs (Slurm's scancel).
    Scancel(scancel::ScancelArgs),
    /// Show partitions and nodes (Slurm's sinfo).
    Sinfo(sinfo::SinfoArgs),
    /// Show jobs, partitions, nodes and hostlists; hold and release jobs (Slurm's scontrol).
    Scontrol(scontrol::ScontrolArgs),
    /// Show accounting data of jobs (Slurm's sacct).
    Sacct(sacct::SacctArgs),
    /// Print a job's output (what slurm-JOBID.out would hold).
    Logs(logs::LogsArgs),
    /// Measure the scheduling core: cycle time, memory, and placement quality against
    /// Slurm-like backfill, FIFO and first fit (--quality).
    Bench(bench::BenchArgs),
    /// Run a simulated GPU cluster to try Muster with no cluster.
    Sandbox(sandbox::SandboxArgs),
    /// Replay a job trace through the scheduler on a modelled cluster.
    Simulate(simulate::SimulateArgs),
}

/// A command failed and has already said why on standard error: exit 1 without more text.
#[derive(Debug, thiserror::Error)]
#[error("failed")]
pub struct Failed;

/// A command finished and wants this exit status (`sbatch --wait`: the job's exit code).
#[derive(Debug, thiserror::Error)]
#[error("exit status {0}")]
pub struct ExitWith(pub u8);

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

/// Run a parsed command on the cluster its flags name, or on `cluster` when given (already
/// connected: how tests and the end-to-end suites drive the commands).
pub async fn execute(cli: &Cli, cluster: Option<Cluster>, io: &mut Io<'_>) -> anyhow::Result<()> {
    let target = Target {
        args: &cli.cluster,
        fixed: cluster,
    };
    match &cli.command {
        Command::Sbatch(args) => sbatch::run(args, &target, io).await,
        Command::Squeue(args) => squeue::run(args, &target, io).await,
        Command::Scancel(args) => scancel::run(args, &target, io).await,
        Command::Sinfo(args) => sinfo::run(args, &target, io).await,
        Command::Scontrol(args) => scontrol::run(args, &target, io).await,
        Command::Sacct(args) => sacct::run(args, &target, io).await,
        Command::Logs(args) => logs::run(args, &target, io).await,
        Command::Bench(args) => bench::run(args, io),
        Command::Sandbox(args) => sandbox::run(args, io).await,
        Command::Simulate(args) => simulate::run(args, &io.cwd, io.out),
    }
}

/// The Slurm-style name of a command, for error prefixes (`sbatch: error: …`).
fn command_name(cli: &Cli) -> &'static str {
    match cli.command {
        Command::Sbatch(_) => "sbatch",
        Command::Squeue(_) => "squeue",
        Command::Scancel(_) => "scancel",
        Command::Sinfo(_) => "sinfo",
        Command::Scontrol(_) => "scontrol",
        Command::Sacct(_) => "sacct",
        Command::Logs(_) => "logs",
        Command::Bench(_) => "bench",
        Command::Sandbox(_) => "sandbox",
        Command::Simulate(_) => "simulate",
    }
}

/// getopt_long's message for an ambiguous long-option prefix, which clap reports as an
/// unknown argument.
fn ambiguity_message(argv: &[OsString], e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let prefix = arg.strip_prefix("--")?.split('=').next()?;
    let root = Cli::command();
    let sub = argv
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find_map(|a| root.find_subcommand(a))?;
    let candidates: Vec<String> = sbatch::options::long_names(sub)
        .into_iter()
        .chain(
            root.get_arguments()
                .filter(|a| a.is_global_set())
                .filter_map(|a| a.get_long().map(str::to_string)),
        )
        .filter(|n| n.starts_with(prefix))
        .collect();
    (candidates.len() > 1).then(|| {
        let list: Vec<String> = candidates.iter().map(|c| format!("'--{c}'")).collect();
        format!(
            "{}: error: option '{arg}' is ambiguous; possibilities: {}\n",
            sub.get_name(),
            list.join(" ")
        )
    })
}

/// A command-line error of `sbatch` in the format and with the exit status of its script errors
/// (`sbatch: error: command line: …`, status 1), as Slurm's sbatch reports both alike.
fn sbatch_command_line_error(argv: &[OsString], e: &clap::Error) -> Option<String> {
    use clap::error::ErrorKind;
    if !e.use_stderr() || matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return None;
    }
    let root = Cli::command();
    let sub = argv
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find_map(|a| root.find_subcommand(a))?;
    if sub.get_name() != "sbatch" {
        return None;
    }
    let mut sub = sub.clone();
    for g in root.get_arguments().filter(|a| a.is_global_set()) {
        sub = sub.arg(g.clone());
    }
    let err = sbatch::parse::describe_clap_error(&sub, e);
    Some(format!("sbatch: error: {err}\n"))
}

/// Parse `argv` and run it with `io`; returns the process exit status (1 on error, like Slurm).
pub async fn run_with(argv: Vec<OsString>, io: &mut Io<'_>) -> ExitCode {
    run_on(argv, None, io).await
}

/// [`run_with`] on an already connected cluster (`None`: the one the flags name).
pub async fn run_on(argv: Vec<OsString>, cluster: Option<Cluster>, io: &mut Io<'_>) -> ExitCode {
    let (_, normalized) = normalize_argv(argv.clone());
    let cli = match parse_args(argv) {
        Ok(cli) => cli,
        Err(e) => {
            if let Some(text) = sbatch_command_line_error(&normalized, &e) {
                let _ = write!(io.err, "{text}");
                return ExitCode::FAILURE;
            }
            let code = e.exit_code();
            let text = ambiguity_message(&normalized, &e).unwrap_or_else(|| e.render().to_string());
            let _ = if e.use_stderr() {
                write!(io.err, "{text}")
            } else {
                write!(io.out, "{text}")
            };
            return ExitCode::from(code as u8);
        }
    };
    match execute(&cli, cluster, io).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Failed>() => ExitCode::FAILURE,
        Err(e) if e.is::<ExitWith>() => {
            ExitCode::from(e.downcast_ref::<ExitWith>().map_or(1, |x| x.0))
        }
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
        let Command::Sbatch(s) = cli.command else {
            panic!("not sbatch");
        };
        assert_eq!(s.options.ntasks, Some(4));
    }
}

//! `srun`'s command line inside a job: the options users pass and those Open MPI's and
//! MPICH/hydra's Slurm launchers pass, with Slurm's environment defaults.
//!
//! Supported: `-n/--ntasks`, `-N/--nodes`, `--ntasks-per-node`, `-w/--nodelist` (a hostlist,
//! or a file of names when it contains `/`), `-c/--cpus-per-task`, `--gpus-per-task`,
//! `--gpu-bind`, `--gres=gpu[:TYPE]:N`, `--export`, `-l/--label`, `-K/--kill-on-bad-exit`,
//! `--mpi=none`, `-u/--unbuffered`, `-i/--input=all|none|N`, `-D/--chdir`, `-O/--overcommit`,
//! `--overlap`, `-m/--distribution=block`, `--cpu-bind=none`, `-v`, `-Q`. Open MPI 4.1's
//! `plm/slurm` runs `srun --ntasks-per-node=1 --kill-on-bad-exit --mpi=none [--nodes=N
//! --nodelist=A,B] --ntasks=N orted …` with `SLURM_CPU_BIND=none`; hydra runs `srun
//! [--nodelist A,B] -N n -n n --input none hydra_pmi_proxy …`. Anything else is refused with
//! a message naming the option and what is supported, never ignored.
//!
//! Defaults come from the environment as in Slurm 22.05 (`SLURM_NTASKS`,
//! `SLURM_JOB_NUM_NODES`, `SLURM_NTASKS_PER_NODE`, `SRUN_CPUS_PER_TASK`,
//! `SLURM_GPUS_PER_TASK`, `SLURM_GPU_BIND`, `SLURM_LABELIO`, `SLURM_KILL_BAD_EXIT`,
//! `SLURM_MPI_TYPE`, `SLURM_EXPORT_ENV`/`SRUN_EXPORT_ENV`, `SLURM_UNBUFFEREDIO`,
//! `SLURM_STDINMODE`, `SLURM_REMOTE_CWD`, `SLURM_OVERCOMMIT`, `SLURM_CPU_BIND`,
//! `SLURM_DISTRIBUTION`); the command line wins.

use clap::Parser;
use muster_crds::slurm::{GpuBind, GpuCount, NodeRange, gpus_from_gres, hostlist, parse_gres};

use super::job::Env;
use super::layout::Request;

/// What `srun --help` lists.
const SUPPORTED: &str = "-n/--ntasks, -N/--nodes, --ntasks-per-node, -w/--nodelist, \
-c/--cpus-per-task, --gpus-per-task, --gpu-bind, --gres=gpu:N, --export, -l/--label, \
-K/--kill-on-bad-exit, --mpi=none, -u/--unbuffered, -i/--input, -D/--chdir, -O/--overcommit, \
--overlap, -m/--distribution=block, --cpu-bind=none, -v/--verbose, -Q/--quiet";

#[derive(Parser, Debug, Default)]
#[command(
    name = "srun",
    about = "Run a job step inside a Muster job (Slurm's srun)",
    after_help = "Options users pass inside a job and those Open MPI and MPICH/hydra pass are supported; others are refused.",
    infer_long_args = true,
    disable_version_flag = true
)]
struct Cli {
    /// Number of tasks.
    #[arg(short = 'n', long = "ntasks", value_name = "N")]
    ntasks: Option<u32>,
    /// Number of nodes (MIN[-MAX]).
    #[arg(short = 'N', long = "nodes", value_name = "MIN[-MAX]")]
    nodes: Option<String>,
    /// Tasks per node.
    #[arg(long = "ntasks-per-node", value_name = "N")]
    ntasks_per_node: Option<u32>,
    /// Nodes to use (a hostlist, or a file of names when it contains '/').
    #[arg(short = 'w', long = "nodelist", value_name = "HOSTLIST")]
    nodelist: Option<String>,
    /// CPUs per task.
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N")]
    cpus_per_task: Option<u32>,
    /// GPUs per task ([TYPE:]N).
    #[arg(long = "gpus-per-task", value_name = "[TYPE:]N")]
    gpus_per_task: Option<String>,
    /// GPU binding.
    #[arg(long = "gpu-bind", value_name = "BIND")]
    gpu_bind: Option<String>,
    /// Generic resources (gpu[:TYPE]:N per node).
    #[arg(long = "gres", value_name = "LIST")]
    gres: Option<String>,
    /// Environment to pass: ALL, NONE, or NAME[=VALUE],... (optionally after ALL,).
    #[arg(long = "export", value_name = "SPEC")]
    export: Option<String>,
    /// Prefix each output line with the task number.
    #[arg(short = 'l', long = "label")]
    label: bool,
    /// End the step when a task exits non-zero.
    #[arg(short = 'K', long = "kill-on-bad-exit", value_name = "0|1", num_args = 0..=1, require_equals = true, default_missing_value = "1")]
    kill_on_bad_exit: Option<String>,
    /// MPI type (none).
    #[arg(long = "mpi", value_name = "TYPE")]
    mpi: Option<String>,
    /// Do not line-buffer output.
    #[arg(short = 'u', long = "unbuffered")]
    unbuffered: bool,
    /// Which tasks get stdin: all, none or a task number.
    #[arg(short = 'i', long = "input", value_name = "MODE")]
    input: Option<String>,
    /// Working directory of the tasks.
    #[arg(short = 'D', long = "chdir", value_name = "DIR")]
    chdir: Option<String>,
    /// Allow more tasks than CPUs.
    #[arg(short = 'O', long = "overcommit")]
    overcommit: bool,
    /// Share resources with other steps (always the case in Muster).
    #[arg(long = "overlap")]
    overlap: bool,
    /// Task distribution (block).
    #[arg(short = 'm', long = "distribution", value_name = "block")]
    distribution: Option<String>,
    /// CPU binding (none).
    #[arg(long = "cpu-bind", alias = "cpu_bind", value_name = "none")]
    cpu_bind: Option<String>,
    /// More messages.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// Fewer messages.
    #[arg(short = 'Q', long = "quiet")]
    quiet: bool,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// How the environment is passed (`--export`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Export {
    /// Everything (`ALL`, the default), plus assignments.
    All(Vec<(String, Option<String>)>),
    /// Only `SLURM_*` and the named variables (`NONE` names none).
    Only(Vec<(String, Option<String>)>),
}

/// Which tasks read srun's stdin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Every task (Slurm's default).
    All,
    /// None (`/dev/null`).
    None,
    /// One task.
    Task(u32),
}

/// A parsed srun command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Opts {
    /// Layout request.
    pub request: Request,
    /// GPUs per task.
    pub gpus_per_task: Option<GpuCount>,
    /// `--gpu-bind` as given, and parsed.
    pub gpu_bind: Option<(String, GpuBind)>,
    /// `--gres` GPUs per node.
    pub gres_gpus: Option<GpuCount>,
    /// `--export`.
    pub export: Export,
    /// `-l`.
    pub label: bool,
    /// `-K`.
    pub kill_on_bad_exit: bool,
    /// `--mpi`.
    pub mpi: Option<String>,
    /// `-u`.
    pub unbuffered: bool,
    /// `-i`.
    pub input: Input,
    /// `-D`.
    pub chdir: Option<String>,
    /// `-v` count.
    pub verbose: u8,
    /// `-Q`.
    pub quiet: bool,
    /// The command.
    pub command: Vec<String>,
}

/// The outcome of parsing: options, or something to print and an exit code.
#[derive(Debug)]
pub enum Parsed {
    /// Run a step.
    Run(Box<Opts>),
    /// Print this (to stdout when the code is 0, else stderr) and exit.
    Exit(String, i32),
}

fn flag(env: &dyn Env, k: &str) -> bool {
    env.get(k).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Parses `args` (without the program name) with defaults from `env`.
pub fn parse(args: &[String], env: &dyn Env) -> Parsed {
    let argv = std::iter::once("srun".to_string()).chain(args.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => return Parsed::Exit(clap_message(e), exit_code_for(args)),
    };
    match build(cli, env) {
        Ok(o) => Parsed::Run(Box::new(o)),
        Err(m) => Parsed::Exit(format!("srun: error: {m}\n"), 1),
    }
}

fn exit_code_for(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        0
    } else {
        // Slurm exits 255 on a bad command line.
        255
    }
}

fn clap_message(e: clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => e.to_string(),
        ErrorKind::UnknownArgument => {
            let arg = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => "?".into(),
            };
            format!(
                "srun: unrecognized option '{arg}'\nsrun: Muster's srun supports {SUPPORTED}\nTry \"srun --help\" for more information\n"
            )
        }
        _ => {
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            format!("srun: error: {first}\nTry \"srun --help\" for more information\n")
        }
    }
}

fn parse_u32(env: &dyn Env, k: &str) -> Result<Option<u32>, String> {
    match env.get(k).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse::<u32>()
            .map(Some)
            .map_err(|_| format!("{k}={v} is not a count")),
    }
}

fn build(cli: Cli, env: &dyn Env) -> Result<Opts, String> {
    let ntasks = match cli.ntasks {
        Some(n) => Some(n),
        None => match parse_u32(env, "SLURM_NTASKS")? {
            Some(n) => Some(n),
            None => parse_u32(env, "SLURM_NPROCS")?,
        },
    };
    let nodes = match cli.nodes.or_else(|| env.get("SLURM_JOB_NUM_NODES")) {
        Some(s) => {
            let r = NodeRange::parse(&s).map_err(|e| format!("--nodes: {e}"))?;
            Some((r.min, (r.max != r.min).then_some(r.max)))
        }
        None => None,
    };
    let ntasks_per_node = match cli.ntasks_per_node {
        Some(n) => Some(n),
        None => parse_u32(env, "SLURM_NTASKS_PER_NODE")?,
    };
    let cpus_per_task = match cli.cpus_per_task {
        Some(n) => Some(n),
        None => parse_u32(env, "SRUN_CPUS_PER_TASK")?,
    };
    if cpus_per_task == Some(0) {
        return Err("invalid number of cpus per task (-c 0)".into());
    }
    let nodelist = match cli.nodelist {
        None => Vec::new(),
        Some(w) if w.contains('/') => {
            let text =
                std::fs::read_to_string(&w).map_err(|e| format!("--nodelist file {w}: {e}"))?;
            let mut out = Vec::new();
            for line in text.split(|c: char| c == '\n' || c == ',' || c.is_whitespace()) {
                if !line.is_empty() {
                    out.extend(hostlist::expand(line).map_err(|e| format!("--nodelist {w}: {e}"))?);
                }
            }
            out
        }
        Some(w) => hostlist::expand(&w).map_err(|e| format!("--nodelist: {e}"))?,
    };
    let gpus_per_task = match cli.gpus_per_task.or_else(|| env.get("SLURM_GPUS_PER_TASK")) {
        Some(s) => Some(GpuCount::parse(&s).map_err(|e| format!("--gpus-per-task: {e}"))?),
        None => None,
    };
    let gpu_bind = match cli.gpu_bind.or_else(|| env.get("SLURM_GPU_BIND")) {
        Some(s) => {
            let b = GpuBind::parse(&s).map_err(|e| format!("--gpu-bind: {e}"))?;
            Some((s, b))
        }
        None => None,
    };
    let gres_gpus = match cli.gres {
        Some(s) => {
            let items = parse_gres(&s).map_err(|e| format!("--gres: {e}"))?;
            if let Some(other) = items.iter().find(|i| i.name != "gpu") {
                return Err(format!(
                    "--gres={s}: only gpu resources exist in a Muster job ({} is not one)",
                    other.name
                ));
            }
            gpus_from_gres(&items).map_err(|e| format!("--gres: {e}"))?
        }
        None => None,
    };
    let export = parse_export(
        &cli.export
            .or_else(|| env.get("SRUN_EXPORT_ENV"))
            .or_else(|| env.get("SLURM_EXPORT_ENV"))
            .unwrap_or_else(|| "ALL".into()),
    )?;
    let kill_on_bad_exit = match cli.kill_on_bad_exit {
        Some(v) => v != "0",
        None => flag(env, "SLURM_KILL_BAD_EXIT"),
    };
    let mpi = cli.mpi.or_else(|| env.get("SLURM_MPI_TYPE"));
    if let Some(m) = &mpi
        && m != "none"
    {
        return Err(format!(
            "--mpi={m} is not available: Muster's srun provides no PMI server. Use --mpi=none and start MPI programs with mpirun (Open MPI and MPICH's hydra launch their daemons through srun)"
        ));
    }
    let input = match cli.input.or_else(|| env.get("SLURM_STDINMODE")) {
        None => Input::All,
        Some(i) if i.eq_ignore_ascii_case("all") => Input::All,
        Some(i) if i.eq_ignore_ascii_case("none") => Input::None,
        Some(i) => match i.parse::<u32>() {
            Ok(n) => Input::Task(n),
            Err(_) => {
                return Err(format!(
                    "--input={i}: Muster's srun takes all, none or a task number (no file names)"
                ));
            }
        },
    };
    if let Some(d) = cli.distribution.or_else(|| env.get("SLURM_DISTRIBUTION"))
        && !d.eq_ignore_ascii_case("block")
    {
        return Err(format!(
            "--distribution={d}: Muster's srun lays tasks out by block only"
        ));
    }
    if let Some(c) = cli.cpu_bind.or_else(|| env.get("SLURM_CPU_BIND")) {
        let c2 = c
            .trim_start_matches("verbose,")
            .trim_start_matches("quiet,");
        if !c2.eq_ignore_ascii_case("none") && !c2.eq_ignore_ascii_case("no") {
            return Err(format!(
                "--cpu-bind={c}: Muster does not bind tasks to CPUs; only --cpu-bind=none is accepted"
            ));
        }
    }
    let _ = cli.overlap;
    if cli.command.is_empty() {
        return Err("no command given: srun [OPTIONS] COMMAND [ARGS...]".into());
    }
    Ok(Opts {
        request: Request {
            ntasks,
            nodes,
            ntasks_per_node,
            cpus_per_task,
            nodelist,
            overcommit: cli.overcommit || flag(env, "SLURM_OVERCOMMIT"),
        },
        gpus_per_task,
        gpu_bind,
        gres_gpus,
        export,
        label: cli.label || flag(env, "SLURM_LABELIO"),
        kill_on_bad_exit,
        mpi,
        unbuffered: cli.unbuffered || flag(env, "SLURM_UNBUFFEREDIO"),
        input,
        chdir: cli.chdir.or_else(|| env.get("SLURM_REMOTE_CWD")),
        verbose: cli.verbose,
        quiet: cli.quiet,
        command: cli.command,
    })
}

/// Parses `--export`.
pub fn parse_export(s: &str) -> Result<Export, String> {
    let mut items: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .collect();
    let all = items.first().is_some_and(|f| f.eq_ignore_ascii_case("ALL"));
    let none = items
        .first()
        .is_some_and(|f| f.eq_ignore_ascii_case("NONE"));
    if all || none {
        items.remove(0);
    }
    let mut vars = Vec::new();
    for it in items {
        let (k, v) = match it.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (it, None),
        };
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("--export={s}: {k:?} is not a variable name"));
        }
        vars.push((k.to_string(), v));
    }
    Ok(if all {
        Export::All(vars)
    } else {
        Export::Only(vars)
    })
}

/// The environment the tasks get from srun's `env` under `export`.
pub fn exported(env: &[(String, String)], export: &Export) -> Vec<(String, String)> {
    type Assignments = Vec<(String, Option<String>)>;
    let (base, vars): (Vec<(String, String)>, &Assignments) = match export {
        Export::All(v) => (env.to_vec(), v),
        Export::Only(v) => (
            env.iter()
                .filter(|(k, _)| {
                    k.starts_with("SLURM_")
                        || k.starts_with("MUSTER_")
                        || v.iter().any(|(n, val)| n == k && val.is_none())
                })
                .cloned()
                .collect(),
            v,
        ),
    };
    let mut out = base;
    for (k, v) in vars {
        if let Some(v) = v {
            out.retain(|(n, _)| n != k);
            out.push((k.clone(), v.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn run(s: &str, e: &BTreeMap<String, String>) -> Opts {
        match parse(&args(s), e) {
            Parsed::Run(o) => *o,
            Parsed::Exit(m, c) => panic!("{s}: exit {c}: {m}"),
        }
    }

    #[test]
    fn open_mpi_and_hydra_lines_parse() {
        let o = run(
            "--ntasks-per-node=1 --kill-on-bad-exit --mpi=none --nodes=1 --nodelist=n002 --ntasks=1 orted -mca ess slurm",
            &env(&[("SLURM_CPU_BIND", "none")]),
        );
        assert_eq!(o.request.ntasks_per_node, Some(1));
        assert_eq!(o.request.nodelist, ["n002"]);
        assert!(o.kill_on_bad_exit);
        assert_eq!(o.command, ["orted", "-mca", "ess", "slurm"]);
        let o = run(
            "--nodelist n001,n002 -N 2 -n 2 --input none /usr/bin/hydra_pmi_proxy --control-port n001:1 -1",
            &env(&[]),
        );
        assert_eq!((o.request.ntasks, o.input), (Some(2), Input::None));
        assert_eq!(o.command.last().map(String::as_str), Some("-1"));
    }

    #[test]
    fn short_clusters_attached_values_and_prefixes_work() {
        let o = run("-lK -n4 --ntasks-per=2 -c 2 hostname -f", &env(&[]));
        assert!(run("-K bash -c true", &env(&[])).kill_on_bad_exit);
        assert_eq!(
            run("-K bash -c true", &env(&[])).command,
            ["bash", "-c", "true"]
        );
        assert!(!run("--kill-on-bad-exit=0 true", &env(&[])).kill_on_bad_exit);
        assert!(o.label && o.kill_on_bad_exit);
        assert_eq!(o.request.ntasks, Some(4));
        assert_eq!(o.request.ntasks_per_node, Some(2));
        assert_eq!(o.request.cpus_per_task, Some(2));
        assert_eq!(o.command, ["hostname", "-f"]);
    }

    #[test]
    fn the_environment_gives_defaults_and_the_command_line_wins() {
        let e = env(&[
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_GPUS_PER_TASK", "1"),
            ("SLURM_NTASKS_PER_NODE", "2"),
        ]);
        let o = run("true", &e);
        assert_eq!(o.request.ntasks, Some(4));
        assert_eq!(o.request.nodes, Some((2, None)));
        assert_eq!(o.gpus_per_task.map(|g| g.count), Some(1));
        let o = run("-n 1 -N 1-2 true", &e);
        assert_eq!(
            (o.request.ntasks, o.request.nodes),
            (Some(1), Some((1, Some(2))))
        );
    }

    #[test]
    fn unsupported_options_are_refused_by_name() {
        match parse(&args("--bogus true"), &env(&[])) {
            Parsed::Exit(m, 255) => {
                assert!(m.starts_with("srun: unrecognized option '--bogus'"), "{m}");
                assert!(m.contains("--gpus-per-task"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        for (line, want) in [
            ("--mpi=pmix a.out", "no PMI server"),
            ("--cpu-bind=cores a.out", "only --cpu-bind=none"),
            ("-m cyclic a.out", "by block only"),
            ("--gres=mps:1 a.out", "only gpu resources"),
            ("--gpu-bind=bogus a.out", "--gpu-bind"),
            ("-n 2", "no command"),
        ] {
            match parse(&args(line), &env(&[])) {
                Parsed::Exit(m, 1) => assert!(m.contains(want), "{line}: {m}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn export_keeps_what_slurm_keeps() {
        let env: Vec<(String, String)> = [
            ("PATH", "/bin"),
            ("FOO", "1"),
            ("BAR", "2"),
            ("SLURM_JOB_ID", "5"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let keys = |e: &Export| -> Vec<String> {
            exported(&env, e)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        };
        assert_eq!(
            keys(&parse_export("FOO").unwrap()),
            ["FOO=1", "SLURM_JOB_ID=5"]
        );
        assert_eq!(keys(&parse_export("NONE").unwrap()), ["SLURM_JOB_ID=5"]);
        assert_eq!(
            keys(&parse_export("ALL,X=y").unwrap()),
            ["PATH=/bin", "FOO=1", "BAR=2", "SLURM_JOB_ID=5", "X=y"]
        );
        assert!(parse_export("A-B").is_err());
    }
}

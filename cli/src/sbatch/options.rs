//! The `sbatch` option grammar: one clap [`Args`] struct parsed from `#SBATCH` tokens, from
//! `SBATCH_*` environment variables and from the command line, with getopt_long's rules
//! (unique long-option prefixes, a missing value takes the next token, last one wins).

// The option docs are clap's help text, in Slurm's own notation (`[TYPE:]COUNT`), which
// rustdoc would read as links.
#![allow(rustdoc::broken_intra_doc_links)]

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};

use muster_crds::slurm::getopt::{HasArg, SBATCH_OPTIONS, SbatchOption, Source};
use muster_crds::slurm::pyxis;

use super::values;

/// Every `sbatch` option Muster understands. `None`/`false` means "not given".
///
/// Values are kept as the user wrote them, because the BatchJob spec takes Slurm's own syntax.
/// As in sbatch, counts, times, node ranges, memory sizes and switches are checked each time
/// they are given; GPU requests, constraints, dependencies, arrays and GPU binding only in
/// their final value ([`super::manifest::check`]), so the command line can replace a
/// directive Slurm would refuse.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct SbatchOptions {
    /// Partition to run in (a Partition object; `_` is read as `-`).
    #[arg(short = 'p', long, value_name = "PARTITION", allow_hyphen_values = true, value_parser = values::partition)]
    pub partition: Option<String>,

    /// Job name shown by squeue (default: the script's file name).
    #[arg(short = 'J', long = "job-name", value_name = "NAME", allow_hyphen_values = true, value_parser = values::job_name)]
    pub job_name: Option<String>,

    /// Number of nodes: N or MIN-MAX.
    #[arg(short = 'N', long, value_name = "N[-MAX]", allow_hyphen_values = true, value_parser = values::nodes)]
    pub nodes: Option<String>,

    /// Number of tasks (ranks).
    #[arg(short = 'n', long, value_name = "N", allow_hyphen_values = true, value_parser = values::count)]
    pub ntasks: Option<u32>,

    /// Tasks on each node.
    #[arg(long = "ntasks-per-node", visible_alias = "tasks-per-node", value_name = "N", allow_hyphen_values = true, value_parser = values::count)]
    pub ntasks_per_node: Option<u32>,

    /// CPUs for each task.
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N", allow_hyphen_values = true, value_parser = values::count)]
    pub cpus_per_task: Option<u32>,

    /// Memory per node (K/M/G/T, default M; 0 = the whole node).
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true, value_parser = values::mem)]
    pub mem: Option<String>,

    /// Memory per allocated CPU.
    #[arg(long = "mem-per-cpu", value_name = "SIZE", allow_hyphen_values = true, value_parser = values::mem)]
    pub mem_per_cpu: Option<String>,

    /// Memory per allocated GPU.
    #[arg(long = "mem-per-gpu", value_name = "SIZE", allow_hyphen_values = true, value_parser = values::mem)]
    pub mem_per_gpu: Option<String>,

    /// GPUs for the whole job: [TYPE:]COUNT.
    #[arg(short = 'G', long, value_name = "[TYPE:]N", allow_hyphen_values = true)]
    pub gpus: Option<String>,

    /// GPUs on each node: [TYPE:]COUNT.
    #[arg(
        long = "gpus-per-node",
        value_name = "[TYPE:]N",
        allow_hyphen_values = true
    )]
    pub gpus_per_node: Option<String>,

    /// GPUs for each task: [TYPE:]COUNT (needs a task count).
    #[arg(
        long = "gpus-per-task",
        value_name = "[TYPE:]N",
        allow_hyphen_values = true
    )]
    pub gpus_per_task: Option<String>,

    /// Generic resources per node: gpu[:TYPE][:COUNT].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub gres: Option<String>,

    /// Node features: a&b, a|b, [a|b], feat*N, parentheses.
    #[arg(short = 'C', long, value_name = "LIST", allow_hyphen_values = true)]
    pub constraint: Option<String>,

    /// Nodes the job must include: a hostlist (gpu[001-004]) or, when it contains '/', a file
    /// of node names.
    #[arg(short = 'w', long, value_name = "HOSTLIST|FILE", allow_hyphen_values = true, value_parser = values::nodes_or_file)]
    pub nodelist: Option<String>,

    /// Nodes the job must not use: a hostlist or, when it contains '/', a file of node names.
    #[arg(short = 'x', long, value_name = "HOSTLIST|FILE", allow_hyphen_values = true, value_parser = values::nodes_or_file)]
    pub exclude: Option<String>,

    /// Whole nodes (no value), or =user: nodes shared only with your own jobs.
    #[arg(long, value_name = "user", num_args = 0..=1, require_equals = true, default_missing_value = "", allow_hyphen_values = true, value_parser = values::exclusive)]
    pub exclusive: Option<String>,

    /// Time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED.
    #[arg(short = 't', long, value_name = "TIME", allow_hyphen_values = true, value_parser = values::time)]
    pub time: Option<String>,

    /// Job array indices: 0-15, 1,3,5-7, 0-15:4, with optional %MAX_RUNNING.
    #[arg(short = 'a', long, value_name = "INDEXES", allow_hyphen_values = true)]
    pub array: Option<String>,

    /// Dependencies: TYPE:JOB[:JOB...] joined by , or ?; JOB is a job id or BatchJob name.
    #[arg(short = 'd', long, value_name = "LIST", allow_hyphen_values = true)]
    pub dependency: Option<String>,

    /// At most COUNT leaf switches, waiting up to MAX_WAIT: COUNT[@MAX_WAIT].
    #[arg(long, value_name = "COUNT[@WAIT]", allow_hyphen_values = true, value_parser = values::switches)]
    pub switches: Option<String>,

    /// Task-to-GPU binding: closest, map_gpu:…, mask_gpu:…, per_task:N, single:N, none.
    #[arg(long = "gpu-bind", value_name = "SPEC", allow_hyphen_values = true)]
    pub gpu_bind: Option<String>,

    /// Lower the job's priority by ADJ (default 100; negative raises it).
    #[arg(long, value_name = "ADJ", num_args = 0..=1, require_equals = true, default_missing_value = "100", allow_hyphen_values = true, value_parser = values::nice)]
    pub nice: Option<i32>,

    /// A fixed priority for the job (administrators).
    #[arg(long, value_name = "VALUE", allow_hyphen_values = true, value_parser = values::priority)]
    pub priority: Option<u32>,

    /// Requeue the job after a node failure or preemption.
    #[arg(long, action = ArgAction::SetTrue, overrides_with = "no_requeue")]
    pub requeue: bool,

    /// Never requeue the job.
    #[arg(long = "no-requeue", action = ArgAction::SetTrue, overrides_with = "requeue")]
    pub no_requeue: bool,

    /// Submit the job held (release it with `scontrol release`).
    #[arg(short = 'H', long, action = ArgAction::SetTrue)]
    pub hold: bool,

    /// The batch script's standard output file (a filename pattern: %j, %x, %A, %a, %N, %u, %%),
    /// written when it lies on a shared filesystem of the partition; `muster logs` has it too.
    #[arg(short = 'o', long, value_name = "FILE", allow_hyphen_values = true, value_parser = values::path)]
    pub output: Option<String>,

    /// The batch script's standard error file (default: the output file).
    #[arg(short = 'e', long, value_name = "FILE", allow_hyphen_values = true, value_parser = values::path)]
    pub error: Option<String>,

    /// The batch script's working directory (relative: to the container's); relative output
    /// files are relative to it. SLURM_SUBMIT_DIR is unchanged.
    #[arg(short = 'D', long, value_name = "DIRECTORY", allow_hyphen_values = true, value_parser = values::chdir)]
    pub chdir: Option<String>,

    /// Open the output and error files in append or truncate (default) mode.
    #[arg(long = "open-mode", value_name = "append|truncate", allow_hyphen_values = true, value_parser = values::open_mode)]
    pub open_mode: Option<String>,

    /// The account the job is charged to (shown by squeue %a and sacct's Account).
    #[arg(short = 'A', long, value_name = "NAME", allow_hyphen_values = true, value_parser = values::account)]
    pub account: Option<String>,

    /// Do not start the job before this time: HH:MM[:SS], now+N[seconds|minutes|hours|days|weeks],
    /// YYYY-MM-DD[THH:MM[:SS]], midnight, noon, teatime, tomorrow, ...
    #[arg(short = 'b', long, value_name = "TIME", allow_hyphen_values = true, value_parser = values::begin)]
    pub begin: Option<String>,

    /// Send SIG TIME seconds (default 60) before the time limit: [{R|B}:]SIG[@TIME]; B: to the
    /// batch script only, otherwise to the steps' tasks.
    #[arg(long, value_name = "[{R|B}:]SIG[@TIME]", allow_hyphen_values = true, value_parser = values::signal)]
    pub signal: Option<String>,

    /// A comment kept with the job (shown by `scontrol show job` and `sacct -o Comment`).
    #[arg(long, value_name = "STRING", allow_hyphen_values = true)]
    pub comment: Option<String>,

    /// Run this command string in a sh script instead of a script file.
    #[arg(long, value_name = "COMMAND", allow_hyphen_values = true)]
    pub wrap: Option<String>,

    /// Print only the job id.
    #[arg(long, action = ArgAction::SetTrue)]
    pub parsable: bool,

    /// Print nothing but errors.
    #[arg(short = 'Q', long, action = ArgAction::SetTrue)]
    pub quiet: bool,

    /// Print the options as parsed ("defined options") on standard error.
    #[arg(short = 'v', long, action = ArgAction::Count)]
    pub verbose: u8,

    /// Create nothing: print when and where the job would start now (Slurm's --test-only).
    #[arg(long = "test-only", action = ArgAction::SetTrue)]
    pub test_only: bool,

    /// Wait until the job ends; exit with its exit code.
    #[arg(short = 'W', long, action = ArgAction::SetTrue)]
    pub wait: bool,

    /// Variables set in every task's environment: `[ALL|NONE][,VAR=VALUE]...`. The submitting
    /// shell's environment is never copied into pods (ALL and NONE both mean "the image's
    /// environment"), so every variable needs a value.
    #[arg(long, value_name = "[ALL|NONE][,VAR=VALUE]...", value_parser = values::export)]
    pub export: Option<String>,

    /// Container image for the tasks (Muster). Default: the partition's defaultImage.
    #[arg(long, value_name = "IMAGE", allow_hyphen_values = true, value_parser = values::image)]
    pub image: Option<String>,

    /// pyxis: the image of the job's container, `[REGISTRY#]IMAGE[:TAG]` (an enroot URI) or
    /// a Kubernetes image reference.
    #[arg(long = "container-image", value_name = "[REGISTRY#]IMAGE[:TAG]", allow_hyphen_values = true, value_parser = values::container_image)]
    pub container_image: Option<String>,

    /// pyxis: mounts of the partition's shared filesystems, `SRC[:DST[:FLAGS]][,...]` (SRC a
    /// path on one of them, a volume's name, or tmpfs; flags joined by '+'). Given several
    /// times, the mounts add up.
    #[arg(long = "container-mounts", value_name = "SRC:DST[:FLAGS][,SRC:DST...]", action = ArgAction::Append, allow_hyphen_values = true, value_parser = values::container_mounts)]
    pub container_mounts: Vec<String>,

    /// pyxis: working directory of the job's container (where the script starts).
    #[arg(long = "container-workdir", value_name = "PATH", allow_hyphen_values = true, value_parser = values::container_workdir)]
    pub container_workdir: Option<String>,

    /// pyxis: variables whose values the job's container takes from this environment
    /// (unset ones are left to the image). Given several times, the names add up.
    #[arg(long = "container-env", value_name = "NAME[,NAME...]", action = ArgAction::Append, allow_hyphen_values = true, value_parser = values::container_env)]
    pub container_env: Vec<String>,

    /// pyxis: a container name. Accepted: every step of a job runs in its node pods'
    /// containers already; none is kept after the job.
    #[arg(long = "container-name", value_name = "NAME[:FLAG]", allow_hyphen_values = true, value_parser = values::container_name)]
    pub container_name: Option<String>,

    /// pyxis: namespaces of the container's own (ipc and uts: a pod has its own).
    #[arg(long = "container-unshare", value_name = "NS[,NS...]", allow_hyphen_values = true, value_parser = values::container_unshare)]
    pub container_unshare: Option<String>,

    /// pyxis's other options: accepted where a pod does that anyway, refused with the reason
    /// otherwise.
    #[command(flatten)]
    pub pyxis: PyxisOther,

    /// Slurm options Muster reads and that have no effect (each gets one warning).
    #[command(flatten)]
    pub no_effect: NoEffect,
}

impl SbatchOptions {
    /// `self` over `lower`: every option given in `self` wins; the rest come from `lower`.
    pub fn over(self, lower: SbatchOptions) -> SbatchOptions {
        let requeue_given = self.requeue || self.no_requeue;
        SbatchOptions {
            partition: self.partition.or(lower.partition),
            job_name: self.job_name.or(lower.job_name),
            nodes: self.nodes.or(lower.nodes),
            ntasks: self.ntasks.or(lower.ntasks),
            ntasks_per_node: self.ntasks_per_node.or(lower.ntasks_per_node),
            cpus_per_task: self.cpus_per_task.or(lower.cpus_per_task),
            mem: self.mem.or(lower.mem),
            mem_per_cpu: self.mem_per_cpu.or(lower.mem_per_cpu),
            mem_per_gpu: self.mem_per_gpu.or(lower.mem_per_gpu),
            gpus: self.gpus.or(lower.gpus),
            gpus_per_node: self.gpus_per_node.or(lower.gpus_per_node),
            gpus_per_task: self.gpus_per_task.or(lower.gpus_per_task),
            gres: self.gres.or(lower.gres),
            constraint: self.constraint.or(lower.constraint),
            nodelist: self.nodelist.or(lower.nodelist),
            exclude: self.exclude.or(lower.exclude),
            exclusive: self.exclusive.or(lower.exclusive),
            time: self.time.or(lower.time),
            array: self.array.or(lower.array),
            dependency: self.dependency.or(lower.dependency),
            switches: self.switches.or(lower.switches),
            gpu_bind: self.gpu_bind.or(lower.gpu_bind),
            nice: self.nice.or(lower.nice),
            priority: self.priority.or(lower.priority),
            requeue: if requeue_given {
                self.requeue
            } else {
                lower.requeue
            },
            no_requeue: if requeue_given {
                self.no_requeue
            } else {
                lower.no_requeue
            },
            hold: self.hold || lower.hold,
            output: self.output.or(lower.output),
            error: self.error.or(lower.error),
            open_mode: self.open_mode.or(lower.open_mode),
            chdir: self.chdir.or(lower.chdir),
            account: self.account.or(lower.account),
            begin: self.begin.or(lower.begin),
            signal: self.signal.or(lower.signal),
            comment: self.comment.or(lower.comment),
            wrap: self.wrap.or(lower.wrap),
            parsable: self.parsable || lower.parsable,
            quiet: self.quiet || lower.quiet,
            verbose: self.verbose.max(lower.verbose),
            test_only: self.test_only || lower.test_only,
            wait: self.wait || lower.wait,
            export: self.export.or(lower.export),
            image: self.image.or(lower.image),
            container_image: self.container_image.or(lower.container_image),
            // pyxis adds mounts and variables up over every occurrence.
            container_mounts: [lower.container_mounts, self.container_mounts].concat(),
            container_workdir: self.container_workdir.or(lower.container_workdir),
            container_env: [lower.container_env, self.container_env].concat(),
            container_name: self.container_name.or(lower.container_name),
            container_unshare: self.container_unshare.or(lower.container_unshare),
            pyxis: PyxisOther {
                given: [self.pyxis.given, lower.pyxis.given].concat(),
            },
            no_effect: NoEffect {
                given: [self.no_effect.given, lower.no_effect.given].concat(),
            },
        }
    }
}

const NOT_IMPLEMENTED: &str = "Muster does not implement it";

/// What every Slurm option Muster does not implement would have done, and what to do instead.
/// Each is read (so scripts from other sites submit) and gets one warning line.
pub const NO_EFFECT: &[(&str, &str)] = &[
    ("acctg-freq", NOT_IMPLEMENTED),
    ("batch", "choose nodes by feature with --constraint"),
    ("bb", "burst buffers are not supported"),
    ("bbf", "burst buffers are not supported"),
    ("cluster", "choose the cluster with --context"),
    ("cluster-constraint", "choose the cluster with --context"),
    ("clusters", "choose the cluster with --context"),
    ("container", "give the task image with --image"),
    (
        "context",
        "SELinux contexts are not supported (on the command line --context picks the kubeconfig context)",
    ),
    (
        "contiguous",
        "placement follows the partition's network topology; see --switches",
    ),
    ("core-spec", NOT_IMPLEMENTED),
    ("cores-per-socket", "ask for CPUs with --cpus-per-task"),
    ("cpu-freq", NOT_IMPLEMENTED),
    (
        "cpus-per-gpu",
        "ask for CPUs with --cpus-per-task (the partition's defCpuPerGpu applies otherwise)",
    ),
    ("deadline", "deadlines are not supported; set --time"),
    ("delay-boot", NOT_IMPLEMENTED),
    (
        "distribution",
        "tasks are placed in blocks on each node; see --ntasks-per-node",
    ),
    (
        "export-file",
        "the task environment comes from the container image; set variables in the script",
    ),
    ("extra-node-info", "ask for CPUs with --cpus-per-task"),
    (
        "get-user-env",
        "the task environment comes from the container image",
    ),
    ("gid", "tasks run as the pod template's security context"),
    ("gpu-freq", NOT_IMPLEMENTED),
    (
        "gpus-per-socket",
        "use --gpus-per-node or --gpus-per-task; --gpu-bind=closest keeps GPUs near their CPUs",
    ),
    (
        "gres-flags",
        "--gpu-bind=closest keeps GPUs near their CPUs",
    ),
    ("hint", NOT_IMPLEMENTED),
    ("ignore-pbs", "Muster reads #SBATCH lines only"),
    ("input", "tasks have no standard input"),
    (
        "kill-on-invalid-dep",
        "a job whose dependency can never be met is cancelled (reason DependencyNeverSatisfied)",
    ),
    ("licenses", "licenses are not supported"),
    (
        "mail-type",
        "Muster sends no mail; watch jobs with squeue or sacct",
    ),
    (
        "mail-user",
        "Muster sends no mail; watch jobs with squeue or sacct",
    ),
    ("mcs-label", NOT_IMPLEMENTED),
    ("mem-bind", NOT_IMPLEMENTED),
    ("mincpus", "ask for CPUs with --cpus-per-task"),
    ("network", NOT_IMPLEMENTED),
    (
        "no-kill",
        "a node failure ends the job (NODE_FAIL) and requeues it unless --no-requeue",
    ),
    (
        "nodefile",
        "give the file to --nodelist: -w ./FILE (a name with '/' is read as a file of node names)",
    ),
    (
        "ntasks-per-core",
        "use --ntasks-per-node and --cpus-per-task",
    ),
    ("ntasks-per-gpu", "use --gpus-per-task"),
    (
        "ntasks-per-socket",
        "use --ntasks-per-node and --cpus-per-task",
    ),
    ("ntasks-per-tres", "use --gpus-per-task"),
    ("overcommit", NOT_IMPLEMENTED),
    (
        "oversubscribe",
        "nodes are shared between jobs unless --exclusive",
    ),
    ("power", NOT_IMPLEMENTED),
    ("prefer", "use --constraint"),
    ("profile", NOT_IMPLEMENTED),
    (
        "propagate",
        "resource limits come from the container runtime",
    ),
    (
        "qos",
        "priority comes from the partition's priorityTier and --nice/--priority",
    ),
    ("reboot", NOT_IMPLEMENTED),
    ("reservation", "reservations are not supported"),
    ("sockets-per-node", "ask for CPUs with --cpus-per-task"),
    ("spread-job", NOT_IMPLEMENTED),
    ("thread-spec", NOT_IMPLEMENTED),
    ("threads-per-core", "ask for CPUs with --cpus-per-task"),
    ("time-min", "set --time"),
    (
        "tmp",
        "ask for scratch space in the pod template (an emptyDir volume)",
    ),
    ("uid", "tasks run as the pod template's security context"),
    ("usage", "see muster sbatch --help"),
    ("use-min-nodes", NOT_IMPLEMENTED),
    (
        "wait-all-nodes",
        "all of a job's tasks always start together",
    ),
    ("wckey", NOT_IMPLEMENTED),
    ("help", "run `muster sbatch --help`"),
    ("version", "run `muster --version`"),
];

/// Why option `long` has no effect, if it is one of [`NO_EFFECT`].
pub fn no_effect_reason(long: &str) -> Option<&'static str> {
    NO_EFFECT
        .iter()
        .find(|(l, _)| *l == long)
        .map(|(_, why)| *why)
}

/// Options of sbatch whose names Muster's global flags take on the command line (`--context`
/// picks the kubeconfig context), and clap's own `--help`/`--version`.
const NOT_ON_COMMAND_LINE: &[&str] = &["context", "help", "version"];

/// The no-effect options that were given on the command line, with their position among the
/// parsed arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoEffect {
    /// Long names of the options given, with clap's index of each (for order).
    pub given: Vec<(&'static str, usize)>,
}

fn no_effect_arg(o: &SbatchOption) -> Arg {
    // The long name is the id: no field name of SbatchOptions looks like it.
    let mut arg = Arg::new(o.long).long(o.long).hide(true);
    if let Some(s) = o.short {
        arg = arg.short(s);
    }
    match o.has_arg {
        HasArg::No => arg.action(ArgAction::SetTrue),
        HasArg::Required => arg
            .action(ArgAction::Set)
            .num_args(1)
            .allow_hyphen_values(true),
        HasArg::Optional => arg
            .action(ArgAction::Set)
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("")
            .allow_hyphen_values(true),
    }
}

fn no_effect_options() -> impl Iterator<Item = &'static SbatchOption> {
    SBATCH_OPTIONS
        .iter()
        .filter(|o| no_effect_reason(o.long).is_some() && !NOT_ON_COMMAND_LINE.contains(&o.long))
}

impl FromArgMatches for NoEffect {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for o in no_effect_options() {
            let id = o.long;
            if m.try_contains_id(id).unwrap_or(false)
                && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
            {
                given.push((o.long, m.index_of(id).unwrap_or(0)));
            }
        }
        given.sort_by_key(|&(_, i)| i);
        Ok(NoEffect { given })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for NoEffect {
    fn augment_args(cmd: Command) -> Command {
        no_effect_options().fold(cmd, |cmd, o| cmd.arg(no_effect_arg(o)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// The refusal of pyxis option `long`, with the reason.
pub fn pyxis_refusal(long: &str, why: &str) -> String {
    format!("--{long} (pyxis) is not supported by Muster: {why}")
}

/// pyxis's options that are neither a field of [`SbatchOptions`] nor take a value Muster
/// keeps: those a pod honours anyway ([`pyxis::already`]) and those Muster refuses
/// ([`pyxis::refusal`]), as given on the command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PyxisOther {
    /// Long names given, with clap's index of each.
    pub given: Vec<(&'static str, usize)>,
}

impl PyxisOther {
    /// The refusals among them, in the order given.
    pub fn refusals(&self) -> impl Iterator<Item = String> + '_ {
        self.given
            .iter()
            .filter_map(|(l, _)| pyxis::refusal(l).map(|why| pyxis_refusal(l, why)))
    }
}

fn pyxis_other_options() -> impl Iterator<Item = &'static SbatchOption> {
    SBATCH_OPTIONS.iter().filter(|o| {
        o.source == Source::Pyxis
            && (pyxis::already(o.long).is_some() || pyxis::refusal(o.long).is_some())
    })
}

impl FromArgMatches for PyxisOther {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for o in pyxis_other_options() {
            if m.try_contains_id(o.long).unwrap_or(false)
                && m.value_source(o.long) == Some(clap::parser::ValueSource::CommandLine)
            {
                given.push((o.long, m.index_of(o.long).unwrap_or(0)));
            }
        }
        given.sort_by_key(|&(_, i)| i);
        Ok(PyxisOther { given })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for PyxisOther {
    fn augment_args(cmd: Command) -> Command {
        pyxis_other_options().fold(cmd, |cmd, o| cmd.arg(no_effect_arg(o)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// getopt_long's behaviour, applied to any command that carries [`SbatchOptions`].
pub fn getopt_rules(cmd: Command) -> Command {
    cmd.infer_long_args(true).args_override_self(true)
}

/// Every long option name the given command knows (for prefix-ambiguity messages).
pub fn long_names(cmd: &Command) -> Vec<String> {
    let mut names: Vec<String> = cmd
        .get_arguments()
        .flat_map(|a| {
            a.get_long()
                .into_iter()
                .chain(a.get_all_aliases().into_iter().flatten())
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What giving an option did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// It set its value.
    Set,
    /// Muster reads it and it has no effect, for this reason.
    NoEffect(&'static str),
}

/// Give option `long` (a canonical name of [`SBATCH_OPTIONS`]) with `value` to `o`, checking
/// the value as clap does on the command line (the same `values` functions), as an `#SBATCH`
/// line or an `SBATCH_*` variable gives it. `Err` is the reason the value is refused, or that
/// the option is unknown.
pub fn apply(o: &mut SbatchOptions, long: &str, value: Option<&str>) -> Result<Applied, String> {
    let v = value.unwrap_or("");
    let raw = || Some(v.to_string());
    match long {
        "partition" => o.partition = Some(values::partition(v)?),
        "job-name" => o.job_name = Some(values::job_name(v)?),
        "nodes" => o.nodes = Some(values::nodes(v)?),
        "ntasks" => o.ntasks = Some(values::count(v)?),
        "ntasks-per-node" => o.ntasks_per_node = Some(values::count(v)?),
        "cpus-per-task" => o.cpus_per_task = Some(values::count(v)?),
        "mem" => o.mem = Some(values::mem(v)?),
        "mem-per-cpu" => o.mem_per_cpu = Some(values::mem(v)?),
        "mem-per-gpu" => o.mem_per_gpu = Some(values::mem(v)?),
        // Checked once every source is read (super::manifest::check), as sbatch does.
        "gpus" => o.gpus = raw(),
        "gpus-per-node" => o.gpus_per_node = raw(),
        "gpus-per-task" => o.gpus_per_task = raw(),
        "gres" => o.gres = raw(),
        "constraint" => o.constraint = raw(),
        "array" => o.array = raw(),
        "dependency" => o.dependency = raw(),
        "gpu-bind" => o.gpu_bind = raw(),
        "nodelist" => o.nodelist = Some(values::nodes_or_file(v)?),
        "exclude" => o.exclude = Some(values::nodes_or_file(v)?),
        "exclusive" => o.exclusive = Some(values::exclusive(v)?),
        "time" => o.time = Some(values::time(v)?),
        "switches" => o.switches = Some(values::switches(v)?),
        "nice" => o.nice = Some(values::nice(value.unwrap_or("100"))?),
        "priority" => o.priority = Some(values::priority(v)?),
        "requeue" => {
            o.requeue = true;
            o.no_requeue = false;
        }
        "no-requeue" => {
            o.no_requeue = true;
            o.requeue = false;
        }
        "hold" => o.hold = true,
        "output" => o.output = Some(values::path(v)?),
        "error" => o.error = Some(values::path(v)?),
        "open-mode" => o.open_mode = Some(values::open_mode(v)?),
        "chdir" => o.chdir = Some(values::chdir(v)?),
        "account" => o.account = Some(values::account(v)?),
        "begin" => o.begin = Some(values::begin(v)?),
        "signal" => o.signal = Some(values::signal(v)?),
        "comment" => o.comment = raw(),
        "wrap" => o.wrap = raw(),
        "parsable" => o.parsable = true,
        "quiet" => o.quiet = true,
        "verbose" => o.verbose = o.verbose.saturating_add(1),
        "test-only" => o.test_only = true,
        "wait" => o.wait = true,
        "export" => o.export = Some(values::export(v)?),
        "image" => o.image = Some(values::image(v)?),
        "container-image" => o.container_image = Some(values::container_image(v)?),
        "container-mounts" => o.container_mounts.push(values::container_mounts(v)?),
        "container-workdir" => o.container_workdir = Some(values::container_workdir(v)?),
        "container-env" => o.container_env.push(values::container_env(v)?),
        "container-name" => o.container_name = Some(values::container_name(v)?),
        "container-unshare" => o.container_unshare = Some(values::container_unshare(v)?),
        other if pyxis::already(other).is_some() => {}
        other if pyxis::refusal(other).is_some() => {
            return Err(pyxis_refusal(
                other,
                pyxis::refusal(other).unwrap_or_default(),
            ));
        }
        other => {
            return no_effect_reason(other)
                .map(Applied::NoEffect)
                .ok_or_else(|| format!("unrecognized option '--{other}'"));
        }
    }
    Ok(Applied::Set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_crds::slurm::getopt::find;

    fn clap_command() -> Command {
        getopt_rules(SbatchOptions::augment_args(
            Command::new("sbatch")
                .no_binary_name(true)
                .disable_help_flag(true)
                .disable_version_flag(true),
        ))
    }

    /// Every option of the shared table is either a field of [`SbatchOptions`] (same short
    /// letter and value rule on the command line) or has a no-effect reason; none is both.
    #[test]
    fn the_table_and_the_command_line_agree() {
        let mut cmd = clap_command();
        // Fills in every argument's value count.
        cmd.build();
        for o in SBATCH_OPTIONS {
            let arg = cmd.get_arguments().find(|a| {
                a.get_long() == Some(o.long)
                    || a.get_all_aliases().is_some_and(|al| al.contains(&o.long))
            });
            let reason = no_effect_reason(o.long);
            match (arg, reason) {
                (Some(a), Some(_)) if !a.is_hide_set() => {
                    panic!("--{} is both a field and no-effect", o.long)
                }
                (Some(a), _) => {
                    assert_eq!(a.get_short(), o.short, "--{}", o.long);
                    let takes = a.get_num_args().map(|n| (n.min_values(), n.max_values()));
                    let want = match o.has_arg {
                        HasArg::No => a.get_action().takes_values(),
                        HasArg::Required => takes == Some((1, 1)),
                        HasArg::Optional => takes == Some((0, 1)) && a.is_require_equals_set(),
                    };
                    let want = if o.has_arg == HasArg::No { !want } else { want };
                    assert!(want, "--{}: value rule differs ({takes:?})", o.long);
                }
                (None, Some(_)) => assert!(NOT_ON_COMMAND_LINE.contains(&o.long), "--{}", o.long),
                (None, None) => panic!(
                    "--{} is in the table but Muster neither reads nor explains it",
                    o.long
                ),
            }
        }
        for a in cmd.get_arguments() {
            if let Some(l) = a.get_long() {
                assert!(find(l).is_some(), "--{l} is missing from the shared table");
            }
        }
    }

    /// A directive gives the same options as the same argument on the command line.
    #[test]
    fn directives_and_the_command_line_give_the_same_options() {
        let cases: &[(&str, &str)] = &[
            ("partition", "gpu"),
            ("job-name", "x y"),
            ("nodes", "2-4"),
            ("ntasks", "8"),
            ("ntasks-per-node", "2"),
            ("cpus-per-task", "4"),
            ("mem", "16G"),
            ("mem-per-cpu", "2G"),
            ("mem-per-gpu", "10G"),
            ("gpus", "a100:4"),
            ("gpus-per-node", "8"),
            ("gpus-per-task", "1"),
            ("gres", "gpu:2"),
            ("constraint", "a&b"),
            ("array", "0-3"),
            ("dependency", "afterok:1"),
            ("gpu-bind", "closest"),
            ("nodelist", "gpu[1-2]"),
            ("exclude", "gpu3"),
            ("exclusive", "user"),
            ("time", "1-00:00:00"),
            ("switches", "2@10"),
            ("nice", "-5"),
            ("priority", "10"),
            ("output", "o-%j.out"),
            ("error", "e.err"),
            ("wrap", "hostname"),
            ("comment", "nightly run"),
            ("open-mode", "append"),
            ("chdir", "/scratch/run"),
            ("account", "proj-a"),
            ("begin", "now+1hour"),
            ("signal", "B:USR1@90"),
            ("export", "ALL,A=1"),
            ("image", "busybox"),
            ("container-image", "nvcr.io#nvidia/pytorch:24.01-py3"),
            ("container-mounts", "/scratch/a:/a:ro,tmpfs:/t"),
            ("container-workdir", "/work"),
            ("container-env", "A,B"),
            ("container-name", "dev:exec"),
            ("container-unshare", "ipc,uts"),
        ];
        let cmd = clap_command();
        for (long, value) in cases {
            let arg = format!("--{long}={value}");
            let m = cmd.clone().try_get_matches_from([arg.as_str()]).unwrap();
            let by_clap = SbatchOptions::from_arg_matches(&m).unwrap();
            let mut ours = SbatchOptions::default();
            assert_eq!(apply(&mut ours, long, Some(value)), Ok(Applied::Set));
            assert_eq!(ours, by_clap, "{arg}");
        }
        for flag in [
            "requeue",
            "no-requeue",
            "hold",
            "parsable",
            "quiet",
            "verbose",
            "test-only",
            "wait",
            "exclusive",
            "nice",
        ] {
            let arg = format!("--{flag}");
            let m = cmd.clone().try_get_matches_from([arg.as_str()]).unwrap();
            let by_clap = SbatchOptions::from_arg_matches(&m).unwrap();
            let mut ours = SbatchOptions::default();
            assert_eq!(apply(&mut ours, flag, None), Ok(Applied::Set));
            assert_eq!(ours, by_clap, "{arg}");
        }
        // Refused values give the same reason.
        for (long, value) in [
            ("time", "1h"),
            ("nodes", "0"),
            ("mem", "x"),
            ("exclusive", "topo"),
        ] {
            let arg = format!("--{long}={value}");
            let e = cmd
                .clone()
                .try_get_matches_from([arg.as_str()])
                .unwrap_err();
            let why = std::error::Error::source(&e)
                .map(|s| s.to_string())
                .unwrap();
            let mut ours = SbatchOptions::default();
            assert_eq!(apply(&mut ours, long, Some(value)), Err(why), "{arg}");
        }
    }

    /// pyxis's options as pyxis takes them: mounts and variables add up over occurrences
    /// (directives, then the command line); the rest refuse or accept with the reason.
    #[test]
    fn pyxis_options() {
        let cmd = clap_command();
        let m = cmd
            .clone()
            .try_get_matches_from([
                "--container-mounts=/a:/a",
                "--container-mounts",
                "tmpfs:/t",
                "--container-env=X",
                "--container-env=Y,X",
            ])
            .unwrap();
        let o = SbatchOptions::from_arg_matches(&m).unwrap();
        assert_eq!(o.container_mounts, ["/a:/a", "tmpfs:/t"]);
        assert_eq!(o.container_env, ["X", "Y,X"]);
        let mut d = SbatchOptions::default();
        apply(&mut d, "container-mounts", Some("scratch:/s")).unwrap();
        assert_eq!(
            o.clone().over(d).container_mounts,
            ["scratch:/s", "/a:/a", "tmpfs:/t"]
        );

        let mut o = SbatchOptions::default();
        for flag in [
            "container-writable",
            "no-container-entrypoint",
            "no-container-mount-home",
        ] {
            assert_eq!(apply(&mut o, flag, None), Ok(Applied::Set), "{flag}");
        }
        assert_eq!(o, SbatchOptions::default());
        for (flag, value, words) in [
            (
                "container-save",
                Some("/x.sqsh"),
                "cannot save a running container",
            ),
            ("container-mount-home", None, "no home directory"),
            ("container-remap-root", None, "securityContext.runAsUser"),
            ("no-container-remap-root", None, "securityContext.runAsUser"),
            ("container-entrypoint", None, "ENTRYPOINT never runs"),
            ("container-entrypoint-log", None, "ENTRYPOINT never runs"),
            ("container-readonly", None, "readOnlyRootFilesystem"),
        ] {
            let e = apply(&mut o, flag, value).unwrap_err();
            assert!(
                e.starts_with(&format!("--{flag} (pyxis) is not supported by Muster: "))
                    && e.contains(words),
                "{e}"
            );
        }
        // On the command line the refused ones are recorded for one error each.
        let m = cmd
            .try_get_matches_from(["--container-remap-root", "--container-writable"])
            .unwrap();
        let o = SbatchOptions::from_arg_matches(&m).unwrap();
        let r: Vec<String> = o.pyxis.refusals().collect();
        assert_eq!(r.len(), 1);
        assert!(r[0].starts_with("--container-remap-root (pyxis)"), "{r:?}");
        // Values are checked as given.
        let mut o = SbatchOptions::default();
        let e = apply(&mut o, "container-mounts", Some("./x:/x")).unwrap_err();
        assert!(e.contains("relative source"), "{e}");
        let e = apply(&mut o, "container-image", Some("img.sqsh")).unwrap_err();
        assert!(e.contains("squashfs"), "{e}");
    }

    #[test]
    fn other_sites_options_have_no_effect() {
        let mut o = SbatchOptions::default();
        for long in ["qos", "mail-type", "mail-user"] {
            assert!(
                matches!(apply(&mut o, long, Some("x")), Ok(Applied::NoEffect(_))),
                "{long}"
            );
        }
        assert_eq!(o, SbatchOptions::default());
        assert_eq!(
            apply(&mut o, "bogus", None),
            Err("unrecognized option '--bogus'".into())
        );
    }
}

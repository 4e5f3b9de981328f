//! The `sbatch` option grammar: one clap [`Args`] struct parsed from `#SBATCH` tokens, from
//! `SBATCH_*` environment variables and from the command line, with getopt_long's rules
//! (unique long-option prefixes, a missing value takes the next token, last one wins).

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};

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

    /// Where the job's standard output would go in Slurm (kept for `muster logs`).
    #[arg(short = 'o', long, value_name = "FILE", allow_hyphen_values = true, value_parser = values::path)]
    pub output: Option<String>,

    /// Where the job's standard error would go in Slurm (kept for `muster logs`).
    #[arg(short = 'e', long, value_name = "FILE", allow_hyphen_values = true, value_parser = values::path)]
    pub error: Option<String>,

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

    /// Slurm options Muster recognises but does not implement.
    #[command(flatten)]
    pub unsupported: Unsupported,
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
            wrap: self.wrap.or(lower.wrap),
            parsable: self.parsable || lower.parsable,
            quiet: self.quiet || lower.quiet,
            verbose: self.verbose.max(lower.verbose),
            test_only: self.test_only || lower.test_only,
            wait: self.wait || lower.wait,
            export: self.export.or(lower.export),
            image: self.image.or(lower.image),
            unsupported: Unsupported {
                given: [self.unsupported.given, lower.unsupported.given].concat(),
            },
        }
    }
}

/// How a Slurm option takes its value (getopt_long's `has_arg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HasArg {
    /// A flag.
    No,
    /// `--opt=value` or `--opt value`.
    Required,
    /// Only `--opt=value`; `--opt value` leaves `value` as the next argument.
    Optional,
}

/// A Slurm `sbatch` option that Muster does not implement, with what to do instead.
#[derive(Clone, Copy, Debug)]
pub struct UnsupportedOption {
    /// Long name without dashes.
    pub long: &'static str,
    /// Short letter, if any.
    pub short: Option<char>,
    /// Value rule.
    pub has_arg: HasArg,
    /// What to do instead.
    pub hint: &'static str,
    /// Whether the option exists on `muster sbatch`'s command line too. False where a Muster
    /// global flag of the same name (`--context`) takes its place.
    pub on_command_line: bool,
}

const NOT_IMPLEMENTED: &str = "remove it from the script and the command line";

macro_rules! unsupported {
    ($($long:literal $short:expr, $has:ident, $hint:expr $(, $cli:expr)?;)*) => {
        /// Every other long option of Slurm 22.05's `sbatch` (so that prefixes resolve as in
        /// Slurm), refused with a hint.
        pub const UNSUPPORTED: &[UnsupportedOption] = &[
            $(UnsupportedOption {
                long: $long,
                short: $short,
                has_arg: HasArg::$has,
                hint: $hint,
                on_command_line: unsupported!(@cli $($cli)?),
            },)*
        ];
    };
    (@cli) => { true };
    (@cli $cli:expr) => { $cli };
}

unsupported! {
    "account" Some('A'), Required, "Muster's accounts are Kubernetes namespaces: submit with --namespace";
    "acctg-freq" None, Required, NOT_IMPLEMENTED;
    "batch" None, Required, "choose nodes by feature with --constraint";
    "bb" None, Required, "burst buffers are not supported";
    "bbf" None, Required, "burst buffers are not supported";
    "begin" Some('b'), Required, "delayed starts are not supported; use --hold and `muster scontrol release`, or --dependency";
    "chdir" Some('D'), Required, "tasks start in the container image's working directory; cd in the script";
    "cluster" None, Required, "choose the cluster with --context";
    "cluster-constraint" None, Required, "choose the cluster with --context";
    "clusters" Some('M'), Required, "choose the cluster with --context";
    "comment" None, Required, NOT_IMPLEMENTED;
    "container" None, Required, "give the task image with --image";
    "context" None, Required, "SELinux contexts are not supported (on the command line --context picks the kubeconfig context)", false;
    "contiguous" None, No, "placement follows the partition's network topology; see --switches";
    "core-spec" Some('S'), Required, NOT_IMPLEMENTED;
    "cores-per-socket" None, Required, "ask for CPUs with --cpus-per-task";
    "cpu-freq" None, Required, NOT_IMPLEMENTED;
    "cpus-per-gpu" None, Required, "ask for CPUs with --cpus-per-task (the partition's defCpuPerGpu applies otherwise)";
    "deadline" None, Required, "deadlines are not supported; set --time";
    "delay-boot" None, Required, NOT_IMPLEMENTED;
    "distribution" Some('m'), Required, "tasks are placed in blocks on each node; see --ntasks-per-node";
    "export-file" None, Required, "the task environment comes from the container image; set variables in the script";
    "extra-node-info" Some('B'), Required, "ask for CPUs with --cpus-per-task";
    "get-user-env" None, Optional, "the task environment comes from the container image";
    "gid" None, Required, "tasks run as the pod template's security context";
    "gpu-freq" None, Required, NOT_IMPLEMENTED;
    "gpus-per-socket" None, Required, "use --gpus-per-node or --gpus-per-task; --gpu-bind=closest keeps GPUs near their CPUs";
    "gres-flags" None, Required, "--gpu-bind=closest keeps GPUs near their CPUs";
    "hint" None, Required, NOT_IMPLEMENTED;
    "ignore-pbs" None, No, "Muster reads #SBATCH lines only";
    "input" Some('i'), Required, "tasks have no standard input";
    "kill-on-invalid-dep" None, Required, "a job whose dependency can never be met is cancelled (reason DependencyNeverSatisfied)";
    "licenses" Some('L'), Required, "licenses are not supported";
    "mail-type" None, Required, "Muster sends no mail; watch jobs with squeue or sacct";
    "mail-user" None, Required, "Muster sends no mail; watch jobs with squeue or sacct";
    "mcs-label" None, Required, NOT_IMPLEMENTED;
    "mem-bind" None, Required, NOT_IMPLEMENTED;
    "mincpus" None, Required, "ask for CPUs with --cpus-per-task";
    "network" None, Required, NOT_IMPLEMENTED;
    "no-kill" Some('k'), Optional, "a node failure ends the job (NODE_FAIL) and requeues it unless --no-requeue";
    "nodefile" Some('F'), Required, "give the file to --nodelist: -w ./FILE (a name with '/' is read as a file of node names)";
    "ntasks-per-core" None, Required, "use --ntasks-per-node and --cpus-per-task";
    "ntasks-per-gpu" None, Required, "use --gpus-per-task";
    "ntasks-per-socket" None, Required, "use --ntasks-per-node and --cpus-per-task";
    "ntasks-per-tres" None, Required, "use --gpus-per-task";
    "open-mode" None, Required, "task output is the pod log; read it with `muster logs`";
    "overcommit" Some('O'), No, NOT_IMPLEMENTED;
    "oversubscribe" Some('s'), No, "nodes are shared between jobs unless --exclusive";
    "power" None, Required, NOT_IMPLEMENTED;
    "prefer" None, Required, "use --constraint";
    "profile" None, Required, NOT_IMPLEMENTED;
    "propagate" None, Optional, "resource limits come from the container runtime";
    "qos" Some('q'), Required, "priority comes from the partition's priorityTier and --nice/--priority";
    "reboot" None, No, NOT_IMPLEMENTED;
    "reservation" None, Required, "reservations are not supported";
    "signal" None, Required, "tasks get SIGTERM at the time limit, then SIGKILL after the partition's grace time";
    "sockets-per-node" None, Required, "ask for CPUs with --cpus-per-task";
    "spread-job" None, No, NOT_IMPLEMENTED;
    "thread-spec" None, Required, NOT_IMPLEMENTED;
    "threads-per-core" None, Required, "ask for CPUs with --cpus-per-task";
    "time-min" None, Required, "set --time";
    "tmp" None, Required, "ask for scratch space in the pod template (an emptyDir volume)";
    "uid" None, Required, "tasks run as the pod template's security context";
    "usage" None, No, "see muster sbatch --help";
    "use-min-nodes" None, No, NOT_IMPLEMENTED;
    "wait-all-nodes" None, Required, "all of a job's tasks always start together";
    "wckey" None, Required, NOT_IMPLEMENTED;
}

/// Flags that only make sense on the command line, refused in `#SBATCH` lines.
const DIRECTIVE_ONLY: &[UnsupportedOption] = &[
    UnsupportedOption {
        long: "help",
        short: Some('h'),
        has_arg: HasArg::No,
        hint: "run `muster sbatch --help`",
        on_command_line: false,
    },
    UnsupportedOption {
        long: "version",
        short: Some('V'),
        has_arg: HasArg::No,
        hint: "run `muster --version`",
        on_command_line: false,
    },
];

/// The unsupported options that were given, with their position among the parsed arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unsupported {
    /// Long names of the unsupported options given, with clap's index of each (for order).
    pub given: Vec<(&'static str, usize)>,
}

fn unsupported_arg(o: &UnsupportedOption) -> Arg {
    // The long name is the id: no supported option's id (a field name) looks like it.
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

impl FromArgMatches for Unsupported {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for o in UNSUPPORTED.iter().chain(DIRECTIVE_ONLY) {
            let id = o.long;
            // Only ids this command defines (the command line lacks some).
            if m.try_contains_id(id).unwrap_or(false)
                && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
            {
                given.push((o.long, m.index_of(id).unwrap_or(0)));
            }
        }
        given.sort_by_key(|&(_, i)| i);
        Ok(Unsupported { given })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for Unsupported {
    fn augment_args(cmd: Command) -> Command {
        UNSUPPORTED
            .iter()
            .filter(|o| o.on_command_line)
            .fold(cmd, |cmd, o| cmd.arg(unsupported_arg(o)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// The hint for an unsupported option.
pub fn unsupported_hint(long: &str) -> &'static str {
    UNSUPPORTED
        .iter()
        .chain(DIRECTIVE_ONLY)
        .find(|o| o.long == long)
        .map(|o| o.hint)
        .unwrap_or(NOT_IMPLEMENTED)
}

/// getopt_long's behaviour, applied to any command that carries [`SbatchOptions`].
pub fn getopt_rules(cmd: Command) -> Command {
    cmd.infer_long_args(true).args_override_self(true)
}

/// The parser for `#SBATCH` tokens and `SBATCH_*` variables: the sbatch grammar alone, with
/// the directive-only refusals and without help/version flags or positionals.
pub fn directive_command() -> Command {
    let cmd = Command::new("sbatch")
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true);
    let cmd = getopt_rules(SbatchOptions::augment_args(cmd));
    UNSUPPORTED
        .iter()
        .filter(|o| !o.on_command_line)
        .chain(DIRECTIVE_ONLY)
        .fold(cmd, |cmd, o| cmd.arg(unsupported_arg(o)))
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

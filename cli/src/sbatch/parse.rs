//! Turning directives, `SBATCH_*` variables and the command line into one set of options,
//! with the precedence Slurm uses (command line, then environment, then directives) and the
//! origin of every value, so that errors name the script line.

use std::collections::BTreeMap;
use std::fmt;

use clap::Command;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use muster_crds::slurm::getopt;
use muster_crds::slurm::script::Token;

use super::options::{self, SbatchOptions};

/// Where an option's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// An `#SBATCH` line of the script.
    Line {
        /// The script's name as given.
        file: String,
        /// 1-based line number.
        line: usize,
    },
    /// `muster sbatch`'s own arguments.
    CommandLine,
    /// An `SBATCH_*` environment variable.
    Env(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Line { file, line } => write!(f, "{file}: line {line}"),
            Origin::CommandLine => f.write_str("command line"),
            Origin::Env(var) => write!(f, "environment variable {var}"),
        }
    }
}

/// A refused submission: what is wrong, where, and what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SbatchError {
    /// Where the offending option was given, if it is one.
    pub at: Option<Origin>,
    /// What is wrong and what is allowed.
    pub message: String,
    /// A suggestion.
    pub hint: Option<String>,
}

impl SbatchError {
    /// An error at `at`.
    pub fn at(at: Origin, message: impl Into<String>) -> Self {
        SbatchError {
            at: Some(at),
            message: message.into(),
            hint: None,
        }
    }

    /// An error about the submission as a whole.
    pub fn general(message: impl Into<String>) -> Self {
        SbatchError {
            at: None,
            message: message.into(),
            hint: None,
        }
    }

    /// Add a suggestion.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for SbatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(at) = &self.at {
            write!(f, "{at}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\nhint: {hint}")?;
        }
        Ok(())
    }
}

/// One source of options, parsed, with the origin of each option (by long name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layer {
    /// The options this source gave.
    pub options: SbatchOptions,
    /// Long option name → where it was given.
    pub origins: BTreeMap<String, Origin>,
}

/// Options from every source, merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// The winning value of each option.
    pub options: SbatchOptions,
    /// Long option name → where the winning value was given.
    pub origins: BTreeMap<String, Origin>,
}

impl Merged {
    /// Where option `long` was given (the command line if unknown).
    pub fn origin(&self, long: &str) -> Origin {
        self.origins
            .get(long)
            .cloned()
            .unwrap_or(Origin::CommandLine)
    }
}

/// Several refusals at once: every problem of a submission is reported in one run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SbatchErrors {
    /// The problems, in the order of the sources (script lines in order).
    pub errors: Vec<SbatchError>,
    /// Warnings gathered before the refusal (printed first, as sbatch does).
    pub warnings: Vec<String>,
}

impl fmt::Display for SbatchErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl From<SbatchError> for SbatchErrors {
    fn from(e: SbatchError) -> Self {
        SbatchErrors {
            errors: vec![e],
            warnings: Vec::new(),
        }
    }
}

/// The warning for an option Muster reads without effect: one line, naming where it was given
/// (`train.sh: line 4: --mail-type has no effect in Muster: …`).
pub fn no_effect_warning(at: &Origin, long: &str, why: &str) -> String {
    format!("{at}: --{long} has no effect in Muster: {why}")
}

/// Merge with Slurm's precedence: command line over environment over directives.
pub fn merge(cli: Layer, env: Layer, directives: Layer) -> Merged {
    let mut origins = directives.origins;
    origins.extend(env.origins);
    origins.extend(cli.origins);
    Merged {
        options: cli.options.over(env.options.over(directives.options)),
        origins,
    }
}

/// The command-line layer: every option present came from the command line. Options without
/// effect add one warning each.
pub fn command_line_layer(options: SbatchOptions, warnings: &mut Vec<String>) -> Layer {
    for (long, _) in &options.no_effect.given {
        if let Some(why) = options::no_effect_reason(long) {
            warnings.push(no_effect_warning(&Origin::CommandLine, long, why));
        }
    }
    let origins = defined_options(&options)
        .into_keys()
        .map(|k| (k, Origin::CommandLine))
        .collect();
    Layer { options, origins }
}

/// Options given one by one (from `#SBATCH` tokens or `SBATCH_*` variables), with the origin
/// of each, the warnings and the problems met.
#[derive(Default)]
struct Builder {
    layer: Layer,
    warned: std::collections::BTreeSet<&'static str>,
}

impl Builder {
    fn give(
        &mut self,
        at: Origin,
        long: &'static str,
        value: Option<&str>,
        warnings: &mut Vec<String>,
        errors: &mut Vec<SbatchError>,
    ) {
        match options::apply(&mut self.layer.options, long, value) {
            Ok(options::Applied::Set) => {
                // `--requeue` and `--no-requeue` replace each other.
                match long {
                    "requeue" => self.layer.origins.remove("no-requeue"),
                    "no-requeue" => self.layer.origins.remove("requeue"),
                    _ => None,
                };
                self.layer.origins.insert(long.to_string(), at);
            }
            Ok(options::Applied::NoEffect(why)) => {
                if self.warned.insert(long) {
                    warnings.push(no_effect_warning(&at, long, why));
                }
            }
            Err(why) => {
                let message = match value {
                    Some(v) => format!("invalid value '{v}' for --{long}: {why}"),
                    None => why,
                };
                errors.push(SbatchError::at(at, message));
            }
        }
    }
}

/// Parse `#SBATCH` tokens as one argument list, as Slurm hands them to getopt_long, in one
/// pass. Every problem is collected in `errors`, each naming its line.
pub fn parse_directives(
    file: &str,
    tokens: &[Token],
    warnings: &mut Vec<String>,
    errors: &mut Vec<SbatchError>,
) -> Layer {
    let at_line = |line: usize| Origin::Line {
        file: file.to_string(),
        line,
    };
    let parsed = getopt::getopt(tokens);
    // Problems of the option syntax and of the values, merged in line order.
    let mut found: Vec<(usize, SbatchError)> = parsed
        .problems
        .into_iter()
        .map(|p| {
            let mut e = SbatchError::at(at_line(p.line), p.message);
            e.hint = p.hint;
            (p.line, e)
        })
        .collect();
    let mut b = Builder::default();
    let mut value_errors = Vec::new();
    for o in &parsed.options {
        let mut errs = Vec::new();
        b.give(
            at_line(o.line),
            o.option.canonical(),
            o.value.as_deref(),
            warnings,
            &mut errs,
        );
        value_errors.extend(errs.into_iter().map(|e| (o.line, e)));
    }
    found.extend(value_errors);
    found.sort_by_key(|(line, _)| *line);
    errors.extend(found.into_iter().map(|(_, e)| e));
    b.layer
}

/// Slurm's `SBATCH_*` input variables Muster maps, and the option each sets.
pub const ENV_OPTIONS: &[(&str, &str)] = &[
    ("SBATCH_ARRAY_INX", "array"),
    ("SBATCH_CONSTRAINT", "constraint"),
    ("SBATCH_ERROR", "error"),
    ("SBATCH_EXCLUSIVE", "exclusive"),
    ("SBATCH_EXPORT", "export"),
    ("SBATCH_GPU_BIND", "gpu-bind"),
    ("SBATCH_GPUS", "gpus"),
    ("SBATCH_GPUS_PER_NODE", "gpus-per-node"),
    ("SBATCH_GPUS_PER_TASK", "gpus-per-task"),
    ("SBATCH_GRES", "gres"),
    ("SBATCH_JOB_NAME", "job-name"),
    ("SBATCH_MEM_PER_CPU", "mem-per-cpu"),
    ("SBATCH_MEM_PER_GPU", "mem-per-gpu"),
    ("SBATCH_MEM_PER_NODE", "mem"),
    ("SBATCH_NO_REQUEUE", "no-requeue"),
    ("SBATCH_OUTPUT", "output"),
    ("SBATCH_PARTITION", "partition"),
    ("SBATCH_REQUEUE", "requeue"),
    ("SBATCH_TIMELIMIT", "time"),
    ("SBATCH_WAIT", "wait"),
    // Options without effect in Muster: read, with one warning each.
    ("SBATCH_ACCOUNT", "account"),
    ("SBATCH_ACCTG_FREQ", "acctg-freq"),
    ("SBATCH_BATCH", "batch"),
    ("SBATCH_CLUSTERS", "clusters"),
    ("SBATCH_CONTAINER", "container"),
    ("SBATCH_CORE_SPEC", "core-spec"),
    ("SBATCH_CPUS_PER_GPU", "cpus-per-gpu"),
    ("SBATCH_DELAY_BOOT", "delay-boot"),
    ("SBATCH_DISTRIBUTION", "distribution"),
    ("SBATCH_GET_USER_ENV", "get-user-env"),
    ("SBATCH_GPU_FREQ", "gpu-freq"),
    ("SBATCH_GRES_FLAGS", "gres-flags"),
    ("SBATCH_HINT", "hint"),
    ("SBATCH_IGNORE_PBS", "ignore-pbs"),
    ("SBATCH_INPUT", "input"),
    ("SBATCH_MEM_BIND", "mem-bind"),
    ("SBATCH_NETWORK", "network"),
    ("SBATCH_NO_KILL", "no-kill"),
    ("SBATCH_OPEN_MODE", "open-mode"),
    ("SBATCH_OVERCOMMIT", "overcommit"),
    ("SBATCH_POWER", "power"),
    ("SBATCH_PROFILE", "profile"),
    ("SBATCH_QOS", "qos"),
    ("SBATCH_RESERVATION", "reservation"),
    ("SBATCH_SIGNAL", "signal"),
    ("SBATCH_SPREAD_JOB", "spread-job"),
    ("SBATCH_THREAD_SPEC", "thread-spec"),
    ("SBATCH_THREADS_PER_CORE", "threads-per-core"),
    ("SBATCH_USE_MIN_NODES", "use-min-nodes"),
    ("SBATCH_WAIT_ALL_NODES", "wait-all-nodes"),
    ("SBATCH_WCKEY", "wckey"),
];

/// Parse the `SBATCH_*` variables `env` returns. Warnings (options without effect) are
/// appended, and every refused value to `errors`.
pub fn parse_env(
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
    errors: &mut Vec<SbatchError>,
) -> Layer {
    let mut b = Builder::default();
    let mut settings: Vec<(String, &'static str, Option<String>)> = Vec::new();
    for &(var, long) in ENV_OPTIONS {
        let Some(value) = env(var) else { continue };
        let has_arg = getopt::find(long).map(|o| o.has_arg);
        let value = match has_arg {
            Some(getopt::HasArg::No) => None,
            Some(getopt::HasArg::Optional) if value.is_empty() => None,
            _ => Some(value),
        };
        settings.push((var.to_string(), long, value));
    }
    // --switches=COUNT[@WAIT] comes from two variables.
    if let Some(count) = env("SBATCH_REQ_SWITCH") {
        let value = match env("SBATCH_WAIT4SWITCH") {
            Some(wait) => format!("{count}@{wait}"),
            None => count,
        };
        settings.push(("SBATCH_REQ_SWITCH".to_string(), "switches", Some(value)));
    } else if env("SBATCH_WAIT4SWITCH").is_some() {
        warnings.push(
            "ignoring SBATCH_WAIT4SWITCH: Muster takes the wait with the switch count, \
             --switches=COUNT@WAIT or SBATCH_REQ_SWITCH"
                .to_string(),
        );
    }
    for (var, long, value) in settings {
        b.give(Origin::Env(var), long, value.as_deref(), warnings, errors);
    }
    b.layer
}

/// Whether clap stopped because the last option had no value (the next line may supply it).
fn is_missing_value(e: &clap::Error) -> bool {
    e.kind() == ErrorKind::InvalidValue
        && matches!(e.get(ContextKind::InvalidValue), Some(ContextValue::String(v)) if v.is_empty())
}

fn context_str(e: &clap::Error, kind: ContextKind) -> Option<String> {
    match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    }
}

/// clap's rendering without its "error: " prefix and usage footer.
pub fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("").trim();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// The option name in clap's argument display (`--time <TIME>` → `--time`,
/// `--exclusive[=<user>]` → `--exclusive`).
fn option_name(display: &str) -> String {
    display
        .split([' ', '=', '['])
        .next()
        .unwrap_or(display)
        .to_string()
}

/// Rewrite a clap error about the command line in getopt_long's terms, in the format of the
/// script's errors (`command line: …`).
pub fn describe_clap_error(cmd: &Command, e: &clap::Error) -> SbatchError {
    let at = Origin::CommandLine;
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let arg = context_str(e, ContextKind::InvalidArg).unwrap_or_default();
            if let Some(long) = arg.strip_prefix("--") {
                let name = long.split('=').next().unwrap_or(long);
                let candidates: Vec<String> = options::long_names(cmd)
                    .into_iter()
                    .filter(|n| n.starts_with(name))
                    .collect();
                if candidates.len() > 1 && !name.is_empty() {
                    let list = candidates
                        .iter()
                        .map(|c| format!("'--{c}'"))
                        .collect::<Vec<_>>()
                        .join(" ");
                    return SbatchError::at(
                        at,
                        format!("option '--{name}' is ambiguous; possibilities: {list}"),
                    );
                }
            }
            SbatchError::at(at, format!("unrecognized option '{arg}'"))
                .hint("see `muster sbatch --help` for the options sbatch takes")
        }
        ErrorKind::InvalidValue if is_missing_value(e) => {
            let arg = context_str(e, ContextKind::InvalidArg).unwrap_or_default();
            SbatchError::at(
                at,
                format!("option '{}' requires an argument", option_name(&arg)),
            )
        }
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let arg = context_str(e, ContextKind::InvalidArg).unwrap_or_default();
            let value = context_str(e, ContextKind::InvalidValue).unwrap_or_default();
            let why = std::error::Error::source(e)
                .map(|s| s.to_string())
                .unwrap_or_else(|| clap_message(e));
            SbatchError::at(
                at,
                format!("invalid value '{value}' for {}: {why}", option_name(&arg)),
            )
        }
        _ => SbatchError::at(at, clap_message(e)),
    }
}

/// The options given, by Slurm long name, with their values as Slurm's `sbatch -v` lists them
/// under "defined options" (flags as `set`), before Slurm's own normalisation.
pub fn defined_options(o: &SbatchOptions) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    put("partition", o.partition.clone());
    put("job-name", o.job_name.clone());
    put("nodes", o.nodes.clone());
    put("ntasks", o.ntasks.map(|n| n.to_string()));
    put("ntasks-per-node", o.ntasks_per_node.map(|n| n.to_string()));
    put("cpus-per-task", o.cpus_per_task.map(|n| n.to_string()));
    put("mem", o.mem.clone());
    put("mem-per-cpu", o.mem_per_cpu.clone());
    put("mem-per-gpu", o.mem_per_gpu.clone());
    put("gpus", o.gpus.clone());
    put("gpus-per-node", o.gpus_per_node.clone());
    put("gpus-per-task", o.gpus_per_task.clone());
    put("gres", o.gres.clone());
    put("constraint", o.constraint.clone());
    put("nodelist", o.nodelist.clone());
    put("exclude", o.exclude.clone());
    put(
        "exclusive",
        o.exclusive.as_ref().map(|e| {
            if e.is_empty() {
                "exclusive".to_string()
            } else {
                e.clone()
            }
        }),
    );
    put("time", o.time.clone());
    put("array", o.array.clone());
    put("dependency", o.dependency.clone());
    put("switches", o.switches.clone());
    put("gpu-bind", o.gpu_bind.clone());
    put("nice", o.nice.map(|n| n.to_string()));
    put("priority", o.priority.map(|n| n.to_string()));
    put("requeue", o.requeue.then(|| "requeue".to_string()));
    put("no-requeue", o.no_requeue.then(|| "no-requeue".to_string()));
    put("hold", o.hold.then(|| "set".to_string()));
    put("output", o.output.clone());
    put("error", o.error.clone());
    put("open-mode", o.open_mode.clone());
    put("chdir", o.chdir.clone());
    put("account", o.account.clone());
    put("begin", o.begin.clone());
    put("signal", o.signal.clone());
    put("comment", o.comment.clone());
    put("wrap", o.wrap.clone());
    put("parsable", o.parsable.then(|| "set".to_string()));
    put("test-only", o.test_only.then(|| "set".to_string()));
    put("wait", o.wait.then(|| "set".to_string()));
    put("export", o.export.clone());
    put("image", o.image.clone());
    put("container-image", o.container_image.clone());
    put(
        "container-mounts",
        (!o.container_mounts.is_empty()).then(|| o.container_mounts.join(",")),
    );
    put("container-workdir", o.container_workdir.clone());
    put(
        "container-env",
        (!o.container_env.is_empty()).then(|| o.container_env.join(",")),
    );
    put("container-name", o.container_name.clone());
    put("container-unshare", o.container_unshare.clone());
    m
}

/// Slurm's `mbytes_to_str`: the largest unit that divides exactly, none for MiB (`16G`,
/// `64000`).
fn mbytes_to_str(mib: u64) -> String {
    let mut n = mib;
    for unit in ["", "G", "T", "P"] {
        if n == 0 || !n.is_multiple_of(1024) || unit == "P" {
            return format!("{n}{unit}");
        }
        n /= 1024;
    }
    format!("{n}")
}

/// The defined options as real `sbatch -v` prints them: times as `HH:MM:SS`, memory in
/// Slurm's units, gres items prefixed `gres:`, output paths made absolute against `cwd`.
pub fn slurm_defined_options(o: &SbatchOptions, cwd: &std::path::Path) -> BTreeMap<String, String> {
    use muster_crds::slurm::{MemSize, NodeRange, Switches, TimeLimit};
    let time = |t: &TimeLimit| match t.seconds() {
        Some(s) => crate::format::secs_long(s as i64),
        None => "UNLIMITED".to_string(),
    };
    let mut m = defined_options(o);
    // Slurm resolves --chdir against the current directory, and output files against it.
    let base = m
        .get("chdir")
        .map(|d| cwd.join(d))
        .unwrap_or_else(|| cwd.to_path_buf());
    for (k, v) in m.iter_mut() {
        let shown = match k.as_str() {
            "time" => TimeLimit::parse(v).ok().map(|t| time(&t)),
            "nodes" => NodeRange::parse(v).ok().map(|r| r.to_string()),
            "mem" | "mem-per-cpu" | "mem-per-gpu" => {
                MemSize::parse(v).ok().map(|s| mbytes_to_str(s.mib()))
            }
            "gres" => Some(
                v.split(',')
                    .map(|g| {
                        if g.starts_with("gres:") {
                            g.to_string()
                        } else {
                            format!("gres:{g}")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            "switches" => Switches::parse(v).ok().map(|s| match s.max_wait {
                // A zero wait parses as "no limit" but Slurm shows the zero it was given.
                Some(TimeLimit::Unlimited)
                    if v.split('@')
                        .nth(1)
                        .is_some_and(|w| w.chars().all(|c| "0:-".contains(c))) =>
                {
                    format!("{}@00:00:00", s.count)
                }
                Some(w) => format!("{}@{}", s.count, time(&w)),
                None => s.count.to_string(),
            }),
            "output" | "error" => Some(base.join(v.as_str()).to_string_lossy().into_owned()),
            "chdir" => Some(base.to_string_lossy().into_owned()),
            // Slurm prints the mode's letter.
            "open-mode" => v.get(..1).map(str::to_string),
            // Resolved as Slurm prints it: local time, seconds.
            "begin" => {
                let now = jiff::Zoned::now();
                muster_crds::slurm::begin::parse(v, &now).ok().map(|t| {
                    t.to_zoned(now.time_zone().clone())
                        .strftime("%Y-%m-%dT%H:%M:%S")
                        .to_string()
                })
            }
            _ => None,
        };
        if let Some(s) = shown {
            *v = s;
        }
    }
    m.remove("image");
    m
}

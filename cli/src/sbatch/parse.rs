//! Turning directives, `SBATCH_*` variables and the command line into one set of options,
//! with the precedence Slurm uses (command line, then environment, then directives) and the
//! origin of every value, so that errors name the script line.

use std::collections::BTreeMap;
use std::fmt;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Command, FromArgMatches};

use super::options::{self, SbatchOptions};
use super::script::Token;

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

/// The command-line layer: every option present came from the command line.
pub fn command_line_layer(options: SbatchOptions) -> Result<Layer, SbatchError> {
    if let Some((long, _)) = options.unsupported.given.first() {
        return Err(unsupported_error(Origin::CommandLine, long));
    }
    let origins = defined_options(&options)
        .into_keys()
        .map(|k| (k, Origin::CommandLine))
        .collect();
    Ok(Layer { options, origins })
}

fn unsupported_error(at: Origin, long: &str) -> SbatchError {
    SbatchError::at(at, format!("option --{long} is not supported by Muster"))
        .hint(options::unsupported_hint(long))
}

/// Parse `#SBATCH` tokens as one argument list, as Slurm hands them to getopt_long.
pub fn parse_directives(file: &str, tokens: &[Token]) -> Result<Layer, SbatchError> {
    let cmd = options::directive_command();
    let argv: Vec<&str> = tokens.iter().map(|t| t.text.as_str()).collect();
    let matches = match cmd.clone().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => return Err(locate_directive_error(&cmd, file, tokens, e)),
    };
    let options = SbatchOptions::from_arg_matches(&matches)
        .map_err(|e| SbatchError::general(clap_message(&e)))?;
    let lines = directive_lines(&cmd, tokens);
    let at_line = |line: usize| Origin::Line {
        file: file.to_string(),
        line,
    };
    if let Some((long, line)) = options
        .unsupported
        .given
        .iter()
        .map(|&(long, _)| (long, lines.get(long).copied().unwrap_or(0)))
        .min_by_key(|&(_, line)| line)
    {
        return Err(unsupported_error(at_line(line), long));
    }
    let mut origins = BTreeMap::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if matches.value_source(id) != Some(clap::parser::ValueSource::CommandLine) {
            continue;
        }
        if let (Some(long), Some(&line)) = (arg.get_long(), lines.get(id)) {
            origins.insert(long.to_string(), at_line(line));
        }
    }
    Ok(Layer { options, origins })
}

/// The line that last set each argument id, found by parsing ever longer prefixes of the
/// tokens and noting where an argument's position changes. (clap's own indices count
/// attached values and short clusters as extra positions, so they do not map to tokens.)
fn directive_lines(cmd: &Command, tokens: &[Token]) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    let mut last_index: BTreeMap<String, usize> = BTreeMap::new();
    let mut pending_option_line: Option<usize> = None;
    for k in 1..=tokens.len() {
        let argv: Vec<&str> = tokens[..k].iter().map(|t| t.text.as_str()).collect();
        let m = match cmd.clone().try_get_matches_from(&argv) {
            Ok(m) => m,
            Err(_) => {
                // The option at token k-1 still waits for its value.
                pending_option_line.get_or_insert(tokens[k - 1].line);
                continue;
            }
        };
        let line = pending_option_line.take().unwrap_or(tokens[k - 1].line);
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if m.value_source(id) != Some(clap::parser::ValueSource::CommandLine) {
                continue;
            }
            let Some(idx) = m.index_of(id) else { continue };
            if last_index.get(id) != Some(&idx) {
                last_index.insert(id.to_string(), idx);
                lines.insert(id.to_string(), line);
            }
        }
    }
    lines
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
];

/// Slurm's other `SBATCH_*` input variables: ignored with a warning.
const ENV_IGNORED: &[&str] = &[
    "SBATCH_ACCOUNT",
    "SBATCH_ACCTG_FREQ",
    "SBATCH_BATCH",
    "SBATCH_CLUSTERS",
    "SBATCH_CONTAINER",
    "SBATCH_CORE_SPEC",
    "SBATCH_CPUS_PER_GPU",
    "SBATCH_DEBUG",
    "SBATCH_DELAY_BOOT",
    "SBATCH_DISTRIBUTION",
    "SBATCH_GET_USER_ENV",
    "SBATCH_GPU_FREQ",
    "SBATCH_GRES_FLAGS",
    "SBATCH_HINT",
    "SBATCH_IGNORE_PBS",
    "SBATCH_INPUT",
    "SBATCH_MEM_BIND",
    "SBATCH_NETWORK",
    "SBATCH_NO_KILL",
    "SBATCH_OPEN_MODE",
    "SBATCH_OVERCOMMIT",
    "SBATCH_POWER",
    "SBATCH_PROFILE",
    "SBATCH_QOS",
    "SBATCH_RESERVATION",
    "SBATCH_SIGNAL",
    "SBATCH_SPREAD_JOB",
    "SBATCH_THREAD_SPEC",
    "SBATCH_THREADS_PER_CORE",
    "SBATCH_USE_MIN_NODES",
    "SBATCH_WAIT_ALL_NODES",
    "SBATCH_WCKEY",
];

/// Parse the `SBATCH_*` variables `env` returns. Warnings (ignored variables) are appended.
pub fn parse_env(
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Result<Layer, SbatchError> {
    let cmd = options::directive_command();
    let mut layer = Layer::default();
    let mut settings: Vec<(String, String)> = Vec::new();
    for &(var, long) in ENV_OPTIONS {
        let Some(value) = env(var) else { continue };
        let arg = match long {
            "requeue" | "no-requeue" | "wait" => format!("--{long}"),
            "exclusive" if value.is_empty() => "--exclusive".to_string(),
            _ => format!("--{long}={value}"),
        };
        settings.push((var.to_string(), arg));
    }
    // --switches=COUNT[@WAIT] comes from two variables.
    if let Some(count) = env("SBATCH_REQ_SWITCH") {
        let arg = match env("SBATCH_WAIT4SWITCH") {
            Some(wait) => format!("--switches={count}@{wait}"),
            None => format!("--switches={count}"),
        };
        settings.push(("SBATCH_REQ_SWITCH".to_string(), arg));
    } else if env("SBATCH_WAIT4SWITCH").is_some() {
        warnings.push(
            "ignoring SBATCH_WAIT4SWITCH: Muster takes the wait with the switch count, \
             --switches=COUNT@WAIT or SBATCH_REQ_SWITCH"
                .to_string(),
        );
    }
    for var in ENV_IGNORED {
        if env(var).is_some() {
            warnings.push(format!(
                "ignoring {var}: Muster does not implement that sbatch option"
            ));
        }
    }
    for (var, arg) in settings {
        let origin = Origin::Env(var);
        let matches = cmd
            .clone()
            .try_get_matches_from([arg.as_str()])
            .map_err(|e| describe_clap_error(&cmd, origin.clone(), &[], None, e))?;
        let options = SbatchOptions::from_arg_matches(&matches)
            .map_err(|e| SbatchError::at(origin.clone(), clap_message(&e)))?;
        for long in defined_options(&options).into_keys() {
            layer.origins.insert(long, origin.clone());
        }
        layer.options = options.over(std::mem::take(&mut layer.options));
    }
    Ok(layer)
}

/// Whether clap stopped because the last option had no value (the next line may supply it).
fn is_missing_value(e: &clap::Error) -> bool {
    e.kind() == ErrorKind::InvalidValue
        && matches!(e.get(ContextKind::InvalidValue), Some(ContextValue::String(v)) if v.is_empty())
}

/// Find the line a directive parse error belongs to: the first line at which the directives
/// read so far fail for a reason other than "the last option still needs its value".
fn locate_directive_error(
    cmd: &Command,
    file: &str,
    tokens: &[Token],
    full_error: clap::Error,
) -> SbatchError {
    let mut lines: Vec<usize> = tokens.iter().map(|t| t.line).collect();
    lines.dedup();
    for &line in &lines {
        let upto = tokens.iter().take_while(|t| t.line <= line).count();
        let argv: Vec<&str> = tokens[..upto].iter().map(|t| t.text.as_str()).collect();
        if let Err(e) = cmd.clone().try_get_matches_from(&argv)
            && !is_missing_value(&e)
        {
            let origin = Origin::Line {
                file: file.to_string(),
                line,
            };
            return describe_clap_error(cmd, origin, &tokens[..upto], Some(file), e);
        }
    }
    let line = lines.last().copied().unwrap_or(0);
    describe_clap_error(
        cmd,
        Origin::Line {
            file: file.to_string(),
            line,
        },
        tokens,
        Some(file),
        full_error,
    )
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

/// Rewrite a clap error in getopt_long's terms (as sbatch reports them).
pub fn describe_clap_error(
    cmd: &Command,
    at: Origin,
    tokens: &[Token],
    file: Option<&str>,
    e: clap::Error,
) -> SbatchError {
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let arg = context_str(&e, ContextKind::InvalidArg).unwrap_or_default();
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
                        format!("option '{arg}' is ambiguous; possibilities: {list}"),
                    );
                }
                return SbatchError::at(at, format!("unrecognized option '{arg}'"))
                    .hint("see `muster sbatch --help` for the options Muster supports");
            }
            if arg.starts_with('-') {
                return SbatchError::at(at, format!("unrecognized option '{arg}'"))
                    .hint("see `muster sbatch --help` for the options Muster supports");
            }
            let err = SbatchError::at(
                at,
                format!(
                    "invalid directive '{arg}': not an option (sbatch options start with - or --)"
                ),
            );
            match stolen_value_hint(cmd, tokens, &arg, file) {
                Some(h) => err.hint(h),
                None => err.hint("write a value right after its option: --opt=value or -o value"),
            }
        }
        ErrorKind::InvalidValue if is_missing_value(&e) => {
            let arg = context_str(&e, ContextKind::InvalidArg).unwrap_or_default();
            SbatchError::at(
                at,
                format!("option '{}' requires an argument", option_name(&arg)),
            )
        }
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let arg = context_str(&e, ContextKind::InvalidArg).unwrap_or_default();
            let value = context_str(&e, ContextKind::InvalidValue).unwrap_or_default();
            let why = std::error::Error::source(&e)
                .map(|s| s.to_string())
                .unwrap_or_else(|| clap_message(&e));
            SbatchError::at(
                at,
                format!("invalid value '{value}' for {}: {why}", option_name(&arg)),
            )
        }
        _ => SbatchError::at(at, clap_message(&e)),
    }
}

/// When an option with no attached value took the next token (which started with `-`), the
/// token after that is left over: say so, as this is a classic #SBATCH mistake.
fn stolen_value_hint(
    cmd: &Command,
    tokens: &[Token],
    leftover: &str,
    file: Option<&str>,
) -> Option<String> {
    let pos = tokens.iter().rposition(|t| t.text == leftover)?;
    if pos < 2 {
        return None;
    }
    let (opt, val) = (&tokens[pos - 2], &tokens[pos - 1]);
    if !val.text.starts_with('-') {
        return None;
    }
    let takes_value = cmd.get_arguments().any(|a| {
        a.get_action().takes_values()
            && (a.get_long().is_some_and(|l| opt.text == format!("--{l}"))
                || a.get_short().is_some_and(|s| opt.text == format!("-{s}")))
    });
    if !takes_value {
        return None;
    }
    let place = file
        .map(|f| format!("{f}: line {}", opt.line))
        .unwrap_or_else(|| format!("line {}", opt.line));
    Some(format!(
        "{} on {place} has no value, so it took '{}' as its value",
        opt.text, val.text
    ))
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
    put("wrap", o.wrap.clone());
    put("parsable", o.parsable.then(|| "set".to_string()));
    put("test-only", o.test_only.then(|| "set".to_string()));
    put("wait", o.wait.then(|| "set".to_string()));
    put("export", o.export.clone());
    put("image", o.image.clone());
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
            "output" | "error" => Some(cwd.join(v.as_str()).to_string_lossy().into_owned()),
            _ => None,
        };
        if let Some(s) = shown {
            *v = s;
        }
    }
    m.remove("image");
    m
}

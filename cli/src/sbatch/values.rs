//! Value checks for sbatch options, run by clap on every occurrence (as Slurm checks each
//! option when it is set). Each returns the value as written: the BatchJob takes Slurm syntax.
//! Every Slurm value grammar is the Slurm syntax library's ([`muster_crds::slurm`]).

use muster_crds::slurm::{
    ArraySpec, Constraint, DependencySpec, GpuBind, GpuCount, MemSize, NodeRange, Switches,
    SyntaxError, TimeLimit, gpus_from_gres, parse_gres,
};

fn non_empty(s: &str, what: &str) -> Result<String, String> {
    if s.is_empty() {
        Err(format!("{what} must not be empty"))
    } else {
        Ok(s.to_string())
    }
}

/// `--partition`: any non-empty name here; the Kubernetes form is checked when the job is built.
pub fn partition(s: &str) -> Result<String, String> {
    non_empty(s, "the partition name")
}

/// `--job-name`.
pub fn job_name(s: &str) -> Result<String, String> {
    non_empty(s, "the job name")?;
    if s.chars().count() > 256 {
        return Err("the job name must be at most 256 characters".into());
    }
    Ok(s.to_string())
}

/// Task, CPU and node counts: an integer of at least 1.
pub fn count(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of at least 1".into()),
    }
}

/// `--nice[=ADJ]`.
pub fn nice(s: &str) -> Result<i32, String> {
    const LIMIT: i64 = 2_147_483_645;
    match s.parse::<i64>() {
        Ok(n) if (-LIMIT..=LIMIT).contains(&n) => Ok(n as i32),
        Ok(_) => Err(format!(
            "the nice value must be between -{LIMIT} and {LIMIT}"
        )),
        Err(_) => Err("expected an integer adjustment such as 100 or -10".into()),
    }
}

/// `--priority`.
pub fn priority(s: &str) -> Result<u32, String> {
    if s.eq_ignore_ascii_case("top") {
        return Err("--priority=TOP is not supported; give a number".into());
    }
    s.parse::<u32>()
        .map_err(|_| "expected a whole number such as 1000".into())
}

/// `--exclusive[=MODE]`: the plain form (whole nodes) or `user`.
pub fn exclusive(s: &str) -> Result<String, String> {
    match s {
        "" | "user" => Ok(s.to_string()),
        "mcs" | "topo" => Err(format!(
            "--exclusive={s} is not supported by Muster: use --exclusive (whole nodes) or --exclusive=user (nodes shared only with your own jobs)"
        )),
        _ => Err("expected no value (--exclusive, whole nodes) or user".into()),
    }
}

/// `--nodelist` / `--exclude`: a hostlist, checked here, or (containing `/`) a file of node
/// names, read once every option is known (as sbatch reads it).
pub fn nodes_or_file(s: &str) -> Result<String, String> {
    if s.contains('/') {
        return Ok(s.to_string());
    }
    muster_crds::slurm::hostlist::expand(s)
        .map_err(|e| e.to_string())
        .and_then(|names| {
            if names.is_empty() {
                Err("expected node names, e.g. gpu[001-004],gpu010".into())
            } else {
                Ok(s.to_string())
            }
        })
}

/// `--output` / `--error`.
pub fn path(s: &str) -> Result<String, String> {
    non_empty(s, "the file name")
}

/// `--chdir`: a directory (absolute, or relative to the container's working directory).
pub fn chdir(s: &str) -> Result<String, String> {
    if s.contains('\0') {
        return Err("expected a directory; a NUL byte is not allowed".into());
    }
    non_empty(s, "the directory")
}

/// `--image`: a container image reference.
pub fn image(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return Err("expected a container image such as nvcr.io/nvidia/pytorch:24.05-py3".into());
    }
    Ok(s.to_string())
}

/// `--export`: `ALL`, `NONE` and `VAR=VALUE` items, comma-separated.
pub fn export(s: &str) -> Result<String, String> {
    export_vars(s).map(|_| s.to_string())
}

/// The `VAR=VALUE` items of an `--export` value, in order (`ALL`/`NONE` dropped).
pub fn export_vars(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut vars = Vec::new();
    for item in s.split(',') {
        if item.eq_ignore_ascii_case("ALL") || item.eq_ignore_ascii_case("NONE") {
            continue;
        }
        let (name, value) = item.split_once('=').ok_or_else(|| {
            format!(
                "{item:?} has no value: give {item}=VALUE (Muster does not copy the submitting \
                 shell's environment into pods)"
            )
        })?;
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "{name:?} is not a variable name: letters, digits and '_', not starting with a digit"
            ));
        }
        vars.push((name.to_string(), value.to_string()));
    }
    Ok(vars)
}

/// The reason a value does not parse, without the library's "invalid X \"value\":" lead
/// (the caller names the option and the value).
fn why(e: SyntaxError) -> String {
    e.message
}

/// `--nodes`: `N` or `MIN-MAX`.
pub fn nodes(s: &str) -> Result<String, String> {
    NodeRange::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--mem`, `--mem-per-cpu`, `--mem-per-gpu`.
pub fn mem(s: &str) -> Result<String, String> {
    MemSize::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--gpus`, `--gpus-per-node`, `--gpus-per-task`: `[TYPE:]COUNT`.
pub fn gpus(s: &str) -> Result<String, String> {
    GpuCount::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--gres`: Slurm's grammar, and only GPUs (the resource Muster schedules).
pub fn gres(s: &str) -> Result<String, String> {
    let items = parse_gres(s).map_err(why)?;
    gpus_from_gres(&items).map_err(why)?;
    Ok(s.to_string())
}

/// `--constraint`.
pub fn constraint(s: &str) -> Result<String, String> {
    Constraint::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--time`.
pub fn time(s: &str) -> Result<String, String> {
    TimeLimit::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--array`.
pub fn array(s: &str) -> Result<String, String> {
    ArraySpec::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--dependency`.
pub fn dependency(s: &str) -> Result<String, String> {
    DependencySpec::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--switches`.
pub fn switches(s: &str) -> Result<String, String> {
    Switches::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--gpu-bind`.
pub fn gpu_bind(s: &str) -> Result<String, String> {
    GpuBind::parse(s).map(|_| s.to_string()).map_err(why)
}

/// `--open-mode`: as Slurm, the first letter decides (`a`/`A` append, `t`/`T` truncate);
/// kept as `append` or `truncate`.
pub fn open_mode(s: &str) -> Result<String, String> {
    match s.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('a') => Ok("append".into()),
        Some('t') => Ok("truncate".into()),
        _ => Err("expected append or truncate".into()),
    }
}

/// `--account`: a Slurm account name.
pub fn account(s: &str) -> Result<String, String> {
    non_empty(s, "the account")?;
    if s.len() > 64
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.@+-".contains(&b))
    {
        return Err(
            "the account must be at most 64 letters, digits and _ . @ + - (a Slurm account name)"
                .into(),
        );
    }
    Ok(s.to_string())
}

/// `--begin`: one of Slurm's time forms (resolved against the clock when the job is built).
pub fn begin(s: &str) -> Result<String, String> {
    muster_crds::slurm::begin::parse(s, &jiff::Zoned::now()).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

/// `--signal`: `[{R|B}:]SIG[@TIME]`.
pub fn signal(s: &str) -> Result<String, String> {
    muster_crds::slurm::WarnSignal::parse(s)
        .map(|w| w.to_string())
        .map_err(|e| e.to_string())
}

fn pyxis_value(r: Result<impl Sized, SyntaxError>, s: &str) -> Result<String, String> {
    // The option is named in the caller's message; keep pyxis's reason.
    r.map(|_| s.to_string()).map_err(|e| e.message)
}

/// `--container-image` (pyxis): an enroot URI or image reference; kept as written.
pub fn container_image(s: &str) -> Result<String, String> {
    pyxis_value(muster_crds::slurm::pyxis::image(s), s)
}

/// `--container-mounts` (pyxis): `SRC[:DST[:FLAGS]][,...]`; kept as written.
pub fn container_mounts(s: &str) -> Result<String, String> {
    pyxis_value(muster_crds::slurm::pyxis::mounts(s), s)
}

/// `--container-workdir` (pyxis): an absolute path.
pub fn container_workdir(s: &str) -> Result<String, String> {
    pyxis_value(muster_crds::slurm::pyxis::workdir(s), s)
}

/// `--container-env` (pyxis): `NAME[,NAME...]`.
pub fn container_env(s: &str) -> Result<String, String> {
    pyxis_value(muster_crds::slurm::pyxis::env_names(s), s)
}

/// `--container-name` (pyxis): `NAME[:auto|create|exec|no_exec]`.
pub fn container_name(s: &str) -> Result<String, String> {
    pyxis_value(muster_crds::slurm::pyxis::container_name(s), s)
}

/// `--container-unshare` (pyxis): `ipc` and `uts`.
pub fn container_unshare(s: &str) -> Result<String, String> {
    pyxis_value(muster_crds::slurm::pyxis::unshare(s), s)
}

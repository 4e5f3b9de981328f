//! Value checks for sbatch options, run by clap on every occurrence (as Slurm checks each
//! option when it is set). Each returns the value as written: the BatchJob takes Slurm syntax.

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

/// `--exclusive[=MODE]`: only the plain form (whole nodes).
pub fn exclusive(s: &str) -> Result<String, String> {
    match s {
        "" => Ok(String::new()),
        "user" | "mcs" | "topo" => Err(format!(
            "--exclusive={s} is not supported by Muster; plain --exclusive gives the job whole nodes"
        )),
        _ => Err("expected no value (--exclusive), or user, mcs or topo".into()),
    }
}

/// `--output` / `--error`.
pub fn path(s: &str) -> Result<String, String> {
    non_empty(s, "the file name")
}

/// `--image`: a container image reference.
pub fn image(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return Err("expected a container image such as nvcr.io/nvidia/pytorch:24.05-py3".into());
    }
    Ok(s.to_string())
}

// --- interim: replaced by muster_crds::slurm parsers when the library lands ---
/// `--nodes`.
pub fn nodes(s: &str) -> Result<String, String> {
    non_empty(s, "nodes")
}
/// `--mem*`.
pub fn mem(s: &str) -> Result<String, String> {
    non_empty(s, "memory")
}
/// `--gpus*`.
pub fn gpus(s: &str) -> Result<String, String> {
    non_empty(s, "gpus")
}
/// `--gres`.
pub fn gres(s: &str) -> Result<String, String> {
    non_empty(s, "gres")
}
/// `--constraint`.
pub fn constraint(s: &str) -> Result<String, String> {
    non_empty(s, "constraint")
}
/// `--time`.
pub fn time(s: &str) -> Result<String, String> {
    non_empty(s, "time")
}
/// `--array`.
pub fn array(s: &str) -> Result<String, String> {
    non_empty(s, "array")
}
/// `--dependency`.
pub fn dependency(s: &str) -> Result<String, String> {
    non_empty(s, "dependency")
}
/// `--switches`.
pub fn switches(s: &str) -> Result<String, String> {
    non_empty(s, "switches")
}
/// `--gpu-bind`.
pub fn gpu_bind(s: &str) -> Result<String, String> {
    non_empty(s, "gpu-bind")
}

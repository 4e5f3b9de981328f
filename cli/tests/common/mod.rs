//! Helpers shared by the sbatch tests: our parse of a script, and real Slurm's.
#![allow(dead_code)]

pub mod fixtures;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use muster_cli::sbatch::manifest::Submitter;
use muster_cli::sbatch::parse::{SbatchErrors, slurm_defined_options};
use muster_cli::sbatch::{Prepared, SbatchArgs, ScriptInput, prepare};

/// `cli/tests/scripts/<sub>/<name>`.
pub fn script_path(sub: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(sub)
        .join(name)
}

/// Every `.sh` file of `cli/tests/scripts/<sub>`, sorted.
pub fn scripts(sub: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(script_path(sub, ""))
        .expect("scripts dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sh"))
        .collect();
    v.sort();
    v
}

/// Parse argv the way `muster sbatch` does (without the leading "sbatch").
pub fn sbatch_args(argv: &[&str]) -> SbatchArgs {
    let mut full = vec!["muster", "sbatch"];
    full.extend_from_slice(argv);
    let cli = muster_cli::parse_args(full.into_iter().map(Into::into).collect())
        .unwrap_or_else(|e| panic!("argv {argv:?}: {e}"));
    match cli.command {
        muster_cli::Command::Sbatch(a) => *a,
        other => panic!("not sbatch: {other:?}"),
    }
}

/// Our parse of `sub/name` with extra command-line arguments and environment.
pub fn ours(
    sub: &str,
    name: &str,
    argv: &[&str],
    env: &[(&str, &str)],
) -> Result<Prepared, SbatchErrors> {
    let path = script_path(sub, name);
    let text = String::from_utf8(std::fs::read(&path).expect("read script")).expect("utf-8");
    let mut full: Vec<&str> = argv.to_vec();
    full.push(name);
    let args = sbatch_args(&full);
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |k: &str| env.get(k).cloned();
    prepare(
        &args,
        Some(ScriptInput {
            name: name.to_string(),
            default_job_name: name.to_string(),
            text,
        }),
        &lookup,
        &Submitter {
            namespace: None,
            cwd: Some(script_path(sub, "")),
        },
    )
}

/// What real sbatch made of a script.
#[derive(Debug)]
pub struct Oracle {
    /// Whether Slurm accepted the script's syntax (failing later only for lack of a
    /// controller or of GRES configuration in the oracle's slurm.conf).
    pub accepted: bool,
    /// "defined options", key → value as printed.
    pub options: BTreeMap<String, String>,
    /// Everything sbatch printed.
    pub output: String,
}

/// Whether real sbatch can be run. Missing: a failure under MUSTER_REQUIRE_SLURM=1 (CI),
/// else a note and `false`.
pub fn oracle_available(test: &str) -> bool {
    let ok = Command::new("sbatch")
        .arg("--version")
        .env("SLURM_CONF", oracle_conf())
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("MUSTER_REQUIRE_SLURM").as_deref() == Ok("1") {
            panic!("{test}: real sbatch is required (MUSTER_REQUIRE_SLURM=1) but not runnable");
        }
        eprintln!("note: {test}: sbatch not installed; skipping the live comparison with Slurm");
    }
    ok
}

/// The minimal slurm.conf the oracle runs with.
pub fn oracle_conf() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/oracle.conf")
}

/// Run `sbatch -vv` on `sub/name` from its directory.
pub fn oracle(sub: &str, name: &str, argv: &[&str], env: &[(&str, &str)]) -> Oracle {
    let dir = script_path(sub, "");
    let mut cmd = Command::new("sbatch");
    cmd.arg("-vv").args(argv).arg(name).current_dir(&dir);
    for (k, _) in std::env::vars() {
        if k.starts_with("SBATCH_") || k.starts_with("SLURM_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("SLURM_CONF", oracle_conf());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run sbatch");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut options = BTreeMap::new();
    let mut inside = false;
    let mut messages = Vec::new();
    for line in text.lines() {
        if line == "sbatch: defined options" {
            inside = true;
            continue;
        }
        if line == "sbatch: end of defined options" {
            inside = false;
            continue;
        }
        if !inside {
            messages.push(line);
            continue;
        }
        if line.starts_with("sbatch: ----") {
            continue;
        }
        if let Some((k, v)) = line
            .strip_prefix("sbatch: ")
            .and_then(|rest| rest.split_once(": "))
        {
            options.insert(k.trim().to_string(), v.to_string());
        }
    }
    // Failures that come from the oracle having no controller or GRES configuration, not
    // from the script.
    let gres_unconfigured = text.contains("_get_next_gres: Failed to locate GRES")
        && !text.contains("Invalid count value");
    let accepted = messages.iter().all(|l| {
        let l = l.trim();
        if l.contains("debug") {
            return true;
        }
        // Slurm reads #SLURM lines and says so as an "error" that is not one.
        if l.contains("Change from #SLURM to #SBATCH") {
            return true;
        }
        let bad = l.contains("error")
            || l.contains("fatal")
            || l.contains("unrecognized option")
            || l.contains("is ambiguous")
            || l.contains("requires an argument");
        !bad || l.contains("Unable to contact slurm controller")
            || l.contains("Requested GRES option unsupported")
            || (gres_unconfigured && l.contains("Invalid generic resource"))
    });
    Oracle {
        accepted,
        options,
        output: text,
    }
}

/// Paths under `dir` shown relative to it (Slurm prints them absolute).
fn relative(map: BTreeMap<String, String>, dir: &Path) -> BTreeMap<String, String> {
    map.into_iter()
        .filter(|(k, _)| k != "verbose")
        .map(|(k, v)| {
            let v = match k.as_str() {
                "output" | "error" => Path::new(&v)
                    .strip_prefix(dir)
                    .map(|r| r.to_string_lossy().into_owned())
                    .unwrap_or(v),
                _ => v,
            };
            (k, v)
        })
        .collect()
}

/// Our defined options as `muster sbatch -v` prints them (paths relative to `dir`).
pub fn ours_shown(p: &Prepared, dir: &Path) -> BTreeMap<String, String> {
    relative(slurm_defined_options(&p.merged.options, dir), dir)
}

/// Slurm's defined options (paths relative to `dir`), without the options that have no
/// effect in Muster (their warnings are checked on their own).
pub fn oracle_shown(o: &Oracle, dir: &Path) -> BTreeMap<String, String> {
    let mut m = relative(o.options.clone(), dir);
    m.retain(|k, _| muster_cli::sbatch::options::no_effect_reason(k).is_none());
    m
}

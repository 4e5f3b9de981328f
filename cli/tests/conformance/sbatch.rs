//! The CLI's way: the `muster` CLI run in-process, `sbatch --test-only`'s answer as what a
//! user sees, and what sbatch makes of a row's options.

use super::*;

/// Runs the CLI in-process as `user`: (success, stdout, stderr).
pub async fn run_cli(argv: Vec<OsString>, user: &str) -> (bool, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut input: &[u8] = b"";
    let user = user.to_string();
    let env = move |k: &str| match k {
        "USER" => Some(user.clone()),
        "MUSTER_SUBMIT_TIMEOUT" => Some("20".to_string()),
        _ => None,
    };
    let mut io = muster_cli::Io {
        out: &mut out,
        err: &mut err,
        stdin: &mut input,
        env: &env,
        cwd: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
    };
    let code = muster_cli::run_with(argv, &mut io).await;
    (
        code == std::process::ExitCode::SUCCESS,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// `sbatch --test-only`'s answer as what a user sees.
pub fn test_only_line(ok: bool, err: &str, now: i64, w: &World) -> Seen {
    if !ok {
        return test_only_error(err.trim().trim_start_matches("error: "));
    }
    // sbatch: Job 0 to start at 2026-01-05T10:00:00 using 16 processors on nodes gpu[001-002] in partition gpu
    let line = err
        .lines()
        .find(|l| l.contains("Job 0 to start at"))
        .unwrap_or_else(|| panic!("no estimate in {err:?}"));
    let at = line
        .split("to start at ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap();
    let nodes = line
        .split(" on nodes ")
        .nth(1)
        .and_then(|r| r.split(" in partition").next())
        .unwrap();
    let t = jiff::civil::DateTime::strptime("%Y-%m-%dT%H:%M:%S", at)
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::system())
        .unwrap()
        .timestamp()
        .as_second();
    let nodes = w.suite_names(nodes);
    if t <= now + 2 {
        Seen::Running {
            nodes,
            tasks: Vec::new(),
        }
    } else {
        Seen::Pending {
            reason: String::new(),
            message: String::new(),
            start: Some((t - now, nodes)),
        }
    }
}

pub(super) fn test_only_error(e: &str) -> Seen {
    let text = e.trim();
    for (prefix, close) in [
        ("Job would never start: ", false),
        ("no start time can be estimated (", true),
    ] {
        if let Some(i) = text.find(prefix) {
            let mut rest = &text[i + prefix.len()..];
            if close {
                rest = rest.trim_end_matches(')');
            }
            let (reason, message) = rest.split_once(": ").unwrap_or((rest, ""));
            return Seen::Pending {
                reason: reason.to_string(),
                message: message.to_string(),
                start: None,
            };
        }
    }
    Seen::Refused(text.to_string())
}

/// What sbatch makes of the row's options (its BatchJob spec, without the script).
pub async fn sbatch_spec(args: &[&str], user: &str) -> Result<Value, String> {
    let mut argv: Vec<OsString> = vec!["muster".into(), "sbatch".into(), "--dry-run=json".into()];
    argv.extend(args.iter().map(OsString::from));
    argv.push("--wrap=true".into());
    let (ok, out, err) = run_cli(argv, user).await;
    if !ok {
        return Err(err);
    }
    let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    let mut spec = v["spec"].clone();
    for k in ["script", "jobName"] {
        spec.as_object_mut().unwrap().remove(k);
    }
    Ok(spec)
}

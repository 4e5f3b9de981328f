//! The operator binary as the chart runs it: `--scheduler-config` is read before anything
//! else, and a file with an unknown key or a bad value stops the operator at startup with
//! an error naming the key and what it allows (no cluster needed to see it).

use std::process::Command;

fn run_with_config(text: &str) -> (bool, String) {
    let dir = tempfile_dir();
    let path = dir.join("scheduler.yaml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_muster-operator"))
        .arg("--no-leader-election")
        .arg("--no-webhook")
        .arg("--metrics-addr=127.0.0.1:0")
        .arg("--scheduler-config")
        .arg(&path)
        // No cluster: a good file gets as far as connecting, and fails there.
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", &dir)
        // No backtraces in the message (they would name every module on the way).
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tempfile_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "muster-operator-cli-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn unknown_scheduler_keys_stop_the_operator_at_startup() {
    let (ok, err) = run_with_config("maxReservations: 4\nbf_max_job_test: 8\n");
    assert!(!ok);
    assert!(err.contains("--scheduler-config"), "{err}");
    assert!(
        err.contains("unknown key \"bf_max_job_test\""),
        "the key is named: {err}"
    );
    assert!(
        err.contains("maxReservations, "),
        "the keys are listed: {err}"
    );
    assert!(
        !err.contains("Kubernetes API"),
        "refused before connecting: {err}"
    );
}

#[test]
fn bad_scheduler_values_stop_the_operator_at_startup() {
    let (ok, err) = run_with_config("backfill: sometimes\n");
    assert!(!ok);
    assert!(
        err.contains("backfill: sometimes is not allowed (true or false)"),
        "{err}"
    );
    let (ok, err) = run_with_config("maxReservations: -2\n");
    assert!(!ok);
    assert!(err.contains("maxReservations"), "{err}");
    assert!(err.contains("a whole number >= 0"), "{err}");
}

#[test]
fn a_good_scheduler_config_gets_past_startup() {
    let (ok, err) = run_with_config("maxReservations: 0\nbackfill: false\n");
    assert!(!ok, "no cluster here");
    assert!(
        err.contains("Kubernetes API"),
        "it went on to connect: {err}"
    );
    assert!(!err.contains("--scheduler-config"), "{err}");
}

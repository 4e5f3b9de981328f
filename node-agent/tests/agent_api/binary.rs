//! The real binary on a machine without NVML (this one: no GPU driver) and without a fixture:
//! one clear log line, exit code 3, and — when it can reach the API — a GpuNode that says why.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_muster-node-agent");

/// Runs the agent with a clean environment (no fixture, no in-cluster config).
fn run(args: &[&str], kubeconfig: &std::path::Path) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(BIN)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info")
        .output()
        .expect("the agent binary runs");
    (out, start.elapsed())
}

fn error_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("ERROR"))
        .map(str::to_string)
        .collect()
}

fn assert_one_clear_line(out: &Output) {
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let errors = error_lines(out);
    assert_eq!(errors.len(), 1, "exactly one error line: {errors:#?}");
    let line = &errors[0];
    assert!(line.contains("NVML unavailable"), "{line}");
    assert!(line.contains("--fixture"), "says how to go on: {line}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn without_nvml_and_without_a_fixture_the_binary_exits_3_with_one_line() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-kubeconfig");
    for args in [
        &["--node-name", NODE][..],
        &[][..],
        &["inventory"][..],
        &["--check"][..],
    ] {
        let (out, took) = run(args, &missing);
        assert_one_clear_line(&out);
        assert!(took < Duration::from_secs(20), "{args:?} took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nvml_the_gpunode_says_why() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let (server, client) = api().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let (out, _) = tokio::task::spawn_blocking(move || run(&["--node-name", NODE], &kubeconfig))
        .await
        .unwrap();
    assert_one_clear_line(&out);
    let st = status(&client).await;
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason, "NvmlUnavailable");
    assert!(
        ready.message.contains("NVML unavailable"),
        "{}",
        ready.message
    );
    assert_eq!(st.gpu_count, 0);
}

#[test]
fn with_a_fixture_inventory_prints_the_node_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture_path("dgx-h100");
    let (out, _) = run(
        &["inventory", "-o", "json", "--fixture", fx.to_str().unwrap()],
        &dir.path().join("none"),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = report.to_string();
    assert!(
        text.contains("GPU-a4c123b1-612d-d272-d137-1c17149d4395"),
        "{text}"
    );
    assert!(error_lines(&out).is_empty());
}

//! The `muster-step` binary on its own: its multicall names, `install`, `scontrol` inside a
//! job, the errors outside one, and a node daemon's life (SIGTERM, an unauthenticated peer).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_muster-step");

fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn install_links_srun_and_scontrol_which_then_work_by_name() {
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = run(&["install", d.path().to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    for n in ["muster-step", "srun", "scontrol"] {
        assert!(d.path().join(n).exists(), "{n}");
    }
    let out = Command::new(d.path().join("scontrol"))
        .args(["show", "hostnames"])
        .env_clear()
        .env("SLURM_JOB_NODELIST", "train-[0-2]")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "train-0\ntrain-1\ntrain-2\n"
    );
    let out = Command::new(d.path().join("scontrol"))
        .args(["show", "hostlist", "n1,n2,n3"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n[1-3]\n");
    let out = Command::new(d.path().join("scontrol"))
        .args(["show", "job", "5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("`show job` needs the cluster (use `muster scontrol`)")
    );
    let out = Command::new(d.path().join("scontrol"))
        .args(["update", "x"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("only `scontrol show hostnames|hostlist|hostlistsorted")
    );
    // srun outside a job says where it belongs.
    let out = Command::new(d.path().join("srun"))
        .arg("hostname")
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("srun: error: SLURM_JOB_ID is not set"),
        "{err}"
    );
}

#[test]
fn unknown_commands_and_bad_node_arguments_are_refused() {
    let (code, _, err) = run(&["frobnicate"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown command") && err.contains("usage"),
        "{err}"
    );
    let (code, _, err) = run(&["node", "--", "x"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("--batch"), "{err}");
    let (code, _, err) = run(
        &["node"],
        &[
            ("SLURM_JOB_ID", "1"),
            ("SLURM_JOB_NODELIST", "a,b"),
            ("SLURMD_NODENAME", "c"),
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("\"c\"") && err.contains("a,b"), "{err}");
}

#[test]
fn a_node_daemon_stops_on_sigterm_and_refuses_strangers() {
    let d = tempfile::tempdir().unwrap();
    let key = d.path().join("key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef").unwrap();
    // A loopback address as both the node's name and its address: no DNS needed.
    let ip = format!(
        "127.0.{}.{}",
        100 + std::process::id() % 100,
        10 + std::process::id() % 200
    );
    let port = "6941";
    let child = Command::new(BIN)
        .arg("node")
        .env_clear()
        .env("SLURM_JOB_ID", "9")
        .env("SLURM_JOB_NODELIST", format!("127.0.0.1,{ip}"))
        .env("SLURMD_NODENAME", &ip)
        .env("MUSTER_POD_IP", &ip)
        .env("MUSTER_STEP_PORT", port)
        .env("MUSTER_STEP_KEY_FILE", &key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A stranger (no credential) is dropped after the handshake fails.
    let mut connected = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(mut s) = std::net::TcpStream::connect(format!("{ip}:{port}")) {
            use std::io::{Read, Write};
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut hello = [0u8; 40];
            s.read_exact(&mut hello).unwrap();
            assert_eq!(&hello[..8], b"MSTEP001");
            let mut bogus = b"MSTEP001".to_vec();
            bogus.extend_from_slice(&[0u8; 64]);
            s.write_all(&bogus).unwrap();
            let mut buf = [0u8; 1];
            assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "the daemon hangs up");
            connected = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(connected, "the daemon listens on {ip}:{port}");
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "it exits on SIGTERM"
    );
    assert_eq!(out.status.code(), Some(143));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused a connection") && err.contains("step credential"),
        "{err}"
    );
}

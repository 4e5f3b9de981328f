//! The operator under measure: its binary and process, its resident memory and CPU time,
//! and its metrics (API writes by kind).

use super::*;

pub(crate) fn operator_bin() -> PathBuf {
    if let Ok(p) = std::env::var("MUSTER_OPERATOR_BIN") {
        return p.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    // `cargo test` sets CARGO to the cargo running it; the build shares its target dir.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "muster-operator",
            "--bin",
            "muster-operator",
        ])
        .current_dir(&root)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building muster-operator failed");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    target.join("release").join("muster-operator")
}

pub(crate) fn rss_kib(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds (user + system) used so far by process `pid`, all its threads, from
/// `/proc/PID/stat` (clock ticks; 10 ms resolution at the usual 100 Hz).
pub(crate) fn proc_cpu(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces: the fields after it are counted from its `)`.
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

/// CPU seconds (user + system) used so far by this process (the API server double, the
/// scheduler stand-in, the kubelet and the benchmark's own clients and watches).
pub(crate) fn self_cpu() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time of the operator and of this process over a phase, printed with its wall time:
/// load-independent where wall-clock rates on a shared machine are not.
pub(crate) struct CpuMark {
    pub(crate) op_pid: u32,
    pub(crate) op: f64,
    pub(crate) me: f64,
    pub(crate) at: Instant,
}

impl CpuMark {
    pub(crate) fn new(op_pid: u32) -> Self {
        CpuMark {
            op_pid,
            op: proc_cpu(op_pid),
            me: self_cpu(),
            at: Instant::now(),
        }
    }

    /// One line: wall time, operator CPU, this process's CPU, their sum and what it would
    /// take of two cores, with the load average.
    pub(crate) fn line(&self) -> String {
        let wall = self.at.elapsed().as_secs_f64();
        let op = proc_cpu(self.op_pid) - self.op;
        let me = self_cpu() - self.me;
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_default();
        format!(
            "CPU over {wall:.2} s wall: operator {op:.2} s, test control plane + benchmark \
             {me:.2} s, together {:.2} s ({:.2} s on 2 idle cores); load {load}",
            op + me,
            (op + me) / 2.0
        )
    }
}

pub(crate) async fn scrape(port: u16) -> String {
    let mut s = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(_) => return String::new(),
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out
}

pub(crate) fn writes(metrics: &str) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("muster_api_writes_total{kind=\""))
        .filter_map(|l| {
            let (k, rest) = l.split_once('"')?;
            let v: f64 = rest.trim_start_matches('}').trim().parse().ok()?;
            Some((k.to_string(), v))
        })
        .collect()
}

/// Scrapes until the operator's write counters show at least `pods` pod creations and `jobs`
/// status writes (they are recorded when a cycle's writes are done, which can be after the
/// watches have shown the pods), then returns them.
pub(crate) async fn settled_writes(port: u16, pods: f64, jobs: f64) -> BTreeMap<String, f64> {
    let t = Instant::now();
    loop {
        let w = writes(&scrape(port).await);
        let got = |k: &str| w.get(k).copied().unwrap_or(0.0);
        if (got("pod_create") >= pods && got("status") >= jobs)
            || t.elapsed() > Duration::from_secs(120)
        {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) struct Operator(pub(crate) Child);
impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The operator binary against `kubeconfig`, its metrics on `port`.
pub(crate) fn spawn_operator(
    bin: &std::path::Path,
    kubeconfig: &std::path::Path,
    port: u16,
) -> Operator {
    let child = Command::new(bin)
        .args([
            "--namespace",
            "muster-system",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--gang-start-timeout",
            "1h",
            "--identity",
            "bench",
        ])
        .env("KUBECONFIG", kubeconfig)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Operator(child)
}

pub(crate) fn metrics_port(part: u16, dra: bool) -> u16 {
    18000 + (std::process::id() % 1000) as u16 * 8 + part * 2 + u16::from(dra)
}

pub(crate) fn other_writes(k: &str) -> bool {
    k != "event" && k != "partition_status" && k != "lease" && k != "configmap"
}

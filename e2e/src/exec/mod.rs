//! Exec mode of the test kubelet: pods run for real, as local processes.
//!
//! Each container's command runs in its own mount, UTS and PID namespaces ([`container`]);
//! the image is ignored (the host's files stand in for it) except for the files an
//! [`ExecOptions::images`] entry maps in, or an [`ExecOptions::root_images`] entry that is
//! the container's whole file system. Each pod gets:
//!
//! - a host name (`spec.hostname`, else the pod name; `setHostnameAsFQDN` honoured) and its
//!   own loopback address as `podIP` (`127.X.Y.Z`: all of 127/8 is local, one `X` per test
//!   cluster, claimed by binding the cluster DNS server on `127.X.0.53:53`); pods share the
//!   host's network stack, so two pods must not listen on the same port of every address;
//! - `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf` as the kubelet writes them, the
//!   last pointing at the cluster DNS server ([`dns`]) with the search path of the pod's
//!   `dnsPolicy`/`dnsConfig` and `ndots`;
//! - its volumes ([`volumes`]) bind-mounted at their `mountPath`s (`subPath`, `readOnly`),
//!   their downwardAPI files following the pod's labels and annotations as it is updated
//!   (not where mounted by `subPath`, as with the kubelet);
//! - the environment of its containers ([`mod@env`]): `envFrom`, `env` with `valueFrom`,
//!   `$(VAR)` expansion, and `PATH`/`HOSTNAME`/`HOME` defaults as an image and runc give;
//! - stdout and stderr (together, as `kubectl logs` shows them) as the container's log,
//!   served by the API server double's `pods/log`.
//!
//! Init containers run first, in order; the containers then run together. Deletion sends
//! SIGTERM to each container (its process group) and SIGKILL at the grace period; the
//! statuses written are the simulated kubelet's, with the real exit codes (128 + signal when
//! killed). Not done: resource limits (no cgroups), users and capabilities (everything runs
//! as root), probes, image pulls, the termination-message file, ephemeral containers, a
//! shared `/dev/shm` or process namespace between the containers of a pod, propagating
//! changes of Secrets and ConfigMaps into volumes.

pub mod container;
pub mod dns;
pub mod env;
pub mod pod;
pub mod volumes;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::apiserver::PodLogs;
use crate::clock::SimClock;
use dns::ClusterDns;
use pod::{Launch, PodCmd};

/// Exec mode settings.
#[derive(Clone, Debug, Default)]
pub struct ExecOptions {
    /// Where pods' files, volumes and logs go (a temporary directory, removed with the
    /// kubelet, when `None`). Keep it out of paths pods bind-mount.
    pub state_dir: Option<PathBuf>,
    /// Image name prefix → host directory whose files appear at their paths inside the
    /// container (the longest matching prefix wins): e.g. the operator image's
    /// `/usr/local/bin/muster-step` from a directory holding `usr/local/bin/muster-step`.
    pub images: Vec<(String, PathBuf)>,
    /// Image name prefix → host directory that is the container's whole file system, as an
    /// image `FROM scratch` holding its files would be: nothing of the host shows but `/dev`
    /// (and a fresh `/proc` and `/tmp`); [`ExecOptions::images`] files go on top. For
    /// showing that something runs in an image without a shell or shared libraries.
    pub root_images: Vec<(String, PathBuf)>,
    /// The cluster domain (default `cluster.local`).
    pub cluster_domain: Option<String>,
    /// Where container logs are registered (the API server double's [`PodLogs`]).
    pub logs: Option<PodLogs>,
}

/// How a container ended (or why it never ran).
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerEnd {
    /// Exit code (128 + signal when killed; 128 when it could not start).
    pub code: i32,
    /// `Completed`, `Error`, `StartError`, `CreateContainerConfigError`,
    /// `ContainerStatusUnknown`.
    pub reason: String,
    /// Details.
    pub message: Option<String>,
    /// When it started.
    pub started: Option<Timestamp>,
    /// When it ended.
    pub finished: Option<Timestamp>,
    /// Never started and still waiting for this reason (`PodInitializing`).
    pub waiting: Option<String>,
}

impl ContainerEnd {
    fn unknown() -> ContainerEnd {
        ContainerEnd {
            code: 137,
            reason: "ContainerStatusUnknown".into(),
            message: Some("The container could not be located when the pod was terminated".into()),
            started: None,
            finished: None,
            waiting: None,
        }
    }

    fn initializing() -> ContainerEnd {
        ContainerEnd {
            waiting: Some("PodInitializing".into()),
            ..ContainerEnd::unknown()
        }
    }
}

/// What a pod supervisor tells the kubelet loop.
#[derive(Debug)]
pub enum ExecEvent {
    /// The containers started (the init containers having ended as given).
    Started {
        /// Pod uid.
        uid: String,
        /// When.
        at: Timestamp,
        /// The init containers.
        inits: Vec<ContainerEnd>,
    },
    /// Every container ended (or an init container failed).
    Ended {
        /// Pod uid.
        uid: String,
        /// The init containers.
        inits: Vec<ContainerEnd>,
        /// The containers.
        ends: Vec<ContainerEnd>,
    },
}

/// Why exec mode cannot run here.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// No free loopback block for the DNS server.
    #[error("exec mode: no free loopback address 127.X.0.53:53 for the cluster DNS server ({0})")]
    NoAddress(String),
    /// Namespaces (or mounts) are not available.
    #[error(
        "exec mode cannot run containers here: {0}. It needs root and mount, UTS and PID namespaces (unshare)"
    )]
    Unavailable(String),
    /// Other setup failures.
    #[error("exec mode: {0}")]
    Setup(String),
}

/// What every pod supervisor shares.
pub struct Ctx {
    /// API client.
    pub client: Client,
    /// Clock for status times.
    pub clock: SimClock,
    /// Settings (domain resolved).
    pub opts: Resolved,
    /// State directory.
    pub state: PathBuf,
    /// Nameserver of the pods.
    pub dns_addr: Ipv4Addr,
    /// The host's resolv.conf (for `dnsPolicy: Default` and the host search domains).
    pub host_resolv: String,
}

/// [`ExecOptions`] with defaults applied.
pub struct Resolved {
    /// Image map.
    pub images: Vec<(String, PathBuf)>,
    /// Images that are the whole root file system.
    pub root_images: Vec<(String, PathBuf)>,
    /// Cluster domain.
    pub cluster_domain: String,
    /// Log registry.
    pub logs: Option<PodLogs>,
}

/// The exec runtime of one kubelet.
pub struct Runtime {
    ctx: Arc<Ctx>,
    _tmp: Option<tempfile::TempDir>,
    _dns: ClusterDns,
    block: u8,
    next_ip: u32,
    pods: HashMap<String, (mpsc::UnboundedSender<PodCmd>, JoinHandle<()>)>,
    events_tx: mpsc::UnboundedSender<ExecEvent>,
    events_rx: Option<mpsc::UnboundedReceiver<ExecEvent>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Aborting a supervisor drops its containers' handles, which kill them.
        for (_, (_, h)) in self.pods.drain() {
            h.abort();
        }
    }
}

static BLOCK_HINT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Runtime {
    /// Claims an address block, starts the cluster DNS server and checks that containers
    /// can run here (a probe container must exit 0).
    pub async fn start(
        client: Client,
        clock: SimClock,
        opts: ExecOptions,
    ) -> Result<Runtime, ExecError> {
        let (tmp, state) = match &opts.state_dir {
            Some(d) => {
                std::fs::create_dir_all(d)
                    .map_err(|e| ExecError::Setup(format!("{}: {e}", d.display())))?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("muster-exec-")
                    .tempdir()
                    .map_err(|e| ExecError::Setup(format!("state directory: {e}")))?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        // One 127.X/16 per cluster; the DNS socket on 127.X.0.53:53 is the claim.
        let start = (std::process::id() as usize * 31
            + BLOCK_HINT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as usize * 7)
            % 250;
        let mut claimed = None;
        let mut last = String::new();
        for k in 0..250 {
            let x = (2 + (start + k) % 250) as u8;
            match UdpSocket::bind(SocketAddr::from(([127, x, 0, 53], 53))).await {
                Ok(s) => {
                    claimed = Some((x, s));
                    break;
                }
                Err(e) => last = e.to_string(),
            }
        }
        let (block, udp) = claimed.ok_or(ExecError::NoAddress(last))?;
        let domain = opts
            .cluster_domain
            .clone()
            .unwrap_or_else(|| "cluster.local".into());
        let upstream: Vec<SocketAddr> = dns::host_upstreams()
            .into_iter()
            .filter(|a| !matches!(a.ip(), std::net::IpAddr::V4(v) if v.octets()[0] == 127 && v.octets()[1] == block))
            .collect();
        let dns = ClusterDns::start(client.clone(), udp, &domain, upstream)
            .await
            .map_err(|e| ExecError::Setup(format!("cluster DNS: {e}")))?;
        let ctx = Arc::new(Ctx {
            client,
            clock,
            opts: Resolved {
                images: opts.images.clone(),
                root_images: opts.root_images.clone(),
                cluster_domain: domain,
                logs: opts.logs.clone(),
            },
            state: state.clone(),
            dns_addr: dns.addr(),
            host_resolv: std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
        });
        probe(&state).await?;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        Ok(Runtime {
            ctx,
            _tmp: tmp,
            _dns: dns,
            block,
            next_ip: 0,
            pods: HashMap::new(),
            events_tx,
            events_rx: Some(events_rx),
        })
    }

    /// The supervisors' reports (taken once, by the kubelet loop).
    pub fn events(&mut self) -> mpsc::UnboundedReceiver<ExecEvent> {
        self.events_rx.take().expect("exec events taken once")
    }

    /// The cluster DNS server's address.
    pub fn dns_addr(&self) -> Ipv4Addr {
        self.ctx.dns_addr
    }

    /// A fresh pod address.
    pub fn next_ip(&mut self) -> String {
        let n = self.next_ip;
        self.next_ip += 1;
        // 254 x 254 addresses per cluster; then wrap (long-gone pods' addresses).
        let n = n % (254 * 254);
        format!("127.{}.{}.{}", self.block, 1 + n / 254, 1 + n % 254)
    }

    /// Starts a pod's supervisor.
    pub fn launch(&mut self, launch: Launch) {
        let uid = launch.pod.metadata.uid.clone().unwrap_or_default();
        let (tx, rx) = mpsc::unbounded_channel();
        let h = tokio::spawn(pod::supervise(
            self.ctx.clone(),
            launch,
            self.events_tx.clone(),
            rx,
        ));
        if let Some((old, h0)) = self.pods.insert(uid, (tx, h)) {
            let _ = old.send(PodCmd::Forget);
            drop(h0);
        }
    }

    /// Whether a supervisor runs for `uid`.
    pub fn has(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    fn send(&self, uid: &str, c: PodCmd) {
        if let Some((tx, _)) = self.pods.get(uid) {
            let _ = tx.send(c);
        }
    }

    /// Runs the pod's containers again.
    pub fn restart(&self, uid: &str) {
        self.send(uid, PodCmd::Restart);
    }

    /// The pod's labels or annotations changed: its downwardAPI files follow.
    pub fn update(&self, uid: &str, pod: Pod) {
        self.send(uid, PodCmd::Update(Box::new(pod)));
    }

    /// SIGTERM now, SIGKILL after `grace`.
    pub fn terminate(&self, uid: &str, grace: Duration) {
        self.send(uid, PodCmd::Terminate(grace));
    }

    /// The pod is gone.
    pub fn forget(&mut self, uid: &str) {
        if let Some((tx, _)) = self.pods.remove(uid) {
            let _ = tx.send(PodCmd::Forget);
        }
    }
}

/// Runs `/bin/true` in a container: exec mode fails here, clearly, or works.
async fn probe(state: &std::path::Path) -> Result<(), ExecError> {
    let dir = state.join("probe");
    std::fs::create_dir_all(&dir)
        .map_err(|e| ExecError::Setup(format!("{}: {e}", dir.display())))?;
    let plan = container::MountPlan::new(&dir.join("root"))
        .map_err(|e| ExecError::Unavailable(format!("reading /: {e}")))?;
    let spec = container::Spec {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "test \"$(hostname)\" = muster-probe".into(),
        ],
        env: vec![("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into())],
        cwd: "/".into(),
        hostname: "muster-probe".into(),
        log: dir.join("log"),
    };
    let mut r = container::start(spec, plan).map_err(|e| ExecError::Unavailable(e.to_string()))?;
    let end = tokio::time::timeout(Duration::from_secs(30), r.wait())
        .await
        .map_err(|_| ExecError::Unavailable("the probe container did not finish in 30 s".into()))?;
    let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    if end.code != 0 {
        return Err(ExecError::Unavailable(format!(
            "the probe container exited {} ({})",
            end.code,
            log.trim()
        )));
    }
    Ok(())
}

//! [`TestCluster`]: a whole test control plane from a cluster spec — or a real cluster.
//!
//! `TestCluster::start(spec)` starts the [API server double](crate::apiserver) with the muster
//! CRDs, registers the spec's nodes ([Node and GpuNode objects](crate::nodes)), and starts the
//! [scheduler stand-in](crate::scheduler) and the [simulated kubelet](crate::kubelet). The
//! suites talk to it through [`TestCluster::client`] or the kubeconfig file at
//! [`TestCluster::kubeconfig`] (for `kubectl` and the CLI).
//!
//! With the environment variable [`KUBECONFIG_ENV`] (`MUSTER_E2E_KUBECONFIG`) set,
//! `TestCluster::start` connects to that cluster instead: no double, no simulated nodes,
//! scheduler or kubelet — the real ones — so the same suite runs there unchanged. Suites must
//! then ask [`TestCluster::nodes`] for node names and sizes rather than assume the spec's.
//! What is unavailable on a real cluster:
//! - [`TestCluster::faults`], [`TestCluster::api_server`], the component stats: `None`;
//! - [`TestCluster::finish_pod`] and [`TestCluster::set_gpu_health`]: [`ClusterError::Unsupported`]
//!   (a real container cannot be told to exit; use the `MUSTER_SIM_*` env convention with a
//!   script that honours it, see [`crate::kubelet`]);
//! - [`TestCluster::fail_node`] / [`TestCluster::recover_node`] run the shell commands in
//!   `MUSTER_E2E_FAIL_NODE_CMD` / `MUSTER_E2E_RECOVER_NODE_CMD` with `{node}` replaced by the
//!   node name (on kind: `docker stop {node}` / `docker start {node}`), and are unsupported
//!   when those are unset. The real node lifecycle controller then takes ~40 s to mark the
//!   node `Unknown`, so suites must wait for the Node condition, not assume it.
//! - [`TestCluster::clock`] is the wall clock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};
use muster_crds::v1alpha1::GpuNode;
use muster_operator::core::cluster_spec::{ClusterSpec, GpuInfo, NodeInfo, SpecError};
use muster_operator::core::node::Taint;
use serde_json::json;

use crate::apiserver::auth::UserInfo;
use crate::apiserver::{ApiServer, ApiServerOptions, Faults, StartError};
use crate::clock::SimClock;
use crate::exec::{ExecError, ExecOptions, Runtime};
use crate::kubelet::{self, Kubelet, KubeletError, KubeletOptions, KubeletStats};
use crate::nodes;
use crate::quantity::parse_milli;
use crate::scheduler::{Scheduler, SchedulerOptions, SchedulerStats};

/// Environment variable naming a kubeconfig: when set, suites run against that cluster.
pub const KUBECONFIG_ENV: &str = "MUSTER_E2E_KUBECONFIG";
/// Environment variable: shell command that fails a node of a real cluster (`{node}`).
pub const FAIL_NODE_CMD_ENV: &str = "MUSTER_E2E_FAIL_NODE_CMD";
/// Environment variable: shell command that brings a node of a real cluster back (`{node}`).
pub const RECOVER_NODE_CMD_ENV: &str = "MUSTER_E2E_RECOVER_NODE_CMD";
/// Environment variable choosing how the simulated cluster offers GPUs: `env` (the default: no
/// `resource.k8s.io`, so partitions with `gpuBinding: auto` bind by `NVIDIA_VISIBLE_DEVICES`)
/// or `dra` (the API server serves `resource.k8s.io/v1`, the NVIDIA DRA driver is installed:
/// `auto` partitions bind by ResourceClaims). Read by [`TestClusterOptions::new`] and the
/// operator suites' support, so every suite runs in either mode.
pub const BINDING_ENV: &str = "MUSTER_E2E_BINDING";
/// Environment variable switching on Kubernetes' gang API in the simulated cluster:
/// `v1alpha1` (Kubernetes 1.35's Workload) or `v1alpha2` (1.36's PodGroup); unset: off.
pub const GANG_ENV: &str = "MUSTER_E2E_GANG";

/// How the simulated cluster binds GPUs, from [`BINDING_ENV`]: whether it serves DRA.
/// Panics on a value that is neither `env` nor `dra` (a typo must not silently test the other
/// mode).
pub fn dra_from_env() -> bool {
    match std::env::var(BINDING_ENV).ok().as_deref().map(str::trim) {
        None | Some("") | Some("env") => false,
        Some("dra") => true,
        Some(other) => panic!("{BINDING_ENV}={other:?}: expected env or dra"),
    }
}

/// The gang API the simulated cluster serves, from [`GANG_ENV`]. Panics on another value.
pub fn gang_from_env() -> Option<crate::apiserver::WorkloadApi> {
    use crate::apiserver::WorkloadApi;
    match std::env::var(GANG_ENV).ok().as_deref().map(str::trim) {
        None | Some("") | Some("off") => None,
        Some("v1alpha1") => Some(WorkloadApi::V1alpha1),
        Some("v1alpha2") => Some(WorkloadApi::V1alpha2),
        Some(other) => panic!("{GANG_ENV}={other:?}: expected v1alpha1, v1alpha2 or off"),
    }
}

/// Why a test cluster could not start or do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The cluster spec does not build.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The API server double did not start.
    #[error("starting the API server double: {0}")]
    Start(#[from] StartError),
    /// A request to the cluster failed.
    #[error("{what}: {error}")]
    Kube {
        /// What was being done.
        what: String,
        /// The error.
        error: Box<kube::Error>,
    },
    /// The kubeconfig could not be read or written.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A simulated kubelet command failed.
    #[error(transparent)]
    Kubelet(#[from] KubeletError),
    /// Exec mode cannot run here.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The operation needs the simulated cluster (or a configured command).
    #[error("{0}")]
    Unsupported(String),
    /// A node command of a real cluster failed.
    #[error("`{command}` failed: {message}")]
    Command {
        /// The command run.
        command: String,
        /// Exit status or error.
        message: String,
    },
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterError {
    let what = what.into();
    move |error| ClusterError::Kube {
        what,
        error: Box::new(error),
    }
}

/// How to start a simulated test cluster.
#[derive(Clone, Debug)]
pub struct TestClusterOptions {
    /// The cluster.
    pub spec: ClusterSpec,
    /// The simulated clock (default: wall time).
    pub clock: SimClock,
    /// API server double options (default: with the muster CRDs).
    pub api: ApiServerOptions,
    /// Scheduler stand-in; `None`: no scheduler (pods stay Pending unless bound by hand).
    pub scheduler: Option<SchedulerOptions>,
    /// Simulated kubelet; `None`: no kubelet (bound pods stay Pending).
    pub kubelet: Option<KubeletOptions>,
    /// Run pods for real (the kubelet's exec mode, see [`crate::exec`]); `None`: simulate.
    pub exec: Option<ExecOptions>,
    /// Where to write the kubeconfig; default: a temporary directory removed with the cluster.
    pub kubeconfig: Option<PathBuf>,
    /// Writes in flight at once while registering nodes.
    pub register_concurrency: usize,
    /// Who the kubeconfig authenticates as (with a token of its own); default: the double's
    /// `kubernetes-admin`.
    pub kubeconfig_user: Option<UserInfo>,
    /// The NVIDIA DRA driver's slices and DeviceClass, published where the double serves
    /// `resource.k8s.io/v1` (`api.features.dra`); `None`: the driver is not installed.
    pub dra_driver: Option<crate::dra::DriverVersion>,
}

impl TestClusterOptions {
    /// Defaults for `spec`, with DRA and the gang API as [`BINDING_ENV`] and [`GANG_ENV`] say.
    pub fn new(spec: ClusterSpec) -> Self {
        let mut api = ApiServerOptions::default().with_muster_crds();
        let dra = dra_from_env();
        api.features.dra = dra;
        api.features.workload = gang_from_env();
        Self {
            spec,
            clock: SimClock::real(),
            api,
            scheduler: Some(SchedulerOptions::default()),
            kubelet: Some(KubeletOptions::default()),
            exec: None,
            kubeconfig: None,
            register_concurrency: 32,
            kubeconfig_user: None,
            dra_driver: dra.then(crate::dra::DriverVersion::default),
        }
    }

    /// Serve DRA and install the NVIDIA driver (`true`), or neither.
    pub fn with_dra(mut self, on: bool) -> Self {
        self.api.features.dra = on;
        self.dra_driver = on.then(crate::dra::DriverVersion::default);
        self
    }

    /// Run the simulated clock `speed` times faster than wall time.
    pub fn speed(mut self, speed: f64) -> Self {
        self.clock = SimClock::with_speed(speed);
        self
    }
}

struct Simulated {
    server: ApiServer,
    scheduler: Option<Scheduler>,
    kubelet: Option<Kubelet>,
    exec: bool,
}

/// A running test cluster (simulated or real); dropping it stops the simulated one.
pub struct TestCluster {
    client: Client,
    kubeconfig: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    nodes: Vec<NodeInfo>,
    clock: SimClock,
    sim: Option<Simulated>,
    node_commands: NodeCommands,
}

/// Shell commands that fail and recover a node of a real cluster (`{node}` is replaced by the
/// node name); read from [`FAIL_NODE_CMD_ENV`] and [`RECOVER_NODE_CMD_ENV`] on connect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCommands {
    /// Fails a node (`docker stop {node}` on kind).
    pub fail: Option<String>,
    /// Brings it back (`docker start {node}` on kind).
    pub recover: Option<String>,
}

impl NodeCommands {
    /// The commands the environment gives.
    pub fn from_env() -> NodeCommands {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        NodeCommands {
            fail: var(FAIL_NODE_CMD_ENV),
            recover: var(RECOVER_NODE_CMD_ENV),
        }
    }
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("kubeconfig", &self.kubeconfig)
            .field("simulated", &self.sim.is_some())
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

impl TestCluster {
    /// A cluster for `spec`: simulated, or the real one named by `MUSTER_E2E_KUBECONFIG`.
    pub async fn start(spec: ClusterSpec) -> Result<TestCluster, ClusterError> {
        TestCluster::start_with(TestClusterOptions::new(spec)).await
    }

    /// [`TestCluster::start`] with options (they apply to the simulated cluster only).
    pub async fn start_with(opts: TestClusterOptions) -> Result<TestCluster, ClusterError> {
        match std::env::var_os(KUBECONFIG_ENV).filter(|v| !v.is_empty()) {
            Some(path) => TestCluster::connect(Path::new(&path)).await,
            None => TestCluster::simulated(opts).await,
        }
    }

    /// Always the simulated cluster, whatever the environment says (the sandbox uses this).
    pub async fn simulated(opts: TestClusterOptions) -> Result<TestCluster, ClusterError> {
        let infos = opts.spec.build()?;
        let server = ApiServer::start(opts.api.clone()).await?;
        let (tmp, path) = match &opts.kubeconfig {
            Some(p) => (None, p.clone()),
            None => {
                let dir = tempfile::tempdir().map_err(|e| ClusterError::Kubeconfig {
                    path: std::env::temp_dir(),
                    message: e.to_string(),
                })?;
                let p = dir.path().join("kubeconfig");
                (Some(dir), p)
            }
        };
        let text = match &opts.kubeconfig_user {
            None => server.kubeconfig(),
            Some(u) => {
                let token = format!("token-{}", uuid::Uuid::new_v4());
                server.add_token(&token, u.clone());
                server.kubeconfig_with_token(&u.username, &token)
            }
        };
        std::fs::write(&path, text).map_err(|e| ClusterError::Kubeconfig {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let client = server.client();
        let gpunodes = opts.kubelet.as_ref().is_some_and(|k| k.gpunodes);
        nodes::register(
            &client,
            &infos,
            opts.clock.now(),
            gpunodes,
            opts.register_concurrency,
        )
        .await
        .map_err(kube_err("registering the nodes"))?;
        if let Some(v) = opts.dra_driver
            && opts.api.features.dra
        {
            crate::dra::publish(&client, &infos, v, opts.register_concurrency)
                .await
                .map_err(kube_err("publishing the DRA driver's ResourceSlices"))?;
        }
        let kubelet = match (opts.kubelet.clone(), opts.exec.clone()) {
            (Some(k), Some(mut x)) => {
                if x.logs.is_none() {
                    x.logs = Some(server.pod_logs());
                }
                let rt = Runtime::start(server.client(), opts.clock.clone(), x).await?;
                Some(Kubelet::start_exec(
                    server.client(),
                    opts.clock.clone(),
                    infos.clone(),
                    k,
                    rt,
                ))
            }
            (Some(k), None) => Some(Kubelet::start(
                server.client(),
                opts.clock.clone(),
                infos.clone(),
                k,
            )),
            (None, _) => None,
        };
        let scheduler = opts
            .scheduler
            .clone()
            .map(|s| Scheduler::start(server.client(), opts.clock.clone(), s));
        Ok(TestCluster {
            client,
            kubeconfig: path,
            _tmp: tmp,
            nodes: infos,
            clock: opts.clock,
            sim: Some(Simulated {
                server,
                scheduler,
                kubelet,
                exec: opts.exec.is_some(),
            }),
            node_commands: NodeCommands::default(),
        })
    }

    /// A real cluster through `kubeconfig`: installs the muster CRDs if they are missing and
    /// reads its nodes (control-plane nodes left out) and GpuNodes.
    pub async fn connect(kubeconfig: &Path) -> Result<TestCluster, ClusterError> {
        let kerr = |m: String| ClusterError::Kubeconfig {
            path: kubeconfig.to_path_buf(),
            message: m,
        };
        let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| kerr(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| kerr(e.to_string()))?;
        let client = Client::try_from(config).map_err(kube_err("building a client"))?;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in muster_crds::crds() {
            let name = crd.name_any();
            if crds
                .get_opt(&name)
                .await
                .map_err(kube_err(format!("reading CRD {name}")))?
                .is_none()
            {
                crds.create(&PostParams::default(), &crd)
                    .await
                    .map_err(kube_err(format!("installing CRD {name}")))?;
            }
        }
        let nodes = nodes_of(&client).await?;
        Ok(TestCluster {
            client,
            kubeconfig: kubeconfig.to_path_buf(),
            _tmp: None,
            nodes,
            clock: SimClock::real(),
            sim: None,
            node_commands: NodeCommands::from_env(),
        })
    }

    /// A client for the cluster.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The kubeconfig file (for `kubectl`, the CLI, the operator binary).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kubeconfig file (beside [`TestCluster::kubeconfig`]) whose user is `user`, with a
    /// bearer token of its own (simulated cluster only).
    pub fn kubeconfig_for(&self, user: &UserInfo) -> Result<PathBuf, ClusterError> {
        let server = self.api_server().ok_or_else(|| {
            ClusterError::Unsupported("users are made on the simulated cluster only".into())
        })?;
        let token = format!("token-{}", uuid::Uuid::new_v4());
        server.add_token(&token, user.clone());
        let safe: String = user
            .username
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = self.kubeconfig.with_file_name(format!("kubeconfig-{safe}"));
        std::fs::write(&path, server.kubeconfig_with_token(&user.username, &token)).map_err(
            |e| ClusterError::Kubeconfig {
                path: path.clone(),
                message: e.to_string(),
            },
        )?;
        Ok(path)
    }

    /// Whether this is the simulated cluster.
    pub fn is_simulated(&self) -> bool {
        self.sim.is_some()
    }

    /// The worker nodes: the spec's (simulated), or what the real cluster's Nodes and GpuNodes
    /// say (as read at start).
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// The clock the simulated nodes keep (wall time on a real cluster).
    pub fn clock(&self) -> &SimClock {
        &self.clock
    }

    /// The API server double (simulated cluster only).
    pub fn api_server(&self) -> Option<&ApiServer> {
        self.sim.as_ref().map(|s| &s.server)
    }

    /// Fault injection of the API server double (simulated cluster only). Faults hit the
    /// simulated scheduler and kubelet too, which retry as the real ones do.
    pub fn faults(&self) -> Option<Faults> {
        self.api_server().map(ApiServer::faults)
    }

    /// Scheduler stand-in counters.
    pub fn scheduler_stats(&self) -> Option<&SchedulerStats> {
        self.sim.as_ref()?.scheduler.as_ref().map(Scheduler::stats)
    }

    /// Simulated kubelet counters.
    pub fn kubelet_stats(&self) -> Option<&KubeletStats> {
        self.sim.as_ref()?.kubelet.as_ref().map(Kubelet::stats)
    }

    fn kubelet(&self, what: &str) -> Result<&Kubelet, ClusterError> {
        match &self.sim {
            Some(Simulated {
                kubelet: Some(k), ..
            }) => Ok(k),
            Some(_) => Err(ClusterError::Unsupported(format!(
                "{what}: this test cluster runs no simulated kubelet"
            ))),
            None => Err(ClusterError::Unsupported(format!(
                "{what} needs the simulated cluster (unset {KUBECONFIG_ENV})"
            ))),
        }
    }

    /// Replace the node commands of a real cluster (they come from the environment).
    pub fn set_node_commands(&mut self, commands: NodeCommands) {
        self.node_commands = commands;
    }

    /// Lose a node: simulated, the kubelet stops and the node lifecycle controller marks the
    /// node and its pods (see [`crate::kubelet`]); real, the fail command runs.
    pub async fn fail_node(&self, node: &str) -> Result<(), ClusterError> {
        if self.sim.is_none() {
            let cmd = self.node_commands.fail.as_deref();
            return run_node_command(cmd, FAIL_NODE_CMD_ENV, node).await;
        }
        Ok(self.kubelet("fail_node")?.fail_node(node).await?)
    }

    /// Bring a failed node back.
    pub async fn recover_node(&self, node: &str) -> Result<(), ClusterError> {
        if self.sim.is_none() {
            let cmd = self.node_commands.recover.as_deref();
            return run_node_command(cmd, RECOVER_NODE_CMD_ENV, node).await;
        }
        Ok(self.kubelet("recover_node")?.recover_node(node).await?)
    }

    /// Mark GPU `index` of `node` unhealthy (with an XID and a reason) or healthy again, as the
    /// node agent would publish it (simulated cluster only).
    pub async fn set_gpu_health(
        &self,
        node: &str,
        index: u32,
        healthy: bool,
        xid: Option<u32>,
        reason: &str,
    ) -> Result<(), ClusterError> {
        let k = self.kubelet("set_gpu_health")?;
        let h = kubelet::gpu_health(healthy, xid, reason, self.clock.now());
        Ok(k.set_gpu_health(node, index, h).await?)
    }

    /// Make a pod's containers exit now with `exit_code` (simulated cluster only): sets its
    /// `sim.muster.dev/run-seconds` to 0 and `sim.muster.dev/exit-code`. A pod not running
    /// yet exits as soon as it starts.
    pub async fn finish_pod(
        &self,
        namespace: &str,
        pod: &str,
        exit_code: u8,
    ) -> Result<(), ClusterError> {
        self.kubelet("finish_pod")?;
        if self.sim.as_ref().is_some_and(|s| s.exec) {
            return Err(ClusterError::Unsupported(
                "finish_pod: in exec mode containers exit when their processes do".into(),
            ));
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"metadata": {"annotations": {
            kubelet::RUN_SECONDS: "0",
            kubelet::EXIT_CODE: exit_code.to_string(),
        }}});
        api.patch(pod, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(kube_err(format!("annotating pod {namespace}/{pod}")))?;
        Ok(())
    }

    /// Stop the simulated components and the API server (nothing for a real cluster).
    pub async fn shutdown(mut self) {
        if let Some(sim) = self.sim.take() {
            if let Some(s) = sim.scheduler {
                s.stop().await;
            }
            if let Some(k) = sim.kubelet {
                k.stop().await;
            }
            sim.server.shutdown().await;
        }
    }
}

async fn run_node_command(
    template: Option<&str>,
    var: &str,
    node: &str,
) -> Result<(), ClusterError> {
    let Some(template) = template else {
        return Err(ClusterError::Unsupported(format!(
            "failing or recovering a node of a real cluster needs {var} (a shell command with {{node}}, e.g. `docker stop {{node}}` on kind)"
        )));
    };
    let command = template.replace("{node}", node);
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .output()
        .await
        .map_err(|e| ClusterError::Command {
            command: command.clone(),
            message: e.to_string(),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ClusterError::Command {
            command,
            message: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// The worker nodes of a real cluster as [`NodeInfo`]s: labels, allocatable CPU/memory,
/// taints from the Node; GPUs and topology from its GpuNode, if any.
pub async fn nodes_of(client: &Client) -> Result<Vec<NodeInfo>, ClusterError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let gns: Api<GpuNode> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .map_err(kube_err("listing nodes"))?;
    // A cluster without the CRD served yet has no GpuNodes.
    let gpu: BTreeMap<String, GpuNode> = gns
        .list(&ListParams::default())
        .await
        .map(|l| l.items.into_iter().map(|g| (g.name_any(), g)).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for n in list.items {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        if labels.contains_key("node-role.kubernetes.io/control-plane") {
            continue;
        }
        let name = n.name_any();
        let alloc = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        let milli = |k: &str| {
            alloc
                .get(k)
                .and_then(|q| parse_milli(&q.0).ok())
                .unwrap_or(0)
        };
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| {
                serde_json::from_value::<Taint>(
                    json!({"key": t.key, "value": t.value.unwrap_or_default(), "effect": t.effect}),
                )
                .ok()
            })
            .collect();
        let status = gpu.get(&name).and_then(|g| g.status.clone());
        let gpus = status
            .as_ref()
            .map(|s| {
                s.gpus
                    .iter()
                    .map(|g| GpuInfo {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        model: g.model.clone(),
                        memory_mib: g.memory_mib,
                        numa_node: g.numa_node,
                        nvlink_peers: g.nvlink_peers.clone(),
                        pci_bus_id: g.pci_bus_id.clone().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(NodeInfo {
            name,
            labels,
            cpu_millis: u64::try_from(milli("cpu")).unwrap_or(0),
            memory_mib: u64::try_from(milli("memory") / 1000 / (1 << 20)).unwrap_or(0),
            taints,
            gpus,
            topology: status.map(|s| s.topology).unwrap_or_default(),
            extended_resources: alloc
                .iter()
                .filter(|(k, _)| k.contains('/'))
                .filter_map(|(k, q)| {
                    Some((
                        k.clone(),
                        u64::try_from(parse_milli(&q.0).ok()? / 1000).ok()?,
                    ))
                })
                .collect(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

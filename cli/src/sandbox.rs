//! `muster sandbox`: a whole Kubernetes control plane in the foreground, to try Muster with no
//! cluster — the test control plane of `muster-e2e` (API server double, simulated GPU nodes,
//! a kube-scheduler stand-in, a simulated kubelet) serving on 127.0.0.1, with a kubeconfig
//! for `kubectl` and `kubectl muster`. Ctrl-C stops it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Api;
use kube::api::PostParams;
use muster_crds::slurm::hostlist;
use muster_crds::v1alpha1::{JobEnvironment, Partition, PartitionSpec};
use muster_e2e::exec::ExecOptions;
use muster_e2e::kubelet::{ENV_EXIT_CODE, ENV_RUN_SECONDS, EXIT_CODE, RUN_SECONDS};
use muster_e2e::{TestCluster, TestClusterOptions};
use muster_operator::core::cluster_spec::ClusterSpec;

use crate::Io;

/// The cluster the sandbox simulates when no `--cluster` is given.
pub const DEFAULT_SPEC: &str = include_str!("../../examples/clusters/sandbox.yaml");
/// The default Partition's image (never pulled: the kubelet is simulated).
pub const SANDBOX_IMAGE: &str = "busybox:1.36";
/// The `/dev/shm` size of the default Partition, the chart's default
/// (`partition.jobEnvironment.shmSize` in charts/muster/values.yaml).
pub const SANDBOX_SHM_SIZE: &str = "16Gi";

/// The default Partition's job environment: the chart default's (a memory-backed `/dev/shm`).
pub fn sandbox_job_environment() -> JobEnvironment {
    JobEnvironment {
        shm_size: Some(Quantity(SANDBOX_SHM_SIZE.into())),
        ..JobEnvironment::default()
    }
}

/// Where the kubeconfig goes by default.
pub const DEFAULT_KUBECONFIG: &str = "muster-sandbox.kubeconfig";

/// `muster sandbox`
#[derive(Args, Clone, Debug, PartialEq)]
#[command(
    about = "Run a simulated GPU cluster (API server, nodes, scheduler, kubelet) to try Muster with no cluster"
)]
pub struct SandboxArgs {
    /// Cluster spec (YAML, see examples/clusters/); default: 16 DGX H100 nodes under 4 leaves.
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,

    /// Where to write the kubeconfig of the sandbox.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_KUBECONFIG)]
    pub write_kubeconfig: PathBuf,

    /// Run simulated time this many times faster than wall time (pod run times, grace
    /// periods and heartbeats; keep 1 while an operator that reads the wall clock runs).
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0, value_parser = parse_speed)]
    pub speed: f64,

    /// Name of the default Partition created over every node (its topology is the spec's
    /// switch levels).
    #[arg(long, value_name = "NAME", default_value = "gpu")]
    pub partition: String,

    /// Create no Partition.
    #[arg(long)]
    pub no_partition: bool,

    /// Do not run the Muster operator inside the sandbox (run your own build of
    /// `muster-operator` against the kubeconfig instead).
    #[arg(long)]
    pub no_operator: bool,

    /// Serve Dynamic Resource Allocation (`resource.k8s.io/v1`) with the NVIDIA DRA driver
    /// installed: partitions bind GPUs by ResourceClaims (`kubectl get resourceclaims`).
    #[arg(long)]
    pub dra: bool,

    /// Run pods for real: each container's command runs as local processes (images are
    /// ignored) with its own host name, loopback address, cluster DNS, volumes and logs.
    /// Needs root (mount, UTS and PID namespaces).
    #[arg(long)]
    pub exec: bool,

    /// With --exec: the muster-step binary the operator image provides
    /// (/usr/local/bin/muster-step); default: muster-step beside this program.
    #[arg(long, value_name = "FILE", requires = "exec")]
    pub step_binary: Option<PathBuf>,

    /// With --exec: files of DIR appear at their paths in containers whose image starts with
    /// PREFIX (repeatable).
    #[arg(long, value_name = "PREFIX=DIR", requires = "exec", value_parser = parse_image_dir)]
    pub exec_image: Vec<(String, PathBuf)>,
}

/// The image whose `/usr/local/bin/muster-step` node pods install (the operator's).
pub const STEP_IMAGE: &str = "ghcr.io/muster-dev/muster-operator";

fn parse_image_dir(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((p, d)) if !p.is_empty() && !d.is_empty() => Ok((p.to_string(), PathBuf::from(d))),
        _ => Err(format!(
            "{s:?} is not PREFIX=DIR, e.g. registry.example/tools=/opt/tools-image"
        )),
    }
}

/// Namespace of the sandbox operator's Lease and counters, as the chart's default.
pub const OPERATOR_NAMESPACE: &str = "muster-system";

// `--speed` is never NaN (parse_speed refuses it), so equality is total.
impl Eq for SandboxArgs {}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.001..=1_000_000.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a speed-up factor: give a number from 0.001 to 1000000, e.g. 60"
        )),
    }
}

/// A running sandbox.
pub struct Sandbox {
    /// The simulated cluster.
    pub cluster: TestCluster,
    /// The Muster operator scheduling in it (with its admission webhooks), unless
    /// `--no-operator`.
    pub operator: Option<muster_e2e::operator::InProcessOperator>,
    /// The kubeconfig written.
    pub kubeconfig: PathBuf,
    /// With --exec: the directory standing in for the operator image.
    _image: Option<tempfile::TempDir>,
}

fn read_spec(args: &SandboxArgs, cwd: &Path) -> anyhow::Result<ClusterSpec> {
    match &args.cluster {
        None => Ok(ClusterSpec::from_yaml(DEFAULT_SPEC)?),
        Some(p) => {
            let path = cwd.join(p);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading cluster spec {}", path.display()))?;
            ClusterSpec::from_yaml(&text).with_context(|| format!("in {}", path.display()))
        }
    }
}

/// Start the sandbox and print how to use it.
pub async fn start(args: &SandboxArgs, io: &mut Io<'_>) -> anyhow::Result<Sandbox> {
    let spec = read_spec(args, &io.cwd)?;
    let path = io.cwd.join(&args.write_kubeconfig);
    let mut opts = TestClusterOptions::new(spec.clone()).speed(args.speed);
    if args.dra {
        opts = opts.with_dra(true);
    }
    opts.kubeconfig = Some(path.clone());
    let image = if args.exec {
        let (dir, images) = exec_images(args, &io.cwd)?;
        opts.exec = Some(ExecOptions {
            images,
            ..ExecOptions::default()
        });
        Some(dir)
    } else {
        None
    };
    // The kubeconfig's user is you (`$USER`), as the API server authenticates you: jobs record
    // it as their submitter; `kubectl --as=someone` acts as someone else.
    let me = (io.env)("USER")
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "sandbox-user".to_string());
    opts.kubeconfig_user = Some(muster_e2e::apiserver::auth::UserInfo::new(
        &me,
        &["system:masters"],
    ));
    let cluster = TestCluster::simulated(opts)
        .await
        .context("starting the sandbox")?;
    if !args.no_partition {
        let api: Api<Partition> = Api::all(cluster.client());
        let p = Partition::new(
            &args.partition,
            PartitionSpec {
                topology: spec.topology(),
                default: Some(true),
                // Simulated kubelets pull nothing; a default spares `--image` on every sbatch.
                default_image: Some(SANDBOX_IMAGE.into()),
                // As the chart's default Partition: scripts see the same /dev/shm here as on
                // a default install.
                job_environment: Some(sandbox_job_environment()),
                ..PartitionSpec::default()
            },
        );
        api.create(&PostParams::default(), &p)
            .await
            .with_context(|| format!("creating Partition {}", args.partition))?;
    }
    let operator = if args.no_operator {
        None
    } else {
        Some(start_operator(&cluster).await?)
    };
    let nodes = cluster.nodes();
    let gpus: usize = nodes.iter().map(|n| n.gpus.len()).sum();
    let url = cluster
        .api_server()
        .map(|s| s.https_url())
        .unwrap_or_default();
    let shown = path.canonicalize().unwrap_or(path.clone());
    let k = shown.display();
    let out = &mut io.out;
    writeln!(
        out,
        "Muster sandbox \"{}\": {} nodes ({}), {gpus} GPUs; API server {url}",
        spec.name,
        nodes.len(),
        hostlist::compress(nodes.iter().map(|n| n.name.as_str()))
    )?;
    if !args.no_partition {
        writeln!(
            out,
            "Default partition: {} (topology {})",
            args.partition,
            spec.topology().join(" > ")
        )?;
    }
    if args.speed != 1.0 {
        writeln!(
            out,
            "Simulated time runs {}x faster than wall time.",
            args.speed
        )?;
    }
    writeln!(out, "\nPoint kubectl and kubectl muster at it:\n")?;
    writeln!(out, "  export KUBECONFIG={k}")?;
    writeln!(
        out,
        "  kubectl get nodes -L muster.dev/leaf,muster.dev/gpu.product"
    )?;
    writeln!(out, "  kubectl get gpunodes")?;
    writeln!(out, "  kubectl muster sinfo")?;
    if args.exec {
        writeln!(
            out,
            "\nPods run for real: each container's command runs here as local processes (images\n\
             are ignored), with its own host name and loopback address; `kubectl logs` shows\n\
             its output."
        )?;
    } else {
        writeln!(
            out,
            "\nPods bound to a node run until deleted; give them a run time and exit code with the\n\
             annotations {RUN_SECONDS} / {EXIT_CODE} or the env {ENV_RUN_SECONDS} / {ENV_EXIT_CODE}\n\
             (`sbatch --export=ALL,{ENV_RUN_SECONDS}=60 ...`)."
        )?;
    }
    if operator.is_some() {
        writeln!(
            out,
            "The Muster operator runs inside the sandbox (namespace {OPERATOR_NAMESPACE}). Submit a job:\n\n  \
             kubectl muster sbatch --wrap 'echo hello' && kubectl muster squeue"
        )?;
    } else {
        writeln!(
            out,
            "The Muster operator does not run inside the sandbox: start it with this kubeconfig to\n\
             schedule BatchJobs."
        )?;
    }
    writeln!(out, "\nCtrl-C stops the sandbox.")?;
    out.flush()?;
    Ok(Sandbox {
        cluster,
        operator,
        kubeconfig: path,
        _image: image,
    })
}

/// The image map of --exec: the operator image's `muster-step`, and any --exec-image.
fn exec_images(
    args: &SandboxArgs,
    cwd: &Path,
) -> anyhow::Result<(tempfile::TempDir, Vec<(String, PathBuf)>)> {
    let step = match &args.step_binary {
        Some(p) => cwd.join(p),
        None => std::env::current_exe()
            .context("finding this program")?
            .with_file_name("muster-step"),
    };
    if !step.is_file() {
        anyhow::bail!(
            "--exec needs the muster-step binary ({} does not exist): build it with `cargo build -p muster-cli --bins` or give --step-binary",
            step.display()
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("muster-sandbox-image-")
        .tempdir()
        .context("creating the operator image directory")?;
    let bin = dir.path().join("usr/local/bin");
    std::fs::create_dir_all(&bin).context("creating the operator image directory")?;
    std::os::unix::fs::symlink(&step, bin.join("muster-step"))
        .context("linking muster-step into the operator image directory")?;
    let mut images = vec![(STEP_IMAGE.to_string(), dir.path().to_path_buf())];
    for (prefix, d) in &args.exec_image {
        let d = cwd.join(d);
        if !d.is_dir() {
            anyhow::bail!("--exec-image {prefix}={}: not a directory", d.display());
        }
        images.push((prefix.clone(), d));
    }
    Ok((dir, images))
}

/// Start the real operator in this process against the sandbox's API server: the same
/// controllers and admission webhooks the chart deploys, one replica, so it always leads.
async fn start_operator(
    cluster: &TestCluster,
) -> anyhow::Result<muster_e2e::operator::InProcessOperator> {
    use muster_operator::controller::Settings;
    let server = cluster
        .api_server()
        .context("the sandbox runs on the API server double")?;
    let settings = Settings {
        namespace: OPERATOR_NAMESPACE.into(),
        leader_election: false,
        identity: "muster-sandbox".into(),
        ..Settings::default()
    };
    muster_e2e::operator::start(server, settings, true)
        .await
        .context("starting the operator")
}

impl Sandbox {
    /// Stop everything and remove the kubeconfig (it would point at nothing).
    pub async fn stop(self) {
        if let Some(op) = self.operator
            && let Err(e) = op.shutdown().await
        {
            tracing::warn!(error = %e, "the sandbox operator stopped with an error");
        }
        self.cluster.shutdown().await;
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// Run the sandbox until Ctrl-C.
pub async fn run(args: &SandboxArgs, io: &mut Io<'_>) -> anyhow::Result<()> {
    let sandbox = start(args, io).await?;
    let stopped = tokio::signal::ctrl_c().await;
    writeln!(io.err, "\nStopping the sandbox.")?;
    sandbox.stop().await;
    stopped.context("waiting for Ctrl-C")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use kube::api::ListParams;

    /// The sandbox's default Partition gives jobs what the chart's default install does.
    #[test]
    fn the_sandbox_partition_has_the_charts_job_environment() {
        let values: serde_yaml::Value =
            serde_yaml::from_str(include_str!("../../charts/muster/values.yaml")).unwrap();
        let chart = &values["partitions"]["gpu"]["jobEnvironment"];
        let chart: JobEnvironment = serde_yaml::from_value(chart.clone()).unwrap();
        assert_eq!(sandbox_job_environment(), chart);
    }

    fn args(extra: &[&str]) -> SandboxArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: SandboxArgs,
        }
        let mut v = vec!["sandbox"];
        v.extend_from_slice(extra);
        T::try_parse_from(v).unwrap().a
    }

    /// Starts a sandbox in `dir` with `extra` arguments; returns it and what it printed.
    async fn start_in(dir: &Path, extra: &[&str]) -> (anyhow::Result<Sandbox>, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut stdin = std::io::empty();
        let env = |_: &str| None;
        let mut io = Io {
            out: &mut out,
            err: &mut err,
            stdin: &mut stdin,
            env: &env,
            cwd: dir.to_path_buf(),
        };
        let s = start(&args(extra), &mut io).await;
        (s, String::from_utf8(out).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sandbox_serves_the_spec_and_writes_a_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let (s, text) = start_in(dir.path(), &[]).await;
        let s = s.unwrap();
        let path = dir.path().join(DEFAULT_KUBECONFIG);
        assert!(text.contains("16 nodes (gpu[001-016]), 128 GPUs"), "{text}");
        assert!(
            text.contains(&format!(
                "export KUBECONFIG={}",
                path.canonicalize().unwrap().display()
            )),
            "{text}"
        );
        // The kubeconfig written works for a client.
        let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        let nodes: Api<Node> = Api::all(client.clone());
        assert_eq!(
            nodes
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
            16
        );
        let parts: Api<Partition> = Api::all(client);
        let p = parts.get("gpu").await.unwrap();
        assert_eq!(
            p.spec.topology,
            [
                "muster.dev/spine",
                "muster.dev/leaf",
                "kubernetes.io/hostname"
            ]
        );
        s.stop().await;
        assert!(!path.exists(), "the kubeconfig is removed on stop");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sandbox_operator_runs_a_job_to_completion() {
        use muster_crds::v1alpha1::{BatchJob, JobState};
        let dir = tempfile::tempdir().unwrap();
        let (s, text) = start_in(dir.path(), &[]).await;
        let s = s.unwrap();
        assert!(
            text.contains("The Muster operator runs inside the sandbox"),
            "{text}"
        );
        let jobs: Api<BatchJob> = Api::namespaced(s.cluster.client(), "default");
        let job: BatchJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
            "metadata": {"name": "hello", "namespace": "default"},
            "spec": {"nodes": 2, "gpusPerNode": 8, "exclusive": true, "script": "echo hello",
                     "template": {"metadata": {"annotations": {RUN_SECONDS: "1"}}}}
        }))
        .unwrap();
        jobs.create(&PostParams::default(), &job).await.unwrap();
        // A 2-node gang under one leaf of the default spec (4 nodes a leaf), then done.
        let mut seen_running = None;
        let mut last = None;
        for _ in 0..300 {
            let st = jobs.get("hello").await.unwrap().status.unwrap_or_default();
            if st.state == Some(JobState::Running) && seen_running.is_none() {
                seen_running = st.node_list.clone();
            }
            if st.state == Some(JobState::Completed) {
                last = st.state;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(
            last,
            Some(JobState::Completed),
            "the job completes: {:?}",
            jobs.get("hello").await.unwrap().status
        );
        // A completed job keeps its node list, as in sacct.
        let done = jobs.get("hello").await.unwrap().status.unwrap().node_list;
        let nodes = hostlist::expand(seen_running.or(done).as_deref().unwrap_or("")).unwrap();
        assert_eq!(nodes.len(), 2, "{nodes:?}");
        s.stop().await;
    }

    /// (A job running for real under `--exec` is `cli/tests/sandbox_exec.rs`: it needs the
    /// cargo-built muster-step.)
    #[tokio::test]
    async fn exec_needs_the_step_binary() {
        let dir = tempfile::tempdir().unwrap();
        let e = start_in(dir.path(), &["--exec", "--step-binary", "missing"])
            .await
            .0
            .err()
            .unwrap();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("muster-step") && msg.contains("--step-binary"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn bad_cluster_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("c.yaml"),
            "nodesPerLeaf: 0\nnode: {cpus: 1, memory: 1}\n",
        )
        .unwrap();
        let e = start_in(dir.path(), &["--cluster", "c.yaml"])
            .await
            .0
            .err()
            .unwrap();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("c.yaml") && msg.contains("nodesPerLeaf"),
            "{msg}"
        );
        let e = start_in(dir.path(), &["--cluster", "missing.yaml"])
            .await
            .0
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("reading cluster spec"), "{e:#}");
    }

    #[test]
    fn speed_must_be_a_positive_factor() {
        assert_eq!(parse_speed("60"), Ok(60.0));
        assert!(parse_speed("0").unwrap_err().contains("speed-up factor"));
        assert!(parse_speed("fast").is_err());
    }
}

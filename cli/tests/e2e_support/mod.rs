//! The test control plane with the real operator, for the CLI's end-to-end suites.
//!
//! The operator is started in-process as the chart deploys it (`muster_e2e::operator`): its
//! own service account, its admission webhooks called by the API server double; no leader
//! election, short cycles. The commands reach the cluster through a kubeconfig file for the
//! user `dana`, as `kubectl muster` would: the API server authenticates her, and admission
//! records her as the submitter.

#![allow(dead_code)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use muster_crds::v1alpha1::{BatchJob, Partition};
use muster_e2e::apiserver::auth::UserInfo;
use muster_e2e::operator::InProcessOperator;
use muster_e2e::{TestCluster, TestClusterOptions};
use muster_operator::controller::{Clock, Settings};
use muster_operator::core::cluster_spec::ClusterSpec;
use serde_json::json;

/// The operator's namespace.
pub const OPERATOR_NS: &str = "muster-system";

/// 2 leaves x 4 nodes x 8 H100 GPUs.
pub const SPEC: &str = "name: e2e
levels:
  - key: muster.dev/leaf
    count: 2
nodesPerLeaf: 4
nodeNamePrefix: gpu
node:
  cpus: 224
  memory: 2Ti
  gpus: 8
  gpuModel: NVIDIA H100 80GB HBM3
  gpuMemoryMib: 81559
  layout: dgx
";

/// How long any wait in these suites may take before the test fails: generous, for CI's
/// 2-core machine running two of these tests (each with its control plane) at a time.
pub const WAIT: Duration = Duration::from_secs(60);

/// A howto script kept in the repository (copies of `../shared/sbatch/`).
pub fn howto(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts/howto")
        .join(name)
}

/// A directory holding `usr/local/bin/muster-step` (a link to the cargo-built binary), as the
/// operator image does.
pub fn step_image() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bin = dir.path().join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_muster-step"), bin.join("muster-step")).unwrap();
    dir
}

/// The test cluster, the operator, and a way to run commands.
pub struct Sim {
    /// The simulated cluster.
    pub cluster: TestCluster,
    operator: Option<InProcessOperator>,
    /// The kubeconfig of the user `dana`, who runs the commands.
    pub kubeconfig: PathBuf,
    /// In exec mode: the directory standing in for the operator image (`muster-step`).
    _step_image: Option<tempfile::TempDir>,
}

impl Sim {
    /// The cluster with the default partition `blackwell` and the operator running.
    pub async fn start() -> Sim {
        Sim::start_with(true).await
    }

    /// The cluster, without the operator when `operator` is false (for `--test-only`, which
    /// must not need one).
    pub async fn start_with(operator: bool) -> Sim {
        Sim::start_opts(operator, None, json!({})).await
    }

    /// The cluster with the operator, in exec mode when `exec` is given (pods run as local
    /// processes), its default partition `blackwell` with `partition` merged into its spec.
    pub async fn start_opts(
        operator: bool,
        exec: Option<muster_e2e::exec::ExecOptions>,
        partition: serde_json::Value,
    ) -> Sim {
        Sim::start_clock(operator, exec, partition, Clock::system()).await
    }

    /// [`Sim::start_opts`] with the operator's clock (a shifted one moves time for it alone).
    pub async fn start_clock(
        operator: bool,
        exec: Option<muster_e2e::exec::ExecOptions>,
        partition: serde_json::Value,
        clock: Clock,
    ) -> Sim {
        if let Ok(f) = std::env::var("MUSTER_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(f))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let spec = ClusterSpec::from_yaml(SPEC).expect("spec");
        let mut opts = TestClusterOptions::new(spec);
        // In exec mode node pods install `muster-step` from the operator image: the cargo-built
        // binary stands in for the image's copy.
        let step_image = exec.as_ref().map(|_| step_image());
        opts.exec = exec.map(|mut e| {
            let dir = step_image.as_ref().unwrap().path().to_path_buf();
            e.images
                .push((muster_cli::sandbox::STEP_IMAGE.to_string(), dir));
            e
        });
        let cluster = TestCluster::simulated(opts)
            .await
            .expect("test cluster starts");
        let client = cluster.client();
        let ns: Namespace = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS}}),
        )
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let mut pspec = json!({"default": true, "defaultImage": "busybox:1.36",
                     "topology": ["muster.dev/leaf", "kubernetes.io/hostname"]});
        for (k, v) in partition.as_object().into_iter().flatten() {
            pspec[k] = v.clone();
        }
        let p: Partition = serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
            "metadata": {"name": "blackwell"}, "spec": pspec}))
        .unwrap();
        Api::<Partition>::all(client.clone())
            .create(&PostParams::default(), &p)
            .await
            .unwrap();
        let _ = client;
        let operator = if operator {
            let mut s = Settings {
                namespace: OPERATOR_NS.into(),
                leader_election: false,
                identity: "cli-e2e".into(),
                cycle_interval: Duration::from_millis(300),
                debounce: Duration::from_millis(5),
                clock,
                ..Settings::default()
            };
            s.plan.status_refresh_secs = 1;
            let server = cluster.api_server().expect("the simulated cluster");
            Some(
                muster_e2e::operator::start(server, s, true)
                    .await
                    .expect("the operator starts with its webhooks"),
            )
        } else {
            None
        };
        let kubeconfig = cluster
            .kubeconfig_for(&UserInfo::new("dana", &["ml-team"]))
            .expect("dana's kubeconfig");
        Sim {
            cluster,
            operator,
            kubeconfig,
            _step_image: step_image,
        }
    }

    /// Run `muster ARGS...` with `--kubeconfig` of the test cluster, as user `dana`, in the
    /// crate directory: (success, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (bool, String, String) {
        self.run_stdin(args, b"").await
    }

    /// [`Sim::run`] with standard input.
    pub async fn run_stdin(&self, args: &[&str], stdin: &[u8]) -> (bool, String, String) {
        let (code, out, err) = self.run_code(args, stdin).await;
        (code == std::process::ExitCode::SUCCESS, out, err)
    }

    /// [`Sim::run_stdin`] with the exit status.
    pub async fn run_code(
        &self,
        args: &[&str],
        stdin: &[u8],
    ) -> (std::process::ExitCode, String, String) {
        self.run_env(args, stdin, &[]).await
    }

    /// [`Sim::run_code`] with `extra` in the submitting environment (what `--export` and
    /// `--container-env` read).
    pub async fn run_env(
        &self,
        args: &[&str],
        stdin: &[u8],
        extra: &[(&str, &str)],
    ) -> (std::process::ExitCode, String, String) {
        self.run_as(&self.kubeconfig, args, stdin, extra).await
    }

    /// [`Sim::run`] as the cluster's administrator (`kubernetes-admin`, in `system:masters`).
    pub async fn run_admin(&self, args: &[&str]) -> (bool, String, String) {
        let (code, out, err) = self.run_as(self.cluster.kubeconfig(), args, b"", &[]).await;
        (code == std::process::ExitCode::SUCCESS, out, err)
    }

    async fn run_as(
        &self,
        kubeconfig: &std::path::Path,
        args: &[&str],
        stdin: &[u8],
        extra: &[(&str, &str)],
    ) -> (std::process::ExitCode, String, String) {
        let mut argv: Vec<OsString> =
            vec!["muster".into(), "--kubeconfig".into(), kubeconfig.into()];
        argv.extend(args.iter().map(OsString::from));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut input = stdin;
        let env = |k: &str| match k {
            "USER" => Some("dana".to_string()),
            "MUSTER_SUBMIT_TIMEOUT" => Some("15".to_string()),
            _ => extra
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string()),
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
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    /// Run `args` (which must succeed) until its output, trimmed at the end, satisfies
    /// `done`; returns that output.
    pub async fn until_output(&self, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            let (ok, out, err) = self.run(args).await;
            assert!(ok, "{args:?}: {err}");
            last = out.trim_end().to_string();
            if done(&last) {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{args:?} still says {last:?} after {WAIT:?}");
    }

    /// Poll `squeue -h -j ID -o FORMAT` until its line satisfies `done`; returns that line.
    pub async fn until_squeue(&self, id: u64, format: &str, done: impl Fn(&str) -> bool) -> String {
        let id = id.to_string();
        self.until_output(&["squeue", "-h", "-j", &id, "-o", format], done)
            .await
    }

    /// Wait until the job's state is `state` (squeue's `%T`).
    pub async fn until_state(&self, id: u64, state: &str) {
        self.until_squeue(id, "%T", |l| l == state).await;
    }

    /// Poll `sacct -P -j IDS -o FIELDS` until `done`; returns the output.
    pub async fn until_sacct(
        &self,
        ids: &str,
        fields: &str,
        done: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            let (ok, out, err) = self.run(&["sacct", "-P", "-j", ids, "-o", fields]).await;
            assert!(ok, "{err}");
            if done(&out) {
                return out;
            }
            last = out;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("sacct -j {ids} still says {last:?} after {WAIT:?}");
    }

    /// The node pods a job's status names, in node order (the batch host's first).
    pub async fn pods_of(&self, id: u64) -> Vec<String> {
        self.pods_where(|j| j.status.as_ref().and_then(|s| s.job_id) == Some(id))
            .await
            .unwrap_or_else(|| panic!("no BatchJob with id {id}"))
    }

    /// The node pods of the first BatchJob `f` picks, in node order (the batch host's first;
    /// empty until it runs), `None` if none.
    pub async fn pods_where(&self, f: impl Fn(&BatchJob) -> bool) -> Option<Vec<String>> {
        let jobs: Api<BatchJob> = Api::namespaced(self.cluster.client(), "default");
        let list = jobs.list(&Default::default()).await.unwrap();
        let job = list.items.into_iter().find(|j| f(j))?;
        let mut tasks = job.status.unwrap_or_default().tasks;
        tasks.sort_by_key(|t| (t.node_rank, t.rank));
        let mut pods: Vec<String> = Vec::new();
        for p in tasks.into_iter().filter_map(|t| t.pod) {
            if !pods.contains(&p) {
                pods.push(p);
            }
        }
        Some(pods)
    }

    /// Waits (up to [`WAIT`]) until the job has pods and every one is `Running`, i.e. created,
    /// bound by kube-scheduler and started by its kubelet; returns them in node order. The
    /// job's status names its pods (and the job is RUNNING) before the operator creates them,
    /// and a pod is briefly `Pending` after it is created even when it binds at once: a test
    /// reads the pods, their nodes or their phase only after this.
    pub async fn until_pods_running(&self, id: u64) -> Vec<k8s_openapi::api::core::v1::Pod> {
        use k8s_openapi::api::core::v1::Pod;
        let api: Api<Pod> = Api::namespaced(self.cluster.client(), "default");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let names = self.pods_of(id).await;
            let mut pods = Vec::new();
            for n in &names {
                // Not found yet: the operator has recorded the name, not created the pod.
                if let Some(p) = api.get_opt(n).await.unwrap()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                {
                    pods.push(p);
                }
            }
            if !names.is_empty() && pods.len() == names.len() {
                return pods;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id}'s pods were never all bound and running: {names:?}\n{}",
                self.describe(id).await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until each of `pods` is gone or being deleted (the operator stops a job's other
    /// node pods when its batch host's ends).
    pub async fn until_stopped(&self, pods: &[String]) {
        use k8s_openapi::api::core::v1::Pod;
        let api: Api<Pod> = Api::namespaced(self.cluster.client(), "default");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let mut live = Vec::new();
            for p in pods {
                if let Some(pod) = api.get_opt(p).await.unwrap()
                    && pod.metadata.deletion_timestamp.is_none()
                {
                    live.push(p.as_str());
                }
            }
            if live.is_empty() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "pods {live:?} still run {WAIT:?} after their job ended"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Make a node pod exit with `code` (the simulated kubelet's `finish_pod`), waiting for
    /// the pod to exist: the operator records an allocation before it creates the pods.
    pub async fn finish(&self, pod: &str, code: u8) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match self.cluster.finish_pod("default", pod, code).await {
                Ok(()) => return,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    panic!("cannot finish pod {pod}: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Run the real `kubectl ARGS...` as `dana` (`admin`: as the cluster's admin, who may
    /// impersonate with `--as`), with `stdin`: (success, stdout, stderr). `None` when kubectl
    /// is not installed (the test then skips, unless `MUSTER_REQUIRE_KUBECTL=1`).
    pub async fn kubectl(
        &self,
        admin: bool,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Option<(bool, String, String)> {
        use std::process::Stdio;
        use tokio::io::AsyncWriteExt;
        let present = std::process::Command::new("kubectl")
            .args(["version", "--client"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !present {
            assert!(
                std::env::var("MUSTER_REQUIRE_KUBECTL").as_deref() != Ok("1"),
                "kubectl is not on PATH and MUSTER_REQUIRE_KUBECTL=1"
            );
            eprintln!("note: kubectl not on PATH; skipping");
            return None;
        }
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = if admin {
            self.cluster.kubeconfig().to_path_buf()
        } else {
            self.kubeconfig.clone()
        };
        let mut child = tokio::process::Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", home.path())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl runs");
        if let Some(input) = stdin {
            let mut s = child.stdin.take().unwrap();
            s.write_all(input.as_bytes()).await.unwrap();
            drop(s);
        }
        let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .expect("kubectl finishes")
            .unwrap();
        Some((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// What a failing wait prints: the job's status and, for each of its node pods, the
    /// pod's phase, address, conditions, container states and every container's log.
    pub async fn describe(&self, id: u64) -> String {
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::LogParams;
        use std::fmt::Write;
        let mut out = String::new();
        let jobs: Api<BatchJob> = Api::namespaced(self.cluster.client(), "default");
        let list = jobs.list(&Default::default()).await.unwrap();
        let Some(job) = list
            .items
            .into_iter()
            .find(|j| j.status.as_ref().and_then(|s| s.job_id) == Some(id))
        else {
            return format!("no BatchJob with id {id}");
        };
        let _ = writeln!(
            out,
            "job {id} status: {}",
            serde_json::to_string(&job.status).unwrap_or_default()
        );
        let pods: Api<Pod> = Api::namespaced(self.cluster.client(), "default");
        for name in self.pods_of(id).await {
            let Ok(p) = pods.get(&name).await else {
                let _ = writeln!(out, "pod {name}: gone");
                continue;
            };
            let _ = writeln!(
                out,
                "pod {name} on {:?}: {}",
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                serde_json::to_string(&p.status).unwrap_or_default()
            );
            let spec = p.spec.unwrap_or_default();
            let containers = spec
                .init_containers
                .unwrap_or_default()
                .into_iter()
                .chain(spec.containers);
            for c in containers {
                let log = pods
                    .logs(
                        &name,
                        &LogParams {
                            container: Some(c.name.clone()),
                            ..Default::default()
                        },
                    )
                    .await
                    .unwrap_or_else(|e| format!("(no log: {e})"));
                let _ = writeln!(out, "--- log of {name}/{}:\n{log}", c.name);
            }
        }
        out
    }

    /// Stop the operator and the cluster.
    pub async fn stop(mut self) {
        if let Some(h) = self.operator.take() {
            let _ = h.shutdown().await;
        }
        self.cluster.shutdown().await;
    }
}

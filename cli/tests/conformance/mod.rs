//! The conformance harness: one BatchJob request run three ways — through the real operator
//! on the test control plane (the allocation and pods it writes), through `muster simulate`
//! (a native trace) and through `sbatch --test-only` — each turned into what a user can see
//! ([`Seen`]), compared with the row's expectation and with each other.
//!
//! What a user sees of a job is read in one place per way: [`World::observe`] (status and
//! pods), [`simulate`] (the jobs CSV), [`test_only`] (sbatch's line). When tasks become one pod
//! per node, only `World::observe` changes.

#![allow(dead_code)]

pub mod rows;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use muster_crds::labels;
use muster_crds::slurm::hostlist;
use muster_crds::v1alpha1::{BatchJob, GpuNode, JobState, Partition};
use muster_e2e::apiserver::auth::UserInfo;
use muster_e2e::{TestCluster, TestClusterOptions};
use muster_operator::controller::metrics::Metrics;
use muster_operator::controller::{self, Clock, Handle, Settings};
use muster_operator::core::cluster_spec::ClusterSpec;
use serde_json::{Value, json};

#[allow(unused_imports)] // e2e_examples uses the harness, not the table.
pub use rows::{Expect, Job, Row, rows};

/// The operator's namespace.
pub const OPERATOR_NS: &str = "muster-system";
/// Where the rows' jobs go.
pub const NS: &str = "default";

/// The suite's cluster: two leaves of two DGX nodes (8 GPUs, 64 CPUs, 512 GiB); gpu004's GPUs
/// are A100s (feature `a100`), gpu002 has feature `bigmem`, every node `ib`.
pub const SPEC: &str = r#"name: conformance
levels:
  - {key: muster.dev/spine, count: 1}
  - {key: muster.dev/leaf, count: 2}
nodesPerLeaf: 2
nodeNamePrefix: gpu
node: {cpus: 64, memory: 512Gi, gpus: 8, gpuModel: NVIDIA H100 80GB HBM3, gpuMemoryMib: 81559, layout: dgx}
labels: {muster.dev/feature.ib: "true"}
overrides:
  - nodes: gpu004
    gpuModel: NVIDIA A100-SXM4-80GB
    gpuMemoryMib: 81920
    labels: {muster.dev/feature.a100: "true"}
  - nodes: gpu002
    labels: {muster.dev/feature.bigmem: "true"}
"#;

/// The partitions: `gpu` (default; preempted jobs are requeued; at most a day) and `urgent`
/// (a higher tier that may preempt `gpu`'s jobs).
pub fn partitions() -> Vec<(String, Value)> {
    let topo = json!([
        "muster.dev/spine",
        "muster.dev/leaf",
        "kubernetes.io/hostname"
    ]);
    vec![
        (
            "gpu".into(),
            json!({"default": true, "defaultImage": "busybox:1.36", "topology": topo,
                   "preemptMode": "Requeue", "graceTimeSeconds": 0, "maxTime": "1-00:00:00"}),
        ),
        (
            "urgent".into(),
            json!({"priorityTier": 10, "defaultImage": "busybox:1.36", "topology": topo,
                   "preemptMode": "None", "graceTimeSeconds": 0}),
        ),
    ]
}

/// How long any wait may take.
pub const WAIT: Duration = Duration::from_secs(30);

/// What a user can see of a job: the same shape from each of the three ways.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// Running: every task by rank, its node and GPU indices (`sbatch --test-only` gives the
    /// nodes only: `tasks` is empty then).
    Running {
        /// The nodes, as a hostlist.
        nodes: String,
        /// `(node, GPUs)` by rank.
        tasks: Vec<(String, Vec<u32>)>,
    },
    /// Not running, with Slurm's reason and its message; `start` is the estimated start in
    /// seconds from now, when one is known.
    Pending {
        /// Reason code.
        reason: String,
        /// Detail.
        message: String,
        /// Estimated start (seconds from now) and the planned nodes.
        start: Option<(i64, String)>,
    },
    /// Ended in this state (COMPLETED, CANCELLED, TIMEOUT, PREEMPTED, …).
    Ended(String),
    /// Refused as written: the error text.
    Refused(String),
}

/// The test control plane (or a real cluster) with the operator, for one row.
pub struct World {
    /// The cluster.
    pub cluster: TestCluster,
    operator: Option<Handle>,
    /// Seconds added to the operator's clock.
    pub offset: Arc<AtomicI64>,
    /// Suite node name → the cluster's (identity on the simulated cluster).
    pub names: BTreeMap<String, String>,
}

impl World {
    /// A fresh simulated cluster with the operator running, or the real cluster named by
    /// `MUSTER_E2E_KUBECONFIG` (whose operator runs in the cluster).
    pub async fn start() -> World {
        World::start_with(SPEC, partitions()).await
    }

    /// [`World::start`] on another cluster spec (YAML) with other partitions.
    pub async fn start_with(spec_yaml: &str, partitions: Vec<(String, Value)>) -> World {
        if let Ok(f) = std::env::var("MUSTER_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(f))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let spec = ClusterSpec::from_yaml(spec_yaml).expect("spec");
        let cluster = TestCluster::start_with(TestClusterOptions::new(spec.clone()))
            .await
            .expect("test cluster starts");
        let client = cluster.client();
        let offset = Arc::new(AtomicI64::new(0));
        let names = if cluster.is_simulated() {
            spec.nodes()
                .unwrap()
                .into_iter()
                .map(|n| (n.name.clone(), n.name))
                .collect()
        } else {
            real_cluster_names(&cluster, &spec).await
        };
        let world = World {
            operator: None,
            offset: offset.clone(),
            names,
            cluster,
        };
        let ns: Namespace = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS}}),
        )
        .unwrap();
        let _ = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await;
        for (name, spec) in partitions {
            let p: Partition = serde_json::from_value(json!({
                "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
                "metadata": {"name": name}, "spec": world.cluster_names(&spec)}))
            .unwrap();
            // On a real cluster the chart's `gpu` partition may exist already.
            let _ = Api::<Partition>::all(client.clone())
                .create(&PostParams::default(), &p)
                .await;
        }
        let mut world = world;
        if world.cluster.is_simulated() {
            let mut s = Settings {
                namespace: OPERATOR_NS.into(),
                leader_election: false,
                identity: "conformance".into(),
                cycle_interval: Duration::from_millis(200),
                debounce: Duration::from_millis(5),
                clock: Clock::shifted(offset),
                ..Settings::default()
            };
            s.plan.status_refresh_secs = 1;
            world.operator = Some(controller::start(client, s, Metrics::new()));
        }
        world
    }

    /// Stops the operator and the cluster.
    pub async fn stop(mut self) {
        if let Some(h) = self.operator.take() {
            let _ = h.shutdown().await;
        }
        self.cluster.shutdown().await;
    }

    /// Moves the operator's clock `secs` ahead (simulated cluster only).
    pub fn shift(&self, secs: i64) {
        self.offset.fetch_add(secs, Ordering::SeqCst);
    }

    /// A value with the suite's node names replaced by the cluster's.
    pub fn cluster_names(&self, v: &Value) -> Value {
        rename(v, &self.names)
    }

    /// A text with the cluster's node names replaced by the suite's.
    pub fn suite_names(&self, s: &str) -> String {
        let back: BTreeMap<String, String> = self
            .names
            .iter()
            .map(|(a, b)| (b.clone(), a.clone()))
            .collect();
        match rename(&Value::String(s.to_string()), &back) {
            Value::String(s) => s,
            _ => unreachable!(),
        }
    }

    /// `muster ARGS...` against the cluster as user `user`: (success, stdout, stderr).
    pub async fn muster(&self, user: &str, args: &[&str]) -> (bool, String, String) {
        // As that user: who submits comes from the API server (SelfSubjectReview), as on a
        // real cluster; a real cluster's kubeconfig is whoever it names.
        let kubeconfig = if self.cluster.is_simulated() {
            self.cluster
                .kubeconfig_for(&UserInfo::new(user, &[]))
                .expect("a kubeconfig for the user")
        } else {
            self.cluster.kubeconfig().to_path_buf()
        };
        let mut argv: Vec<OsString> =
            vec!["muster".into(), "--kubeconfig".into(), kubeconfig.into()];
        argv.extend(args.iter().map(OsString::from));
        run_cli(argv, user).await
    }

    fn jobs(&self) -> Api<BatchJob> {
        Api::namespaced(self.cluster.client(), NS)
    }

    /// Creates `job` as `kubectl apply` would, as its user; `Err` is the API server's refusal.
    pub async fn submit(&self, job: &Job) -> Result<(), String> {
        let mut spec = self.cluster_names(&job.spec);
        let mut template = json!({"spec": {"containers": [{"name": "task"}]}});
        if let Some(t) = spec.get("template") {
            template = t.clone();
        }
        // The simulated kubelet (and the test script on a real node) run the task this long.
        let env = template["spec"]["containers"][0]
            .get("env")
            .cloned()
            .unwrap_or(json!([]));
        let mut env = env.as_array().cloned().unwrap_or_default();
        env.push(json!({"name": "MUSTER_SIM_RUN_SECONDS",
                        "value": job.runtime.unwrap_or(100_000).to_string()}));
        template["spec"]["containers"][0]["env"] = Value::Array(env);
        spec["template"] = template;
        if spec.get("script").is_none() {
            spec["script"] = json!(
                "trap 'exit 143' TERM; sleep \"${MUSTER_SIM_RUN_SECONDS:-100000}\" & wait $!"
            );
        }
        let obj = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
            "metadata": {"name": job.name, "namespace": NS,
                         "annotations": {labels::USER: job.user}},
            "spec": spec});
        let bj: BatchJob = match serde_json::from_value(obj.clone()) {
            Ok(b) => b,
            // What the typed client cannot even build still goes to the server as JSON.
            Err(_) => {
                return self.submit_raw(obj).await;
            }
        };
        self.jobs()
            .create(&PostParams::default(), &bj)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    async fn submit_raw(&self, obj: Value) -> Result<(), String> {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.cluster.client(),
            NS,
            &kube::api::ApiResource::erase::<BatchJob>(&()),
        );
        let o: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
        api.create(&PostParams::default(), &o)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The BatchJob, if it exists.
    pub async fn job(&self, name: &str) -> Option<BatchJob> {
        self.jobs().get_opt(name).await.unwrap()
    }

    /// **The** observation of a job on the cluster: its state from the BatchJob's status,
    /// each rank's node and GPUs from the allocation (`status.tasks`).
    pub async fn observe(&self, name: &str) -> Option<Seen> {
        let j = self.job(name).await?;
        let st = j.status.clone()?;
        let state = st.state?;
        // A spec the operator cannot run ends FAILED with reason InvalidSpec (the message
        // names the field): to the user, refused as written.
        if st.reason.as_deref() == Some("InvalidSpec") {
            return Some(Seen::Refused(st.message.clone().unwrap_or_default()));
        }
        Some(match state {
            JobState::Running => {
                let mut tasks = st.tasks.clone();
                tasks.sort_by_key(|t| t.rank);
                Seen::Running {
                    nodes: self.suite_names(st.node_list.as_deref().unwrap_or("")),
                    tasks: tasks
                        .iter()
                        .map(|t| (self.suite_names(&t.node), t.gpus.clone()))
                        .collect(),
                }
            }
            JobState::Pending => {
                let start = st
                    .start_time
                    .as_ref()
                    .map(|t| (t.0.as_second() - self.now(), String::new()));
                Seen::Pending {
                    reason: st.reason.clone().unwrap_or_default(),
                    message: st.message.clone().unwrap_or_default(),
                    start,
                }
            }
            s => Seen::Ended(s.as_str().to_string()),
        })
    }

    /// The environment of each node pod's main container (what the batch step sees), by node
    /// index.
    pub async fn env(&self, name: &str) -> BTreeMap<u32, BTreeMap<String, String>> {
        let pods = Api::<Pod>::namespaced(self.cluster.client(), NS)
            .list(&ListParams::default().labels(&format!("{}={name}", labels::BATCHJOB)))
            .await
            .unwrap();
        let mut out = BTreeMap::new();
        for p in pods.items {
            let Some(rank) = p
                .labels()
                .get(labels::NODE_RANK)
                .and_then(|r| r.parse().ok())
            else {
                continue;
            };
            let c = &p.spec.as_ref().unwrap().containers[0];
            let mut env: BTreeMap<String, String> = c
                .env
                .iter()
                .flatten()
                .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
                .collect();
            // The image, working directory and mounts of the job's container, for the rows
            // about pyxis's options.
            env.insert("(image)".into(), c.image.clone().unwrap_or_default());
            env.insert(
                "(workingDir)".into(),
                c.working_dir.clone().unwrap_or_default(),
            );
            for m in c.volume_mounts.iter().flatten() {
                env.insert(format!("(mount {})", m.mount_path), m.name.clone());
            }
            // The command the task runs, for rows about the script.
            env.insert(
                "(command)".into(),
                c.command
                    .iter()
                    .flatten()
                    .chain(c.args.iter().flatten())
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            let env = env
                .into_iter()
                .map(|(k, v)| (k, self.suite_names(&v)))
                .collect();
            out.insert(rank, env);
        }
        out
    }

    /// The operator's now (seconds since the epoch).
    pub fn now(&self) -> i64 {
        jiff::Timestamp::now().as_second() + self.offset.load(Ordering::SeqCst)
    }

    /// Waits until `f` accepts the job's observation; returns it (or panics with the last).
    pub async fn until(&self, name: &str, what: &str, f: impl Fn(&Seen) -> bool) -> Seen {
        let deadline = tokio::time::Instant::now() + self.wait();
        let mut last = None;
        while tokio::time::Instant::now() < deadline {
            if let Some(s) = self.observe(name).await {
                if f(&s) {
                    return s;
                }
                last = Some(s);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{name}: still {last:?} after {:?}, waiting for {what}",
            self.wait()
        );
    }

    fn wait(&self) -> Duration {
        if self.cluster.is_simulated() {
            WAIT
        } else {
            WAIT * 6
        }
    }

    /// Every object `muster sbatch --test-only` reads, for the library estimate of a
    /// BatchJob no sbatch option can express.
    pub async fn test_only_job(&self, job: &Job) -> Seen {
        use muster_cli::sbatch::test_only::{self, World as TestWorld};
        let mut spec = self.cluster_names(&job.spec);
        // Something to run, as `submit` gives it.
        if spec.get("script").is_none() && spec.get("template").is_none() {
            spec["script"] = json!("true");
        }
        let bj: BatchJob = match serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
            "metadata": {"name": job.name, "namespace": NS,
                         "annotations": {labels::USER: job.user}},
            "spec": spec}))
        {
            Ok(b) => b,
            Err(e) => return Seen::Refused(e.to_string()),
        };
        let c = self.cluster.client();
        let partitions = Api::<Partition>::all(c.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let nodes = Api::<Node>::all(c.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let gpunodes = Api::<GpuNode>::all(c.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let jobs = Api::<BatchJob>::all(c)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let world = TestWorld {
            partitions: &partitions,
            nodes: &nodes,
            gpunodes: &gpunodes,
            jobs: &jobs,
            usage: None,
            volume_claims: &[],
        };
        let now = self.now();
        match test_only::estimate(&bj, world, now) {
            Ok(e) => {
                let nodes = self.suite_names(&e.nodes);
                if e.start <= now + 2 {
                    Seen::Running {
                        nodes,
                        tasks: Vec::new(),
                    }
                } else {
                    Seen::Pending {
                        reason: String::new(),
                        message: String::new(),
                        start: Some((e.start - now, nodes)),
                    }
                }
            }
            Err(e) => test_only_error(&e.to_string()),
        }
    }
}

/// The suite's node names matched with a real cluster's GPU nodes, in natural order; the
/// suite's feature labels are put on them (their GPU models cannot be changed).
async fn real_cluster_names(cluster: &TestCluster, spec: &ClusterSpec) -> BTreeMap<String, String> {
    let mut real: Vec<&str> = cluster
        .nodes()
        .iter()
        .filter(|n| !n.gpus.is_empty())
        .map(|n| n.name.as_str())
        .collect();
    real.sort_by(|a, b| muster_operator::core::util::natural_cmp(a, b));
    let ours = spec.nodes().unwrap();
    assert!(
        real.len() >= ours.len(),
        "the conformance suite needs {} GPU nodes in two leaves; the cluster has {}",
        ours.len(),
        real.len()
    );
    let api: Api<Node> = Api::all(cluster.client());
    let mut map = BTreeMap::new();
    for (o, r) in ours.iter().zip(real) {
        let features: serde_json::Map<String, Value> = o
            .labels
            .iter()
            .filter(|(k, _)| k.starts_with("muster.dev/feature."))
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        api.patch(
            r,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": features}})),
        )
        .await
        .expect("label a node");
        map.insert(o.name.clone(), r.to_string());
    }
    map
}

/// Replaces node names (whole words) in every string of `v`.
fn rename(v: &Value, names: &BTreeMap<String, String>) -> Value {
    if names.iter().all(|(a, b)| a == b) {
        return v.clone();
    }
    match v {
        Value::String(s) => {
            // Hostlists are expanded, renamed and compressed again.
            if let Ok(list) = hostlist::expand(s)
                && !list.is_empty()
                && list.iter().all(|n| names.contains_key(n))
            {
                return Value::String(hostlist::compress(list.iter().map(|n| &names[n])));
            }
            let mut out = s.clone();
            for (a, b) in names {
                out = out.replace(a.as_str(), b);
            }
            Value::String(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| rename(x, names)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), rename(x, names)))
                .collect(),
        ),
        other => other.clone(),
    }
}

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

fn test_only_error(e: &str) -> Seen {
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

/// One simulated job's outcome, read from `jobs-muster.csv`.
#[derive(Clone, Debug, Default)]
pub struct SimJob {
    /// Submit (seconds on the replay's clock, which starts at the first submit).
    pub submit: i64,
    /// Start (seconds on the replay's clock).
    pub start: Option<i64>,
    /// End.
    pub end: Option<i64>,
    /// Final state.
    pub state: String,
    /// The nodes.
    pub nodes: String,
    /// `(node, GPUs)` by rank.
    pub tasks: Vec<(String, Vec<u32>)>,
    /// Reason or rejection text.
    pub reason: String,
    /// The pending message.
    pub message: String,
    /// Times requeued.
    pub requeues: u32,
}

/// Runs `muster simulate` on the suite's cluster with `trace` (native YAML); per trace job
/// id, its outcome — or the error text when the trace is refused.
pub async fn simulate(dir: &Path, trace: &Value) -> Result<BTreeMap<String, SimJob>, String> {
    let tfile = dir.join("trace.yaml");
    let cfile = dir.join("cluster.yaml");
    let out = dir.join("out");
    std::fs::write(&tfile, serde_yaml::to_string(trace).unwrap()).unwrap();
    std::fs::write(&cfile, SPEC).unwrap();
    let argv: Vec<OsString> = [
        "muster",
        "simulate",
        "--trace",
        tfile.to_str().unwrap(),
        "--cluster",
        cfile.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--time-limit",
        "UNLIMITED",
        "--interval",
        "0",
        "--no-progress",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let (ok, _, err) = run_cli(argv, "dana").await;
    if !ok {
        return Err(err);
    }
    let text = std::fs::read_to_string(out.join("jobs-muster.csv")).unwrap();
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let mut jobs = BTreeMap::new();
    let headers = r.headers().unwrap().clone();
    let col = |row: &csv::StringRecord, name: &str| -> String {
        let i = headers.iter().position(|h| h == name).unwrap();
        row[i].to_string()
    };
    for row in r.records() {
        let row = row.unwrap();
        let tasks = col(&row, "tasks")
            .split_whitespace()
            .map(|t| {
                let (n, g) = t.split_once(':').unwrap();
                let gpus = g
                    .split(',')
                    .filter(|x| !x.is_empty())
                    .map(|x| x.parse().unwrap())
                    .collect();
                (n.to_string(), gpus)
            })
            .collect();
        jobs.insert(
            col(&row, "job"),
            SimJob {
                submit: col(&row, "submit").parse().unwrap_or(0),
                start: col(&row, "start").parse().ok(),
                end: col(&row, "end").parse().ok(),
                state: col(&row, "state"),
                nodes: col(&row, "nodelist"),
                tasks,
                reason: col(&row, "reason"),
                message: col(&row, "message"),
                requeues: col(&row, "requeues").parse().unwrap_or(0),
            },
        );
    }
    Ok(jobs)
}

/// The simulator's trace of a row: the partitions, the background jobs at second 0, the
/// row's job at second 1 (once they run), the later jobs at second 5.
pub fn trace(row: &Row) -> Value {
    let entry = |j: &Job, submit: i64, default_runtime: u64| {
        json!({"name": j.name, "user": j.user, "submit": submit,
               "runtime": j.runtime.unwrap_or(default_runtime), "spec": j.spec})
    };
    let mut jobs: Vec<Value> = row
        .background
        .iter()
        .map(|j| entry(j, 0, 100_000))
        .collect();
    jobs.push(entry(&row.job, 1, 1000));
    jobs.extend(row.later.iter().map(|j| entry(j, 5, 1000)));
    json!({
        "partitions": partitions()
            .into_iter()
            .map(|(n, s)| json!({"name": n, "spec": s}))
            .collect::<Vec<_>>(),
        "jobs": jobs,
    })
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

/// Runs one row three ways and checks each against the expectation and the others.
pub async fn run_row(row: &Row) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    // --- sbatch reads the row's options as its spec ---
    if let Some(args) = &row.job.sbatch {
        match (sbatch_spec(args, row.job.user).await, &row.expect) {
            (Ok(spec), _) => {
                let mut want = row.job.spec.clone();
                if let Some(j) = want.get("jobName").cloned() {
                    want.as_object_mut().unwrap().remove("jobName");
                    let _ = j;
                }
                if spec != want {
                    return Err(format!(
                        "sbatch {args:?} gives spec {spec} but the row is {want}"
                    ));
                }
            }
            (Err(e), Expect::Refused { field, .. }) if e.contains(field) => {}
            (Err(e), _) => return Err(format!("sbatch {args:?} refused: {e}")),
        }
    }
    // --- the simulator ---
    let sim = simulate(tmp.path(), &trace(row)).await;
    // --- the operator, and sbatch --test-only on the cluster it runs ---
    let w = World::start().await;
    let r = operator_and_test_only(&w, row, &sim).await;
    w.stop().await;
    r
}

fn matches_nodes(got: &str, want: &str) -> bool {
    hostlist::expand(got).ok() == hostlist::expand(want).ok()
}

async fn operator_and_test_only(
    w: &World,
    row: &Row,
    sim: &Result<BTreeMap<String, SimJob>, String>,
) -> Result<(), String> {
    for b in &row.background {
        w.submit(b)
            .await
            .map_err(|e| format!("background {}: {e}", b.name))?;
        if b.queued {
            w.until(b.name, "queued", |s| matches!(s, Seen::Pending { reason, .. } if !reason.is_empty() && reason != "None"))
                .await;
        } else {
            w.until(b.name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
        }
    }
    // sbatch --test-only, before the job exists.
    let test_only = match &row.job.sbatch {
        Some(args) => {
            let mut a: Vec<&str> = vec!["sbatch", "--test-only"];
            a.extend(args.iter().copied());
            a.push("--wrap=true");
            let now = w.now();
            let (ok, _, err) = w.muster(row.job.user, &a).await;
            test_only_line(ok, &err, now, w)
        }
        None => w.test_only_job(&row.job).await,
    };
    let submitted = w.submit(&row.job).await;
    let sim_job = |name: &str| -> Result<SimJob, String> {
        match sim {
            Ok(m) => m
                .get(name)
                .cloned()
                .ok_or_else(|| format!("simulate: no job {name} in {m:?}")),
            Err(e) => Err(format!("simulate refused the trace: {e}")),
        }
    };
    let name = row.job.name;
    let waiting = |s: &Seen| matches!(s, Seen::Pending { reason, .. } if !reason.is_empty() && reason != "None");
    match &row.expect {
        Expect::Runs { nodes, ranks, env } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w
                .until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            let Seen::Running { nodes: got, tasks } = &seen else {
                unreachable!()
            };
            if !matches_nodes(got, nodes) {
                return Err(format!("operator: runs on {got}, expected {nodes}"));
            }
            if let Some(r) = ranks {
                let want: Vec<(String, Vec<u32>)> =
                    r.iter().map(|(n, g)| (n.to_string(), g.clone())).collect();
                if *tasks != want {
                    return Err(format!("operator: ranks {tasks:?}, expected {want:?}"));
                }
            }
            let s = sim_job(name)?;
            if s.start != Some(s.submit) || !matches_nodes(&s.nodes, nodes) || s.tasks != *tasks {
                return Err(format!(
                    "simulate: start {:?} on {} with {:?}; the operator: {got} with {tasks:?}",
                    s.start, s.nodes, s.tasks
                ));
            }
            match &test_only {
                Seen::Running { nodes: t, .. } if matches_nodes(t, nodes) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}, expected to start now on {nodes}"
                    ));
                }
            }
            if !env.is_empty() {
                let deadline = tokio::time::Instant::now() + WAIT;
                loop {
                    let e = w.env(name).await;
                    let missing: Vec<String> = env
                        .iter()
                        .filter(|(rank, k, v)| {
                            e.get(rank).and_then(|m| m.get(*k)).map(String::as_str) != Some(*v)
                        })
                        .map(|(rank, k, v)| {
                            format!(
                                "node {rank} {k}={v} (has {:?})",
                                e.get(rank).and_then(|m| m.get(*k))
                            )
                        })
                        .collect();
                    if missing.is_empty() {
                        break;
                    }
                    if tokio::time::Instant::now() > deadline {
                        return Err(format!("operator pods: {missing:?}"));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        Expect::Waits { reason, words } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w.until(name, "a pending reason", waiting).await;
            let Seen::Pending {
                reason: r, message, ..
            } = &seen
            else {
                return Err(format!("operator: {seen:?}"));
            };
            if r != reason || !message.contains(words) {
                return Err(format!(
                    "operator: {r}: {message}; expected {reason} with {words:?}"
                ));
            }
            // It stays so: a few more cycles do not start it (an estimate, counted from now,
            // may read a second less).
            tokio::time::sleep(Duration::from_millis(600)).await;
            let again = w.observe(name).await;
            let still = matches!(&again, Some(Seen::Pending { reason: r2, message: m2, .. })
                if r2 == r && m2 == message);
            if !still {
                return Err(format!("operator: {seen:?} then {again:?}"));
            }
            let s = sim_job(name)?;
            let sim_reason = s.reason.split(':').next().unwrap_or("").to_string();
            if s.start.is_some() || sim_reason != *reason || s.message != *message {
                return Err(format!(
                    "simulate: {} {:?} reason {:?} message {:?}; the operator: {r}: {message}",
                    s.state, s.start, s.reason, s.message
                ));
            }
            match &test_only {
                Seen::Pending {
                    reason: tr,
                    message: tm,
                    ..
                } if tr == reason && tm == message => {}
                // As Slurm's --test-only: a job waiting for its --begin gets the begin time
                // as its start, the operator's estimate too (scontrol's StartTime=).
                Seen::Pending {
                    start: Some((ts, _)),
                    ..
                } if *reason == "BeginTime"
                    && matches!(&seen, Seen::Pending { start: Some((os, _)), .. }
                        if (ts - os).abs() <= 2) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}; the operator: {r}: {message}"
                    ));
                }
            }
        }
        Expect::Infeasible { words } => {
            // The cycle's reason for an admitted job is the submission check's text.
            let message = match submitted {
                // A real cluster's operator refuses it at admission (webhook).
                Err(e) if e.contains(words) => {
                    let at = e.find(words).unwrap_or(0);
                    e[at..].trim_end_matches(')').to_string()
                }
                Err(e) => return Err(format!("operator: refused: {e}; expected {words:?}")),
                Ok(()) => {
                    let seen = w.until(name, "a pending reason", waiting).await;
                    match &seen {
                        Seen::Pending {
                            reason: r, message, ..
                        } if r == "BadConstraints" && message.contains(words) => message.clone(),
                        other => {
                            return Err(format!(
                                "operator: {other:?}; expected BadConstraints with {words:?}"
                            ));
                        }
                    }
                }
            };
            let s = sim_job(name)?;
            if s.start.is_some() || !s.reason.starts_with("BadConstraints") || s.message != message
            {
                return Err(format!(
                    "simulate: {} {:?} reason {:?} message {:?}; the operator: {message}",
                    s.state, s.start, s.reason, s.message
                ));
            }
            match &test_only {
                Seen::Refused(t)
                    if t.contains("Job submit/allocate failed") && t.contains(message.as_str()) => {
                }
                other => {
                    return Err(format!(
                        "test-only: {other:?}; expected refused with {message:?}"
                    ));
                }
            }
        }
        Expect::RunsAfterWait { secs, nodes } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w.until(name, "waiting", waiting).await;
            if !matches!(&seen, Seen::Pending { reason, .. } if reason == "Resources") {
                return Err(format!("operator: {seen:?} before the wait is over"));
            }
            tokio::time::sleep(Duration::from_millis(600)).await;
            if let Some(Seen::Running { .. }) = w.observe(name).await {
                return Err("operator: started before its wait was over".into());
            }
            w.shift(*secs + 1);
            let seen = w
                .until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            let Seen::Running { nodes: got, .. } = &seen else {
                unreachable!()
            };
            if !matches_nodes(got, nodes) {
                return Err(format!("operator: runs on {got}, expected {nodes}"));
            }
            let s = sim_job(name)?;
            if s.start != Some(s.submit + secs) || !matches_nodes(&s.nodes, nodes) {
                return Err(format!("simulate: start {:?} on {}", s.start, s.nodes));
            }
            match &test_only {
                Seen::Pending {
                    start: Some((t, n)),
                    ..
                } if (t - secs).abs() <= 3 && matches_nodes(n, nodes) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}, expected +{secs}s on {nodes}"
                    ));
                }
            }
        }
        Expect::RunsFirstWhenFreed { nodes, rival } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w
                .until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            let Seen::Running { nodes: got, .. } = &seen else {
                unreachable!()
            };
            if !matches_nodes(got, nodes) {
                return Err(format!("operator: runs on {got}, expected {nodes}"));
            }
            let r = w.observe(rival).await;
            if !matches!(r, Some(Seen::Pending { .. })) {
                return Err(format!(
                    "operator: the rival is {r:?} while the row's job runs"
                ));
            }
            let s = sim_job(name)?;
            let sr = sim_job(rival)?;
            if !(s.start.is_some_and(|t| t > s.submit) && matches_nodes(&s.nodes, nodes))
                || sr.start.is_some_and(|t| Some(t) < s.end)
            {
                return Err(format!(
                    "simulate: the row starts {:?} on {} (ends {:?}), the rival starts {:?}",
                    s.start, s.nodes, s.end, sr.start
                ));
            }
            match &test_only {
                Seen::Pending {
                    start: Some((t, n)),
                    ..
                } if *t > 0 && matches_nodes(n, nodes) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}, expected a later start on {nodes}"
                    ));
                }
            }
        }
        Expect::RunsAfterDependency { nodes } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w
                .until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            let Seen::Running { nodes: got, .. } = &seen else {
                unreachable!()
            };
            if !matches_nodes(got, nodes) {
                return Err(format!("operator: runs on {got}, expected {nodes}"));
            }
            let first = w.observe(row.background[0].name).await;
            if first != Some(Seen::Ended("COMPLETED".into())) {
                return Err(format!(
                    "operator: started while its dependency is {first:?}"
                ));
            }
            let s = sim_job(name)?;
            let b = sim_job(row.background[0].name)?;
            if !(s.start.is_some_and(|t| b.end.is_some_and(|e| t >= e))
                && matches_nodes(&s.nodes, nodes))
            {
                return Err(format!(
                    "simulate: starts {:?} on {} (dependency ends {:?})",
                    s.start, s.nodes, b.end
                ));
            }
            match &test_only {
                Seen::Running { .. } | Seen::Pending { start: Some(_), .. } => {}
                other => return Err(format!("test-only: {other:?}, expected an estimate")),
            }
        }
        Expect::Held { nodes } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let seen = w.until(name, "held", waiting).await;
            let Seen::Pending {
                reason, message, ..
            } = &seen
            else {
                unreachable!()
            };
            if reason != "JobHeldUser" {
                return Err(format!("operator: {reason}: {message}"));
            }
            tokio::time::sleep(Duration::from_millis(600)).await;
            if w.observe(name).await.as_ref() != Some(&seen) {
                return Err("operator: a held job changed".into());
            }
            let s = sim_job(name)?;
            if s.start.is_some() || s.reason != "JobHeldUser" || s.message != *message {
                return Err(format!(
                    "simulate: {s:?}; the operator: {reason}: {message}"
                ));
            }
            match &test_only {
                Seen::Running { nodes: t, .. } if matches_nodes(t, nodes) => {}
                other => {
                    return Err(format!(
                        "test-only: {other:?}, expected {nodes} once released"
                    ));
                }
            }
        }
        Expect::Ends {
            shift,
            state,
            sim: sim_state,
        } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            if *shift > 0 {
                w.until(name, "running", |s| matches!(s, Seen::Running { .. }))
                    .await;
                w.shift(*shift);
            }
            w.until(name, state, |s| *s == Seen::Ended(state.to_string()))
                .await;
            let s = sim_job(name)?;
            if s.state != *sim_state {
                return Err(format!("simulate: {}, expected {sim_state}", s.state));
            }
            match (&test_only, *state) {
                (Seen::Pending { reason, .. }, "CANCELLED") if reason == "Cancelled" => {}
                (Seen::Running { .. }, s) if s != "CANCELLED" => {}
                (other, _) => return Err(format!("test-only: {other:?}")),
            }
        }
        Expect::Preempted { requeued } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            w.until(name, "running", |s| matches!(s, Seen::Running { .. }))
                .await;
            for l in &row.later {
                w.submit(l)
                    .await
                    .map_err(|e| format!("later {}: {e}", l.name))?;
            }
            if *requeued {
                w.until(name, "requeued", |s| matches!(s, Seen::Pending { .. }))
                    .await;
                let restarts = w
                    .job(name)
                    .await
                    .and_then(|j| j.status)
                    .and_then(|s| s.restarts)
                    .unwrap_or(0);
                if restarts == 0 {
                    return Err("operator: pending again without a restart".into());
                }
            } else {
                w.until(name, "PREEMPTED", |s| *s == Seen::Ended("PREEMPTED".into()))
                    .await;
            }
            let s = sim_job(name)?;
            let ok = if *requeued {
                s.requeues > 0
            } else {
                s.state == "PREEMPTED"
            };
            if !ok {
                return Err(format!(
                    "simulate: {} after {} requeues",
                    s.state, s.requeues
                ));
            }
            if !matches!(test_only, Seen::Running { .. }) {
                return Err(format!("test-only: {test_only:?}"));
            }
        }
        Expect::Array { total, running } => {
            submitted.map_err(|e| format!("operator: refused: {e}"))?;
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let mut states = Vec::new();
                for i in 0..*total {
                    states.push(w.observe(&format!("{name}-{i}")).await);
                }
                let run = states
                    .iter()
                    .filter(|s| matches!(s, Some(Seen::Running { .. })))
                    .count();
                // What squeue shows of the indices not started: one pending record held back
                // by the throttle (`123_[2-3%2] PENDING JobArrayTaskLimit`).
                let (_, q, _) = w.muster("dana", &["squeue", "-h", "-o", "%i|%T|%r"]).await;
                let want = format!(
                    "_[{}-{}%{running}]|PENDING|JobArrayTaskLimit",
                    running,
                    total - 1
                );
                if run as u32 == *running && q.lines().any(|l| l.ends_with(&want)) {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!("operator: elements {states:?}, squeue {q:?}"));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut at_once = 0;
            for i in 0..*total {
                let s = sim_job(&format!("{name}_{i}"))?;
                if s.start == Some(s.submit) {
                    at_once += 1;
                } else if s.start.is_none() {
                    return Err(format!("simulate: element {i} never ran: {s:?}"));
                }
            }
            if at_once != *running {
                return Err(format!("simulate: {at_once} elements started together"));
            }
            if !matches!(test_only, Seen::Running { .. }) {
                return Err(format!("test-only: {test_only:?}"));
            }
        }
        Expect::Refused { field, words } => {
            let op = match submitted {
                Err(e) => e,
                Ok(()) => match w
                    .until(name, "refused", |s| matches!(s, Seen::Refused(_)))
                    .await
                {
                    Seen::Refused(m) => m,
                    _ => unreachable!(),
                },
            };
            if !op.contains(field) || !op.contains(words) {
                return Err(format!(
                    "operator: {op:?} does not name {field} and {words:?}"
                ));
            }
            match sim {
                Err(e) if e.contains(field) => {}
                other => return Err(format!("simulate: {other:?}")),
            }
            match &test_only {
                Seen::Refused(m) if m.contains(field) => {}
                other => return Err(format!("test-only: {other:?}")),
            }
        }
    }
    Ok(())
}

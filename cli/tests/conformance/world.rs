//! The operator's way: the test control plane (or a real cluster) with the operator running,
//! jobs submitted to it and what a user sees of them ([`World::observe`]).

use super::*;

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

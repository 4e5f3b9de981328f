//! Reference objects of a job run the Slurm way — one pod per allocated node, the batch
//! script on the first, `srun` steps through the node daemons — exactly as the step
//! runtime's contract asks (see `muster_cli::step`, "The contract with the operator"): the
//! credential Secret, the headless Service, and each node's pod (host name and subdomain
//! under the Service, a DNS search path for the short node names, an init container that
//! installs `muster-step` from the operator image, the credential mounted, the batch step's
//! environment). The suites create these by hand to drive the runtime on the test control
//! plane in exec mode; the operator must build the same.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use muster_crds::slurm::hostlist;
use serde_json::{Value, json};

/// Where the init container installs the step binary (and the main container finds it).
pub use muster_crds::step::BIN_DIR;
/// The step binary's path in the operator image.
pub use muster_crds::step::IMAGE_BINARY;
/// Where the credential is mounted.
pub use muster_crds::step::KEY_DIR;
/// The daemons' port.
pub const PORT: u16 = muster_crds::step::DEFAULT_PORT;
/// Label selecting a job's node pods.
pub const JOB_LABEL: &str = muster_crds::labels::BATCHJOB;

/// One allocated node of the job.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeShare {
    /// The Kubernetes node (pods are pinned by required node affinity, never `nodeName`).
    pub node: String,
    /// Tasks on it.
    pub tasks: u32,
    /// CPUs of the job on it.
    pub cpus: u32,
    /// The job's GPUs on it, as `MUSTER_NODE_GPUS` entries (`{"index":0,"uuid":…}`).
    pub gpus: Vec<Value>,
}

/// A job to run.
#[derive(Clone, Debug, PartialEq)]
pub struct StepJob {
    /// BatchJob name (pods `<name>-<i>`, Service `<name>`).
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Slurm job id.
    pub job_id: u64,
    /// Allocated nodes, in node order.
    pub nodes: Vec<NodeShare>,
    /// The batch script (run with bash on node 0).
    pub script: String,
    /// The user's image (ignored in exec mode but kept as a real pod would).
    pub image: String,
    /// The operator image (holds `muster-step` at [`IMAGE_BINARY`]).
    pub step_image: String,
    /// `--cpus-per-task`, `--gpus-per-task`, `--ntasks-per-node` when given.
    pub cpus_per_task: Option<u32>,
    /// GPUs per task.
    pub gpus_per_task: Option<u32>,
    /// Tasks per node as requested.
    pub ntasks_per_node: Option<u32>,
    /// Extra environment of the main container (the template's env).
    pub env: Vec<(String, String)>,
    /// The credential (hex).
    pub key: String,
    /// Pod `terminationGracePeriodSeconds`.
    pub grace_seconds: i64,
    /// Extra volumes (`volumes` entries) and their mounts in the main container.
    pub volumes: Vec<(Value, Value)>,
    /// The cluster domain.
    pub cluster_domain: String,
    /// Host names of the node pods (default `<name>-<i>`).
    pub hosts: Option<Vec<String>>,
}

impl StepJob {
    /// A job named `name` in `namespace` over `nodes`.
    pub fn new(name: &str, namespace: &str, nodes: Vec<NodeShare>, script: &str) -> StepJob {
        StepJob {
            name: name.into(),
            namespace: namespace.into(),
            job_id: 1,
            nodes,
            script: script.into(),
            image: "debian:bookworm".into(),
            step_image: "ghcr.io/muster-dev/muster-operator:0.1.0".into(),
            cpus_per_task: None,
            gpus_per_task: None,
            ntasks_per_node: None,
            env: Vec::new(),
            key: "0123456789abcdef0123456789abcdef".into(),
            grace_seconds: 30,
            volumes: Vec::new(),
            cluster_domain: "cluster.local".into(),
            hosts: None,
        }
    }

    /// Node `i`'s host name (its name in `SLURM_JOB_NODELIST`).
    pub fn host(&self, i: usize) -> String {
        match self.hosts.as_ref().and_then(|h| h.get(i)) {
            Some(h) => h.clone(),
            None => format!("{}-{i}", self.name),
        }
    }

    /// Node `i`'s pod name.
    pub fn pod_name(&self, i: usize) -> String {
        format!("{}-{i}", self.name)
    }

    /// `SLURM_JOB_NODELIST`.
    pub fn nodelist(&self) -> String {
        hostlist::compress((0..self.nodes.len()).map(|i| self.host(i)))
    }

    fn counts(v: &[u32]) -> String {
        muster_operator::controller::pods::tasks_per_node(v)
    }

    /// The credential Secret.
    pub fn secret(&self) -> Secret {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{}-step", self.name), "namespace": self.namespace,
                         "labels": {JOB_LABEL: self.name}},
            "type": "Opaque",
            "stringData": {"key": self.key},
        }))
        .expect("secret")
    }

    /// The headless Service.
    pub fn service(&self) -> Service {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {JOB_LABEL: self.name}},
            "spec": {"clusterIP": "None", "selector": {JOB_LABEL: self.name},
                     "publishNotReadyAddresses": true},
        }))
        .expect("service")
    }

    /// The environment of node `i`'s main container (the batch step's on node 0).
    pub fn env(&self, i: usize) -> Vec<Value> {
        let tasks: Vec<u32> = self.nodes.iter().map(|n| n.tasks).collect();
        let cpus: Vec<u32> = self.nodes.iter().map(|n| n.cpus).collect();
        let ntasks: u32 = tasks.iter().sum();
        let node = &self.nodes[i];
        let mut e: BTreeMap<&str, String> = BTreeMap::new();
        let id = self.job_id.to_string();
        let nl = self.nodelist();
        e.insert("SLURM_JOB_ID", id.clone());
        e.insert("SLURM_JOBID", id);
        e.insert("SLURM_JOB_NAME", self.name.clone());
        e.insert("SLURM_JOB_NODELIST", nl.clone());
        e.insert("SLURM_NODELIST", nl);
        e.insert("SLURM_JOB_NUM_NODES", self.nodes.len().to_string());
        e.insert("SLURM_NNODES", self.nodes.len().to_string());
        e.insert("SLURM_NTASKS", ntasks.to_string());
        e.insert("SLURM_NPROCS", ntasks.to_string());
        e.insert("SLURM_TASKS_PER_NODE", Self::counts(&tasks));
        e.insert("SLURM_JOB_CPUS_PER_NODE", Self::counts(&cpus));
        e.insert("SLURM_NODEID", i.to_string());
        e.insert("SLURM_PROCID", "0".into());
        e.insert("SLURM_LOCALID", "0".into());
        e.insert("SLURMD_NODENAME", self.host(i));
        e.insert("SLURM_CPUS_ON_NODE", node.cpus.to_string());
        e.insert("SLURM_SUBMIT_DIR", "/".into());
        e.insert("MUSTER_STEP_PORT", PORT.to_string());
        e.insert("MUSTER_STEP_KEY_FILE", format!("{KEY_DIR}/key"));
        if let Some(c) = self.cpus_per_task {
            e.insert("SLURM_CPUS_PER_TASK", c.to_string());
        }
        if let Some(g) = self.gpus_per_task {
            e.insert("SLURM_GPUS_PER_TASK", g.to_string());
        }
        if let Some(t) = self.ntasks_per_node {
            e.insert("SLURM_NTASKS_PER_NODE", t.to_string());
        }
        if !node.gpus.is_empty() {
            let mut idx: Vec<u64> = node
                .gpus
                .iter()
                .filter_map(|g| g["index"].as_u64())
                .collect();
            idx.sort_unstable();
            let join = |v: Vec<String>| v.join(",");
            e.insert("SLURM_GPUS_ON_NODE", idx.len().to_string());
            e.insert(
                "SLURM_JOB_GPUS",
                join(idx.iter().map(u64::to_string).collect()),
            );
            e.insert(
                "CUDA_VISIBLE_DEVICES",
                join((0..idx.len()).map(|i| i.to_string()).collect()),
            );
            e.insert("MUSTER_NODE_GPUS", json!({"gpus": node.gpus}).to_string());
        }
        let mut out: Vec<Value> = e
            .into_iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        out.push(json!({"name": "MUSTER_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}));
        for (k, v) in &self.env {
            out.push(json!({"name": k, "value": v}));
        }
        out
    }

    /// Node `i`'s pod.
    pub fn pod(&self, i: usize) -> Pod {
        let mut command = vec![format!("{BIN_DIR}/muster-step"), "node".to_string()];
        if i == 0 {
            command.extend([
                "--batch".into(),
                "--".into(),
                "/bin/bash".into(),
                "-c".into(),
                // Kubernetes expands $(VAR) and turns $$ into $ in command and args: escape
                // every $ so the script reaches bash as written.
                self.script.replace('$', "$$"),
                "bash".into(),
            ]);
        }
        let mut volumes = vec![
            json!({"name": "muster-bin", "emptyDir": {}}),
            json!({"name": "muster-step-key", "secret": {"secretName": format!("{}-step", self.name),
                "defaultMode": 0o400, "items": [{"key": "key", "path": "key"}]}}),
        ];
        let mut mounts = vec![
            json!({"name": "muster-bin", "mountPath": BIN_DIR}),
            json!({"name": "muster-step-key", "mountPath": KEY_DIR, "readOnly": true}),
        ];
        for (v, m) in &self.volumes {
            volumes.push(v.clone());
            mounts.push(m.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.pod_name(i), "namespace": self.namespace,
                         "labels": {JOB_LABEL: self.name, muster_crds::labels::NODE_RANK: i.to_string()}},
            "spec": {
                "hostname": self.host(i),
                "subdomain": self.name,
                "dnsConfig": {"searches": [format!("{}.{}.svc.{}", self.name, self.namespace, self.cluster_domain)]},
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": self.grace_seconds,
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                        "operator": "In", "values": [self.nodes[i].node]}]}]}}},
                "volumes": volumes,
                "initContainers": [{
                    "name": "muster-step-install", "image": self.step_image,
                    "command": [IMAGE_BINARY, "install", BIN_DIR],
                    "volumeMounts": [{"name": "muster-bin", "mountPath": BIN_DIR}],
                }],
                "containers": [{
                    "name": "node", "image": self.image,
                    "command": command,
                    "env": self.env(i),
                    "volumeMounts": mounts,
                }],
            }
        }))
        .expect("pod")
    }

    /// Every pod, in node order.
    pub fn pods(&self) -> Vec<Pod> {
        (0..self.nodes.len()).map(|i| self.pod(i)).collect()
    }
}

//! Running jobs the Slurm way on the test control plane in exec mode: node pods built as the
//! operator will build them (`muster_e2e::stepjob`), with the cargo-built `muster-step`
//! standing in for the operator image's copy.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use kube::api::{Api, LogParams, PostParams};
use kube::runtime::wait::await_condition;
use muster_e2e::exec::ExecOptions;
use muster_e2e::stepjob::{NodeShare, StepJob};
use muster_e2e::{TestCluster, TestClusterOptions};
use muster_operator::core::cluster_spec::ClusterSpec;
use serde_json::json;

/// Four 8-CPU nodes with 4 GPUs each (two NVLink pairs on two NUMA nodes).
pub const SPEC: &str = r#"
name: step
levels:
  - {key: muster.dev/spine, count: 1}
  - {key: muster.dev/leaf, count: 2}
nodesPerLeaf: 2
node: {cpus: 8, memory: 32Gi, gpus: 4, gpuModel: NVIDIA H100 80GB HBM3, gpuMemoryMib: 81559, layout: dgx}
"#;

/// The operator image's name (its prefix: any tag).
pub const OPERATOR_IMAGE: &str = "ghcr.io/muster-dev/muster-operator";

/// A test cluster in exec mode whose operator image carries the cargo-built `muster-step`.
pub struct Env {
    pub cluster: TestCluster,
    _image: tempfile::TempDir,
}

pub async fn start() -> Env {
    start_with(Path::new(env!("CARGO_BIN_EXE_muster-step")), &[]).await
}

/// A test cluster in exec mode whose operator image carries `step`. With `empty_images`
/// (image name prefixes), the operator image holds only `/usr/local/bin/muster-step` and
/// those images no program and no library, only an `/etc/nsswitch.conf` whose host lookup
/// names `files` and a service they lack (`muster-step` must not depend on what an image's
/// name service setup is); else containers see the host's files.
pub async fn start_with(step: &Path, empty_images: &[&str]) -> Env {
    let image = tempfile::tempdir().unwrap();
    let op = image.path().join("operator");
    let bin = op.join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mut exec = ExecOptions::default();
    if empty_images.is_empty() {
        std::os::unix::fs::symlink(step, bin.join("muster-step")).unwrap();
        exec.images = vec![(OPERATOR_IMAGE.into(), op)];
    } else {
        // A copy: a link would name a host path the container cannot see.
        std::fs::copy(step, bin.join("muster-step")).unwrap();
        exec.root_images = vec![(OPERATOR_IMAGE.into(), op)];
        for (i, prefix) in empty_images.iter().enumerate() {
            let dir = image.path().join(format!("empty{i}"));
            std::fs::create_dir_all(dir.join("etc")).unwrap();
            std::fs::write(dir.join("etc/nsswitch.conf"), "hosts: files resolve\n").unwrap();
            exec.root_images.push((prefix.to_string(), dir));
        }
    }
    let mut o = TestClusterOptions::new(ClusterSpec::from_yaml(SPEC).unwrap());
    o.exec = Some(exec);
    let cluster = TestCluster::simulated(o).await.expect("exec-mode cluster");
    Env {
        cluster,
        _image: image,
    }
}

impl Env {
    /// `n` node shares of `tasks` tasks, `tasks` CPUs and `gpus` GPUs each.
    pub fn nodes(&self, n: usize, tasks: u32, gpus: usize) -> Vec<NodeShare> {
        self.cluster.nodes()[..n]
            .iter()
            .map(|info| NodeShare {
                node: info.name.clone(),
                tasks,
                cpus: tasks,
                gpus: info.gpus[..gpus]
                    .iter()
                    .map(|g| {
                        json!({"index": g.index, "uuid": g.uuid, "model": g.model,
                                     "numa": g.numa_node, "nvlinkPeers": g.nvlink_peers})
                    })
                    .collect(),
            })
            .collect()
    }

    pub async fn namespace(&self, name: &str) -> String {
        let api: Api<Namespace> = Api::all(self.cluster.client());
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
        name.to_string()
    }

    /// Creates the job's Secret, Service and node pods.
    pub async fn submit(&self, job: &StepJob) {
        let c = self.cluster.client();
        Api::<Secret>::namespaced(c.clone(), &job.namespace)
            .create(&PostParams::default(), &job.secret())
            .await
            .unwrap();
        Api::<Service>::namespaced(c.clone(), &job.namespace)
            .create(&PostParams::default(), &job.service())
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(c, &job.namespace);
        for p in job.pods() {
            pods.create(&PostParams::default(), &p).await.unwrap();
        }
    }

    pub fn pods(&self, job: &StepJob) -> Api<Pod> {
        Api::namespaced(self.cluster.client(), &job.namespace)
    }

    /// Waits for pod `name` to finish; returns it.
    pub async fn finished(&self, job: &StepJob, name: &str, secs: u64) -> Pod {
        let api = self.pods(job);
        let cond = |p: Option<&Pod>| {
            p.is_some_and(|p| {
                matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            })
        };
        match tokio::time::timeout(
            Duration::from_secs(secs),
            await_condition(api.clone(), name, cond),
        )
        .await
        {
            Ok(Ok(Some(p))) => p,
            other => {
                let logs = self.all_logs(job).await;
                panic!("{name} did not finish in {secs} s ({other:?}); logs:\n{logs}")
            }
        }
    }

    pub async fn log(&self, job: &StepJob, pod: &str, container: &str) -> String {
        self.pods(job)
            .logs(
                pod,
                &LogParams {
                    container: Some(container.into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_default()
    }

    pub async fn all_logs(&self, job: &StepJob) -> String {
        let mut out = String::new();
        for i in 0..job.nodes.len() {
            for c in ["muster-step-install", "node"] {
                out.push_str(&format!(
                    "--- {} {c}\n{}",
                    job.pod_name(i),
                    self.log(job, &job.pod_name(i), c).await
                ));
            }
        }
        out
    }

    /// Runs `job` to the end of its batch step: (exit code of the batch host, its log).
    pub async fn run(&self, job: &StepJob, secs: u64) -> (i32, String) {
        self.submit(job).await;
        let p = self.finished(job, &job.pod_name(0), secs).await;
        let code = exit_code(&p);
        let log = self.log(job, &job.pod_name(0), "node").await;
        // The other nodes' daemons stop when the batch step ends.
        for i in 1..job.nodes.len() {
            let o = self.finished(job, &job.pod_name(i), 20).await;
            assert_eq!(
                exit_code(&o),
                0,
                "node {i} ends cleanly; logs:\n{}",
                self.all_logs(job).await
            );
        }
        (code, log)
    }
}

pub fn exit_code(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code)
        .unwrap_or(-1)
}

/// The lines of `s`, sorted (task output interleaves in any order).
pub fn sorted(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// Lines of `s` between `== name` and the next `== ` marker.
pub fn section(s: &str, name: &str) -> String {
    let mut out = String::new();
    let mut on = false;
    for l in s.lines() {
        if let Some(n) = l.strip_prefix("== ") {
            on = n == name;
            continue;
        }
        if on {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

pub fn tmp_path(d: &tempfile::TempDir) -> PathBuf {
    d.path().to_path_buf()
}

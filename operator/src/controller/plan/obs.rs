//! Observed task pods: phase, exit, allocation.

use super::*;

/// A pod's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not yet running (unscheduled, pulling images, …).
    Pending,
    /// Running.
    Running,
    /// Every container exited 0.
    Succeeded,
    /// A container failed, or the pod was failed by the node.
    Failed,
    /// The kubelet stopped reporting.
    Unknown,
}

/// How a failed task ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The container's exit code.
    pub code: i32,
    /// The signal that killed it, if any (the runtime's, or `code - 128`).
    pub signal: Option<i32>,
}

/// What the planner needs of one task pod. Cached for every pod of every job (25,000 at
/// 16,384 nodes), so its strings are kept in one allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct PodObs {
    /// Namespace, name, job, controller owner's UID (empty when absent, see `has_owner`),
    /// failure (see `has_failure`).
    pub(super) strs: Packed<5>,
    pub(super) has_owner: bool,
    pub(super) has_failure: bool,
    /// Admission attempt (label `muster.dev/attempt`).
    pub attempt: Option<u32>,
    /// The node's index in the job (label `muster.dev/node-rank`; node 0 runs the batch
    /// script).
    pub node: Option<u32>,
    /// Phase.
    pub phase: Phase,
    /// Deletion requested.
    pub deleting: bool,
    /// For a failed pod whose task container exited: how.
    pub exit: Option<Exit>,
    /// Failed before its task container started: an init container (the step binary's
    /// install) failed. The failure says which and how.
    pub init_failed: bool,
    /// The allocation the pod records (annotation `muster.dev/task`), the part read.
    pub alloc: Option<PodAlloc>,
    /// The signal requests the pod carries (annotation `muster.dev/signals`, copied from its
    /// BatchJob): absent on nearly every pod.
    pub signals: Option<Box<str>>,
    /// When the time limit ends as the pod was last told (annotation `muster.dev/end-time`,
    /// set for jobs with `--signal`).
    pub end_time: Option<Box<str>>,
}

/// What the planner reads of the allocation a pod records: where its resources are held. The
/// annotation also names each GPU's UUID and the ranks; left out of the cache, as 8 UUIDs are
/// most of a cached pod (25,000 node pods: ~15 MiB).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAlloc {
    /// The Node.
    pub node: Box<str>,
    /// GPU indices on the node.
    #[serde(default)]
    pub gpus: Box<[u32]>,
    /// CPUs (millicores).
    #[serde(default)]
    pub cpu_millis: u64,
    /// Memory (MiB).
    #[serde(default)]
    pub memory_mib: u64,
}

impl PodObs {
    /// Reads a pod (labels, annotations, owner, the first container's name and the status
    /// are what is used).
    pub fn from_pod(p: &Pod) -> Option<PodObs> {
        PodObs::from_task_pod(&TaskPod::from_pod(p))
    }

    /// Reads a [`TaskPod`] (what the pod watch decodes; the pod store keeps the result).
    pub fn from_task_pod(p: &TaskPod) -> Option<PodObs> {
        let job = p.labels().get(labels::BATCHJOB)?.as_str();
        let num = |k: &str| p.labels().get(k).and_then(|v| v.parse::<u32>().ok());
        let st = p.status.as_ref();
        let phase = match st.and_then(|s| s.phase.as_deref()) {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            Some("Unknown") => Phase::Unknown,
            _ => Phase::Pending,
        };
        let main = p
            .spec
            .as_ref()
            .and_then(|s| s.containers.as_deref())
            .and_then(|c| c.first())
            .map(|c| c.name.as_str());
        let statuses = st
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or(&[]);
        let term = |c: &TaskContainerStatus| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
                .cloned()
        };
        let exit = if phase == Phase::Failed {
            let chosen = statuses
                .iter()
                .find(|c| Some(c.name.as_str()) == main && term(c).is_some())
                .or_else(|| {
                    statuses
                        .iter()
                        .find(|c| term(c).is_some_and(|t| t.exit_code != 0))
                })
                .and_then(term);
            chosen.map(|t| Exit {
                code: t.exit_code,
                signal: t.signal.or_else(|| {
                    (t.exit_code > 128 && t.exit_code <= 128 + 64).then(|| t.exit_code - 128)
                }),
            })
        } else {
            None
        };
        // An init container that failed (the pod never reached its task container): how.
        let init_failure = (phase == Phase::Failed && exit.is_none())
            .then(|| {
                st.and_then(|s| s.init_container_statuses.as_deref())
                    .unwrap_or(&[])
                    .iter()
                    .find_map(|c| {
                        term(c)
                            .filter(|t| t.exit_code != 0)
                            .map(|t| (c.name.clone(), t))
                    })
            })
            .flatten();
        let failure = (phase == Phase::Failed).then(|| {
            if let Some((name, t)) = &init_failure {
                let how = [t.reason.as_deref(), t.message.as_deref()]
                    .into_iter()
                    .flatten()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(": ");
                let mut m = format!("init container {name} exited with code {}", t.exit_code);
                if !how.is_empty() {
                    m.push_str(&format!(" ({how})"));
                }
                return m;
            }
            let r = st.and_then(|s| s.reason.clone()).unwrap_or_default();
            let m = st.and_then(|s| s.message.clone()).unwrap_or_default();
            match (r.is_empty(), m.is_empty()) {
                (true, true) => "pod failed".to_string(),
                (false, true) => r,
                (true, false) => m,
                (false, false) => format!("{r}: {m}"),
            }
        });
        let owner = p
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.as_str());
        Some(PodObs {
            attempt: num(labels::ATTEMPT),
            node: num(labels::NODE_RANK),
            phase,
            deleting: p.metadata.deletion_timestamp.is_some(),
            exit,
            init_failed: init_failure.is_some(),
            alloc: p
                .annotations()
                .get(pods::TASK_ANNOTATION)
                .and_then(|a| serde_json::from_str(a).ok()),
            signals: p
                .annotations()
                .get(muster_crds::signals::ANNOTATION)
                .map(|v| v.as_str().into()),
            end_time: p
                .annotations()
                .get(muster_crds::step::END_TIME_ANNOTATION)
                .map(|v| v.as_str().into()),
            ..PodObs::new(
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default(),
                job,
                owner,
                failure.as_deref(),
            )
        })
    }

    /// A Pending pod of `job` with these names and nothing else known.
    pub fn new(
        namespace: &str,
        name: &str,
        job: &str,
        owner_uid: Option<&str>,
        failure: Option<&str>,
    ) -> PodObs {
        PodObs {
            strs: Packed::new([
                namespace,
                name,
                job,
                owner_uid.unwrap_or_default(),
                failure.unwrap_or_default(),
            ]),
            has_owner: owner_uid.is_some(),
            has_failure: failure.is_some(),
            attempt: None,
            node: None,
            phase: Phase::Pending,
            deleting: false,
            exit: None,
            init_failed: false,
            alloc: None,
            signals: None,
            end_time: None,
        }
    }

    /// Namespace.
    pub fn namespace(&self) -> &str {
        self.strs.get(0)
    }

    /// Pod name.
    pub fn name(&self) -> &str {
        self.strs.get(1)
    }

    /// Its BatchJob's name (label `muster.dev/batchjob`).
    pub fn job(&self) -> &str {
        self.strs.get(2)
    }

    /// UID of its controller owner.
    pub fn owner_uid(&self) -> Option<&str> {
        self.has_owner.then(|| self.strs.get(3))
    }

    /// For a failed pod: the pod's reason and message.
    pub fn failure(&self) -> Option<&str> {
        self.has_failure.then(|| self.strs.get(4))
    }

    /// Still holds its node's resources (not Succeeded or Failed).
    pub fn live(&self) -> bool {
        !matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }
}

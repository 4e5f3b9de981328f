//! The reflector's view of a task pod: only the fields the planner reads.
//!
//! A `k8s_openapi` `Pod` is several kilobytes even when its optional parts are `None` (the
//! spec and status structs are stored inline), which at 50,000 cached pods is most of the
//! operator's memory. The pod watch decodes straight into [`TaskPod`] instead: serde skips
//! every field not named here, so nothing else is ever allocated. Even that is still ~2 KB a
//! pod (an `ObjectMeta`, label and annotation maps), so the reflector does not keep it:
//! each watch event is read at once into the planner's [`PodObs`] (a few hundred bytes) and
//! the pod store holds those ([`slim_event`], and [`kube::runtime::reflector::Lookup`] for `PodObs`).

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;
use serde::{Deserialize, Serialize};

use super::compact::cached_lookup;
use super::plan::PodObs;

/// A task pod as cached: metadata (trimmed by the reflector), the first container's name and
/// the status fields that say how a task ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskPod {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// The spec, reduced to container names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<TaskPodSpec>,
    /// The status, reduced to phase, reason, message and how containers ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskPodStatus>,
}

/// The part of a pod spec the planner reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskPodSpec {
    /// Containers, by name only (the first is the task's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containers: Option<Vec<ContainerName>>,
}

/// A container's name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerName {
    /// The name.
    #[serde(default)]
    pub name: String,
}

/// The part of a pod status the planner reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the pod is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Per-container: how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<TaskContainerStatus>>,
    /// Per init container (the step binary's install): how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<TaskContainerStatus>>,
}

/// How one container ended (current and last state, terminated part only).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskContainerStatus {
    /// Container name.
    #[serde(default)]
    pub name: String,
    /// Current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Terminated>,
    /// Previous state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_state: Option<Terminated>,
}

/// A container state, terminated part only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Terminated {
    /// Set once the container exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ContainerStateTerminated>,
}

impl TaskPod {
    /// The fields of a full pod that a [`TaskPod`] keeps.
    pub fn from_pod(p: &Pod) -> TaskPod {
        TaskPod {
            metadata: p.metadata.clone(),
            spec: p.spec.as_ref().map(|s| TaskPodSpec {
                containers: Some(
                    s.containers
                        .iter()
                        .map(|c| ContainerName {
                            name: c.name.clone(),
                        })
                        .collect(),
                ),
            }),
            status: p.status.as_ref().map(|s| TaskPodStatus {
                phase: s.phase.clone(),
                reason: s.reason.clone(),
                message: s.message.clone(),
                container_statuses: s.container_statuses.as_deref().map(ended),
                init_container_statuses: s.init_container_statuses.as_deref().map(ended),
            }),
        }
    }
}

/// How each container ended, as a [`TaskPod`] keeps it.
fn ended(cs: &[ContainerStatus]) -> Vec<TaskContainerStatus> {
    cs.iter()
        .map(|c| TaskContainerStatus {
            name: c.name.clone(),
            state: c.state.as_ref().map(|s| Terminated {
                terminated: s.terminated.clone(),
            }),
            last_state: c.last_state.as_ref().map(|s| Terminated {
                terminated: s.terminated.clone(),
            }),
        })
        .collect()
}

impl kube::Resource for TaskPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

cached_lookup!(PodObs, "Pod", "", "v1", "pods", |o| name: Some(o.name()), namespace: Some(o.namespace()));

/// A pod watch event as the pod store keeps it: the pod read into a [`PodObs`]. A pod the
/// planner cannot read (no `muster.dev/batchjob` label, which the watch's selector already
/// excludes) yields no event.
pub fn slim_event(ev: Event<TaskPod>) -> Option<Event<PodObs>> {
    Some(match ev {
        Event::Apply(p) => Event::Apply(PodObs::from_task_pod(&p)?),
        Event::Delete(p) => Event::Delete(PodObs::from_task_pod(&p)?),
        Event::Init => Event::Init,
        Event::InitApply(p) => Event::InitApply(PodObs::from_task_pod(&p)?),
        Event::InitDone => Event::InitDone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_from_a_pod_and_keeps_less_than_a_pod() {
        let full = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1", "containers": [{"name": "task", "image": "img",
                "env": [{"name": "RANK", "value": "0"}]}]},
            "status": {"phase": "Failed", "reason": "Evicted", "podIP": "10.0.0.1",
                "initContainerStatuses": [{"name": "install", "image": "op", "imageID": "y",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                "containerStatuses": [{"name": "task", "image": "img", "imageID": "x",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 3}}, "lastState": {}}]}});
        let tp: TaskPod = serde_json::from_value(full.clone()).unwrap();
        let pod: Pod = serde_json::from_value(full).unwrap();
        assert_eq!(tp, TaskPod::from_pod(&pod));
        let cs = &tp
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        assert_eq!(
            cs.state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            3
        );
        assert!(std::mem::size_of::<TaskPod>() * 4 < std::mem::size_of::<Pod>());
    }
}

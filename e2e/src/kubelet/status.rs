//! What the kubelet writes about a pod: the status patch of each phase, container IDs and
//! image digests as containerd reports them.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::pod::SimPod;
use crate::exec::ContainerEnd;

fn hex64(s: &str) -> String {
    let mut out = String::with_capacity(64);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0..4u64 {
        for b in s.bytes().chain(round.to_le_bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

fn image_id(image: &str) -> String {
    let base = image.split('@').next().unwrap_or(image);
    let repo = base
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .map_or(base, |(r, _)| r);
    let full = if repo.contains('/') {
        if repo
            .split('/')
            .next()
            .is_some_and(|h| h.contains('.') || h.contains(':'))
        {
            repo.to_string()
        } else {
            format!("docker.io/{repo}")
        }
    } else {
        format!("docker.io/library/{repo}")
    };
    format!("{full}@sha256:{}", hex64(base))
}

pub(super) fn cond(
    t: &str,
    status: bool,
    now: Timestamp,
    reason: Option<&str>,
    message: Option<&str>,
) -> Value {
    let mut c = json!({"type": t, "status": if status { "True" } else { "False" },
        "lastProbeTime": null, "lastTransitionTime": Time(now)});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

impl SimPod {
    fn container_id(&self, name: &str, restart: u32) -> String {
        format!(
            "containerd://{}",
            hex64(&format!("{}/{name}/{restart}", self.uid))
        )
    }

    fn init_statuses(&self) -> Value {
        if let Some(inits) = self.exec.as_ref().and_then(|e| e.inits.as_ref()) {
            return json!(self
                .init_containers
                .iter()
                .enumerate()
                .map(|(i, (n, image))| {
                    let id = self.container_id(n, 0);
                    match inits.get(i) {
                        Some(e) => json!({
                            "name": n, "image": image, "imageID": image_id(image),
                            "containerID": id, "ready": e.code == 0, "started": false, "restartCount": 0,
                            "state": {"terminated": end_json(e, &id)}
                        }),
                        None => json!({
                            "name": n, "image": image, "imageID": "", "ready": false, "started": false,
                            "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}
                        }),
                    }
                })
                .collect::<Vec<_>>());
        }
        json!(self
            .init_containers
            .iter()
            .map(|(n, image)| json!({
                "name": n, "image": image, "imageID": image_id(image),
                "containerID": self.container_id(n, 0), "ready": true, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": Time(self.start_time), "finishedAt": Time(self.start_time),
                    "containerID": self.container_id(n, 0)}}
            }))
            .collect::<Vec<_>>())
    }

    fn last_state(&self) -> Value {
        match &self.last {
            None => json!({}),
            Some(e) => json!({"terminated": {
                "exitCode": e.code, "reason": if e.code == 0 { "Completed" } else { "Error" },
                "startedAt": Time(e.started), "finishedAt": Time(e.finished),
                "containerID": self.container_id(&self.containers.first().map(|c| c.0.clone()).unwrap_or_default(), self.restarts.saturating_sub(1))}}),
        }
    }

    fn ips(&self, host_ip: &str) -> Value {
        let ip = self.ip.clone().unwrap_or_else(|| host_ip.to_string());
        json!({"hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": Time(self.start_time)})
    }

    fn not_ready(&self) -> String {
        let names: Vec<&str> = self.containers.iter().map(|c| c.0.as_str()).collect();
        format!("containers with unready status: [{}]", names.join(" "))
    }

    /// Status patch for containers running since `started`.
    pub(super) fn running(&self, host_ip: &str, started: Timestamp, now: Timestamp) -> Value {
        let mut st = self.ips(host_ip);
        st["phase"] = json!("Running");
        st["conditions"] = json!([
            cond("PodReadyToStartContainers", true, now, None, None),
            cond("Initialized", true, now, None, None),
            cond("Ready", true, now, None, None),
            cond("ContainersReady", true, now, None, None),
        ]);
        st["containerStatuses"] = json!(
            self.containers
                .iter()
                .map(|(n, image)| json!({
                    "name": n, "image": image, "imageID": image_id(image),
                    "containerID": self.container_id(n, self.restarts),
                    "ready": true, "started": true, "restartCount": self.restarts,
                    "state": {"running": {"startedAt": Time(started)}},
                    "lastState": self.last_state(),
                }))
                .collect::<Vec<_>>()
        );
        if !self.init_containers.is_empty() {
            st["initContainerStatuses"] = self.init_statuses();
        }
        json!({ "status": st })
    }

    /// Status patch for a container waiting to restart after `e`.
    pub(super) fn backoff(&self, host_ip: &str, backoff: f64, now: Timestamp) -> Value {
        let mut st = self.ips(host_ip);
        st["phase"] = json!("Running");
        let msg = self.not_ready();
        st["conditions"] = json!([
            cond("PodReadyToStartContainers", true, now, None, None),
            cond("Initialized", true, now, None, None),
            cond("Ready", false, now, Some("ContainersNotReady"), Some(&msg)),
            cond(
                "ContainersReady",
                false,
                now,
                Some("ContainersNotReady"),
                Some(&msg)
            ),
        ]);
        st["containerStatuses"] = json!(self
            .containers
            .iter()
            .map(|(n, image)| json!({
                "name": n, "image": image, "imageID": image_id(image),
                "containerID": self.container_id(n, self.restarts),
                "ready": false, "started": false, "restartCount": self.restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off {}s restarting failed container={n} pod={}_{}({})", backoff as u64, self.name, self.ns, self.uid)}},
                "lastState": self.last_state(),
            }))
            .collect::<Vec<_>>());
        json!({ "status": st })
    }

    /// Status patch for a finished pod: containers exited with `code` (`None`: never ran).
    pub(super) fn terminated(
        &self,
        host_ip: &str,
        code: Option<i32>,
        started: Option<Timestamp>,
        now: Timestamp,
    ) -> Value {
        let mut st = self.ips(host_ip);
        let ok = code == Some(0);
        st["phase"] = json!(if ok { "Succeeded" } else { "Failed" });
        let init_failed = self.exec.as_ref().is_some_and(|e| e.init_failed);
        st["conditions"] = json!([
            cond("PodReadyToStartContainers", false, now, None, None),
            if init_failed {
                cond(
                    "Initialized",
                    false,
                    now,
                    Some("ContainersNotInitialized"),
                    None,
                )
            } else {
                cond("Initialized", true, now, None, None)
            },
            cond("Ready", false, now, Some("PodCompleted"), None),
            cond("ContainersReady", false, now, Some("PodCompleted"), None),
        ]);
        let exec_ends = self.exec.as_ref().and_then(|e| e.ends.as_ref());
        st["containerStatuses"] = json!(self
            .containers
            .iter()
            .enumerate()
            .map(|(i, (n, image))| {
                if let Some(e) = exec_ends.and_then(|ends| ends.get(i)) {
                    let id = self.container_id(n, self.restarts);
                    let state = match &e.waiting {
                        Some(w) => json!({"waiting": {"reason": w}}),
                        None => json!({"terminated": end_json(e, &id)}),
                    };
                    return json!({
                        "name": n, "image": image, "imageID": image_id(image),
                        "containerID": id, "ready": false, "started": false,
                        "restartCount": self.restarts, "state": state,
                        "lastState": self.last_state(),
                    });
                }
                let term = match code {
                    Some(c) => json!({"exitCode": c, "reason": if c == 0 { "Completed" } else { "Error" },
                        "startedAt": Time(started.unwrap_or(now)), "finishedAt": Time(now),
                        "containerID": self.container_id(n, self.restarts)}),
                    None => json!({"exitCode": 137, "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "startedAt": null, "finishedAt": null}),
                };
                json!({
                    "name": n, "image": image, "imageID": image_id(image),
                    "containerID": self.container_id(n, self.restarts),
                    "ready": false, "started": false, "restartCount": self.restarts,
                    "state": {"terminated": term},
                    "lastState": self.last_state(),
                })
            })
            .collect::<Vec<_>>());
        if !self.init_containers.is_empty() {
            st["initContainerStatuses"] = self.init_statuses();
        }
        json!({ "status": st })
    }
}

/// The `terminated` state of a container that ended in exec mode.
fn end_json(e: &ContainerEnd, id: &str) -> Value {
    let mut t = json!({"exitCode": e.code, "reason": e.reason,
        "startedAt": e.started.map(Time), "finishedAt": e.finished.map(Time)});
    if e.reason != "ContainerStatusUnknown" {
        t["containerID"] = json!(id);
    }
    if let Some(m) = &e.message {
        t["message"] = json!(m);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_ids_look_like_containerd() {
        assert!(image_id("busybox:1.36").starts_with("docker.io/library/busybox@sha256:"));
        assert!(
            image_id("nvcr.io/nvidia/pytorch:24.01").starts_with("nvcr.io/nvidia/pytorch@sha256:")
        );
        assert!(image_id("team/app").starts_with("docker.io/team/app@sha256:"));
        assert_eq!(hex64("x").len(), 64);
    }
}

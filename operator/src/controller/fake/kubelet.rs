//! The kubelet and garbage-collector stand-in: pods run and end by their template's `sim/`
//! annotations, deleted objects go once their finalizers and pods are gone.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
};
use kube::ResourceExt;
use muster_crds::labels;

use super::{FakeCluster, ts};
use crate::controller::translate;

impl FakeCluster {
    /// The kubelet and the garbage collector, at time `now`.
    pub fn tick(&self, now: i64) {
        let mut s = self.lock();
        s.now = now;
        // GC: jobs being deleted without finalizers go; their pods and elements follow.
        let gone: Vec<(String, String)> = s
            .jobs
            .iter()
            .filter(|(_, j)| j.metadata.deletion_timestamp.is_some() && j.finalizers().is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            s.jobs.remove(&k);
        }
        let uids: BTreeSet<String> = s.jobs.values().filter_map(|j| j.uid()).collect();
        let orphans: Vec<(String, String)> = s
            .jobs
            .iter()
            .filter(|(_, j)| {
                j.metadata.deletion_timestamp.is_none()
                    && j.owner_references().iter().any(|o| !uids.contains(&o.uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in orphans {
            let j = s.jobs.get_mut(&k).unwrap();
            if j.finalizers().is_empty() {
                s.jobs.remove(&k);
            } else {
                j.metadata.deletion_timestamp = Some(ts(now));
            }
        }
        let uids: BTreeSet<String> = s.jobs.values().filter_map(|j| j.uid()).collect();
        let ready: BTreeSet<String> = s
            .nodes
            .iter()
            .filter(|(_, n)| translate::node(n, None).ready)
            .map(|(k, _)| k.clone())
            .collect();
        let keys: Vec<(String, String)> = s.pods.keys().cloned().collect();
        for k in keys {
            let p = s.pods.get(&k).unwrap().clone();
            let owner_gone = p.owner_references().iter().any(|o| !uids.contains(&o.uid));
            let node = crate::controller::pods::pod_allocation(&p)
                .map(|a| a.node)
                .unwrap_or_default();
            if owner_gone && p.metadata.deletion_timestamp.is_none() {
                // Background GC deletes the pod (gracefully).
                s.pods.get_mut(&k).unwrap().metadata.deletion_timestamp = Some(ts(now));
                continue;
            }
            if let Some(d) = &p.metadata.deletion_timestamp {
                // Gone after its grace period (at once when its node is down: force-deleted).
                let grace = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30);
                if now >= d.0.as_second() + grace || !ready.contains(&node) {
                    s.pods.remove(&k);
                }
                continue;
            }
            let phase = p.status.as_ref().and_then(|st| st.phase.clone());
            match phase.as_deref() {
                None | Some("Pending") if ready.contains(&node) && !s.stuck.contains(&node) => {
                    if let Err(why) = s.allocate_for(&k) {
                        s.unschedulable.insert(k.clone(), why);
                        continue;
                    }
                    s.unschedulable.remove(&k);
                    s.started.insert(k.clone(), now);
                    let p = s.pods.get_mut(&k).unwrap();
                    p.status = Some(PodStatus {
                        phase: Some("Running".into()),
                        ..Default::default()
                    });
                }
                Some("Running") => {
                    let ann = p.annotations();
                    let runtime: i64 = ann
                        .get("sim/runtime")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(60);
                    let started = s.started.get(&k).copied().unwrap_or(now);
                    if now - started >= runtime && ready.contains(&node) {
                        let rank = p
                            .labels()
                            .get(labels::NODE_RANK)
                            .cloned()
                            .unwrap_or_default();
                        let fail_rank = ann.get("sim/fail-rank").cloned().unwrap_or("0".into());
                        let code: i32 = if rank == fail_rank {
                            ann.get("sim/exit")
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0)
                        } else {
                            0
                        };
                        let cname = p.spec.as_ref().unwrap().containers[0].name.clone();
                        let p = s.pods.get_mut(&k).unwrap();
                        p.status = Some(PodStatus {
                            phase: Some(if code == 0 { "Succeeded" } else { "Failed" }.into()),
                            container_statuses: Some(vec![ContainerStatus {
                                name: cname,
                                state: Some(ContainerState {
                                    terminated: Some(ContainerStateTerminated {
                                        exit_code: code,
                                        ..Default::default()
                                    }),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        });
                    }
                }
                _ => {}
            }
        }
        // Claims: owner GC, then the resourceclaim controller.
        let gone: Vec<(String, String)> = s
            .claims
            .iter()
            .filter(|(_, c)| {
                c.claim
                    .owner_references()
                    .iter()
                    .any(|o| !uids.contains(&o.uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            s.claims.get_mut(&k).unwrap().deleting = true;
        }
        s.release_claims();
    }
}

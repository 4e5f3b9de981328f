//! Invariant checks over the fake cluster: no GPU held twice, no partial gang, claims
//! matching their pods' allocations.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use muster_crds::v1alpha1::JobState;

use super::FakeCluster;
use crate::controller::dra;
use crate::controller::plan::PodObs;

impl FakeCluster {
    /// Every running pod with a claim has exactly the GPUs its allocation records, and no
    /// device is allocated to two claims.
    pub fn check_claims(&self) -> Result<(), String> {
        let s = self.lock();
        let mut owner: BTreeMap<(String, u32), String> = BTreeMap::new();
        for ((_, name), c) in &s.claims {
            for d in &c.allocated {
                if let Some(o) = owner.insert(d.clone(), name.clone()) {
                    return Err(format!("device {d:?} allocated to {o} and {name}"));
                }
            }
        }
        for (k, p) in &s.pods {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let Some(cn) = dra::pod_claim(p) else {
                continue;
            };
            if !running {
                continue;
            }
            let a = crate::controller::pods::pod_allocation(p).unwrap();
            let want: BTreeSet<(String, u32)> =
                a.gpus.iter().map(|g| (a.node.clone(), *g)).collect();
            let c = s
                .claims
                .get(&(k.0.clone(), cn.to_string()))
                .ok_or_else(|| format!("running pod {} without its claim {cn}", k.1))?;
            let got: BTreeSet<(String, u32)> = c.allocated.iter().cloned().collect();
            if got != want {
                return Err(format!("pod {} has {got:?}, allocation {want:?}", k.1));
            }
        }
        Ok(())
    }

    /// Every GPU is held by at most one (job, attempt): RUNNING allocations and live pods.
    pub fn check_no_double_gpu(&self) -> Result<(), String> {
        let s = self.lock();
        let holders = crate::controller::holders::gpu_holders(s.jobs.values(), s.pods.values());
        for (k, h) in holders {
            if h.len() > 1 {
                return Err(format!("GPU {k:?} held by {h:?}"));
            }
        }
        Ok(())
    }

    /// No job has live pods of its current attempt unless it is RUNNING with every node's
    /// pod present; no pod exists for an attempt the job does not record.
    pub fn check_gangs(&self) -> Result<(), String> {
        let s = self.lock();
        for j in s.jobs.values() {
            let Some(st) = &j.status else { continue };
            let a = st.attempt.unwrap_or(0);
            let mine: Vec<PodObs> = s
                .pods
                .values()
                .filter_map(PodObs::from_pod)
                .filter(|p| p.owner_uid() == j.uid().as_deref() && p.attempt == Some(a) && p.live())
                .collect();
            if st.state == Some(JobState::Running) && !mine.is_empty() {
                let nodes: BTreeSet<u32> = mine.iter().filter_map(|p| p.node).collect();
                let want = crate::controller::pods::node_ranks(&st.tasks).len();
                if nodes.len() != want {
                    return Err(format!(
                        "{}: RUNNING with {} of {want} pods",
                        j.name_any(),
                        nodes.len(),
                    ));
                }
            }
        }
        Ok(())
    }
}

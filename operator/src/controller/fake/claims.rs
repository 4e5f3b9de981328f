//! ResourceClaims in the fake cluster: allocated as kube-scheduler's DRA check does,
//! released and removed as the resourceclaim controller does.

use super::State;
use crate::controller::dra::{self, ClaimObs, ResourceClaim};

/// A ResourceClaim in the fake cluster.
#[derive(Clone, Debug)]
pub struct FakeClaim {
    pub claim: ResourceClaim,
    /// Allocated devices: (node, NVML index).
    pub allocated: Vec<(String, u32)>,
    /// The pod it is reserved for.
    pub reserved_for: Option<(String, String)>,
    /// Deletion requested (kept while its pod lives).
    pub deleting: bool,
}

impl FakeClaim {
    pub(super) fn obs(&self) -> ClaimObs {
        let o = ClaimObs::from_claim(&self.claim);
        let names: Vec<(&str, String)> = self
            .allocated
            .iter()
            .map(|(n, g)| (n.as_str(), format!("gpu-{g}")))
            .collect();
        ClaimObs::new(
            o.namespace(),
            o.name(),
            o.job(),
            o.owner_uid(),
            o.attempt,
            self.deleting,
            names
                .iter()
                .map(|(n, d)| (dra::NVIDIA_DRIVER, *n, d.as_str())),
        )
    }
}

impl State {
    /// The (node, index) of the GPU with `uuid`.
    fn gpu_by_uuid(&self, uuid: &str) -> Option<(String, u32)> {
        self.gpunodes.iter().find_map(|(n, g)| {
            g.status
                .as_ref()?
                .gpus
                .iter()
                .find(|x| x.uuid == uuid)
                .map(|x| (n.clone(), x.index))
        })
    }

    /// kube-scheduler's DRA check for pod `key`: its claim exists, is not being deleted, and
    /// every device its selectors pin is free (or already its own); then it is allocated and
    /// reserved for the pod. `Ok(())` also for a pod without a claim.
    pub(super) fn allocate_for(&mut self, key: &(String, String)) -> Result<(), String> {
        let Some(claim) = self
            .pods
            .get(key)
            .and_then(|p| dra::pod_claim(p).map(str::to_string))
        else {
            return Ok(());
        };
        let ck = (key.0.clone(), claim.clone());
        let Some(c) = self.claims.get(&ck) else {
            return Err(format!(
                "resourceclaim.resource.k8s.io \"{claim}\" not found"
            ));
        };
        if c.deleting {
            return Err(format!("resourceclaim \"{claim}\" is being deleted"));
        }
        if !c.allocated.is_empty() {
            self.claims.get_mut(&ck).unwrap().reserved_for = Some(key.clone());
            return Ok(());
        }
        let mut want = Vec::new();
        for uuid in dra::pinned_uuids(&c.claim) {
            let dev = self
                .gpu_by_uuid(&uuid)
                .ok_or_else(|| "cannot allocate all claims".to_string())?;
            want.push(dev);
        }
        let taken = self
            .claims
            .values()
            .any(|o| o.allocated.iter().any(|d| want.contains(d)));
        if taken {
            return Err("cannot allocate all claims".into());
        }
        let c = self.claims.get_mut(&ck).unwrap();
        c.allocated = want;
        c.reserved_for = Some(key.clone());
        Ok(())
    }

    /// The resourceclaim controller: a claim whose pod is gone or done is released, and
    /// removed if deleted.
    pub(super) fn release_claims(&mut self) {
        let keys: Vec<(String, String)> = self.claims.keys().cloned().collect();
        for k in keys {
            let c = &self.claims[&k];
            let live = c.reserved_for.as_ref().is_some_and(|pk| {
                self.pods.get(pk).is_some_and(|p| {
                    !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded") | Some("Failed")
                    )
                })
            });
            if live {
                continue;
            }
            if c.deleting {
                self.claims.remove(&k);
            } else if c.reserved_for.is_some() {
                let c = self.claims.get_mut(&k).unwrap();
                c.reserved_for = None;
                c.allocated.clear();
            }
        }
    }
}

//! The leader's own recent writes, folded into what the caches show until the watches
//! deliver them, so a lagging cache never makes it decide twice.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::controller::dra::ClaimObs;
use crate::controller::exec;
use crate::controller::jobobs::JobObs;
use crate::controller::plan::PodObs;

/// `a` is a newer resourceVersion than `b`: compared as integers when both are (as etcd's
/// are); otherwise only equality is known and `None` is returned.
pub fn rv_newer(a: &str, b: &str) -> Option<bool> {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => Some(x > y),
        _ => (a == b).then_some(false),
    }
}

/// The operator's own recent writes, folded into what the caches show.
#[derive(Default)]
pub struct Recent {
    /// BatchJobs as returned by our status/finalizer writes (as cached), by uid, with the
    /// cycles they have been kept.
    jobs: HashMap<String, (Arc<JobObs>, u32)>,
    /// Pods we created, not yet in the cache.
    created: HashMap<(String, String), (Arc<PodObs>, Instant)>,
    /// Pods we deleted, not yet shown deleting.
    deleted: HashMap<(String, String), Instant>,
    /// Array elements we created, not yet in the cache.
    created_jobs: HashMap<(String, String), Instant>,
    /// ResourceClaims we deleted, not yet shown deleting.
    deleted_claims: HashMap<(String, String), Instant>,
}

/// How long an unconfirmed write is assumed; after that the cache is trusted again.
const EXPECT_TTL: Duration = Duration::from_secs(30);

impl Recent {
    /// Forgets everything (a new term as leader).
    pub fn clear(&mut self) {
        *self = Recent::default();
    }

    /// The jobs to plan with: the cache, with our newer writes in place of stale entries.
    pub fn merge_jobs(&mut self, cached: Vec<Arc<JobObs>>) -> Vec<Arc<JobObs>> {
        let mut out = Vec::with_capacity(cached.len());
        let mut seen = HashSet::with_capacity(self.jobs.len());
        for j in cached {
            let uid = j.uid();
            if let Some((mine, age)) = self.jobs.get_mut(&uid) {
                seen.insert(uid.clone());
                let crv = j.job().resource_version().unwrap_or_default();
                let mrv = mine.job().resource_version().unwrap_or_default();
                let cache_caught_up = match rv_newer(&mrv, &crv) {
                    Some(newer) => !newer,
                    None => *age > 20,
                };
                if cache_caught_up {
                    self.jobs.remove(&uid);
                    out.push(j);
                } else {
                    *age += 1;
                    out.push(mine.clone());
                }
            } else {
                out.push(j);
            }
        }
        // Deleted meanwhile: drop.
        self.jobs.retain(|k, _| seen.contains(k));
        let present: HashSet<(String, String)> = out
            .iter()
            .map(|j| (j.job().namespace().unwrap_or_default(), j.job().name_any()))
            .collect();
        self.created_jobs
            .retain(|k, t| !present.contains(k) && t.elapsed() < EXPECT_TTL);
        out
    }

    /// The pods to plan with: the cache, plus pods we created that it lacks, with pods we
    /// deleted marked as deleting.
    pub fn merge_pods(&mut self, mut cached: Vec<Arc<PodObs>>) -> Vec<Arc<PodObs>> {
        {
            // Borrowed keys: 50,000 pods would otherwise mean 100,000 string copies a cycle.
            let present: HashSet<(&str, &str)> =
                cached.iter().map(|p| (p.namespace(), p.name())).collect();
            let has = |k: &(String, String)| present.contains(&(k.0.as_str(), k.1.as_str()));
            self.created
                .retain(|k, (_, t)| !has(k) && t.elapsed() < EXPECT_TTL);
            self.deleted
                .retain(|k, t| has(k) && t.elapsed() < EXPECT_TTL);
        }
        if !self.deleted.is_empty() {
            for p in &mut cached {
                if !p.deleting
                    && self
                        .deleted
                        .contains_key(&(p.namespace().to_string(), p.name().to_string()))
                {
                    let mut q = (**p).clone();
                    q.deleting = true;
                    *p = Arc::new(q);
                }
            }
        }
        cached.extend(self.created.values().map(|(p, _)| p.clone()));
        cached
    }

    /// The claims to plan with: the cache, with claims we deleted marked as deleting.
    pub fn merge_claims(&mut self, mut cached: Vec<Arc<ClaimObs>>) -> Vec<Arc<ClaimObs>> {
        if self.deleted_claims.is_empty() {
            return cached;
        }
        let present: HashSet<(&str, &str)> = cached
            .iter()
            .filter(|c| !c.deleting)
            .map(|c| (c.namespace(), c.name()))
            .collect();
        self.deleted_claims.retain(|k, t| {
            present.contains(&(k.0.as_str(), k.1.as_str())) && t.elapsed() < EXPECT_TTL
        });
        for c in &mut cached {
            if !c.deleting
                && self
                    .deleted_claims
                    .contains_key(&(c.namespace().to_string(), c.name().to_string()))
            {
                let mut d = (**c).clone();
                d.deleting = true;
                *c = Arc::new(d);
            }
        }
        cached
    }

    /// Array elements created but not yet seen.
    pub fn expected_jobs(&self) -> HashSet<(String, String)> {
        self.created_jobs.keys().cloned().collect()
    }

    /// Records a cycle's writes, taking the written jobs and created pods out of the report
    /// (moved, not copied: after a big cycle they are thousands of objects).
    pub fn record(&mut self, r: &mut exec::ExecReport) {
        let now = Instant::now();
        for w in std::mem::take(&mut r.written) {
            let uid = w.job.uid();
            if !uid.is_empty() {
                self.jobs.insert(uid, (w.job, 0));
            }
        }
        for p in std::mem::take(&mut r.created_pods) {
            self.created.insert(
                (p.namespace().to_string(), p.name().to_string()),
                (Arc::new(p), now),
            );
        }
        for k in &r.deleted_pods {
            self.deleted.insert(k.clone(), now);
        }
        for k in &r.created_jobs {
            self.created_jobs.insert(k.clone(), now);
        }
        for k in &r.deleted_claims {
            self.deleted_claims.insert(k.clone(), now);
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::plan;
    use muster_crds::v1alpha1::BatchJob;

    #[test]
    fn resource_versions_compare_as_integers() {
        assert_eq!(rv_newer("10", "9"), Some(true));
        assert_eq!(rv_newer("9", "10"), Some(false));
        assert_eq!(rv_newer("abc", "abc"), Some(false));
        assert_eq!(rv_newer("abc", "abd"), None);
    }

    fn job(uid: &str, rv: &str) -> Arc<JobObs> {
        let mut j = BatchJob::new("j", Default::default());
        j.metadata.uid = Some(uid.into());
        j.metadata.resource_version = Some(rv.into());
        Arc::new(JobObs::new(j))
    }

    #[test]
    fn own_writes_win_until_the_cache_catches_up() {
        let mut r = Recent::default();
        let mut rep = exec::ExecReport::default();
        rep.written.push(exec::Written {
            job: job("u1", "5"),
            effects: vec![],
        });
        r.record(&mut rep.clone());
        let v = r.merge_jobs(vec![job("u1", "3"), job("u2", "1")]);
        assert_eq!(v[0].job().resource_version().as_deref(), Some("5"));
        assert_eq!(v[1].job().resource_version().as_deref(), Some("1"));
        let v = r.merge_jobs(vec![job("u1", "6")]);
        assert_eq!(v[0].job().resource_version().as_deref(), Some("6"));
        assert!(r.jobs.is_empty());
        // Deleted objects are not resurrected.
        r.record(&mut rep.clone());
        assert!(r.merge_jobs(vec![]).is_empty());
    }

    #[test]
    fn created_and_deleted_pods_are_seen_before_the_watch_says_so() {
        let mut r = Recent::default();
        let obs = |name: &str| {
            let mut o = PodObs::new("ns", name, "j", None, None);
            o.attempt = Some(1);
            o.node = Some(0);
            o.phase = plan::Phase::Running;
            o
        };
        let mut rep = exec::ExecReport::default();
        rep.created_pods.push(obs("new"));
        rep.deleted_pods.push(("ns".into(), "old".into()));
        r.record(&mut rep.clone());
        let v = r.merge_pods(vec![Arc::new(obs("old"))]);
        assert_eq!(v.len(), 2);
        assert!(v.iter().find(|p| p.name() == "old").unwrap().deleting);
        assert!(v.iter().any(|p| p.name() == "new"));
        // Once the cache has the new pod, it is not added twice.
        let v = r.merge_pods(vec![Arc::new(obs("new"))]);
        assert_eq!(v.len(), 1);
    }
}

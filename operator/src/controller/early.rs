//! The allocation finalizer ahead of the plan.
//!
//! A job must carry `muster.dev/allocation` before its status records an allocation (see
//! [`super::exec`]), so a job admitted in the cycle that first sees it used to cost three
//! writes in a row on its way to running: finalizer, status, pod. Every new job gets the
//! finalizer at first sight instead (as controllers commonly add theirs on their first
//! reconcile), written while the cycle plans: the plan is CPU-bound on one thread and the
//! writes wait on the API server, so they overlap. Once the plan is known, `fold` drops the
//! finalizer step of the jobs that have it and points their status write at the new
//! resourceVersion; a job whose early write failed keeps its finalizer step, in order.
//!
//! The early write carries the snapshot's resourceVersion as its precondition, the same one
//! the plan's status write would have used, so a job changed meanwhile is written by neither.
//! A job that never starts keeps the finalizer as an ended job does; deleted, it loses it in
//! the next cycle (none of its pods is live), as any job does.

use std::collections::HashMap;
use std::sync::Arc;

use kube::ResourceExt;

use super::exec::{self, ClusterApi, ExecReport, Faults};
use super::jobobs::{JobObs, Versions};
use super::plan::{self, CyclePlan};

/// A job to give the finalizer ahead of the plan.
#[derive(Clone, Debug)]
pub struct EarlyFinalizer {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The resourceVersion the cycle's snapshot holds (the write's precondition).
    pub resource_version: Option<String>,
    /// Its finalizers now (ours is added to them).
    pub finalizers: Vec<String>,
}

/// The jobs never planned (no status yet) that lack the finalizer, are not being deleted and
/// are not array parents (a parent never holds an allocation; its elements are created with
/// the finalizer on).
pub fn select(jobs: &[Arc<JobObs>]) -> Vec<EarlyFinalizer> {
    jobs.iter()
        .map(|o| o.job())
        .filter(|j| {
            j.status.is_none()
                && j.metadata.deletion_timestamp.is_none()
                && !plan::has_finalizer(j)
                && !plan::is_array_parent(j)
        })
        .map(|j| EarlyFinalizer {
            namespace: j.namespace().unwrap_or_default(),
            name: j.name_any(),
            uid: j.uid().unwrap_or_default(),
            resource_version: j.resource_version(),
            finalizers: j.finalizers().to_vec(),
        })
        .collect()
}

/// A job the finalizer went on: what its later writes need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Added {
    /// UID.
    pub uid: String,
    /// Its resourceVersion after the write.
    pub resource_version: Option<String>,
    /// Its finalizers after the write.
    pub finalizers: Vec<String>,
}

/// Carries out the cycle's plan after its early finalizer writes (`early`: their report and
/// what they added): folds them in, executes the plan unless an injected crash stopped the
/// early writes, and returns one report for both. The operator's runner and the unit tests'
/// fake cluster both go through here, so the sequence is the same in both.
pub async fn execute_after(
    mut cp: CyclePlan,
    early: (ExecReport, Vec<Added>),
    jobs: Vec<Arc<JobObs>>,
    api: &dyn ClusterApi,
    faults: &dyn Faults,
    concurrency: usize,
    versions: &Versions,
) -> ExecReport {
    let (early, added) = early;
    let mut fin: HashMap<String, Vec<String>> = jobs
        .iter()
        .map(|j| (j.uid(), j.job().finalizers().to_vec()))
        .collect();
    // Let go of the cycle's view before writing: the watch replaces these objects in the
    // cache while the writes go on, and this would keep each replaced version alive.
    drop(jobs);
    fold(&mut cp, added, &mut fin);
    let finalizers = |uid: &str| fin.get(uid).cloned().unwrap_or_default();
    let mut report = if early.crashed {
        ExecReport::default()
    } else {
        exec::execute(cp, api, faults, concurrency, &finalizers, versions).await
    };
    merge(early, &mut report);
    report
}

/// Takes the early writes into the plan: a job whose finalizer went on needs no finalizer
/// step, writes its status over the resourceVersion that write returned, and `fin` (its
/// finalizers by uid) shows ours.
fn fold(plan: &mut CyclePlan, added: Vec<Added>, fin: &mut HashMap<String, Vec<String>>) {
    if added.is_empty() {
        return;
    }
    let mut done: HashMap<String, Added> = added.into_iter().map(|a| (a.uid.clone(), a)).collect();
    for jp in &mut plan.jobs {
        let Some(a) = done.get(&jp.uid) else {
            continue;
        };
        jp.add_finalizer = false;
        if let Some(st) = jp.status.as_mut() {
            st.resource_version = a.resource_version.clone();
        }
    }
    for (uid, a) in done.drain() {
        fin.insert(uid, a.finalizers);
    }
}

/// Adds the early writes' counts to the cycle's report.
fn merge(early: ExecReport, report: &mut ExecReport) {
    for (k, v) in early.writes {
        *report.writes.entry(k).or_default() += v;
    }
    for (k, v) in early.errors {
        *report.errors.entry(k).or_default() += v;
    }
    report.crashed |= early.crashed;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::plan::{JobPlan, PlannedStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use muster_crds::labels;
    use muster_crds::v1alpha1::{BatchJob, BatchJobStatus};

    fn job(name: &str, rv: &str) -> BatchJob {
        let mut j = BatchJob::new(name, Default::default());
        j.metadata.namespace = Some("ns".into());
        j.metadata.uid = Some(format!("uid-{name}"));
        j.metadata.resource_version = Some(rv.into());
        j
    }

    #[test]
    fn only_new_jobs_without_the_finalizer_are_selected() {
        let fresh = job("fresh", "1");
        let mut planned = job("planned", "2");
        planned.status = Some(BatchJobStatus::default());
        let mut has = job("has", "3");
        has.metadata.finalizers = Some(vec![labels::FINALIZER.into()]);
        let mut deleting = job("deleting", "4");
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let mut parent = job("parent", "5");
        parent.spec.array = Some(IntOrString::String("0-3".into()));
        let mut element = job("element", "6");
        element.spec.array = Some(IntOrString::String("0-3".into()));
        element
            .metadata
            .labels
            .get_or_insert_default()
            .insert(labels::ARRAY_PARENT.into(), "parent".into());
        let jobs: Vec<Arc<JobObs>> = [fresh, planned, has, deleting, parent, element]
            .into_iter()
            .map(|j| Arc::new(JobObs::new(j)))
            .collect();
        let names: Vec<(String, Option<String>)> = select(&jobs)
            .into_iter()
            .map(|e| (e.name, e.resource_version))
            .collect();
        assert_eq!(
            names,
            [
                ("fresh".to_string(), Some("1".to_string())),
                ("element".to_string(), Some("6".to_string()))
            ]
        );
    }

    #[test]
    fn a_job_given_the_finalizer_early_writes_its_status_over_the_new_version() {
        let added = vec![Added {
            uid: "uid-a".into(),
            resource_version: Some("7".into()),
            finalizers: vec![labels::FINALIZER.into()],
        }];
        let status = PlannedStatus::empty("6");
        let mut plan = CyclePlan {
            jobs: vec![
                JobPlan {
                    uid: "uid-a".into(),
                    add_finalizer: true,
                    status: Some(status.clone()),
                    ..Default::default()
                },
                JobPlan {
                    uid: "uid-b".into(),
                    add_finalizer: true,
                    status: Some(status),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut fin = HashMap::new();
        fold(&mut plan, added, &mut fin);
        let a = &plan.jobs[0];
        assert!(!a.add_finalizer);
        assert_eq!(
            a.status.as_ref().unwrap().resource_version.as_deref(),
            Some("7")
        );
        // Its early write failed or never happened: the finalizer step stays, in order.
        let b = &plan.jobs[1];
        assert!(b.add_finalizer);
        assert_eq!(
            b.status.as_ref().unwrap().resource_version.as_deref(),
            Some("6")
        );
        assert_eq!(fin["uid-a"], [labels::FINALIZER.to_string()]);
        assert!(!fin.contains_key("uid-b"));
    }
}

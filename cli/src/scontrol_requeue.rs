//! `scontrol requeue|requeuehold JOBID...`: runs a running or ended job again, as Slurm's
//! does, by raising its `spec.requeueRequests` (the operator stops its pods and queues it as
//! a new attempt under the same id); `requeuehold` also holds it. Admission judges each
//! request (a pending job, a `--no-requeue` one): the refusal is printed per job. A
//! cancelled job's `cancel` is cleared with the request, or it would be cancelled again.

use kube::Api;
use muster_crds::v1alpha1::{BatchJob, JobState};
use serde_json::json;

use crate::Io;
use crate::rows::JobRow;

/// The BatchJobs `id` names: a job, or every created element of an array, or one element
/// (`ID_TASK`); a whole array's pending elements are skipped (only started ones requeue).
fn targets<'a>(rows: &'a [JobRow], id: &str) -> Result<Vec<&'a JobRow>, String> {
    let matching: Vec<&JobRow> = rows.iter().filter(|r| r.matches_id(id)).collect();
    if matching.is_empty() {
        return Err(format!("Invalid job id specified for job {id}"));
    }
    let created: Vec<&JobRow> = matching
        .iter()
        .copied()
        .filter(|r| !r.array_record)
        .collect();
    let whole_array = !id.contains('_') && created.iter().any(|r| r.array_job_id.is_some());
    let chosen: Vec<&JobRow> = if whole_array {
        created
            .into_iter()
            .filter(|r| r.state != JobState::Pending)
            .collect()
    } else {
        created
    };
    if chosen.is_empty() {
        return Err(format!("Job is pending execution for job {id}"));
    }
    Ok(chosen)
}

/// One request on `name`: its count raised by one from the version read, so two requests at
/// once requeue twice or one fails, never once. `Err`: the message for the user.
async fn request(api: &Api<BatchJob>, name: &str, hold: bool) -> Result<(), String> {
    crate::job_patch::update(api, name, |job| {
        let mut spec = serde_json::Map::new();
        spec.insert(
            "requeueRequests".into(),
            json!(job.spec.requeue_requests.unwrap_or(0) + 1),
        );
        if job.spec.cancel == Some(true) {
            spec.insert("cancel".into(), serde_json::Value::Null);
        }
        if hold {
            spec.insert("hold".into(), json!(true));
        }
        Ok(json!({ "spec": spec }))
    })
    .await
}

/// Requeues (and with `hold`, holds) the jobs `ids` name; false if any failed.
pub async fn run(
    cluster: &crate::cluster::Cluster,
    all: bool,
    ids: &[String],
    hold: bool,
    io: &mut Io<'_>,
) -> anyhow::Result<bool> {
    let jobs = crate::fetch::batchjobs(cluster, all).await?;
    let rows = crate::rows::job_rows(&jobs, jiff::Timestamp::now(), true);
    let mut ok = true;
    let Some(ids) = crate::scontrol::job_ids(ids, io)? else {
        return Ok(false);
    };
    for id in &ids {
        let found = match targets(&rows, id) {
            Ok(f) => f,
            Err(e) => {
                writeln!(io.err, "scontrol: error: {e}")?;
                ok = false;
                continue;
            }
        };
        for r in found {
            let api: Api<BatchJob> = Api::namespaced(cluster.client.clone(), &r.namespace);
            if let Err(e) = request(&api, &r.name, hold).await {
                writeln!(io.err, "scontrol: error: job {}: {e}", r.id_string())?;
                ok = false;
            }
        }
    }
    Ok(ok)
}

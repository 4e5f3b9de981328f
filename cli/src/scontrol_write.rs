//! `scontrol write batch_script JOBID [FILE]`: the job's batch script (`spec.script`) written
//! to `slurm-JOBID.sh`, to FILE, or to standard output for `-`, with Slurm 22.05's messages
//! (an existing file is replaced, as there).

use muster_crds::v1alpha1::BatchJob;

use crate::Io;
use crate::cluster::Cluster;

/// The script of the job `id` names among `jobs`, or Slurm's reason it cannot be had.
pub fn script_of<'a>(jobs: &'a [BatchJob], id: &str) -> Result<&'a str, String> {
    let rows = crate::rows::job_rows(jobs, jiff::Timestamp::now(), true);
    let row = rows
        .iter()
        .find(|r| r.matches_id(id))
        .ok_or("Invalid job id specified")?;
    let job = jobs
        .iter()
        .find(|j| {
            j.metadata.name.as_deref() == Some(row.name.as_str())
                && j.metadata.namespace.as_deref().unwrap_or_default() == row.namespace
        })
        .ok_or("Invalid job id specified")?;
    job.spec.script.as_deref().ok_or_else(|| {
        "No batch script for job (its BatchJob runs its pod template's command)".to_string()
    })
}

/// Where the script goes: `None` for standard output.
pub fn destination(id: &str, file: Option<&str>) -> Option<String> {
    match file {
        Some("-") => None,
        Some(f) => Some(f.to_string()),
        None => Some(format!("slurm-{id}.sh")),
    }
}

/// Run `scontrol write batch_script`; false when the script could not be had or written (the
/// reason printed).
pub async fn run(
    cluster: &Cluster,
    all_namespaces: bool,
    id: &str,
    file: Option<&str>,
    io: &mut Io<'_>,
) -> anyhow::Result<bool> {
    if !matches!(crate::rows::ids::expand(&[id.to_string()]), Ok(ids) if ids.len() == 1) {
        writeln!(
            io.err,
            "job script retrieval failed: Invalid job id specified"
        )?;
        return Ok(false);
    }
    let jobs = crate::fetch::batchjobs(cluster, all_namespaces).await?;
    let script = match script_of(&jobs, id) {
        Ok(s) => s,
        Err(e) => {
            writeln!(io.err, "job script retrieval failed: {e}")?;
            return Ok(false);
        }
    };
    match destination(id, file) {
        None => write!(io.out, "{script}")?,
        Some(f) => {
            let path = io.cwd.join(&f);
            if let Err(e) = std::fs::write(&path, script) {
                writeln!(io.err, "scontrol: error: failed to write {f}: {e}")?;
                return Ok(false);
            }
            writeln!(io.out, "batch script for job {id} written to {f}")?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_goes_where_slurm_puts_it() {
        assert_eq!(destination("12", None).as_deref(), Some("slurm-12.sh"));
        assert_eq!(destination("12_3", None).as_deref(), Some("slurm-12_3.sh"));
        assert_eq!(destination("12", Some("x.sh")).as_deref(), Some("x.sh"));
        assert_eq!(destination("12", Some("-")), None);
    }
}

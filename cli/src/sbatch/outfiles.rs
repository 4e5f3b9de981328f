//! sbatch's warning about `--output`/`--error` files that will not be written: the batch step
//! writes them only under a shared filesystem of the partition (`spec.jobEnvironment.volumes`),
//! the rule of [`muster_crds::step::shared_dir_of`]; elsewhere the output is in the pod log
//! only, and the user hears it at submission rather than finding no file.

use muster_crds::v1alpha1::{BatchJob, Partition};

/// The partition the job runs in: the one it names, else the default one.
pub fn partition_of<'a>(job: &BatchJob, partitions: &'a [Partition]) -> Option<&'a Partition> {
    match job.spec.partition.as_deref() {
        Some(name) => partitions
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name)),
        None => partitions.iter().find(|p| p.spec.default == Some(true)),
    }
}

/// One warning line per output file of `job` that the batch step will not write.
pub fn warnings(job: &BatchJob, partition: Option<&Partition>) -> Vec<String> {
    let Some(p) = partition else {
        return Vec::new();
    };
    let pname = p.metadata.name.clone().unwrap_or_default();
    let dirs: Vec<&str> = p
        .spec
        .job_environment
        .as_ref()
        .map(|e| e.volumes.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|v| v.read_only != Some(true))
        .map(|v| v.mount_path.as_str())
        .collect();
    let workdir = job
        .spec
        .container_workdir
        .clone()
        .or_else(|| {
            job.spec
                .template
                .as_ref()
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.working_dir.clone())
        })
        .filter(|d| d.starts_with('/'));
    // --chdir: relative files are relative to it (itself relative to the container's).
    let workdir = match job.spec.chdir.as_deref().filter(|d| !d.is_empty()) {
        Some(d) if d.starts_with('/') => Some(d.to_string()),
        Some(d) => workdir.map(|w| format!("{}/{d}", w.trim_end_matches('/'))),
        None => workdir,
    };
    let shared = if dirs.is_empty() {
        format!("partition {pname} has no shared filesystem (spec.jobEnvironment.volumes)")
    } else {
        format!(
            "the shared filesystems of partition {pname} are {}",
            dirs.join(", ")
        )
    };
    let mut out = Vec::new();
    for (opt, value) in [("output", &job.spec.output), ("error", &job.spec.error)] {
        let Some(v) = value.as_deref().filter(|v| !v.is_empty()) else {
            continue;
        };
        let full = if v.starts_with('/') {
            Some(v.to_string())
        } else {
            workdir
                .as_ref()
                .map(|d| format!("{}/{v}", d.trim_end_matches('/')))
        };
        match full {
            Some(f) if muster_crds::step::shared_dir_of(&f, dirs.iter().copied()).is_some() => {}
            Some(f) => out.push(format!(
                "--{opt}={v}: {f} is on no shared filesystem ({shared}); the job runs and its output is in the pod log only (muster logs)"
            )),
            None => out.push(format!(
                "--{opt}={v} is relative to {}: it is written only if that lies on a shared filesystem ({shared}); otherwise the output is in the pod log only (muster logs)",
                match job.spec.chdir.as_deref() {
                    Some(d) => format!("--chdir={d}, itself relative to the container image's working directory"),
                    None => "the container image's working directory".to_string(),
                }
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn part(volumes: serde_json::Value) -> Partition {
        serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
            "metadata": {"name": "gpu"},
            "spec": {"default": true, "jobEnvironment": {"volumes": volumes}}
        }))
        .unwrap()
    }

    fn job(spec: serde_json::Value) -> BatchJob {
        serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
            "metadata": {"name": "j"}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn only_files_off_the_shared_filesystems_are_warned_about() {
        let p = part(json!([
            {"name": "scratch", "mountPath": "/scratch", "claimName": "s"},
            {"name": "data", "mountPath": "/data", "claimName": "d", "readOnly": true}
        ]));
        let parts = [p];
        let p = partition_of(&job(json!({})), &parts);
        assert!(p.is_some());
        assert!(warnings(&job(json!({"output": "/scratch/%x-%j.out"})), p).is_empty());
        assert!(
            warnings(&job(json!({})), p).is_empty(),
            "the default is never warned about"
        );
        let w = warnings(
            &job(json!({"output": "/tmp/o.out", "error": "/data/e.err"})),
            p,
        );
        assert_eq!(
            w,
            [
                "--output=/tmp/o.out: /tmp/o.out is on no shared filesystem (the shared filesystems of partition gpu are /scratch); the job runs and its output is in the pod log only (muster logs)",
                "--error=/data/e.err: /data/e.err is on no shared filesystem (the shared filesystems of partition gpu are /scratch); the job runs and its output is in the pod log only (muster logs)",
            ]
        );
        let w = warnings(&job(json!({"output": "logs/o.out"})), p);
        assert!(
            w[0].contains("relative to the container image's working directory"),
            "{w:?}"
        );
        // --chdir: relative files are relative to it.
        assert!(warnings(&job(json!({"output": "o.out", "chdir": "/scratch/run"})), p).is_empty());
        assert!(
            warnings(
                &job(json!({"output": "o.out", "chdir": "run", "containerWorkdir": "/scratch"})),
                p
            )
            .is_empty()
        );
        let w = warnings(&job(json!({"output": "o.out", "chdir": "/tmp"})), p);
        assert!(
            w[0].contains("/tmp/o.out is on no shared filesystem"),
            "{w:?}"
        );
        let w = warnings(&job(json!({"output": "o.out", "chdir": "run"})), p);
        assert!(w[0].contains("relative to --chdir=run"), "{w:?}");
        let none = [part(json!([]))];
        let w = warnings(
            &job(json!({"output": "/scratch/o"})),
            partition_of(&job(json!({})), &none),
        );
        assert!(
            w[0].contains("partition gpu has no shared filesystem"),
            "{w:?}"
        );
    }
}

//! Muster's own trace format: BatchJob specs with submit and run times, in YAML or JSON
//! (JSON is read as YAML, its superset).
//!
//! ```yaml
//! partitions:                 # optional; default: one partition over every node
//!   - name: batch
//!     spec: {default: true, preemptMode: Requeue, graceTimeSeconds: 30}
//!   - name: urgent
//!     spec: {priorityTier: 1}
//! jobs:
//!   - name: train-7b          # optional: the BatchJob name (default job-N)
//!     namespace: team-a       # optional: fair share is per namespace (default "default")
//!     submit: 0               # seconds on the trace's clock
//!     runtime: 5400           # seconds it runs
//!     spec:                   # a BatchJob spec, as `kubectl apply` would take it
//!       partition: batch
//!       nodes: 4
//!       gpusPerNode: 8
//!       time: "2:00:00"
//! ```
//!
//! The document may also be just the list of jobs. `runtime` also takes a Slurm duration
//! string (`"1:30:00"`). Partitions are Partition objects' `name` and `spec` (the fields the
//! scheduler uses: `nodeSelector.matchLabels`, `topology` (default: the cluster's), `default`,
//! `state`, `defaultTime`, `maxTime`, `minNodes`, `maxNodes`, `priorityTier`, `preemptMode`,
//! `allowedNamespaces`, `defCpuPerGpu`, `defMemPerGpu`, `graceTimeSeconds`). A bad job entry
//! is reported with its line, as `jobs[INDEX]` with its name, and the field;
//! `--skip-bad-rows` skips it.
//!
//! Spec fields are translated by the operator's own translation
//! (`muster_operator::controller::translate::job_request`), the one function the operator and
//! `sbatch --test-only` use too, so every field that shapes scheduling takes effect here as it
//! does on a cluster, and a bad field is reported with the same message. An entry's optional
//! `user` is the submitting user (for `exclusive: user`; the operator reads the
//! `muster.dev/user` annotation). Dependencies name other jobs of the trace by `name`
//! (`afterok:train-7b`); a job whose dependency names a job not submitted yet waits for it,
//! as the operator does. An array runs one gang per index (`NAME_INDEX`) under its `%N`
//! throttle; `cancel: true` never runs; `requeue: false` ends a preempted job rather than
//! requeueing it. Scripts and pod templates are accepted and not replayed.

use muster_crds::slurm::TimeLimit;
use muster_crds::v1alpha1::{BatchJobSpec, PartitionSpec};
use muster_operator::controller::translate::{self, join_errors};
use muster_operator::core::Partition;
use serde::Deserialize;

use super::{
    Ask, Format, Rows, Trace, TraceArray, TraceError, TraceJob, TraceLimit, TracePartition,
};

#[derive(Deserialize)]
#[serde(untagged)]
enum Doc {
    Full {
        #[serde(default)]
        partitions: Vec<serde_yaml::Value>,
        jobs: Vec<serde_yaml::Value>,
    },
    List(Vec<serde_yaml::Value>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NativeJob {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    user: Option<String>,
    submit: i64,
    runtime: Runtime,
    #[serde(default)]
    spec: BatchJobSpec,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Runtime {
    Secs(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NativePartition {
    name: String,
    #[serde(default)]
    spec: PartitionSpec,
}

/// Parses a native trace named `name`.
pub fn parse(name: &str, text: &str, skip_bad: bool) -> Result<Trace, TraceError> {
    let mut rows = Rows::new(name, skip_bad);
    let doc: Doc = serde_yaml::from_str(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
            .unwrap_or_default();
        rows.file_error(format!(
            "not a native trace{at}: {e}; expected YAML or JSON with `jobs: [{{submit, runtime, spec}}]` (and optional `partitions`), or a list of jobs"
        ))
    })?;
    let (parts_v, jobs_v) = match doc {
        Doc::Full { partitions, jobs } => (partitions, jobs),
        Doc::List(jobs) => (Vec::new(), jobs),
    };
    let mut partitions = Vec::new();
    for (i, v) in parts_v.into_iter().enumerate() {
        let p: NativePartition = serde_yaml::from_value(v)
            .map_err(|e| rows.file_error(format!("partitions[{i}]: {e}")))?;
        let (part, default) = partition(&p)
            .map_err(|m| rows.file_error(format!("partitions[{i}] ({}): {m}", p.name)))?;
        if partitions
            .iter()
            .any(|q: &TracePartition| q.partition.name == part.name)
        {
            return Err(rows.file_error(format!(
                "partitions[{i}]: partition {:?} is defined twice",
                part.name
            )));
        }
        partitions.push(TracePartition {
            partition: part,
            default,
        });
    }
    let lines = entry_lines(text).filter(|l| l.len() == jobs_v.len());
    let lines = lines.as_deref();
    let mut jobs = Vec::new();
    for (i, v) in jobs_v.into_iter().enumerate() {
        let label = |n: Option<&str>| match n {
            Some(n) => format!("jobs[{i}] ({n})"),
            None => format!("jobs[{i}]"),
        };
        let hint = v.get("name").and_then(|n| n.as_str()).map(str::to_string);
        let nj: NativeJob = match serde_yaml::from_value(v) {
            Ok(j) => j,
            Err(e) => {
                bad(
                    &mut rows,
                    lines,
                    i,
                    format!("{}: {e}", label(hint.as_deref())),
                )?;
                continue;
            }
        };
        match job(&nj, i) {
            Ok(elements) => {
                for mut tj in elements {
                    if let Some(&l) = lines.and_then(|l| l.get(i)) {
                        tj.line = l;
                    }
                    jobs.push(tj)
                }
            }
            Err(m) => bad(
                &mut rows,
                lines,
                i,
                format!("{}: {m}", label(nj.name.as_deref())),
            )?,
        }
    }
    Ok(Trace {
        source: name.to_string(),
        format: Format::Native,
        jobs,
        skipped: rows.skipped,
        partitions,
    })
}

/// A bad job entry: an error naming its line (when [`entry_lines`] found it) and the entry
/// (`jobs[INDEX]`, numbered from 0, with its name).
fn bad(
    rows: &mut Rows<'_>,
    lines: Option<&[usize]>,
    i: usize,
    message: String,
) -> Result<(), TraceError> {
    match lines.and_then(|l| l.get(i)).filter(|&&l| l > 0) {
        Some(&line) => rows.bad(line, message),
        None => {
            if !rows.skip_bad {
                return Err(rows.file_error(message));
            }
            rows.skipped.bad_rows += 1;
            if rows.skipped.first_errors.len() < super::Skipped::KEEP_ERRORS {
                rows.skipped
                    .first_errors
                    .push(format!("{}: {message}", rows.file));
            }
            Ok(())
        }
    }
}

/// The line each job entry starts on (1-based). serde_yaml's values carry no positions, so
/// a second, span-aware parse finds them; `None` when that parse cannot read the document
/// (messages then name entries by index only).
fn entry_lines(text: &str) -> Option<Vec<usize>> {
    use serde::de::IgnoredAny;
    use serde_saphyr::Spanned;
    #[derive(Deserialize)]
    struct Full {
        jobs: Vec<Spanned<IgnoredAny>>,
    }
    let spans = match serde_saphyr::from_str::<Full>(text) {
        Ok(f) => f.jobs,
        Err(_) => serde_saphyr::from_str::<Vec<Spanned<IgnoredAny>>>(text).ok()?,
    };
    Some(
        spans
            .iter()
            .map(|s| usize::try_from(s.referenced.line()).unwrap_or(0))
            .collect(),
    )
}

/// The trace jobs of an entry: one, or one per index of an array (`NAME_INDEX`), each run as
/// its own gang under the array's `%N` throttle, as the operator runs them.
fn job(nj: &NativeJob, i: usize) -> Result<Vec<TraceJob>, String> {
    let runtime = match &nj.runtime {
        Runtime::Secs(s) => *s,
        Runtime::Text(t) => duration_secs(t).map_err(|m| format!("runtime: {m}"))?,
    };
    let parsed = translate::job_request(&nj.spec).map_err(|e| join_errors(&e))?;
    let limit = match parsed.time {
        None => TraceLimit::Partition,
        Some(TimeLimit::Unlimited) => TraceLimit::Unlimited,
        Some(t) => TraceLimit::Secs(t.seconds().unwrap_or(u64::MAX)),
    };
    let id = nj.name.clone().unwrap_or_else(|| format!("job-{}", i + 1));
    let one = TraceJob {
        id: id.clone(),
        line: i + 1,
        submit: nj.submit,
        runtime,
        ask: Ask::Request(Box::new(parsed.request)),
        limit,
        partition: parsed.partition,
        namespace: nj.namespace.clone(),
        name: nj.name.clone(),
        nice: parsed.nice,
        priority: parsed.priority,
        hold: parsed.hold,
        begin: nj.spec.begin.as_ref().map(|t| t.0.as_second()),
        dependency: parsed.dependency,
        user: nj.user.clone(),
        array: None,
        requeue: parsed.requeue,
        cancel: parsed.cancel,
    };
    Ok(match parsed.array {
        None => vec![one],
        Some(a) => a
            .indices
            .iter()
            .map(|&index| TraceJob {
                id: format!("{id}_{index}"),
                array: Some(TraceArray {
                    parent: id.clone(),
                    index,
                    max_running: a.max_running,
                }),
                ..one.clone()
            })
            .collect(),
    })
}

/// A run time as a Slurm duration (`90` minutes, `1:30:00`, `2-00:00:00`) in seconds,
/// without the minute rounding limits get.
fn duration_secs(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (days, clock) = match t.split_once('-') {
        Some((d, c)) => (
            d.parse::<u64>()
                .map_err(|_| format!("{s:?}: days must be a whole number"))?,
            c,
        ),
        None => (0, t),
    };
    let f: Vec<u64> = clock
        .split(':')
        .map(|x| x.parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            format!("{s:?} is not seconds or a Slurm duration (M, M:S, H:M:S, D-H:M:S)")
        })?;
    let secs = match (days > 0 || t.contains('-'), f.as_slice()) {
        (false, [m]) => m * 60,
        (false, [m, s]) => m * 60 + s,
        (_, [h, m, s]) => h * 3600 + m * 60 + s,
        (true, [h]) => h * 3600,
        (true, [h, m]) => h * 3600 + m * 60,
        _ => return Err(format!("{s:?}: too many ':'")),
    };
    Ok(days * 86_400 + secs)
}

/// The partition as the operator reads it (one translation, `translate::partition`: the
/// same selectors, tolerations, limits and job environment), with the trace's default flag.
fn partition(p: &NativePartition) -> Result<(Partition, bool), String> {
    let obj = muster_crds::v1alpha1::Partition::new(&p.name, p.spec.clone());
    let part = translate::partition(&obj).map_err(|e| join_errors(&e))?;
    Ok((part, p.spec.default == Some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"
partitions:
  - name: batch
    spec: {default: true, preemptMode: Requeue, graceTimeSeconds: 30}
  - name: urgent
    spec: {priorityTier: 1, maxTime: "1-00:00:00"}
jobs:
  - name: train
    namespace: team-a
    submit: 10
    runtime: 5400
    spec: {nodes: 4, gpusPerNode: 8, time: "2:00:00"}
  - submit: 20
    runtime: "1:00:00"
    spec: {partition: urgent, gpus: "h100:2", exclusive: true, nice: 5}
"#;

    #[test]
    fn reads_partitions_and_jobs() {
        let t = parse("n.yaml", DOC, false).unwrap();
        assert_eq!(t.partitions.len(), 2);
        assert!(t.partitions[0].default);
        assert_eq!(t.partitions[0].partition.grace_time_secs, 30);
        assert_eq!(t.partitions[1].partition.priority_tier, 1);
        assert_eq!(
            t.partitions[1].partition.max_time,
            Some(TimeLimit::Minutes(1_440))
        );
        let j = &t.jobs[0];
        assert_eq!(j.id, "train");
        assert_eq!(j.namespace.as_deref(), Some("team-a"));
        assert_eq!(j.runtime, 5400);
        assert_eq!(j.limit, TraceLimit::Secs(7200));
        let want = muster_operator::core::JobRequest {
            max_nodes: Some(4),
            ..muster_operator::core::JobRequest::nodes(4, 8)
        }
        .time(7200);
        assert_eq!(j.ask, Ask::Request(Box::new(want)));
        let k = &t.jobs[1];
        assert_eq!(k.runtime, 3600);
        assert_eq!(k.partition.as_deref(), Some("urgent"));
        assert_eq!(k.nice, 5);
        let Ask::Request(r) = &k.ask else { panic!() };
        assert_eq!(r.gpus, Some(2));
        assert_eq!(r.gpu_type.as_deref(), Some("h100"));
        assert!(r.exclusive);
    }

    #[test]
    fn json_lists_parse_too() {
        let t = parse(
            "n.json",
            r#"[{"submit": 0, "runtime": 60, "spec": {"gpus": 1}}]"#,
            false,
        )
        .unwrap();
        assert_eq!(t.jobs.len(), 1);
        assert_eq!(t.jobs[0].id, "job-1");
    }

    #[test]
    fn bad_entries_are_named_and_skippable() {
        let text = r#"
jobs:
  - {name: ok, submit: 0, runtime: 60, spec: {gpus: 1}}
  - {name: bad-time, submit: 0, runtime: 60, spec: {gpus: 1, time: "1h"}}
  - {name: typo, submit: 0, runtime: 60, spce: {}}
  - {submit: 0, runtime: "soon"}
"#;
        let err = parse("n.yaml", text, false).unwrap_err().to_string();
        assert!(
            err.starts_with("n.yaml:4: jobs[1] (bad-time): spec.time: invalid time limit"),
            "{err}"
        );
        let t = parse("n.yaml", text, true).unwrap();
        assert_eq!(t.jobs.len(), 1);
        assert_eq!(t.skipped.bad_rows, 3);
        assert!(
            t.skipped.first_errors[1].contains("n.yaml:5: jobs[2] (typo): unknown field `spce`"),
            "{:?}",
            t.skipped.first_errors
        );
        assert!(
            t.skipped.first_errors[2].contains("n.yaml:6: jobs[3]: runtime"),
            "{:?}",
            t.skipped.first_errors
        );
    }

    #[test]
    fn block_yaml_and_json_entries_are_located_by_line() {
        let yaml = "jobs:\n  - name: a\n    submit: 0\n    runtime: 60\n  - name: b\n    submit: x\n    runtime: 60\n";
        let err = parse("b.yaml", yaml, false).unwrap_err().to_string();
        assert!(err.starts_with("b.yaml:5: jobs[1] (b): "), "{err}");
        let json =
            "[\n  {\"submit\": 0, \"runtime\": 60},\n\n  {\"submit\": 0, \"runtime\": \"x\"}\n]\n";
        let err = parse("j.json", json, false).unwrap_err().to_string();
        assert!(err.starts_with("j.json:4: jobs[1]: runtime"), "{err}");
        let t = parse("b.yaml", yaml, true).unwrap();
        assert_eq!(t.jobs[0].line, 2);
    }

    #[test]
    fn durations() {
        assert_eq!(duration_secs("90").unwrap(), 5400);
        assert_eq!(duration_secs("1:30").unwrap(), 90);
        assert_eq!(duration_secs("1:00:00").unwrap(), 3600);
        assert_eq!(duration_secs("2-01").unwrap(), 2 * 86400 + 3600);
        assert!(duration_secs("x").is_err());
    }
}

//! `scontrol update JobId=ID KEY=VALUE...`: changes what a job asks for, as Slurm's does for
//! a pending job, by a merge patch of the BatchJob's spec. Each value is checked by the
//! function `sbatch` checks the same option with ([`crate::sbatch::values`]) and written as
//! `sbatch` writes it; the operator's admission then judges the job as a submission. Once a
//! job has started only `Nice`, `Priority` and `Dependency` change, and a running job's
//! `TimeLimit` may be lowered: admission refuses the rest, naming the fields, since the
//! job's pods were built from them. Admission also refuses a higher `Priority` or a
//! negative `Nice` from anyone but an administrator, as slurmctld does.

use kube::Api;
use kube::core::ResourceExt;
use muster_crds::slurm::ArraySpec;
use muster_crds::v1alpha1::{BatchJob, JobState};
use serde_json::{Value, json};

use crate::Io;
use crate::sbatch::manifest::{hostlist_field, int_or_string, partition_object_name};
use crate::sbatch::values;

/// A checked value as the spec field's JSON (`Value::Null` clears the field).
type Convert = fn(&str) -> Result<Value, String>;

/// The keys `scontrol update` takes (case-insensitive; the first name is Slurm's), the spec
/// field each sets, and its check. An empty value clears an optional field.
pub const KEYS: &[(&[&str], &str, Convert)] = &[
    (&["TimeLimit"], "time", |v| {
        let t = values::time(v)?;
        let t = if t == "-1" { "UNLIMITED" } else { t.as_str() };
        Ok(json!(int_or_string(t)))
    }),
    (&["Partition"], "partition", |v| {
        Ok(json!(partition_object_name(&values::partition(v)?)))
    }),
    (&["JobName", "Name"], "jobName", |v| {
        Ok(json!(values::job_name(v)?))
    }),
    (&["NumNodes", "ReqNodes"], "nodes", |v| {
        Ok(json!(int_or_string(&values::nodes(v)?)))
    }),
    (&["NumTasks", "ReqProcs"], "ntasks", |v| {
        Ok(json!(values::count(v)?))
    }),
    (&["Nice"], "nice", |v| Ok(json!(values::nice(v)?))),
    (&["Priority"], "priority", |v| {
        Ok(json!(values::priority(v)?))
    }),
    (&["Dependency"], "dependency", |v| {
        optional(v, |v| Ok(json!(values::dependency(v)?)))
    }),
    (&["ExcNodeList"], "exclude", |v| {
        optional(v, |v| Ok(json!(hostlist_field(v))))
    }),
    (&["ReqNodeList", "NodeList"], "nodelist", |v| {
        optional(v, |v| Ok(json!(hostlist_field(v))))
    }),
    (&["Features"], "constraint", |v| {
        optional(v, |v| Ok(json!(values::constraint(v)?)))
    }),
    (&["Gres", "TresPerNode"], "gres", |v| {
        optional(v, |v| Ok(json!(values::gres(v)?)))
    }),
    (&["Account"], "account", |v| {
        optional(v, |v| Ok(json!(values::account(v)?)))
    }),
    (&["MinMemoryNode"], "mem", |v| {
        optional(v, |v| Ok(json!(values::mem(v)?)))
    }),
    (&["StartTime"], "begin", |v| {
        optional(v, |v| {
            values::begin(v)?;
            let t = muster_crds::slurm::begin::parse(v, &jiff::Zoned::now())
                .map_err(|e| e.to_string())?;
            Ok(json!(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                t
            )))
        })
    }),
    (&["Requeue"], "requeue", |v| match v {
        "0" => Ok(json!(false)),
        "1" => Ok(json!(true)),
        _ => Err("expected 0 or 1".into()),
    }),
];

/// `ArrayTaskThrottle=N`: at most N elements of an array at once (0: no limit), the `%N`
/// of its `--array`.
const THROTTLE: &str = "ArrayTaskThrottle";

fn optional(v: &str, f: impl Fn(&str) -> Result<Value, String>) -> Result<Value, String> {
    if v.is_empty() { Ok(Value::Null) } else { f(v) }
}

/// A parsed `scontrol update` of jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    /// The job ids (`JobId=1,2_3`).
    pub ids: Vec<String>,
    /// Spec fields and their new values, in the order given.
    pub fields: Vec<(&'static str, Value)>,
    /// A new `ArrayTaskThrottle`.
    pub throttle: Option<u32>,
    /// `TimeLimit=+N` / `-N`: minutes added to (taken from) each job's current limit.
    pub time_delta: Option<i64>,
}

/// `+TIME` / `-TIME` as Slurm's scontrol reads a relative `TimeLimit` (`-1` is a minute less,
/// not unlimited as in sbatch); `None` for an absolute value.
fn time_delta(v: &str) -> Option<Result<i64, String>> {
    let sign = match v.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    Some(match muster_crds::slurm::TimeLimit::parse(&v[1..]) {
        Ok(muster_crds::slurm::TimeLimit::Minutes(m)) => Ok(sign * i64::from(m)),
        _ => Err(format!(
            "Invalid TimeLimit value: {v}: expected +TIME or -TIME, TIME as MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
        )),
    })
}

/// The limit, in minutes, `delta` makes of a job's current one (Slurm's messages).
pub fn shifted_limit(
    current: Option<muster_crds::slurm::TimeLimit>,
    delta: i64,
) -> Result<i64, String> {
    let cur = match current {
        Some(muster_crds::slurm::TimeLimit::Minutes(m)) => i64::from(m),
        Some(muster_crds::slurm::TimeLimit::Unlimited) => {
            return Err("TimeLimit increment/decrement of a job without a time limit".into());
        }
        None => {
            return Err(
                "TimeLimit increment/decrement of a job whose time limit is not set yet".into(),
            );
        }
    };
    if cur + delta < 1 {
        return Err(format!(
            "TimeLimit decrement larger than current time limit ({} > {cur})",
            -delta
        ));
    }
    Ok(cur + delta)
}

/// Parses `JobId=ID KEY=VALUE...` (keys in any case, in any order); the error is the line
/// scontrol prints.
pub fn parse(args: &[String]) -> Result<Update, String> {
    let mut u = Update {
        ids: Vec::new(),
        fields: Vec::new(),
        throttle: None,
        time_delta: None,
    };
    for a in args {
        let Some((k, v)) = a.split_once('=') else {
            return Err(format!(
                "Invalid input: {a}: expected KEY=VALUE (for example JobId=12 TimeLimit=1:00:00)"
            ));
        };
        if k.eq_ignore_ascii_case("JobId") || k.eq_ignore_ascii_case("Job") {
            let ids = crate::rows::ids::expand(&[v.to_string()])
                .map_err(|bad| format!("Invalid job id specified for job {bad}"))?;
            u.ids.extend(ids);
            continue;
        }
        if k.eq_ignore_ascii_case(THROTTLE) {
            u.throttle = Some(v.parse().map_err(|_| {
                format!("Invalid {THROTTLE} value: {v}: expected a whole number (0: no limit)")
            })?);
            continue;
        }
        let Some((names, field, convert)) = KEYS
            .iter()
            .find(|(names, _, _)| names.iter().any(|n| n.eq_ignore_ascii_case(k)))
        else {
            return Err(format!(
                "Update of this parameter is not supported: {k} (Muster updates {}, {THROTTLE})",
                KEYS.iter().map(|k| k.0[0]).collect::<Vec<_>>().join(", ")
            ));
        };
        u.fields.retain(|f| f.0 != *field);
        if *field == "time" {
            u.time_delta = None;
            if let Some(d) = time_delta(v) {
                u.time_delta = Some(d?);
                continue;
            }
        }
        let value = convert(v).map_err(|e| format!("Invalid {} value: {v}: {e}", names[0]))?;
        u.fields.push((field, value));
    }
    if u.ids.is_empty() {
        return Err("No job identification provided: give JobId=ID".into());
    }
    if u.fields.is_empty() && u.throttle.is_none() && u.time_delta.is_none() {
        return Err("No changes specified: give KEY=VALUE after JobId".into());
    }
    Ok(u)
}

/// `--array` with its `%` limit replaced by `throttle` (0: none).
fn throttled(array: &str, throttle: u32) -> Result<String, String> {
    ArraySpec::parse(array).map_err(|e| e.to_string())?;
    let base = array.split('%').next().unwrap_or(array);
    Ok(if throttle == 0 {
        base.to_string()
    } else {
        format!("{base}%{throttle}")
    })
}

/// Which BatchJobs an id names: a job or an array (its parent and every element created),
/// or one created element (`ID_TASK`). `Err`: the message scontrol prints.
fn targets<'a>(jobs: &'a [BatchJob], id: &str) -> Result<Vec<&'a BatchJob>, String> {
    let job_id = |j: &BatchJob| j.status.as_ref().and_then(|s| s.job_id);
    let array_id = |j: &BatchJob| j.status.as_ref().and_then(|s| s.array_job_id);
    let task_id = |j: &BatchJob| j.status.as_ref().and_then(|s| s.array_task_id);
    let invalid = || format!("Invalid job id specified for job {id}");
    let found: Vec<&BatchJob> = if let Some((a, t)) = id.split_once('_') {
        let (a, t) = (
            a.parse::<u64>().map_err(|_| invalid())?,
            t.parse::<u32>().map_err(|_| invalid())?,
        );
        let parent = jobs
            .iter()
            .find(|j| job_id(j) == Some(a) && j.spec.array.is_some());
        let elem: Vec<&BatchJob> = jobs
            .iter()
            .filter(|j| array_id(j) == Some(a) && task_id(j) == Some(t))
            .collect();
        if elem.is_empty() && parent.is_some() {
            return Err(format!(
                "array index {id} has not started: update the whole array (JobId={a})"
            ));
        }
        elem
    } else {
        let n = id.parse::<u64>().map_err(|_| invalid())?;
        jobs.iter()
            .filter(|j| job_id(j) == Some(n) || array_id(j) == Some(n))
            .collect()
    };
    if found.is_empty() {
        return Err(invalid());
    }
    Ok(found)
}

/// Applies `u`. Errors are per job, as Slurm reports them; false if any failed. A whole
/// array's update changes its parent (the elements it has yet to create) and its pending
/// elements; elements that have started keep what they asked for.
pub async fn run(
    cluster: &crate::cluster::Cluster,
    all: bool,
    u: &Update,
    io: &mut Io<'_>,
) -> anyhow::Result<bool> {
    let jobs = crate::fetch::batchjobs(cluster, all).await?;
    let mut ok = true;
    for id in &u.ids {
        let found = match targets(&jobs, id) {
            Ok(f) => f,
            Err(e) => {
                writeln!(io.err, "scontrol: error: {e}")?;
                ok = false;
                continue;
            }
        };
        let whole_array = found.len() > 1;
        for j in found {
            let is_array = j.spec.array.is_some();
            // A whole array's started elements keep what they asked for; its elements are
            // not arrays, so a throttle alone leaves them be.
            let changes_fields = !u.fields.is_empty() || u.time_delta.is_some();
            if whole_array && !is_array && (j.state() != JobState::Pending || !changes_fields) {
                continue;
            }
            if u.throttle.is_some() && !is_array && !whole_array {
                writeln!(
                    io.err,
                    "scontrol: error: {THROTTLE}: job {id} is not an array"
                )?;
                ok = false;
                continue;
            }
            let (ns, name) = (j.namespace().unwrap_or_default(), j.name_any());
            let api: Api<BatchJob> = Api::namespaced(cluster.client.clone(), &ns);
            // From the version read: a throttle is written into the `--array` text read, so a
            // concurrent change to it (scancel taking tasks out) is not undone.
            let r = crate::job_patch::update(&api, &name, |job| {
                let mut spec = serde_json::Map::new();
                for (f, v) in &u.fields {
                    spec.insert((*f).to_string(), v.clone());
                }
                if let Some(d) = u.time_delta {
                    // Relative to the limit asked for, as read (its status may not show
                    // the last change yet), else the partition's default it runs under.
                    let current = crate::rows::limit_of(&job.spec.time).or_else(|| {
                        job.status
                            .as_ref()
                            .and_then(|s| s.time_limit.as_deref())
                            .and_then(|t| muster_crds::slurm::TimeLimit::parse(t).ok())
                    });
                    spec.insert("time".into(), json!(shifted_limit(current, d)?));
                }
                if let (Some(t), Some(a)) = (u.throttle, crate::rows::int_or_str(&job.spec.array)) {
                    spec.insert("array".into(), json!(throttled(&a, t)?));
                }
                Ok(json!({ "spec": spec }))
            })
            .await;
            if let Err(e) = r {
                writeln!(io.err, "scontrol: error: job {id}: {e}")?;
                ok = false;
            }
        }
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Update, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn keys_map_to_spec_fields_with_sbatchs_checks() {
        let u = p(&[
            "jobid=12,13_2",
            "TimeLimit=1:00:00",
            "partition=Big_GPU",
            "NumNodes=2-4",
            "Nice=10",
            "ExcNodeList=gpu001,gpu002",
            "Dependency=",
            "ArrayTaskThrottle=2",
        ])
        .unwrap();
        assert_eq!(u.ids, ["12", "13_2"]);
        assert_eq!(
            p(&["JobId=9_[1-2,4]", "Nice=1"]).unwrap().ids,
            ["9_1", "9_2", "9_4"]
        );
        assert_eq!(
            p(&["JobId=9_[1-2", "Nice=1"]).unwrap_err(),
            "Invalid job id specified for job 9_[1-2"
        );
        assert_eq!(u.throttle, Some(2));
        assert_eq!(
            u.fields,
            [
                ("time", json!("1:00:00")),
                ("partition", json!("big-gpu")),
                ("nodes", json!("2-4")),
                ("nice", json!(10)),
                ("exclude", json!("gpu[001-002]")),
                ("dependency", Value::Null),
            ]
        );
        assert_eq!(
            p(&["JobId=1", "TimeLimit=30"]).unwrap().fields,
            [("time", json!(30))]
        );
        // Relative, as Slurm's scontrol: -1 is a minute less (not sbatch's unlimited).
        let u = p(&["JobId=1", "TimeLimit=-1"]).unwrap();
        assert_eq!((u.fields.len(), u.time_delta), (0, Some(-1)));
        assert_eq!(
            p(&["JobId=1", "TimeLimit=+1-0"]).unwrap().time_delta,
            Some(1440)
        );
        assert_eq!(
            p(&["JobId=1", "TimeLimit=+1:30:00"]).unwrap().time_delta,
            Some(90)
        );
        let u = p(&["JobId=1", "TimeLimit=+5", "TimeLimit=UNLIMITED"]).unwrap();
        assert_eq!(
            (u.fields, u.time_delta),
            (vec![("time", json!("UNLIMITED"))], None)
        );
        assert!(
            p(&["JobId=1", "TimeLimit=+soon"])
                .unwrap_err()
                .starts_with("Invalid TimeLimit value: +soon: expected +TIME or -TIME")
        );
        use muster_crds::slurm::TimeLimit::{Minutes, Unlimited};
        assert_eq!(shifted_limit(Some(Minutes(20)), -1), Ok(19));
        assert_eq!(shifted_limit(Some(Minutes(30)), 1440), Ok(1470));
        assert_eq!(
            shifted_limit(Some(Minutes(19)), -100).unwrap_err(),
            "TimeLimit decrement larger than current time limit (100 > 19)"
        );
        assert!(shifted_limit(Some(Unlimited), 5).is_err());
        assert!(shifted_limit(None, 5).is_err());
    }

    #[test]
    fn bad_input_names_the_key_and_what_is_allowed() {
        let e = p(&["JobId=1", "TimeLimit=soon"]).unwrap_err();
        assert!(e.starts_with("Invalid TimeLimit value: soon: "), "{e}");
        let e = p(&["JobId=1", "Comment=x"]).unwrap_err();
        assert!(
            e.starts_with("Update of this parameter is not supported: Comment (Muster updates TimeLimit, Partition,"),
            "{e}"
        );
        assert!(e.ends_with(", ArrayTaskThrottle)"), "{e}");
        assert_eq!(
            p(&["TimeLimit=10"]).unwrap_err(),
            "No job identification provided: give JobId=ID"
        );
        assert_eq!(
            p(&["JobId=1"]).unwrap_err(),
            "No changes specified: give KEY=VALUE after JobId"
        );
        assert!(
            p(&["JobId=1", "NumNodes=0"])
                .unwrap_err()
                .starts_with("Invalid NumNodes value: 0: ")
        );
        assert!(
            p(&["JobId=1", "Requeue=yes"])
                .unwrap_err()
                .contains("expected 0 or 1")
        );
        assert!(
            p(&["JobId", "1"])
                .unwrap_err()
                .starts_with("Invalid input: JobId: expected KEY=VALUE")
        );
    }

    #[test]
    fn the_throttle_replaces_the_arrays_limit() {
        assert_eq!(throttled("0-15:4%2", 3).unwrap(), "0-15:4%3");
        assert_eq!(throttled("0-9", 2).unwrap(), "0-9%2");
        assert_eq!(throttled("0-9%4", 0).unwrap(), "0-9");
    }
}

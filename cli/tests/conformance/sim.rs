//! The simulator's way: a row as a native trace, run through `muster simulate`, its jobs
//! CSV read back.

use super::*;

/// One simulated job's outcome, read from `jobs-muster.csv`.
#[derive(Clone, Debug, Default)]
pub struct SimJob {
    /// Submit (seconds on the replay's clock, which starts at the first submit).
    pub submit: i64,
    /// Start (seconds on the replay's clock).
    pub start: Option<i64>,
    /// End.
    pub end: Option<i64>,
    /// Final state.
    pub state: String,
    /// The nodes.
    pub nodes: String,
    /// `(node, GPUs)` by rank.
    pub tasks: Vec<(String, Vec<u32>)>,
    /// Reason or rejection text.
    pub reason: String,
    /// The pending message.
    pub message: String,
    /// Times requeued.
    pub requeues: u32,
}

/// Runs `muster simulate` on the suite's cluster with `trace` (native YAML); per trace job
/// id, its outcome — or the error text when the trace is refused.
pub async fn simulate(dir: &Path, trace: &Value) -> Result<BTreeMap<String, SimJob>, String> {
    let tfile = dir.join("trace.yaml");
    let cfile = dir.join("cluster.yaml");
    let out = dir.join("out");
    std::fs::write(&tfile, serde_yaml::to_string(trace).unwrap()).unwrap();
    std::fs::write(&cfile, SPEC).unwrap();
    let argv: Vec<OsString> = [
        "muster",
        "simulate",
        "--trace",
        tfile.to_str().unwrap(),
        "--cluster",
        cfile.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--time-limit",
        "UNLIMITED",
        "--interval",
        "0",
        "--no-progress",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let (ok, _, err) = run_cli(argv, "dana").await;
    if !ok {
        return Err(err);
    }
    let text = std::fs::read_to_string(out.join("jobs-muster.csv")).unwrap();
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let mut jobs = BTreeMap::new();
    let headers = r.headers().unwrap().clone();
    let col = |row: &csv::StringRecord, name: &str| -> String {
        let i = headers.iter().position(|h| h == name).unwrap();
        row[i].to_string()
    };
    for row in r.records() {
        let row = row.unwrap();
        let tasks = col(&row, "tasks")
            .split_whitespace()
            .map(|t| {
                let (n, g) = t.split_once(':').unwrap();
                let gpus = g
                    .split(',')
                    .filter(|x| !x.is_empty())
                    .map(|x| x.parse().unwrap())
                    .collect();
                (n.to_string(), gpus)
            })
            .collect();
        jobs.insert(
            col(&row, "job"),
            SimJob {
                submit: col(&row, "submit").parse().unwrap_or(0),
                start: col(&row, "start").parse().ok(),
                end: col(&row, "end").parse().ok(),
                state: col(&row, "state"),
                nodes: col(&row, "nodelist"),
                tasks,
                reason: col(&row, "reason"),
                message: col(&row, "message"),
                requeues: col(&row, "requeues").parse().unwrap_or(0),
            },
        );
    }
    Ok(jobs)
}

/// The simulator's trace of a row: the partitions, the background jobs at second 0, the
/// row's job at second 1 (once they run), the later jobs at second 5.
pub fn trace(row: &Row) -> Value {
    let entry = |j: &Job, submit: i64, default_runtime: u64| {
        json!({"name": j.name, "user": j.user, "submit": submit,
               "runtime": j.runtime.unwrap_or(default_runtime), "spec": j.spec})
    };
    let mut jobs: Vec<Value> = row
        .background
        .iter()
        .map(|j| entry(j, 0, 100_000))
        .collect();
    jobs.push(entry(&row.job, 1, 1000));
    jobs.extend(row.later.iter().map(|j| entry(j, 5, 1000)));
    json!({
        "partitions": partitions()
            .into_iter()
            .map(|(n, s)| json!({"name": n, "spec": s}))
            .collect::<Vec<_>>(),
        "jobs": jobs,
    })
}

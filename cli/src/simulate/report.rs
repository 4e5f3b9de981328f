//! The report: a table on the terminal (one column per policy), the same figures as CSV and
//! JSON, and every job's outcome as CSV.

use std::io::Write;

use serde::Serialize;

use super::engine::{Cluster, Outcome, SimRun, Workload};
use super::metrics::Summary;
use muster_operator::bench::BIG_GANG_NODES;

/// A duration the way the report prints it: `42s`, `12m05s`, `3h04m`, `2d03h`.
pub fn dur(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".into();
    }
    let s = secs.round() as u64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3_600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3_600, (s / 60) % 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s / 3_600) % 24)
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The table's rows: a label and one cell per summary.
pub fn rows(sums: &[Summary]) -> Vec<(String, Vec<String>)> {
    let row = |label: &str, f: &dyn Fn(&Summary) -> String| {
        (label.to_string(), sums.iter().map(f).collect::<Vec<_>>())
    };
    vec![
        row("Jobs started / in trace", &|s| {
            format!(
                "{} / {}",
                thousands(s.started as u64),
                thousands(s.jobs as u64)
            )
        }),
        row("Completed / timed out / preempted", &|s| {
            format!(
                "{} / {} / {}",
                thousands(s.completed as u64),
                thousands(s.timeouts as u64),
                thousands(s.preempted as u64)
            )
        }),
        row("Rejected / never started", &|s| {
            format!("{} / {}", s.rejected, s.never_started)
        }),
        row("Makespan", &|s| dur(s.makespan_secs as f64)),
        row("Wait: mean", &|s| dur(s.wait_mean_secs)),
        row("Wait: median", &|s| dur(s.wait_median_secs)),
        row("Wait: p95", &|s| dur(s.wait_p95_secs)),
        row(
            &format!("Wait: longest, gang of {BIG_GANG_NODES}+ nodes"),
            &|s| s.big_gang_wait_max_secs.map_or("-".into(), dur),
        ),
        row("Job completion time: mean", &|s| dur(s.jct_mean_secs)),
        row("Bounded slowdown (10 s): mean", &|s| {
            format!("{:.2}", s.bounded_slowdown)
        }),
        row("GPU utilisation", &|s| pct(s.gpu_utilisation)),
        row("Fragmentation (stranded GPUs, jobs waiting)", &|s| {
            pct(s.fragmentation)
        }),
        row("Idle GPUs while jobs wait", &|s| pct(s.idle_while_waiting)),
        row("Multi-node jobs: leaf span / lower bound", &|s| {
            if s.multi_node_jobs == 0 {
                "-".into()
            } else {
                format!("{:.2} / {:.2}", s.leaf_span_mean, s.leaf_span_lower_bound)
            }
        }),
        row("Multi-node jobs: leaf span by GPU-hours", &|s| {
            if s.multi_node_jobs == 0 {
                "-".into()
            } else {
                format!(
                    "{:.2} / {:.2}",
                    s.leaf_span_gpu_hours, s.leaf_span_lower_bound_gpu_hours
                )
            }
        }),
        row("Multi-node jobs at the lower bound", &|s| {
            if s.multi_node_jobs == 0 {
                "-".into()
            } else {
                format!("{} of {}", pct(s.at_leaf_lower_bound), s.multi_node_jobs)
            }
        }),
        row("Preemptions (GPU-hours lost)", &|s| {
            format!("{} ({:.1})", s.preemptions, s.lost_gpu_hours)
        }),
        row("Estimated starts: mean |error|", &|s| {
            if s.estimated_jobs == 0 {
                "-".into()
            } else {
                dur(s.estimate_error_mean_secs)
            }
        }),
        row("Started by first estimate", &|s| {
            if s.estimated_jobs == 0 {
                "-".into()
            } else {
                format!("{} of {}", pct(s.started_by_estimate), s.estimated_jobs)
            }
        }),
        row("Scheduling cycles run / skipped", &|s| {
            format!("{} / {}", thousands(s.cycles), thousands(s.skipped_cycles))
        }),
        row("Time in scheduler / whole replay", &|s| {
            format!("{:.2}s / {:.2}s", s.policy_secs, s.wall_secs)
        }),
    ]
}

/// Writes the table: labels left-aligned, one right-aligned column per policy. (A table of
/// a few columns does not warrant a table crate.)
pub fn write_table(
    out: &mut dyn Write,
    headings: &[&str],
    sums: &[Summary],
) -> std::io::Result<()> {
    let rows = rows(sums);
    let lw = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..sums.len())
        .map(|c| {
            rows.iter()
                .map(|r| r.1[c].chars().count())
                .chain([headings[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    write!(out, "{:lw$}", "")?;
    for (c, h) in headings.iter().enumerate() {
        write!(out, "  {:>w$}", h, w = widths[c])?;
    }
    writeln!(out)?;
    for (label, cells) in &rows {
        write!(out, "{label:lw$}")?;
        for (c, cell) in cells.iter().enumerate() {
            write!(out, "  {:>w$}", cell, w = widths[c])?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// The summaries as CSV (one row per policy, the [`Summary`] fields as columns).
pub fn summary_csv(sums: &[Summary]) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for s in sums {
        w.serialize(s)?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// One job's line in `jobs-POLICY.csv`.
#[derive(Serialize)]
struct JobRow<'a> {
    job: &'a str,
    submit: i64,
    start: Option<i64>,
    end: Option<i64>,
    wait: Option<i64>,
    runtime: u64,
    gpus: u32,
    nodes: u32,
    nodelist: String,
    leaves: u32,
    state: Outcome,
    requeues: u32,
    first_estimate: Option<i64>,
    reason: String,
    /// The pending reason's detail (or why it was rejected).
    message: String,
    /// Each task of the last run by rank: `NODE:GPU,GPU`, space-separated.
    tasks: String,
}

/// Every job's outcome as CSV (times in seconds from the first submit).
pub fn jobs_csv(run: &SimRun, w: &Workload, cl: &Cluster) -> Result<String, csv::Error> {
    let mut wr = csv::Writer::from_writer(Vec::new());
    for (o, j) in run.jobs.iter().zip(&w.jobs) {
        wr.serialize(JobRow {
            job: &j.trace_id,
            submit: j.submit,
            start: o.start,
            end: o.end,
            wait: o.start.map(|s| s - j.submit),
            runtime: j.runtime,
            gpus: o.gpus,
            nodes: o.nodes,
            nodelist: muster_crds::slurm::hostlist::compress(
                o.node_ids
                    .iter()
                    .map(|&n| cl.nodes[n as usize].name.as_str()),
            ),
            leaves: o.leaves,
            state: o.outcome,
            requeues: o.requeues,
            first_estimate: o.first_estimate,
            reason: o
                .message
                .clone()
                .or_else(|| o.reason.map(|r| r.to_string()))
                .unwrap_or_default(),
            message: o.pending_message.clone().unwrap_or_default(),
            tasks: o
                .tasks
                .iter()
                .map(|(n, g)| {
                    let gpus: Vec<String> = g.iter().map(u32::to_string).collect();
                    format!("{}:{}", cl.nodes[*n as usize].name, gpus.join(","))
                })
                .collect::<Vec<_>>()
                .join(" "),
        })?;
    }
    let bytes = wr.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Where every job is at `--until`: the running ones with their nodes, GPUs and leaves (in
/// start order), then how many wait.
pub fn write_placements(
    out: &mut dyn Write,
    run: &SimRun,
    w: &Workload,
    cl: &Cluster,
    until: i64,
) -> std::io::Result<()> {
    let mut running: Vec<(i64, usize)> = run
        .jobs
        .iter()
        .enumerate()
        .filter(|(_, o)| o.outcome == Outcome::Running)
        .filter_map(|(i, o)| Some((o.start?, i)))
        .collect();
    running.sort_unstable();
    let waiting = run
        .jobs
        .iter()
        .zip(&w.jobs)
        .filter(|(o, j)| o.outcome == Outcome::NeverStarted && j.submit <= until)
        .count();
    let gpus: u64 = running
        .iter()
        .map(|&(_, i)| u64::from(run.jobs[i].gpus))
        .sum();
    writeln!(
        out,
        "{} at {}: {} running on {} of {} GPUs, {} waiting",
        run.policy.label(),
        dur(until as f64),
        running.len(),
        thousands(gpus),
        thousands(cl.total_gpus),
        waiting
    )?;
    writeln!(
        out,
        "  {:<14} {:>9} {:>5} {:>6} {:>6}  nodes",
        "job", "started", "GPUs", "nodes", "leaves"
    )?;
    for (start, i) in running {
        let o = &run.jobs[i];
        writeln!(
            out,
            "  {:<14} {:>9} {:>5} {:>6} {:>6}  {}",
            w.jobs[i].trace_id,
            dur(start as f64),
            o.gpus,
            o.nodes,
            o.leaves,
            muster_crds::slurm::hostlist::compress(
                o.node_ids
                    .iter()
                    .map(|&n| cl.nodes[n as usize].name.as_str())
            )
        )?;
    }
    Ok(())
}

/// The cluster in one line.
pub fn cluster_line(cl: &Cluster) -> String {
    format!(
        "{}: {} nodes x {} GPUs = {} GPUs, {} leaf switches of {} nodes",
        cl.name,
        thousands(cl.nodes.len() as u64),
        cl.gpus_per_node,
        thousands(cl.total_gpus),
        cl.leaf_names.len(),
        cl.nodes_per_leaf
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_numbers_read_well() {
        assert_eq!(dur(42.4), "42s");
        assert_eq!(dur(725.0), "12m05s");
        assert_eq!(dur(3.0 * 3600.0 + 240.0), "3h04m");
        assert_eq!(dur(2.0 * 86_400.0 + 3.0 * 3_600.0), "2d03h");
        assert_eq!(dur(f64::NAN), "-");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}

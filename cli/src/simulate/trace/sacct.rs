//! Slurm accounting records, as printed by
//!
//! ```text
//! sacct --allusers --parsable2 --starttime=2024-01-01 \
//!       --format=JobID,Submit,Start,End,NNodes,AllocTRES,Timelimit,Partition
//! ```
//!
//! The header line names the columns (any order, any case; extra columns are ignored; a
//! trailing `|` from `--parsable` is accepted). Required: `JobID`, `Submit`, `Start`, `End`
//! and `AllocTRES`; optional: `NNodes`, `Timelimit`, `Partition`, and `Account` (or `User`)
//! as the job's namespace for fair share.
//!
//! - Job steps (`123.batch`, `123.extern`, `123.0`) are part of their job and skipped
//!   (counted). Array elements (`123_4`) and heterogeneous components (`123+1`) are jobs.
//! - Times are `YYYY-MM-DDTHH:MM:SS` (read as UTC; only differences matter) or Unix seconds
//!   (`SLURM_TIME_FORMAT=%s`). A job whose `Start` is `Unknown`/`None` never ran, and one
//!   whose `End` is `Unknown` was still running: both are skipped (counted). The run time
//!   replayed is `End - Start`.
//! - GPUs come from `AllocTRES`: `gres/gpu=N`, or the sum of typed `gres/gpu:TYPE=N` entries
//!   when no untyped one is present. Jobs without GPUs are skipped (counted).
//! - `Timelimit` in Slurm's syntax (`30:00`, `1-00:00:00`, `UNLIMITED`); `Partition_Limit`,
//!   empty or `Unknown` mean none was recorded, so the run's time-limit rule applies.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use muster_crds::slurm::TimeLimit;

use super::{Ask, Format, Rows, Trace, TraceError, TraceJob, TraceLimit};

const REQUIRED: [&str; 5] = ["jobid", "submit", "start", "end", "alloctres"];

/// Parses `sacct --parsable2` text named `name`.
pub fn parse(name: &str, text: &str, skip_bad: bool) -> Result<Trace, TraceError> {
    let mut rows = Rows::new(name, skip_bad);
    let mut rdr = csv::ReaderBuilder::new()
        .delimiter(b'|')
        .quoting(false)
        .has_headers(true)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers: Vec<String> = rdr
        .headers()
        .map_err(|e| rows.file_error(format!("cannot read the header line: {e}")))?
        .iter()
        .map(|h| h.trim_start_matches('\u{feff}').to_ascii_lowercase())
        .collect();
    let find = |want: &str| headers.iter().position(|h| h == want);
    for want in REQUIRED {
        if find(want).is_none() {
            return Err(rows.file_error(format!(
                "no '{want}' column in the header; sacct traces need JobID, Submit, Start, End and AllocTRES \
                 (sacct --parsable2 --format=JobID,Submit,Start,End,NNodes,AllocTRES,Timelimit,Partition)"
            )));
        }
    }
    let col = |want: &str| find(want).expect("checked above");
    let (c_id, c_submit, c_start, c_end, c_tres) = (
        col("jobid"),
        col("submit"),
        col("start"),
        col("end"),
        col("alloctres"),
    );
    let c_nodes = find("nnodes");
    let c_limit = find("timelimit");
    let c_part = find("partition");
    let c_ns = find("account").or_else(|| find("user"));
    let needed = [c_id, c_submit, c_start, c_end, c_tres]
        .into_iter()
        .chain(c_nodes)
        .chain(c_limit)
        .chain(c_part)
        .chain(c_ns)
        .max()
        .unwrap_or(0)
        + 1;
    let mut jobs = Vec::new();
    let mut record = csv::StringRecord::new();
    let expected = format!("{} as the header names", headers.len());
    while let Some(line) = rows.next_record(&mut rdr, &mut record, needed, &expected)? {
        match row(
            &record, c_id, c_submit, c_start, c_end, c_tres, c_nodes, c_limit, c_part, c_ns, line,
        ) {
            Ok(Row::Job(j)) => jobs.push(*j),
            Ok(Row::Step) => rows.skipped.steps += 1,
            Ok(Row::NotRun) => rows.skipped.not_run += 1,
            Ok(Row::NoGpus) => rows.skipped.no_gpus += 1,
            Err(msg) => rows.bad(line, msg)?,
        }
    }
    Ok(Trace {
        source: name.to_string(),
        format: Format::Sacct,
        jobs,
        skipped: rows.skipped,
        partitions: Vec::new(),
    })
}

enum Row {
    Job(Box<TraceJob>),
    Step,
    NotRun,
    NoGpus,
}

#[allow(clippy::too_many_arguments)]
fn row(
    r: &csv::StringRecord,
    c_id: usize,
    c_submit: usize,
    c_start: usize,
    c_end: usize,
    c_tres: usize,
    c_nodes: Option<usize>,
    c_limit: Option<usize>,
    c_part: Option<usize>,
    c_ns: Option<usize>,
    line: usize,
) -> Result<Row, String> {
    let id = &r[c_id];
    if id.is_empty() {
        return Err("JobID is empty".into());
    }
    if id.contains('.') {
        return Ok(Row::Step);
    }
    if !id.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return Err(format!(
            "JobID {id:?} is not a Slurm job id (123, 123_4 for an array element, 123+1 for a het component)"
        ));
    }
    let submit = time(&r[c_submit], "Submit")?
        .ok_or_else(|| format!("Submit is {:?}; every job has a submit time", &r[c_submit]))?;
    let Some(start) = time(&r[c_start], "Start")? else {
        return Ok(Row::NotRun);
    };
    let Some(end) = time(&r[c_end], "End")? else {
        return Ok(Row::NotRun);
    };
    if end < start {
        return Err(format!("End {} is before Start {}", &r[c_end], &r[c_start]));
    }
    if start < submit {
        return Err(format!(
            "Start {} is before Submit {}",
            &r[c_start], &r[c_submit]
        ));
    }
    let gpus = tres_gpus(&r[c_tres])?;
    if gpus == 0 {
        return Ok(Row::NoGpus);
    }
    let nodes = match c_nodes.map(|c| &r[c]) {
        None | Some("") => None,
        Some(s) => match s.parse::<u32>() {
            Ok(n) if n >= 1 => Some(n),
            _ => return Err(format!("NNodes {s:?} is not a node count >= 1")),
        },
    };
    let limit = match c_limit.map(|c| &r[c]) {
        None | Some("") => TraceLimit::Missing,
        Some(s)
            if s.eq_ignore_ascii_case("partition_limit")
                || s.eq_ignore_ascii_case("unknown")
                || s.eq_ignore_ascii_case("none") =>
        {
            TraceLimit::Missing
        }
        Some(s) => match TimeLimit::parse(s) {
            Ok(TimeLimit::Unlimited) => TraceLimit::Unlimited,
            Ok(t) => TraceLimit::Secs(t.seconds().unwrap_or(0)),
            Err(e) => return Err(format!("Timelimit: {e}")),
        },
    };
    let text = |c: Option<usize>| c.map(|c| r[c].to_string()).filter(|s| !s.is_empty());
    Ok(Row::Job(Box::new(TraceJob {
        id: id.to_string(),
        line,
        submit,
        runtime: (end - start) as u64,
        ask: Ask::Gpus { gpus, nodes },
        limit,
        // A pending job may list several partitions; the one it ran in comes first.
        partition: text(c_part).map(|p| p.split(',').next().unwrap_or("").to_string()),
        namespace: text(c_ns),
        name: None,
        nice: 0,
        priority: None,
        hold: false,
        begin: None,
        dependency: None,
        user: None,
        array: None,
        requeue: true,
        cancel: false,
    })))
}

/// A sacct timestamp in seconds; `None` for `Unknown`, `None` or empty.
fn time(s: &str, field: &str) -> Result<Option<i64>, String> {
    if s.is_empty() || s.eq_ignore_ascii_case("unknown") || s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map(Some)
            .map_err(|_| format!("{field} {s:?} is too large"));
    }
    let dt: DateTime = s.parse().map_err(|_| {
        format!("{field} {s:?} is not a time: expected YYYY-MM-DDTHH:MM:SS, Unix seconds, Unknown or None")
    })?;
    dt.to_zoned(TimeZone::UTC)
        .map(|z| Some(z.timestamp().as_second()))
        .map_err(|e| format!("{field} {s:?}: {e}"))
}

/// GPUs in an `AllocTRES` value (`billing=8,cpu=8,gres/gpu=2,mem=64G,node=1`).
fn tres_gpus(s: &str) -> Result<u32, String> {
    let mut untyped: Option<u32> = None;
    let mut typed: u32 = 0;
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            return Err(format!(
                "AllocTRES item {item:?} is not NAME=COUNT (as in gres/gpu=4)"
            ));
        };
        let k = k.to_ascii_lowercase();
        let count = || {
            v.parse::<u32>()
                .map_err(|_| format!("AllocTRES {k}={v:?}: the GPU count is not a whole number"))
        };
        if k == "gres/gpu" {
            untyped = Some(count()?);
        } else if let Some(ty) = k.strip_prefix("gres/gpu:") {
            // Typed counts repeat the untyped total when both are recorded; `gres/gpu:a100:mem`
            // style sub-TRES are not GPU counts.
            if !ty.contains(':') {
                typed = typed.saturating_add(count()?);
            }
        }
    }
    Ok(untyped.unwrap_or(typed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "JobID|Submit|Start|End|NNodes|AllocTRES|Timelimit|Partition";

    #[test]
    fn jobs_steps_arrays_and_unknowns() {
        let text = format!(
            "{HEAD}\n\
             100|2024-01-01T00:00:00|2024-01-01T00:00:10|2024-01-01T01:00:10|2|billing=16,cpu=16,gres/gpu=16,mem=1T,node=2|02:00:00|gpu\n\
             100.batch|2024-01-01T00:00:10|2024-01-01T00:00:10|2024-01-01T01:00:10|1|cpu=8,gres/gpu=8,mem=500G,node=1||\n\
             100.0|2024-01-01T00:00:10|2024-01-01T00:00:10|2024-01-01T01:00:10|2|cpu=16,gres/gpu=16,node=2||\n\
             101_3|2024-01-01T00:01:00|2024-01-01T00:02:00|2024-01-01T00:12:00|1|cpu=1,gres/gpu:a100=1,node=1|UNLIMITED|gpu,debug\n\
             102|2024-01-01T00:02:00|Unknown|Unknown|1|||Partition_Limit|gpu\n\
             103|2024-01-01T00:03:00|2024-01-01T00:03:00|Unknown|1|cpu=1,gres/gpu=1|1-00:00:00|gpu\n\
             104|2024-01-01T00:04:00|2024-01-01T00:04:00|2024-01-01T00:05:00|1|cpu=4,mem=1G,node=1|10|cpu\n\
             105|1704067500|1704067500|1704067560|1|gres/gpu=4|Partition_Limit|\n"
        );
        let t = parse("s.txt", &text, false).unwrap();
        assert_eq!(t.jobs.len(), 3);
        let j = &t.jobs[0];
        assert_eq!(j.id, "100");
        assert_eq!(j.runtime, 3600);
        assert_eq!(
            j.ask,
            Ask::Gpus {
                gpus: 16,
                nodes: Some(2)
            }
        );
        assert_eq!(j.limit, TraceLimit::Secs(7200));
        assert_eq!(j.partition.as_deref(), Some("gpu"));
        assert_eq!(t.jobs[1].id, "101_3");
        assert_eq!(t.jobs[1].submit - j.submit, 60);
        assert_eq!(t.jobs[1].limit, TraceLimit::Unlimited);
        assert_eq!(
            t.jobs[1].ask,
            Ask::Gpus {
                gpus: 1,
                nodes: Some(1)
            }
        );
        assert_eq!(t.jobs[1].partition.as_deref(), Some("gpu"));
        assert_eq!(t.jobs[2].submit - j.submit, 300);
        assert_eq!(t.jobs[2].limit, TraceLimit::Missing);
        assert_eq!(t.skipped.steps, 2);
        assert_eq!(t.skipped.not_run, 2);
        assert_eq!(t.skipped.no_gpus, 1);
    }

    #[test]
    fn bad_rows_name_line_and_field() {
        let text = format!(
            "{HEAD}|\n\
             1|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:01:00|1|gres/gpu=1|1:00|gpu|\n\
             2|yesterday|2024-01-01T00:00:00|2024-01-01T00:01:00|1|gres/gpu=1|1:00|gpu|\n\
             3|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:01:00|1|gres/gpu=x|1:00|gpu|\n\
             4|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:01:00|1|gres/gpu=1|1h|gpu|\n\
             5|2024-01-01T00:00:00|2024-01-01T00:02:00|2024-01-01T00:01:00|1|gres/gpu=1|1:00|gpu|\n"
        );
        let err = parse("s.txt", &text, false).unwrap_err().to_string();
        assert!(err.starts_with("s.txt:3: Submit \"yesterday\""), "{err}");
        let t = parse("s.txt", &text, true).unwrap();
        assert_eq!(t.jobs.len(), 1);
        assert_eq!(t.skipped.bad_rows, 4);
        let e = &t.skipped.first_errors;
        assert!(
            e[1].starts_with("s.txt:4: AllocTRES gres/gpu=\"x\""),
            "{}",
            e[1]
        );
        assert!(
            e[2].starts_with("s.txt:5: Timelimit: invalid time limit"),
            "{}",
            e[2]
        );
        assert!(
            e[3].contains("End 2024-01-01T00:01:00 is before Start"),
            "{}",
            e[3]
        );
    }

    #[test]
    fn missing_columns_are_named() {
        let err = parse("s.txt", "JobID|Submit|Start|End\n1|0|0|1\n", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no 'alloctres' column"), "{err}");
    }

    #[test]
    fn typed_gpu_tres_are_summed_when_alone() {
        assert_eq!(
            tres_gpus("cpu=2,gres/gpu:a100=2,gres/gpu:h100=1").unwrap(),
            3
        );
        assert_eq!(tres_gpus("gres/gpu=4,gres/gpu:a100=4").unwrap(), 4);
        assert_eq!(tres_gpus("cpu=2,mem=4G").unwrap(), 0);
        assert!(tres_gpus("cpu").is_err());
    }
}

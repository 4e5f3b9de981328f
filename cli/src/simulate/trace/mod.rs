//! Job traces the simulator replays, in one neutral form ([`Trace`]), read from:
//!
//! - [`itp`]: the ITP (Microsoft Philly-style) CSV `job_id,submission_time,duration,num_gpu`;
//! - [`sacct`]: Slurm accounting, `sacct --parsable2` output with a header line;
//! - [`native`]: a YAML or JSON list of BatchJob specs with submit and run times;
//! - [`synth`]: a seeded generator shaped like the bundled ITP trace.
//!
//! Every reader reports a bad row as an error naming the file, the line and what is allowed;
//! with `skip_bad_rows` it goes on and counts the rows instead ([`Skipped::bad_rows`]). Rows a
//! replay cannot use although they are well-formed (job steps, jobs that never started,
//! CPU-only jobs) are skipped and counted under their own heading, never silently.

pub mod itp;
pub mod native;
pub mod sacct;
pub mod synth;

use std::path::Path;

use muster_operator::core::{DependencySpec, JobRequest, Partition};

/// A trace format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Decide from the content: a `submission_time` column is ITP, a `|`-separated header
    /// with `JobID` is sacct, anything else is read as native YAML/JSON.
    Auto,
    /// ITP CSV: `job_id,submission_time,duration,num_gpu`.
    Itp,
    /// `sacct --parsable2 --format=JobID,Submit,Start,End,NNodes,AllocTRES,Timelimit,Partition`.
    Sacct,
    /// YAML or JSON: BatchJob specs with `submit` and `runtime`.
    Native,
    /// Generated (`--synthetic`).
    Synthetic,
}

impl Format {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Itp => "itp",
            Format::Sacct => "sacct",
            Format::Native => "native",
            Format::Synthetic => "synthetic",
        }
    }
}

/// What a trace job asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Ask {
    /// A GPU total, with the node count it ran on when the trace says (sacct); the gang rule
    /// of the run turns it into a request (see [`super::shape`]).
    Gpus {
        /// GPUs of the whole job.
        gpus: u32,
        /// Nodes it used in the recorded history.
        nodes: Option<u32>,
    },
    /// A complete request (native traces), used as is.
    Request(Box<JobRequest>),
}

/// The time limit a trace records for a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceLimit {
    /// None recorded (ITP; sacct `Partition_Limit`): the run's time-limit rule decides.
    Missing,
    /// A native spec without `time`: the partition's default (else maximum) time, as on a
    /// cluster; the run's rule where the partition sets neither.
    Partition,
    /// `UNLIMITED`.
    Unlimited,
    /// A limit in seconds.
    Secs(u64),
}

/// One job of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    /// The trace's job id (`123_4` for an array element of sacct).
    pub id: String,
    /// The line it came from (1-based; 0 for generated jobs).
    pub line: usize,
    /// Submit time in seconds on the trace's clock.
    pub submit: i64,
    /// How long it actually ran, in seconds.
    pub runtime: u64,
    /// What it asks for.
    pub ask: Ask,
    /// Its recorded time limit.
    pub limit: TraceLimit,
    /// Partition name, when the trace has one.
    pub partition: Option<String>,
    /// Namespace (Slurm account/user), for fair share; `None`: one shared namespace.
    pub namespace: Option<String>,
    /// BatchJob name (native traces; what dependencies would refer to).
    pub name: Option<String>,
    /// `--nice`.
    pub nice: i32,
    /// `--priority`.
    pub priority: Option<u32>,
    /// `--hold`: never released in a replay, so the job never starts.
    pub hold: bool,
    /// `--begin` (native traces): not started before this time, in the trace's seconds.
    pub begin: Option<i64>,
    /// `--dependency` (native traces).
    pub dependency: Option<DependencySpec>,
    /// The submitting user (native traces), for `--exclusive=user`.
    pub user: Option<String>,
    /// For an element of an array job (native traces): its array, index and `%N` throttle.
    pub array: Option<TraceArray>,
    /// `--requeue` (the default) / `--no-requeue`: a preempted job is requeued only if set.
    pub requeue: bool,
    /// `spec.cancel` (native traces): cancelled before it could run.
    pub cancel: bool,
}

/// Array membership of a trace job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceArray {
    /// The array's trace id (its elements are `ID_INDEX`).
    pub parent: String,
    /// This element's index.
    pub index: u32,
    /// `%N`: at most this many elements run at once.
    pub max_running: Option<u32>,
}

impl TraceJob {
    /// A job asking for `gpus` GPUs, with nothing else recorded.
    pub fn gpus(id: impl Into<String>, line: usize, submit: i64, runtime: u64, gpus: u32) -> Self {
        TraceJob {
            id: id.into(),
            line,
            submit,
            runtime,
            ask: Ask::Gpus { gpus, nodes: None },
            limit: TraceLimit::Missing,
            partition: None,
            namespace: None,
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
        }
    }
}

/// Well-formed rows left out, and bad rows skipped with `--skip-bad-rows`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// Rows that do not parse (only counted with `--skip-bad-rows`; otherwise the first one
    /// is an error).
    pub bad_rows: usize,
    /// The first few bad-row messages, for the report.
    pub first_errors: Vec<String>,
    /// sacct job steps (`123.batch`, `123.0`, `123.extern`): part of their job's allocation.
    pub steps: usize,
    /// Jobs that never started in the recorded history (sacct `Start` is `Unknown`/`None`),
    /// or had not ended when it was taken (`End` is `Unknown`): no run time to replay.
    pub not_run: usize,
    /// Jobs without GPUs: the simulator replays GPU jobs only.
    pub no_gpus: usize,
}

impl Skipped {
    /// How many messages [`Skipped::first_errors`] keeps.
    pub const KEEP_ERRORS: usize = 5;

    /// Total rows left out.
    pub fn total(&self) -> usize {
        self.bad_rows + self.steps + self.not_run + self.no_gpus
    }
}

/// A partition a native trace defines (its jobs name it with `spec.partition`).
#[derive(Clone, Debug, PartialEq)]
pub struct TracePartition {
    /// The core partition (selector, tier, preempt mode, limits).
    pub partition: Partition,
    /// Jobs that name no partition go here.
    pub default: bool,
}

/// A whole trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// Where it came from, for messages and reports.
    pub source: String,
    /// Its format.
    pub format: Format,
    /// Jobs in submit order (stable for equal times: file order).
    pub jobs: Vec<TraceJob>,
    /// Rows left out.
    pub skipped: Skipped,
    /// Partitions the trace defines (native traces only; empty: one partition over every
    /// node).
    pub partitions: Vec<TracePartition>,
}

/// A trace that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// One row is wrong.
    #[error("{file}:{line}: {message}")]
    Row {
        /// The trace's name.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// The file as a whole is wrong (no header, unknown columns, no jobs).
    #[error("{file}: {message}")]
    File {
        /// The trace's name.
        file: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// The file cannot be read.
    #[error("{file}: cannot read: {err}")]
    Io {
        /// The path.
        file: String,
        /// Why.
        #[source]
        err: std::io::Error,
    },
}

/// Collects bad rows: the first is an error unless bad rows are skipped.
pub(crate) struct Rows<'a> {
    pub file: &'a str,
    pub skip_bad: bool,
    pub skipped: Skipped,
}

impl<'a> Rows<'a> {
    pub(crate) fn new(file: &'a str, skip_bad: bool) -> Self {
        Rows {
            file,
            skip_bad,
            skipped: Skipped::default(),
        }
    }

    /// Reports a bad row: `Err` unless skipping, then it is counted.
    pub(crate) fn bad(&mut self, line: usize, message: String) -> Result<(), TraceError> {
        let err = TraceError::Row {
            file: self.file.to_string(),
            line,
            message,
        };
        if !self.skip_bad {
            return Err(err);
        }
        self.skipped.bad_rows += 1;
        if self.skipped.first_errors.len() < Skipped::KEEP_ERRORS {
            self.skipped.first_errors.push(err.to_string());
        }
        Ok(())
    }

    /// Reads the next non-blank CSV record with at least `needed` fields into `record` and
    /// returns its line; unreadable and short rows go through [`Rows::bad`]. `None`: end of
    /// input. `expected` says what a full row holds, for the short-row message.
    pub(crate) fn next_record<R: std::io::Read>(
        &mut self,
        rdr: &mut csv::Reader<R>,
        record: &mut csv::StringRecord,
        needed: usize,
        expected: &str,
    ) -> Result<Option<usize>, TraceError> {
        loop {
            let line_hint = rdr.position().line() as usize;
            match rdr.read_record(record) {
                Ok(false) => return Ok(None),
                Ok(true) => {}
                Err(e) => {
                    let line = e.position().map(|p| p.line() as usize).unwrap_or(line_hint);
                    self.bad(line, format!("unreadable CSV row: {e}"))?;
                    continue;
                }
            }
            let line = record
                .position()
                .map(|p| p.line() as usize)
                .unwrap_or(line_hint);
            if record.iter().all(str::is_empty) {
                continue;
            }
            if record.len() < needed {
                self.bad(
                    line,
                    format!("{} field(s), expected {expected}", record.len()),
                )?;
                continue;
            }
            return Ok(Some(line));
        }
    }

    pub(crate) fn file_error(&self, message: impl Into<String>) -> TraceError {
        TraceError::File {
            file: self.file.to_string(),
            message: message.into(),
        }
    }
}

/// Reads the trace file at `path`, named `name` in messages, in `format` (`Auto`: detected
/// from the content).
pub fn read_file(
    path: &Path,
    name: &str,
    format: Format,
    skip_bad: bool,
) -> Result<Trace, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|err| TraceError::Io {
        file: name.to_string(),
        err,
    })?;
    parse(name, &text, format, skip_bad)
}

/// Parses trace text named `name` in `format` (`Auto`: detected from the content).
pub fn parse(name: &str, text: &str, format: Format, skip_bad: bool) -> Result<Trace, TraceError> {
    let format = match format {
        Format::Auto => detect(text),
        f => f,
    };
    let mut trace = match format {
        Format::Itp => itp::parse(name, text, skip_bad)?,
        Format::Sacct => sacct::parse(name, text, skip_bad)?,
        Format::Native => native::parse(name, text, skip_bad)?,
        Format::Auto | Format::Synthetic => {
            return Err(TraceError::File {
                file: name.to_string(),
                message: "a trace file is itp, sacct or native".into(),
            });
        }
    };
    if trace.jobs.is_empty() {
        let why = if trace.skipped.total() > 0 {
            format!(
                "no job to replay ({} row(s) left out: {} bad, {} job steps, {} never ran, {} without GPUs)",
                trace.skipped.total(),
                trace.skipped.bad_rows,
                trace.skipped.steps,
                trace.skipped.not_run,
                trace.skipped.no_gpus
            )
        } else {
            "no job to replay".to_string()
        };
        return Err(TraceError::File {
            file: name.to_string(),
            message: why,
        });
    }
    // The replay needs submit order; keep file order among equal times.
    trace.jobs.sort_by_key(|j| j.submit);
    Ok(trace)
}

/// The format of `text`, judged from its first non-blank line.
pub fn detect(text: &str) -> Format {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .trim_start_matches('\u{feff}');
    let lower = first.to_ascii_lowercase();
    if first.contains('|') && lower.split('|').any(|c| c.trim() == "jobid") {
        Format::Sacct
    } else if lower.contains("submission_time") && lower.contains(',') {
        Format::Itp
    } else {
        Format::Native
    }
}

/// Parses a non-negative amount of seconds: an integer, or a decimal rounded to the nearest
/// second.
pub(crate) fn parse_secs(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(v) = s.parse::<i64>() {
        return Some(v);
    }
    let v: f64 = s.parse().ok()?;
    (v.is_finite() && v.abs() < 1e15).then(|| v.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_detected_from_the_header() {
        assert_eq!(
            detect("job_id,submission_time,duration,num_gpu\n"),
            Format::Itp
        );
        assert_eq!(
            detect("\u{feff}JobID|Submit|Start|End|NNodes|AllocTRES\n1|..."),
            Format::Sacct
        );
        assert_eq!(detect("jobs:\n  - submit: 0\n"), Format::Native);
        assert_eq!(detect("[{\"submit\": 0}]"), Format::Native);
    }

    #[test]
    fn seconds_accept_integers_and_decimals() {
        assert_eq!(parse_secs("16566"), Some(16566));
        assert_eq!(parse_secs(" 12.6 "), Some(13));
        assert_eq!(parse_secs("-5"), Some(-5));
        assert_eq!(parse_secs("abc"), None);
        assert_eq!(parse_secs("1e300"), None);
        assert_eq!(parse_secs("NaN"), None);
    }
}

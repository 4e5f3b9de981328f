//! The ITP GPU-cluster trace format (Microsoft's "Philly"/ITP traces):
//!
//! ```text
//! job_id,submission_time,duration,num_gpu
//! 59a72878-e5c4-ab9d-e813-68c36b50edeb,16566,3890,4
//! ```
//!
//! `submission_time` is seconds on the trace's own clock, `duration` the run time in seconds,
//! `num_gpu` the job's GPU total. Columns are found by their header names (any order, any
//! case; extra columns are ignored). Times may be decimals (rounded to the second). The trace
//! has no time limits and no node counts: the run's `--time-limit` and `--gang` rules supply
//! them. Rows with `num_gpu` 0 are CPU-only jobs and are skipped (counted).

use super::{Format, Rows, Trace, TraceError, TraceJob, parse_secs};

const HEADER: &str = "job_id,submission_time,duration,num_gpu";

/// Parses ITP CSV text named `name`.
pub fn parse(name: &str, text: &str, skip_bad: bool) -> Result<Trace, TraceError> {
    let mut rows = Rows::new(name, skip_bad);
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| rows.file_error(format!("cannot read the header line: {e}")))?
        .clone();
    let col = |want: &str| -> Result<usize, TraceError> {
        headers
            .iter()
            .position(|h| h.trim_start_matches('\u{feff}').eq_ignore_ascii_case(want))
            .ok_or_else(|| {
                rows.file_error(format!(
                    "no '{want}' column; an ITP trace starts with the header {HEADER}"
                ))
            })
    };
    let (c_id, c_submit, c_dur, c_gpu) = (
        col("job_id")?,
        col("submission_time")?,
        col("duration")?,
        col("num_gpu")?,
    );
    let needed = c_id.max(c_submit).max(c_dur).max(c_gpu) + 1;
    let mut jobs = Vec::new();
    let mut record = csv::StringRecord::new();
    let expected = format!("{} ({HEADER})", headers.len());
    while let Some(line) = rows.next_record(&mut rdr, &mut record, needed, &expected)? {
        let id = record[c_id].to_string();
        if id.is_empty() {
            rows.bad(line, "job_id is empty".into())?;
            continue;
        }
        let Some(submit) = parse_secs(&record[c_submit]) else {
            rows.bad(
                line,
                format!(
                    "submission_time {:?} is not a number of seconds",
                    &record[c_submit]
                ),
            )?;
            continue;
        };
        let runtime = match parse_secs(&record[c_dur]) {
            Some(d) if d >= 0 => d as u64,
            _ => {
                rows.bad(
                    line,
                    format!(
                        "duration {:?} is not a number of seconds >= 0",
                        &record[c_dur]
                    ),
                )?;
                continue;
            }
        };
        let gpus = match record[c_gpu].parse::<u32>() {
            Ok(g) => g,
            Err(_) => {
                rows.bad(
                    line,
                    format!(
                        "num_gpu {:?} is not a whole number of GPUs >= 0",
                        &record[c_gpu]
                    ),
                )?;
                continue;
            }
        };
        if gpus == 0 {
            rows.skipped.no_gpus += 1;
            continue;
        }
        jobs.push(TraceJob::gpus(id, line, submit, runtime, gpus));
    }
    Ok(Trace {
        source: name.to_string(),
        format: Format::Itp,
        jobs,
        skipped: rows.skipped,
        partitions: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::trace::Ask;

    #[test]
    fn reads_rows_in_any_column_order() {
        let t = parse(
            "t.csv",
            "num_gpu,job_id,duration,submission_time\n8,a,100,5\n1,b,60.4,7\n",
            false,
        )
        .unwrap();
        assert_eq!(t.jobs.len(), 2);
        assert_eq!(t.jobs[0].id, "a");
        assert_eq!(t.jobs[0].submit, 5);
        assert_eq!(t.jobs[0].runtime, 100);
        assert_eq!(
            t.jobs[0].ask,
            Ask::Gpus {
                gpus: 8,
                nodes: None
            }
        );
        assert_eq!(t.jobs[1].runtime, 60);
        assert_eq!(t.jobs[1].line, 3);
    }

    #[test]
    fn bad_rows_name_their_line_and_can_be_skipped() {
        let text = "job_id,submission_time,duration,num_gpu\na,0,10,1\nb,x,10,1\nc,0,-3,1\nd,0,10\ne,0,10,0\n";
        let err = parse("t.csv", text, false).unwrap_err().to_string();
        assert!(err.starts_with("t.csv:3: submission_time \"x\""), "{err}");
        let t = parse("t.csv", text, true).unwrap();
        assert_eq!(t.jobs.len(), 1);
        assert_eq!(t.skipped.bad_rows, 3);
        assert_eq!(t.skipped.no_gpus, 1);
        assert!(t.skipped.first_errors[1].starts_with("t.csv:4: duration"));
        assert!(t.skipped.first_errors[2].starts_with("t.csv:5: 3 field(s)"));
    }

    #[test]
    fn a_missing_column_is_named() {
        let err = parse("t.csv", "job_id,duration,num_gpu\na,1,1\n", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no 'submission_time' column"), "{err}");
    }
}

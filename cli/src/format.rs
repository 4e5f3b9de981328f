//! Slurm's field formatting, shared by squeue and sinfo: `%[.][size]type[suffix]` format
//! strings and the padding/truncation rules of their `_print_str`.

/// One `%` field of a format string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The type letter (`i`, `P`, …).
    pub code: char,
    /// Minimum width; 0 prints the value as is.
    pub width: usize,
    /// Right-justify (`%.8j`).
    pub right: bool,
    /// Text printed after the field.
    pub suffix: String,
    /// `%#P` / `%#N` in sinfo's default formats: as wide as the widest value (at least 9).
    pub auto: bool,
}

/// A parsed format string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Format {
    /// Text before the first `%`.
    pub prefix: String,
    /// The fields in order.
    pub fields: Vec<Field>,
}

/// Parse a format as squeue/sinfo do. Fields whose letter `valid` rejects are dropped with a
/// message each (Slurm prints `Invalid job format specification: X` and carries on).
pub fn parse_format(s: &str, valid: impl Fn(char) -> bool) -> (Format, Vec<String>) {
    let mut errors = Vec::new();
    let mut format = Format::default();
    let (prefix, rest) = match s.find('%') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    format.prefix = prefix.to_string();
    // Slurm splits with strtok(…, "%"): empty pieces (`%%`) vanish.
    for token in rest.split('%').filter(|t| !t.is_empty()) {
        let mut chars = token.chars().peekable();
        let mut right = chars.next_if_eq(&'.').is_some();
        // `%-20j`: printf's explicit left justification (Slurm itself only knows `.`).
        if !right && chars.next_if_eq(&'-').is_some() {
            right = false;
        }
        let auto = chars.next_if_eq(&'#').is_some();
        let mut width = 0usize;
        while let Some(d) = chars.next_if(|c| c.is_ascii_digit()) {
            width = width
                .saturating_mul(10)
                .saturating_add(d.to_digit(10).unwrap_or(0) as usize);
        }
        let Some(code) = chars.next() else {
            errors.push(format!("Invalid format specification: %{token}"));
            continue;
        };
        let suffix: String = chars.collect();
        if !valid(code) {
            errors.push(format!("Invalid job format specification: {code}"));
            continue;
        }
        format.fields.push(Field {
            code,
            width,
            right,
            suffix,
            auto,
        });
    }
    (format, errors)
}

/// A `-O/--Format` field's width when none is given (squeue's and sinfo's).
pub const LONG_FIELD_WIDTH: usize = 20;

/// Parse a `-O/--Format` list as squeue/sinfo do: `name[:[.][size][suffix]]`, comma
/// separated, names in any case (`names` maps each to the `%` letter printing it), each field
/// `size` wide (20 by default) with nothing between fields but the suffixes. Unknown names
/// are dropped with a message each, as Slurm's `Invalid job format specification`.
pub fn parse_long_format(s: &str, names: &[(&str, char)], what: &str) -> (Format, Vec<String>) {
    let mut errors = Vec::new();
    let mut format = Format::default();
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (name, spec) = item.split_once(':').unwrap_or((item, ""));
        let Some(&(_, code)) = names.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) else {
            errors.push(format!("Invalid {what} format specification: {name}"));
            continue;
        };
        let mut chars = spec.chars().peekable();
        let right = chars.next_if_eq(&'.').is_some();
        let digits: String = std::iter::from_fn(|| chars.next_if(char::is_ascii_digit)).collect();
        let width = digits.parse().unwrap_or(LONG_FIELD_WIDTH);
        format.fields.push(Field {
            code,
            width,
            right,
            suffix: chars.collect(),
            auto: false,
        });
    }
    (format, errors)
}

/// Slurm's `_print_str`: right-justified values are padded to `width` and, when `cut`, cut
/// to its first `width` characters; left-justified values are always cut to `width` and
/// padded. Width 0 prints the value unchanged.
pub fn pad(value: &str, width: usize, right: bool, cut: bool) -> String {
    if width == 0 {
        return value.to_string();
    }
    let len = value.chars().count();
    if right {
        let padded = if len < width {
            format!("{}{value}", " ".repeat(width - len))
        } else {
            value.to_string()
        };
        if cut {
            padded.chars().take(width).collect()
        } else {
            padded
        }
    } else {
        let cut_value: String = value.chars().take(width).collect();
        let n = cut_value.chars().count();
        format!("{cut_value}{}", " ".repeat(width - n))
    }
}

/// Slurm's `_print_secs`: `M:SS`, `H:MM:SS` or `D-HH:MM:SS` (squeue TIME, sinfo TIMELIMIT).
pub fn secs_short(secs: i64) -> String {
    match u64::try_from(secs) {
        Ok(s) => muster_crds::slurm::time::format_duration_secs(s),
        Err(_) => "INVALID".to_string(),
    }
}

/// Slurm's `secs2time_str`: `HH:MM:SS` or `D-HH:MM:SS`, hours always two digits (sacct's
/// Elapsed, scontrol's RunTime and TimeLimit, sbatch -v's time). The Slurm syntax library
/// formats squeue's shorter form only.
pub fn secs_long(secs: i64) -> String {
    let secs = secs.max(0);
    let (d, h, m, s) = (
        secs / 86400,
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
    );
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// What squeue and sinfo say, and stop, when given both `-o` and `-l` (Slurm 22.05's words).
pub const FORMAT_WITH_LONG: &str =
    "Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.";

/// The date line heading `-l` and `-i` reports (Slurm's `slurm_ctime2`: `Tue Dec 01 22:43:42
/// 2026`, the day zero-padded, unlike C's `ctime`).
pub fn date_line(now: jiff::Timestamp, tz: &jiff::tz::TimeZone) -> String {
    now.to_zoned(tz.clone())
        .strftime("%a %b %d %H:%M:%S %Y")
        .to_string()
}

/// Slurm's standard time stamp (`2024-05-01T13:45:00`, local time), or `N/A`.
pub fn timestamp(t: Option<jiff::Timestamp>, tz: &jiff::tz::TimeZone) -> String {
    match t {
        Some(t) => t
            .to_zoned(tz.clone())
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string(),
        None => "N/A".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_slurm_formats() {
        let (f, errs) = parse_format("%.18i %.9P %.8j %-20u%R", |_| true);
        assert!(errs.is_empty());
        assert_eq!(f.prefix, "");
        assert_eq!(
            f.fields[0],
            Field {
                code: 'i',
                width: 18,
                right: true,
                suffix: " ".into(),
                auto: false
            }
        );
        assert_eq!(
            (f.fields[3].code, f.fields[3].width, f.fields[3].right),
            ('u', 20, false)
        );
        let (f, _) = parse_format("JOB:%i|%j", |_| true);
        assert_eq!(f.prefix, "JOB:");
        assert_eq!(f.fields[0].suffix, "|");
        let (f, errs) = parse_format("%i %Q %j", |c| c != 'Q');
        assert_eq!(errs, ["Invalid job format specification: Q"]);
        assert_eq!(f.fields.len(), 2);
        assert_eq!(f.fields[0].suffix, " ");
    }

    #[test]
    fn pads_and_cuts_like_print_str() {
        assert_eq!(pad("123", 18, true, true), format!("{}123", " ".repeat(15)));
        assert_eq!(pad("gpus_per_task_test", 8, true, true), "gpus_per");
        assert_eq!(pad("gpus_per_task_test", 8, false, true), "gpus_per");
        assert_eq!(pad("ab", 4, false, true), "ab  ");
        assert_eq!(pad("gpu[001-004]", 5, true, false), "gpu[001-004]");
        assert_eq!(pad("gpu[001-004]", 5, false, false), "gpu[0");
        assert_eq!(pad("x", 0, true, true), "x");
    }

    #[test]
    fn formats_durations_like_slurm() {
        assert_eq!(secs_short(0), "0:00");
        assert_eq!(secs_short(65), "1:05");
        assert_eq!(secs_short(3600), "1:00:00");
        assert_eq!(secs_short(86400 + 3661), "1-01:01:01");
        assert_eq!(secs_short(-1), "INVALID");
        assert_eq!(secs_long(65), "00:01:05");
        assert_eq!(secs_long(2 * 86400), "2-00:00:00");
    }
}

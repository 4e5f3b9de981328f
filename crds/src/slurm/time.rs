//! Time limits (`--time`, a partition's `MaxTime`/`DefaultTime`, `--switches=N@WAIT`) and
//! elapsed-time formatting as `squeue` prints it.
//!
//! Grammar (Slurm's `time_str2mins`): `MINUTES`, `MINUTES:SECONDS`, `HOURS:MINUTES:SECONDS`,
//! `DAYS-HOURS`, `DAYS-HOURS:MINUTES`, `DAYS-HOURS:MINUTES:SECONDS`, or `UNLIMITED` /
//! `INFINITE` (any case) / `-1`. Fields are not range-checked (`1:99:99` is 1h 99m 99s, as in
//! Slurm). Seconds round up to the next minute (`0:30` is 1 minute), and a limit of zero
//! (`0`, `0:00`) means no limit.
//!
//! Refused although Slurm 22.05 tolerates them: a dangling dash (`1-`, Slurm reads a day), a
//! sign (`-5`, which Slurm turns into 2982611 days through integer overflow) and limits of
//! 2^32-1 minutes or more (Slurm's `int` seconds overflow well before that; we keep exact
//! values up to 8171 years, so every limit we print parses back).

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u64, serde_via_string};

const WHAT: &str = "time limit";
const EXPECTED: &str = "expected MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED";

/// A job or partition time limit, in whole minutes.
///
/// `Minutes(0)` is never produced by this module: a zero limit means no limit in Slurm, so it
/// parses (and [`TimeLimit::from_minutes`] maps it) to [`TimeLimit::Unlimited`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeLimit {
    /// A limit in minutes (at least 1, below `u32::MAX`).
    Minutes(u32),
    /// No limit (`UNLIMITED`, `INFINITE`, `-1`, `0`). Orders after every finite limit.
    Unlimited,
}

impl TimeLimit {
    /// The largest finite limit, in minutes. `u32::MAX` is Slurm's `INFINITE`.
    pub const MAX_MINUTES: u32 = u32::MAX - 1;

    /// Parses a Slurm time limit (see the [module docs](self)).
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("infinite") || s == "-1" {
            return Ok(TimeLimit::Unlimited);
        }
        if s.is_empty() {
            return Err(err(format!("empty; {EXPECTED}")));
        }
        if let Some(bad) = s
            .chars()
            .find(|c| !c.is_ascii_digit() && *c != ':' && *c != '-')
        {
            return Err(err(format!("unexpected {bad:?}; {EXPECTED}")));
        }
        let (days, clock) = match s.split_once('-') {
            Some((d, rest)) => (Some(d), rest),
            None => (None, s),
        };
        if clock.contains('-') {
            return Err(err(format!("more than one '-'; {EXPECTED}")));
        }
        let fields: Vec<&str> = clock.split(':').collect();
        if fields.len() > 3 {
            return Err(err(format!("more than two ':'; {EXPECTED}")));
        }
        let num = |f: &str, name: &str| -> Result<u64, SyntaxError> {
            if f.is_empty() {
                return Err(err(format!("missing {name}; {EXPECTED}")));
            }
            // Any field beyond ~10^12 makes the limit exceed MAX_MINUTES anyway.
            parse_digits_u64(f)
                .filter(|v| *v < 1_000_000_000_000)
                .ok_or_else(|| err(format!("{name} {f} is too large")))
        };
        let secs = match days {
            Some(d) => {
                // D-H, D-H:M, D-H:M:S
                let d = num(d, "days")?;
                let h = num(fields[0], "hours")?;
                let m = match fields.get(1) {
                    Some(f) => num(f, "minutes")?,
                    None => 0,
                };
                let sec = match fields.get(2) {
                    Some(f) => num(f, "seconds")?,
                    None => 0,
                };
                d * 86_400 + h * 3_600 + m * 60 + sec
            }
            None => match fields.as_slice() {
                [m] => num(m, "minutes")? * 60,
                [m, sec] => num(m, "minutes")? * 60 + num(sec, "seconds")?,
                [h, m, sec] => {
                    num(h, "hours")? * 3_600 + num(m, "minutes")? * 60 + num(sec, "seconds")?
                }
                _ => return Err(err(format!("more than two ':'; {EXPECTED}"))),
            },
        };
        let minutes = secs.div_ceil(60);
        match u32::try_from(minutes) {
            Ok(0) => Ok(TimeLimit::Unlimited),
            Ok(m) if m <= Self::MAX_MINUTES => Ok(TimeLimit::Minutes(m)),
            _ => Err(err(format!(
                "too large; the longest limit is {} (or UNLIMITED)",
                TimeLimit::Minutes(Self::MAX_MINUTES)
            ))),
        }
    }

    /// A limit of `minutes`; `0` and `u32::MAX` (Slurm's `INFINITE`) mean no limit.
    pub fn from_minutes(minutes: u32) -> Self {
        match minutes {
            0 | u32::MAX => TimeLimit::Unlimited,
            m => TimeLimit::Minutes(m),
        }
    }

    /// A bare integer limit, as in `time: 90` in a manifest: minutes, with `0` and `-1`
    /// meaning no limit.
    pub fn from_int(minutes: i64) -> Result<Self, SyntaxError> {
        match minutes {
            -1 | 0 => Ok(TimeLimit::Unlimited),
            m if m > 0 && m <= i64::from(Self::MAX_MINUTES) => Ok(TimeLimit::Minutes(m as u32)),
            m => Err(SyntaxError::new(
                WHAT,
                &m.to_string(),
                format!(
                    "an integer limit is minutes from 1 to {} (or 0 / -1 for no limit)",
                    Self::MAX_MINUTES
                ),
            )),
        }
    }

    /// The limit in minutes; `None` when unlimited.
    pub fn minutes(&self) -> Option<u32> {
        match self {
            TimeLimit::Minutes(m) => Some(*m),
            TimeLimit::Unlimited => None,
        }
    }

    /// The limit in seconds; `None` when unlimited.
    pub fn seconds(&self) -> Option<u64> {
        self.minutes().map(|m| u64::from(m) * 60)
    }

    /// Whether there is no limit.
    pub fn is_unlimited(&self) -> bool {
        matches!(self, TimeLimit::Unlimited)
    }
}

/// Formats a duration exactly like Slurm's `secs2time_str` (squeue's `TIME`/`%M` and, for
/// whole minutes, `TIME_LIMIT`/`%l`): `M:SS`, `H:MM:SS` or `D-HH:MM:SS`.
///
/// `0` → `0:00`, `3599` → `59:59`, `3600` → `1:00:00`, `183845` → `2-03:04:05`.
pub fn format_duration_secs(secs: u64) -> String {
    let days = secs / 86_400;
    let hours = (secs / 3_600) % 24;
    let minutes = (secs / 60) % 60;
    let seconds = secs % 60;
    if days > 0 {
        format!("{days}-{hours:02}:{minutes:02}:{seconds:02}")
    } else if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

impl fmt::Display for TimeLimit {
    /// As squeue prints a limit: `10:00`, `1:00:00`, `1-00:00:00`, `UNLIMITED`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seconds() {
            Some(s) => f.write_str(&format_duration_secs(s)),
            None => f.write_str("UNLIMITED"),
        }
    }
}

impl FromStr for TimeLimit {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(
    TimeLimit,
    "a Slurm time limit (minutes as an integer, or a string such as \"1-00:00:00\")",
    from_int = TimeLimit::from_int
);

#[cfg(test)]
mod tests {
    use super::*;

    fn mins(s: &str) -> Option<u32> {
        TimeLimit::parse(s).unwrap().minutes()
    }

    #[test]
    fn slurm_22_05_known_answers() {
        // Each pair recorded from `sbatch -vv` (its "time :" line) with Slurm 22.05.
        assert_eq!(mins("5"), Some(5)); // 00:05:00
        assert_eq!(mins("5:30"), Some(6)); // 00:06:00
        assert_eq!(mins("0:30"), Some(1)); // 00:01:00
        assert_eq!(mins("1:0:0"), Some(60)); // 01:00:00
        assert_eq!(mins("1:00:01"), Some(61)); // 01:01:00
        assert_eq!(mins("1-0"), Some(1440)); // 1-00:00:00
        assert_eq!(mins("1-2"), Some(1440 + 120)); // 1-02:00:00
        assert_eq!(mins("1-2:3"), Some(1440 + 123)); // 1-02:03:00
        assert_eq!(mins("1-2:3:4"), Some(1440 + 124)); // 1-02:04:00
        assert_eq!(mins("1:60"), Some(2)); // 00:02:00
        assert_eq!(mins("1:99:99"), Some(161)); // 02:41:00
        assert_eq!(mins("24855-0"), Some(24855 * 1440)); // 24855-00:00:00
        for unlimited in [
            "0",
            "0:00",
            "-1",
            "infinite",
            "UNLIMITED",
            "Unlimited",
            "INFINITE",
        ] {
            assert_eq!(
                TimeLimit::parse(unlimited),
                Ok(TimeLimit::Unlimited),
                "{unlimited}"
            );
        }
        // Refused by sbatch too ("Invalid --time specification").
        for bad in ["1h", ":5", "5::", "1:2:3:4", "1-2-3", " 5", "+5", ""] {
            assert!(TimeLimit::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn facts_md_examples() {
        assert_eq!(mins("3:00"), Some(3)); // "`3:00` is 3 minutes"
        assert_eq!(mins("1-0"), Some(1440)); // "`1-0` is a day"
    }

    #[test]
    fn refuses_what_slurm_garbles() {
        for bad in [
            "1-",
            "-5",
            "1-:5",
            "5-",
            "99999999999999999999",
            "4294967295",
        ] {
            assert!(TimeLimit::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(mins("4294967294"), Some(u32::MAX - 1));
    }

    #[test]
    fn error_message_lists_the_formats() {
        assert_eq!(
            TimeLimit::parse("1h").unwrap_err().to_string(),
            "invalid time limit \"1h\": unexpected 'h'; expected MINUTES, MM:SS, HH:MM:SS, \
             D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"
        );
    }

    #[test]
    fn display_like_squeue() {
        assert_eq!(TimeLimit::Minutes(10).to_string(), "10:00");
        assert_eq!(TimeLimit::Minutes(60).to_string(), "1:00:00");
        assert_eq!(TimeLimit::Minutes(1440).to_string(), "1-00:00:00");
        assert_eq!(TimeLimit::Minutes(1441).to_string(), "1-00:01:00");
        assert_eq!(TimeLimit::Unlimited.to_string(), "UNLIMITED");
        assert_eq!(format_duration_secs(0), "0:00");
        assert_eq!(format_duration_secs(59), "0:59");
        assert_eq!(format_duration_secs(3599), "59:59");
        assert_eq!(format_duration_secs(3600), "1:00:00");
        assert_eq!(format_duration_secs(86_399), "23:59:59");
        assert_eq!(
            format_duration_secs(2 * 86_400 + 3 * 3600 + 4 * 60 + 5),
            "2-03:04:05"
        );
    }

    #[test]
    fn conversions() {
        assert_eq!(TimeLimit::from_minutes(0), TimeLimit::Unlimited);
        assert_eq!(TimeLimit::from_minutes(u32::MAX), TimeLimit::Unlimited);
        assert_eq!(TimeLimit::from_minutes(7).seconds(), Some(420));
        assert_eq!(TimeLimit::from_int(90), Ok(TimeLimit::Minutes(90)));
        assert_eq!(TimeLimit::from_int(-1), Ok(TimeLimit::Unlimited));
        assert!(TimeLimit::from_int(-2).is_err());
        assert!(TimeLimit::from_int(1 << 40).is_err());
        assert!(TimeLimit::Minutes(5) < TimeLimit::Unlimited);
    }

    #[test]
    fn serde_int_or_string() {
        let t: TimeLimit = serde_json::from_str("90").unwrap();
        assert_eq!(t, TimeLimit::Minutes(90));
        let t: TimeLimit = serde_json::from_str("\"2-00:00:00\"").unwrap();
        assert_eq!(t, TimeLimit::Minutes(2880));
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"2-00:00:00\"");
        assert!(serde_json::from_str::<TimeLimit>("\"1h\"").is_err());
        assert!(serde_json::from_str::<TimeLimit>("-7").is_err());
    }
}

//! Leaf switch limits: `--switches=COUNT[@MAX_WAIT]`.
//!
//! The job wants its nodes under at most COUNT leaf switches, and waits up to MAX_WAIT (a
//! Slurm time, see [`TimeLimit`]) for such a placement before taking any. COUNT >= 1, as in
//! Slurm 22.05 (`Invalid numeric value "0" for --switches`). MAX_WAIT keeps whole minutes
//! (seconds round up). Slurm's `sbatch` accepts `2@bogus` and prints the wait as `INVALID`;
//! we refuse it.

use std::fmt;
use std::str::FromStr;

use super::time::TimeLimit;
use super::{SyntaxError, parse_digits_u32, serde_via_string};

const WHAT: &str = "switches";

/// A parsed `--switches` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Switches {
    /// Most leaf switches the job's nodes may span (at least 1).
    pub count: u32,
    /// How long to wait for such a placement; `None`: the cluster default.
    pub max_wait: Option<TimeLimit>,
}

impl Switches {
    /// Parses `COUNT[@MAX_WAIT]`.
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        let (count, wait) = match s.split_once('@') {
            Some((c, w)) => (c, Some(w)),
            None => (s, None),
        };
        let count = parse_digits_u32(count).filter(|c| *c >= 1).ok_or_else(|| {
            err("expected COUNT or COUNT@MAX_WAIT with COUNT >= 1 (e.g. 1 or 2@10:00)".to_string())
        })?;
        let max_wait = match wait {
            Some(w) => Some(
                TimeLimit::parse(w).map_err(|e| err(format!("MAX_WAIT {w:?}: {}", e.message)))?,
            ),
            None => None,
        };
        Ok(Switches { count, max_wait })
    }

    /// A bare integer: COUNT.
    pub fn from_int(n: i64) -> Result<Self, SyntaxError> {
        Self::parse(&n.to_string())
    }
}

impl fmt::Display for Switches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.count)?;
        if let Some(w) = self.max_wait {
            write!(f, "@{w}")?;
        }
        Ok(())
    }
}

impl FromStr for Switches {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(
    Switches,
    "a switch count such as 1 or \"2@10:00\"",
    from_int = Switches::from_int
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        // Slurm 22.05 `sbatch -vv`: "--switches=2@10:00" → "switches : 2@00:10:00".
        assert_eq!(
            Switches::parse("2@10:00"),
            Ok(Switches {
                count: 2,
                max_wait: Some(TimeLimit::Minutes(10))
            })
        );
        assert_eq!(
            Switches::parse("1"),
            Ok(Switches {
                count: 1,
                max_wait: None
            })
        );
        assert_eq!(
            Switches::parse("4@1-0").unwrap().max_wait,
            Some(TimeLimit::Minutes(1440))
        );
        for bad in ["0", "2@bogus", "", "@5", "2@", "x", "-1", "2@1h"] {
            assert!(Switches::parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            Switches::parse("2@1h")
                .unwrap_err()
                .to_string()
                .contains("MAX_WAIT \"1h\"")
        );
    }

    #[test]
    fn display_and_serde() {
        assert_eq!(Switches::parse("2@600").unwrap().to_string(), "2@10:00:00");
        assert_eq!(Switches::parse("3").unwrap().to_string(), "3");
        let s: Switches = serde_json::from_str("2").unwrap();
        assert_eq!(s.count, 2);
        let s: Switches = serde_json::from_str("\"2@10:00\"").unwrap();
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"2@10:00\"");
    }
}

//! Job arrays: `--array=0-15%4`, `1,3,5-7`, `0-15:4`, `0-15:4%2`.
//!
//! Grammar (Slurm's `--array`): a comma list of `N` or `LO-HI[:STEP]`, then an optional
//! `%MAX_RUNNING`. Indices must be below MaxArraySize ([`MAX_ARRAY_SIZE`] by default;
//! [`ArraySpec::parse_with_max`] takes a cluster's own value). `0-15:4%2` is {0,4,8,12}, at
//! most two running at once.
//!
//! Slurm 22.05's `sbatch` does not check the value (slurmctld does). Refused here although
//! slurmctld skips or tolerates them: empty items (`1,,2`), brackets (`[1-3]`), reversed ranges
//! (`5-1`, which Slurm turns into an empty array) and `%0`.

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u32, serde_via_string};

const WHAT: &str = "array";
const EXPECTED: &str = "expected indices N or LO-HI[:STEP] joined by commas, then an optional %MAX_RUNNING \
     (e.g. 0-15%4, 1,3,5-7 or 0-15:4)";

/// Slurm's default `MaxArraySize`: array indices must be below it.
pub const MAX_ARRAY_SIZE: u32 = 1001;

/// The largest MaxArraySize Slurm allows (slurm.conf(5)); larger values passed to
/// [`ArraySpec::parse_with_max`] are treated as this.
pub const MAX_ARRAY_SIZE_LIMIT: u32 = 4_000_001;

/// A parsed `--array` value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArraySpec {
    /// The array indices, sorted and without duplicates (never empty after parsing).
    pub indices: Vec<u32>,
    /// `%N`: at most this many tasks of the array run at once.
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// Parses with Slurm's default MaxArraySize ([`MAX_ARRAY_SIZE`]).
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        Self::parse_with_max(s, MAX_ARRAY_SIZE)
    }

    /// Parses with a cluster's MaxArraySize: every index must be below `max_array_size`.
    pub fn parse_with_max(s: &str, max_array_size: u32) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        let (list, max_running) = match s.split_once('%') {
            Some((list, m)) => {
                let m = parse_digits_u32(m)
                    .filter(|m| *m >= 1)
                    .ok_or_else(|| err(format!("%{m}: MAX_RUNNING must be a number >= 1")))?;
                (list, Some(m))
            }
            None => (s, None),
        };
        if list.is_empty() {
            return Err(err(format!("no indices; {EXPECTED}")));
        }
        let too_large = |i: u32| {
            err(format!(
                "index {i} is too large: indices must be below MaxArraySize ({max_array_size})"
            ))
        };
        let max_array_size = max_array_size.min(MAX_ARRAY_SIZE_LIMIT);
        // One bit per possible index: at most 4000001 bits (500 KB).
        let mut present = vec![0u64; (max_array_size as usize).div_ceil(64)];
        for item in list.split(',') {
            let num = |t: &str| {
                parse_digits_u32(t).ok_or_else(|| {
                    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                        too_large(u32::MAX)
                    } else {
                        err(format!("invalid item {item:?}; {EXPECTED}"))
                    }
                })
            };
            let (range, step) = match item.split_once(':') {
                Some((r, st)) => {
                    let st = parse_digits_u32(st).filter(|v| *v >= 1).ok_or_else(|| {
                        err(format!(
                            "invalid step in {item:?}; STEP must be a number >= 1"
                        ))
                    })?;
                    (r, Some(st))
                }
                None => (item, None),
            };
            let (lo, hi) = match range.split_once('-') {
                Some((lo, hi)) => (num(lo)?, num(hi)?),
                None if step.is_some() => {
                    return Err(err(format!(
                        "a step needs a range, e.g. 0-15:4, not {item:?}"
                    )));
                }
                None => {
                    let n = num(range)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(err(format!(
                    "range {range:?} is reversed; write LO-HI with LO <= HI"
                )));
            }
            if hi >= max_array_size {
                return Err(too_large(hi));
            }
            let step = step.unwrap_or(1) as usize;
            for i in (lo as usize..=hi as usize).step_by(step) {
                present[i / 64] |= 1 << (i % 64);
            }
        }
        let indices = (0..max_array_size)
            .filter(|i| present[*i as usize / 64] & (1 << (*i % 64)) != 0)
            .collect();
        Ok(ArraySpec {
            indices,
            max_running,
        })
    }

    /// Number of array tasks.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether there are no indices (never true for a parsed value).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// A bare integer `--array` value: that one index.
    pub fn from_int(i: i64) -> Result<Self, SyntaxError> {
        Self::parse(&i.to_string())
    }
}

impl fmt::Display for ArraySpec {
    /// Compact form: runs of consecutive indices as `LO-HI`, runs of three or more with a
    /// constant step as `LO-HI:STEP`, the rest as single indices; then `%MAX_RUNNING`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ix = &self.indices;
        let mut i = 0;
        let mut first = true;
        while i < ix.len() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            // Starts a consecutive run (LO-HI) at k?
            // (`checked_sub`: `indices` is a public field and may be unsorted.)
            let step_at = |k: usize| ix.get(k + 1).and_then(|n| n.checked_sub(ix[k]));
            let pair = |k: usize| step_at(k) == Some(1);
            if pair(i) {
                let mut j = i + 1;
                while pair(j) {
                    j += 1;
                }
                write!(f, "{}-{}", ix[i], ix[j])?;
                i = j + 1;
                continue;
            }
            // A stepped run, not eating the start of a consecutive run.
            if let Some(d) = step_at(i).filter(|d| *d > 1) {
                let mut j = i;
                while step_at(j) == Some(d) && !pair(j + 1) {
                    j += 1;
                }
                if j - i + 1 >= 3 {
                    write!(f, "{}-{}:{}", ix[i], ix[j], d)?;
                    i = j + 1;
                    continue;
                }
            }
            write!(f, "{}", ix[i])?;
            i += 1;
        }
        if let Some(m) = self.max_running {
            write!(f, "%{m}")?;
        }
        Ok(())
    }
}

impl FromStr for ArraySpec {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(
    ArraySpec,
    "a Slurm array spec such as \"0-15%4\" (or one index as an integer)",
    from_int = ArraySpec::from_int
);

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> ArraySpec {
        ArraySpec::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn man_page_and_facts_md_examples() {
        // sbatch(1): "--array=0-15" or "--array=0,6,16-32"; "0-15:4" is 0,4,8,12;
        // "0-15%4" runs at most 4 at once.
        assert_eq!(p("0-15").indices, (0..=15).collect::<Vec<_>>());
        assert_eq!(
            p("0,6,16-32").indices,
            [0, 6].into_iter().chain(16..=32).collect::<Vec<_>>()
        );
        assert_eq!(p("0-15:4").indices, [0, 4, 8, 12]);
        assert_eq!(p("0-15%4").max_running, Some(4));
        // FACTS.md: "0-15:4%2 is {0,4,8,12}, two at a time".
        assert_eq!(
            p("0-15:4%2"),
            ArraySpec {
                indices: vec![0, 4, 8, 12],
                max_running: Some(2)
            }
        );
        assert_eq!(p("1,3,5-7").indices, [1, 3, 5, 6, 7]);
    }

    #[test]
    fn sorted_and_unique() {
        assert_eq!(p("7,1-3,2").indices, [1, 2, 3, 7]);
        assert_eq!(p("01-03").indices, [1, 2, 3]);
        assert_eq!(p("1-3:1000").indices, [1]);
    }

    #[test]
    fn bounds() {
        assert_eq!(p("1000").indices, [1000]);
        assert_eq!(p("0-1000").len(), 1001);
        let e = ArraySpec::parse("1001").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid array \"1001\": index 1001 is too large: indices must be below \
             MaxArraySize (1001)"
        );
        assert!(ArraySpec::parse("0-999999999999").is_err());
        assert!(ArraySpec::parse_with_max("5000", 10_001).is_ok());
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            "", "%4", "5-1", "1-5:0", "1-5:-1", "1%0", "1,", ",1", "1,,2", "1-5:2:3", "3:2", "a",
            "1-5%", "[1-3]", "1-5x", " 1", "1-5%4%2", "-1", "+1", "1-", "1-5:",
        ] {
            assert!(ArraySpec::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn display_is_compact() {
        assert_eq!(p("0-15%4").to_string(), "0-15%4");
        assert_eq!(p("1,3,5-7").to_string(), "1,3,5-7");
        assert_eq!(p("1,3,5,7,8").to_string(), "1-5:2,7-8");
        assert_eq!(p("0-15:4%2").to_string(), "0-12:4%2");
        assert_eq!(p("1,3").to_string(), "1,3");
        assert_eq!(p("5").to_string(), "5");
        assert_eq!(p("1,2,4,8").to_string(), "1-2,4,8");
        // Hand-built values print without panicking, whatever their order.
        let odd = ArraySpec {
            indices: vec![5, 3, 3, 1],
            max_running: None,
        };
        assert_eq!(odd.to_string(), "5,3,3,1");
    }

    #[test]
    fn serde() {
        let a: ArraySpec = serde_json::from_str("7").unwrap();
        assert_eq!(a.indices, [7]);
        let a: ArraySpec = serde_json::from_str("\"0-3%2\"").unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"0-3%2\"");
    }
}

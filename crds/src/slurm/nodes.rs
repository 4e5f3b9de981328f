//! Node counts: `--nodes=4`, `--nodes=2-8`.
//!
//! Grammar: `N` or `MIN-MAX` with `1 <= MIN <= MAX`. Slurm 22.05's `sbatch` also lets
//! `--nodes=0` through (and refuses `4-2`, `2-`, `a`, `3,5` as we do); Muster needs at least
//! one node.

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u32, serde_via_string};

const WHAT: &str = "node count";

/// A node count or range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeRange {
    /// Fewest nodes the job runs on (at least 1).
    pub min: u32,
    /// Most nodes the job runs on (at least `min`).
    pub max: u32,
}

impl NodeRange {
    /// Exactly `n` nodes.
    pub fn exactly(n: u32) -> Self {
        NodeRange { min: n, max: n }
    }

    /// Parses `N` or `MIN-MAX`.
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        let expected =
            "expected a count N >= 1 or a range MIN-MAX with 1 <= MIN <= MAX (e.g. 4 or 2-8)";
        let num = |t: &str| parse_digits_u32(t).ok_or_else(|| err(expected.to_string()));
        let (min, max) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(s)?;
                (n, n)
            }
        };
        if min == 0 {
            return Err(err(format!("a job needs at least one node; {expected}")));
        }
        if min > max {
            return Err(err(format!(
                "the maximum {max} is less than the minimum {min}; {expected}"
            )));
        }
        Ok(NodeRange { min, max })
    }

    /// A bare integer: exactly that many nodes.
    pub fn from_int(n: i64) -> Result<Self, SyntaxError> {
        Self::parse(&n.to_string())
    }

    /// Whether `n` nodes satisfy the request.
    pub fn contains(&self, n: u32) -> bool {
        (self.min..=self.max).contains(&n)
    }
}

impl fmt::Display for NodeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

impl FromStr for NodeRange {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(
    NodeRange,
    "a node count such as 4 or \"2-8\"",
    from_int = NodeRange::from_int
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        assert_eq!(NodeRange::parse("4"), Ok(NodeRange::exactly(4)));
        assert_eq!(NodeRange::parse("2-4"), Ok(NodeRange { min: 2, max: 4 }));
        assert_eq!(NodeRange::parse("3-3"), Ok(NodeRange::exactly(3)));
        // Refused by Slurm 22.05 sbatch too ("Maximum node count 2 is less than minimum node
        // count 4", "\"a\" is not a valid node count").
        for bad in [
            "4-2",
            "2-",
            "a",
            "3,5",
            "",
            "-3",
            "+3",
            "0",
            "0-2",
            " 2",
            "4294967296",
        ] {
            assert!(NodeRange::parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            NodeRange::parse("4-2")
                .unwrap_err()
                .message
                .contains("less than the minimum")
        );
    }

    #[test]
    fn display_and_serde() {
        assert_eq!(NodeRange { min: 2, max: 8 }.to_string(), "2-8");
        assert_eq!(NodeRange::exactly(4).to_string(), "4");
        let n: NodeRange = serde_json::from_str("4").unwrap();
        assert_eq!(n, NodeRange::exactly(4));
        let n: NodeRange = serde_json::from_str("\"2-8\"").unwrap();
        assert!(n.contains(5) && !n.contains(9));
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"2-8\"");
        assert!(serde_json::from_str::<NodeRange>("0").is_err());
    }
}

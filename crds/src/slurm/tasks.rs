//! Per-node counts as Slurm writes them in `SLURM_TASKS_PER_NODE` and
//! `SLURM_JOB_CPUS_PER_NODE`: `2(x3),1` is 2, 2, 2, 1 (one value per node, in node order;
//! a run of N equal values is written `VALUE(xN)`).

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u32, serde_via_string};

const WHAT: &str = "per-node count list";

/// Most nodes a list may describe (bounds the expansion of `(xN)`).
pub const MAX_NODES: usize = 1 << 20;

/// One count per node, e.g. tasks per node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TasksPerNode(pub Vec<u32>);

impl TasksPerNode {
    /// Parses `VALUE[(xN)]` items joined by commas.
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        let expected = "expected COUNT or COUNT(xNODES) items joined by ',' (e.g. 2(x3),1)";
        let mut out = Vec::new();
        for item in s.split(',') {
            let (v, n) = match item.split_once("(x") {
                Some((v, rest)) => {
                    let n = rest
                        .strip_suffix(')')
                        .and_then(parse_digits_u32)
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| err(format!("invalid item {item:?}; {expected}")))?;
                    (v, n as usize)
                }
                None => (item, 1),
            };
            let v = parse_digits_u32(v)
                .ok_or_else(|| err(format!("invalid item {item:?}; {expected}")))?;
            if out.len() + n > MAX_NODES {
                return Err(err(format!("more than {MAX_NODES} nodes")));
            }
            out.extend(std::iter::repeat_n(v, n));
        }
        Ok(TasksPerNode(out))
    }

    /// The sum over all nodes.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|v| u64::from(*v)).sum()
    }
}

impl fmt::Display for TasksPerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.0;
        let mut i = 0;
        while i < v.len() {
            let mut j = i;
            while j + 1 < v.len() && v[j + 1] == v[i] {
                j += 1;
            }
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", v[i])?;
            if j > i {
                write!(f, "(x{})", j - i + 1)?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

impl FromStr for TasksPerNode {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(TasksPerNode, "a per-node count list such as \"2(x3),1\"");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_md_example() {
        let t = TasksPerNode::parse("2(x3),1").unwrap();
        assert_eq!(t.0, [2, 2, 2, 1]);
        assert_eq!(t.total(), 7);
        assert_eq!(t.to_string(), "2(x3),1");
        assert_eq!(TasksPerNode(vec![4, 4]).to_string(), "4(x2)");
        assert_eq!(TasksPerNode(vec![1, 2, 1]).to_string(), "1,2,1");
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            "",
            "2(x0)",
            "2(x)",
            "2(3)",
            "2(x3",
            "x3",
            "2,,1",
            "-1",
            "2(x1048577)",
        ] {
            assert!(TasksPerNode::parse(bad).is_err(), "{bad:?}");
        }
    }
}

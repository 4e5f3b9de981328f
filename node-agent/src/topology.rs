//! GPU-to-GPU connection levels as `nvidia-smi topo -m` names them, the matrix of them, and
//! cpuset lists (`0-55,112-167`) for CPU affinity.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// How one GPU reaches another, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// The GPU itself (`X`).
    SelfLink,
    /// Connected by this many NVLinks (`NV#`), directly or through NVSwitches.
    NvLink(u32),
    /// At most a single PCIe bridge (`PIX`).
    Pix,
    /// Several PCIe bridges, no host bridge (`PXB`).
    Pxb,
    /// Through a PCIe host bridge, the CPU (`PHB`).
    Phb,
    /// Across host bridges within one NUMA node (`NODE`).
    Node,
    /// Across the SMP interconnect between NUMA nodes (`SYS`).
    Sys,
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Link::SelfLink => f.write_str("X"),
            Link::NvLink(n) => write!(f, "NV{n}"),
            Link::Pix => f.write_str("PIX"),
            Link::Pxb => f.write_str("PXB"),
            Link::Phb => f.write_str("PHB"),
            Link::Node => f.write_str("NODE"),
            Link::Sys => f.write_str("SYS"),
        }
    }
}

/// A connection level that is not one of `nvidia-smi topo -m`'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a topology level: expected X, NV<links> (e.g. NV18), PIX, PXB, PHB, NODE or SYS"
)]
pub struct ParseLinkError(pub String);

impl FromStr for Link {
    type Err = ParseLinkError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "X" => Ok(Link::SelfLink),
            "PIX" => Ok(Link::Pix),
            "PXB" => Ok(Link::Pxb),
            "PHB" => Ok(Link::Phb),
            "NODE" => Ok(Link::Node),
            "SYS" => Ok(Link::Sys),
            _ => s
                .strip_prefix("NV")
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| *n > 0)
                .map(Link::NvLink)
                .ok_or_else(|| ParseLinkError(s.to_string())),
        }
    }
}

/// A topology matrix that is not square, symmetric, with `X` on the diagonal only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatrixError {
    /// A row of the wrong length.
    #[error("topology row {row} has {len} entries, expected {expected} (one per GPU)")]
    RowLength {
        /// Row index.
        row: usize,
        /// Entries found.
        len: usize,
        /// GPU count.
        expected: usize,
    },
    /// The row count differs from the GPU count.
    #[error("topology has {rows} rows, expected {expected} (one per GPU)")]
    Rows {
        /// Rows found.
        rows: usize,
        /// GPU count.
        expected: usize,
    },
    /// A bad diagonal or off-diagonal `X`.
    #[error("topology[{row}][{col}] is {found}: X belongs exactly on the diagonal")]
    Diagonal {
        /// Row index.
        row: usize,
        /// Column index.
        col: usize,
        /// The entry found.
        found: String,
    },
    /// `m[i][j] != m[j][i]`.
    #[error("topology is not symmetric: [{row}][{col}] is {a} but [{col}][{row}] is {b}")]
    Asymmetric {
        /// Row index.
        row: usize,
        /// Column index.
        col: usize,
        /// `m[row][col]`.
        a: String,
        /// `m[col][row]`.
        b: String,
    },
}

/// Checks that `m` is an `n`×`n` symmetric matrix with `X` exactly on the diagonal.
pub fn validate_matrix(m: &[Vec<Link>], n: usize) -> Result<(), MatrixError> {
    if m.len() != n {
        return Err(MatrixError::Rows {
            rows: m.len(),
            expected: n,
        });
    }
    for (i, row) in m.iter().enumerate() {
        if row.len() != n {
            return Err(MatrixError::RowLength {
                row: i,
                len: row.len(),
                expected: n,
            });
        }
        for (j, link) in row.iter().enumerate() {
            if (i == j) != (*link == Link::SelfLink) {
                return Err(MatrixError::Diagonal {
                    row: i,
                    col: j,
                    found: link.to_string(),
                });
            }
            if m[j].get(i).is_some_and(|back| back != link) {
                return Err(MatrixError::Asymmetric {
                    row: i,
                    col: j,
                    a: link.to_string(),
                    b: m[j][i].to_string(),
                });
            }
        }
    }
    Ok(())
}

/// For each GPU, the indices of the GPUs it reaches over NVLink (`NV#` entries).
pub fn nvlink_peers(m: &[Vec<Link>]) -> Vec<Vec<u32>> {
    m.iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .filter(|(_, l)| matches!(l, Link::NvLink(_)))
                .map(|(j, _)| j as u32)
                .collect()
        })
        .collect()
}

/// The matrix as strings, as the GpuNode status carries it.
pub fn matrix_strings(m: &[Vec<Link>]) -> Vec<Vec<String>> {
    m.iter()
        .map(|row| row.iter().map(Link::to_string).collect())
        .collect()
}

/// A cpuset list (`0-3,8,10-11`) that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{input}' is not a cpuset list: {why} (expected CPU numbers and ranges like 0-55,112-167)"
)]
pub struct CpusetError {
    /// The input.
    pub input: String,
    /// What is wrong.
    pub why: String,
}

/// Parses a cpuset list (`0-55,112-167`) into CPU numbers.
pub fn parse_cpuset(s: &str) -> Result<BTreeSet<u32>, CpusetError> {
    let err = |why: String| CpusetError {
        input: s.to_string(),
        why,
    };
    let mut cpus = BTreeSet::new();
    if s.trim().is_empty() {
        return Ok(cpus);
    }
    for part in s.trim().split(',') {
        let part = part.trim();
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| err(format!("'{t}' is not a CPU number")))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(err(format!("range {a}-{b} runs backwards")));
                }
                if b - a > 1 << 20 {
                    return Err(err(format!("range {a}-{b} is implausibly large")));
                }
                cpus.extend(a..=b);
            }
            None => {
                cpus.insert(num(part)?);
            }
        }
    }
    Ok(cpus)
}

/// Formats CPU numbers as a cpuset list, merging runs into ranges.
pub fn format_cpuset(cpus: impl IntoIterator<Item = u32>) -> String {
    let sorted: BTreeSet<u32> = cpus.into_iter().collect();
    let mut out: Vec<String> = Vec::new();
    let mut iter = sorted.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().unwrap_or(end);
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// The cpuset of a CPU bitmask given as 64-bit words, word 0 holding CPUs 0-63 (the layout
/// of NVML's `nvmlDeviceGetCpuAffinity` on 64-bit Linux).
pub fn cpuset_from_mask(words: &[u64]) -> String {
    format_cpuset(words.iter().enumerate().flat_map(|(w, bits)| {
        (0..64u32)
            .filter(move |b| bits & (1u64 << b) != 0)
            .map(move |b| w as u32 * 64 + b)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_round_trip_and_reject_garbage() {
        for s in ["X", "NV18", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"] {
            assert_eq!(s.parse::<Link>().unwrap().to_string(), s);
        }
        for bad in ["NV", "NV0", "nv4", "SOC", "", "NVx"] {
            let e = bad.parse::<Link>().unwrap_err();
            assert!(e.to_string().contains("expected X, NV<links>"), "{e}");
        }
    }

    fn m(rows: &[&str]) -> Vec<Vec<Link>> {
        rows.iter()
            .map(|r| r.split_whitespace().map(|c| c.parse().unwrap()).collect())
            .collect()
    }

    #[test]
    fn matrix_validation_names_the_cell() {
        let good = m(&["X NV4 SYS", "NV4 X SYS", "SYS SYS X"]);
        validate_matrix(&good, 3).unwrap();
        assert_eq!(nvlink_peers(&good), vec![vec![1], vec![0], vec![]]);

        let asym = m(&["X NV4 SYS", "NV2 X SYS", "SYS SYS X"]);
        assert_eq!(
            validate_matrix(&asym, 3).unwrap_err().to_string(),
            "topology is not symmetric: [0][1] is NV4 but [1][0] is NV2"
        );
        let diag = m(&["X NV4", "NV4 NV4"]);
        assert!(matches!(
            validate_matrix(&diag, 2),
            Err(MatrixError::Diagonal { row: 1, col: 1, .. })
        ));
        let short = m(&["X NV4", "NV4"]);
        assert!(matches!(
            validate_matrix(&short, 2),
            Err(MatrixError::RowLength { row: 1, .. })
        ));
        assert!(matches!(
            validate_matrix(&good, 4),
            Err(MatrixError::Rows {
                rows: 3,
                expected: 4
            })
        ));
    }

    #[test]
    fn cpusets_parse_and_format() {
        let cpus = parse_cpuset("0-3, 8,10-11").unwrap();
        assert_eq!(
            cpus.iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(format_cpuset(cpus), "0-3,8,10-11");
        assert_eq!(format_cpuset([5]), "5");
        assert_eq!(format_cpuset([]), "");
        assert!(
            parse_cpuset("4-2")
                .unwrap_err()
                .to_string()
                .contains("runs backwards")
        );
        assert!(
            parse_cpuset("0-x")
                .unwrap_err()
                .to_string()
                .contains("'x' is not a CPU number")
        );
    }

    #[test]
    fn cpu_masks_become_cpusets() {
        // A DGX H100 socket 0: CPUs 0-55 and their hyperthreads 112-167, as NVML returns
        // it in 64-bit words.
        let words = [
            u64::MAX,
            0xFF_FFFF | (0xFFFF_FFFF_u64 << 48),
            0xFF_FFFF_FFFF,
            0,
        ];
        assert_eq!(cpuset_from_mask(&words), "0-87,112-167");
        let socket0 = [u64::MAX >> 8, 0xFFFF_u64 << 48, 0xFF_FFFF_FFFF, 0];
        assert_eq!(cpuset_from_mask(&socket0), "0-55,112-167");
        assert_eq!(cpuset_from_mask(&[0b1010]), "1,3");
        assert_eq!(cpuset_from_mask(&[]), "");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        #[test]
        fn cpusets_round_trip(cpus in proptest::collection::btree_set(0u32..512, 0..64)) {
            let text = format_cpuset(cpus.iter().copied());
            proptest::prop_assert_eq!(parse_cpuset(&text).unwrap(), cpus.clone());
            let mut words = vec![0u64; 8];
            for c in &cpus {
                words[(*c / 64) as usize] |= 1 << (c % 64);
            }
            proptest::prop_assert_eq!(cpuset_from_mask(&words), text);
        }
    }
}

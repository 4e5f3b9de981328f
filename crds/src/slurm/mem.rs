//! Memory sizes: `--mem=16G`, `--mem-per-cpu=512M`, `--mem-per-gpu=64000`, `--mem=0`.
//!
//! Grammar (Slurm's `str_to_mbytes`): an integer with an optional unit `K`, `M`, `G` or `T`
//! (any case, optionally followed by `B`/`b`); no unit means MiB. Units are powers of 1024.
//! Kilobytes round up to whole MiB (`1025K` is 2 MiB; Slurm 22.05's `sbatch -vv` agrees).
//! `0` is valid and, for `--mem`, means all the memory of each node; the caller decides.
//! Refused as by Slurm: fractions (`1.5G`), `P` and other units, signs, spaces.

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u64, serde_via_string};

const WHAT: &str = "memory size";
const EXPECTED: &str =
    "expected an integer with an optional unit K, M, G or T (default M), e.g. 16G, 512M or 64000";

/// A memory size in MiB (Slurm's unit for every memory option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemSize {
    mib: u64,
}

impl MemSize {
    /// Zero: for `--mem`, the whole memory of each node.
    pub const ZERO: MemSize = MemSize { mib: 0 };

    /// A size of `mib` MiB.
    pub const fn from_mib(mib: u64) -> Self {
        MemSize { mib }
    }

    /// The size in MiB.
    pub const fn mib(&self) -> u64 {
        self.mib
    }

    /// The size in bytes (`None` if it does not fit in a `u64`).
    pub fn bytes(&self) -> Option<u64> {
        self.mib.checked_mul(1 << 20)
    }

    /// Whether this is `0` (for `--mem`: the whole node).
    pub fn is_zero(&self) -> bool {
        self.mib == 0
    }

    /// Parses a Slurm memory size (see the [module docs](self)).
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        let digits_end = s.bytes().take_while(u8::is_ascii_digit).count();
        let (num, unit) = s.split_at(digits_end);
        if num.is_empty() {
            return Err(err(format!("no number; {EXPECTED}")));
        }
        let n = parse_digits_u64(num).ok_or_else(|| err("too large".to_string()))?;
        let mut unit_chars = unit.chars();
        let letter = unit_chars.next();
        let rest: String = unit_chars.collect();
        if !(rest.is_empty() || rest == "B" || rest == "b") {
            return Err(err(format!("unknown unit {unit:?}; {EXPECTED}")));
        }
        let mib = match letter.map(|c| c.to_ascii_uppercase()) {
            None => Some(n),
            Some('K') => Some(n.div_ceil(1024)),
            Some('M') => Some(n),
            Some('G') => n.checked_mul(1 << 10),
            Some('T') => n.checked_mul(1 << 20),
            Some(_) => return Err(err(format!("unknown unit {unit:?}; {EXPECTED}"))),
        };
        mib.map(MemSize::from_mib)
            .ok_or_else(|| err("too large".to_string()))
    }

    /// A bare integer: MiB.
    pub fn from_int(mib: i64) -> Result<Self, SyntaxError> {
        u64::try_from(mib).map(MemSize::from_mib).map_err(|_| {
            SyntaxError::new(WHAT, &mib.to_string(), "a memory size cannot be negative")
        })
    }
}

impl fmt::Display for MemSize {
    /// Slurm style: the largest unit that divides exactly (`16G`, `1T`, `512M`), `0` for zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.mib;
        if m == 0 {
            f.write_str("0")
        } else if m.is_multiple_of(1 << 20) {
            write!(f, "{}T", m >> 20)
        } else if m.is_multiple_of(1 << 10) {
            write!(f, "{}G", m >> 10)
        } else {
            write!(f, "{m}M")
        }
    }
}

impl FromStr for MemSize {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(
    MemSize,
    "a Slurm memory size such as \"16G\" (or MiB as an integer)",
    from_int = MemSize::from_int
);

#[cfg(test)]
mod tests {
    use super::*;

    fn mib(s: &str) -> u64 {
        MemSize::parse(s).unwrap_or_else(|e| panic!("{e}")).mib()
    }

    #[test]
    fn slurm_22_05_known_answers() {
        // `sbatch -vv` "mem :" lines from Slurm 22.05.
        assert_eq!(mib("16G"), 16384); // 16G
        assert_eq!(mib("16GB"), 16384); // 16G
        assert_eq!(mib("16gb"), 16384); // 16G
        assert_eq!(mib("1024K"), 1); // 1
        assert_eq!(mib("1025k"), 2); // 2
        assert_eq!(mib("5K"), 1); // 1
        assert_eq!(mib("0K"), 0);
        assert_eq!(mib("1T"), 1 << 20); // 1T
        assert_eq!(mib("1t"), 1 << 20);
        assert_eq!(mib("1M"), 1);
        assert_eq!(mib("1MB"), 1);
        assert_eq!(mib("1Mb"), 1);
        assert_eq!(mib("1KB"), 1);
        assert_eq!(mib("99999999999999"), 99_999_999_999_999);
        assert_eq!(mib("0"), 0);
        assert_eq!(mib("64000"), 64000);
        assert_eq!(mib("512M"), 512);
        // "Invalid --mem specification".
        for bad in ["1.5G", "16X", "-5", "1P", "1G0", " 1G", "G", ""] {
            assert!(MemSize::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn refuses_odd_forms() {
        for bad in [
            "1B",
            "1GiB",
            "1GBB",
            "99999999999999999999",
            "18014398509481984G",
        ] {
            assert!(MemSize::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn display() {
        assert_eq!(MemSize::from_mib(16384).to_string(), "16G");
        assert_eq!(MemSize::from_mib(512).to_string(), "512M");
        assert_eq!(MemSize::from_mib(1 << 20).to_string(), "1T");
        assert_eq!(MemSize::from_mib(1536).to_string(), "1536M");
        assert_eq!(MemSize::ZERO.to_string(), "0");
        assert_eq!(MemSize::from_mib(3).bytes(), Some(3 << 20));
    }

    #[test]
    fn serde() {
        let m: MemSize = serde_json::from_str("64000").unwrap();
        assert_eq!(m.mib(), 64000);
        let m: MemSize = serde_json::from_str("\"16G\"").unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), "\"16G\"");
    }
}

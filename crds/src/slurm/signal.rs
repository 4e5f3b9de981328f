//! `--signal=[{R|B}:]SIG[@TIME]`: the signal a job gets TIME seconds (default 60, at most
//! 65535) before its time limit. `B:` sends it to the batch shell only; without it, every
//! step's tasks get it (not the batch shell), as in Slurm. `R:` (reservation end, Slurm's
//! `MaxStartDelay` overlap) is read and kept; Muster has no reservations, so it changes
//! nothing. SIG is a number (1–64) or a name with or without `SIG`, in any case (`USR1`,
//! `sigusr1`). Printed as Slurm 22.05's `sbatch -vv` prints it: `B:USR1@90`, `USR1` (the
//! default time omitted), `TERM` for `SIGTERM`.

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u32, serde_via_string};

const WHAT: &str = "signal";
const FORMS: &str = "expected [{R|B}:]SIGNAL[@SECONDS] with SIGNAL a name (USR1, SIGTERM, ...) or a number 1-64 and SECONDS 0-65535 (e.g. B:USR1@90)";

/// Signal names Slurm's `sig_name2num` knows, with their Linux numbers.
const NAMES: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ABRT", 6),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
];

/// A signal by number (1–64) or by name, with or without `SIG`, in any case (`USR1`,
/// `sigusr1`, `10`), as Slurm's `sig_name2num` reads `--signal` and `scancel -s`: its number
/// and its name (`USR1`; the number for an unnamed one). `None` for anything else.
pub fn signal_number(sig: &str) -> Option<(i32, String)> {
    if let Some(n) = parse_digits_u32(sig) {
        let n = i32::try_from(n).ok().filter(|n| (1..=64).contains(n))?;
        let name = NAMES
            .iter()
            .find(|(_, v)| *v == n)
            .map(|(k, _)| k.to_string())
            .unwrap_or_else(|| n.to_string());
        return Some((n, name));
    }
    let up = sig.to_ascii_uppercase();
    let bare = up.strip_prefix("SIG").unwrap_or(&up);
    NAMES
        .iter()
        .find(|(k, _)| *k == bare)
        .map(|(k, v)| (*v, k.to_string()))
}

/// The default warning time (seconds before the time limit).
pub const DEFAULT_SECS: u32 = 60;

/// A parsed `--signal`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WarnSignal {
    /// The signal number.
    pub number: i32,
    /// How it was named (`USR1`; the number for an unnamed one).
    pub name: String,
    /// Seconds before the time limit.
    pub secs: u32,
    /// `B:`: the batch shell only.
    pub batch_only: bool,
    /// `R:`: reservation overlap (no effect in Muster).
    pub reservation: bool,
}

impl WarnSignal {
    /// Parses `[{R|B}:]SIG[@TIME]`.
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let err = || SyntaxError::new(WHAT, s, FORMS);
        let (flags, rest) = match s.split_once(':') {
            Some((f, r)) => (f, r),
            None => ("", s),
        };
        let mut batch_only = false;
        let mut reservation = false;
        for c in flags.chars() {
            match c.to_ascii_uppercase() {
                'B' => batch_only = true,
                'R' => reservation = true,
                _ => return Err(err()),
            }
        }
        if s.contains(':') && flags.is_empty() {
            return Err(err());
        }
        let (sig, secs) = match rest.split_once('@') {
            Some((g, t)) => (g, Some(t)),
            None => (rest, None),
        };
        let secs = match secs {
            Some(t) => parse_digits_u32(t)
                .filter(|v| *v <= 65535)
                .ok_or_else(err)?,
            None => DEFAULT_SECS,
        };
        let (number, name) = signal_number(sig).ok_or_else(err)?;
        Ok(WarnSignal {
            number,
            name,
            secs,
            batch_only,
            reservation,
        })
    }
}

impl FromStr for WarnSignal {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WarnSignal::parse(s)
    }
}

impl fmt::Display for WarnSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reservation {
            f.write_str("R")?;
        }
        if self.batch_only {
            f.write_str("B")?;
        }
        if self.reservation || self.batch_only {
            f.write_str(":")?;
        }
        f.write_str(&self.name)?;
        if self.secs != DEFAULT_SECS {
            write!(f, "@{}", self.secs)?;
        }
        Ok(())
    }
}

serde_via_string!(WarnSignal, "a Slurm --signal value such as B:USR1@90");

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sbatch -vv --signal=X` printed as `signal :` (Slurm 22.05.8).
    #[test]
    fn slurms_forms_print_as_slurm_prints_them() {
        for (input, want) in [
            ("USR1", "USR1"),
            ("usr1", "USR1"),
            ("SIGUSR2", "USR2"),
            ("B:USR1@90", "B:USR1@90"),
            ("B:SIGTERM", "B:TERM"),
            ("R:10@30", "R:USR1@30"),
            ("RB:USR1@5", "RB:USR1@5"),
            ("USR1@0", "USR1@0"),
        ] {
            let s = WarnSignal::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(s.to_string(), want, "{input}");
            assert_eq!(WarnSignal::parse(&s.to_string()).unwrap(), s);
        }
        let s = WarnSignal::parse("B:USR1@90").unwrap();
        assert_eq!((s.number, s.secs, s.batch_only), (10, 90, true));
        assert_eq!(WarnSignal::parse("TERM").unwrap().secs, 60);
    }

    #[test]
    fn slurms_refusals_are_refused() {
        for input in [
            "FOO",
            "USR1@70000",
            "B:",
            ":USR1",
            "X:USR1",
            "",
            "USR1@",
            "0",
            "65",
        ] {
            let e = WarnSignal::parse(input).expect_err(input);
            assert!(e.to_string().contains("B:USR1@90"), "{e}");
        }
    }
}

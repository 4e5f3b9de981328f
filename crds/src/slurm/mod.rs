//! Slurm's value syntaxes as small, exhaustively tested types.
//!
//! Every Muster component speaks these: the API (values in a BatchJob spec use Slurm's own
//! syntax), the scheduler core, the CLI and the simulator. Each type parses the Slurm string
//! form (`FromStr` / `parse`), prints it back in Slurm's canonical form (`Display`), and
//! (de)serializes as that string, so `parse(x.to_string()) == x`.
//!
//! | Module | Slurm option | Main type |
//! |---|---|---|
//! | [`time`] | `--time`, squeue `%l`/`%M` | [`TimeLimit`], [`time::format_duration_secs`] |
//! | [`hostlist`] | node lists, `scontrol show hostnames/hostlist` | [`hostlist::expand`], [`hostlist::compress`], [`HostList`] |
//! | [`array`](mod@array) | `--array` | [`ArraySpec`] |
//! | [`dependency`] | `--dependency` | [`DependencySpec`] |
//! | [`constraint`] | `--constraint` | [`Constraint`] |
//! | [`gpubind`] | `--gpu-bind` | [`GpuBind`] |
//! | [`mem`] | `--mem`, `--mem-per-cpu`, `--mem-per-gpu` | [`MemSize`] |
//! | [`nodes`] | `--nodes` | [`NodeRange`] |
//! | [`switches`] | `--switches` | [`Switches`] |
//! | [`gres`] | `--gres`, `--gpus*` | [`GresItem`], [`GpuCount`] |
//! | [`tasks`] | `SLURM_TASKS_PER_NODE` | [`TasksPerNode`] |
//! | [`script`] | `#SBATCH` lines of a batch script | [`script::read`] |
//! | [`fname`] | `--output`/`--error` filename patterns | [`fname::expand`] |
//! | [`begin`] | `--begin` | [`begin::parse`] |
//! | [`signal`] | `--signal` | [`WarnSignal`] |
//! | [`pyxis`] | pyxis's `--container-*` options | [`pyxis::mounts`], [`pyxis::image`] |
//! | [`getopt`] | sbatch's option table and `getopt_long` | [`getopt::SBATCH_OPTIONS`], [`getopt::getopt`] |
//!
//! Policy, applied in every module: every form Slurm documents is accepted and means what it
//! means in Slurm (checked against Slurm 22.05's `scontrol`/`sbatch` where they parse the value
//! client-side). Input Slurm tolerates but that is malformed or ambiguous (`a[1-3` for a
//! hostlist, `1-` for a time, `gpu:k` for a gres count) is refused with a [`SyntaxError`]
//! rather than guessed at; each module's docs list those cases. Parsers never panic and never
//! allocate without bound (hostlist expansion and GPU binding lists are capped).

pub mod array;
pub mod begin;
pub mod constraint;
pub mod dependency;
pub mod fname;
pub mod getopt;
pub mod gpubind;
pub mod gres;
pub mod hostlist;
pub mod mem;
pub mod nodes;
pub mod pyxis;
pub mod script;
pub mod signal;
pub mod switches;
pub mod tasks;
pub mod time;

pub use array::ArraySpec;
pub use constraint::Constraint;
pub use dependency::{Combine, DepKind, DependencyItem, DependencySpec, JobRef, JobTarget};
pub use gpubind::{GpuBind, GpuBindMode};
pub use gres::{GpuCount, GresItem, gpus_from_gres, parse_gres};
pub use hostlist::HostList;
pub use mem::MemSize;
pub use nodes::NodeRange;
pub use signal::WarnSignal;
pub use switches::Switches;
pub use tasks::TasksPerNode;
pub use time::TimeLimit;

/// A Slurm value that does not parse.
///
/// Displays as `invalid time limit "1h": expected MINUTES, MM:SS, ...`: what was being parsed,
/// the offending input (quoted and escaped, cut at [`SyntaxError::MAX_INPUT_CHARS`]
/// characters), and what is wrong or allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: {message}")]
pub struct SyntaxError {
    /// What was being parsed, e.g. `"time limit"`, `"hostlist"`.
    pub what: &'static str,
    /// The offending input (the whole value), possibly shortened.
    pub input: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl SyntaxError {
    /// Inputs longer than this many characters are shortened (with `…`) in the error, so an
    /// error about a megabyte of garbage stays readable.
    pub const MAX_INPUT_CHARS: usize = 200;

    /// An error about `input` (shortened if very long) while parsing `what`.
    pub fn new(what: &'static str, input: &str, message: impl Into<String>) -> Self {
        let input = match input.char_indices().nth(Self::MAX_INPUT_CHARS) {
            Some((cut, _)) => format!("{}…", &input[..cut]),
            None => input.to_string(),
        };
        SyntaxError {
            what,
            input,
            message: message.into(),
        }
    }
}

/// Parses a non-empty run of ASCII digits (no sign, no spaces) as a `u64`; `None` on anything
/// else or on overflow. Rust's `str::parse` alone would accept a leading `+`.
pub(crate) fn parse_digits_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Like [`parse_digits_u64`], for `u32`.
pub(crate) fn parse_digits_u32(s: &str) -> Option<u32> {
    parse_digits_u64(s).and_then(|v| u32::try_from(v).ok())
}

/// Implements `Serialize` (as the `Display` string) and `Deserialize` (from a string through
/// `FromStr`, and optionally from an integer through a conversion function) for a type.
macro_rules! serde_via_string {
    ($ty:ty, $expecting:literal) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
    ($ty:ty, $expecting:literal, from_int = $from_int:path) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$ty, E> {
                        $from_int(v).map_err(E::custom)
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$ty, E> {
                        match i64::try_from(v) {
                            Ok(v) => $from_int(v).map_err(E::custom),
                            Err(_) => Err(E::custom(format!("{v} is too large"))),
                        }
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}
pub(crate) use serde_via_string;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_display_names_what_input_and_rule() {
        let e = SyntaxError::new("time limit", "1h", "expected MINUTES");
        assert_eq!(
            e.to_string(),
            r#"invalid time limit "1h": expected MINUTES"#
        );
    }

    #[test]
    fn error_escapes_and_shortens_input() {
        let e = SyntaxError::new("hostlist", "a\"\n", "bad");
        assert_eq!(e.to_string(), r#"invalid hostlist "a\"\n": bad"#);
        let long = "é".repeat(1000);
        let e = SyntaxError::new("hostlist", &long, "bad");
        assert_eq!(e.input.chars().count(), SyntaxError::MAX_INPUT_CHARS + 1);
        assert!(e.input.ends_with('…'));
    }

    #[test]
    fn digits_only() {
        assert_eq!(parse_digits_u64("0042"), Some(42));
        assert_eq!(parse_digits_u64("+1"), None);
        assert_eq!(parse_digits_u64(""), None);
        assert_eq!(parse_digits_u64(" 1"), None);
        assert_eq!(parse_digits_u64("18446744073709551616"), None);
        assert_eq!(parse_digits_u32("4294967296"), None);
        assert_eq!(parse_digits_u32("4294967295"), Some(u32::MAX));
    }
}

//! GPU binding: `--gpu-bind=[verbose,]closest|none|map_gpu:LIST|mask_gpu:LIST|per_task:N|single:N`.
//!
//! - `map_gpu:0,1` — task *i* on a node gets GPU `list[i % len]`; ids are decimal.
//! - `mask_gpu:0x3,0xC` — task *i* gets the GPUs of mask `list[i % len]`; masks are
//!   hexadecimal with or without `0x` (srun(1): "GPU masks are always interpreted as
//!   hexadecimal values").
//! - In both lists `VALUE*COUNT` repeats a value (`map_gpu:0*4,1*4`); parsing expands it.
//! - `per_task:N` — N GPUs per task; `single:N` — bind tasks to the GPUs closest to them, N
//!   tasks per GPU.
//!
//! Keywords are case-insensitive (as in Slurm) and print in lower case. Refused although
//! Slurm 22.05's `sbatch` lets them through: empty lists or list items (`map_gpu:`,
//! `map_gpu:0,,1`), a repeat count or mask of 0, `per_task:0`/`single:0`, non-numeric
//! `per_task:x`, and lists longer than [`MAX_LIST_LEN`] after expansion.

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u32, serde_via_string};

const WHAT: &str = "gpu-bind";
const EXPECTED: &str = "expected closest, none, map_gpu:LIST, mask_gpu:LIST, per_task:N or \
     single:N, optionally after verbose,";

/// Longest `map_gpu`/`mask_gpu` list after `*COUNT` expansion (one entry per local task).
pub const MAX_LIST_LEN: usize = 4096;

/// How tasks are bound to GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GpuBindMode {
    /// `closest`: the GPUs closest (NUMA/PCIe) to the task's CPUs.
    Closest,
    /// `none`: no binding; every task sees all the job's GPUs on its node.
    None,
    /// `map_gpu:LIST`: local task *i* gets GPU `LIST[i % len]` (expanded list).
    MapGpu(Vec<u32>),
    /// `mask_gpu:LIST`: local task *i* gets the GPUs of mask `LIST[i % len]` (expanded list).
    MaskGpu(Vec<u64>),
    /// `per_task:N`: each task gets N GPUs.
    PerTask(u32),
    /// `single:N`: tasks bind to their closest GPU, N tasks per GPU.
    Single(u32),
}

/// A parsed `--gpu-bind` value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GpuBind {
    /// `verbose,`: report the binding of each task.
    pub verbose: bool,
    /// The binding.
    pub mode: GpuBindMode,
}

impl GpuBind {
    /// Parses a `--gpu-bind` value (see the [module docs](self)).
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        let (verbose, rest) = match s.get(..8) {
            Some(p) if p.eq_ignore_ascii_case("verbose,") => (true, &s[8..]),
            _ => (false, s),
        };
        let (key, arg) = match rest.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (rest, None),
        };
        let key_lc = key.to_ascii_lowercase();
        let count = |arg: Option<&str>, what: &str| -> Result<u32, SyntaxError> {
            arg.and_then(parse_digits_u32)
                .filter(|n| *n >= 1)
                .ok_or_else(|| err(format!("{what} needs a number >= 1, e.g. {what}:1")))
        };
        let mode = match (key_lc.as_str(), arg) {
            ("closest", None) => GpuBindMode::Closest,
            ("none", None) => GpuBindMode::None,
            ("map_gpu", Some(list)) => GpuBindMode::MapGpu(parse_list(s, "map_gpu", list, |v| {
                parse_digits_u32(v).ok_or("a decimal GPU index")
            })?),
            ("mask_gpu", Some(list)) => {
                GpuBindMode::MaskGpu(parse_list(s, "mask_gpu", list, |v| {
                    let hex = v
                        .strip_prefix("0x")
                        .or_else(|| v.strip_prefix("0X"))
                        .unwrap_or(v);
                    if hex.is_empty()
                        || hex.len() > 16
                        || !hex.bytes().all(|b| b.is_ascii_hexdigit())
                    {
                        return Err("a hexadecimal GPU mask of at most 16 digits");
                    }
                    match u64::from_str_radix(hex, 16) {
                        Ok(0) => Err("a non-zero GPU mask"),
                        Ok(m) => Ok(m),
                        Err(_) => Err("a hexadecimal GPU mask"),
                    }
                })?)
            }
            ("per_task", a) => GpuBindMode::PerTask(count(a, "per_task")?),
            ("single", a) => GpuBindMode::Single(count(a, "single")?),
            ("verbose", None) => {
                return Err(err(format!("verbose needs a binding after it; {EXPECTED}")));
            }
            ("closest" | "none", Some(_)) => {
                return Err(err(format!("{key} takes no argument; {EXPECTED}")));
            }
            ("map_gpu" | "mask_gpu", None) => {
                return Err(err(format!("{key} needs a list, e.g. {key}:0,1")));
            }
            _ => return Err(err(format!("unknown binding {key:?}; {EXPECTED}"))),
        };
        Ok(GpuBind { verbose, mode })
    }

    /// The binding of one local task: `Some(indices)` of node-local GPU indices for the map
    /// and mask modes (`None` for the modes decided by the allocator).
    pub fn task_gpus(&self, local_task: usize) -> Option<Vec<u32>> {
        match &self.mode {
            GpuBindMode::MapGpu(l) if !l.is_empty() => Some(vec![l[local_task % l.len()]]),
            GpuBindMode::MaskGpu(l) if !l.is_empty() => {
                let m = l[local_task % l.len()];
                Some((0..64).filter(|b| m & (1u64 << b) != 0).collect())
            }
            _ => None,
        }
    }
}

/// Parses `V[*N],V[*N],...`, expanding repeats.
fn parse_list<T: Copy>(
    whole: &str,
    key: &str,
    list: &str,
    value: impl Fn(&str) -> Result<T, &'static str>,
) -> Result<Vec<T>, SyntaxError> {
    let err = |msg: String| SyntaxError::new(WHAT, whole, msg);
    let mut out = Vec::new();
    for item in list.split(',') {
        let (v, n) = match item.split_once('*') {
            Some((v, n)) => {
                let n = parse_digits_u32(n).filter(|n| *n >= 1).ok_or_else(|| {
                    err(format!(
                        "invalid repeat count in {item:?}; write VALUE*COUNT, COUNT >= 1"
                    ))
                })?;
                (v, n as usize)
            }
            None => (item, 1),
        };
        let v = value(v).map_err(|want| {
            err(format!(
                "{key}: {v:?} is not {want} (in {item:?}); e.g. {}",
                example(key)
            ))
        })?;
        if out.len() + n > MAX_LIST_LEN {
            return Err(err(format!(
                "{key} list longer than {MAX_LIST_LEN} entries after expanding repeats"
            )));
        }
        out.extend(std::iter::repeat_n(v, n));
    }
    Ok(out)
}

fn example(key: &str) -> &'static str {
    if key == "map_gpu" {
        "map_gpu:0,1 or map_gpu:0*4,1*4"
    } else {
        "mask_gpu:0x3,0xC or mask_gpu:0x0f*4,0xf0*4"
    }
}

/// Writes a list with runs of equal values as `V*N`.
fn write_runs<T: PartialEq + Copy>(
    f: &mut fmt::Formatter<'_>,
    list: &[T],
    item: impl Fn(&mut fmt::Formatter<'_>, T) -> fmt::Result,
) -> fmt::Result {
    let mut i = 0;
    while i < list.len() {
        let mut j = i;
        while j + 1 < list.len() && list[j + 1] == list[i] {
            j += 1;
        }
        if i > 0 {
            f.write_str(",")?;
        }
        item(f, list[i])?;
        if j > i {
            write!(f, "*{}", j - i + 1)?;
        }
        i = j + 1;
    }
    Ok(())
}

impl fmt::Display for GpuBindMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuBindMode::Closest => f.write_str("closest"),
            GpuBindMode::None => f.write_str("none"),
            GpuBindMode::MapGpu(l) => {
                f.write_str("map_gpu:")?;
                write_runs(f, l, |f, v| write!(f, "{v}"))
            }
            GpuBindMode::MaskGpu(l) => {
                f.write_str("mask_gpu:")?;
                write_runs(f, l, |f, v| write!(f, "{v:#x}"))
            }
            GpuBindMode::PerTask(n) => write!(f, "per_task:{n}"),
            GpuBindMode::Single(n) => write!(f, "single:{n}"),
        }
    }
}

impl fmt::Display for GpuBind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.verbose {
            f.write_str("verbose,")?;
        }
        write!(f, "{}", self.mode)
    }
}

impl FromStr for GpuBind {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(GpuBind, "a Slurm --gpu-bind value such as \"closest\"");

#[cfg(test)]
mod tests {
    use super::*;
    use GpuBindMode::*;

    fn p(s: &str) -> GpuBind {
        GpuBind::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }
    fn mode(s: &str) -> GpuBindMode {
        p(s).mode
    }

    #[test]
    fn man_page_examples() {
        assert_eq!(mode("closest"), Closest);
        assert_eq!(mode("none"), None);
        assert_eq!(mode("map_gpu:0,1"), MapGpu(vec![0, 1]));
        assert_eq!(
            mode("map_gpu:0*4,1*4"),
            MapGpu(vec![0, 0, 0, 0, 1, 1, 1, 1])
        );
        assert_eq!(mode("mask_gpu:0x3,0xC"), MaskGpu(vec![3, 12]));
        assert_eq!(mode("mask_gpu:3,c"), MaskGpu(vec![3, 12]));
        assert_eq!(
            mode("mask_gpu:0x0f*4,0xf0*4"),
            MaskGpu(vec![0x0f, 0x0f, 0x0f, 0x0f, 0xf0, 0xf0, 0xf0, 0xf0])
        );
        assert_eq!(mode("per_task:2"), PerTask(2));
        assert_eq!(mode("single:1"), Single(1));
        assert_eq!(
            p("verbose,closest"),
            GpuBind {
                verbose: true,
                mode: Closest
            }
        );
        assert_eq!(mode("CLOSEST"), Closest);
        assert_eq!(mode("Map_GPU:1"), MapGpu(vec![1]));
    }

    #[test]
    fn refuses_what_sbatch_refuses() {
        // Slurm 22.05 sbatch: "Invalid --gpu-bind argument".
        for bad in [
            "bogus",
            "map_gpu:0*4,1x",
            "map_gpu:0x3",
            "map_gpu:a",
            "mask_gpu:g",
            "map_gpu:-1",
            "map_gpu:0*x",
            "closest,verbose",
            "verbose",
        ] {
            assert!(GpuBind::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refuses_what_sbatch_lets_through() {
        for bad in [
            "map_gpu:",
            "map_gpu:0,,1",
            "map_gpu:0,",
            "map_gpu:0*0",
            "mask_gpu:0",
            "per_task:0",
            "per_task:x",
            "per_task",
            "single:0",
            "verbose,verbose,closest",
            "closest:1",
            "mask_gpu:0x",
            "mask_gpu:10000000000000000",
            "map_gpu:0*5000",
            "",
        ] {
            assert!(GpuBind::parse(bad).is_err(), "{bad:?}");
        }
        assert!(GpuBind::parse("map_gpu:0*4096").is_ok());
        assert!(GpuBind::parse("mask_gpu:ffffffffffffffff").is_ok());
    }

    #[test]
    fn display_compresses_repeats() {
        assert_eq!(p("map_gpu:0,0,0,0,1*4").to_string(), "map_gpu:0*4,1*4");
        assert_eq!(
            p("verbose,MASK_GPU:0X3,C").to_string(),
            "verbose,mask_gpu:0x3,0xc"
        );
        assert_eq!(p("map_gpu:0,1,0").to_string(), "map_gpu:0,1,0");
        assert_eq!(p("per_task:8").to_string(), "per_task:8");
    }

    #[test]
    fn task_binding() {
        let b = p("map_gpu:1,0");
        assert_eq!(b.task_gpus(0), Some(vec![1]));
        assert_eq!(b.task_gpus(3), Some(vec![0]));
        assert_eq!(p("mask_gpu:0x5").task_gpus(7), Some(vec![0, 2]));
        assert_eq!(p("closest").task_gpus(0), Option::None);
    }

    #[test]
    fn messages() {
        let m = GpuBind::parse("map_gpu:0x3").unwrap_err().to_string();
        assert!(m.contains("\"0x3\" is not a decimal GPU index"), "{m}");
        let m = GpuBind::parse("bind").unwrap_err().to_string();
        assert!(m.contains("unknown binding \"bind\""), "{m}");
    }
}

//! Generic resources and GPU counts: `--gres=gpu:a100:2`, `--gpus=a100:8`,
//! `--gpus-per-node=4`, `--gpus-per-task=1`.
//!
//! # `--gres`
//! A comma list of `NAME[[:TYPE]:COUNT]` (Slurm's `slurm_get_next_tres`): `gpu` is one GPU,
//! `gpu:2` two, `gpu:a100` one A100, `gpu:a100:2` two. With one colon, the value is a COUNT
//! when it reads as one and a TYPE otherwise (so `gpu:3090` asks for 3090 GPUs, while
//! `gpu:3090ti` asks for one GPU of type `3090ti` — Slurm's rule). A COUNT is an integer with
//! an optional unit: `k`/`m`/`g`/`t`/`p` or `kib`… (powers of 1024), `kb`/`mb`… (powers of
//! 1000), any case — `gpu:2k` is 2048. An optional `gres:` prefix (as `sbatch -vv` prints it)
//! is ignored; `none` is the empty list.
//!
//! A type cannot contain `:`. Slurm 22.05 refuses `gpu:tesla:v100:1` with
//! "Invalid count value GRES gpu:tesla:v100:1"; we refuse it too and suggest `gpu:v100:1`.
//!
//! Refused although Slurm accepts them: a count that is only a unit (`gpu:k`, Slurm reads 0)
//! or has a sign (`gpu:+2`, `gpu:-1`), counts that overflow 64 bits (Slurm silently wraps or
//! takes them for a type), and empty items (`gpu,,mps`).
//!
//! # `--gpus`, `--gpus-per-node`, `--gpus-per-task`
//! `[TYPE:]COUNT` ([`GpuCount`]). Slurm reads these as `gpu:VALUE` with the gres grammar, so
//! it also takes a lone `TYPE` as one GPU and `gpu:2` as two GPUs of type "gpu"; we ask for
//! the documented form instead.

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u64, serde_via_string};

/// One item of a `--gres` list.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GresItem {
    /// The resource name (`gpu`, `mps`, `shard`, …).
    pub name: String,
    /// The type (`a100`), if given.
    pub gpu_type: Option<String>,
    /// How many (1 when not given).
    pub count: u64,
}

/// A GPU request: `[TYPE:]COUNT`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GpuCount {
    /// The GPU type, matched against GPU models (`a100`).
    pub gpu_type: Option<String>,
    /// How many GPUs.
    pub count: u32,
}

/// Why a token is not a count.
enum NotCount {
    /// Empty, or only a unit (`k`): ambiguous.
    NoDigits,
    /// Starts with `+`/`-`.
    Signed,
    /// Digits then something that is not a unit (`2x`, `1.5`): a type in the one-colon form.
    NotANumber,
    /// Does not fit in 64 bits.
    TooLarge,
}

const UNITS: [(&str, u64); 16] = [
    ("k", 1 << 10),
    ("kib", 1 << 10),
    ("kb", 1_000),
    ("m", 1 << 20),
    ("mib", 1 << 20),
    ("mb", 1_000_000),
    ("g", 1 << 30),
    ("gib", 1 << 30),
    ("gb", 1_000_000_000),
    ("t", 1 << 40),
    ("tib", 1 << 40),
    ("tb", 1_000_000_000_000),
    ("p", 1 << 50),
    ("pib", 1 << 50),
    ("pb", 1_000_000_000_000_000),
    ("", 1),
];

fn unit_mult(u: &str) -> Option<u64> {
    UNITS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(u))
        .map(|(_, m)| *m)
}

/// Slurm's `_is_valid_number` with `suffix_mult`, minus its leniencies.
fn parse_count(tok: &str) -> Result<u64, NotCount> {
    if tok.starts_with(['+', '-']) {
        return Err(NotCount::Signed);
    }
    let end = tok.bytes().take_while(u8::is_ascii_digit).count();
    let (digits, unit) = tok.split_at(end);
    let mult = unit_mult(unit);
    if digits.is_empty() {
        return Err(if mult.is_some() {
            NotCount::NoDigits
        } else {
            NotCount::NotANumber
        });
    }
    let Some(mult) = mult else {
        return Err(NotCount::NotANumber);
    };
    parse_digits_u64(digits)
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n < u64::MAX)
        .ok_or(NotCount::TooLarge)
}

fn valid_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn valid_type(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

const COUNT_RULE: &str = "a count is an integer with an optional unit such as k (x1024)";

impl GresItem {
    /// Parses one `NAME[[:TYPE]:COUNT]` item.
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        Self::parse_in("gres", s, s)
    }

    fn parse_in(what: &'static str, whole: &str, item: &str) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(what, whole, msg);
        let expected = "expected NAME, NAME:COUNT, NAME:TYPE or NAME:TYPE:COUNT (e.g. gpu:a100:2)";
        let body = item.strip_prefix("gres:").unwrap_or(item);
        let (name, rest) = match body.split_once(':') {
            Some((n, r)) => (n, Some(r)),
            None => (body, None),
        };
        if name == "gres" {
            return Err(err(format!(
                "\"gres\" is not a resource name (Slurm reads gres: as a prefix); {expected}"
            )));
        }
        if !valid_name(name) {
            return Err(err(format!(
                "{name:?} is not a resource name (letters, digits, _ . -, starting with a \
                 letter); {expected}"
            )));
        }
        let check_type = |t: &str| {
            if valid_type(t) {
                Ok(t.to_string())
            } else {
                Err(err(format!(
                    "{t:?} in {item:?} is not a type name (letters, digits, _ . -); {expected}"
                )))
            }
        };
        let (gpu_type, count) = match rest {
            None => (None, 1),
            Some("") => return Err(err(format!("nothing after ':' in {item:?}; {expected}"))),
            Some(rest) => match rest.split_once(':') {
                None => match parse_count(rest) {
                    Ok(n) => (None, n),
                    Err(NotCount::NotANumber) => (Some(check_type(rest)?), 1),
                    Err(NotCount::NoDigits) => {
                        return Err(err(format!(
                            "{rest:?} in {item:?} is ambiguous (Slurm reads a count of 0); \
                             {COUNT_RULE}; write a type as {name}:TYPE:1"
                        )));
                    }
                    Err(NotCount::Signed) => {
                        return Err(err(format!(
                            "{rest:?} in {item:?}: a count cannot have a sign; {COUNT_RULE}"
                        )));
                    }
                    Err(NotCount::TooLarge) => {
                        return Err(err(format!("count {rest:?} in {item:?} is too large")));
                    }
                },
                Some((t, c)) => {
                    if t.is_empty() {
                        return Err(err(format!("empty type in {item:?}; {expected}")));
                    }
                    if c.contains(':') {
                        let parts: Vec<&str> = rest.split(':').collect();
                        let hint = match parts.as_slice() {
                            [.., t, c] if valid_type(t) && parse_count(c).is_ok() => {
                                format!(" (did you mean {name}:{t}:{c}?)")
                            }
                            _ => String::new(),
                        };
                        return Err(err(format!(
                            "invalid count {c:?} in {item:?}: a type name cannot contain ':'\
                             {hint}; {expected}"
                        )));
                    }
                    let count = parse_count(c).map_err(|_| {
                        err(format!("invalid count {c:?} in {item:?}; {COUNT_RULE}"))
                    })?;
                    (Some(check_type(t)?), count)
                }
            },
        };
        Ok(GresItem {
            name: name.to_string(),
            gpu_type,
            count,
        })
    }
}

/// Parses a `--gres` list (see the [module docs](self)). `none` (any case) is the empty list.
///
/// ```
/// use muster_crds::slurm::gres::{GresItem, parse_gres};
/// assert_eq!(
///     parse_gres("gpu:a100:2").unwrap(),
///     [GresItem { name: "gpu".into(), gpu_type: Some("a100".into()), count: 2 }]
/// );
/// let e = parse_gres("gpu:tesla:v100:1").unwrap_err();
/// assert!(e.to_string().contains("did you mean gpu:v100:1?"));
/// ```
pub fn parse_gres(s: &str) -> Result<Vec<GresItem>, SyntaxError> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    if s.is_empty() {
        return Err(SyntaxError::new(
            "gres",
            s,
            "empty; expected NAME[[:TYPE]:COUNT] items joined by ',' (e.g. gpu:a100:2)",
        ));
    }
    s.split(',')
        .map(|item| {
            if item.is_empty() {
                Err(SyntaxError::new(
                    "gres",
                    s,
                    "empty item; expected NAME[[:TYPE]:COUNT] items joined by ','",
                ))
            } else {
                GresItem::parse_in("gres", s, item)
            }
        })
        .collect()
}

/// The GPU request of a `--gres` list: `None` when it asks for no GPU resource, the GPU count
/// otherwise. Muster schedules GPUs only, so any other resource (`mps`, `shard`, licenses, …)
/// is refused, as is asking for `gpu` twice (Muster schedules one GPU type per job).
pub fn gpus_from_gres(items: &[GresItem]) -> Result<Option<GpuCount>, SyntaxError> {
    let whole = items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let err = |msg: String| SyntaxError::new("gres", &whole, msg);
    let mut found: Option<GpuCount> = None;
    for it in items {
        if it.name != "gpu" {
            return Err(err(if it.name.eq_ignore_ascii_case("gpu") {
                format!("{:?}: gres names are case-sensitive; write gpu", it.name)
            } else {
                format!(
                    "{:?} is not supported: Muster schedules GPUs only (use gpu[:TYPE][:COUNT])",
                    it.name
                )
            }));
        }
        if found.is_some() {
            return Err(err(
                "gpu is requested more than once; Muster schedules one GPU type per job"
                    .to_string(),
            ));
        }
        let count =
            u32::try_from(it.count).map_err(|_| err(format!("{} GPUs is too many", it.count)))?;
        found = Some(GpuCount {
            gpu_type: it.gpu_type.clone(),
            count,
        });
    }
    Ok(found)
}

impl fmt::Display for GresItem {
    /// `NAME[:TYPE]:COUNT`, the count always written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(t) = &self.gpu_type {
            write!(f, ":{t}")?;
        }
        write!(f, ":{}", self.count)
    }
}

impl FromStr for GresItem {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(GresItem, "a gres item such as \"gpu:a100:2\"");

impl GpuCount {
    /// Parses `[TYPE:]COUNT`.
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        const WHAT: &str = "GPU count";
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        let expected = "expected COUNT or TYPE:COUNT (e.g. 8 or a100:8)";
        let count_of = |c: &str| -> Result<u32, SyntaxError> {
            let n = parse_count(c).map_err(|_| err(format!("invalid count {c:?}; {expected}")))?;
            u32::try_from(n).map_err(|_| err(format!("{n} GPUs is too many")))
        };
        match s.split_once(':') {
            None => match parse_count(s) {
                Ok(_) => Ok(GpuCount {
                    gpu_type: None,
                    count: count_of(s)?,
                }),
                Err(_) if valid_type(s) => Err(err(format!(
                    "no count; {expected} (for one {s} GPU write {s}:1)"
                ))),
                Err(_) => Err(err(expected.to_string())),
            },
            Some((t, _)) if t.eq_ignore_ascii_case("gpu") => Err(err(format!(
                "the gpu: prefix belongs to --gres; {expected}"
            ))),
            Some((t, c)) => {
                if !valid_type(t) {
                    return Err(err(format!(
                        "{t:?} is not a type name (letters, digits, _ . -); {expected}"
                    )));
                }
                if c.contains(':') {
                    return Err(err(format!("a type name cannot contain ':'; {expected}")));
                }
                Ok(GpuCount {
                    gpu_type: Some(t.to_string()),
                    count: count_of(c)?,
                })
            }
        }
    }

    /// A bare integer: that many GPUs of any type.
    pub fn from_int(n: i64) -> Result<Self, SyntaxError> {
        u32::try_from(n)
            .map(|count| GpuCount {
                gpu_type: None,
                count,
            })
            .map_err(|_| {
                SyntaxError::new(
                    "GPU count",
                    &n.to_string(),
                    "a GPU count is 0 to 4294967295",
                )
            })
    }
}

impl fmt::Display for GpuCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = &self.gpu_type {
            write!(f, "{t}:")?;
        }
        write!(f, "{}", self.count)
    }
}

impl FromStr for GpuCount {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(
    GpuCount,
    "a GPU count such as 8 or \"a100:8\"",
    from_int = GpuCount::from_int
);

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, t: Option<&str>, count: u64) -> GresItem {
        GresItem {
            name: name.into(),
            gpu_type: t.map(Into::into),
            count,
        }
    }
    fn g(s: &str) -> Vec<GresItem> {
        parse_gres(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn slurm_grammar() {
        // Accepted by Slurm 22.05 `sbatch -vv` with GresTypes=gpu,mps,shard.
        assert_eq!(g("gpu"), [item("gpu", None, 1)]);
        assert_eq!(g("gpu:2"), [item("gpu", None, 2)]);
        assert_eq!(g("gpu:a100"), [item("gpu", Some("a100"), 1)]);
        assert_eq!(g("gpu:a100:2"), [item("gpu", Some("a100"), 2)]);
        assert_eq!(g("gpu:2k"), [item("gpu", None, 2048)]);
        assert_eq!(g("gpu:1K"), [item("gpu", None, 1024)]);
        assert_eq!(g("gpu:a100:2kb"), [item("gpu", Some("a100"), 2000)]);
        assert_eq!(g("gpu:a100:1G"), [item("gpu", Some("a100"), 1 << 30)]);
        assert_eq!(g("gpu:0"), [item("gpu", None, 0)]);
        assert_eq!(g("gpu:a-1.x_y:2"), [item("gpu", Some("a-1.x_y"), 2)]);
        assert_eq!(g("gpu:A100:1"), [item("gpu", Some("A100"), 1)]);
        assert_eq!(g("mps:100"), [item("mps", None, 100)]);
        assert_eq!(g("gpu,gpu:2"), [item("gpu", None, 1), item("gpu", None, 2)]);
        assert_eq!(
            g("gpu:a100:2,gpu:v100:1"),
            [item("gpu", Some("a100"), 2), item("gpu", Some("v100"), 1)]
        );
        assert_eq!(g("gres:gpu:1"), [item("gpu", None, 1)]);
        assert_eq!(g("none"), []);
        // One colon and not a count: a type (Slurm's rule).
        assert_eq!(g("gpu:2x"), [item("gpu", Some("2x"), 1)]);
        assert_eq!(g("gpu:1.5"), [item("gpu", Some("1.5"), 1)]);
        assert_eq!(g("gpu:3090ti"), [item("gpu", Some("3090ti"), 1)]);
        assert_eq!(g("gpu:3090"), [item("gpu", None, 3090)]);
        assert_eq!(g("gpu:t4"), [item("gpu", Some("t4"), 1)]);
    }

    #[test]
    fn refuses_what_slurm_refuses() {
        // "Invalid count value GRES ..." / "Invalid generic resource (gres) specification".
        for bad in [
            "gpu:tesla:v100:1",
            "gpu:a100:2:x",
            "gpu:2:a100",
            "gpu:a:b",
            "gpu:",
            "gpu:a100:",
            ":2",
            "gpu::2",
            "gres/gpu:1",
            "gpu:a100:no_consume:1",
        ] {
            assert!(parse_gres(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refuses_what_slurm_misreads() {
        for bad in [
            "gpu:k",
            "gpu:a100:k",
            "gpu:+2",
            "gpu:-1",
            "gpu:99999999999999999999",
            "gpu:a100:2,",
            ",gpu",
            "gpu,,gpu",
            "",
            "gpu:16777216P",
            "gpu:a b:1",
        ] {
            assert!(parse_gres(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tesla_hint() {
        assert_eq!(
            parse_gres("gpu:tesla:v100:1").unwrap_err().to_string(),
            "invalid gres \"gpu:tesla:v100:1\": invalid count \"v100:1\" in \"gpu:tesla:v100:1\": \
             a type name cannot contain ':' (did you mean gpu:v100:1?); expected NAME, \
             NAME:COUNT, NAME:TYPE or NAME:TYPE:COUNT (e.g. gpu:a100:2)"
        );
    }

    #[test]
    fn gpus_only() {
        assert_eq!(gpus_from_gres(&g("none")), Ok(None));
        assert_eq!(
            gpus_from_gres(&g("gpu:a100:2")),
            Ok(Some(GpuCount {
                gpu_type: Some("a100".into()),
                count: 2
            }))
        );
        let e = gpus_from_gres(&g("gpu:1,mps:50")).unwrap_err();
        assert!(e.message.contains("Muster schedules GPUs only"), "{e}");
        assert!(
            gpus_from_gres(&g("GPU:1"))
                .unwrap_err()
                .message
                .contains("case-sensitive")
        );
        assert!(gpus_from_gres(&g("gpu:a100:1,gpu:v100:1")).is_err());
        assert!(gpus_from_gres(&g("gpu:8G")).is_err());
    }

    #[test]
    fn gpu_count() {
        let c = |s: &str| GpuCount::parse(s).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c("8"),
            GpuCount {
                gpu_type: None,
                count: 8
            }
        );
        assert_eq!(
            c("a100:8"),
            GpuCount {
                gpu_type: Some("a100".into()),
                count: 8
            }
        );
        assert_eq!(c("0").count, 0);
        assert_eq!(c("2k").count, 2048);
        assert_eq!(c("a100:8").to_string(), "a100:8");
        for bad in [
            "a100",
            "gpu:2",
            "a100:2:3",
            "",
            ":2",
            "a100:",
            "-1",
            "+2",
            "1.5",
            "a b:1",
            "5000000000",
        ] {
            assert!(GpuCount::parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            GpuCount::parse("a100")
                .unwrap_err()
                .message
                .contains("write a100:1")
        );
        assert!(
            GpuCount::parse("gpu:2")
                .unwrap_err()
                .message
                .contains("--gres")
        );
    }

    #[test]
    fn display_and_serde() {
        assert_eq!(item("gpu", None, 1).to_string(), "gpu:1");
        assert_eq!(item("gpu", Some("3090"), 1).to_string(), "gpu:3090:1");
        assert_eq!(
            GresItem::parse("gpu:3090:1").unwrap(),
            item("gpu", Some("3090"), 1)
        );
        let n: GpuCount = serde_json::from_str("4").unwrap();
        assert_eq!(n.count, 4);
        let n: GpuCount = serde_json::from_str("\"h100:4\"").unwrap();
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"h100:4\"");
        let i: GresItem = serde_json::from_str("\"gpu:a100\"").unwrap();
        assert_eq!(serde_json::to_string(&i).unwrap(), "\"gpu:a100:1\"");
    }
}

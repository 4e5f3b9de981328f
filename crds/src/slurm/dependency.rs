//! Job dependencies: `--dependency=afterok:20:21,afterany:23`, `afterok:a?afternotok:b`,
//! `singleton`, `after:prep+10`.
//!
//! Grammar: items `TYPE:JOB[:JOB...]` (or `singleton`, or a bare numeric job id meaning
//! `afterany:ID`) joined by `,` or by `?`, never both. TYPE is `after`, `afterany`, `afterok`,
//! `afternotok` or `aftercorr` (any case, as in Slurm). A JOB is a numeric job id or, in
//! Muster, the name of a BatchJob in the same namespace (a DNS-1123 subdomain: lowercase
//! letters, digits, `-` and `.`); an all-digit reference is always an id. `+MINUTES` after a
//! job delays the dependency (Slurm documents it for `after`; Muster honours it on every type).
//!
//! Meaning (sbatch(1)): with `,` every listed job of every item must satisfy its item; with
//! `?` any single one suffices — `afterok:20:21?afterany:23` is released by `afterok:20` OR
//! `afterok:21` OR `afterany:23`.
//!
//! Not supported (refused with a message): Slurm's `afterburstbuffer` and `expand` types and
//! `JOBID_TASK` array-task references.

use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u32, parse_digits_u64, serde_via_string};

const WHAT: &str = "dependency";
const EXPECTED: &str = "expected TYPE:JOB[:JOB...] items joined by ',' (all) or '?' (any), \
     TYPE one of after, afterany, afterok, afternotok, aftercorr, JOB a job id or BatchJob \
     name with optional +MINUTES; or singleton";

/// How the items of a dependency combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Combine {
    /// `,`: all must be satisfied.
    #[default]
    All,
    /// `?`: any one suffices.
    Any,
}

impl Combine {
    /// The separator: `,` or `?`.
    pub fn separator(&self) -> char {
        match self {
            Combine::All => ',',
            Combine::Any => '?',
        }
    }
}

/// A dependency type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DepKind {
    /// `after`: the job started (or was cancelled), plus the delay.
    After,
    /// `afterany`: the job ended, in any state.
    AfterAny,
    /// `afterok`: the job completed with exit code 0.
    AfterOk,
    /// `afternotok`: the job failed (non-zero exit, node failure, timeout, …).
    AfterNotOk,
    /// `aftercorr`: the array task with the same index completed successfully.
    AfterCorr,
    /// `singleton`: no other job with the same name and user is running.
    Singleton,
}

impl DepKind {
    /// All kinds, in the order Slurm's manual lists them.
    pub const ALL: [DepKind; 6] = [
        DepKind::After,
        DepKind::AfterAny,
        DepKind::AfterCorr,
        DepKind::AfterNotOk,
        DepKind::AfterOk,
        DepKind::Singleton,
    ];

    /// Slurm's spelling: `after`, `afterany`, `afterok`, `afternotok`, `aftercorr`,
    /// `singleton`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DepKind::After => "after",
            DepKind::AfterAny => "afterany",
            DepKind::AfterOk => "afterok",
            DepKind::AfterNotOk => "afternotok",
            DepKind::AfterCorr => "aftercorr",
            DepKind::Singleton => "singleton",
        }
    }
}

impl fmt::Display for DepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DepKind {
    type Err = SyntaxError;
    /// Case-insensitive, as in Slurm.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DepKind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                SyntaxError::new(
                    "dependency type",
                    s,
                    "expected after, afterany, afterok, afternotok, aftercorr or singleton",
                )
            })
    }
}

/// The job a dependency refers to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum JobTarget {
    /// A numeric job id (`status.jobId`), at least 1.
    Id(u64),
    /// A BatchJob name in the same namespace.
    Name(String),
}

impl fmt::Display for JobTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobTarget::Id(id) => write!(f, "{id}"),
            JobTarget::Name(n) => f.write_str(n),
        }
    }
}

/// One job in a dependency item, with its optional delay.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobRef {
    /// The job.
    pub target: JobTarget,
    /// `+MINUTES`: the dependency holds this long after the condition is met.
    pub delay_minutes: Option<u32>,
}

impl JobRef {
    /// A reference by id, without delay.
    pub fn id(id: u64) -> Self {
        JobRef {
            target: JobTarget::Id(id),
            delay_minutes: None,
        }
    }

    /// A reference by BatchJob name, without delay.
    pub fn name(name: impl Into<String>) -> Self {
        JobRef {
            target: JobTarget::Name(name.into()),
            delay_minutes: None,
        }
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.target)?;
        if let Some(d) = self.delay_minutes {
            write!(f, "+{d}")?;
        }
        Ok(())
    }
}

/// One `TYPE:JOB[:JOB...]` item (or `singleton`, with no jobs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DependencyItem {
    /// The dependency type.
    pub kind: DepKind,
    /// The jobs (empty exactly for [`DepKind::Singleton`]).
    pub jobs: Vec<JobRef>,
}

impl fmt::Display for DependencyItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.as_str())?;
        for j in &self.jobs {
            write!(f, ":{j}")?;
        }
        Ok(())
    }
}

/// A parsed `--dependency` value.
///
/// `Display` prints every item as `TYPE:JOB...` (a bare id becomes `afterany:ID`), so
/// `parse(d.to_string()) == d`; a spec with a single item always parses with
/// [`Combine::All`] (the separator is not visible).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DependencySpec {
    /// `,` (all) or `?` (any).
    pub combine: Combine,
    /// The items, in order (never empty after parsing).
    pub items: Vec<DependencyItem>,
}

/// Longest BatchJob name (a DNS-1123 subdomain).
const MAX_NAME_LEN: usize = 253;

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

impl DependencySpec {
    /// Parses a `--dependency` value (see the [module docs](self)).
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, s, msg);
        if s.is_empty() {
            return Err(err(format!("empty; {EXPECTED}")));
        }
        let (combine, sep) = match (s.contains(','), s.contains('?')) {
            (true, true) => {
                return Err(err(
                    "mixes ',' (all) and '?' (any); Slurm allows only one kind of separator"
                        .to_string(),
                ));
            }
            (false, true) => (Combine::Any, '?'),
            _ => (Combine::All, ','),
        };
        let mut items = Vec::new();
        for item in s.split(sep) {
            items.push(Self::parse_item(s, item)?);
        }
        Ok(DependencySpec { combine, items })
    }

    fn parse_item(whole: &str, item: &str) -> Result<DependencyItem, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, whole, msg);
        if item.is_empty() {
            return Err(err(format!("empty item; {EXPECTED}")));
        }
        let mut parts = item.split(':');
        let head = parts.next().unwrap_or_default();
        if let Some(id) = parse_digits_u64(head) {
            // A bare job id: afterany.
            if item.contains(':') {
                return Err(err(format!(
                    "{item:?} does not start with a type; write afterany:{item}"
                )));
            }
            if id == 0 {
                return Err(err(
                    "job id 0 does not exist; job ids start at 1".to_string()
                ));
            }
            return Ok(DependencyItem {
                kind: DepKind::AfterAny,
                jobs: vec![JobRef::id(id)],
            });
        }
        let kind: DepKind = head.parse().map_err(|_| {
            let hint = match head.to_ascii_lowercase().as_str() {
                "afterburstbuffer" | "expand" => {
                    format!("{head:?} is not supported by Muster")
                }
                _ if is_dns_subdomain(head) => {
                    format!(
                        "unknown type {head:?} (to wait for job {head:?} write afterany:{head})"
                    )
                }
                _ => format!("unknown type {head:?}"),
            };
            err(format!("{hint}; {EXPECTED}"))
        })?;
        let jobs = parts
            .map(|j| Self::parse_job(whole, item, j))
            .collect::<Result<Vec<_>, _>>()?;
        match (kind, jobs.is_empty()) {
            (DepKind::Singleton, false) => {
                Err(err(format!("singleton takes no jobs, found {item:?}")))
            }
            (DepKind::Singleton, true) => Ok(DependencyItem { kind, jobs }),
            (_, true) => Err(err(format!(
                "{kind} needs at least one job, e.g. {kind}:1234 or {kind}:my-job"
            ))),
            (_, false) => Ok(DependencyItem { kind, jobs }),
        }
    }

    fn parse_job(whole: &str, item: &str, j: &str) -> Result<JobRef, SyntaxError> {
        let err = |msg: String| SyntaxError::new(WHAT, whole, msg);
        let (target, delay) = match j.split_once('+') {
            Some((t, d)) => {
                let d = parse_digits_u32(d).ok_or_else(|| {
                    err(format!(
                        "invalid delay {d:?} in {item:?}; +MINUTES is a number"
                    ))
                })?;
                (t, Some(d))
            }
            None => (j, None),
        };
        let target = if let Some(id) = parse_digits_u64(target) {
            if id == 0 {
                return Err(err(
                    "job id 0 does not exist; job ids start at 1".to_string()
                ));
            }
            JobTarget::Id(id)
        } else if is_dns_subdomain(target) {
            JobTarget::Name(target.to_string())
        } else if target.is_empty() {
            return Err(err(format!("empty job in {item:?}; {EXPECTED}")));
        } else if target.contains('_') && target.split('_').all(|p| parse_digits_u64(p).is_some()) {
            return Err(err(format!(
                "array task reference {target:?} is not supported; depend on the whole job"
            )));
        } else {
            return Err(err(format!(
                "{target:?} is neither a job id nor a BatchJob name (lowercase letters, \
                 digits, '-' and '.', at most {MAX_NAME_LEN} characters)"
            )));
        };
        Ok(JobRef {
            target,
            delay_minutes: delay,
        })
    }

    /// Every job referenced, in order (with repeats).
    pub fn jobs(&self) -> impl Iterator<Item = &JobRef> {
        self.items.iter().flat_map(|i| i.jobs.iter())
    }
}

impl fmt::Display for DependencySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                write!(f, "{}", self.combine.separator())?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

impl FromStr for DependencySpec {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(
    DependencySpec,
    "a Slurm dependency such as \"afterok:20:21,afterany:23\""
);

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> DependencySpec {
        DependencySpec::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn item(kind: DepKind, jobs: Vec<JobRef>) -> DependencyItem {
        DependencyItem { kind, jobs }
    }

    #[test]
    fn man_page_examples() {
        // sbatch(1): "-d afterok:20:21,afterany:23"
        assert_eq!(
            p("afterok:20:21,afterany:23"),
            DependencySpec {
                combine: Combine::All,
                items: vec![
                    item(DepKind::AfterOk, vec![JobRef::id(20), JobRef::id(21)]),
                    item(DepKind::AfterAny, vec![JobRef::id(23)]),
                ]
            }
        );
        // "-d afterok:20:21?afterany:23"
        let any = p("afterok:20:21?afterany:23");
        assert_eq!(any.combine, Combine::Any);
        assert_eq!(any.to_string(), "afterok:20:21?afterany:23");
        // "after:job_id[[+time][:jobid[+time]...]]"
        assert_eq!(
            p("after:10+5:11").items[0].jobs,
            [
                JobRef {
                    target: JobTarget::Id(10),
                    delay_minutes: Some(5)
                },
                JobRef::id(11)
            ]
        );
        assert_eq!(p("singleton").items, [item(DepKind::Singleton, vec![])]);
    }

    #[test]
    fn facts_md_bare_id_means_afterany() {
        let d = p("123");
        assert_eq!(d.items, [item(DepKind::AfterAny, vec![JobRef::id(123)])]);
        assert_eq!(d.to_string(), "afterany:123");
        assert_eq!(p("123,afterok:7").to_string(), "afterany:123,afterok:7");
    }

    #[test]
    fn names_and_case() {
        let d = p("AfterOK:prep-data:train.v2+30,singleton");
        assert_eq!(
            d.items[0],
            item(
                DepKind::AfterOk,
                vec![
                    JobRef::name("prep-data"),
                    JobRef {
                        target: JobTarget::Name("train.v2".into()),
                        delay_minutes: Some(30)
                    }
                ]
            )
        );
        assert_eq!(d.to_string(), "afterok:prep-data:train.v2+30,singleton");
        assert_eq!(d.jobs().count(), 2);
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            "",
            "afterok:1,afterok:2?afterok:3",
            "afterok",
            "afterok:",
            "afterok:1:",
            "afterok::1",
            "bogus:1",
            "afterok:1,,afterok:2",
            "singleton:1",
            "afterok:Prep",
            "afterok:-x",
            "afterok:1+",
            "afterok:1+x",
            "afterok:12_3",
            "afterburstbuffer:1",
            "expand:1",
            "0",
            "afterok:0",
            "1:2",
            "prep",
            ",",
        ] {
            assert!(DependencySpec::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn helpful_messages() {
        let m = |s| DependencySpec::parse(s).unwrap_err().message;
        assert!(m("a:1,b:2?c:3").contains("mixes ','"));
        assert!(m("prep").contains("write afterany:prep"));
        assert!(m("afterok:12_3").contains("array task reference"));
        assert!(m("1:2").contains("write afterany:1:2"));
    }

    #[test]
    fn serde() {
        let d: DependencySpec = serde_json::from_str("\"afterok:1?afternotok:x\"").unwrap();
        assert_eq!(d.combine, Combine::Any);
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            "\"afterok:1?afternotok:x\""
        );
    }
}

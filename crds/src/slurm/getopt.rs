//! `sbatch`'s option grammar: the table of its options (Slurm 22.05's, plus Muster's own) and
//! a `getopt_long` that reads directive tokens the way Slurm hands them to glibc's.
//!
//! The CLI parses `#SBATCH` tokens with [`getopt`] and the command line with clap built from
//! the same [`SBATCH_OPTIONS`], so an option name or prefix means the same in both places.
//!
//! Hand-written rather than clap for directives because sbatch's rules must hold exactly
//! (a missing value takes the next token whatever it looks like, `--` ends the options,
//! unique prefixes, non-options are errors only at the end) and because every problem of a
//! script is reported with its line, in one linear pass; clap stops at the first error and
//! knows no lines.

use super::script::{LineProblem, Token};

/// How an option takes its value (getopt_long's `has_arg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HasArg {
    /// A flag.
    No,
    /// `--opt=value`, `--opt value`, `-o value` or `-ovalue`.
    Required,
    /// Only `--opt=value` or `-ovalue`; `--opt value` leaves `value` as the next argument.
    Optional,
}

/// Where an option comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Slurm's `sbatch`.
    Slurm,
    /// Muster's own (`--image`).
    Muster,
    /// NVIDIA pyxis's SPANK plugin (`--container-image`, …; see [`super::pyxis`]).
    Pyxis,
}

/// One `sbatch` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SbatchOption {
    /// Long name without dashes.
    pub long: &'static str,
    /// Short letter, if any.
    pub short: Option<char>,
    /// Value rule.
    pub has_arg: HasArg,
    /// The option this one is another name of (`tasks-per-node` → `ntasks-per-node`).
    pub alias_of: Option<&'static str>,
    /// Who defines it.
    pub source: Source,
}

impl SbatchOption {
    /// The option's own name, or the one it is an alias of.
    pub fn canonical(&self) -> &'static str {
        self.alias_of.unwrap_or(self.long)
    }
}

const fn opt(
    long: &'static str,
    short: Option<char>,
    has_arg: HasArg,
    alias_of: Option<&'static str>,
) -> SbatchOption {
    SbatchOption {
        long,
        short,
        has_arg,
        alias_of,
        source: Source::Slurm,
    }
}

const fn ext(long: &'static str, short: Option<char>, has_arg: HasArg) -> SbatchOption {
    SbatchOption {
        long,
        short,
        has_arg,
        alias_of: None,
        source: Source::Muster,
    }
}

const fn pyxis(long: &'static str, has_arg: HasArg) -> SbatchOption {
    SbatchOption {
        long,
        short: None,
        has_arg,
        alias_of: None,
        source: Source::Pyxis,
    }
}

use HasArg::{No, Optional, Required};

/// Every long option of Slurm 22.05's `sbatch`, pyxis's, and Muster's, sorted by name (prefixes are
/// looked up by binary search).
pub const SBATCH_OPTIONS: &[SbatchOption] = &[
    opt("account", Some('A'), Required, None),
    opt("acctg-freq", None, Required, None),
    opt("array", Some('a'), Required, None),
    opt("batch", None, Required, None),
    opt("bb", None, Required, None),
    opt("bbf", None, Required, None),
    opt("begin", Some('b'), Required, None),
    opt("chdir", Some('D'), Required, None),
    opt("cluster", None, Required, None),
    opt("cluster-constraint", None, Required, None),
    opt("clusters", Some('M'), Required, None),
    opt("comment", None, Required, None),
    opt("constraint", Some('C'), Required, None),
    opt("container", None, Required, None),
    pyxis("container-entrypoint", No),
    pyxis("container-entrypoint-log", No),
    pyxis("container-env", Required),
    pyxis("container-image", Required),
    pyxis("container-mount-home", No),
    pyxis("container-mounts", Required),
    pyxis("container-name", Required),
    pyxis("container-readonly", No),
    pyxis("container-remap-root", No),
    pyxis("container-save", Required),
    pyxis("container-unshare", Required),
    pyxis("container-workdir", Required),
    pyxis("container-writable", No),
    opt("context", None, Required, None),
    opt("contiguous", None, No, None),
    opt("core-spec", Some('S'), Required, None),
    opt("cores-per-socket", None, Required, None),
    opt("cpu-freq", None, Required, None),
    opt("cpus-per-gpu", None, Required, None),
    opt("cpus-per-task", Some('c'), Required, None),
    opt("deadline", None, Required, None),
    opt("delay-boot", None, Required, None),
    opt("dependency", Some('d'), Required, None),
    opt("distribution", Some('m'), Required, None),
    opt("error", Some('e'), Required, None),
    opt("exclude", Some('x'), Required, None),
    opt("exclusive", None, Optional, None),
    opt("export", None, Required, None),
    opt("export-file", None, Required, None),
    opt("extra-node-info", Some('B'), Required, None),
    opt("get-user-env", None, Optional, None),
    opt("gid", None, Required, None),
    opt("gpu-bind", None, Required, None),
    opt("gpu-freq", None, Required, None),
    opt("gpus", Some('G'), Required, None),
    opt("gpus-per-node", None, Required, None),
    opt("gpus-per-socket", None, Required, None),
    opt("gpus-per-task", None, Required, None),
    opt("gres", None, Required, None),
    opt("gres-flags", None, Required, None),
    opt("help", Some('h'), No, None),
    opt("hint", None, Required, None),
    opt("hold", Some('H'), No, None),
    opt("ignore-pbs", None, No, None),
    ext("image", None, Required),
    opt("input", Some('i'), Required, None),
    opt("job-name", Some('J'), Required, None),
    opt("kill-on-invalid-dep", None, Required, None),
    opt("licenses", Some('L'), Required, None),
    opt("mail-type", None, Required, None),
    opt("mail-user", None, Required, None),
    opt("mcs-label", None, Required, None),
    opt("mem", None, Required, None),
    opt("mem-bind", None, Required, None),
    opt("mem-per-cpu", None, Required, None),
    opt("mem-per-gpu", None, Required, None),
    opt("mincpus", None, Required, None),
    opt("network", None, Required, None),
    opt("nice", None, Optional, None),
    pyxis("no-container-entrypoint", No),
    pyxis("no-container-mount-home", No),
    pyxis("no-container-remap-root", No),
    opt("no-kill", Some('k'), Optional, None),
    opt("no-requeue", None, No, None),
    opt("nodefile", Some('F'), Required, None),
    opt("nodelist", Some('w'), Required, None),
    opt("nodes", Some('N'), Required, None),
    opt("ntasks", Some('n'), Required, None),
    opt("ntasks-per-core", None, Required, None),
    opt("ntasks-per-gpu", None, Required, None),
    opt("ntasks-per-node", None, Required, None),
    opt("ntasks-per-socket", None, Required, None),
    opt("ntasks-per-tres", None, Required, None),
    opt("open-mode", None, Required, None),
    opt("output", Some('o'), Required, None),
    opt("overcommit", Some('O'), No, None),
    opt("oversubscribe", Some('s'), No, None),
    opt("parsable", None, No, None),
    opt("partition", Some('p'), Required, None),
    opt("power", None, Required, None),
    opt("prefer", None, Required, None),
    opt("priority", None, Required, None),
    opt("profile", None, Required, None),
    opt("propagate", None, Optional, None),
    opt("qos", Some('q'), Required, None),
    opt("quiet", Some('Q'), No, None),
    opt("reboot", None, No, None),
    opt("requeue", None, No, None),
    opt("reservation", None, Required, None),
    opt("signal", None, Required, None),
    opt("sockets-per-node", None, Required, None),
    opt("spread-job", None, No, None),
    opt("switches", None, Required, None),
    opt("tasks-per-node", None, Required, Some("ntasks-per-node")),
    opt("test-only", None, No, None),
    opt("thread-spec", None, Required, None),
    opt("threads-per-core", None, Required, None),
    opt("time", Some('t'), Required, None),
    opt("time-min", None, Required, None),
    opt("tmp", None, Required, None),
    opt("uid", None, Required, None),
    opt("usage", None, No, None),
    opt("use-min-nodes", None, No, None),
    opt("verbose", Some('v'), No, None),
    opt("version", Some('V'), No, None),
    opt("wait", Some('W'), No, None),
    opt("wait-all-nodes", None, Required, None),
    opt("wckey", None, Required, None),
    opt("wrap", None, Required, None),
];

/// The option named exactly `long`.
pub fn find(long: &str) -> Option<&'static SbatchOption> {
    SBATCH_OPTIONS
        .binary_search_by(|o| o.long.cmp(long))
        .ok()
        .map(|i| &SBATCH_OPTIONS[i])
}

/// The option with short letter `c`.
pub fn find_short(c: char) -> Option<&'static SbatchOption> {
    SBATCH_OPTIONS.iter().find(|o| o.short == Some(c))
}

/// The options whose names start with `prefix`, in name order.
pub fn with_prefix(prefix: &str) -> &'static [SbatchOption] {
    let lo = SBATCH_OPTIONS.partition_point(|o| o.long < prefix);
    let hi = lo + SBATCH_OPTIONS[lo..].partition_point(|o| o.long.starts_with(prefix));
    &SBATCH_OPTIONS[lo..hi]
}

/// How a long name resolves: exactly, by a unique prefix (aliases of one option count once),
/// or not.
pub fn resolve(name: &str) -> Result<&'static SbatchOption, Vec<&'static str>> {
    if let Some(o) = find(name) {
        return Ok(o);
    }
    let matches = with_prefix(name);
    match matches {
        [] => Err(Vec::new()),
        [first, rest @ ..] if rest.iter().all(|o| o.canonical() == first.canonical()) => Ok(first),
        _ => Err(matches.iter().map(|o| o.long).collect()),
    }
}

/// One option as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occurrence {
    /// The option (its canonical long name is [`SbatchOption::canonical`]).
    pub option: &'static SbatchOption,
    /// Its value, if it took one.
    pub value: Option<String>,
    /// The line of the option's token.
    pub line: usize,
}

/// Options read from directive tokens, and every problem met.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The options in the order given.
    pub options: Vec<Occurrence>,
    /// Unknown or ambiguous options, missing values, stray words, each with its line.
    pub problems: Vec<LineProblem>,
}

/// Read directive tokens as Slurm's `getopt_long` reads them, in one pass.
pub fn getopt(tokens: &[Token]) -> Parsed {
    let mut out = Parsed::default();
    let mut problem = |line: usize, message: String, hint: Option<String>| {
        out.problems.push(LineProblem {
            line,
            message,
            hint,
        })
    };
    let mut options = Vec::new();
    // Non-option words (getopt permutes them to the end; sbatch refuses them).
    let mut strays: Vec<usize> = Vec::new();
    // Index of a token taken as a value although it starts with '-', with its option token.
    let mut stolen: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    let mut only_words = false;
    while i < tokens.len() {
        let tok = &tokens[i];
        let text = tok.text.as_str();
        if only_words || text == "-" || !text.starts_with('-') {
            strays.push(i);
            i += 1;
            continue;
        }
        if text == "--" {
            only_words = true;
            i += 1;
            continue;
        }
        if let Some(body) = text.strip_prefix("--") {
            let (name, attached) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let o = match resolve(name) {
                Ok(o) => o,
                Err(c) if c.is_empty() => {
                    problem(
                        tok.line,
                        format!("unrecognized option '{text}'"),
                        Some("see `muster sbatch --help` for the options sbatch takes".into()),
                    );
                    i += 1;
                    continue;
                }
                Err(c) => {
                    let list: Vec<String> = c.iter().map(|n| format!("'--{n}'")).collect();
                    problem(
                        tok.line,
                        format!(
                            "option '--{name}' is ambiguous; possibilities: {}",
                            list.join(" ")
                        ),
                        None,
                    );
                    i += 1;
                    continue;
                }
            };
            i += 1;
            let value = match (o.has_arg, attached) {
                (No, Some(_)) => {
                    problem(
                        tok.line,
                        format!("option '--{}' doesn't allow an argument", o.long),
                        None,
                    );
                    continue;
                }
                (No, None) | (Optional, None) => None,
                (_, Some(v)) => Some(v.to_string()),
                (Required, None) => match tokens.get(i) {
                    Some(next) => {
                        if next.text.starts_with('-') {
                            stolen.push((i, i - 1));
                        }
                        i += 1;
                        Some(next.text.clone())
                    }
                    None => {
                        problem(
                            tok.line,
                            format!("option '--{}' requires an argument", o.long),
                            None,
                        );
                        continue;
                    }
                },
            };
            options.push(Occurrence {
                option: o,
                value,
                line: tok.line,
            });
            continue;
        }
        // A cluster of short options: -vv, -N2, -HJname.
        let start = i;
        i += 1;
        let body = &text[1..];
        for (pos, c) in body.char_indices() {
            let Some(o) = find_short(c) else {
                problem(tok.line, format!("invalid option -- '{c}'"), None);
                continue;
            };
            let rest = &body[pos + c.len_utf8()..];
            match o.has_arg {
                No => options.push(Occurrence {
                    option: o,
                    value: None,
                    line: tok.line,
                }),
                Optional => {
                    options.push(Occurrence {
                        option: o,
                        value: (!rest.is_empty()).then(|| rest.to_string()),
                        line: tok.line,
                    });
                    break;
                }
                Required if !rest.is_empty() => {
                    options.push(Occurrence {
                        option: o,
                        value: Some(rest.to_string()),
                        line: tok.line,
                    });
                    break;
                }
                Required => {
                    match tokens.get(i) {
                        Some(next) => {
                            if next.text.starts_with('-') {
                                stolen.push((i, start));
                            }
                            i += 1;
                            options.push(Occurrence {
                                option: o,
                                value: Some(next.text.clone()),
                                line: tok.line,
                            });
                        }
                        None => problem(
                            tok.line,
                            format!("option requires an argument -- '{c}'"),
                            None,
                        ),
                    }
                    break;
                }
            }
        }
    }
    for s in strays {
        let tok = &tokens[s];
        let hint = stolen
            .iter()
            .find(|&&(v, _)| v + 1 == s)
            .map(|&(v, o)| {
                format!(
                    "{} on line {} has no value, so it took '{}' as its value",
                    tokens[o].text, tokens[o].line, tokens[v].text
                )
            })
            .unwrap_or_else(|| {
                "write a value right after its option: --opt=value or -o value".into()
            });
        problem(
            tok.line,
            format!(
                "invalid directive '{}': not an option (sbatch options start with - or --)",
                tok.text
            ),
            Some(hint),
        );
    }
    out.options = options;
    // Report in script order.
    out.problems.sort_by_key(|p| p.line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(line_words: &[(usize, &str)]) -> Vec<Token> {
        line_words
            .iter()
            .map(|&(line, w)| Token {
                text: w.to_string(),
                line,
            })
            .collect()
    }

    fn opts(p: &Parsed) -> Vec<(&str, Option<&str>, usize)> {
        p.options
            .iter()
            .map(|o| (o.option.canonical(), o.value.as_deref(), o.line))
            .collect()
    }

    #[test]
    fn table_is_sorted_unique_and_consistent() {
        for w in SBATCH_OPTIONS.windows(2) {
            assert!(w[0].long < w[1].long, "{} before {}", w[0].long, w[1].long);
        }
        let mut shorts: Vec<char> = SBATCH_OPTIONS.iter().filter_map(|o| o.short).collect();
        let n = shorts.len();
        shorts.sort();
        shorts.dedup();
        assert_eq!(shorts.len(), n, "a short letter is used twice");
        for o in SBATCH_OPTIONS {
            if let Some(a) = o.alias_of {
                let target = find(a).expect("alias target");
                assert_eq!(target.has_arg, o.has_arg, "{}", o.long);
            }
        }
    }

    #[test]
    fn long_options_and_prefixes() {
        let p = getopt(&tokens(&[
            (2, "--part=gpu"),
            (2, "--job-name"),
            (3, "-N"),
            (4, "--tasks-per=3"),
            (4, "--exclusive"),
            (4, "user"),
        ]));
        assert_eq!(
            opts(&p),
            [
                ("partition", Some("gpu"), 2),
                ("job-name", Some("-N"), 2),
                ("ntasks-per-node", Some("3"), 4),
                ("exclusive", None, 4),
            ]
        );
        assert_eq!(p.problems.len(), 1);
        assert_eq!(p.problems[0].line, 4);
        assert!(p.problems[0].message.contains("invalid directive 'user'"));
    }

    #[test]
    fn short_clusters() {
        let p = getopt(&tokens(&[(1, "-vvHN2"), (1, "-J"), (1, "x"), (2, "-Jy")]));
        assert_eq!(
            opts(&p),
            [
                ("verbose", None, 1),
                ("verbose", None, 1),
                ("hold", None, 1),
                ("nodes", Some("2"), 1),
                ("job-name", Some("x"), 1),
                ("job-name", Some("y"), 2),
            ]
        );
        assert!(p.problems.is_empty());
    }

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let p = getopt(&tokens(&[
            (2, "--bogus"),
            (3, "--gpu"),
            (4, "--hold=1"),
            (5, "-z"),
            (6, "-J"),
            (7, "-N"),
            (7, "2"),
            (8, "--"),
            (8, "-n"),
            (9, "--time"),
        ]));
        let got: Vec<(usize, &str)> = p
            .problems
            .iter()
            .map(|p| (p.line, p.message.as_str()))
            .collect();
        assert_eq!(got.len(), 7, "{got:#?}");
        assert_eq!(got[0], (2, "unrecognized option '--bogus'"));
        assert!(
            got[1]
                .1
                .starts_with("option '--gpu' is ambiguous; possibilities: '--gpu-bind'")
        );
        assert_eq!(got[2], (4, "option '--hold' doesn't allow an argument"));
        assert_eq!(got[3], (5, "invalid option -- 'z'"));
        assert_eq!(got[4].0, 7);
        assert!(got[4].1.contains("invalid directive '2'"));
        assert_eq!(
            p.problems[4].hint.as_deref(),
            Some("-J on line 6 has no value, so it took '-N' as its value")
        );
        assert!(got[5].1.contains("invalid directive '-n'"), "{got:?}");
        // --time after "--" is a word too.
        assert!(got[6].1.contains("invalid directive '--time'"), "{got:?}");
    }

    #[test]
    fn missing_values() {
        let p = getopt(&tokens(&[(2, "--job-name")]));
        assert_eq!(
            p.problems[0].message,
            "option '--job-name' requires an argument"
        );
        let p = getopt(&tokens(&[(2, "-J")]));
        assert_eq!(p.problems[0].message, "option requires an argument -- 'J'");
    }

    #[test]
    fn optional_values_need_equals() {
        let p = getopt(&tokens(&[
            (1, "--nice"),
            (1, "--nice=5"),
            (1, "--exclusive=user"),
        ]));
        assert_eq!(
            opts(&p),
            [
                ("nice", None, 1),
                ("nice", Some("5"), 1),
                ("exclusive", Some("user"), 1)
            ]
        );
    }

    #[test]
    fn aliases_are_not_ambiguous() {
        assert_eq!(resolve("tasks").unwrap().canonical(), "ntasks-per-node");
        assert!(resolve("gpus-per").is_err());
        assert_eq!(resolve("gpus").unwrap().long, "gpus");
    }
}

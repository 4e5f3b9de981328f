//! Hostlists checked against real Slurm.
//!
//! - `recorded_answers`: `data/slurm_hostlist_answers.tsv` holds what Slurm 22.05's
//!   `scontrol show hostnames|hostlist|hostlistsorted` printed for ~100 inputs; our
//!   [`expand`]/[`compress`]/[`compress_sorted`] must give the same (or the deliberate
//!   difference the table records). Always runs.
//! - The other tests run `scontrol` itself (when it is on PATH) on the recorded inputs and on
//!   a few hundred generated ones and compare. Without `scontrol` they print a note and pass,
//!   unless `MUSTER_REQUIRE_SLURM=1` (CI installs slurm-client and sets it), where they fail.
//!   `MUSTER_ORACLE_SEED=N` picks other generated cases.

use std::path::PathBuf;
use std::process::Command;

use muster_crds::slurm::hostlist::{compress, compress_sorted, expand};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

struct Answer {
    line: usize,
    cmd: String,
    input: String,
    slurm: String,
    ours: String,
}

fn answers() -> Vec<Answer> {
    let text = std::fs::read_to_string(data_dir().join("slurm_hostlist_answers.tsv")).unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#'))
        .map(|(i, l)| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 4, "line {}: {l:?}", i + 1);
            let slurm = cols[2].to_string();
            let ours = if cols[3] == "=" {
                slurm.clone()
            } else {
                cols[3].to_string()
            };
            Answer {
                line: i + 1,
                cmd: cols[0].to_string(),
                input: unescape(cols[1]),
                slurm,
                ours,
            }
        })
        .collect()
}

/// Our answer in the table's format.
fn ours(cmd: &str, input: &str) -> String {
    match cmd {
        "hostnames" => match expand(input) {
            Ok(names) => names.join(" "),
            Err(_) => "!error".into(),
        },
        "hostlist" => compress(input.split(',')),
        "hostlistsorted" => compress_sorted(input.split(',')),
        other => panic!("unknown command {other}"),
    }
}

#[test]
fn recorded_answers() {
    let answers = answers();
    assert!(answers.len() > 90);
    let mut failures = Vec::new();
    for a in &answers {
        let got = ours(&a.cmd, &a.input);
        if got != a.ours {
            failures.push(format!(
                "line {}: {} {:?}: expected {:?}, got {:?}",
                a.line, a.cmd, a.input, a.ours, got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Live Slurm
// ---------------------------------------------------------------------------------------

struct Scontrol {
    conf: PathBuf,
}

impl Scontrol {
    /// `scontrol` if it is on PATH and works; `None` (after a note) when it is absent and not
    /// required. Panics when required (`MUSTER_REQUIRE_SLURM=1`) but missing or broken.
    fn find(test: &str) -> Option<Scontrol> {
        let conf = std::env::var_os("SLURM_CONF")
            .map(PathBuf::from)
            .unwrap_or_else(|| data_dir().join("slurm.conf"));
        let sc = Scontrol { conf };
        let probe = sc.run("hostnames", "gpu[1-2]");
        let required = std::env::var("MUSTER_REQUIRE_SLURM").is_ok_and(|v| v == "1");
        match probe {
            Ok((out, _)) if out == "gpu1\ngpu2\n" => Some(sc),
            other => {
                assert!(
                    !required,
                    "{test}: MUSTER_REQUIRE_SLURM=1 but `scontrol show hostnames` does not work \
                     (install slurm-client): {other:?}"
                );
                eprintln!(
                    "{test}: skipped: `scontrol` not usable ({other:?}); install slurm-client to \
                     compare with real Slurm"
                );
                None
            }
        }
    }

    fn run(&self, cmd: &str, arg: &str) -> Result<(String, String), String> {
        let out = Command::new("scontrol")
            // `--`: an argument starting with `-` is a hostlist, not an option.
            .args(["--", "show", cmd, arg])
            .env("SLURM_CONF", &self.conf)
            .output()
            .map_err(|e| e.to_string())?;
        Ok((
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Slurm's answer in the table's format.
    fn answer(&self, cmd: &str, arg: &str) -> String {
        let (out, err) = self.run(cmd, arg).expect("scontrol runs");
        if err.contains("Invalid hostlist") || out.contains("Invalid hostlist") {
            return "!error".into();
        }
        let out = out.trim_end_matches('\n');
        if cmd == "hostnames" {
            out.split('\n')
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            out.to_string()
        }
    }
}

#[test]
fn recorded_answers_are_what_slurm_says() {
    let Some(sc) = Scontrol::find("recorded_answers_are_what_slurm_says") else {
        return;
    };
    let mut failures = Vec::new();
    for a in answers() {
        let slurm = sc.answer(&a.cmd, &a.input);
        if slurm != a.slurm {
            failures.push(format!(
                "line {}: {} {:?}: table says {:?}, scontrol says {:?}",
                a.line, a.cmd, a.input, a.slurm, slurm
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// xorshift64*: a small deterministic generator (no dependency needed for test data).
struct Rng(u64);

impl Rng {
    fn new(test: &str) -> Rng {
        let seed = std::env::var("MUSTER_ORACLE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5EED_2205);
        eprintln!("{test}: MUSTER_ORACLE_SEED={seed}");
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const PREFIXES: [&str; 12] = [
    "n",
    "gpu",
    "node-",
    "a1b",
    "rack2-n",
    "x.y",
    "",
    "c",
    "gpu-a100-",
    "ip-10-0-0-",
    "N",
    "z_",
];

/// A number and its printed width: around width boundaries, sometimes zero-padded.
fn number(rng: &mut Rng) -> (u64, usize) {
    let base = rng.pick(&[0u64, 0, 5, 8, 95, 98, 995, 9995, 123_456]);
    let n = base + rng.below(8);
    let digits = n.to_string().len();
    let width = if rng.chance(35) {
        digits + 1 + rng.below(2) as usize
    } else {
        digits
    };
    (n, width)
}

fn bracket(rng: &mut Rng) -> String {
    let parts = 1 + rng.below(3);
    let mut items = Vec::new();
    for _ in 0..parts {
        let (lo, w) = number(rng);
        if rng.chance(40) {
            items.push(format!("{lo:0w$}"));
        } else {
            let hi = lo + rng.below(12);
            let hw = if rng.chance(20) { w + 1 } else { 0 };
            items.push(format!("{lo:0w$}-{hi:0hw$}"));
        }
    }
    format!("[{}]", items.join(","))
}

/// A well-formed hostlist expression.
fn expression(rng: &mut Rng) -> String {
    let items = 1 + rng.below(3);
    let mut out = String::new();
    for i in 0..items {
        if i > 0 {
            out.push_str(rng.pick(&[",", ",", " ", ", ", "\t"]));
        }
        let prefix = rng.pick(&PREFIXES);
        match rng.below(4) {
            0 => {
                // A literal name.
                let (n, w) = number(rng);
                let name = if rng.chance(30) {
                    format!("{prefix}x")
                } else {
                    format!("{prefix}{n:0w$}")
                };
                out.push_str(if name.is_empty() { "lone" } else { &name });
            }
            1 => {
                // Two brackets.
                out.push_str(prefix);
                out.push_str(&bracket(rng));
                out.push_str(rng.pick(&["", "b", "-s", ".r"]));
                out.push_str(&bracket(rng));
            }
            _ => {
                out.push_str(prefix);
                out.push_str(&bracket(rng));
            }
        }
    }
    out
}

/// Host names (no separators): families of numbered names, some without numbers.
fn names(rng: &mut Rng, len: usize) -> Vec<String> {
    let fams: Vec<&str> = (0..2).map(|_| rng.pick(&PREFIXES)).collect();
    (0..len)
        .map(|_| {
            let p = rng.pick(&fams);
            if rng.chance(12) {
                format!("{p}login")
            } else {
                let (n, w) = number(rng);
                format!("{p}{n:0w$}")
            }
        })
        .collect()
}

/// Runs `cases` through ours and Slurm in one batch; on a mismatch, finds the failing cases
/// one by one for the report.
fn compare_batch(
    sc: &Scontrol,
    cmd: &str,
    batch: &str,
    ours_batch: &str,
    cases: &[String],
    ours_one: impl Fn(&str) -> String,
) {
    let slurm = sc.answer(cmd, batch);
    if slurm == ours_batch {
        return;
    }
    let mut failures = Vec::new();
    for c in cases {
        let (s, o) = (sc.answer(cmd, c), ours_one(c));
        if s != o {
            failures.push(format!("{cmd} {c:?}: slurm {s:?}, ours {o:?}"));
        }
    }
    panic!(
        "batch differs from scontrol; failing cases:\n{}",
        if failures.is_empty() {
            format!("(none alone) batch {batch:?}\nslurm {slurm:?}\nours  {ours_batch:?}")
        } else {
            failures.join("\n")
        }
    );
}

#[test]
fn expand_matches_scontrol_on_generated_hostlists() {
    let Some(sc) = Scontrol::find("expand_matches_scontrol_on_generated_hostlists") else {
        return;
    };
    let mut rng = Rng::new("expand_matches_scontrol_on_generated_hostlists");
    let cases: Vec<String> = (0..400).map(|_| expression(&mut rng)).collect();
    for c in &cases {
        assert!(expand(c).is_ok(), "generator made a bad expression {c:?}");
    }
    // Expansion is item by item, so one call can check every case.
    let batch = cases.join(",");
    let ours = expand(&batch).unwrap().join(" ");
    compare_batch(&sc, "hostnames", &batch, &ours, &cases, |c| {
        expand(c).unwrap().join(" ")
    });
}

#[test]
fn compress_matches_scontrol_on_generated_names() {
    let Some(sc) = Scontrol::find("compress_matches_scontrol_on_generated_names") else {
        return;
    };
    let mut rng = Rng::new("compress_matches_scontrol_on_generated_names");
    let cases: Vec<String> = (0..400)
        .map(|_| {
            let len = 1 + rng.below(10) as usize;
            names(&mut rng, len).join(",")
        })
        .collect();
    // A name without digits ends every range and bracket list, so cases compress
    // independently around it.
    const SEP: &str = "SEP-x";
    let batch = cases.join(&format!(",{SEP},"));
    let ours = compress(batch.split(','));
    let parts: Vec<String> = cases.iter().map(|c| compress(c.split(','))).collect();
    assert_eq!(ours, parts.join(&format!(",{SEP},")));
    compare_batch(&sc, "hostlist", &batch, &ours, &cases, |c| {
        compress(c.split(','))
    });
}

#[test]
fn compress_sorted_matches_scontrol_on_generated_names() {
    let Some(sc) = Scontrol::find("compress_sorted_matches_scontrol_on_generated_names") else {
        return;
    };
    let mut rng = Rng::new("compress_sorted_matches_scontrol_on_generated_names");
    // hostlistsorted keeps duplicates where compress_sorted drops them: distinct names only.
    // A per-case tag keeps cases apart after sorting.
    let cases: Vec<String> = (0..300)
        .map(|i| {
            let len = 1 + rng.below(10) as usize;
            let mut v = names(&mut rng, len);
            v.sort();
            v.dedup();
            let tag = format!("t{i}q-");
            v.iter()
                .map(|n| format!("{tag}{n}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let batch = cases.join(",");
    let ours = compress_sorted(batch.split(','));
    compare_batch(&sc, "hostlistsorted", &batch, &ours, &cases, |c| {
        compress_sorted(c.split(','))
    });
}

#[test]
fn expand_never_disagrees_with_scontrol_on_random_strings() {
    let Some(sc) = Scontrol::find("expand_never_disagrees_with_scontrol_on_random_strings") else {
        return;
    };
    let mut rng = Rng::new("expand_never_disagrees_with_scontrol_on_random_strings");
    let alphabet: Vec<char> = "ab019[]-, x".chars().collect();
    let (mut agreed, mut slurm_only) = (0, Vec::new());
    let mut failures = Vec::new();
    for _ in 0..250 {
        let len = rng.below(13) as usize;
        let s: String = (0..len).map(|_| rng.pick(&alphabet)).collect();
        let slurm = sc.answer("hostnames", &s);
        match expand(&s) {
            Ok(names) => {
                let ours = names.join(" ");
                if ours == slurm {
                    agreed += 1;
                } else {
                    failures.push(format!("{s:?}: slurm {slurm:?}, ours {ours:?}"));
                }
            }
            Err(_) if slurm == "!error" => agreed += 1,
            // We refuse what Slurm guesses at (see the hostlist module docs).
            Err(_) => slurm_only.push(format!("{s:?} → {slurm:?}")),
        }
    }
    eprintln!(
        "{agreed} agreed; {} refused by us but accepted by Slurm, e.g. {:?}",
        slurm_only.len(),
        slurm_only.iter().take(5).collect::<Vec<_>>()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(agreed > 100, "too few agreements: {agreed}");
}

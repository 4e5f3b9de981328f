//! `--output`/`--error` filename patterns (sbatch's "filename pattern"), expanded as Slurm
//! expands them for a batch job (`expand_stdio_fields`, what `scontrol show job` prints as
//! `StdOut=`/`StdErr=` and the batch step opens).
//!
//! | symbol | expands to |
//! |---|---|
//! | `%%` | `%` |
//! | `%j`, `%J` | the job id (`%J` is `jobid.stepid` for steps; the batch step has none) |
//! | `%A` | the array's master job id; the job id for a job that is no array element |
//! | `%a` | the array index; `4294967294` (Slurm's `NO_VAL`) for a job that is no array element |
//! | `%b` | the array index modulo 10 |
//! | `%x` | the job name |
//! | `%u` | the user name |
//! | `%N` | the first node of the job (`(null)` before it has one, as scontrol prints) |
//! | `%n`, `%t` | `0` (node and task of the batch step) |
//! | `%s` | `batch` (the batch step's name) |
//!
//! A number between `%` and a numeric symbol zero-pads it (`%5j` → `00123`; at most 10
//! digits, and a number of two or more digits means 10); it is ignored for text symbols
//! (`%5x` is the name). Slurm's quirks are kept, so a file lands where Slurm would put it:
//! a `%` followed by a character that is no symbol is kept as written (`%q` stays `%q`); a
//! number not followed by a symbol leaves only its last digit (`%05j` is `5j`); and a
//! backslash anywhere turns expansion off for the whole name, the backslashes removed
//! (`\\%j.out` is `%j.out`). A relative name is relative to the job's working directory.

/// sbatch's default `--output` (and `--error`, which defaults to the output) for a job.
pub const DEFAULT_OUTPUT: &str = "slurm-%j.out";
/// sbatch's default `--output` for a job array.
pub const DEFAULT_ARRAY_OUTPUT: &str = "slurm-%A_%a.out";

/// Slurm's `NO_VAL`: the array index of a job that is no array element.
const NO_VAL: u32 = 0xffff_fffe;

/// What a filename pattern can refer to.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdioFields<'a> {
    /// The job id (of the element, for an array element).
    pub job_id: u64,
    /// `(array master job id, index)` for an array element.
    pub array: Option<(u64, u32)>,
    /// The job name (`%x`).
    pub job_name: &'a str,
    /// The user name (`%u`).
    pub user: &'a str,
    /// The job's first node (`%N`), once it has one.
    pub first_node: Option<&'a str>,
    /// The working directory relative names are in; `None`: they stay relative.
    pub work_dir: Option<&'a str>,
}

/// `--output` (or `--error`) as given, or sbatch's default for the job.
pub fn output_pattern(given: Option<&str>, array: bool) -> &str {
    match given {
        Some(p) if !p.is_empty() => p,
        _ if array => DEFAULT_ARRAY_OUTPUT,
        _ => DEFAULT_OUTPUT,
    }
}

/// The file name `pattern` names for the job (see the module docs).
pub fn expand(pattern: &str, f: &StdioFields<'_>) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    if !pattern.starts_with('/')
        && let Some(dir) = f.work_dir
    {
        out.push_str(dir);
        if !dir.ends_with('/') {
            out.push('/');
        }
    }
    if pattern.contains('\\') {
        out.extend(pattern.chars().filter(|&c| c != '\\'));
        return out;
    }
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(&next) = chars.get(i) else {
            // A trailing `%` is dropped, as Slurm's parser ends in its expand state.
            break;
        };
        if next == '%' {
            out.push('%');
            i += 1;
            continue;
        }
        let mut pad = 0usize;
        if next.is_ascii_digit() {
            let start = i;
            let mut end = i;
            while chars.get(end).is_some_and(char::is_ascii_digit) {
                end += 1;
            }
            let digits: String = chars[start..end].iter().collect();
            // strtoul: more than one digit (or a value over 9) means the maximum, 10, and
            // skips them all; one digit pads by itself.
            let value: u64 = digits.parse().unwrap_or(u64::MAX);
            let after = if value > 9 {
                pad = 10;
                end
            } else {
                pad = value as usize;
                start + 1
            };
            match chars.get(after) {
                Some(&s) if is_symbol(s) => {
                    expand_symbol(&mut out, s, pad, f);
                    i = after + 1;
                }
                _ => {
                    // Not a symbol: Slurm keeps only the run's last digit.
                    out.push(chars[end - 1]);
                    i = end;
                }
            }
            continue;
        }
        if is_symbol(next) {
            expand_symbol(&mut out, next, pad, f);
        } else {
            out.push('%');
            out.push(next);
        }
        i += 1;
    }
    out
}

fn is_symbol(c: char) -> bool {
    matches!(
        c,
        'A' | 'a' | 'b' | 'J' | 'j' | 'N' | 'n' | 's' | 't' | 'u' | 'x'
    )
}

fn expand_symbol(out: &mut String, s: char, pad: usize, f: &StdioFields<'_>) {
    let num = |out: &mut String, n: u64| out.push_str(&format!("{n:0pad$}"));
    match s {
        'A' => num(out, f.array.map_or(f.job_id, |(a, _)| a)),
        'J' | 'j' => num(out, f.job_id),
        'a' => num(out, u64::from(f.array.map_or(NO_VAL, |(_, t)| t))),
        'b' => num(out, u64::from(f.array.map_or(NO_VAL, |(_, t)| t) % 10)),
        'N' => out.push_str(f.first_node.unwrap_or("(null)")),
        's' => out.push_str("batch"),
        // Padded as the batch step pads them where it opens the file (Slurm's scontrol
        // prints them unpadded).
        'n' | 't' => num(out, 0),
        'u' => out.push_str(f.user),
        'x' => out.push_str(f.job_name),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> StdioFields<'static> {
        StdioFields {
            job_id: 128,
            array: None,
            job_name: "train",
            user: "dana",
            first_node: Some("gpu001"),
            work_dir: None,
        }
    }

    #[test]
    fn symbols_expand_as_slurm_documents() {
        let f = job();
        assert_eq!(expand("logs/%x-%j.out", &f), "logs/train-128.out");
        assert_eq!(expand("job%J.out", &f), "job128.out");
        assert_eq!(expand("job%4j.out", &f), "job0128.out");
        assert_eq!(expand("job%j-%2t.out", &f), "job128-00.out");
        assert_eq!(expand("%u@%N.%n.%s", &f), "dana@gpu001.0.batch");
        assert_eq!(expand("100%%-%j", &f), "100%-128");
        assert_eq!(expand("%A_%a", &f), "128_4294967294");
        assert_eq!(expand("%5x", &f), "train", "padding ignored for text");
    }

    #[test]
    fn array_elements_use_the_master_id_and_index() {
        let f = StdioFields {
            job_id: 131,
            array: Some((128, 3)),
            ..job()
        };
        assert_eq!(expand(DEFAULT_ARRAY_OUTPUT, &f), "slurm-128_3.out");
        assert_eq!(expand("%A.%3a.%b.%j", &f), "128.003.3.131");
        let f = StdioFields {
            array: Some((128, 17)),
            ..f
        };
        assert_eq!(expand("%b", &f), "7");
    }

    #[test]
    fn slurms_quirks_are_kept() {
        let f = job();
        assert_eq!(expand("%q.out", &f), "%q.out");
        assert_eq!(expand("%05j", &f), "5j");
        assert_eq!(expand("%12j", &f), "0000000128");
        assert_eq!(expand("%12q", &f), "2q");
        assert_eq!(expand("a\\%j.out", &f), "a%j.out");
        assert_eq!(expand("x%", &f), "x");
        assert_eq!(
            expand(
                "%N",
                &StdioFields {
                    first_node: None,
                    ..f
                }
            ),
            "(null)"
        );
    }

    #[test]
    fn relative_names_are_in_the_working_directory_and_defaults_apply() {
        let f = StdioFields {
            work_dir: Some("/home/dana"),
            ..job()
        };
        assert_eq!(
            expand(output_pattern(None, false), &f),
            "/home/dana/slurm-128.out"
        );
        assert_eq!(expand("/scratch/%j.out", &f), "/scratch/128.out");
        assert_eq!(output_pattern(Some("o-%j"), true), "o-%j");
        assert_eq!(output_pattern(None, true), DEFAULT_ARRAY_OUTPUT);
    }
}

//! Reading a batch script the way `sbatch` does (Slurm 22.05's `_opt_batch_script`): the
//! checks on the whole text, and the directive tokens of the `#SBATCH` (and legacy `#SLURM`)
//! lines up to the first command.
//!
//! One pass over the text, so reading is linear in its size. Every problem a script has is
//! collected ([`ScriptRead::problems`]) rather than stopping at the first, except for the
//! whole-file refusals ([`ScriptError`]) that make the rest meaningless.
//!
//! The directive tokeniser is hand-written on purpose: Slurm's rules (a `#` starts a comment
//! even inside a value, `\` escapes the next character even inside quotes, quotes are stripped
//! but never span lines, no variable expansion) are not those of any shell-words crate, and a
//! script must split into exactly the tokens real `sbatch` sees.

use std::fmt;

/// The longest script a BatchJob holds, in characters: `spec.script`'s `maxLength`. The
/// whole object must also fit etcd's 1.5 MiB request limit.
pub const SCRIPT_MAX_CHARS: usize = 1_048_576;

/// The directive prefix, case-sensitive, at column 0.
pub const MAGIC: &str = "#SBATCH";
/// Slurm's older prefix: still read as a directive by Slurm 22.05 and later, with a warning.
pub const LEGACY_MAGIC: &str = "#SLURM";

/// One directive token and the script line it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The token after quote and escape removal.
    pub text: String,
    /// 1-based line number in the script.
    pub line: usize,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (line {})", self.text, self.line)
    }
}

/// A problem on one line of a script: the rest of the script is still read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineProblem {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong and what is allowed.
    pub message: String,
    /// What to do instead, if there is a suggestion.
    pub hint: Option<String>,
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A script's directives as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptRead {
    /// Every directive token before the first command, in order.
    pub directives: Vec<Token>,
    /// Notes for the user (`#SLURM` lines), each with its line.
    pub warnings: Vec<LineProblem>,
    /// Lines that cannot be read (unmatched quote, heterogeneous-job separator).
    pub problems: Vec<LineProblem>,
}

/// Why a script cannot be read at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// Zero bytes.
    #[error("batch script is empty")]
    Empty,
    /// Only spaces and newlines.
    #[error("batch script contains only whitespace")]
    OnlyWhitespace,
    /// Larger than a BatchJob holds.
    #[error(
        "batch script is {chars} characters long; a BatchJob's script holds at most \
         {SCRIPT_MAX_CHARS} characters (1 MiB, spec.script's maxLength): keep large data in \
         files the job reads"
    )]
    TooLarge {
        /// The script's length in characters.
        chars: usize,
    },
    /// A NUL character, which Slurm's controller refuses in scripts.
    #[error(
        "line {line}: batch script contains a NUL character ('\\0'), which Slurm does not allow \
         in scripts: is this a binary file?"
    )]
    Nul {
        /// The line of the first NUL.
        line: usize,
    },
    /// The first line is not `#!interpreter`.
    #[error(
        "this does not look like a batch script: the first line must start with #! followed by \
         the path to an interpreter (for instance #!/bin/bash)"
    )]
    NoShebang,
    /// Windows line breaks.
    #[error(
        "line {line}: batch script contains DOS line breaks (\\r\\n) instead of the expected UNIX \
         line breaks (\\n); convert it with dos2unix"
    )]
    DosLineBreaks {
        /// First line that ends in `\r\n`.
        line: usize,
    },
}

impl ScriptError {
    /// The line the error is about, if it is one line's.
    pub fn line(&self) -> Option<usize> {
        match self {
            ScriptError::Nul { line } | ScriptError::DosLineBreaks { line } => Some(*line),
            _ => None,
        }
    }
}

/// The 1-based line of byte offset `pos` in `text`.
fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Check a script and collect its directives (Slurm's `_opt_batch_script`).
pub fn read(text: &str) -> Result<ScriptRead, ScriptError> {
    if text.is_empty() {
        return Err(ScriptError::Empty);
    }
    // Bytes bound characters from above: count only when it may matter.
    if text.len() > SCRIPT_MAX_CHARS {
        let chars = text.chars().count();
        if chars > SCRIPT_MAX_CHARS {
            return Err(ScriptError::TooLarge { chars });
        }
    }
    if let Some(pos) = text.find('\0') {
        return Err(ScriptError::Nul {
            line: line_of(text, pos),
        });
    }
    if text.chars().all(char::is_whitespace) {
        return Err(ScriptError::OnlyWhitespace);
    }
    if !text.starts_with("#!") {
        return Err(ScriptError::NoShebang);
    }
    if let Some(pos) = text.find("\r\n") {
        return Err(ScriptError::DosLineBreaks {
            line: line_of(text, pos),
        });
    }

    let mut read = ScriptRead::default();
    for (idx, line) in text.split('\n').enumerate() {
        let lineno = idx + 1;
        let rest = if let Some(rest) = line.strip_prefix(MAGIC) {
            rest
        } else if let Some(rest) = line.strip_prefix(LEGACY_MAGIC) {
            if read.warnings.is_empty() {
                // Slurm says it once per script, too.
                read.warnings.push(LineProblem {
                    line: lineno,
                    message: format!(
                        "{LEGACY_MAGIC} lines are read as {MAGIC} directives (as Slurm does); \
                         change them to {MAGIC}"
                    ),
                    hint: None,
                });
            }
            rest
        } else {
            match line.chars().find(|c| !c.is_whitespace()) {
                // A blank line or a comment (including ` #SBATCH`, `##SBATCH`, `#sbatch`).
                None | Some('#') => continue,
                // The first command: Slurm reads no further.
                Some(_) => break,
            }
        };
        let tokens = match tokenize_line(rest) {
            Ok(t) => t,
            Err(quote) => {
                read.problems.push(LineProblem {
                    line: lineno,
                    message: format!("unmatched `{quote}` in [{line}]"),
                    hint: Some("quotes do not span lines: close it on the same line".into()),
                });
                continue;
            }
        };
        for text in tokens {
            if text.eq_ignore_ascii_case("hetjob") || text.eq_ignore_ascii_case("packjob") {
                read.problems.push(LineProblem {
                    line: lineno,
                    message: format!(
                        "heterogeneous jobs (#SBATCH {text}) are not supported by Muster"
                    ),
                    hint: Some(
                        "submit each component as its own job and link them with --dependency"
                            .into(),
                    ),
                });
                continue;
            }
            read.directives.push(Token { text, line: lineno });
        }
    }
    Ok(read)
}

/// Split what follows `#SBATCH` on one line into tokens, as Slurm's `_get_argument` does.
///
/// Whitespace separates tokens unless quoted; `'` and `"` quote and are removed; `\` makes the
/// next character literal (also inside quotes) except that it cannot join a token across
/// whitespace; an unquoted, unescaped `#` ends the line. `Err(quote)` for an unmatched quote.
pub fn tokenize_line(line: &str) -> Result<Vec<String>, char> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(tokens);
        }
        let mut token = String::new();
        let mut quote: Option<char> = None;
        let mut escaped = false;
        let mut comment = false;
        while let Some(&c) = chars.peek() {
            if quote.is_none() && c.is_whitespace() {
                break;
            }
            chars.next();
            if escaped {
                escaped = false;
                token.push(c);
            } else if c == '\\' {
                escaped = true;
            } else if let Some(q) = quote {
                if c == q {
                    quote = None;
                } else {
                    token.push(c);
                }
            } else if c == '"' || c == '\'' {
                quote = Some(c);
            } else if c == '#' {
                comment = true;
                break;
            } else {
                token.push(c);
            }
        }
        if let Some(q) = quote {
            return Err(q);
        }
        // Slurm's `_get_argument` returns "no more arguments" for an empty token (`""`, or a
        // `#` right at the start), which ends the line.
        if token.is_empty() {
            return Ok(tokens);
        }
        tokens.push(token);
        if comment {
            return Ok(tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        tokenize_line(s).unwrap()
    }

    #[test]
    fn splits_like_slurm() {
        assert_eq!(toks(" --nodes=2 -J x"), ["--nodes=2", "-J", "x"]);
        assert_eq!(toks("--time=5"), ["--time=5"]);
        assert_eq!(toks("\t-c 4"), ["-c", "4"]);
        assert_eq!(toks(" --job-name=run#1"), ["--job-name=run"]);
        assert_eq!(toks(" -N 3 # a comment"), ["-N", "3"]);
        assert_eq!(
            toks(" --comment=\"hello world\" -o 'a b'"),
            ["--comment=hello world", "-o", "a b"]
        );
        assert_eq!(toks(" -J\"a b\"c"), ["-Ja bc"]);
        assert_eq!(
            toks(" --job-name='a\"b' --comment \"x#y\""),
            ["--job-name=a\"b", "--comment", "x#y"]
        );
        assert_eq!(toks(" --job-name=x\\y"), ["--job-name=xy"]);
        assert_eq!(toks(" --job-name=x\\ y"), ["--job-name=x", "y"]);
        assert_eq!(toks(" --job-name=a\\#b"), ["--job-name=a#b"]);
        assert_eq!(toks(" #all comment"), Vec::<String>::new());
        assert_eq!(toks(""), Vec::<String>::new());
        assert_eq!(toks(" --x=$HOME"), ["--x=$HOME"]);
    }

    #[test]
    fn unmatched_quote_is_an_error() {
        assert_eq!(tokenize_line(" --job-name=\"unterminated"), Err('"'));
        assert_eq!(tokenize_line(" 'a"), Err('\''));
    }

    #[test]
    fn reads_directives_until_the_first_command() {
        let s = read(
            "#!/bin/bash\n#SBATCH -N 2\n\n# comment\n   \n ##SBATCH -n 9\n#SBATCH--time=5\necho hi\n#SBATCH -n 4\n",
        )
        .unwrap();
        let got: Vec<_> = s
            .directives
            .iter()
            .map(|t| (t.text.as_str(), t.line))
            .collect();
        assert_eq!(got, [("-N", 2), ("2", 2), ("--time=5", 7)]);
    }

    #[test]
    fn comment_lookalikes_are_not_directives() {
        let s = read(
            "#!/bin/sh\n##SBATCH -n 7\n# SBATCH -n 8\n #SBATCH -n 9\n#sbatch -n 10\n#slurm -n 3\n\t#SBATCH -n 11\ntrue\n",
        )
        .unwrap();
        assert!(s.directives.is_empty());
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn indented_command_stops_reading() {
        let s = read("#!/bin/sh\n  echo\n#SBATCH -n 3\n").unwrap();
        assert!(s.directives.is_empty());
    }

    #[test]
    fn refuses_what_sbatch_refuses() {
        assert_eq!(read(""), Err(ScriptError::Empty));
        assert_eq!(read(" \n\n"), Err(ScriptError::OnlyWhitespace));
        assert_eq!(read("#SBATCH -N 2\necho\n"), Err(ScriptError::NoShebang));
        assert_eq!(
            read("#!/bin/bash\n#SBATCH -N 2\r\necho\r\n"),
            Err(ScriptError::DosLineBreaks { line: 2 })
        );
        assert_eq!(
            read("#!/bin/bash\necho a\n\0b\n"),
            Err(ScriptError::Nul { line: 3 })
        );
    }

    #[test]
    fn every_bad_line_is_reported() {
        let s = read(
            "#!/bin/bash\n#SBATCH --job-name=\"x\n#SBATCH -N 1\n#SBATCH hetjob\n#SBATCH -J 'y\n#SBATCH -n 2\necho\n",
        )
        .unwrap();
        let lines: Vec<usize> = s.problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, [2, 4, 5]);
        assert!(s.problems[0].message.contains("unmatched `\"`"));
        assert!(s.problems[1].message.contains("heterogeneous"));
        let got: Vec<&str> = s.directives.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(got, ["-N", "1", "-n", "2"]);
    }

    #[test]
    fn too_large_names_the_limit() {
        let mut text = String::from("#!/bin/bash\n");
        text.push_str(&"#".repeat(SCRIPT_MAX_CHARS));
        let e = read(&text).unwrap_err();
        assert_eq!(
            e,
            ScriptError::TooLarge {
                chars: SCRIPT_MAX_CHARS + 12
            }
        );
        assert!(e.to_string().contains("at most 1048576 characters"), "{e}");
        // Multi-byte characters count once, as the API server counts them.
        let mut text = String::from("#!/bin/bash\n# ");
        text.push_str(&"é".repeat(SCRIPT_MAX_CHARS - 20));
        assert!(read(&text).is_ok());
    }

    #[test]
    fn slurm_prefix_is_a_directive_with_one_warning() {
        let s = read("#!/bin/bash\n#SLURM -N 2\n#SBATCH -J x\n#SLURM --time=5\necho\n").unwrap();
        let got: Vec<_> = s
            .directives
            .iter()
            .map(|t| (t.text.as_str(), t.line))
            .collect();
        assert_eq!(
            got,
            [("-N", 2), ("2", 2), ("-J", 3), ("x", 3), ("--time=5", 4)]
        );
        assert_eq!(s.warnings.len(), 1);
        assert_eq!(s.warnings[0].line, 2);
    }
}

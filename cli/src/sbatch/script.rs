//! Reading a batch script the way `sbatch` does: the `#!` and line-break checks, and the
//! `#SBATCH` directives up to the first command.
//!
//! The directive tokeniser is hand-written on purpose: Slurm's rules (a `#` starts a comment
//! even inside a value, `\` escapes the next character even inside quotes, quotes are
//! stripped but never span lines, no variable expansion) are not those of any shell-words
//! crate, and a script must split into exactly the tokens real `sbatch` sees. The tokens are
//! then parsed by the same clap grammar as the command line.

use std::fmt;

/// One `#SBATCH` token and the script line it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The token after quote and escape removal.
    pub text: String,
    /// 1-based line number in the script.
    pub line: usize,
}

/// A batch script read for submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// The script text, verbatim (it becomes `spec.script`).
    pub text: String,
    /// Every `#SBATCH` token before the first command, in order.
    pub directives: Vec<Token>,
    /// Things real Slurm would accept or ignore that the user may not expect.
    pub warnings: Vec<String>,
}

/// Why a script cannot be submitted at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// Zero bytes.
    #[error("batch script is empty")]
    Empty,
    /// Only spaces and newlines.
    #[error("batch script contains only whitespace")]
    OnlyWhitespace,
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
    /// A quote opened on a directive line is not closed on that line.
    #[error("line {line}: unmatched `{quote}` in [{text}]")]
    UnmatchedQuote {
        /// 1-based line number.
        line: usize,
        /// The quote character.
        quote: char,
        /// The whole line.
        text: String,
    },
    /// Slurm heterogeneous-job separators, which Muster does not run.
    #[error(
        "line {line}: heterogeneous jobs (#SBATCH {word}) are not supported by Muster; submit \
         each component as its own job and link them with --dependency"
    )]
    HetJob {
        /// 1-based line number.
        line: usize,
        /// `hetjob` or `packjob`.
        word: String,
    },
}

/// The directive prefix, case-sensitive, at column 0.
const MAGIC: &str = "#SBATCH";

impl Script {
    /// Check a script and collect its directives (Slurm's `_opt_batch_script`).
    pub fn parse(text: &str) -> Result<Script, ScriptError> {
        if text.is_empty() {
            return Err(ScriptError::Empty);
        }
        if text.chars().all(char::is_whitespace) {
            return Err(ScriptError::OnlyWhitespace);
        }
        if !text.starts_with("#!") {
            return Err(ScriptError::NoShebang);
        }
        if let Some(pos) = text.find("\r\n") {
            let line = text[..pos].matches('\n').count() + 1;
            return Err(ScriptError::DosLineBreaks { line });
        }

        let mut directives = Vec::new();
        let mut warnings = Vec::new();
        for (idx, line) in text.split('\n').enumerate() {
            let lineno = idx + 1;
            let Some(rest) = line.strip_prefix(MAGIC) else {
                let first = line.chars().find(|c| !c.is_whitespace());
                match first {
                    // A blank line or a comment (including ` #SBATCH`, `##SBATCH`, `#sbatch`).
                    None | Some('#') => {
                        if line.starts_with("#SLURM") {
                            warnings.push(format!(
                                "line {lineno}: #SLURM lines are plain comments for Muster (as in \
                                 current Slurm); write #SBATCH to make it a directive"
                            ));
                        }
                        continue;
                    }
                    // The first command: Slurm reads no further.
                    Some(_) => break,
                }
            };
            let tokens = tokenize_line(rest).map_err(|quote| ScriptError::UnmatchedQuote {
                line: lineno,
                quote,
                text: line.to_string(),
            })?;
            for text in tokens {
                if text.eq_ignore_ascii_case("hetjob") || text.eq_ignore_ascii_case("packjob") {
                    return Err(ScriptError::HetJob {
                        line: lineno,
                        word: text,
                    });
                }
                directives.push(Token { text, line: lineno });
            }
        }
        Ok(Script {
            text: text.to_string(),
            directives,
            warnings,
        })
    }
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

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (line {})", self.text, self.line)
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
        let s = Script::parse(
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
        let s = Script::parse(
            "#!/bin/sh\n##SBATCH -n 7\n# SBATCH -n 8\n #SBATCH -n 9\n#sbatch -n 10\n\t#SBATCH -n 11\ntrue\n",
        )
        .unwrap();
        assert!(s.directives.is_empty());
    }

    #[test]
    fn indented_command_stops_reading() {
        let s = Script::parse("#!/bin/sh\n  echo\n#SBATCH -n 3\n").unwrap();
        assert!(s.directives.is_empty());
    }

    #[test]
    fn refuses_what_sbatch_refuses() {
        assert_eq!(Script::parse(""), Err(ScriptError::Empty));
        assert_eq!(Script::parse(" \n\n"), Err(ScriptError::OnlyWhitespace));
        assert_eq!(
            Script::parse("#SBATCH -N 2\necho\n"),
            Err(ScriptError::NoShebang)
        );
        assert_eq!(
            Script::parse("#!/bin/bash\n#SBATCH -N 2\r\necho\r\n"),
            Err(ScriptError::DosLineBreaks { line: 2 })
        );
        assert!(matches!(
            Script::parse("#!/bin/bash\n#SBATCH --job-name=\"x\necho\n"),
            Err(ScriptError::UnmatchedQuote {
                line: 2,
                quote: '"',
                ..
            })
        ));
        assert!(matches!(
            Script::parse("#!/bin/bash\n#SBATCH -N 1\n#SBATCH hetjob\n#SBATCH -N 2\n"),
            Err(ScriptError::HetJob { line: 3, .. })
        ));
    }

    #[test]
    fn slurm_prefix_warns() {
        let s = Script::parse("#!/bin/bash\n#SLURM -N 2\necho\n").unwrap();
        assert!(s.directives.is_empty());
        assert_eq!(s.warnings.len(), 1);
        assert!(s.warnings[0].contains("line 2"));
    }
}

//! YAML for manifests that must mean the same to every reader, YAML 1.1 ones included.
//!
//! Hand-written because no maintained crate emits YAML safe for YAML 1.1 readers: serde_yaml
//! (0.9) quotes only what a YAML 1.2 reader would misread, so `time: 00:10:00` and
//! `time: 10:00` come out plain — and a YAML 1.1 reader (PyYAML; kubectl's sigs.k8s.io/yaml in
//! places) turns the second into the sexagesimal integer 600, `yes`/`on` into booleans and
//! `1_000` into 1000. Here a string is written plain only when it starts with a letter or `/`,
//! holds only characters that cannot start or end a YAML indicator, and is none of the YAML
//! 1.1 boolean or null words; everything else is double-quoted (or a literal block for
//! multi-line text such as the batch script). Block style, two-space indentation, sequences at
//! their key's indentation — the layout `kubectl get -o yaml` prints.

use serde::Serialize;
use serde_json::{Map, Value};

/// Serialize `value` (through its JSON form) as a YAML document.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    let v = serde_json::to_value(value)?;
    let mut out = String::new();
    match &v {
        Value::Object(m) if !m.is_empty() => write_map(&mut out, m, 0, false),
        Value::Array(a) if !a.is_empty() => write_seq(&mut out, a, 0),
        other => write_scalar(&mut out, other, 0),
    }
    Ok(out)
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// `first_inline`: the first key goes right after a sequence's `- ` (already written).
fn write_map(out: &mut String, m: &Map<String, Value>, indent: usize, first_inline: bool) {
    for (i, (k, v)) in m.iter().enumerate() {
        if !(first_inline && i == 0) {
            pad(out, indent);
        }
        out.push_str(&scalar_string(k));
        out.push(':');
        match v {
            Value::Object(inner) if !inner.is_empty() => {
                out.push('\n');
                write_map(out, inner, indent + 2, false);
            }
            Value::Array(a) if !a.is_empty() => {
                out.push('\n');
                write_seq(out, a, indent);
            }
            _ => {
                out.push(' ');
                write_scalar(out, v, indent + 2);
            }
        }
    }
}

fn write_seq(out: &mut String, a: &[Value], indent: usize) {
    for item in a {
        pad(out, indent);
        out.push('-');
        match item {
            Value::Object(m) if !m.is_empty() => {
                out.push(' ');
                write_map(out, m, indent + 2, true);
            }
            Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                write_seq(out, inner, indent + 2);
            }
            _ => {
                out.push(' ');
                write_scalar(out, item, indent + 2);
            }
        }
    }
}

/// A scalar (or empty collection) and its line end; `indent` is where a literal block's
/// lines go.
fn write_scalar(out: &mut String, v: &Value, indent: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
        Value::String(s) if s.contains('\n') && literal_ok(s) => {
            write_literal(out, s, indent);
            return;
        }
        Value::String(s) => out.push_str(&scalar_string(s)),
    }
    out.push('\n');
}

/// A literal block (`|`) keeps every character of multi-line text; the chomping indicator
/// keeps its trailing line breaks exactly.
fn write_literal(out: &mut String, s: &str, indent: usize) {
    let body = s.trim_end_matches('\n');
    let trailing = s.len() - body.len();
    out.push_str(match trailing {
        0 => "|-",
        1 => "|",
        _ => "|+",
    });
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            pad(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing {
        out.push('\n');
    }
}

/// Characters YAML allows unescaped (its "printable" set), minus the ones a YAML 1.1 reader
/// takes as line breaks (NEL, LS, PS) and the byte order mark.
fn printable(c: char) -> bool {
    c == '\t'
        || (c >= ' '
            && c != '\u{7f}'
            && !('\u{80}'..='\u{9f}').contains(&c)
            && c != '\u{2028}'
            && c != '\u{2029}'
            && c != '\u{feff}')
}

/// Multi-line text fits a literal block unless it has characters that need escapes, trailing
/// blanks a reader could fold, or a first line starting with a blank (which would need an
/// explicit indentation indicator).
fn literal_ok(s: &str) -> bool {
    let body = s.trim_end_matches('\n');
    !body.is_empty()
        && s.chars().all(|c| c == '\n' || printable(c))
        && body
            .split('\n')
            .find(|l| !l.is_empty())
            .is_some_and(|l| !l.starts_with([' ', '\t']))
}

/// Words a YAML 1.1 reader resolves to a boolean or null (compared case-insensitively, a
/// superset of the spellings the spec lists).
const RESERVED_WORDS: &[&str] = &["y", "n", "yes", "no", "true", "false", "on", "off", "null"];

/// Whether `s` may be written as a plain scalar and read back as this string by a YAML 1.1
/// or 1.2 reader.
pub fn plain_ok(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !(first.is_ascii_alphabetic() || first == '/') {
        return false;
    }
    if RESERVED_WORDS.iter().any(|w| w.eq_ignore_ascii_case(s)) {
        return false;
    }
    let bytes = s.as_bytes();
    if bytes.last().is_some_and(|&b| b == b' ' || b == b':') {
        return false;
    }
    bytes.iter().enumerate().all(|(i, &b)| match b {
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => true,
        b'.' | b'_' | b'/' | b'-' | b'+' | b'=' | b'@' | b'~' | b'%' | b'(' | b')' => true,
        b':' => bytes.get(i + 1) != Some(&b' '),
        b' ' => bytes.get(i + 1).is_some_and(|&n| n != b'#' && n != b' '),
        _ => false,
    })
}

/// A string as a plain or double-quoted scalar.
fn scalar_string(s: &str) -> String {
    if plain_ok(s) {
        return s.to_string();
    }
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            '\r' => q.push_str("\\r"),
            c if printable(c) => q.push(c),
            c if (c as u32) <= 0xffff => q.push_str(&format!("\\u{:04x}", c as u32)),
            c => q.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ambiguous_strings_are_quoted() {
        for s in [
            "00:10:00",
            "10:00",
            "1:30:00",
            "4",
            "0755",
            "1_000",
            "1e3",
            ".inf",
            "yes",
            "On",
            "N",
            "null",
            "~",
            "",
            "2026-01-01",
            "-1",
            "+1",
            "gpu: 4",
            "a #b",
            " lead",
            "trail ",
            "*ref",
            "&anchor",
            "!tag",
            "@x",
            "`x",
            "{}",
            "[a]",
            "'q'",
            "\"q\"",
            "a,b",
            "x:",
        ] {
            assert!(!plain_ok(s), "{s:?} must be quoted");
            let y = to_string(&json!({ "v": s })).unwrap();
            assert!(y.starts_with("v: \""), "{s:?}: {y}");
        }
        for s in [
            "gpu",
            "busybox:1.36",
            "muster.dev/user",
            "/bin/bash",
            "train-%j.out",
            "afterok:12",
            "yesterday",
            "a b",
            "UNLIMITED",
        ] {
            assert!(plain_ok(s), "{s:?} can be plain");
        }
    }

    #[test]
    fn layout_is_kubectls() {
        let v = json!({
            "apiVersion": "muster.dev/v1alpha1",
            "metadata": {"annotations": {"muster.dev/user": "alice"}, "labels": {}},
            "spec": {
                "time": "00:10:00",
                "nodes": 2,
                "exclusive": true,
                "script": "#!/bin/bash\n#SBATCH -N 2\n\nsrun hostname\n",
                "template": {"spec": {"containers": [
                    {"name": "task", "args": ["a", "10"]}, {"name": "side"}]}},
                "list": [[1, 2], []],
            },
        });
        let y = to_string(&v).unwrap();
        let back: Value = serde_yaml::from_str(&y).unwrap();
        assert_eq!(back, v, "{y}");
        assert!(y.contains("  time: \"00:10:00\"\n"), "{y}");
        assert!(
            y.contains("  script: |\n    #!/bin/bash\n    #SBATCH -N 2\n\n    srun hostname\n"),
            "{y}"
        );
        assert!(
            y.contains("      containers:\n      - args:\n        - a\n        - \"10\"\n        name: task\n      - name: side\n"),
            "{y}"
        );
        assert!(y.contains("  labels: {}\n"), "{y}");
    }

    #[test]
    fn text_round_trips_exactly() {
        for s in [
            "no newline at end\nsecond",
            "one\n",
            "two\n\n",
            "\n\nleading blank lines\n",
            "  indented first line\n",
            "crlf\r\nline\r\n",
            "tab\tin\tline\n",
            "nel\u{85}here\n",
            "bell\u{7}\n",
            "unicode ü ✓ 🙂\n",
            "quote \" and \\ backslash",
        ] {
            let v = json!({"s": s, "in": [s]});
            let y = to_string(&v).unwrap();
            let back: Value = serde_yaml::from_str(&y).unwrap();
            assert_eq!(back, v, "{s:?}:\n{y}");
        }
    }
}

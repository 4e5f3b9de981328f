//! Job id lists as Slurm's commands take them (`scancel`, `squeue -j`, `scontrol hold`):
//! ids joined by commas (`12,13_4`) and an array's tasks as `ID_[1-3,5]` — the commas inside
//! the brackets belong to it — expanded to single ids (`13_1`, `13_2`, …).

use muster_crds::slurm::ArraySpec;

/// The single ids (`12`, `13_4`) of `args`, each an id list (a shell word, or a piece clap
/// split at a comma: the pieces are joined again, so a bracket's commas survive). `Err`: the
/// malformed item, for "Invalid job id specified".
pub fn expand(args: &[String]) -> Result<Vec<String>, String> {
    let joined = args.join(",");
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in joined.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' | ' ' | '\t' | '\n' if depth == 0 => {
                items.push(&joined[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&joined[start..]);
    let mut out = Vec::new();
    for item in items.into_iter().filter(|s| !s.is_empty()) {
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        match item.split_once('_') {
            None if digits(item) => out.push(item.to_string()),
            Some((a, t)) if digits(a) && digits(t) => out.push(item.to_string()),
            Some((a, t)) if digits(a) => {
                let spec = t
                    .strip_prefix('[')
                    .and_then(|t| t.strip_suffix(']'))
                    .filter(|s| !s.contains('%'))
                    .and_then(|s| ArraySpec::parse(s).ok())
                    .ok_or_else(|| item.to_string())?;
                out.extend(spec.indices.iter().map(|i| format!("{a}_{i}")));
            }
            _ => return Err(item.to_string()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::expand;

    fn e(args: &[&str]) -> Result<Vec<String>, String> {
        expand(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn ranges_in_brackets_expand_and_their_commas_survive_splitting() {
        assert_eq!(e(&["12", "13_4"]).unwrap(), ["12", "13_4"]);
        assert_eq!(e(&["9_[1-3]"]).unwrap(), ["9_1", "9_2", "9_3"]);
        // clap split "9_[1-2,5],10" at its commas.
        assert_eq!(
            e(&["9_[1-2", "5]", "10"]).unwrap(),
            ["9_1", "9_2", "9_5", "10"]
        );
        assert_eq!(e(&["9_[0-6:3] 11"]).unwrap(), ["9_0", "9_3", "9_6", "11"]);
        for bad in ["9_[1-3", "9_[]", "x", "9_[1-3%2]", "9_a", "_3"] {
            assert_eq!(e(&[bad]), Err(bad.to_string()), "{bad}");
        }
    }
}

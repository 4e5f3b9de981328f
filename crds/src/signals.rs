//! Signals sent to a running job (`scancel --signal`): the requests, as the BatchJob's
//! annotation [`ANNOTATION`] carries them, one per line: `ID SIGNAL TARGET`, e.g.
//! `2026-12-02T01:59:58.123456789Z USR1 batch`.
//!
//! The way there is Kubernetes' own: `scancel -s` (or `kubectl annotate`) writes the
//! BatchJob's annotation, the operator copies it onto the job's pods, the kubelet refreshes
//! the pods' downward-API file ([`crate::step::SIGNALS_FILE`]) and the step runtime on each
//! node delivers every request it has not seen yet. A request is an event, so each has an id
//! (the time it was sent) and the last [`MAX_KEPT`] are kept, so two signals sent in quick
//! succession both arrive. One reader for the CLI, the admission webhook, the operator and
//! the step runtime.

use std::fmt;

use crate::slurm::signal::signal_number;

/// The BatchJob (and node pod) annotation holding the signal requests.
pub const ANNOTATION: &str = "muster.dev/signals";
/// How many requests the annotation keeps (the oldest go first).
pub const MAX_KEPT: usize = 16;
/// The longest id.
const MAX_ID: usize = 64;

/// Whom a signal goes to, as `scancel` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Every step's tasks, not the batch shell (scancel's default).
    Steps,
    /// The batch shell alone, not its children (`-b/--batch`).
    Batch,
    /// The batch shell with its children, and every step (`-f/--full`).
    Full,
    /// One step's tasks (`scancel [-s SIGNAL] ID.STEP`).
    Step(u32),
}

impl fmt::Display for Target {
    /// The word in the annotation: `steps`, `batch`, `full`, `step:N`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Steps => f.write_str("steps"),
            Target::Batch => f.write_str("batch"),
            Target::Full => f.write_str("full"),
            Target::Step(n) => write!(f, "step:{n}"),
        }
    }
}

impl Target {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "steps" => Some(Target::Steps),
            "batch" => Some(Target::Batch),
            "full" => Some(Target::Full),
            _ => s
                .strip_prefix("step:")
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse().ok())
                .map(Target::Step),
        }
    }
}

/// One signal request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SignalRequest {
    /// Unique among the annotation's requests: the time it was sent (RFC 3339).
    pub id: String,
    /// The signal number (1–64).
    pub number: i32,
    /// The signal's name as written (`USR1`, or the number).
    pub name: String,
    /// Whom it goes to.
    pub target: Target,
}

impl fmt::Display for SignalRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.id, self.name, self.target)
    }
}

/// A malformed annotation: which line, and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct SignalsError {
    /// 1-based line.
    pub line: usize,
    /// What is wrong and what is allowed.
    pub message: String,
}

/// Reads the annotation's requests (blank lines skipped).
pub fn parse(text: &str) -> Result<Vec<SignalRequest>, SignalsError> {
    let mut out: Vec<SignalRequest> = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        let err = |m: String| SignalsError { line, message: m };
        let words: Vec<&str> = l.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let [id, sig, target] = words[..] else {
            return Err(err(format!(
                "{l:?}: expected \"ID SIGNAL TARGET\" (e.g. \"2026-12-02T10:00:00Z USR1 batch\")"
            )));
        };
        if id.len() > MAX_ID {
            return Err(err(format!("id {id:?} is longer than {MAX_ID} characters")));
        }
        if out.iter().any(|r| r.id == id) {
            return Err(err(format!("id {id:?} appears twice")));
        }
        let (number, _) = signal_number(sig).ok_or_else(|| {
            err(format!(
                "signal {sig:?}: expected a name (USR1, SIGTERM, ...) or a number 1-64"
            ))
        })?;
        let target = Target::parse(target).ok_or_else(|| {
            err(format!(
                "target {target:?}: expected steps, batch, full or step:N"
            ))
        })?;
        out.push(SignalRequest {
            id: id.to_string(),
            number,
            name: sig.to_string(),
            target,
        });
    }
    if out.len() > MAX_KEPT {
        return Err(SignalsError {
            line: text.lines().count(),
            message: format!("{} requests; at most {MAX_KEPT} are kept", out.len()),
        });
    }
    Ok(out)
}

/// The annotation with one more request, `signal` (a name or number) to `target`, sent at
/// `now`: its id is `now` (a nanosecond later while that is taken), and the oldest requests
/// go so that at most [`MAX_KEPT`] remain. `existing` is the annotation as read; a malformed
/// one is replaced (its requests cannot be delivered anyway).
pub fn with_request(
    existing: Option<&str>,
    signal: &str,
    target: Target,
    now: jiff::Timestamp,
) -> Result<String, String> {
    let (number, name) =
        signal_number(signal).ok_or_else(|| format!("Unknown job signal: {signal}"))?;
    let mut reqs = existing.and_then(|t| parse(t).ok()).unwrap_or_default();
    let mut at = now;
    let id = loop {
        let id = at.to_string();
        if !reqs.iter().any(|r| r.id == id) {
            break id;
        }
        at = at
            .checked_add(jiff::SignedDuration::from_nanos(1))
            .map_err(|e| e.to_string())?;
    };
    reqs.push(SignalRequest {
        id,
        number,
        name,
        target,
    });
    let skip = reqs.len().saturating_sub(MAX_KEPT);
    Ok(render(&reqs[skip..]))
}

/// The annotation's text for `reqs`.
pub fn render(reqs: &[SignalRequest]) -> String {
    reqs.iter().map(|r| format!("{r}\n")).collect::<String>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn requests_round_trip_and_keep_their_order() {
        let a = with_request(None, "usr1", Target::Batch, ts("2026-12-02T10:00:00Z")).unwrap();
        assert_eq!(a, "2026-12-02T10:00:00Z USR1 batch\n");
        // The same instant twice: the second gets the next nanosecond.
        let b = with_request(Some(&a), "12", Target::Steps, ts("2026-12-02T10:00:00Z")).unwrap();
        assert_eq!(
            b,
            "2026-12-02T10:00:00Z USR1 batch\n2026-12-02T10:00:00.000000001Z USR2 steps\n"
        );
        let r = parse(&b).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[1].number, r[1].target), (12, Target::Steps));
        assert_eq!(render(&r), b);
    }

    #[test]
    fn only_the_last_requests_are_kept() {
        let mut t: Option<String> = None;
        let start = ts("2026-12-02T10:00:00Z");
        for i in 0..(MAX_KEPT as i64 + 3) {
            let now = start
                .checked_add(jiff::SignedDuration::from_secs(i))
                .unwrap();
            t = Some(with_request(t.as_deref(), "TERM", Target::Full, now).unwrap());
        }
        let r = parse(t.as_deref().unwrap()).unwrap();
        assert_eq!(r.len(), MAX_KEPT);
        assert_eq!(r[0].id, "2026-12-02T10:00:03Z");
        assert!(r.iter().all(|r| r.number == 15 && r.target == Target::Full));
    }

    #[test]
    fn malformed_lines_are_named() {
        let e = parse("x USR1 batch\ny FOO steps\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("signal \"FOO\""), "{e}");
        let e = parse("x USR1 everyone").unwrap_err();
        assert!(
            e.to_string()
                .contains("expected steps, batch, full or step:N"),
            "{e}"
        );
        let e = parse("x USR1").unwrap_err();
        assert!(
            e.to_string().contains("expected \"ID SIGNAL TARGET\""),
            "{e}"
        );
        let e = parse("x USR1 batch\nx USR2 batch").unwrap_err();
        assert!(e.to_string().contains("appears twice"), "{e}");
        let r = parse("x KILL step:3\n").unwrap();
        assert_eq!((r[0].number, r[0].target), (9, Target::Step(3)));
        assert_eq!(render(&r), "x KILL step:3\n");
        assert!(parse("x KILL step:").is_err());
        assert!(parse("x KILL step:-1").is_err());
        assert_eq!(
            with_request(None, "FOO", Target::Steps, ts("2026-12-02T10:00:00Z")).unwrap_err(),
            "Unknown job signal: FOO"
        );
        // A malformed annotation is replaced, not kept.
        let t = with_request(
            Some("garbage"),
            "1",
            Target::Steps,
            ts("2026-12-02T10:00:00Z"),
        )
        .unwrap();
        assert_eq!(t, "2026-12-02T10:00:00Z HUP steps\n");
        assert_eq!(parse("\n\n").unwrap(), vec![]);
    }
}

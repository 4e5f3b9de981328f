//! `--signal`'s warning before the time limit, as the operator hands it to every node
//! ([`muster_crds::step::ENV_SIGNAL`] `[B:]NUMBER@SECONDS`, and
//! [`ENV_END_TIME`](muster_crds::step::ENV_END_TIME), when the time limit ends).

use muster_crds::step as contract;

/// When to send which signal to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Warning {
    /// Seconds since the epoch.
    pub at: i64,
    /// Seconds before the limit's end (`at` is the end as first known minus these).
    pub lead: i64,
    /// The signal number.
    pub signal: i32,
    /// The batch shell only (`B:`), else the steps' tasks.
    pub batch_only: bool,
}

/// When the warning is due if the limit now ends at `end` (the pod's end-time file, which
/// the operator keeps current as the limit changes), else as first known.
pub fn due(w: &Warning, end: Option<i64>) -> i64 {
    end.map_or(w.at, |e| e - w.lead)
}

/// The limit's end as the pod's end-time file says (`None`: no file, or not a number).
pub fn end_from_file(path: &std::path::Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The warning the environment `get` asks for; `None` without `--signal` or a time limit.
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Option<Warning> {
    let spec = get(contract::ENV_SIGNAL)?;
    let end: i64 = get(contract::ENV_END_TIME)?.parse().ok()?;
    let w = muster_crds::slurm::WarnSignal::parse(&spec).ok()?;
    Some(Warning {
        at: end - i64::from(w.secs),
        lead: i64::from(w.secs),
        signal: w.number,
        batch_only: w.batch_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_comes_time_seconds_before_the_limit() {
        let env = |sig: &'static str| {
            move |k: &str| match k {
                contract::ENV_SIGNAL => Some(sig.to_string()),
                contract::ENV_END_TIME => Some("1000".to_string()),
                _ => None,
            }
        };
        assert_eq!(
            from_env(env("B:10@90")),
            Some(Warning {
                at: 910,
                lead: 90,
                signal: 10,
                batch_only: true
            })
        );
        assert_eq!(
            from_env(env("12")),
            Some(Warning {
                at: 940,
                lead: 60,
                signal: 12,
                batch_only: false
            })
        );
        assert_eq!(from_env(|_| None), None);
        // A limit lowered (or raised) later moves the warning with it.
        let w = from_env(env("B:10@90")).unwrap();
        assert_eq!(due(&w, None), 910);
        assert_eq!(due(&w, Some(500)), 410);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("end-time");
        assert_eq!(end_from_file(&f), None);
        std::fs::write(&f, "1234").unwrap();
        assert_eq!(end_from_file(&f), Some(1234));
        std::fs::write(&f, "").unwrap();
        assert_eq!(end_from_file(&f), None);
    }
}

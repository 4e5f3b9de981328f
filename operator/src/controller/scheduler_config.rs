//! The scheduler's configuration file (`--scheduler-config`): the core's
//! [`Config`](crate::core::Config) as YAML, camelCase keys, omitted keys at their defaults —
//! Muster's counterpart of Slurm's `SchedulerParameters` and `Priority*` settings.
//!
//! One parser for every reader: the operator (`muster-operator --scheduler-config`, the Helm
//! chart's `scheduler:` values) and the simulator (`muster simulate --scheduler-config`). An
//! unknown key or a value out of range is an error naming the key and what it allows, never a
//! silent default: a typo in a scheduling knob would otherwise change nothing and say nothing.

use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use crate::core::Config;

/// Why a scheduler configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerConfigError {
    /// The file could not be read.
    #[error("cannot read scheduler configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML.
    #[error("scheduler configuration is not valid YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// YAML, but not a mapping of keys to values.
    #[error("scheduler configuration must be a mapping of keys to values (got {0}); the keys are: {keys}", keys = key_names())]
    NotAMapping(String),
    /// A key Muster does not know.
    #[error("unknown key {key:?} in the scheduler configuration; the keys are: {keys}", keys = key_names())]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// A known key with a value it does not allow.
    #[error("scheduler configuration key {key}: {value} is not allowed ({allowed})")]
    BadValue {
        /// The key.
        key: &'static str,
        /// The value as written (YAML).
        value: String,
        /// What the key allows.
        allowed: &'static str,
    },
}

/// One key of the file: its name, what it allows, its Slurm counterpart, and a range check
/// beyond its type.
pub struct Key {
    /// The key (camelCase, as in the file).
    pub name: &'static str,
    /// What values it allows, for errors and docs.
    pub allowed: &'static str,
    /// The Slurm setting it corresponds to (empty: none).
    pub slurm: &'static str,
    check: fn(&Config) -> bool,
}

fn weight(w: f64) -> bool {
    w.is_finite() && w >= 0.0
}

/// Every key, in the order [`Config`] lists its fields.
pub const KEYS: &[Key] = &[
    Key {
        name: "weightAge",
        allowed: "a number >= 0",
        slurm: "PriorityWeightAge",
        check: |c| weight(c.weight_age),
    },
    Key {
        name: "weightJobSize",
        allowed: "a number >= 0",
        slurm: "PriorityWeightJobSize",
        check: |c| weight(c.weight_job_size),
    },
    Key {
        name: "weightFairShare",
        allowed: "a number >= 0",
        slurm: "PriorityWeightFairshare",
        check: |c| weight(c.weight_fair_share),
    },
    Key {
        name: "maxAgeSecs",
        allowed: "a whole number of seconds >= 1",
        slurm: "PriorityMaxAge",
        check: |c| c.max_age_secs >= 1,
    },
    Key {
        name: "fairShareHalfLifeSecs",
        allowed: "a whole number of seconds >= 1",
        slurm: "PriorityDecayHalfLife",
        check: |c| c.fair_share_half_life_secs >= 1,
    },
    Key {
        name: "shares",
        allowed: "a mapping of namespace to a whole number of shares >= 1",
        slurm: "the associations' Fairshare",
        check: |c| c.shares.values().all(|&s| s >= 1),
    },
    Key {
        name: "backfill",
        allowed: "true or false",
        slurm: "SchedulerType=sched/backfill (false: sched/builtin)",
        check: |_| true,
    },
    Key {
        name: "maxReservations",
        allowed: "a whole number >= 0",
        slurm: "SchedulerParameters=bf_max_job_test",
        check: |_| true,
    },
    Key {
        name: "reserveAfterSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "SchedulerParameters=bf_min_age_reserve",
        check: |_| true,
    },
    Key {
        name: "topologyWaitSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "",
        check: |_| true,
    },
    Key {
        name: "preemption",
        allowed: "true or false",
        slurm: "PreemptType=preempt/partition_prio (false: preempt/none)",
        check: |_| true,
    },
    Key {
        name: "maxSwitchWaitSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "SchedulerParameters=max_switch_wait",
        check: |_| true,
    },
];

fn key_names() -> String {
    KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
}

fn show(v: &Value) -> String {
    serde_yaml::to_string(v)
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| format!("{v:?}"))
}

/// Parses a scheduler configuration (YAML text; empty: every default).
pub fn parse(text: &str) -> Result<Config, SchedulerConfigError> {
    let v: Value = serde_yaml::from_str(text)?;
    let m = match v {
        Value::Null => return Ok(Config::default()),
        Value::Mapping(m) => m,
        other => return Err(SchedulerConfigError::NotAMapping(show(&other))),
    };
    for (k, val) in &m {
        let name = k.as_str().unwrap_or_default();
        let Some(key) = KEYS.iter().find(|x| x.name == name) else {
            return Err(SchedulerConfigError::UnknownKey { key: show(k) });
        };
        // Each key is read alone (its type is the Config field's), so an error names it.
        let mut one = Mapping::new();
        one.insert(k.clone(), val.clone());
        let bad = || SchedulerConfigError::BadValue {
            key: key.name,
            value: show(val),
            allowed: key.allowed,
        };
        let alone: Config = serde_yaml::from_value(Value::Mapping(one)).map_err(|_| bad())?;
        if !(key.check)(&alone) {
            return Err(bad());
        }
    }
    // Every key passed alone, so together they pass too.
    Ok(serde_yaml::from_value(Value::Mapping(m))?)
}

/// Reads and parses the file at `path`.
pub fn load(path: &Path) -> Result<Config, SchedulerConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| SchedulerConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_exactly_the_config_fields() {
        let fields = serde_yaml::to_value(Config::default()).unwrap();
        let fields: Vec<&str> = fields
            .as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap())
            .collect();
        let keys: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        assert_eq!(keys, fields);
        // Every default passes its own check.
        assert!(KEYS.iter().all(|k| (k.check)(&Config::default())));
    }

    #[test]
    fn empty_and_partial_files_keep_the_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
        assert_eq!(parse("{}").unwrap(), Config::default());
        assert_eq!(parse("# nothing\n").unwrap(), Config::default());
        let c = parse("maxReservations: 0\nbackfill: false\nshares: {team-a: 3}\n").unwrap();
        assert_eq!(c.max_reservations, 0);
        assert!(!c.backfill);
        assert_eq!(c.shares["team-a"], 3);
        assert_eq!(
            Config {
                max_reservations: 0,
                backfill: false,
                shares: c.shares.clone(),
                ..Config::default()
            },
            c
        );
        // Integers are accepted where numbers are.
        assert_eq!(parse("weightAge: 5").unwrap().weight_age, 5.0);
    }

    #[test]
    fn unknown_keys_are_named_with_the_known_ones() {
        let e = parse("maxReservation: 4\n").unwrap_err().to_string();
        assert!(e.contains("unknown key \"maxReservation\""), "{e}");
        assert!(e.contains("maxReservations"), "{e}");
        assert!(e.contains("weightAge"), "{e}");
        // Slurm's own spelling is not ours: refused, not ignored.
        let e = parse("bf_max_job_test: 4\n").unwrap_err().to_string();
        assert!(e.contains("\"bf_max_job_test\""), "{e}");
    }

    #[test]
    fn bad_values_name_the_key_and_what_it_allows() {
        for (text, key, allowed) in [
            ("maxReservations: -1", "maxReservations", "a whole number >= 0"),
            ("maxReservations: lots", "maxReservations", "a whole number >= 0"),
            ("backfill: maybe", "backfill", "true or false"),
            ("weightAge: -3", "weightAge", "a number >= 0"),
            ("weightAge: .nan", "weightAge", "a number >= 0"),
            ("maxAgeSecs: 0", "maxAgeSecs", ">= 1"),
            ("shares: {a: 0}", "shares", "shares >= 1"),
            ("shares: [a]", "shares", "a mapping"),
            ("topologyWaitSecs: 1.5", "topologyWaitSecs", "whole number"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(
                matches!(e, SchedulerConfigError::BadValue { key: k, .. } if k == key),
                "{text}: {e}"
            );
            let e = e.to_string();
            assert!(e.contains(key) && e.contains(allowed), "{text}: {e}");
        }
    }

    #[test]
    fn files_that_are_not_mappings_are_refused() {
        assert!(matches!(
            parse("- backfill"),
            Err(SchedulerConfigError::NotAMapping(_))
        ));
        assert!(matches!(
            parse("backfill: [\n"),
            Err(SchedulerConfigError::Yaml(_))
        ));
        let e = load(Path::new("/nonexistent/scheduler.yaml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/scheduler.yaml"), "{e}");
    }
}

//! The scheduler's configuration file (`--scheduler-config`): the core's
//! [`crate::core::Config`] as YAML, camelCase keys, omitted keys at their defaults —
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
    /// Its JSON Schema type, for the Helm chart's values schema ([`json_schema`]).
    pub kind: Kind,
    check: fn(&Config) -> bool,
}

/// A key's type, as the chart's values schema states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A number >= 0.
    Weight,
    /// A whole number >= the minimum.
    Whole(u64),
    /// true or false.
    Bool,
    /// A mapping of namespace to a whole number >= 1.
    Shares,
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
        kind: Kind::Weight,
        check: |c| weight(c.weight_age),
    },
    Key {
        name: "weightJobSize",
        allowed: "a number >= 0",
        slurm: "PriorityWeightJobSize",
        kind: Kind::Weight,
        check: |c| weight(c.weight_job_size),
    },
    Key {
        name: "weightFairShare",
        allowed: "a number >= 0",
        slurm: "PriorityWeightFairshare",
        kind: Kind::Weight,
        check: |c| weight(c.weight_fair_share),
    },
    Key {
        name: "maxAgeSecs",
        allowed: "a whole number of seconds >= 1",
        slurm: "PriorityMaxAge",
        kind: Kind::Whole(1),
        check: |c| c.max_age_secs >= 1,
    },
    Key {
        name: "shortLimitAgeSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "",
        kind: Kind::Whole(0),
        check: |_| true,
    },
    Key {
        name: "passGangsAfterSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "",
        kind: Kind::Whole(0),
        check: |_| true,
    },
    Key {
        name: "gangFirmAfterSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "",
        kind: Kind::Whole(0),
        check: |_| true,
    },
    Key {
        name: "fairShareHalfLifeSecs",
        allowed: "a whole number of seconds >= 1",
        slurm: "PriorityDecayHalfLife",
        kind: Kind::Whole(1),
        check: |c| c.fair_share_half_life_secs >= 1,
    },
    Key {
        name: "shares",
        allowed: "a mapping of namespace to a whole number of shares >= 1",
        slurm: "the associations' Fairshare",
        kind: Kind::Shares,
        check: |c| c.shares.values().all(|&s| s >= 1),
    },
    Key {
        name: "backfill",
        allowed: "true or false",
        slurm: "SchedulerType=sched/backfill (false: sched/builtin)",
        kind: Kind::Bool,
        check: |_| true,
    },
    Key {
        name: "maxReservations",
        allowed: "a whole number >= 0",
        slurm: "SchedulerParameters=bf_max_job_test",
        kind: Kind::Whole(0),
        check: |_| true,
    },
    Key {
        name: "reserveAfterSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "SchedulerParameters=bf_min_age_reserve",
        kind: Kind::Whole(0),
        check: |_| true,
    },
    Key {
        name: "topologyWaitSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "",
        kind: Kind::Whole(0),
        check: |_| true,
    },
    Key {
        name: "spreadAtOnceMaxLimitSecs",
        allowed: "a whole number of seconds >= 0 (0: every gang)",
        slurm: "",
        kind: Kind::Whole(0),
        check: |_| true,
    },
    Key {
        name: "preemption",
        allowed: "true or false",
        slurm: "PreemptType=preempt/partition_prio (false: preempt/none)",
        kind: Kind::Bool,
        check: |_| true,
    },
    Key {
        name: "maxSwitchWaitSecs",
        allowed: "a whole number of seconds >= 0",
        slurm: "SchedulerParameters=max_switch_wait",
        kind: Kind::Whole(0),
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

/// The JSON Schema of the file (the Helm chart's `scheduler:` values, in
/// `values.schema.json`), built from [`KEYS`] so the chart refuses what the operator refuses.
pub fn json_schema() -> serde_json::Value {
    use serde_json::json;
    let mut props = serde_json::Map::new();
    for k in KEYS {
        let mut d = k.allowed.to_string();
        if !k.slurm.is_empty() {
            d = format!("{d}; Slurm: {}", k.slurm);
        }
        let mut p = match k.kind {
            Kind::Weight => json!({"type": "number", "minimum": 0}),
            Kind::Whole(min) => json!({"type": "integer", "minimum": min}),
            Kind::Bool => json!({"type": "boolean"}),
            Kind::Shares => json!({"type": "object",
                "additionalProperties": {"type": "integer", "minimum": 1}}),
        };
        p["description"] = json!(d);
        props.insert(k.name.to_string(), p);
    }
    json!({
        "type": "object",
        "description": "The scheduler's configuration (--scheduler-config); omitted keys keep their defaults",
        "additionalProperties": false,
        "properties": props,
    })
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
    fn the_json_schema_lists_every_key() {
        let s = json_schema();
        let props = s["properties"].as_object().unwrap();
        assert_eq!(props.len(), KEYS.len());
        assert_eq!(props["maxReservations"]["type"], "integer");
        assert_eq!(props["maxAgeSecs"]["minimum"], 1);
        assert_eq!(s["additionalProperties"], false);
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
            (
                "maxReservations: -1",
                "maxReservations",
                "a whole number >= 0",
            ),
            (
                "maxReservations: lots",
                "maxReservations",
                "a whole number >= 0",
            ),
            ("backfill: maybe", "backfill", "true or false"),
            ("weightAge: -3", "weightAge", "a number >= 0"),
            ("weightAge: .nan", "weightAge", "a number >= 0"),
            ("maxAgeSecs: 0", "maxAgeSecs", ">= 1"),
            ("shares: {a: 0}", "shares", "shares >= 1"),
            ("shares: [a]", "shares", "a mapping"),
            ("topologyWaitSecs: 1.5", "topologyWaitSecs", "whole number"),
            ("gangFirmAfterSecs: -1", "gangFirmAfterSecs", "whole number"),
            (
                "passGangsAfterSecs: 4h",
                "passGangsAfterSecs",
                "whole number",
            ),
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

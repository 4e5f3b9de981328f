//! Fair-share usage per namespace (decayed GPU-seconds), kept in the API so that a restart or
//! a new leader keeps the history: the ConfigMap `muster-fairshare` in the operator's
//! namespace, key `usage.json` = `{"time": <epoch seconds>, "usage": {"<namespace>": <gpu-s>}}`.
//!
//! The leader accrues usage every cycle in memory ([`decay_usage`](crate::core::priority::decay_usage))
//! and persists it at most every [`PERSIST_EVERY`] seconds — not per job — so a crash loses at
//! most that much accounting, never the history.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde::{Deserialize, Serialize};

use super::exec::{ApiError, WriteKind};
use super::kube_api::{FIELD_MANAGER, api_error};
use super::metrics::Metrics;
use crate::core::priority::UsageSpan;

/// The ConfigMap's name.
pub const CONFIGMAP: &str = "muster-fairshare";
/// The data key.
pub const KEY: &str = "usage.json";
/// Seconds between two writes.
pub const PERSIST_EVERY: i64 = 60;

/// The stored record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// When `usage` was last brought up to date (epoch seconds).
    pub time: i64,
    /// Decayed GPU-seconds per namespace.
    pub usage: BTreeMap<String, f64>,
}

impl Record {
    /// The record a `muster-fairshare` ConfigMap holds, if it holds a readable one.
    pub fn from_configmap(cm: &ConfigMap) -> Option<Record> {
        let text = cm.data.as_ref()?.get(KEY)?;
        serde_json::from_str(text).ok()
    }
}

/// Usage in memory, with its persistence.
pub struct Usage {
    api: Api<ConfigMap>,
    /// The current record.
    pub record: Record,
    last_persist: i64,
    half_life: u64,
    metrics: Metrics,
}

impl Usage {
    /// Usage kept in `namespace`, decaying with `half_life` seconds.
    pub fn new(client: Client, namespace: &str, half_life: u64, metrics: Metrics) -> Self {
        Usage {
            api: Api::namespaced(client, namespace),
            record: Record::default(),
            last_persist: i64::MIN,
            half_life,
            metrics,
        }
    }

    /// Loads the stored record (on becoming leader). A missing or unreadable record starts
    /// empty at `now`.
    pub async fn load(&mut self, now: i64) -> Result<(), ApiError> {
        let cm = self.api.get_opt(CONFIGMAP).await.map_err(api_error)?;
        self.record = cm
            .as_ref()
            .and_then(Record::from_configmap)
            .unwrap_or(Record {
                time: now,
                usage: BTreeMap::new(),
            });
        if self.record.time > now {
            self.record.time = now;
        }
        self.last_persist = now;
        Ok(())
    }

    /// Accrues the running jobs' GPU time up to `now`.
    pub fn accrue(&mut self, running: &[UsageSpan], now: i64) {
        if now <= self.record.time {
            return;
        }
        self.record.usage = crate::core::priority::decay_usage_spans(
            &self.record.usage,
            running,
            self.record.time,
            now,
            self.half_life,
        );
        self.record.time = now;
    }

    /// Writes the record if [`PERSIST_EVERY`] seconds passed since the last write.
    pub async fn maybe_persist(&mut self, now: i64) -> Result<(), ApiError> {
        if now.saturating_sub(self.last_persist) < PERSIST_EVERY {
            return Ok(());
        }
        self.last_persist = now;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(CONFIGMAP.into()),
                ..Default::default()
            },
            data: Some(
                [(
                    KEY.to_string(),
                    serde_json::to_string(&self.record).unwrap_or_default(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let mut body = serde_json::to_value(&cm).unwrap_or_default();
        body["apiVersion"] = "v1".into();
        body["kind"] = "ConfigMap".into();
        self.metrics.write(WriteKind::ConfigMap, 1);
        self.api
            .patch(
                CONFIGMAP,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map(|_| ())
            .map_err(api_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips() {
        let r = Record {
            time: 5,
            usage: [("ml".to_string(), 3600.5)].into(),
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Record>(&s).unwrap(), r);
    }
}

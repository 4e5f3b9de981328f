//! Cluster-unique, increasing job ids that survive restarts: a counter in a ConfigMap
//! (`muster-job-ids` in the operator's namespace, key `next`), advanced by compare-and-swap
//! on its resourceVersion and handed out in blocks.
//!
//! The leader reserves a block `[next, next + size)` with one write (a `replace` carrying the
//! resourceVersion it read: two writers cannot both get the same block) and hands ids out from
//! memory. Ids of a block not used before a restart or a change of leader are skipped, never
//! reused, so ids are unique and increasing but may have gaps — as Slurm's own can after a
//! `scontrol reconfigure`. The block size adapts to demand (at least 64, at most 65536, the
//! next power of two above what one cycle needs), so a burst of 1,000 submissions costs one
//! write.

use std::collections::BTreeMap;
use std::ops::Range;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};

use super::exec::{ApiError, WriteKind};
use super::kube_api::api_error;
use super::metrics::Metrics;

/// The ConfigMap's name.
pub const CONFIGMAP: &str = "muster-job-ids";
/// The key holding the next id not yet reserved.
pub const KEY: &str = "next";

/// The block size for a need of `need` ids.
pub fn block_size(need: usize) -> u64 {
    (need as u64).max(64).next_power_of_two().min(65_536)
}

/// Ids reserved from the counter.
pub struct JobIds {
    api: Api<ConfigMap>,
    block: Range<u64>,
    metrics: Metrics,
}

impl JobIds {
    /// A counter in `namespace`.
    pub fn new(client: Client, namespace: &str, metrics: Metrics) -> Self {
        JobIds {
            api: Api::namespaced(client, namespace),
            block: 0..0,
            metrics,
        }
    }

    /// Ids left in the current block.
    pub fn available(&self) -> u64 {
        self.block.end - self.block.start
    }

    /// Drops the current block (on losing leadership: a new leader reserves its own).
    pub fn forget(&mut self) {
        self.block = 0..0;
    }

    /// The next id, if one is reserved.
    pub fn take(&mut self) -> Option<u64> {
        self.block.next()
    }

    /// Makes sure at least `need` ids are reserved.
    pub async fn reserve(&mut self, need: usize) -> Result<(), ApiError> {
        if self.available() >= need as u64 {
            return Ok(());
        }
        let size = block_size(need);
        let mut last = ApiError::Transport("not tried".into());
        for _ in 0..5 {
            match self.try_reserve(size).await {
                Ok(r) => {
                    // The old block's remainder is skipped: ids stay increasing.
                    self.block = r;
                    return Ok(());
                }
                Err(e @ ApiError::Conflict(_)) => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    async fn try_reserve(&self, size: u64) -> Result<Range<u64>, ApiError> {
        self.metrics.write(WriteKind::ConfigMap, 1);
        match self.api.get_opt(CONFIGMAP).await.map_err(api_error)? {
            None => {
                let cm = counter(1 + size, None);
                self.api
                    .create(&PostParams::default(), &cm)
                    .await
                    .map_err(api_error)?;
                Ok(1..1 + size)
            }
            Some(cm) => {
                let next = parse_next(&cm)?;
                let new = next.checked_add(size).ok_or_else(|| ApiError::Status {
                    code: 500,
                    message: "job id counter overflow".into(),
                })?;
                let mut upd = counter(new, cm.metadata.resource_version.clone());
                upd.metadata.labels = cm.metadata.labels.clone();
                self.api
                    .replace(CONFIGMAP, &PostParams::default(), &upd)
                    .await
                    .map_err(api_error)?;
                Ok(next..new)
            }
        }
    }
}

/// The counter object holding `next`.
pub fn counter(next: u64, resource_version: Option<String>) -> ConfigMap {
    let mut data = BTreeMap::new();
    data.insert(KEY.to_string(), next.to_string());
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(CONFIGMAP.into()),
            resource_version,
            annotations: Some(
                [(
                    "muster.dev/description".to_string(),
                    "Slurm job id counter: the next id not yet handed out. Managed by muster-operator; never lower it.".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// The `next` value of a counter object.
pub fn parse_next(cm: &ConfigMap) -> Result<u64, ApiError> {
    cm.data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|v| *v >= 1)
        .ok_or_else(|| ApiError::Status {
            code: 500,
            message: format!("ConfigMap {CONFIGMAP}: data.{KEY} must be a positive integer"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_grow_with_demand() {
        assert_eq!(block_size(0), 64);
        assert_eq!(block_size(65), 128);
        assert_eq!(block_size(1000), 1024);
        assert_eq!(block_size(10_000_000), 65_536);
    }

    #[test]
    fn counter_round_trips_and_refuses_garbage() {
        let cm = counter(42, Some("7".into()));
        assert_eq!(parse_next(&cm).unwrap(), 42);
        assert_eq!(cm.metadata.resource_version.as_deref(), Some("7"));
        let mut bad = cm.clone();
        bad.data.as_mut().unwrap().insert(KEY.into(), "x".into());
        assert!(
            parse_next(&bad)
                .unwrap_err()
                .to_string()
                .contains("positive integer")
        );
        let mut zero = cm;
        zero.data.as_mut().unwrap().insert(KEY.into(), "0".into());
        assert!(parse_next(&zero).is_err());
    }
}

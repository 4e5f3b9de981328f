//! Kubernetes Events about BatchJobs, written through the core/v1 Events API so that every
//! client orders them: `eventTime` (the events.k8s.io view), and `firstTimestamp`,
//! `lastTimestamp` and `count` (what `kubectl get events --sort-by=.lastTimestamp`, its
//! LAST SEEN column and `kubectl describe` read), plus a `series` for repeats.
//!
//! Written by hand rather than with kube-runtime's `Recorder`: that recorder writes
//! events.k8s.io/v1 Events, whose API refuses `deprecatedLastTimestamp`,
//! `deprecatedFirstTimestamp` and `deprecatedCount` on create ("needs to be unset"), and a real
//! API server's core/v1 view of such an event has no `lastTimestamp` — so kubectl cannot sort
//! them by it. The core/v1 API accepts the new fields alongside the old ones.
//!
//! Repeats of the same event (same object, type, reason and note) within
//! [`SERIES_WINDOW`] of the last one update that event (`count`, `lastTimestamp`, `series`)
//! instead of creating another, as client-go's event correlator does.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, EventSeries, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Mutex;

/// Repeats closer than this to the previous occurrence join its series.
pub const SERIES_WINDOW: std::time::Duration = std::time::Duration::from_secs(6 * 60);

/// Longest note kept (the Events API allows 1 KiB).
const MAX_NOTE: usize = 1000;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    uid: String,
    warning: bool,
    reason: String,
    note: String,
}

#[derive(Clone, Debug)]
struct Seen {
    name: String,
    last: jiff::Timestamp,
    count: i32,
}

/// Publishes Events as the reporting controller `controller` (instance `instance`).
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    seen: Arc<Mutex<HashMap<Key, Seen>>>,
}

/// One event about an object.
#[derive(Clone, Debug)]
pub struct Occurrence<'a> {
    /// The object.
    pub regarding: &'a ObjectReference,
    /// Warning (else Normal).
    pub warning: bool,
    /// CamelCase reason.
    pub reason: &'a str,
    /// What happened.
    pub note: &'a str,
    /// What the controller did (CamelCase).
    pub action: &'a str,
}

/// The core/v1 Event for the first occurrence at `now`.
pub fn new_event(
    o: &Occurrence<'_>,
    controller: &str,
    instance: &str,
    now: jiff::Timestamp,
) -> Event {
    let ns = o
        .regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let base = o
        .regarding
        .name
        .clone()
        .unwrap_or_else(|| controller.to_string());
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{base}.{:x}", now.as_nanosecond())),
            namespace: Some(ns),
            ..Default::default()
        },
        involved_object: o.regarding.clone(),
        reason: Some(o.reason.to_string()),
        message: Some(o.note.chars().take(MAX_NOTE).collect()),
        type_: Some(if o.warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some(controller.to_string()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        event_time: Some(MicroTime(now)),
        action: Some(o.action.to_string()),
        reporting_component: Some(controller.to_string()),
        reporting_instance: Some(instance.to_string()),
        related: None,
        series: None,
    }
}

/// The merge patch that records one more occurrence of a series at `now`.
pub fn repeat_patch(count: i32, now: jiff::Timestamp) -> serde_json::Value {
    serde_json::json!({
        "count": count,
        "lastTimestamp": Time(now),
        "series": EventSeries {
            count: Some(count),
            last_observed_time: Some(MicroTime(now)),
        },
    })
}

impl Recorder {
    /// A recorder writing through `client`.
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Recorder {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            seen: Arc::default(),
        }
    }

    /// Publishes `o`: a new Event, or one more occurrence of the same event seen within
    /// [`SERIES_WINDOW`].
    pub async fn publish(&self, o: &Occurrence<'_>) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now();
        let window = jiff::SignedDuration::try_from(SERIES_WINDOW).unwrap_or_default();
        let ns = o
            .regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let key = Key {
            namespace: ns.clone(),
            uid: o.regarding.uid.clone().unwrap_or_default(),
            warning: o.warning,
            reason: o.reason.to_string(),
            note: o.note.chars().take(MAX_NOTE).collect(),
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let prev = {
            let mut seen = self.seen.lock().await;
            seen.retain(|_, s| s.last + window > now);
            seen.get(&key).cloned()
        };
        if let Some(s) = prev {
            let count = s.count + 1;
            match api
                .patch(
                    &s.name,
                    &PatchParams::default(),
                    &Patch::Merge(repeat_patch(count, now)),
                )
                .await
            {
                Ok(_) => {
                    self.seen.lock().await.insert(
                        key,
                        Seen {
                            count,
                            last: now,
                            ..s
                        },
                    );
                    return Ok(());
                }
                // Gone (expired by the API server's event TTL): start a new one.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let ev = new_event(o, &self.controller, &self.instance, now);
        let name = ev.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &ev).await?;
        self.seen.lock().await.insert(
            key,
            Seen {
                name,
                last: now,
                count: 1,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_both_timestamps_and_a_count() {
        let r = ObjectReference {
            api_version: Some("muster.dev/v1alpha1".into()),
            kind: Some("BatchJob".into()),
            name: Some("train".into()),
            namespace: Some("ml".into()),
            uid: Some("u1".into()),
            ..Default::default()
        };
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let ev = new_event(
            &Occurrence {
                regarding: &r,
                warning: true,
                reason: "Failed",
                note: &"x".repeat(2000),
                action: "Schedule",
            },
            "muster-operator",
            "pod-1",
            now,
        );
        assert_eq!(ev.event_time, Some(MicroTime(now)));
        assert_eq!(ev.last_timestamp, Some(Time(now)));
        assert_eq!(ev.first_timestamp, Some(Time(now)));
        assert_eq!(ev.count, Some(1));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.metadata.namespace.as_deref(), Some("ml"));
        assert_eq!(ev.message.unwrap().len(), MAX_NOTE);
        assert_eq!(ev.reporting_component.as_deref(), Some("muster-operator"));
        let p = repeat_patch(3, now);
        assert_eq!(p["count"], 3);
        assert_eq!(p["series"]["count"], 3);
        assert!(p["lastTimestamp"].is_string());
        assert!(p["series"]["lastObservedTime"].is_string());
    }
}

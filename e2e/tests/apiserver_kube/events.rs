//! Events: events.k8s.io/v1 and core/v1 views of the same Event.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_recorded_through_events_k8s_io_show_as_core_events() {
    let (_s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let x = cms
        .create(&PostParams::default(), &cm("ev", &[]))
        .await
        .unwrap();
    let recorder = kube::runtime::events::Recorder::new(c.clone(), "muster-test".into());
    recorder
        .publish(
            &kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Normal,
                reason: "Tested".into(),
                note: Some("hello".into()),
                action: "Test".into(),
                secondary: None,
            },
            &x.object_ref(&()),
        )
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(c.clone());
    let l = events
        .list(&ListParams::default().fields("involvedObject.name=ev,involvedObject.kind=ConfigMap"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    assert_eq!(l.items[0].message.as_deref(), Some("hello"));
    assert_eq!(l.items[0].reason.as_deref(), Some("Tested"));
}

/// As kube-apiserver: an events.k8s.io/v1 Event may not carry the deprecated core/v1 fields
/// (so its core view has no `lastTimestamp`), while a core/v1 Event may carry both
/// `eventTime` and `lastTimestamp`, and then names its reporting controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_k8s_io_refuses_deprecated_fields_and_core_events_carry_both() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event as V1Event;
    let (_s, c) = start().await;
    let v1: Api<V1Event> = Api::default_namespaced(c.clone());
    let mut ev: V1Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "type": "Normal", "reason": "Tested", "action": "Test",
        "reportingController": "t", "reportingInstance": "t",
        "regarding": {"kind": "ConfigMap", "name": "x", "namespace": "default"},
        "deprecatedLastTimestamp": "2026-01-01T00:00:00Z"}))
    .unwrap();
    let err = v1.create(&PostParams::default(), &ev).await.unwrap_err();
    assert!(err.to_string().contains("deprecatedLastTimestamp"), "{err}");
    ev.deprecated_last_timestamp = None;
    v1.create(&PostParams::default(), &ev).await.unwrap();
    let core: Api<CoreEvent> = Api::default_namespaced(c.clone());
    assert_eq!(core.get("e1").await.unwrap().last_timestamp, None);

    let mut ce: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "e2"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "lastTimestamp": "2026-01-01T00:00:00Z", "firstTimestamp": "2026-01-01T00:00:00Z",
        "count": 1, "type": "Normal", "reason": "Tested", "message": "m",
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": "default"}}))
    .unwrap();
    let err = core.create(&PostParams::default(), &ce).await.unwrap_err();
    assert!(err.to_string().contains("reportingComponent"), "{err}");
    ce.reporting_component = Some("t".into());
    ce.reporting_instance = Some("t".into());
    ce.action = Some("Test".into());
    core.create(&PostParams::default(), &ce).await.unwrap();
    let back = core.get("e2").await.unwrap();
    assert!(back.last_timestamp.is_some() && back.event_time.is_some());
}

//! Shared helpers: a started API server and client, object builders, error and event readers.

use super::*;

pub(crate) async fn start() -> (ApiServer, Client) {
    let s = ApiServer::start(ApiServerOptions::default().with_muster_crds())
        .await
        .expect("server starts");
    let c = s.client();
    (s, c)
}

pub(crate) fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        "data": {"k": "v"}
    }))
    .unwrap()
}

pub(crate) fn pod(name: &str, node: Option<&str>) -> Pod {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(p).unwrap()
}

pub(crate) fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(r) => *r,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub(crate) fn bj_api(c: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("muster.dev", "v1alpha1", "BatchJob"));
    Api::namespaced_with(c.clone(), "default", &ar)
}

pub(crate) fn partition_api(c: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "muster.dev",
        "v1alpha1",
        "Partition",
    ));
    Api::all_with(c.clone(), &ar)
}

/// A BatchJob named `name` with `spec` (and a script, which the CRD requires, unless given).
pub(crate) fn bj(name: &str, mut spec: Value) -> DynamicObject {
    if spec.get("script").is_none() && spec.get("template").is_none() {
        spec["script"] = json!("hostname");
    }
    serde_json::from_value(json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob", "metadata": {"name": name}, "spec": spec})).unwrap()
}

pub(crate) async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

pub(crate) async fn stream_next<S>(s: &mut S) -> WatchEvent<Pod>
where
    S: futures::Stream<Item = Result<WatchEvent<Pod>, kube::Error>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(60), s.try_next())
        .await
        .expect("an event in time")
        .unwrap()
        .expect("stream open")
}

pub(crate) fn names_p(l: Vec<Pod>) -> Vec<String> {
    l.into_iter().map(|c| c.name_any()).collect()
}

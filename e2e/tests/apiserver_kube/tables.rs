//! Table and metadata-only responses (what kubectl and metadata watchers ask for).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_metadata_for_kubectl_and_metadata_watchers() {
    let (_s, c) = start().await;
    let bjs = bj_api(&c);
    bjs.create(&PostParams::default(), &bj("t", json!({"time": 30})))
        .await
        .unwrap();
    bjs.patch_status(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"jobId": 42, "state": "RUNNING"}})),
    )
    .await
    .unwrap();
    let req = axum::http::Request::get("/apis/muster.dev/v1alpha1/namespaces/default/batchjobs")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let t: Value = c.request(req).await.unwrap();
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(&cols[..4], ["Name", "JobID", "Partition", "State"]);
    assert_eq!(t["rows"][0]["cells"][0], "t");
    assert_eq!(t["rows"][0]["cells"][1], 42);
    assert_eq!(t["rows"][0]["cells"][3], "RUNNING");
    let meta = bjs.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(meta.items[0].metadata.name.as_deref(), Some("t"));
}

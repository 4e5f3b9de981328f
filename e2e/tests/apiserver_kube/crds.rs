//! CustomResourceDefinitions: schema and CEL validation, serving and cleanup.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_schema_and_cel_validation() {
    let (_s, c) = start().await;
    let bjs = bj_api(&c);
    let err = api_error(
        bjs.create(&PostParams::default(), &bj("bad", json!({"time": "1h"})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "BatchJob.muster.dev \"bad\" is invalid: spec.time: Invalid value: \"1h\": time must be MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED (e.g. 30, \"4:00:00\" or \"2-00:00:00\")"
    );

    // Schema errors and rules on the whole spec, all reported.
    let err = api_error(
        bjs.create(
            &PostParams::default(),
            &bj(
                "bad2",
                json!({"cpusPerTask": 0, "mem": "1G", "memPerCpu": "2G"}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert!(err.message.contains("spec.cpusPerTask: Invalid value: 0: spec.cpusPerTask in body should be greater than or equal to 1"), "{}", err.message);
    assert!(
        err.message.contains("mutually exclusive"),
        "{}",
        err.message
    );

    // Unknown fields are pruned (with a warning); Strict refuses them.
    let ok = bjs
        .create(
            &PostParams::default(),
            &bj("ok", json!({"time": 30, "bogus": 1})),
        )
        .await
        .unwrap();
    assert!(ok.data["spec"].get("bogus").is_none());
    let strict = axum::http::Request::post(
        "/apis/muster.dev/v1alpha1/namespaces/default/batchjobs?fieldValidation=Strict",
    )
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&bj("ok2", json!({"time": 30, "bogus": 1}))).unwrap())
    .unwrap();
    let err = api_error(c.request::<Value>(strict).await.unwrap_err());
    assert_eq!(err.code, 400);
    assert!(
        err.message.contains("unknown field \"spec.bogus\""),
        "{}",
        err.message
    );

    // Updates are validated too, and so are status writes.
    let err = api_error(
        bjs.patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"time": "soon"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let err = api_error(
        bjs.patch_status(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"numNodes": "many"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(err.message.contains("status.numNodes"), "{}", err.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_are_served_when_created_and_cleaned_up_when_deleted() {
    let s = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let c = s.client();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(c.clone());
    let crd = muster_crds::crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some("batchjobs.muster.dev"))
        .unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let conds = created.status.unwrap().conditions.unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    let disc = kube::Discovery::new(c.clone()).run().await.unwrap();
    assert!(disc.groups().any(|g| g.name() == "muster.dev"));

    let bjs = bj_api(&c);
    bjs.create(&PostParams::default(), &bj("x", json!({"time": 30})))
        .await
        .unwrap();
    crds.delete("batchjobs.muster.dev", &DeleteParams::default())
        .await
        .unwrap();
    eventually("CRD and its objects gone", || async {
        crds.get_opt("batchjobs.muster.dev")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    let err = api_error(bjs.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(err.code, 404);

    // A CRD with a rule that does not compile is refused.
    let mut bad = serde_json::to_value(&crd).unwrap();
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([{"rule": "self.(("}]);
    let bad: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition = serde_json::from_value(bad).unwrap();
    let err = api_error(crds.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(err.code, 422);
}

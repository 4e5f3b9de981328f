//! The operator's admission webhooks, called by the API server double as kube-apiserver calls
//! them (TLS against the caBundle the operator wrote, its Service's Endpoints, the requesting
//! user): who submitted a job, what can never run, a second default partition.

mod operator_support;

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use muster_crds::v1alpha1::{BatchJob, JobState, Partition};
use muster_e2e::apiserver::auth::UserInfo;
use operator_support::{Env, NodeDef, batchjob};
use serde_json::json;

async fn env_with_admission() -> (Env, muster_e2e::operator::InProcessOperator) {
    let env = Env::start().await;
    env.add_nodes(&[
        NodeDef::new("gpu001", 8, "leaf1"),
        NodeDef::new("gpu002", 8, "leaf1"),
    ])
    .await;
    env.default_partition().await;
    let op = muster_e2e::operator::start(&env.server, env.settings(), true)
        .await
        .expect("operator with admission");
    (env, op)
}

fn user_of(j: &BatchJob) -> Option<String> {
    j.metadata
        .annotations
        .as_ref()?
        .get(muster_crds::labels::USER)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_submitter_is_who_the_api_server_authenticated() {
    let (env, op) = env_with_admission().await;
    // The default client is kubernetes-admin; alice has her own token.
    env.submit(batchjob("by-admin", json!({"gpus": 1}), 1))
        .await;
    let alice = env.server.client_as(UserInfo::new("alice", &["ml"]));
    let mut forged = batchjob("by-alice", json!({"gpus": 1}), 1);
    forged["metadata"]["annotations"] = json!({"muster.dev/user": "root"});
    let j: BatchJob = serde_json::from_value(forged).unwrap();
    let api: Api<BatchJob> = Api::namespaced(alice.clone(), "default");
    let created = api.create(&PostParams::default(), &j).await.unwrap();
    assert_eq!(user_of(&created).as_deref(), Some("alice"));
    assert_eq!(
        user_of(&env.job("by-admin").await).as_deref(),
        Some("kubernetes-admin")
    );
    // Nobody can change it afterwards, the owner included.
    let r = api
        .patch(
            "by-alice",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"muster.dev/user": "bob"}}})),
        )
        .await
        .unwrap();
    assert_eq!(user_of(&r).as_deref(), Some("alice"));
    env.until_state("by-alice", JobState::Running, 20).await;
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_can_never_run_is_refused_at_apply() {
    let (env, op) = env_with_admission().await;
    for (spec, words) in [
        (
            json!({"nodes": 20}),
            "nodes: 20 requested, partition gpu has 2",
        ),
        (
            json!({"gpusPerNode": 9}),
            "GPUs: 9 per node requested, the most on one node of partition gpu is 8",
        ),
        (
            json!({"cpusPerTask": 1000}),
            "CPUs: 1000 per node requested",
        ),
        (json!({"mem": "10T"}), "memory: 10T per node requested"),
        (
            json!({"gpus": "a100:1"}),
            "GPU type a100: no node of partition gpu has one",
        ),
    ] {
        let j: BatchJob = serde_json::from_value(batchjob("never", spec.clone(), 1)).unwrap();
        let err = env
            .jobs()
            .create(&PostParams::default(), &j)
            .await
            .unwrap_err();
        let kube::Error::Api(s) = err else {
            panic!("{spec}: {err}")
        };
        assert_eq!(s.code, 403, "{spec}");
        assert!(
            s.message.starts_with(
                "admission webhook \"batchjobs.validate.muster.dev\" denied the request: Requested node configuration is not available: "
            ),
            "{spec}: {}",
            s.message
        );
        assert!(s.message.contains(words), "{spec}: {}", s.message);
    }
    // A second default partition.
    let p: Partition = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "other"}, "spec": {"default": true}}))
    .unwrap();
    let err = Api::<Partition>::all(env.client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("partition gpu is already the default"),
        "{err}"
    );
    op.shutdown().await.unwrap();
}

/// A started job's request cannot change: its pods were built from it, so the change would
/// be accepted and never take effect. The refusal names the fields; what may still change
/// (nice, here) is accepted; a pending job takes any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_jobs_request_cannot_change() {
    let (env, op) = env_with_admission().await;
    env.submit(batchjob("started", json!({"gpus": 1}), 600))
        .await;
    env.until_state("started", JobState::Running, 20).await;
    let err = env
        .jobs()
        .patch(
            "started",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gpus": 2, "time": "10"}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 403);
    assert!(
        s.message.ends_with(
            "denied the request: spec.gpus, spec.time cannot change once a job has left \
             PENDING: the job is RUNNING and its pods were built from what it asked for; only \
             cancel, hold, nice, priority and dependency may change, and a running job's \
             time may be lowered. Submit a new job for a different request"
        ),
        "{}",
        s.message
    );
    assert_eq!(
        env.job("started").await.spec.gpus,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    let r = env
        .jobs()
        .patch(
            "started",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nice": 10}})),
        )
        .await
        .unwrap();
    assert_eq!(r.spec.nice, Some(10));
    // Pending (held), a change to the request is taken.
    env.submit(batchjob("held", json!({"gpus": 1, "hold": true}), 1))
        .await;
    let r = env
        .jobs()
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gpus": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(
        r.spec.gpus,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
    );
    op.shutdown().await.unwrap();
}

/// What admission costs a submission: BatchJobs created one after another through kube-rs,
/// with the operator's two webhooks (TLS, the validating check over its caches) and without.
/// Prints figures; run with `cargo test -p muster-e2e --test operator_admission -- --ignored
/// --nocapture` (add `--release` for release figures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures"]
async fn admission_cost() {
    const N: usize = 300;
    for admission in [false, true] {
        let env = Env::start().await;
        env.add_nodes(
            &(1..=16)
                .map(|i| NodeDef::new(Box::leak(format!("gpu{i:03}").into_boxed_str()), 8, "leaf1"))
                .collect::<Vec<_>>(),
        )
        .await;
        env.default_partition().await;
        let op = muster_e2e::operator::start(&env.server, env.settings(), admission)
            .await
            .unwrap();
        let t0 = std::time::Instant::now();
        for i in 0..N {
            let j: BatchJob = serde_json::from_value(batchjob(
                &format!("j{i}"),
                json!({"gpusPerNode": 8, "nodes": 2}),
                1,
            ))
            .unwrap();
            env.jobs().create(&PostParams::default(), &j).await.unwrap();
        }
        let dt = t0.elapsed();
        println!(
            "admission {}: {N} BatchJobs created in {:.2} s ({:.2} ms each)",
            if admission { "on " } else { "off" },
            dt.as_secs_f64(),
            dt.as_secs_f64() * 1000.0 / N as f64
        );
        op.shutdown().await.unwrap();
    }
}

/// The administrators the operator is started with (`--admin-group`, `--admin-user`: the
/// chart's `operator.admins`), as the API server authenticates them, may set a fixed
/// priority; anyone else is refused, `system:masters` too once the groups are replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_administrators_set_priorities_and_no_one_else() {
    let env = Env::start().await;
    env.add_nodes(&[NodeDef::new("gpu001", 8, "leaf1")]).await;
    env.default_partition().await;
    let admins = muster_operator::controller::admission::Admins {
        groups: vec!["hpc-admins".into()],
        users: vec!["carol".into()],
    };
    let _op = muster_e2e::operator::start_with_admins(&env.server, env.settings(), true, admins)
        .await
        .expect("operator with admission");
    let submit = |user: &str, groups: &[&str], name: &str| {
        let client = env.server.client_as(UserInfo::new(user, groups));
        let job: BatchJob =
            serde_json::from_value(batchjob(name, json!({"gpus": 1, "priority": 900}), 1)).unwrap();
        async move {
            Api::<BatchJob>::namespaced(client, "default")
                .create(&PostParams::default(), &job)
                .await
        }
    };
    submit("bob", &["hpc-admins"], "by-group").await.unwrap();
    submit("carol", &[], "by-user").await.unwrap();
    for (user, groups, name) in [
        ("alice", &["ml"][..], "by-alice"),
        ("root", &["system:masters"][..], "by-masters"),
    ] {
        let e = submit(user, groups, name).await.unwrap_err();
        assert!(
            e.to_string().contains(
                "Access/permission denied: spec.priority (--priority) 900 would replace the \
                 computed priority; only administrators (group hpc-admins, user carol)"
            ),
            "{user}: {e}"
        );
    }
    // The administrators' jobs run with the priority they set.
    for name in ["by-group", "by-user"] {
        env.until_state(name, JobState::Running, 60).await;
        let st = env.job(name).await.status.unwrap();
        assert_eq!(st.priority, Some(900), "{name}");
    }
}

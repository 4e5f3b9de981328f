//! The GPU-binding policy: only the operator chooses a pod's GPUs.

use super::*;

// ---------------------------------------------------------------------------------------------
// GPU binding: only the operator sets NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES.

fn env(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

fn pod(namespace: &str, sa: &str, containers: Value, init: Value) -> Value {
    let mut spec =
        json!({"serviceAccountName": sa, "containers": containers, "restartPolicy": "Never"});
    if !init.is_null() {
        spec["initContainers"] = init;
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": namespace}, "spec": spec})
}

fn container(name: &str, env: Vec<Value>) -> Value {
    let mut c = json!({"name": name, "image": "nvcr.io/nvidia/pytorch:24.05-py3"});
    if !env.is_empty() {
        c["env"] = Value::Array(env);
    }
    c
}

fn create_pod(user: &str, object: Value) -> Req {
    Req {
        operation: "CREATE",
        username: user.into(),
        version: "v1",
        kind: "Pod",
        resource: "pods",
        name: object["metadata"]["name"].as_str().unwrap().into(),
        namespace: object["metadata"]["namespace"].as_str().unwrap().into(),
        object,
        ..Default::default()
    }
}

const USER: &str = "alice@example.com";

/// A pod referencing ResourceClaims by name.
fn with_claims(names: &[&str]) -> Value {
    let mut p = pod(
        "ml",
        "default",
        json!([container("c", vec![])]),
        Value::Null,
    );
    p["spec"]["resourceClaims"] = names
        .iter()
        .enumerate()
        .map(|(i, n)| json!({"name": format!("c{i}"), "resourceClaimName": n}))
        .collect();
    p
}

#[test]
fn gpu_binding_policy_lets_only_the_operator_choose_gpus() {
    let Some(r) = render(json!({})) else { return };
    let p = policy(&r, "muster-gpu-binding");
    all_expressions_compile(&p);
    let uuid = "GPU-a4c123b1-612d-d272-d137-1c17149d4395";
    let task = |user: &str| {
        create_pod(
            user,
            pod(
                "ml",
                "default",
                json!([container(
                    "task",
                    vec![
                        env("NVIDIA_VISIBLE_DEVICES", uuid),
                        env("CUDA_VISIBLE_DEVICES", "0"),
                        env("RANK", "0")
                    ]
                )]),
                Value::Null,
            ),
        )
    };
    // (case, request, admitted, words of the message)
    let cases: Vec<(&str, Req, bool, &str)> = vec![
        (
            "the operator creates a task pod with its GPUs",
            task(OPERATOR),
            true,
            "",
        ),
        (
            "a user copies the task pod",
            task(USER),
            false,
            "container task set NVIDIA_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES",
        ),
        (
            "a ReplicaSet's pod asks for all GPUs",
            create_pod(
                "system:serviceaccount:kube-system:replicaset-controller",
                pod(
                    "ml",
                    "default",
                    json!([container(
                        "main",
                        vec![env("NVIDIA_VISIBLE_DEVICES", "all")]
                    )]),
                    Value::Null,
                ),
            ),
            false,
            "GPUs are assigned by the Muster scheduler",
        ),
        (
            "CUDA_VISIBLE_DEVICES in an init container",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container("main", vec![])]),
                    json!([container("warmup", vec![env("CUDA_VISIBLE_DEVICES", "3")])]),
                ),
            ),
            false,
            "init container warmup",
        ),
        (
            "NVIDIA_VISIBLE_DEVICES from a ConfigMap (value unknown at admission)",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container(
                        "main",
                        vec![json!({"name": "NVIDIA_VISIBLE_DEVICES",
                    "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "list"}}})]
                    )]),
                    Value::Null,
                ),
            ),
            false,
            "container main",
        ),
        (
            "CUDA_VISIBLE_DEVICES from a Secret (an empty value would be allowed, this is not empty)",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container(
                        "main",
                        vec![json!({"name": "CUDA_VISIBLE_DEVICES",
                    "valueFrom": {"secretKeyRef": {"name": "gpus", "key": "list"}}})]
                    )]),
                    Value::Null,
                ),
            ),
            false,
            "container main",
        ),
        (
            "two offending containers are both named",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([
                        container("a", vec![env("NVIDIA_VISIBLE_DEVICES", "0")]),
                        container("ok", vec![env("PATH", "/bin")]),
                        container("b", vec![env("CUDA_VISIBLE_DEVICES", "1")])
                    ]),
                    Value::Null,
                ),
            ),
            false,
            "container a, b set",
        ),
        (
            "NVIDIA_VISIBLE_DEVICES=void hides every GPU",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container(
                        "cpu",
                        vec![env("NVIDIA_VISIBLE_DEVICES", "void")]
                    )]),
                    Value::Null,
                ),
            ),
            true,
            "",
        ),
        (
            "NVIDIA_VISIBLE_DEVICES=none hides every GPU",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container(
                        "cpu",
                        vec![env("NVIDIA_VISIBLE_DEVICES", "none")]
                    )]),
                    Value::Null,
                ),
            ),
            true,
            "",
        ),
        (
            "an empty CUDA_VISIBLE_DEVICES hides every GPU (the API server omits empty values)",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container(
                        "cpu",
                        vec![json!({"name": "CUDA_VISIBLE_DEVICES"})]
                    )]),
                    Value::Null,
                ),
            ),
            true,
            "",
        ),
        (
            "CUDA_VISIBLE_DEVICES=-1 hides every GPU",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container("cpu", vec![env("CUDA_VISIBLE_DEVICES", "-1")])]),
                    Value::Null,
                ),
            ),
            true,
            "",
        ),
        (
            "NVIDIA_VISIBLE_DEVICES empty is not a documented 'no GPU'",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container(
                        "c",
                        vec![json!({"name": "NVIDIA_VISIBLE_DEVICES"})]
                    )]),
                    Value::Null,
                ),
            ),
            false,
            "container c",
        ),
        (
            "an ordinary pod",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container("web", vec![env("PORT", "8080")])]),
                    Value::Null,
                ),
            ),
            true,
            "",
        ),
        (
            "a pod without env",
            create_pod(
                USER,
                pod(
                    "ml",
                    "default",
                    json!([container("web", vec![])]),
                    Value::Null,
                ),
            ),
            true,
            "",
        ),
        (
            "a user's pod borrowing a task pod's ResourceClaim",
            create_pod(USER, with_claims(&["train-0-gpus"])),
            false,
            "resource claim train-0-gpus is a Muster task claim",
        ),
        (
            "the operator's task pod with its claim",
            create_pod(OPERATOR, with_claims(&["train-0-gpus"])),
            true,
            "",
        ),
        (
            "a user's pod with a claim of its own",
            create_pod(USER, with_claims(&["my-a100"])),
            true,
            "",
        ),
        (
            "the node agent's own pod (daemon set controller, agent account, release namespace)",
            create_pod(
                "system:serviceaccount:kube-system:daemon-set-controller",
                pod(
                    NAMESPACE,
                    "muster-node-agent",
                    json!([container(
                        "node-agent",
                        vec![env("NVIDIA_VISIBLE_DEVICES", "all")]
                    )]),
                    Value::Null,
                ),
            ),
            true,
            "",
        ),
        (
            "the agent's account name in another namespace is no exemption",
            create_pod(
                USER,
                pod(
                    "ml",
                    "muster-node-agent",
                    json!([container("x", vec![env("NVIDIA_VISIBLE_DEVICES", "all")])]),
                    Value::Null,
                ),
            ),
            false,
            "container x",
        ),
        (
            "another account in the release namespace is no exemption",
            create_pod(
                USER,
                pod(
                    NAMESPACE,
                    "default",
                    json!([container("x", vec![env("NVIDIA_VISIBLE_DEVICES", "all")])]),
                    Value::Null,
                ),
            ),
            false,
            "container x",
        ),
        (
            "GPU infrastructure namespaces are exempt (GPU Operator validator)",
            create_pod(
                "system:serviceaccount:kube-system:daemon-set-controller",
                pod(
                    "gpu-operator",
                    "nvidia-operator-validator",
                    json!([container(
                        "cuda-validation",
                        vec![env("NVIDIA_VISIBLE_DEVICES", "all")]
                    )]),
                    Value::Null,
                ),
            ),
            true,
            "",
        ),
    ];
    for (what, req, admitted, words) in cases {
        let full = p.decide(&FullEngine, &req);
        let vap = p.decide(&VapEngine, &req);
        assert_eq!(full, vap, "{what}: the engines disagree");
        assert_eq!(full.admitted(), admitted, "{what}: {full:?}");
        assert!(full.message().contains(words), "{what}: {}", full.message());
    }

    // kubectl debug adds an ephemeral container through the subresource (an UPDATE).
    let mut debugged = pod(
        "ml",
        "default",
        json!([container("task", vec![])]),
        Value::Null,
    );
    let old = debugged.clone();
    debugged["spec"]["ephemeralContainers"] = json!([{"name": "debugger", "image": "busybox", "env": [env("NVIDIA_VISIBLE_DEVICES", "all")]}]);
    let req = Req {
        operation: "UPDATE",
        sub_resource: "ephemeralcontainers",
        old_object: old.clone(),
        ..create_pod(USER, debugged)
    };
    for engine in [&FullEngine as &dyn Engine, &VapEngine] {
        let out = p.decide(engine, &req);
        assert!(
            out.message().contains("ephemeral container debugger"),
            "{out:?}"
        );
    }

    // Other updates of an operator-made pod (labels, GC removing owner references) are not
    // admissions of new env: they do not match.
    let mut relabelled = task(OPERATOR).object;
    relabelled["metadata"]["labels"] = json!({"debug": "true"});
    let req = Req {
        operation: "UPDATE",
        old_object: task(OPERATOR).object,
        ..create_pod(
            "system:serviceaccount:kube-system:generic-garbage-collector",
            relabelled,
        )
    };
    assert_eq!(p.decide(&FullEngine, &req), Outcome::NotMatched);
}

#[test]
fn gpu_binding_policy_follows_the_release_and_values() {
    // Another release and namespace: the exempt accounts follow.
    let Some(r) = render_as(json!({}), "gpu-sched", "batch-system") else {
        return;
    };
    let p = policy(&r.unwrap(), "gpu-sched-muster-gpu-binding");
    let gpus = json!([container(
        "task",
        vec![env("NVIDIA_VISIBLE_DEVICES", "GPU-1")]
    )]);
    let new_op = "system:serviceaccount:batch-system:gpu-sched-muster-operator";
    assert_eq!(
        p.decide(
            &FullEngine,
            &create_pod(new_op, pod("ml", "default", gpus.clone(), Value::Null))
        ),
        Outcome::NotMatched
    );
    assert!(
        !p.decide(
            &FullEngine,
            &create_pod(OPERATOR, pod("ml", "default", gpus.clone(), Value::Null))
        )
        .admitted(),
        "the default release's operator account is no one here"
    );
    let agent_pod = pod(
        "batch-system",
        "gpu-sched-muster-node-agent",
        json!([container(
            "node-agent",
            vec![env("NVIDIA_VISIBLE_DEVICES", "all")]
        )]),
        Value::Null,
    );
    assert_eq!(
        p.decide(
            &VapEngine,
            &create_pod(
                "system:serviceaccount:kube-system:daemon-set-controller",
                agent_pod
            )
        ),
        Outcome::NotMatched
    );

    // Without exempt namespaces, the GPU Operator's pods are checked too; without the node
    // agent, its exemption is gone.
    let Some(r) = render(json!({
        "admissionPolicies": {"gpuBinding": {"exemptNamespaces": []}},
        "nodeAgent": {"enabled": false}
    })) else {
        return;
    };
    let p = policy(&r, "muster-gpu-binding");
    assert!(p.binding["spec"]["matchResources"].is_null());
    let validator = pod(
        "gpu-operator",
        "v",
        json!([container("c", vec![env("NVIDIA_VISIBLE_DEVICES", "all")])]),
        Value::Null,
    );
    assert!(
        !p.decide(&FullEngine, &create_pod(USER, validator))
            .admitted()
    );
    let agent_pod = pod(NAMESPACE, "muster-node-agent", gpus, Value::Null);
    assert!(
        !p.decide(&VapEngine, &create_pod(USER, agent_pod))
            .admitted()
    );
}

//! The kubelet's exec mode: pods run as real processes with their own host names, loopback
//! addresses, cluster DNS, volumes, environment and logs; init containers first; deletion
//! sends SIGTERM then SIGKILL; exit codes are reported as Kubernetes reports them.

mod testcluster_common;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, PostParams};
use muster_e2e::exec::ExecOptions;
use muster_e2e::{TestCluster, TestClusterOptions};
use serde_json::{Value, json};
use testcluster_common::*;

async fn exec_cluster(images: Vec<(String, PathBuf)>) -> TestCluster {
    exec_cluster_with(ExecOptions {
        images,
        ..ExecOptions::default()
    })
    .await
}

async fn exec_cluster_with(exec: ExecOptions) -> TestCluster {
    let mut o = TestClusterOptions::new(spec());
    o.exec = Some(exec);
    TestCluster::simulated(o)
        .await
        .expect("exec-mode cluster starts")
}

fn shell_pod(name: &str, script: &str, extra: Value) -> Pod {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "exec-test"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "debian:bookworm", "command": ["/bin/bash", "-c", script]}],
        }
    });
    if let (Some(dst), Value::Object(src)) = (p["spec"].as_object_mut(), extra) {
        for (k, v) in src {
            if k == "containers0" {
                if let (Some(c), Value::Object(m)) = (dst["containers"][0].as_object_mut(), v) {
                    c.extend(m);
                }
            } else {
                dst.insert(k, v);
            }
        }
    }
    serde_json::from_value(p).expect("pod")
}

async fn finished(pods: &Api<Pod>, name: &str, secs: u64) -> Pod {
    wait(pods, name, "finished", Duration::from_secs(secs), |p| {
        p.is_some_and(|p| matches!(phase(p), "Succeeded" | "Failed"))
    })
    .await
    .expect("pod exists")
}

async fn log(pods: &Api<Pod>, name: &str, container: &str) -> String {
    pods.logs(
        name,
        &kube::api::LogParams {
            container: Some(container.into()),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("logs of {name}/{container}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_with_its_name_address_environment_volumes_and_log() {
    let c = exec_cluster(Vec::new()).await;
    let ns = namespace(&c, "exec-basic").await;
    let secrets: Api<Secret> = Api::namespaced(c.client(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
            "metadata": {"name": "cred"}, "stringData": {"token": "s3cr3t"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.client(), &ns);
    cms.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "cfg"}, "data": {"greeting": "hello from a configmap", "MODE": "fast"}})).unwrap())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let script = r#"
        echo "host=$(hostname) HOSTNAME=$HOSTNAME"
        echo "ip=$MY_IP name=$MY_NAME token=$TOKEN mode=$CFG_MODE ref=$REF"
        cat /config/greeting; echo
        grep -v '^#' /etc/hosts | tail -n 1
        cat /etc/resolv.conf
        echo to-stderr >&2
        echo "pid1=$(cat /proc/1/comm) tmp=$(ls -A /tmp | wc -l)"
        exit 3"#;
    let p = shell_pod(
        "basic",
        script,
        json!({
            "hostname": "worker-0", "subdomain": "grp",
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
            "containers0": {
                "env": [
                    {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "cred", "key": "token"}}},
                    {"name": "REF", "value": "$(MY_NAME)-x"},
                ],
                "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
                "volumeMounts": [{"name": "cfg", "mountPath": "/config"}],
            }
        }),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    let done = finished(&pods, "basic", 30).await;
    assert_eq!(phase(&done), "Failed");
    let t = terminated(&done).unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    let ip = done.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(ip.starts_with("127."), "{ip}");
    let out = log(&pods, "basic", "main").await;
    assert!(out.contains("host=worker-0 HOSTNAME=worker-0"), "{out}");
    assert!(
        out.contains(&format!(
            "ip={ip} name=basic token=s3cr3t mode=fast ref=basic-x"
        )),
        "{out}"
    );
    assert!(out.contains("hello from a configmap"), "{out}");
    assert!(
        out.contains(&format!(
            "{ip}\tworker-0.grp.{ns}.svc.cluster.local\tworker-0"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "search {ns}.svc.cluster.local svc.cluster.local cluster.local"
        )),
        "{out}"
    );
    assert!(out.contains("options ndots:5"), "{out}");
    assert!(out.contains("to-stderr"), "{out}");
    assert!(
        out.contains("pid1=bash tmp=0"),
        "PID 1 is the command, /tmp is the container's: {out}"
    );
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_first_and_image_files_appear_in_the_container() {
    let img = tempfile::tempdir().unwrap();
    let bin = img.path().join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("hello-tool"), "#!/bin/sh\necho \"tool says $1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        bin.join("hello-tool"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert!(!std::path::Path::new("/usr/local/bin/hello-tool").exists());
    let c = exec_cluster(vec![(
        "registry.example/tools".into(),
        img.path().to_path_buf(),
    )])
    .await;
    let ns = namespace(&c, "exec-init").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "init"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "bin", "emptyDir": {}}],
            "initContainers": [
                {"name": "copy", "image": "registry.example/tools:1.0",
                 "command": ["sh", "-c", "cp /usr/local/bin/hello-tool /opt/tools/ && echo copied"],
                 "volumeMounts": [{"name": "bin", "mountPath": "/opt/tools"}]},
                {"name": "second", "image": "busybox", "command": ["sh", "-c", "test -x /opt/tools/hello-tool && echo second"],
                 "volumeMounts": [{"name": "bin", "mountPath": "/opt/tools"}]},
            ],
            "containers": [{"name": "main", "image": "busybox",
                "command": ["sh", "-c", "/opt/tools/hello-tool main; test -e /usr/local/bin/hello-tool || echo not-in-main"],
                "volumeMounts": [{"name": "bin", "mountPath": "/opt/tools"}]}],
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let done = finished(&pods, "init", 30).await;
    assert_eq!(phase(&done), "Succeeded", "{done:#?}");
    let inits = done
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .clone()
        .unwrap();
    assert_eq!(inits.len(), 2);
    assert!(inits.iter().all(|s| {
        s.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code
            == 0
    }));
    assert_eq!(log(&pods, "init", "copy").await, "copied\n");
    assert_eq!(log(&pods, "init", "second").await, "second\n");
    assert_eq!(
        log(&pods, "init", "main").await,
        "tool says main\nnot-in-main\n"
    );
    assert!(
        !std::path::Path::new("/usr/local/bin/hello-tool").exists(),
        "the host is untouched"
    );
    assert!(
        !std::path::Path::new("/opt/tools").exists(),
        "the host is untouched"
    );
    // A failing init container fails the pod; the containers never start.
    let bad: Pod = serde_json::from_value(json!({
        "metadata": {"name": "badinit"},
        "spec": {"restartPolicy": "Never",
            "initContainers": [{"name": "fail", "image": "x", "command": ["sh", "-c", "exit 7"]}],
            "containers": [{"name": "main", "image": "x", "command": ["sh", "-c", "echo never"]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &bad).await.unwrap();
    let done = finished(&pods, "badinit", 30).await;
    assert_eq!(phase(&done), "Failed");
    let st = done.status.as_ref().unwrap();
    let init = st.init_container_statuses.as_ref().unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(init.exit_code, 7);
    let main = st.container_statuses.as_ref().unwrap()[0]
        .state
        .clone()
        .unwrap();
    assert_eq!(
        main.waiting.unwrap().reason.as_deref(),
        Some("PodInitializing")
    );
    assert_eq!(condition(&done, "Initialized").unwrap().status, "False");
    cleanup(&c, &ns).await;
}

/// A root image is the container's whole file system, as an image `FROM scratch` is: a
/// statically linked program in it runs, the host's shell does not exist there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_image_is_all_the_container_sees() {
    // Debian's ldconfig is linked statically (static-pie): it needs nothing from the image.
    let ldconfig = ["/usr/sbin/ldconfig", "/sbin/ldconfig"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("ldconfig (libc-bin) on the host");
    let img = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(img.path().join("sbin")).unwrap();
    std::fs::copy(ldconfig, img.path().join("sbin/ldconfig")).unwrap();
    let c = exec_cluster_with(ExecOptions {
        root_images: vec![("scratch.example/static".into(), img.path().to_path_buf())],
        ..ExecOptions::default()
    })
    .await;
    let ns = namespace(&c, "exec-root").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let pod = |name: &str, command: Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "scratch.example/static:1", "command": command}]}
        }))
        .unwrap()
    };
    pods.create(
        &PostParams::default(),
        &pod("static", json!(["/sbin/ldconfig", "--version"])),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("shell", json!(["/bin/sh", "-c", "true"])),
    )
    .await
    .unwrap();
    let done = finished(&pods, "static", 30).await;
    assert_eq!(phase(&done), "Succeeded", "{done:#?}");
    assert!(
        log(&pods, "static", "main").await.starts_with("ldconfig "),
        "{:?}",
        log(&pods, "static", "main").await
    );
    let done = finished(&pods, "shell", 30).await;
    assert_eq!(phase(&done), "Failed", "{done:#?}");
    let st = done
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(st.reason.as_deref(), Some("StartError"), "{st:?}");
    assert!(st.message.unwrap_or_default().contains("/bin/sh"));
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_find_each_other_by_name_and_share_claims() {
    let c = exec_cluster(Vec::new()).await;
    let ns = namespace(&c, "exec-dns").await;
    let svcs: Api<Service> = Api::namespaced(c.client(), &ns);
    svcs.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "grp"},
        "spec": {"clusterIP": "None", "selector": {"app": "exec-test"}, "publishNotReadyAddresses": true}})).unwrap())
        .await
        .unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    pvcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
        "metadata": {"name": "shared"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let common = |host: &str| {
        json!({
            "hostname": host, "subdomain": "grp",
            "dnsConfig": {"searches": [format!("grp.{ns}.svc.cluster.local")]},
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}],
            "containers0": {"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
        })
    };
    // b waits for a's file on the shared claim, then looks a up by its short name. As with
    // CoreDNS, a's name is served once the API has a's address, which may come a moment after
    // a's process has started: b waits (a minute at most) for it, and for the Service to list
    // both pods, as a workload's rendezvous retries. a runs until b is done (a finished pod
    // has no name), however slowly a loaded machine runs b.
    pods.create(
        &PostParams::default(),
        &shell_pod(
            "b",
            r#"
        for i in $(seq 1 1200); do test -f /data/from-a && break; sleep 0.05; done
        for i in $(seq 1 1200); do
          getent hosts node-a >/dev/null &&
            [ "$(getent ahostsv4 grp | awk '{print $1}' | sort -u | wc -l)" = 2 ] && break
          sleep 0.05
        done
        echo "file: $(cat /data/from-a)"
        echo "a is $(getent hosts node-a | awk '{print $1}')"
        echo "fqdn $(getent hosts node-a.grp.$NS.svc.cluster.local | awk '{print $1}')"
        echo "svc $(getent ahostsv4 grp | awk '{print $1}' | sort -u | tr '\n' ' ')"
        getent hosts nosuch-host || echo "nosuch: not found"
        echo "me $(hostname -f)"
        touch /data/b-done
    "#
            .replace("$NS", &ns)
            .as_str(),
            common("node-b"),
        ),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &shell_pod(
            "a",
            "echo written-by-a > /data/from-a; \
             for i in $(seq 1 1200); do test -f /data/b-done && break; sleep 0.05; done",
            common("node-a"),
        ),
    )
    .await
    .unwrap();
    let b = finished(&pods, "b", 90).await;
    let a = pods.get("a").await.unwrap();
    let a_ip = a.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let b_ip = b.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let out = log(&pods, "b", "main").await;
    assert_eq!(phase(&b), "Succeeded", "{out}");
    assert!(out.contains("file: written-by-a"), "{out}");
    assert!(out.contains(&format!("a is {a_ip}\n")), "{out}");
    assert!(out.contains(&format!("fqdn {a_ip}\n")), "{out}");
    let mut both = [a_ip.clone(), b_ip.clone()];
    both.sort();
    assert!(
        out.contains(&format!("svc {} {} \n", both[0], both[1])),
        "{out}"
    );
    assert!(out.contains("nosuch: not found"), "{out}");
    assert!(
        out.contains(&format!("me node-b.grp.{ns}.svc.cluster.local")),
        "{out}"
    );
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_sends_sigterm_then_sigkill_at_the_grace_period() {
    let c = exec_cluster(Vec::new()).await;
    let ns = namespace(&c, "exec-term").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    // A process that exits on SIGTERM; one that ignores it (its children too). As in a real
    // container, the command is PID 1 of its namespace: a signal without a handler would be
    // ignored, so the polite one traps it.
    pods.create(
        &PostParams::default(),
        &shell_pod(
            "polite",
            "trap 'echo got-term; exit 143' TERM; echo up; sleep 1000 & wait",
            json!({}),
        ),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &shell_pod(
            "stubborn",
            "trap '' TERM; echo up; sleep 1000 & wait; sleep 1000",
            json!({"terminationGracePeriodSeconds": 1}),
        ),
    )
    .await
    .unwrap();
    for n in ["polite", "stubborn"] {
        wait(&pods, n, "Running", Duration::from_secs(30), |p| {
            p.is_some_and(|p| phase(p) == "Running")
        })
        .await;
        // "up" is printed once the shell has set its trap: a SIGTERM before that would end
        // the stubborn pod at once (143), not at the grace period.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !log(&pods, n, "main").await.contains("up") {
            assert!(std::time::Instant::now() < deadline, "{n} never printed up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Watch from the list's resourceVersion *before* deleting: a watch opened afterwards
    // can miss the polite pod's whole termination (it may be gone by then).
    let rv = pods
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .expect("a list carries its resourceVersion");
    let mut w = pods
        .watch(&kube::api::WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let t0 = std::time::Instant::now();
    for n in ["polite", "stubborn"] {
        pods.delete(n, &DeleteParams::default()).await.unwrap();
    }
    let mut seen = std::collections::BTreeMap::new();
    use futures::StreamExt;
    while seen.len() < 2 && t0.elapsed() < Duration::from_secs(60) {
        let Ok(Some(Ok(ev))) = tokio::time::timeout(Duration::from_secs(60), w.next()).await else {
            break;
        };
        if let kube::api::WatchEvent::Modified(p) | kube::api::WatchEvent::Deleted(p) = ev
            && let Some(t) = terminated(&p)
        {
            seen.entry(name_of(&p))
                .or_insert((t.exit_code, t0.elapsed()));
        }
    }
    let (polite, _) = *seen.get("polite").unwrap_or_else(|| panic!("{seen:?}"));
    let (stubborn, t_stubborn) = *seen.get("stubborn").unwrap_or_else(|| panic!("{seen:?}"));
    // Its own exit on SIGTERM (at its 30 s grace period it would be killed: 137).
    assert_eq!(polite, 143, "{seen:?}");
    assert_eq!(stubborn, 137, "killed at the grace period: {seen:?}");
    assert!(t_stubborn >= Duration::from_millis(900), "{seen:?}");
    // And both pods are gone.
    for n in ["polite", "stubborn"] {
        wait(&pods, n, "deleted", Duration::from_secs(10), |p| {
            p.is_none()
        })
        .await;
    }
    cleanup(&c, &ns).await;
}

/// As with the kubelet, a running pod's downwardAPI files (plain and projected) follow its
/// annotations and labels; a file mounted by `subPath` keeps what it was started with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downward_api_files_follow_the_pods_metadata() {
    let c = exec_cluster(Vec::new()).await;
    let ns = namespace(&c, "exec-downward").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    // Prints each value of the annotation it sees; done (0) once the annotation and the label
    // have their new values, failing (1) after a minute without them.
    let script = r#"
        last=""
        for i in $(seq 1 1200); do
          v=$(cat /meta/x)
          if [ "$v" != "$last" ]; then echo "x=$v"; last=$v; fi
          if [ "$v" = second ] && grep -q 'stage="two"' /proj/labels; then
            echo "sub=$(cat /sub/x)"
            exit 0
          fi
          sleep 0.05
        done
        exit 1"#;
    let mut p = shell_pod(
        "watcher",
        script,
        json!({
            "volumes": [
                {"name": "meta", "downwardAPI": {"items": [
                    {"path": "x", "fieldRef": {"fieldPath": "metadata.annotations['example.com/x']"}}]}},
                {"name": "proj", "projected": {"sources": [{"downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}},
            ],
            "containers0": {"volumeMounts": [
                {"name": "meta", "mountPath": "/meta"},
                {"name": "proj", "mountPath": "/proj"},
                {"name": "meta", "mountPath": "/sub/x", "subPath": "x"},
            ]},
        }),
    );
    p.metadata.annotations = Some([("example.com/x".into(), "first".into())].into());
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("stage".into(), "one".into());
    pods.create(&PostParams::default(), &p).await.unwrap();
    // The container has read the first value before the pod changes.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = pods
            .logs("watcher", &Default::default())
            .await
            .unwrap_or_default();
        if out.contains("x=first\n") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never read: {out:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pods.patch(
        "watcher",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {
            "annotations": {"example.com/x": "second"},
            "labels": {"stage": "two"},
        }})),
    )
    .await
    .unwrap();
    let done = finished(&pods, "watcher", 90).await;
    let out = log(&pods, "watcher", "main").await;
    assert_eq!(phase(&done), "Succeeded", "{out}");
    assert_eq!(out, "x=first\nx=second\nsub=first\n");
    cleanup(&c, &ns).await;
}

//! A fixed cluster: partitions, nodes, GPU inventories and jobs in every state, as of
//! 2024-05-01T10:05:03Z.
#![allow(dead_code)]

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use muster_crds::v1alpha1::*;

/// "Now" for every fixture.
pub fn now() -> Timestamp {
    "2024-05-01T10:05:03Z".parse().unwrap()
}

fn t(s: &str) -> Option<Time> {
    Some(Time(format!("2024-05-01T{s}Z").parse().unwrap()))
}

fn meta(ns: &str, name: &str, user: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(ns.into()),
        name: Some(name.into()),
        annotations: Some(BTreeMap::from([(
            "muster.dev/user".to_string(),
            user.to_string(),
        )])),
        creation_timestamp: t("09:00:00"),
        ..Default::default()
    }
}

fn tasks(per_node: &[(&str, u32, u64)]) -> Vec<TaskAllocation> {
    per_node
        .iter()
        .enumerate()
        .map(|(i, (node, gpus, cpu))| TaskAllocation {
            rank: i as u32,
            node: node.to_string(),
            node_rank: i as u32,
            local_rank: 0,
            cpu_millis: *cpu,
            memory_mib: 1024,
            gpus: (0..*gpus).collect(),
            gpu_uuids: Vec::new(),
            pod: Some(format!("pod-{i}")),
        })
        .collect()
}

/// The jobs.
pub fn jobs() -> Vec<BatchJob> {
    let mut v = Vec::new();

    let mut j = BatchJob::new(
        "train-abcde",
        BatchJobSpec {
            partition: Some("gpu".into()),
            job_name: Some("train".into()),
            nodes: Some(IntOrString::Int(2)),
            ntasks_per_node: Some(1),
            gpus_per_node: Some(IntOrString::Int(8)),
            cpus_per_task: Some(8),
            time: Some(IntOrString::Int(60)),
            exclusive: Some(muster_crds::v1alpha1::Exclusive::Node),
            ..Default::default()
        },
    );
    j.metadata = meta("team-a", "train-abcde", "alice");
    j.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("muster.dev/output".into(), "train-%j.out".into());
    j.status = Some(BatchJobStatus {
        job_id: Some(101),
        state: Some(JobState::Running),
        reason: Some("None".into()),
        partition: Some("gpu".into()),
        time_limit: Some("1:00:00".into()),
        node_list: Some("gpu[001-002]".into()),
        num_nodes: Some(2),
        num_tasks: Some(2),
        num_gpus: Some(16),
        num_cpus: Some(16),
        tasks: tasks(&[("gpu001", 8, 8000), ("gpu002", 8, 8000)]),
        submit_time: t("09:59:00"),
        eligible_time: t("09:59:00"),
        start_time: t("10:00:00"),
        ..Default::default()
    });
    v.push(j);

    let mut j = BatchJob::new(
        "gpus-per-task-test-xyz12",
        BatchJobSpec {
            partition: Some("gpu".into()),
            job_name: Some("gpus_per_task_test".into()),
            nodes: Some(IntOrString::Int(2)),
            ntasks_per_node: Some(2),
            gpus_per_task: Some(IntOrString::Int(1)),
            time: Some(IntOrString::String("00:10:00".into())),
            nodelist: Some("gpu[003-004]".into()),
            exclude: Some("gpu007".into()),
            exclusive: Some(muster_crds::v1alpha1::Exclusive::User),
            ..Default::default()
        },
    );
    j.metadata = meta("team-a", "gpus-per-task-test-xyz12", "alice");
    j.status = Some(BatchJobStatus {
        job_id: Some(102),
        state: Some(JobState::Pending),
        reason: Some("Resources".into()),
        partition: Some("gpu".into()),
        time_limit: Some("10:00".into()),
        num_nodes: Some(2),
        num_tasks: Some(4),
        num_gpus: Some(4),
        num_cpus: Some(4),
        submit_time: t("10:01:00"),
        start_time: t("10:30:00"),
        ..Default::default()
    });
    v.push(j);

    let mut j = BatchJob::new(
        "eval-q1w2e",
        BatchJobSpec {
            job_name: Some("eval".into()),
            dependency: Some("afterok:101".into()),
            ..Default::default()
        },
    );
    j.metadata = meta("team-a", "eval-q1w2e", "bob");
    j.status = Some(BatchJobStatus {
        job_id: Some(103),
        state: Some(JobState::Pending),
        reason: Some("Dependency".into()),
        partition: Some("gpu".into()),
        submit_time: t("10:02:00"),
        ..Default::default()
    });
    v.push(j);

    let mut j = BatchJob::new(
        "done-zzzzz",
        BatchJobSpec {
            partition: Some("gpu".into()),
            job_name: Some("done".into()),
            ..Default::default()
        },
    );
    j.metadata = meta("team-a", "done-zzzzz", "alice");
    j.status = Some(BatchJobStatus {
        job_id: Some(104),
        state: Some(JobState::Completed),
        reason: Some("None".into()),
        partition: Some("gpu".into()),
        time_limit: Some("UNLIMITED".into()),
        node_list: Some("gpu006".into()),
        num_nodes: Some(1),
        num_cpus: Some(1),
        num_tasks: Some(1),
        exit_code: Some(0),
        submit_time: t("09:00:00"),
        start_time: t("09:00:05"),
        end_time: t("09:30:10"),
        ..Default::default()
    });
    v.push(j);

    let mut j = BatchJob::new(
        "verylongjobname-aaaaa",
        BatchJobSpec {
            partition: Some("interactive".into()),
            job_name: Some("verylongjobname".into()),
            cpus_per_task: Some(4),
            ..Default::default()
        },
    );
    j.metadata = meta("team-b", "verylongjobname-aaaaa", "christopher");
    j.status = Some(BatchJobStatus {
        job_id: Some(105),
        state: Some(JobState::Running),
        reason: Some("None".into()),
        partition: Some("interactive".into()),
        time_limit: Some("2:00:00".into()),
        node_list: Some("gpu005".into()),
        num_nodes: Some(1),
        num_cpus: Some(4),
        num_tasks: Some(1),
        tasks: tasks(&[("gpu005", 0, 4000)]),
        submit_time: t("08:59:00"),
        start_time: t("09:00:00"),
        ..Default::default()
    });
    v.push(j);

    let mut j = BatchJob::new(
        "crash-ccccc",
        BatchJobSpec {
            partition: Some("gpu".into()),
            job_name: Some("crash".into()),
            gres: Some("gpu:a100:2".into()),
            ..Default::default()
        },
    );
    j.metadata = meta("team-a", "crash-ccccc", "alice");
    j.status = Some(BatchJobStatus {
        job_id: Some(106),
        state: Some(JobState::Failed),
        reason: Some("NonZeroExitCode".into()),
        partition: Some("gpu".into()),
        time_limit: Some("30:00".into()),
        node_list: Some("gpu006".into()),
        num_nodes: Some(1),
        num_cpus: Some(1),
        num_tasks: Some(1),
        num_gpus: Some(2),
        exit_code: Some(3),
        exit_signal: Some(0),
        submit_time: t("09:40:00"),
        start_time: t("09:41:00"),
        end_time: t("09:43:30"),
        ..Default::default()
    });
    v.push(j);

    let mut j = BatchJob::new(
        "cancelled-ddddd",
        BatchJobSpec {
            partition: Some("gpu".into()),
            job_name: Some("oops".into()),
            cancel: Some(true),
            ..Default::default()
        },
    );
    j.metadata = meta("team-a", "cancelled-ddddd", "alice");
    j.status = Some(BatchJobStatus {
        job_id: Some(107),
        state: Some(JobState::Cancelled),
        reason: Some("None".into()),
        partition: Some("gpu".into()),
        num_nodes: Some(1),
        num_cpus: Some(1),
        num_tasks: Some(1),
        exit_code: Some(0),
        exit_signal: Some(15),
        submit_time: t("10:03:00"),
        end_time: t("10:03:30"),
        ..Default::default()
    });
    v.push(j);

    // An array of 16, at most 4 at once: 0 and 1 run, 2 waits, 3-15 not created yet.
    let mut j = BatchJob::new(
        "sweep-sssss",
        BatchJobSpec {
            partition: Some("gpu".into()),
            job_name: Some("sweep".into()),
            array: Some(IntOrString::String("0-15%4".into())),
            gres: Some("gpu:1".into()),
            ..Default::default()
        },
    );
    j.metadata = meta("team-a", "sweep-sssss", "alice");
    j.status = Some(BatchJobStatus {
        job_id: Some(110),
        state: Some(JobState::Pending),
        reason: Some("JobArrayTaskLimit".into()),
        partition: Some("gpu".into()),
        submit_time: t("10:03:50"),
        array_tasks: Some(ArrayTaskSummary {
            total: 16,
            pending: 14,
            running: 2,
            ..Default::default()
        }),
        ..Default::default()
    });
    v.push(j);
    for (idx, id, state, node) in [
        (0u32, 111u64, JobState::Running, Some("gpu003")),
        (1, 112, JobState::Running, Some("gpu004")),
        (2, 113, JobState::Pending, None),
    ] {
        let name = format!("sweep-sssss-{idx}");
        let mut e = BatchJob::new(
            &name,
            BatchJobSpec {
                partition: Some("gpu".into()),
                job_name: Some("sweep".into()),
                gres: Some("gpu:1".into()),
                ..Default::default()
            },
        );
        e.metadata = meta("team-a", &name, "alice");
        e.metadata.labels = Some(BTreeMap::from([
            (
                "muster.dev/array-parent".to_string(),
                "sweep-sssss".to_string(),
            ),
            ("muster.dev/array-task-id".to_string(), idx.to_string()),
        ]));
        e.status = Some(BatchJobStatus {
            job_id: Some(id),
            array_job_id: Some(110),
            array_task_id: Some(idx),
            state: Some(state),
            reason: Some(
                if node.is_some() {
                    "None"
                } else {
                    "JobArrayTaskLimit"
                }
                .into(),
            ),
            partition: Some("gpu".into()),
            node_list: node.map(str::to_string),
            num_nodes: Some(1),
            num_cpus: Some(1),
            num_tasks: Some(1),
            num_gpus: Some(1),
            tasks: node.map(|n| tasks(&[(n, 1, 1000)])).unwrap_or_default(),
            submit_time: t("10:03:50"),
            start_time: node.and(t("10:04:00")),
            ..Default::default()
        });
        v.push(e);
    }
    v
}

fn node(name: &str, pool: &str, ready: bool, cordoned: bool, features: &[&str]) -> Node {
    let mut labels = BTreeMap::from([
        ("pool".to_string(), pool.to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("kubernetes.io/hostname".to_string(), name.to_string()),
        ("muster.dev/gpu.count".to_string(), "8".to_string()),
        (
            "muster.dev/gpu.product".to_string(),
            "NVIDIA-H100-80GB-HBM3".to_string(),
        ),
    ]);
    for f in features {
        labels.insert(format!("muster.dev/feature.{f}"), "true".to_string());
    }
    let q = |s: &str| Quantity(s.to_string());
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: cordoned.then_some(true),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(BTreeMap::from([
                ("cpu".to_string(), q("96")),
                ("memory".to_string(), q("1056000Mi")),
                ("nvidia.com/gpu".to_string(), q("8")),
            ])),
            capacity: Some(BTreeMap::from([("nvidia.com/gpu".to_string(), q("8"))])),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "Unknown" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// The nodes: gpu001-008 (pool gpu except gpu005, pool interactive).
pub fn nodes() -> Vec<Node> {
    vec![
        node("gpu001", "gpu", true, false, &["ib", "nvlink"]),
        node("gpu002", "gpu", true, false, &["ib", "nvlink"]),
        node("gpu003", "gpu", true, false, &["ib", "nvlink"]),
        node("gpu004", "gpu", true, false, &["ib", "nvlink"]),
        node("gpu005", "interactive", true, false, &[]),
        node("gpu006", "gpu", true, false, &["ib", "nvlink"]),
        node("gpu007", "gpu", false, false, &["ib", "nvlink"]),
        node("gpu008", "gpu", true, true, &["ib", "nvlink"]),
    ]
}

fn partition(name: &str, pool: &str, default: bool, max_time: Option<IntOrString>) -> Partition {
    let mut p = Partition::new(
        name,
        PartitionSpec {
            node_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("pool".to_string(), pool.to_string())])),
                ..Default::default()
            }),
            default: default.then_some(true),
            max_time,
            ..Default::default()
        },
    );
    p.metadata.name = Some(name.into());
    p
}

/// The partitions: gpu (default, 1 day), interactive (1 hour), debug (no nodes).
pub fn partitions() -> Vec<Partition> {
    let mut debug = partition("debug", "debug", false, None);
    debug.spec.state = Some(PartitionState::Down);
    debug.spec.max_nodes = Some(2);
    vec![
        partition(
            "gpu",
            "gpu",
            true,
            Some(IntOrString::String("1-00:00:00".into())),
        ),
        partition(
            "interactive",
            "interactive",
            false,
            Some(IntOrString::Int(60)),
        ),
        debug,
    ]
}

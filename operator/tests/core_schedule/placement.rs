//! Where a started job goes: GPUs, nodes, leaves and switches chosen for its request
//! (shapes, constraints, GPU binding, CPU and memory limits).

use super::*;

#[test]
fn single_gpu_job_takes_one_gpu_on_the_first_node() {
    let mut s = sandbox();
    s.pending.push(PendingJob::new(1, NOW, JobRequest::gpus(1)));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(names(&s, &st.nodes), ["gpu001"]);
    assert_eq!(st.tasks.len(), 1);
    assert_eq!(st.tasks[0].gpus, [0]);
    assert_eq!(st.tasks[0].rank, 0);
    assert_eq!(st.leaves, 1);
    assert_eq!(st.node_names(&s), ["gpu001"]);
    assert_eq!(
        st.tasks[0].gpu_uuids(&s),
        [cluster_spec::gpu_uuid("gpu001", 0)]
    );
}

#[test]
fn gang_that_fits_one_leaf_is_never_spread() {
    // 4 leaves x 4 nodes. Leaf 1 has 2 free nodes, leaf 2 has 4: greedy first fit in node
    // order would take gpu003, gpu004 (leaf 1) and gpu005, gpu006 (leaf 2).
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001", "gpu002"], 8, None);
    busy(
        &mut s,
        101,
        &["gpu009", "gpu010", "gpu011", "gpu012"],
        8,
        None,
    );
    busy(&mut s, 102, &["gpu013", "gpu014", "gpu015"], 8, None);
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(4, 8).exclusive()));
    // A later 2-node job then finds leaf 1's two nodes whole.
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::nodes(2, 8)));
    let d = schedule(&s, NOW, &Config::default());
    let a = started(&d, 1);
    assert_eq!(
        names(&s, &a.nodes),
        ["gpu005", "gpu006", "gpu007", "gpu008"]
    );
    assert_eq!(a.leaves, 1);
    let b = started(&d, 2);
    assert_eq!(names(&s, &b.nodes), ["gpu003", "gpu004"]);
    assert_eq!(b.leaves, 1);
}

#[test]
fn best_fit_leaf_keeps_empty_leaves_whole() {
    // Leaf 1: 1 free node; leaf 2: 3 free nodes; leaves 3, 4: empty. A 3-node job takes
    // leaf 2 (no room left over), not the first empty leaf.
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001", "gpu002", "gpu003"], 8, None);
    busy(&mut s, 101, &["gpu005"], 8, None);
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(3, 8)));
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::nodes(1, 8)));
    s.pending
        .push(PendingJob::new(3, NOW + 2, JobRequest::nodes(8, 8)));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(
        names(&s, &started(&d, 1).nodes),
        ["gpu006", "gpu007", "gpu008"]
    );
    assert_eq!(names(&s, &started(&d, 2).nodes), ["gpu004"]);
    // Two whole leaves remain for the 8-node gang: it spans exactly 2 leaves.
    let big = started(&d, 3);
    assert_eq!(big.leaves, 2);
    assert_eq!(names(&s, &big.nodes)[0], "gpu009");
}

#[test]
fn gang_larger_than_a_leaf_uses_fewest_leaves() {
    let mut s = sandbox();
    // Leaf 1 has 1 free node, leaf 2 has 2, leaves 3 and 4 have 4 each.
    busy(&mut s, 100, &["gpu001", "gpu002", "gpu003"], 8, None);
    busy(&mut s, 101, &["gpu005", "gpu006"], 8, None);
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(6, 8)));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    // One whole leaf (4) plus the best-fitting remainder: leaf 2's two nodes.
    assert_eq!(st.leaves, 2);
    assert_eq!(
        names(&s, &st.nodes),
        ["gpu007", "gpu008", "gpu009", "gpu010", "gpu011", "gpu012"]
    );
}

#[test]
fn tasks_get_distinct_close_gpus_and_ranks_follow_the_node_list() {
    let mut s = sandbox();
    // --nodes=2 --ntasks-per-node=2 --gpus-per-task=4
    let req = JobRequest {
        min_nodes: Some(2),
        ntasks_per_node: Some(2),
        gpus_per_task: Some(4),
        ..Default::default()
    };
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(names(&s, &st.nodes), ["gpu001", "gpu002"]);
    let t: Vec<(u32, u32, u32, Vec<u32>)> = st
        .tasks
        .iter()
        .map(|t| (t.rank, t.node_rank, t.local_rank, t.gpus.clone()))
        .collect();
    assert_eq!(
        t,
        [
            (0, 0, 0, vec![0, 1, 2, 3]),
            (1, 0, 1, vec![4, 5, 6, 7]),
            (2, 1, 0, vec![0, 1, 2, 3]),
            (3, 1, 1, vec![4, 5, 6, 7]),
        ]
    );
}

#[test]
fn gres_per_node_is_split_between_tasks() {
    // gres_mpirun.sh: --nodes=2 --ntasks-per-node=2 --gres=gpu:4
    let mut s = sandbox();
    let req = JobRequest {
        min_nodes: Some(2),
        ntasks_per_node: Some(2),
        gpus_per_node: Some(4),
        ..Default::default()
    };
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(st.tasks.len(), 4);
    for t in &st.tasks {
        assert_eq!(t.gpus.len(), 2);
    }
    // The two tasks of a node share nothing and stay in one NUMA half.
    assert_eq!(st.tasks[0].gpus, [0, 1]);
    assert_eq!(st.tasks[1].gpus, [2, 3]);
}

#[test]
fn small_jobs_pack_onto_partly_used_nodes() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu007"], 6, None);
    s.pending.push(PendingJob::new(1, NOW, JobRequest::gpus(2)));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(names(&s, &st.nodes), ["gpu007"]);
    assert_eq!(st.tasks[0].gpus, [6, 7]);
}

#[test]
fn exclusive_jobs_neither_share_nor_are_shared() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001"], 1, None);
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::gpus(1).exclusive()));
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::gpus(7)));
    let d = schedule(&s, NOW, &Config::default());
    let ex = started(&d, 1);
    // Not gpu001 (it has a job); the exclusive job gets a whole idle node.
    assert_eq!(names(&s, &ex.nodes), ["gpu002"]);
    // The 7-GPU job goes beside the running job on gpu001, not on gpu002's 7 idle GPUs.
    assert_eq!(names(&s, &started(&d, 2).nodes), ["gpu001"]);
    let mut s2 = s.clone();
    s2.apply(&d, NOW);
    s2.pending
        .push(PendingJob::new(3, NOW + 2, JobRequest::gpus(1)));
    let d2 = schedule(&s2, NOW, &Config::default());
    assert_ne!(names(&s2, &started(&d2, 3).nodes), ["gpu002"]);
}

#[test]
fn gpu_type_is_a_case_insensitive_substring_of_the_model() {
    let spec = ClusterSpec::from_yaml(
        r#"
levels: [{key: muster.dev/leaf, count: 2}]
nodesPerLeaf: 2
node: {cpus: 64, memory: 512Gi, gpus: 8, gpuModel: NVIDIA H100 80GB HBM3, layout: dgx}
overrides:
  - nodes: gpu[003-004]
    gpuModel: NVIDIA A100-SXM4-80GB
"#,
    )
    .unwrap();
    let mut s = Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology());
    let mut req = JobRequest::gpus(2);
    req.gpu_type = Some("a100".into());
    s.pending.push(PendingJob::new(1, NOW, req));
    let mut req = JobRequest::gpus(1);
    req.gpu_type = Some("V100".into());
    s.pending.push(PendingJob::new(2, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(names(&s, &started(&d, 1).nodes), ["gpu003"]);
    let p = pending(&d, 2);
    assert_eq!(p.reason, Reason::BadConstraints);
    assert!(p.message.contains("V100"), "{}", p.message);
}

#[test]
fn unhealthy_gpus_and_down_nodes_are_avoided() {
    let mut s = sandbox();
    let nodes = std::sync::Arc::make_mut(&mut s.nodes);
    nodes[0].gpus[0].healthy = false;
    nodes[1].ready = false;
    s.pending.push(PendingJob::new(1, NOW, JobRequest::gpus(8)));
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::gpus(7)));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(names(&s, &started(&d, 1).nodes), ["gpu003"]);
    let t = &started(&d, 2).tasks[0];
    assert_eq!(s.nodes[t.node as usize].name, "gpu001");
    assert!(!t.gpus.contains(&0));
}

fn featured() -> Snapshot {
    // Leaves 1-2 have feature `ib`; nodes 1-4 and 9-12 are `rack` a / b by label value.
    let mut s = sandbox();
    for (i, n) in std::sync::Arc::make_mut(&mut s.nodes)
        .iter_mut()
        .enumerate()
    {
        if i < 8 {
            n.labels
                .insert("muster.dev/feature.ib".into(), "true".into());
        }
        let rack = if i < 4 || (8..12).contains(&i) {
            "rack-a"
        } else {
            "rack-b"
        };
        n.labels.insert("example.com/rack".into(), rack.into());
    }
    s
}

#[test]
fn constraints_select_nodes_by_feature_and_label_value() {
    let mut s = featured();
    let mut ib = JobRequest::nodes(6, 8);
    ib.constraint = Some(Constraint::parse("ib").unwrap());
    s.pending.push(PendingJob::new(1, NOW, ib));
    let mut not_enough = JobRequest::nodes(9, 8);
    not_enough.constraint = Some(Constraint::parse("ib").unwrap());
    s.pending.push(PendingJob::new(2, NOW, not_enough));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert!(
        st.nodes.iter().all(|&n| n < 8),
        "{:?}",
        names(&s, &st.nodes)
    );
    let p = pending(&d, 2);
    assert_eq!(p.reason, Reason::BadConstraints);
    assert!(p.message.contains("constraint ib"), "{}", p.message);
}

#[test]
fn matching_or_puts_every_node_on_one_alternative() {
    let mut s = featured();
    // 4 nodes all on rack-a or all on rack-b; rack-a's first leaf is busy, so rack-a has
    // only 4 free nodes (gpu009-gpu012) and the job takes exactly those.
    busy(&mut s, 100, &["gpu001", "gpu002"], 8, None);
    let mut req = JobRequest::nodes(4, 8);
    req.constraint = Some(Constraint::parse("[rack-a|rack-b]").unwrap());
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    let got = names(&s, &started(&d, 1).nodes);
    assert_eq!(got, ["gpu009", "gpu010", "gpu011", "gpu012"]);
}

#[test]
fn feature_counts_take_distinct_nodes_of_each_kind() {
    let mut s = featured();
    let mut req = JobRequest::nodes(4, 8);
    req.constraint = Some(Constraint::parse("[rack-a*1&rack-b*3]").unwrap());
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    let racks: Vec<&str> = st
        .nodes
        .iter()
        .map(|&n| s.nodes[n as usize].labels["example.com/rack"].as_str())
        .collect();
    assert_eq!(racks.iter().filter(|r| **r == "rack-a").count(), 1);
    assert_eq!(racks.iter().filter(|r| **r == "rack-b").count(), 3);
}

#[test]
fn switches_wait_for_few_leaves_then_take_any() {
    // Two nodes free on each of leaves 1 and 2; a 4-node job wants 1 leaf and waits up to
    // 10 minutes from its eligible time.
    let mut s = sandbox();
    busy(
        &mut s,
        100,
        &["gpu001", "gpu002", "gpu007", "gpu008"],
        8,
        Some(NOW + 3600),
    );
    let rest: Vec<String> = (9..=16).map(|i| format!("gpu{i:03}")).collect();
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    busy(&mut s, 101, &rest, 8, Some(NOW + 7200));
    let mut req = JobRequest::nodes(4, 8).time(600);
    req.switches = Some(Switches::parse("1@10:00").unwrap());
    let mut job = PendingJob::new(1, NOW - 60, req);
    job.eligible_time = Some(NOW - 60);
    s.pending.push(job.clone());
    let d = schedule(&s, NOW, &Config::default());
    assert!(d.starts.is_empty());
    // It would get one leaf when job 100 ends; the wait ends first (NOW+540).
    assert_eq!(pending(&d, 1).start_estimate, Some(NOW + 540));
    // Its message says why four idle nodes are not used, and for how long.
    assert_eq!(
        pending(&d, 1).message,
        "waiting for 4 node(s) with 8 GPU(s) each; it waits for at most 1 leaf switch(es) \
         (--switches) up to 9:00 more: on more leaves it could start now"
    );
    // After the wait it takes the two half-free leaves.
    let d = schedule(&s, NOW + 600, &Config::default());
    assert_eq!(started(&d, 1).leaves, 2);
    // `@UNLIMITED`: it waits for one leaf however long, and says so.
    let mut s3 = s.clone();
    s3.pending[0].request.switches = Some(Switches::parse("1@UNLIMITED").unwrap());
    let d = schedule(&s3, NOW + 600, &Config::default());
    assert_eq!(pending(&d, 1).start_estimate, Some(NOW + 3600));
    assert_eq!(
        pending(&d, 1).message,
        "waiting for 4 node(s) with 8 GPU(s) each; it waits for at most 1 leaf switch(es) \
         (--switches) with no limit on the wait: on more leaves it could start now"
    );
    // Without a wait limit (the default 300 s has passed too) it starts at once.
    let mut s2 = s.clone();
    s2.pending[0].request.switches = Some(Switches::parse("1").unwrap());
    let d = schedule(&s2, NOW + 300, &Config::default());
    assert_eq!(started(&d, 1).leaves, 2);
}

#[test]
fn a_gang_waiting_for_one_leaf_says_so_and_when_it_could_spread() {
    // Leaves 1 and 2 each have one node free now and three until NOW+3600; leaves 3 and 4
    // are busy until NOW+7200. A 2-node gang fits one leaf.
    let mut s = sandbox();
    busy(
        &mut s,
        100,
        &["gpu001", "gpu002", "gpu003"],
        8,
        Some(NOW + 3600),
    );
    busy(
        &mut s,
        101,
        &["gpu005", "gpu006", "gpu007"],
        8,
        Some(NOW + 3600),
    );
    let rest = range(9, 16);
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    busy(&mut s, 102, &rest, 8, Some(NOW + 7200));
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(2, 8).time(600)));
    // With no one queued behind, it starts spread at once.
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(started(&d, 1).leaves, 2);
    // With a job behind it, it waits for one leaf (within the 8 h topology wait), and its
    // message says it could start now spread over leaves.
    s.pending.push(PendingJob::new(
        2,
        NOW + 1,
        JobRequest::nodes(4, 8).time(3600),
    ));
    let d = schedule(&s, NOW + 10, &Config::default());
    let p = pending(&d, 1);
    assert_eq!(p.reason, Reason::Resources);
    assert_eq!(p.start_estimate, Some(NOW + 3600));
    assert_eq!(
        p.message,
        "waiting for 2 node(s) with 8 GPU(s) each; it waits for one leaf switch: spread over \
         leaves it could start now, and a gang waits up to 8:00:00 longer for one leaf"
    );
    // Nothing free now, the two single nodes free at NOW+600: its reservation is on one
    // leaf at NOW+3600, and the message names the spread start it passes up.
    s.running[0].tasks.truncate(2);
    s.running[1].tasks.truncate(2);
    busy(&mut s, 103, &["gpu003", "gpu007"], 8, Some(NOW + 3600));
    busy(&mut s, 104, &["gpu004"], 8, Some(NOW + 600));
    busy(&mut s, 105, &["gpu008"], 8, Some(NOW + 600));
    let d = schedule(&s, NOW + 10, &Config::default());
    let p = pending(&d, 1);
    assert_eq!(p.start_estimate, Some(NOW + 3600));
    assert_eq!(
        p.message,
        "waiting for 2 node(s) with 8 GPU(s) each; it waits for one leaf switch: spread over \
         leaves it could start in 9:50, and a gang waits up to 8:00:00 longer for one leaf"
    );
    // A gang that waits for no fewer leaves than it could have keeps the plain message.
    let cfg = Config {
        topology_wait_secs: 0,
        ..Config::default()
    };
    let d = schedule(&s, NOW + 10, &cfg);
    let p = pending(&d, 1);
    assert_eq!(p.start_estimate, Some(NOW + 600));
    assert_eq!(p.message, "waiting for 2 node(s) with 8 GPU(s) each");
}

#[test]
fn gpu_bind_map_gpu_is_honoured_and_sharing_is_refused() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001"], 1, None);
    let mut req = JobRequest {
        min_nodes: Some(1),
        ntasks_per_node: Some(2),
        gpus_per_task: Some(1),
        ..Default::default()
    };
    req.gpu_bind = Some(GpuBind::parse("map_gpu:6,3").unwrap());
    s.pending.push(PendingJob::new(1, NOW, req.clone()));
    let mut shared = req.clone();
    shared.gpu_bind = Some(GpuBind::parse("single:2").unwrap());
    s.pending.push(PendingJob::new(2, NOW, shared));
    let mut wrong = req;
    wrong.gpu_bind = Some(GpuBind::parse("map_gpu:0*2").unwrap());
    s.pending.push(PendingJob::new(3, NOW, wrong));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(st.tasks[0].gpus, [6]);
    assert_eq!(st.tasks[1].gpus, [3]);
    assert_eq!(pending(&d, 2).reason, Reason::BadConstraints);
    // map_gpu:0,0 would put both tasks on GPU 0: no node can do that.
    assert_eq!(pending(&d, 3).reason, Reason::BadConstraints);
}

#[test]
fn node_and_task_counts_spread_tasks_evenly() {
    let mut s = sandbox();
    // -N 2 -n 6 --gpus-per-task=1: 3 tasks on each of 2 nodes.
    let req = JobRequest {
        min_nodes: Some(2),
        ntasks: Some(6),
        gpus_per_task: Some(1),
        ..Default::default()
    };
    s.pending.push(PendingJob::new(1, NOW, req));
    // -n 6 alone packs onto one node.
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::tasks(6, 1)));
    let d = schedule(&s, NOW, &Config::default());
    let a = started(&d, 1);
    assert_eq!(a.nodes.len(), 2);
    let per_node: Vec<usize> = a
        .nodes
        .iter()
        .map(|&n| a.tasks.iter().filter(|t| t.node == n).count())
        .collect();
    assert_eq!(per_node, [3, 3]);
    assert_eq!(started(&d, 2).nodes.len(), 1);
}

#[test]
fn node_ranges_take_as_many_nodes_as_are_free_under_one_switch() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001"], 8, None);
    // --nodes=2-8 --gpus-per-node=8: leaf 1 has 3 free nodes, leaves 2-4 have 4 each; the
    // lowest switch holding 2 nodes is a leaf: best fit leaf 1, all 3 of its free nodes.
    let req = JobRequest {
        min_nodes: Some(2),
        max_nodes: Some(8),
        gpus_per_node: Some(8),
        ..Default::default()
    };
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(
        names(&s, &started(&d, 1).nodes),
        ["gpu002", "gpu003", "gpu004"]
    );
}

#[test]
fn cpu_and_memory_limit_what_a_node_takes() {
    let mut s = sandbox();
    // gpu001 has its GPUs free but almost no CPU left.
    s.running.push(RunningJob {
        id: 100,
        namespace: "default".into(),
        partition: Some(0),
        start_time: NOW - 10,
        tasks: vec![TaskAlloc {
            node: 0,
            gpus: vec![],
            cpu_millis: 220_000,
            memory_mib: 1024,
        }],
        ..Default::default()
    });
    let mut req = JobRequest::gpus(1);
    req.cpus_per_task = Some(8);
    req.memory = Some(MemoryRequest::PerNode(1024));
    s.pending.push(PendingJob::new(1, NOW, req));
    // --mem=0: the whole node's memory, so only a node whose memory is all free.
    let mut whole = JobRequest::gpus(1);
    whole.memory = Some(MemoryRequest::WholeNode);
    s.pending.push(PendingJob::new(2, NOW + 1, whole));
    let d = schedule(&s, NOW, &Config::default());
    let a = started(&d, 1);
    assert_eq!(names(&s, &a.nodes), ["gpu002"]);
    assert_eq!(a.tasks[0].cpu_millis, 8000);
    assert_eq!(a.tasks[0].memory_mib, 1024);
    let b = started(&d, 2);
    assert_eq!(names(&s, &b.nodes), ["gpu003"]);
    assert_eq!(b.tasks[0].memory_mib, 2 << 20);
}

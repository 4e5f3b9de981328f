//! The control plane a phase runs on (nodes, GpuNodes, DRA slices, partition), the jobs
//! submitted to it, and the pods-per-job check.

use super::*;

pub(crate) async fn create_many<T>(api: &Api<T>, objs: Vec<T>, concurrency: usize)
where
    T: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    futures::stream::iter(objs)
        .for_each_concurrent(concurrency, |o| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &o).await.unwrap();
            }
        })
        .await;
}

pub(crate) fn job(name: &str, spec: serde_json::Value) -> BatchJob {
    let mut spec = spec;
    spec["script"] = json!("python train.py --epochs 10");
    serde_json::from_value(
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .unwrap()
}

/// The API server double with `nodes` nodes x 8 GPUs (leaves of 32, spines of 1,024), their
/// GpuNodes, the DRA driver's slices when `dra`, and a default Partition over them.
pub(crate) async fn api_cluster(nodes: usize, dra: bool) -> ApiServer {
    let mut opts = ApiServerOptions::default().with_muster_crds();
    opts.features.dra = dra;
    let server = ApiServer::start(opts).await.unwrap();
    server.set_watch_window(400_000);
    let client = server.client();
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "muster-system"}}),
    )
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    let t = Instant::now();
    let napi: Api<Node> = Api::all(client.clone());
    let gapi: Api<GpuNode> = Api::all(client.clone());
    let digits = if nodes > 9999 { 5 } else { 4 };
    let names: Vec<String> = (1..=nodes).map(|i| format!("gpu{i:0digits$}")).collect();
    let node_objs: Vec<Node> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n,
                    "muster.dev/leaf": format!("leaf{}", i / 32 + 1),
                    "muster.dev/spine": format!("spine{}", i / 1024 + 1)}}}))
            .unwrap()
        })
        .collect();
    create_many(&napi, node_objs, 64).await;
    let gpu_objs: Vec<GpuNode> = names
        .iter()
        .map(|n| {
            serde_json::from_value(
                json!({"apiVersion": "muster.dev/v1alpha1", "kind": "GpuNode",
                "metadata": {"name": n}, "spec": {"nodeName": n}}),
            )
            .unwrap()
        })
        .collect();
    create_many(&gapi, gpu_objs, 64).await;
    futures::stream::iter(names.clone())
        .for_each_concurrent(64, |n| {
            let (napi, gapi) = (napi.clone(), gapi.clone());
            async move {
                napi.patch_status(
                    &n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                    "allocatable": {"cpu": "224", "memory": "2Ti", "pods": "1000"},
                    "conditions": [{"type": "Ready", "status": "True"}]}})),
                )
                .await
                .unwrap();
                let gpus: Vec<_> = (0..8)
                    .map(|i| {
                        json!({"index": i, "uuid": format!("GPU-{n}-{i}"),
                        "model": "NVIDIA H100 80GB HBM3", "memoryMib": 81559, "numaNode": i / 4,
                        "nvlinkPeers": (0..8).filter(|j| *j != i).collect::<Vec<_>>(),
                        "health": {"state": "Healthy"}})
                    })
                    .collect();
                gapi.patch_status(
                    &n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                    "gpuCount": 8, "healthyGpus": 8, "gpus": gpus}})),
                )
                .await
                .unwrap();
            }
        })
        .await;
    if dra {
        // The NVIDIA DRA driver: its DeviceClass and each node's slice (the GpuNodes' UUIDs).
        use muster_operator::core::cluster_spec::{GpuInfo, NodeInfo};
        let infos: Vec<NodeInfo> = names
            .iter()
            .map(|n| NodeInfo {
                name: n.clone(),
                labels: Default::default(),
                cpu_millis: 224_000,
                memory_mib: 2 << 20,
                taints: vec![],
                gpus: (0..8)
                    .map(|i| GpuInfo {
                        index: i,
                        uuid: format!("GPU-{n}-{i}"),
                        model: "NVIDIA H100 80GB HBM3".into(),
                        memory_mib: 81559,
                        numa_node: Some((i / 4) as i32),
                        nvlink_peers: vec![],
                        pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x10),
                    })
                    .collect(),
                topology: vec![],
                extended_resources: Default::default(),
            })
            .collect();
        muster_e2e::dra::publish(&client, &infos, Default::default(), 64)
            .await
            .unwrap();
    }
    partition(
        &client,
        &[
            "muster.dev/spine",
            "muster.dev/leaf",
            "kubernetes.io/hostname",
        ],
    )
    .await;
    println!(
        "cluster: {nodes} nodes x 8 GPUs created in {:.1?}",
        t.elapsed()
    );
    server
}

pub(crate) async fn partition(client: &kube::Client, topology: &[&str]) {
    let p: Partition = serde_json::from_value(json!({"apiVersion": "muster.dev/v1alpha1",
        "kind": "Partition", "metadata": {"name": "gpu"},
        "spec": {"default": true, "defaultImage": "nvcr.io/nvidia/pytorch:24.01-py3",
                 "topology": topology}}))
    .unwrap();
    Api::<Partition>::all(client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
}

/// Asserts that every started job whose name starts with `prefix` has one pod per allocated
/// node (its status's distinct task nodes, which is also `numNodes`); returns (jobs, pods).
pub(crate) async fn check_pods_per_job(client: &kube::Client, prefix: &str) -> (usize, usize) {
    let jobs = Api::<BatchJob>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list_metadata(&ListParams::default().labels(labels::BATCHJOB))
        .await
        .unwrap();
    let mut per_job: HashMap<String, usize> = HashMap::new();
    for p in &pods.items {
        if let Some(j) = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::BATCHJOB))
        {
            *per_job.entry(j.clone()).or_default() += 1;
        }
    }
    let (mut njobs, mut npods) = (0, 0);
    for j in jobs.items.iter() {
        let name = j.metadata.name.clone().unwrap_or_default();
        if !name.starts_with(prefix) {
            continue;
        }
        let st = j.status.as_ref().expect("a started job has a status");
        let mut nodes: Vec<&str> = st.tasks.iter().map(|t| t.node.as_str()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        assert!(!nodes.is_empty(), "job {name} started without tasks");
        assert_eq!(
            st.num_nodes,
            Some(nodes.len() as u32),
            "job {name}: numNodes"
        );
        let got = per_job.get(&name).copied().unwrap_or(0);
        assert_eq!(
            got,
            nodes.len(),
            "job {name}: {got} pods for {} allocated nodes",
            nodes.len()
        );
        njobs += 1;
        npods += got;
    }
    (njobs, npods)
}

//! The operator's loop over the fake cluster: plan, then execute, cycle by cycle.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube::ResourceExt;
use muster_crds::v1alpha1::Partition;

use super::FakeCluster;
use crate::controller::dra::{self, ClaimObs, DraSupport};
use crate::controller::exec::{self, ExecReport, Faults, NoFaults};
use crate::controller::gang::GangApi;
use crate::controller::jobobs::JobObs;
use crate::controller::plan::{self, Inputs, PlanMemory, PlanSettings, PodObs};
use crate::controller::translate::{self, NodeTable};

/// The operator's loop over the fake cluster: plan, then execute.
pub struct Harness {
    pub cluster: FakeCluster,
    pub mem: PlanMemory,
    pub cfg: PlanSettings,
    pub next_id: u64,
    pub now: i64,
    pub usage: BTreeMap<String, f64>,
    pub writes: BTreeMap<exec::WriteKind, u64>,
    /// Jobs written concurrently.
    pub concurrency: usize,
    /// The cluster serves DRA with the NVIDIA DeviceClass (`gpuBinding: auto` is `dra`).
    pub dra: bool,
    /// The gang API the cluster serves.
    pub gang: Option<GangApi>,
    /// The last cycle's node table, handed out again while the nodes are the same (as the
    /// runner's node cache does), so the planner keeps its trees between cycles here too.
    table: Option<Arc<NodeTable>>,
}

impl Harness {
    pub fn new() -> Self {
        Harness {
            cluster: FakeCluster::default(),
            mem: PlanMemory::default(),
            cfg: PlanSettings::default(),
            next_id: 1,
            now: 1_000_000,
            usage: BTreeMap::new(),
            writes: BTreeMap::new(),
            concurrency: 8,
            dra: false,
            gang: None,
            table: None,
        }
    }

    /// One operator cycle with the given faults.
    pub fn cycle_with(&mut self, faults: &dyn Faults) -> ExecReport {
        let (partitions, nodes, jobs, pods, claims) = {
            let s = self.cluster.lock();
            let parts: Vec<Arc<Partition>> = s.partitions.values().cloned().map(Arc::new).collect();
            let mut devices = HashMap::new();
            if self.dra {
                for (n, g) in &s.gpunodes {
                    let names = g
                        .status
                        .iter()
                        .flat_map(|st| &st.gpus)
                        .map(|x| (n.clone(), format!("gpu-{}", x.index)))
                        .collect();
                    devices.insert(n.clone(), names);
                }
            }
            let nodes = NodeTable::new(
                s.nodes
                    .values()
                    .map(|n| translate::node(n, s.gpunodes.get(&n.name_any())))
                    .collect(),
            )
            .with_devices(devices);
            let nodes = match self.table.take() {
                Some(t) if t.nodes == nodes.nodes && t.same_devices(&nodes) => t,
                _ => Arc::new(nodes),
            };
            self.table = Some(nodes.clone());
            let claims: Vec<Arc<ClaimObs>> = s.claims.values().map(|c| Arc::new(c.obs())).collect();
            let jobs: Vec<Arc<JobObs>> = s
                .jobs
                .values()
                .cloned()
                .map(|j| Arc::new(JobObs::new(j)))
                .collect();
            let pods: Vec<Arc<PodObs>> = s
                .pods
                .values()
                .filter_map(PodObs::from_pod)
                .map(Arc::new)
                .collect();
            (parts, nodes, jobs, pods, claims)
        };
        let support = DraSupport {
            served: self.dra,
            classes: if self.dra {
                [dra::DEFAULT_DEVICE_CLASS.to_string()].into()
            } else {
                Default::default()
            },
        };
        let inp = Inputs {
            now: self.now,
            partitions: &partitions,
            nodes: &nodes,
            jobs: &jobs,
            pods: &pods,
            expected_jobs: &Default::default(),
            usage: &self.usage,
            claims: &claims,
            dra: &support,
            gang: self.gang,
        };
        // New jobs' finalizers first (the operator writes them while it plans, from the same
        // snapshot).
        let early_jobs = crate::controller::early::select(&jobs);
        let early =
            futures::executor::block_on(exec::add_finalizers(early_jobs, &self.cluster, faults, 8));
        let mut next = self.next_id;
        let p = plan::plan(&inp, &self.cfg, &mut self.mem, &mut || {
            let id = next;
            next += 1;
            Some(id)
        });
        // Ids handed out are gone even if their write fails (as with the ConfigMap counter).
        self.next_id = next;
        let report = futures::executor::block_on(crate::controller::early::execute_after(
            p,
            early,
            jobs,
            &self.cluster,
            faults,
            8,
            &Default::default(),
        ));
        for w in &report.written {
            self.mem.wrote_status(&w.job.uid(), self.now);
        }
        for n in &report.partitions_written {
            self.mem.wrote_partition(n, self.now);
        }
        for (k, v) in &report.writes {
            *self.writes.entry(*k).or_default() += v;
        }
        let (n, _) = futures::executor::block_on(exec::publish_events(
            &self.cluster,
            report.events.clone(),
            8,
        ));
        *self.writes.entry(exec::WriteKind::Event).or_default() += n;
        report
    }

    pub fn cycle(&mut self) -> ExecReport {
        self.cycle_with(&NoFaults)
    }

    /// Advances time, runs the kubelet, then a cycle; checks the invariants.
    pub fn step(&mut self, secs: i64) -> ExecReport {
        self.now += secs;
        self.cluster.tick(self.now);
        let r = self.cycle();
        self.cluster.check_no_double_gpu().unwrap();
        self.cluster.check_claims().unwrap();
        r
    }
}

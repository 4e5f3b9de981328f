//! GPUs as the NVIDIA DRA driver publishes them in ResourceSlices — the scheduler's inventory
//! wherever the driver runs, so Muster schedules exactly the devices kube-scheduler can
//! allocate; the node agent's GpuNode adds what DRA does not publish (NVLink matrix, health,
//! NUMA) and is joined by UUID.
//!
//! # Attribute names by driver version
//! Read from the driver's source (`cmd/gpu-kubelet-plugin/deviceinfo.go` and
//! `partitions.go`, NVIDIA/k8s-dra-driver-gpu, now kubernetes-sigs/dra-driver-nvidia-gpu).
//! Every version: driver and attribute domain `gpu.nvidia.com`, pool = the node's name, one
//! slice per node, device name `gpu-<minor>`, DeviceClass `gpu.nvidia.com`.
//!
//! | attribute (driver domain unless qualified) | v25.3.x | v25.8.x | v25.12.0, v0.4.0 |
//! |---|---|---|---|
//! | `type` (`gpu`, `mig`, `vfio`) | yes | yes | yes |
//! | `uuid` | yes | yes | yes |
//! | `productName`, `brand`, `architecture` | yes | yes | yes |
//! | `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion` (versions) | yes | yes | yes |
//! | `index`, `minor` (ints) | yes | — | — |
//! | `pcieBusID` | yes | yes | — |
//! | `resource.kubernetes.io/pciBusID` | — | — | yes |
//! | `resource.kubernetes.io/pcieRoot` | yes | when known | when known |
//! | `addressingMode` | — | — | when known |
//! | capacity `memory` (bytes) | yes | yes | yes (v0.4.0: when known) |
//!
//! No version publishes a whole GPU's NUMA node (only VFIO devices carry `numa`), NVLink
//! peers or health. So: UUID, model (`productName`), memory and PCIe root come from the
//! slices; NVML index, NUMA node, NVLink matrix and health from the GpuNode of the same UUID
//! (the index falls back to `index`, then `minor`, then the device name's number — the minor
//! equals the NVML index on every system NVIDIA documents, but only the GpuNode says so).
//! Where the GpuNode has no `nvidia-smi topo -m` matrix, links are derived from PCIe roots
//! (same root: `PHB`) and NUMA nodes (`NODE` / `SYS`) with NVLink peers first.

use std::collections::{BTreeMap, HashMap};

use super::NVIDIA_DRIVER;
use super::api::{Device, DeviceAttribute, ResourceSlice};
use crate::controller::compact::{StrId, StrTable, StrTableBuilder, share_last};
use crate::controller::quantity;
use crate::controller::translate::AgentGpus;
use crate::core::{self, Link};

/// The standard attribute of a device's PCIe root complex.
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
/// The standard attribute of a device's PCI bus id (v25.12 and later).
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";

/// One GPU of a node as the driver publishes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceGpu {
    /// Pool (the node's name).
    pub pool: String,
    /// Device name in the pool (`gpu-0`).
    pub device: String,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// `index` (v25.3.x only).
    pub index: Option<u32>,
    /// `minor` (v25.3.x only), else the number of the device name `gpu-<minor>`.
    pub minor: Option<u32>,
    /// `productName`.
    pub model: String,
    /// Capacity `memory`, MiB.
    pub memory_mib: u64,
    /// PCIe root complex (`pci0000:00`), if published.
    pub pcie_root: Option<String>,
}

/// A device attribute by its name in the driver's domain: unqualified, or qualified with the
/// domain.
fn attr<'a>(d: &'a Device, name: &str) -> Option<&'a DeviceAttribute> {
    d.attributes
        .get(name)
        .or_else(|| d.attributes.get(&format!("{NVIDIA_DRIVER}/{name}")))
}

fn int_attr(d: &Device, name: &str) -> Option<u32> {
    attr(d, name)
        .and_then(|a| a.int)
        .and_then(|i| u32::try_from(i).ok())
}

fn string_attr(d: &Device, name: &str) -> Option<String> {
    attr(d, name).and_then(|a| a.string.clone())
}

/// What the operator keeps of one of the NVIDIA driver's ResourceSlices: its node, pool
/// generation and whole GPUs, compact (the slice's strings in one `StrTable`: a slice of 8
/// GPUs was ~45 allocations, 16,384 of them cached for as long as the nodes exist).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceObs {
    /// The slice's name (0), its pool (1), its node (2, when it names one), and the GPUs'
    /// device names, UUIDs, models and PCIe roots.
    strs: StrTable,
    has_node: bool,
    /// `spec.pool.generation`.
    generation: i64,
    /// Its whole GPUs (type `gpu`: MIG and VFIO devices are left out).
    gpus: Box<[GpuRow]>,
}

/// A [`SliceGpu`] of a [`SliceObs`], its strings by id.
#[derive(Clone, Debug, PartialEq, Eq)]
struct GpuRow {
    device: StrId,
    uuid: StrId,
    index: Option<u32>,
    minor: Option<u32>,
    model: StrId,
    memory_mib: u64,
    pcie_root: Option<StrId>,
}

impl SliceObs {
    /// Reads a slice; `None` for another driver's.
    pub fn from_slice(s: &ResourceSlice) -> Option<SliceObs> {
        if s.spec.driver != NVIDIA_DRIVER {
            return None;
        }
        let mut b = StrTableBuilder::default();
        // Ids 0, 1 and 2 by position, even when the pool or node repeats the name.
        b.id_new(s.metadata.name.as_deref().unwrap_or_default());
        b.id_new(&s.spec.pool.name);
        if let Some(n) = &s.spec.node_name {
            b.id_new(n);
        }
        let mut gpus = Vec::new();
        for d in &s.spec.devices {
            if string_attr(d, "type").is_some_and(|t| t != "gpu") {
                continue;
            }
            let Some(uuid) = string_attr(d, "uuid") else {
                continue;
            };
            let minor = int_attr(d, "minor").or_else(|| {
                d.name
                    .strip_prefix("gpu-")
                    .and_then(|n| n.parse::<u32>().ok())
            });
            let memory_mib = d
                .capacity
                .get("memory")
                .or_else(|| d.capacity.get(&format!("{NVIDIA_DRIVER}/memory")))
                .and_then(|c| quantity::memory_mib(&c.value).ok())
                .unwrap_or(0);
            gpus.push(GpuRow {
                device: b.id(&d.name),
                uuid: b.id(&uuid),
                index: int_attr(d, "index"),
                minor,
                model: b.id(&string_attr(d, "productName").unwrap_or_default()),
                memory_mib,
                pcie_root: d
                    .attributes
                    .get(PCIE_ROOT)
                    .and_then(|a| a.string.as_deref())
                    .map(|r| b.id(r)),
            });
        }
        Some(SliceObs {
            strs: b.finish(),
            has_node: s.spec.node_name.is_some(),
            generation: s.spec.pool.generation,
            gpus: gpus.into_boxed_slice(),
        })
    }

    /// The slice's name.
    pub fn name(&self) -> &str {
        self.strs.get(0)
    }

    /// `spec.pool.name`.
    pub fn pool(&self) -> &str {
        self.strs.get(1)
    }

    /// `spec.nodeName`.
    pub fn node(&self) -> Option<&str> {
        self.has_node.then(|| self.strs.get(2))
    }

    /// `spec.pool.generation`.
    pub fn generation(&self) -> i64 {
        self.generation
    }

    /// Its whole GPUs (type `gpu`: MIG and VFIO devices are left out), in the slice's order.
    pub fn gpus(&self) -> Vec<SliceGpu> {
        let s = &self.strs;
        self.gpus
            .iter()
            .map(|g| SliceGpu {
                pool: self.pool().to_string(),
                device: s.get(g.device).to_string(),
                uuid: s.get(g.uuid).to_string(),
                index: g.index,
                minor: g.minor,
                model: s.get(g.model).to_string(),
                memory_mib: g.memory_mib,
                pcie_root: g.pcie_root.map(|r| s.get(r).to_string()),
            })
            .collect()
    }
}

impl kube::runtime::reflector::Lookup for SliceObs {
    type DynamicType = ();
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "ResourceSlice".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        super::api::GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        super::api::VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "resourceslices".into()
    }
    fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(SliceObs::name(self).into())
    }
    fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
        None
    }
    fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
        None
    }
    fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
        None
    }
}

/// The NVIDIA driver's slices by node name, for [`node_gpus`].
pub fn by_node<'a>(
    slices: impl IntoIterator<Item = &'a SliceObs>,
) -> HashMap<&'a str, Vec<&'a SliceObs>> {
    let mut out: HashMap<&str, Vec<&SliceObs>> = HashMap::new();
    for s in slices {
        if let Some(n) = s.node() {
            out.entry(n).or_default().push(s);
        }
    }
    out
}

/// Whole GPUs the NVIDIA driver publishes for a node, from its slices (`mine`): those of each
/// pool's highest generation (a pool being rewritten keeps only its newest devices), in
/// device-name order. `None` when the driver publishes no slice for the node (the GpuNode
/// then is the inventory).
pub fn node_gpus(mine: &[&SliceObs]) -> Option<Vec<SliceGpu>> {
    if mine.is_empty() {
        return None;
    }
    let mut newest: HashMap<&str, i64> = HashMap::new();
    for s in mine {
        let g = newest.entry(s.pool()).or_insert(i64::MIN);
        *g = (*g).max(s.generation);
    }
    let mut out: BTreeMap<(String, u32, String), SliceGpu> = BTreeMap::new();
    for s in mine {
        if newest.get(s.pool()) != Some(&s.generation) {
            continue;
        }
        for g in s.gpus() {
            out.insert(
                (
                    g.pool.clone(),
                    g.minor.unwrap_or(u32::MAX),
                    g.device.clone(),
                ),
                g,
            );
        }
    }
    Some(out.into_values().collect())
}

/// A node's GPUs for the core, their links (by position; empty: derived by the core) and each
/// GPU's `(pool, device)`.
pub type CoreGpus = (Vec<core::Gpu>, Vec<Vec<Link>>, Vec<(String, String)>);

/// A node's GPUs for the core from the driver's slices, joined by UUID with the node agent's
/// GpuNode (NVML index, NUMA, NVLink peers, health, `nvidia-smi topo` matrix), and the
/// `(pool, device)` of each, by position. A GPU the driver publishes and the GpuNode does not
/// know is healthy (the driver only publishes devices it can prepare).
pub fn core_gpus(published: &[SliceGpu], agent: Option<&AgentGpus>) -> CoreGpus {
    let by_uuid: HashMap<&str, &core::Gpu> = agent
        .map(|a| a.gpus.iter().map(|g| (g.uuid.as_str(), g)).collect())
        .unwrap_or_default();
    let mut gpus = Vec::with_capacity(published.len());
    let mut names = Vec::with_capacity(published.len());
    let mut roots = Vec::with_capacity(published.len());
    let mut model = None;
    for (pos, p) in published.iter().enumerate() {
        let known = by_uuid.get(p.uuid.as_str());
        let index = known
            .map(|k| k.index)
            .or(p.index)
            .or(p.minor)
            .unwrap_or(pos as u32);
        gpus.push(core::Gpu {
            index,
            uuid: p.uuid.clone(),
            model: match known {
                Some(k) if p.model.is_empty() || *k.model == *p.model => k.model.clone(),
                _ => share_last(&mut model, &p.model),
            },
            memory_mib: if p.memory_mib > 0 {
                p.memory_mib
            } else {
                known.map(|k| k.memory_mib).unwrap_or(0)
            },
            healthy: known.is_none_or(|k| k.healthy),
            numa: known.and_then(|k| k.numa),
            nvlink_peers: known.map(|k| k.nvlink_peers.clone()).unwrap_or_default(),
        });
        names.push((p.pool.clone(), p.device.clone()));
        roots.push(p.pcie_root.clone());
    }
    let mut links = agent.map(|a| a.links(&gpus)).unwrap_or_default();
    if links.is_empty() && roots.iter().any(Option::is_some) {
        links = derived_links(&gpus, &roots);
    }
    (gpus, links, names)
}

/// Links from NVLink peers, PCIe roots and NUMA nodes, as `nvidia-smi topo -m` would name the
/// closest it can be sure of: `NV1` for NVLink peers, `PHB` under one PCIe root complex,
/// `NODE` within a NUMA node, `SYS` across (and `PHB` when nothing is known).
fn derived_links(gpus: &[core::Gpu], roots: &[Option<String>]) -> Vec<Vec<Link>> {
    let n = gpus.len();
    let mut out = vec![vec![Link::Itself; n]; n];
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            let (ga, gb) = (&gpus[a], &gpus[b]);
            out[a][b] =
                if ga.nvlink_peers.contains(&gb.index) || gb.nvlink_peers.contains(&ga.index) {
                    Link::NvLink(1)
                } else if roots[a].is_some() && roots[a] == roots[b] {
                    Link::Phb
                } else {
                    match (ga.numa, gb.numa) {
                        (Some(x), Some(y)) if x == y => Link::Node,
                        (Some(_), Some(_)) => Link::Sys,
                        _ => Link::Phb,
                    }
                };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::dra::api::{DeviceCapacity, ResourcePool, ResourceSliceSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use muster_crds::v1alpha1::{GpuHealth, GpuHealthState, GpuInfo, GpuNodeStatus};

    /// A device as v25.12 publishes it.
    fn device(minor: u32, uuid: &str, root: &str) -> Device {
        let mut d = Device {
            name: format!("gpu-{minor}"),
            ..Default::default()
        };
        d.attributes
            .insert("type".into(), DeviceAttribute::string("gpu"));
        d.attributes
            .insert("uuid".into(), DeviceAttribute::string(uuid));
        d.attributes.insert(
            "productName".into(),
            DeviceAttribute::string("NVIDIA H100 80GB HBM3"),
        );
        d.attributes.insert(
            "driverVersion".into(),
            DeviceAttribute::version("550.54.15"),
        );
        d.attributes
            .insert(PCIE_ROOT.into(), DeviceAttribute::string(root));
        d.capacity.insert(
            "memory".into(),
            DeviceCapacity {
                value: Quantity("81559Mi".into()),
            },
        );
        d
    }

    fn slice(node: &str, generation: i64, devices: Vec<Device>) -> ResourceSlice {
        ResourceSlice {
            spec: ResourceSliceSpec {
                driver: NVIDIA_DRIVER.into(),
                pool: ResourcePool {
                    name: node.into(),
                    generation,
                    resource_slice_count: 1,
                },
                node_name: Some(node.into()),
                all_nodes: None,
                devices,
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_cached_slice_keeps_its_name_pool_node_and_gpus() {
        // Pool and node the same string, the name too: each still reads back.
        let mut s = slice("n1", 3, vec![device(0, "GPU-a", "pci0000:00")]);
        s.metadata.name = Some("n1".into());
        let o = SliceObs::from_slice(&s).unwrap();
        assert_eq!((o.name(), o.pool(), o.node()), ("n1", "n1", Some("n1")));
        assert_eq!(o.generation(), 3);
        let g = o.gpus();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].pool, "n1");
        assert_eq!(g[0].uuid, "GPU-a");
        assert_eq!(g[0].pcie_root.as_deref(), Some("pci0000:00"));
        // A slice for all nodes (no node name) has none.
        s.spec.node_name = None;
        s.spec.pool.name = "shared".into();
        let o = SliceObs::from_slice(&s).unwrap();
        assert_eq!((o.name(), o.pool(), o.node()), ("n1", "shared", None));
    }

    #[test]
    fn newest_generation_whole_gpus_only() {
        let mut mig = device(9, "MIG-1", "pci0000:00");
        mig.attributes
            .insert("type".into(), DeviceAttribute::string("mig"));
        let old = slice("n1", 1, vec![device(0, "GPU-old", "pci0000:00")]);
        let new = slice(
            "n1",
            2,
            vec![
                device(1, "GPU-b", "pci0000:00"),
                device(0, "GPU-a", "pci0000:00"),
                mig,
            ],
        );
        let other = slice("n2", 5, vec![device(0, "GPU-z", "pci0000:00")]);
        let obs: Vec<SliceObs> = [&old, &new, &other]
            .iter()
            .filter_map(|s| SliceObs::from_slice(s))
            .collect();
        let idx = by_node(&obs);
        let g = node_gpus(&idx["n1"]).unwrap();
        let uuids: Vec<&str> = g.iter().map(|x| x.uuid.as_str()).collect();
        assert_eq!(uuids, ["GPU-a", "GPU-b"]);
        assert_eq!(g[0].device, "gpu-0");
        assert_eq!(g[0].minor, Some(0));
        assert_eq!(g[0].memory_mib, 81559);
        assert_eq!(g[0].model, "NVIDIA H100 80GB HBM3");
        assert!(!idx.contains_key("n3"));
        assert!(node_gpus(&[]).is_none());
        let mut foreign = old.clone();
        foreign.spec.driver = "gpu.example.com".into();
        assert!(SliceObs::from_slice(&foreign).is_none());
    }

    #[test]
    fn the_agent_adds_index_numa_health_and_links_by_uuid() {
        let s = slice(
            "n1",
            1,
            vec![
                device(0, "GPU-a", "pci0000:00"),
                device(1, "GPU-b", "pci0000:00"),
                device(2, "GPU-c", "pci0000:80"),
            ],
        );
        let o = SliceObs::from_slice(&s).unwrap();
        let g = node_gpus(&[&o]).unwrap();
        let agent = GpuNodeStatus {
            gpus: vec![
                GpuInfo {
                    index: 1,
                    uuid: "GPU-a".into(),
                    numa_node: Some(0),
                    ..Default::default()
                },
                GpuInfo {
                    index: 0,
                    uuid: "GPU-b".into(),
                    numa_node: Some(0),
                    health: GpuHealth {
                        state: GpuHealthState::Unhealthy,
                        ..Default::default()
                    },
                    ..Default::default()
                },
                GpuInfo {
                    index: 2,
                    uuid: "GPU-c".into(),
                    numa_node: Some(1),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let agent = crate::controller::translate::agent_gpus(&agent);
        let (gpus, links, names) = core_gpus(&g, Some(&agent));
        assert_eq!(
            gpus[0].index, 1,
            "NVML index from the GpuNode, not the minor"
        );
        assert!(gpus[0].healthy);
        assert!(!gpus[1].healthy);
        assert_eq!(gpus[2].numa, Some(1));
        assert_eq!(names[2], ("n1".to_string(), "gpu-2".to_string()));
        assert_eq!(links[0][1], Link::Phb, "one PCIe root");
        assert_eq!(links[0][2], Link::Sys, "across NUMA nodes");
        // Without the agent: healthy, index from the minor, links from roots alone.
        let (gpus, links, _) = core_gpus(&g, None);
        assert_eq!(gpus[1].index, 1);
        assert!(gpus.iter().all(|g| g.healthy));
        assert_eq!(links[0][1], Link::Phb);
        assert_eq!(links[0][2], Link::Phb);
    }

    #[test]
    fn v25_3_index_and_qualified_names_are_read() {
        let mut d = device(3, "GPU-q", "pci0000:00");
        d.attributes.remove("uuid");
        d.attributes.insert(
            "gpu.nvidia.com/uuid".into(),
            DeviceAttribute::string("GPU-q"),
        );
        d.attributes.insert("index".into(), DeviceAttribute::int(7));
        let s = slice("n1", 1, vec![d]);
        let o = SliceObs::from_slice(&s).unwrap();
        let g = node_gpus(&[&o]).unwrap();
        assert_eq!(g[0].uuid, "GPU-q");
        let (gpus, _, _) = core_gpus(&g, None);
        assert_eq!(gpus[0].index, 7);
    }
}

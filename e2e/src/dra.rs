//! The NVIDIA DRA driver, simulated: the DeviceClass its chart installs and the ResourceSlice
//! its kubelet plugin publishes for each node, with the attributes the real driver publishes
//! (see `muster_operator::controller::dra::inventory` for which version publishes what).
//!
//! One slice per node, pool = the node's name, generation 1, devices `gpu-<minor>` (the minor
//! is the NVML index here). The driver version's shape is chosen by [`DriverVersion`].

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, PostParams};
use muster_operator::controller::dra::inventory::{PCI_BUS_ID, PCIE_ROOT};
use muster_operator::controller::dra::{
    DEFAULT_DEVICE_CLASS, Device, DeviceAttribute, DeviceCapacity, DeviceClass, NVIDIA_DRIVER,
    ResourceSlice,
};
use muster_operator::core::cluster_spec::{GpuInfo, NodeInfo};
use serde_json::json;

use crate::nodes::{CUDA_VERSION, DRIVER_VERSION};

/// Which release of NVIDIA's DRA driver the simulated slices look like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriverVersion {
    /// v25.3.x: `index` and `minor` attributes, `pcieBusID` in the driver's domain.
    V25_3,
    /// v25.12.0 and v0.4.0 (kubernetes-sigs/dra-driver-nvidia-gpu): no index or minor,
    /// `resource.kubernetes.io/pciBusID`.
    #[default]
    V25_12,
}

/// The DeviceClass `gpu.nvidia.com`, as the driver's chart creates it on a
/// `resource.k8s.io/v1` server.
pub fn device_class() -> DeviceClass {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEFAULT_DEVICE_CLASS},
        "spec": {
            "selectors": [{"cel": {"expression":
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }))
    .expect("a DeviceClass")
}

/// The architecture and CUDA compute capability of a model, as NVML reports them.
fn arch(model: &str) -> (&'static str, &'static str) {
    let m = model.to_ascii_uppercase();
    if m.contains("B200") || m.contains("GB200") || m.contains("B100") {
        ("Blackwell", "10.0.0")
    } else if m.contains("H100") || m.contains("H200") || m.contains("H800") || m.contains("GH200")
    {
        ("Hopper", "9.0.0")
    } else if m.contains("L40") || m.contains("L4") {
        ("Ada Lovelace", "8.9.0")
    } else if m.contains("A100") || m.contains("A800") || m.contains("A30") {
        ("Ampere", "8.0.0")
    } else {
        ("Unknown", "7.0.0")
    }
}

/// The PCIe root complex of a bus id `DDDDDDDD:BB:00.0`: `pciDDDD:RR`, one root per group of
/// 0x40 buses (two GPUs each on the simulated layouts' buses).
fn pcie_root(bus_id: &str) -> Option<String> {
    let mut parts = bus_id.split(':');
    let domain = parts.next()?;
    let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
    let d = &domain[domain.len().saturating_sub(4)..];
    Some(format!("pci{}:{:02x}", d.to_ascii_lowercase(), bus & 0xc0))
}

/// One GPU as the driver publishes it.
pub fn device(g: &GpuInfo, v: DriverVersion) -> Device {
    let (architecture, cc) = arch(&g.model);
    let mut d = Device {
        name: format!("gpu-{}", g.index),
        ..Default::default()
    };
    let a = &mut d.attributes;
    a.insert("type".into(), DeviceAttribute::string("gpu"));
    a.insert("uuid".into(), DeviceAttribute::string(&g.uuid));
    a.insert("productName".into(), DeviceAttribute::string(&g.model));
    a.insert("brand".into(), DeviceAttribute::string("Nvidia"));
    a.insert("architecture".into(), DeviceAttribute::string(architecture));
    a.insert("cudaComputeCapability".into(), DeviceAttribute::version(cc));
    a.insert(
        "driverVersion".into(),
        DeviceAttribute::version(DRIVER_VERSION),
    );
    a.insert(
        "cudaDriverVersion".into(),
        DeviceAttribute::version(format!("{CUDA_VERSION}.0")),
    );
    let bus = g.pci_bus_id.to_ascii_lowercase();
    match v {
        DriverVersion::V25_3 => {
            a.insert("index".into(), DeviceAttribute::int(i64::from(g.index)));
            a.insert("minor".into(), DeviceAttribute::int(i64::from(g.index)));
            a.insert("pcieBusID".into(), DeviceAttribute::string(&bus));
        }
        DriverVersion::V25_12 => {
            // The standard attribute drops the 8-digit domain to 4 digits, as sysfs names it.
            let short = bus
                .split_once(':')
                .map(|(dom, rest)| format!("{}:{rest}", &dom[dom.len().saturating_sub(4)..]))
                .unwrap_or(bus.clone());
            a.insert(PCI_BUS_ID.into(), DeviceAttribute::string(short));
        }
    }
    if let Some(r) = pcie_root(&g.pci_bus_id) {
        a.insert(PCIE_ROOT.into(), DeviceAttribute::string(r));
    }
    d.capacity.insert(
        "memory".into(),
        DeviceCapacity {
            value: k8s_openapi::apimachinery::pkg::api::resource::Quantity(format!(
                "{}Mi",
                g.memory_mib
            )),
        },
    );
    d
}

/// The slice the driver publishes for a node (`None` for a node without GPUs: the driver's
/// plugin publishes nothing there).
pub fn resource_slice(info: &NodeInfo, v: DriverVersion) -> Option<ResourceSlice> {
    if info.gpus.is_empty() {
        return None;
    }
    let mut s: ResourceSlice = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{}-{}", info.name, NVIDIA_DRIVER.replace('.', "-"))},
        "spec": {
            "driver": NVIDIA_DRIVER,
            "nodeName": info.name,
            "pool": {"name": info.name, "generation": 1, "resourceSliceCount": 1},
        },
    }))
    .expect("a ResourceSlice");
    s.spec.devices = info.gpus.iter().map(|g| device(g, v)).collect();
    Some(s)
}

/// Installs the driver: the DeviceClass, then every node's slice.
pub async fn publish(
    client: &Client,
    infos: &[NodeInfo],
    v: DriverVersion,
    concurrency: usize,
) -> kube::Result<()> {
    let classes: Api<DeviceClass> = Api::all(client.clone());
    match classes
        .create(&PostParams::default(), &device_class())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    futures::stream::iter(infos.iter().filter_map(|i| resource_slice(i, v)))
        .map(|s| {
            let slices = slices.clone();
            async move {
                match slices.create(&PostParams::default(), &s).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_operator::controller::dra::inventory::{SliceObs, core_gpus, node_gpus};

    fn info() -> NodeInfo {
        NodeInfo {
            name: "gpu001".into(),
            labels: Default::default(),
            cpu_millis: 1000,
            memory_mib: 1000,
            taints: vec![],
            gpus: (0..4)
                .map(|i| GpuInfo {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    model: "NVIDIA H100 80GB HBM3".into(),
                    memory_mib: 81559,
                    numa_node: Some((i / 2) as i32),
                    nvlink_peers: vec![],
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x20),
                })
                .collect(),
            topology: vec![],
            extended_resources: Default::default(),
        }
    }

    #[test]
    fn the_operator_reads_what_the_simulated_driver_publishes() {
        for v in [DriverVersion::V25_3, DriverVersion::V25_12] {
            let s = resource_slice(&info(), v).unwrap();
            assert_eq!(s.spec.devices.len(), 4);
            let d = &s.spec.devices[1];
            assert_eq!(d.name, "gpu-1");
            assert_eq!(
                d.attributes["architecture"].string.as_deref(),
                Some("Hopper")
            );
            assert_eq!(
                v == DriverVersion::V25_3,
                d.attributes.contains_key("index")
            );
            assert_eq!(
                v == DriverVersion::V25_12,
                d.attributes.contains_key(PCI_BUS_ID)
            );
            let o = SliceObs::from_slice(&s).unwrap();
            let g = node_gpus(&[&o]).unwrap();
            let (gpus, links, names) = core_gpus(&g, None);
            assert_eq!(gpus[1].uuid, "GPU-1");
            assert_eq!(gpus[1].memory_mib, 81559);
            assert_eq!(names[3], ("gpu001".into(), "gpu-3".into()));
            // 0x18 and 0x38 share a root; 0x58 is another.
            assert_eq!(links[0][1].to_string(), "PHB");
        }
        assert_eq!(pcie_root("00000000:18:00.0").as_deref(), Some("pci0000:00"));
        assert_eq!(pcie_root("00000000:9A:00.0").as_deref(), Some("pci0000:80"));
    }
}

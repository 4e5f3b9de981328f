//! The NVML backend: `libnvidia-ml.so.1` through `nvml-wrapper`, loaded at run time.
//!
//! Static facts (GPUs, topology, NVLinks, affinity) are read once at start; every poll reads
//! memory, compute processes and the reset/fault signals of
//! [`ResetSignals`]. XID and double-bit ECC events arrive on a
//! thread blocked in `nvmlEventSetWait`, and are handed to the next poll. All interpretation
//! lives in [`super::nvml_map`], tested without a GPU; this file only calls NVML.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use jiff::Timestamp;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TopologyLevel};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use super::nvml_map::{self, ActiveLink, RemoteKind, ResetSignals, TopoLevel};
use super::{GpuInventory, InventoryError};
use crate::model::{Gpu, GpuEvent, GpuProcess, NodeInventory, Observation};
use crate::topology;

/// NVML could not be started; `Display` is the one log line saying what is missing.
#[derive(Debug, thiserror::Error)]
#[error("{line}")]
pub struct NvmlUnavailable {
    line: String,
    /// NVML's error.
    #[source]
    pub source: NvmlError,
}

/// The NVML backend.
pub struct NvmlInventory {
    nvml: &'static Nvml,
    static_inventory: NodeInventory,
    previous: HashMap<u32, ResetSignals>,
    events: mpsc::Receiver<GpuEvent>,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    nvml_version: String,
}

impl std::fmt::Debug for NvmlInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlInventory")
            .field("gpus", &self.static_inventory.gpus.len())
            .finish()
    }
}

fn call<T>(name: &'static str, r: Result<T, NvmlError>) -> Result<T, InventoryError> {
    r.map_err(|source| InventoryError::Nvml { call: name, source })
}

/// Optional facts: NotSupported (and friends) mean "the platform does not say".
fn optional<T>(r: Result<T, NvmlError>) -> Option<T> {
    r.ok()
}

impl NvmlInventory {
    /// Loads NVML and reads the node's static GPU facts. `sys_root` (normally `/sys`) is where
    /// the PCI NUMA node is read when NVML does not report it.
    pub fn init(sys_root: &Path) -> Result<Self, NvmlUnavailable> {
        let nvml = Nvml::init().map_err(|source| NvmlUnavailable {
            line: nvml_map::unavailable_reason(&source),
            source,
        })?;
        // One NVML session for the life of the process: devices and event sets borrow it, and
        // the event thread needs it for as long as the agent runs.
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let static_inventory = read_static(nvml, sys_root).map_err(|e| match e {
            InventoryError::Nvml { source, call } => NvmlUnavailable {
                line: format!("NVML unavailable: {call} failed: {source}; to run without a GPU driver, pass --fixture FILE (see node-agent/fixtures/)"),
                source,
            },
        })?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("nvml-events".into())
                .spawn(move || watch_events(nvml, tx, stop))
                .ok()
        };
        let nvml_version = nvml.sys_nvml_version().unwrap_or_default();
        Ok(NvmlInventory {
            nvml,
            static_inventory,
            previous: HashMap::new(),
            events: rx,
            stop,
            watcher,
            nvml_version,
        })
    }
}

impl Drop for NvmlInventory {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

fn read_static(nvml: &Nvml, sys_root: &Path) -> Result<NodeInventory, InventoryError> {
    let count = call("nvmlDeviceGetCount", nvml.device_count())?;
    let driver_version = optional(nvml.sys_driver_version());
    let cuda_version = optional(nvml.sys_cuda_driver_version()).map(nvml_map::cuda_version);
    let mut gpus = Vec::new();
    let mut all_links = Vec::new();
    for index in 0..count {
        let dev = call("nvmlDeviceGetHandleByIndex", nvml.device_by_index(index))?;
        let uuid = call("nvmlDeviceGetUUID", dev.uuid())?;
        let model = call("nvmlDeviceGetName", dev.name())?;
        let memory_mib = nvml_map::mib(call("nvmlDeviceGetMemoryInfo", dev.memory_info())?.total);
        let pci_bus_id = optional(dev.pci_info()).map(|p| p.bus_id);
        let numa_node = optional(dev.numa_node_id())
            .and_then(|n| i32::try_from(n).ok())
            .or_else(|| {
                let bus = pci_bus_id.as_deref()?;
                let path: PathBuf = sys_root
                    .join("bus/pci/devices")
                    .join(nvml_map::sysfs_pci_address(bus))
                    .join("numa_node");
                nvml_map::parse_numa_node(&std::fs::read_to_string(path).ok()?)
            });
        // 64 words of 64 bits: up to 4096 CPUs.
        let cpu_affinity = optional(dev.cpu_affinity(64))
            .map(|words| topology::cpuset_from_mask(&words_u64(&words)))
            .filter(|s| !s.is_empty());
        let mig_enabled = optional(dev.mig_mode()).map(|m| nvml_map::mig_enabled(m.current));
        let mut mig_uuids = Vec::new();
        if mig_enabled == Some(true) {
            for m in 0..optional(dev.mig_device_count()).unwrap_or(0) {
                if let Some(u) =
                    optional(dev.mig_device_by_index(m)).and_then(|d| optional(d.uuid()))
                {
                    mig_uuids.push(u);
                }
            }
        }
        all_links.push(active_links(nvml, &dev));
        gpus.push(Gpu {
            index,
            uuid,
            model,
            memory_mib,
            pci_bus_id,
            numa_node,
            cpu_affinity,
            nvlink_peers: Vec::new(),
            mig_enabled,
            mig_uuids,
            memory_used_mib: None,
        });
    }

    let n = gpus.len();
    let mut levels = vec![vec![None; n]; n];
    let pairs = (0..n).flat_map(|i| ((i + 1)..n).map(move |j| (i, j)));
    for (i, j) in pairs {
        let (Ok(a), Ok(b)) = (
            nvml.device_by_index(i as u32),
            nvml.device_by_index(j as u32),
        ) else {
            continue;
        };
        let level = optional(a.topology_common_ancestor(b)).map(|l| match l {
            TopologyLevel::Internal => TopoLevel::Internal,
            TopologyLevel::Single => TopoLevel::Single,
            TopologyLevel::Multiple => TopoLevel::Multiple,
            TopologyLevel::HostBridge => TopoLevel::HostBridge,
            TopologyLevel::Node => TopoLevel::Node,
            TopologyLevel::System => TopoLevel::System,
        });
        levels[i][j] = level;
        levels[j][i] = level;
    }
    let bus_ids: Vec<String> = gpus
        .iter()
        .map(|g| g.pci_bus_id.clone().unwrap_or_default())
        .collect();
    let counts = nvml_map::nvlink_counts(&bus_ids, &all_links);
    let matrix = nvml_map::topology_matrix(&levels, &counts);
    for (g, peers) in gpus.iter_mut().zip(topology::nvlink_peers(&matrix)) {
        g.nvlink_peers = peers;
    }
    Ok(NodeInventory {
        driver_version,
        cuda_version,
        gpus,
        topology: matrix,
    })
}

/// NVML's CPU mask words are `unsigned long`: 64 bits on the 64-bit Linux targets the agent
/// ships for, which is the layout [`topology::cpuset_from_mask`] reads.
#[allow(clippy::unnecessary_cast)]
fn words_u64(words: &[std::os::raw::c_ulong]) -> Vec<u64> {
    words.iter().map(|w| *w as u64).collect()
}

fn active_links(nvml: &Nvml, dev: &nvml_wrapper::Device<'_>) -> Vec<ActiveLink> {
    // NVML_NVLINK_MAX_LINKS in the NVML 12 headers.
    const MAX_LINKS: u32 = 18;
    let mut out = Vec::new();
    for l in 0..MAX_LINKS {
        let link = dev.link_wrapper_for(l);
        match link.is_active() {
            Ok(true) => {}
            Ok(false) => continue,
            // No NVLink at all on this GPU (or this link index does not exist).
            Err(_) => break,
        }
        out.push(ActiveLink {
            kind: remote_kind(nvml, dev, l),
            remote_bus_id: optional(link.remote_pci_info()).map(|p| p.bus_id),
        });
    }
    out
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`, called directly: nvml-wrapper 0.13's
/// `NvLink::remote_device_type` writes NVML's answer into a temporary and always returns
/// `Unknown`.
fn remote_kind(nvml: &Nvml, dev: &nvml_wrapper::Device<'_>, link: u32) -> RemoteKind {
    let Ok(sym) = nvml.lib().nvmlDeviceGetNvLinkRemoteDeviceType.as_ref() else {
        return RemoteKind::Unknown;
    };
    let mut kind: u32 = 255;
    // SAFETY: the handle comes from this NVML session, which lives for the whole process, and
    // `kind` is a valid out-pointer for the duration of the call.
    let ret = unsafe { sym(dev.handle(), link, &mut kind) };
    match (nvml_try(ret), kind) {
        (Ok(()), 0) => RemoteKind::Gpu,
        (Ok(()), 1) => RemoteKind::Ibmnpu,
        (Ok(()), 2) => RemoteKind::Switch,
        _ => RemoteKind::Unknown,
    }
}

/// `nvmlDeviceGetRemappedRows`' isPending (not wrapped by nvml-wrapper 0.13).
fn remap_pending(nvml: &Nvml, dev: &nvml_wrapper::Device<'_>) -> Option<bool> {
    let sym = nvml.lib().nvmlDeviceGetRemappedRows.as_ref().ok()?;
    let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: valid handle of this session; four valid out-pointers.
    let ret = unsafe { sym(dev.handle(), &mut corr, &mut unc, &mut pending, &mut failed) };
    nvml_try(ret).ok().map(|()| pending != 0)
}

fn watch_events(nvml: &'static Nvml, tx: mpsc::Sender<GpuEvent>, stop: Arc<AtomicBool>) {
    let Ok(mut set) = nvml.create_event_set() else {
        tracing::warn!(
            "NVML event sets unsupported: XID events will not be seen (ECC counters and lost GPUs still are)"
        );
        return;
    };
    let wanted = EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR;
    for index in 0..nvml.device_count().unwrap_or(0) {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let supported = dev.supported_event_types().unwrap_or(EventTypes::empty());
        match dev.register_events(wanted & supported, set) {
            Ok(s) => set = s,
            Err(e) => {
                tracing::warn!(gpu = index, error = %e.error, "cannot register for NVML events; XIDs on this GPU will not be seen");
                // A failed registration releases the set; start a new one for the other GPUs.
                match nvml.create_event_set() {
                    Ok(s) => set = s,
                    Err(_) => return,
                }
            }
        }
    }
    while !stop.load(Ordering::Relaxed) {
        match set.wait(1000) {
            Ok(data) => {
                let Ok(gpu) = data.device.index() else {
                    continue;
                };
                let xid = match data.event_data {
                    Some(nvml_wrapper::enums::event::XidError::Value(v)) => v,
                    Some(nvml_wrapper::enums::event::XidError::Unknown) => 999,
                    None => 0,
                };
                let kinds = nvml_map::event_kinds(
                    data.event_type.contains(EventTypes::CRITICAL_XID_ERROR),
                    data.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR),
                    xid,
                );
                let at = Timestamp::now();
                for kind in kinds {
                    if tx.send(GpuEvent { gpu, at, kind }).is_err() {
                        return;
                    }
                }
            }
            Err(NvmlError::Timeout) => {}
            // A lost GPU makes every wait fail; the poll reports it as lost.
            Err(e) => {
                tracing::debug!(error = %e, "nvmlEventSetWait");
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

fn process(gpu: u32, p: &ProcessInfo) -> GpuProcess {
    GpuProcess {
        gpu,
        pid: p.pid,
        used_memory_mib: match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(nvml_map::mib(b)),
            UsedGpuMemory::Unavailable => None,
        },
    }
}

impl GpuInventory for NvmlInventory {
    fn describe(&self) -> String {
        format!(
            "NVML {} (driver {})",
            self.nvml_version,
            self.static_inventory
                .driver_version
                .as_deref()
                .unwrap_or("unknown")
        )
    }

    fn observe(&mut self, now: Timestamp) -> Result<Observation, InventoryError> {
        let mut inventory = self.static_inventory.clone();
        let mut processes = Vec::new();
        let mut events: Vec<GpuEvent> = self.events.try_iter().collect();
        for gpu in &mut inventory.gpus {
            let dev = self.nvml.device_by_index(gpu.index);
            let mut signals = ResetSignals::default();
            match dev {
                Err(NvmlError::GpuLost) => signals.lost = true,
                Err(e) => {
                    return Err(InventoryError::Nvml {
                        call: "nvmlDeviceGetHandleByIndex",
                        source: e,
                    });
                }
                Ok(dev) => match dev.memory_info() {
                    Err(NvmlError::GpuLost) => signals.lost = true,
                    Err(e) => {
                        return Err(InventoryError::Nvml {
                            call: "nvmlDeviceGetMemoryInfo",
                            source: e,
                        });
                    }
                    Ok(mem) => {
                        gpu.memory_used_mib = Some(nvml_map::mib(mem.used));
                        match dev.running_compute_processes() {
                            Ok(ps) => processes.extend(ps.iter().map(|p| process(gpu.index, p))),
                            Err(NvmlError::GpuLost) => signals.lost = true,
                            Err(e) => {
                                return Err(InventoryError::Nvml {
                                    call: "nvmlDeviceGetComputeRunningProcesses",
                                    source: e,
                                });
                            }
                        }
                        // With MIG on, processes are listed per MIG device.
                        for m in 0..gpu.mig_uuids.len() as u32 {
                            if let Some(ps) = optional(dev.mig_device_by_index(m))
                                .and_then(|d| optional(d.running_compute_processes()))
                            {
                                processes.extend(ps.iter().map(|p| process(gpu.index, p)));
                            }
                        }
                        signals.volatile_dbe = optional(
                            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
                        );
                        signals.remap_pending = remap_pending(self.nvml, &dev);
                        signals.retire_pending = optional(dev.are_pages_pending_retired());
                    }
                },
            }
            for kind in nvml_map::compare_signals(self.previous.get(&gpu.index), &signals) {
                events.push(GpuEvent {
                    gpu: gpu.index,
                    at: now,
                    kind,
                });
            }
            self.previous.insert(gpu.index, signals);
        }
        processes.sort();
        processes.dedup();
        Ok(Observation {
            inventory,
            processes,
            events,
        })
    }
}

//! NVML values → the agent's model, as pure functions over plain data, so the mapping is
//! tested on values recorded from real nodes without a GPU. [`super::nvml`] makes the calls and
//! feeds these.

use std::collections::HashMap;

use crate::model::GpuEventKind;
use crate::topology::Link;

/// NVML's `nvmlGpuTopologyLevel_t`: the closest common ancestor of two GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopoLevel {
    /// Same board (`NVML_TOPOLOGY_INTERNAL`, e.g. the two halves of a K80).
    Internal,
    /// One PCIe switch (`NVML_TOPOLOGY_SINGLE`).
    Single,
    /// Several PCIe switches, no host bridge (`NVML_TOPOLOGY_MULTIPLE`).
    Multiple,
    /// The same host bridge (`NVML_TOPOLOGY_HOSTBRIDGE`).
    HostBridge,
    /// The same NUMA node (`NVML_TOPOLOGY_NODE`).
    Node,
    /// Across NUMA nodes (`NVML_TOPOLOGY_SYSTEM`).
    System,
}

/// The `nvidia-smi topo -m` cell for two distinct GPUs: NVLink wins when there is any,
/// otherwise the PCIe level. Internal (same-board) GPUs sit behind an on-board PCIe switch,
/// which nvidia-smi prints as PIX. An unknown level (NVML could not tell) is taken as SYS, the
/// farthest, so nothing is scheduled as closer than it is.
pub fn link_between(level: Option<TopoLevel>, nvlinks: u32) -> Link {
    if nvlinks > 0 {
        return Link::NvLink(nvlinks);
    }
    match level {
        Some(TopoLevel::Internal | TopoLevel::Single) => Link::Pix,
        Some(TopoLevel::Multiple) => Link::Pxb,
        Some(TopoLevel::HostBridge) => Link::Phb,
        Some(TopoLevel::Node) => Link::Node,
        Some(TopoLevel::System) | None => Link::Sys,
    }
}

/// The full matrix from pairwise levels (`levels[i][j]`, only `i != j` read) and NVLink counts.
pub fn topology_matrix(levels: &[Vec<Option<TopoLevel>>], nvlinks: &[Vec<u32>]) -> Vec<Vec<Link>> {
    let n = levels.len();
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        Link::SelfLink
                    } else {
                        let level = levels[i].get(j).copied().flatten();
                        let links = nvlinks.get(i).and_then(|r| r.get(j)).copied().unwrap_or(0);
                        link_between(level, links)
                    }
                })
                .collect()
        })
        .collect()
}

/// What an active NVLink of a GPU connects to (`nvmlDeviceGetNvLinkRemoteDeviceType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteKind {
    /// Another GPU.
    Gpu,
    /// An NVSwitch.
    Switch,
    /// An IBM NPU (POWER9 hosts).
    Ibmnpu,
    /// NVML could not tell (old driver, or the call is unsupported).
    Unknown,
}

/// One active NVLink of a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveLink {
    /// What it connects to.
    pub kind: RemoteKind,
    /// The remote end's PCI bus id (`nvmlDeviceGetNvLinkRemotePciInfo`), when known.
    pub remote_bus_id: Option<String>,
}

/// NVLink counts between GPUs, as `nvidia-smi topo -m` shows them (`NV#`).
///
/// A link whose far end is one of our GPUs (by PCI bus id) connects that pair directly. A link
/// to an NVSwitch joins the GPU to the switch fabric; on NVSwitch systems (DGX/HGX A100, H100)
/// every GPU reaches every other through the fabric, and `nvidia-smi` prints the number of
/// fabric links a GPU has (18 on H100: NV18, 12 on A100: NV12). So a pair both on the fabric
/// gets `min(fabric links)`, plus any direct links. A link of unknown kind whose far end is
/// not one of our GPUs is taken as a switch link: NVLink's only other endpoint is the IBM NPU.
pub fn nvlink_counts(bus_ids: &[String], links: &[Vec<ActiveLink>]) -> Vec<Vec<u32>> {
    let n = bus_ids.len();
    let index: HashMap<String, usize> = bus_ids
        .iter()
        .enumerate()
        .map(|(i, b)| (normalize_bus_id(b), i))
        .collect();
    let mut direct = vec![vec![0u32; n]; n];
    let mut fabric = vec![0u32; n];
    for (i, gpu_links) in links.iter().enumerate().take(n) {
        for link in gpu_links {
            let peer = link
                .remote_bus_id
                .as_deref()
                .and_then(|b| index.get(&normalize_bus_id(b)).copied());
            match (peer, link.kind) {
                (Some(j), _) if j != i => direct[i][j] += 1,
                (Some(_), _) => {}
                (None, RemoteKind::Switch | RemoteKind::Unknown) => fabric[i] += 1,
                (None, RemoteKind::Gpu | RemoteKind::Ibmnpu) => {}
            }
        }
    }
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        return 0;
                    }
                    // Each direct link is seen from both ends; take the larger view in case
                    // one end could not report it.
                    let d = direct[i][j].max(direct[j][i]);
                    d + fabric[i].min(fabric[j])
                })
                .collect()
        })
        .collect()
}

/// A PCI bus id in one canonical form: lowercase, 8-digit domain (`00000000:18:00.0`). NVML
/// returns `00000000:18:00.0`; sysfs and some NVML calls use a 4-digit domain.
pub fn normalize_bus_id(bus_id: &str) -> String {
    let s = bus_id.trim().to_ascii_lowercase();
    match s.split_once(':') {
        Some((domain, rest)) if rest.contains(':') => match u32::from_str_radix(domain, 16) {
            Ok(d) => format!("{d:08x}:{rest}"),
            Err(_) => s,
        },
        // No domain at all (`18:00.0`).
        _ => format!("00000000:{s}"),
    }
}

/// The sysfs name of a PCI device (`0000:18:00.0`) from NVML's bus id.
pub fn sysfs_pci_address(bus_id: &str) -> String {
    let canon = normalize_bus_id(bus_id);
    match canon.split_once(':') {
        Some((domain, rest)) => {
            let d = u32::from_str_radix(domain, 16).unwrap_or(0);
            format!("{d:04x}:{rest}")
        }
        None => canon,
    }
}

/// `/sys/bus/pci/devices/…/numa_node`: `-1` means the platform does not say.
pub fn parse_numa_node(text: &str) -> Option<i32> {
    text.trim().parse::<i32>().ok().filter(|n| *n >= 0)
}

/// `nvmlSystemGetCudaDriverVersion` (`12040`) → `12.4`.
pub fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// `nvmlDeviceGetMigMode`'s current mode (`NVML_DEVICE_MIG_ENABLE` is 1).
pub fn mig_enabled(current: u32) -> bool {
    current == 1
}

/// Bytes → MiB, rounding down (as nvidia-smi does).
pub fn mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}

/// What an NVML event (`nvmlEventData_t`) means for health. `critical_xid` and `double_bit_ecc`
/// are its type bits; `data` is `eventData`, the XID for XID events (999: unknown).
pub fn event_kinds(critical_xid: bool, double_bit_ecc: bool, data: u64) -> Vec<GpuEventKind> {
    let mut kinds = Vec::new();
    if critical_xid {
        kinds.push(GpuEventKind::Xid(match data {
            999 => None,
            v => u32::try_from(v).ok(),
        }));
    }
    if double_bit_ecc {
        kinds.push(GpuEventKind::DoubleBitEcc { count: 1 });
    }
    kinds
}

/// Per-poll readings of one GPU that reveal faults events may have missed, and resets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResetSignals {
    /// The GPU answered NVML with `GPU_IS_LOST`.
    pub lost: bool,
    /// Volatile uncorrected ECC count (`nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)`);
    /// the driver clears volatile counters when the GPU is reset or the driver reloads.
    pub volatile_dbe: Option<u64>,
    /// A row remapping is pending (`nvmlDeviceGetRemappedRows` isPending, A100 and later);
    /// pending remaps are applied by a GPU reset.
    pub remap_pending: Option<bool>,
    /// Page retirements are pending (`nvmlDeviceGetRetiredPagesPendingStatus`, pre-A100);
    /// applied by a reset or driver reload.
    pub retire_pending: Option<bool>,
}

/// Events implied by the change between two polls of a GPU.
///
/// NVML has no "GPU was reset" event. The reset evidence used, any of:
/// - a GPU that was lost answers again;
/// - its volatile uncorrected-ECC counter went down (volatile counters clear on reset/reload);
/// - a pending row remapping or page retirement is no longer pending (applied at reset).
///
/// A rise of the volatile counter is reported as double-bit ECC errors, in case the event was
/// missed. The first poll only sets the baseline: a restarted agent must not re-fail GPUs for
/// errors an earlier agent already judged.
pub fn compare_signals(prev: Option<&ResetSignals>, cur: &ResetSignals) -> Vec<GpuEventKind> {
    if cur.lost {
        return vec![GpuEventKind::Lost];
    }
    let Some(prev) = prev else { return Vec::new() };
    let mut out = Vec::new();
    let mut reset = Vec::new();
    if prev.lost {
        reset.push("the GPU answers again after being lost");
    }
    match (prev.volatile_dbe, cur.volatile_dbe) {
        (Some(a), Some(b)) if b < a => reset.push("volatile ECC counters cleared"),
        (Some(a), Some(b)) if b > a => out.push(GpuEventKind::DoubleBitEcc { count: b - a }),
        _ => {}
    }
    if prev.remap_pending == Some(true) && cur.remap_pending == Some(false) {
        reset.push("pending row remapping applied");
    }
    if prev.retire_pending == Some(true) && cur.retire_pending == Some(false) {
        reset.push("pending page retirement applied");
    }
    if !reset.is_empty() {
        out.insert(
            0,
            GpuEventKind::Reset {
                signal: reset.join(", "),
            },
        );
    }
    out
}

/// The one log line for an NVML that cannot start: what is missing and how to go on.
pub fn unavailable_reason(err: &nvml_wrapper::error::NvmlError) -> String {
    use nvml_wrapper::error::NvmlError as E;
    let what = match err {
        E::LibloadingError(e) => format!(
            "libnvidia-ml.so.1 could not be loaded ({e}): this node has no NVIDIA driver, or the driver's libraries are not mounted into the agent's container"
        ),
        E::LibraryNotFound => "libnvidia-ml.so.1 was not found: this node has no NVIDIA driver, or the driver's libraries are not mounted into the agent's container".to_string(),
        E::DriverNotLoaded => "the NVIDIA kernel driver is not loaded (is nvidia.ko installed and loaded?)".to_string(),
        E::NoPermission => "no permission to open the NVIDIA devices (/dev/nvidiactl, /dev/nvidia*)".to_string(),
        E::LibRmVersionMismatch => "the NVML library and the loaded kernel driver are different versions (reboot or reload the driver after an upgrade)".to_string(),
        E::FunctionNotFound | E::FailedToLoadSymbol(_) => format!("libnvidia-ml.so.1 is too old for this agent ({err})"),
        other => format!("NVML failed to initialise: {other}"),
    };
    format!(
        "NVML unavailable: {what}; to run without a GPU driver, pass --fixture FILE (see node-agent/fixtures/)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use TopoLevel::*;

    /// `nvmlDeviceGetTopologyCommonAncestor` for the 4-GPU PCIe box of
    /// `fixtures/pcie-4gpu-2socket.yaml`: GPUs 0,1 behind one switch on socket 0, GPUs 2,3 on
    /// separate root ports of socket 1.
    fn pcie_levels() -> Vec<Vec<Option<TopoLevel>>> {
        vec![
            vec![None, Some(Single), Some(System), Some(System)],
            vec![Some(Single), None, Some(System), Some(System)],
            vec![Some(System), Some(System), None, Some(Node)],
            vec![Some(System), Some(System), Some(Node), None],
        ]
    }

    #[test]
    fn pcie_levels_become_nvidia_smi_names() {
        let m = topology_matrix(&pcie_levels(), &[]);
        let text: Vec<String> = m
            .iter()
            .map(|r| r.iter().map(Link::to_string).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            text,
            vec![
                "X PIX SYS SYS",
                "PIX X SYS SYS",
                "SYS SYS X NODE",
                "SYS SYS NODE X"
            ]
        );
        assert_eq!(link_between(Some(Multiple), 0), Link::Pxb);
        assert_eq!(link_between(Some(HostBridge), 0), Link::Phb);
        assert_eq!(link_between(Some(Internal), 0), Link::Pix);
        assert_eq!(link_between(None, 0), Link::Sys);
        assert_eq!(link_between(Some(System), 4), Link::NvLink(4));
    }

    fn bus(i: usize) -> String {
        // DGX H100 GPU bus ids, as nvmlDeviceGetPciInfo reports them.
        [
            "00000000:18:00.0",
            "00000000:2A:00.0",
            "00000000:3A:00.0",
            "00000000:5D:00.0",
            "00000000:9A:00.0",
            "00000000:AB:00.0",
            "00000000:BA:00.0",
            "00000000:DB:00.0",
        ][i]
            .to_string()
    }

    #[test]
    fn nvswitch_fabric_gives_all_to_all_nv18() {
        // DGX H100: each GPU has 18 active links, all to NVSwitches (remote type SWITCH; the
        // remote PCI info names the switch, not a GPU).
        let buses: Vec<String> = (0..8).map(bus).collect();
        let links: Vec<Vec<ActiveLink>> = (0..8)
            .map(|_| {
                (0..18)
                    .map(|l| ActiveLink {
                        kind: RemoteKind::Switch,
                        remote_bus_id: Some(format!("00000000:{:02X}:00.0", 0x05 + l % 4)),
                    })
                    .collect()
            })
            .collect();
        let counts = nvlink_counts(&buses, &links);
        let levels = vec![vec![Some(System); 8]; 8];
        let m = topology_matrix(&levels, &counts);
        for (i, row) in m.iter().enumerate() {
            for (j, l) in row.iter().enumerate() {
                assert_eq!(
                    *l,
                    if i == j {
                        Link::SelfLink
                    } else {
                        Link::NvLink(18)
                    },
                    "[{i}][{j}]"
                );
            }
        }
    }

    #[test]
    fn direct_bridges_count_links_per_pair_and_unknown_kinds_resolve_by_bus_id() {
        // Two PCIe GPUs joined by an NVLink bridge with 4 links; NVML on this driver reports
        // the remote type as unknown and the remote bus id with a 4-digit domain.
        let buses = vec![
            "00000000:3B:00.0".to_string(),
            "00000000:AF:00.0".to_string(),
            "00000000:D8:00.0".to_string(),
        ];
        let to = |b: &str| ActiveLink {
            kind: RemoteKind::Unknown,
            remote_bus_id: Some(b.to_string()),
        };
        let links = vec![
            vec![to("0000:af:00.0"); 4],
            vec![to("0000:3b:00.0"); 4],
            vec![],
        ];
        let counts = nvlink_counts(&buses, &links);
        assert_eq!(counts, vec![vec![0, 4, 0], vec![4, 0, 0], vec![0, 0, 0]]);
    }

    #[test]
    fn bus_ids_and_sysfs_names() {
        assert_eq!(normalize_bus_id("00000000:2A:00.0"), "00000000:2a:00.0");
        assert_eq!(normalize_bus_id("0000:2a:00.0"), "00000000:2a:00.0");
        assert_eq!(normalize_bus_id("2a:00.0"), "00000000:2a:00.0");
        assert_eq!(sysfs_pci_address("00000000:2A:00.0"), "0000:2a:00.0");
        assert_eq!(sysfs_pci_address("00000001:2A:00.0"), "0001:2a:00.0");
    }

    #[test]
    fn numa_cuda_mig_and_memory() {
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node("garbage"), None);
        assert_eq!(cuda_version(12040), "12.4");
        assert_eq!(cuda_version(12090), "12.9");
        assert_eq!(cuda_version(11080), "11.8");
        assert_eq!(cuda_version(13000), "13.0");
        assert!(mig_enabled(1));
        assert!(!mig_enabled(0));
        // H100 80GB HBM3: nvmlDeviceGetMemoryInfo total.
        assert_eq!(mib(85_520_809_984), 81_559);
    }

    #[test]
    fn xid_event_data() {
        assert_eq!(
            event_kinds(true, false, 79),
            vec![GpuEventKind::Xid(Some(79))]
        );
        assert_eq!(event_kinds(true, false, 999), vec![GpuEventKind::Xid(None)]);
        assert_eq!(
            event_kinds(false, true, 0),
            vec![GpuEventKind::DoubleBitEcc { count: 1 }]
        );
        assert_eq!(event_kinds(false, false, 13), vec![]);
    }

    #[test]
    fn reset_and_fault_detection_between_polls() {
        let base = ResetSignals {
            lost: false,
            volatile_dbe: Some(0),
            remap_pending: Some(false),
            retire_pending: None,
        };
        // First poll: baseline only, even with old errors on the counter.
        assert_eq!(
            compare_signals(
                None,
                &ResetSignals {
                    volatile_dbe: Some(3),
                    ..base.clone()
                }
            ),
            vec![]
        );
        // Lost is reported every poll.
        let lost = ResetSignals {
            lost: true,
            ..Default::default()
        };
        assert_eq!(
            compare_signals(Some(&base), &lost),
            vec![GpuEventKind::Lost]
        );
        assert_eq!(compare_signals(None, &lost), vec![GpuEventKind::Lost]);
        // Back from lost.
        assert_eq!(
            compare_signals(Some(&lost), &base),
            vec![GpuEventKind::Reset {
                signal: "the GPU answers again after being lost".into()
            }]
        );
        // Counter rises: missed DBEs.
        let two = ResetSignals {
            volatile_dbe: Some(2),
            ..base.clone()
        };
        assert_eq!(
            compare_signals(Some(&base), &two),
            vec![GpuEventKind::DoubleBitEcc { count: 2 }]
        );
        // Counter cleared and remap applied: one reset with both reasons.
        let pending = ResetSignals {
            volatile_dbe: Some(2),
            remap_pending: Some(true),
            ..base.clone()
        };
        assert_eq!(
            compare_signals(Some(&pending), &base),
            vec![GpuEventKind::Reset {
                signal: "volatile ECC counters cleared, pending row remapping applied".into()
            }]
        );
        let retire = ResetSignals {
            retire_pending: Some(true),
            ..base.clone()
        };
        let retired = ResetSignals {
            retire_pending: Some(false),
            ..base.clone()
        };
        assert_eq!(
            compare_signals(Some(&retire), &retired),
            vec![GpuEventKind::Reset {
                signal: "pending page retirement applied".into()
            }]
        );
        assert_eq!(compare_signals(Some(&base), &base), vec![]);
    }

    #[test]
    fn unavailable_lines_say_what_is_missing_and_how_to_go_on() {
        use nvml_wrapper::error::NvmlError;
        let line = unavailable_reason(&NvmlError::DriverNotLoaded);
        assert!(
            line.starts_with("NVML unavailable: the NVIDIA kernel driver is not loaded"),
            "{line}"
        );
        assert!(line.ends_with("pass --fixture FILE (see node-agent/fixtures/)"));
        assert!(unavailable_reason(&NvmlError::LibraryNotFound).contains("libnvidia-ml.so.1"));
    }
}

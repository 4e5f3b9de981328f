//! NVIDIA XID errors: which ones take a GPU out of service.
//!
//! NVML delivers every XID through its "critical XID" event, including errors an application
//! causes on a healthy GPU (a CUDA kernel's illegal address is XID 13 or 31). NVIDIA's k8s
//! device plugin therefore treats every XID as fatal except the application ones (13, 31, 43,
//! 45, 68, 109). Muster takes the opposite, explicit approach — a GPU is marked Unhealthy only
//! for the XIDs below, which NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors) files
//! under hardware, memory, interconnect or firmware faults whose resolution is a GPU reset,
//! a node reboot or service — because a false positive here drains GPUs from running jobs
//! (NODE_FAIL). Other XIDs are logged and do not change health. The list is replaceable with
//! `--critical-xids`.
//!
//! | XID | meaning |
//! |---|---|
//! | 46 | GPU stopped processing (reset required) |
//! | 48 | double-bit (uncorrectable) ECC error |
//! | 62 | internal micro-controller halt |
//! | 63 | ECC page retirement / row remapping recorded (pending until reset) |
//! | 64 | ECC page retirement / row remapping failed |
//! | 74 | NVLink error |
//! | 79 | GPU has fallen off the bus |
//! | 92 | high single-bit ECC error rate |
//! | 94 | contained ECC error |
//! | 95 | uncontained ECC error |
//! | 119 | GSP RPC timeout |
//! | 120 | GSP error |
//! | 140 | unrecovered ECC error |
//! | 154 | GPU recovery action changed (the driver asks for a reset or reboot) |
//!
//! An XID event whose code the driver did not give (NVML reports 999) is treated as critical:
//! the driver raised it through the critical channel and we cannot tell it is harmless.

use std::collections::BTreeSet;

/// The default critical XIDs (see the module docs).
pub const DEFAULT_CRITICAL: &[u32] = &[46, 48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154];

/// What an XID means, for logs and the GpuNode status reason.
pub fn describe(xid: u32) -> &'static str {
    match xid {
        8 => "GPU stopped processing (channel idle timeout)",
        13 => "graphics engine exception (usually an application error)",
        31 => "GPU memory page fault (usually an application error)",
        32 => "invalid or corrupted push buffer stream",
        38 => "driver firmware error",
        43 => "GPU stopped processing (application reset channel)",
        45 => "preemptive cleanup after previous errors",
        46 => "GPU stopped processing",
        48 => "double-bit ECC error",
        56 => "display engine error",
        57 => "error programming video memory interface",
        61 => "internal micro-controller breakpoint/warning",
        62 => "internal micro-controller halt",
        63 => "ECC page retirement or row remapping recorded",
        64 => "ECC page retirement or row remapping failed",
        68 => "video processor exception",
        69 => "graphics engine class error",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        109 => "context switch timeout",
        119 => "GSP RPC timeout",
        120 => "GSP error",
        140 => "unrecovered ECC error",
        154 => "GPU recovery action changed",
        _ => "see NVIDIA's XID catalogue",
    }
}

/// Which XIDs mark a GPU Unhealthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XidPolicy {
    critical: BTreeSet<u32>,
}

impl Default for XidPolicy {
    fn default() -> Self {
        XidPolicy::new(DEFAULT_CRITICAL.iter().copied())
    }
}

impl XidPolicy {
    /// A policy with exactly these critical XIDs.
    pub fn new(critical: impl IntoIterator<Item = u32>) -> Self {
        XidPolicy {
            critical: critical.into_iter().collect(),
        }
    }

    /// Whether this XID takes the GPU out of service; `None` is an XID of unknown code.
    pub fn is_critical(&self, xid: Option<u32>) -> bool {
        xid.is_none_or(|x| self.critical.contains(&x))
    }

    /// The critical XIDs, ascending.
    pub fn critical(&self) -> impl Iterator<Item = u32> + '_ {
        self.critical.iter().copied()
    }
}

impl std::fmt::Display for XidPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> = self.critical.iter().map(u32::to_string).collect();
        f.write_str(&list.join(","))
    }
}

/// A `--critical-xids` list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an XID list: expected comma-separated XID numbers such as 48,63,64,79")]
pub struct XidListError(pub String);

/// Parses `48,63,64,79` (spaces allowed).
pub fn parse_xid_list(s: &str) -> Result<XidPolicy, XidListError> {
    let xids = s
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u32>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| XidListError(s.to_string()))?;
    Ok(XidPolicy::new(xids))
}

/// The status reason for an XID (`XID 79: GPU has fallen off the bus`).
pub fn reason(xid: Option<u32>) -> String {
    match xid {
        Some(x) => format!("XID {x}: {}", describe(x)),
        None => "XID of unknown code (NVML reported 999)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_xids_are_critical_application_ones_are_not() {
        let p = XidPolicy::default();
        for x in [48, 63, 64, 74, 79, 92, 94, 95, 119, 120] {
            assert!(p.is_critical(Some(x)), "XID {x}");
        }
        for x in [13, 31, 43, 45, 68, 109] {
            assert!(!p.is_critical(Some(x)), "XID {x}");
        }
        assert!(p.is_critical(None));
    }

    #[test]
    fn lists_parse_and_reject_garbage() {
        let p = parse_xid_list(" 48, 79 ,").unwrap();
        assert_eq!(p.critical().collect::<Vec<_>>(), vec![48, 79]);
        assert!(!p.is_critical(Some(63)));
        assert!(
            parse_xid_list("48,x")
                .unwrap_err()
                .to_string()
                .contains("'48,x'")
        );
        assert_eq!(reason(Some(79)), "XID 79: GPU has fallen off the bus");
    }
}

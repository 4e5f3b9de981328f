//! `muster-node-agent inventory`: what the backend sees, printed.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::model::{Gpu, GpuEventKind, GpuProcess, Observation};
use crate::publish;
use crate::topology;

/// The machine-readable form of the `inventory` output.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InventoryReport {
    /// The backend (`NVML 12.550.90.07 (driver 550.90.07)`).
    pub backend: String,
    /// Driver version.
    pub driver_version: Option<String>,
    /// CUDA version.
    pub cuda_version: Option<String>,
    /// GPUs.
    pub gpus: Vec<Gpu>,
    /// `nvidia-smi topo -m` matrix.
    pub topology: Vec<Vec<String>>,
    /// Compute processes.
    pub processes: Vec<GpuProcess>,
    /// Health events seen on this first poll (`xid 79 on GPU 3`, `lost`, …).
    pub events: Vec<String>,
    /// The Node labels the agent would apply.
    pub node_labels: BTreeMap<String, String>,
}

/// Builds the report from one observation.
pub fn report(backend: String, obs: &Observation) -> InventoryReport {
    InventoryReport {
        backend,
        driver_version: obs.inventory.driver_version.clone(),
        cuda_version: obs.inventory.cuda_version.clone(),
        gpus: obs.inventory.gpus.clone(),
        topology: topology::matrix_strings(&obs.inventory.topology),
        processes: obs.processes.clone(),
        events: obs
            .events
            .iter()
            .map(|e| {
                let what = match &e.kind {
                    GpuEventKind::Xid(x) => crate::xid::reason(*x),
                    GpuEventKind::DoubleBitEcc { count } => {
                        format!("{count} double-bit ECC error(s)")
                    }
                    GpuEventKind::Lost => "lost (does not answer NVML)".into(),
                    GpuEventKind::Reset { signal } => format!("reset: {signal}"),
                };
                format!("GPU {}: {what}", e.gpu)
            })
            .collect(),
        node_labels: publish::node_labels(&obs.inventory),
    }
}

/// Renders the report as tables.
pub fn table(r: &InventoryReport) -> String {
    let mut out = String::new();
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".into());
    let _ = writeln!(out, "Backend: {}", r.backend);
    let _ = writeln!(
        out,
        "Driver {}, CUDA {}, {} GPU(s)\n",
        opt(&r.driver_version),
        opt(&r.cuda_version),
        r.gpus.len()
    );
    let rows: Vec<Vec<String>> = r
        .gpus
        .iter()
        .map(|g| {
            vec![
                g.index.to_string(),
                g.uuid.clone(),
                g.model.clone(),
                format!("{} MiB", g.memory_mib),
                g.memory_used_mib.map_or("-".into(), |m| format!("{m} MiB")),
                opt(&g.pci_bus_id),
                g.numa_node.map_or("-".into(), |n| n.to_string()),
                opt(&g.cpu_affinity),
                match g.mig_enabled {
                    Some(true) => format!("on ({})", g.mig_uuids.len()),
                    Some(false) => "off".into(),
                    None => "-".into(),
                },
                if g.nvlink_peers.is_empty() {
                    "-".into()
                } else {
                    g.nvlink_peers
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ]
        })
        .collect();
    columns(
        &mut out,
        &[
            "GPU",
            "UUID",
            "MODEL",
            "MEMORY",
            "USED",
            "PCI",
            "NUMA",
            "CPU AFFINITY",
            "MIG",
            "NVLINK PEERS",
        ],
        &rows,
    );
    if !r.topology.is_empty() {
        let _ = writeln!(out, "\nTopology (as nvidia-smi topo -m):");
        let mut header = vec![String::new()];
        header.extend((0..r.topology.len()).map(|i| format!("GPU{i}")));
        let rows: Vec<Vec<String>> = r
            .topology
            .iter()
            .enumerate()
            .map(|(i, row)| {
                std::iter::once(format!("GPU{i}"))
                    .chain(row.iter().cloned())
                    .collect()
            })
            .collect();
        let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
        columns(&mut out, &header_refs, &rows);
    }
    let _ = writeln!(out, "\nCompute processes:");
    if r.processes.is_empty() {
        let _ = writeln!(out, "  none");
    } else {
        let rows: Vec<Vec<String>> = r
            .processes
            .iter()
            .map(|p| {
                vec![
                    p.gpu.to_string(),
                    p.pid.to_string(),
                    p.used_memory_mib.map_or("-".into(), |m| format!("{m} MiB")),
                ]
            })
            .collect();
        columns(&mut out, &["GPU", "PID", "USED"], &rows);
    }
    if !r.events.is_empty() {
        let _ = writeln!(out, "\nHealth events:");
        for e in &r.events {
            let _ = writeln!(out, "  {e}");
        }
    }
    let _ = writeln!(out, "\nNode labels the agent applies:");
    for (k, v) in &r.node_labels {
        let _ = writeln!(out, "  {k}={v}");
    }
    out
}

fn columns(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.len());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{FixtureInventory, GpuInventory};
    use std::path::Path;

    #[test]
    fn dgx_fixture_prints_like_nvidia_smi() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/dgx-h100.yaml");
        let mut inv = FixtureInventory::load(&path).unwrap();
        let obs = inv.observe(jiff::Timestamp::UNIX_EPOCH).unwrap();
        let r = report(inv.describe(), &obs);
        let t = table(&r);
        assert!(t.contains("Backend: fixture dgx-h100.yaml"), "{t}");
        assert!(t.contains("NVIDIA H100 80GB HBM3"));
        assert!(t.contains("GPU0  X     NV18  NV18"), "{t}");
        assert!(t.contains("muster.dev/gpu.product=NVIDIA-H100-80GB-HBM3"));
        assert!(t.contains("muster.dev/gpu.count=8"));
        let yaml = serde_yaml::to_string(&r).unwrap();
        assert!(yaml.contains("nodeLabels:"));
    }
}

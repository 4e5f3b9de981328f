//! The fixture backend: a node described in YAML, with a script of events over time.
//!
//! ```yaml
//! description: one line on what this node is
//! driverVersion: "550.90.07"
//! cudaVersion: "12.4"
//! gpus:
//!   - index: 0
//!     uuid: GPU-…
//!     model: NVIDIA H100 80GB HBM3
//!     memoryMib: 81559
//!     pciBusId: "00000000:18:00.0"   # optional
//!     numaNode: 0                    # optional
//!     cpuAffinity: 0-55,112-167      # optional
//!     migEnabled: false              # optional
//!     migUuids: []                   # optional
//!     memoryUsedMib: 0               # optional: baseline, processes add to it
//! topology:                          # optional: `nvidia-smi topo -m`, one row per GPU
//!   - X    NV18
//!   - NV18 X
//! processes:                         # optional: running from the start
//!   - {gpu: 0, pid: 4242, usedMib: 1024}
//! script:                            # optional: what happens when, from the first poll
//!   - {at: 30s, xid: {gpu: 1, code: 79}}
//!   - {at: 40s, doubleBitEcc: {gpu: 0, count: 1}}
//!   - {at: 50s, lost: {gpu: 1}}        # stops answering until a reset
//!   - {at: 90s, reset: {gpu: 1}}       # a GPU reset (also ends its processes)
//!   - {at: 60s, process: {gpu: 0, pid: 4243, usedMib: 2048}}  # starts, or changes memory
//!   - {at: 70s, exit: {pid: 4243}}
//! ```
//!
//! NVLink peers are derived from the `NV#` entries of the topology.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;

use super::{GpuInventory, InventoryError};
use crate::model::{Gpu, GpuEvent, GpuEventKind, GpuProcess, NodeInventory, Observation};
use crate::topology::{self, Link};

/// A fixture that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// The file could not be read.
    #[error("cannot read fixture {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML of the expected shape (serde_yaml names the line and column).
    #[error("fixture {source_name}: {source}")]
    Yaml {
        /// The file or name.
        source_name: String,
        /// The parser's error.
        source: serde_yaml::Error,
    },
    /// Well-formed but inconsistent.
    #[error("fixture {source_name}: {field}: {message}")]
    Invalid {
        /// The file or name.
        source_name: String,
        /// The offending field (`gpus[2].index`).
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FixtureFile {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    driver_version: Option<String>,
    #[serde(default)]
    cuda_version: Option<String>,
    gpus: Vec<Gpu>,
    #[serde(default)]
    topology: Vec<String>,
    #[serde(default)]
    processes: Vec<GpuProcess>,
    #[serde(default)]
    script: Vec<StepFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StepFile {
    at: String,
    #[serde(default)]
    xid: Option<XidStep>,
    #[serde(default)]
    double_bit_ecc: Option<EccStep>,
    #[serde(default)]
    reset: Option<GpuStep>,
    #[serde(default)]
    lost: Option<GpuStep>,
    #[serde(default)]
    process: Option<GpuProcess>,
    #[serde(default)]
    exit: Option<PidStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct XidStep {
    gpu: u32,
    code: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EccStep {
    gpu: u32,
    #[serde(default = "one")]
    count: u64,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuStep {
    gpu: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PidStep {
    pid: u32,
}

/// Something a script makes happen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// An XID error (code 999 = unknown code, as NVML reports it).
    Xid {
        /// GPU index.
        gpu: u32,
        /// XID.
        code: u32,
    },
    /// Double-bit ECC errors.
    DoubleBitEcc {
        /// GPU index.
        gpu: u32,
        /// How many.
        count: u64,
    },
    /// The GPU stops answering until reset.
    Lost {
        /// GPU index.
        gpu: u32,
    },
    /// A GPU reset: answers again, its processes end.
    Reset {
        /// GPU index.
        gpu: u32,
    },
    /// A process starts on a GPU (or its memory changes).
    Process(GpuProcess),
    /// A process ends (on every GPU).
    Exit {
        /// Process id.
        pid: u32,
    },
}

/// A scripted action and when it happens, relative to the first poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Offset from the first poll.
    pub at: SignedDuration,
    /// What happens.
    pub action: Action,
}

/// A parsed, validated fixture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixture {
    /// What the fixture describes.
    pub description: Option<String>,
    /// The node (with `memory_used_mib` as the baseline without processes).
    pub inventory: NodeInventory,
    /// Processes running from the start.
    pub processes: Vec<GpuProcess>,
    /// Scripted actions, in time order.
    pub script: Vec<Step>,
}

impl Fixture {
    /// Reads and validates a fixture file.
    pub fn load(path: &Path) -> Result<Fixture, FixtureError> {
        let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Fixture::parse(&text, &path.display().to_string())
    }

    /// Parses and validates fixture YAML; `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Fixture, FixtureError> {
        let file: FixtureFile =
            serde_yaml::from_str(text).map_err(|source| FixtureError::Yaml {
                source_name: source_name.to_string(),
                source,
            })?;
        let invalid = |field: String, message: String| FixtureError::Invalid {
            source_name: source_name.to_string(),
            field,
            message,
        };

        let mut gpus = file.gpus;
        let n = gpus.len();
        let mut uuids = BTreeSet::new();
        for (i, g) in gpus.iter().enumerate() {
            if g.index as usize != i {
                return Err(invalid(
                    format!("gpus[{i}].index"),
                    format!(
                        "is {}: GPUs must be listed in index order 0..{}",
                        g.index,
                        n.saturating_sub(1)
                    ),
                ));
            }
            if !g.uuid.starts_with("GPU-") || !uuids.insert(g.uuid.to_ascii_lowercase()) {
                return Err(invalid(
                    format!("gpus[{i}].uuid"),
                    format!("'{}' must be a unique GPU-… UUID", g.uuid),
                ));
            }
            if g.model.trim().is_empty() {
                return Err(invalid(
                    format!("gpus[{i}].model"),
                    "must name the product".into(),
                ));
            }
            if g.memory_mib == 0 {
                return Err(invalid(
                    format!("gpus[{i}].memoryMib"),
                    "must be the GPU's memory in MiB (> 0)".into(),
                ));
            }
            if let Some(c) = &g.cpu_affinity {
                topology::parse_cpuset(c)
                    .map_err(|e| invalid(format!("gpus[{i}].cpuAffinity"), e.to_string()))?;
            }
        }

        let mut matrix: Vec<Vec<Link>> = Vec::new();
        for (r, row) in file.topology.iter().enumerate() {
            let cells = row
                .split_whitespace()
                .map(str::parse::<Link>)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(format!("topology[{r}]"), e.to_string()))?;
            matrix.push(cells);
        }
        if !matrix.is_empty() {
            topology::validate_matrix(&matrix, n)
                .map_err(|e| invalid("topology".into(), e.to_string()))?;
            for (g, peers) in gpus.iter_mut().zip(topology::nvlink_peers(&matrix)) {
                g.nvlink_peers = peers;
            }
        }

        let gpu_exists = |gpu: u32, field: String| {
            if (gpu as usize) < n {
                Ok(())
            } else {
                Err(invalid(
                    field,
                    format!("GPU {gpu} does not exist (the fixture has {n} GPUs)"),
                ))
            }
        };
        let mut seen = BTreeSet::new();
        for (i, p) in file.processes.iter().enumerate() {
            gpu_exists(p.gpu, format!("processes[{i}].gpu"))?;
            if !seen.insert((p.pid, p.gpu)) {
                return Err(invalid(
                    format!("processes[{i}]"),
                    format!("pid {} is listed twice on GPU {}", p.pid, p.gpu),
                ));
            }
        }

        let mut script = Vec::new();
        for (i, s) in file.script.into_iter().enumerate() {
            let field = |f: &str| format!("script[{i}].{f}");
            let at: SignedDuration = s.at.parse().map_err(|e| {
                invalid(
                    field("at"),
                    format!(
                        "'{}' is not a duration such as 30s, 5m or 1h30m ({e})",
                        s.at
                    ),
                )
            })?;
            if at.is_negative() {
                return Err(invalid(field("at"), format!("'{}' is negative", s.at)));
            }
            let mut actions = Vec::new();
            if let Some(x) = s.xid {
                gpu_exists(x.gpu, field("xid.gpu"))?;
                actions.push(Action::Xid {
                    gpu: x.gpu,
                    code: x.code,
                });
            }
            if let Some(e) = s.double_bit_ecc {
                gpu_exists(e.gpu, field("doubleBitEcc.gpu"))?;
                actions.push(Action::DoubleBitEcc {
                    gpu: e.gpu,
                    count: e.count,
                });
            }
            if let Some(g) = s.lost {
                gpu_exists(g.gpu, field("lost.gpu"))?;
                actions.push(Action::Lost { gpu: g.gpu });
            }
            if let Some(g) = s.reset {
                gpu_exists(g.gpu, field("reset.gpu"))?;
                actions.push(Action::Reset { gpu: g.gpu });
            }
            if let Some(p) = s.process {
                gpu_exists(p.gpu, field("process.gpu"))?;
                actions.push(Action::Process(p));
            }
            if let Some(p) = s.exit {
                actions.push(Action::Exit { pid: p.pid });
            }
            if actions.len() != 1 {
                return Err(invalid(
                    format!("script[{i}]"),
                    "give exactly one of xid, doubleBitEcc, lost, reset, process, exit".into(),
                ));
            }
            script.push(Step {
                at,
                action: actions.remove(0),
            });
        }
        script.sort_by_key(|s| s.at);

        Ok(Fixture {
            description: file.description,
            inventory: NodeInventory {
                driver_version: file.driver_version,
                cuda_version: file.cuda_version,
                gpus,
                topology: matrix,
            },
            processes: file.processes,
            script,
        })
    }
}

/// Injects actions into a running fixture backend (tests hold one while the agent owns the
/// backend). Injected actions happen at the next poll.
#[derive(Clone, Debug, Default)]
pub struct ScriptHandle {
    pending: Arc<Mutex<VecDeque<Action>>>,
}

impl ScriptHandle {
    /// Makes `action` happen at the next poll.
    pub fn inject(&self, action: Action) {
        if let Ok(mut q) = self.pending.lock() {
            q.push_back(action);
        }
    }
}

/// The fixture backend.
#[derive(Debug)]
pub struct FixtureInventory {
    name: String,
    fixture: Fixture,
    start: Option<Timestamp>,
    next_step: usize,
    processes: BTreeMap<(u32, u32), GpuProcess>,
    lost: BTreeSet<u32>,
    handle: ScriptHandle,
}

impl FixtureInventory {
    /// A backend playing `fixture`; `name` appears in logs.
    pub fn new(name: impl Into<String>, fixture: Fixture) -> Self {
        let processes = fixture
            .processes
            .iter()
            .map(|p| ((p.pid, p.gpu), p.clone()))
            .collect();
        FixtureInventory {
            name: name.into(),
            fixture,
            start: None,
            next_step: 0,
            processes,
            lost: BTreeSet::new(),
            handle: ScriptHandle::default(),
        }
    }

    /// Loads a fixture file.
    pub fn load(path: &Path) -> Result<Self, FixtureError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(FixtureInventory::new(name, Fixture::load(path)?))
    }

    /// Fixes the script's time zero (default: the first poll).
    pub fn starting_at(mut self, start: Timestamp) -> Self {
        self.start = Some(start);
        self
    }

    /// A handle to inject actions while the agent runs.
    pub fn handle(&self) -> ScriptHandle {
        self.handle.clone()
    }

    fn apply(&mut self, action: Action, at: Timestamp, events: &mut Vec<GpuEvent>) {
        match action {
            Action::Xid { gpu, code } => events.push(GpuEvent {
                gpu,
                at,
                kind: GpuEventKind::Xid((code != 999).then_some(code)),
            }),
            Action::DoubleBitEcc { gpu, count } => events.push(GpuEvent {
                gpu,
                at,
                kind: GpuEventKind::DoubleBitEcc { count },
            }),
            Action::Lost { gpu } => {
                self.lost.insert(gpu);
            }
            Action::Reset { gpu } => {
                self.lost.remove(&gpu);
                self.processes.retain(|(_, g), _| *g != gpu);
                events.push(GpuEvent {
                    gpu,
                    at,
                    kind: GpuEventKind::Reset {
                        signal: "fixture reset event".into(),
                    },
                });
            }
            Action::Process(p) => {
                self.processes.insert((p.pid, p.gpu), p);
            }
            Action::Exit { pid } => self.processes.retain(|(p, _), _| *p != pid),
        }
    }
}

impl GpuInventory for FixtureInventory {
    fn describe(&self) -> String {
        format!("fixture {}", self.name)
    }

    fn observe(&mut self, now: Timestamp) -> Result<Observation, InventoryError> {
        let start = *self.start.get_or_insert(now);
        let mut events = Vec::new();
        while let Some(step) = self.fixture.script.get(self.next_step).cloned() {
            let Ok(at) = start.checked_add(step.at) else {
                break;
            };
            if at > now {
                break;
            }
            self.next_step += 1;
            self.apply(step.action, at, &mut events);
        }
        let injected: Vec<Action> = self
            .handle
            .pending
            .lock()
            .map(|mut q| q.drain(..).collect())
            .unwrap_or_default();
        for action in injected {
            self.apply(action, now, &mut events);
        }
        for gpu in &self.lost {
            events.push(GpuEvent {
                gpu: *gpu,
                at: now,
                kind: GpuEventKind::Lost,
            });
        }

        let mut inventory = self.fixture.inventory.clone();
        for gpu in &mut inventory.gpus {
            let held: u64 = self
                .processes
                .values()
                .filter(|p| p.gpu == gpu.index)
                .filter_map(|p| p.used_memory_mib)
                .sum();
            gpu.memory_used_mib = Some(gpu.memory_used_mib.unwrap_or(0) + held);
        }
        let processes = self
            .processes
            .values()
            .filter(|p| !self.lost.contains(&p.gpu))
            .cloned()
            .collect();
        Ok(Observation {
            inventory,
            processes,
            events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
description: two GPUs on one NVLink bridge
driverVersion: "550.90.07"
cudaVersion: "12.4"
gpus:
  - {index: 0, uuid: GPU-aaaa, model: NVIDIA A100-SXM4-80GB, memoryMib: 81920, numaNode: 0, cpuAffinity: 0-31}
  - {index: 1, uuid: GPU-bbbb, model: NVIDIA A100-SXM4-80GB, memoryMib: 81920, numaNode: 1, memoryUsedMib: 5}
topology:
  - X   NV12
  - NV12 X
processes:
  - {gpu: 0, pid: 100, usedMib: 1000}
script:
  - {at: 1m, xid: {gpu: 1, code: 79}}
  - {at: 10s, process: {gpu: 1, pid: 200, usedMib: 300}}
  - {at: 2m, lost: {gpu: 1}}
  - {at: 3m, reset: {gpu: 1}}
  - {at: 20s, exit: {pid: 100}}
"#;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn parses_and_derives_nvlink_peers() {
        let f = Fixture::parse(SMALL, "small").unwrap();
        assert_eq!(f.inventory.gpus[0].nvlink_peers, vec![1]);
        assert_eq!(f.inventory.topology[0][1], Link::NvLink(12));
        assert_eq!(
            f.script.iter().map(|s| s.at.as_secs()).collect::<Vec<_>>(),
            vec![10, 20, 60, 120, 180]
        );
    }

    #[test]
    fn the_script_plays_out_over_time() {
        let mut inv = FixtureInventory::new("small", Fixture::parse(SMALL, "small").unwrap());
        let o = inv.observe(t(0)).unwrap();
        assert!(o.events.is_empty());
        assert_eq!(
            o.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![100]
        );
        assert_eq!(o.inventory.gpus[0].memory_used_mib, Some(1000));
        assert_eq!(o.inventory.gpus[1].memory_used_mib, Some(5));

        let o = inv.observe(t(30)).unwrap();
        assert_eq!(
            o.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![200]
        );
        assert_eq!(o.inventory.gpus[1].memory_used_mib, Some(305));

        let o = inv.observe(t(60)).unwrap();
        assert_eq!(
            o.events,
            vec![GpuEvent {
                gpu: 1,
                at: t(60),
                kind: GpuEventKind::Xid(Some(79))
            }]
        );
        assert!(
            inv.observe(t(61)).unwrap().events.is_empty(),
            "an event is delivered once"
        );

        // Lost: reported on every poll, its processes are invisible.
        for s in [120, 150] {
            let o = inv.observe(t(s)).unwrap();
            assert_eq!(
                o.events,
                vec![GpuEvent {
                    gpu: 1,
                    at: t(s),
                    kind: GpuEventKind::Lost
                }]
            );
            assert!(o.processes.is_empty());
        }
        let o = inv.observe(t(200)).unwrap();
        assert_eq!(
            o.events,
            vec![GpuEvent {
                gpu: 1,
                at: t(180),
                kind: GpuEventKind::Reset {
                    signal: "fixture reset event".into()
                }
            }]
        );
        assert!(
            o.processes.is_empty(),
            "the reset ended the process on GPU 1"
        );
    }

    #[test]
    fn injected_actions_happen_at_the_next_poll() {
        let mut inv = FixtureInventory::new("small", Fixture::parse(SMALL, "small").unwrap())
            .starting_at(t(0));
        let h = inv.handle();
        h.inject(Action::Process(GpuProcess {
            gpu: 0,
            pid: 7,
            used_memory_mib: Some(1),
        }));
        h.inject(Action::Xid { gpu: 0, code: 999 });
        let o = inv.observe(t(1)).unwrap();
        assert!(o.processes.iter().any(|p| p.pid == 7));
        assert_eq!(o.events[0].kind, GpuEventKind::Xid(None));
    }

    fn err(yaml: &str) -> String {
        Fixture::parse(yaml, "f.yaml").unwrap_err().to_string()
    }

    #[test]
    fn bad_fixtures_name_the_field() {
        let gpu = |i: u32| format!("{{index: {i}, uuid: GPU-{i}, model: M, memoryMib: 1}}");
        assert_eq!(
            err(&format!("gpus: [{}]", gpu(1))),
            "fixture f.yaml: gpus[0].index: is 1: GPUs must be listed in index order 0..0"
        );
        assert!(
            err(&format!("gpus: [{}, {}]", gpu(0), gpu(1)).replace("GPU-1", "GPU-0"))
                .contains("gpus[1].uuid")
        );
        assert!(
            err(&format!("gpus: [{}]\ntopology: [X NV4]", gpu(0)))
                .contains("topology: topology row 0 has 2 entries")
        );
        assert!(
            err(&format!("gpus: [{}]\ntopology: [XX]", gpu(0)))
                .contains("topology[0]: 'XX' is not a topology level")
        );
        assert!(
            err(&format!(
                "gpus: [{}]\nscript: [{{at: 5s, xid: {{gpu: 3, code: 79}}}}]",
                gpu(0)
            ))
            .contains("script[0].xid.gpu: GPU 3 does not exist")
        );
        assert!(
            err(&format!(
                "gpus: [{}]\nscript: [{{at: soon, reset: {{gpu: 0}}}}]",
                gpu(0)
            ))
            .contains("script[0].at: 'soon' is not a duration")
        );
        assert!(
            err(&format!("gpus: [{}]\nscript: [{{at: 5s}}]", gpu(0)))
                .contains("give exactly one of")
        );
        assert!(
            err(&format!(
                "gpus: [{}]\nscript: [{{at: 5s, reset: {{gpu: 0}}, lost: {{gpu: 0}}}}]",
                gpu(0)
            ))
            .contains("give exactly one of")
        );
        // Unknown keys are refused with the line and column.
        let e = err(&format!("gpus: [{}]\nflavour: mint", gpu(0)));
        assert!(
            e.contains("unknown field `flavour`") && e.contains("line 2"),
            "{e}"
        );
        assert!(
            err(&format!("gpus: [{}]", gpu(0))
                .replace("memoryMib: 1", "memoryMib: 1, cpuAffinity: 3-1"))
            .contains("gpus[0].cpuAffinity")
        );
    }

    #[test]
    fn shipped_fixtures_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                Fixture::load(&path).unwrap_or_else(|e| panic!("{e}"));
                names.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        names.sort();
        assert!(names.len() >= 3, "{names:?}");
    }
}

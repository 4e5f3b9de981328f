//! Where GPU facts come from: NVML on a real node, a YAML fixture anywhere else.

pub mod fixture;
pub mod nvml;
pub mod nvml_map;

use jiff::Timestamp;

use crate::model::Observation;

pub use fixture::{Fixture, FixtureError, FixtureInventory, ScriptHandle};
pub use nvml::{NvmlInventory, NvmlUnavailable};

/// A source of GPU inventory, processes and health events.
pub trait GpuInventory: Send {
    /// What this backend is, for logs (`NVML 12.550.90.07`, `fixture dgx-h100.yaml`).
    fn describe(&self) -> String;

    /// One poll at `now`: the GPUs and topology, the compute processes, and the health events
    /// since the previous poll.
    fn observe(&mut self, now: Timestamp) -> Result<Observation, InventoryError>;
}

impl<T: GpuInventory + ?Sized> GpuInventory for Box<T> {
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn observe(&mut self, now: Timestamp) -> Result<Observation, InventoryError> {
        (**self).observe(now)
    }
}

/// A poll that failed.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// An NVML call failed.
    #[error("NVML {call} failed: {source}")]
    Nvml {
        /// The call (`nvmlDeviceGetCount`).
        call: &'static str,
        /// NVML's error.
        source: ::nvml_wrapper::error::NvmlError,
    },
}

//! The `resource.k8s.io/v1` objects Muster reads and writes (Dynamic Resource Allocation, GA in
//! Kubernetes 1.34), as typed structs of its own.
//!
//! Why not k8s-openapi's: the workspace builds k8s-openapi with feature `v1_32` (the oldest
//! Kubernetes Muster supports, so every other API type it uses exists on every supported
//! server), and that level only has `resource.k8s.io/v1beta1` — whose shapes differ from v1
//! (a v1 request wraps its class and selectors in `exactly`; a v1 device has no `basic`
//! level). Raising the feature to `v1_34` for the whole workspace would let code silently use
//! fields a 1.32 server drops. `DynamicObject` would work but leaves every field unchecked;
//! these structs cover exactly the fields Muster uses, checked by serde, and implement
//! [`kube::Resource`] so `Api<ResourceClaim>` and the reflectors work as for any kind.
//!
//! Unknown fields are ignored on read; Muster never updates these objects in place (claims
//! are created and deleted whole), so nothing it does not model is ever written back.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Serialize};

/// API group of Dynamic Resource Allocation.
pub const GROUP: &str = "resource.k8s.io";
/// The version Muster speaks (GA since Kubernetes 1.34).
pub const VERSION: &str = "v1";
/// `apiVersion` of the objects here.
pub const API_VERSION: &str = "resource.k8s.io/v1";

macro_rules! resource {
    ($ty:ident, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(API_VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A request for devices, allocated by kube-scheduler and prepared by the kubelet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaim {
    /// `resource.k8s.io/v1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// `ResourceClaim`.
    #[serde(default = "claim_kind")]
    pub kind: String,
    /// Standard metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What is requested (immutable).
    #[serde(default)]
    pub spec: ResourceClaimSpec,
    /// The allocation and who uses it (written by kube-scheduler and the resourceclaim
    /// controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResourceClaimStatus>,
}
resource!(
    ResourceClaim,
    "ResourceClaim",
    "resourceclaims",
    NamespaceResourceScope
);

fn api_version() -> String {
    API_VERSION.to_string()
}
fn claim_kind() -> String {
    "ResourceClaim".to_string()
}
fn slice_kind() -> String {
    "ResourceSlice".to_string()
}
fn class_kind() -> String {
    "DeviceClass".to_string()
}

/// `ResourceClaim.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimSpec {
    /// The devices.
    #[serde(default)]
    pub devices: DeviceClaim,
}

/// `spec.devices`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceClaim {
    /// One entry per device (or group of alike devices) wanted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<DeviceRequest>,
}

/// One request of a claim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceRequest {
    /// A DNS label, unique in the claim; allocation results name it.
    pub name: String,
    /// The request for one kind of device (v1's only form Muster uses; `firstAvailable` is
    /// the other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exactly: Option<ExactDeviceRequest>,
    /// Alternatives in order of preference (read only to refuse them in the test control
    /// plane's allocator).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_available: Vec<serde_json::Value>,
}

/// `exactly`: devices of one class that every selector accepts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExactDeviceRequest {
    /// The DeviceClass (its selectors apply too).
    pub device_class_name: String,
    /// CEL selectors, all of which a device must pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<DeviceSelector>,
    /// `ExactCount` (the default) or `All`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_mode: Option<String>,
    /// Devices wanted with `ExactCount` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// Admin access (monitoring): the device is not taken from others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<bool>,
}

/// A device selector.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSelector {
    /// A CEL expression over `device`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<CelDeviceSelector>,
}

/// `cel` of a selector.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CelDeviceSelector {
    /// Evaluates to true for devices that may be allocated.
    pub expression: String,
}

/// `ResourceClaim.status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimStatus {
    /// Set once the claim is allocated (by kube-scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<AllocationResult>,
    /// The pods that may use the allocation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_for: Vec<ResourceClaimConsumerReference>,
}

/// `status.allocation`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationResult {
    /// The devices given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceAllocationResult>,
    /// Nodes where the devices are reachable (the node, for node-local devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    /// When it was allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_timestamp: Option<Time>,
}

/// `status.allocation.devices`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAllocationResult {
    /// One entry per allocated device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<DeviceRequestAllocationResult>,
}

/// One allocated device: `(driver, pool, device)` names it across the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceRequestAllocationResult {
    /// The request it satisfies.
    pub request: String,
    /// The driver (`gpu.nvidia.com`).
    pub driver: String,
    /// The pool (a node's name, for the NVIDIA driver).
    pub pool: String,
    /// The device's name in its pool (`gpu-0`).
    pub device: String,
    /// Given with admin access (not exclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<bool>,
}

/// A user of a claim (`status.reservedFor`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimConsumerReference {
    /// API group (empty for pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// `pods`.
    pub resource: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// Devices a driver publishes for a pool (one node's GPUs, for the NVIDIA driver).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSlice {
    /// `resource.k8s.io/v1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// `ResourceSlice`.
    #[serde(default = "slice_kind")]
    pub kind: String,
    /// Standard metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the driver publishes.
    #[serde(default)]
    pub spec: ResourceSliceSpec,
}
resource!(
    ResourceSlice,
    "ResourceSlice",
    "resourceslices",
    ClusterResourceScope
);

/// `ResourceSlice.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceSpec {
    /// The driver (`gpu.nvidia.com`).
    #[serde(default)]
    pub driver: String,
    /// The pool this slice belongs to.
    #[serde(default)]
    pub pool: ResourcePool,
    /// The node, for node-local devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Devices reachable from every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_nodes: Option<bool>,
    /// The devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
}

/// `spec.pool`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePool {
    /// Pool name (the node's, for the NVIDIA driver).
    #[serde(default)]
    pub name: String,
    /// Only slices of the highest generation of a pool count.
    #[serde(default)]
    pub generation: i64,
    /// Slices in the pool at this generation.
    #[serde(default)]
    pub resource_slice_count: i64,
}

/// One device of a slice.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Unique in the pool (`gpu-0`).
    pub name: String,
    /// Attributes by (qualified) name; a name without a domain is in the driver's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Capacities by (qualified) name (`memory`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, DeviceCapacity>,
}

/// One attribute value: exactly one field is set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAttribute {
    /// An integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
    /// A boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    /// A string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// A semantic version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl DeviceAttribute {
    /// A string attribute.
    pub fn string(s: impl Into<String>) -> Self {
        DeviceAttribute {
            string: Some(s.into()),
            ..Default::default()
        }
    }
    /// An integer attribute.
    pub fn int(i: i64) -> Self {
        DeviceAttribute {
            int: Some(i),
            ..Default::default()
        }
    }
    /// A version attribute.
    pub fn version(v: impl Into<String>) -> Self {
        DeviceAttribute {
            version: Some(v.into()),
            ..Default::default()
        }
    }
}

/// One capacity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCapacity {
    /// The amount.
    pub value: Quantity,
}

/// A class of devices (what a request names), created by the driver's installation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceClass {
    /// `resource.k8s.io/v1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// `DeviceClass`.
    #[serde(default = "class_kind")]
    pub kind: String,
    /// Standard metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Selectors every device of the class passes.
    #[serde(default)]
    pub spec: DeviceClassSpec,
}
resource!(
    DeviceClass,
    "DeviceClass",
    "deviceclasses",
    ClusterResourceScope
);

/// `DeviceClass.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceClassSpec {
    /// CEL selectors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<DeviceSelector>,
    /// The extended resource name (`nvidia.com/gpu`) pods may request instead of a claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_resource_name: Option<String>,
}

//! Conformance of the API server double through kube-rs: what controllers rely on.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions, FaultRule, Verbs};
use serde_json::{Value, json};

mod crds;
mod events;
mod faults;
mod helpers;
mod lists;
mod objects;
mod tables;
mod writes;

use helpers::*;

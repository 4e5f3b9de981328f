//! The operator's benchmark on the test control plane. It prints figures, each with its target
//! where it has one; it asserts nothing about time (targets are judged from the printout, not by
//! a timed test), but it does assert what must hold whatever the speed: every started job has
//! one pod per allocated node (pods per job = nodes). Run it with
//!
//! ```sh
//! cargo test --release -p muster-e2e --test operator_bench -- --ignored --nocapture
//! ```
//!
//! which first builds `muster-operator` in release (`cargo build`, a no-op when it is fresh,
//! so the figures are never those of a stale binary) unless `$MUSTER_OPERATOR_BIN` names one.
//!
//! The operator runs as its own process (`target/release/muster-operator`, or
//! `$MUSTER_OPERATOR_BIN`) against the API server double, so its resident memory is its own.
//! On 4,096 nodes x 8 GPUs (128 leaves of 32) it measures:
//! 1. 1,000 single-GPU jobs queued before the operator starts: jobs started per second (status
//!    RUNNING written and the pod created), operator start and cache sync included;
//! 2. 100 gangs of 4 nodes x 8 tasks x 1 GPU (32 tasks, 4 node pods each): gangs per second;
//! 3. 1,432 more CPU-only gangs of 4 x 8, to 50,024 tasks on 7,128 node pods: operator RSS
//!    and peak;
//! 4. 1,000 one-node (single-GPU) jobs submitted to the running operator: jobs started per
//!    second from the first submission (target >= 2,500/s);
//!
//! and API writes per job by kind (from the operator's own `muster_api_writes_total`). Then,
//! on fresh control planes:
//! 5. the whole test control plane (API server double, kube-scheduler stand-in, simulated
//!    kubelet) with 1,024 nodes: a 512-node gang's time from submission to every pod Running
//!    (target <= 1 s);
//! 6. 16,384 nodes (API server double only): 6,250 gangs of 4 nodes x 8 tasks (4,000 of them
//!    with a GPU per task, 98% of the GPUs), 200,000 tasks: operator RSS and peak (target <=
//!    256 MiB).
//!
//! Each is measured twice, on fresh control planes: GPU binding by `NVIDIA_VISIBLE_DEVICES`
//! (`env`: the server does not serve `resource.k8s.io`) and by ResourceClaims (`dra`: the
//! server serves `resource.k8s.io/v1`, every node publishes the NVIDIA DRA driver's
//! ResourceSlice, a claim per GPU pod). `MUSTER_E2E_BINDING=env|dra` runs one of them only;
//! `MUSTER_BENCH_PARTS=1,2,3` runs some of the three control planes only (1: phases 1-4,
//! 2: phase 5, 3: phase 6).

#[path = "../operator_support/mod.rs"]
mod operator_support;

/// mimalloc for the test control plane in this benchmark's process: the API server double,
/// the scheduler stand-in and the kubelet decode, copy and drop JSON values per request, and
/// glibc's malloc spent ~15% of their CPU on it. (Set per binary: the `muster` CLI links the
/// same library with its own counting allocator.)
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Keeps freed memory in this process instead of handing it back to the system 10 ms later
/// (mimalloc's default `purge_delay`). The test control plane works in bursts (a 512-node
/// gang: 512 pods stored, bound, updated, each sent to four watches), and between bursts
/// mimalloc returned the pages, which the next burst faulted in again: 12% of the gang
/// phase's samples were the kernel zeroing fresh pages (`clear_page_erms`). The benchmark
/// measures the operator's memory (its own process), never this process's.
fn keep_freed_memory() {
    use muster_operator::alloc::{MiOption, set};
    set(MiOption::PurgeDelay, -1);
}

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, GpuNode, JobState, Partition};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
use serde_json::json;

/// Which of the benchmark's control planes to run (`MUSTER_BENCH_PARTS`, default all).
fn parts() -> Vec<u32> {
    match std::env::var("MUSTER_BENCH_PARTS") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(|p| {
                p.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("MUSTER_BENCH_PARTS={v:?}: expected e.g. 1,2,3"))
            })
            .collect(),
        _ => vec![1, 2, 3],
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
async fn operator_benchmark() {
    keep_freed_memory();
    let bin = operator_bin();
    assert!(
        bin.exists(),
        "{} not found (set MUSTER_OPERATOR_BIN to the operator binary)",
        bin.display()
    );
    let modes: Vec<bool> = match std::env::var(muster_e2e::cluster::BINDING_ENV) {
        Ok(_) => vec![muster_e2e::cluster::dra_from_env()],
        Err(_) => vec![false, true],
    };
    let parts = parts();
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at the start: {}", l.trim());
    }
    for dra in modes {
        println!(
            "=== GPU binding: {} ===",
            if dra {
                "dra (ResourceClaims)"
            } else {
                "env (NVIDIA_VISIBLE_DEVICES)"
            }
        );
        if parts.contains(&1) {
            bench(&bin, dra).await;
        }
        if parts.contains(&2) {
            big_gang(&bin, dra).await;
        }
        if parts.contains(&3) {
            big_cluster(&bin, dra).await;
        }
        if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
            println!("load average: {}", l.trim());
        }
    }
}

mod cluster;
mod phases;
mod process;
mod progress;

use cluster::*;
use phases::*;
use process::*;
use progress::*;

//! Muster's scheduling core: topology-aware gang placement, queue order, backfill with
//! reservations and preemption — as a pure function.
//!
//! ```text
//! schedule(&Snapshot, now, &Config) -> Decisions
//! ```
//!
//! No Kubernetes types, no I/O, no clock, no randomness: time is an argument and the same
//! snapshot gives the same decisions whatever the order of its job lists (ties are broken by
//! names and job ids, never by map iteration order). The operator, the simulator and the
//! benchmarks all call this code. A test (`tests/core_purity.rs`) fails if a file here names
//! the Kubernetes client crates, the async runtime, the file system, the network or a clock.
//!
//! # The cycle
//!
//! 1. **Snapshot.** The caller translates its world into a [`Snapshot`]: nodes (labels,
//!    allocatable CPU/memory, taints, readiness, GPUs with health, NUMA node and NVLink/PCIe
//!    links), partitions (node selector as labels, topology keys, limits, tier, preempt
//!    mode), running jobs with their allocations, pending jobs with their parsed requests,
//!    finished jobs (for dependencies) and fair-share usage. Partition selectors are
//!    evaluated here, on [`Node::labels`]; a partition only includes nodes whose
//!    `NoSchedule`/`NoExecute` taints it tolerates. Each partition's switch tree is built
//!    from its topology keys (see [`tree`]); [`Prepared`] keeps those trees between cycles
//!    for callers that schedule the same cluster again ([`schedule_prepared`]).
//! 2. **Running jobs** are laid onto the nodes; each gives its resources back at its time
//!    limit (a job being stopped: when its grace time ends). Jobs past their limit or on a
//!    failed node or GPU are listed in [`Decisions::stops`] (TIMEOUT, NODE_FAIL; also
//!    available alone as [`enforce::stops`]). An [`Occupancy`] holds that layout; callers
//!    that follow one cluster over time keep it between cycles, tell it which jobs started,
//!    stopped and ended, and call [`schedule_incremental`] — the same decisions, at the cost
//!    of the queue and the changes rather than of the whole cluster (see [`occupancy`]).
//!    Callers that only have whole snapshots (the operator) keep a [`KeptOccupancy`], which
//!    finds what changed itself by a fingerprint of every running job (see [`kept`]).
//! 3. **Order.** Pending jobs are sorted by partition priority tier, then priority (below),
//!    then queued time (when the age starts less the short-limit credit), then submit time,
//!    then job id ([`priority::queue_keys`], the one order the simulator's queue cut uses too).
//! 4. **Nominate.** For each job in order: eligibility ([reasons](#reasons)), then a
//!    placement *now* (gang, topology, within-node, backfill rules below). If none: can it
//!    ever fit (else `BadConstraints` / `ReqNodeNotAvail`)? May it preempt? Otherwise it gets
//!    a reservation at its earliest start, while the reservation budget lasts.
//! 5. **Decisions**: [`Start`]s with every task placed (node, GPU indices, CPU, memory, rank),
//!    [`Reservation`]s (estimated start, planned nodes), [`Preemption`]s, [`Stop`]s, and a
//!    [`PendingInfo`] with Slurm's reason for every job left waiting.
//!
//! # Job shapes
//!
//! A request becomes *units* placed on nodes ([`shape::normalize`]):
//!
//! - **Per-node bundles** — `--nodes` (or `--ntasks-per-node`, or `--gpus-per-node`)
//!   without `--ntasks`: every node gets the same bundle (GPUs per node, CPUs = tasks per
//!   node × CPUs per task, memory) run by `--ntasks-per-node` tasks (default 1). GPUs of a
//!   bundle are split between its tasks as evenly as possible (`--gres=gpu:4
//!   --ntasks-per-node=2`: 2 each), never shared. `--nodes=MIN-MAX` takes as many nodes as
//!   are free under the chosen switch, up to MAX. `--gpus=G` with `--nodes=N`: G/N per node.
//! - **Packed tasks** — `--ntasks=N`: N equal tasks (`--gpus-per-task`) packed onto as few
//!   nodes as possible, at most `--ntasks-per-node` per node (and then on at least
//!   ⌈N / ntasks-per-node⌉ nodes, the tasks spread evenly), within the `--nodes` range if
//!   given (with an exact count, spread evenly). `--gpus=G` with `--ntasks=N`: `gcd(G, N)`
//!   units of `N/gcd` tasks sharing `G/gcd` GPUs. `--gpus-per-node=M` (or `--gres=gpu:M`)
//!   with `--ntasks`: packed tasks, every node of the placement taking M GPUs once
//!   ([`shape::Demand::node`]) — unless every node's task count is known (one task, an exact
//!   node count dividing the tasks, `--ntasks-per-node` dividing them), which is a bundle.
//! - **GPUs only** — `--gpus=G` alone: G one-GPU units on as few nodes as possible, one task
//!   per node holding that node's GPUs.
//! - Nothing: one task on one node with one CPU.
//! - `--nodelist`: the node count rises to the named nodes, and each is a feature count of
//!   one (see constraints below); `--exclude` filters nodes like a constraint.
//!
//! CPUs per task default to 1 (or the partition's `DefCpuPerGPU` × GPUs when neither CPUs
//! nor memory are asked for); memory to the partition's `DefMemPerGPU` × GPUs, else none.
//! `--mem=0` takes the node's whole memory. Contradictions (`--nodes=3-2`, `--gpus=8
//! --gpus-per-task=3`) are `BadConstraints` with a message saying why.
//!
//! # Placement
//!
//! - **Gang**: every task of a job is placed in one decision or none is.
//! - **Topology** (as Slurm's topology/tree): the job goes under the *lowest* switch that can
//!   hold it whole — a job that fits one leaf is never spread over two — and among the
//!   candidate switches of that level the **best fit**: the one with the least free room
//!   left over (free GPUs on the nodes that could take it; CPUs for CPU-only jobs), then the
//!   fewest spare units, then tree order; big gangs keep finding whole leaves. Within a
//!   switch, a child that can hold the rest whole is chosen by best fit; otherwise the gang
//!   takes the set of children that uses the fewest and leaves the least room over in them
//!   (each child tried as the first, completed largest-first with a best fit for the rest),
//!   so the children it does not touch stay whole. Within a leaf, the fullest nodes that fit
//!   are used first. Above the first labelled level sits an implicit root, so a gang larger
//!   than any labelled switch still places.
//! - **The cycle's queue**: a gang that one leaf holds, with a choice of leaves, weighs the
//!   best-fit candidates against the next later gangs of the same cycle (plain requests of
//!   the partition, in queue order): a leaf whose room is the only one a later gang fits is
//!   not spent on it, and one whose room a later gang could use is avoided when another
//!   leaf does as well. Best fit alone put a small gang on exactly the nodes a later gang
//!   needed.
//! - **Fewest leaves first** (`Config::topology_wait_secs`, 8 h): a multi-node gang without
//!   `--switches` that one leaf could hold but that only fits spread now waits for one leaf
//!   when, by the running jobs' limits and the reservations, one leaf comes within that time
//!   (its reservation is then on one leaf), and starts spread otherwise. At most 32 such
//!   checks per cycle (each is a timeline sweep); past them, gangs start spread. It does not
//!   wait when it is the only job of its partition waiting, none before it and none after
//!   (the wait would delay only itself) and no gang one leaf could hold runs spread in the
//!   partition (so at most one such gang runs at a time and leaf span stays near its bound).
//! - **`--switches=N@WAIT`**: until `WAIT` has passed since the job became eligible
//!   (`Config::max_switch_wait_secs` = 300 s when no `@WAIT`, as Slurm's `max_switch_wait`),
//!   only placements on at most N leaves count — also when estimating its start; then any.
//! - **Missing labels**: a node without a level's label joins a synthetic switch named
//!   [`tree::UNLABELLED`] at that level under its parent, sorted after the labelled ones. A
//!   switch is identified by its whole label path, so `leaf1` under two spines is two
//!   switches.
//! - **Constraints** (`--constraint`): a node has feature `f` when it carries the label
//!   `muster.dev/feature.f` (any value but `false`) or any label whose value is `f` (so
//!   switch and rack names work: `[leaf1|leaf2]`). `&`, `|`, parentheses filter nodes;
//!   `[a|b]` puts every node on one alternative — the first, in order, that can start (or
//!   that starts earliest, for estimates); `a*2` and `[a*2&b*2]` take that many distinct
//!   nodes of each kind (such jobs ask for nodes wherever they are, so they are placed by
//!   counts first, then near the nodes already chosen; `--switches` does not apply to them).
//! - **GPU type** (`--gres=gpu:TYPE:N`, `--gpus=TYPE:N`): a case-insensitive substring of the
//!   GPU model (`a100` matches `NVIDIA A100-SXM4-80GB`); only such GPUs are given.
//! - **Exclusive**: the job's nodes must be idle and nothing else is placed on them while it
//!   runs (its tasks still report only what they asked for). `--exclusive=user`
//!   ([`JobRequest::exclusive_user`]): such a job starts only where every job is its user's
//!   ([`PendingJob::user`]), and no other user's job starts where it runs — checked for
//!   placements now ([`node_state::NodeUsers`]); estimates and preemption plans do not see it
//!   (they may promise a start a user rule then delays, never one it forbids). A job of no
//!   known user shares with no such job; its own `--exclusive=user` takes whole nodes.
//! - **Named nodes**: `--nodelist` nodes are always in the placement (each a count of one,
//!   placed first), `--exclude` nodes never.
//! - Nodes that are not ready or are cordoned, and unhealthy GPUs, get no new work.
//!
//! # GPU binding
//!
//! Tasks on a node share GPUs only when they outnumber them: then every task gets all of the
//! node's GPUs, as Slurm's tasks see them. Each node's GPUs form a hierarchy (node → NUMA nodes →
//! groups sharing an NVLink island or PCIe switch, from the `nvidia-smi topo -m` matrix or,
//! without one, from NUMA ids and NVLink peers). The node's share is picked first as one
//! compact set, then each task's part of it, walking the hierarchy by best fit ([`gpus`]),
//! so `closest` (and the default) gives each task GPUs that share a switch and NUMA node
//! when the free GPUs allow. `none` is treated as `closest` (Muster always binds).
//! `map_gpu`/`mask_gpu` are honoured exactly (local task *i* gets entry `i % len`; nodes
//! where those GPUs are not all free are not used), and must give each task as many GPUs as
//! it asked for; `per_task:N` must agree with the request; `single:N` with N > 1 would share
//! GPUs and is `BadConstraints`.
//!
//! # Priority
//!
//! ```text
//! priority = round( weight_age        * min(1, (age + short_limit_age * short) / max_age)
//!                 + weight_job_size   * min(1, job GPUs / partition GPUs)
//!                 + weight_fair_share * 2^(-U/S) )  -  nice
//! ```
//!
//! `age` counts from the eligible time; the size factor uses nodes for CPU-only jobs; `U` is
//! the namespace's share of all decayed GPU-seconds ([`Snapshot::usage`], carried forward by
//! [`priority::decay_usage`] with `fair_share_half_life_secs`) and `S` its share of
//! [`Config::shares`] among namespaces with usage or jobs. `--priority` replaces the sum.
//! `short` is the **short-limit factor**: 1 for a time limit of 15 minutes or less, 0 for 30
//! days or unlimited, linear in the log of the limit between (1 h: 0.83, 8 h: 0.56, 1 day:
//! 0.43). A job's age is credited `short_limit_age * short` ([`Config::short_limit_age_secs`],
//! 7 days): jobs go shortest first, a job is passed only by jobs submitted less than 7 days
//! after it, and no one-node job passes a gang that has waited longer, unless the job has
//! waited 4 h and the gang less than 8 h ([`Config::pass_gangs_after_secs`],
//! [`Config::gang_firm_after_secs`]; details and bounds: [`priority`]). Defaults: age 1000
//! (full after 7 days), job size 0, fair share 10000, half-life 7 days — fair share first,
//! then credited age. The size
//! factor is off by default: with it, a bigger gang submitted later becomes the queue head
//! and the room freed for it waits while earlier smaller jobs could use it
//! (`weight_job_size` turns it on for sites that want that). Order: tier, priority, queued
//! time (when the age starts less the credit), submit time, job id.
//!
//! # Backfill and reservations
//!
//! A job that cannot start now gets a **reservation**: the earliest time at which the
//! running jobs' time limits (and earlier reservations) leave a topology-compliant placement
//! for its whole run ([`timeline`]). That time is its estimated start (`squeue --start`) and
//! its nodes' resources are held from then for its run. Every later job may start now only
//! where it does not touch held resources before it ends by its time limit — so it either
//! finishes before a reservation begins or uses room no reservation needs: a backfilled job
//! never delays a reservation. Reservations are made for the first
//! [`Config::max_reservations`] waiting jobs in queue order (default 16) that have waited
//! [`Config::reserve_after_secs`] (default 0, Slurm's `bf_min_age_reserve`); later jobs get
//! no estimate. Slurm reserves for every job its backfill pass tests; holding room for many
//! jobs costs utilization whenever jobs end before their limits (as they do). Measured with
//! `muster bench --quality` (the bundled trace, the ITP trace with `--gang gpus`, synthetic
//! loads 0.7/0.9/1.1 on three seeds), 12–16 reservations meet the most targets (p95 wait on
//! 6 of 11 workloads against 4 with 4 reservations, the big-gang wait on 4 against 3, the
//! same mean wait, makespan and leaf span counts); 20 or more, or every waiting job (the
//! Slurm-like yardstick), cost makespan and leaf span. Reserving only for gangs, or only
//! after an hour to twelve hours of waiting, neither brought the mean wait to first fit's at
//! load 1.1 nor kept big gangs' longest wait at the Slurm-like one's. First fit
//! waits least on average there because it never assembles room for a gang: its 2–8-node
//! gangs wait 2–5x longer than under either backfill. Also measured and not kept
//! (operator/QUALITY.md): a one-leaf wait bounded by 5–50% of the gang's limit or dropped
//! once it has waited 25–100% of it (leaf span 1.2–1.6 at load 0.9–1.1), and a priority
//! bonus for small jobs (the mean at first fit's only when 8-node gangs wait 2–13x the
//! Slurm-like yardstick's longest).
//! Resources are counted per node (GPUs, CPU, memory) for future times; which GPUs is
//! decided when the job starts. With `Config::backfill = false`, a partition's jobs wait
//! behind its first blocked job (Slurm's sched/builtin).
//!
//! # Preemption
//!
//! A job that cannot start now may evict running jobs of partitions with a lower priority
//! tier whose preempt mode is not `Off`, whole gangs only. The lowest switch level where
//! evicting every candidate would make room gives the candidate switches; in each, victims
//! are added in order of least work lost — GPUs × time already run (**elapsed**, the work a
//! requeued job loses), then job id — until the job fits, and any that turn out unnecessary
//! are spared (costliest first). The switch whose victims lose the fewest GPU-seconds wins.
//! Victims release their resources when their partition's grace time ends; the job holds
//! them from then (a reservation) and starts in a later cycle, once the victims are gone.
//! No new victims are chosen while jobs already being stopped will make room. Running jobs
//! marked `stopping_since` are never chosen again.
//!
//! # Reasons
//!
//! In the order they are checked: `JobHeldUser`; `BeginTime` (`--begin` not reached); `Dependency` / `DependencyNeverSatisfied`
//! ([`deps`]); `PartitionConfig` (no such partition); `AccountNotAllowed` (namespace not in
//! `allowed_namespaces`); `PartitionDown`; `PartitionInactive`; `PartitionTimeLimit`;
//! `PartitionNodeLimit`; `BadConstraints` (a contradictory request); `JobArrayTaskLimit`
//! (`%N` reached, counting jobs started this cycle). Then, for a job that cannot start:
//! `BadConstraints` if the partition could never hold it even empty, `ReqNodeNotAvail` if it
//! could only with nodes or GPUs that are down, cordoned or unhealthy, else `Resources` for
//! the first waiting job of a partition and `Priority` for the ones behind it.
//!
//! # Modules
//!
//! [`model`] (input types), [`decisions`] (output types), [`cluster_spec`] (the shared cluster file
//! format), [`node`], [`shape`], [`feasible`] (can a request ever run, and if not why), [`tree`],
//! [`extended`] (the partitions' per-node-pod extended resources as running jobs hold them),
//! [`gpus`], [`engine`] (cycle state and placement), [`occupancy`] (running jobs' holds kept
//! between cycles), [`kept`] (the same over whole snapshots), [`timeline`] (earliest starts),
//! [`schedule`](mod@schedule) (the cycle), [`priority`], [`deps`], [`enforce`], [`baseline`] (the
//! first-fit and Slurm-like yardsticks), [`synth`] (seeded synthetic clusters and queues),
//! [`util`].

#![warn(missing_docs)]

pub mod baseline;
pub mod cluster_spec;
pub mod decisions;
pub mod deps;
pub mod enforce;
pub mod engine;
pub mod extended;
pub mod feasible;
pub mod gpus;
pub mod kept;
pub mod model;
pub mod node;
pub mod node_state;
pub mod occupancy;
pub mod prepared;
pub mod priority;
pub mod schedule;
pub mod select;
pub mod shape;
pub mod synth;
pub mod timeline;
pub mod tree;
pub mod util;

pub use cluster_spec::{ClusterSpec, NodeInfo};
pub use kept::KeptOccupancy;
pub use model::*;
pub use node::{Gpu, Link, Node, NodeId, Taint, TaintEffect, Toleration};
pub use occupancy::{Occupancy, schedule_incremental};
pub use prepared::Prepared;
pub use schedule::{schedule, schedule_prepared};

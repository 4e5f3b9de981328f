//! BatchJobs as the operator caches them: the object with its task records (`status.tasks`)
//! held compact.
//!
//! A running gang's status has a record per task (rank, node, GPU indices and UUIDs, the
//! node pod), each a struct of five heap strings and vectors: at 16,384 nodes the 200,000
//! records of 6,250 running gangs were ~50 MiB in the BatchJob cache alone, and again in
//! the own-write overlay while written answers waited for the watch. [`TaskRecords`] keeps
//! the same records losslessly in a handful of flat arrays (a job's distinct strings once,
//! rows of integers), about a fifth of the size; [`TaskRecords::to_vec`] gives back exactly
//! the records it was made from, so a status written from the cache is byte-for-byte the
//! stored one. A version the operator wrote is held once for the overlay and the cache
//! ([`Versions`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::compact::{StrId, StrTable, StrTableBuilder, cached_lookup};

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use muster_crds::v1alpha1::{BatchJob, TaskAllocation};

/// No string (a task without a pod name).
const NONE: StrId = StrId::MAX;

/// One task record, every string and list by reference into the job's arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Row {
    rank: u32,
    node: StrId,
    node_rank: u32,
    local_rank: u32,
    /// Index into [`TaskRecords::sizes`].
    size: u32,
    /// End of this task's GPU indices in [`TaskRecords::gpus`] (they start at the previous
    /// row's end).
    gpus_end: u32,
    /// End of this task's UUIDs in [`TaskRecords::uuids`], likewise.
    uuids_end: u32,
    pod: StrId,
}

/// A job's task records (`status.tasks`), compact and lossless (see the [module docs](self)).
///
/// Offsets are `u32`: a BatchJob is bounded by the API server's request limit (a few MiB),
/// far below 4 GiB of strings or 4 billion tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskRecords {
    /// The job's distinct strings (node names, GPU UUIDs, pod names).
    strs: StrTable,
    /// The tasks, in record order.
    rows: Box<[Row]>,
    /// Every task's GPU indices, concatenated in record order.
    gpus: Box<[u32]>,
    /// Every task's GPU UUIDs (string ids), concatenated in record order.
    uuids: Box<[StrId]>,
    /// The distinct (CPU millicores, memory MiB) pairs of the tasks.
    sizes: Box<[(u64, u64)]>,
}

fn idx(n: usize) -> u32 {
    u32::try_from(n).expect("a BatchJob's task records are far below 4 GiB")
}

impl TaskRecords {
    /// The records of `tasks`.
    pub fn new(tasks: &[TaskAllocation]) -> TaskRecords {
        if tasks.is_empty() {
            return TaskRecords::default();
        }
        let mut strings = StrTableBuilder::default();
        let mut sizes: Vec<(u64, u64)> = Vec::new();
        let mut size_ids: HashMap<(u64, u64), u32> = HashMap::new();
        let mut rows = Vec::with_capacity(tasks.len());
        let mut gpus = Vec::with_capacity(tasks.iter().map(|t| t.gpus.len()).sum());
        let mut uuids = Vec::with_capacity(tasks.iter().map(|t| t.gpu_uuids.len()).sum());
        for t in tasks {
            let node = strings.id(&t.node);
            gpus.extend_from_slice(&t.gpus);
            for u in &t.gpu_uuids {
                uuids.push(strings.id(u));
            }
            let key = (t.cpu_millis, t.memory_mib);
            let size = *size_ids.entry(key).or_insert_with(|| {
                sizes.push(key);
                idx(sizes.len() - 1)
            });
            rows.push(Row {
                rank: t.rank,
                node,
                node_rank: t.node_rank,
                local_rank: t.local_rank,
                size,
                gpus_end: idx(gpus.len()),
                uuids_end: idx(uuids.len()),
                pod: t.pod.as_deref().map_or(NONE, |p| strings.id(p)),
            });
        }
        TaskRecords {
            strs: strings.finish(),
            rows: rows.into_boxed_slice(),
            gpus: gpus.into_boxed_slice(),
            uuids: uuids.into_boxed_slice(),
            sizes: sizes.into_boxed_slice(),
        }
    }

    /// How many tasks.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No tasks (no allocation recorded).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The tasks, in record order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = TaskRef<'_>> + '_ {
        (0..self.rows.len()).map(|i| TaskRef { recs: self, i })
    }

    /// The records as `status.tasks` holds them (exactly those [`TaskRecords::new`] was
    /// given).
    pub fn to_vec(&self) -> Vec<TaskAllocation> {
        self.iter().map(|t| t.to_allocation()).collect()
    }

    /// The job's node indices (`node_rank`s), ascending, each once: one node pod each.
    pub fn node_ranks(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.rows.iter().map(|r| r.node_rank).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn string(&self, id: StrId) -> &str {
        self.strs.get(id)
    }

    /// Heap bytes held (for the figures).
    pub fn heap_bytes(&self) -> usize {
        self.strs.heap_bytes()
            + std::mem::size_of_val(&*self.rows)
            + std::mem::size_of_val(&*self.gpus)
            + std::mem::size_of_val(&*self.uuids)
            + std::mem::size_of_val(&*self.sizes)
    }
}

/// One task of [`TaskRecords`].
#[derive(Clone, Copy, Debug)]
pub struct TaskRef<'a> {
    recs: &'a TaskRecords,
    i: usize,
}

impl<'a> TaskRef<'a> {
    fn row(&self) -> &'a Row {
        &self.recs.rows[self.i]
    }

    fn starts(&self) -> (usize, usize) {
        match self.i.checked_sub(1).map(|p| &self.recs.rows[p]) {
            Some(prev) => (prev.gpus_end as usize, prev.uuids_end as usize),
            None => (0, 0),
        }
    }

    /// Global rank.
    pub fn rank(&self) -> u32 {
        self.row().rank
    }

    /// The node's name.
    pub fn node(&self) -> &'a str {
        self.recs.string(self.row().node)
    }

    /// Index of the node in the job's node list.
    pub fn node_rank(&self) -> u32 {
        self.row().node_rank
    }

    /// Rank on the node.
    pub fn local_rank(&self) -> u32 {
        self.row().local_rank
    }

    /// CPU millicores.
    pub fn cpu_millis(&self) -> u64 {
        self.recs.sizes[self.row().size as usize].0
    }

    /// Memory in MiB.
    pub fn memory_mib(&self) -> u64 {
        self.recs.sizes[self.row().size as usize].1
    }

    /// GPU indices on the node.
    pub fn gpus(&self) -> &'a [u32] {
        let (start, _) = self.starts();
        &self.recs.gpus[start..self.row().gpus_end as usize]
    }

    /// GPU UUIDs, in the order of [`TaskRef::gpus`].
    pub fn gpu_uuids(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        let (_, start) = self.starts();
        let recs = self.recs;
        recs.uuids[start..self.row().uuids_end as usize]
            .iter()
            .map(move |&u| recs.string(u))
    }

    /// The node pod's name, once recorded.
    pub fn pod(&self) -> Option<&'a str> {
        let p = self.row().pod;
        (p != NONE).then(|| self.recs.string(p))
    }

    /// The record as `status.tasks` holds it.
    pub fn to_allocation(&self) -> TaskAllocation {
        TaskAllocation {
            rank: self.rank(),
            node: self.node().to_string(),
            node_rank: self.node_rank(),
            local_rank: self.local_rank(),
            cpu_millis: self.cpu_millis(),
            memory_mib: self.memory_mib(),
            gpus: self.gpus().to_vec(),
            gpu_uuids: self.gpu_uuids().map(str::to_string).collect(),
            pod: self.pod().map(str::to_string),
        }
    }
}

/// A BatchJob as the operator caches it: the object without its task records, and the
/// records compact (see the [module docs](self)). Managed fields are dropped (nothing reads
/// them).
#[derive(Clone, Debug)]
pub struct JobObs {
    /// Shared: the cache's copy of a version this operator wrote is the very object the writer
    /// keeps for its next cycle (see [`Versions`]).
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The object; its `status.tasks` is always empty (the records are `tasks`).
    job: BatchJob,
    tasks: TaskRecords,
}

impl JobObs {
    /// `job` as cached.
    pub fn new(mut job: BatchJob) -> JobObs {
        job.metadata.managed_fields = None;
        // `kubectl apply` (client-side) keeps the whole object as applied, its script
        // included, in this annotation: nothing here reads it, and it would double each
        // cached job. Every write of ours is a patch, so the object itself keeps it.
        if let Some(a) = job.metadata.annotations.as_mut() {
            a.remove(LAST_APPLIED);
            if a.is_empty() {
                job.metadata.annotations = None;
            }
        }
        let tasks = match job.status.as_mut() {
            Some(st) => {
                let recs = TaskRecords::new(&st.tasks);
                st.tasks = Vec::new();
                recs
            }
            None => TaskRecords::default(),
        };
        JobObs {
            inner: Arc::new(Inner { job, tasks }),
        }
    }

    /// The object without its task records (`status.tasks` is empty: read
    /// [`JobObs::tasks`]).
    pub fn job(&self) -> &BatchJob {
        &self.inner.job
    }

    /// The task records of its status.
    pub fn tasks(&self) -> &TaskRecords {
        &self.inner.tasks
    }

    /// The uid (empty when unset).
    pub fn uid(&self) -> String {
        ResourceExt::uid(&self.inner.job).unwrap_or_default()
    }

    /// The whole object, task records included.
    pub fn to_batchjob(&self) -> BatchJob {
        let mut j = self.inner.job.clone();
        if let Some(st) = j.status.as_mut() {
            st.tasks = self.inner.tasks.to_vec();
        }
        j
    }

    /// Whether `self` and `other` are one object in memory (not merely equal).
    pub fn same_object(&self, other: &JobObs) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

cached_lookup!(JobObs, "BatchJob", "muster.dev", "v1alpha1", "batchjobs",
    |o| name: o.inner.job.metadata.name.as_deref(), namespace: o.inner.job.metadata.namespace.as_deref());

/// kubectl's client-side apply record (see [`JobObs::new`]).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The versions of BatchJobs this operator wrote and still holds for read-your-writes, so
/// that the job cache's copy of such a version is the written object itself, not a second
/// decoding of it.
///
/// A cycle that admits 6,250 gangs holds every written answer until the watch has delivered
/// it (`runner::Recent`): kept apart from the cache's copies, they were ~15 MiB of the
/// operator's resident size at 16,384 nodes. One version of one object (uid and
/// resourceVersion) is one content, whichever way it came, so sharing it changes nothing the
/// planner sees. Entries are weak: the registry never keeps an object alive.
#[derive(Clone, Default)]
pub struct Versions {
    written: Arc<Mutex<Held>>,
    cache: Option<Store<JobObs>>,
}

/// Versions written and held, by uid: resourceVersion and the object.
type Held = HashMap<Box<str>, (Box<str>, Weak<Inner>)>;

impl Versions {
    /// Sharing with the job cache `cache` (whose watch must go through
    /// [`Versions::slim_event`]).
    pub fn new(cache: Store<JobObs>) -> Versions {
        Versions {
            written: Default::default(),
            cache: Some(cache),
        }
    }

    /// The answer to one of our writes, as cached: the cache's object when the watch has
    /// already delivered this version, else a new one the watch's copy will share.
    pub fn written(&self, obj: BatchJob) -> JobObs {
        let (Some(uid), Some(rv)) = (
            obj.metadata.uid.as_deref(),
            obj.metadata.resource_version.as_deref(),
        ) else {
            return JobObs::new(obj);
        };
        if let Some(cached) = self.cache.as_ref().and_then(|c| {
            c.get(
                &ObjectRef::new(obj.metadata.name.as_deref()?)
                    .within(obj.metadata.namespace.as_deref()?),
            )
        }) && cached.job().metadata.uid.as_deref() == Some(uid)
            && cached.job().metadata.resource_version.as_deref() == Some(rv)
        {
            return (*cached).clone();
        }
        let (uid, rv): (Box<str>, Box<str>) = (uid.into(), rv.into());
        let j = JobObs::new(obj);
        self.lock().insert(uid, (rv, Arc::downgrade(&j.inner)));
        j
    }

    /// A BatchJob watch event as the job cache keeps it: a version we wrote and still hold is
    /// taken as held.
    pub fn slim_event(&self, ev: watcher::Event<BatchJob>) -> Option<watcher::Event<JobObs>> {
        use watcher::Event as E;
        Some(match ev {
            E::Apply(j) => E::Apply(self.shared(j)),
            E::Delete(j) => E::Delete(JobObs::new(j)),
            E::InitApply(j) => E::InitApply(self.shared(j)),
            E::Init => E::Init,
            E::InitDone => E::InitDone,
        })
    }

    /// Forgets the versions no longer held (the writer let them go; the watch skipped them).
    pub fn prune(&self) {
        self.lock().retain(|_, (_, w)| w.strong_count() > 0);
    }

    /// Versions registered and not yet seen by the watch.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.lock().len()
    }

    fn shared(&self, j: BatchJob) -> JobObs {
        let held = match (&j.metadata.uid, &j.metadata.resource_version) {
            (Some(uid), Some(rv)) => {
                let mut w = self.lock();
                match w.get(uid.as_str()) {
                    Some((mine, _)) if **mine == **rv => w.remove(uid.as_str()),
                    _ => None,
                }
            }
            _ => None,
        };
        match held.and_then(|(_, inner)| inner.upgrade()) {
            Some(inner) => JobObs { inner },
            None => JobObs::new(j),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::Lookup;
    use muster_crds::v1alpha1::BatchJobStatus;

    /// A deterministic generator (no dependency on a random crate's streams).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    fn random_tasks(rng: &mut Rng) -> Vec<TaskAllocation> {
        let n = rng.below(40) as u32;
        (0..n)
            .map(|rank| {
                let node_rank = rng.below(5) as u32;
                let g = rng.below(4) as usize;
                let gpus: Vec<u32> = (0..g).map(|_| rng.below(8) as u32).collect();
                // UUIDs as recorded: all of them, none (unknown), or (hand-edited) a different
                // count; some repeated across tasks (shared GPUs), some empty.
                let gpu_uuids: Vec<String> = match rng.below(4) {
                    0 => Vec::new(),
                    1 => (0..rng.below(3)).map(|i| format!("GPU-x{i}")).collect(),
                    _ => gpus
                        .iter()
                        .map(|x| {
                            if rng.below(10) == 0 {
                                String::new()
                            } else {
                                format!("GPU-n{node_rank}-{x}")
                            }
                        })
                        .collect(),
                };
                TaskAllocation {
                    rank: if rng.below(8) == 0 { rank * 3 } else { rank },
                    node: format!("gpu{:03}", node_rank + rng.below(2) as u32),
                    node_rank,
                    local_rank: rng.below(8) as u32,
                    cpu_millis: [0, 1000, 2500, u64::MAX][rng.below(4) as usize],
                    memory_mib: [0, 8192, 1 << 40][rng.below(3) as usize],
                    gpus,
                    gpu_uuids,
                    pod: match rng.below(3) {
                        0 => None,
                        1 => Some(String::new()),
                        _ => Some(format!("job-{node_rank}")),
                    },
                }
            })
            .collect()
    }

    #[test]
    fn records_come_back_exactly() {
        let mut rng = Rng(14);
        for _ in 0..2_000 {
            let tasks = random_tasks(&mut rng);
            let recs = TaskRecords::new(&tasks);
            assert_eq!(recs.len(), tasks.len());
            assert_eq!(recs.is_empty(), tasks.is_empty());
            assert_eq!(recs.to_vec(), tasks);
            let mut ranks: Vec<u32> = tasks.iter().map(|t| t.node_rank).collect();
            ranks.sort_unstable();
            ranks.dedup();
            assert_eq!(recs.node_ranks(), ranks);
            for (t, r) in tasks.iter().zip(recs.iter()) {
                assert_eq!(r.node(), t.node);
                assert_eq!(r.gpus(), t.gpus.as_slice());
                assert_eq!(r.gpu_uuids().len(), t.gpu_uuids.len());
                assert_eq!(r.pod(), t.pod.as_deref());
            }
        }
    }

    /// A 4-node gang of 8 single-GPU tasks, as an admission records it.
    fn gang() -> Vec<TaskAllocation> {
        (0..32u32)
            .map(|rank| {
                let node = rank / 8;
                TaskAllocation {
                    rank,
                    node: format!("gpu{:05}", 100 + node),
                    node_rank: node,
                    local_rank: rank % 8,
                    cpu_millis: 1000,
                    memory_mib: 8192,
                    gpus: vec![rank % 8],
                    gpu_uuids: vec![format!("GPU-{:08x}-1111-2222-3333-{:012x}", node, rank % 8)],
                    pod: Some(format!("train-{node}")),
                }
            })
            .collect()
    }

    #[test]
    fn a_gang_is_a_fraction_of_its_records() {
        let tasks = gang();
        let recs = TaskRecords::new(&tasks);
        // What the records hold (each string and vector an allocation of its own, whose
        // allocator overhead comes on top of this).
        let records: usize = tasks
            .iter()
            .map(|t| {
                std::mem::size_of::<TaskAllocation>()
                    + t.node.len()
                    + t.gpus.len() * 4
                    + t.gpu_uuids.len() * std::mem::size_of::<String>()
                    + t.gpu_uuids.iter().map(String::len).sum::<usize>()
                    + t.pod.as_ref().map_or(0, String::len)
            })
            .sum();
        assert!(
            recs.heap_bytes() * 2 < records,
            "{} bytes compact, {records} as records",
            recs.heap_bytes()
        );
        assert_eq!(recs.to_vec(), tasks);
    }

    #[test]
    fn the_cached_job_keeps_everything_but_moves_the_records() {
        let mut j = BatchJob::new("train", Default::default());
        j.metadata.namespace = Some("ns".into());
        j.metadata.uid = Some("u1".into());
        j.metadata.managed_fields = Some(vec![Default::default()]);
        j.status = Some(BatchJobStatus {
            job_id: Some(7),
            tasks: gang(),
            ..Default::default()
        });
        let obs = JobObs::new(j.clone());
        assert!(obs.job().status.as_ref().unwrap().tasks.is_empty());
        assert_eq!(obs.tasks().len(), 32);
        assert_eq!(obs.uid(), "u1");
        j.metadata.managed_fields = None;
        let json = |j: &BatchJob| serde_json::to_value(j).unwrap();
        assert_eq!(json(&obs.to_batchjob()), json(&j));
        // Keyed by namespace and name, as the reflector store keys BatchJobs.
        assert_eq!(Lookup::name(&obs).as_deref(), Some("train"));
        assert_eq!(Lookup::namespace(&obs).as_deref(), Some("ns"));
        // A job without a status has no records and stays without one.
        let bare = JobObs::new(BatchJob::new("b", Default::default()));
        assert!(bare.tasks().is_empty());
        assert!(bare.job().status.is_none());
        assert!(bare.to_batchjob().status.is_none());
    }

    #[test]
    fn kubectls_apply_record_is_not_cached_other_annotations_are() {
        let mut j = BatchJob::new("train", Default::default());
        j.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_string(), "{\"spec\":{}}".repeat(100)),
                ("muster.dev/user".to_string(), "alice".to_string()),
            ]
            .into(),
        );
        let obs = JobObs::new(j.clone());
        let kept: Vec<&String> = obs.job().annotations().keys().collect();
        assert_eq!(kept, ["muster.dev/user"]);
        j.metadata.annotations = Some([(LAST_APPLIED.to_string(), "{}".to_string())].into());
        assert_eq!(JobObs::new(j).job().metadata.annotations, None);
    }

    fn version(rv: &str) -> BatchJob {
        let mut j = BatchJob::new("train", Default::default());
        j.metadata.namespace = Some("ns".into());
        j.metadata.uid = Some("uid-1".into());
        j.metadata.resource_version = Some(rv.into());
        j.status = Some(BatchJobStatus {
            tasks: gang(),
            ..Default::default()
        });
        j
    }

    fn apply(v: &Versions, j: BatchJob) -> JobObs {
        match v.slim_event(watcher::Event::Apply(j)) {
            Some(watcher::Event::Apply(o)) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_watchs_copy_of_a_version_we_wrote_is_the_written_object() {
        let v = Versions::default();
        let mine = v.written(version("7"));
        assert_eq!(v.pending(), 1);
        // Another version (someone else's write came first): decoded on its own, and ours
        // stays registered.
        let other = apply(&v, version("6"));
        assert!(!other.same_object(&mine));
        assert_eq!(v.pending(), 1);
        // The version we wrote, decoded again by the watch: the one object.
        let seen = apply(&v, version("7"));
        assert!(seen.same_object(&mine));
        assert_eq!(seen.tasks().to_vec(), gang());
        assert_eq!(v.pending(), 0);
        // A later event of the same version (a relist) is decoded afresh, and equal.
        let again = apply(&v, version("7"));
        assert!(!again.same_object(&mine));
        let json = |o: &JobObs| serde_json::to_value(o.to_batchjob()).unwrap();
        assert_eq!(json(&again), json(&mine));
    }

    #[test]
    fn the_registry_never_keeps_a_version_alive() {
        let v = Versions::default();
        let mine = v.written(version("7"));
        drop(mine);
        // The writer let it go before the watch came: the watch's copy is decoded.
        let seen = apply(&v, version("7"));
        assert_eq!(seen.tasks().to_vec(), gang());
        assert_eq!(v.pending(), 0);
        // Versions the watch never delivers are forgotten once let go.
        let skipped = v.written(version("8"));
        v.prune();
        assert_eq!(v.pending(), 1);
        drop(skipped);
        v.prune();
        assert_eq!(v.pending(), 0);
    }

    #[test]
    fn an_answer_the_cache_already_has_is_the_cached_object() {
        let (reader, mut writer) = kube::runtime::reflector::store();
        let v = Versions::new(reader.clone());
        writer.apply_watcher_event(&v.slim_event(watcher::Event::Apply(version("7"))).unwrap());
        let cached = reader
            .get(&ObjectRef::new("train").within("ns"))
            .expect("cached");
        // The watch came first: the answer to our write is the cached object.
        let mine = v.written(version("7"));
        assert!(mine.same_object(&cached));
        assert_eq!(v.pending(), 0);
        // An answer newer than the cache is its own object, and registered.
        let newer = v.written(version("8"));
        assert!(!newer.same_object(&cached));
        assert_eq!(v.pending(), 1);
        // Another object of the same name (deleted and made again): never shared.
        let mut twin = version("7");
        twin.metadata.uid = Some("uid-2".into());
        assert!(!v.written(twin).same_object(&cached));
    }
}

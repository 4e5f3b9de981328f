//! Storage: what etcd plus the watch cache are to kube-apiserver.
//!
//! Objects are kept as their serialized JSON ([`Bytes`], shared with watch events and list
//! responses, never re-serialized to be read) plus a small parsed [`Meta`] for selectors and
//! garbage collection. One global counter hands out resourceVersions, as etcd's revision does.
//! Each collection (group/resource) keeps a bounded window of recent events; a watch replays
//! from it and follows it, so a watch from an old resourceVersion gets exactly the events after
//! it, or `410 Gone` once they have left the window.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use super::resources::GroupResource;

/// Key of an object in its collection: namespace (`""` when cluster-scoped) and name. Ordered as
/// etcd keys are, so lists come back sorted by namespace then name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Namespace, empty for cluster-scoped objects.
    pub ns: String,
    /// Name.
    pub name: String,
}

impl Key {
    /// A key.
    pub fn new(ns: &str, name: &str) -> Self {
        Self {
            ns: ns.to_string(),
            name: name.to_string(),
        }
    }
}

/// Fields of an object that selectors, watches and the garbage collector need, parsed once per
/// write.
#[derive(Debug, Default)]
pub struct Meta {
    /// Namespace (`""` when cluster-scoped).
    pub ns: Box<str>,
    /// Name.
    pub name: Box<str>,
    /// UID.
    pub uid: Box<str>,
    /// resourceVersion.
    pub rv: u64,
    /// Labels.
    pub labels: Box<[(Box<str>, Box<str>)]>,
    /// Values of the selectable fields of this kind (`spec.nodeName`, `status.phase`, ...).
    pub fields: Box<[(&'static str, Box<str>)]>,
    /// UIDs of the owners.
    pub owners: Box<[Box<str>]>,
    /// deletionTimestamp is set.
    pub deleting: bool,
}

impl Meta {
    /// Value of a selectable field; `None` when the kind has no such field.
    pub fn field(&self, name: &str) -> Option<&str> {
        match name {
            "metadata.name" => Some(&self.name),
            "metadata.namespace" => Some(&self.ns),
            _ => self
                .fields
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| &**v),
        }
    }
}

/// A stored object: its JSON bytes and parsed metadata.
#[derive(Clone, Debug)]
pub struct Stored {
    /// Serialized JSON of the whole object.
    pub bytes: Bytes,
    /// Parsed metadata.
    pub meta: Arc<Meta>,
}

impl Stored {
    /// Parse the object.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes).expect("stored objects are valid JSON")
    }
}

/// Watch event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Deleted.
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change of one object.
#[derive(Debug)]
pub struct Event {
    /// What happened.
    pub typ: EventType,
    /// resourceVersion of the change.
    pub rv: u64,
    /// The object after the change (for deletions: its last state, at the deletion's rv).
    pub obj: Stored,
    /// The object before the change (for modifications), so selector watches can tell an
    /// object that stopped matching.
    pub prev: Option<Stored>,
    frame: OnceLock<Bytes>,
}

impl Event {
    /// The event as one line of a JSON watch stream, built once and shared by every watcher.
    pub fn frame(&self) -> Bytes {
        self.frame
            .get_or_init(|| watch_frame(self.typ.as_str(), &self.obj.bytes))
            .clone()
    }
}

/// `{"type":T,"object":OBJ}\n`.
pub fn watch_frame(typ: &str, obj: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(obj.len() + 32);
    v.extend_from_slice(b"{\"type\":\"");
    v.extend_from_slice(typ.as_bytes());
    v.extend_from_slice(b"\",\"object\":");
    v.extend_from_slice(obj);
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

/// The recent events of one collection.
#[derive(Debug, Default)]
pub struct Window {
    events: VecDeque<Arc<Event>>,
    /// Every event of this collection with rv > `start` is in `events`.
    start: u64,
    /// rv of the newest event.
    last: u64,
}

/// What a watcher gets when it asks for the events after a resourceVersion.
pub enum Since {
    /// The events (possibly none), the rv up to which the window has been read, and whether
    /// more events follow it.
    Events(Vec<Arc<Event>>, u64, bool),
    /// The resourceVersion has left the window: the oldest one still answerable.
    Expired(u64),
}

/// Why a commit was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum CommitError {
    /// Create of an existing key.
    Exists,
    /// The object is gone.
    NotFound,
    /// The object changed since it was read.
    Conflict,
}

/// A write to commit. The value is borrowed (the writer keeps it: it gets the new
/// resourceVersion, and a refused write can be retried) rather than copied per write.
pub enum Write<'a> {
    /// Create an object that must not exist.
    Create(&'a mut Value),
    /// Replace the object at the expected rv.
    Update(&'a mut Value, u64),
    /// Delete the object at the expected rv; the value is its final state, as watchers see it.
    Delete(&'a mut Value, u64),
}

/// Extracts a kind's selectable fields from an object.
pub type FieldsFn = fn(&Value) -> Vec<(&'static str, Box<str>)>;

/// One group/resource's objects and events.
#[derive(Debug)]
pub struct Collection {
    /// The group/resource.
    pub gr: Arc<GroupResource>,
    objects: Mutex<BTreeMap<Key, Stored>>,
    window: RwLock<Window>,
    notify: watch::Sender<u64>,
    /// Notifiers of watches pinned by an indexed field (`spec.nodeName=n`, `metadata.name=x`):
    /// a write wakes only the watches its object can match, not every watch of the collection,
    /// as the watch cache's indexers do. Entries without receivers are dropped lazily.
    keyed: Mutex<HashMap<IndexKey, watch::Sender<u64>>>,
    has_keyed: std::sync::atomic::AtomicBool,
}

/// An indexed field and the value a watch pins it to.
type IndexKey = (&'static str, Box<str>);

/// Fields whose equality selectors get their own watch notifier.
pub const INDEXED_FIELDS: &[&str] = &["metadata.name", "spec.nodeName"];

/// A page of a list.
pub struct Page {
    /// Items in key order.
    pub items: Vec<Stored>,
    /// resourceVersion the list is consistent with.
    pub rv: u64,
    /// Key of the last item when more matching items follow.
    pub next: Option<Key>,
    /// How many matching items follow (only counted when asked).
    pub remaining: Option<u64>,
}

impl Collection {
    fn new(gr: GroupResource) -> Self {
        Self {
            gr: Arc::new(gr),
            objects: Mutex::new(BTreeMap::new()),
            window: RwLock::new(Window::default()),
            notify: watch::channel(0).0,
            keyed: Mutex::new(HashMap::new()),
            has_keyed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The object at a key.
    pub fn get(&self, key: &Key) -> Option<Stored> {
        self.objects.lock().expect("objects lock").get(key).cloned()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.objects.lock().expect("objects lock").len()
    }

    /// A consistent page of matching objects after `after` (exclusive), in key order.
    pub fn list(
        &self,
        store: &Store,
        ns: Option<&str>,
        after: Option<&Key>,
        limit: Option<usize>,
        count_remaining: bool,
        mut filter: impl FnMut(&Meta) -> bool,
    ) -> Page {
        let objects = self.objects.lock().expect("objects lock");
        // Reading the counter under the collection lock: every write to this collection with a
        // smaller rv is visible, every later one gets a larger rv.
        let rv = store.current_rv();
        let lower = match (after, ns) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included(Key::new(ns, "")),
            (None, None) => Bound::Unbounded,
        };
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0u64;
        for (k, s) in objects.range((lower, Bound::Unbounded)) {
            if let Some(ns) = ns
                && k.ns != ns
            {
                break;
            }
            if !filter(&s.meta) {
                continue;
            }
            if let Some(l) = limit
                && items.len() >= l
            {
                if next.is_none() {
                    next = Some(
                        items
                            .last()
                            .map(|s: &Stored| Key::new(&s.meta.ns, &s.meta.name))
                            .unwrap_or_else(|| k.clone()),
                    );
                }
                if !count_remaining {
                    break;
                }
                remaining += 1;
                continue;
            }
            items.push(s.clone());
        }
        Page {
            items,
            rv,
            remaining: (next.is_some() && count_remaining).then_some(remaining),
            next,
        }
    }

    /// Commit one write atomically: check the expectation, take the next resourceVersion, store,
    /// and publish the event.
    pub fn commit(
        &self,
        store: &Store,
        write: Write,
        fields: FieldsFn,
    ) -> Result<Stored, CommitError> {
        let (value, expect, typ) = match write {
            Write::Create(v) => (v, None, EventType::Added),
            Write::Update(v, rv) => (v, Some(rv), EventType::Modified),
            Write::Delete(v, rv) => (v, Some(rv), EventType::Deleted),
        };
        let key = key_of(value);
        let mut objects = self.objects.lock().expect("objects lock");
        let prev = objects.get(&key).cloned();
        match (&prev, expect) {
            (Some(_), None) => return Err(CommitError::Exists),
            (None, Some(_)) => return Err(CommitError::NotFound),
            (Some(p), Some(rv)) if p.meta.rv != rv => return Err(CommitError::Conflict),
            _ => {}
        }
        let rv = store.rv.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let bytes = Bytes::from(serde_json::to_vec(&*value).expect("JSON values serialize"));
        let meta = Arc::new(extract_meta(value, rv, fields));
        let stored = Stored { bytes, meta };
        if typ == EventType::Deleted {
            objects.remove(&key);
        } else {
            objects.insert(key.clone(), stored.clone());
        }
        store.reindex(
            &self.gr,
            &key,
            prev.as_ref(),
            (typ != EventType::Deleted).then_some(&stored),
        );
        let event_prev = prev.as_ref().map(|p| p.meta.clone());
        let event = Arc::new(Event {
            typ,
            rv,
            obj: stored.clone(),
            prev,
            frame: OnceLock::new(),
        });
        {
            let cap = store.window_size.load(Ordering::Relaxed).max(1);
            let mut w = self.window.write().expect("window lock");
            w.events.push_back(event);
            w.last = rv;
            while w.events.len() > cap {
                if let Some(old) = w.events.pop_front() {
                    w.start = old.rv;
                }
            }
        }
        drop(objects);
        self.notify.send_replace(rv);
        if self.has_keyed.load(Ordering::Acquire) {
            let mut keyed = self.keyed.lock().expect("keyed lock");
            for f in INDEXED_FIELDS {
                let new_v = stored.meta.field(f);
                let old_v = event_prev_field(&event_prev, f);
                for v in [new_v, old_v.as_deref()].into_iter().flatten() {
                    let k = (*f, Box::<str>::from(v));
                    if let Some(tx) = keyed.get(&k) {
                        if tx.receiver_count() == 0 {
                            keyed.remove(&k);
                        } else {
                            tx.send_replace(rv);
                        }
                    }
                }
            }
            if keyed.is_empty() {
                self.has_keyed.store(false, Ordering::Release);
            }
        }
        Ok(stored)
    }

    /// Events after `rv`, at most `max`.
    pub fn since(&self, rv: u64, max: usize) -> Since {
        self.since_matching(rv, max, |_| true)
    }

    /// Events after `rv` that `keep` accepts, looking at `max` events at most. Filtering under
    /// the lock spares watchers that select few objects a reference per event.
    pub fn since_matching(
        &self,
        rv: u64,
        max: usize,
        mut keep: impl FnMut(&Event) -> bool,
    ) -> Since {
        let w = self.window.read().expect("window lock");
        if rv < w.start {
            return Since::Expired(w.start);
        }
        let from = w.events.partition_point(|e| e.rv <= rv);
        let scanned = (w.events.len() - from).min(max);
        let evs: Vec<_> = w
            .events
            .iter()
            .skip(from)
            .take(scanned)
            .filter(|e| keep(e))
            .cloned()
            .collect();
        let more = from + scanned < w.events.len();
        let read_to = if more {
            w.events[from + scanned - 1].rv
        } else {
            w.last.max(rv)
        };
        Since::Events(evs, read_to, more)
    }

    /// Drop all events (tests use it to force `410 Gone`).
    pub fn compact(&self, store: &Store) {
        let mut w = self.window.write().expect("window lock");
        w.events.clear();
        w.start = store.current_rv();
    }

    /// A receiver notified on every commit to this collection.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// A receiver notified on commits of objects whose `field` is (or was) `value`; `field`
    /// must be one of [`INDEXED_FIELDS`].
    pub fn subscribe_keyed(&self, field: &'static str, value: &str) -> watch::Receiver<u64> {
        let mut keyed = self.keyed.lock().expect("keyed lock");
        self.has_keyed.store(true, Ordering::Release);
        keyed
            .entry((field, value.into()))
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }
}

fn event_prev_field(prev: &Option<Arc<Meta>>, f: &str) -> Option<String> {
    prev.as_ref().and_then(|m| m.field(f).map(str::to_string))
}

fn key_of(v: &Value) -> Key {
    let m = &v["metadata"];
    Key::new(
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or(""),
    )
}

fn extract_meta(v: &Value, rv: u64, fields: FieldsFn) -> Meta {
    let m = &v["metadata"];
    let s = |x: &Value| x.as_str().unwrap_or("").into();
    let labels = m["labels"]
        .as_object()
        .map(|l| {
            l.iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().unwrap_or("").into()))
                .collect()
        })
        .unwrap_or_default();
    let owners = m["ownerReferences"]
        .as_array()
        .map(|o| o.iter().map(|r| s(&r["uid"])).collect())
        .unwrap_or_default();
    Meta {
        ns: s(&m["namespace"]),
        name: s(&m["name"]),
        uid: s(&m["uid"]),
        rv,
        labels,
        fields: fields(v).into_boxed_slice(),
        owners,
        deleting: !m["deletionTimestamp"].is_null(),
    }
}

/// Where an object lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjRef {
    /// Its collection.
    pub gr: Arc<GroupResource>,
    /// Its key.
    pub key: Key,
}

#[derive(Debug, Default)]
struct Index {
    uids: HashMap<Box<str>, ObjRef>,
    dependents: HashMap<Box<str>, HashSet<ObjRef>>,
}

/// All collections, the resourceVersion counter and the UID/owner indexes.
#[derive(Debug)]
pub struct Store {
    rv: AtomicU64,
    collections: RwLock<HashMap<GroupResource, Arc<Collection>>>,
    index: Mutex<Index>,
    window_size: AtomicUsize,
}

impl Store {
    /// An empty store keeping `window` events per collection.
    pub fn new(window: usize) -> Self {
        Self {
            rv: AtomicU64::new(1),
            collections: RwLock::new(HashMap::new()),
            index: Mutex::new(Index::default()),
            window_size: AtomicUsize::new(window),
        }
    }

    /// The latest resourceVersion handed out.
    pub fn current_rv(&self) -> u64 {
        self.rv.load(Ordering::SeqCst)
    }

    /// Change the per-collection event window.
    pub fn set_window(&self, n: usize) {
        self.window_size.store(n.max(1), Ordering::Relaxed);
    }

    /// The collection of a group/resource, created on first use.
    pub fn collection(&self, gr: &GroupResource) -> Arc<Collection> {
        if let Some(c) = self.collections.read().expect("collections lock").get(gr) {
            return c.clone();
        }
        self.collections
            .write()
            .expect("collections lock")
            .entry(gr.clone())
            .or_insert_with(|| Arc::new(Collection::new(gr.clone())))
            .clone()
    }

    /// Every collection.
    pub fn collections(&self) -> Vec<Arc<Collection>> {
        self.collections
            .read()
            .expect("collections lock")
            .values()
            .cloned()
            .collect()
    }

    /// Where the object with this UID lives, if it exists.
    pub fn by_uid(&self, uid: &str) -> Option<ObjRef> {
        self.index
            .lock()
            .expect("index lock")
            .uids
            .get(uid)
            .cloned()
    }

    /// Objects naming this UID as an owner.
    pub fn dependents(&self, uid: &str) -> Vec<ObjRef> {
        self.index
            .lock()
            .expect("index lock")
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn reindex(
        &self,
        gr: &Arc<GroupResource>,
        key: &Key,
        old: Option<&Stored>,
        new: Option<&Stored>,
    ) {
        let same_owners = match (old, new) {
            (Some(o), Some(n)) => o.meta.owners == n.meta.owners && o.meta.uid == n.meta.uid,
            _ => false,
        };
        if same_owners {
            return;
        }
        let r = ObjRef {
            gr: gr.clone(),
            key: key.clone(),
        };
        let mut idx = self.index.lock().expect("index lock");
        if let Some(o) = old {
            idx.uids.remove(&o.meta.uid);
            for owner in o.meta.owners.iter() {
                if let Some(set) = idx.dependents.get_mut(owner) {
                    set.remove(&r);
                    if set.is_empty() {
                        idx.dependents.remove(owner);
                    }
                }
            }
        }
        if let Some(n) = new {
            idx.uids.insert(n.meta.uid.clone(), r.clone());
            for owner in n.meta.owners.iter() {
                idx.dependents
                    .entry(owner.clone())
                    .or_default()
                    .insert(r.clone());
            }
        }
    }
}

//! What `pods/log` returns: text set by a test, or the file a container writes (exec mode).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug)]
enum Source {
    Text(String),
    File(PathBuf),
}

/// (namespace, pod, container).
type Key = (String, String, String);

/// The pod log registry of an API server double: (namespace, pod, container) → log. Cloning
/// shares it (the exec kubelet holds one).
#[derive(Clone, Debug, Default)]
pub struct PodLogs(Arc<Mutex<HashMap<Key, Source>>>);

impl PodLogs {
    fn put(&self, ns: &str, pod: &str, container: &str, s: Source) {
        self.0
            .lock()
            .expect("logs lock")
            .insert((ns.into(), pod.into(), container.into()), s);
    }

    /// The container's log is this text.
    pub fn set_text(&self, ns: &str, pod: &str, container: &str, text: &str) {
        self.put(ns, pod, container, Source::Text(text.into()));
    }

    /// The container's log is whatever this file holds when it is read.
    pub fn set_file(&self, ns: &str, pod: &str, container: &str, path: PathBuf) {
        self.put(ns, pod, container, Source::File(path));
    }

    /// The log now, if one was set (a file that cannot be read reads as empty).
    pub fn read(&self, ns: &str, pod: &str, container: &str) -> Option<String> {
        let s = self
            .0
            .lock()
            .expect("logs lock")
            .get(&(ns.into(), pod.into(), container.into()))
            .cloned()?;
        Some(match s {
            Source::Text(t) => t,
            Source::File(p) => std::fs::read(&p)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default(),
        })
    }
}

//! A pod's volumes on the host, as the kubelet's volume plugins set them up: `emptyDir` (a
//! directory per pod), `hostPath`, `secret`, `configMap`, `downwardAPI` and `projected`
//! (their keys written as files, with `items`, `defaultMode` and `mode`), and
//! `persistentVolumeClaim` (one shared host directory per claim, so pods of a job share
//! files as on a shared file system). Files are written when the pod starts. Afterwards
//! downwardAPI files (plain and projected) follow the pod's labels and annotations, as the
//! kubelet's re-sync on a pod update keeps them ([`refresh_downward`]): a changed file is
//! replaced by a rename, so a reader sees the old or the new text, never part of one, and a
//! file mounted by `subPath` keeps what it had (the mount holds the old file), as with the
//! kubelet (a `subPath` naming a directory of the volume does see new files, unlike with
//! the kubelet). Later changes to Secrets and ConfigMaps are not propagated.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Pod, Volume};

use super::env::{Objects, PodFacts};

/// Why a volume cannot be set up (the kubelet's `FailedMount` event text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MountVolume.SetUp failed for volume \"{volume}\" : {message}")]
pub struct MountError {
    /// The volume.
    pub volume: String,
    /// Why.
    pub message: String,
}

/// Secrets, ConfigMaps and claims the volumes need: `(name, optional)`.
#[derive(Debug, Default)]
pub struct Needs {
    /// Secrets.
    pub secrets: Vec<(String, bool)>,
    /// ConfigMaps.
    pub config_maps: Vec<(String, bool)>,
    /// PersistentVolumeClaims.
    pub claims: Vec<String>,
}

/// What the pod's volumes refer to.
pub fn needs(pod: &Pod) -> Needs {
    let mut n = Needs::default();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(s) = &v.secret {
            n.secrets.push((
                s.secret_name.clone().unwrap_or_default(),
                s.optional.unwrap_or(false),
            ));
        }
        if let Some(c) = &v.config_map {
            n.config_maps
                .push((c.name.clone(), c.optional.unwrap_or(false)));
        }
        if let Some(c) = &v.persistent_volume_claim {
            n.claims.push(c.claim_name.clone());
        }
        if let Some(p) = &v.projected {
            for src in p.sources.iter().flatten() {
                if let Some(s) = &src.secret {
                    n.secrets
                        .push((s.name.clone(), s.optional.unwrap_or(false)));
                }
                if let Some(c) = &src.config_map {
                    n.config_maps
                        .push((c.name.clone(), c.optional.unwrap_or(false)));
                }
            }
        }
    }
    n
}

fn mount_error(vol: &str) -> impl Fn(String) -> MountError + '_ {
    move |m| MountError {
        volume: vol.into(),
        message: m,
    }
}

/// `root/rel`, refusing a `rel` that would leave `root`.
fn file_path(root: &Path, rel: &str, vol: &str) -> Result<PathBuf, MountError> {
    if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
        return Err(mount_error(vol)(format!(
            "invalid path {rel:?}: must be relative and may not contain '..'"
        )));
    }
    Ok(root.join(rel))
}

fn write_file(root: &Path, rel: &str, data: &[u8], mode: i32, vol: &str) -> Result<(), MountError> {
    let err = mount_error(vol);
    let p = file_path(root, rel, vol)?;
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err(format!("{}: {e}", parent.display())))?;
    }
    std::fs::write(&p, data).map_err(|e| err(format!("{}: {e}", p.display())))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode((mode & 0o7777) as u32))
        .map_err(|e| err(format!("{}: {e}", p.display())))
}

#[allow(clippy::too_many_arguments)]
fn project(
    root: &Path,
    vol: &str,
    what: &str,
    name: &str,
    data: Option<&BTreeMap<String, Vec<u8>>>,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
    default_mode: i32,
) -> Result<(), MountError> {
    let err = |m: String| MountError {
        volume: vol.into(),
        message: m,
    };
    let Some(data) = data else {
        return if optional {
            Ok(())
        } else {
            Err(err(format!("{what} \"{name}\" not found")))
        };
    };
    match items {
        Some(items) if !items.is_empty() => {
            for it in items {
                match data.get(&it.key) {
                    Some(v) => write_file(root, &it.path, v, it.mode.unwrap_or(default_mode), vol)?,
                    None if optional => {}
                    None => {
                        return Err(err(format!(
                            "configured to use key {} but the {what} \"{name}\" has no such key",
                            it.key
                        )));
                    }
                }
            }
        }
        _ => {
            for (k, v) in data {
                write_file(root, k, v, default_mode, vol)?;
            }
        }
    }
    Ok(())
}

/// A downwardAPI file: its path in the volume, its text and its mode.
struct DownwardFile {
    path: String,
    text: String,
    mode: i32,
}

/// What the downwardAPI `items` hold for `pod`: the one place their text is made, for the
/// first write and for every refresh alike.
fn downward_files(
    pod: &Pod,
    facts: &PodFacts,
    vol: &str,
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
) -> Result<Vec<DownwardFile>, MountError> {
    let err = mount_error(vol);
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        let text = if let Some(f) = &it.field_ref {
            let map_text = |m: Option<&BTreeMap<String, String>>| {
                m.into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}=\"{}\"\n", v.replace('"', "\\\"")))
                    .collect::<String>()
            };
            match f.field_path.as_str() {
                "metadata.labels" => map_text(pod.metadata.labels.as_ref()),
                "metadata.annotations" => map_text(pod.metadata.annotations.as_ref()),
                "metadata.name" => pod.metadata.name.clone().unwrap_or_default(),
                "metadata.namespace" => pod.metadata.namespace.clone().unwrap_or_default(),
                "metadata.uid" => pod.metadata.uid.clone().unwrap_or_default(),
                p if p.starts_with("metadata.labels['")
                    || p.starts_with("metadata.annotations['") =>
                {
                    let (map, rest) = if let Some(r) = p.strip_prefix("metadata.labels['") {
                        (pod.metadata.labels.as_ref(), r)
                    } else {
                        (
                            pod.metadata.annotations.as_ref(),
                            p.strip_prefix("metadata.annotations['").unwrap_or(""),
                        )
                    };
                    let k = rest.strip_suffix("']").unwrap_or(rest);
                    map.and_then(|m| m.get(k).cloned()).unwrap_or_default()
                }
                "status.podIP" => facts.pod_ip.clone(),
                other => return Err(err(format!("unsupported downwardAPI fieldPath {other:?}"))),
            }
        } else if it.resource_field_ref.is_some() {
            return Err(err("downwardAPI resourceFieldRef volumes are not supported in exec mode; use an env var".into()));
        } else {
            String::new()
        };
        out.push(DownwardFile {
            path: it.path.clone(),
            text,
            mode: it.mode.unwrap_or(default_mode),
        });
    }
    Ok(out)
}

fn downward(
    pod: &Pod,
    facts: &PodFacts,
    root: &Path,
    vol: &str,
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
) -> Result<(), MountError> {
    for f in downward_files(pod, facts, vol, items, default_mode)? {
        write_file(root, &f.path, f.text.as_bytes(), f.mode, vol)?;
    }
    Ok(())
}

/// Replaces `root/rel` with `data` by renaming a temporary file of the same directory over
/// it: a reader sees the old or the new content, never part of either.
fn replace_file(
    root: &Path,
    rel: &str,
    data: &[u8],
    mode: i32,
    vol: &str,
) -> Result<(), MountError> {
    let err = mount_error(vol);
    let p = file_path(root, rel, vol)?;
    let dir = p.parent().unwrap_or(root);
    std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    // Dot-named, as the kubelet's own `..data` entries are, so listing the volume skips it.
    let mut tmp = tempfile::Builder::new()
        .prefix("..")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let at = tmp.path().display().to_string();
    let io = |e: std::io::Error| err(format!("{at}: {e}"));
    tmp.write_all(data).map_err(io)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode((mode & 0o7777) as u32))
        .map_err(io)?;
    tmp.persist(&p)
        .map_err(|e| err(format!("{}: {}", p.display(), e.error)))?;
    Ok(())
}

/// Brings the downwardAPI files of `pod`'s volumes (plain `downwardAPI` volumes and the
/// downwardAPI sources of `projected` ones) up to date with `pod`'s metadata, as the kubelet
/// does when it re-syncs a pod on an update: only files whose text changed are rewritten,
/// each atomically and with the mode it was first written with. `volumes` are the host paths
/// [`materialize`] returned. Returns how many files were rewritten.
pub fn refresh_downward(
    pod: &Pod,
    facts: &PodFacts,
    volumes: &BTreeMap<String, PathBuf>,
) -> Result<usize, MountError> {
    let mut rewritten = 0;
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        let Some(root) = volumes.get(&v.name) else {
            continue;
        };
        let vol = v.name.as_str();
        let mut sources = Vec::new();
        if let Some(d) = &v.downward_api {
            sources.push((d.items.as_deref(), d.default_mode));
        }
        if let Some(p) = &v.projected {
            for d in p
                .sources
                .iter()
                .flatten()
                .filter_map(|s| s.downward_api.as_ref())
            {
                sources.push((d.items.as_deref(), p.default_mode));
            }
        }
        for (items, mode) in sources {
            let items = items.unwrap_or_default();
            for f in downward_files(pod, facts, vol, items, mode.unwrap_or(0o644))? {
                let p = file_path(root, &f.path, vol)?;
                if std::fs::read(&p).is_ok_and(|old| old == f.text.as_bytes()) {
                    continue;
                }
                replace_file(root, &f.path, f.text.as_bytes(), f.mode, vol)?;
                rewritten += 1;
            }
        }
    }
    Ok(rewritten)
}

/// Sets up every volume of `pod` under `dir` (claims under `claims_root`); returns the host
/// path of each volume by name.
pub fn materialize(
    pod: &Pod,
    dir: &Path,
    claims_root: &Path,
    objs: &Objects,
    claims: &BTreeMap<String, bool>,
    facts: &PodFacts,
) -> Result<BTreeMap<String, PathBuf>, MountError> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let mut out = BTreeMap::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        let path = one(pod, v, dir, claims_root, &ns, objs, claims, facts)?;
        out.insert(v.name.clone(), path);
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn one(
    pod: &Pod,
    v: &Volume,
    dir: &Path,
    claims_root: &Path,
    ns: &str,
    objs: &Objects,
    claims: &BTreeMap<String, bool>,
    facts: &PodFacts,
) -> Result<PathBuf, MountError> {
    let vol = v.name.as_str();
    let err = |m: String| MountError {
        volume: vol.into(),
        message: m,
    };
    let own = dir.join("volumes").join(vol);
    let mk =
        |p: &Path| std::fs::create_dir_all(p).map_err(|e| err(format!("{}: {e}", p.display())));
    if v.empty_dir.is_some() {
        mk(&own)?;
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| err(e.to_string()))?;
        return Ok(own);
    }
    if let Some(h) = &v.host_path {
        let p = PathBuf::from(&h.path);
        let ty = h.type_.clone().unwrap_or_default();
        let exists = p.exists();
        match ty.as_str() {
            "" => {}
            "DirectoryOrCreate" if !exists => {
                std::fs::create_dir_all(&p).map_err(|e| err(format!("{}: {e}", p.display())))?;
            }
            "FileOrCreate" if !exists => {
                if let Some(parent) = p.parent() {
                    mk(parent)?;
                }
                std::fs::write(&p, b"").map_err(|e| err(format!("{}: {e}", p.display())))?;
            }
            "Directory" if !p.is_dir() => {
                return Err(err(format!(
                    "hostPath type check failed: {} is not a directory",
                    h.path
                )));
            }
            "File" if !p.is_file() => {
                return Err(err(format!(
                    "hostPath type check failed: {} is not a file",
                    h.path
                )));
            }
            "Socket" | "CharDevice" | "BlockDevice" if !exists => {
                return Err(err(format!(
                    "hostPath type check failed: {} does not exist",
                    h.path
                )));
            }
            _ => {}
        }
        if !p.exists() {
            // Unset type: the kubelet mounts whatever is there; a missing path becomes a directory.
            mk(&p)?;
        }
        return Ok(p);
    }
    if let Some(c) = &v.persistent_volume_claim {
        if !claims.get(&c.claim_name).copied().unwrap_or(false) {
            return Err(err(format!(
                "persistentvolumeclaim \"{}\" not found",
                c.claim_name
            )));
        }
        let p = claims_root.join(ns).join(&c.claim_name);
        mk(&p)?;
        return Ok(p);
    }
    let get = |m: &BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>, n: &str| {
        m.get(n).cloned().flatten()
    };
    if let Some(s) = &v.secret {
        mk(&own)?;
        let name = s.secret_name.clone().unwrap_or_default();
        let data = get(&objs.secrets, &name);
        project(
            &own,
            vol,
            "secret",
            &name,
            data.as_ref(),
            s.items.as_ref(),
            s.optional.unwrap_or(false),
            s.default_mode.unwrap_or(0o644),
        )?;
        return Ok(own);
    }
    if let Some(c) = &v.config_map {
        mk(&own)?;
        let data = get(&objs.config_maps, &c.name);
        project(
            &own,
            vol,
            "configmap",
            &c.name,
            data.as_ref(),
            c.items.as_ref(),
            c.optional.unwrap_or(false),
            c.default_mode.unwrap_or(0o644),
        )?;
        return Ok(own);
    }
    if let Some(d) = &v.downward_api {
        mk(&own)?;
        downward(
            pod,
            facts,
            &own,
            vol,
            d.items.as_deref().unwrap_or_default(),
            d.default_mode.unwrap_or(0o644),
        )?;
        return Ok(own);
    }
    if let Some(p) = &v.projected {
        mk(&own)?;
        let mode = p.default_mode.unwrap_or(0o644);
        for src in p.sources.iter().flatten() {
            if let Some(s) = &src.secret {
                let data = get(&objs.secrets, &s.name);
                project(
                    &own,
                    vol,
                    "secret",
                    &s.name,
                    data.as_ref(),
                    s.items.as_ref(),
                    s.optional.unwrap_or(false),
                    mode,
                )?;
            }
            if let Some(c) = &src.config_map {
                let data = get(&objs.config_maps, &c.name);
                project(
                    &own,
                    vol,
                    "configmap",
                    &c.name,
                    data.as_ref(),
                    c.items.as_ref(),
                    c.optional.unwrap_or(false),
                    mode,
                )?;
            }
            if let Some(d) = &src.downward_api {
                downward(
                    pod,
                    facts,
                    &own,
                    vol,
                    d.items.as_deref().unwrap_or_default(),
                    mode,
                )?;
            }
            if let Some(t) = &src.service_account_token {
                // The API server double authenticates no one, so any token works against it.
                write_file(
                    &own,
                    &t.path,
                    b"muster-e2e-service-account-token",
                    mode,
                    vol,
                )?;
            }
        }
        return Ok(own);
    }
    Err(err(
        "exec mode supports emptyDir, hostPath, secret, configMap, downwardAPI, projected and persistentVolumeClaim volumes".into(),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn volumes_are_written_as_the_kubelet_writes_them() {
        let d = tempfile::tempdir().unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1"}},
            "spec": {"containers": [], "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "cred", "secret": {"secretName": "s", "defaultMode": 256, "items": [{"key": "key", "path": "step/key"}]}},
                {"name": "cfg", "configMap": {"name": "cm"}},
                {"name": "meta", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
            ]}
        }))
        .unwrap();
        let mut objs = Objects::default();
        objs.secrets.insert(
            "s".into(),
            Some([("key".to_string(), b"k3y".to_vec())].into()),
        );
        objs.config_maps.insert(
            "cm".into(),
            Some([("a.txt".to_string(), b"A".to_vec())].into()),
        );
        let claims: BTreeMap<String, bool> = [("shared".to_string(), true)].into();
        let v = materialize(
            &pod,
            d.path(),
            &d.path().join("claims"),
            &objs,
            &claims,
            &PodFacts::default(),
        )
        .unwrap();
        let key = v["cred"].join("step/key");
        assert_eq!(std::fs::read(&key).unwrap(), b"k3y");
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o400
        );
        assert_eq!(
            std::fs::read_to_string(v["cfg"].join("a.txt")).unwrap(),
            "A"
        );
        assert_eq!(
            std::fs::read_to_string(v["meta"].join("labels")).unwrap(),
            "a=\"1\"\n"
        );
        assert_eq!(v["data"], d.path().join("claims/ns/shared"));
        let mut missing = objs.clone();
        missing.secrets.insert("s".into(), None);
        let e = materialize(
            &pod,
            d.path(),
            d.path(),
            &missing,
            &claims,
            &PodFacts::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "MountVolume.SetUp failed for volume \"cred\" : secret \"s\" not found"
        );
        let e = materialize(
            &pod,
            d.path(),
            d.path(),
            &objs,
            &BTreeMap::new(),
            &PodFacts::default(),
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("persistentvolumeclaim \"shared\" not found"),
            "{e}"
        );
    }

    #[test]
    fn downward_files_follow_the_metadata_atomically_keeping_their_modes() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1"},
                         "annotations": {"example.com/x": "first"}},
            "spec": {"containers": [], "volumes": [
                {"name": "meta", "downwardAPI": {"defaultMode": 0o600, "items": [
                    {"path": "x", "fieldRef": {"fieldPath": "metadata.annotations['example.com/x']"}},
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                ]}},
                {"name": "proj", "projected": {"sources": [{"downwardAPI": {"items": [
                    {"path": "info/labels", "mode": 0o640, "fieldRef": {"fieldPath": "metadata.labels"}},
                ]}}]}},
            ]}
        }))
        .unwrap();
        let facts = PodFacts::default();
        let v = materialize(
            &pod,
            d.path(),
            d.path(),
            &Objects::default(),
            &BTreeMap::new(),
            &facts,
        )
        .unwrap();
        let (x, name, labels) = (
            v["meta"].join("x"),
            v["meta"].join("name"),
            v["proj"].join("info/labels"),
        );
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let (x0, name0) = (ino(&x), ino(&name));
        assert_eq!(
            refresh_downward(&pod, &facts, &v).unwrap(),
            0,
            "nothing changed"
        );
        assert_eq!(ino(&x), x0);

        pod.metadata.annotations = Some([("example.com/x".into(), "second".into())].into());
        pod.metadata.labels = Some([("a".into(), "2".into()), ("b".into(), "3".into())].into());
        assert_eq!(refresh_downward(&pod, &facts, &v).unwrap(), 2);
        assert_eq!(std::fs::read_to_string(&x).unwrap(), "second");
        assert_eq!(
            std::fs::read_to_string(&labels).unwrap(),
            "a=\"2\"\nb=\"3\"\n"
        );
        assert_ne!(ino(&x), x0, "replaced by a rename, not rewritten in place");
        assert_eq!(ino(&name), name0, "unchanged files are left alone");
        assert_eq!((mode(&x), mode(&labels)), (0o600, 0o640));
        let mut left: Vec<_> = std::fs::read_dir(&v["meta"])
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["name", "x"], "no temporary files left behind");
    }
}

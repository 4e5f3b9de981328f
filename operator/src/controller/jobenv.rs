//! The partition's job environment merged into a job pod (pure): what every node of a Slurm
//! partition has — shared filesystems, a large `/dev/shm`, the fabric, environment — given to
//! each pod from the Partition's `spec.jobEnvironment`.
//!
//! One function, [`apply`], called wherever job pods are built (and by the buildability check
//! before a job is queued, so a conflict is refused at submission rather than at launch).
//!
//! Rules, for each part of [`JobEnvironment`]:
//! - `volumes`: a pod volume per shared filesystem, mounted in every container and init
//!   container. Refused: a job volume of the same name, or a job mount at the same path
//!   (the script would silently see the job's volume instead of the site's filesystem).
//! - `shmSize`: an `emptyDir` (`medium: Memory`, `sizeLimit`) at `/dev/shm` in every
//!   container, unless the job mounts its own `/dev/shm` (the job wins).
//! - `resources`: added to the first container's requests and limits (equal, as extended
//!   resources require) unless it asks for the resource itself.
//! - `capabilities`: added to every container's `securityContext.capabilities.add`, except
//!   where the container drops that capability by name.
//! - `hostNetwork`: set (with `dnsPolicy: ClusterFirstWithHostNet`) unless the job sets it.
//! - `annotations`, `env`, `serviceAccountName`: added where the job (or Muster) has not set
//!   the same key, variable or account.
//!
//! The job's pyxis mounts (`spec.containerMounts`) are resolved here too, against the same
//! volumes: each mounts a shared filesystem of the partition (by name, or by a path inside
//! it, as a `subPath`) or a `tmpfs` in the job's container (the first). A source the
//! partition does not provide is refused with the list of what it does; so is a mount at a
//! path the partition or the template already mounts, and `rw` of a read-only filesystem.
//! A mount of a volume at its own `mountPath` (pyxis's `--container-mounts=/scratch`) only
//! sets its flags.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, HostPathVolumeSource,
    PersistentVolumeClaimVolumeSource, Pod, SecurityContext, Volume, VolumeMount,
};
use muster_crds::slurm::pyxis::{ContainerMount, MountSource};
use muster_crds::v1alpha1::{JobEnvironment, PartitionSpec, SharedVolume};

/// The name of the `/dev/shm` volume the partition adds (the `muster-` prefix is reserved:
/// partition volumes cannot use it).
pub const SHM_VOLUME: &str = "muster-shm";
/// Where the memory-backed volume is mounted.
pub const SHM_PATH: &str = "/dev/shm";

/// Why a job pod cannot take the partition's environment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobEnvError {
    /// The job has a volume with the name of a partition volume.
    #[error(
        "the job's volume {volume:?} has the name of a shared filesystem of the partition (mounted at {mount_path}): rename the job's volume"
    )]
    VolumeName {
        /// The volume's name.
        volume: String,
        /// Where the partition mounts it.
        mount_path: String,
    },
    /// Two shared filesystems of the partition at one path (a partition misconfiguration
    /// the CRD's rules cannot afford to check).
    #[error(
        "the partition mounts both {first:?} and {second:?} at {mount_path}: give each volume its own mountPath"
    )]
    SharedPath {
        /// The first volume.
        first: String,
        /// The second.
        second: String,
        /// The path.
        mount_path: String,
    },
    /// A `containerMounts` (`--container-mounts`) entry the partition cannot give.
    #[error("--container-mounts {entry}: {why}")]
    ContainerMount {
        /// The entry, in pyxis's grammar.
        entry: String,
        /// Why, with what the partition allows where the source is at fault.
        why: String,
    },
    /// A job container mounts something where the partition mounts a shared filesystem.
    #[error(
        "container {container:?} mounts volume {volume:?} at {mount_path}, where the partition mounts its shared filesystem {shared:?}: use another mountPath"
    )]
    MountPath {
        /// The container.
        container: String,
        /// The job's volume mounted there.
        volume: String,
        /// The path.
        mount_path: String,
        /// The partition's volume of that path.
        shared: String,
    },
}

/// The pod with the partition's job environment merged in (see the module docs for the
/// rules); the pod unchanged when the partition declares none.
pub fn apply(
    partition: &PartitionSpec,
    container_mounts: &[ContainerMount],
    mut pod: Pod,
) -> Result<Pod, JobEnvError> {
    let none = JobEnvironment::default();
    let env = match partition.job_environment.as_ref() {
        Some(env) => env,
        None if container_mounts.is_empty() => return Ok(pod),
        None => &none,
    };
    let spec = pod.spec.get_or_insert_with(Default::default);

    // Shared filesystems: refused on a clash, before anything is changed.
    for (i, a) in env.volumes.iter().enumerate() {
        if let Some(b) = env.volumes[i + 1..]
            .iter()
            .find(|b| same_path(&a.mount_path, &b.mount_path))
        {
            return Err(JobEnvError::SharedPath {
                first: a.name.clone(),
                second: b.name.clone(),
                mount_path: a.mount_path.clone(),
            });
        }
    }
    let job_volumes = spec.volumes.as_deref().unwrap_or(&[]);
    for sv in &env.volumes {
        if job_volumes.iter().any(|v| v.name == sv.name) {
            return Err(JobEnvError::VolumeName {
                volume: sv.name.clone(),
                mount_path: sv.mount_path.clone(),
            });
        }
    }
    for c in all_containers(&spec.containers, spec.init_containers.as_deref()) {
        for m in c.volume_mounts.iter().flatten() {
            if let Some(sv) = env
                .volumes
                .iter()
                .find(|sv| same_path(&sv.mount_path, &m.mount_path))
            {
                return Err(JobEnvError::MountPath {
                    container: c.name.clone(),
                    volume: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    shared: sv.name.clone(),
                });
            }
        }
    }
    let job = resolve_mounts(&env.volumes, container_mounts)?;
    let main_paths: Vec<&str> = spec
        .containers
        .first()
        .into_iter()
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .map(|m| m.mount_path.as_str())
        .collect();
    for (entry, m) in &job.mounts {
        if let Some(sv) = env
            .volumes
            .iter()
            .find(|sv| same_path(&sv.mount_path, &m.mount_path))
        {
            return Err(JobEnvError::ContainerMount {
                entry: entry.clone(),
                why: format!(
                    "{} is where the partition mounts its shared filesystem {:?}: choose another DST",
                    m.mount_path, sv.name
                ),
            });
        }
        if main_paths.iter().any(|p| same_path(p, &m.mount_path)) {
            return Err(JobEnvError::ContainerMount {
                entry: entry.clone(),
                why: format!(
                    "the pod template's container already mounts a volume at {}: choose another DST",
                    m.mount_path
                ),
            });
        }
    }
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    volumes.extend(env.volumes.iter().map(shared_volume));
    volumes.extend(job.volumes.iter().cloned());
    let mut mounts: Vec<VolumeMount> = env
        .volumes
        .iter()
        .map(|sv| VolumeMount {
            name: sv.name.clone(),
            mount_path: sv.mount_path.clone(),
            read_only: sv.read_only.filter(|r| *r),
            ..Default::default()
        })
        .collect();

    // /dev/shm, unless the job brings its own.
    let job_shm = all_containers(&spec.containers, spec.init_containers.as_deref())
        .any(|c| mounts_at(c, SHM_PATH))
        || job
            .mounts
            .iter()
            .any(|(_, m)| same_path(&m.mount_path, SHM_PATH));
    if let Some(size) = &env.shm_size
        && !job_shm
    {
        volumes.push(Volume {
            name: SHM_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(size.clone()),
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: SHM_VOLUME.into(),
            mount_path: SHM_PATH.into(),
            ..Default::default()
        });
    }

    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if !mounts.is_empty() {
            c.volume_mounts
                .get_or_insert_with(Vec::new)
                .extend(mounts.iter().cloned());
        }
        add_capabilities(c, &env.capabilities);
        add_env(c, &env.env);
    }
    if let Some(c) = spec.containers.first_mut() {
        // The job's own mounts, and the flags it gives a shared filesystem at its own path.
        for m in c.volume_mounts.iter_mut().flatten() {
            if let Some((_, ro)) = job.own.iter().find(|(n, _)| *n == m.name) {
                m.read_only = ro.filter(|r| *r).or(m.read_only);
                if job.own_propagation.contains(&m.name) {
                    m.mount_propagation = Some("HostToContainer".into());
                }
            }
        }
        if !job.mounts.is_empty() {
            c.volume_mounts
                .get_or_insert_with(Vec::new)
                .extend(job.mounts.iter().map(|(_, m)| m.clone()));
        }
    }

    if let Some(c) = spec.containers.first_mut() {
        add_resources(c, env);
    }
    if let Some(h) = env.host_network
        && spec.host_network.is_none()
    {
        spec.host_network = Some(h);
        if h && spec.dns_policy.is_none() {
            // Without it a host-network pod resolves with the node's resolv.conf and cannot
            // find the job's Service names (MASTER_ADDR).
            spec.dns_policy = Some("ClusterFirstWithHostNet".into());
        }
    }
    if let Some(sa) = &env.service_account_name
        && spec
            .service_account_name
            .as_deref()
            .is_none_or(str::is_empty)
    {
        spec.service_account_name = Some(sa.clone());
    }
    if !env.annotations.is_empty() {
        let ann = pod
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (k, v) in &env.annotations {
            ann.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Ok(pod)
}

/// The job's pyxis mounts resolved against the partition's volumes.
#[derive(Default)]
struct JobMounts {
    /// Volumes of the job's own (`tmpfs`).
    volumes: Vec<Volume>,
    /// Mounts of the job's container, each with its entry in pyxis's grammar.
    mounts: Vec<(String, VolumeMount)>,
    /// Shared filesystems mounted at their own path: the read-only flag given.
    own: Vec<(String, Option<bool>)>,
    /// Shared filesystems mounted at their own path with `rslave`.
    own_propagation: Vec<String>,
}

/// What the partition lets `--container-mounts` name, for refusals.
fn allowed(vols: &[SharedVolume]) -> String {
    if vols.is_empty() {
        return "the partition has no shared filesystems (spec.jobEnvironment.volumes); only tmpfs can be mounted".into();
    }
    let list: Vec<String> = vols
        .iter()
        .map(|v| match &v.host_path {
            Some(h) => format!("{} (at {}, node path {h})", v.name, v.mount_path),
            None => format!("{} (at {})", v.name, v.mount_path),
        })
        .collect();
    format!(
        "the partition's shared filesystems are {}; a path inside one of them, its name, or tmpfs can be mounted",
        list.join(", ")
    )
}

/// `p` relative to `root` (both absolute), if `p` is `root` or lies under it.
fn under<'a>(root: &str, p: &'a str) -> Option<&'a str> {
    let root = root.trim_end_matches('/');
    if p == root {
        return Some("");
    }
    p.strip_prefix(root)?.strip_prefix('/')
}

fn resolve_mounts(
    vols: &[SharedVolume],
    mounts: &[ContainerMount],
) -> Result<JobMounts, JobEnvError> {
    let mut out = JobMounts::default();
    let mut tmpfs = 0;
    for m in mounts {
        let entry = muster_crds::slurm::pyxis::format_mounts(std::slice::from_ref(m));
        let refuse = |why: String| JobEnvError::ContainerMount {
            entry: entry.clone(),
            why,
        };
        if out
            .mounts
            .iter()
            .any(|(_, o)| same_path(&o.mount_path, &m.target))
        {
            return Err(refuse(format!(
                "another entry mounts at {} already: give each mount its own DST",
                m.target
            )));
        }
        let propagation = m.host_to_container.then(|| "HostToContainer".to_string());
        let (volume, sub) = match &m.source {
            MountSource::Tmpfs => {
                let name = format!("muster-tmpfs-{tmpfs}");
                tmpfs += 1;
                out.volumes.push(Volume {
                    name: name.clone(),
                    empty_dir: Some(EmptyDirVolumeSource {
                        medium: Some("Memory".into()),
                        size_limit: None,
                    }),
                    ..Default::default()
                });
                out.mounts.push((
                    entry.clone(),
                    VolumeMount {
                        name,
                        mount_path: m.target.clone(),
                        read_only: m.read_only.filter(|r| *r),
                        mount_propagation: propagation,
                        ..Default::default()
                    },
                ));
                continue;
            }
            MountSource::Volume(name) => match vols.iter().find(|v| v.name == *name) {
                Some(v) => (v, String::new()),
                None => {
                    return Err(refuse(format!(
                        "{name} is not a shared filesystem of the partition: {}",
                        allowed(vols)
                    )));
                }
            },
            MountSource::Path(p) => {
                // The longest root holding the path: a volume's mountPath (the path as jobs
                // see it) or its hostPath (as the nodes do).
                let best = vols
                    .iter()
                    .flat_map(|v| {
                        std::iter::once(v.mount_path.as_str())
                            .chain(v.host_path.as_deref())
                            .filter_map(move |root| {
                                under(root, p).map(|rest| (root.len(), v, rest))
                            })
                    })
                    .max_by_key(|(len, _, _)| *len);
                match best {
                    Some((_, v, rest)) => (v, rest.to_string()),
                    None => {
                        return Err(refuse(format!(
                            "{p} is not on a shared filesystem of the partition: {}",
                            allowed(vols)
                        )));
                    }
                }
            }
        };
        let volume_ro = volume.read_only == Some(true);
        if volume_ro && m.read_only == Some(false) {
            return Err(refuse(format!(
                "the partition's shared filesystem {:?} is read-only: drop rw",
                volume.name
            )));
        }
        if sub.is_empty() && same_path(&volume.mount_path, &m.target) {
            out.own.push((volume.name.clone(), m.read_only));
            if m.host_to_container {
                out.own_propagation.push(volume.name.clone());
            }
            continue;
        }
        out.mounts.push((
            entry.clone(),
            VolumeMount {
                name: volume.name.clone(),
                mount_path: m.target.clone(),
                sub_path: (!sub.is_empty()).then_some(sub),
                read_only: (volume_ro || m.read_only == Some(true)).then_some(true),
                mount_propagation: propagation,
                ..Default::default()
            },
        ));
    }
    Ok(out)
}

/// The names of the partition's shared filesystems with their mount paths (for messages that
/// list what a job may mount).
pub fn shared_volumes(partition: &PartitionSpec) -> &[SharedVolume] {
    partition
        .job_environment
        .as_ref()
        .map(|e| e.volumes.as_slice())
        .unwrap_or(&[])
}

fn all_containers<'a>(
    containers: &'a [Container],
    init: Option<&'a [Container]>,
) -> impl Iterator<Item = &'a Container> {
    containers.iter().chain(init.into_iter().flatten())
}

/// Paths equal up to trailing slashes (`/scratch/` is `/scratch` to the kubelet).
fn same_path(a: &str, b: &str) -> bool {
    fn trim(s: &str) -> &str {
        let t = s.trim_end_matches('/');
        if t.is_empty() { "/" } else { t }
    }
    trim(a) == trim(b)
}

fn mounts_at(c: &Container, path: &str) -> bool {
    c.volume_mounts
        .iter()
        .flatten()
        .any(|m| same_path(&m.mount_path, path))
}

fn shared_volume(sv: &SharedVolume) -> Volume {
    let mut v = Volume {
        name: sv.name.clone(),
        ..Default::default()
    };
    if let Some(claim) = &sv.claim_name {
        v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.clone(),
            read_only: sv.read_only.filter(|r| *r),
        });
    } else if let Some(path) = &sv.host_path {
        v.host_path = Some(HostPathVolumeSource {
            path: path.clone(),
            // The filesystem is the node's: a missing directory is an error, not created empty.
            type_: Some("Directory".into()),
        });
    }
    v
}

fn add_capabilities(c: &mut Container, caps: &[String]) {
    if caps.is_empty() {
        return;
    }
    let sc = c
        .security_context
        .get_or_insert_with(SecurityContext::default);
    let cs = sc.capabilities.get_or_insert_with(Capabilities::default);
    let dropped: Vec<String> = cs.drop.clone().unwrap_or_default();
    let add = cs.add.get_or_insert_with(Vec::new);
    for cap in caps {
        if !dropped.contains(cap) && !add.contains(cap) {
            add.push(cap.clone());
        }
    }
}

fn add_env(c: &mut Container, vars: &[EnvVar]) {
    if vars.is_empty() {
        return;
    }
    let env = c.env.get_or_insert_with(Vec::new);
    for v in vars {
        if !env.iter().any(|e| e.name == v.name) {
            env.push(v.clone());
        }
    }
}

fn add_resources(c: &mut Container, env: &JobEnvironment) {
    if env.resources.is_empty() {
        return;
    }
    let r = c.resources.get_or_insert_with(Default::default);
    for (name, q) in &env.resources {
        let asked = r.requests.as_ref().is_some_and(|m| m.contains_key(name))
            || r.limits.as_ref().is_some_and(|m| m.contains_key(name));
        if asked {
            continue;
        }
        r.requests
            .get_or_insert_with(Default::default)
            .insert(name.clone(), q.clone());
        r.limits
            .get_or_insert_with(Default::default)
            .insert(name.clone(), q.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    fn part(env: serde_json::Value) -> PartitionSpec {
        serde_json::from_value(json!({ "jobEnvironment": env })).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn fabric() -> PartitionSpec {
        part(json!({
            "volumes": [
                {"name": "scratch", "mountPath": "/scratch", "claimName": "scratch-rwx"},
                {"name": "datasets", "mountPath": "/datasets", "hostPath": "/lustre/datasets", "readOnly": true}],
            "shmSize": "64Gi",
            "resources": {"rdma/ib": 1},
            "capabilities": ["IPC_LOCK"],
            "hostNetwork": true,
            "annotations": {"k8s.v1.cni.cncf.io/networks": "ib-net"},
            "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}],
            "serviceAccountName": "trainer"
        }))
    }

    fn two_containers() -> Pod {
        pod(json!({
            "containers": [{"name": "task", "image": "i", "env": [{"name": "RANK", "value": "0"}]},
                           {"name": "side", "image": "i"}],
            "initContainers": [{"name": "init", "image": "i"}]}))
    }

    #[test]
    fn no_environment_leaves_the_pod_as_it_is() {
        let p = two_containers();
        assert_eq!(apply(&PartitionSpec::default(), &[], p.clone()).unwrap(), p);
    }

    #[test]
    fn every_part_lands_in_the_pod() {
        let p = apply(&fabric(), &[], two_containers()).unwrap();
        let s = p.spec.as_ref().unwrap();
        let vols = s.volumes.as_ref().unwrap();
        let names: Vec<_> = vols.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["scratch", "datasets", SHM_VOLUME]);
        assert_eq!(
            vols[0].persistent_volume_claim.as_ref().unwrap().claim_name,
            "scratch-rwx"
        );
        let hp = vols[1].host_path.as_ref().unwrap();
        assert_eq!(
            (hp.path.as_str(), hp.type_.as_deref()),
            ("/lustre/datasets", Some("Directory"))
        );
        let ed = vols[2].empty_dir.as_ref().unwrap();
        assert_eq!(ed.medium.as_deref(), Some("Memory"));
        assert_eq!(ed.size_limit, Some(Quantity("64Gi".into())));
        for c in s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
        {
            let m: Vec<_> = c
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| (m.mount_path.as_str(), m.read_only))
                .collect();
            assert_eq!(
                m,
                [
                    ("/scratch", None),
                    ("/datasets", Some(true)),
                    ("/dev/shm", None)
                ],
                "{}",
                c.name
            );
            let caps = c.security_context.as_ref().unwrap().capabilities.as_ref();
            assert_eq!(
                caps.unwrap().add.as_deref(),
                Some(&["IPC_LOCK".to_string()][..])
            );
            assert!(
                c.env
                    .iter()
                    .flatten()
                    .any(|e| e.name == "NCCL_IB_HCA" && e.value.as_deref() == Some("mlx5"))
            );
        }
        let r = s.containers[0].resources.as_ref().unwrap();
        assert_eq!(
            r.requests.as_ref().unwrap()["rdma/ib"],
            Quantity("1".into())
        );
        assert_eq!(r.limits.as_ref().unwrap()["rdma/ib"], Quantity("1".into()));
        assert!(
            s.containers[1].resources.is_none(),
            "one per pod, not per container"
        );
        assert_eq!(s.host_network, Some(true));
        assert_eq!(s.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));
        assert_eq!(s.service_account_name.as_deref(), Some("trainer"));
        assert_eq!(
            p.metadata.annotations.as_ref().unwrap()["k8s.v1.cni.cncf.io/networks"],
            "ib-net"
        );
    }

    #[test]
    fn the_jobs_own_settings_win() {
        let p = pod(json!({
            "hostNetwork": false,
            "serviceAccountName": "mine",
            "containers": [{"name": "task", "image": "i",
                "env": [{"name": "NCCL_IB_HCA", "value": "mlx5_0"}],
                "resources": {"limits": {"rdma/ib": "4"}},
                "securityContext": {"capabilities": {"drop": ["IPC_LOCK"]}},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}));
        let mut p = p;
        p.metadata.annotations = Some(
            [(
                "k8s.v1.cni.cncf.io/networks".to_string(),
                "mine".to_string(),
            )]
            .into(),
        );
        let p = apply(&fabric(), &[], p).unwrap();
        let s = p.spec.as_ref().unwrap();
        let c = &s.containers[0];
        let hca: Vec<_> = c
            .env
            .iter()
            .flatten()
            .filter(|e| e.name == "NCCL_IB_HCA")
            .collect();
        assert_eq!(hca.len(), 1);
        assert_eq!(hca[0].value.as_deref(), Some("mlx5_0"));
        let r = c.resources.as_ref().unwrap();
        assert_eq!(r.limits.as_ref().unwrap()["rdma/ib"], Quantity("4".into()));
        assert!(r.requests.is_none());
        let caps = c
            .security_context
            .as_ref()
            .unwrap()
            .capabilities
            .as_ref()
            .unwrap();
        assert_eq!(caps.add.as_deref(), Some(&[][..]));
        assert!(
            !s.volumes.iter().flatten().any(|v| v.name == SHM_VOLUME),
            "the job's /dev/shm is kept"
        );
        let shm: Vec<_> = c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.mount_path == "/dev/shm")
            .collect();
        assert_eq!(shm.len(), 1);
        assert_eq!(shm[0].name, "dshm");
        assert_eq!(s.host_network, Some(false));
        assert_eq!(s.dns_policy, None);
        assert_eq!(s.service_account_name.as_deref(), Some("mine"));
        assert_eq!(
            p.metadata.annotations.as_ref().unwrap()["k8s.v1.cni.cncf.io/networks"],
            "mine"
        );
    }

    #[test]
    fn a_job_mount_at_a_shared_path_is_refused() {
        let p = pod(json!({
            "containers": [{"name": "task", "image": "i",
                "volumeMounts": [{"name": "mine", "mountPath": "/scratch/"}]}],
            "volumes": [{"name": "mine", "emptyDir": {}}]}));
        let e = apply(&fabric(), &[], p).unwrap_err();
        assert_eq!(
            e,
            JobEnvError::MountPath {
                container: "task".into(),
                volume: "mine".into(),
                mount_path: "/scratch/".into(),
                shared: "scratch".into()
            }
        );
        assert!(e.to_string().contains("use another mountPath"), "{e}");
        // An init container's mount is refused too.
        let p = pod(json!({
            "containers": [{"name": "task", "image": "i"}],
            "initContainers": [{"name": "fetch", "image": "i",
                "volumeMounts": [{"name": "mine", "mountPath": "/datasets"}]}],
            "volumes": [{"name": "mine", "emptyDir": {}}]}));
        assert!(matches!(
            apply(&fabric(), &[], p),
            Err(JobEnvError::MountPath { container, .. }) if container == "fetch"
        ));
    }

    #[test]
    fn two_shared_filesystems_at_one_path_are_refused() {
        let p = part(json!({"volumes": [
            {"name": "a", "mountPath": "/scratch", "claimName": "a"},
            {"name": "b", "mountPath": "/scratch/", "hostPath": "/b"}]}));
        let e = apply(
            &p,
            &[],
            pod(json!({"containers": [{"name": "task", "image": "i"}]})),
        );
        assert!(
            matches!(e, Err(JobEnvError::SharedPath { ref first, ref second, .. }) if first == "a" && second == "b")
        );
    }

    #[test]
    fn a_job_volume_named_like_a_shared_one_is_refused() {
        let p = pod(json!({
            "containers": [{"name": "task", "image": "i"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}]}));
        let e = apply(&fabric(), &[], p).unwrap_err();
        assert!(matches!(e, JobEnvError::VolumeName { ref volume, .. } if volume == "scratch"));
        assert!(e.to_string().contains("/scratch"), "{e}");
    }

    #[test]
    fn shm_alone_and_host_network_off_add_nothing_else() {
        let p = apply(
            &part(json!({"shmSize": "1Gi", "hostNetwork": false})),
            &[],
            pod(json!({"containers": [{"name": "task", "image": "i"}]})),
        )
        .unwrap();
        let s = p.spec.unwrap();
        assert_eq!(s.volumes.unwrap().len(), 1);
        assert_eq!(s.host_network, Some(false));
        assert_eq!(s.dns_policy, None);
        assert!(s.containers[0].security_context.is_none());
        assert!(s.containers[0].env.is_none());
        assert!(p.metadata.annotations.is_none());
    }

    fn mounts(v: &str) -> Vec<ContainerMount> {
        muster_crds::slurm::pyxis::mounts(v).unwrap()
    }

    /// (name, mountPath, subPath, readOnly, mountPropagation) of the main container's mounts.
    type MountRow = (String, String, Option<String>, Option<bool>, Option<String>);

    fn main_mounts(p: &Pod) -> Vec<MountRow> {
        p.spec.as_ref().unwrap().containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| {
                (
                    m.name.clone(),
                    m.mount_path.clone(),
                    m.sub_path.clone(),
                    m.read_only,
                    m.mount_propagation.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn pyxis_mounts_name_the_partitions_filesystems() {
        let ms = mounts(
            "scratch:/ckpt,/scratch/u/run1:/run,/lustre/datasets/imagenet:/data,tmpfs:/tmp/fast,/datasets:/datasets:rslave,/scratch:/scratch:ro",
        );
        let p = apply(&fabric(), &ms, two_containers()).unwrap();
        let got = main_mounts(&p);
        let s = |x: &str| x.to_string();
        assert_eq!(
            got,
            [
                (s("scratch"), s("/scratch"), None, Some(true), None),
                (
                    s("datasets"),
                    s("/datasets"),
                    None,
                    Some(true),
                    Some(s("HostToContainer"))
                ),
                (s(SHM_VOLUME), s("/dev/shm"), None, None, None),
                (s("scratch"), s("/ckpt"), None, None, None),
                (s("scratch"), s("/run"), Some(s("u/run1")), None, None),
                (
                    s("datasets"),
                    s("/data"),
                    Some(s("imagenet")),
                    Some(true),
                    None
                ),
                (s("muster-tmpfs-0"), s("/tmp/fast"), None, None, None),
            ]
        );
        let spec = p.spec.as_ref().unwrap();
        let tmp = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "muster-tmpfs-0")
            .unwrap();
        assert_eq!(
            tmp.empty_dir.as_ref().unwrap().medium.as_deref(),
            Some("Memory")
        );
        // Only the job's container takes them; the sidecar keeps the partition's alone.
        assert_eq!(spec.containers[1].volume_mounts.as_ref().unwrap().len(), 3);
        let side_scratch = &spec.containers[1].volume_mounts.as_ref().unwrap()[0];
        assert_eq!(side_scratch.read_only, None);
    }

    #[test]
    fn pyxis_mounts_the_partition_cannot_give_are_refused_with_what_it_allows() {
        let e = |m: &str| {
            apply(&fabric(), &mounts(m), two_containers())
                .unwrap_err()
                .to_string()
        };
        let x = e("/home/u:/home/u");
        assert_eq!(
            x,
            "--container-mounts /home/u:/home/u: /home/u is not on a shared filesystem of the partition: the partition's shared filesystems are scratch (at /scratch), datasets (at /datasets, node path /lustre/datasets); a path inside one of them, its name, or tmpfs can be mounted"
        );
        assert!(e("nosuch:/x").contains("nosuch is not a shared filesystem of the partition: the partition's shared filesystems are scratch"));
        assert!(e("/datasets/x:/x:rw").contains("\"datasets\" is read-only: drop rw"));
        assert!(e("scratch:/datasets").contains(
            "/datasets is where the partition mounts its shared filesystem \"datasets\""
        ));
        assert!(e("scratch:/a,tmpfs:/a").contains("another entry mounts at /a"));
        // A partition without shared filesystems allows tmpfs alone.
        let x = apply(
            &PartitionSpec::default(),
            &mounts("/scratch:/s"),
            two_containers(),
        )
        .unwrap_err()
        .to_string();
        assert!(x.contains("the partition has no shared filesystems (spec.jobEnvironment.volumes); only tmpfs can be mounted"), "{x}");
        let p = apply(
            &PartitionSpec::default(),
            &mounts("tmpfs:/dev/shm"),
            two_containers(),
        )
        .unwrap();
        assert_eq!(main_mounts(&p).len(), 1);
        // The template's own mount at the same path.
        let p = pod(json!({
            "containers": [{"name": "task", "image": "i",
                "volumeMounts": [{"name": "mine", "mountPath": "/ckpt"}]}],
            "volumes": [{"name": "mine", "emptyDir": {}}]}));
        let x = apply(&fabric(), &mounts("scratch:/ckpt"), p)
            .unwrap_err()
            .to_string();
        assert!(
            x.contains("the pod template's container already mounts a volume at /ckpt"),
            "{x}"
        );
    }

    #[test]
    fn a_pyxis_tmpfs_at_dev_shm_replaces_the_partitions() {
        let p = apply(&fabric(), &mounts("tmpfs:/dev/shm"), two_containers()).unwrap();
        let s = p.spec.as_ref().unwrap();
        assert!(!s.volumes.iter().flatten().any(|v| v.name == SHM_VOLUME));
        let shm: Vec<_> = main_mounts(&p)
            .into_iter()
            .filter(|m| m.1 == "/dev/shm")
            .collect();
        assert_eq!(shm.len(), 1);
        assert_eq!(shm[0].0, "muster-tmpfs-0");
    }
}

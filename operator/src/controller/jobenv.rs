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

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, HostPathVolumeSource,
    PersistentVolumeClaimVolumeSource, Pod, SecurityContext, Volume, VolumeMount,
};
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
pub fn apply(partition: &PartitionSpec, mut pod: Pod) -> Result<Pod, JobEnvError> {
    let Some(env) = partition.job_environment.as_ref() else {
        return Ok(pod);
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
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    volumes.extend(env.volumes.iter().map(shared_volume));
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
        .any(|c| mounts_at(c, SHM_PATH));
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
        assert_eq!(apply(&PartitionSpec::default(), p.clone()).unwrap(), p);
    }

    #[test]
    fn every_part_lands_in_the_pod() {
        let p = apply(&fabric(), two_containers()).unwrap();
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
        let p = apply(&fabric(), p).unwrap();
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
        let e = apply(&fabric(), p).unwrap_err();
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
            apply(&fabric(), p),
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
        let e = apply(&fabric(), p).unwrap_err();
        assert!(matches!(e, JobEnvError::VolumeName { ref volume, .. } if volume == "scratch"));
        assert!(e.to_string().contains("/scratch"), "{e}");
    }

    #[test]
    fn shm_alone_and_host_network_off_add_nothing_else() {
        let p = apply(
            &part(json!({"shmSize": "1Gi", "hostNetwork": false})),
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
}

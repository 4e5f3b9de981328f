//! Which pod (and container) a process belongs to, from its `/proc/PID/cgroup`.
//!
//! The kubelet puts every container in a cgroup under its pod's, whose name carries the pod
//! UID. The layouts handled:
//!
//! | layout | path |
//! |---|---|
//! | systemd driver | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope` |
//! | systemd, Guaranteed QoS | `/kubepods.slice/kubepods-pod<uid with _>.slice/crio-<id>.scope` |
//! | cgroupfs driver | `/kubepods/burstable/pod<uid>/<id>` (and `/kubepods/pod<uid>/<id>`) |
//! | kind / nested kubelets | any prefix before these, e.g. `/kubelet.slice/kubelet-kubepods.slice/…` |
//!
//! on cgroup v2 (`0::<path>`) and v1 (`N:controller[,controller]:<path>`, any controller). With
//! a private cgroup namespace, paths of other processes start with `/../..`; only segments
//! matter. Container ids come from containerd (`cri-containerd-<id>.scope`, or bare `<id>`
//! under cgroupfs), CRI-O (`crio-<id>.scope`; `crio-conmon-<id>.scope` is CRI-O's monitor,
//! not the container) and Docker (`docker-<id>.scope`).
//!
//! Static pods: the kubelet names their cgroup after the pod's config hash (32 hex digits),
//! which the API's mirror pod carries as annotation `kubernetes.io/config.hash`; the parser
//! accepts both forms and [`crate::binding`] matches either.

/// Where a process lives, as far as Kubernetes is concerned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodRef {
    /// Pod UID (`1a2b3c4d-…`), or a static pod's config hash.
    pub pod_uid: String,
    /// Container runtime id (64 hex digits), when the process is inside a container rather
    /// than the pod-level cgroup.
    pub container_id: Option<String>,
}

/// Finds the pod of a process from the contents of its `/proc/PID/cgroup`. `None`: not in a
/// pod (a host process, or a container not run by the kubelet).
pub fn pod_of(cgroup_file: &str) -> Option<PodRef> {
    // cgroup v2's unified line first: on hybrid hosts it is the one the kubelet manages
    // when it runs in v2 mode; otherwise any v1 hierarchy (they all mirror the pod path).
    let mut lines: Vec<&str> = cgroup_file
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines.sort_by_key(|l| !l.starts_with("0::"));
    lines.into_iter().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        pod_of_path(path)
    })
}

/// Finds the pod in one cgroup path.
pub fn pod_of_path(path: &str) -> Option<PodRef> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (pos, pod_uid) = segments
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, seg)| pod_uid_of_segment(seg).map(|uid| (i, uid)))?;
    // Only a pod cgroup under a kubepods hierarchy counts: the word "pod" elsewhere (a user's
    // systemd unit) must not be mistaken for one. A path relative to our cgroup namespace
    // (`/../../besteffort/pod<uid>/<id>` under cgroupfs) may have lost the `kubepods` part.
    let under_kubepods = segments[..=pos].iter().any(|s| s.contains("kubepods"));
    let ns_relative = segments.first() == Some(&"..");
    if !under_kubepods && !ns_relative {
        return None;
    }
    let container_id = segments
        .get(pos + 1)
        .and_then(|s| container_id_of_segment(s));
    Some(PodRef {
        pod_uid,
        container_id,
    })
}

/// `kubepods-burstable-pod1a2b_…_.slice` or `pod1a2b-…` → the UID with dashes.
fn pod_uid_of_segment(seg: &str) -> Option<String> {
    let raw = if let Some(slice) = seg.strip_suffix(".slice") {
        // systemd: the pod part is the last `-pod…` of the unit name.
        let idx = slice.rfind("-pod")?;
        slice[idx + 4..].replace('_', "-")
    } else {
        seg.strip_prefix("pod")?.to_string()
    };
    is_pod_uid(&raw).then(|| raw.to_ascii_lowercase())
}

/// A UUID (8-4-4-4-12 hex) or a static pod's config hash (32 hex digits).
fn is_pod_uid(s: &str) -> bool {
    let hex = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_hexdigit());
    if s.len() == 32 && hex(s) {
        return true;
    }
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && hex(p))
}

/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`, `<id>` → `<id>`.
fn container_id_of_segment(seg: &str) -> Option<String> {
    let base = seg.strip_suffix(".scope").unwrap_or(seg);
    if base.starts_with("crio-conmon-") {
        return None;
    }
    let id = ["cri-containerd-", "crio-", "docker-", "containerd-"]
        .iter()
        .find_map(|p| base.strip_prefix(p))
        .unwrap_or(base);
    (id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "8f3e2a14-5b6c-4d7e-9f80-a1b2c3d4e5f6";
    const CID: &str = "4c01db0b339c9d5e2ff7b8a6d1e2c3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0";

    fn expect(file: &str) -> PodRef {
        pod_of(file).unwrap_or_else(|| panic!("no pod found in {file}"))
    }

    #[test]
    fn cgroup_v2_systemd_containerd() {
        let f = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(
            expect(&f),
            PodRef {
                pod_uid: UID.into(),
                container_id: Some(CID.into())
            }
        );
    }

    #[test]
    fn cgroup_v2_systemd_guaranteed_crio() {
        let f = format!(
            "0::/kubepods.slice/kubepods-pod{}.slice/crio-{CID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(expect(&f).container_id.as_deref(), Some(CID));
        let conmon = format!(
            "0::/kubepods.slice/kubepods-pod{}.slice/crio-conmon-{CID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(
            expect(&conmon),
            PodRef {
                pod_uid: UID.into(),
                container_id: None
            }
        );
    }

    #[test]
    fn cgroup_v2_cgroupfs() {
        let f = format!("0::/kubepods/besteffort/pod{UID}/{CID}\n");
        assert_eq!(
            expect(&f),
            PodRef {
                pod_uid: UID.into(),
                container_id: Some(CID.into())
            }
        );
        let guaranteed = format!("0::/kubepods/pod{UID}/{CID}\n");
        assert_eq!(expect(&guaranteed).pod_uid, UID);
    }

    #[test]
    fn cgroup_v1_systemd_docker_and_cgroupfs() {
        let systemd = format!(
            "12:hugetlb:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/docker-{CID}.scope\n\
             11:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/docker-{CID}.scope\n\
             10:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/docker-{CID}.scope\n\
             1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/docker-{CID}.scope\n",
            u = UID.replace('-', "_")
        );
        assert_eq!(
            expect(&systemd),
            PodRef {
                pod_uid: UID.into(),
                container_id: Some(CID.into())
            }
        );
        let cgroupfs = format!(
            "11:devices:/kubepods/burstable/pod{UID}/{CID}\n\
             10:freezer:/kubepods/burstable/pod{UID}/{CID}\n\
             0::/\n"
        );
        assert_eq!(expect(&cgroupfs).container_id.as_deref(), Some(CID));
    }

    #[test]
    fn hybrid_hosts_prefer_the_unified_line() {
        let other = "1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
        let f = format!(
            "5:memory:/kubepods/burstable/pod{other}/{CID}\n0::/kubepods/burstable/pod{UID}/{CID}\n"
        );
        assert_eq!(expect(&f).pod_uid, UID);
    }

    #[test]
    fn kind_nested_and_cgroup_namespace_paths() {
        let kind = format!(
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(expect(&kind).pod_uid, UID);
        let ns = format!(
            "0::/../../kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(expect(&ns).container_id.as_deref(), Some(CID));
        // cgroupfs seen from a sibling pod's cgroup namespace: `kubepods` is above the root.
        let rel = format!("0::/../../../besteffort/pod{UID}/{CID}\n");
        assert_eq!(expect(&rel).pod_uid, UID);
    }

    #[test]
    fn static_pods_use_the_config_hash() {
        let hash = "6d2f9e8c1b3a4d5e6f708192a3b4c5d6";
        let f = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{hash}.slice/cri-containerd-{CID}.scope\n"
        );
        assert_eq!(expect(&f).pod_uid, hash);
    }

    #[test]
    fn host_processes_are_not_in_a_pod() {
        for f in [
            "0::/system.slice/nvidia-persistenced.service\n",
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/\n",
            "12:memory:/system.slice/dcgm.service\n1:name=systemd:/system.slice/dcgm.service\n",
            // A user's unit that merely looks like a pod cgroup.
            "0::/system.slice/pod8f3e2a14-5b6c-4d7e-9f80-a1b2c3d4e5f6\n",
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podnot_a_uid.slice/x.scope\n",
            "",
        ] {
            assert_eq!(pod_of(f), None, "{f}");
        }
    }

    #[test]
    fn a_pod_level_process_has_no_container() {
        let f = format!("0::/kubepods/burstable/pod{UID}\n");
        assert_eq!(
            expect(&f),
            PodRef {
                pod_uid: UID.into(),
                container_id: None
            }
        );
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        fn uid() -> impl Strategy<Value = String> {
            "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            #[test]
            fn any_input_parses_without_panicking(text in "\\PC{0,300}") {
                let _ = pod_of(&text);
            }

            #[test]
            fn every_kubelet_layout_yields_the_pod(
                uid in uid(),
                cid in "[0-9a-f]{64}",
                qos in prop::sample::select(vec!["", "burstable", "besteffort"]),
                runtime in prop::sample::select(vec!["cri-containerd-", "crio-", "docker-"]),
                v1 in any::<bool>(),
                systemd in any::<bool>(),
            ) {
                let path = if systemd {
                    let u = uid.replace('-', "_");
                    if qos.is_empty() {
                        format!("/kubepods.slice/kubepods-pod{u}.slice/{runtime}{cid}.scope")
                    } else {
                        format!("/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice/{runtime}{cid}.scope")
                    }
                } else if qos.is_empty() {
                    format!("/kubepods/pod{uid}/{cid}")
                } else {
                    format!("/kubepods/{qos}/pod{uid}/{cid}")
                };
                let file = if v1 {
                    format!("12:pids:{path}\n11:memory:{path}\n1:name=systemd:{path}\n")
                } else {
                    format!("0::{path}\n")
                };
                prop_assert_eq!(pod_of(&file), Some(PodRef { pod_uid: uid, container_id: Some(cid) }));
            }
        }
    }
}

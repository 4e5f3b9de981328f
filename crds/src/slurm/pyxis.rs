//! NVIDIA pyxis's container options (`--container-image`, `--container-mounts`,
//! `--container-workdir`, `--container-env`, `--container-name`, …), read as pyxis 0.24 reads
//! them (its `args.c`) and mapped to what a Kubernetes pod can do.
//!
//! What each option becomes on Muster (the node pod of each allocated node is "the container"
//! every step of the job runs in):
//!
//! | pyxis option | Muster |
//! |---|---|
//! | `--container-image=[REGISTRY#]IMAGE[:TAG]` | the node pod's image ([`image`]: `REGISTRY#IMAGE` → `REGISTRY/IMAGE`) |
//! | `--container-mounts=SRC[:DST[:FLAGS]][,…]` | volume mounts of partition filesystems ([`mounts`]) |
//! | `--container-workdir=PATH` | the container's `workingDir` (and `SLURM_SUBMIT_DIR`) |
//! | `--container-env=NAME[,NAME…]` | the named variables' values from the submitting shell, set in the container ([`env_names`]) |
//! | `--container-name=NAME[:FLAG]` | accepted: every step of a job already runs in its node pod's container ([`container_name`]) |
//! | `--container-writable`, `--no-container-entrypoint`, `--no-container-mount-home` | accepted: what a pod does anyway |
//! | `--container-unshare=ipc,uts` | accepted: a pod has its own IPC and UTS namespaces |
//! | everything else | refused, with the reason ([`refusal`]) |
//!
//! `--container-mounts` sources, where pyxis takes a path of the compute node:
//! - an absolute path inside one of the partition's shared filesystems (`spec.jobEnvironment.volumes`),
//!   either as the job sees it (under the volume's `mountPath`) or as the nodes see it (under a
//!   `hostPath` volume's `hostPath`): that volume, with the rest of the path as `subPath`;
//! - the name of one of those volumes (a Muster extension, as no node path names a claim);
//! - `tmpfs`: a memory-backed `emptyDir` (as enroot mounts a tmpfs).
//!
//! pyxis's grammar, kept exactly: entries are separated by `,`; an entry is `SRC`, `SRC:DST` or
//! `SRC:DST:FLAGS`, `SRC` alone meaning `SRC:SRC`; flags are separated by `+`
//! (`ro+rprivate`); an empty `SRC` or `DST` is an error; the same entry twice counts once;
//! repeated `--container-mounts` options add up. Refused where pyxis accepts: a relative
//! `SRC` or `DST` (pyxis resolves them on the node, where a pod has no working directory of
//! the submitter), `umount` (there is no mount of enroot's configuration to remove), and the
//! flags a Kubernetes volume mount cannot express.

use super::SyntaxError;

/// One `--container-mounts` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerMount {
    /// What is mounted.
    pub source: MountSource,
    /// Where, inside the container (absolute).
    pub target: String,
    /// `ro` (`Some(true)`) or `rw` (`Some(false)`); `None`: the volume's own mode.
    pub read_only: Option<bool>,
    /// `rslave`/`slave`: mounts the nodes make later appear inside (`HostToContainer`).
    pub host_to_container: bool,
}

/// The `SRC` of a mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountSource {
    /// An absolute path (normalised: no `.`, `..` or empty components, no trailing `/`).
    Path(String),
    /// A shared filesystem of the partition, by its name.
    Volume(String),
    /// A memory-backed filesystem of its own.
    Tmpfs,
}

impl std::fmt::Display for MountSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MountSource::Path(p) => f.write_str(p),
            MountSource::Volume(v) => f.write_str(v),
            MountSource::Tmpfs => f.write_str("tmpfs"),
        }
    }
}

/// The mount flags Muster takes, and what each does.
pub const MOUNT_FLAGS: &str =
    "ro, rw, bind, rbind, private, rprivate, slave, rslave, x-create=dir|file|auto";

fn mount_err(input: &str, message: impl Into<String>) -> SyntaxError {
    SyntaxError::new("--container-mounts", input, message)
}

/// Normalises an absolute path: `None` when it has a `..` component.
fn normalise(p: &str) -> Option<String> {
    let mut out = String::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    Some(if out.is_empty() { "/".into() } else { out })
}

fn is_volume_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Parses one `--container-mounts` value (pyxis's `SRC:DST[:FLAGS][,SRC:DST...]`) into its
/// entries, in order, each once.
pub fn mounts(value: &str) -> Result<Vec<ContainerMount>, SyntaxError> {
    if value.is_empty() {
        return Err(mount_err(value, "argument required"));
    }
    let mut out: Vec<ContainerMount> = Vec::new();
    for entry in value.split(',') {
        let m = mount_entry(value, entry)?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

fn mount_entry(value: &str, entry: &str) -> Result<ContainerMount, SyntaxError> {
    let invalid = || {
        mount_err(
            value,
            format!("invalid format: {entry:?} (expected SRC[:DST[:FLAGS]])"),
        )
    };
    let mut parts = entry.splitn(3, ':');
    let src = parts.next().unwrap_or("");
    if src.is_empty() {
        return Err(invalid());
    }
    let dst = match parts.next() {
        None => src,
        Some("") => return Err(invalid()),
        Some(d) => d,
    };
    let flags = parts.next().unwrap_or("");

    let source = if src == "tmpfs" {
        MountSource::Tmpfs
    } else if src == "umount" {
        return Err(mount_err(
            value,
            format!(
                "{entry:?}: umount removes a mount enroot's configuration adds; a Muster pod has only the mounts its partition and job give, so there is none to remove"
            ),
        ));
    } else if src.starts_with('/') {
        MountSource::Path(normalise(src).ok_or_else(|| {
            mount_err(
                value,
                format!("{entry:?}: the source must not contain '..'"),
            )
        })?)
    } else if src.starts_with('.') {
        return Err(mount_err(
            value,
            format!(
                "{entry:?}: a relative source is a path of the submitting node to pyxis; a pod has none: give an absolute path on one of the partition's shared filesystems, or a volume's name"
            ),
        ));
    } else if is_volume_name(src) {
        MountSource::Volume(src.to_string())
    } else {
        return Err(mount_err(
            value,
            format!(
                "{entry:?}: the source must be an absolute path on one of the partition's shared filesystems, a shared volume's name, or tmpfs"
            ),
        ));
    };
    if !dst.starts_with('/') {
        return Err(mount_err(
            value,
            format!("{entry:?}: the target must be an absolute path inside the container"),
        ));
    }
    let target = normalise(dst)
        .filter(|t| t.as_str() != "/")
        .ok_or_else(|| {
            mount_err(
                value,
                format!("{entry:?}: the target must be a directory other than / and without '..'"),
            )
        })?;

    let mut read_only = None;
    let mut host_to_container = false;
    if !flags.is_empty() {
        for flag in flags.split('+') {
            match flag {
                "ro" => read_only = Some(true),
                "rw" => read_only = Some(false),
                // Kubernetes bind-mounts volumes recursively and privately by default.
                "bind" | "rbind" | "private" | "rprivate" => {}
                "slave" | "rslave" => host_to_container = true,
                // The kubelet creates the mount point.
                "x-create=dir" | "x-create=file" | "x-create=auto" => {}
                "shared" | "rshared" => {
                    return Err(mount_err(
                        value,
                        format!(
                            "{entry:?}: flag {flag} needs Kubernetes' Bidirectional mount propagation, which only privileged containers may use"
                        ),
                    ));
                }
                "" => return Err(invalid()),
                other => {
                    return Err(mount_err(
                        value,
                        format!(
                            "{entry:?}: flag {other:?} is not supported: a Kubernetes volume mount takes only {MOUNT_FLAGS}"
                        ),
                    ));
                }
            }
        }
    }
    Ok(ContainerMount {
        source,
        target,
        read_only,
        host_to_container,
    })
}

/// Prints mounts back in pyxis's grammar (for `scontrol show job` and round trips).
pub fn format_mounts(m: &[ContainerMount]) -> String {
    m.iter()
        .map(|m| {
            let mut flags = Vec::new();
            match m.read_only {
                Some(true) => flags.push("ro"),
                Some(false) => flags.push("rw"),
                None => {}
            }
            if m.host_to_container {
                flags.push("rslave");
            }
            let mut s = format!("{}:{}", m.source, m.target);
            if !flags.is_empty() {
                s.push(':');
                s.push_str(&flags.join("+"));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `--container-env=NAME[,NAME...]`: the variable names, each once, in order.
pub fn env_names(value: &str) -> Result<Vec<String>, SyntaxError> {
    if value.is_empty() {
        return Err(SyntaxError::new(
            "--container-env",
            value,
            "argument required",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for name in value.split(',') {
        if name.is_empty() {
            return Err(SyntaxError::new(
                "--container-env",
                value,
                "invalid format: expected NAME[,NAME...]",
            ));
        }
        if name.contains('=') {
            return Err(SyntaxError::new(
                "--container-env",
                value,
                format!(
                    "{name:?}: give variable names only; their values come from the submitting environment"
                ),
            ));
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

/// `--container-image`: the enroot URI as a Kubernetes image reference.
///
/// `[docker://][REGISTRY#]IMAGE[:TAG]` becomes `[REGISTRY/]IMAGE[:TAG]` (enroot separates the
/// registry with `#`; Kubernetes with the first `/`). Refused: a squashfs file (Kubernetes pulls
/// images from registries), `USER@` (registry credentials are the pod's `imagePullSecrets`),
/// and images of a local daemon (`dockerd://`, `podman://`).
pub fn image(value: &str) -> Result<String, SyntaxError> {
    let err = |m: &str| SyntaxError::new("--container-image", value, m);
    if value.is_empty() {
        return Err(err("argument required"));
    }
    if value.starts_with('/')
        || value.starts_with('.')
        || [".sqsh", ".sqfs", ".squashfs"]
            .iter()
            .any(|e| value.ends_with(e))
    {
        return Err(err(
            "a squashfs file cannot be a pod's image (Kubernetes pulls images from a registry): push the image to a registry and give REGISTRY#IMAGE:TAG",
        ));
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err("an image reference has no spaces"));
    }
    let rest = match value.split_once("://") {
        None => value,
        Some(("docker", r)) => r,
        Some((scheme, _)) => {
            return Err(SyntaxError::new(
                "--container-image",
                value,
                format!(
                    "{scheme}:// images are a node's local images; Kubernetes pulls from a registry: give REGISTRY#IMAGE:TAG"
                ),
            ));
        }
    };
    let (head, tail) = rest.split_once('#').unwrap_or(("", rest));
    // USER@ precedes the registry (or the image when there is none); an `@` after the image
    // name is a digest (`IMAGE@sha256:...`).
    let user_in = |s: &str| {
        s.split_once('@').is_some_and(|(_, after)| {
            !after.starts_with("sha256:") && !after.starts_with("sha512:")
        })
    };
    if (!head.is_empty() && head.contains('@')) || (head.is_empty() && user_in(tail)) {
        return Err(err(
            "USER@ names enroot credentials; a pod pulls with its imagePullSecrets (the namespace's service account): drop USER@",
        ));
    }
    if tail.is_empty() || tail.contains('#') || tail.starts_with('/') || tail.starts_with(':') {
        return Err(err("expected [REGISTRY#]IMAGE[:TAG]"));
    }
    if head.is_empty() {
        if rest.contains('#') {
            return Err(err("expected [REGISTRY#]IMAGE[:TAG] (empty registry)"));
        }
        Ok(tail.to_string())
    } else {
        Ok(format!("{head}/{tail}"))
    }
}

/// `--container-name=NAME[:auto|create|exec|no_exec]`: the name and flag, as pyxis checks
/// them.
pub fn container_name(value: &str) -> Result<(String, String), SyntaxError> {
    let err = |m: &str| SyntaxError::new("--container-name", value, m);
    if value.is_empty() {
        return Err(err("argument required"));
    }
    let (name, flag) = value.split_once(':').unwrap_or((value, ""));
    if name.is_empty() {
        return Err(err("empty name"));
    }
    let flag = if flag.is_empty() { "auto" } else { flag };
    if !["auto", "create", "exec", "no_exec"].contains(&flag) {
        return Err(err(r#"flag must be "auto", "create", "exec" or "no_exec""#));
    }
    Ok((name.to_string(), flag.to_string()))
}

/// `--container-unshare=NS[,NS...]`: refused for `net` (the partition decides the network),
/// accepted for `ipc` and `uts` (a pod has its own).
pub fn unshare(value: &str) -> Result<(), SyntaxError> {
    let err = |m: String| SyntaxError::new("--container-unshare", value, m);
    if value.is_empty() {
        return Err(err("argument required".into()));
    }
    for ns in value.split(',') {
        match ns {
            "ipc" | "uts" => {}
            "net" => {
                return Err(err(
                    "net: a job's network is its partition's (the pod network, or the node's with spec.jobEnvironment.hostNetwork); a step cannot have its own".into(),
                ));
            }
            "" => return Err(err("empty namespace argument".into())),
            other => return Err(err(format!("unknown namespace '{other}'"))),
        }
    }
    Ok(())
}

/// `--container-workdir=PATH`: an absolute path.
pub fn workdir(value: &str) -> Result<String, SyntaxError> {
    if value.is_empty() {
        return Err(SyntaxError::new(
            "--container-workdir",
            value,
            "argument required",
        ));
    }
    if !value.starts_with('/') {
        return Err(SyntaxError::new(
            "--container-workdir",
            value,
            "give an absolute path inside the container",
        ));
    }
    Ok(value.to_string())
}

/// Why Muster refuses pyxis option `long` (no dashes), for the options it cannot honour.
pub fn refusal(long: &str) -> Option<&'static str> {
    Some(match long {
        "container-save" => {
            "Kubernetes cannot save a running container as an image; build the image with your changes and push it to a registry"
        }
        "container-mount-home" => {
            "pods have no home directory of the submitter; the partition's shared filesystems (spec.jobEnvironment.volumes) are what a job can mount"
        }
        "container-remap-root" | "no-container-remap-root" => {
            "the user inside a pod is the image's or the pod template's securityContext.runAsUser, not the submitter"
        }
        "container-entrypoint" | "container-entrypoint-log" => {
            "a node pod runs muster-step as its command, so the image's ENTRYPOINT never runs; run what it does in the script"
        }
        "container-readonly" => {
            "set securityContext.readOnlyRootFilesystem in the BatchJob's pod template instead"
        }
        _ => return None,
    })
}

/// Options of pyxis Muster accepts without anything to do, and why.
pub fn already(long: &str) -> Option<&'static str> {
    Some(match long {
        "container-writable" => "a pod's root filesystem is writable",
        "no-container-entrypoint" => "a node pod never runs the image's ENTRYPOINT",
        "no-container-mount-home" => "pods mount no home directory",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(src: MountSource, dst: &str, ro: Option<bool>) -> ContainerMount {
        ContainerMount {
            source: src,
            target: dst.into(),
            read_only: ro,
            host_to_container: false,
        }
    }

    fn path(p: &str) -> MountSource {
        MountSource::Path(p.into())
    }

    /// The forms of pyxis's README and wiki (`/etc/os-release:/host/os-release`,
    /// `SRC:DST:ro+rprivate`, several entries) read as pyxis reads them.
    #[test]
    fn pyxis_documented_forms() {
        assert_eq!(
            mounts("/etc/os-release:/host/os-release").unwrap(),
            [m(path("/etc/os-release"), "/host/os-release", None)]
        );
        assert_eq!(
            mounts("/lustre/data:/data:ro+rprivate").unwrap(),
            [m(path("/lustre/data"), "/data", Some(true))]
        );
        // SRC alone is SRC:SRC; several entries; the same one twice counts once.
        assert_eq!(
            mounts("/scratch,/home/u:/home/u:rw,/scratch").unwrap(),
            [
                m(path("/scratch"), "/scratch", None),
                m(path("/home/u"), "/home/u", Some(false))
            ]
        );
        // An empty flags part is no flags (pyxis: `remainder[0] == '\0'`).
        assert_eq!(mounts("/a:/b:").unwrap(), [m(path("/a"), "/b", None)]);
        assert_eq!(
            mounts("tmpfs:/tmp/fast").unwrap(),
            [m(MountSource::Tmpfs, "/tmp/fast", None)]
        );
        let r = mounts("/a:/b:rslave+x-create=dir").unwrap();
        assert!(r[0].host_to_container);
        assert_eq!(
            mounts("scratch:/ckpt").unwrap()[0].source,
            MountSource::Volume("scratch".into())
        );
        // Paths are normalised.
        assert_eq!(
            mounts("//a/./b/:/c//").unwrap(),
            [m(path("/a/b"), "/c", None)]
        );
    }

    #[test]
    fn pyxis_and_muster_refusals_say_why() {
        let e = |v: &str| mounts(v).unwrap_err().to_string();
        assert!(e("").contains("argument required"));
        for bad in [":/a", "/a:", "/a,,/b", "/a,"] {
            assert!(e(bad).contains("invalid format"), "{bad}: {}", e(bad));
        }
        assert!(e("./data:/data").contains("relative source"));
        assert!(e("umount:/etc").contains("umount"));
        assert!(e("/a:data").contains("target must be an absolute path"));
        assert!(e("/a:/").contains("other than /"));
        assert!(e("/a/../b:/b").contains(".."));
        assert!(e("/a:/b:rshared").contains("Bidirectional"));
        let x = e("/a:/b:nosuid");
        assert!(
            x.contains("\"nosuid\" is not supported") && x.contains(MOUNT_FLAGS),
            "{x}"
        );
        assert!(e("/a:/b:ro:x").contains("not supported"));
        assert!(e("Scratch:/x").contains("must be an absolute path"));
        assert!(e("/a:/b:ro++rw").contains("invalid format"));
    }

    #[test]
    fn mounts_print_back_in_pyxis_grammar() {
        for v in [
            "/a:/b",
            "scratch:/ckpt:ro",
            "tmpfs:/t:rw+rslave",
            "/x:/x,/y:/z:ro",
        ] {
            assert_eq!(format_mounts(&mounts(v).unwrap()), v);
        }
    }

    #[test]
    fn env_names_follow_pyxis() {
        assert_eq!(env_names("A,B,A").unwrap(), ["A", "B"]);
        assert!(
            env_names("")
                .unwrap_err()
                .to_string()
                .contains("argument required")
        );
        assert!(
            env_names("A,,B")
                .unwrap_err()
                .to_string()
                .contains("invalid format")
        );
        assert!(
            env_names("A=1")
                .unwrap_err()
                .to_string()
                .contains("names only")
        );
    }

    #[test]
    fn enroot_uris_become_image_references() {
        // pyxis's README: `nvcr.io\#nvidia/pytorch:21.12-py3` (the `\#` escapes `#` in a
        // directive), `almalinux:9`.
        assert_eq!(
            image("nvcr.io#nvidia/pytorch:21.12-py3").unwrap(),
            "nvcr.io/nvidia/pytorch:21.12-py3"
        );
        assert_eq!(image("almalinux:9").unwrap(), "almalinux:9");
        assert_eq!(image("docker://ubuntu:24.04").unwrap(), "ubuntu:24.04");
        assert_eq!(
            image("ghcr.io#org/app@sha256:abc").unwrap(),
            "ghcr.io/org/app@sha256:abc"
        );
        assert_eq!(image("ubuntu@sha256:abc").unwrap(), "ubuntu@sha256:abc");
        let e = |v: &str| image(v).unwrap_err().to_string();
        assert!(e("/lustre/images/pytorch.sqsh").contains("squashfs"));
        assert!(e("pytorch.sqsh").contains("squashfs"));
        assert!(e("user@nvcr.io#nvidia/pytorch:1").contains("imagePullSecrets"));
        assert!(e("user@ubuntu").contains("imagePullSecrets"));
        assert!(e("dockerd://ubuntu").contains("local images"));
        assert!(e("#ubuntu").contains("empty registry"));
        assert!(e("a#b#c").contains("expected"));
        assert!(e("").contains("argument required"));
    }

    #[test]
    fn names_unshare_and_workdir() {
        assert_eq!(container_name("c").unwrap(), ("c".into(), "auto".into()));
        assert_eq!(
            container_name("c:exec").unwrap(),
            ("c".into(), "exec".into())
        );
        assert!(
            container_name(":exec")
                .unwrap_err()
                .to_string()
                .contains("empty name")
        );
        assert!(
            container_name("c:x")
                .unwrap_err()
                .to_string()
                .contains("flag must be")
        );
        assert!(unshare("ipc,uts").is_ok());
        assert!(
            unshare("net")
                .unwrap_err()
                .to_string()
                .contains("partition")
        );
        assert!(
            unshare("pid")
                .unwrap_err()
                .to_string()
                .contains("unknown namespace 'pid'")
        );
        assert!(workdir("/w").is_ok());
        assert!(workdir("w").is_err());
    }
}

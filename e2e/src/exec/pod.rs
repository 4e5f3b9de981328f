//! One pod's supervisor in exec mode: sets up its files and volumes, runs its init
//! containers in order and then its containers, reports what happened to the kubelet loop,
//! and carries out restarts, terminations (SIGTERM, SIGKILL at the grace period) and the
//! final cleanup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Event, PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use super::container::{self, MountPlan, Running, Spec};
use super::env::{self, Objects, PodFacts};
use super::volumes;
use super::{ContainerEnd, Ctx, ExecEvent};

/// What the kubelet loop asks of a pod.
#[derive(Debug)]
pub enum PodCmd {
    /// Run the containers again (after a crash-loop back-off).
    Restart,
    /// Stop: SIGTERM now, SIGKILL after the grace period.
    Terminate(Duration),
    /// The pod is gone: kill everything and clean up.
    Forget,
    /// The pod's labels or annotations changed (the pod as now seen): its downwardAPI files
    /// follow, as the kubelet's re-sync of an updated pod rewrites them.
    Update(Box<Pod>),
}

/// What the supervisor was started with.
pub struct Launch {
    /// The pod as first seen bound.
    pub pod: Pod,
    /// Its address.
    pub ip: String,
    /// Its node's address.
    pub host_ip: String,
    /// The node's allocatable CPU (millicores) and memory (MiB).
    pub node_cpu_milli: u64,
    /// Node memory.
    pub node_memory_mib: u64,
}

fn now(ctx: &Ctx) -> Timestamp {
    ctx.clock.now()
}

async fn warn(
    client: &Client,
    pod: &Pod,
    reason: &str,
    message: &str,
    clock: &crate::clock::SimClock,
) {
    let ns = pod.namespace().unwrap_or_default();
    let ev = crate::scheduler::pod_event(
        crate::scheduler::PodRef {
            ns: &ns,
            name: &pod.name_any(),
            uid: pod.metadata.uid.as_deref().unwrap_or(""),
        },
        "Warning",
        reason,
        message,
        crate::kubelet::COMPONENT,
        clock.now(),
    );
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    if let Err(e) = api.create(&PostParams::default(), &ev).await {
        tracing::debug!(error = %e, "posting a kubelet event");
    }
    tracing::warn!(pod = %pod.name_any(), namespace = %ns, reason, "{message}");
}

/// Reads what the pod's volumes and environment refer to.
async fn fetch(client: &Client, pod: &Pod) -> (Objects, BTreeMap<String, bool>) {
    let ns = pod.namespace().unwrap_or_default();
    let needs = volumes::needs(pod);
    let mut secrets: Vec<String> = needs.secrets.into_iter().map(|(n, _)| n).collect();
    let mut cms: Vec<String> = needs.config_maps.into_iter().map(|(n, _)| n).collect();
    let spec = pod.spec.as_ref();
    for c in spec
        .map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
        })
        .into_iter()
        .flatten()
    {
        let (s, m) = env::referenced(c);
        secrets.extend(s);
        cms.extend(m);
    }
    secrets.sort();
    secrets.dedup();
    cms.sort();
    cms.dedup();
    let mut objs = Objects::default();
    let sapi: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for n in secrets {
        let data = sapi.get_opt(&n).await.ok().flatten().map(|s| {
            let mut d: BTreeMap<String, Vec<u8>> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            for (k, v) in s.string_data.unwrap_or_default() {
                d.insert(k, v.into_bytes());
            }
            d
        });
        objs.secrets.insert(n, data);
    }
    let capi: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for n in cms {
        let data = capi.get_opt(&n).await.ok().flatten().map(|c| {
            let mut d: BTreeMap<String, Vec<u8>> = c
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            for (k, v) in c.binary_data.unwrap_or_default() {
                d.insert(k, v.0);
            }
            d
        });
        objs.config_maps.insert(n, data);
    }
    let papi: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let mut claims = BTreeMap::new();
    for n in needs.claims {
        let ok = papi.get_opt(&n).await.ok().flatten().is_some();
        claims.insert(n, ok);
    }
    (objs, claims)
}

/// Files under an image directory, as (host file, path inside the container).
fn image_files(dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            // Follow symlinks to what they name (a link to the cargo-built binary).
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => stack.push(p),
                Ok(_) => {
                    if let Ok(rel) = p.strip_prefix(dir) {
                        let target = std::fs::canonicalize(&p).unwrap_or(p.clone());
                        out.push((target, Path::new("/").join(rel)));
                    }
                }
                Err(_) => {}
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

struct Prepared {
    dir: PathBuf,
    hostname: String,
    volumes: BTreeMap<String, PathBuf>,
    objs: Objects,
    facts: PodFacts,
    files: Vec<(PathBuf, &'static str)>,
}

/// Rewrites the pod's downwardAPI files for `pod`'s current labels and annotations.
fn refresh(p: &Prepared, pod: &Pod) {
    match volumes::refresh_downward(pod, &p.facts, &p.volumes) {
        Ok(0) => {}
        Ok(files) => tracing::debug!(pod = %pod.name_any(), files, "downwardAPI files updated"),
        Err(e) => tracing::warn!(pod = %pod.name_any(), "updating downwardAPI files: {e}"),
    }
}

/// The directory of the longest image name prefix of `map` that `image` starts with.
fn image_dir<'m>(map: &'m [(String, PathBuf)], image: &str) -> Option<&'m PathBuf> {
    map.iter()
        .filter(|(prefix, _)| image.starts_with(prefix.as_str()))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, dir)| dir)
}

fn plan_for(
    ctx: &Ctx,
    p: &Prepared,
    pod: &Pod,
    c: &Container,
    root: &Path,
) -> Result<MountPlan, String> {
    std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let image = c.image.clone().unwrap_or_default();
    let mut plan = match image_dir(&ctx.opts.root_images, &image) {
        Some(dir) => MountPlan::with_image_root(root, dir)
            .map_err(|e| format!("reading image directory {}: {e}", dir.display()))?,
        None => MountPlan::new(root).map_err(|e| format!("reading /: {e}"))?,
    };
    if let Some(dir) = image_dir(&ctx.opts.images, &image) {
        for (src, dst) in image_files(dir) {
            plan.bind(&src, &dst, true)
                .map_err(|e| format!("image file {}: {e}", dst.display()))?;
        }
    }
    let mut mounts: Vec<_> = c.volume_mounts.clone().unwrap_or_default();
    // Parents before children, as container runtimes order mounts.
    mounts.sort_by_key(|m| Path::new(&m.mount_path).components().count());
    for m in &mounts {
        let Some(src) = p.volumes.get(&m.name) else {
            return Err(format!(
                "volumeMount {:?} names no volume of the pod",
                m.name
            ));
        };
        let src = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => {
                if sub.starts_with('/') || sub.split('/').any(|x| x == "..") {
                    return Err(format!("subPath {sub:?} must be relative without '..'"));
                }
                let s = src.join(sub);
                if !s.exists() {
                    std::fs::create_dir_all(&s).map_err(|e| format!("{}: {e}", s.display()))?;
                }
                s
            }
            None => src.clone(),
        };
        plan.bind(&src, Path::new(&m.mount_path), m.read_only.unwrap_or(false))
            .map_err(|e| format!("volumeMount {} at {}: {e}", m.name, m.mount_path))?;
    }
    let host_net = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    for (file, at) in &p.files {
        if mounts.iter().any(|m| m.mount_path == *at) || (host_net && *at == "/etc/hosts") {
            continue;
        }
        plan.bind(file, Path::new(at), false)
            .map_err(|e| format!("{at}: {e}"))?;
    }
    Ok(plan)
}

fn spec_for(
    ctx: &Ctx,
    p: &Prepared,
    pod: &Pod,
    c: &Container,
    log: PathBuf,
) -> Result<Spec, String> {
    let mut env = env::container_env(pod, c, &p.objs, &p.facts).map_err(|e| e.0)?;
    let mut default = |k: &str, v: &str| {
        if !env.iter().any(|(n, _)| n == k) {
            env.push((k.to_string(), v.to_string()));
        }
    };
    // What the image config and runc give a process: PATH (images declare one), HOSTNAME, HOME.
    default(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    default("HOSTNAME", &p.hostname);
    default("HOME", "/root");
    let argv = env::argv(c, &env);
    if argv.is_empty() {
        return Err(format!(
            "container {} has no command: exec mode ignores images, so their ENTRYPOINT/CMD are unknown; give command",
            c.name
        ));
    }
    let _ = ctx;
    Ok(Spec {
        argv,
        env,
        cwd: PathBuf::from(
            c.working_dir
                .clone()
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| "/".into()),
        ),
        hostname: p.hostname.clone(),
        log,
    })
}

enum Outcome {
    /// Ended by itself or by a signal: per container.
    Ended(Vec<ContainerEnd>),
    /// Forgotten: stop at once.
    Forgotten,
}

/// Runs `containers` until all end, obeying commands meanwhile.
async fn run_all(
    ctx: &Ctx,
    p: &Prepared,
    pod: &Pod,
    containers: &[Container],
    restart: u32,
    cmds: &mut mpsc::UnboundedReceiver<PodCmd>,
    on_started: impl FnOnce(Timestamp),
) -> Outcome {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let mut running: Vec<(usize, Running, Timestamp)> = Vec::new();
    let mut ends: Vec<Option<ContainerEnd>> = vec![None; containers.len()];
    for (i, c) in containers.iter().enumerate() {
        let cdir = p
            .dir
            .join("containers")
            .join(&c.name)
            .join(restart.to_string());
        let log = p
            .dir
            .join("logs")
            .join(&c.name)
            .join(format!("{restart}.log"));
        let started = now(ctx);
        let res = (|| -> Result<Running, (String, String)> {
            if let Some(parent) = log.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| ("StartError".into(), e.to_string()))?;
            }
            let spec = spec_for(ctx, p, pod, c, log.clone())
                .map_err(|m| ("CreateContainerConfigError".into(), m))?;
            let plan = plan_for(ctx, p, pod, c, &cdir.join("root"))
                .map_err(|m| ("StartError".into(), m))?;
            if let Some(l) = &ctx.opts.logs {
                l.set_file(&ns, &name, &c.name, log.clone());
            }
            container::start(spec, plan).map_err(|e| ("StartError".into(), e.runtime_message()))
        })();
        match res {
            Ok(r) => running.push((i, r, started)),
            Err((reason, message)) => {
                tracing::warn!(pod = %name, container = %c.name, "{message}");
                ends[i] = Some(ContainerEnd {
                    code: 128,
                    reason,
                    message: Some(message),
                    started: None,
                    finished: Some(now(ctx)),
                    waiting: None,
                });
            }
        }
    }
    on_started(now(ctx));
    let mut kill_at: Option<tokio::time::Instant> = None;
    // Wait for each container, answering commands in between.
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, i32)>();
    let mut signals: Vec<(usize, i32)> = Vec::new();
    let mut handles = Vec::new();
    let (sig_tx, _) = tokio::sync::broadcast::channel::<i32>(8);
    for (i, mut r, started) in running {
        let tx = tx.clone();
        let mut sig_rx = sig_tx.subscribe();
        handles.push((i, started));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    e = r.wait() => {
                        let _ = tx.send((i, e.code));
                        return;
                    }
                    s = sig_rx.recv() => match s {
                        Ok(sig) => r.signal(sig),
                        Err(_) => {
                            // The supervisor is gone: the container goes with it.
                            r.signal(libc::SIGKILL);
                            let e = r.wait().await;
                            let _ = tx.send((i, e.code));
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(tx);
    let _ = &mut signals;
    let mut left = handles.len();
    while left > 0 {
        let sleep =
            kill_at.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            Some((i, code)) = rx.recv() => {
                left -= 1;
                let started = handles.iter().find(|(j, _)| *j == i).map(|(_, s)| *s);
                ends[i] = Some(ContainerEnd {
                    code,
                    reason: if code == 0 { "Completed".into() } else { "Error".into() },
                    message: None,
                    started,
                    finished: Some(now(ctx)),
                    waiting: None,
                });
            }
            c = cmds.recv() => match c {
                Some(PodCmd::Terminate(grace)) => {
                    let _ = sig_tx.send(libc::SIGTERM);
                    let at = tokio::time::Instant::now() + grace;
                    kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
                }
                Some(PodCmd::Forget) | None => {
                    let _ = sig_tx.send(libc::SIGKILL);
                    while rx.recv().await.is_some() {}
                    return Outcome::Forgotten;
                }
                Some(PodCmd::Restart) => {}
                Some(PodCmd::Update(new)) => refresh(p, &new),
            },
            _ = tokio::time::sleep_until(sleep), if kill_at.is_some() => {
                kill_at = None;
                let _ = sig_tx.send(libc::SIGKILL);
            }
        }
    }
    Outcome::Ended(
        ends.into_iter()
            .map(|e| e.unwrap_or_else(ContainerEnd::unknown))
            .collect(),
    )
}

/// The supervisor task of one pod.
pub async fn supervise(
    ctx: Arc<Ctx>,
    launch: Launch,
    events: mpsc::UnboundedSender<ExecEvent>,
    mut cmds: mpsc::UnboundedReceiver<PodCmd>,
) {
    let pod = launch.pod;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let dir = ctx.state.join("pods").join(format!(
        "{}_{}_{}",
        pod.namespace().unwrap_or_default(),
        pod.name_any(),
        &uid[..uid.len().min(8)]
    ));
    let result = supervise_inner(
        &ctx,
        &pod,
        &uid,
        &dir,
        &launch.ip,
        &launch.host_ip,
        launch.node_cpu_milli,
        launch.node_memory_mib,
        &events,
        &mut cmds,
    )
    .await;
    let _ = result;
    // Containers are gone; the pod's files go too (claims stay: they belong to the claim).
    let _ = std::fs::remove_dir_all(&dir);
}

#[allow(clippy::too_many_arguments)]
async fn supervise_inner(
    ctx: &Arc<Ctx>,
    pod: &Pod,
    uid: &str,
    dir: &Path,
    ip: &str,
    host_ip: &str,
    node_cpu_milli: u64,
    node_memory_mib: u64,
    events: &mpsc::UnboundedSender<ExecEvent>,
    cmds: &mut mpsc::UnboundedReceiver<PodCmd>,
) -> Option<()> {
    let spec = pod.spec.clone().unwrap_or_default();
    let host_net = spec.host_network.unwrap_or(false);
    let hostname = if host_net {
        spec.node_name.clone().unwrap_or_default()
    } else {
        env::hostname(pod, &ctx.opts.cluster_domain)
    };
    let facts = PodFacts {
        pod_ip: ip.to_string(),
        host_ip: host_ip.to_string(),
        node_cpu_milli: i128::from(node_cpu_milli),
        node_mem_bytes: i128::from(node_memory_mib) << 20,
    };
    std::fs::create_dir_all(dir.join("etc")).ok()?;
    let files = {
        let hosts = dir.join("etc/hosts");
        let resolv = dir.join("etc/resolv.conf");
        let hn = dir.join("etc/hostname");
        std::fs::write(&hosts, env::hosts_file(pod, ip, &ctx.opts.cluster_domain)).ok()?;
        std::fs::write(
            &resolv,
            super::dns::resolv_conf(
                pod,
                ctx.dns_addr,
                &ctx.opts.cluster_domain,
                &ctx.host_resolv,
            ),
        )
        .ok()?;
        std::fs::write(&hn, format!("{hostname}\n")).ok()?;
        vec![
            (hosts, "/etc/hosts"),
            (resolv, "/etc/resolv.conf"),
            (hn, "/etc/hostname"),
        ]
    };
    // Volumes and referenced objects; missing ones are retried, as the kubelet does, with
    // the metadata as last seen (downwardAPI files are written from it).
    let mut latest = pod.clone();
    let (objs, vols) = loop {
        let (objs, claims) = fetch(&ctx.client, pod).await;
        match volumes::materialize(
            &latest,
            dir,
            &ctx.state.join("claims"),
            &objs,
            &claims,
            &facts,
        ) {
            Ok(v) => break (objs, v),
            Err(e) => {
                warn(&ctx.client, pod, "FailedMount", &e.to_string(), &ctx.clock).await;
                tokio::select! {
                    c = cmds.recv() => match c {
                        Some(PodCmd::Terminate(_)) => {
                            let ends = spec.containers.iter().map(|_| ContainerEnd::unknown()).collect();
                            let _ = events.send(ExecEvent::Ended { uid: uid.into(), inits: Vec::new(), ends });
                            wait_forget(cmds).await;
                            return None;
                        }
                        Some(PodCmd::Forget) | None => return None,
                        Some(PodCmd::Restart) => {}
                        Some(PodCmd::Update(new)) => latest = *new,
                    },
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                }
            }
        }
    };
    let p = Prepared {
        dir: dir.to_path_buf(),
        hostname,
        volumes: vols,
        objs,
        facts,
        files,
    };
    // Init containers, one after another.
    let mut inits = Vec::new();
    for c in spec.init_containers.iter().flatten() {
        match run_all(ctx, &p, pod, std::slice::from_ref(c), 0, cmds, |_| {}).await {
            Outcome::Forgotten => return None,
            Outcome::Ended(mut e) => {
                let end = e.remove(0);
                let failed = end.code != 0;
                inits.push(end);
                if failed {
                    if end_reason(&inits) == "StartError" {
                        let m = inits
                            .last()
                            .and_then(|e| e.message.clone())
                            .unwrap_or_default();
                        warn(&ctx.client, pod, "Failed", &m, &ctx.clock).await;
                    }
                    let ends = spec
                        .containers
                        .iter()
                        .map(|_| ContainerEnd::initializing())
                        .collect();
                    let _ = events.send(ExecEvent::Ended {
                        uid: uid.into(),
                        inits,
                        ends,
                    });
                    wait_forget(cmds).await;
                    return None;
                }
            }
        }
    }
    let mut restart = 0u32;
    loop {
        let ev_uid = uid.to_string();
        let inits2 = inits.clone();
        let ev = events.clone();
        let out = run_all(ctx, &p, pod, &spec.containers, restart, cmds, move |at| {
            let _ = ev.send(ExecEvent::Started {
                uid: ev_uid,
                at,
                inits: inits2,
            });
        })
        .await;
        match out {
            Outcome::Forgotten => return None,
            Outcome::Ended(ends) => {
                for e in &ends {
                    if e.reason == "StartError" || e.reason == "CreateContainerConfigError" {
                        warn(
                            &ctx.client,
                            pod,
                            "Failed",
                            e.message.as_deref().unwrap_or(""),
                            &ctx.clock,
                        )
                        .await;
                    }
                }
                let _ = events.send(ExecEvent::Ended {
                    uid: uid.into(),
                    inits: inits.clone(),
                    ends,
                });
            }
        }
        // Wait to be restarted or forgotten.
        loop {
            match cmds.recv().await {
                Some(PodCmd::Restart) => break,
                Some(PodCmd::Terminate(_)) => {}
                Some(PodCmd::Update(new)) => refresh(&p, &new),
                Some(PodCmd::Forget) | None => return None,
            }
        }
        restart += 1;
    }
}

fn end_reason(inits: &[ContainerEnd]) -> &str {
    inits.last().map(|e| e.reason.as_str()).unwrap_or("")
}

async fn wait_forget(cmds: &mut mpsc::UnboundedReceiver<PodCmd>) {
    while let Some(c) = cmds.recv().await {
        if matches!(c, PodCmd::Forget) {
            return;
        }
    }
}

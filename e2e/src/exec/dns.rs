//! Cluster DNS for exec mode: what CoreDNS's `kubernetes` plugin answers, from the API's
//! Services and Pods (the endpoints controller's rules applied directly), on a loopback
//! address written into every pod's `/etc/resolv.conf`.
//!
//! Served (cluster domain `D`, usually `cluster.local`):
//! - `<svc>.<ns>.svc.D` A: a headless Service's endpoint addresses (pods it selects that have
//!   an IP, are not finished and are Ready — or all of them with `publishNotReadyAddresses`),
//!   a normal Service's `clusterIP`;
//! - `<hostname>.<svc>.<ns>.svc.D` A: a selected pod whose `spec.hostname` is `<hostname>`
//!   and `spec.subdomain` is `<svc>` (the StatefulSet / job-pod form), and
//!   `<a-b-c-d>.<svc>.<ns>.svc.D` for the others;
//! - `<a-b-c-d>.<ns>.pod.D` A (CoreDNS's `pods insecure`);
//! - PTR for those pod addresses (`<hostname>.<svc>.<ns>.svc.D`).
//!
//! Other names in `D` are NXDOMAIN; names outside it are relayed to the host's resolvers (as
//! CoreDNS's `forward . /etc/resolv.conf`). Search paths and `ndots` are the client's: the
//! kubelet writes them into `/etc/resolv.conf`. The messages are encoded and decoded by
//! `hickory-proto`; the serving loop is ours because what is looked up is the API's state,
//! which no ready-made authority of hickory's serves.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, PTR, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

/// TTL of the answers (CoreDNS's default is 5 s; short keeps tests honest about changes).
const TTL: u32 = 5;

/// What a name resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// These addresses (A).
    Addrs(Vec<Ipv4Addr>),
    /// This name (PTR).
    Name(String),
    /// The name exists but has no record of the asked type.
    NoData,
    /// No such name in the cluster domain.
    NxDomain,
    /// Not the cluster's: relay upstream.
    Upstream,
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_ip(p: &Pod) -> Option<Ipv4Addr> {
    p.status.as_ref()?.pod_ip.as_ref()?.parse().ok()
}

fn finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn selects(svc: &Service, p: &Pod) -> bool {
    let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    if sel.is_empty() || p.metadata.namespace != svc.metadata.namespace {
        return false;
    }
    let labels = p.metadata.labels.clone().unwrap_or_default();
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The endpoint pods of a Service, as the endpoints controller would list them.
fn endpoints<'a>(svc: &Service, pods: &'a [Arc<Pod>]) -> Vec<&'a Pod> {
    let not_ready_too = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let mut out: Vec<&Pod> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| selects(svc, p) && pod_ip(p).is_some() && !finished(p))
        .filter(|p| not_ready_too || (ready(p) && p.metadata.deletion_timestamp.is_none()))
        .collect();
    out.sort_by_key(|p| pod_ip(p));
    out
}

fn headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

fn dashed(ip: Ipv4Addr) -> String {
    ip.to_string().replace('.', "-")
}

/// Answers `name` (lower case, no trailing dot) for `qtype` in cluster domain `domain`.
pub fn lookup(
    name: &str,
    qtype: RecordType,
    domain: &str,
    pods: &[Arc<Pod>],
    svcs: &[Arc<Service>],
) -> Answer {
    if let Some(rev) = name.strip_suffix(".in-addr.arpa") {
        let parts: Vec<&str> = rev.split('.').collect();
        if parts.len() != 4 {
            return Answer::Upstream;
        }
        let Ok(ip) =
            format!("{}.{}.{}.{}", parts[3], parts[2], parts[1], parts[0]).parse::<Ipv4Addr>()
        else {
            return Answer::Upstream;
        };
        for s in svcs.iter().filter(|s| headless(s)) {
            for p in endpoints(s, pods) {
                if pod_ip(p) == Some(ip) {
                    let spec = p.spec.as_ref();
                    let svc_name = s.metadata.name.clone().unwrap_or_default();
                    let host = match (
                        spec.and_then(|x| x.hostname.clone()),
                        spec.and_then(|x| x.subdomain.clone()),
                    ) {
                        (Some(h), Some(sub)) if sub == svc_name => h,
                        _ => dashed(ip),
                    };
                    let ns = s.metadata.namespace.clone().unwrap_or_default();
                    if qtype != RecordType::PTR {
                        return Answer::NoData;
                    }
                    return Answer::Name(format!("{host}.{svc_name}.{ns}.svc.{domain}"));
                }
            }
        }
        return Answer::Upstream;
    }
    let Some(local) = name.strip_suffix(domain).and_then(|l| l.strip_suffix('.')) else {
        return if name == domain {
            Answer::NoData
        } else {
            Answer::Upstream
        };
    };
    let labels: Vec<&str> = local.split('.').collect();
    let a = |ips: Vec<Ipv4Addr>| {
        if ips.is_empty() {
            Answer::NxDomain
        } else if qtype == RecordType::A {
            Answer::Addrs(ips)
        } else {
            Answer::NoData
        }
    };
    match labels.as_slice() {
        [ip, _ns, "pod"] => match ip.replace('-', ".").parse::<Ipv4Addr>() {
            Ok(ip) => a(vec![ip]),
            Err(_) => Answer::NxDomain,
        },
        [svc, ns, "svc"] => {
            let Some(s) = svcs.iter().find(|s| {
                s.metadata.name.as_deref() == Some(*svc)
                    && s.metadata.namespace.as_deref() == Some(*ns)
            }) else {
                return Answer::NxDomain;
            };
            if headless(s) {
                let ips: Vec<Ipv4Addr> = endpoints(s, pods)
                    .iter()
                    .filter_map(|p| pod_ip(p))
                    .collect();
                if ips.is_empty() {
                    // A headless Service without ready endpoints exists but has no address.
                    return Answer::NoData;
                }
                a(ips)
            } else {
                match s
                    .spec
                    .as_ref()
                    .and_then(|x| x.cluster_ip.as_deref())
                    .and_then(|ip| ip.parse().ok())
                {
                    Some(ip) => a(vec![ip]),
                    None => Answer::NoData,
                }
            }
        }
        [host, svc, ns, "svc"] => {
            let Some(s) = svcs.iter().find(|s| {
                s.metadata.name.as_deref() == Some(*svc)
                    && s.metadata.namespace.as_deref() == Some(*ns)
                    && headless(s)
            }) else {
                return Answer::NxDomain;
            };
            let ips: Vec<Ipv4Addr> = endpoints(s, pods)
                .into_iter()
                .filter(|p| {
                    // The endpoint's hostname is the pod's when its subdomain is this Service;
                    // other endpoints are named by their dashed address.
                    let spec = p.spec.as_ref();
                    let hostname = spec.and_then(|x| x.hostname.as_deref());
                    let named = hostname.is_some()
                        && spec.and_then(|x| x.subdomain.as_deref()) == Some(*svc);
                    if named {
                        hostname == Some(*host)
                    } else {
                        pod_ip(p).is_some_and(|ip| dashed(ip) == *host)
                    }
                })
                .filter_map(pod_ip)
                .collect();
            a(ips)
        }
        ["svc"] | [_, "svc"] | ["pod"] | [_, "pod"] => Answer::NoData,
        _ => Answer::NxDomain,
    }
}

/// A running cluster DNS server.
pub struct ClusterDns {
    addr: Ipv4Addr,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for ClusterDns {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct Shared {
    domain: String,
    pods: Store<Pod>,
    svcs: Store<Service>,
    upstream: Vec<SocketAddr>,
}

impl ClusterDns {
    /// Serves on `udp` (already bound to port 53 of a loopback address) and TCP on the same
    /// address, watching `client`'s Pods and Services.
    pub async fn start(
        client: Client,
        udp: UdpSocket,
        domain: &str,
        upstream: Vec<SocketAddr>,
    ) -> std::io::Result<ClusterDns> {
        let local = udp.local_addr()?;
        let addr = match local.ip() {
            std::net::IpAddr::V4(a) => a,
            std::net::IpAddr::V6(_) => Ipv4Addr::LOCALHOST,
        };
        let tcp = TcpListener::bind(local).await?;
        let (pods, pw) = reflector::store::<Pod>();
        let (svcs, sw) = reflector::store::<Service>();
        let pod_watch = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .reflect(pw)
            .for_each(|_| async {});
        let svc_watch = watcher(Api::<Service>::all(client), watcher::Config::default())
            .default_backoff()
            .reflect(sw)
            .for_each(|_| async {});
        let shared = Arc::new(Shared {
            domain: domain.trim_end_matches('.').to_ascii_lowercase(),
            pods,
            svcs,
            upstream,
        });
        let udp = Arc::new(udp);
        let mut tasks = vec![tokio::spawn(pod_watch), tokio::spawn(svc_watch)];
        {
            let shared = shared.clone();
            let udp = udp.clone();
            tasks.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    let Ok((n, peer)) = udp.recv_from(&mut buf).await else {
                        continue;
                    };
                    let q = buf[..n].to_vec();
                    let (shared, udp) = (shared.clone(), udp.clone());
                    tokio::spawn(async move {
                        if let Some(mut r) = respond(&shared, &q).await {
                            if r.len() > 512 {
                                r = truncated(&q).unwrap_or(r);
                            }
                            let _ = udp.send_to(&r, peer).await;
                        }
                    });
                }
            }));
        }
        {
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((mut s, _)) = tcp.accept().await else {
                        continue;
                    };
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        loop {
                            let mut len = [0u8; 2];
                            if s.read_exact(&mut len).await.is_err() {
                                return;
                            }
                            let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                            if s.read_exact(&mut q).await.is_err() {
                                return;
                            }
                            let Some(r) = respond(&shared, &q).await else {
                                return;
                            };
                            let mut out = (r.len() as u16).to_be_bytes().to_vec();
                            out.extend_from_slice(&r);
                            if s.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }));
        }
        // Wait until both caches have listed once, so the first queries see the cluster.
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = shared.pods.wait_until_ready().await;
            let _ = shared.svcs.wait_until_ready().await;
        })
        .await;
        Ok(ClusterDns { addr, tasks })
    }

    /// The address pods use as their nameserver.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }
}

fn truncated(q: &[u8]) -> Option<Vec<u8>> {
    let m = Message::from_vec(q).ok()?;
    let mut r = Message::new();
    r.set_id(m.id())
        .set_message_type(MessageType::Response)
        .set_op_code(m.op_code())
        .set_recursion_desired(m.recursion_desired())
        .set_recursion_available(true)
        .set_truncated(true)
        .add_queries(m.queries().to_vec());
    r.to_vec().ok()
}

async fn respond(shared: &Shared, q: &[u8]) -> Option<Vec<u8>> {
    let m = Message::from_vec(q).ok()?;
    let mut r = Message::new();
    r.set_id(m.id())
        .set_message_type(MessageType::Response)
        .set_op_code(m.op_code())
        .set_recursion_desired(m.recursion_desired())
        .set_recursion_available(true)
        .add_queries(m.queries().to_vec());
    let Some(query) = m.queries().first().filter(|_| m.op_code() == OpCode::Query) else {
        r.set_response_code(ResponseCode::NotImp);
        return r.to_vec().ok();
    };
    let qname = query
        .name()
        .to_ascii()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let pods: Vec<Arc<Pod>> = shared.pods.state();
    let svcs: Vec<Arc<Service>> = shared.svcs.state();
    let ans = lookup(&qname, query.query_type(), &shared.domain, &pods, &svcs);
    let soa = || {
        let zone = Name::from_ascii(format!("{}.", shared.domain)).ok()?;
        let ns = Name::from_ascii(format!("ns.dns.{}.", shared.domain)).ok()?;
        let host = Name::from_ascii(format!("hostmaster.{}.", shared.domain)).ok()?;
        Some(Record::from_rdata(
            zone,
            TTL,
            RData::SOA(SOA::new(ns, host, 1, 7200, 1800, 86400, TTL)),
        ))
    };
    match ans {
        Answer::Upstream => return relay(shared, q).await,
        Answer::Addrs(ips) => {
            r.set_authoritative(true);
            for ip in ips {
                r.add_answer(Record::from_rdata(
                    query.name().clone(),
                    TTL,
                    RData::A(A(ip)),
                ));
            }
        }
        Answer::Name(n) => {
            r.set_authoritative(true);
            let target = Name::from_ascii(format!("{n}.")).ok()?;
            r.add_answer(Record::from_rdata(
                query.name().clone(),
                TTL,
                RData::PTR(PTR(target)),
            ));
        }
        Answer::NoData => {
            r.set_authoritative(true);
            if let Some(s) = soa() {
                r.add_name_server(s);
            }
        }
        Answer::NxDomain => {
            r.set_authoritative(true)
                .set_response_code(ResponseCode::NXDomain);
            if let Some(s) = soa() {
                r.add_name_server(s);
            }
        }
    }
    r.to_vec().ok()
}

/// Relays a query to the host's resolvers (SERVFAIL when none answers).
async fn relay(shared: &Shared, q: &[u8]) -> Option<Vec<u8>> {
    for up in &shared.upstream {
        let Ok(sock) = UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0))).await else {
            continue;
        };
        if sock.send_to(q, up).await.is_err() {
            continue;
        }
        let mut buf = vec![0u8; 4096];
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(2), sock.recv_from(&mut buf)).await
        {
            return Some(buf[..n].to_vec());
        }
    }
    let m = Message::from_vec(q).ok()?;
    let mut r = Message::error_msg(m.id(), m.op_code(), ResponseCode::ServFail);
    r.add_queries(m.queries().to_vec());
    r.to_vec().ok()
}

/// The host's nameservers (`/etc/resolv.conf`), for relaying.
pub fn host_upstreams() -> Vec<SocketAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let (servers, _, _) = parse_resolv_conf(&text);
    servers
        .iter()
        .filter_map(|s| s.parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// A resolv.conf's nameservers, search domains (last `search` line wins, trailing dots
/// dropped) and options (last `options` line wins), as the kubelet reads the host's.
pub fn parse_resolv_conf(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut ns, mut search, mut opts) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        let f: Vec<&str> = t.split_whitespace().collect();
        match f.first() {
            Some(&"nameserver") if f.len() >= 2 => ns.push(f[1].to_string()),
            Some(&"search") => {
                search = f[1..]
                    .iter()
                    .map(|s| s.trim_end_matches('.').to_string())
                    .collect()
            }
            Some(&"options") => opts = f[1..].iter().map(|s| s.to_string()).collect(),
            _ => {}
        }
    }
    (ns, search, opts)
}

/// The `/etc/resolv.conf` the kubelet writes for `pod` (its `GetPodDNS`): `ClusterFirst`
/// gives the cluster DNS server, the namespace/`svc`/cluster search domains then the
/// host's, and `ndots:5`; `Default` (and `ClusterFirst` with `hostNetwork`) the host's file;
/// `None` nothing; `dnsConfig` is appended (duplicates dropped, options merged by name).
pub fn resolv_conf(pod: &Pod, dns: Ipv4Addr, domain: &str, host_resolv: &str) -> String {
    let spec = pod.spec.as_ref();
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let host_net = spec.and_then(|s| s.host_network).unwrap_or(false);
    let (hns, hsearch, hopts) = parse_resolv_conf(host_resolv);
    let (mut servers, mut search, mut opts): (Vec<String>, Vec<String>, Vec<String>) = match policy
    {
        "None" => (Vec::new(), Vec::new(), Vec::new()),
        "ClusterFirstWithHostNet" => cluster(dns, ns, domain, hsearch),
        "ClusterFirst" if !host_net => cluster(dns, ns, domain, hsearch),
        _ => (hns, hsearch, hopts),
    };
    if let Some(c) = spec.and_then(|s| s.dns_config.as_ref()) {
        servers.extend(c.nameservers.clone().unwrap_or_default());
        search.extend(c.searches.clone().unwrap_or_default());
        let mut map: BTreeMap<String, String> = opts
            .iter()
            .map(|o| match o.split_once(':') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (o.clone(), String::new()),
            })
            .collect();
        for o in c.options.clone().unwrap_or_default() {
            map.insert(o.name.unwrap_or_default(), o.value.unwrap_or_default());
        }
        // Kubernetes iterates a Go map here (random order); sorted is one of its orders.
        opts = map
            .into_iter()
            .map(|(k, v)| if v.is_empty() { k } else { format!("{k}:{v}") })
            .collect();
    }
    dedup(&mut servers);
    dedup(&mut search);
    servers.truncate(3);
    search.retain(|s| s.len() <= 253);
    search.truncate(32);
    let mut out = String::new();
    if !search.is_empty() {
        out.push_str(&format!("search {}\n", search.join(" ")));
    }
    for s in &servers {
        out.push_str(&format!("nameserver {s}\n"));
    }
    if !opts.is_empty() {
        out.push_str(&format!("options {}\n", opts.join(" ")));
    }
    out
}

fn cluster(
    dns: Ipv4Addr,
    ns: &str,
    domain: &str,
    host_search: Vec<String>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut search = vec![
        format!("{ns}.svc.{domain}"),
        format!("svc.{domain}"),
        domain.to_string(),
    ];
    search.extend(host_search);
    (vec![dns.to_string()], search, vec!["ndots:5".into()])
}

fn dedup(v: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|s| seen.insert(s.clone()));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, ip: &str, host: Option<&str>, sub: Option<&str>, ready: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "labels": {"job": "train"}},
                "spec": {"containers": [], "hostname": host, "subdomain": sub},
                "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
            }))
            .unwrap(),
        )
    }

    fn svc(name: &str, headless: bool, not_ready: bool) -> Arc<Service> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"clusterIP": if headless {"None"} else {"10.96.0.7"}, "selector": {"job": "train"},
                         "publishNotReadyAddresses": not_ready}
            }))
            .unwrap(),
        )
    }

    const D: &str = "cluster.local";

    #[test]
    fn pod_hostnames_under_a_headless_service_resolve() {
        let pods = vec![
            pod("train-0", "127.5.1.1", Some("train-0"), Some("train"), true),
            pod(
                "train-1",
                "127.5.1.2",
                Some("train-1"),
                Some("train"),
                false,
            ),
        ];
        let svcs = vec![svc("train", true, false)];
        let q = |n: &str| lookup(n, RecordType::A, D, &pods, &svcs);
        assert_eq!(
            q("train-0.train.ns.svc.cluster.local"),
            Answer::Addrs(vec!["127.5.1.1".parse().unwrap()])
        );
        assert_eq!(
            q("train-1.train.ns.svc.cluster.local"),
            Answer::NxDomain,
            "not ready"
        );
        assert_eq!(
            q("train.ns.svc.cluster.local"),
            Answer::Addrs(vec!["127.5.1.1".parse().unwrap()])
        );
        assert_eq!(q("train-0.ns.svc.cluster.local"), Answer::NxDomain);
        assert_eq!(
            q("127-5-1-1.train.ns.svc.cluster.local"),
            Answer::NxDomain,
            "named pods answer by name"
        );
        assert_eq!(q("example.com"), Answer::Upstream);
        assert_eq!(
            lookup(
                "train-0.train.ns.svc.cluster.local",
                RecordType::AAAA,
                D,
                &pods,
                &svcs
            ),
            Answer::NoData
        );
        let svcs = vec![svc("train", true, true)];
        let q = |n: &str| lookup(n, RecordType::A, D, &pods, &svcs);
        assert_eq!(
            q("train-1.train.ns.svc.cluster.local"),
            Answer::Addrs(vec!["127.5.1.2".parse().unwrap()])
        );
        assert_eq!(
            lookup("2.1.5.127.in-addr.arpa", RecordType::PTR, D, &pods, &svcs),
            Answer::Name("train-1.train.ns.svc.cluster.local".into())
        );
    }

    #[test]
    fn services_and_pod_names() {
        let pods = vec![pod("a", "127.5.1.9", None, None, true)];
        let svcs = vec![svc("web", false, false), svc("hl", true, false)];
        let q = |n: &str| lookup(n, RecordType::A, D, &pods, &svcs);
        assert_eq!(
            q("web.ns.svc.cluster.local"),
            Answer::Addrs(vec!["10.96.0.7".parse().unwrap()])
        );
        assert_eq!(
            q("127-5-1-9.hl.ns.svc.cluster.local"),
            Answer::Addrs(vec!["127.5.1.9".parse().unwrap()])
        );
        assert_eq!(
            q("10-1-2-3.ns.pod.cluster.local"),
            Answer::Addrs(vec!["10.1.2.3".parse().unwrap()])
        );
        assert_eq!(q("nosuch.ns.svc.cluster.local"), Answer::NxDomain);
    }

    #[test]
    fn resolv_conf_follows_the_kubelet() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "team"},
            "spec": {"containers": [], "dnsConfig": {"searches": ["train.team.svc.cluster.local"], "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}}
        }))
        .unwrap();
        let host = "nameserver 10.0.0.2\nsearch corp.example.\n";
        assert_eq!(
            resolv_conf(&p, "127.9.0.53".parse().unwrap(), D, host),
            "search team.svc.cluster.local svc.cluster.local cluster.local corp.example train.team.svc.cluster.local\nnameserver 127.9.0.53\noptions edns0 ndots:2\n"
        );
        let mut d = p.clone();
        d.spec.as_mut().unwrap().dns_policy = Some("Default".into());
        d.spec.as_mut().unwrap().dns_config = None;
        assert_eq!(
            resolv_conf(&d, "127.9.0.53".parse().unwrap(), D, host),
            "search corp.example\nnameserver 10.0.0.2\n"
        );
        let mut plain = p;
        plain.spec.as_mut().unwrap().dns_config = None;
        assert_eq!(
            resolv_conf(&plain, "127.9.0.53".parse().unwrap(), D, ""),
            "search team.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.9.0.53\noptions ndots:5\n"
        );
    }
}

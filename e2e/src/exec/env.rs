//! A container's environment and the files the kubelet writes for a pod, as the kubelet
//! computes them: `envFrom` then `env` (later entries win), `valueFrom` (`fieldRef`,
//! `resourceFieldRef`, `secretKeyRef`, `configMapKeyRef`), `$(VAR)` expansion in values and
//! in `command`/`args`, and `/etc/hosts`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::quantity::parse_milli;

/// The Secrets and ConfigMaps of the pod's namespace a container refers to (`None`: the
/// object does not exist), with their data decoded.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    /// Secret name → data.
    pub secrets: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    /// ConfigMap name → data (and binaryData).
    pub config_maps: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
}

/// Why an environment cannot be built (the kubelet's `CreateContainerConfigError`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvError(pub String);

/// What the pod has when its containers start (for `fieldRef`).
#[derive(Clone, Debug, Default)]
pub struct PodFacts {
    /// `status.podIP`.
    pub pod_ip: String,
    /// `status.hostIP`.
    pub host_ip: String,
    /// The node's allocatable CPU (millicores) and memory (bytes), for `resourceFieldRef`
    /// without a limit.
    pub node_cpu_milli: i128,
    /// Node memory in bytes.
    pub node_mem_bytes: i128,
}

/// Every Secret and ConfigMap name the container's env/envFrom uses.
pub fn referenced(c: &Container) -> (Vec<String>, Vec<String>) {
    let (mut s, mut m) = (Vec::new(), Vec::new());
    for e in c.env_from.iter().flatten() {
        if let Some(r) = &e.secret_ref {
            s.push(r.name.clone());
        }
        if let Some(r) = &e.config_map_ref {
            m.push(r.name.clone());
        }
    }
    for e in c.env.iter().flatten() {
        if let Some(vf) = &e.value_from {
            if let Some(r) = &vf.secret_key_ref {
                s.push(r.name.clone());
            }
            if let Some(r) = &vf.config_map_key_ref {
                m.push(r.name.clone());
            }
        }
    }
    (s, m)
}

fn env_name_ok(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// Expands `$(VAR)` with `vars` as Kubernetes does: `$$` is a literal `$`, unknown
/// references stay as written.
pub fn expand(s: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = s[i + 2..].find(')') {
                        let name = &s[i + 2..i + 2 + end];
                        match vars(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&s[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = s[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn field(pod: &Pod, facts: &PodFacts, path: &str) -> Result<String, EnvError> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let bracket = |p: &str, prefix: &str| -> Option<String> {
        let k = p.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(k.to_string())
    };
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        p if p.starts_with("metadata.labels['") => {
            let k = bracket(p, "metadata.labels['").unwrap_or_default();
            m.labels
                .as_ref()
                .and_then(|l| l.get(&k).cloned())
                .unwrap_or_default()
        }
        p if p.starts_with("metadata.annotations['") => {
            let k = bracket(p, "metadata.annotations['").unwrap_or_default();
            m.annotations
                .as_ref()
                .and_then(|l| l.get(&k).cloned())
                .unwrap_or_default()
        }
        other => {
            return Err(EnvError(format!(
                "unsupported fieldRef fieldPath {other:?}: supported are metadata.name, metadata.namespace, metadata.uid, metadata.labels['KEY'], metadata.annotations['KEY'], spec.nodeName, spec.serviceAccountName, status.podIP(s), status.hostIP(s)"
            )));
        }
    })
}

fn resource(
    c: &Container,
    facts: &PodFacts,
    res: &str,
    divisor: Option<&str>,
) -> Result<String, EnvError> {
    let (kind, name) = res
        .split_once('.')
        .ok_or_else(|| EnvError(format!("unsupported resourceFieldRef resource {res:?}")))?;
    let r = c.resources.as_ref();
    let map = match kind {
        "limits" => r.and_then(|r| r.limits.as_ref()),
        "requests" => r.and_then(|r| r.requests.as_ref()),
        _ => {
            return Err(EnvError(format!(
                "unsupported resourceFieldRef resource {res:?}"
            )));
        }
    };
    let given = map
        .and_then(|m| m.get(name))
        .map(|q| parse_milli(&q.0).map_err(|e| EnvError(format!("{res}: {e}"))))
        .transpose()?;
    // Without a limit the kubelet reports the node's allocatable (requests default to 0).
    let milli = match (given, kind, name) {
        (Some(v), _, _) => v,
        (None, "limits", "cpu") => facts.node_cpu_milli,
        (None, "limits", "memory") => facts.node_mem_bytes * 1000,
        (None, _, _) => 0,
    };
    let div = match divisor {
        Some(d) => parse_milli(d).map_err(|e| EnvError(format!("divisor {d}: {e}")))?,
        None => 1000,
    };
    if div <= 0 {
        return Err(EnvError(format!(
            "resourceFieldRef {res}: divisor must be positive"
        )));
    }
    // Rounded up, as the kubelet's ExtractContainerResourceValue does.
    Ok(((milli + div - 1) / div).to_string())
}

/// The container's environment in order (kubelet's `makeEnvironmentVariables`, service
/// links left out), or why it cannot be built.
pub fn container_env(
    pod: &Pod,
    c: &Container,
    objs: &Objects,
    facts: &PodFacts,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let set = |out: &mut Vec<(String, String)>, k: String, v: String| {
        if let Some(slot) = out.iter_mut().find(|(n, _)| *n == k) {
            slot.1 = v;
        } else {
            out.push((k, v));
        }
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for ef in c.env_from.iter().flatten() {
        let prefix = ef.prefix.clone().unwrap_or_default();
        let (data, what, name, optional) = if let Some(r) = &ef.config_map_ref {
            (
                objs.config_maps.get(&r.name).cloned().flatten(),
                "configmap",
                &r.name,
                r.optional.unwrap_or(false),
            )
        } else if let Some(r) = &ef.secret_ref {
            (
                objs.secrets.get(&r.name).cloned().flatten(),
                "secret",
                &r.name,
                r.optional.unwrap_or(false),
            )
        } else {
            continue;
        };
        let Some(data) = data else {
            if optional {
                continue;
            }
            return Err(EnvError(format!("{what} \"{name}\" not found")));
        };
        for (k, v) in data {
            let key = format!("{prefix}{k}");
            // Invalid names are skipped (the kubelet emits an InvalidEnvironmentVariableNames event).
            if env_name_ok(&key) {
                set(&mut out, key, text(&v));
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value = match &e.value_from {
            None => {
                let cur = out.clone();
                let lookup =
                    move |n: &str| cur.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
                expand(e.value.as_deref().unwrap_or(""), &lookup)
            }
            Some(vf) => {
                if let Some(f) = &vf.field_ref {
                    field(pod, facts, &f.field_path)?
                } else if let Some(r) = &vf.resource_field_ref {
                    resource(
                        c,
                        facts,
                        &r.resource,
                        r.divisor.as_ref().map(|d| d.0.as_str()),
                    )?
                } else if let Some(r) = &vf.secret_key_ref {
                    match objs.secrets.get(&r.name).cloned().flatten() {
                        Some(d) => match d.get(&r.key) {
                            Some(v) => text(v),
                            None if r.optional.unwrap_or(false) => continue,
                            None => {
                                return Err(EnvError(format!(
                                    "couldn't find key {} in Secret {}/{}",
                                    r.key,
                                    pod.metadata.namespace.as_deref().unwrap_or(""),
                                    r.name
                                )));
                            }
                        },
                        None if r.optional.unwrap_or(false) => continue,
                        None => return Err(EnvError(format!("secret \"{}\" not found", r.name))),
                    }
                } else if let Some(r) = &vf.config_map_key_ref {
                    match objs.config_maps.get(&r.name).cloned().flatten() {
                        Some(d) => match d.get(&r.key) {
                            Some(v) => text(v),
                            None if r.optional.unwrap_or(false) => continue,
                            None => {
                                return Err(EnvError(format!(
                                    "couldn't find key {} in ConfigMap {}/{}",
                                    r.key,
                                    pod.metadata.namespace.as_deref().unwrap_or(""),
                                    r.name
                                )));
                            }
                        },
                        None if r.optional.unwrap_or(false) => continue,
                        None => {
                            return Err(EnvError(format!("configmap \"{}\" not found", r.name)));
                        }
                    }
                } else {
                    String::new()
                }
            }
        };
        set(&mut out, e.name.clone(), value);
    }
    Ok(out)
}

/// `command` + `args` with `$(VAR)` expanded from the container's environment.
pub fn argv(c: &Container, env: &[(String, String)]) -> Vec<String> {
    let lookup = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    c.command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .map(|a| expand(a, &lookup))
        .collect()
}

/// The pod's host name as the kubelet sets it: `spec.hostname`, else the pod name (at most
/// 63 characters, without trailing `-`/`.`); with `setHostnameAsFQDN`, the FQDN.
pub fn hostname(pod: &Pod, domain: &str) -> String {
    let spec = pod.spec.as_ref();
    let mut h = spec
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    if h.len() > 63 {
        h.truncate(63);
        h = h.trim_end_matches(['-', '.']).to_string();
    }
    if spec.and_then(|s| s.set_hostname_as_fqdn).unwrap_or(false)
        && let Some(d) = host_domain(pod, domain)
    {
        return format!("{h}.{d}");
    }
    h
}

/// `<subdomain>.<namespace>.svc.<domain>` when the pod has a subdomain.
pub fn host_domain(pod: &Pod, domain: &str) -> Option<String> {
    let sub = pod.spec.as_ref()?.subdomain.clone()?;
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    Some(format!("{sub}.{ns}.svc.{domain}"))
}

/// `/etc/hosts` as the kubelet writes it for a pod on the pod network.
pub fn hosts_file(pod: &Pod, pod_ip: &str, domain: &str) -> String {
    let mut s = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    // The short name, not the FQDN of setHostnameAsFQDN.
    let mut short = pod.clone();
    if let Some(sp) = short.spec.as_mut() {
        sp.set_hostname_as_fqdn = None;
    }
    let h = hostname(&short, domain);
    match host_domain(pod, domain) {
        Some(d) => s.push_str(&format!("{pod_ip}\t{h}.{d}\t{h}\n")),
        None => s.push_str(&format!("{pod_ip}\t{h}\n")),
    }
    let aliases = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.clone())
        .unwrap_or_default();
    if !aliases.is_empty() {
        s.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            s.push_str(&format!(
                "{}\t{}\n",
                a.ip,
                a.hostnames.unwrap_or_default().join("\t")
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "train-0", "namespace": "team", "uid": "u1", "labels": {"app": "x"}},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn expansion_follows_kubernetes() {
        let vars = |n: &str| (n == "A").then(|| "1".to_string());
        assert_eq!(expand("x$(A)y", &vars), "x1y");
        assert_eq!(expand("$$(A) $(B) $", &vars), "$(A) $(B) $");
        assert_eq!(expand("$(A", &vars), "$(A");
        assert_eq!(expand("é$(A)", &vars), "é1");
    }

    #[test]
    fn env_sources_combine_in_order() {
        let p = pod(json!({"nodeName": "n1", "containers": [{
        "name": "c", "image": "i",
        "resources": {"limits": {"cpu": "1500m"}},
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "gone", "optional": true}}],
        "env": [
            {"name": "CM_A", "value": "over"},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "REF", "value": "$(NAME)-$(IP)"},
        ]}]}));
        let mut objs = Objects::default();
        objs.config_maps.insert(
            "cm".into(),
            Some(
                [
                    ("A".to_string(), b"1".to_vec()),
                    ("B".to_string(), b"2".to_vec()),
                    ("bad key".to_string(), b"x".to_vec()),
                ]
                .into(),
            ),
        );
        objs.secrets.insert(
            "s".into(),
            Some([("k".to_string(), b"secret".to_vec())].into()),
        );
        objs.secrets.insert("gone".into(), None);
        let facts = PodFacts {
            pod_ip: "127.1.1.1".into(),
            host_ip: "10.0.0.1".into(),
            node_cpu_milli: 8000,
            node_mem_bytes: 64 << 20,
        };
        let c = &p.spec.as_ref().unwrap().containers[0];
        let env = container_env(&p, c, &objs, &facts).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CM_A"), Some("over"));
        assert_eq!(get("CM_B"), Some("2"));
        assert_eq!(get("CM_bad key"), None);
        assert_eq!(get("NAME"), Some("train-0"));
        assert_eq!(get("APP"), Some("x"));
        assert_eq!(get("KEY"), Some("secret"));
        assert_eq!(get("CPU"), Some("2"), "1.5 cores round up");
        assert_eq!(get("MEM"), Some("64"), "no limit: the node's memory");
        assert_eq!(get("REF"), Some("train-0-127.1.1.1"));
        let mut missing = objs.clone();
        missing.secrets.insert("s".into(), None);
        assert_eq!(
            container_env(&p, c, &missing, &facts).unwrap_err().0,
            "secret \"s\" not found"
        );
    }

    #[test]
    fn hosts_file_and_hostname_follow_the_kubelet() {
        let p = pod(
            json!({"hostname": "train-0", "subdomain": "train", "containers": [],
            "hostAliases": [{"ip": "10.1.1.1", "hostnames": ["a", "b"]}]}),
        );
        assert_eq!(hostname(&p, "cluster.local"), "train-0");
        let h = hosts_file(&p, "127.3.1.1", "cluster.local");
        assert!(
            h.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"),
            "{h}"
        );
        assert!(
            h.contains("127.3.1.1\ttrain-0.train.team.svc.cluster.local\ttrain-0\n"),
            "{h}"
        );
        assert!(
            h.ends_with("\n# Entries added by HostAliases.\n10.1.1.1\ta\tb\n"),
            "{h}"
        );
        let plain = pod(json!({"containers": []}));
        assert!(hosts_file(&plain, "127.3.1.2", "cluster.local").ends_with("127.3.1.2\ttrain-0\n"));
    }
}

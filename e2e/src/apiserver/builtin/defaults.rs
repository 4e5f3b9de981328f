//! Pod defaults at creation (containers, tolerations, QoS class) and a new pod's status.

use serde_json::{Value, json};

use crate::apiserver::schema;

fn image_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    let tag = if last.contains('@') {
        return "IfNotPresent";
    } else {
        last.split_once(':').map(|(_, t)| t)
    };
    match tag {
        None | Some("latest") => "Always",
        _ => "IfNotPresent",
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    m.entry("imagePullPolicy")
        .or_insert_with(|| json!(image_pull_policy(&image)));
    m.entry("terminationMessagePath")
        .or_insert_with(|| json!("/dev/termination-log"));
    m.entry("terminationMessagePolicy")
        .or_insert_with(|| json!("File"));
    let res = m.entry("resources").or_insert_with(|| json!({}));
    if let Some(r) = res.as_object_mut()
        && let Some(limits) = r.get("limits").and_then(Value::as_object).cloned()
    {
        let req = r.entry("requests").or_insert_with(|| json!({}));
        if let Some(req) = req.as_object_mut() {
            for (k, v) in limits {
                req.entry(k).or_insert(v);
            }
        }
    }
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if let Some(p) = p.as_object_mut() {
                p.entry("protocol").or_insert_with(|| json!("TCP"));
            }
        }
    }
}

/// The QoS class of a (defaulted) pod spec.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        for r in ["cpu", "memory"] {
            if !req[r].is_null() || !lim[r].is_null() {
                any = true;
            }
            if lim[r].is_null() || (req[r] != lim[r] && !req[r].is_null()) {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Pod defaults applied at creation (the defaulting and admission plugins of a real cluster:
/// defaults, DefaultTolerationSeconds, ServiceAccount, Priority), and its initial status.
pub fn default_pod(pod: &mut Value, priority: Option<i64>) {
    let spec = schema::obj_mut(pod, "spec");
    spec.entry("restartPolicy")
        .or_insert_with(|| json!("Always"));
    spec.entry("dnsPolicy")
        .or_insert_with(|| json!("ClusterFirst"));
    spec.entry("schedulerName")
        .or_insert_with(|| json!("default-scheduler"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert_with(|| json!(30));
    spec.entry("securityContext").or_insert_with(|| json!({}));
    spec.entry("enableServiceLinks")
        .or_insert_with(|| json!(true));
    spec.entry("preemptionPolicy")
        .or_insert_with(|| json!("PreemptLowerPriority"));
    spec.insert("priority".into(), json!(priority.unwrap_or(0)));
    let sa = spec
        .get("serviceAccountName")
        .or(spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(sa));
    spec.insert("serviceAccount".into(), json!(sa));
    let tols = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(t) = tols.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let has = t.iter().any(|x| {
                (x["key"] == key || x["key"].is_null() && x["operator"] == "Exists")
                    && (x["effect"] == "NoExecute" || x["effect"].is_null())
            });
            if !has {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                default_container(c);
            }
        }
    }
    let qos = qos_class(&pod["spec"]);
    pod["status"] = json!({ "phase": "Pending", "qosClass": qos });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults_and_qos() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "busybox",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        default_pod(&mut pod, None);
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "1"
        );
        assert_eq!(pod["status"]["qosClass"], "Guaranteed");
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x:1.0"}]}});
        default_pod(&mut pod, Some(7));
        assert_eq!(pod["status"]["qosClass"], "BestEffort");
        assert_eq!(pod["spec"]["priority"], 7);
        assert_eq!(
            pod["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
    }
}

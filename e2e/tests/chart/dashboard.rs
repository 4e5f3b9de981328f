//! The Grafana dashboard: it shows every metric, and only real ones.

use super::*;

/// Every metric the operator exports (the operator's metrics contract).
const METRICS: [&str; 10] = [
    "muster_queue_jobs",
    "muster_running_jobs",
    "muster_scheduling_cycle_duration_seconds",
    "muster_job_time_to_start_seconds",
    "muster_gpus",
    "muster_preemptions_total",
    "muster_job_transitions_total",
    "muster_errors_total",
    "muster_leader",
    "muster_api_writes_total",
];

fn dashboard() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("files/dashboards/muster.json")).unwrap(),
    )
    .expect("the dashboard is JSON")
}

fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "expr" {
                    out.push(x.as_str().unwrap().to_string());
                } else {
                    exprs(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

#[test]
fn dashboard_shows_every_metric_and_only_real_ones() {
    let d = dashboard();
    let mut all = Vec::new();
    exprs(&d["panels"], &mut all);
    let mut used = BTreeSet::new();
    for e in &all {
        for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("muster_") {
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(word);
                assert!(
                    METRICS.contains(&base),
                    "the dashboard queries {word}, which the operator does not export: {e}"
                );
                used.insert(base.to_string());
            }
        }
        // Histograms are read through their buckets.
        if e.contains("histogram_quantile") {
            assert!(e.contains("_bucket"), "{e}");
        }
    }
    let want: BTreeSet<String> = METRICS.iter().map(|m| m.to_string()).collect();
    assert_eq!(used, want, "metrics missing from the dashboard");

    // Panels: unique ids, a datasource variable, and none overlapping another.
    let panels = d["panels"].as_array().unwrap();
    let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "duplicate panel ids");
    let mut cells = BTreeSet::new();
    for p in panels {
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_i64().unwrap(),
            g["y"].as_i64().unwrap(),
            g["w"].as_i64().unwrap(),
            g["h"].as_i64().unwrap(),
        );
        assert!(x + w <= 24, "panel {} is wider than the grid", p["title"]);
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "panel {} overlaps another",
                    p["title"]
                );
            }
        }
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    assert!(
        d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["type"] == "datasource"),
        "no datasource variable"
    );

    // The ConfigMap carries the same dashboard for the Grafana sidecar.
    let Some(r) = render(scenarios()[3].1.clone()) else {
        return;
    };
    let cm = r.get("ConfigMap", "muster-dashboard");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let inside: Value = serde_json::from_str(cm["data"]["muster.json"].as_str().unwrap()).unwrap();
    assert_eq!(inside, d);
    let sm = r.get("ServiceMonitor", "muster-operator");
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["interval"], "15s");
    assert!(labels_match(
        &sm["spec"]["selector"]["matchLabels"],
        &r.get("Service", "muster-operator-metrics")["metadata"]["labels"]
    ));
}

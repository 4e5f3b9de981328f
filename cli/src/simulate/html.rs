//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, no network) with
//! the summary table and four plots: GPU utilisation and queue length over time, the wait
//! time distribution (CDF on a log axis) with the policies overlaid, and per policy a
//! timeline of how busy each leaf switch was.
//!
//! The SVG is written by hand: a few line charts and a heat map do not warrant a plotting
//! crate, and the page must stay dependency-free for whoever opens it.

use std::fmt::Write;

use super::Replay;
use super::engine::{Sample, SimRun};
use super::metrics::waits;
use super::report::{dur, rows};

/// Time buckets of the plots.
const BUCKETS: usize = 300;

const COLORS: [&str; 3] = ["#2563eb", "#dc2626", "#16a34a"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Time-weighted means of `f` over `buckets` equal slices of `[0, end)`, from a step function
/// sampled at its changes.
pub fn bucketize(
    series: &[Sample],
    end: i64,
    buckets: usize,
    f: &dyn Fn(&Sample) -> f64,
) -> Vec<f64> {
    let end = end.max(1) as f64;
    let width = end / buckets as f64;
    let mut acc = vec![0.0f64; buckets];
    for (k, s) in series.iter().enumerate() {
        let a = s.t as f64;
        let b = series
            .get(k + 1)
            .map(|n| n.t as f64)
            .unwrap_or(end)
            .min(end);
        if b <= a {
            continue;
        }
        let v = f(s);
        let first = ((a / width) as usize).min(buckets - 1);
        let last = ((b / width).ceil() as usize).min(buckets);
        for (i, slot) in acc.iter_mut().enumerate().take(last).skip(first) {
            let lo = (i as f64 * width).max(a);
            let hi = ((i + 1) as f64 * width).min(b);
            if hi > lo {
                *slot += v * (hi - lo);
            }
        }
    }
    acc.iter().map(|x| x / width).collect()
}

/// One line of a chart: label, colour, points.
type Line<'a> = (String, &'a str, Vec<(f64, f64)>);

struct Chart<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    lines: Vec<Line<'a>>,
    x_max: f64,
    y_max: f64,
    x_fmt: &'a dyn Fn(f64) -> String,
    y_fmt: &'a dyn Fn(f64) -> String,
    log_x: bool,
}

/// Ticks of a logarithmic time axis: 1 s, 10 s, 1 min, 10 min, 1 h, 6 h, 1 d, 1 w, 30 d.
const LOG_TIME_TICKS: [f64; 9] = [
    1.0,
    10.0,
    60.0,
    600.0,
    3_600.0,
    21_600.0,
    86_400.0,
    604_800.0,
    2_592_000.0,
];

/// A tick label: `30s`, `10m`, `6h`, `7d`, or `1h30m` when not round.
fn tick_label(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0 => "0".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 && s < 3_600 => format!("{}m", s / 60),
        s if s < 60 => format!("{s}s"),
        s => dur(s as f64),
    }
}

/// Round ticks for a linear time axis from 0 to `max` seconds (at most about 6).
fn time_ticks(max: f64) -> Vec<f64> {
    const STEPS: [f64; 16] = [
        1.0,
        5.0,
        10.0,
        30.0,
        60.0,
        300.0,
        600.0,
        1_800.0,
        3_600.0,
        7_200.0,
        21_600.0,
        43_200.0,
        86_400.0,
        172_800.0,
        604_800.0,
        2_592_000.0,
    ];
    let step = STEPS
        .iter()
        .copied()
        .find(|&s| max / s <= 6.0)
        .unwrap_or_else(|| (max / 6.0).ceil());
    (0..)
        .map(|k| f64::from(k) * step)
        .take_while(|&t| t <= max * 1.0001)
        .collect()
}

const W: f64 = 760.0;
const H: f64 = 260.0;
const ML: f64 = 64.0;
const MR: f64 = 16.0;
const MT: f64 = 44.0;
const MB: f64 = 44.0;

fn line_chart(c: &Chart<'_>) -> String {
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let x_min = if c.log_x { 1.0f64 } else { 0.0 };
    let x_max = c.x_max.max(x_min * 10.0).max(1e-9);
    let y_max = if c.y_max > 0.0 { c.y_max } else { 1.0 };
    let sx = |x: f64| -> f64 {
        if c.log_x {
            let lx = x.max(x_min).ln() - x_min.ln();
            ML + pw * lx / (x_max.ln() - x_min.ln())
        } else {
            ML + pw * (x - x_min) / (x_max - x_min)
        }
    };
    let sy = |y: f64| MT + ph * (1.0 - (y / y_max).clamp(0.0, 1.0));
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img"><title>{t}</title><text x="{ML}" y="18" class="ct">{t}</text>"#,
        t = esc(c.title)
    );
    // Axes and ticks.
    let _ = write!(
        s,
        r##"<line x1="{ML}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#444"/><line x1="{ML}" y1="{MT}" x2="{ML}" y2="{y0}" stroke="#444"/>"##,
        y0 = MT + ph,
        x1 = ML + pw
    );
    for k in 0..=4 {
        let y = y_max * f64::from(k) / 4.0;
        let py = sy(y);
        let _ = write!(
            s,
            r##"<line x1="{ML}" y1="{py}" x2="{x1}" y2="{py}" stroke="#e5e7eb"/><text x="{tx}" y="{ty}" text-anchor="end" class="tk">{l}</text>"##,
            x1 = ML + pw,
            tx = ML - 6.0,
            ty = py + 4.0,
            l = esc(&(c.y_fmt)(y))
        );
    }
    let xticks: Vec<f64> = if c.log_x {
        LOG_TIME_TICKS
            .iter()
            .copied()
            .filter(|&t| t <= x_max * 1.0001)
            .collect()
    } else {
        time_ticks(x_max)
    };
    for x in xticks {
        let px = sx(x);
        let _ = write!(
            s,
            r##"<line x1="{px}" y1="{y0}" x2="{px}" y2="{y1}" stroke="#444"/><text x="{px}" y="{ty}" text-anchor="middle" class="tk">{l}</text>"##,
            y0 = MT + ph,
            y1 = MT + ph + 4.0,
            ty = MT + ph + 16.0,
            l = esc(&(c.x_fmt)(x))
        );
    }
    let _ = write!(
        s,
        r#"<text x="{x}" y="{y}" text-anchor="middle" class="al">{l}</text><text x="14" y="{ym}" text-anchor="middle" class="al" transform="rotate(-90 14 {ym})">{yl}</text>"#,
        x = ML + pw / 2.0,
        y = H - 6.0,
        l = esc(c.x_label),
        ym = MT + ph / 2.0,
        yl = esc(c.y_label)
    );
    for (i, (label, color, pts)) in c.lines.iter().enumerate() {
        if pts.is_empty() {
            continue;
        }
        let mut d = String::new();
        for (k, (x, y)) in pts.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if k == 0 { "M" } else { "L" },
                sx(*x),
                sy(*y)
            );
        }
        let _ = write!(
            s,
            r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6"/>"#
        );
        // Legend on the title line, right-aligned, one entry per policy.
        let lx = ML + 150.0 * i as f64;
        let ly = 34.0;
        let _ = write!(
            s,
            r#"<rect x="{lx}" y="{ry}" width="12" height="3" fill="{color}"/><text x="{tx}" y="{ty}" class="tk">{l}</text>"#,
            ry = ly - 4.0,
            tx = lx + 18.0,
            ty = ly,
            l = esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

/// Busy share of each leaf per time bucket, from every run of every job.
fn leaf_heat(r: &Replay, run: &SimRun, end: i64) -> Vec<Vec<f64>> {
    let cl = &r.cluster;
    let leaves = cl.leaf_names.len();
    let mut leaf_gpus = vec![0u64; leaves];
    for (n, &l) in cl.leaf_of.iter().enumerate() {
        leaf_gpus[l as usize] += cl.nodes[n].gpus.len() as u64;
    }
    let width = end.max(1) as f64 / BUCKETS as f64;
    let mut heat = vec![vec![0.0f64; BUCKETS]; leaves];
    let mut add = |start: i64, stop: i64, lg: &[(u32, u32)]| {
        let (a, b) = (start as f64, stop as f64);
        if b <= a {
            return;
        }
        let first = ((a / width) as usize).min(BUCKETS - 1);
        let last = ((b / width).ceil() as usize).min(BUCKETS);
        for &(l, g) in lg {
            for (i, cell) in heat[l as usize]
                .iter_mut()
                .enumerate()
                .take(last)
                .skip(first)
            {
                let lo = (i as f64 * width).max(a);
                let hi = ((i + 1) as f64 * width).min(b);
                if hi > lo {
                    *cell += f64::from(g) * (hi - lo);
                }
            }
        }
    };
    for o in &run.jobs {
        if let (Some(s), Some(e)) = (o.start, o.end) {
            add(s, e, &o.leaf_gpus);
        }
    }
    for ev in &run.evicted {
        add(ev.start, ev.end, &ev.leaf_gpus);
    }
    for (l, row) in heat.iter_mut().enumerate() {
        let cap = leaf_gpus[l].max(1) as f64 * width;
        for v in row.iter_mut() {
            *v = (*v / cap).clamp(0.0, 1.0);
        }
    }
    heat
}

fn heat_map(r: &Replay, run: &SimRun, end: i64, color: &str) -> String {
    let heat = leaf_heat(r, run, end);
    let leaves = heat.len().max(1);
    let row_h = (220.0 / leaves as f64).clamp(2.0, 18.0);
    // The heat map keeps the line charts' layout but needs no legend row.
    const MT: f64 = 28.0;
    let ph = row_h * leaves as f64;
    let h = ph + MT + MB;
    let pw = W - ML - MR;
    let cw = pw / BUCKETS as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" shape-rendering="crispEdges"><title>Leaf allocation: {p}</title><text x="{ML}" y="18" class="ct">Busy GPUs per leaf switch over time: {p}</text>"#,
        p = esc(run.policy.label())
    );
    for (l, row) in heat.iter().enumerate() {
        let y = MT + row_h * l as f64;
        for (i, &v) in row.iter().enumerate() {
            if v <= 0.0 {
                continue;
            }
            let _ = write!(
                s,
                r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{hh:.2}" fill="{color}" fill-opacity="{o:.3}"/>"#,
                x = ML + cw * i as f64,
                w = cw + 0.6,
                hh = row_h,
                o = v
            );
        }
        if leaves <= 32 || l % (leaves / 16).max(1) == 0 {
            let _ = write!(
                s,
                r#"<text x="{tx}" y="{ty:.1}" text-anchor="end" class="tk">{n}</text>"#,
                tx = ML - 6.0,
                ty = y + row_h * 0.5 + 3.5,
                n = esc(&r.cluster.leaf_names[l])
            );
        }
    }
    let _ = write!(
        s,
        r##"<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
    );
    for x in time_ticks(end as f64) {
        let px = ML + pw * x / end.max(1) as f64;
        let _ = write!(
            s,
            r#"<text x="{px}" y="{ty}" text-anchor="middle" class="tk">{l}</text>"#,
            ty = MT + ph + 16.0,
            l = esc(&tick_label(x))
        );
    }
    let _ = write!(
        s,
        r#"<text x="{x}" y="{y}" text-anchor="middle" class="al">time since the first submit (darker: more of the leaf's GPUs busy)</text></svg>"#,
        x = ML + pw / 2.0,
        y = h - 6.0
    );
    s
}

/// The whole page.
pub fn render(r: &Replay) -> String {
    let end = r.runs.iter().map(|x| x.end_time).max().unwrap_or(1).max(1);
    let width = end as f64 / BUCKETS as f64;
    let total = r.cluster.total_gpus.max(1) as f64;
    let mut util_lines = Vec::new();
    let mut queue_lines = Vec::new();
    let mut cdf_lines = Vec::new();
    let mut q_max = 1.0f64;
    let mut w_max = 60.0f64;
    for (i, run) in r.runs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let u = bucketize(&run.series, end, BUCKETS, &|s| f64::from(s.busy) / total);
        let q = bucketize(&run.series, end, BUCKETS, &|s| f64::from(s.queue));
        q_max = q.iter().copied().fold(q_max, f64::max);
        let mid = |k: usize| (k as f64 + 0.5) * width;
        util_lines.push((
            run.policy.label().to_string(),
            color,
            u.iter().enumerate().map(|(k, v)| (mid(k), *v)).collect(),
        ));
        queue_lines.push((
            run.policy.label().to_string(),
            color,
            q.iter().enumerate().map(|(k, v)| (mid(k), *v)).collect(),
        ));
        let w = waits(run, &r.workload);
        let n = w.len().max(1) as f64;
        w_max = w.last().copied().unwrap_or(0.0).max(w_max);
        // CDF with waits under a second counted at 1 s (log axis); at most ~400 points.
        let step = (w.len() / 400).max(1);
        let mut pts: Vec<(f64, f64)> = vec![(1.0, 0.0)];
        for (k, x) in w.iter().enumerate() {
            if k % step == 0 || k + 1 == w.len() {
                pts.push((x.max(1.0), (k + 1) as f64 / n));
            }
        }
        cdf_lines.push((run.policy.label().to_string(), color, pts));
    }
    let pct = |y: f64| format!("{:.0}%", y * 100.0);
    let count = |y: f64| format!("{y:.0}");
    let t_fmt = |x: f64| tick_label(x);
    let util = line_chart(&Chart {
        title: "GPU utilisation",
        x_label: "time since the first submit",
        y_label: "GPUs busy",
        lines: util_lines,
        x_max: end as f64,
        y_max: 1.0,
        x_fmt: &t_fmt,
        y_fmt: &pct,
        log_x: false,
    });
    let queue = line_chart(&Chart {
        title: "Queue length",
        x_label: "time since the first submit",
        y_label: "jobs waiting",
        lines: queue_lines,
        x_max: end as f64,
        y_max: (q_max * 1.1).ceil(),
        x_fmt: &t_fmt,
        y_fmt: &count,
        log_x: false,
    });
    let cdf = line_chart(&Chart {
        title: "Wait time distribution (jobs that waited at most x)",
        x_label: "wait (log scale; under 1 s shown at 1 s)",
        y_label: "jobs",
        lines: cdf_lines,
        x_max: w_max,
        y_max: 1.0,
        x_fmt: &t_fmt,
        y_fmt: &pct,
        log_x: true,
    });
    let mut page = String::new();
    page.push_str(
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>muster simulate report</title><style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:820px;color:#111}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
pre{background:#f6f8fa;padding:10px;overflow-x:auto;font-size:12px}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;border-bottom:1px solid #e5e7eb}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
svg{display:block;margin:12px 0}.ct{font-size:13px;font-weight:600}.tk{font-size:10px;fill:#333}.al{font-size:11px;fill:#333}
</style></head><body><h1>muster simulate</h1>"#,
    );
    let _ = write!(page, "<pre>{}</pre>", esc(&super::header(r).join("\n")));
    page.push_str("<h2>Summary</h2><table><tr><th></th>");
    for run in &r.runs {
        let _ = write!(page, r#"<th class="n">{}</th>"#, esc(run.policy.label()));
    }
    page.push_str("</tr>");
    for (label, cells) in rows(&r.summaries) {
        let _ = write!(page, "<tr><td>{}</td>", esc(&label));
        for c in cells {
            let _ = write!(page, r#"<td class="n">{}</td>"#, esc(&c));
        }
        page.push_str("</tr>");
    }
    page.push_str("</table><p>The same figures: <code>summary.csv</code>, <code>summary.json</code>; every job: <code>jobs-POLICY.csv</code>. Definitions: <code>muster simulate --help</code>.</p>");
    page.push_str("<h2>Utilisation and queue</h2>");
    page.push_str(&util);
    page.push_str(&queue);
    page.push_str("<h2>Wait times</h2>");
    page.push_str(&cdf);
    page.push_str("<h2>Allocation per leaf switch</h2>");
    for (i, run) in r.runs.iter().enumerate() {
        page.push_str(&heat_map(r, run, end, COLORS[i % COLORS.len()]));
    }
    page.push_str("</body></html>\n");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_time_weighted() {
        let s = vec![
            Sample {
                t: 0,
                busy: 10,
                queue: 0,
            },
            Sample {
                t: 5,
                busy: 0,
                queue: 0,
            },
        ];
        let b = bucketize(&s, 20, 2, &|x| f64::from(x.busy));
        assert_eq!(b, vec![5.0, 0.0]);
    }

    #[test]
    fn time_ticks_are_round() {
        assert_eq!(
            time_ticks(3.0 * 86_400.0),
            vec![
                0.0, 43_200.0, 86_400.0, 129_600.0, 172_800.0, 216_000.0, 259_200.0
            ]
        );
        assert_eq!(time_ticks(100.0), vec![0.0, 30.0, 60.0, 90.0]);
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(600.0), "10m");
        assert_eq!(tick_label(21_600.0), "6h");
        assert_eq!(tick_label(604_800.0), "7d");
        assert_eq!(tick_label(5_400.0), "1h30m");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}

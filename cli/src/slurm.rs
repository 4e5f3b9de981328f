//! Thin adapters over the Slurm syntax library, in the shapes the commands need.
//!
//! INTERIM: minimal versions until `muster_crds::slurm` lands on main; each is replaced by
//! a call into the library.

/// A job or partition time limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// No limit.
    Unlimited,
    /// Whole minutes.
    Minutes(u64),
}

/// Parse a Slurm time limit (`10`, `1:00:00`, `2-00:00:00`, `UNLIMITED`).
pub fn parse_limit(s: &str) -> Result<Limit, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") || t == "0" {
        return Ok(Limit::Unlimited);
    }
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().map_err(|e| e.to_string())?, Some(r)),
        None => (0, None),
    };
    let nums = |r: &str| -> Result<Vec<u64>, String> {
        r.split(':')
            .map(|p| p.parse::<u64>().map_err(|e| e.to_string()))
            .collect()
    };
    let secs = match rest {
        Some(r) => {
            let v = nums(r)?;
            let (h, m, s) = match v.as_slice() {
                [h] => (*h, 0, 0),
                [h, m] => (*h, *m, 0),
                [h, m, s] => (*h, *m, *s),
                _ => return Err(format!("bad time {s}")),
            };
            days * 86400 + h * 3600 + m * 60 + s
        }
        None => {
            let v = nums(t)?;
            match v.as_slice() {
                [m] => m * 60,
                [m, s] => m * 60 + s,
                [h, m, s] => h * 3600 + m * 60 + s,
                _ => return Err(format!("bad time {s}")),
            }
        }
    };
    Ok(Limit::Minutes(secs.div_ceil(60)))
}

/// Compress host names into a Slurm hostlist (`gpu[001-004]`).
pub fn compress(names: &[String]) -> String {
    names.join(",")
}

/// Expand a Slurm hostlist into host names.
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    Ok(list
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

/// The indices of an array spec and its `%` throttle.
pub fn array_indices(spec: &str) -> Result<(Vec<u32>, Option<u32>), String> {
    let (list, throttle) = match spec.split_once('%') {
        Some((l, t)) => (l, Some(t.parse::<u32>().map_err(|e| e.to_string())?)),
        None => (spec, None),
    };
    let mut out = Vec::new();
    for part in list.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.parse::<u32>().map_err(|e| e.to_string())?),
            None => (part, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (
                a.parse::<u32>().map_err(|e| e.to_string())?,
                b.parse::<u32>().map_err(|e| e.to_string())?,
            ),
            None => {
                let a = range.parse::<u32>().map_err(|e| e.to_string())?;
                (a, a)
            }
        };
        out.extend((a..=b).step_by(step.max(1) as usize));
    }
    out.sort_unstable();
    out.dedup();
    Ok((out, throttle))
}

/// The smallest node count of a `--nodes` value (`2-4` → 2).
pub fn nodes_min(spec: &str) -> Option<u32> {
    spec.split('-').next()?.parse().ok()
}

/// `(type, count)` of a `[TYPE:]COUNT` GPU request.
pub fn gpu_request(spec: &str) -> Option<(Option<String>, u32)> {
    match spec.rsplit_once(':') {
        Some((t, n)) => Some((Some(t.to_string()), n.parse().ok()?)),
        None => Some((None, spec.parse().ok()?)),
    }
}

/// `(type, count)` of the gpu entry of a `--gres` value.
pub fn gres_gpus(spec: &str) -> Option<(Option<String>, u32)> {
    let gpu = spec.split(',').find(|g| g.starts_with("gpu"))?;
    let parts: Vec<&str> = gpu.split(':').collect();
    match parts.as_slice() {
        ["gpu"] => Some((None, 1)),
        ["gpu", n] if n.chars().all(|c| c.is_ascii_digit()) => Some((None, n.parse().ok()?)),
        ["gpu", t] => Some((Some(t.to_string()), 1)),
        ["gpu", t, n] => Some((Some(t.to_string()), n.parse().ok()?)),
        _ => None,
    }
}

/// A memory size in MB (`16G` → 16384, `64000` → 64000, `2gb` → 2048).
pub fn mem_mb(spec: &str) -> Option<u64> {
    let s = spec.trim();
    let s = s
        .strip_suffix('B')
        .or_else(|| s.strip_suffix('b'))
        .unwrap_or(s);
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1.0 / 1024.0),
        'M' | 'm' => (&s[..s.len() - 1], 1.0),
        'G' | 'g' => (&s[..s.len() - 1], 1024.0),
        'T' | 't' => (&s[..s.len() - 1], 1024.0 * 1024.0),
        _ => (s, 1.0),
    };
    let n: u64 = num.parse().ok()?;
    Some((n as f64 * mult).ceil() as u64)
}

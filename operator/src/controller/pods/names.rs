//! The names of a job's pods, host names and Service: DNS labels, shortened with a hash when
//! too long.

/// Short stable hash for names that must be shortened.
fn short_hash(s: &str) -> String {
    let h = crate::core::util::fnv1a(crate::core::util::FNV_OFFSET, s.as_bytes());
    format!("{:05x}", h & 0xfffff)
}

/// `s` as a DNS-1123 label fragment: lowercase alphanumerics and `-` (`.` becomes `-`).
fn label_chars(s: &str) -> String {
    s.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() { c } else { '-' }
        })
        .collect()
}

/// `base` + `suffix` as a DNS label of at most 63 characters: `base` shortened with a hash
/// when needed, so distinct long names stay distinct.
pub(crate) fn fit_label(base: &str, suffix: &str) -> String {
    let b = label_chars(base);
    if b.len() + suffix.len() <= 63 {
        return format!("{b}{suffix}");
    }
    let keep = 63 - suffix.len() - 6;
    let head = b[..keep].trim_end_matches('-');
    format!("{head}-{}{suffix}", short_hash(base))
}

fn attempt_suffix(attempt: u32, node: u32) -> String {
    if attempt <= 1 {
        format!("-{node}")
    } else {
        format!("-{node}-a{attempt}")
    }
}

/// The name of node `node`'s pod: `<job>-<node>` for the first attempt, `<job>-<node>-a<attempt>`
/// after a requeue (old pods may still be terminating under the first name).
pub fn pod_name(job: &str, attempt: u32, node: u32) -> String {
    format!("{job}{}", attempt_suffix(attempt, node))
}

/// The headless Service of a job: its name when that is a DNS-1035 label (starts with a
/// letter, at most 63 characters, no dots), else a sanitized, hashed form.
pub fn service_name(job: &str) -> String {
    let ok = job.len() <= 63
        && job.starts_with(|c: char| c.is_ascii_lowercase())
        && job
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        return job.to_string();
    }
    let mut s = label_chars(job);
    if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        s = format!("j{s}");
    }
    if s.len() <= 63 && s != job {
        // Sanitizing changed it: add the hash so that `a.b` and `a-b` stay distinct.
        return fit_label(&s, &format!("-{}", short_hash(job)));
    }
    fit_label(&s, "")
}

/// Node `node`'s host name (a DNS label, its name in `SLURM_JOB_NODELIST`): the pod's name,
/// shortened with a hash when too long.
pub fn hostname(job: &str, attempt: u32, node: u32) -> String {
    fit_label(job, &attempt_suffix(attempt, node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_crds::step;

    #[test]
    fn names_fit_dns_rules() {
        assert_eq!(service_name("train"), "train");
        let s = service_name("7b.run");
        assert!(s.starts_with("j7b-run-"), "{s}");
        assert_ne!(service_name("a.b"), service_name("a-b"));
        let long = "a".repeat(63);
        assert_eq!(service_name(&long), long);
        let h = hostname(&long, 1, 31);
        assert!(h.len() <= 63 && h.ends_with("-31"), "{h}");
        assert_ne!(
            hostname(&format!("{long}x"), 1, 1),
            hostname(&format!("{long}y"), 1, 1)
        );
        assert_eq!(hostname("train", 1, 0), "train-0");
        assert_eq!(pod_name("train", 1, 7), "train-7");
        assert_eq!(pod_name("train", 3, 7), "train-7-a3");
        assert_eq!(step::secret_name("train"), "train-step");
    }
}

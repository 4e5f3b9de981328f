//! Kubernetes resource quantities (`"224"`, `"223500m"`, `"2Ti"`, `"1048576Ki"`, `"1e3"`) as
//! the scheduler's units: CPU millicores and memory MiB.
//!
//! Hand-written because k8s-openapi keeps `Quantity` as an opaque string and the crates that
//! parse it pull in a different k8s-openapi version; the grammar is small and fixed
//! (`<signedNumber><suffix>`, suffix a binary `Ki..Ei`, a decimal `n u m k M G T P E` or an
//! exponent `e<int>`).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A quantity that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {message}")]
pub struct QuantityError {
    /// The offending text.
    pub input: String,
    /// What is wrong.
    pub message: String,
}

/// The value of a quantity as an exact rational `mantissa * 2^bin * 10^dec` would be overkill:
/// nodes report integers with a suffix, so an `f64` with rounding up at the end is exact for
/// every value a kubelet writes (at most 2^53 of the target unit).
fn value(q: &str) -> Result<f64, QuantityError> {
    let err = |m: &str| QuantityError {
        input: q.to_string(),
        message: m.to_string(),
    };
    let s = q.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    // Split the number from the suffix.
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(end);
    if num.is_empty() || num == "+" || num == "-" || num == "." {
        return Err(err("expected a number before the unit"));
    }
    let n: f64 = num.parse().map_err(|_| err("expected a decimal number"))?;
    let mult = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        e if e.starts_with('e') || e.starts_with('E') => {
            let exp: i32 = e[1..]
                .parse()
                .map_err(|_| err("expected an integer exponent after e"))?;
            10f64.powi(exp)
        }
        _ => {
            return Err(err(
                "unknown unit; expected Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or e<N>",
            ));
        }
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 {
        return Err(err("must be a finite, non-negative amount"));
    }
    Ok(v)
}

/// A count (extended resources such as `rdma/ib`, which are whole numbers), rounded down.
pub fn count(q: &Quantity) -> Result<u64, QuantityError> {
    Ok((value(&q.0)? + 1e-9).floor() as u64)
}

/// CPU in millicores, rounded down (a kubelet's `allocatable.cpu` of `"223500m"` is 223500).
pub fn cpu_millis(q: &Quantity) -> Result<u64, QuantityError> {
    Ok((value(&q.0)? * 1000.0 + 1e-6).floor() as u64)
}

/// Memory in MiB, rounded down (allocatable memory is what may be used, so never round up).
pub fn memory_mib(q: &Quantity) -> Result<u64, QuantityError> {
    Ok((value(&q.0)? / (1024.0 * 1024.0) + 1e-9).floor() as u64)
}

/// A CPU amount for a pod's requests: whole cores when possible (`"8"`), else millicores.
pub fn cpu_quantity(millis: u64) -> Quantity {
    if millis.is_multiple_of(1000) {
        Quantity((millis / 1000).to_string())
    } else {
        Quantity(format!("{millis}m"))
    }
}

/// A memory amount for a pod's requests, in `Mi`.
pub fn memory_quantity(mib: u64) -> Quantity {
    Quantity(format!("{mib}Mi"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn cpu_forms_kubelets_write() {
        assert_eq!(cpu_millis(&q("224")).unwrap(), 224_000);
        assert_eq!(cpu_millis(&q("223500m")).unwrap(), 223_500);
        assert_eq!(cpu_millis(&q("0.5")).unwrap(), 500);
        assert_eq!(cpu_millis(&q("1e3")).unwrap(), 1_000_000);
        assert_eq!(cpu_millis(&q("100k")).unwrap(), 100_000_000);
    }

    #[test]
    fn memory_forms_kubelets_write() {
        assert_eq!(memory_mib(&q("2Ti")).unwrap(), 2 * 1024 * 1024);
        assert_eq!(memory_mib(&q("1048576Ki")).unwrap(), 1024);
        assert_eq!(memory_mib(&q("1073741824")).unwrap(), 1024);
        assert_eq!(memory_mib(&q("1G")).unwrap(), 953);
        assert_eq!(memory_mib(&q("1500Mi")).unwrap(), 1500);
        // Partial MiB round down.
        assert_eq!(memory_mib(&q("1025Ki")).unwrap(), 1);
    }

    #[test]
    fn bad_quantities_say_what_is_allowed() {
        for bad in ["", "abc", "12Qi", "-5", "1e", "Mi", "1.2.3"] {
            let e = cpu_millis(&q(bad)).unwrap_err();
            assert_eq!(e.input, bad);
            assert!(!e.message.is_empty());
        }
        let e = memory_mib(&q("12Qi")).unwrap_err();
        assert!(e.to_string().contains("Ki, Mi"), "{e}");
    }

    #[test]
    fn requests_print_compactly() {
        assert_eq!(cpu_quantity(8000).0, "8");
        assert_eq!(cpu_quantity(1500).0, "1500m");
        assert_eq!(memory_quantity(4096).0, "4096Mi");
        assert_eq!(cpu_millis(&cpu_quantity(1500)).unwrap(), 1500);
        assert_eq!(memory_mib(&memory_quantity(4096)).unwrap(), 4096);
    }
}

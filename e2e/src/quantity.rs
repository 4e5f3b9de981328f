//! Kubernetes resource quantities (`500m`, `2`, `64Gi`, `1e3`), parsed exactly.
//!
//! Hand-written because the scheduler stand-in needs exact integer arithmetic on requests and
//! allocatable (k8s-openapi only carries quantities as strings, and no small crate parses
//! them); floating point would make a request of exactly the allocatable fail or pass by
//! rounding.

/// Why a quantity does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid quantity {0:?}: expected a decimal number with an optional suffix (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or an exponent such as e3)"
)]
pub struct QuantityError(pub String);

/// The quantity in thousandths of its unit (millicores for CPU, millibytes for memory),
/// rounded up as Kubernetes rounds requests. Negative quantities are refused.
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    let err = || QuantityError(s.to_string());
    let t = s.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(err());
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int}{frac}");
    // At most 30 significant digits keeps every product below i128::MAX.
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(err());
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err())?
    };
    // value = mantissa * base^exp / 10^frac.len(); base is 2 (binary) or 10 (decimal).
    let (binary, exp): (bool, i32) = match suffix {
        "" => (false, 0),
        "n" => (false, -9),
        "u" => (false, -6),
        "m" => (false, -3),
        "k" => (false, 3),
        "M" => (false, 6),
        "G" => (false, 9),
        "T" => (false, 12),
        "P" => (false, 15),
        "E" => (false, 18),
        "Ki" => (true, 10),
        "Mi" => (true, 20),
        "Gi" => (true, 30),
        "Ti" => (true, 40),
        "Pi" => (true, 50),
        "Ei" => (true, 60),
        e if e.starts_with(['e', 'E']) => {
            let n: i32 = e[1..].parse().map_err(|_| err())?;
            if !(-40..=40).contains(&n) {
                return Err(err());
            }
            (false, n)
        }
        _ => return Err(err()),
    };
    let mut num: i128 = mantissa.checked_mul(1000).ok_or_else(err)?;
    let mut den: i128 = 10i128.pow(frac.len() as u32);
    if binary {
        num = num.checked_mul(1i128 << exp).ok_or_else(err)?;
    } else if exp >= 0 {
        num = num.checked_mul(10i128.pow(exp as u32)).ok_or_else(err)?;
    } else {
        den = den.checked_mul(10i128.pow((-exp) as u32)).ok_or_else(err)?;
    }
    Ok((num + den - 1) / den)
}

/// CPU millicores as Kubernetes prints them (`224`, `1500m`).
pub fn format_cpu_milli(m: u64) -> String {
    if m.is_multiple_of(1000) {
        (m / 1000).to_string()
    } else {
        format!("{m}m")
    }
}

/// Memory in MiB as the kubelet reports it (in Ki).
pub fn format_mem_mib(mib: u64) -> String {
    format!("{}Ki", mib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_exactly() {
        assert_eq!(parse_milli("500m").unwrap(), 500);
        assert_eq!(parse_milli("2").unwrap(), 2000);
        assert_eq!(parse_milli("0.5").unwrap(), 500);
        assert_eq!(parse_milli("1Gi").unwrap(), (1i128 << 30) * 1000);
        assert_eq!(parse_milli("1G").unwrap(), 1_000_000_000_000);
        assert_eq!(parse_milli("1e3").unwrap(), 1_000_000);
        assert_eq!(parse_milli("1.5Ki").unwrap(), 1_536_000);
        assert_eq!(parse_milli("100n").unwrap(), 1, "rounded up");
        assert_eq!(parse_milli("0").unwrap(), 0);
        assert_eq!(parse_milli("2147483648Ki").unwrap(), (2i128 << 40) * 1000);
    }

    #[test]
    fn bad_quantities_are_refused() {
        for bad in ["", "m", "1.2.3", "-1", "1Qi", "1e", "ten", "1e99"] {
            let e = parse_milli(bad).unwrap_err();
            assert!(e.to_string().contains("expected a decimal number"), "{bad}");
        }
    }

    #[test]
    fn formats_match_the_kubelet() {
        assert_eq!(format_cpu_milli(224_000), "224");
        assert_eq!(format_cpu_milli(1500), "1500m");
        assert_eq!(format_mem_mib(2), "2048Ki");
    }
}

//! Small deterministic helpers: natural ordering of names, a stable hash and a seeded PRNG.
//!
//! Hand-written on purpose: `std`'s `DefaultHasher` and `rand`'s `StdRng` do not promise the
//! same output across releases, and GPU UUIDs, synthetic clusters and benchmark queues must be
//! identical on every machine and every toolchain. Each is a few lines of a published
//! algorithm (FNV-1a, SplitMix64).

use std::cmp::Ordering;

/// Compares two names the way people (and Slurm hostlists) sort them: runs of digits compare
/// by value, everything else byte by byte, so `gpu2 < gpu10` and `leaf9 < leaf10`. Equal
/// values with different zero padding fall back to plain byte order so the order is total.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < ab.len() && j < bb.len() {
        if ab[i].is_ascii_digit() && bb[j].is_ascii_digit() {
            let si = i;
            while i < ab.len() && ab[i].is_ascii_digit() {
                i += 1;
            }
            let sj = j;
            while j < bb.len() && bb[j].is_ascii_digit() {
                j += 1;
            }
            let na = trim_zeros(&ab[si..i]);
            let nb = trim_zeros(&bb[sj..j]);
            let ord = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
            if ord != Ordering::Equal {
                return ord;
            }
        } else {
            if ab[i] != bb[j] {
                return ab[i].cmp(&bb[j]);
            }
            i += 1;
            j += 1;
        }
    }
    (ab.len() - i).cmp(&(bb.len() - j)).then_with(|| ab.cmp(bb))
}

fn trim_zeros(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&c| c == b'0').count();
    &s[n..]
}

/// 64-bit FNV-1a of `bytes`, starting from `seed` (use [`FNV_OFFSET`] for the standard hash).
pub fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The FNV-1a offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// A `HashMap` hasher: FNV-1a, much cheaper than SipHash for the small keys the core
/// interns (its maps are lookups only — never iterated into decisions — so neither DoS
/// resistance nor order matters).
#[derive(Clone, Copy, Debug, Default)]
pub struct FnvBuild;

/// The hasher [`FnvBuild`] builds.
#[derive(Clone, Copy, Debug)]
pub struct Fnv(u64);

impl std::hash::BuildHasher for FnvBuild {
    type Hasher = Fnv;
    fn build_hasher(&self) -> Fnv {
        Fnv(FNV_OFFSET)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = fnv1a(self.0, bytes);
    }
    fn write_u64(&mut self, v: u64) {
        // One multiply per word instead of eight.
        self.0 = (self.0 ^ v)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
}

/// SplitMix64: a tiny, fast, seeded generator, good enough for synthetic workloads and tests.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose whole output is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: unbiased enough for workloads, and branch-free.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_sorts_numbers_by_value() {
        let mut v = vec!["gpu10", "gpu2", "gpu1", "leaf", "gpu002", "a9b", "a10b"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            ["a9b", "a10b", "gpu1", "gpu002", "gpu2", "gpu10", "leaf"]
        );
        assert_eq!(natural_cmp("gpu001", "gpu001"), Ordering::Equal);
        assert_ne!(natural_cmp("gpu01", "gpu1"), Ordering::Equal);
    }

    #[test]
    fn fnv_and_splitmix_are_stable() {
        // Published test vector of FNV-1a 64 for "a".
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        let mut r = SplitMix64::new(7);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}

//! The probes' one pseudo-random generator: SplitMix64 (Steele, Lea and Flood), seeded.
//!
//! Every probe that needs randomness wants the same things from it: a fixed seed gives the same
//! sequence on every run (a latency rung's layout, a disk probe's offsets, exec's pair order),
//! so runs differ by the machine and not by the draw; it is tiny and fast enough for the hot
//! path (one add, two multiplies, three shifts); and it is not cryptographic, which none of
//! them needs. SplitMix64 rather than xorshift64*, which the disk probes used before: it has no
//! all-zero state to avoid, so any seed (a thread index, 0 included) is usable as it is, and
//! nearby seeds already give unrelated streams.

/// A SplitMix64 stream. `Rng::new(seed)` yields the same sequence for the same seed.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// The stream for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (bound > 0), by Lemire's multiply-high: no division, and a bias
    /// below 2^-32 for any bound below 2^32 (every bound the probes use: lines of a rung, blocks
    /// of a disk region, a percentage, a coin).
    #[inline]
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_splitmix64() {
        // The first outputs for seed 1234567 of the reference C code (Vigna's splitmix64.c),
        // as the mem.latency layouts depend on them.
        let mut rng = Rng::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(rng.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        let a: Vec<u64> = (0..8)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..8)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..8)
            .scan(Rng::new(8), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(42);
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            let v = rng.below(10);
            assert!(v < 10);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}

//! The workspace's one small pseudo-random generator: SplitMix64 (Steele, Lea and Flood),
//! seeded. The probes draw from it (a latency rung's layout, a disk probe's offsets, exec's pair
//! order), the schedule shuffles with it, and the test kit fixes its injected noise with it.
//!
//! What each wants: a fixed seed gives the same sequence on every run and every version (so
//! runs differ by the machine, not by the draw, and a stored run's seed means one order); tiny
//! and fast enough for a probe's hot path (one add, two multiplies, three shifts); not
//! cryptographic, which none needs. SplitMix64 rather than xorshift64*, which the disk probes
//! used once: it has no all-zero state to avoid, so any seed (a thread index, 0 included) is
//! usable as it is, and nearby seeds already give unrelated streams. The bootstrap resamples
//! with ChaCha instead ([`crate::bootstrap`]), whose output its specification fixes.

/// A SplitMix64 stream. `SplitMix64::new(seed)` yields the same sequence for the same seed.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The stream for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
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
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Uniform in `0..bound` (bound > 0) exactly, by rejection: no value is favoured at all.
    /// The schedule's shuffles use it (a stored run's seed must keep meaning the order it
    /// meant, so they keep the draw they were made with).
    pub fn below_exact(&mut self, bound: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % bound;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % bound;
            }
        }
    }
}

/// The first output of the stream seeded with `x`: a mixer that turns nearby numbers (a host's
/// index, a trial's number) into unrelated bits.
pub fn mix(x: u64) -> u64 {
    SplitMix64::new(x).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_splitmix64() {
        // The first outputs for seed 1234567 of the reference C code (Vigna's splitmix64.c),
        // as the mem.latency layouts depend on them.
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(rng.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        let a: Vec<u64> = (0..8)
            .scan(SplitMix64::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..8)
            .scan(SplitMix64::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..8)
            .scan(SplitMix64::new(8), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SplitMix64::new(42);
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            let v = rng.below(10);
            assert!(v < 10);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}

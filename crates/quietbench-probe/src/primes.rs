//! `cpu.primes`: sysbench's `cpu` test, so its events/s compare with `sysbench cpu` directly.

use std::hint::black_box;

use crate::Workload;

/// One sysbench `cpu` event: tests every number in `3..max_prime` for primality by trial
/// division with 64-bit integers, up to the square root computed in double precision, exactly as
/// sysbench 1.0's `cpu_execute_event` does (including comparing the divisor with the square root
/// as a double). Returns how many of them are prime (sysbench counts but discards this).
///
/// The same arithmetic, in the same order, is what makes events/s comparable with sysbench:
/// a faster algorithm (a sieve, an integer square root) would measure something else.
#[inline(never)]
pub fn sysbench_cpu_event(max_prime: u64) -> u64 {
    let mut primes = 0;
    let mut c: u64 = 3;
    while c < max_prime {
        let t = (c as f64).sqrt();
        let mut l: u64 = 2;
        while (l as f64) <= t {
            if c % l == 0 {
                break;
            }
            l += 1;
        }
        if (l as f64) > t {
            primes += 1;
        }
        c += 1;
    }
    primes
}

/// The number of primes up to and including `n`: sysbench's event skips 2, so add it back.
pub fn count_primes_up_to(n: u64) -> u64 {
    if n < 2 {
        return 0;
    }
    sysbench_cpu_event(n.saturating_add(1)) + 1
}

/// The cpu.primes workload: one sysbench event per [`Workload::event`].
#[derive(Debug, Clone)]
pub struct PrimesWorkload {
    /// Upper bound (exclusive) of the numbers tested, sysbench's `--cpu-max-prime`.
    pub max_prime: u64,
}

impl Workload for PrimesWorkload {
    fn event(&mut self) {
        // black_box on both sides: the optimizer must neither constant-fold the bound nor drop
        // the loop whose result nobody reads.
        black_box(sysbench_cpu_event(black_box(self.max_prime)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_known_prime_counts() {
        // pi(n) from any table of the prime-counting function.
        assert_eq!(count_primes_up_to(10), 4);
        assert_eq!(count_primes_up_to(100), 25);
        assert_eq!(count_primes_up_to(1_000), 168);
        assert_eq!(count_primes_up_to(10_000), 1229);
        assert_eq!(count_primes_up_to(100_000), 9592);
    }

    #[test]
    fn sysbench_event_excludes_two_and_the_bound() {
        assert_eq!(sysbench_cpu_event(10_000), 1228);
        assert_eq!(sysbench_cpu_event(3), 0);
        assert_eq!(sysbench_cpu_event(4), 1); // 3
        assert_eq!(sysbench_cpu_event(8), 3); // 3, 5, 7
    }

    #[test]
    fn small_bounds_do_not_panic() {
        assert_eq!(count_primes_up_to(0), 0);
        assert_eq!(count_primes_up_to(1), 0);
        assert_eq!(count_primes_up_to(2), 1);
        assert_eq!(sysbench_cpu_event(0), 0);
    }
}

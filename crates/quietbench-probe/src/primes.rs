//! `cpu.primes`: sysbench's `cpu` test, so its events/s compare with `sysbench cpu` directly.

use std::hint::black_box;

use crate::Workload;

/// One sysbench `cpu` event: tests every number in `3..max_prime` for primality by trial
/// division with 64-bit integers, up to the square root computed in double precision, as
/// sysbench 1.0's `cpu_execute_event` does (including comparing the divisor with the square root
/// as a double). Returns how many of them are prime (sysbench counts but discards this).
///
/// The same arithmetic is what makes events/s comparable with sysbench: a faster algorithm (a
/// sieve, an integer square root) would measure something else. "The same" means the
/// instructions the sysbench binary executes, as gcc -O2 compiles its C (read with objdump of
/// Debian's sysbench 1.0.20):
/// - the first divisor, 2, is a bit test: gcc turns `c % 2` into `test $1`, so even numbers
///   cost no division;
/// - every other divisor is a true 64-bit `div` (see [`rem_u64`]);
/// - integers become doubles with one `cvtsi2sd` (gcc knows they stay below 2^63; so do we:
///   `max_prime` is at most a million), not LLVM's longer unsigned conversion sequence.
///
/// Written naively, LLVM's code for the same C ran 25% faster (32-bit division) or 7% slower
/// (unsigned conversions, a division by 2) than sysbench on the development VM.
#[inline(never)]
pub fn sysbench_cpu_event(max_prime: u64) -> u64 {
    // Below 2^63 every value converts with a single signed conversion.
    let max_prime = max_prime.min(i64::MAX as u64);
    let as_f64 = |v: u64| v as i64 as f64;
    let mut primes = 0;
    let mut c: u64 = 3;
    while c < max_prime {
        let t = as_f64(c).sqrt();
        let mut l: u64 = 2;
        if 2.0 <= t && c & 1 == 1 {
            l = 3;
            while as_f64(l) <= t && rem_u64(c, l) != 0 {
                l += 1;
            }
        }
        if as_f64(l) > t {
            primes += 1;
        }
        c += 1;
    }
    primes
}

/// `c % l` with a true 64-bit divide, as gcc compiles sysbench.
///
/// LLVM tunes x86-64 to test whether both operands fit in 32 bits and then use the much faster
/// 32-bit `div` ("idivq-to-divl"); gcc does not. Left to LLVM, this loop ran 25% faster than
/// sysbench on the development VM, and, worse, would measure the 32-bit divider, whose speed
/// differs across CPU models in other ways than the 64-bit one sysbench exercises. The inline
/// `div` keeps the instruction mix, and so the CPU-model sensitivity, identical.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rem_u64(dividend: u64, divisor: u64) -> u64 {
    let remainder: u64;
    // SAFETY: `div r64` divides rdx:rax by the register. rdx is zeroed, so the quotient fits in
    // 64 bits, and every caller passes divisor >= 2, so it cannot fault. It reads and writes
    // only the named registers and flags: no memory, no stack.
    unsafe {
        std::arch::asm!(
            "div {divisor}",
            divisor = in(reg) divisor,
            inout("rax") dividend => _,
            inout("rdx") 0u64 => remainder,
            options(pure, nomem, nostack),
        );
    }
    remainder
}

/// `c % l`: other architectures have no 32-bit shortcut to avoid (aarch64 `udiv` is one
/// instruction for either width).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rem_u64(dividend: u64, divisor: u64) -> u64 {
    dividend % divisor
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
    fn step(&mut self, _samples: &mut crate::Samples<'_>) -> crate::Step {
        // black_box on both sides: the optimizer must neither constant-fold the bound nor drop
        // the loop whose result nobody reads.
        black_box(sysbench_cpu_event(black_box(self.max_prime)));
        crate::Step::Timed {
            variant: 0,
            bytes: 0,
        }
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

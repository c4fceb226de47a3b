//! `cpu.primes`: sysbench's `cpu` test, so its events/s compare with `sysbench cpu` directly.

use std::hint::black_box;

use crate::Workload;

/// One sysbench `cpu` event: tests every number in `3..max_prime` for primality by trial
/// division with 64-bit integers, up to the square root computed in double precision, as
/// sysbench 1.0's `cpu_execute_event` does (sb_cpu.c: `for (c = 3; c < max_prime; c++) { t =
/// sqrt((double)c); for (l = 2; l <= t; l++) if (c % l == 0) break; if (l > t) n++; }`).
///
/// The same arithmetic is what makes events/s comparable with sysbench: a faster algorithm (a
/// sieve, an integer square root) would measure something else. "The same" means the
/// instructions the sysbench binary executes, so on x86-64 the event is gcc's code for that
/// loop, transcribed (see `sysbench_loop`), not LLVM's code for an equivalent Rust loop.
///
/// Why a transcription: LLVM's best rendering of the same source (true 64-bit `div`, one `cvtsi2sd`
/// per conversion) matched sysbench to 0.1% on the Intel Xeon it was tuned on, but on an AMD EPYC
/// (Zen 4, family 25 model 17) it ran 1.00x to 1.05x sysbench's events/s depending only on where
/// the linker placed the loop (a user measured 1.04x with the release binary; objdump showed the
/// division, bounds and conversions identical). Its loop is shaped differently from gcc's: division
/// first and the `l <= t` test at the bottom, no `jns`, no check of sqrt's argument, and a prime
/// count (`cvtsi2sd`, `ucomisd`, `seta`, `add`) after every number, which gcc drops because
/// sysbench never reads `n`. gcc's exact sequence ran within 1% of the sysbench binary at every
/// alignment tried. Other architectures run the Rust loop of [`sysbench_cpu_primes`] without its
/// count.
#[inline(never)]
pub fn sysbench_cpu_event(max_prime: u64) {
    #[cfg(target_arch = "x86_64")]
    sysbench_loop::<false>(max_prime);
    #[cfg(not(target_arch = "x86_64"))]
    rust_loop::<false>(max_prime);
}

/// [`sysbench_cpu_event`]'s arithmetic with the prime count sysbench computes but discards:
/// how many numbers in `3..max_prime` are prime. On x86-64 it is the same transcribed loop
/// plus the count at each number's end, so the tests check the measured instructions' bounds,
/// square roots and divisions, not a look-alike.
pub fn sysbench_cpu_primes(max_prime: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    return sysbench_loop::<true>(max_prime);
    #[cfg(not(target_arch = "x86_64"))]
    return rust_loop::<true>(max_prime);
}

/// gcc 12 -O2's code for sysbench 1.0.20's `cpu_execute_event`, instruction for instruction as
/// objdump shows it in Debian's sysbench binary, with `COUNT` adding sysbench's `if (l > t)
/// n++` at each number's end (gcc deletes it from sysbench, whose `n` is never read):
/// - `(double)c` and `(double)l` are `pxor` + `cvtsi2sd` (gcc knows both stay below 2^63;
///   `max_prime` is at most a million); `l <= t` is `comisd` + `jb` at the top of the inner
///   loop, before the division;
/// - `sqrt` is `sqrtsd` after gcc's check that the argument is not negative (the call to libm,
///   for errno, is never taken: c >= 3);
/// - the divisor 2 is a bit test (`test $1`): even numbers cost no division;
/// - every other divisor is a true 64-bit `div` with rdx zeroed, never the 32-bit `div` that
///   LLVM substitutes when both operands fit ("idivq-to-divl"), which is much faster on some
///   CPUs and would measure a different divider;
/// - `l++` is `add $1` + `jns` (gcc's guard for its unsigned-to-double conversion, whose
///   slow path is unreachable below 2^63 and is omitted here).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn sysbench_loop<const COUNT: bool>(max_prime: u64) -> u64 {
    // The loop's comparisons are signed conversions: keep every value below 2^63.
    let max_prime = max_prime.min(i64::MAX as u64);
    let mut primes: u64 = 0;
    // The template once, with two insertion points for the count, so the counted and the
    // measured loops cannot drift apart.
    macro_rules! sysbench_asm {
        ([$($at_number:literal),*], [$($at_end:literal),*]) => {
            // SAFETY: pure register arithmetic on the declared operands: no memory, no stack.
            // `div` divides rdx:rax (rdx zeroed) by l >= 3, so it cannot fault; every jump
            // targets a label inside this block, which falls through to its end.
            unsafe {
                std::arch::asm!(
                    "mov {c:e}, 3",
                    "cmp {max}, 3",
                    "jbe 5f",
                    "pxor {zero}, {zero}",
                    ".p2align 4",
                    "2:",
                    $($at_number,)*
                    "pxor {t}, {t}",
                    "cvtsi2sd {t}, {c}",
                    "ucomisd {zero}, {t}",
                    "ja 6f",
                    "sqrtsd {t}, {t}",
                    "7:",
                    "comisd {t}, {two}",
                    "jb 4f",
                    "test {c:l}, 1",
                    "je 4f",
                    "mov {l:e}, 2",
                    "jmp 3f",
                    ".p2align 3",
                    "8:",
                    "pxor {x}, {x}",
                    "cvtsi2sd {x}, {l}",
                    "comisd {t}, {x}",
                    "jb 4f",
                    "mov rax, {c}",
                    "xor edx, edx",
                    "div {l}",
                    "test rdx, rdx",
                    "je 4f",
                    "3:",
                    "add {l}, 1",
                    "jns 8b",
                    "4:",
                    $($at_end,)*
                    "add {c}, 1",
                    "cmp {c}, {max}",
                    "jne 2b",
                    "jmp 5f",
                    // sqrt of a negative number: libm's errno path in sysbench, never taken.
                    "6:",
                    "sqrtsd {t}, {t}",
                    "jmp 7b",
                    "5:",
                    max = in(reg) max_prime,
                    two = in(xmm_reg) 2.0f64,
                    n = inout(reg) primes,
                    c = out(reg) _,
                    l = out(reg) _,
                    f = out(reg) _,
                    zero = out(xmm_reg) _,
                    t = out(xmm_reg) _,
                    x = out(xmm_reg) _,
                    out("rax") _,
                    out("rdx") _,
                    // Not `pure`: the measured event reads none of the outputs, and a pure block
                    // whose outputs are unused may be deleted.
                    options(nomem, nostack),
                );
            }
        };
    }
    if COUNT {
        // l starts at 2 for every number (the inner loop sets it only for odd ones), and
        // `l > t` is `comisd` + `seta`: a prime left the loop with l past its square root.
        sysbench_asm!(
            ["mov {l:e}, 2"],
            [
                "pxor {x}, {x}",
                "cvtsi2sd {x}, {l}",
                "xor {f:e}, {f:e}",
                "comisd {x}, {t}",
                "seta {f:l}",
                "add {n}, {f}"
            ]
        );
    } else {
        // `n` and `f` are unused here; naming them in a comment keeps one operand list.
        sysbench_asm!(["# {n} {f}"], []);
    }
    primes
}

/// The loop in plain Rust, for architectures other than x86-64 (aarch64 `udiv` is one
/// instruction at either width, so there is no narrower division for the compiler to choose).
#[cfg(not(target_arch = "x86_64"))]
fn rust_loop<const COUNT: bool>(max_prime: u64) -> u64 {
    let max_prime = max_prime.min(i64::MAX as u64);
    let as_f64 = |v: u64| v as i64 as f64;
    let mut primes = 0;
    let mut c: u64 = 3;
    while c < max_prime {
        let t = as_f64(c).sqrt();
        let mut l: u64 = 2;
        if 2.0 <= t && c & 1 == 1 {
            l = 3;
            while as_f64(l) <= t && c % l != 0 {
                l += 1;
            }
        }
        if COUNT && as_f64(l) > t {
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
    sysbench_cpu_primes(n.saturating_add(1)) + 1
}

/// The cpu.primes workload: one sysbench event per sample that [`crate::Workload::step`] records.
#[derive(Debug, Clone)]
pub struct PrimesWorkload {
    /// Upper bound (exclusive) of the numbers tested, sysbench's `--cpu-max-prime`.
    pub max_prime: u64,
}

impl Workload for PrimesWorkload {
    fn step(&mut self, _samples: &mut crate::Samples<'_>) -> crate::Step {
        // black_box: the optimizer must not constant-fold the bound. The loop cannot be
        // dropped: its asm block is not `pure`, so it counts as having side effects.
        sysbench_cpu_event(black_box(self.max_prime));
        crate::Step::Timed {
            metric_set: 0,
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
        // The event's own loop with the count sysbench discards (the measured event has none).
        assert_eq!(sysbench_cpu_primes(10_000), 1228);
        assert_eq!(sysbench_cpu_primes(3), 0);
        assert_eq!(sysbench_cpu_primes(4), 1); // 3
        assert_eq!(sysbench_cpu_primes(8), 3); // 3, 5, 7
    }

    #[test]
    fn the_measured_event_runs_to_its_end_for_any_bound() {
        // No result to check: this guards the asm's jumps (a wrong one loops or faults).
        for max_prime in [0, 1, 2, 3, 4, 5, 8, 9, 25, 10_000] {
            sysbench_cpu_event(max_prime);
        }
    }

    #[test]
    fn small_bounds_do_not_panic() {
        assert_eq!(count_primes_up_to(0), 0);
        assert_eq!(count_primes_up_to(1), 0);
        assert_eq!(count_primes_up_to(2), 1);
        assert_eq!(sysbench_cpu_primes(0), 0);
        sysbench_cpu_event(0);
    }
}

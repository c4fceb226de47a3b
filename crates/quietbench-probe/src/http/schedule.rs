//! The open loop's schedule as arithmetic, and the reconnect backoff: pure functions.

use std::time::Duration;

/// One thread's share of a rate: thread `thread` of `threads` sends its request k at
/// `(k * threads + thread) / rate` seconds after the start, so the threads' requests
/// interleave evenly and together keep the rate. Computed from k each time, never accumulated,
/// so it does not drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    rate: u128,
    threads: u128,
    thread: u128,
}

const NS_PER_SEC: u128 = 1_000_000_000;

impl Schedule {
    /// Thread `thread` of `threads` at `rate` requests per second in all (`rate` > 0).
    pub(crate) fn new(rate: u64, threads: usize, thread: usize) -> Self {
        Self {
            rate: u128::from(rate.max(1)),
            threads: threads.max(1) as u128,
            thread: thread as u128,
        }
    }

    /// Nanoseconds after the start when request `k` is due.
    pub(crate) fn due_ns(&self, k: u64) -> u64 {
        let slot = u128::from(k) * self.threads + self.thread;
        u64::try_from(slot * NS_PER_SEC / self.rate).unwrap_or(u64::MAX)
    }

    /// How many of the thread's requests are due at or before `ns` after the start.
    ///
    /// `due_ns(k) <= ns` ⟺ `slot * 1e9 / rate < ns + 1` ⟺ `slot <= ((ns + 1) * rate - 1) / 1e9`
    /// with `slot = k * threads + thread`.
    pub(crate) fn due_by(&self, ns: u64) -> u64 {
        let last_slot = ((u128::from(ns) + 1) * self.rate - 1) / NS_PER_SEC;
        if last_slot < self.thread {
            return 0;
        }
        u64::try_from((last_slot - self.thread) / self.threads + 1).unwrap_or(u64::MAX)
    }

    /// The first request due at or after `ns`: the first one recorded after a warm-up of `ns`.
    pub(crate) fn first_due_from(&self, ns: u64) -> u64 {
        match ns.checked_sub(1) {
            None => 0,
            Some(before) => self.due_by(before),
        }
    }
}

/// How long a connection waits before it is reopened, after `failures` failures in a row
/// (failed connects, errors, timeouts; a complete response resets it): at once after none
/// (the server closed a healthy connection), then 1, 2, 4, 8 ms, then 10 ms. Never spinning on
/// a server that refuses, never slow to come back to one that recovered.
pub(crate) fn backoff(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => Duration::from_millis((1u64 << (n - 1).min(4)).min(10)),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn threads_interleave_and_keep_the_total_rate() {
        // 1000/s over 4 threads: thread 1's requests at 1, 5, 9 ms.
        let s = Schedule::new(1000, 4, 1);
        assert_eq!(
            [s.due_ns(0), s.due_ns(1), s.due_ns(2)],
            [1_000_000, 5_000_000, 9_000_000]
        );
        let one = Schedule::new(3, 1, 0);
        assert_eq!(one.due_ns(3), 1_000_000_000);
        // Exact at any k: no accumulated rounding.
        assert_eq!(one.due_ns(3_000_000_000), 1_000_000_000 * 1_000_000_000);
        assert_eq!(Schedule::new(10_000_000, 1, 0).due_ns(1), 100);
    }

    #[test]
    fn backoff_starts_at_once_and_is_capped() {
        let ms: Vec<u128> = (0..8).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(ms, [0, 1, 2, 4, 8, 10, 10, 10]);
        assert_eq!(backoff(u32::MAX), Duration::from_millis(10));
    }

    proptest! {
        #[test]
        fn due_by_counts_what_due_ns_schedules(
            rate in 1u64..20_000_000,
            threads in 1usize..64,
            thread_pick in 0usize..64,
            ns in 0u64..5_000_000_000,
        ) {
            let s = Schedule::new(rate, threads, thread_pick % threads);
            let n = s.due_by(ns);
            if n > 0 {
                prop_assert!(s.due_ns(n - 1) <= ns);
            }
            prop_assert!(s.due_ns(n) > ns);
            prop_assert_eq!(s.first_due_from(0), 0);
            let first = s.first_due_from(ns);
            prop_assert!(s.due_ns(first) >= ns);
            if first > 0 {
                prop_assert!(s.due_ns(first - 1) < ns);
            }
        }
    }
}

//! Duet runs (Bulej et al., "Duet Benchmarking: Improving Measurement Accuracy in the Cloud",
//! Empirical Software Engineering 25, 2020): A and B run *at the same time*, one on each of the
//! trial's two pinned CPUs, so an interference burst (a neighbour, a noisy hypervisor tick, a
//! frequency change) hits both; each pair's B/A ratio cancels it. Each two pairs put A once on
//! each CPU, in an order drawn at random, so a CPU that is itself faster or slower favours A and
//! B alike, and no noise with a period of two pairs can line up with one side. (Sides that
//! swapped strictly every pair read a duet A/A as B 3.2% ± 0.7% faster under memory-bandwidth
//! spells on a 2-vCPU VM: the unpinned hog kept following the same side; docs/statistics.md §1c.)
//!
//! The two probe threads meet twice per pair at a [`Rendezvous`]: before starting their
//! commands (so both start within microseconds) and after (so the first thread can read the
//! other's figures and record the pair's ratios). The meeting is two monotonic counters, no
//! lock: the measured path only stores and loads atomics. A thread that stops (its trial's
//! time is up, it was cancelled, its command failed) marks the rendezvous left, and the other
//! stops at its next meeting instead of waiting forever.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Invocation;

/// How long a waiting thread spins before it starts sleeping between looks. The start
/// meeting follows both threads' recording, so it is reached within microseconds and met
/// spinning; the end meeting waits for the slower command, and sleeping there keeps the
/// waiting CPU from heating its neighbour (turbo budgets are shared).
const SPIN: Duration = Duration::from_micros(200);
const NAP: Duration = Duration::from_micros(50);
/// A slot's "no value" (a figure the mode does not count).
const NONE: u64 = u64::MAX;

#[derive(Default)]
struct Slot {
    arrived: AtomicU64,
    wall_ns: AtomicU64,
    cpu_ns: AtomicU64,
    instructions: AtomicU64,
}

/// Where the two threads of one duet trial meet.
pub(super) struct Rendezvous {
    slots: [Slot; 2],
    left: AtomicBool,
    /// Draws which side runs B in each two pairs; the same on both threads.
    seed: u64,
}

impl Rendezvous {
    pub(super) fn new(seed: u64) -> Self {
        Self {
            slots: Default::default(),
            left: AtomicBool::new(false),
            seed,
        }
    }

    /// Which command thread `me` (0 or 1) runs in pair `pair`: true for B. The two threads
    /// always run different commands; in pairs 2k and 2k+1 each thread runs B once, first or
    /// second as `mix(seed ^ k)` draws it.
    pub(super) fn runs_b(&self, me: usize, pair: u64) -> bool {
        let drawn = quietbench_stats::rng::mix(self.seed ^ (pair / 2)) & 1;
        (drawn ^ (pair & 1) ^ me as u64) == 1
    }

    /// Thread `me` (0 or 1) arrives at meeting `phase` (0, 1, 2, ... in order, the same on
    /// both threads) and waits for the other. False when the other has left: stop.
    pub(super) fn meet(&self, me: usize, phase: u64) -> bool {
        self.slots[me].arrived.store(phase + 1, Ordering::Release);
        let other = &self.slots[1 - me];
        let started = Instant::now();
        loop {
            if other.arrived.load(Ordering::Acquire) > phase {
                return true;
            }
            if self.left.load(Ordering::Acquire) {
                // The other may have arrived and left since the check above (its last pair
                // done, its time up): seeing it left, we see its arrival too (it arrives
                // before it leaves), so this meeting still counts.
                return other.arrived.load(Ordering::Acquire) > phase;
            }
            if started.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(NAP);
            }
        }
    }

    /// Publishes this side's figures; the other reads them after the next meeting.
    pub(super) fn publish(&self, me: usize, figures: Invocation) {
        let slot = &self.slots[me];
        slot.wall_ns.store(figures.wall_ns, Ordering::Relaxed);
        slot.cpu_ns.store(figures.cpu_ns, Ordering::Relaxed);
        slot.instructions
            .store(figures.instructions.unwrap_or(NONE), Ordering::Relaxed);
    }

    /// The other side's figures, published before the meeting both have since passed.
    pub(super) fn other(&self, me: usize) -> Invocation {
        let slot = &self.slots[1 - me];
        let instructions = slot.instructions.load(Ordering::Relaxed);
        Invocation {
            wall_ns: slot.wall_ns.load(Ordering::Relaxed),
            cpu_ns: slot.cpu_ns.load(Ordering::Relaxed),
            instructions: (instructions != NONE).then_some(instructions),
        }
    }

    /// This thread stops: the other must not wait for it.
    pub(super) fn leave(&self) {
        self.left.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn each_two_pairs_put_b_once_on_each_thread_in_a_drawn_order() {
        let r = Rendezvous::new(42);
        let mut b_first_on_thread_0 = 0;
        for k in 0..1000 {
            let (p, q) = (2 * k, 2 * k + 1);
            // Never the same command on both threads.
            assert_ne!(r.runs_b(0, p), r.runs_b(1, p));
            assert_ne!(r.runs_b(0, q), r.runs_b(1, q));
            // Each thread runs B once in the two pairs.
            assert_ne!(r.runs_b(0, p), r.runs_b(0, q));
            b_first_on_thread_0 += u32::from(r.runs_b(0, p));
        }
        // The order is drawn, not alternated: about half of the 1000 blocks start with B on
        // thread 0 (binomial sd 16; 400..600 is over 6 sd).
        assert!(
            (400..600).contains(&b_first_on_thread_0),
            "{b_first_on_thread_0}"
        );
        // And another seed draws another order.
        let other = Rendezvous::new(43);
        assert!((0..64).any(|k| r.runs_b(0, 2 * k) != other.runs_b(0, 2 * k)));
    }

    #[test]
    fn two_threads_meet_exchange_figures_and_a_leaver_releases_the_other() {
        let r = Arc::new(Rendezvous::new(0));
        let other = Arc::clone(&r);
        let peer = std::thread::spawn(move || {
            assert!(other.meet(1, 0));
            other.publish(
                1,
                Invocation {
                    wall_ns: 7,
                    cpu_ns: 5,
                    instructions: None,
                },
            );
            assert!(other.meet(1, 1));
            // Then it stops.
            other.leave();
        });
        assert!(r.meet(0, 0));
        r.publish(
            0,
            Invocation {
                wall_ns: 1,
                cpu_ns: 1,
                instructions: Some(3),
            },
        );
        assert!(r.meet(0, 1));
        assert_eq!(
            r.other(0),
            Invocation {
                wall_ns: 7,
                cpu_ns: 5,
                instructions: None
            }
        );
        peer.join().unwrap();
        // The other left: the next meeting does not wait.
        assert!(!r.meet(0, 2));
    }
}

//! Duet runs (Bulej et al., "Duet Benchmarking: Improving Measurement Accuracy in the Cloud",
//! Empirical Software Engineering 25, 2020): A and B run *at the same time*, one on each of the
//! trial's two pinned CPUs, so an interference burst (a neighbour, a noisy hypervisor tick, a
//! frequency change) hits both; each pair's B/A ratio cancels it. Sides swap every pair, so a
//! CPU that is itself faster or slower favours A and B alike.
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
#[derive(Default)]
pub(super) struct Rendezvous {
    slots: [Slot; 2],
    left: AtomicBool,
}

impl Rendezvous {
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

/// Which command thread `me` runs in pair `pair`: true for B. The sides swap every pair.
pub(super) fn runs_b(me: usize, pair: u64) -> bool {
    (pair + me as u64) % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sides_swap_every_pair_and_the_two_threads_never_run_the_same_command() {
        for pair in 0..6 {
            assert_ne!(runs_b(0, pair), runs_b(1, pair));
            assert_ne!(runs_b(0, pair), runs_b(0, pair + 1));
        }
    }

    #[test]
    fn two_threads_meet_exchange_figures_and_a_leaver_releases_the_other() {
        let r = Arc::new(Rendezvous::default());
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

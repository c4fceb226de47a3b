//! The order trials run in: randomized multiple interleaved trials (RMIT). Every round runs
//! every variant once on every host, in a fresh random order per host and round, so slow drift
//! over time (a neighbour arriving, a host warming up) falls on all variants alike instead of on
//! whichever ran later. The seed is recorded, so a run's order can be reproduced.

use std::collections::BTreeMap;

use quietbench_stats::rng::SplitMix64;
use serde::Serialize;

/// One thing to measure: a probe with its parameters, under a name ("A", "B", or the probe's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VariantSpec {
    /// The name reports use.
    pub name: String,
    /// The probe.
    pub probe: String,
    /// Its parameters.
    pub params: BTreeMap<String, String>,
}

/// One trial of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlannedTrial {
    /// Round, from 1; warm-up rounds come first and are numbered too.
    pub round: u32,
    /// True for warm-up rounds: run and stored, left out of summaries and verdicts.
    pub warmup: bool,
    /// Index into the variants.
    pub variant: usize,
    /// Index into the hosts.
    pub host: usize,
}

/// The RMIT schedule: `warmup` rounds then `rounds` rounds; in each, each host runs every
/// variant once, in an order shuffled (Fisher–Yates) afresh for that host and round.
pub fn rmit(
    variants: usize,
    hosts: usize,
    rounds: u32,
    warmup: u32,
    seed: u64,
) -> Vec<PlannedTrial> {
    let mut rng = SplitMix64::new(seed);
    let mut trials = Vec::with_capacity(variants * hosts * (rounds + warmup) as usize);
    for round in 1..=(warmup + rounds) {
        for host in 0..hosts {
            let mut order: Vec<usize> = (0..variants).collect();
            for i in (1..order.len()).rev() {
                let j = rng.below_exact(i as u64 + 1) as usize;
                order.swap(i, j);
            }
            trials.extend(order.into_iter().map(|variant| PlannedTrial {
                round,
                warmup: round <= warmup,
                variant,
                host,
            }));
        }
    }
    trials
}

/// A seed from the clock and the process id, for runs that do not give one.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    quietbench_stats::rng::mix(nanos ^ u64::from(std::process::id()).rotate_left(32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_every_variant_once_per_host() {
        let trials = rmit(3, 2, 5, 1, 42);
        assert_eq!(trials.len(), 3 * 2 * 6);
        for round in 1..=6 {
            for host in 0..2 {
                let mut seen: Vec<usize> = trials
                    .iter()
                    .filter(|t| t.round == round && t.host == host)
                    .map(|t| t.variant)
                    .collect();
                seen.sort_unstable();
                assert_eq!(seen, vec![0, 1, 2]);
            }
        }
        assert!(trials.iter().filter(|t| t.warmup).all(|t| t.round == 1));
    }

    #[test]
    fn the_seed_fixes_the_order_and_orders_vary() {
        assert_eq!(rmit(2, 1, 20, 0, 7), rmit(2, 1, 20, 0, 7));
        assert_ne!(rmit(2, 1, 20, 0, 7), rmit(2, 1, 20, 0, 8));
        // Over many rounds both orders of two variants occur, roughly equally.
        let firsts = rmit(2, 1, 1000, 0, 1)
            .chunks(2)
            .filter(|c| c[0].variant == 0)
            .count();
        assert!(
            (420..580).contains(&firsts),
            "A first in {firsts} of 1000 rounds"
        );
    }

    #[test]
    fn degenerate_sizes_do_not_panic() {
        assert!(rmit(0, 1, 3, 0, 1).is_empty());
        assert!(rmit(2, 0, 3, 0, 1).is_empty());
        assert_eq!(rmit(1, 1, 0, 0, 1).len(), 0);
    }
}

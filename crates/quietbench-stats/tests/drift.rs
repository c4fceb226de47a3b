//! Drift: the instance gets steadily slower during the run (CONTEXT §1: performance drifting
//! over 24 hours). Pairing arms within a round cancels the drift; randomizing their order
//! within the round turns the drift inside a round into symmetric noise. Neither arm may
//! look faster for it.

mod common;

use common::{Scenario, Sim};
use quietbench_stats::{
    Arm, ConfidenceLevel, VerdictConfig, VerdictKind, judge, pair_rounds, paired_t_interval,
};

/// 0.5% slower every round: 40 rounds end 20% slower than they started, ten times the noise.
const DRIFT: f64 = 0.005;

#[test]
fn linear_drift_creates_no_false_difference() {
    let mut sim = Sim::new(4242);
    let mut scenario = Scenario::simple(1, 40, 0.0, 0.005);
    scenario.drift = DRIFT;

    // One run, judged in full.
    let obs = scenario.run(&mut sim);
    let v = judge(&obs, &VerdictConfig::default()).unwrap();
    eprintln!("drift: {v}");
    assert_eq!(v.kind, VerdictKind::NoDifference, "{v}");
    assert!((v.ratio - 1.0).abs() < 0.003, "ratio {}", v.ratio);

    // What an unpaired comparison of the same values would see if B's trials had simply run
    // after A's (blocked order): a 20% "difference" made of drift alone.
    let first_half_a: f64 = (0..20).map(|r| (DRIFT * f64::from(r)).exp()).sum::<f64>();
    let second_half_b: f64 = (20..40).map(|r| (DRIFT * f64::from(r)).exp()).sum::<f64>();
    assert!(second_half_b / first_half_a > 1.09);

    // Many runs: the false-positive rate stays at α (margin as in false_positives.rs: 1000
    // runs, 5% + 1.5 points).
    let mut positives = 0;
    for _ in 0..1000 {
        let paired = pair_rounds(&scenario.run(&mut sim), Arm::A, Arm::B).unwrap();
        let ci = paired_t_interval(&paired, ConfidenceLevel::NINETY_FIVE).unwrap();
        positives += usize::from(ci.low > 1.0 || ci.high < 1.0);
    }
    eprintln!(
        "drift: A/A false-positive rate {:.1}% over 1000",
        positives as f64 / 10.0
    );
    assert!(positives <= 65, "{positives} of 1000");
}

#[test]
fn unrandomized_order_lets_drift_through() {
    // The same drift with A always first in its round: B always runs half a round later and
    // looks DRIFT/2 = 0.25% slower. This is why the scheduler randomizes the order inside a
    // round, and why the statistics assume it.
    let mut sim = Sim::new(7);
    let mut scenario = Scenario::simple(1, 200, 0.0, 0.002);
    scenario.drift = DRIFT;
    scenario.randomize_order = false;
    let paired = pair_rounds(&scenario.run(&mut sim), Arm::A, Arm::B).unwrap();
    let bias = paired.log_ratio().unwrap();
    assert!((bias - DRIFT / 2.0).abs() < 0.0005, "bias {bias}");
    scenario.randomize_order = true;
    let paired = pair_rounds(&scenario.run(&mut sim), Arm::A, Arm::B).unwrap();
    assert!(paired.log_ratio().unwrap().abs() < 0.0005);
}

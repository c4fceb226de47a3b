//! Adaptive stopping under the null: stopping on the interval's width must keep the
//! false-positive rate near α, and stopping on significance must be shown to break it, which is
//! what the rule guards against.

mod common;

use std::time::Duration;

use common::{Scenario, Sim};
use quietbench_stats::{
    Arm, ConfidenceLevel, Decision, PairedRounds, Resamples, StopReason, StoppingRule,
    VerdictConfig, pair_rounds, paired_t_interval,
};

const MAX_ROUNDS: u32 = 60;

/// The first `rounds` rounds of a one-host run.
fn prefix(full: &PairedRounds, rounds: usize) -> PairedRounds {
    let mut p = full.clone();
    p.hosts[0].log_ratios.truncate(rounds);
    p.hosts[0].rounds.truncate(rounds);
    p
}

fn excludes_one(p: &PairedRounds) -> bool {
    let ci = paired_t_interval(p, ConfidenceLevel::NINETY_FIVE).unwrap();
    ci.low > 1.0 || ci.high < 1.0
}

#[test]
fn stopping_on_precision_keeps_the_false_positive_rate_near_alpha() {
    // Value noise 1% → per-round log-ratio SD 1.4%. A ±0.5% target is reached after about 30
    // rounds and ±0.6% mostly at the first look (20): the two regimes where stopping on a
    // spread that ran low matters most.
    const RUNS: usize = 1000;
    let scenario = Scenario::simple(1, MAX_ROUNDS, 0.0, 0.01);
    let mut sim = Sim::new(1234);
    for target in [0.005, 0.006] {
        let rule = StoppingRule::new(target, 20, 5, MAX_ROUNDS, None).unwrap();
        let (mut positives, mut early, mut stop_rounds) = (0, 0, 0);
        for _ in 0..RUNS {
            let full = pair_rounds(&scenario.run(&mut sim), Arm::A, Arm::B).unwrap();
            for n in 1..=MAX_ROUNDS {
                let p = prefix(&full, n as usize);
                let half_width = rule.is_look(n).then(|| {
                    let ci = paired_t_interval(&p, ConfidenceLevel::NINETY_FIVE).unwrap();
                    (ci.high - ci.low) / 2.0
                });
                if let Decision::Stop(reason) = rule.decide(n, Duration::ZERO, half_width) {
                    early += usize::from(matches!(reason, StopReason::PrecisionReached { .. }));
                    stop_rounds += n as usize;
                    positives += usize::from(excludes_one(&p));
                    break;
                }
            }
        }
        let rate = positives as f64 / RUNS as f64;
        eprintln!(
            "precision stopping at ±{:.1}%: {:.1}% false positives, {early} of {RUNS} stopped \
             early, mean {:.1} rounds",
            target * 100.0,
            rate * 100.0,
            stop_rounds as f64 / RUNS as f64
        );
        assert!(early > 100, "the rule should stop early some of the time");
        // Not 5%: stopping when the spread is small selects runs whose spread ran low, and the
        // final interval inherits it. 4000-run simulations of these settings gave 5.4–6.5%
        // (docs/statistics.md). Allowed: that excess (1.5 points) plus the Monte-Carlo margin
        // of false_positives.rs (1.5 points at 1000 runs) — and far from the 29% below.
        assert!(rate <= 0.08, "false-positive rate {rate}");
    }
}

#[test]
fn stopping_on_significance_inflates_false_positives() {
    // The rule the module refuses to be: look after every round from 5 on, stop at the first
    // "significant" interval. Armitage et al. (1969) predict well over 15% for ~55 looks.
    const RUNS: usize = 1000;
    let scenario = Scenario::simple(1, MAX_ROUNDS, 0.0, 0.01);
    let mut sim = Sim::new(1234);
    let mut positives = 0;
    for _ in 0..RUNS {
        let full = pair_rounds(&scenario.run(&mut sim), Arm::A, Arm::B).unwrap();
        positives +=
            usize::from((5..=MAX_ROUNDS as usize).any(|n| excludes_one(&prefix(&full, n))));
    }
    let rate = positives as f64 / RUNS as f64;
    eprintln!(
        "significance stopping: {:.1}% false positives",
        rate * 100.0
    );
    assert!(rate > 0.12, "expected inflation, got {rate}");
}

#[test]
fn decide_observations_runs_the_verdict_on_a_look() {
    let mut sim = Sim::new(3);
    let config = VerdictConfig {
        resamples: Resamples::new(500).unwrap(),
        ..VerdictConfig::default()
    };
    let rule = StoppingRule::new(0.02, 20, 5, MAX_ROUNDS, Some(Duration::from_secs(60))).unwrap();
    let obs = Scenario::simple(1, 20, 0.0, 0.002).run(&mut sim);
    let d = rule
        .decide_observations(&obs, Duration::from_secs(1), &config)
        .unwrap();
    assert!(
        matches!(d, Decision::Stop(StopReason::PrecisionReached { .. })),
        "{d:?}"
    );
    let few = Scenario::simple(1, 19, 0.0, 0.002).run(&mut sim);
    let d = rule
        .decide_observations(&few, Duration::from_secs(1), &config)
        .unwrap();
    assert_eq!(d, Decision::Continue);
    let d = rule
        .decide_observations(&few, Duration::from_secs(61), &config)
        .unwrap();
    assert!(matches!(
        d,
        Decision::Stop(StopReason::TimeBudgetSpent { .. })
    ));
}

#[test]
fn rounds_count_per_host() {
    // Three hosts × 20 rounds is 20 rounds, not 60: a budget of 60 is not yet spent, and 20 is
    // the first look.
    let mut sim = Sim::new(4);
    let config = VerdictConfig {
        resamples: Resamples::new(300).unwrap(),
        ..VerdictConfig::default()
    };
    let rule = StoppingRule::new(1e-6, 20, 5, MAX_ROUNDS, None).unwrap();
    let obs = Scenario::simple(3, 20, 0.0, 0.01).run(&mut sim);
    let d = rule
        .decide_observations(&obs, Duration::ZERO, &config)
        .unwrap();
    assert_eq!(d, Decision::Continue);
    let obs = Scenario::simple(3, MAX_ROUNDS, 0.0, 0.01).run(&mut sim);
    let d = rule
        .decide_observations(&obs, Duration::ZERO, &config)
        .unwrap();
    assert_eq!(
        d,
        Decision::Stop(StopReason::RoundBudgetSpent { rounds: MAX_ROUNDS })
    );
}

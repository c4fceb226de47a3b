//! A/A comparisons: identical arms must be called different at most α of the time.
//!
//! Monte-Carlo margin: with n comparisons a true rate of 5% is observed with standard error
//! √(0.05 · 0.95 / n), 0.69 percentage points at n = 1000. The tests allow 5% plus about two
//! standard errors (1.5 points at n = 1000, 0.9 points at n = 5000): a procedure whose true rate
//! is 5% passes with probability ≈ 98%, one at 7.5% (the level of a t-test fooled by
//! dependence) fails with probability > 99%. The seeds are fixed, so each test is deterministic.

mod common;

use common::{Scenario, Sim, mc_se};
use quietbench_stats::{
    Arm, ConfidenceLevel, Resamples, Seed, VerdictConfig, VerdictKind, hierarchical_ratio_interval,
    judge, pair_rounds, paired_t_interval,
};

/// The designs the A/A loops cycle through: (label, scenario builder).
fn designs(sim: &mut Sim) -> Vec<(&'static str, Scenario)> {
    let mut spiky = Scenario::simple(1, 40, 0.0, 0.005);
    spiky.spike_rate = 0.05;
    spiky.spike = 0.2;
    let mut fleet = Scenario::simple(12, 5, 0.0, 0.007).with_host_spread(sim, 0.03, 0.0);
    fleet.spike_rate = 0.03;
    fleet.spike = 0.15;
    vec![
        (
            "1 host × 5 rounds (the minimum)",
            Scenario::simple(1, 5, 0.0, 0.01),
        ),
        ("1 host × 10 rounds", Scenario::simple(1, 10, 0.0, 0.01)),
        ("1 host × 40 rounds, 5% spikes of +20%", spiky),
        (
            // A null on the fleet average: B helps on some hosts and hurts on others (SD 0.5%).
            "6 hosts × 8 rounds, host offsets 2%, host×arm 0.5%",
            Scenario::simple(6, 8, 0.0, 0.01).with_host_spread(sim, 0.02, 0.005),
        ),
        ("12 hosts × 5 rounds, offsets 3%, 3% spikes", fleet),
    ]
}

#[test]
fn verdict_false_positive_rate_is_at_most_alpha() {
    const COMPARISONS: usize = 1000;
    let mut sim = Sim::new(20_240_501);
    let config = VerdictConfig {
        resamples: Resamples::new(400).unwrap(),
        ..VerdictConfig::default()
    };
    let mut per_design = [(0usize, 0usize); 5];
    let mut positives = 0;
    for i in 0..COMPARISONS {
        // New host offsets each time, so the fleet designs do not reuse one fleet.
        let (_, scenario) = designs(&mut sim).swap_remove(i % 5);
        let obs = scenario.run(&mut sim);
        let config = VerdictConfig {
            seed: Seed(sim.seed()),
            ..config
        };
        let v = judge(&obs, &config).unwrap();
        let hit = v.kind != VerdictKind::NoDifference;
        positives += usize::from(hit);
        per_design[i % 5].0 += usize::from(hit);
        per_design[i % 5].1 += 1;
    }
    let rate = positives as f64 / COMPARISONS as f64;
    let labels: Vec<&str> = designs(&mut Sim::new(0)).iter().map(|d| d.0).collect();
    for ((hits, n), label) in per_design.iter().zip(labels) {
        eprintln!("A/A verdict, {label}: {hits}/{n} called different");
    }
    eprintln!(
        "A/A verdict false-positive rate {:.2}% over {COMPARISONS} (MC SE {:.2} pp)",
        rate * 100.0,
        mc_se(0.05, COMPARISONS) * 100.0
    );
    assert!(rate <= 0.05 + 0.015, "false-positive rate {rate}");
}

#[test]
fn paired_t_false_positive_rate_is_alpha() {
    // The analytic interval over many more comparisons: exact for normal noise, so the rate
    // should sit at 5% within Monte-Carlo error, neither above (anti-conservative) nor far below.
    const COMPARISONS: usize = 5000;
    let mut sim = Sim::new(77);
    let mut positives = 0;
    for i in 0..COMPARISONS {
        let (_, scenario) = designs(&mut sim).swap_remove([0, 1, 3][i % 3]);
        let paired = pair_rounds(&scenario.run(&mut sim), Arm::A, Arm::B).unwrap();
        let ci = paired_t_interval(&paired, ConfidenceLevel::NINETY_FIVE).unwrap();
        positives += usize::from(ci.low > 1.0 || ci.high < 1.0);
    }
    let rate = positives as f64 / COMPARISONS as f64;
    eprintln!(
        "A/A paired-t false-positive rate {:.2}% over {COMPARISONS}",
        rate * 100.0
    );
    assert!(rate <= 0.05 + 0.009, "false-positive rate {rate}");
    assert!(rate >= 0.05 - 0.009, "interval too wide: rate {rate}");
}

#[test]
fn bootstrap_and_t_intervals_agree_on_sample_data() {
    // The cheap analytic interval stands in for the bootstrap only if the two agree where both
    // apply: normal noise, one host (rounds are the unit) and a fleet (hosts are the unit).
    let mut sim = Sim::new(5);
    let level = ConfidenceLevel::NINETY_FIVE;
    let one = Scenario::simple(1, 40, 0.01, 0.01);
    let fleet = Scenario::simple(10, 10, 0.01, 0.01).with_host_spread(&mut sim, 0.02, 0.004);
    for (label, scenario, tolerance) in [("one host", one, 0.10), ("ten hosts", fleet, 0.15)] {
        let paired = pair_rounds(&scenario.run(&mut sim), Arm::A, Arm::B).unwrap();
        let t = paired_t_interval(&paired, level).unwrap();
        let printed =
            hierarchical_ratio_interval(&paired, Resamples::DEFAULT, level, Seed(9)).unwrap();
        // Like the t interval, the bootstrap before the serial-correlation correction takes
        // the rounds as independent; the correction, which widens the interval whenever the
        // rounds' estimated serial correlation is positive (half the time on independent
        // rounds; here ρ̂ = 0.18 on one host), is measured in tests/coverage.rs.
        let (b_low, b_high) = printed.if_independent;
        assert!(printed.low <= b_low && printed.high >= b_high);
        let t_half = (t.high.ln() - t.low.ln()) / 2.0;
        let b_half = (b_high.ln() - b_low.ln()) / 2.0;
        eprintln!(
            "{label}: t [{:.5}, {:.5}], bootstrap [{b_low:.5}, {b_high:.5}], half-width ratio \
             {:.3}; serial correlation {:?}, printed [{:.5}, {:.5}]",
            t.low,
            t.high,
            b_half / t_half,
            printed.serial_correlation,
            printed.low,
            printed.high
        );
        assert!((printed.ratio - t.point).abs() < 1e-12);
        // Never narrower than the t interval; wider by at most the tolerance (the two-level
        // resampling counts round noise twice, see hierarchical.rs).
        assert!(
            b_half >= t_half * 0.98,
            "{label}: bootstrap narrower than t"
        );
        assert!(
            b_half <= t_half * (1.0 + tolerance),
            "{label}: bootstrap too wide"
        );
        assert!((b_low.ln() - t.low.ln()).abs() < tolerance * t_half + 0.02 * t_half);
    }
}

//! Power: an effect twice the reported minimum detectable effect must be detected at least 95%
//! of the time, and the MDE formula must mean what it says (80% power at the MDE).
//!
//! Monte-Carlo margins: 300 runs at a true power p ≥ 0.99 have SE ≤ 0.6 points, so "≥ 95%"
//! fails only for a real shortfall; 2000 runs at p = 0.8 have SE 0.9 points, and the ±4-point
//! band is ≈ 4.5 SE.

mod common;

use common::{Scenario, Sim, mc_se};
use quietbench_stats::{
    Arm, ConfidenceLevel, Design, Noise, Resamples, Seed, VerdictConfig, VerdictKind, judge,
    minimum_detectable_effect, pair_rounds, paired_t_interval,
};

#[test]
fn twice_the_reported_mde_is_detected_at_least_95_percent_of_the_time() {
    const RUNS: usize = 300;
    let mut sim = Sim::new(31_337);
    let config = VerdictConfig {
        resamples: Resamples::new(400).unwrap(),
        ..VerdictConfig::default()
    };
    let one_host = Scenario::simple(1, 20, 0.0, 0.01);
    let fleet = Scenario::simple(8, 10, 0.0, 0.01).with_host_spread(&mut sim, 0.03, 0.003);
    for (label, base) in [
        ("1 host × 20 rounds", one_host),
        ("8 hosts × 10 rounds", fleet),
    ] {
        // The MDE a user would be shown after an A/A pilot of this design.
        let pilot = judge(&base.run(&mut sim), &config).unwrap();
        let mut rates = [0.0; 2];
        for (multiple, rate) in [1.0, 2.0].into_iter().zip(&mut rates) {
            let effect = -multiple * pilot.mde.ln_1p(); // B faster by a multiple of the MDE
            let scenario = Scenario {
                effect,
                ..base.clone()
            };
            let mut detected = 0;
            for _ in 0..RUNS {
                let config = VerdictConfig {
                    seed: Seed(sim.seed()),
                    ..config
                };
                let v = judge(&scenario.run(&mut sim), &config).unwrap();
                detected += usize::from(v.kind == VerdictKind::BFaster);
            }
            *rate = detected as f64 / RUNS as f64;
            eprintln!(
                "{label}: reported MDE {:.3}%, effect {multiple}×MDE: detected {:.1}% of {RUNS} \
                 (MC SE {:.1} pp)",
                pilot.mde * 100.0,
                *rate * 100.0,
                mc_se(rate.clamp(0.01, 0.99), RUNS) * 100.0
            );
        }
        assert!(
            rates[1] >= 0.95,
            "{label}: power {} at twice the MDE",
            rates[1]
        );
        // At the MDE itself power should be near the stated 80%; the pilot's MDE is itself an
        // estimate from one run, so only a gross error (an MDE off by half) fails this.
        assert!(
            (0.5..=0.98).contains(&rates[0]),
            "{label}: power {} at the MDE",
            rates[0]
        );
    }
}

#[test]
fn the_mde_formula_gives_its_stated_power() {
    // 1 host × 20 rounds, value noise 1% → per-round log-ratio SD 1.414%. At an effect equal to
    // the analytic MDE, the paired t interval should exclude 1 in 80% of runs.
    const RUNS: usize = 2000;
    let mut sim = Sim::new(8);
    let noise = Noise {
        within_host_sd: 0.01 * 2f64.sqrt(),
        between_host_sd: 0.0,
    };
    let design = Design {
        rounds_per_host: 20,
        hosts: 1,
    };
    let level = ConfidenceLevel::NINETY_FIVE;
    let mde = minimum_detectable_effect(noise, design, level, 0.8).unwrap();
    let scenario = Scenario::simple(1, 20, mde.log, 0.01);
    let mut detected = 0;
    for _ in 0..RUNS {
        let paired = pair_rounds(&scenario.run(&mut sim), Arm::A, Arm::B).unwrap();
        let ci = paired_t_interval(&paired, level).unwrap();
        detected += usize::from(ci.low > 1.0);
    }
    let rate = detected as f64 / RUNS as f64;
    eprintln!(
        "analytic MDE {:.3}%: paired t detects {:.1}% of {RUNS}",
        mde.relative * 100.0,
        rate * 100.0
    );
    assert!((rate - 0.8).abs() <= 0.04, "power at the MDE {rate}");
}

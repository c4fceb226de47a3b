//! Two stored runs compared without pairing: Welch's interval on log values must keep its
//! promises on simulated samples with a known truth: at most α false positives when the runs
//! do not differ (also with unequal sizes and spreads, Welch's reason to exist), and detection
//! of an effect twice the reported MDE at least 95% of the time.
//!
//! Monte-Carlo margins as in false_positives.rs: 3000 comparisons at a true 5% have SE 0.4
//! points; the test allows 5% + 1 point.

mod common;

use common::{Sim, mc_se};
use quietbench_stats::{ConfidenceLevel, unpaired_ratio};

fn sample(sim: &mut Sim, n: usize, log_center: f64, sd: f64) -> Vec<f64> {
    (0..n)
        .map(|_| (log_center + sd * sim.normal()).exp())
        .collect()
}

#[test]
fn unpaired_false_positive_rate_is_at_most_alpha() {
    const COMPARISONS: usize = 3000;
    let mut sim = Sim::new(77_001);
    // (baseline units, candidate units, baseline SD, candidate SD)
    let designs = [
        (5, 5, 0.01, 0.01),
        (10, 30, 0.02, 0.005),
        (3, 8, 0.01, 0.03),
    ];
    let mut positives = 0;
    for i in 0..COMPARISONS {
        let (nx, ny, sx, sy) = designs[i % designs.len()];
        let (x, y) = (sample(&mut sim, nx, 4.0, sx), sample(&mut sim, ny, 4.0, sy));
        let r = unpaired_ratio(&x, &y, "trials", ConfidenceLevel::NINETY_FIVE, 0.8).unwrap();
        positives += usize::from(r.ci_low > 1.0 || r.ci_high < 1.0);
    }
    let rate = positives as f64 / COMPARISONS as f64;
    eprintln!(
        "unpaired A/A false-positive rate {:.2}% over {COMPARISONS} (MC SE {:.2} pp)",
        rate * 100.0,
        mc_se(0.05, COMPARISONS) * 100.0
    );
    assert!(rate <= 0.06, "false-positive rate {rate}");
    assert!(
        rate >= 0.03,
        "a 95% interval that almost never misses is too wide: {rate}"
    );
}

#[test]
fn twice_the_reported_mde_is_detected_at_least_95_percent_of_the_time() {
    const RUNS: usize = 500;
    let mut sim = Sim::new(77_002);
    let (n, sd) = (10, 0.01);
    // The MDE a user is shown after an A/A pilot of this design.
    let pilot = unpaired_ratio(
        &sample(&mut sim, n, 4.0, sd),
        &sample(&mut sim, n, 4.0, sd),
        "trials",
        ConfidenceLevel::NINETY_FIVE,
        0.8,
    )
    .unwrap();
    let effect = 2.0 * pilot.mde.ln_1p();
    let detected = (0..RUNS)
        .filter(|_| {
            let x = sample(&mut sim, n, 4.0, sd);
            let y = sample(&mut sim, n, 4.0 + effect, sd);
            let r = unpaired_ratio(&x, &y, "trials", ConfidenceLevel::NINETY_FIVE, 0.8).unwrap();
            r.ci_low > 1.0
        })
        .count();
    let rate = detected as f64 / RUNS as f64;
    eprintln!(
        "pilot MDE {:.3}%, effect 2×MDE: detected {:.1}% of {RUNS}",
        pilot.mde * 100.0,
        rate * 100.0
    );
    assert!(rate >= 0.95, "power at 2×MDE {rate}");
}

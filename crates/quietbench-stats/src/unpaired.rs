//! Two samples that were not interleaved: two stored runs, measured at different times.
//!
//! Without pairing nothing cancels what drifts between the runs (the day, the instance, the
//! neighbours: CONTEXT §1's ~5%), so this answers a weaker question than a paired verdict: do
//! the two runs' values differ by more than their own scatter explains? The interval is
//! Welch's (Welch, "The generalization of Student's problem when several different population
//! variances are involved", Biometrika 34, 1947) on log values, so the ratio's interval is
//! symmetric on the log scale as the paired one is, with Welch–Satterthwaite degrees of
//! freedom. Units must be independent: trials when each run has one host, host means when a
//! run has several (rounds on one host share its drift and are not independent draws of the
//! fleet, the same reasoning as [`crate::hierarchical`]).

use serde::Serialize;

use crate::bootstrap::ConfidenceLevel;
use crate::dist::student_t_quantile;
use crate::error::StatsError;
use crate::robust::{mean_unchecked, variance_unchecked};

/// Fewest units per side: with fewer, a sample variance is a guess.
pub const MIN_UNITS: usize = 3;

/// The candidate / baseline ratio of two independent samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UnpairedRatio {
    /// exp(mean log candidate − mean log baseline): the ratio of geometric means.
    pub ratio: f64,
    /// Lower end of the interval.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// Smallest relative difference detected with the requested power at this scatter.
    pub mde: f64,
    /// Standard error of the log-ratio.
    pub se_log: f64,
    /// The pooled standard deviation of one unit's log value around its run's mean (for host
    /// units, the between-host SD the interval used): what [`units_needed`] plans with.
    pub unit_sd_log: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Baseline units.
    pub baseline_units: usize,
    /// Candidate units.
    pub candidate_units: usize,
    /// Confidence level.
    pub level: ConfidenceLevel,
}

/// Welch's interval for candidate / baseline from positive values, one per independent unit.
/// `unit` names the units in errors ("trials" or "hosts"); `power` is the power at which the
/// minimum detectable effect is quoted.
pub fn unpaired_ratio(
    baseline: &[f64],
    candidate: &[f64],
    unit: &'static str,
    level: ConfidenceLevel,
    power: f64,
) -> Result<UnpairedRatio, StatsError> {
    if !(power > 0.0 && power < 1.0) {
        return Err(StatsError::InvalidPower(power));
    }
    let logs = |side: &'static str, values: &[f64]| -> Result<Vec<f64>, StatsError> {
        if values.len() < MIN_UNITS {
            return Err(StatsError::TooFewUnits {
                side,
                unit,
                have: values.len(),
                need: MIN_UNITS,
            });
        }
        values
            .iter()
            .enumerate()
            .map(|(index, &value)| {
                if !value.is_finite() {
                    Err(StatsError::NonFinite {
                        what: "unpaired value",
                        index,
                        value,
                    })
                } else if value <= 0.0 {
                    Err(StatsError::NonPositive {
                        what: "unpaired value",
                        index,
                        value,
                    })
                } else {
                    Ok(value.ln())
                }
            })
            .collect()
    };
    let (x, y) = (logs("baseline", baseline)?, logs("candidate", candidate)?);
    let (nx, ny) = (x.len() as f64, y.len() as f64);
    let (vx, vy) = (
        variance_unchecked(&x).unwrap_or(0.0) / nx,
        variance_unchecked(&y).unwrap_or(0.0) / ny,
    );
    let d = mean_unchecked(&y) - mean_unchecked(&x);
    let pooled = (vx * nx * (nx - 1.0) + vy * ny * (ny - 1.0)) / (nx + ny - 2.0);
    let se = (vx + vy).sqrt();
    // Welch–Satterthwaite; with no scatter at all the interval is a point and df is moot.
    let df = if vx + vy > 0.0 {
        (vx + vy).powi(2) / (vx * vx / (nx - 1.0) + vy * vy / (ny - 1.0))
    } else {
        nx + ny - 2.0
    };
    let t_crit = student_t_quantile(1.0 - level.alpha() / 2.0, df);
    let t_power = student_t_quantile(power, df);
    Ok(UnpairedRatio {
        ratio: d.exp(),
        ci_low: (d - t_crit * se).exp(),
        ci_high: (d + t_crit * se).exp(),
        mde: ((t_crit + t_power) * se).exp_m1(),
        se_log: se,
        unit_sd_log: pooled.max(0.0).sqrt(),
        df,
        baseline_units: x.len(),
        candidate_units: y.len(),
        level,
    })
}

/// Units (hosts) each of two runs needs for a difference of `target` (relative, 0.02 = 2%)
/// to be detected with `power`, when one unit's log value scatters with SD `unit_sd_log`:
/// the smallest n with (t(1−α/2) + t(power)) · sd · √(2/n) ≤ ln(1 + target), df = 2n − 2.
/// `None` when a million units do not suffice.
pub fn units_needed(
    unit_sd_log: f64,
    target: f64,
    level: ConfidenceLevel,
    power: f64,
) -> Result<Option<u32>, StatsError> {
    if !(target > 0.0 && target.is_finite()) {
        return Err(StatsError::InvalidParameter {
            what: "target MDE",
            value: target,
            why: "a relative effect > 0, e.g. 0.02 for 2%",
        });
    }
    if !(power > 0.0 && power < 1.0) {
        return Err(StatsError::InvalidPower(power));
    }
    let goal = target.ln_1p();
    let enough = |n: u32| {
        let df = 2.0 * f64::from(n) - 2.0;
        let t = student_t_quantile(1.0 - level.alpha() / 2.0, df) + student_t_quantile(power, df);
        t * unit_sd_log * (2.0 / f64::from(n)).sqrt() <= goal
    };
    const CAP: u32 = 1_000_000;
    if !enough(CAP) {
        return Ok(None);
    }
    // The MDE only falls as n grows: bisect.
    let (mut lo, mut hi) = (MIN_UNITS as u32, CAP);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if enough(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_ratio_with_a_textbook_interval() {
        // Equal sizes and spreads: Welch's df is 2n − 2 and the interval is Student's.
        let a = [100.0, 102.0, 98.0, 101.0, 99.0];
        let b: Vec<f64> = a.iter().map(|v| v * 1.05).collect();
        let r = unpaired_ratio(&a, &b, "trials", ConfidenceLevel::NINETY_FIVE, 0.8).unwrap();
        assert!((r.ratio - 1.05).abs() < 1e-12);
        assert!((r.df - 8.0).abs() < 1e-9, "{}", r.df);
        let x: Vec<f64> = a.iter().map(|v: &f64| v.ln()).collect();
        let se = (2.0 * variance_unchecked(&x).unwrap() / 5.0).sqrt();
        let t = student_t_quantile(0.975, 8.0);
        assert!((r.ci_low - (1.05f64.ln() - t * se).exp()).abs() < 1e-12);
        assert!(r.ci_low > 1.0 && r.mde > 0.0 && r.mde < 0.05, "{r:?}");
        // Equal spreads: the pooled SD is each side's own.
        assert!((r.unit_sd_log - variance_unchecked(&x).unwrap().sqrt()).abs() < 1e-12);
    }

    #[test]
    fn units_needed_meets_the_target_and_one_fewer_does_not() {
        let l = ConfidenceLevel::NINETY_FIVE;
        let sd = 0.02;
        let n = units_needed(sd, 0.02, l, 0.8).unwrap().unwrap();
        // The textbook answer with normal quantiles is 2 · (1.96 + 0.84)² · (0.02 / ln 1.02)²
        // ≈ 16.3; Student's t asks for a little more.
        assert!((17..=19).contains(&n), "{n}");
        let mde = |n: u32| {
            let df = 2.0 * f64::from(n) - 2.0;
            let t = student_t_quantile(0.975, df) + student_t_quantile(0.8, df);
            (t * sd * (2.0 / f64::from(n)).sqrt()).exp_m1()
        };
        assert!(mde(n) <= 0.02 && mde(n - 1) > 0.02);
        assert_eq!(units_needed(0.0, 0.02, l, 0.8).unwrap(), Some(3));
        assert!(units_needed(sd, 0.0, l, 0.8).is_err());
        assert_eq!(units_needed(10.0, 1e-6, l, 0.8).unwrap(), None);
    }

    #[test]
    fn refuses_small_or_bad_samples_with_reasons() {
        let l = ConfidenceLevel::NINETY_FIVE;
        let e = unpaired_ratio(&[1.0, 2.0], &[1.0, 2.0, 3.0], "hosts", l, 0.8).unwrap_err();
        assert!(
            e.to_string().contains("at least 3 hosts in the baseline"),
            "{e}"
        );
        assert!(e.to_string().contains("run 1 more"), "{e}");
        let e = unpaired_ratio(&[1.0, 2.0, 0.0], &[1.0, 2.0, 3.0], "trials", l, 0.8).unwrap_err();
        assert!(matches!(e, StatsError::NonPositive { index: 2, .. }), "{e}");
        let e = unpaired_ratio(&[1.0; 3], &[1.0, f64::NAN, 3.0], "trials", l, 0.8).unwrap_err();
        assert!(matches!(e, StatsError::NonFinite { index: 1, .. }), "{e}");
        assert!(unpaired_ratio(&[1.0; 3], &[1.0; 3], "trials", l, 1.0).is_err());
    }

    #[test]
    fn identical_constant_samples_give_a_point() {
        let r = unpaired_ratio(
            &[5.0; 4],
            &[5.0; 4],
            "trials",
            ConfidenceLevel::NINETY_FIVE,
            0.8,
        )
        .unwrap();
        assert_eq!((r.ratio, r.ci_low, r.ci_high, r.mde), (1.0, 1.0, 1.0, 0.0));
    }
}

//! Whether an A/B change differs between groups of hosts (CPU models): a change 3% faster on
//! one model and 0% on another is an interaction, and a pooled verdict would average it away.
//!
//! Each group's verdict stands on its own hosts, so the two estimates are independent. The
//! ratio of their B/A ratios has, on the log scale, the standard error √(se₁² + se₂²), each se
//! recovered from its group's interval as (ln high − ln low) / (2 z) at that interval's level
//! (the verdict's intervals are near symmetric in log, being bootstrapped on log-ratios).
//! The normal approximation is the usual test of a difference between two independent
//! estimates (Altman & Bland, "Interaction revisited: the difference between two estimates",
//! BMJ 326, 2003).

use serde::Serialize;

use crate::bootstrap::ConfidenceLevel;
use crate::dist::normal_quantile;
use crate::error::StatsError;

/// A group's B/A ratio and its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupRatio {
    /// B / A.
    pub ratio: f64,
    /// Lower end of its interval.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// The interval's level.
    pub level: ConfidenceLevel,
}

/// The second group's B/A over the first's, with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioDifference {
    /// second.ratio / first.ratio.
    pub ratio: f64,
    /// Lower end of the interval.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// Confidence level.
    pub level: ConfidenceLevel,
    /// The interval excludes 1: the change differs between the groups.
    pub differs: bool,
}

/// How the second group's change differs from the first's, at `level`.
pub fn ratio_difference(
    first: GroupRatio,
    second: GroupRatio,
    level: ConfidenceLevel,
) -> Result<RatioDifference, StatsError> {
    let se = |g: &GroupRatio| -> Result<f64, StatsError> {
        for (what, v) in [
            ("group ratio", g.ratio),
            ("group interval low", g.ci_low),
            ("group interval high", g.ci_high),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(StatsError::InvalidParameter {
                    what,
                    value: v,
                    why: "ratios and their intervals are positive numbers",
                });
            }
        }
        if g.ci_low > g.ci_high {
            return Err(StatsError::InvalidParameter {
                what: "group interval low",
                value: g.ci_low,
                why: "the interval's low end is above its high end",
            });
        }
        let z = normal_quantile(0.5 + g.level.get() / 2.0);
        Ok((g.ci_high.ln() - g.ci_low.ln()) / (2.0 * z))
    };
    let (se1, se2) = (se(&first)?, se(&second)?);
    let d = second.ratio.ln() - first.ratio.ln();
    let half = normal_quantile(0.5 + level.get() / 2.0) * (se1 * se1 + se2 * se2).sqrt();
    let (ci_low, ci_high) = ((d - half).exp(), (d + half).exp());
    Ok(RatioDifference {
        ratio: d.exp(),
        ci_low,
        ci_high,
        level,
        differs: ci_low > 1.0 || ci_high < 1.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(ratio: f64, half_pct: f64) -> GroupRatio {
        let h = (half_pct / 100.0_f64).ln_1p();
        GroupRatio {
            ratio,
            ci_low: ratio * (-h).exp(),
            ci_high: ratio * h.exp(),
            level: ConfidenceLevel::NINETY_FIVE,
        }
    }

    #[test]
    fn three_percent_on_one_model_and_none_on_the_other_is_an_interaction() {
        let d = ratio_difference(
            group(0.97, 0.5),
            group(1.0, 0.5),
            ConfidenceLevel::NINETY_FIVE,
        )
        .unwrap();
        assert!((d.ratio - 1.0 / 0.97).abs() < 1e-12);
        // Half-widths of 0.5% each combine to √2 · 0.5% ≈ 0.71%.
        let half = (d.ci_high / d.ratio).ln();
        assert!(
            (half - 2f64.sqrt() * 0.005_f64.ln_1p()).abs() < 1e-4,
            "{d:?}"
        );
        assert!(d.differs);
    }

    #[test]
    fn a_change_alike_within_the_intervals_is_not() {
        let d = ratio_difference(
            group(0.97, 1.0),
            group(0.975, 1.0),
            ConfidenceLevel::NINETY_FIVE,
        )
        .unwrap();
        assert!(!d.differs, "{d:?}");
        assert!(d.ci_low < 1.0 && d.ci_high > 1.0);
    }

    #[test]
    fn nonsense_intervals_are_refused() {
        let mut bad = group(0.97, 1.0);
        bad.ci_low = 0.0;
        assert!(ratio_difference(bad, group(1.0, 1.0), ConfidenceLevel::NINETY_FIVE).is_err());
        let mut upside_down = group(0.97, 1.0);
        std::mem::swap(&mut upside_down.ci_low, &mut upside_down.ci_high);
        assert!(
            ratio_difference(group(1.0, 1.0), upside_down, ConfidenceLevel::NINETY_FIVE).is_err()
        );
    }
}

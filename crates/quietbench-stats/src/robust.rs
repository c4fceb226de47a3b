//! Robust location and spread: median, MAD, trimmed mean and sample quantiles.
//!
//! Cloud timings have heavy right tails (a neighbour's burst, a page-cache miss); the mean and
//! the standard deviation follow every spike, the median and the MAD do not. All functions here
//! refuse NaN and infinities with an error instead of quietly dropping them (contrast
//! [`crate::summarize`], which is a display helper), and report an overflow error where finite
//! inputs near `f64::MAX` would produce an infinite result.

use crate::error::{StatsError, check_sample, finite_result};

/// Scale factor that makes the MAD a consistent estimator of the standard deviation for normal
/// data: 1 / Φ⁻¹(3/4).
pub const MAD_NORMAL_SCALE: f64 = 1.482_602_218_505_602;

/// Arithmetic mean, safe against overflow of the running sum.
pub fn mean(values: &[f64]) -> Result<f64, StatsError> {
    check_sample("mean", values)?;
    Ok(mean_unchecked(values))
}

/// Mean of finite, non-empty values. Sums directly, and only when that overflows falls back to
/// summing `x / n`, which cannot overflow because every term is at most max|x| / n.
pub(crate) fn mean_unchecked(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let sum: f64 = values.iter().sum();
    if sum.is_finite() {
        sum / n
    } else {
        values.iter().map(|v| v / n).sum()
    }
}

/// Sample variance (n − 1 denominator) of finite values; `None` below two values. May be
/// infinite for values near `f64::MAX`; callers check.
pub(crate) fn variance_unchecked(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let m = mean_unchecked(values);
    let ss: f64 = values.iter().map(|v| (v - m) * (v - m)).sum();
    Some(ss / (values.len() - 1) as f64)
}

/// Sample standard deviation (n − 1 denominator); `None` below two values.
pub fn stdev(values: &[f64]) -> Result<Option<f64>, StatsError> {
    check_sample("standard deviation", values)?;
    variance_unchecked(values)
        .map(|v| finite_result("standard deviation", v.sqrt()))
        .transpose()
}

/// Median: the middle value, or the mean of the two middle values for an even count.
pub fn median(values: &[f64]) -> Result<f64, StatsError> {
    check_sample("median", values)?;
    let sorted = sorted(values);
    Ok(median_of_sorted(&sorted))
}

/// Median absolute deviation from the median, unscaled. Multiply by [`MAD_NORMAL_SCALE`] to
/// estimate a standard deviation.
pub fn mad(values: &[f64]) -> Result<f64, StatsError> {
    check_sample("MAD", values)?;
    let med = median_of_sorted(&sorted(values));
    let deviations: Vec<f64> = values.iter().map(|v| (v - med).abs()).collect();
    finite_result("MAD", median_of_sorted(&sorted(&deviations)))
}

/// Mean after dropping `floor(trim · n)` values from each end; `trim` in [0, 0.5). A trim of 0
/// is the mean; a trim approaching 0.5 approaches the median.
pub fn trimmed_mean(values: &[f64], trim: f64) -> Result<f64, StatsError> {
    if !(0.0..0.5).contains(&trim) {
        return Err(StatsError::InvalidTrim(trim));
    }
    check_sample("trimmed mean", values)?;
    let sorted = sorted(values);
    let cut = (trim * sorted.len() as f64).floor() as usize;
    // trim < 0.5 guarantees 2·cut < n, so at least one value remains.
    Ok(mean_unchecked(&sorted[cut..sorted.len() - cut]))
}

/// Sample quantile at probability `p`, Hyndman & Fan type 7 (the default of R and NumPy): linear
/// interpolation between order statistics at position (n − 1)·p.
pub fn quantile(values: &[f64], p: f64) -> Result<f64, StatsError> {
    if !(0.0..=1.0).contains(&p) {
        return Err(StatsError::InvalidProbability(p));
    }
    check_sample("quantile", values)?;
    Ok(quantile_of_sorted(&sorted(values), p))
}

/// Several type-7 quantiles with one sort.
pub fn quantiles(values: &[f64], ps: &[f64]) -> Result<Vec<f64>, StatsError> {
    if let Some(&p) = ps.iter().find(|p| !(0.0..=1.0).contains(*p)) {
        return Err(StatsError::InvalidProbability(p));
    }
    check_sample("quantile", values)?;
    let sorted = sorted(values);
    Ok(ps.iter().map(|&p| quantile_of_sorted(&sorted, p)).collect())
}

/// A sorted copy (total order; callers have rejected NaN already).
pub(crate) fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Median of sorted, non-empty values. The even case averages as a/2 + b/2 so that two values
/// near `f64::MAX` do not overflow.
pub(crate) fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        midpoint(sorted[n / 2 - 1], sorted[n / 2])
    }
}

/// Type-7 quantile of sorted, non-empty values, `p` in [0, 1].
pub(crate) fn quantile_of_sorted(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let j = (h.floor() as usize).min(sorted.len() - 1);
    let g = h - j as f64;
    if g == 0.0 || j + 1 >= sorted.len() {
        return sorted[j];
    }
    let (lo, hi) = (sorted[j], sorted[j + 1]);
    // (1 − g)·lo + g·hi rather than lo + g·(hi − lo): the difference can overflow for values of
    // opposite sign near f64::MAX, the weighted sum cannot. Clamp away rounding outside [lo, hi].
    ((1.0 - g) * lo + g * hi).clamp(lo, hi)
}

/// (a + b) / 2 without overflow, for a ≤ b.
fn midpoint(a: f64, b: f64) -> f64 {
    let m = a + (b - a) / 2.0;
    if m.is_finite() {
        m.clamp(a, b)
    } else {
        (a / 2.0 + b / 2.0).clamp(a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn median_and_mad_of_a_known_sample() {
        // 1 1 2 2 4 6 9: median 2, deviations 1 1 0 0 2 4 7 → MAD 1.
        let x = [2.0, 1.0, 9.0, 4.0, 1.0, 6.0, 2.0];
        assert!(close(median(&x).unwrap(), 2.0));
        assert!(close(mad(&x).unwrap(), 1.0));
        assert!(close(median(&[4.0, 1.0, 3.0, 2.0]).unwrap(), 2.5));
    }

    #[test]
    fn type7_quantiles_match_r() {
        // R: quantile(c(1, 2, 3, 4, 10), c(0, .1, .25, .5, .9, 1), type = 7)
        //    → 1.0 1.4 2.0 3.0 7.6 10.0
        let x = [10.0, 1.0, 3.0, 2.0, 4.0];
        let q = quantiles(&x, &[0.0, 0.1, 0.25, 0.5, 0.9, 1.0]).unwrap();
        for (got, want) in q.iter().zip([1.0, 1.4, 2.0, 3.0, 7.6, 10.0]) {
            assert!(close(*got, want), "{got} vs {want}");
        }
        assert_eq!(quantile(&[5.0], 0.3).unwrap(), 5.0);
    }

    #[test]
    fn trimmed_mean_drops_the_tails() {
        // 10% of 10 values is one value from each end: mean of 2..=9 = 5.5.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 1000.0];
        assert!(close(trimmed_mean(&x, 0.1).unwrap(), 5.5));
        assert!(close(trimmed_mean(&x, 0.0).unwrap(), mean(&x).unwrap()));
        assert_eq!(trimmed_mean(&x, 0.5), Err(StatsError::InvalidTrim(0.5)));
    }

    #[test]
    fn rejects_bad_inputs_with_errors() {
        assert!(matches!(median(&[]), Err(StatsError::Empty { .. })));
        assert!(matches!(
            mad(&[1.0, f64::NAN]),
            Err(StatsError::NonFinite { index: 1, .. })
        ));
        assert!(matches!(
            quantile(&[1.0], 1.5),
            Err(StatsError::InvalidProbability(_))
        ));
        assert!(matches!(
            mean(&[f64::INFINITY]),
            Err(StatsError::NonFinite { .. })
        ));
    }

    #[test]
    fn huge_values_do_not_overflow_where_avoidable() {
        let x = [f64::MAX, f64::MAX, -f64::MAX];
        assert!(mean(&x).unwrap().is_finite());
        assert_eq!(median(&[f64::MAX, f64::MAX]).unwrap(), f64::MAX);
        assert!(quantile(&x, 0.25).unwrap().is_finite());
        assert!(mad(&x).unwrap().is_finite());
    }
}

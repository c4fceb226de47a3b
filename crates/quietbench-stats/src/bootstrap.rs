//! Bootstrap confidence intervals (percentile and BCa) for any statistic of one sample, with a
//! seeded ChaCha generator so that a seed always gives the same interval, on every platform and
//! in every future version: ChaCha's output stream is fixed by its specification, and the index
//! sampling below is our own code rather than a library's, whose algorithm may change.
//!
//! References: Efron & Tibshirani, *An Introduction to the Bootstrap* (1993), ch. 13–14;
//! Efron, "Better bootstrap confidence intervals", JASA 82 (1987); DiCiccio & Efron, "Bootstrap
//! confidence intervals", Statistical Science 11 (1996).

use std::num::NonZeroU32;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::Serialize;

use crate::dist::{normal_cdf, normal_quantile};
use crate::error::{StatsError, check_sample};
use crate::robust::{mean_unchecked, quantile_of_sorted};

/// Number of bootstrap resamples: at least one, by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Resamples(NonZeroU32);

impl Resamples {
    /// Enough for stable 95% percentile endpoints (Monte-Carlo error of an endpoint well under
    /// a tenth of the interval's width; Efron & Tibshirani §19.3 ask for ≥ 1000 for intervals).
    pub const DEFAULT: Resamples = Resamples(NonZeroU32::new(4000).unwrap());

    /// Validates a resample count; refuses 0.
    pub fn new(count: u32) -> Result<Self, StatsError> {
        NonZeroU32::new(count)
            .map(Resamples)
            .ok_or(StatsError::ZeroResamples)
    }

    /// The count.
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl Default for Resamples {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A confidence level strictly between 0 and 1 (0.95 for a 95% interval).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct ConfidenceLevel(f64);

impl ConfidenceLevel {
    /// 95%, the level the verdicts use unless told otherwise.
    pub const NINETY_FIVE: ConfidenceLevel = ConfidenceLevel(0.95);

    /// Validates a level; refuses anything outside the open interval (0, 1), and NaN.
    pub fn new(level: f64) -> Result<Self, StatsError> {
        if level > 0.0 && level < 1.0 {
            Ok(ConfidenceLevel(level))
        } else {
            Err(StatsError::InvalidLevel(level))
        }
    }

    /// The level, e.g. 0.95.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The two-sided error rate α = 1 − level.
    pub fn alpha(self) -> f64 {
        1.0 - self.0
    }
}

impl Default for ConfidenceLevel {
    fn default() -> Self {
        Self::NINETY_FIVE
    }
}

/// Seed of the resampling generator. Same data, same seed: same interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(transparent)]
pub struct Seed(pub u64);

/// How a bootstrap interval turns resampled statistics into endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BootstrapMethod {
    /// The α/2 and 1 − α/2 quantiles of the bootstrap distribution.
    Percentile,
    /// Bias-corrected and accelerated: percentiles shifted for median bias (z₀) and for
    /// skewness of the statistic's standard error (acceleration a, from the jackknife).
    Bca,
}

/// A point estimate with a confidence interval, `low ≤ point ≤ high` always.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// The statistic of the data as observed.
    pub point: f64,
    /// Lower endpoint.
    pub low: f64,
    /// Upper endpoint.
    pub high: f64,
    /// Confidence level.
    pub level: ConfidenceLevel,
}

impl Interval {
    /// Builds an interval, widening it to include the point. A percentile interval can exclude
    /// its own point estimate when the statistic is badly biased (a median of few distinct
    /// values); printing "2.0 [2.1, 2.5]" would contradict itself, so the interval is stretched
    /// to the point instead, which can only lower the error rate.
    pub(crate) fn containing(point: f64, low: f64, high: f64, level: ConfidenceLevel) -> Self {
        Interval {
            point,
            low: low.min(point),
            high: high.max(point),
            level,
        }
    }

    /// High − low.
    pub fn width(&self) -> f64 {
        self.high - self.low
    }
}

/// The crate's resampling generator: ChaCha8 (ample for statistics; ChaCha20's extra rounds
/// buy cryptographic margin we do not need) with unbiased index sampling.
pub(crate) struct Resampler(ChaCha8Rng);

impl Resampler {
    pub(crate) fn new(seed: Seed) -> Self {
        Resampler(ChaCha8Rng::seed_from_u64(seed.0))
    }

    /// A uniform index in 0..n, n ≥ 1, without modulo bias (Lemire, "Fast random integer
    /// generation in an interval", ACM TOMACS 2019).
    pub(crate) fn index(&mut self, n: usize) -> usize {
        let n = n as u64;
        let mut m = u128::from(self.0.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.0.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as usize
    }

    /// Fills `out` with a resample (with replacement) of `data`.
    pub(crate) fn resample_into(&mut self, data: &[f64], out: &mut Vec<f64>) {
        out.clear();
        out.extend((0..data.len()).map(|_| data[self.index(data.len())]));
    }
}

/// Bootstrap interval for `statistic` of `data`.
///
/// Errors on empty or non-finite data, and when the statistic returns a non-finite value on the
/// data or a resample (an overflow of finite inputs). One value gives the degenerate interval
/// [x, x]: there is no variability to resample.
pub fn bootstrap_interval<F>(
    data: &[f64],
    statistic: F,
    method: BootstrapMethod,
    resamples: Resamples,
    level: ConfidenceLevel,
    seed: Seed,
) -> Result<Interval, StatsError>
where
    F: Fn(&[f64]) -> f64,
{
    check_sample("bootstrap data", data)?;
    let point = statistic(data);
    if !point.is_finite() {
        return Err(StatsError::Overflow {
            what: "bootstrap statistic",
        });
    }
    let mut rng = Resampler::new(seed);
    let mut buf = Vec::with_capacity(data.len());
    let mut stats = Vec::with_capacity(resamples.get() as usize);
    for _ in 0..resamples.get() {
        rng.resample_into(data, &mut buf);
        let s = statistic(&buf);
        if !s.is_finite() {
            return Err(StatsError::Overflow {
                what: "bootstrap statistic",
            });
        }
        stats.push(s);
    }
    stats.sort_by(f64::total_cmp);
    let alpha = level.alpha();
    let (p_low, p_high) = match method {
        BootstrapMethod::Percentile => (alpha / 2.0, 1.0 - alpha / 2.0),
        BootstrapMethod::Bca => bca_probabilities(data, &statistic, point, &stats, alpha),
    };
    Ok(Interval::containing(
        point,
        quantile_of_sorted(&stats, p_low),
        quantile_of_sorted(&stats, p_high),
        level,
    ))
}

/// Percentile interval: [`bootstrap_interval`] with [`BootstrapMethod::Percentile`].
pub fn percentile_interval<F: Fn(&[f64]) -> f64>(
    data: &[f64],
    statistic: F,
    resamples: Resamples,
    level: ConfidenceLevel,
    seed: Seed,
) -> Result<Interval, StatsError> {
    let method = BootstrapMethod::Percentile;
    bootstrap_interval(data, statistic, method, resamples, level, seed)
}

/// BCa interval: [`bootstrap_interval`] with [`BootstrapMethod::Bca`].
pub fn bca_interval<F: Fn(&[f64]) -> f64>(
    data: &[f64],
    statistic: F,
    resamples: Resamples,
    level: ConfidenceLevel,
    seed: Seed,
) -> Result<Interval, StatsError> {
    bootstrap_interval(
        data,
        statistic,
        BootstrapMethod::Bca,
        resamples,
        level,
        seed,
    )
}

/// The sample mean as a bootstrap statistic (overflow-safe).
pub fn mean_statistic(values: &[f64]) -> f64 {
    mean_unchecked(values)
}

/// BCa's adjusted percentile levels (Efron 1987, eq. 2.3; Efron & Tibshirani eq. 14.10).
fn bca_probabilities<F: Fn(&[f64]) -> f64>(
    data: &[f64],
    statistic: &F,
    point: f64,
    sorted_stats: &[f64],
    alpha: f64,
) -> (f64, f64) {
    let b = sorted_stats.len() as f64;
    // Bias correction z₀ from the share of resampled statistics below the estimate; ties count
    // half, so a discrete statistic (a median of few distinct values) is not pushed to one side.
    let below = sorted_stats.iter().filter(|s| **s < point).count() as f64;
    let ties = sorted_stats.iter().filter(|s| **s == point).count() as f64;
    let share = ((below + ties / 2.0) / b).clamp(0.5 / b, 1.0 - 0.5 / b);
    let z0 = normal_quantile(share);
    let a = jackknife_acceleration(data, statistic);
    let adjust = |z: f64| {
        let denom = 1.0 - a * (z0 + z);
        if denom <= 0.0 {
            // Past the pole the correction has no meaning; take the extreme it tends to.
            return if z > 0.0 { 1.0 } else { 0.0 };
        }
        normal_cdf(z0 + (z0 + z) / denom)
    };
    let z_low = normal_quantile(alpha / 2.0);
    let z_high = normal_quantile(1.0 - alpha / 2.0);
    (
        adjust(z_low).clamp(0.0, 1.0),
        adjust(z_high).clamp(0.0, 1.0),
    )
}

/// Acceleration a = Σd³ / (6 (Σd²)^{3/2}) from jackknife deviations d. Scale-free, so the
/// deviations are divided by their largest magnitude first to keep cubes from overflowing.
/// O(n²) statistic work; fine for the thousands of trials a run records.
fn jackknife_acceleration<F: Fn(&[f64]) -> f64>(data: &[f64], statistic: &F) -> f64 {
    let n = data.len();
    if n < 3 {
        return 0.0;
    }
    let mut buf = Vec::with_capacity(n - 1);
    let leave_one_out: Vec<f64> = (0..n)
        .map(|i| {
            buf.clear();
            buf.extend_from_slice(&data[..i]);
            buf.extend_from_slice(&data[i + 1..]);
            statistic(&buf)
        })
        .collect();
    if leave_one_out.iter().any(|v| !v.is_finite()) {
        return 0.0;
    }
    let centre = mean_unchecked(&leave_one_out);
    let d: Vec<f64> = leave_one_out.iter().map(|v| centre - v).collect();
    let scale = d.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    if scale == 0.0 || !scale.is_finite() {
        return 0.0;
    }
    let (s2, s3) = d.iter().fold((0.0, 0.0), |(s2, s3), v| {
        let u = v / scale;
        (s2 + u * u, s3 + u * u * u)
    });
    let a = s3 / (6.0 * s2.powf(1.5));
    if a.is_finite() { a } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newtypes_refuse_nonsense() {
        assert_eq!(Resamples::new(0), Err(StatsError::ZeroResamples));
        assert_eq!(Resamples::new(7).unwrap().get(), 7);
        for bad in [0.0, 1.0, -0.5, 1.5, f64::NAN] {
            assert!(ConfidenceLevel::new(bad).is_err(), "{bad}");
        }
        assert!((ConfidenceLevel::new(0.9).unwrap().alpha() - 0.1).abs() < 1e-15);
    }

    #[test]
    fn index_sampling_is_uniform_and_in_range() {
        let mut rng = Resampler::new(Seed(1));
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            counts[rng.index(7)] += 1;
        }
        // Each cell expects 10000, SD ≈ 93; allow 5 SD.
        assert!(
            counts.iter().all(|c| (*c as i64 - 10_000).abs() < 470),
            "{counts:?}"
        );
        assert_eq!(Resampler::new(Seed(3)).index(1), 0);
    }

    #[test]
    fn same_seed_same_interval() {
        let x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
        let r = Resamples::new(500).unwrap();
        let l = ConfidenceLevel::NINETY_FIVE;
        let a = bca_interval(&x, mean_statistic, r, l, Seed(42)).unwrap();
        let b = bca_interval(&x, mean_statistic, r, l, Seed(42)).unwrap();
        assert_eq!(a, b);
        let c = percentile_interval(&x, mean_statistic, r, l, Seed(43)).unwrap();
        assert!(c.low <= c.point && c.point <= c.high);
    }

    #[test]
    fn single_value_gives_a_degenerate_interval() {
        let i = percentile_interval(
            &[2.5],
            mean_statistic,
            Resamples::new(10).unwrap(),
            ConfidenceLevel::NINETY_FIVE,
            Seed(0),
        )
        .unwrap();
        assert_eq!((i.low, i.point, i.high), (2.5, 2.5, 2.5));
    }

    #[test]
    fn bca_shifts_toward_the_long_tail() {
        // Right-skewed data: the BCa interval for the mean reaches further right than the
        // percentile interval (Efron & Tibshirani §14.3).
        let x: Vec<f64> = (1..=30).map(|i| (f64::from(i) / 6.0).exp()).collect();
        let r = Resamples::new(2000).unwrap();
        let l = ConfidenceLevel::NINETY_FIVE;
        let p = percentile_interval(&x, mean_statistic, r, l, Seed(7)).unwrap();
        let b = bca_interval(&x, mean_statistic, r, l, Seed(7)).unwrap();
        assert!(b.high > p.high && b.low > p.low, "{p:?} {b:?}");
    }
}

//! Summaries of repeated measurements (one value per trial).

use serde::Serialize;

/// Location and spread of a set of trial values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Sample standard deviation (n − 1 in the denominator); `None` below two values, where it
    /// is undefined, rather than a misleading zero.
    pub stdev: Option<f64>,
    /// Coefficient of variation, stdev / |mean|; `None` where stdev is, or the mean is zero.
    pub cv: Option<f64>,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// Summarizes `values`, ignoring NaNs (a probe that cannot measure reports no value, never NaN,
/// but a summary must not be poisoned if one slips through). `None` when nothing is left.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mean = sorted.iter().sum::<f64>() / n as f64;
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    let stdev = (n >= 2).then(|| {
        let ss: f64 = sorted.iter().map(|v| (v - mean).powi(2)).sum();
        (ss / (n - 1) as f64).sqrt()
    });
    let cv = stdev.and_then(|s| (mean != 0.0).then(|| s / mean.abs()));
    Some(Summary {
        n,
        mean,
        median,
        stdev,
        cv,
        min: sorted[0],
        max: sorted[n - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn summarizes_a_known_sample() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample variance 32/7.
        let s = summarize(&[9.0, 2.0, 4.0, 4.0, 5.0, 4.0, 5.0, 7.0]).unwrap();
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0));
        assert!(close(s.median, 4.5));
        assert!(close(s.stdev.unwrap(), (32.0f64 / 7.0).sqrt()));
        assert!(close(s.cv.unwrap(), (32.0f64 / 7.0).sqrt() / 5.0));
        assert_eq!((s.min, s.max), (2.0, 9.0));
    }

    #[test]
    fn odd_count_median_is_the_middle_value() {
        assert!(close(summarize(&[3.0, 1.0, 2.0]).unwrap().median, 2.0));
    }

    #[test]
    fn one_value_has_no_spread_rather_than_zero_spread() {
        let s = summarize(&[1234.5]).unwrap();
        assert_eq!(s.stdev, None);
        assert_eq!(s.cv, None);
        assert!(close(s.median, 1234.5));
    }

    #[test]
    fn empty_and_nan_inputs_do_not_panic() {
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[f64::NAN]), None);
        assert_eq!(summarize(&[f64::NAN, 2.0]).unwrap().n, 1);
    }

    #[test]
    fn zero_mean_has_no_cv() {
        let s = summarize(&[-1.0, 1.0]).unwrap();
        assert_eq!(s.cv, None);
        assert!(s.stdev.unwrap() > 0.0);
    }
}

//! Properties over arbitrary inputs: nothing panics; NaN and infinities are refused with an
//! error; intervals always contain their point estimate; shares sum to 1; change points are
//! ordered, inside the series and significant.

use proptest::prelude::*;
use quietbench_stats::{
    Arm, BootstrapMethod, ChangePointConfig, ConfidenceLevel, IGLEWICZ_HOAGLIN_THRESHOLD,
    Observation, Resamples, Seed, StatsError, VerdictConfig, bootstrap_interval, change_points,
    judge, mad, mean, mean_statistic, median, outlier_hosts, quantile, quantiles, stdev, summarize,
    trimmed_mean, variance_components,
};

/// Any finite f64: normal, subnormal or zero, of either sign, near 0 or near f64::MAX.
fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::num::f64::POSITIVE
            | prop::num::f64::NEGATIVE
            | prop::num::f64::NORMAL
            | prop::num::f64::SUBNORMAL
            | prop::num::f64::ZERO,
        -1e6..1e6f64,
    ]
}

/// Any finite f64 > 0.
fn positive() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::num::f64::POSITIVE | prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL,
        1e-3..1e3f64,
    ]
}

fn non_finite() -> impl Strategy<Value = f64> {
    prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)]
}

fn level() -> impl Strategy<Value = ConfidenceLevel> {
    (0.01..0.999f64).prop_map(|l| ConfidenceLevel::new(l).unwrap())
}

/// Ok must be finite; the only acceptable error for finite input is an overflow.
fn finite_or_overflow(r: Result<f64, StatsError>) -> Result<(), TestCaseError> {
    match r {
        Ok(v) => prop_assert!(v.is_finite(), "non-finite result {v}"),
        Err(e) => prop_assert!(matches!(e, StatsError::Overflow { .. }), "{e}"),
    }
    Ok(())
}

fn observations(values: &[(u8, u8, bool, f64)]) -> Vec<Observation> {
    values
        .iter()
        .map(|&(host, round, b, value)| Observation {
            host: format!("h{}", host % 4),
            cpu_model: format!("m{}", host % 4 % 2),
            round: u32::from(round % 12),
            arm: if b { Arm::B } else { Arm::A },
            value,
        })
        .collect()
}

proptest! {
    // No regression files: integration tests have no lib.rs beside them for proptest to find.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn summaries_never_panic_on_finite_input(
        x in prop::collection::vec(finite(), 1..40),
        p in 0.0..=1.0f64,
        trim in 0.0..0.5f64,
    ) {
        let lo = x.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let m = median(&x).unwrap();
        prop_assert!(lo <= m && m <= hi);
        let q = quantile(&x, p).unwrap();
        prop_assert!(lo <= q && q <= hi);
        let qs = quantiles(&x, &[0.0, 0.25, 0.5, 0.75, 1.0]).unwrap();
        prop_assert!(qs.windows(2).all(|w| w[0] <= w[1]));
        prop_assert_eq!(qs[0], lo);
        prop_assert_eq!(qs[4], hi);
        let t = trimmed_mean(&x, trim).unwrap();
        prop_assert!(lo <= t && t <= hi);
        let mu = mean(&x).unwrap();
        prop_assert!(lo <= mu && mu <= hi);
        finite_or_overflow(mad(&x))?;
        finite_or_overflow(stdev(&x).map(|s| s.unwrap_or(0.0)))?;
        prop_assert!(summarize(&x).is_some());
    }

    #[test]
    fn non_finite_input_is_an_error_not_a_panic(
        mut x in prop::collection::vec(finite(), 0..20),
        bad in non_finite(),
        at in any::<prop::sample::Index>(),
    ) {
        let i = at.index(x.len() + 1);
        x.insert(i, bad);
        let is_non_finite = |r: Result<f64, StatsError>| {
            matches!(r, Err(StatsError::NonFinite { index, .. }) if index == i)
        };
        prop_assert!(is_non_finite(median(&x)));
        prop_assert!(is_non_finite(mad(&x)));
        prop_assert!(is_non_finite(mean(&x)));
        prop_assert!(is_non_finite(trimmed_mean(&x, 0.1)));
        prop_assert!(is_non_finite(quantile(&x, 0.3)));
        prop_assert!(stdev(&x).is_err());
        let boot = bootstrap_interval(
            &x,
            mean_statistic,
            BootstrapMethod::Bca,
            Resamples::new(10).unwrap(),
            ConfidenceLevel::NINETY_FIVE,
            Seed(1),
        );
        prop_assert!(matches!(boot, Err(StatsError::NonFinite { .. })), "{boot:?}");
        // Observations with a non-finite value are refused by every consumer.
        let obs: Vec<Observation> = x
            .iter()
            .enumerate()
            .map(|(r, v)| Observation {
                host: "h".into(),
                cpu_model: "m".into(),
                round: r as u32 / 2,
                arm: Arm(r as u32 % 2),
                value: *v,
            })
            .collect();
        prop_assert!(judge(&obs, &VerdictConfig::default()).is_err());
        if obs.iter().any(|o| o.arm == Arm::A && !o.value.is_finite()) {
            prop_assert!(variance_components(&obs, Arm::A).is_err());
            prop_assert!(outlier_hosts(&obs, Arm::A, 3.5).is_err());
        }
    }

    #[test]
    fn bootstrap_intervals_contain_their_point(
        x in prop::collection::vec(finite(), 1..25),
        resamples in 1..60u32,
        level in level(),
        seed in any::<u64>(),
        bca in any::<bool>(),
    ) {
        let method = if bca { BootstrapMethod::Bca } else { BootstrapMethod::Percentile };
        let r = Resamples::new(resamples).unwrap();
        match bootstrap_interval(&x, mean_statistic, method, r, level, Seed(seed)) {
            Ok(i) => {
                prop_assert!(i.low <= i.point && i.point <= i.high, "{i:?}");
                prop_assert!(i.low.is_finite() && i.high.is_finite());
            }
            Err(e) => prop_assert!(matches!(e, StatsError::Overflow { .. }), "{e}"),
        }
        // A median, a discrete statistic, too.
        let med = |v: &[f64]| median(v).unwrap();
        if let Ok(i) = bootstrap_interval(&x, med, method, r, level, Seed(seed)) {
            prop_assert!(i.low <= i.point && i.point <= i.high, "{i:?}");
        }
    }

    #[test]
    fn verdicts_contain_their_ratio_or_refuse(
        values in prop::collection::vec((any::<u8>(), any::<u8>(), any::<bool>(), positive()), 0..80),
        seed in any::<u64>(),
        level in level(),
    ) {
        let obs = observations(&values);
        let config = VerdictConfig {
            resamples: Resamples::new(30).unwrap(),
            seed: Seed(seed),
            level,
            ..VerdictConfig::default()
        };
        match judge(&obs, &config) {
            Ok(v) => {
                prop_assert!(v.ci_low <= v.ratio && v.ratio <= v.ci_high, "{v:?}");
                prop_assert!(v.ci_low > 0.0 && v.ci_high.is_finite());
                prop_assert!(v.mde >= 0.0);
                prop_assert!(v.rounds >= 5);
                let _ = v.to_string();
            }
            Err(e) => prop_assert!(
                matches!(e, StatsError::TooFewRounds { .. } | StatsError::Overflow { .. }),
                "{e}"
            ),
        }
    }

    #[test]
    fn components_and_outliers_never_panic(
        values in prop::collection::vec((any::<u8>(), any::<u8>(), Just(false), positive()), 1..60),
    ) {
        let obs = observations(&values);
        match variance_components(&obs, Arm::A) {
            Ok(c) => {
                prop_assert!(c.between_models >= 0.0 && c.between_hosts >= 0.0);
                prop_assert!(c.within_host >= 0.0);
                if let Some(s) = c.shares {
                    let sum = s.between_models + s.between_hosts + s.within_host;
                    prop_assert!((sum - 1.0).abs() < 1e-9, "{sum}");
                }
            }
            Err(e) => prop_assert!(matches!(e, StatsError::Overflow { .. }), "{e}"),
        }
        let scan = outlier_hosts(&obs, Arm::A, IGLEWICZ_HOAGLIN_THRESHOLD).unwrap();
        prop_assert!(scan.hosts.iter().all(|h| h.z.is_none_or(f64::is_finite)));
    }

    #[test]
    fn summarize_tolerates_anything(x in prop::collection::vec(any::<f64>(), 0..30)) {
        let _ = summarize(&x);
    }

    #[test]
    fn change_points_are_ordered_significant_and_inside_or_an_overflow(
        x in prop::collection::vec(finite(), 0..40),
    ) {
        let config = ChangePointConfig { permutations: 49, significance: 0.1, ..ChangePointConfig::default() };
        match change_points(&x, &config) {
            Ok(found) => {
                let at: Vec<usize> = found.iter().map(|c| c.index).collect();
                prop_assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}");
                for c in &found {
                    prop_assert!(c.index >= config.min_segment);
                    prop_assert!(c.index + config.min_segment <= x.len());
                    prop_assert!(c.p_value <= config.significance);
                    prop_assert!(c.statistic.is_finite());
                    prop_assert!(c.before_median.is_finite() && c.after_median.is_finite());
                }
            }
            Err(e) => prop_assert!(matches!(e, StatsError::Overflow { .. }), "{e}"),
        }
    }

    #[test]
    fn change_points_refuse_non_finite_values(
        mut x in prop::collection::vec(-1e3..1e3f64, 1..30),
        bad in non_finite(),
        at in any::<prop::sample::Index>(),
    ) {
        let i = at.index(x.len());
        x[i] = bad;
        let refused = matches!(
            change_points(&x, &ChangePointConfig::default()),
            Err(StatsError::NonFinite { index, .. }) if index == i
        );
        prop_assert!(refused);
    }
}

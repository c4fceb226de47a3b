//! Serial correlation of a host's rounds: whether consecutive rounds' log-ratios move together.
//!
//! Pairing A and B within a round cancels what drifts slower than a round ([`crate::paired`]),
//! but not noise that comes in spells: on a bursty cloud host (a neighbour that runs for a few
//! seconds, then stops) a spell can favour one arm over several consecutive rounds, and those
//! rounds' log-ratios then correlate. The rounds are then fewer independent units than they
//! look, and an interval that treats them as independent is too narrow
//! ([`crate::hierarchical`] widens it with the estimate made here).
//!
//! The estimate is the lag-1 autocorrelation of the rounds within each host, in round order,
//! each host centred on its own mean and the hosts pooled:
//! r₁ = Σ (dₜ − d̄)(dₜ₊₁ − d̄) / Σ (dₜ − d̄)². Only rounds whose numbers are consecutive form a
//! pair (a round dropped for a missing arm breaks the chain); with gaps, the sum of products is
//! scaled up to the number of pairs a gapless host would have had.
//!
//! Centring on the sample mean biases r₁ down, badly so for short series: for a first-order
//! autoregressive series of n values, E(r₁) ≈ ρ − (1 + 4ρ)/n (Marriott & Pope, "Bias in the
//! estimation of autocorrelations", Biometrika 41, 1954). With 8 rounds and ρ = 0.6 that is
//! 0.18, and independent rounds come out at −1/n on average. The estimate reported is therefore
//! corrected to first order, ρ̂ = r₁ + (1 + 4r₁)/n, n being the rounds per host (for several
//! hosts, the harmonic-type mean Σ(nₕ − 1) / Σ((nₕ − 1)/nₕ)); on independent rounds it then
//! averages about −4/n², not −1/n. The additive form is used rather than the exact inversion
//! (n·r₁ + 1)/(n − 4), which multiplies r₁'s noise by n/(n − 4) (5× at the 5-round minimum).
//! Neither removes r₁'s noise: with n rounds its standard error is about 1/√n (0.35 at 8
//! rounds, 0.18 at 30), which is why the verdict only calls a host bursty
//! ([`bursty_threshold`]) when ρ̂ is about two standard errors above 0.

use crate::paired::PairedRounds;

/// Standard errors above 0 at which [`bursty_threshold`] calls the rounds correlated.
pub const BURSTY_STANDARD_ERRORS: f64 = 2.0;

/// The smallest serial correlation [`bursty_threshold`] ever calls bursty: below it, even a
/// precisely estimated correlation widens an interval by less than 10%.
pub const BURSTY_MIN_CORRELATION: f64 = 0.1;

/// Serial correlation of the rounds of `paired`: the pooled lag-1 autocorrelation of each
/// host's per-round log-ratios in round order, corrected for the bias of short series (see the
/// module documentation), in [−1, 1].
///
/// Positive values mean consecutive rounds resemble each other more than independent rounds
/// would: the host's noise lasted longer than a round. About 0 for independent rounds, negative
/// for rounds that alternate. `None` when no host has three rounds, when no two rounds are
/// consecutive, or when every host's rounds are all equal.
pub fn serial_correlation(paired: &PairedRounds) -> Option<f64> {
    estimate(paired).map(|e| e.rho)
}

/// The correlation above which the verdict calls the rounds correlated, for an estimate from
/// `pairs` pairs of consecutive rounds: [`BURSTY_STANDARD_ERRORS`] standard errors of r₁ under
/// independence (1/√pairs), and at least [`BURSTY_MIN_CORRELATION`]. Independent rounds cross
/// it about 2–4% of the time (measured in `tests/coverage.rs`).
pub fn bursty_threshold(pairs: usize) -> f64 {
    let pairs = pairs.max(1) as f64;
    (BURSTY_STANDARD_ERRORS / pairs.sqrt()).max(BURSTY_MIN_CORRELATION)
}

/// An estimate with what it rests on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SerialEstimate {
    /// The bias-corrected estimate ρ̂, in [−1, 1].
    pub(crate) rho: f64,
    /// Pairs of consecutive rounds behind it.
    pub(crate) pairs: usize,
}

/// Hosts with fewer rounds than this are left out: two rounds always give r₁ = −1/2.
const MIN_ROUNDS_PER_HOST: usize = 3;

pub(crate) fn estimate(paired: &PairedRounds) -> Option<SerialEstimate> {
    let (mut products, mut squares) = (0.0, 0.0);
    let (mut pairs, mut possible) = (0usize, 0usize);
    let mut bias_weight = 0.0;
    for host in &paired.hosts {
        let d = &host.log_ratios;
        let n = d.len();
        if n < MIN_ROUNDS_PER_HOST {
            continue;
        }
        let m = host.mean_log_ratio();
        squares += d.iter().map(|v| (v - m) * (v - m)).sum::<f64>();
        for (i, w) in d.windows(2).enumerate() {
            if host.rounds[i].checked_add(1) == Some(host.rounds[i + 1]) {
                products += (w[0] - m) * (w[1] - m);
                pairs += 1;
            }
        }
        possible += n - 1;
        bias_weight += (n - 1) as f64 / n as f64;
    }
    if pairs == 0 || !(squares > 0.0 && squares.is_finite() && products.is_finite()) {
        return None;
    }
    let r1 = products / squares * (possible as f64 / pairs as f64);
    // Rounds per host for the bias term: n for one host, Σ(nₕ − 1) / Σ((nₕ − 1)/nₕ) for several.
    let n = possible as f64 / bias_weight;
    let rho = (r1 + (1.0 + 4.0 * r1) / n).clamp(-1.0, 1.0);
    Some(SerialEstimate { rho, pairs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paired::{Arm, HostRounds};
    use crate::rng::SplitMix64;

    fn paired(hosts: &[Vec<f64>]) -> PairedRounds {
        PairedRounds {
            baseline: Arm::A,
            candidate: Arm::B,
            hosts: hosts
                .iter()
                .enumerate()
                .map(|(i, lr)| HostRounds {
                    host: format!("h{i}"),
                    cpu_model: "m".into(),
                    rounds: (0..lr.len() as u32).collect(),
                    log_ratios: lr.clone(),
                })
                .collect(),
            unpaired_rounds: 0,
        }
    }

    fn normal(rng: &mut SplitMix64) -> f64 {
        let u = |r: &mut SplitMix64| (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let (u1, u2) = (1.0 - u(rng), u(rng));
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A stationary first-order autoregressive series with lag-1 correlation `phi`.
    fn ar1(rng: &mut SplitMix64, n: usize, phi: f64) -> Vec<f64> {
        let innovation = (1.0 - phi * phi).sqrt();
        let mut e = normal(rng);
        (0..n)
            .map(|i| {
                if i > 0 {
                    e = phi * e + innovation * normal(rng);
                }
                0.01 * e
            })
            .collect()
    }

    #[test]
    fn a_long_series_gives_its_own_correlation() {
        let mut rng = SplitMix64::new(1);
        for phi in [-0.5, 0.0, 0.3, 0.6, 0.9] {
            let rho = serial_correlation(&paired(&[ar1(&mut rng, 20_000, phi)])).unwrap();
            // r₁'s standard error is √((1 − ρ²)/n) ≤ 0.007 here.
            assert!((rho - phi).abs() < 0.025, "φ = {phi}: ρ̂ = {rho}");
        }
    }

    #[test]
    fn the_bias_of_short_series_is_corrected() {
        // 4000 series of 15 rounds: raw r₁ averages ρ − (1 + 4ρ)/15, the estimate about ρ.
        let mut rng = SplitMix64::new(2);
        for phi in [0.0, 0.3, 0.6] {
            let (mut raw, mut corrected) = (0.0, 0.0);
            for _ in 0..4000 {
                let p = paired(&[ar1(&mut rng, 15, phi)]);
                let d = &p.hosts[0].log_ratios;
                let m = p.hosts[0].mean_log_ratio();
                let ss: f64 = d.iter().map(|v| (v - m) * (v - m)).sum();
                let sp: f64 = d.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum();
                raw += sp / ss / 4000.0;
                corrected += serial_correlation(&p).unwrap() / 4000.0;
            }
            let predicted = phi - (1.0 + 4.0 * phi) / 15.0;
            // The mean of 4000 estimates with SD ≤ 0.3 has SE ≤ 0.005; the first-order bias
            // formula leaves about −0.07 at ρ = 0.6 and n = 15 (raw r₁: −0.23).
            eprintln!("φ = {phi}, 15 rounds: mean r₁ {raw:.3}, mean ρ̂ {corrected:.3}");
            assert!((raw - predicted).abs() < 0.04, "φ = {phi}: raw {raw}");
            assert!((corrected - phi).abs() < 0.1, "φ = {phi}: {corrected}");
            assert!((corrected - phi).abs() < (raw - phi).abs(), "φ = {phi}");
        }
    }

    #[test]
    fn hand_computed_cases() {
        // 1, 2, 3, 4, 5: deviations −2..2, Σd² = 10, Σ products = 2 + 0 + 0 + 2 = 4;
        // r₁ = 0.4, corrected 0.4 + (1 + 1.6)/5 = 0.92.
        let rho = serial_correlation(&paired(&[vec![1.0, 2.0, 3.0, 4.0, 5.0]])).unwrap();
        assert!((rho - 0.92).abs() < 1e-12, "{rho}");
        // Alternating: r₁ = −(n − 1)/n = −0.75, corrected −0.75 + (1 − 3)/4 = −1.25 → −1.
        let rho = serial_correlation(&paired(&[vec![1.0, -1.0, 1.0, -1.0]])).unwrap();
        assert_eq!(rho, -1.0);
        // Nothing to estimate from.
        assert_eq!(serial_correlation(&paired(&[vec![0.5; 10]])), None);
        assert_eq!(serial_correlation(&paired(&[vec![0.1, 0.2]])), None);
    }

    #[test]
    fn hosts_are_centred_on_their_own_means_and_pooled() {
        // Two hosts far apart, each alternating around its own mean: no correlation between
        // rounds of a host is positive, whatever the offset between hosts.
        let a = vec![1.0, 1.1, 1.0, 1.1, 1.0, 1.1];
        let b = vec![-1.0, -1.1, -1.0, -1.1, -1.0, -1.1];
        let rho = serial_correlation(&paired(&[a.clone(), b])).unwrap();
        assert!(rho < -0.5, "{rho}");
        let one = serial_correlation(&paired(std::slice::from_ref(&a))).unwrap();
        let two = serial_correlation(&paired(&[a.clone(), a])).unwrap();
        assert!((one - two).abs() < 1e-12);
    }

    #[test]
    fn a_missing_round_breaks_the_chain() {
        // Rounds 0, 1, 2 then 5, 6, 7: the pair (2, 5) is not consecutive and is not used.
        let mut p = paired(&[vec![1.0, 2.0, 3.0, 3.0, 2.0, 1.0]]);
        p.hosts[0].rounds = vec![0, 1, 2, 5, 6, 7];
        let e = estimate(&p).unwrap();
        assert_eq!(e.pairs, 4);
        // Deviations −1, 0, 1, 1, 0, −1: used products 0 + 0 + 0 + 0 = 0 → r₁ = 0,
        // corrected 1/6.
        assert!((e.rho - 1.0 / 6.0).abs() < 1e-12, "{e:?}");
    }

    #[test]
    fn the_threshold_is_two_standard_errors_and_at_least_a_tenth() {
        assert!((bursty_threshold(16) - 0.5).abs() < 1e-12);
        assert!((bursty_threshold(100) - 0.2).abs() < 1e-12);
        assert_eq!(bursty_threshold(10_000), BURSTY_MIN_CORRELATION);
        assert!(bursty_threshold(0).is_finite());
    }
}

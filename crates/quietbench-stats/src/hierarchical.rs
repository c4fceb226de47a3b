//! The hierarchical bootstrap of the B/A ratio: resample hosts, then rounds within each chosen
//! host (Davison & Hinkley, *Bootstrap Methods and their Application*, 1997, §3.8; Saravanan,
//! Berman & Sober, "Application of the hierarchical bootstrap to multi-level data in
//! neuroscience", Neurons, Behavior, Data analysis and Theory 3, 2020).
//!
//! Rounds on one host are not independent draws from the fleet: they share the host's CPU, its
//! neighbours and its drift. Resampling rounds as if they were would treat 20 hosts × 20 rounds
//! as 400 independent units and give an interval far too narrow; resampling hosts first keeps
//! the host-to-host spread in the interval. With one host there is nothing to resample at the top
//! level, and the result says so: the interval then speaks for that host only.
//!
//! Resampling raw host means and then their rounds over-states the variance: round noise counts
//! once through the host means and again through the round resampling (Davison & Hinkley §3.8;
//! Saravanan et al. note the conservatism). Here host means are first shrunk toward their mean
//! so that their spread is the host component alone (see `host_shrinkage`), and the rounds
//! resampled within each chosen host add the round noise back once.
//!
//! The reported interval is the union of two intervals built from the same bootstrap
//! distribution, both corrected for the small number of independent units u (hosts, or rounds
//! on a single host):
//! - the *expanded percentile* interval (Hesterberg, "What teachers should know about the
//!   bootstrap", The American Statistician 69, 2015, §5.2): percentiles at α′/2 with
//!   Φ⁻¹(1 − α′/2) = √(u/(u−1)) · t(1 − α/2, u − 1), which removes the percentile interval's
//!   known narrowness at small samples while keeping its asymmetry;
//! - the Student-t interval with the bootstrap standard error, θ̂ ± t(1 − α/2, u − 1) ·
//!   √(u/(u−1)) · SE*, which stays correct where the percentile interval cannot reach, because
//!   a percentile interval never extends past the most extreme resample (with 2–4 hosts that is
//!   the range of the host means, far narrower than a correct interval).
//!
//! **Serially correlated rounds.** Both intervals assume the units are independent. Hosts are;
//! the rounds of one host need not be: on a bursty host (noise in spells longer than a round)
//! consecutive rounds' log-ratios correlate, and n correlated rounds carry the information of
//! fewer independent ones. With several hosts this needs no correction: the interval rests on
//! the spread of the host means, and each host mean already varies as much as its correlated
//! rounds make it (the shrinkage below subtracts and the round resampling adds back the same
//! independent-rounds term, so the bootstrap variance stays at least the host means' spread /
//! h; 6 hosts × 8 rounds at ρ = 0.6 with bursts: 3.7% false positives). With one host the
//! rounds are the units, and the interval is widened for their lag-1 autocorrelation ρ̂
//! ([`crate::serial_correlation`], corrected for the bias of short series), taken as a
//! first-order autoregression, the variance inflation of Zwiers & von Storch ("Taking serial
//! correlation into account in tests of the mean", Journal of Climate 8, 1995):
//! - the variance of a mean of n rounds is (1 + ρ)/(1 − ρ) times what independent rounds give
//!   (Bartlett, "On the theoretical specification and sampling properties of autocorrelated
//!   time-series", JRSS Suppl. 8, 1946), so the bootstrap draws are spread by √((1 + ρ̂)/(1 − ρ̂))
//!   around the estimate and both intervals are rebuilt from them;
//! - the t quantiles' degrees of freedom combine, by Satterthwaite's rule, the equivalent
//!   sample size n_eff = n(1 − ρ̂)/(1 + ρ̂) with the noise of ρ̂ itself (`serial_df`).
//!
//! ρ̂ is clamped to [0, 0.9]: a negative estimate never narrows the interval, and above 0.9 a
//! run cannot say how much wider it should be (the factor is then 19). The interval the same
//! draws give for independent rounds is kept beside it (`if_independent`), so that the verdict
//! can say what the correlation cost.
//!
//! *Why not a moving-block bootstrap over rounds* (Künsch, Annals of Statistics 17, 1989; block
//! length by the n^(1/3) rule or Politis & White, Econometric Reviews 23, 2004)? With the 8–30
//! rounds of a run, blocks of 2–3 rounds leave 4–10 blocks, too few to see correlation that
//! lasts longer than a block, and the block bootstrap's variance misses the correlation beyond
//! the block. In a side simulation of the A/A cells of `tests/coverage.rs` (a t interval on the
//! block bootstrap's variance, 4000 runs a cell) it excluded 1 in 17–22% of runs at ρ = 0.6 and
//! 8–30 rounds; the variance inflation here does so in 4.7% (30 rounds), 6.8% (15) and 10.5%
//! (8) of the test's runs.
//!
//! *What remains.* ρ̂ from n rounds has a standard error of about 1/√n, and it comes out low
//! exactly when the mean has wandered far (centring on an extreme mean removes the excursion
//! that shows the correlation); that is why the degrees of freedom count ρ̂'s noise. With 8
//! rounds it is still not enough at ρ = 0.6 (10.5% false positives against 33% uncorrected),
//! and lag-1 correlation understates bursts that outlast the autoregressive part (30 rounds,
//! bursts alone: 5.7%). On independent rounds the correction widens the interval whenever
//! ρ̂ > 0, about half the runs, by at least the loss of degrees of freedom (+9% at 30 rounds,
//! +21% at 15, +48% at 8); the false-positive rate there is 2.2–3.2% instead of 5%.

use serde::Serialize;

use crate::bootstrap::{ConfidenceLevel, Resampler, Resamples, Seed};
use crate::dist::{normal_cdf, student_t_quantile};
use crate::error::StatsError;
use crate::paired::{HostRounds, PairedRounds};
use crate::robust::{mean_unchecked, quantile_of_sorted, variance_unchecked};
use crate::serial;

/// Largest serial correlation the interval is widened for (variance factor 19).
pub const MAX_SERIAL_CORRELATION: f64 = 0.9;

/// What the bootstrap resampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Resampling {
    /// Hosts with replacement, then rounds with replacement within each chosen host.
    HostsThenRounds {
        /// Hosts in the data.
        hosts: usize,
    },
    /// Only one host: rounds with replacement. The interval holds for that host, not for the
    /// fleet.
    RoundsOnly,
}

/// Interval for the candidate / baseline ratio from the hierarchical bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioInterval {
    /// Point estimate: geometric mean of paired ratios (per host, then over hosts).
    pub ratio: f64,
    /// Lower endpoint of the reported interval (union of the two below).
    pub low: f64,
    /// Upper endpoint of the reported interval.
    pub high: f64,
    /// Confidence level.
    pub level: ConfidenceLevel,
    /// What was resampled.
    pub resampling: Resampling,
    /// Independent units behind the interval: hosts, or rounds when there is one host.
    pub units: usize,
    /// Degrees of freedom of the t quantiles: units − 1; when one host's rounds were found
    /// serially correlated, fewer than n_eff − 1 (n_eff = rounds / `variance_inflation`), to
    /// count the noise of the correlation's estimate too (at least 1).
    pub df: f64,
    /// Bootstrap standard error of the log-ratio, times √`variance_inflation`.
    pub se_log: f64,
    /// The expanded-percentile interval alone, (low, high).
    pub expanded_percentile: (f64, f64),
    /// The bootstrap-SE Student-t interval alone, (low, high).
    pub bootstrap_t: (f64, f64),
    /// Resamples drawn.
    pub resamples: Resamples,
    /// With several hosts, the factor c by which host means were shrunk toward their mean
    /// before resampling (see [`hierarchical_ratio_interval`]); `None` with one host.
    pub host_shrinkage: Option<f64>,
    /// Lag-1 autocorrelation of the rounds within hosts ([`crate::serial_correlation`]);
    /// `None` when it cannot be estimated (no host with three rounds).
    pub serial_correlation: Option<f64>,
    /// Factor by which the variance was multiplied for serially correlated rounds,
    /// (1 + ρ)/(1 − ρ) with ρ the serial correlation clamped to [0, 0.9]; 1 when there is
    /// nothing to correct: several hosts (their means carry the correlation), or ρ ≤ 0.
    pub variance_inflation: f64,
    /// The interval the same resamples give when the rounds are taken as independent, (low,
    /// high); equal to (`low`, `high`) when `variance_inflation` is 1.
    pub if_independent: (f64, f64),
}

/// Hierarchical bootstrap interval for the ratio of `paired`.
///
/// Needs at least two independent units: two hosts, or two rounds on a single host.
pub fn hierarchical_ratio_interval(
    paired: &PairedRounds,
    resamples: Resamples,
    level: ConfidenceLevel,
    seed: Seed,
) -> Result<RatioInterval, StatsError> {
    let hosts = &paired.hosts;
    let (resampling, units) = match hosts.len() {
        1 => (Resampling::RoundsOnly, hosts[0].log_ratios.len()),
        h => (Resampling::HostsThenRounds { hosts: h }, h),
    };
    if units < 2 {
        return Err(StatsError::TooFewRounds {
            have: paired.rounds(),
            need: 2,
        });
    }
    let Some(point) = paired.log_ratio() else {
        return Err(StatsError::Empty {
            what: "paired rounds",
        });
    };
    let means: Vec<f64> = hosts.iter().map(HostRounds::mean_log_ratio).collect();
    let shrinkage = match resampling {
        Resampling::RoundsOnly => None,
        Resampling::HostsThenRounds { .. } => Some(host_shrinkage(&noise_split(paired))),
    };
    let mut rng = Resampler::new(seed);
    let mut draws = Vec::with_capacity(resamples.get() as usize);
    for _ in 0..resamples.get() {
        let estimate = match resampling {
            Resampling::RoundsOnly => resampled_mean(&mut rng, &hosts[0].log_ratios),
            Resampling::HostsThenRounds { hosts: h } => {
                let c = shrinkage.unwrap_or(1.0);
                let mut sum = 0.0;
                for _ in 0..h {
                    let i = rng.index(h);
                    // The host's shrunken mean plus the resampled rounds' deviation from its
                    // own mean: m̄ + c·(mᵢ − m̄) + (r̄ᵢ* − mᵢ).
                    let rounds = resampled_mean(&mut rng, &hosts[i].log_ratios) - means[i];
                    sum += point + c * (means[i] - point) + rounds;
                }
                sum / h as f64
            }
        };
        draws.push(estimate);
    }
    let se = variance_unchecked(&draws).unwrap_or(0.0).sqrt();
    draws.sort_by(f64::total_cmp);

    let u = units as f64;
    let serial_correlation = serial::serial_correlation(paired);
    let inflation = match resampling {
        Resampling::RoundsOnly => variance_inflation(serial_correlation),
        Resampling::HostsThenRounds { .. } => 1.0,
    };
    let independent = Intervals::from_draws(&draws, point, se, u, 1.0, level);
    let corrected = if inflation > 1.0 {
        Intervals::from_draws(&draws, point, se, u, inflation, level)
    } else {
        independent
    };
    let Intervals {
        pct,
        tint,
        low,
        high,
        df,
        se,
    } = corrected;

    let exp = |v: f64| v.exp();
    let out = RatioInterval {
        ratio: exp(point),
        low: exp(low),
        high: exp(high),
        level,
        resampling,
        units,
        df,
        se_log: se,
        expanded_percentile: (exp(pct.0), exp(pct.1)),
        bootstrap_t: (exp(tint.0), exp(tint.1)),
        resamples,
        host_shrinkage: shrinkage,
        serial_correlation,
        variance_inflation: inflation,
        if_independent: (exp(independent.low), exp(independent.high)),
    };
    if !(out.ratio.is_finite() && out.high.is_finite() && out.low > 0.0 && se.is_finite()) {
        return Err(StatsError::Overflow {
            what: "ratio interval",
        });
    }
    Ok(out)
}

/// The variance factor (1 + ρ)/(1 − ρ) for rounds with serial correlation ρ, clamped to
/// [0, [`MAX_SERIAL_CORRELATION`]]; 1 when it cannot be estimated.
fn variance_inflation(serial_correlation: Option<f64>) -> f64 {
    let rho = serial_correlation.map_or(0.0, |r| r.clamp(0.0, MAX_SERIAL_CORRELATION));
    (1.0 + rho) / (1.0 - rho)
}

/// Degrees of freedom of the variance estimate s²·f/n of a mean of `n` rounds whose variance
/// factor f = (1 + ρ̂)/(1 − ρ̂) > 1 was estimated from the same rounds, by Satterthwaite's rule
/// on the log scale: Var(ln(s²f)) ≈ Var(ln s²) + Var(ln f), with 2/(n_eff − 1) for the first
/// (n_eff = n/f rounds' worth of independent information) and, by the delta method with
/// Var(ρ̂) ≈ (1 − ρ²)/n (Bartlett 1946), (2/(1 − ρ²))²·(1 − ρ²)/n = 4/(n(1 − ρ²)) for the
/// second; df = 2 / Var(ln(s²f)), at least 1.
///
/// Without the second term the interval ignores that ρ̂ is itself noisy, and low exactly when
/// the mean has wandered far: in the A/A simulations of `tests/coverage.rs` n_eff − 1 alone
/// left the false-positive rate at about 9.5% with 15 rounds at φ = 0.3 and 0.6, and 13% with
/// 8 rounds at φ = 0.6; with the second term, 7.0%, 6.8% and 10.5%. The price is paid on
/// independent rounds too, whenever ρ̂ > 0: at ρ̂ just above 0 the degrees of freedom fall from
/// n − 1 to about n/3.
fn serial_df(n: f64, inflation: f64) -> f64 {
    let f = inflation;
    // 1 − ρ² = 4f/(f + 1)² for f = (1 + ρ)/(1 − ρ).
    let one_minus_rho_sq = 4.0 * f / ((f + 1.0) * (f + 1.0));
    let variance_df = (n / f - 1.0).max(1.0);
    (1.0 / (1.0 / variance_df + 2.0 / (n * one_minus_rho_sq))).max(1.0)
}

/// The two intervals and their union, on the log scale, from sorted bootstrap draws.
#[derive(Debug, Clone, Copy)]
struct Intervals {
    /// Expanded percentile.
    pct: (f64, f64),
    /// Bootstrap-SE Student-t.
    tint: (f64, f64),
    /// The union's ends, widened to contain the point.
    low: f64,
    high: f64,
    /// Degrees of freedom of the t quantile.
    df: f64,
    /// Standard error, inflated.
    se: f64,
}

impl Intervals {
    /// From `draws` (sorted) around `point` with bootstrap SE `se`, for `u` units whose
    /// variance is `inflation` times what independent units give. The draws are spread by
    /// √inflation around the point, and the t quantile has [`serial_df`] degrees of freedom;
    /// the expanded percentile's √(u/(u−1)) stays that of the u actual units, since it corrects
    /// the bootstrap variance's divisor u, not the correlation.
    fn from_draws(
        draws: &[f64],
        point: f64,
        se: f64,
        u: f64,
        inflation: f64,
        level: ConfidenceLevel,
    ) -> Self {
        let df = if inflation > 1.0 {
            serial_df(u, inflation)
        } else {
            u - 1.0
        };
        let spread = inflation.sqrt();
        let se = se * spread;
        let alpha = level.alpha();
        let inflate = (u / (u - 1.0)).sqrt();
        let t = student_t_quantile(1.0 - alpha / 2.0, df);
        // Expanded percentile: the normal-scale multiplier √(u/(u−1))·t, turned back into a
        // tail.
        let tail = normal_cdf(-inflate * t);
        let spread_out = |q: f64| {
            if inflation > 1.0 {
                point + spread * (q - point)
            } else {
                q
            }
        };
        let pct = (
            spread_out(quantile_of_sorted(draws, tail)),
            spread_out(quantile_of_sorted(draws, 1.0 - tail)),
        );
        let half = t * inflate * se;
        let tint = (point - half, point + half);
        Intervals {
            pct,
            tint,
            low: pct.0.min(tint.0).min(point),
            high: pct.1.max(tint.1).max(point),
            df,
            se,
        }
    }
}

/// The one-way ANOVA split of the per-round log-ratios over hosts (method of moments), as
/// variances. The only place the between-host term is computed: the bootstrap below shrinks
/// host means with it, and [`crate::verdict::estimate_noise`] reports it as SDs, so the interval
/// and the reported noise cannot drift apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NoiseSplit {
    /// σ_w²: the within-host variance, pooled over hosts; 0 when no host has two rounds.
    pub(crate) within: f64,
    /// The sample variance of the host means; `None` with fewer than two hosts.
    pub(crate) host_means: Option<f64>,
    /// σ_h² = var(host means) − σ_w² · mean(1/n_host), truncated at 0; 0 with one host.
    pub(crate) between: f64,
}

/// Splits the noise of `paired` into [`NoiseSplit`]'s within- and between-host variances.
pub(crate) fn noise_split(paired: &PairedRounds) -> NoiseSplit {
    let mut ss = 0.0;
    let mut df = 0usize;
    for h in &paired.hosts {
        let m = h.mean_log_ratio();
        ss += h.log_ratios.iter().map(|v| (v - m) * (v - m)).sum::<f64>();
        df += h.log_ratios.len() - 1;
    }
    let within = if df > 0 { ss / df as f64 } else { 0.0 };
    let means: Vec<f64> = paired
        .hosts
        .iter()
        .map(HostRounds::mean_log_ratio)
        .collect();
    let inv_n: Vec<f64> = paired
        .hosts
        .iter()
        .map(|h| 1.0 / h.log_ratios.len() as f64)
        .collect();
    let host_means = variance_unchecked(&means);
    let between = match host_means {
        Some(v) => (v - within * mean_unchecked(&inv_n)).max(0.0),
        None => 0.0,
    };
    NoiseSplit {
        within,
        host_means,
        between,
    }
}

/// The factor c that shrinks host means toward their mean before resampling hosts, so that
/// resampling rounds inside the chosen hosts does not count round noise twice.
///
/// A host mean varies by σ_h² + σ_w²/n: its own true ratio plus the noise of its n rounds.
/// Resampling raw host means and then their rounds adds the round noise a second time, which
/// inflates the bootstrap variance of the estimate by up to σ_w²/(n·h) (Davison & Hinkley §3.8;
/// with 8 noisy rounds per host that made intervals ~35% too wide in our simulations). Scaling
/// the host means' deviations by c = √(max(0, s_m² − σ̂_w²·mean(1/n)) / s_m²) leaves them the
/// spread of the host component alone, σ̂_h², the method-of-moments estimate; rounds resampled
/// within then restore σ_w²/n once. This is the rescaled-residual bootstrap for multilevel data
/// of Carpenter, Goldstein & Rasbash (JRSS C 52, 2003). c = 0 when hosts differ no more than
/// their round noise explains, 1 when round noise is negligible.
fn host_shrinkage(split: &NoiseSplit) -> f64 {
    let Some(spread) = split.host_means else {
        return 1.0;
    };
    if spread <= 0.0 || !spread.is_finite() {
        return 0.0;
    }
    // split.between is (spread − σ̂_w² · mean(1/n)) truncated at 0: the host component alone.
    (split.between / spread).sqrt().clamp(0.0, 1.0)
}

/// Mean of a with-replacement resample of `values`, without materialising it.
fn resampled_mean(rng: &mut Resampler, values: &[f64]) -> f64 {
    let n = values.len();
    if n == 1 {
        return values[0];
    }
    let mut sum = 0.0;
    for _ in 0..n {
        sum += values[rng.index(n)];
    }
    let m = sum / n as f64;
    if m.is_finite() {
        m
    } else {
        // Only for log-ratios near f64::MAX, which no real ratio produces; keep it correct.
        let picked: Vec<f64> = (0..n).map(|_| values[rng.index(n)]).collect();
        mean_unchecked(&picked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paired::Arm;

    fn paired(hosts: &[&[f64]]) -> PairedRounds {
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
                    log_ratios: lr.to_vec(),
                })
                .collect(),
            unpaired_rounds: 0,
        }
    }

    #[test]
    fn one_host_resamples_rounds_only_and_says_so() {
        let p = paired(&[&[0.01, 0.02, 0.0, 0.015, 0.005, 0.012]]);
        let r = Resamples::new(1000).unwrap();
        let i = hierarchical_ratio_interval(&p, r, ConfidenceLevel::NINETY_FIVE, Seed(1)).unwrap();
        assert_eq!(i.resampling, Resampling::RoundsOnly);
        assert_eq!(i.units, 6);
        assert!(i.low <= i.ratio && i.ratio <= i.high);
        assert!(i.low > 1.0, "all rounds favour B: {i:?}");
    }

    #[test]
    fn hosts_are_the_unit_when_there_are_several() {
        // Two hosts that disagree: 10 tight rounds each cannot make the interval narrow.
        let h1 = [0.05; 10];
        let h2 = [-0.03; 10];
        let p = paired(&[&h1, &h2]);
        let r = Resamples::new(1000).unwrap();
        let i = hierarchical_ratio_interval(&p, r, ConfidenceLevel::NINETY_FIVE, Seed(1)).unwrap();
        assert_eq!(i.resampling, Resampling::HostsThenRounds { hosts: 2 });
        assert_eq!(i.df, 1.0);
        assert!(i.low < 0.9 && i.high > 1.1, "{i:?}");
    }

    #[test]
    fn refuses_a_single_unit() {
        let p = paired(&[&[0.01]]);
        let e = hierarchical_ratio_interval(
            &p,
            Resamples::new(10).unwrap(),
            ConfidenceLevel::NINETY_FIVE,
            Seed(0),
        );
        assert!(matches!(e, Err(StatsError::TooFewRounds { .. })));
    }
}

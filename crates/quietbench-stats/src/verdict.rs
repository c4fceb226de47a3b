//! The A/B verdict: is the candidate faster, slower, or not detectably different, with the
//! interval and the smallest difference this run could have detected.
//!
//! Rule: the hierarchical bootstrap interval of the candidate / baseline ratio
//! ([`crate::hierarchical`]) at the configured level; an interval that excludes 1 is a
//! difference, in the direction it lies; otherwise no difference was detected. The minimum
//! detectable effect is reported either way, so "no difference" always says how large a
//! difference could have hidden. Below [`MIN_PAIRED_ROUNDS`] paired rounds the verdict is
//! refused with the number of rounds still to run: with fewer, the t quantile alone
//! (t(0.975, 3) = 3.18) makes any interval too wide to mean anything and the bootstrap has too
//! few distinct resamples to be trusted.
//!
//! A host whose rounds were serially correlated ([`crate::serial_correlation`] above
//! [`crate::bursty_threshold`]) is called bursty in a warning that gives the correlation, how
//! much the interval was widened for it ([`crate::hierarchical`]) and what that cost in minimum
//! detectable effect, and the design that would have done better: more, shorter rounds, or
//! pairs of invocations within each trial.

use std::fmt;

use serde::Serialize;

use crate::bootstrap::{ConfidenceLevel, Resamples, Seed};
use crate::dist::student_t_quantile;
use crate::error::StatsError;
use crate::hierarchical::{
    MAX_SERIAL_CORRELATION, RatioInterval, Resampling, hierarchical_ratio_interval, noise_split,
};
use crate::paired::{Arm, Direction, Observation, PairedRounds, pair_rounds};
use crate::power::{DEFAULT_POWER, Noise};
use crate::serial;

/// Fewest paired rounds a verdict accepts.
pub const MIN_PAIRED_ROUNDS: usize = 5;

/// Below this many resamples the verdict warns that its endpoints carry Monte-Carlo error.
const FEW_RESAMPLES: u32 = 1000;

/// Below this many rounds on a single host the bursty warning adds that the correction may
/// fall short: the serial correlation's standard error is then above 0.25, and in simulation
/// (tests/coverage.rs) 8 strongly correlated rounds (ρ = 0.6) still gave 10% false positives.
const FEW_ROUNDS_FOR_SERIAL: usize = 15;

/// How to judge.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct VerdictConfig {
    /// Denominator of the ratio ("A").
    pub baseline: Arm,
    /// Numerator of the ratio ("B").
    pub candidate: Arm,
    /// Whether lower or higher values are better.
    pub direction: Direction,
    /// Confidence level of the interval; α = 1 − level is the false-positive rate.
    pub level: ConfidenceLevel,
    /// Power at which the minimum detectable effect is quoted.
    pub power: f64,
    /// Bootstrap resamples.
    pub resamples: Resamples,
    /// Bootstrap seed.
    pub seed: Seed,
    /// Fewest paired rounds to judge; at least [`MIN_PAIRED_ROUNDS`].
    pub min_rounds: usize,
}

impl Default for VerdictConfig {
    fn default() -> Self {
        VerdictConfig {
            baseline: Arm::A,
            candidate: Arm::B,
            direction: Direction::LowerIsBetter,
            level: ConfidenceLevel::NINETY_FIVE,
            power: DEFAULT_POWER,
            resamples: Resamples::DEFAULT,
            seed: Seed(0),
            min_rounds: MIN_PAIRED_ROUNDS,
        }
    }
}

/// Which way the comparison came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VerdictKind {
    /// The interval contains 1: no difference detected.
    NoDifference,
    /// The baseline is better (for times: faster).
    AFaster,
    /// The candidate is better.
    BFaster,
}

/// A judged comparison. `Display` writes the sentence a report prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The outcome.
    pub kind: VerdictKind,
    /// Candidate / baseline, geometric mean of paired ratios.
    pub ratio: f64,
    /// Lower end of the interval for the ratio.
    pub ci_low: f64,
    /// Upper end of the interval for the ratio.
    pub ci_high: f64,
    /// Minimum detectable effect at this noise and design, relative (0.006 for 0.6%).
    pub mde: f64,
    /// Paired rounds used, over all hosts.
    pub rounds: usize,
    /// Hosts used.
    pub hosts: usize,
    /// How the interval was obtained, in words.
    pub method: String,
    /// What the reader should know before trusting it.
    pub warnings: Vec<String>,
    /// Confidence level.
    pub level: ConfidenceLevel,
    /// Direction of the metric.
    pub direction: Direction,
    /// The baseline arm.
    pub baseline: Arm,
    /// The candidate arm.
    pub candidate: Arm,
    /// Observed noise of the per-round log-ratios, for planning the next run
    /// ([`crate::rounds_needed`], [`crate::hosts_needed`]).
    pub noise: Noise,
    /// The interval in detail.
    pub interval: RatioInterval,
    /// Lag-1 autocorrelation of consecutive rounds within hosts
    /// ([`crate::serial_correlation`]); clearly positive on a bursty host. `None` when it
    /// cannot be estimated.
    pub serial_correlation: Option<f64>,
}

/// Judges `observations`: pairs them by round ([`pair_rounds`]) and calls [`judge_paired`].
pub fn judge(observations: &[Observation], config: &VerdictConfig) -> Result<Verdict, StatsError> {
    let paired = pair_rounds(observations, config.baseline, config.candidate)?;
    judge_paired(&paired, config)
}

/// Judges already-paired rounds.
pub fn judge_paired(paired: &PairedRounds, config: &VerdictConfig) -> Result<Verdict, StatsError> {
    if !(config.power > 0.0 && config.power < 1.0) {
        return Err(StatsError::InvalidPower(config.power));
    }
    let need = config.min_rounds.max(MIN_PAIRED_ROUNDS);
    let have = paired.rounds();
    if have < need {
        return Err(StatsError::TooFewRounds { have, need });
    }
    let interval =
        hierarchical_ratio_interval(paired, config.resamples, config.level, config.seed)?;
    let (ratio, low, high) = (interval.ratio, interval.low, interval.high);

    let kind = if low > 1.0 || high < 1.0 {
        let candidate_higher = low > 1.0;
        match (config.direction, candidate_higher) {
            (Direction::LowerIsBetter, false) | (Direction::HigherIsBetter, true) => {
                VerdictKind::BFaster
            }
            _ => VerdictKind::AFaster,
        }
    } else {
        VerdictKind::NoDifference
    };

    let mde = mde_of(low, high, interval.df, config);

    let hosts = paired.host_count();
    let noise = estimate_noise(paired);
    let mut warnings = warnings(paired, &interval, kind, ratio, mde);
    if let Some(w) = bursty_warning(paired, &interval, mde, config) {
        warnings.push(w);
    }
    let mut method = match interval.resampling {
        Resampling::RoundsOnly => format!(
            "bootstrap over rounds (one host), {} resamples, seed {}; expanded percentile \
             joined with bootstrap-t, {} df",
            interval.resamples.get(),
            config.seed.0,
            format_df(interval.df)
        ),
        Resampling::HostsThenRounds { hosts } => format!(
            "hierarchical bootstrap ({hosts} hosts, then rounds within each), {} resamples, \
             seed {}; expanded percentile joined with bootstrap-t, {} df",
            interval.resamples.get(),
            config.seed.0,
            interval.df
        ),
    };
    if interval.variance_inflation > 1.0 {
        method.push_str(&format!(
            "; widened for serially correlated rounds (ρ = {:.2}: variance ×{:.2}, {:.1} \
             effective rounds)",
            interval
                .serial_correlation
                .unwrap_or(0.0)
                .min(MAX_SERIAL_CORRELATION),
            interval.variance_inflation,
            interval.units as f64 / interval.variance_inflation
        ));
    }
    Ok(Verdict {
        kind,
        ratio,
        ci_low: low,
        ci_high: high,
        mde,
        rounds: have,
        hosts,
        method,
        warnings,
        level: config.level,
        direction: config.direction,
        baseline: config.baseline,
        candidate: config.candidate,
        noise,
        interval,
        serial_correlation: interval.serial_correlation,
    })
}

/// Degrees of freedom as printed: whole numbers as they are, others to one decimal.
fn format_df(df: f64) -> String {
    if df.fract() == 0.0 {
        format!("{df}")
    } else {
        format!("{df:.1}")
    }
}

/// MDE of an interval [low, high] with `df` degrees of freedom: an effect the size of the
/// half-width w is detected half the time; one of w · (t_crit + t_power) / t_crit is detected
/// with the requested power. For a symmetric t interval this is the textbook
/// (t_crit + t_power)·SE.
fn mde_of(low: f64, high: f64, df: f64, config: &VerdictConfig) -> f64 {
    let t_crit = student_t_quantile(1.0 - config.level.alpha() / 2.0, df);
    let t_power = student_t_quantile(config.power, df);
    let half_width = (high.ln() - low.ln()) / 2.0;
    (half_width * (t_crit + t_power) / t_crit).exp_m1()
}

/// The warning for rounds that correlated clearly ([`crate::bursty_threshold`]): by how much,
/// what it cost, and what would do better. `None` for rounds that look independent.
fn bursty_warning(
    paired: &PairedRounds,
    interval: &RatioInterval,
    mde: f64,
    config: &VerdictConfig,
) -> Option<String> {
    let estimate = serial::estimate(paired)?;
    let rho = estimate.rho;
    if rho <= serial::bursty_threshold(estimate.pairs) {
        return None;
    }
    let remedy = "more, shorter rounds would narrow it (A and B then run closer together, so a \
                  spell more often hits both), as would `--interleave invocations` where the \
                  run used another mode (it pairs A and B within each trial)";
    let is_capped = rho > MAX_SERIAL_CORRELATION;
    let capped = if is_capped {
        format!(", counted as {MAX_SERIAL_CORRELATION}, the most this correction allows")
    } else {
        String::new()
    };
    Some(match interval.resampling {
        Resampling::RoundsOnly => {
            let (lo, hi) = interval.if_independent;
            let widened = (interval.high / interval.low).ln() / (hi / lo).ln() - 1.0;
            let mde_independent = mde_of(lo, hi, interval.units as f64 - 1.0, config);
            let few = if interval.units < FEW_ROUNDS_FOR_SERIAL {
                format!(
                    "; with {} rounds the correlation is known only roughly, and the interval \
                     may still be too narrow",
                    interval.units
                )
            } else if is_capped {
                "; the interval may still be too narrow".to_owned()
            } else {
                String::new()
            };
            format!(
                "the host was bursty: consecutive rounds correlated (ρ = {rho:.2}{capped}), so \
                 its {} rounds count as {:.1} independent ones; the interval was widened by \
                 {:.0}% for it, and the smallest detectable difference rose from {} to {}{few}; \
                 {remedy}",
                interval.units,
                interval.units as f64 / interval.variance_inflation,
                widened * 100.0,
                pct(mde_independent),
                pct(mde)
            )
        }
        Resampling::HostsThenRounds { hosts } => {
            let per_host = paired.rounds() as f64 / hosts as f64;
            let r = rho.clamp(0.0, MAX_SERIAL_CORRELATION);
            format!(
                "the hosts were bursty: consecutive rounds on a host correlated (ρ = \
                 {rho:.2}{capped}), so each host's {per_host:.0} rounds (on average) count as \
                 {:.1} independent ones; the interval rests on the hosts' means, which carry \
                 this already, so it was not widened, but those means are noisier than \
                 independent rounds would have made them; {remedy}",
                per_host * (1.0 - r) / (1.0 + r)
            )
        }
    })
}

/// Noise of the per-round log-ratios by one-way ANOVA over hosts: σ_w pooled within hosts;
/// σ_h² = var(host means) − σ_w² · mean(1/n_host), truncated at 0 (method of moments). The
/// split is computed by the hierarchical bootstrap's module, which shrinks host means with the
/// same σ_h², so the two always agree.
pub fn estimate_noise(paired: &PairedRounds) -> Noise {
    let split = noise_split(paired);
    Noise {
        within_host_sd: split.within.sqrt(),
        between_host_sd: split.between.sqrt(),
    }
}

fn warnings(
    paired: &PairedRounds,
    interval: &RatioInterval,
    kind: VerdictKind,
    ratio: f64,
    mde: f64,
) -> Vec<String> {
    let mut out = Vec::new();
    let hosts = paired.host_count();
    if paired.unpaired_rounds > 0 {
        out.push(format!(
            "{} round(s) had only one of the two arms and were left out; check for \
             failed trials",
            paired.unpaired_rounds
        ));
    }
    if hosts == 1 {
        out.push(
            "all rounds ran on one host: the result holds for that host; other hosts and CPU \
             models may differ (run on several hosts to generalise)"
                .to_owned(),
        );
    } else if hosts < 5 {
        out.push(format!(
            "only {hosts} hosts: the interval rests on {} degrees of freedom between hosts and \
             is wide; more hosts narrow it faster than more rounds",
            hosts - 1
        ));
    }
    let mut models: Vec<&str> = paired.hosts.iter().map(|h| h.cpu_model.as_str()).collect();
    models.sort_unstable();
    models.dedup();
    if models.len() > 1 {
        out.push(format!(
            "hosts span {} CPU models ({}); the ratio averages over them",
            models.len(),
            models.join(", ")
        ));
    }
    if kind != VerdictKind::NoDifference && (ratio.ln().abs()) < mde.ln_1p() {
        out.push(
            "the difference is smaller than this run's minimum detectable effect: a repeat \
             run may well not detect it, and its size is likely overstated"
                .to_owned(),
        );
    }
    if interval.resamples.get() < FEW_RESAMPLES {
        out.push(format!(
            "only {} bootstrap resamples: the interval's ends carry Monte-Carlo error; use \
             {} or more",
            interval.resamples.get(),
            Resamples::DEFAULT.get()
        ));
    }
    out
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = format_level(self.level.get());
        let hosts = match self.hosts {
            1 => "1 host".to_owned(),
            h => format!("{h} hosts"),
        };
        let (a, b) = (self.baseline, self.candidate);
        match self.kind {
            VerdictKind::NoDifference => write!(
                f,
                "no difference detected (could have detected ≥ {}); {b}/{a} = {:.4}, {level} CI \
                 [{:.4}, {:.4}], {} rounds on {hosts}",
                pct(self.mde),
                self.ratio,
                self.ci_low,
                self.ci_high,
                self.rounds
            )?,
            kind => {
                let (winner, gain, lo, hi) = self.gain(kind);
                write!(
                    f,
                    "{winner} is {} faster, {level} CI [{}, {}], {} rounds on {hosts}; smallest \
                     detectable difference at this noise {}",
                    pct(gain),
                    pct(lo),
                    pct(hi),
                    self.rounds,
                    pct(self.mde)
                )?
            }
        }
        for w in &self.warnings {
            write!(f, "\n  warning: {w}")?;
        }
        Ok(())
    }
}

impl Verdict {
    /// The winner, its relative advantage and the interval of that advantage. "Faster" is the
    /// winner's gain over the loser in the metric's own terms: for times, the share of the
    /// loser's time saved; for throughputs, the extra throughput over the loser's.
    fn gain(&self, kind: VerdictKind) -> (Arm, f64, f64, f64) {
        let baseline_wins = kind == VerdictKind::AFaster;
        let (gain, lo, hi) = advantage(
            self.direction,
            baseline_wins,
            self.ratio,
            self.ci_low,
            self.ci_high,
        );
        let winner = if baseline_wins {
            self.baseline
        } else {
            self.candidate
        };
        (winner, gain, lo, hi)
    }
}

/// The better side's advantage over the other, and its interval, from a candidate / baseline
/// `ratio` and its interval `[low, high]`, in the metric's own terms: for times, the share of
/// the loser's time saved; for throughputs, the extra throughput over the loser's.
/// `baseline_wins` says which side is the better one.
pub fn advantage(
    direction: Direction,
    baseline_wins: bool,
    ratio: f64,
    low: f64,
    high: f64,
) -> (f64, f64, f64) {
    let (r, l, h) = (ratio, low, high);
    match (baseline_wins, direction) {
        (true, Direction::LowerIsBetter) => (1.0 - 1.0 / r, 1.0 - 1.0 / l, 1.0 - 1.0 / h),
        (true, Direction::HigherIsBetter) => (1.0 / r - 1.0, 1.0 / h - 1.0, 1.0 / l - 1.0),
        (false, Direction::LowerIsBetter) => (1.0 - r, 1.0 - h, 1.0 - l),
        (false, Direction::HigherIsBetter) => (r - 1.0, l - 1.0, h - 1.0),
    }
}

/// 0.95 → "95%", 0.999 → "99.9%".
fn format_level(level: f64) -> String {
    format!("{}%", (level * 1000.0).round() / 10.0)
}

/// A relative amount as a percentage: one decimal from 1% up, two below, so that a 0.06%
/// detectable difference does not print as 0.1% or 0.0%.
pub fn pct(x: f64) -> String {
    let v = x * 100.0;
    if v.abs() >= 1.0 {
        format!("{v:.1}%")
    } else {
        format!("{v:.2}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(per_round: &[(f64, f64)], host: &str) -> Vec<Observation> {
        per_round
            .iter()
            .enumerate()
            .flat_map(|(r, (a, b))| {
                [(Arm::A, *a), (Arm::B, *b)].map(|(arm, value)| Observation {
                    host: host.into(),
                    cpu_model: "m".into(),
                    round: r as u32,
                    arm,
                    value,
                })
            })
            .collect()
    }

    #[test]
    fn the_reported_noise_and_the_bootstrap_shrinkage_come_from_one_split() {
        // Three hosts whose B/A ratios differ by more than their round noise explains.
        let mut obs = Vec::new();
        for (h, shift) in [("h0", 0.97), ("h1", 1.0), ("h2", 1.04)] {
            let rounds: Vec<(f64, f64)> = (0..8)
                .map(|i| (100.0, 100.0 * shift * (1.0 + [0.01, -0.01][i % 2])))
                .collect();
            obs.extend(run(&rounds, h));
        }
        let v = judge(&obs, &VerdictConfig::default()).unwrap();
        let split = noise_split(&pair_rounds(&obs, Arm::A, Arm::B).unwrap());
        assert_eq!(v.noise.within_host_sd, split.within.sqrt());
        assert_eq!(v.noise.between_host_sd, split.between.sqrt());
        assert!(split.between > 0.0, "{split:?}");
        let c = (split.between / split.host_means.unwrap()).sqrt();
        assert_eq!(v.interval.host_shrinkage, Some(c));
    }

    #[test]
    fn refuses_too_few_rounds_and_says_how_many_more() {
        let obs = run(&[(1.0, 1.0), (1.0, 1.1), (1.0, 0.9)], "h");
        let e = judge(&obs, &VerdictConfig::default()).unwrap_err();
        assert_eq!(e, StatsError::TooFewRounds { have: 3, need: 5 });
        assert!(e.to_string().contains("run 2 more"), "{e}");
    }

    #[test]
    fn a_clear_speedup_reads_as_a_sentence() {
        // B takes ~2% less time every round, with ±0.3% noise.
        let rounds: Vec<(f64, f64)> = (0..40)
            .map(|i| {
                let wiggle = [0.003, -0.002, 0.0, 0.001, -0.003][i % 5];
                (100.0, 98.0 * (1.0 + wiggle))
            })
            .collect();
        let v = judge(&run(&rounds, "h"), &VerdictConfig::default()).unwrap();
        assert_eq!(v.kind, VerdictKind::BFaster);
        let text = v.to_string();
        assert!(text.starts_with("B is 2.0% faster, 95% CI ["), "{text}");
        assert!(
            text.contains("40 rounds on 1 host; smallest detectable"),
            "{text}"
        );
        assert!(
            text.contains("warning: all rounds ran on one host"),
            "{text}"
        );

        // The same data read as throughput: now A is the better one.
        let config = VerdictConfig {
            direction: Direction::HigherIsBetter,
            ..VerdictConfig::default()
        };
        let v = judge(&run(&rounds, "h"), &config).unwrap();
        assert_eq!(v.kind, VerdictKind::AFaster);
        assert!(v.to_string().starts_with("A is 2.1% faster"), "{v}");
    }

    #[test]
    fn identical_variants_read_as_no_difference_with_an_mde() {
        let rounds: Vec<(f64, f64)> = (0..20)
            .map(|i| {
                let wiggle = [0.004, -0.004, 0.002, -0.002][i % 4];
                (100.0, 100.0 * (1.0 + wiggle))
            })
            .collect();
        let v = judge(&run(&rounds, "h"), &VerdictConfig::default()).unwrap();
        assert_eq!(v.kind, VerdictKind::NoDifference);
        assert!(v.ci_low < 1.0 && v.ci_high > 1.0);
        assert!(v.mde > 0.0 && v.mde < 0.01, "{v:?}");
        assert!(
            v.to_string()
                .starts_with("no difference detected (could have detected ≥ 0.")
        );
    }

    /// Rounds in spells: `spell` rounds at +1%, then `spell` at −1%, and so on, with a small
    /// wiggle.
    fn spells(rounds: usize, spell: usize) -> Vec<(f64, f64)> {
        (0..rounds)
            .map(|i| {
                let level = if (i / spell).is_multiple_of(2) {
                    0.01
                } else {
                    -0.01
                };
                let wiggle = [0.002, -0.001, 0.0, 0.001, -0.002][i % 5];
                (100.0, 100.0 * (1.0 + level + wiggle))
            })
            .collect()
    }

    #[test]
    fn a_bursty_host_is_named_and_its_interval_widened() {
        let obs = run(&spells(30, 5), "h");
        let v = judge(&obs, &VerdictConfig::default()).unwrap();
        let rho = v.serial_correlation.unwrap();
        assert!(rho > 0.6, "{rho}");
        assert_eq!(v.interval.serial_correlation, Some(rho));
        assert!(v.interval.variance_inflation > 3.0, "{:?}", v.interval);
        let (lo, hi) = v.interval.if_independent;
        assert!(v.ci_low < lo && v.ci_high > hi, "{v:?}");
        assert!(v.interval.df < 29.0 / 3.0, "{}", v.interval.df);
        assert!(
            v.method
                .contains("widened for serially correlated rounds (ρ = "),
            "{}",
            v.method
        );
        let text = v.to_string();
        eprintln!("{text}");
        let warning = v.warnings.iter().find(|w| w.contains("bursty")).unwrap();
        for part in [
            "the host was bursty: consecutive rounds correlated (ρ = ",
            "its 30 rounds count as ",
            "the interval was widened by ",
            "the smallest detectable difference rose from ",
            &format!(" to {}", pct(v.mde)),
            "more, shorter rounds would narrow it",
            "`--interleave invocations`",
        ] {
            assert!(warning.contains(part), "{part:?} not in {warning}");
        }
    }

    #[test]
    fn a_short_bursty_run_says_the_correction_may_fall_short() {
        let v = judge(&run(&spells(12, 6), "h"), &VerdictConfig::default()).unwrap();
        let warning = v.warnings.iter().find(|w| w.contains("bursty")).unwrap();
        assert!(
            warning.contains("with 12 rounds the correlation is known only roughly"),
            "{warning}"
        );
        assert!(
            warning.contains(", counted as 0.9, the most this correction allows"),
            "{warning}"
        );
        eprintln!("{warning}");
        // The correlation of so short a run is capped, and the degrees of freedom floored.
        assert!(
            v.method
                .contains("1 df; widened for serially correlated rounds (ρ = 0.90"),
            "{}",
            v.method
        );
    }

    #[test]
    fn several_bursty_hosts_are_named_but_not_widened() {
        let mut obs = Vec::new();
        for h in ["h0", "h1", "h2", "h3", "h4"] {
            obs.extend(run(&spells(20, 4), h));
        }
        let v = judge(&obs, &VerdictConfig::default()).unwrap();
        assert!(v.serial_correlation.unwrap() > 0.5, "{v:?}");
        assert_eq!(v.interval.variance_inflation, 1.0);
        assert_eq!((v.ci_low, v.ci_high), v.interval.if_independent);
        assert!(!v.method.contains("serially"), "{}", v.method);
        let warning = v.warnings.iter().find(|w| w.contains("bursty")).unwrap();
        assert!(
            warning.starts_with("the hosts were bursty: consecutive rounds on a host correlated"),
            "{warning}"
        );
        assert!(warning.contains("so it was not widened"), "{warning}");
    }

    #[test]
    fn rounds_that_alternate_are_not_called_bursty() {
        // The rounds of `identical_variants_read_as_no_difference_with_an_mde`: negatively
        // correlated, so nothing is corrected.
        let rounds: Vec<(f64, f64)> = (0..20)
            .map(|i| {
                let wiggle = [0.004, -0.004, 0.002, -0.002][i % 4];
                (100.0, 100.0 * (1.0 + wiggle))
            })
            .collect();
        let v = judge(&run(&rounds, "h"), &VerdictConfig::default()).unwrap();
        assert!(v.serial_correlation.unwrap() < 0.0, "{v:?}");
        assert_eq!(v.interval.variance_inflation, 1.0);
        assert_eq!(v.interval.df, 19.0);
        assert!(v.warnings.iter().all(|w| !w.contains("bursty")), "{v}");
        assert!(!v.method.contains("serially"), "{}", v.method);
    }

    #[test]
    fn formats_levels_and_percentages() {
        assert_eq!(format_level(0.95), "95%");
        assert_eq!(format_level(0.999), "99.9%");
        assert_eq!(pct(0.021), "2.1%");
        assert_eq!(pct(0.0062), "0.62%");
        assert_eq!(format_df(19.0), "19");
        assert_eq!(format_df(3.437), "3.4");
    }
}

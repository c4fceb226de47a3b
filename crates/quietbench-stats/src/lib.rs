//! Pure statistics for quietbench, with no I/O: everything here is a function of numbers, so it
//! can be tested on data with a known truth.
//!
//! Why a crate of its own: cloud machines lie. Two runs of the same command on the same VM can
//! come out 9% apart, the CPU lottery puts a 6% gap between instances of one type, and a naive
//! t-test calls noise "significant" far more often than its 5% promise. quietbench's verdicts
//! are meant for release decisions, so every rule behind them lives here, documented with its
//! reasoning and references in `docs/statistics.md`, and tested on simulated data:
//!
//! - [`summary`](summarize) and [`robust`]: summaries, median, MAD, trimmed mean, quantiles;
//! - [`bootstrap`]: seeded percentile and BCa intervals, with validated [`Resamples`] and
//!   [`ConfidenceLevel`];
//! - [`paired`]: the A/B data model ([`Observation`]) and per-round pairing into log-ratios;
//! - [`serial`]: serial correlation of a host's rounds, the sign of a bursty host;
//! - [`hierarchical`]: the hosts-then-rounds bootstrap interval of the B/A ratio, widened for
//!   serially correlated rounds on a single host;
//! - [`components`]: variance between CPU models, between hosts, within a host;
//! - [`outliers`]: outlier hosts by modified z-score;
//! - [`interaction`]: whether an A/B change differs between groups of hosts (CPU models);
//! - [`power`](mod@power): minimum detectable effect, power, rounds and hosts needed;
//! - [`verdict`]: the A/B [`Verdict`] and the sentence it prints;
//! - [`stopping`]: the adaptive stopping rule;
//! - [`unpaired`]: Welch's interval for two runs that were not interleaved;
//! - [`changepoint`]: change points in a history of runs (a studentized mean shift, or
//!   E-divisive), with a permutation test.
//!
//! Modules depend on each other one way only, from the bottom up: each imports only modules
//! listed before it here, never one after it.
//!
//! 1. `arm` (the [`Arm`] newtype) and [`dist`]: leaves, importing nothing from the crate;
//! 2. `error` ([`StatsError`]): imports only `arm`, so that every other module can return
//!    it;
//! 3. [`robust`], `summary`, [`bootstrap`]: numbers in, numbers out;
//! 4. [`paired`]: the data model ([`Observation`], [`PairedRounds`]), re-exporting [`Arm`];
//! 5. [`components`], [`outliers`], [`power`](mod@power), [`unpaired`], [`interaction`],
//!    [`changepoint`], [`serial`]: each on the layers below;
//! 6. [`hierarchical`]: the bootstrap interval (on [`serial`] for its correction), and the one
//!    computation of the within- and between-host variances (`noise_split`);
//! 7. [`verdict`]: the judgement, on [`hierarchical`] (its interval and its noise split) and
//!    [`power`](mod@power);
//! 8. [`stopping`]: on [`verdict`].

mod arm;
pub mod bootstrap;
pub mod changepoint;
pub mod components;
pub mod dist;
mod error;
pub mod hierarchical;
pub mod interaction;
pub mod outliers;
pub mod paired;
pub mod power;
pub mod rng;
pub mod robust;
pub mod serial;
pub mod stopping;
mod summary;
pub mod unpaired;
pub mod verdict;

pub use bootstrap::{
    BootstrapMethod, ConfidenceLevel, Interval, Resamples, Seed, bca_interval, bootstrap_interval,
    mean_statistic, percentile_interval,
};
pub use changepoint::{
    ChangePoint, ChangePointConfig, ChangePointMethod, change_points, runs_to_detect,
};
pub use components::{HostMean, ModelGroup, Shares, VarianceComponents, variance_components};
pub use dist::{normal_cdf, normal_quantile, student_t_cdf, student_t_quantile};
pub use error::StatsError;
pub use hierarchical::{RatioInterval, Resampling, hierarchical_ratio_interval};
pub use interaction::{GroupRatio, RatioDifference, ratio_difference};
pub use outliers::{HostScore, IGLEWICZ_HOAGLIN_THRESHOLD, OutlierScan, outlier_hosts};
pub use paired::{
    Arm, Direction, HostRounds, Observation, PairedRounds, pair_rounds, paired_t_interval,
};
pub use power::{
    DEFAULT_POWER, Design, Mde, Noise, hosts_needed, minimum_detectable_effect, power,
    rounds_needed, standard_error,
};
pub use robust::{MAD_NORMAL_SCALE, mad, mean, median, quantile, quantiles, stdev, trimmed_mean};
pub use serial::{bursty_threshold, serial_correlation};
pub use stopping::{Decision, StopReason, StoppingRule};
pub use summary::{Summary, summarize};
pub use unpaired::{UnpairedRatio, units_needed, unpaired_ratio};
pub use verdict::{
    MIN_PAIRED_ROUNDS, Verdict, VerdictConfig, VerdictKind, advantage, estimate_noise, judge,
    judge_paired, pct,
};

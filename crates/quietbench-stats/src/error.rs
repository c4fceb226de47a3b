//! The one error type of the crate. Every message says what was wrong, with which input, and
//! what to do about it, because these messages end up in front of the engineer running the
//! benchmark.

use crate::arm::Arm;

/// Why a statistic could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    /// A statistic was asked of no data.
    #[error("{what}: no values to work with; record at least one measurement first")]
    Empty {
        /// The statistic or input that was empty.
        what: &'static str,
    },

    /// An input was NaN or infinite. A probe that cannot measure reports no value; a NaN here
    /// means a bug upstream, and a verdict computed around it would be meaningless.
    #[error("{what}: value #{index} is {value}, not a finite number; drop it at the source")]
    NonFinite {
        /// The statistic or input.
        what: &'static str,
        /// Position of the offending value in the input.
        index: usize,
        /// The offending value.
        value: f64,
    },

    /// A ratio or a logarithm was asked of a value that is zero or negative.
    #[error(
        "{what}: value #{index} is {value}; ratios and log scales need values > 0 \
         (times, or throughputs, never differences)"
    )]
    NonPositive {
        /// The statistic or input.
        what: &'static str,
        /// Position of the offending value in the input.
        index: usize,
        /// The offending value.
        value: f64,
    },

    /// Finite inputs whose result does not fit in an `f64` (magnitudes near 1e308).
    #[error("{what}: the result overflowed f64; rescale the values (e.g. to another unit)")]
    Overflow {
        /// The statistic.
        what: &'static str,
    },

    /// A probability for a quantile outside [0, 1].
    #[error("quantile probability {0} is outside [0, 1]")]
    InvalidProbability(f64),

    /// A trimming fraction outside [0, 0.5).
    #[error("trim fraction {0} is outside [0, 0.5); 0.1 trims 10% from each end")]
    InvalidTrim(f64),

    /// A bootstrap with no resamples.
    #[error("a bootstrap needs at least 1 resample, got 0; use 2000 or more for a 95% interval")]
    ZeroResamples,

    /// A confidence level outside the open interval (0, 1).
    #[error("confidence level {0} is outside (0, 1); write 95% as 0.95")]
    InvalidLevel(f64),

    /// A power target outside the open interval (0, 1).
    #[error("power {0} is outside (0, 1); write 80% as 0.8")]
    InvalidPower(f64),

    /// A design or noise parameter that makes no sense (negative SD, zero rounds, ...).
    #[error("{what} is {value}, which is invalid: {why}")]
    InvalidParameter {
        /// The parameter.
        what: &'static str,
        /// Its value.
        value: f64,
        /// What it must be.
        why: &'static str,
    },

    /// Too few paired rounds to say anything trustworthy.
    #[error(
        "need at least {need} paired rounds to judge, have {have}: run {} more",
        need.saturating_sub(*have)
    )]
    TooFewRounds {
        /// Paired rounds available.
        have: usize,
        /// Paired rounds required.
        need: usize,
    },

    /// Too few independent units (trials on one host, or hosts) on one side of an unpaired
    /// comparison.
    #[error(
        "need at least {need} {unit} in the {side} to compare, have {have}: run {} more",
        need.saturating_sub(*have)
    )]
    TooFewUnits {
        /// "baseline" or "candidate".
        side: &'static str,
        /// "trials" or "hosts".
        unit: &'static str,
        /// Units available.
        have: usize,
        /// Units required.
        need: usize,
    },

    /// The baseline and the candidate are the same arm.
    #[error("baseline and candidate are both arm {0}; compare two different arms")]
    SameArm(Arm),

    /// One host reported two CPU models: a stop/start that moved the instance must get a new
    /// host id, or its rounds would be mixed across two machines.
    #[error(
        "host {host} reports CPU model {first:?} and {second:?}; give a moved instance a new \
         host id"
    )]
    InconsistentCpuModel {
        /// The host.
        host: String,
        /// The model seen first.
        first: String,
        /// The other model.
        second: String,
    },
}

/// Checks that every value is finite, naming the first that is not.
pub(crate) fn check_finite(what: &'static str, values: &[f64]) -> Result<(), StatsError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(StatsError::NonFinite {
            what,
            index,
            value: values[index],
        }),
        None => Ok(()),
    }
}

/// Checks that `values` is non-empty and finite.
pub(crate) fn check_sample(what: &'static str, values: &[f64]) -> Result<(), StatsError> {
    if values.is_empty() {
        return Err(StatsError::Empty { what });
    }
    check_finite(what, values)
}

/// Turns a non-finite result of finite inputs into an overflow error.
pub(crate) fn finite_result(what: &'static str, value: f64) -> Result<f64, StatsError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(StatsError::Overflow { what })
    }
}

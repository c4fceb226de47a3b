//! What a design can detect: the minimum detectable effect (MDE) at a given noise, the power
//! against a given effect, and the rounds or hosts needed to reach a target MDE.
//!
//! The model is the paired design of [`crate::paired`]: per-round log-ratios with a
//! round-to-round SD σ_w within a host, and a host-to-host SD σ_h of the hosts' true
//! log-ratios. With h hosts of n rounds, the standard error of the estimate is
//! SE = √(σ_h²/h + σ_w²/(h·n)) on h − 1 degrees of freedom; with a single host the claim is
//! about that host, σ_h does not enter, SE = σ_w/√n on n − 1 degrees of freedom. These match the
//! degrees of freedom of the verdict's interval.
//!
//! MDE = (t(1 − α/2, df) + t(power, df)) · SE on the log scale, reported as exp(MDE) − 1. This
//! is the usual central-t approximation to the noncentral-t power of a two-sided t test (Julious,
//! "Sample sizes for clinical trials with normal data", Statistics in Medicine 23, 2004, §2;
//! Cohen, *Statistical Power Analysis*, 1988, ch. 2); it ignores the far rejection tail and is
//! within about a percentage point of exact power above 5 degrees of freedom, slightly
//! optimistic below.

use serde::Serialize;

use crate::bootstrap::ConfidenceLevel;
use crate::dist::{student_t_cdf, student_t_quantile};
use crate::error::StatsError;

/// Power conventionally asked of a design.
pub const DEFAULT_POWER: f64 = 0.8;

/// Noise of per-round log-ratios.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Noise {
    /// σ_w: SD of a round's log-ratio around its host's mean (≈ relative SD of the ratio).
    pub within_host_sd: f64,
    /// σ_h: SD of the hosts' true log-ratios around the fleet's (host × arm interaction).
    pub between_host_sd: f64,
}

/// Rounds and hosts of a paired design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Design {
    /// Paired rounds on each host.
    pub rounds_per_host: u32,
    /// Hosts.
    pub hosts: u32,
}

/// A minimum detectable effect.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Mde {
    /// On the log-ratio scale.
    pub log: f64,
    /// As a relative change, exp(log) − 1 (0.006 for 0.6%).
    pub relative: f64,
}

impl Noise {
    fn validate(&self) -> Result<(), StatsError> {
        for (what, value) in [
            ("within-host SD", self.within_host_sd),
            ("between-host SD", self.between_host_sd),
        ] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err(StatsError::InvalidParameter {
                    what,
                    value,
                    why: "a standard deviation is finite and ≥ 0",
                });
            }
        }
        Ok(())
    }
}

impl Design {
    /// Degrees of freedom of the estimate: hosts − 1, or rounds − 1 on a single host.
    pub fn degrees_of_freedom(&self) -> f64 {
        if self.hosts >= 2 {
            f64::from(self.hosts) - 1.0
        } else {
            f64::from(self.rounds_per_host) - 1.0
        }
    }

    fn validate(&self) -> Result<(), StatsError> {
        if self.hosts == 0 || self.rounds_per_host == 0 || self.degrees_of_freedom() < 1.0 {
            return Err(StatsError::InvalidParameter {
                what: "design",
                value: f64::from(self.hosts.max(self.rounds_per_host)),
                why: "need at least 2 hosts, or 2 rounds on one host",
            });
        }
        Ok(())
    }
}

fn check_power(power: f64) -> Result<(), StatsError> {
    if power > 0.0 && power < 1.0 {
        Ok(())
    } else {
        Err(StatsError::InvalidPower(power))
    }
}

/// Standard error of the estimated log-ratio for `design` at `noise`.
pub fn standard_error(noise: Noise, design: Design) -> f64 {
    let (h, n) = (f64::from(design.hosts), f64::from(design.rounds_per_host));
    if design.hosts <= 1 {
        noise.within_host_sd / n.sqrt()
    } else {
        (noise.between_host_sd.powi(2) / h + noise.within_host_sd.powi(2) / (h * n)).sqrt()
    }
}

/// Smallest effect detected with probability `power` by a two-sided test at `level`.
pub fn minimum_detectable_effect(
    noise: Noise,
    design: Design,
    level: ConfidenceLevel,
    power: f64,
) -> Result<Mde, StatsError> {
    noise.validate()?;
    design.validate()?;
    check_power(power)?;
    let df = design.degrees_of_freedom();
    let multiplier =
        student_t_quantile(1.0 - level.alpha() / 2.0, df) + student_t_quantile(power, df);
    let log = multiplier * standard_error(noise, design);
    Ok(Mde {
        log,
        relative: log.exp_m1(),
    })
}

/// Probability that a two-sided test at `level` detects a true log-ratio `effect_log`.
pub fn power(
    effect_log: f64,
    noise: Noise,
    design: Design,
    level: ConfidenceLevel,
) -> Result<f64, StatsError> {
    noise.validate()?;
    design.validate()?;
    if !effect_log.is_finite() {
        return Err(StatsError::NonFinite {
            what: "effect",
            index: 0,
            value: effect_log,
        });
    }
    let df = design.degrees_of_freedom();
    let se = standard_error(noise, design);
    if se == 0.0 {
        return Ok(if effect_log == 0.0 {
            level.alpha()
        } else {
            1.0
        });
    }
    let crit = student_t_quantile(1.0 - level.alpha() / 2.0, df);
    let delta = effect_log.abs() / se;
    // Shifted central t: P(T > crit − δ) + P(T < −crit − δ).
    Ok((1.0 - student_t_cdf(crit - delta, df)) + student_t_cdf(-crit - delta, df))
}

/// Largest rounds-per-host or host count the planners consider.
const SEARCH_CAP: u32 = 10_000_000;

/// Rounds per host needed so that the MDE is at most `target` (relative, 0.01 for 1%), with
/// `hosts` hosts. `None` when no number of rounds suffices: with several hosts, the host-to-host
/// term σ_h²/h alone exceeds the target, and only more hosts help.
pub fn rounds_needed(
    target: f64,
    noise: Noise,
    hosts: u32,
    level: ConfidenceLevel,
    power: f64,
) -> Result<Option<u32>, StatsError> {
    check_target(target)?;
    let mde = |n: u32| {
        let design = Design {
            rounds_per_host: n,
            hosts,
        };
        minimum_detectable_effect(noise, design, level, power).map(|m| m.relative)
    };
    let low = if hosts >= 2 { 1 } else { 2 };
    smallest_satisfying(low, |n| Ok(mde(n)? <= target))
}

/// Hosts needed so that the MDE is at most `target` (relative), with `rounds_per_host` rounds
/// each. One host is the answer only when one host alone reaches the target (a claim about
/// that host); otherwise the smallest fleet of two or more. `None` when even
/// ten million hosts do not suffice.
pub fn hosts_needed(
    target: f64,
    noise: Noise,
    rounds_per_host: u32,
    level: ConfidenceLevel,
    power: f64,
) -> Result<Option<u32>, StatsError> {
    check_target(target)?;
    let mde = |h: u32| {
        let design = Design {
            rounds_per_host,
            hosts: h,
        };
        minimum_detectable_effect(noise, design, level, power).map(|m| m.relative)
    };
    if rounds_per_host >= 2 && mde(1)? <= target {
        return Ok(Some(1));
    }
    // From two hosts on, the MDE only falls as hosts are added (SE falls, df grows).
    smallest_satisfying(2, |h| Ok(mde(h)? <= target))
}

fn check_target(target: f64) -> Result<(), StatsError> {
    if target > 0.0 && target.is_finite() {
        Ok(())
    } else {
        Err(StatsError::InvalidParameter {
            what: "target MDE",
            value: target,
            why: "a relative effect > 0, e.g. 0.01 for 1%",
        })
    }
}

/// Smallest x in [low, SEARCH_CAP] with `ok(x)`, for a monotone `ok`; `None` if none.
fn smallest_satisfying(
    low: u32,
    ok: impl Fn(u32) -> Result<bool, StatsError>,
) -> Result<Option<u32>, StatsError> {
    if !ok(SEARCH_CAP)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (low, SEARCH_CAP);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: ConfidenceLevel = ConfidenceLevel::NINETY_FIVE;

    fn noise(w: f64, h: f64) -> Noise {
        Noise {
            within_host_sd: w,
            between_host_sd: h,
        }
    }

    #[test]
    fn mde_of_a_single_host() {
        // 1% round noise, 20 rounds: (2.0930 + 0.8610) · 0.01 / √20 = 0.6606% on the log scale.
        let d = Design {
            rounds_per_host: 20,
            hosts: 1,
        };
        let m = minimum_detectable_effect(noise(0.01, 0.5), d, L, 0.8).unwrap();
        assert!((m.log - 0.006_606).abs() < 1e-5, "{m:?}");
        assert!((power(m.log, noise(0.01, 0.0), d, L).unwrap() - 0.8).abs() < 1e-3);
    }

    #[test]
    fn power_rises_with_effect_and_is_alpha_at_zero() {
        let d = Design {
            rounds_per_host: 10,
            hosts: 8,
        };
        let n = noise(0.02, 0.005);
        let p0 = power(0.0, n, d, L).unwrap();
        assert!((p0 - 0.05).abs() < 1e-9, "{p0}");
        let p1 = power(0.005, n, d, L).unwrap();
        let p2 = power(0.02, n, d, L).unwrap();
        assert!(p0 < p1 && p1 < p2 && p2 <= 1.0);
    }

    #[test]
    fn planners_find_the_smallest_design() {
        let n = noise(0.01, 0.0);
        let r = rounds_needed(0.005, n, 1, L, 0.8).unwrap().unwrap();
        let at = |rounds| {
            let d = Design {
                rounds_per_host: rounds,
                hosts: 1,
            };
            minimum_detectable_effect(n, d, L, 0.8).unwrap().relative
        };
        assert!(at(r) <= 0.005 && at(r - 1) > 0.005, "{r}");
        // Host-to-host spread of 1%: 20 rounds per host cannot bring 2 hosts below 0.5%.
        let spread = noise(0.01, 0.01);
        assert_eq!(rounds_needed(0.005, spread, 2, L, 0.8).unwrap(), None);
        let h = hosts_needed(0.005, spread, 20, L, 0.8).unwrap().unwrap();
        let d = Design {
            rounds_per_host: 20,
            hosts: h,
        };
        assert!(
            minimum_detectable_effect(spread, d, L, 0.8)
                .unwrap()
                .relative
                <= 0.005
        );
        assert!(h > 20, "{h}");
    }

    #[test]
    fn refuses_nonsense() {
        let d = Design {
            rounds_per_host: 1,
            hosts: 1,
        };
        assert!(minimum_detectable_effect(noise(0.01, 0.0), d, L, 0.8).is_err());
        let d = Design {
            rounds_per_host: 5,
            hosts: 1,
        };
        assert!(minimum_detectable_effect(noise(-1.0, 0.0), d, L, 0.8).is_err());
        assert_eq!(
            minimum_detectable_effect(noise(0.01, 0.0), d, L, 1.0),
            Err(StatsError::InvalidPower(1.0))
        );
        assert!(rounds_needed(0.0, noise(0.01, 0.0), 1, L, 0.8).is_err());
    }
}

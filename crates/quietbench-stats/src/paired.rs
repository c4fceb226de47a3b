//! The data model of an A/B run and the pairing of its rounds.
//!
//! A run interleaves arms in rounds: each round on each host runs every arm once (or a
//! few times), in a random order. Pairing the arms within a round and taking the log of
//! their ratio cancels whatever drifts slower than a round (a neighbour's load, thermal state,
//! the 24-hour drift of CONTEXT §1), and the random order turns what drifts within a round into
//! symmetric noise instead of a bias. The ratio of B to A is then the geometric mean of the
//! per-round ratios.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::bootstrap::{ConfidenceLevel, Interval};
use crate::dist::student_t_quantile;
use crate::error::StatsError;
use crate::robust::{mean_unchecked, variance_unchecked};

/// Defined in its own leaf module so that [`crate::StatsError`] can name an arm without
/// depending on this module; re-exported here, its home in the public API.
pub use crate::arm::Arm;

/// One measured value: one arm, in one round, on one host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observation {
    /// The host (instance) that measured it. An instance moved by stop/start is a new host.
    pub host: String,
    /// That host's CPU model string, e.g. "Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz".
    pub cpu_model: String,
    /// The round, counted per host. Arms in the same round on the same host are paired.
    pub round: u32,
    /// Which arm ran.
    pub arm: Arm,
    /// The measured value (a time, a throughput): finite and, for ratios, positive.
    pub value: f64,
}

/// Which way is better for a metric. Times and latencies are lower-is-better, throughputs
/// higher-is-better; the ratio is always candidate / baseline, and the direction only decides
/// which side of 1 means "faster".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Direction {
    /// Smaller values are better (durations, latencies).
    #[default]
    LowerIsBetter,
    /// Larger values are better (operations per second, bytes per second).
    HigherIsBetter,
}

/// The paired rounds of one host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRounds {
    /// The host.
    pub host: String,
    /// Its CPU model.
    pub cpu_model: String,
    /// The round numbers that had both arms, ascending.
    pub rounds: Vec<u32>,
    /// ln(candidate / baseline) for each of those rounds, in the same order.
    pub log_ratios: Vec<f64>,
}

impl HostRounds {
    /// Mean log-ratio of this host.
    pub fn mean_log_ratio(&self) -> f64 {
        mean_unchecked(&self.log_ratios)
    }
}

/// Per-round log-ratios of a candidate to a baseline, grouped by host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairedRounds {
    /// The denominator of the ratio.
    pub baseline: Arm,
    /// The numerator of the ratio.
    pub candidate: Arm,
    /// Hosts with at least one paired round, by host name.
    pub hosts: Vec<HostRounds>,
    /// (host, round) cells that had only one of the two arms and were left out.
    pub unpaired_rounds: usize,
}

impl PairedRounds {
    /// Paired rounds over all hosts.
    pub fn rounds(&self) -> usize {
        self.hosts.iter().map(|h| h.log_ratios.len()).sum()
    }

    /// Hosts with at least one paired round.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// Estimated ln(candidate / baseline): the mean over hosts of each host's mean log-ratio.
    /// Hosts weigh equally, whatever their round counts, because the question is how the
    /// arms compare on a host of the fleet, not on the host that happened to run longest.
    /// With one host this is the mean per-round log-ratio. `None` without rounds.
    pub fn log_ratio(&self) -> Option<f64> {
        if self.hosts.is_empty() {
            return None;
        }
        let means: Vec<f64> = self.hosts.iter().map(HostRounds::mean_log_ratio).collect();
        Some(mean_unchecked(&means))
    }

    /// Estimated candidate / baseline ratio: the geometric mean of the per-round ratios
    /// (per host, then over hosts).
    pub fn ratio(&self) -> Option<f64> {
        self.log_ratio().map(f64::exp)
    }
}

/// Pairs `baseline` and `candidate` values by (host, round). Several values of one arm in
/// one round are combined by their geometric mean; observations of other arms are ignored.
///
/// Errors: a NaN, infinite or non-positive value of either arm, a host with two CPU models,
/// or the same arm on both sides. Rounds missing an arm are counted, not an error.
pub fn pair_rounds(
    observations: &[Observation],
    baseline: Arm,
    candidate: Arm,
) -> Result<PairedRounds, StatsError> {
    if baseline == candidate {
        return Err(StatsError::SameArm(baseline));
    }
    // host → (cpu model, round → [sum of logs, count] per side)
    type Cells = BTreeMap<u32, [(f64, u32); 2]>;
    let mut hosts: BTreeMap<&str, (&str, Cells)> = BTreeMap::new();
    for (index, o) in observations.iter().enumerate() {
        let side = if o.arm == baseline {
            0
        } else if o.arm == candidate {
            1
        } else {
            continue;
        };
        if !o.value.is_finite() {
            return Err(StatsError::NonFinite {
                what: "observation value",
                index,
                value: o.value,
            });
        }
        if o.value <= 0.0 {
            return Err(StatsError::NonPositive {
                what: "observation value",
                index,
                value: o.value,
            });
        }
        let (model, cells) = hosts
            .entry(o.host.as_str())
            .or_insert_with(|| (o.cpu_model.as_str(), BTreeMap::new()));
        if *model != o.cpu_model {
            return Err(StatsError::InconsistentCpuModel {
                host: o.host.clone(),
                first: (*model).to_owned(),
                second: o.cpu_model.clone(),
            });
        }
        let cell = &mut cells.entry(o.round).or_default()[side];
        cell.0 += o.value.ln();
        cell.1 += 1;
    }
    let mut unpaired_rounds = 0;
    let mut paired_hosts = Vec::new();
    for (host, (model, cells)) in hosts {
        let mut rounds = Vec::new();
        let mut log_ratios = Vec::new();
        for (round, [(sum_a, n_a), (sum_b, n_b)]) in cells {
            if n_a == 0 || n_b == 0 {
                unpaired_rounds += 1;
                continue;
            }
            rounds.push(round);
            log_ratios.push(sum_b / f64::from(n_b) - sum_a / f64::from(n_a));
        }
        if !log_ratios.is_empty() {
            paired_hosts.push(HostRounds {
                host: host.to_owned(),
                cpu_model: model.to_owned(),
                rounds,
                log_ratios,
            });
        }
    }
    Ok(PairedRounds {
        baseline,
        candidate,
        hosts: paired_hosts,
        unpaired_rounds,
    })
}

/// Classical Student-t interval for the ratio, on the log scale, mapped back with exp: the
/// analytic counterpart of the hierarchical bootstrap. With one host it is the paired t
/// interval over rounds (n − 1 degrees of freedom); with several it is the t interval over
/// host mean log-ratios (h − 1 degrees of freedom), the standard analysis of a two-stage design
/// with the host as the unit.
pub fn paired_t_interval(
    paired: &PairedRounds,
    level: ConfidenceLevel,
) -> Result<Interval, StatsError> {
    let units: Vec<f64> = match paired.hosts.as_slice() {
        [] => Vec::new(),
        [one] => one.log_ratios.clone(),
        many => many.iter().map(HostRounds::mean_log_ratio).collect(),
    };
    if units.len() < 2 {
        return Err(StatsError::TooFewRounds {
            have: paired.rounds(),
            need: 2,
        });
    }
    let n = units.len() as f64;
    let centre = mean_unchecked(&units);
    let se = (variance_unchecked(&units).unwrap_or(0.0) / n).sqrt();
    let half = student_t_quantile(1.0 - level.alpha() / 2.0, n - 1.0) * se;
    let (point, low, high) = (centre.exp(), (centre - half).exp(), (centre + half).exp());
    if !(point.is_finite() && high.is_finite() && low > 0.0) {
        return Err(StatsError::Overflow {
            what: "paired t interval",
        });
    }
    Ok(Interval::containing(point, low, high, level))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(host: &str, round: u32, arm: Arm, value: f64) -> Observation {
        Observation {
            host: host.into(),
            cpu_model: "m".into(),
            round,
            arm,
            value,
        }
    }

    #[test]
    fn pairs_by_host_and_round_and_counts_the_unpaired() {
        let data = [
            obs("h1", 0, Arm::A, 100.0),
            obs("h1", 0, Arm::B, 110.0),
            obs("h1", 1, Arm::B, 90.0),
            obs("h1", 1, Arm::A, 100.0),
            obs("h1", 2, Arm::A, 100.0), // no B: unpaired
            obs("h2", 0, Arm::A, 50.0),
            obs("h2", 0, Arm::A, 200.0), // two A values: geometric mean 100
            obs("h2", 0, Arm::B, 100.0),
            obs("h2", 0, Arm(2), 1.0), // another arm: ignored
        ];
        let p = pair_rounds(&data, Arm::A, Arm::B).unwrap();
        assert_eq!(p.host_count(), 2);
        assert_eq!(p.rounds(), 3);
        assert_eq!(p.unpaired_rounds, 1);
        assert_eq!(p.hosts[0].rounds, vec![0, 1]);
        assert!((p.hosts[1].log_ratios[0]).abs() < 1e-12);
        // h1: ln 1.1 + ln 0.9 over 2; h2: 0; mean over hosts.
        let want = (1.1f64.ln() + 0.9f64.ln()) / 4.0;
        assert!((p.log_ratio().unwrap() - want).abs() < 1e-12);
    }

    #[test]
    fn refuses_bad_values_and_mixed_models() {
        let mut bad = obs("h", 0, Arm::B, f64::NAN);
        let e = pair_rounds(std::slice::from_ref(&bad), Arm::A, Arm::B);
        assert!(matches!(e, Err(StatsError::NonFinite { index: 0, .. })));
        bad.value = 0.0;
        let e = pair_rounds(&[bad], Arm::A, Arm::B);
        assert!(matches!(e, Err(StatsError::NonPositive { .. })));
        let mut other = obs("h", 1, Arm::A, 1.0);
        other.cpu_model = "n".into();
        let e = pair_rounds(&[obs("h", 0, Arm::A, 1.0), other], Arm::A, Arm::B);
        assert!(matches!(e, Err(StatsError::InconsistentCpuModel { .. })));
        let e = pair_rounds(&[], Arm::A, Arm::A);
        assert_eq!(e, Err(StatsError::SameArm(Arm::A)));
    }

    #[test]
    fn variants_print_as_letters() {
        assert_eq!(Arm::A.to_string(), "A");
        assert_eq!(Arm(2).to_string(), "C");
        assert_eq!(Arm(30).to_string(), "#30");
    }

    #[test]
    fn t_interval_matches_a_hand_computation() {
        // log-ratios 0.01, 0.02, 0.03: mean 0.02, sd 0.01, se 0.01/√3, t(0.975, 2) = 4.3027.
        let p = PairedRounds {
            baseline: Arm::A,
            candidate: Arm::B,
            hosts: vec![HostRounds {
                host: "h".into(),
                cpu_model: "m".into(),
                rounds: vec![0, 1, 2],
                log_ratios: vec![0.01, 0.02, 0.03],
            }],
            unpaired_rounds: 0,
        };
        let i = paired_t_interval(&p, ConfidenceLevel::NINETY_FIVE).unwrap();
        let half = 4.302_652_730 * 0.01 / 3f64.sqrt();
        assert!((i.low - (0.02 - half).exp()).abs() < 1e-9);
        assert!((i.high - (0.02 + half).exp()).abs() < 1e-9);
    }
}

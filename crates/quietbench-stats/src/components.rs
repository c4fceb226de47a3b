//! Where the variation comes from: between CPU models, between hosts of one model, and within a
//! host from round to round (CONTEXT §1: the CPU lottery, noisy neighbours, run-to-run noise).
//!
//! The decomposition works on ln(value), so components are relative ("a 6% gap") and do not
//! depend on the unit. Hosts and rounds are random effects estimated by the nested ANOVA method
//! of moments (Searle, Casella & McCulloch, *Variance Components*, 1992, §3–4; Sokal & Rohlf,
//! *Biometry*, 4th ed., §10.3, with the unbalanced coefficient k₁):
//!
//! - within host: σ²_e = MS_within = Σ (y − ȳ_host)² / (N − H);
//! - hosts within a model: σ²_h = (MS_hosts − MS_within) / k₁, with
//!   MS_hosts = Σ n_host (ȳ_host − ȳ_model)² / (H − M) and
//!   k₁ = (N − Σ_models Σ_hosts n_host² / n_model) / (H − M).
//!
//! CPU models are a fixed factor with known levels (8124M, 8275CL, 8223CL: a short list from the
//! provider, not a random sample of models), so their component is the variance of the model
//! means weighted by how many hosts drew each model, with the noise of those means subtracted:
//! σ²_m = Σ w_m (ȳ_m − ȳ)² − Σ_m (1 − w_m)(σ²_h + σ²_e · mean(1/n_host)) / H, with w_m the share
//! of hosts on model m and ȳ_m the mean of its host means. Then σ²_m + σ²_h + σ²_e is the
//! variance of one round on a host drawn from the fleet as it was observed, and the shares say
//! how much of that comes from each source. The random-effects ANOVA estimator would instead
//! divide by (models − 1) and, with two models, claim twice the weighted variance.
//!
//! Moment estimates can come out negative when a component is small; they are truncated at 0
//! and the truncation is named in `notes`, as it biases the others slightly upward.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::StatsError;
use crate::paired::{Arm, Observation};
use crate::robust::mean_unchecked;

/// The mean of one host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostMean {
    /// The host.
    pub host: String,
    /// Its CPU model.
    pub cpu_model: String,
    /// Geometric mean of its values, in the values' unit.
    pub mean: f64,
    /// Mean of ln(value).
    pub log_mean: f64,
    /// Values it contributed.
    pub values: usize,
}

/// The hosts of one CPU model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelGroup {
    /// The CPU model.
    pub cpu_model: String,
    /// Geometric mean over its hosts (each host weighing equally), in the values' unit.
    pub mean: f64,
    /// Its hosts, by host name.
    pub hosts: Vec<HostMean>,
}

/// Each component's share of the total; they sum to 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Shares {
    /// Share of the CPU-model component.
    pub between_models: f64,
    /// Share of the host-within-model component.
    pub between_hosts: f64,
    /// Share of the round-to-round component.
    pub within_host: f64,
}

/// Variance components of ln(value), with the host means grouped by CPU model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VarianceComponents {
    /// σ²_m: between CPU models (fixed factor, weighted by hosts per model).
    pub between_models: f64,
    /// σ²_h: between hosts of the same model.
    pub between_hosts: f64,
    /// σ²_e: between rounds (values) on one host.
    pub within_host: f64,
    /// Shares of the total; `None` when there is no variation at all.
    pub shares: Option<Shares>,
    /// Hosts grouped by CPU model, models by name.
    pub models: Vec<ModelGroup>,
    /// Values used.
    pub values: usize,
    /// What could not be estimated, or was truncated at zero.
    pub notes: Vec<String>,
}

impl VarianceComponents {
    /// σ²_m + σ²_h + σ²_e.
    pub fn total(&self) -> f64 {
        self.between_models + self.between_hosts + self.within_host
    }
}

/// Decomposes the variance of ln(value) of `arm`'s observations.
///
/// Errors on no observations of `arm`, on a non-finite or non-positive value, and on a host
/// with two CPU models.
pub fn variance_components(
    observations: &[Observation],
    arm: Arm,
) -> Result<VarianceComponents, StatsError> {
    let groups = group_logs(observations, arm)?;
    let mut notes = Vec::new();

    // Host means and the counts the ANOVA coefficients need.
    let mut n_total = 0usize;
    let mut ss_within = 0.0;
    let mut ss_hosts = 0.0;
    let mut sum_sq_over_model = 0.0; // Σ_m Σ_h n_h² / n_m
    let mut host_count = 0usize;
    let mut models = Vec::new();
    // Per model: (weight numerator = hosts, mean of host log-means, mean of 1/n_host).
    let mut model_stats = Vec::new();
    for (model, hosts) in &groups {
        let n_model: usize = hosts.values().map(Vec::len).sum();
        let all: Vec<f64> = hosts.values().flatten().copied().collect();
        let model_weighted_mean = mean_unchecked(&all);
        let mut host_means = Vec::new();
        for (host, logs) in hosts {
            let m = mean_unchecked(logs);
            ss_within += logs.iter().map(|y| (y - m) * (y - m)).sum::<f64>();
            ss_hosts += logs.len() as f64 * (m - model_weighted_mean).powi(2);
            sum_sq_over_model += (logs.len() * logs.len()) as f64 / n_model as f64;
            host_means.push(HostMean {
                host: (*host).to_owned(),
                cpu_model: (*model).to_owned(),
                mean: m.exp(),
                log_mean: m,
                values: logs.len(),
            });
        }
        let logs: Vec<f64> = host_means.iter().map(|h| h.log_mean).collect();
        let inv_n = mean_unchecked(
            &host_means
                .iter()
                .map(|h| 1.0 / h.values as f64)
                .collect::<Vec<_>>(),
        );
        let model_mean = mean_unchecked(&logs);
        model_stats.push((host_means.len() as f64, model_mean, inv_n));
        models.push(ModelGroup {
            cpu_model: (*model).to_owned(),
            mean: model_mean.exp(),
            hosts: host_means,
        });
        n_total += n_model;
        host_count += hosts.len();
    }
    let (n, h, m) = (n_total as f64, host_count as f64, groups.len() as f64);

    let within_host = if n_total > host_count {
        ss_within / (n - h)
    } else {
        notes.push(
            "every host has one value: round-to-round variation cannot be separated from \
             host-to-host variation and is set to 0"
                .to_owned(),
        );
        0.0
    };

    let between_hosts = if host_count > groups.len() {
        let ms_hosts = ss_hosts / (h - m);
        let k1 = (n - sum_sq_over_model) / (h - m);
        let est = (ms_hosts - within_host) / k1;
        if est < 0.0 {
            notes.push(format!(
                "the host-to-host component came out negative ({est:.3e}) and was set to 0: \
                 hosts differ no more than their rounds do"
            ));
        }
        est.max(0.0)
    } else {
        notes.push(
            "each CPU model has one host: host-to-host variation cannot be estimated and is \
             set to 0"
                .to_owned(),
        );
        0.0
    };

    let between_models = if groups.len() > 1 {
        let grand: f64 = model_stats.iter().map(|(b, mean, _)| b / h * mean).sum();
        let spread: f64 = model_stats
            .iter()
            .map(|(b, mean, _)| b / h * (mean - grand).powi(2))
            .sum();
        let noise: f64 = model_stats
            .iter()
            .map(|(b, _, inv_n)| (1.0 - b / h) * (between_hosts + within_host * inv_n) / h)
            .sum();
        let est = spread - noise;
        if est < 0.0 {
            notes.push(format!(
                "the CPU-model component came out negative ({est:.3e}) and was set to 0: the \
                 models differ no more than their hosts do"
            ));
        }
        est.max(0.0)
    } else {
        notes.push("one CPU model: no between-model component".to_owned());
        0.0
    };

    let total = between_models + between_hosts + within_host;
    let shares = (total > 0.0 && total.is_finite()).then(|| Shares {
        between_models: between_models / total,
        between_hosts: between_hosts / total,
        within_host: within_host / total,
    });
    if !total.is_finite() {
        return Err(StatsError::Overflow {
            what: "variance components",
        });
    }
    Ok(VarianceComponents {
        between_models,
        between_hosts,
        within_host,
        shares,
        models,
        values: n_total,
        notes,
    })
}

/// model → host → ln(values), validated.
pub(crate) type LogGroups<'a> = BTreeMap<&'a str, BTreeMap<&'a str, Vec<f64>>>;

/// Groups ln(value) of `arm` by model and host.
pub(crate) fn group_logs(
    observations: &[Observation],
    arm: Arm,
) -> Result<LogGroups<'_>, StatsError> {
    let mut model_of: BTreeMap<&str, &str> = BTreeMap::new();
    let mut groups: LogGroups<'_> = BTreeMap::new();
    for (index, o) in observations.iter().enumerate() {
        if o.arm != arm {
            continue;
        }
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
        let model = *model_of.entry(&o.host).or_insert(&o.cpu_model);
        if model != o.cpu_model {
            return Err(StatsError::InconsistentCpuModel {
                host: o.host.clone(),
                first: model.to_owned(),
                second: o.cpu_model.clone(),
            });
        }
        groups
            .entry(model)
            .or_default()
            .entry(&o.host)
            .or_default()
            .push(o.value.ln());
    }
    if groups.is_empty() {
        return Err(StatsError::Empty {
            what: "observations of the arm",
        });
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(model: &str, host: &str, log_value: f64) -> Observation {
        Observation {
            host: host.into(),
            cpu_model: model.into(),
            round: 0,
            arm: Arm::A,
            value: log_value.exp(),
        }
    }

    #[test]
    fn balanced_design_matches_a_hand_computation() {
        // Model x: hosts (0, 2) and (4, 6); model y: hosts (10, 12) and (14, 16) (log scale).
        // Within: every host has deviations ±1 → SS_w = 8, df 4 → σ²_e = 2.
        // Host means x: 1, 5 (model mean 3); y: 11, 15 (13). SS_hosts = 2·(4+4+4+4) = 32,
        // df 2 → MS 16; k₁ = 2 → σ²_h = (16 − 2)/2 = 7.
        // Models: weights ½, means 3 and 13, grand 8 → spread 25; noise = 2·½·(7 + 2·½)/4 = 2
        // → σ²_m = 23.
        let data = [
            ("x", "a", 0.0),
            ("x", "a", 2.0),
            ("x", "b", 4.0),
            ("x", "b", 6.0),
            ("y", "c", 10.0),
            ("y", "c", 12.0),
            ("y", "d", 14.0),
            ("y", "d", 16.0),
        ]
        .map(|(m, h, v)| obs(m, h, v));
        let c = variance_components(&data, Arm::A).unwrap();
        assert!((c.within_host - 2.0).abs() < 1e-9, "{c:?}");
        assert!((c.between_hosts - 7.0).abs() < 1e-9, "{c:?}");
        assert!((c.between_models - 23.0).abs() < 1e-9, "{c:?}");
        let s = c.shares.unwrap();
        assert!((s.between_models + s.between_hosts + s.within_host - 1.0).abs() < 1e-12);
        assert_eq!(c.models.len(), 2);
        assert_eq!(c.models[1].hosts[0].host, "c");
        assert!(c.notes.is_empty());
    }

    #[test]
    fn negative_estimates_are_truncated_and_said() {
        // Hosts identical in mean, rounds noisy: the host component estimates negative.
        let data = [
            ("x", "a", 0.0),
            ("x", "a", 2.0),
            ("x", "b", 0.0),
            ("x", "b", 2.0),
        ]
        .map(|(m, h, v)| obs(m, h, v));
        let c = variance_components(&data, Arm::A).unwrap();
        assert_eq!(c.between_hosts, 0.0);
        assert!(c.notes.iter().any(|n| n.contains("set to 0")));
        assert_eq!(c.shares.unwrap().within_host, 1.0);
    }

    #[test]
    fn constant_data_has_no_shares() {
        let data = [("x", "a", 1.0), ("x", "b", 1.0)].map(|(m, h, v)| obs(m, h, v));
        let c = variance_components(&data, Arm::A).unwrap();
        assert_eq!(c.shares, None);
        assert!(matches!(
            variance_components(&data, Arm::B),
            Err(StatsError::Empty { .. })
        ));
    }
}

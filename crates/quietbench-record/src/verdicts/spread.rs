//! Where a multi-host run's spread comes from (CONTEXT.md §1, the CPU lottery): one instance type
//! that drew two CPU models 6% apart, with up to 2% more between instances of one model. Pooled
//! into one row, that is a CV of 4% and no hint of why; split, it is a difference the user can
//! act on (compare within one model, or select one).
//!
//! For each variant's figure (the one verdicts compare: its headline metric, for `exec` the
//! median time per invocation), over the hosts that measured it:
//! - one summary per CPU model (hosts, trials, mean, median, CV within the model);
//! - every other model against the one most hosts drew, as a ratio of geometric means of host
//!   means with Welch's interval over hosts ([`quietbench_stats::unpaired_ratio`]): hosts, not
//!   rounds, are the independent draws of a model;
//! - the variance split of ln(value) into between-model, between-host-within-model and
//!   within-host shares ([`quietbench_stats::variance_components`]), each with a sentence that
//!   says what to do about it;
//! - outlier hosts by robust z over their model's hosts ([`quietbench_stats::outlier_hosts`]),
//!   with how far they sit from their model's median host.
//!
//! The statistics are the stats crate's; this module only picks the values and words them.

use quietbench_stats::{
    ConfidenceLevel, DEFAULT_POWER, IGLEWICZ_HOAGLIN_THRESHOLD, Observation, outlier_hosts, pct,
    summarize, unpaired_ratio, variance_components,
};
use serde::Serialize;

use crate::record::RunRecord;
use crate::record::figures::{PAIRED_VARIANT, TrialValue, direction_of_unit, trial_values};
use crate::record::queries::UNKNOWN_CPU_MODEL;

/// One variant's spread over the hosts of a run.
#[derive(Debug, Clone, Serialize)]
pub struct FleetSpread {
    /// The variant.
    pub variant: String,
    /// Its probe.
    pub probe: String,
    /// The headline metric the analysis uses.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// Hosts that measured it.
    pub hosts: usize,
    /// Counted trials (warm-ups and cancelled trials left out).
    pub trials: usize,
    /// One summary per CPU model, the model most hosts drew first.
    pub models: Vec<ModelSummary>,
    /// Every other model against the first.
    pub differences: Vec<ModelDifference>,
    /// The variance split, where it could be estimated.
    pub split: Option<SpreadSplit>,
    /// Hosts far from their model's other hosts.
    pub outliers: Vec<OutlierHost>,
    /// The |robust z| above which a host is an outlier.
    pub outlier_threshold: f64,
    /// What could not be estimated, and why.
    pub notes: Vec<String>,
}

/// The trials of one CPU model.
#[derive(Debug, Clone, Serialize)]
pub struct ModelSummary {
    /// The model's name as the hosts' /proc/cpuinfo gives it.
    pub cpu_model: String,
    /// Hosts that drew it.
    pub hosts: usize,
    /// Their agents' addresses, sorted.
    pub addresses: Vec<String>,
    /// Their counted trials.
    pub trials: usize,
    /// Arithmetic mean of the trials' values.
    pub mean: f64,
    /// Median of the trials' values.
    pub median: f64,
    /// Coefficient of variation within the model; `None` with one trial.
    pub cv: Option<f64>,
}

/// One model against the reference model (the one most hosts drew).
#[derive(Debug, Clone, Serialize)]
pub struct ModelDifference {
    /// The model.
    pub cpu_model: String,
    /// The reference model.
    pub reference: String,
    /// Geometric mean of this model's host means over the reference's.
    pub ratio: f64,
    /// Lower end of the interval over hosts; `None` when a side has fewer than 3 hosts.
    pub ci_low: Option<f64>,
    /// Upper end.
    pub ci_high: Option<f64>,
    /// Confidence level of the interval.
    pub level: f64,
    /// What the table prints.
    pub sentence: String,
}

/// The shares of ln(value)'s variance; they sum to 1.
#[derive(Debug, Clone, Serialize)]
pub struct SpreadSplit {
    /// Share between CPU models; `None` when the hosts drew one model.
    pub between_models: Option<f64>,
    /// Share between hosts of one model.
    pub between_hosts: f64,
    /// Share from round to round on one host.
    pub within_host: f64,
    /// Standard deviation of one trial on a host drawn from this fleet, relative (0.03 = 3%):
    /// the square root of the three components' sum.
    pub total_sd: f64,
    /// One sentence per share, largest first.
    pub sentences: Vec<String>,
}

/// A host whose mean sits far from its model's other hosts.
#[derive(Debug, Clone, Serialize)]
pub struct OutlierHost {
    /// The agent's address.
    pub address: String,
    /// Its CPU model.
    pub cpu_model: String,
    /// Geometric mean of its values.
    pub mean: f64,
    /// Its mean over the median host mean of its model, minus 1 (-0.04 = 4% below).
    pub off: f64,
    /// Its robust z-score.
    pub z: f64,
}

/// The spread of every variant measured on two or more hosts, in the order its values first
/// appear. Empty for single-host runs: there is nothing to split.
///
/// Each trial counts with the figure verdicts compare ([`trial_values`]): a probe's headline
/// metric, and for `exec` the median wall time of the trial's invocations (the one slow
/// invocation a neighbour causes moves a trial's mean, not its median; a paired compare run
/// gives A's and B's figures as two variants).
pub fn fleet_spread(run: &RunRecord) -> Vec<FleetSpread> {
    let figure = super::compare::exec_figure(run);
    let values = trial_values(run, None, figure);
    let mut variants: Vec<&str> = Vec::new();
    for v in &values {
        if !variants.contains(&v.variant.as_str()) {
            variants.push(&v.variant);
        }
    }
    variants
        .into_iter()
        .filter_map(|variant| variant_spread(run, variant, &values))
        .collect()
}

fn variant_spread(run: &RunRecord, variant: &str, values: &[TrialValue]) -> Option<FleetSpread> {
    let of_variant: Vec<&TrialValue> = values
        .iter()
        .filter(|v| v.variant == variant && v.value.is_finite())
        .collect();
    let first = of_variant.first()?;
    let (metric, unit) = (first.metric.clone(), first.unit.clone());
    let probe = run
        .trials
        .iter()
        .find(|t| t.variant == variant || t.variant == PAIRED_VARIANT)
        .map_or_else(String::new, |t| t.probe.clone());
    let observations: Vec<Observation> = of_variant
        .iter()
        .map(|v| Observation {
            host: v.address.clone(),
            cpu_model: if v.cpu_model.trim().is_empty() {
                UNKNOWN_CPU_MODEL.to_string()
            } else {
                v.cpu_model.trim().to_string()
            },
            round: v.round,
            arm: quietbench_stats::Arm::A,
            value: v.value,
        })
        .collect();
    let mut host_names: Vec<&str> = observations.iter().map(|o| o.host.as_str()).collect();
    host_names.sort_unstable();
    host_names.dedup();
    if host_names.len() < 2 {
        return None;
    }
    let mut notes = Vec::new();
    let models = model_summaries(&observations);
    let mut spread = FleetSpread {
        variant: variant.to_string(),
        probe,
        metric,
        unit,
        hosts: host_names.len(),
        trials: observations.len(),
        differences: Vec::new(),
        split: None,
        outliers: Vec::new(),
        outlier_threshold: IGLEWICZ_HOAGLIN_THRESHOLD,
        models,
        notes: Vec::new(),
    };
    match variance_components(&observations, quietbench_stats::Arm::A) {
        Ok(c) => {
            spread.split = split(&c, spread.models.len() > 1);
            if spread.split.is_none() {
                notes.push("every trial gave the same value: there is no spread to split".into());
            }
            spread.differences = differences(&c.models, &spread.metric, &spread.unit, &mut notes);
            notes.extend(c.notes);
        }
        Err(e) => notes.push(format!("no variance split: {e}")),
    }
    match outlier_hosts(
        &observations,
        quietbench_stats::Arm::A,
        IGLEWICZ_HOAGLIN_THRESHOLD,
    ) {
        Ok(scan) => {
            for h in scan.outliers() {
                let centre = model_median(&scan.hosts, &h.cpu_model);
                spread.outliers.push(OutlierHost {
                    address: h.host.clone(),
                    cpu_model: h.cpu_model.clone(),
                    mean: h.mean,
                    off: h.mean / centre - 1.0,
                    z: h.z.unwrap_or(0.0),
                });
            }
            notes.extend(scan.notes);
        }
        Err(e) => notes.push(format!("no outlier scan: {e}")),
    }
    spread.notes = notes;
    Some(spread)
}

/// The median of a model's host means (geometric), the centre outliers are measured from.
fn model_median(hosts: &[quietbench_stats::HostScore], model: &str) -> f64 {
    let means: Vec<f64> = hosts
        .iter()
        .filter(|h| h.cpu_model == model)
        .map(|h| h.mean)
        .collect();
    quietbench_stats::median(&means).unwrap_or(f64::NAN)
}

/// Per model: hosts, trials, mean, median, CV; the model most hosts drew first, then by name.
fn model_summaries(observations: &[Observation]) -> Vec<ModelSummary> {
    let mut names: Vec<&str> = observations.iter().map(|o| o.cpu_model.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut out: Vec<ModelSummary> = names
        .into_iter()
        .filter_map(|model| {
            let of_model = || observations.iter().filter(move |o| o.cpu_model == model);
            let values: Vec<f64> = of_model().map(|o| o.value).collect();
            let mut hosts: Vec<&str> = of_model().map(|o| o.host.as_str()).collect();
            hosts.sort_unstable();
            hosts.dedup();
            let s = summarize(&values)?;
            Some(ModelSummary {
                cpu_model: model.to_string(),
                hosts: hosts.len(),
                addresses: hosts.iter().map(|h| (*h).to_string()).collect(),
                trials: s.n,
                mean: s.mean,
                median: s.median,
                cv: s.cv,
            })
        })
        .collect();
    // Stable: equal host counts keep the names' order.
    out.sort_by_key(|m| std::cmp::Reverse(m.hosts));
    out
}

/// Every model against the one most hosts drew (ties: the first by name).
fn differences(
    groups: &[quietbench_stats::ModelGroup],
    metric: &str,
    unit: &str,
    notes: &mut Vec<String>,
) -> Vec<ModelDifference> {
    let Some(reference) = groups
        .iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| a.hosts.len().cmp(&b.hosts.len()).then(j.cmp(i)))
        .map(|(_, g)| g)
    else {
        return Vec::new();
    };
    let host_means =
        |g: &quietbench_stats::ModelGroup| -> Vec<f64> { g.hosts.iter().map(|h| h.mean).collect() };
    let level = ConfidenceLevel::NINETY_FIVE;
    groups
        .iter()
        .filter(|g| g.cpu_model != reference.cpu_model)
        .map(|g| {
            let ratio = g.mean / reference.mean;
            let interval = unpaired_ratio(
                &host_means(reference),
                &host_means(g),
                "hosts",
                level,
                DEFAULT_POWER,
            );
            let (ci_low, ci_high) = match &interval {
                Ok(r) => (Some(r.ci_low), Some(r.ci_high)),
                Err(e) => {
                    notes.push(format!(
                        "{} against {}: no interval ({e})",
                        g.cpu_model, reference.cpu_model
                    ));
                    (None, None)
                }
            };
            let better = match direction_of_unit(unit) {
                Some(quietbench_stats::Direction::HigherIsBetter) => Some(ratio > 1.0),
                Some(quietbench_stats::Direction::LowerIsBetter) => Some(ratio < 1.0),
                None => None,
            };
            let mut sentence = format!(
                "{}: {metric} {} against {} ({}{} against {})",
                g.cpu_model,
                signed_pct(ratio - 1.0),
                reference.cpu_model,
                match better {
                    Some(true) => "faster; ",
                    Some(false) => "slower; ",
                    None => "",
                },
                hosts(g.hosts.len()),
                reference.hosts.len()
            );
            if let (Some(lo), Some(hi)) = (ci_low, ci_high) {
                sentence = format!(
                    "{sentence}, {:.0}% interval {} to {}{}",
                    level.get() * 100.0,
                    signed_pct(lo - 1.0),
                    signed_pct(hi - 1.0),
                    if lo > 1.0 || hi < 1.0 {
                        ""
                    } else {
                        ": the models do not differ detectably"
                    }
                );
            }
            ModelDifference {
                cpu_model: g.cpu_model.clone(),
                reference: reference.cpu_model.clone(),
                ratio,
                ci_low,
                ci_high,
                level: level.get(),
                sentence,
            }
        })
        .collect()
}

/// "1 host", "10 hosts".
fn hosts(n: usize) -> String {
    format!("{n} host{}", if n == 1 { "" } else { "s" })
}

/// "+6.1%", "-0.40%".
pub fn signed_pct(x: f64) -> String {
    let s = pct(x);
    if x >= 0.0 { format!("+{s}") } else { s }
}

/// The shares with their sentences; `None` when nothing varied.
fn split(c: &quietbench_stats::VarianceComponents, several_models: bool) -> Option<SpreadSplit> {
    let shares = c.shares?;
    let share = |x: f64| format!("{:.0}%", x * 100.0);
    let mut parts: Vec<(f64, String)> = Vec::new();
    if several_models {
        parts.push((
            shares.between_models,
            format!(
                "{} of the spread comes from the CPU model: compare within one model, or run \
                 on hosts of one model only",
                share(shares.between_models)
            ),
        ));
    }
    parts.push((
        shares.between_hosts,
        format!(
            "{} comes from hosts{} differing from each other (neighbours, instance health): \
             more hosts, not more rounds, narrow a fleet-wide figure",
            share(shares.between_hosts),
            if several_models { " of one model" } else { "" }
        ),
    ));
    parts.push((
        shares.within_host,
        format!(
            "{} is round-to-round variation on one host: more rounds or longer trials narrow it",
            share(shares.within_host)
        ),
    ));
    parts.sort_by(|a, b| b.0.total_cmp(&a.0));
    Some(SpreadSplit {
        between_models: several_models.then_some(shares.between_models),
        between_hosts: shares.between_hosts,
        within_host: shares.within_host,
        total_sd: c.total().sqrt(),
        sentences: parts.into_iter().map(|(_, s)| s).collect(),
    })
}

#[cfg(test)]
mod tests;

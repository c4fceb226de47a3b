//! Queries over a run's record that reports, warnings and verdicts share: which trials count,
//! which metrics a run has, and whether a trial ran where it was planned.

use quietbench_proto::v1 as pb;

use super::{HostRecord, TrialRecord};

/// Whether every thread ran exactly where it was planned.
pub fn placement_matches_plan(p: &pb::Placement) -> bool {
    p.threads
        .iter()
        .all(|t| t.affinity_cpus == [t.planned_cpu] && t.observed_cpu == t.planned_cpu)
}

/// (variant, probe, metric, unit) in the order first seen.
pub fn metric_keys(trials: &[TrialRecord]) -> Vec<(String, String, String, String)> {
    let mut keys: Vec<(String, String, String, String)> = Vec::new();
    for t in trials {
        for m in &t.metrics {
            if !keys
                .iter()
                .any(|(v, _, n, _)| *v == t.variant && *n == m.name)
            {
                keys.push((
                    t.variant.clone(),
                    t.probe.clone(),
                    m.name.clone(),
                    m.unit.clone(),
                ));
            }
        }
    }
    keys
}

/// Trials that count for summaries: not warm-ups, not cancelled (shorter).
pub fn counted<'a>(
    trials: &'a [TrialRecord],
    variant: &'a str,
) -> impl Iterator<Item = &'a TrialRecord> {
    trials
        .iter()
        .filter(move |t| t.variant == variant && !t.cancelled && !t.warmup)
}

/// The values of one metric across a variant's counted trials: the numbers the JSON summary
/// and the tables summarize.
///
/// Not [`super::figures::trial_values`] filtered to one variant: that one attributes each value
/// to its host and leaves out trials whose host is not (yet) in the record, as in a resumed run
/// before its hosts reconnect, which a table printed then still counts.
pub fn metric_values(trials: &[TrialRecord], variant: &str, metric: &str) -> Vec<f64> {
    counted(trials, variant)
        .filter_map(|t| t.metrics.iter().find(|m| m.name == metric))
        .filter_map(|m| m.value)
        .collect()
}

/// A metric as the headline rule sees it: a kept trial's ([`super::MetricRecord`]) or a
/// streamed interval's (`pb::Metric`).
pub trait MetricValue {
    /// Its value, where it has one.
    fn value(&self) -> Option<f64>;
    /// It has a distribution (an HDR histogram), not only a plain value.
    fn is_distribution(&self) -> bool;
}

impl MetricValue for super::MetricRecord {
    fn value(&self) -> Option<f64> {
        self.value
    }
    fn is_distribution(&self) -> bool {
        self.histogram.is_some()
    }
}

impl MetricValue for pb::Metric {
    fn value(&self) -> Option<f64> {
        self.value
    }
    fn is_distribution(&self) -> bool {
        self.histogram.is_some()
    }
}

/// The headline rule, written once (the glossary's *headline metric*): the first metric that
/// is a plain value (a rate such as events_per_sec), else the first metric with a value.
/// Multi-host analyses, charts, plan verdicts and progress lines all take it from here.
pub fn headline<M: MetricValue>(metrics: &[M]) -> Option<&M> {
    metrics
        .iter()
        .find(|m| m.value().is_some() && !m.is_distribution())
        .or_else(|| metrics.iter().find(|m| m.value().is_some()))
}

/// A variant's headline metric ([`headline`]) as its first trial that has one reports it:
/// name and unit.
pub fn headline_metric(trials: &[TrialRecord], variant: &str) -> Option<(String, String)> {
    trials
        .iter()
        .filter(|t| t.variant == variant)
        .find_map(|t| headline(&t.metrics))
        .map(|m| (m.name.clone(), m.unit.clone()))
}

/// What reports call a host's CPU when its model name cannot be read.
pub const UNKNOWN_CPU_MODEL: &str = "unknown CPU model";

/// A host's CPU model name, as its /proc/cpuinfo gives it, or [`UNKNOWN_CPU_MODEL`].
pub fn cpu_model_of(host: &HostRecord) -> String {
    host.fingerprint
        .cpu
        .as_ref()
        .map(|c| c.model_name.trim())
        .filter(|m| !m.is_empty())
        .unwrap_or(UNKNOWN_CPU_MODEL)
        .to_string()
}

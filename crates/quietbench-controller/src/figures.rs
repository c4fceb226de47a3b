//! The one figure of each trial that verdicts compare: for exec trials the time per invocation
//! (`--figure`), for other probes a chosen metric or the variant's headline (its first metric
//! with a trial value, e.g. events_per_sec). Shared by `compare --runs` and run plans' verdicts.

use quietbench_stats::Direction;

use crate::compare::{PAIRED_VARIANT, TrialFigure, paired_times_ns, trial_time_ns};
use crate::report::RunRecord;

/// One counted trial's figure.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialValue {
    /// The variant; trials that timed A and B in pairs give one value for "A" and one for "B".
    pub variant: String,
    /// The agent's address: the host within one run.
    pub address: String,
    /// The machine across runs: its host name, or the agent's address where it has none (a
    /// local agent listens on a fresh port every run, so its address does not name the machine).
    pub machine: String,
    /// Its CPU model.
    pub cpu_model: String,
    /// The round.
    pub round: u32,
    /// The metric's name.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// The value.
    pub value: f64,
}

/// Whether larger or smaller values of a metric are better, from its unit: rates ("events/s",
/// "MB/s", "invocations/CPU-s", "IOPS") are higher-is-better, times ("ns") lower-is-better;
/// anything else (ppm ratios, counts) has no direction to judge.
pub fn direction_of_unit(unit: &str) -> Option<Direction> {
    if unit == "ns" {
        Some(Direction::LowerIsBetter)
    } else if unit.contains("/s") || unit.ends_with("-s") || unit.eq_ignore_ascii_case("iops") {
        Some(Direction::HigherIsBetter)
    } else {
        None
    }
}

/// Every counted (not warm-up, not cancelled) trial's figure, in the order they ran.
pub fn trial_values(run: &RunRecord, metric: Option<&str>, figure: TrialFigure) -> Vec<TrialValue> {
    let mut out = Vec::new();
    for t in run.trials.iter().filter(|t| !t.warmup && !t.cancelled) {
        let Some(host) = run.hosts.get(t.host) else {
            continue;
        };
        let cpu_model = host
            .fingerprint
            .cpu
            .as_ref()
            .map(|c| c.model_name.clone())
            .unwrap_or_default();
        let name = if host.fingerprint.hostname.is_empty() {
            host.address.clone()
        } else {
            host.fingerprint.hostname.clone()
        };
        let value = |variant: &str, metric: &str, unit: &str, value: f64| TrialValue {
            variant: variant.to_string(),
            address: host.address.clone(),
            machine: name.clone(),
            cpu_model: cpu_model.clone(),
            round: t.round,
            metric: metric.to_string(),
            unit: unit.to_string(),
            value,
        };
        let exec_figure = format!("{}_wall_time_per_invocation", figure.as_str());
        if t.probe == "exec" && metric.is_none() {
            if t.variant == PAIRED_VARIANT {
                if let Some((a, b)) = paired_times_ns(t, figure) {
                    out.push(value("A", &exec_figure, "ns", a));
                    out.push(value("B", &exec_figure, "ns", b));
                }
            } else if let Some(v) = trial_time_ns(t, figure) {
                out.push(value(&t.variant, &exec_figure, "ns", v));
            }
            continue;
        }
        let chosen = match metric {
            Some(name) => t
                .metrics
                .iter()
                .find(|m| m.name == name && m.value.is_some()),
            None => t
                .metrics
                .iter()
                .find(|m| m.value.is_some() && m.histogram.is_none())
                .or_else(|| t.metrics.iter().find(|m| m.value.is_some())),
        };
        if let Some(m) = chosen
            && let Some(v) = m.value
        {
            out.push(value(&t.variant, &m.name, &m.unit, v));
        }
    }
    out
}

/// The statistics crate's observations of `baseline` (A) and `candidate` (B), paired by agent
/// and round; other variants are left out.
pub fn stats_observations(
    values: &[TrialValue],
    baseline: &str,
    candidate: &str,
) -> Vec<quietbench_stats::Observation> {
    values
        .iter()
        .filter_map(|v| {
            let variant = if v.variant == baseline {
                quietbench_stats::Variant::A
            } else if v.variant == candidate {
                quietbench_stats::Variant::B
            } else {
                return None;
            };
            Some(quietbench_stats::Observation {
                host: v.address.clone(),
                cpu_model: v.cpu_model.clone(),
                round: v.round,
                variant,
                value: v.value,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_come_from_units() {
        let higher = Some(Direction::HigherIsBetter);
        assert_eq!(direction_of_unit("events/s"), higher);
        assert_eq!(direction_of_unit("invocations/CPU-s"), higher);
        assert_eq!(direction_of_unit("Gbit/s"), higher);
        assert_eq!(direction_of_unit("IOPS"), higher);
        assert_eq!(direction_of_unit("ns"), Some(Direction::LowerIsBetter));
        assert_eq!(direction_of_unit("ppm"), None);
        assert_eq!(direction_of_unit("%"), None);
    }
}

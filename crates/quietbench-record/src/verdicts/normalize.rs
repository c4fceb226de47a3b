//! Figures normalized by a control: a fixed reference workload (a probe, or the user's pinned
//! baseline build) measured on every host beside the workload under test, interleaved with it
//! by RMIT (`run --control`, or a plan's variant of that name).
//!
//! A host's speed (its CPU's stepping, a neighbour, the day) moves the workload and the
//! control alike, so each round's workload figure over the same host's control figure of the
//! same round keeps what the code changed and drops most of what the machine did. Comparing
//! Tuesday's fleet with Wednesday's then compares ratios, not instances. What the
//! normalization cannot remove is an effect that hits the workload and not the control (a
//! neighbour thrashing a cache only the workload uses): the report says so.

use std::collections::BTreeMap;

use crate::record::RunRecord;
use crate::record::figures::{TrialFigure, TrialValue, direction_of_unit, trial_values};

/// Why a run cannot be normalized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormalizeError {
    /// The control variant is not in the run.
    #[error(
        "run {run} has no variant \"{control}\" to normalize by (its variants: {variants}); \
         measure one beside the workload with `quietbench run --control PROBE`, or name a \
         plan's variant"
    )]
    NoControl {
        /// The run's short id.
        run: String,
        /// The control asked for.
        control: String,
        /// The run's variants.
        variants: String,
    },
    /// A figure with no direction cannot be combined.
    #[error("cannot normalize {metric} ({unit}) by the control: it is neither a rate nor a time")]
    NoDirection {
        /// The metric.
        metric: String,
        /// Its unit.
        unit: String,
    },
}

/// One trial's figure divided by its host's control in the same round.
///
/// Same directions (two times, two rates): value / control. Opposite (a time against a rate):
/// value × control, so that a host twice as fast (half the time, twice the rate) cancels
/// either way. The result keeps the value's unit, and so its direction.
pub fn normalize(
    value: f64,
    unit: &str,
    control: f64,
    control_unit: &str,
    metric: &str,
) -> Result<f64, NormalizeError> {
    let direction = |unit: &str, metric: &str| {
        direction_of_unit(unit).ok_or_else(|| NormalizeError::NoDirection {
            metric: metric.to_string(),
            unit: unit.to_string(),
        })
    };
    let same = direction(unit, metric)? == direction(control_unit, "the control's figure")?;
    if same {
        return Ok(value / control);
    }
    // A rate per second against a time in ns: the product carries a factor of 1e9, taken out
    // so that a workload as fast as its control reads about 1.
    let ns_against_per_second = (unit == "ns") != (control_unit == "ns");
    Ok(value * control * if ns_against_per_second { 1e-9 } else { 1.0 })
}

/// How a normalized metric is named: "METRIC per control" (same directions) or "METRIC ×
/// control" (opposite).
pub fn normalized_name(metric: &str, unit: &str, control_unit: &str) -> String {
    let same = direction_of_unit(unit) == direction_of_unit(control_unit);
    if same {
        format!("{metric} / control")
    } else {
        format!("{metric} × control")
    }
}

/// Every counted trial's figure of `run` normalized by the same host's `control` figure in the
/// same round, the control itself left out; a trial whose round has no control figure on its
/// host (a failed control trial) is left out too.
pub fn normalized_values(
    run: &RunRecord,
    metric: Option<&str>,
    figure: TrialFigure,
    control: &str,
) -> Result<Vec<TrialValue>, NormalizeError> {
    let values = trial_values(run, metric, figure);
    // The control is judged on its own headline figure: --metric names the workload's.
    let control_values = trial_values(run, None, figure);
    let controls: BTreeMap<(&str, u32), &TrialValue> = control_values
        .iter()
        .filter(|v| v.variant == control)
        .map(|v| ((v.address.as_str(), v.round), v))
        .collect();
    if controls.is_empty() {
        let mut variants: Vec<&str> = run
            .settings
            .variants
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        variants.dedup();
        return Err(NormalizeError::NoControl {
            run: run.run_id.chars().take(8).collect(),
            control: control.to_string(),
            variants: variants.join(", "),
        });
    }
    let mut out = Vec::new();
    for v in values.iter().filter(|v| v.variant != control) {
        let Some(c) = controls.get(&(v.address.as_str(), v.round)) else {
            continue;
        };
        let value = normalize(v.value, &v.unit, c.value, &c.unit, &v.metric)?;
        out.push(TrialValue {
            metric: normalized_name(&v.metric, &v.unit, &c.unit),
            value,
            ..v.clone()
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_records::{empty_run, host, value_trial};

    #[test]
    fn a_faster_host_cancels_whichever_way_the_figures_point() {
        // A host 10% faster: the workload's time and the control's time both fall by 10%.
        let slow = normalize(100.0, "ns", 50.0, "ns", "t").unwrap();
        let fast = normalize(90.0, "ns", 45.0, "ns", "t").unwrap();
        assert!((slow - fast).abs() < 1e-12);
        // Against a rate control: the rate rises by 1/0.9.
        let slow = normalize(100.0, "ns", 1000.0, "events/s", "t").unwrap();
        let fast = normalize(90.0, "ns", 1000.0 / 0.9, "events/s", "t").unwrap();
        assert!((slow - fast).abs() < 1e-15);
        // 10 invocations a second against a control of 100 ms: as fast as the control.
        let even = normalize(10.0, "invocations/s", 100e6, "ns", "r").unwrap();
        assert!((even - 1.0).abs() < 1e-12);
        let err = normalize(1.0, "ppm", 1.0, "ns", "ratio").unwrap_err();
        assert!(
            err.to_string().contains("neither a rate nor a time"),
            "{err}"
        );
        assert_eq!(normalized_name("t", "ns", "ns"), "t / control");
        assert_eq!(normalized_name("t", "ns", "events/s"), "t × control");
    }

    #[test]
    fn each_trial_is_divided_by_its_own_hosts_control_of_the_same_round() {
        let mut run = empty_run("cpu.primes", &["work", "control"], 2, None);
        // Host 0 is twice as fast as host 1 in both variants, and round 1 slower than round 0.
        for (h, speed) in [(0, 2.0), (1, 1.0)] {
            run.hosts.push(host(h, "Xeon"));
            for (round, drift) in [(0, 1.0), (1, 0.9)] {
                for (variant, base) in [("work", 300.0), ("control", 100.0)] {
                    run.trials.push(value_trial(
                        ("cpu.primes", variant),
                        h,
                        round,
                        ("events_per_sec", "events/s", base * speed * drift),
                    ));
                }
            }
        }
        let values = normalized_values(&run, None, TrialFigure::Median, "control").unwrap();
        assert_eq!(values.len(), 4);
        for v in &values {
            assert_eq!(v.variant, "work");
            assert!((v.value - 3.0).abs() < 1e-12, "{v:?}");
            assert_eq!(v.metric, "events_per_sec / control");
        }
        let err = normalized_values(&run, None, TrialFigure::Median, "baseline").unwrap_err();
        assert!(
            err.to_string().contains("no variant \"baseline\"")
                && err.to_string().contains("work, control"),
            "{err}"
        );
    }
}

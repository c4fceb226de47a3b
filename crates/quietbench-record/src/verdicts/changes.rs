//! Change points over a metric's history: one point per run (the median of its counted trials),
//! one series per CPU model and variant, and change points in each
//! ([`quietbench_stats::change_points`]), with how many runs the gate would need to see a 2% or
//! 5% step at each series' noise ([`runs_to_detect`]).
//!
//! Why per CPU model: a fleet that drew another CPU model moves a metric by several percent
//! (CONTEXT.md §1), and a detector fed both models would report the lottery as a code change.
//! Why per run and not per trial: trials of one run share a host and a day, so they are not
//! independent draws of the level; a run is the unit that changes when the code does.

use std::collections::BTreeMap;
use std::time::SystemTime;

use quietbench_stats::{ChangePoint, ChangePointConfig, ChangePointMethod, Direction, StatsError};
use serde::Serialize;

use crate::record::HistoryPoint;
use crate::record::figures::direction_of_unit;

/// One run's point in a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPoint {
    /// The run.
    pub run_id: String,
    /// When it started.
    #[serde(serialize_with = "rfc3339")]
    pub started_at: SystemTime,
    /// The median of its counted trials' values of this series' model and variant.
    pub value: f64,
    /// How many trials that median is of.
    pub trials: usize,
}

/// A change point placed in its series: the run that starts the new level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunChange {
    /// The run at which the level moved (the first run of the new level).
    pub run_id: String,
    /// When that run started.
    #[serde(serialize_with = "rfc3339")]
    pub started_at: SystemTime,
    /// "regression", "improvement", or "change" for a metric with no better direction.
    pub kind: ChangeKind,
    /// Index, medians, change and p-value.
    #[serde(flatten)]
    pub point: ChangePoint,
}

/// Whether a change is for the worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// The metric moved the worse way (a time up, a rate down).
    Regression,
    /// The metric moved the better way.
    Improvement,
    /// The metric has no better direction (a count, a ratio).
    Change,
}

impl ChangeKind {
    /// "regression", "improvement" or "change", as the JSON writes it.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Regression => "regression",
            ChangeKind::Improvement => "improvement",
            ChangeKind::Change => "change",
        }
    }
}

impl RunChange {
    /// The change as a signed percentage, "+2.0%", or "-" when the level before was 0.
    pub fn percent(&self) -> String {
        self.point
            .change
            .map_or("-".to_string(), |x| format!("{:+.1}%", x * 100.0))
    }
}

/// One series and its change points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesChanges {
    /// The CPU model of every point's hosts.
    pub cpu_model: String,
    /// The variant.
    pub variant: String,
    /// The metric's unit.
    pub unit: String,
    /// One point per run, oldest first.
    pub points: Vec<RunPoint>,
    /// The change points, oldest first.
    pub change_points: Vec<RunChange>,
    /// A regression the newest run of all brought to light in this series (see
    /// [`new_regression`]), for `--fail-on-change`.
    pub new_regression: Option<RunChange>,
    /// How many runs after a 2% and a 5% step the gate needs to flag it, at this series' noise.
    pub runs_to_detect: Vec<RunsToDetect>,
}

/// The steps [`runs_to_detect`] answers for: 2% and 5% of the level.
pub const GATE_SHIFTS: [f64; 2] = [0.02, 0.05];

/// The chance of flagging a step that [`runs_to_detect`] answers for.
pub const GATE_POWER: f64 = 0.8;

/// How many runs after a step of `shift` the gate needs to flag it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunsToDetect {
    /// The step, as a share of the level (0.02 is 2%), either way.
    pub shift: f64,
    /// Runs after the step before it is flagged with probability [`GATE_POWER`]; null when
    /// no number of runs would do at this series' noise.
    pub runs: Option<usize>,
}

/// For each of [`GATE_SHIFTS`], the runs after such a step that the default detector needs to
/// flag it with probability [`GATE_POWER`] at the noise of the series' newest segment
/// ([`quietbench_stats::runs_to_detect`]: an estimate from that segment's long-run noise and
/// its shuffles' threshold). Empty for the E-divisive method, whose threshold is not on that
/// scale, and when the newest segment has under 8 runs or no spread.
pub fn runs_to_detect(
    values: &[f64],
    found: &[ChangePoint],
    config: &ChangePointConfig,
) -> Result<Vec<RunsToDetect>, StatsError> {
    if config.method != ChangePointMethod::MeanShift {
        return Ok(Vec::new());
    }
    // Under 8 runs since the last change, or all alike, the newest segment says nothing about
    // the series' noise: nothing to answer rather than "never".
    let newest = &values[found.last().map_or(0, |c| c.index).min(values.len())..];
    if newest.len() < 8 || newest.iter().all(|&v| v == newest[0]) {
        return Ok(Vec::new());
    }
    GATE_SHIFTS
        .iter()
        .map(|&shift| {
            Ok(RunsToDetect {
                shift,
                runs: quietbench_stats::runs_to_detect(values, found, shift, GATE_POWER, config)?,
            })
        })
        .collect()
}

/// "the gate flags a 2% step 6 runs after it, a 5% step 2 runs after it (80% of the time, at
/// this series' noise)", counting in `unit` ("run", or "row" for a CSV); empty when there is
/// nothing to say.
pub fn runs_to_detect_text(reach: &[RunsToDetect], unit: &str) -> String {
    if reach.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = reach
        .iter()
        .map(|r| {
            let step = format!("a {}% step", r.shift * 100.0);
            match r.runs {
                Some(1) => format!("{step} 1 {unit} after it"),
                Some(n) => format!("{step} {n} {unit}s after it"),
                None => format!("{step} not within any number of {unit}s"),
            }
        })
        .collect();
    format!(
        "the gate flags {} ({:.0}% of the time, at this series' noise)",
        parts.join(", "),
        GATE_POWER * 100.0
    )
}

/// A p-value with the digits it has: "0.004", or "2e-4" below 0.001 (a refined one).
pub fn p_label(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else {
        format!("{p:.0e}")
    }
}

impl SeriesChanges {
    /// Each segment between change points as (first point, end, median), from the medians the
    /// change points carry; the median of all points when there is no change point.
    pub fn segments(&self) -> Vec<(usize, usize, f64)> {
        let n = self.points.len();
        let Some(last) = self.change_points.last() else {
            let values: Vec<f64> = self.points.iter().map(|p| p.value).collect();
            return quietbench_stats::median(&values)
                .map(|m| vec![(0, n, m)])
                .unwrap_or_default();
        };
        let mut out = Vec::with_capacity(self.change_points.len() + 1);
        let mut start = 0;
        for c in &self.change_points {
            out.push((start, c.point.index, c.point.before_median));
            start = c.point.index;
        }
        out.push((start, n, last.point.after_median));
        out
    }
}

/// Writes a time as the reports do (RFC 3339, milliseconds). Here rather than taken from
/// `report::json`, because reports draw verdicts and verdicts must not import reports.
fn rfc3339<S: serde::Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_rfc3339_millis(*at).to_string())
}

/// `history --change-points` as a document: what `--json` prints and the HTML page draws.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryChanges {
    /// "quietbench.history-changes.v1".
    pub schema: &'static str,
    /// The probe.
    pub probe: String,
    /// The metric.
    pub metric: String,
    /// The `--cpu-model` filter, if any.
    pub cpu_model_filter: Option<String>,
    /// How change points were found.
    pub method: Method,
    /// The most recently started run with this metric.
    pub newest_run: Option<String>,
    /// One series per CPU model and variant.
    pub series: Vec<SeriesChanges>,
}

/// The detector and its settings, so a reader can reproduce the result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Method {
    /// "mean-shift" (the default) or "e-divisive".
    pub name: &'static str,
    /// The permutation p-value a change point must reach.
    pub significance: f64,
    /// Shuffles per candidate.
    pub permutations: u32,
    /// The fewest runs in a segment.
    pub min_segment: usize,
    /// The shuffles' seed.
    pub seed: u64,
}

impl Method {
    /// The detector every change-point command runs (`history --change-points`, `changes`),
    /// with `config`'s settings.
    pub fn of(config: &ChangePointConfig) -> Self {
        Method {
            name: config.method.name(),
            significance: config.significance,
            permutations: config.permutations,
            min_segment: config.min_segment,
            seed: config.seed.0,
        }
    }
}

impl HistoryChanges {
    /// Detects change points in `points` (the store's history, oldest run first).
    pub fn detect(
        probe: &str,
        metric: &str,
        cpu_model_filter: Option<&str>,
        points: &[HistoryPoint],
        config: &ChangePointConfig,
    ) -> Result<Self, StatsError> {
        Ok(HistoryChanges {
            schema: "quietbench.history-changes.v1",
            probe: probe.to_string(),
            metric: metric.to_string(),
            cpu_model_filter: cpu_model_filter.map(str::to_string),
            method: Method::of(config),
            newest_run: points.last().map(|p| p.run_id.clone()),
            series: detect(points, config)?,
        })
    }

    /// The regressions the newest run brought to light, with their series.
    pub fn new_regressions(&self) -> impl Iterator<Item = (&SeriesChanges, &RunChange)> {
        self.series
            .iter()
            .filter_map(|s| s.new_regression.as_ref().map(|r| (s, r)))
    }
}

/// A run's id, start and values in one series.
type RunValues = (String, SystemTime, Vec<f64>);

/// Builds one series per CPU model and variant from `points` (in the store's order: oldest run
/// first), each run's value the median of its trials there.
pub fn series(points: &[HistoryPoint]) -> Vec<(String, String, String, Vec<RunPoint>)> {
    // (model, variant) → (unit, each run's values), runs in first-seen order.
    let mut by_key: BTreeMap<(String, String), (String, Vec<RunValues>)> = BTreeMap::new();
    for p in points {
        let (_, runs) = by_key
            .entry((p.cpu_model.clone(), p.variant.clone()))
            .or_insert_with(|| (p.unit.clone(), Vec::new()));
        match runs.last_mut() {
            Some(last) if last.0 == p.run_id => last.2.push(p.value),
            _ => runs.push((p.run_id.clone(), p.started_at, vec![p.value])),
        }
    }
    by_key
        .into_iter()
        .map(|((model, variant), (unit, runs))| {
            let points = runs
                .into_iter()
                .filter_map(|(run_id, started_at, values)| {
                    Some(RunPoint {
                        value: quietbench_stats::median(&values).ok()?,
                        trials: values.len(),
                        run_id,
                        started_at,
                    })
                })
                .collect();
            (model, variant, unit, points)
        })
        .collect()
}

/// Change points of every series, and the regressions the newest run (`newest_run`, the most
/// recently started run of all series) brings to light.
pub fn detect(
    points: &[HistoryPoint],
    config: &ChangePointConfig,
) -> Result<Vec<SeriesChanges>, StatsError> {
    let newest_run = points.last().map(|p| p.run_id.as_str());
    series(points)
        .into_iter()
        .map(|(cpu_model, variant, unit, points)| {
            let direction = direction_of_unit(&unit);
            let values: Vec<f64> = points.iter().map(|p| p.value).collect();
            let found = quietbench_stats::change_points(&values, config)?;
            let place = |c: ChangePoint| RunChange {
                run_id: points[c.index].run_id.clone(),
                started_at: points[c.index].started_at,
                kind: kind(c, direction),
                point: c,
            };
            let ends_with_newest = points.last().map(|p| p.run_id.as_str()) == newest_run;
            let new_regression = if ends_with_newest {
                new_regression(&values, &found, direction, config)?.map(place)
            } else {
                None
            };
            let runs_to_detect = runs_to_detect(&values, &found, config)?;
            Ok(SeriesChanges {
                runs_to_detect,
                cpu_model,
                variant,
                unit,
                change_points: found.into_iter().map(place).collect(),
                new_regression,
                points,
            })
        })
        .collect()
}

/// Whether change point `c` is for the worse, for a metric whose better direction is
/// `direction` (none: a [`ChangeKind::Change`]).
pub fn kind(c: ChangePoint, direction: Option<Direction>) -> ChangeKind {
    let up = c.after_median > c.before_median;
    match direction {
        None => ChangeKind::Change,
        Some(Direction::LowerIsBetter) if up => ChangeKind::Regression,
        Some(Direction::HigherIsBetter) if !up => ChangeKind::Regression,
        Some(_) => ChangeKind::Improvement,
    }
}

/// The regression that the newest point brings to light: the series' last change point, when
/// it is for the worse (any change, for a metric with no better direction) and the series
/// without its newest point shows no change point of the same kind near it (within a minimum
/// segment). A small step needs several runs after it before it is significant, so "the newest
/// run starts a regression" means the newest run is the one that makes it visible; a regression
/// found on an earlier night fails that night only, not every night after.
pub fn new_regression(
    values: &[f64],
    found: &[ChangePoint],
    direction: Option<Direction>,
    config: &ChangePointConfig,
) -> Result<Option<ChangePoint>, StatsError> {
    let Some(&last) = found.last() else {
        return Ok(None);
    };
    let worse = |c: ChangePoint| {
        matches!(
            kind(c, direction),
            ChangeKind::Regression | ChangeKind::Change
        )
    };
    if !worse(last) {
        return Ok(None);
    }
    let before = quietbench_stats::change_points(&values[..values.len() - 1], config)?;
    let seen = before
        .iter()
        .any(|&c| worse(c) && c.index.abs_diff(last.index) <= config.min_segment);
    Ok((!seen).then_some(last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn point(run: usize, model: &str, variant: &str, unit: &str, value: f64) -> HistoryPoint {
        HistoryPoint {
            run_id: format!("run{run:03}"),
            started_at: SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 * run as u64),
            host: "127.0.0.1:1".into(),
            cpu_model: model.into(),
            variant: variant.into(),
            params: BTreeMap::new(),
            round: 1,
            seq: 0,
            unit: unit.into(),
            value,
        }
    }

    /// A deterministic ±0.5% wobble, so the series has noise without a generator.
    fn wobble(i: usize) -> f64 {
        1.0 + 0.005 * ((i * 7919 % 13) as f64 / 6.0 - 1.0)
    }

    /// `runs` runs of a rate on two CPU models, two trials each; model B is 6% faster, and
    /// model A's rate drops `step` from run `at`.
    fn history(runs: usize, at: usize, step: f64) -> Vec<HistoryPoint> {
        let mut out = Vec::new();
        for r in 0..runs {
            let level = if r >= at {
                1000.0 * (1.0 - step)
            } else {
                1000.0
            };
            for t in 0..2 {
                out.push(point(
                    r,
                    "model A",
                    "cpu",
                    "events/s",
                    level * wobble(r * 2 + t),
                ));
                out.push(point(
                    r,
                    "model B",
                    "cpu",
                    "events/s",
                    1060.0 * wobble(r * 3 + t),
                ));
            }
        }
        out
    }

    #[test]
    fn one_point_per_run_and_model_the_median_of_its_trials() {
        let s = series(&history(4, 99, 0.0));
        assert_eq!(s.len(), 2);
        let (model, variant, unit, points) = &s[0];
        assert_eq!(
            (model.as_str(), variant.as_str(), unit.as_str()),
            ("model A", "cpu", "events/s")
        );
        assert_eq!(points.len(), 4);
        assert_eq!(points[0].trials, 2);
        let expected = 1000.0 * (wobble(0) + wobble(1)) / 2.0;
        assert!((points[0].value - expected).abs() < 1e-9);
    }

    #[test]
    fn a_drop_on_one_model_is_a_regression_there_and_nothing_on_the_other() {
        let found = detect(&history(30, 18, 0.03), &ChangePointConfig::default()).unwrap();
        let a = &found[0];
        assert_eq!(a.cpu_model, "model A");
        assert_eq!(a.change_points.len(), 1, "{:?}", a.change_points);
        let c = &a.change_points[0];
        assert_eq!(c.run_id, "run018");
        assert_eq!(c.kind, ChangeKind::Regression);
        assert!((c.point.change.unwrap() + 0.03).abs() < 0.005);
        assert!(found[1].change_points.is_empty(), "{:?}", found[1]);
        // Found 12 runs ago: not the newest run's doing.
        assert!(a.new_regression.is_none());
    }

    #[test]
    fn the_run_that_makes_a_regression_visible_trips_fail_on_change_once() {
        // A 5% drop after 20 runs, checked as each later run arrives.
        let config = ChangePointConfig::default();
        let mut reported = Vec::new();
        for runs in 21..30 {
            let found = detect(&history(runs, 20, 0.05), &config).unwrap();
            if let Some(r) = &found[0].new_regression {
                assert_eq!(r.run_id, "run020");
                reported.push(runs);
            }
        }
        // Once, and not before a second run confirms the first (segments of two runs).
        assert_eq!(reported.len(), 1, "{reported:?}");
        assert!((22..=25).contains(&reported[0]), "{reported:?}");
    }

    #[test]
    fn segments_take_their_medians_from_the_change_points() {
        let found = detect(&history(30, 18, 0.03), &ChangePointConfig::default()).unwrap();
        let a = &found[0];
        let segments = a.segments();
        assert_eq!(segments.len(), 2);
        let c = &a.change_points[0].point;
        assert_eq!(segments[0], (0, 18, c.before_median));
        assert_eq!(segments[1], (18, 30, c.after_median));
        // No change point: one segment, the median of every run.
        let b = &found[1];
        let values: Vec<f64> = b.points.iter().map(|p| p.value).collect();
        let all = quietbench_stats::median(&values).unwrap();
        assert_eq!(b.segments(), vec![(0, 30, all)]);
    }

    #[test]
    fn an_improvement_never_trips_fail_on_change() {
        let found = detect(&history(26, 20, -0.05), &ChangePointConfig::default()).unwrap();
        assert_eq!(found[0].change_points[0].kind, ChangeKind::Improvement);
        assert!(found[0].new_regression.is_none());
    }

    #[test]
    fn a_time_going_up_is_a_regression() {
        let mut pts = Vec::new();
        for r in 0..24 {
            let level = if r >= 12 { 1.04e6 } else { 1e6 };
            pts.push(point(r, "m", "v", "ns", level * wobble(r)));
        }
        let found = detect(&pts, &ChangePointConfig::default()).unwrap();
        assert_eq!(found[0].change_points[0].kind, ChangeKind::Regression);
    }
}

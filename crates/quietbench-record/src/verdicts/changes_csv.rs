//! Change points in any series a user brings (`quietbench changes --csv FILE`): each column of
//! a [`SeriesTable`] goes through the detector `history --change-points` runs
//! ([`quietbench_stats::change_points`], with the same [`ChangePointConfig`]), and the rule of
//! `history --fail-on-change` ([`super::changes::new_regression`]) says whether the newest row
//! brings a change to light.
//!
//! Unlike a stored metric, a column has no unit to say which way is better, so every change
//! counts as one (`kind` "change") unless the user says which way is better (`--better`).

use quietbench_stats::{ChangePoint, ChangePointConfig, Direction, StatsError};
use serde::Serialize;

use super::changes::{ChangeKind, Method, RunsToDetect, kind, new_regression, runs_to_detect};
use crate::series_csv::SeriesTable;

/// The JSON document's schema name.
pub const SCHEMA: &str = "quietbench.changes.v1";

/// `changes --csv` as a document: what `--json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CsvChanges {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The file read, or "-" for standard input.
    pub source: String,
    /// The column whose values label the points, if any.
    pub index_column: Option<String>,
    /// Rows after the header: every series has one point per row.
    pub rows: usize,
    /// The detector and its settings.
    pub method: Method,
    /// Which way is better ("lower" or "higher", from `--better`), or null: every change counts.
    pub better: Option<&'static str>,
    /// One per series column, in the file's order.
    pub series: Vec<ColumnChanges>,
}

/// One column's change points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColumnChanges {
    /// The column's name.
    pub name: String,
    /// The median of all its points.
    pub median: f64,
    /// Its change points, oldest first.
    pub change_points: Vec<LabelledChange>,
    /// The change the newest row brings to light (the one `--fail-on-change` exits 3 for).
    pub new_change: Option<LabelledChange>,
    /// How many rows after a 2% and a 5% step the gate needs to flag it, at this series' noise.
    pub runs_to_detect: Vec<RunsToDetect>,
}

/// A change point with the label of its row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelledChange {
    /// The index column's value at the first point of the new level, or null.
    pub label: Option<String>,
    /// "regression", "improvement", or "change" when no better direction is given.
    pub kind: ChangeKind,
    /// Index (0 is the first row after the header), medians, change, p-value and statistic.
    #[serde(flatten)]
    pub point: ChangePoint,
}

impl LabelledChange {
    /// The change as a signed percentage, "+2.0%", or "-" when the level before was 0.
    pub fn percent(&self) -> String {
        self.point
            .change
            .map_or("-".to_string(), |x| format!("{:+.1}%", x * 100.0))
    }
}

impl CsvChanges {
    /// Runs the detector on every series of `table`, read from `source`.
    pub fn detect(
        table: &SeriesTable,
        source: &str,
        config: &ChangePointConfig,
        better: Option<Direction>,
    ) -> Result<Self, StatsError> {
        let series = table
            .series
            .iter()
            .map(|s| {
                let found = quietbench_stats::change_points(&s.values, config)?;
                let place = |c: ChangePoint| LabelledChange {
                    label: table.label(c.index).map(str::to_string),
                    kind: kind(c, better),
                    point: c,
                };
                let new_change = new_regression(&s.values, &found, better, config)?.map(place);
                let runs_to_detect = runs_to_detect(&s.values, &found, config)?;
                Ok(ColumnChanges {
                    runs_to_detect,
                    name: s.name.clone(),
                    median: quietbench_stats::median(&s.values)?,
                    change_points: found.into_iter().map(place).collect(),
                    new_change,
                })
            })
            .collect::<Result<Vec<_>, StatsError>>()?;
        Ok(CsvChanges {
            schema: SCHEMA,
            source: source.to_string(),
            index_column: table.index.as_ref().map(|i| i.name.clone()),
            rows: table.rows,
            method: Method::of(config),
            better: better.map(|d| match d {
                Direction::LowerIsBetter => "lower",
                Direction::HigherIsBetter => "higher",
            }),
            series,
        })
    }

    /// The changes the newest row brings to light, with their series.
    pub fn new_changes(&self) -> impl Iterator<Item = (&ColumnChanges, &LabelledChange)> {
        self.series
            .iter()
            .filter_map(|s| s.new_change.as_ref().map(|c| (s, c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series_csv::{IndexColumn, parse_series_csv};

    /// `rows` rows: a step from 100 to 120 at `at` in "step" (±1 in a fixed pattern), and a flat
    /// series at 50 (same pattern).
    fn csv(rows: usize, at: usize) -> String {
        let mut text = String::from("run,step,flat\n");
        for r in 0..rows {
            let wobble = [0.0, 0.7, -0.4, 1.0, -0.9, 0.3, -0.6][r % 7];
            let level = if r >= at { 120.0 } else { 100.0 };
            text.push_str(&format!(
                "r{r},{},{}\n",
                level + wobble,
                50.0 + wobble / 2.0
            ));
        }
        text
    }

    fn detect(text: &str, better: Option<Direction>) -> CsvChanges {
        let table = parse_series_csv(text, &IndexColumn::Auto).unwrap();
        CsvChanges::detect(&table, "f.csv", &ChangePointConfig::default(), better).unwrap()
    }

    #[test]
    fn a_step_is_found_at_its_row_with_its_label_and_a_flat_series_has_none() {
        let found = detect(&csv(60, 30), None);
        assert_eq!(found.schema, SCHEMA);
        assert_eq!(found.rows, 60);
        assert_eq!(found.index_column.as_deref(), Some("run"));
        assert_eq!(found.method, Method::of(&ChangePointConfig::default()));
        let step = &found.series[0];
        assert_eq!(step.change_points.len(), 1, "{step:?}");
        let c = &step.change_points[0];
        assert_eq!(c.point.index, 30);
        assert_eq!(c.label.as_deref(), Some("r30"));
        assert_eq!(c.kind, ChangeKind::Change);
        assert!((c.point.change.unwrap() - 0.2).abs() < 0.01, "{c:?}");
        assert_eq!(c.percent(), "+20.0%");
        assert!(found.series[1].change_points.is_empty());
        assert!((found.series[1].median - 50.0).abs() < 0.5);
        // Found 30 rows ago: not the newest row's doing.
        assert_eq!(found.new_changes().count(), 0);
    }

    #[test]
    fn the_newest_rows_bring_a_change_to_light_once_as_history_does() {
        let config = ChangePointConfig::default();
        let mut nights = Vec::new();
        for rows in 31..40 {
            let table = parse_series_csv(&csv(rows, 30), &IndexColumn::Auto).unwrap();
            // The same rule as `history --fail-on-change`, on the same values.
            let values = &table.series[0].values;
            let found = quietbench_stats::change_points(values, &config).unwrap();
            let history_rule = new_regression(values, &found, None, &config).unwrap();
            let ours = CsvChanges::detect(&table, "-", &config, None).unwrap();
            assert_eq!(
                ours.series[0].new_change.as_ref().map(|c| c.point),
                history_rule
            );
            if ours.new_changes().next().is_some() {
                nights.push(rows);
            }
        }
        assert_eq!(nights.len(), 1, "{nights:?}");
    }

    #[test]
    fn a_better_direction_makes_kinds_and_spares_improvements() {
        // The night the step comes to light.
        let rows = (31..40)
            .find(|&rows| detect(&csv(rows, 30), None).new_changes().count() == 1)
            .unwrap();
        let up_is_worse = detect(&csv(rows, 30), Some(Direction::LowerIsBetter));
        assert_eq!(up_is_worse.better, Some("lower"));
        assert_eq!(
            up_is_worse.series[0].change_points[0].kind,
            ChangeKind::Regression
        );
        assert_eq!(up_is_worse.new_changes().count(), 1);
        let up_is_better = detect(&csv(rows, 30), Some(Direction::HigherIsBetter));
        assert_eq!(
            up_is_better.series[0].change_points[0].kind,
            ChangeKind::Improvement
        );
        assert_eq!(up_is_better.new_changes().count(), 0);
    }

    #[test]
    fn without_an_index_labels_are_null() {
        let found = detect("a\n1\n1\n1\n5\n5\n5\n", None);
        assert!(found.index_column.is_none());
        let json = serde_json::to_value(&found).unwrap();
        assert!(json["index_column"].is_null());
        assert!(json["series"][0]["new_change"].is_null());
    }
}

//! The store's rows: one type per stored record, each mapped from its columns in one place
//! ([`FromRow`]) and used by every query that reads that record, on both back ends.
//!
//! The trait is implemented over [`Row`], the column values both back ends already give their
//! rows as (`db.rs` turns rusqlite's and postgres's own rows into it), rather than over either
//! crate's row type: one mapper per record, not one per back end, and nothing here knows which
//! database it reads.
//!
//! Each type names its columns in a table (`COLUMNS`) that queries select with [`select`], and
//! reads them in that order through a [`Columns`] cursor. The SELECT list and the mapper come
//! from one table, so they cannot drift apart by position (positional `get(7)` calls could),
//! and a query can select one record's columns after another's (a run's id, then the run).
//! Rows are read into these raw values first and converted into records afterwards (`read.rs`),
//! so a value that cannot be converted is a `StoreError::Corrupt` naming the run, not a panic.

use super::db::{DbError, FromValue, Row};
use super::holder::{Holder, holder_of};

/// A row's columns, read left to right.
pub(super) struct Columns<'r> {
    row: &'r Row,
    next: usize,
}

impl Columns<'_> {
    /// The next column, as `T`.
    pub(super) fn value<T: FromValue>(&mut self) -> Result<T, DbError> {
        let value = self.row.get(self.next)?;
        self.next += 1;
        Ok(value)
    }

    /// The next columns, as the record `T` reads them.
    pub(super) fn record<T: FromRow>(&mut self) -> Result<T, DbError> {
        T::from_columns(self)
    }
}

/// A stored record as one row of a query.
pub(super) trait FromRow: Sized {
    /// Its columns, in the order [`FromRow::from_columns`] reads them.
    const COLUMNS: &'static [&'static str];

    /// The record, from the columns at the cursor.
    fn from_columns(columns: &mut Columns<'_>) -> Result<Self, DbError>;

    /// The record, from a row that selected exactly its [`FromRow::COLUMNS`].
    fn from_row(row: &Row) -> Result<Self, DbError> {
        read_row(row, Self::from_columns)
    }
}

/// `T`'s columns as a SELECT list, each prefixed with `alias.` unless `alias` is empty.
pub(super) fn select<T: FromRow>(alias: &str) -> String {
    T::COLUMNS
        .iter()
        .map(|column| match alias {
            "" => (*column).to_string(),
            _ => format!("{alias}.{column}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every row as a `T` (`tx.query(…).and_then(all)`).
pub(super) fn all<T: FromRow>(rows: Vec<Row>) -> Result<Vec<T>, DbError> {
    rows.iter().map(T::from_row).collect()
}

/// One row read by `read`, which must read all of its columns: a column selected and never
/// read means the SELECT list and the mapper disagree, so tests fail on it.
pub(super) fn read_row<T>(
    row: &Row,
    read: impl FnOnce(&mut Columns<'_>) -> Result<T, DbError>,
) -> Result<T, DbError> {
    let mut columns = Columns { row, next: 0 };
    let value = read(&mut columns)?;
    debug_assert_eq!(
        columns.next,
        row.width(),
        "a query selected columns that its row mapper does not read"
    );
    Ok(value)
}

/// A run (`runs`), less its plan, which only a whole run's load reads.
pub(super) struct RunRow {
    pub(super) started: i64,
    pub(super) finished: Option<i64>,
    pub(super) status: String,
    pub(super) error: Option<String>,
    pub(super) settings: String,
    pub(super) holder: Option<Holder>,
}

impl FromRow for RunRow {
    const COLUMNS: &'static [&'static str] = &[
        "started_at_unix_ns",
        "finished_at_unix_ns",
        "status",
        "error",
        "settings_json",
        // All four, or no holder: see `holder_of`.
        "holder_host",
        "holder_boot_id",
        "holder_pid",
        "holder_start_ticks",
    ];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            started: c.value()?,
            finished: c.value()?,
            status: c.value()?,
            error: c.value()?,
            settings: c.value()?,
            holder: holder_of(c.value()?, c.value()?, c.value()?, c.value()?),
        })
    }
}

/// A host of a run (`hosts`), whole.
pub(super) struct HostRow {
    pub(super) idx: i64,
    pub(super) address: String,
    pub(super) kind: String,
    pub(super) agent_version: String,
    pub(super) fingerprint: Vec<u8>,
    pub(super) tuning: Vec<u8>,
    pub(super) caps_json: Option<String>,
}

impl FromRow for HostRow {
    const COLUMNS: &'static [&'static str] = &[
        "idx",
        "address",
        "kind",
        "agent_version",
        "fingerprint",
        "tuning",
        "caps_json",
    ];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            idx: c.value()?,
            address: c.value()?,
            kind: c.value()?,
            agent_version: c.value()?,
            fingerprint: c.value()?,
            tuning: c.value()?,
            caps_json: c.value()?,
        })
    }
}

/// A host briefly (`hosts`): what a run's watchers are sent, without the fingerprint's bytes.
pub(super) struct HostBriefRow {
    pub(super) idx: i64,
    pub(super) address: String,
    pub(super) cpu_model: String,
    pub(super) instance_type: Option<String>,
}

impl FromRow for HostBriefRow {
    const COLUMNS: &'static [&'static str] = &["idx", "address", "cpu_model_name", "instance_type"];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            idx: c.value()?,
            address: c.value()?,
            cpu_model: c.value()?,
            instance_type: c.value()?,
        })
    }
}

/// A trial's head (`trials`): where it sits in the run and what it ran, without its
/// measurements. What resuming skips and what watchers are sent; the start of [`TrialRow`].
pub(super) struct TrialHeadRow {
    /// The row's id, which its metrics and intervals refer to.
    pub(super) rowid: i64,
    pub(super) seq: i64,
    pub(super) probe: String,
    pub(super) variant: String,
    pub(super) warmup: bool,
    pub(super) host: i64,
    pub(super) round: u32,
    pub(super) cancelled: bool,
}

impl FromRow for TrialHeadRow {
    const COLUMNS: &'static [&'static str] = &[
        "id",
        "seq",
        "probe",
        "variant",
        "warmup",
        "host_idx",
        "round",
        "cancelled",
    ];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            rowid: c.value()?,
            seq: c.value()?,
            probe: c.value()?,
            variant: c.value()?,
            warmup: c.value()?,
            host: c.value()?,
            round: c.value()?,
            cancelled: c.value()?,
        })
    }
}

/// A trial (`trials`), whole: its head, then the rest.
pub(super) struct TrialRow {
    pub(super) head: TrialHeadRow,
    pub(super) trial_id: String,
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) params: String,
    pub(super) placement: Option<Vec<u8>>,
    pub(super) intervals: u32,
    pub(super) noise: Option<Vec<u8>>,
    pub(super) peer: Option<String>,
    pub(super) block_device: Option<String>,
}

impl FromRow for TrialRow {
    /// [`TrialHeadRow::COLUMNS`] first (a test checks), then the rest.
    const COLUMNS: &'static [&'static str] = &[
        "id",
        "seq",
        "probe",
        "variant",
        "warmup",
        "host_idx",
        "round",
        "cancelled",
        "trial_id",
        "start_unix_ns",
        "end_unix_ns",
        "params_json",
        "placement",
        "intervals",
        "noise",
        "peer",
        "block_device",
    ];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            head: c.record()?,
            trial_id: c.value()?,
            start: c.value()?,
            end: c.value()?,
            params: c.value()?,
            placement: c.value()?,
            intervals: c.value()?,
            noise: c.value()?,
            peer: c.value()?,
            block_device: c.value()?,
        })
    }
}

/// A metric of a trial (`metrics`), whole.
pub(super) struct MetricRow {
    pub(super) trial: i64,
    pub(super) name: String,
    pub(super) unit: String,
    pub(super) value: Option<f64>,
    pub(super) interval_values: String,
    pub(super) histogram: Option<Vec<u8>>,
    pub(super) clamped: Option<i64>,
    pub(super) dropped: Option<i64>,
}

impl FromRow for MetricRow {
    const COLUMNS: &'static [&'static str] = &[
        "trial",
        "name",
        "unit",
        "value",
        "interval_values_json",
        "histogram",
        "clamped",
        "dropped",
    ];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            trial: c.value()?,
            name: c.value()?,
            unit: c.value()?,
            value: c.value()?,
            interval_values: c.value()?,
            histogram: c.value()?,
            clamped: c.value()?,
            dropped: c.value()?,
        })
    }
}

/// A metric's figure (`metrics`): name, unit and value, without its histogram's bytes.
pub(super) struct FigureRow {
    pub(super) name: String,
    pub(super) unit: String,
    pub(super) value: Option<f64>,
}

impl FromRow for FigureRow {
    const COLUMNS: &'static [&'static str] = &["name", "unit", "value"];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            name: c.value()?,
            unit: c.value()?,
            value: c.value()?,
        })
    }
}

/// An interval of a trial (`intervals`).
pub(super) struct IntervalRow {
    pub(super) trial: i64,
    pub(super) pos: i64,
    pub(super) index: u32,
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) values: String,
    pub(super) noise: Option<Vec<u8>>,
}

impl FromRow for IntervalRow {
    const COLUMNS: &'static [&'static str] = &[
        "trial",
        "pos",
        "idx",
        "start_unix_ns",
        "end_unix_ns",
        "values_json",
        "noise",
    ];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            trial: c.value()?,
            pos: c.value()?,
            index: c.value()?,
            start: c.value()?,
            end: c.value()?,
            values: c.value()?,
            noise: c.value()?,
        })
    }
}

/// A histogram of an interval (`interval_histograms`).
pub(super) struct IntervalHistogramRow {
    pub(super) trial: i64,
    pub(super) interval_pos: i64,
    pub(super) name: String,
    pub(super) histogram: Vec<u8>,
}

impl FromRow for IntervalHistogramRow {
    const COLUMNS: &'static [&'static str] = &["trial", "interval_pos", "name", "histogram"];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            trial: c.value()?,
            interval_pos: c.value()?,
            name: c.value()?,
            histogram: c.value()?,
        })
    }
}

/// One point of a metric's history: a metric's value with its trial, host and run (the
/// `points` of [`super::Store::history`]'s query, which joins all four tables).
pub(super) struct HistoryRow {
    pub(super) run_id: String,
    pub(super) started: i64,
    pub(super) host: String,
    pub(super) cpu_model: String,
    pub(super) variant: String,
    pub(super) params: String,
    pub(super) round: u32,
    pub(super) seq: i64,
    pub(super) unit: String,
    pub(super) value: f64,
}

impl FromRow for HistoryRow {
    const COLUMNS: &'static [&'static str] = &[
        "run_id",
        "started",
        "address",
        "cpu_model_name",
        "variant",
        "params_json",
        "round",
        "seq",
        "unit",
        "value",
    ];

    fn from_columns(c: &mut Columns<'_>) -> Result<Self, DbError> {
        Ok(Self {
            run_id: c.value()?,
            started: c.value()?,
            host: c.value()?,
            cpu_model: c.value()?,
            variant: c.value()?,
            params: c.value()?,
            round: c.value()?,
            seq: c.value()?,
            unit: c.value()?,
            value: c.value()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::db::Value;
    use super::*;

    #[test]
    fn select_lists_the_columns_with_or_without_an_alias() {
        assert_eq!(
            select::<IntervalHistogramRow>("h"),
            "h.trial, h.interval_pos, h.name, h.histogram"
        );
        assert_eq!(select::<FigureRow>(""), "name, unit, value");
    }

    #[test]
    fn a_trial_row_starts_with_its_head() {
        assert!(TrialRow::COLUMNS.starts_with(TrialHeadRow::COLUMNS));
    }

    #[test]
    fn columns_are_read_in_order_across_records() {
        let row = Row::from(vec![
            Value::Text("run-1".into()),
            Value::Text("cycles".into()),
            Value::Text("count".into()),
            Value::Null,
            Value::Int(3),
        ]);
        let (id, figure, trials) = read_row(&row, |c| {
            Ok((
                c.value::<String>()?,
                c.record::<FigureRow>()?,
                c.value::<i64>()?,
            ))
        })
        .unwrap();
        assert_eq!((id.as_str(), trials), ("run-1", 3));
        assert_eq!(
            (figure.name.as_str(), figure.unit.as_str()),
            ("cycles", "count")
        );
        assert_eq!(figure.value, None);
        assert!(FigureRow::from_row(&Row::from(vec![Value::Null])).is_err());
    }
}

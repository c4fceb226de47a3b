//! Reading runs back: lists and whole records (finding a run by its id and what it has done:
//! [`super::find`]).
//!
//! Rows are first read into raw column values ([`super::rows`]), then converted, so a value
//! that cannot be read back becomes a [`StoreError::Corrupt`] naming the run and the column
//! instead of a panic.

use std::collections::HashMap;

use prost::Message;
use quietbench_proto::histogram::decode_bounded;
use quietbench_proto::v1 as pb;
use quietbench_record::record::{
    HistogramRecord, HostKind, HostRecord, IntervalRecord, MetricRecord, RunRecord, TrialRecord,
};

use super::db::{DbError, Tx, args};
use quietbench_host::HostRoot;

use super::holder::{self, Machine, Process};
use super::rows::{
    FromRow, HostRow, IntervalHistogramRow, IntervalRow, MetricRow, RunRow, TrialRow, all,
    read_row, select,
};
use super::{RunStatus, RunSummary, Store, StoreError, StoredRun, codec};

/// An interval's histograms: name and HdrHistogram V2 + DEFLATE bytes.
type NamedHistograms = Vec<(String, Vec<u8>)>;

/// Everything stored of one run, as rows, read in one transaction.
struct RunRows {
    run: RunRow,
    plan: Option<String>,
    hosts: Vec<HostRow>,
    trials: Vec<TrialRow>,
    metrics: Vec<MetricRow>,
    intervals: Vec<IntervalRow>,
    histograms: Vec<IntervalHistogramRow>,
}

/// A run list's row: the run's id, the run, and how many hosts and trials it has stored.
type SummaryRow = (String, RunRow, i64, i64);

impl Store {
    /// A read transaction: everything one call reads comes from one snapshot, even while
    /// another controller writes.
    pub(super) fn read_tx(&self, action: &str) -> Result<Tx<'_>, StoreError> {
        self.conn.read_tx().map_err(|e| self.sql_error(action, e))
    }

    /// The `limit` most recently started runs, newest first.
    pub fn list_runs(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        self.summaries(None, limit)
    }

    /// One run's summary by its full id; `None` when the store has no such run.
    pub fn run_summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError> {
        Ok(self.summaries(Some(run_id), 1)?.pop())
    }

    fn summaries(&self, only: Option<&str>, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        let action = "listing runs";
        let tx = self.read_tx(action)?;
        let here = Machine::read(&HostRoot::live());
        let rows: Vec<SummaryRow> = tx
            .query(
                &format!(
                    // CAST: PostgreSQL must be told the type of a parameter it sees only in
                    // IS NULL.
                    "SELECT r.id, {},
                            (SELECT count(*) FROM hosts h WHERE h.run_id = r.id),
                            (SELECT count(*) FROM trials t WHERE t.run_id = r.id)
                     FROM runs r
                     WHERE CAST(?2 AS TEXT) IS NULL OR r.id = ?2
                     ORDER BY r.started_at_unix_ns DESC, r.id DESC
                     LIMIT ?1",
                    select::<RunRow>("r")
                ),
                args![i64::try_from(limit).unwrap_or(i64::MAX), only],
            )
            .and_then(|rows| {
                rows.iter()
                    .map(|r| read_row(r, |c| Ok((c.value()?, c.record()?, c.value()?, c.value()?))))
                    .collect()
            })
            .map_err(|e| self.sql_error(action, e))?;
        rows.into_iter()
            .map(|(id, run, hosts, trials)| {
                Ok(RunSummary {
                    probes: codec::parse_probes(&run.settings)
                        .map_err(|e| self.corrupt(&id, "settings", e))?,
                    status: self.shown_status(&id, &run, here.as_ref())?,
                    started_at: codec::from_unix_ns(run.started),
                    finished_at: run.finished.map(codec::from_unix_ns),
                    error: run.error,
                    hosts: usize::try_from(hosts).unwrap_or(0),
                    trials: usize::try_from(trials).unwrap_or(0),
                    id,
                })
            })
            .collect()
    }

    fn status(&self, run_id: &str, word: &str) -> Result<RunStatus, StoreError> {
        RunStatus::parse(word).ok_or_else(|| self.corrupt(run_id, "status", format!("{word:?}")))
    }

    /// The run's status as readers show it: a `running` run whose controller is gone reads as
    /// `interrupted` ([`holder::shown_status`]). `here` is this machine.
    fn shown_status(
        &self,
        run_id: &str,
        run: &RunRow,
        here: Option<&Machine>,
    ) -> Result<RunStatus, StoreError> {
        let stored = self.status(run_id, &run.status)?;
        let root = HostRoot::live();
        Ok(holder::shown_status(
            stored,
            run.holder.as_ref(),
            here,
            |pid| Process::read(&root, pid),
        ))
    }

    /// The run whose id is `id_or_prefix` or starts with it, exactly as it was written: hosts
    /// in index order, trials (warm-ups included) in sequence order.
    pub fn load_run(&self, id_or_prefix: &str) -> Result<RunRecord, StoreError> {
        self.load_stored_run(id_or_prefix).map(|s| s.record)
    }

    /// [`Store::load_run`] with the run's status and plan.
    pub fn load_stored_run(&self, id_or_prefix: &str) -> Result<StoredRun, StoreError> {
        // Before the read transaction: a PostgreSQL store has one connection, which the
        // transaction holds.
        let id = self.resolve_run_id(id_or_prefix)?;
        let rows = self.read_run_rows(&id, id_or_prefix)?;
        self.stored_run(id, rows)
    }

    /// Every row of run `id`, from one snapshot. `id_or_prefix` is what the caller asked for,
    /// for the error when the run was deleted since its id was found.
    fn read_run_rows(&self, id: &str, id_or_prefix: &str) -> Result<RunRows, StoreError> {
        let action = "loading a run";
        let tx = self.read_tx(action)?;
        let err = |e| self.sql_error(action, e);
        let (run, plan) = tx
            .query_opt(
                &format!(
                    "SELECT {}, plan_json FROM runs WHERE id = ?1",
                    select::<RunRow>("")
                ),
                args![id],
            )
            .and_then(|row| {
                row.map(|r| read_row(&r, |c| Ok((c.record()?, c.value()?))))
                    .transpose()
            })
            .map_err(err)?
            // Deleted between finding its id and reading it.
            .ok_or_else(|| StoreError::NotFound {
                prefix: id_or_prefix.to_string(),
            })?;
        Ok(RunRows {
            run,
            plan,
            hosts: run_rows(&tx, "hosts", "idx", id).map_err(err)?,
            trials: run_rows(&tx, "trials", "seq", id).map_err(err)?,
            metrics: trial_rows(&tx, "metrics m", "m.trial, m.idx", id).map_err(err)?,
            intervals: trial_rows(&tx, "intervals i", "i.trial, i.pos", id).map_err(err)?,
            histograms: trial_rows(
                &tx,
                "interval_histograms h",
                "h.trial, h.interval_pos, h.pos",
                id,
            )
            .map_err(err)?,
        })
    }

    /// The run `id` from its rows, each converted as it was written.
    fn stored_run(&self, id: String, rows: RunRows) -> Result<StoredRun, StoreError> {
        let RunRows {
            run,
            plan,
            hosts,
            trials,
            metrics,
            intervals,
            histograms,
        } = rows;
        let mut intervals = self.intervals_by_trial(&id, intervals, histograms)?;
        let mut metrics = self.metrics_by_trial(&id, metrics)?;
        let hosts = hosts
            .into_iter()
            .enumerate()
            .map(|(position, row)| self.host(&id, position, row))
            .collect::<Result<Vec<_>, _>>()?;
        let trials = trials
            .into_iter()
            .map(|row| {
                let metrics = metrics.remove(&row.head.rowid).unwrap_or_default();
                let intervals = intervals.remove(&row.head.rowid).unwrap_or_default();
                self.trial(&id, hosts.len(), row, metrics, intervals)
            })
            .collect::<Result<Vec<_>, _>>()?;

        Ok(StoredRun {
            status: self.shown_status(&id, &run, Machine::read(&HostRoot::live()).as_ref())?,
            holder: run.holder.clone(),
            plan_json: plan,
            record: RunRecord {
                settings: codec::parse_settings(&run.settings)
                    .map_err(|e| self.corrupt(&id, "settings", e))?,
                started_at: codec::from_unix_ns(run.started),
                finished_at: run.finished.map(codec::from_unix_ns),
                hosts,
                trials,
                error: run.error,
                // Which hosts failed is kept in the run's error text only.
                host_failures: Vec::new(),
                fleet: Vec::new(),
                run_id: id,
            },
        })
    }

    /// Each trial's intervals (keyed by the trial's row id), in position order, each with its
    /// histograms.
    fn intervals_by_trial(
        &self,
        run_id: &str,
        interval_rows: Vec<IntervalRow>,
        histogram_rows: Vec<IntervalHistogramRow>,
    ) -> Result<HashMap<i64, Vec<IntervalRecord>>, StoreError> {
        let mut interval_histograms: HashMap<(i64, i64), NamedHistograms> = HashMap::new();
        for row in histogram_rows {
            interval_histograms
                .entry((row.trial, row.interval_pos))
                .or_default()
                .push((row.name, row.histogram));
        }
        let mut intervals: HashMap<i64, Vec<IntervalRecord>> = HashMap::new();
        for row in interval_rows {
            let histograms = interval_histograms
                .remove(&(row.trial, row.pos))
                .unwrap_or_default();
            intervals
                .entry(row.trial)
                .or_default()
                .push(self.interval(run_id, row, histograms)?);
        }
        Ok(intervals)
    }

    /// Each trial's metrics (keyed by the trial's row id), in index order.
    fn metrics_by_trial(
        &self,
        run_id: &str,
        metric_rows: Vec<MetricRow>,
    ) -> Result<HashMap<i64, Vec<MetricRecord>>, StoreError> {
        let mut metrics: HashMap<i64, Vec<MetricRecord>> = HashMap::new();
        for row in metric_rows {
            let trial = row.trial;
            metrics
                .entry(trial)
                .or_default()
                .push(self.metric(run_id, row)?);
        }
        Ok(metrics)
    }

    fn host(&self, run_id: &str, position: usize, row: HostRow) -> Result<HostRecord, StoreError> {
        // Trials refer to hosts by index into the list, so a gap would shift every later host.
        if usize::try_from(row.idx).ok() != Some(position) {
            return Err(self.corrupt(
                run_id,
                "hosts",
                format!(
                    "host indexes are not 0, 1, 2…: found {} at position {position}",
                    row.idx
                ),
            ));
        }
        let what = |field: &str| format!("host {position}: {field}");
        Ok(HostRecord {
            kind: match row.kind.as_str() {
                "local" => HostKind::Local,
                "remote" => HostKind::Remote,
                other => return Err(self.corrupt(run_id, &what("kind"), format!("{other:?}"))),
            },
            fingerprint: pb::Fingerprint::decode(row.fingerprint.as_slice())
                .map_err(|e| self.corrupt(run_id, &what("fingerprint"), e))?,
            tuning: codec::decode_tuning(&row.tuning)
                .map_err(|e| self.corrupt(run_id, &what("tuning"), e))?,
            caps: row
                .caps_json
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| self.corrupt(run_id, &what("caps"), e))?,
            address: row.address,
            agent_version: row.agent_version,
        })
    }

    fn trial(
        &self,
        run_id: &str,
        hosts: usize,
        row: TrialRow,
        metrics: Vec<MetricRecord>,
        interval_records: Vec<IntervalRecord>,
    ) -> Result<TrialRecord, StoreError> {
        let head = row.head;
        let what = |field: &str| format!("trial {}: {field}", head.seq);
        let host = usize::try_from(head.host)
            .ok()
            .filter(|&h| h < hosts)
            .ok_or_else(|| {
                self.corrupt(
                    run_id,
                    &what("host"),
                    format!("{} of {hosts} hosts", head.host),
                )
            })?;
        let ns = |field: &str, v: i64| {
            u64::try_from(v).map_err(|_| self.corrupt(run_id, &what(field), v))
        };
        Ok(TrialRecord {
            host,
            start_unix_ns: ns("start", row.start)?,
            end_unix_ns: ns("end", row.end)?,
            params: codec::parse_params(&row.params)
                .map_err(|e| self.corrupt(run_id, &what("params"), e))?,
            placement: row
                .placement
                .map(|b| pb::Placement::decode(b.as_slice()))
                .transpose()
                .map_err(|e| self.corrupt(run_id, &what("placement"), e))?,
            noise: row
                .noise
                .map(|b| pb::NoiseSample::decode(b.as_slice()))
                .transpose()
                .map_err(|e| self.corrupt(run_id, &what("noise"), e))?,
            probe: head.probe,
            variant: head.variant,
            warmup: head.warmup,
            round: head.round,
            trial_id: row.trial_id,
            cancelled: head.cancelled,
            intervals: row.intervals,
            metrics,
            peer: row.peer,
            block_device: row.block_device,
            interval_records,
        })
    }

    fn interval(
        &self,
        run_id: &str,
        row: IntervalRow,
        histograms: NamedHistograms,
    ) -> Result<IntervalRecord, StoreError> {
        let what = |field: &str| format!("interval {} of a trial: {field}", row.index);
        let ns = |field: &str, v: i64| {
            u64::try_from(v).map_err(|_| self.corrupt(run_id, &what(field), v))
        };
        Ok(IntervalRecord {
            index: row.index,
            start_unix_ns: ns("start", row.start)?,
            end_unix_ns: ns("end", row.end)?,
            values: codec::parse_named_values(&row.values)
                .map_err(|e| self.corrupt(run_id, &what("values"), e))?,
            histograms,
            noise: row
                .noise
                .map(|b| pb::NoiseSample::decode(b.as_slice()))
                .transpose()
                .map_err(|e| self.corrupt(run_id, &what("noise"), e))?,
        })
    }

    fn metric(&self, run_id: &str, row: MetricRow) -> Result<MetricRecord, StoreError> {
        let what = |field: &str| format!("metric {}: {field}", row.name);
        let histogram = match (row.histogram, row.clamped, row.dropped) {
            (None, _, _) => None,
            (Some(encoded), Some(clamped), Some(dropped)) => {
                let count = |field: &str, v: i64| {
                    u64::try_from(v).map_err(|_| self.corrupt(run_id, &what(field), v))
                };
                Some(HistogramRecord {
                    hist: decode_bounded(&encoded)
                        .map_err(|e| self.corrupt(run_id, &what("histogram"), e))?,
                    clamped: count("clamped", clamped)?,
                    dropped: count("dropped", dropped)?,
                    encoded,
                })
            }
            (Some(_), _, _) => {
                return Err(self.corrupt(run_id, &what("histogram"), "counts missing"));
            }
        };
        Ok(MetricRecord {
            interval_values: codec::parse_interval_values(&row.interval_values)
                .map_err(|e| self.corrupt(run_id, &what("interval values"), e))?,
            name: row.name,
            unit: row.unit,
            value: row.value,
            histogram,
        })
    }
}

/// The rows of `table` that belong to run `run_id`, as `T`s, ordered by `order`.
fn run_rows<T: FromRow>(
    tx: &Tx<'_>,
    table: &str,
    order: &str,
    run_id: &str,
) -> Result<Vec<T>, DbError> {
    let columns = select::<T>("");
    tx.query(
        &format!("SELECT {columns} FROM {table} WHERE run_id = ?1 ORDER BY {order}"),
        args![run_id],
    )
    .and_then(all)
}

/// The rows of `table` (a table of trials' rows, with its alias: `metrics m`) that belong to
/// run `run_id`'s trials, as `T`s, ordered by `order`.
fn trial_rows<T: FromRow>(
    tx: &Tx<'_>,
    table: &str,
    order: &str,
    run_id: &str,
) -> Result<Vec<T>, DbError> {
    let alias = table.rsplit(' ').next().unwrap_or(table);
    let columns = select::<T>(alias);
    tx.query(
        &format!(
            "SELECT {columns} FROM {table} JOIN trials t ON t.id = {alias}.trial
             WHERE t.run_id = ?1 ORDER BY {order}"
        ),
        args![run_id],
    )
    .and_then(all)
}

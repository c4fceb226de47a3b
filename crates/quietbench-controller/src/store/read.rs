//! Reading runs back: lists and whole records (finding a run by its id and what it has done:
//! [`super::find`]).
//!
//! Rows are first read into raw column values, then converted, so a value that cannot be read
//! back becomes a [`StoreError::Corrupt`] naming the run and the column instead of a panic.

use std::collections::HashMap;

use prost::Message;
use quietbench_proto::histogram::decode_bounded;
use quietbench_proto::v1 as pb;

use super::db::{Tx, args};
use quietbench_host::HostRoot;

use super::holder::{self, HOLDER_COLUMNS, Holder, Machine, Process, holder_of};
use super::{RunStatus, RunSummary, Store, StoreError, StoredRun, codec};
use crate::record::{
    HistogramRecord, HostKind, HostRecord, IntervalRecord, MetricRecord, RunRecord, TrialRecord,
};

struct RunRow {
    started: i64,
    finished: Option<i64>,
    status: String,
    error: Option<String>,
    settings: String,
    plan: Option<String>,
    holder: Option<Holder>,
}

struct HostRow {
    idx: i64,
    address: String,
    kind: String,
    agent_version: String,
    fingerprint: Vec<u8>,
    tuning: Vec<u8>,
    caps_json: Option<String>,
}

struct TrialRow {
    rowid: i64,
    seq: i64,
    probe: String,
    variant: String,
    warmup: bool,
    host: i64,
    round: u32,
    trial_id: String,
    start: i64,
    end: i64,
    cancelled: bool,
    params: String,
    placement: Option<Vec<u8>>,
    intervals: u32,
    noise: Option<Vec<u8>>,
    peer: Option<String>,
    block_device: Option<String>,
}

struct IntervalRow {
    trial: i64,
    pos: i64,
    index: u32,
    start: i64,
    end: i64,
    values: String,
    noise: Option<Vec<u8>>,
}

struct IntervalHistogramRow {
    trial: i64,
    interval_pos: i64,
    name: String,
    histogram: Vec<u8>,
}

/// An interval's histograms: name and HdrHistogram V2 + DEFLATE bytes.
type NamedHistograms = Vec<(String, Vec<u8>)>;

struct MetricRow {
    trial: i64,
    name: String,
    unit: String,
    value: Option<f64>,
    interval_values: String,
    histogram: Option<Vec<u8>>,
    clamped: Option<i64>,
    dropped: Option<i64>,
}

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
        let rows = tx
            .query(
                &format!(
                    // CAST: PostgreSQL must be told the type of a parameter it sees only in
                    // IS NULL.
                    "SELECT r.id, r.started_at_unix_ns, r.finished_at_unix_ns, r.status, r.error,
                            r.settings_json,
                            (SELECT count(*) FROM hosts h WHERE h.run_id = r.id),
                            (SELECT count(*) FROM trials t WHERE t.run_id = r.id),
                            {HOLDER_COLUMNS}
                     FROM runs r
                     WHERE CAST(?2 AS TEXT) IS NULL OR r.id = ?2
                     ORDER BY r.started_at_unix_ns DESC, r.id DESC
                     LIMIT ?1"
                ),
                args![i64::try_from(limit).unwrap_or(i64::MAX), only],
            )
            .and_then(|rows| {
                rows.iter()
                    .map(|r| {
                        Ok((
                            r.get::<String>(0)?,
                            RunRow {
                                started: r.get(1)?,
                                finished: r.get(2)?,
                                status: r.get(3)?,
                                error: r.get(4)?,
                                settings: r.get(5)?,
                                plan: None,
                                holder: holder_of(r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?),
                            },
                            r.get::<i64>(6)?,
                            r.get::<i64>(7)?,
                        ))
                    })
                    .collect::<Result<Vec<_>, _>>()
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
        let action = "loading a run";
        // Before the read transaction: a PostgreSQL store has one connection, which the
        // transaction holds.
        let id = self.resolve_run_id(id_or_prefix)?;
        let tx = self.read_tx(action)?;
        let err = |e| self.sql_error(action, e);
        let run = tx
            .query_opt(
                &format!(
                    "SELECT started_at_unix_ns, finished_at_unix_ns, status, error, settings_json,
                            plan_json, {HOLDER_COLUMNS}
                     FROM runs WHERE id = ?1"
                ),
                args![id],
            )
            .and_then(|row| {
                let Some(r) = row else {
                    return Ok(None);
                };
                Ok(Some(RunRow {
                    started: r.get(0)?,
                    finished: r.get(1)?,
                    status: r.get(2)?,
                    error: r.get(3)?,
                    settings: r.get(4)?,
                    plan: r.get(5)?,
                    holder: holder_of(r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?),
                }))
            })
            .map_err(err)?
            // Deleted between finding its id and reading it.
            .ok_or_else(|| StoreError::NotFound {
                prefix: id_or_prefix.to_string(),
            })?;

        let host_rows: Vec<HostRow> = tx
            .query(
                "SELECT idx, address, kind, agent_version, fingerprint, tuning, caps_json
                 FROM hosts WHERE run_id = ?1 ORDER BY idx",
                args![id],
            )
            .and_then(|rows| {
                rows.iter()
                    .map(|r| {
                        Ok(HostRow {
                            idx: r.get(0)?,
                            address: r.get(1)?,
                            kind: r.get(2)?,
                            agent_version: r.get(3)?,
                            fingerprint: r.get(4)?,
                            tuning: r.get(5)?,
                            caps_json: r.get(6)?,
                        })
                    })
                    .collect()
            })
            .map_err(err)?;

        let trial_rows: Vec<TrialRow> = tx
            .query(
                "SELECT id, seq, probe, variant, warmup, host_idx, round, trial_id, start_unix_ns,
                        end_unix_ns, cancelled, params_json, placement, intervals, noise, peer,
                        block_device
                 FROM trials WHERE run_id = ?1 ORDER BY seq",
                args![id],
            )
            .and_then(|rows| {
                rows.iter()
                    .map(|r| {
                        Ok(TrialRow {
                            rowid: r.get(0)?,
                            seq: r.get(1)?,
                            probe: r.get(2)?,
                            variant: r.get(3)?,
                            warmup: r.get(4)?,
                            host: r.get(5)?,
                            round: r.get(6)?,
                            trial_id: r.get(7)?,
                            start: r.get(8)?,
                            end: r.get(9)?,
                            cancelled: r.get(10)?,
                            params: r.get(11)?,
                            placement: r.get(12)?,
                            intervals: r.get(13)?,
                            noise: r.get(14)?,
                            peer: r.get(15)?,
                            block_device: r.get(16)?,
                        })
                    })
                    .collect()
            })
            .map_err(err)?;

        let metric_rows: Vec<MetricRow> = tx
            .query(
                "SELECT m.trial, m.name, m.unit, m.value, m.interval_values_json, m.histogram,
                        m.clamped, m.dropped
                 FROM metrics m JOIN trials t ON t.id = m.trial
                 WHERE t.run_id = ?1 ORDER BY m.trial, m.idx",
                args![id],
            )
            .and_then(|rows| {
                rows.iter()
                    .map(|r| {
                        Ok(MetricRow {
                            trial: r.get(0)?,
                            name: r.get(1)?,
                            unit: r.get(2)?,
                            value: r.get(3)?,
                            interval_values: r.get(4)?,
                            histogram: r.get(5)?,
                            clamped: r.get(6)?,
                            dropped: r.get(7)?,
                        })
                    })
                    .collect()
            })
            .map_err(err)?;
        let interval_rows: Vec<IntervalRow> = tx
            .query(
                "SELECT i.trial, i.pos, i.idx, i.start_unix_ns, i.end_unix_ns, i.values_json,
                        i.noise
                 FROM intervals i JOIN trials t ON t.id = i.trial
                 WHERE t.run_id = ?1 ORDER BY i.trial, i.pos",
                args![id],
            )
            .and_then(|rows| {
                rows.iter()
                    .map(|r| {
                        Ok(IntervalRow {
                            trial: r.get(0)?,
                            pos: r.get(1)?,
                            index: r.get(2)?,
                            start: r.get(3)?,
                            end: r.get(4)?,
                            values: r.get(5)?,
                            noise: r.get(6)?,
                        })
                    })
                    .collect()
            })
            .map_err(err)?;

        let histogram_rows: Vec<IntervalHistogramRow> = tx
            .query(
                "SELECT h.trial, h.interval_pos, h.name, h.histogram
                 FROM interval_histograms h JOIN trials t ON t.id = h.trial
                 WHERE t.run_id = ?1 ORDER BY h.trial, h.interval_pos, h.pos",
                args![id],
            )
            .and_then(|rows| {
                rows.iter()
                    .map(|r| {
                        Ok(IntervalHistogramRow {
                            trial: r.get(0)?,
                            interval_pos: r.get(1)?,
                            name: r.get(2)?,
                            histogram: r.get(3)?,
                        })
                    })
                    .collect()
            })
            .map_err(err)?;
        drop(tx);

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
                .push(self.interval(&id, row, histograms)?);
        }

        let mut metrics: HashMap<i64, Vec<MetricRecord>> = HashMap::new();
        for row in metric_rows {
            let trial = row.trial;
            metrics
                .entry(trial)
                .or_default()
                .push(self.metric(&id, row)?);
        }
        let hosts = host_rows
            .into_iter()
            .enumerate()
            .map(|(position, row)| self.host(&id, position, row))
            .collect::<Result<Vec<_>, _>>()?;
        let trials = trial_rows
            .into_iter()
            .map(|row| {
                let metrics = metrics.remove(&row.rowid).unwrap_or_default();
                let intervals = intervals.remove(&row.rowid).unwrap_or_default();
                self.trial(&id, hosts.len(), row, metrics, intervals)
            })
            .collect::<Result<Vec<_>, _>>()?;

        Ok(StoredRun {
            status: self.shown_status(&id, &run, Machine::read(&HostRoot::live()).as_ref())?,
            holder: run.holder.clone(),
            plan_json: run.plan,
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
        let what = |field: &str| format!("trial {}: {field}", row.seq);
        let host = usize::try_from(row.host)
            .ok()
            .filter(|&h| h < hosts)
            .ok_or_else(|| {
                self.corrupt(
                    run_id,
                    &what("host"),
                    format!("{} of {hosts} hosts", row.host),
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
            probe: row.probe,
            variant: row.variant,
            warmup: row.warmup,
            round: row.round,
            trial_id: row.trial_id,
            cancelled: row.cancelled,
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

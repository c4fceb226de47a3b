//! Writing a run as it happens: each call is one IMMEDIATE transaction, committed before it
//! returns, so whatever a call stored survives the controller being killed right after.

use prost::Message;
use quietbench_record::record::{HostRecord, IntervalRecord, MetricRecord, RunRecord, TrialRecord};

use super::db::{Tx, args};
use super::holder::Holder;
use super::{RunStatus, Store, StoreError, codec, sql_int};

impl Store {
    /// One write transaction ([`super::db::Conn::write_tx`]).
    fn write_tx(&self, action: &str) -> Result<Tx<'_>, StoreError> {
        self.conn.write_tx().map_err(|e| self.sql_error(action, e))
    }

    fn run_exists(&self, tx: &Tx<'_>, run_id: &str) -> Result<bool, StoreError> {
        tx.query_opt("SELECT 1 FROM runs WHERE id = ?1", args![run_id])
            .map(|found| found.is_some())
            .map_err(|e| self.sql_error("looking up a run", e))
    }

    /// Stores a new run, marked `running` and held by this process ([`Holder`]), with its
    /// settings (the seed included) and the plan it was made from, if any. Only the run
    /// itself: its hosts and trials are added with [`Store::add_host`] and [`Store::add_trial`]
    /// as they come.
    pub fn begin_run(&self, run: &RunRecord, plan_json: Option<&str>) -> Result<(), StoreError> {
        self.begin_run_held_by(run, plan_json, Holder::this_process().as_ref())
    }

    /// [`Store::begin_run`] with the holder given (`None` where /proc could not name this
    /// process).
    fn begin_run_held_by(
        &self,
        run: &RunRecord,
        plan_json: Option<&str>,
        holder: Option<&Holder>,
    ) -> Result<(), StoreError> {
        let action = "storing a new run";
        let started = time_ns("the run's start time", run.started_at)?;
        let tx = self.write_tx(action)?;
        if self.run_exists(&tx, &run.run_id)? {
            return Err(StoreError::RunExists {
                run_id: run.run_id.clone(),
            });
        }
        tx.execute(
            "INSERT INTO runs (id, started_at_unix_ns, finished_at_unix_ns, status, error,
                               settings_json, plan_json, seed)
             VALUES (?1, ?2, NULL, ?3, NULL, ?4, ?5, ?6)",
            args![
                run.run_id,
                started,
                RunStatus::Running.as_str(),
                codec::settings_json(&run.settings),
                plan_json,
                run.settings.seed.to_string(),
            ],
        )
        .map_err(|e| self.sql_error(action, e))?;
        self.set_holder(&tx, &run.run_id, holder, action)?;
        tx.commit().map_err(|e| self.sql_error(action, e))
    }

    /// Records who holds a running run (see [`super::holder`]); `None` clears it.
    fn set_holder(
        &self,
        tx: &Tx<'_>,
        run_id: &str,
        holder: Option<&Holder>,
        action: &str,
    ) -> Result<(), StoreError> {
        let (host, boot_id, pid, ticks) = match holder {
            Some(h) => (
                Some(h.host.as_str()),
                Some(h.boot_id.as_str()),
                Some(i64::from(h.pid)),
                Some(sql_int(
                    "the controller's start time (ticks)",
                    h.start_ticks,
                )?),
            ),
            None => (None, None, None, None),
        };
        tx.execute(
            "UPDATE runs SET holder_host = ?2, holder_boot_id = ?3, holder_pid = ?4,
                             holder_start_ticks = ?5
             WHERE id = ?1",
            args![run_id, host, boot_id, pid, ticks],
        )
        .map(drop)
        .map_err(|e| self.sql_error(action, e))
    }

    /// Stores host `idx` of a run (its index in [`RunRecord::hosts`]).
    pub fn add_host(&self, run_id: &str, idx: usize, host: &HostRecord) -> Result<(), StoreError> {
        let action = "storing a host";
        let idx_sql = sql_int("the host index", idx)?;
        let fp = &host.fingerprint;
        let caps_json = host
            .caps
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Encode {
                what: "a host's caps".into(),
                detail: e.to_string(),
            })?;
        let tx = self.write_tx(action)?;
        if !self.run_exists(&tx, run_id)? {
            return Err(StoreError::NoSuchRun {
                run_id: run_id.to_string(),
            });
        }
        let exists = tx
            .query_opt(
                "SELECT 1 FROM hosts WHERE run_id = ?1 AND idx = ?2",
                args![run_id, idx_sql],
            )
            .map_err(|e| self.sql_error(action, e))?;
        if exists.is_some() {
            return Err(StoreError::HostExists {
                run_id: run_id.to_string(),
                idx,
            });
        }
        tx.execute(
            "INSERT INTO hosts (run_id, idx, address, kind, agent_version, fingerprint,
                                cpu_model_name, hostname, instance_type, tuning, caps_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            args![
                run_id,
                idx_sql,
                host.address,
                host.kind.as_str(),
                host.agent_version,
                fp.encode_to_vec(),
                fp.cpu.as_ref().map(|c| c.model_name.as_str()).unwrap_or(""),
                fp.hostname,
                fp.instance
                    .as_ref()
                    .and_then(|i| i.instance_type.as_deref()),
                codec::encode_tuning(&host.tuning),
                caps_json,
            ],
        )
        .map_err(|e| self.sql_error(action, e))?;
        tx.commit().map_err(|e| self.sql_error(action, e))
    }

    /// Stores a finished trial and its metrics, committed before returning: call it as each
    /// trial finishes. `seq` is the trial's place in the run's schedule, unique within the run
    /// (resuming uses it to skip what is done); its host must have been added.
    pub fn add_trial(
        &self,
        run_id: &str,
        seq: usize,
        trial: &TrialRecord,
    ) -> Result<(), StoreError> {
        let action = "storing a trial";
        let cells = TrialCells::of(seq, trial)?;
        let tx = self.write_tx(action)?;
        self.check_trial_slot(&tx, run_id, seq, trial.host, &cells, action)?;
        let trial_row = self.insert_trial(&tx, run_id, trial, &cells, action)?;
        self.insert_metrics(&tx, trial_row, &cells.metrics, action)?;
        self.insert_intervals(&tx, trial_row, &cells.intervals, action)?;
        tx.commit().map_err(|e| self.sql_error(action, e))
    }

    /// Refuses a trial whose run or host is not stored, or whose `seq` is taken.
    fn check_trial_slot(
        &self,
        tx: &Tx<'_>,
        run_id: &str,
        seq: usize,
        host: usize,
        cells: &TrialCells<'_>,
        action: &str,
    ) -> Result<(), StoreError> {
        if !self.run_exists(tx, run_id)? {
            return Err(StoreError::NoSuchRun {
                run_id: run_id.to_string(),
            });
        }
        let host_known = tx
            .query_opt(
                "SELECT 1 FROM hosts WHERE run_id = ?1 AND idx = ?2",
                args![run_id, cells.host],
            )
            .map_err(|e| self.sql_error(action, e))?;
        if host_known.is_none() {
            return Err(StoreError::NoSuchHost {
                run_id: run_id.to_string(),
                seq,
                host,
            });
        }
        let seq_taken = tx
            .query_opt(
                "SELECT 1 FROM trials WHERE run_id = ?1 AND seq = ?2",
                args![run_id, cells.seq],
            )
            .map_err(|e| self.sql_error(action, e))?;
        if seq_taken.is_some() {
            return Err(StoreError::TrialExists {
                run_id: run_id.to_string(),
                seq,
            });
        }
        Ok(())
    }

    /// Inserts the trial's own row; returns its id, which its metrics and intervals refer to.
    fn insert_trial(
        &self,
        tx: &Tx<'_>,
        run_id: &str,
        trial: &TrialRecord,
        cells: &TrialCells<'_>,
        action: &str,
    ) -> Result<i64, StoreError> {
        // RETURNING: the new row's id, on both back ends (SQLite since 3.35).
        tx.query_opt(
            "INSERT INTO trials (run_id, seq, probe, variant, warmup, host_idx, round, trial_id,
                                 start_unix_ns, end_unix_ns, cancelled, params_json, placement,
                                 intervals, noise, peer, block_device)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
             RETURNING id",
            args![
                run_id,
                cells.seq,
                trial.probe,
                trial.variant,
                trial.warmup,
                cells.host,
                trial.round,
                trial.trial_id,
                cells.start,
                cells.end,
                trial.cancelled,
                codec::params_json(&trial.params),
                trial.placement.as_ref().map(Message::encode_to_vec),
                trial.intervals,
                trial.noise.as_ref().map(Message::encode_to_vec),
                trial.peer,
                trial.block_device,
            ],
        )
        .and_then(|row| match row {
            Some(row) => row.get(0),
            None => unreachable!("INSERT … RETURNING returns the row it inserted"),
        })
        .map_err(|e| self.sql_error(action, e))
    }

    /// Inserts a trial's metrics, in order.
    fn insert_metrics(
        &self,
        tx: &Tx<'_>,
        trial_row: i64,
        metrics: &[MetricCells<'_>],
        action: &str,
    ) -> Result<(), StoreError> {
        for (idx, cells) in metrics.iter().enumerate() {
            let m = cells.metric;
            tx.execute(
                "INSERT INTO metrics (trial, idx, name, unit, value, interval_values_json,
                                      histogram, clamped, dropped)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                args![
                    trial_row,
                    sql_int("the metric index", idx)?,
                    m.name,
                    m.unit,
                    m.value,
                    cells.interval_values,
                    m.histogram.as_ref().map(|h| h.encoded.as_slice()),
                    cells.counts.map(|c| c.0),
                    cells.counts.map(|c| c.1),
                ],
            )
            .map_err(|e| self.sql_error(action, e))?;
        }
        Ok(())
    }

    /// Inserts a trial's intervals, in order, each followed by its histograms.
    fn insert_intervals(
        &self,
        tx: &Tx<'_>,
        trial_row: i64,
        intervals: &[IntervalCells<'_>],
        action: &str,
    ) -> Result<(), StoreError> {
        for (pos, cells) in intervals.iter().enumerate() {
            let i = cells.interval;
            let pos = sql_int("the interval's position", pos)?;
            tx.execute(
                "INSERT INTO intervals (trial, pos, idx, start_unix_ns, end_unix_ns,
                                        values_json, noise)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                args![
                    trial_row,
                    pos,
                    i.index,
                    cells.start,
                    cells.end,
                    cells.values,
                    i.noise.as_ref().map(Message::encode_to_vec),
                ],
            )
            .map_err(|e| self.sql_error(action, e))?;
            for (hpos, (name, bytes)) in i.histograms.iter().enumerate() {
                tx.execute(
                    "INSERT INTO interval_histograms (trial, interval_pos, pos, name, histogram)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    args![
                        trial_row,
                        pos,
                        sql_int("the histogram's position", hpos)?,
                        name,
                        bytes,
                    ],
                )
                .map_err(|e| self.sql_error(action, e))?;
            }
        }
        Ok(())
    }

    /// Records how a run ended: `status`, with the record's `finished_at` (now, if unset) and
    /// `error`. Calling it again overwrites the outcome.
    pub fn finish_run(&self, run: &RunRecord, status: RunStatus) -> Result<(), StoreError> {
        let action = "storing the run's outcome";
        let finished = match run.finished_at {
            Some(t) => time_ns("the run's finish time", t)?,
            None => codec::now_unix_ns(),
        };
        self.set_outcome(
            &run.run_id,
            status,
            Some(finished),
            run.error.as_deref(),
            action,
            None,
        )
    }

    /// Stores a running run's settings again: a run whose schedule grows as it goes (a
    /// capacity search adds the variants of its next step) keeps its stored variants those of
    /// the trials it holds.
    pub fn update_settings(&self, run: &RunRecord) -> Result<(), StoreError> {
        let action = "storing the run's new variants";
        let tx = self.write_tx(action)?;
        let changed = tx
            .execute(
                "UPDATE runs SET settings_json = ?2 WHERE id = ?1",
                args![run.run_id, codec::settings_json(&run.settings)],
            )
            .map_err(|e| self.sql_error(action, e))?;
        if changed == 0 {
            return Err(StoreError::NoSuchRun {
                run_id: run.run_id.clone(),
            });
        }
        tx.commit().map_err(|e| self.sql_error(action, e))
    }

    /// Marks a stored run `running` again (no finish time, no error), held by this process,
    /// before resuming it.
    pub fn resume_run(&self, run_id: &str) -> Result<(), StoreError> {
        let holder = Holder::this_process();
        self.set_outcome(
            run_id,
            RunStatus::Running,
            None,
            None,
            "marking the run as resumed",
            Some(holder.as_ref()),
        )
    }

    /// Deletes a run that measured nothing (refused before its first trial, say), hosts and
    /// all, so `runs` lists only runs that hold a result or can be resumed into one. Refuses a
    /// run that has a trial: a result is never deleted by accident.
    pub fn discard_run(&self, run_id: &str) -> Result<(), StoreError> {
        let action = "discarding a run that measured nothing";
        let tx = self.write_tx(action)?;
        let trials: i64 = tx
            .query_opt(
                "SELECT COUNT(*) FROM trials WHERE run_id = ?1",
                args![run_id],
            )
            .and_then(|row| row.map_or(Ok(0), |r| r.get(0)))
            .map_err(|e| self.sql_error(action, e))?;
        if trials > 0 {
            return Err(StoreError::HasResults {
                run_id: run_id.to_string(),
                trials,
            });
        }
        tx.execute("DELETE FROM hosts WHERE run_id = ?1", args![run_id])
            .map_err(|e| self.sql_error(action, e))?;
        tx.execute("DELETE FROM runs WHERE id = ?1", args![run_id])
            .map_err(|e| self.sql_error(action, e))?;
        tx.commit().map_err(|e| self.sql_error(action, e))
    }

    /// Sets a run's outcome, and its holder where `holder` is `Some`.
    fn set_outcome(
        &self,
        run_id: &str,
        status: RunStatus,
        finished: Option<i64>,
        error: Option<&str>,
        action: &str,
        holder: Option<Option<&Holder>>,
    ) -> Result<(), StoreError> {
        let tx = self.write_tx(action)?;
        let changed = tx
            .execute(
                "UPDATE runs SET status = ?2, finished_at_unix_ns = ?3, error = ?4 WHERE id = ?1",
                args![run_id, status.as_str(), finished, error],
            )
            .map_err(|e| self.sql_error(action, e))?;
        if changed == 0 {
            return Err(StoreError::NoSuchRun {
                run_id: run_id.to_string(),
            });
        }
        if let Some(holder) = holder {
            self.set_holder(&tx, run_id, holder, action)?;
        }
        tx.commit().map_err(|e| self.sql_error(action, e))
    }
}

fn time_ns(what: &str, t: std::time::SystemTime) -> Result<i64, StoreError> {
    codec::unix_ns(t).ok_or_else(|| StoreError::OutOfRange {
        what: what.to_string(),
        value: format!("{t:?}"),
    })
}

/// A trial's values as its rows store them, converted before its transaction begins: a value
/// out of SQL's range stores nothing of the trial.
struct TrialCells<'t> {
    seq: i64,
    host: i64,
    /// Start and end, in ns since the epoch.
    start: i64,
    end: i64,
    metrics: Vec<MetricCells<'t>>,
    intervals: Vec<IntervalCells<'t>>,
}

/// A metric with its interval values as JSON and its histogram's clamped and dropped counts.
struct MetricCells<'t> {
    metric: &'t MetricRecord,
    interval_values: String,
    counts: Option<(i64, i64)>,
}

/// An interval with its start and end (ns since the epoch) and its values as JSON.
struct IntervalCells<'t> {
    interval: &'t IntervalRecord,
    start: i64,
    end: i64,
    values: String,
}

impl<'t> TrialCells<'t> {
    /// Trial `seq`'s cells, or the first value out of range.
    fn of(seq: usize, trial: &'t TrialRecord) -> Result<Self, StoreError> {
        let seq = sql_int("the trial's sequence number", seq)?;
        let host = sql_int("the trial's host index", trial.host)?;
        let start = sql_int(
            "the trial's start (ns since the epoch)",
            trial.start_unix_ns,
        )?;
        let end = sql_int("the trial's end (ns since the epoch)", trial.end_unix_ns)?;
        let metrics = trial
            .metrics
            .iter()
            .map(|m| {
                let counts = match &m.histogram {
                    Some(h) => Some((
                        sql_int(&format!("metric {}: clamped samples", m.name), h.clamped)?,
                        sql_int(&format!("metric {}: dropped samples", m.name), h.dropped)?,
                    )),
                    None => None,
                };
                Ok(MetricCells {
                    metric: m,
                    interval_values: codec::interval_values_json(&m.interval_values),
                    counts,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let intervals = trial
            .interval_records
            .iter()
            .map(|i| {
                Ok(IntervalCells {
                    interval: i,
                    start: sql_int("an interval's start (ns since the epoch)", i.start_unix_ns)?,
                    end: sql_int("an interval's end (ns since the epoch)", i.end_unix_ns)?,
                    values: codec::named_values_json(&i.values),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Self {
            seq,
            host,
            start,
            end,
            metrics,
            intervals,
        })
    }
}

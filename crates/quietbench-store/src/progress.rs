//! A run's progress as the store has it, read cheaply while the run goes on: its hosts, and the
//! trials committed after a given one with their figures. What `quietbench serve` streams to a
//! run's watchers; it decodes no histogram.

use super::db::args;
use super::rows::{FigureRow, HostBriefRow, TrialHeadRow, all, select};

use super::{Store, StoreError, sql_int};

/// A stored host, briefly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBrief {
    /// Its index in the run.
    pub index: usize,
    /// The agent's address.
    pub address: String,
    /// Its CPU model name.
    pub cpu_model: String,
    /// Its EC2 instance type, off EC2 `None`.
    pub instance_type: Option<String>,
}

/// A stored trial with its figures.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialBrief {
    /// Its position among the run's stored trials.
    pub seq: usize,
    /// Its host's index.
    pub host: usize,
    /// Variant name.
    pub variant: String,
    /// Round, from 1.
    pub round: u32,
    /// A warm-up trial.
    pub warmup: bool,
    /// Cancelled before its end.
    pub cancelled: bool,
    /// Each metric: name, unit and value (`None`: not measured).
    pub figures: Vec<(String, String, Option<f64>)>,
}

impl Store {
    /// The run's hosts from index `from` on, in order.
    pub fn hosts_from(&self, run_id: &str, from: usize) -> Result<Vec<HostBrief>, StoreError> {
        let action = "reading a run's hosts";
        let from = sql_int("a host index", from)?;
        let tx = self.read_tx(action)?;
        let rows: Vec<HostBriefRow> = tx
            .query(
                &format!(
                    "SELECT {} FROM hosts WHERE run_id = ?1 AND idx >= ?2 ORDER BY idx",
                    select::<HostBriefRow>("")
                ),
                args![run_id, from],
            )
            .and_then(all)
            .map_err(|e| self.sql_error(action, e))?;
        rows.into_iter()
            .map(|row| {
                Ok(HostBrief {
                    index: self.stored_index(run_id, "host indexes", row.idx)?,
                    address: row.address,
                    cpu_model: row.cpu_model,
                    instance_type: row.instance_type,
                })
            })
            .collect()
    }

    /// The run's trials whose sequence number is `from` or more, in order, at most `limit`.
    pub fn trials_from(
        &self,
        run_id: &str,
        from: usize,
        limit: usize,
    ) -> Result<Vec<TrialBrief>, StoreError> {
        let action = "reading a run's trials";
        let (from, limit) = (sql_int("a trial index", from)?, sql_int("a limit", limit)?);
        let tx = self.read_tx(action)?;
        let rows: Vec<TrialHeadRow> = tx
            .query(
                &format!(
                    "SELECT {} FROM trials WHERE run_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
                    select::<TrialHeadRow>("")
                ),
                args![run_id, from, limit],
            )
            .and_then(all)
            .map_err(|e| self.sql_error(action, e))?;
        let mut trials = Vec::with_capacity(rows.len());
        for row in rows {
            let figures: Vec<FigureRow> = tx
                .query(
                    &format!(
                        "SELECT {} FROM metrics WHERE trial = ?1 ORDER BY idx",
                        select::<FigureRow>("")
                    ),
                    args![row.rowid],
                )
                .and_then(all)
                .map_err(|e| self.sql_error(action, e))?;
            trials.push(TrialBrief {
                seq: self.stored_index(run_id, "trial indexes", row.seq)?,
                host: self.stored_index(run_id, "trial indexes", row.host)?,
                variant: row.variant,
                round: row.round,
                warmup: row.warmup,
                cancelled: row.cancelled,
                figures: figures
                    .into_iter()
                    .map(|f| (f.name, f.unit, f.value))
                    .collect(),
            });
        }
        Ok(trials)
    }
}

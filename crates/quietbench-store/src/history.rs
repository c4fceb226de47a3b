//! One metric over time, across runs and hosts: the store's reason to keep every run.

use super::db::{Dialect, args};
use super::rows::{HistoryRow, all, select};

use super::{HistoryPoint, Store, StoreError, codec};

impl Store {
    /// One metric of one probe over time: every counted trial's value (warm-ups, cancelled
    /// trials and trials without a value left out) from the `limit` most recently started runs
    /// that have one, oldest run first, then in trial order. With `cpu_model`, only hosts whose
    /// CPU model name contains it (ASCII case ignored).
    pub fn history(
        &self,
        probe: &str,
        metric: &str,
        cpu_model: Option<&str>,
        limit: usize,
    ) -> Result<Vec<HistoryPoint>, StoreError> {
        let action = "reading a metric's history";
        let tx = self.read_tx(action)?;
        // Where a CPU model name contains the text asked for: instr in SQLite, strpos in
        // PostgreSQL (neither has the other).
        let find = match tx.dialect() {
            Dialect::Sqlite => "instr",
            Dialect::Postgres => "strpos",
        };
        let columns = select::<HistoryRow>("p");
        let rows: Vec<HistoryRow> = tx
            .query(
                &format!(
                    "WITH points AS (
                     SELECT r.id AS run_id, r.started_at_unix_ns AS started, h.address,
                            h.cpu_model_name, t.variant, t.params_json, t.round, t.seq, m.unit,
                            m.value
                     FROM metrics m
                     JOIN trials t ON t.id = m.trial
                     JOIN runs r ON r.id = t.run_id
                     JOIN hosts h ON h.run_id = t.run_id AND h.idx = t.host_idx
                     WHERE m.name = ?2 AND t.probe = ?1 AND t.warmup = 0 AND t.cancelled = 0
                       AND m.value IS NOT NULL
                       AND (CAST(?3 AS TEXT) IS NULL
                            OR {find}(lower(h.cpu_model_name), lower(?3)) > 0)
                 ),
                 recent AS (
                     SELECT DISTINCT run_id, started FROM points
                     ORDER BY started DESC, run_id DESC LIMIT ?4
                 )
                 SELECT {columns}
                 FROM points p JOIN recent USING (run_id)
                 ORDER BY p.started, p.run_id, p.seq"
                ),
                args![
                    probe,
                    metric,
                    cpu_model,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
            )
            .and_then(all)
            .map_err(|e| self.sql_error(action, e))?;
        rows.into_iter()
            .map(|row| {
                Ok(HistoryPoint {
                    params: codec::parse_params(&row.params)
                        .map_err(|e| self.corrupt(&row.run_id, "trial params", e))?,
                    seq: usize::try_from(row.seq)
                        .map_err(|_| self.corrupt(&row.run_id, "trial seq", row.seq))?,
                    started_at: codec::from_unix_ns(row.started),
                    run_id: row.run_id,
                    host: row.host,
                    cpu_model: row.cpu_model,
                    variant: row.variant,
                    round: row.round,
                    unit: row.unit,
                    value: row.value,
                })
            })
            .collect()
    }
}

//! Finding a run: its full id from a unique prefix, and the trials it has done (what a resumed
//! run skips).

use super::db::args;
use super::rows::{TrialHeadRow, all, select};

use super::{DoneTrial, Store, StoreError, sql_int};

/// How many candidates an ambiguous prefix error lists.
const CANDIDATES_SHOWN: usize = 5;

impl Store {
    /// The full id of the run whose id is `id_or_prefix` or starts with it.
    pub fn resolve_run_id(&self, id_or_prefix: &str) -> Result<String, StoreError> {
        let action = "looking up a run id";
        let not_found = || StoreError::NotFound {
            prefix: id_or_prefix.to_string(),
        };
        if id_or_prefix.is_empty() {
            return Err(not_found());
        }
        let tx = self.read_tx(action)?;
        let exact: Option<String> = tx
            .query_opt("SELECT id FROM runs WHERE id = ?1", args![id_or_prefix])
            .and_then(|row| row.map(|r| r.get(0)).transpose())
            .map_err(|e| self.sql_error(action, e))?;
        if let Some(id) = exact {
            return Ok(id);
        }
        // substr rather than LIKE: LIKE folds case and gives '%' and '_' meaning.
        let mut ids: Vec<String> = tx
            .query(
                "SELECT id FROM runs WHERE substr(id, 1, length(?1)) = ?1 ORDER BY id LIMIT ?2",
                args![id_or_prefix, sql_int("a limit", CANDIDATES_SHOWN + 1)?],
            )
            .and_then(|rows| rows.iter().map(|r| r.get(0)).collect())
            .map_err(|e| self.sql_error(action, e))?;
        match ids.len() {
            0 => Err(not_found()),
            1 => Ok(ids.remove(0)),
            _ => {
                ids.truncate(CANDIDATES_SHOWN);
                Err(StoreError::Ambiguous {
                    prefix: id_or_prefix.to_string(),
                    candidates: ids,
                })
            }
        }
    }

    /// The trials stored for a run (its full id), in sequence order: what a resumed run skips.
    pub fn trials_done(&self, run_id: &str) -> Result<Vec<DoneTrial>, StoreError> {
        let action = "listing a run's trials";
        let tx = self.read_tx(action)?;
        let exists = tx
            .query_opt("SELECT 1 FROM runs WHERE id = ?1", args![run_id])
            .map_err(|e| self.sql_error(action, e))?;
        if exists.is_none() {
            return Err(StoreError::NotFound {
                prefix: run_id.to_string(),
            });
        }
        let rows: Vec<TrialHeadRow> = tx
            .query(
                &format!(
                    "SELECT {} FROM trials WHERE run_id = ?1 ORDER BY seq",
                    select::<TrialHeadRow>("")
                ),
                args![run_id],
            )
            .and_then(all)
            .map_err(|e| self.sql_error(action, e))?;
        rows.into_iter()
            .map(|row| {
                Ok(DoneTrial {
                    seq: self.stored_index(run_id, "trial indexes", row.seq)?,
                    host: self.stored_index(run_id, "trial indexes", row.host)?,
                    variant: row.variant,
                    round: row.round,
                    probe: row.probe,
                    warmup: row.warmup,
                })
            })
            .collect()
    }
}

//! What can go wrong with the result store, each message saying which file or run and what to do.

use std::path::PathBuf;

/// A result-store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store's folder could not be created.
    #[error("cannot create the folder {} for the result store: {source}", path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not an SQLite database, or is damaged.
    #[error(
        "{} is not a readable quietbench result store ({detail}); move it away, or point \
         quietbench at another store file",
        path.display()
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        detail: String,
    },
    /// The file is an SQLite database that some other program wrote.
    #[error(
        "{} is an SQLite database, but not a quietbench result store ({detail}); quietbench \
         leaves it untouched: point quietbench at another store file",
        path.display()
    )]
    Foreign {
        /// The file.
        path: PathBuf,
        /// What gave it away.
        detail: String,
    },
    /// The PostgreSQL database holds tables of another program.
    #[error(
        "{} holds {tables} table(s) of its own and no quietbench schema: quietbench leaves it \
         untouched; give it a database of its own (createdb quietbench)",
        path.display()
    )]
    ForeignDatabase {
        /// The database's URL, without its password.
        path: PathBuf,
        /// How many tables it has.
        tables: i64,
    },
    /// A newer quietbench wrote the store, in a schema this one does not know.
    #[error(
        "{} has result-store schema version {found}, but this quietbench knows versions up to \
         {supported}: upgrade quietbench, or point it at another store file",
        path.display()
    )]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// No stored run has this id or id prefix.
    #[error(
        "no stored run has an id starting with {prefix:?}; list the stored runs to see their ids"
    )]
    NotFound {
        /// What was asked for.
        prefix: String,
    },
    /// Several stored runs start with this prefix.
    #[error(
        "{prefix:?} is the start of several stored runs' ids ({}); give more of the id",
        candidates.join(", ")
    )]
    Ambiguous {
        /// What was asked for.
        prefix: String,
        /// Some of the matching ids (at most a handful).
        candidates: Vec<String>,
    },
    /// `begin_run` for an id that is already stored.
    #[error("run {run_id} is already in the result store; a run is begun once (resume it instead)")]
    RunExists {
        /// The run.
        run_id: String,
    },
    /// A run with results was to be discarded.
    #[error("run {run_id} holds {trials} trial(s): a run with results is never discarded")]
    HasResults {
        /// The run.
        run_id: String,
        /// How many trials it holds.
        trials: i64,
    },
    /// A host or trial for a run that was never begun.
    #[error("run {run_id} is not in the result store: begin the run before adding to it")]
    NoSuchRun {
        /// The run.
        run_id: String,
    },
    /// `add_host` with an index that run already has.
    #[error("run {run_id} already has a host {idx} in the result store")]
    HostExists {
        /// The run.
        run_id: String,
        /// The host's index.
        idx: usize,
    },
    /// `add_trial` for a host that was never added.
    #[error(
        "trial {seq} of run {run_id} ran on host {host}, which is not in the result store: add the host first"
    )]
    NoSuchHost {
        /// The run.
        run_id: String,
        /// The trial's sequence number.
        seq: usize,
        /// The host's index.
        host: usize,
    },
    /// `add_trial` with a sequence number that run already has.
    #[error("run {run_id} already has a trial {seq} in the result store")]
    TrialExists {
        /// The run.
        run_id: String,
        /// The trial's sequence number.
        seq: usize,
    },
    /// A value cannot be stored as SQLite's signed 64-bit integer.
    #[error("cannot store {what} = {value}: beyond the store's 64-bit signed range")]
    OutOfRange {
        /// Which value.
        what: String,
        /// The value.
        value: String,
    },
    /// A value cannot be encoded for storing.
    #[error("cannot store {what}: {detail}")]
    Encode {
        /// Which value.
        what: String,
        /// Why.
        detail: String,
    },
    /// A stored value cannot be read back as what it should be.
    #[error("run {run_id} in {}: stored {what} cannot be read back: {detail}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The run.
        run_id: String,
        /// Which value.
        what: String,
        /// Why.
        detail: String,
    },
    /// Any other database failure.
    #[error("result store {}: {action} failed: {source}", path.display())]
    Database {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: String,
        /// What SQLite said.
        source: super::db::DbError,
    },
}

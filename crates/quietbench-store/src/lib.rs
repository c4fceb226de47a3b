//! The result store: every run, its hosts and finished trials, in one SQLite file under the
//! user's data directory, so runs can be listed, reloaded, resumed and compared across days.
//!
//! Writes are incremental, one transaction each: the run when it begins, each host as it
//! connects, each trial as it finishes, and the outcome at the end. A controller killed at any
//! point leaves every finished trial behind, with the run still marked `running`; readers show
//! such a run as `interrupted` once its controller is gone ([`holder`]). The file is in
//! WAL mode, so reports and `history` can read it while a run writes, and two controllers can
//! share it.
//!
//! The record types are quietbench-record's data model ([`RunRecord`] and friends,
//! [`quietbench_record::record`]): a stored run loads back into exactly the record it was
//! written from, so everything that reports a live run reports a stored one. Protobuf values
//! (fingerprints, placements, noise, tuning steps) are kept as their wire encoding and
//! histograms as the HdrHistogram V2 bytes the agent sent.
//!
//! A crate of its own, beside the reports on top of quietbench-record: the controller's
//! sessions, commands and service write and read it, and nothing here knows of them. It must
//! never depend on the controller, the reports (quietbench-report), a terminal or command-line
//! crate (indicatif, clap) or tonic of its own (CI checks with `cargo tree`), so a change to a
//! report, the service or the CLI rebuilds nothing here. The controller re-exports it as
//! `store`.

mod codec;
pub mod db;
mod db_error;
mod error;
mod find;
mod history;
pub mod holder;
mod pg_conn;
mod pg_url;
mod postgres_schema;
mod postgres_tls;
mod progress;
mod read;
mod rows;
mod schema;
mod write;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use quietbench_record::record::RunRecord;
use rusqlite::Connection;

use db::{Conn, DbError};

pub use error::StoreError;
pub use progress::{HostBrief, TrialBrief};
pub use schema::SCHEMA_VERSION;

/// How long a write waits for another writer (another controller on the same file) before
/// giving up. Transactions here last milliseconds, so this is only reached by a stuck process.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// An open result store: an SQLite file, or a PostgreSQL database (`postgres://…`).
#[derive(Debug)]
pub struct Store {
    conn: Conn,
    /// The file, or the database's URL without its password: what messages name.
    path: PathBuf,
}

/// The URL in `path` when it names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn postgres_url(path: &Path) -> Option<&str> {
    path.to_str()
        .filter(|p| p.starts_with("postgres://") || p.starts_with("postgresql://"))
}

/// A store's location as messages may show it: a file's path, or a URL without its password.
pub fn shown(path: &Path) -> String {
    match postgres_url(path) {
        Some(url) => pg_url::without_password(url),
        None => path.display().to_string(),
    }
}

/// How a stored run ended, or that it has not (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Begun and not finished, and its controller is alive (or cannot be checked from here:
    /// see [`holder::shown_status`]).
    Running,
    /// Every planned trial ran.
    Complete,
    /// Stopped by an error.
    Failed,
    /// Stopped by the user, or its controller died (killed, or its machine rebooted) before it
    /// finished. Either way it can be resumed (`quietbench resume RUN`).
    Interrupted,
}

impl RunStatus {
    /// The word stored in `runs.status` and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Complete => "complete",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
        }
    }

    /// The inverse of [`RunStatus::as_str`].
    pub fn parse(word: &str) -> Option<Self> {
        [
            Self::Running,
            Self::Complete,
            Self::Failed,
            Self::Interrupted,
        ]
        .into_iter()
        .find(|s| s.as_str() == word)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of a run list.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run's id.
    pub id: String,
    /// When it started.
    pub started_at: SystemTime,
    /// When it finished, if it did.
    pub finished_at: Option<SystemTime>,
    /// How it ended.
    pub status: RunStatus,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
    /// Its probes, as asked for.
    pub probes: Vec<String>,
    /// Hosts stored.
    pub hosts: usize,
    /// Trials stored, warm-ups included.
    pub trials: usize,
}

/// A stored run with what the store knows beyond its record.
#[derive(Debug, Clone)]
pub struct StoredRun {
    /// The run, exactly as written.
    pub record: RunRecord,
    /// How it ended.
    pub status: RunStatus,
    /// The plan it was begun with, if one was given.
    pub plan_json: Option<String>,
    /// The controller that last began or resumed it, where recorded.
    pub holder: Option<holder::Holder>,
}

/// A trial already stored, for resuming a run without repeating it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneTrial {
    /// Its sequence number in the run's schedule.
    pub seq: usize,
    /// Variant name.
    pub variant: String,
    /// Round, from 1.
    pub round: u32,
    /// Index of its host.
    pub host: usize,
    /// Probe name.
    pub probe: String,
    /// A warm-up trial.
    pub warmup: bool,
}

/// One trial's value of one metric, as the store's history queries return them.
pub use quietbench_record::record::HistoryPoint;

impl Store {
    /// Opens the store at `path`, creating it (and its folder) if needed, and bringing an older
    /// schema up to date. A file that is not a quietbench store, or one written by a newer
    /// quietbench, is an error and is left untouched.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(url) = postgres_url(path) {
            return postgres_schema::open(url);
        }
        match Self::open_writable(path) {
            Ok(store) => Ok(store),
            // A store on read-only media (a mounted snapshot, a CD of results, a read-only
            // bind mount) is read as it is: nothing can be written there anyway, and a reader
            // must not need to (WAL mode, pragmas and migrations all write).
            Err(err) if path.exists() && !writable(path) => {
                Self::open_read_only(path).map_err(|read_only| match read_only {
                    // The read-only look explains more (an old schema, a damaged file).
                    StoreError::NewerSchema { .. } | StoreError::Unreadable { .. } => read_only,
                    _ => err,
                })
            }
            Err(err) => Err(err),
        }
    }

    fn open_writable(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let mut conn =
            Connection::open(path).map_err(|e| schema::sql_error(path, "opening the file", e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| schema::sql_error(path, "setting the busy timeout", e))?;
        schema::prepare(&mut conn, path)?;
        Ok(Store {
            conn: Conn::Sqlite(conn),
            path: path.to_path_buf(),
        })
    }

    /// Opens a store that cannot be written, as SQLite's immutable file: read, never locked,
    /// never changed. Only a store of this build's schema version can be read so.
    fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        use rusqlite::OpenFlags;
        let uri = format!(
            "file:{}?immutable=1",
            path.display()
                .to_string()
                .replace('%', "%25")
                .replace('?', "%3f")
                .replace('#', "%23")
        );
        let conn = Connection::open_with_flags(
            uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(|e| schema::sql_error(path, "opening the file read-only", e))?;
        schema::check_read_only(&conn, path)?;
        Ok(Store {
            conn: Conn::Sqlite(conn),
            path: path.to_path_buf(),
        })
    }

    /// `$XDG_DATA_HOME/quietbench/results.sqlite3`, else
    /// `~/.local/share/quietbench/results.sqlite3`.
    pub fn default_path() -> PathBuf {
        default_path_from(std::env::var_os("XDG_DATA_HOME"), std::env::home_dir())
    }

    /// The store a command uses: its `--db`, else `$QUIETBENCH_DB`, else [`Store::default_path`].
    /// The variable keeps a PostgreSQL password off command lines, which every user of the
    /// machine can read in `ps`; `quietbench serve` hands its store to its runs this way.
    pub fn location(db: Option<&Path>) -> PathBuf {
        location_from(db, std::env::var_os(DB_VARIABLE), Self::default_path)
    }

    /// The file this store is in, or its database's URL (without a password).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql_error(&self, action: &str, err: DbError) -> StoreError {
        db_error(&self.path, action, err)
    }

    fn corrupt(&self, run_id: &str, what: &str, detail: impl ToString) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            run_id: run_id.to_string(),
            what: what.to_string(),
            detail: detail.to_string(),
        }
    }

    /// A stored index (of a host or a trial, `what` says which) as a position; a negative one
    /// is a damaged store.
    fn stored_index(&self, run_id: &str, what: &str, value: i64) -> Result<usize, StoreError> {
        usize::try_from(value).map_err(|_| self.corrupt(run_id, what, value))
    }
}

/// A back end's error as the store's: SQLite's "not a database" or "corrupt" is
/// [`StoreError::Unreadable`], anything else [`StoreError::Database`].
fn db_error(path: &Path, action: &str, err: DbError) -> StoreError {
    match err {
        DbError::Sqlite(e) => schema::sql_error(path, action, e),
        other => StoreError::Database {
            path: path.to_path_buf(),
            action: action.to_string(),
            source: other,
        },
    }
}

/// The environment variable naming the store when `--db` does not.
pub const DB_VARIABLE: &str = "QUIETBENCH_DB";

/// [`Store::location`] from its inputs: an empty variable counts as unset.
fn location_from(
    db: Option<&Path>,
    variable: Option<OsString>,
    default: impl FnOnce() -> PathBuf,
) -> PathBuf {
    match (db, variable) {
        (Some(db), _) => db.to_path_buf(),
        (None, Some(value)) if !value.is_empty() => PathBuf::from(value),
        (None, _) => default(),
    }
}

/// [`Store::default_path`] from the environment's values. The XDG base-directory spec says a
/// relative `XDG_DATA_HOME` is invalid and must be ignored; without a home directory the store
/// goes in the current directory.
fn default_path_from(xdg_data_home: Option<OsString>, home: Option<PathBuf>) -> PathBuf {
    let data = xdg_data_home
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.unwrap_or_default().join(".local/share"));
    data.join("quietbench").join("results.sqlite3")
}

/// A count or index as SQLite's INTEGER.
fn sql_int<T: TryInto<i64> + Copy + std::fmt::Display>(
    what: &str,
    value: T,
) -> Result<i64, StoreError> {
    value.try_into().map_err(|_| StoreError::OutOfRange {
        what: what.to_string(),
        value: value.to_string(),
    })
}

/// Whether this process may write `path` (false on read-only media, whoever it is).
fn writable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tmpfs mounted here, made read-only by `read_only`, unmounted when dropped.
    struct Mount(PathBuf);

    impl Mount {
        fn tmpfs(dir: &Path) -> Self {
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=16m", "qb-ro-test"])
                .arg(dir)
                .status()
                .expect("run mount");
            assert!(status.success(), "mount -t tmpfs failed");
            Self(dir.to_path_buf())
        }

        fn read_only(&self) {
            let status = std::process::Command::new("mount")
                .args(["-o", "remount,ro"])
                .arg(&self.0)
                .status()
                .expect("run mount");
            assert!(status.success(), "remount,ro failed");
        }
    }

    impl Drop for Mount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }

    #[test]
    fn a_store_on_read_only_media_is_read() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test needs root: it mounts a tmpfs and makes it read-only, as a snapshot of a \
             store would be; run the tests as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let mount = Mount::tmpfs(dir.path());
        let path = dir.path().join("results.sqlite3");
        let store = Store::open(&path).unwrap();
        let mut run = quietbench_record::record::test_records::sample_run::sample_run();
        run.run_id = "kept-run".into();
        store.begin_run(&run, None).unwrap();
        drop(store);
        mount.read_only();
        assert!(!writable(&path));
        let store = Store::open(&path).expect("a read-only store opens");
        let list = store.list_runs(5).unwrap();
        assert_eq!(list[0].id, "kept-run");
        // Writes fail: the file is immutable to this connection.
        run.run_id = "new-run".into();
        assert!(
            store.begin_run(&run, None).is_err(),
            "a read-only store took a write"
        );
        drop(store);
    }

    #[test]
    fn a_run_whose_schedule_grows_keeps_its_new_variants() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("results.sqlite3")).unwrap();
        let mut run = quietbench_record::record::test_records::sample_run::sample_run();
        run.trials.clear();
        store.begin_run(&run, None).unwrap();
        let mut step = run.settings.variants[0].clone();
        step.name = "A@1914".into();
        run.settings.variants.push(step);
        store.update_settings(&run).unwrap();
        let loaded = store.load_run(&run.run_id).unwrap();
        assert_eq!(loaded.settings.variants, run.settings.variants);
        run.run_id = "never-begun".into();
        assert!(matches!(
            store.update_settings(&run),
            Err(StoreError::NoSuchRun { .. })
        ));
    }

    #[test]
    fn location_is_the_flag_then_the_variable_then_the_default() {
        let default = || PathBuf::from("/default.sqlite3");
        let url = Some(OsString::from("postgres://u:pw@h/db"));
        assert_eq!(
            location_from(Some(Path::new("/flag.db")), url.clone(), default),
            PathBuf::from("/flag.db")
        );
        assert_eq!(
            location_from(None, url, default),
            PathBuf::from("postgres://u:pw@h/db")
        );
        assert_eq!(
            location_from(None, Some(OsString::new()), default),
            default()
        );
        assert_eq!(location_from(None, None, default), default());
    }

    #[test]
    fn default_path_follows_xdg_and_ignores_a_relative_one() {
        let home = Some(PathBuf::from("/home/u"));
        assert_eq!(
            default_path_from(Some("/data".into()), home.clone()),
            PathBuf::from("/data/quietbench/results.sqlite3")
        );
        assert_eq!(
            default_path_from(None, home.clone()),
            PathBuf::from("/home/u/.local/share/quietbench/results.sqlite3")
        );
        assert_eq!(
            default_path_from(Some("rel".into()), home),
            PathBuf::from("/home/u/.local/share/quietbench/results.sqlite3")
        );
        assert_eq!(
            default_path_from(Some("".into()), None),
            PathBuf::from(".local/share/quietbench/results.sqlite3")
        );
    }

    #[test]
    fn statuses_round_trip() {
        for s in [
            RunStatus::Running,
            RunStatus::Complete,
            RunStatus::Failed,
            RunStatus::Interrupted,
        ] {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(RunStatus::parse("done"), None);
    }
}

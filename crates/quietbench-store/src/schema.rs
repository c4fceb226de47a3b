//! The store's tables, and bringing a file to the current schema.
//!
//! Each schema change is a migration appended to [`MIGRATIONS`] and never edited afterwards: a
//! store written by any earlier build is brought forward one version at a time, inside the same
//! transaction that records the new version, so a crash mid-migration leaves the old schema.

use std::path::Path;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::StoreError;

/// `PRAGMA application_id` of a quietbench store ("qbst"): tells our files from any other
/// SQLite database before we write to it.
pub(crate) const APPLICATION_ID: i32 = 0x7162_7374;

/// Version 1: runs, their hosts, trials, metrics and intervals.
///
/// Times are ns since the Unix epoch (INTEGER); protobuf messages are BLOBs of their wire
/// encoding, so a newer proto with added fields still decodes here; maps and lists are JSON
/// text, so they can be queried with SQLite's json functions. Columns beside a BLOB
/// (`cpu_model_name`, `hostname`, `instance_type`) are copies kept for filtering in SQL.
const V1: &str = r#"
CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL,
    started_at_unix_ns INTEGER NOT NULL,
    finished_at_unix_ns INTEGER,
    status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed', 'interrupted')),
    error TEXT,
    settings_json TEXT NOT NULL,
    plan_json TEXT,
    -- Decimal text: seeds are u64, and half of them exceed SQLite's signed INTEGER.
    seed TEXT
) STRICT;
CREATE INDEX runs_by_start ON runs (started_at_unix_ns);

CREATE TABLE hosts (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL CHECK (idx >= 0),
    address TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('local', 'remote')),
    agent_version TEXT NOT NULL,
    fingerprint BLOB NOT NULL,
    cpu_model_name TEXT NOT NULL,
    hostname TEXT NOT NULL,
    instance_type TEXT,
    -- ControlReport messages, each length-delimited, one after another.
    tuning BLOB NOT NULL,
    PRIMARY KEY (run_id, idx)
) STRICT;
CREATE INDEX hosts_by_cpu_model ON hosts (cpu_model_name);

CREATE TABLE trials (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL CHECK (seq >= 0),
    probe TEXT NOT NULL,
    variant TEXT NOT NULL,
    warmup INTEGER NOT NULL CHECK (warmup IN (0, 1)),
    host_idx INTEGER NOT NULL,
    round INTEGER NOT NULL,
    trial_id TEXT NOT NULL,
    start_unix_ns INTEGER NOT NULL,
    end_unix_ns INTEGER NOT NULL,
    cancelled INTEGER NOT NULL CHECK (cancelled IN (0, 1)),
    params_json TEXT NOT NULL,
    placement BLOB,
    intervals INTEGER NOT NULL,
    noise BLOB,
    peer TEXT,
    UNIQUE (run_id, seq),
    FOREIGN KEY (run_id, host_idx) REFERENCES hosts (run_id, idx) ON DELETE CASCADE
) STRICT;
CREATE INDEX trials_by_probe ON trials (probe, run_id);
CREATE INDEX trials_by_host ON trials (run_id, host_idx);

CREATE TABLE metrics (
    trial INTEGER NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    unit TEXT NOT NULL,
    value REAL,
    -- JSON array of numbers; "NaN", "inf" and "-inf" as strings (JSON has no such numbers).
    interval_values_json TEXT NOT NULL,
    -- HdrHistogram V2 + DEFLATE, exactly as the agent sent it.
    histogram BLOB,
    clamped INTEGER,
    dropped INTEGER,
    PRIMARY KEY (trial, idx),
    CHECK ((histogram IS NULL) = (clamped IS NULL) AND (histogram IS NULL) = (dropped IS NULL))
) STRICT, WITHOUT ROWID;
CREATE INDEX metrics_by_name ON metrics (name, trial);

-- Every interval of a trial as the agent streamed it, in the record's order (pos).
CREATE TABLE intervals (
    trial INTEGER NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    pos INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    start_unix_ns INTEGER NOT NULL,
    end_unix_ns INTEGER NOT NULL,
    -- JSON array of [name, value] pairs, values written as in metrics.interval_values_json.
    values_json TEXT NOT NULL,
    noise BLOB,
    PRIMARY KEY (trial, pos)
) STRICT, WITHOUT ROWID;

CREATE TABLE interval_histograms (
    trial INTEGER NOT NULL,
    interval_pos INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    name TEXT NOT NULL,
    -- HdrHistogram V2 + DEFLATE, exactly as the agent sent it.
    histogram BLOB NOT NULL,
    PRIMARY KEY (trial, interval_pos, pos),
    FOREIGN KEY (trial, interval_pos) REFERENCES intervals (trial, pos) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
"#;

/// Version 2: the controller that holds a running run (see [`super::holder`]), so that a run
/// whose controller was killed reads as `interrupted` instead of `running` for good. Runs
/// stored before have no holder: they read as stored.
const V2: &str = r#"
ALTER TABLE runs ADD COLUMN holder_host TEXT;
ALTER TABLE runs ADD COLUMN holder_boot_id TEXT;
ALTER TABLE runs ADD COLUMN holder_pid INTEGER CHECK (holder_pid >= 0);
-- Clock ticks since boot (field 22 of /proc/PID/stat): far below i64::MAX.
ALTER TABLE runs ADD COLUMN holder_start_ticks INTEGER CHECK (holder_start_ticks >= 0);
"#;

/// Version 3: each host's instance and volume caps (JSON of `limits::HostCaps`), looked up from
/// the EC2 API when the run started, NULL where none were; and the disk that held each disk
/// trial's target, so its result is judged against that volume's caps.
const V3: &str = r#"
ALTER TABLE hosts ADD COLUMN caps_json TEXT;
ALTER TABLE trials ADD COLUMN block_device TEXT;
"#;

/// Every migration, in order: index 0 brings an empty file to version 1, index 1 brings
/// version 1 to 2, and so on.
pub(crate) const MIGRATIONS: &[&str] = &[V1, V2, V3];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Maps SQLite's "not a database"/"corrupt" to [`StoreError::Unreadable`], anything else to
/// [`StoreError::Database`].
pub(crate) fn sql_error(path: &Path, action: &str, err: rusqlite::Error) -> StoreError {
    match err.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Unreadable {
            path: path.to_path_buf(),
            detail: err.to_string(),
        },
        _ => StoreError::Database {
            path: path.to_path_buf(),
            action: action.to_string(),
            source: super::db::DbError::Sqlite(err),
        },
    }
}

/// What the file holds before we touch it.
enum Found {
    /// No tables, no application id: a new file.
    Empty,
    /// A quietbench store.
    Ours,
}

/// Tells a new file, a store, and anything else apart, reading only.
fn inspect(conn: &Connection, path: &Path) -> Result<Found, StoreError> {
    let err = |e| sql_error(path, "reading the file's header", e);
    let app_id: i32 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(err)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
        .map_err(err)?;
    match (app_id, objects) {
        (APPLICATION_ID, _) => Ok(Found::Ours),
        (0, 0) => Ok(Found::Empty),
        (0, n) => Err(StoreError::Foreign {
            path: path.to_path_buf(),
            detail: format!(
                "it has tables of its own ({n} schema objects) and no quietbench application id"
            ),
        }),
        (other, _) => Err(StoreError::Foreign {
            path: path.to_path_buf(),
            detail: format!("its application id is {other:#010x}, not quietbench's"),
        }),
    }
}

/// Sets up a freshly opened connection: checks what the file is, switches it to WAL, and
/// creates or migrates the schema.
pub(crate) fn prepare(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    // Look before writing anything: a foreign database must be left exactly as it was (even
    // switching it to WAL would change its header).
    inspect(conn, path)?;

    // WAL: readers never block the writer, so a report or `history` can read while a run is
    // being written, and two controllers can share the store. The mode is stored in the file.
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "wal", |r| r.get(0))
        .map_err(|e| sql_error(path, "switching to WAL mode", e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Unreadable {
            path: path.to_path_buf(),
            detail: format!("SQLite would not use WAL mode for it (journal mode {mode:?})"),
        });
    }
    // FULL syncs the WAL at every commit, so a finished trial survives a power cut as well as a
    // killed controller; NORMAL would save an fsync per trial, which is nothing beside a trial.
    for (name, value) in [("synchronous", "FULL"), ("foreign_keys", "ON")] {
        conn.pragma_update(None, name, value)
            .map_err(|e| sql_error(path, &format!("setting {name}"), e))?;
    }
    migrate(conn, path)?;
    check_tables(conn, path)
}

/// Checks a store opened read-only: ours, of this build's schema version (an older one would
/// need its migrations written), with every table.
pub(crate) fn check_read_only(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    match inspect(conn, path)? {
        Found::Empty => {
            return Err(StoreError::Unreadable {
                path: path.to_path_buf(),
                detail: "it is empty, and read-only".into(),
            });
        }
        Found::Ours => {}
    }
    let version: i64 = conn
        .query_row("SELECT max(version) FROM schema_version", [], |r| r.get(0))
        .map_err(|e| StoreError::Unreadable {
            path: path.to_path_buf(),
            detail: format!("its schema_version table cannot be read: {e}"),
        })?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < SCHEMA_VERSION {
        return Err(StoreError::Unreadable {
            path: path.to_path_buf(),
            detail: format!(
                "it is read-only and of schema version {version}, older than this build's \
                 {SCHEMA_VERSION}: copy it somewhere writable, where it is brought up to date"
            ),
        });
    }
    check_tables(conn, path)
}

/// The tables and their columns, as `name(col, col, …)`, sorted.
fn layout(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for table in &mut tables {
        let columns: Vec<String> = conn
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{table}') ORDER BY cid"
            ))?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        *table = format!("{table}({})", columns.join(", "));
    }
    Ok(tables)
}

/// Checks that a store at the current version has the tables and columns its migrations make
/// (those of a fresh store in memory): a store changed by hand, or half restored, is named as
/// such with what it lacks, not left to fail later with SQLite's "SQL logic error".
fn check_tables(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let err = |e| sql_error(path, "reading the store's tables", e);
    let mut fresh = Connection::open_in_memory().map_err(err)?;
    migrate(&mut fresh, Path::new(":memory:"))?;
    let want = layout(&fresh).map_err(err)?;
    let have = layout(conn).map_err(err)?;
    let missing: Vec<&String> = want.iter().filter(|t| !have.contains(t)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(StoreError::Unreadable {
        path: path.to_path_buf(),
        detail: format!(
            "it is marked as a quietbench store of schema version {SCHEMA_VERSION}, but lacks or \
             changed {}: it was edited by hand or damaged; restore it from a backup",
            missing
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// Brings the schema to [`SCHEMA_VERSION`], in one IMMEDIATE transaction so that two
/// controllers opening a new file at once do not both create it.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let err = |action: &'static str| move |e| sql_error(path, action, e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err("locking the store to check its schema"))?;
    let found = inspect(&tx, path)?;
    let current: i64 = match found {
        Found::Empty => {
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(err("marking the file as a quietbench store"))?;
            tx.execute_batch(
                "CREATE TABLE schema_version (
                    version INTEGER PRIMARY KEY NOT NULL,
                    applied_at_unix_ns INTEGER NOT NULL
                ) STRICT;",
            )
            .map_err(err("creating the schema_version table"))?;
            0
        }
        Found::Ours => tx
            .query_row("SELECT max(version) FROM schema_version", [], |r| {
                r.get::<_, Option<i64>>(0)
            })
            .optional()
            .map_err(|e| StoreError::Unreadable {
                path: path.to_path_buf(),
                detail: format!("its schema_version table cannot be read: {e}"),
            })?
            .flatten()
            .unwrap_or(0),
    };
    if current < 0 {
        return Err(StoreError::Unreadable {
            path: path.to_path_buf(),
            detail: format!("its schema version is {current}"),
        });
    }
    if current > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (version, sql) in (current + 1..).zip(&MIGRATIONS[current as usize..]) {
        tx.execute_batch(sql).map_err(|e| {
            sql_error(
                path,
                &format!("migrating the schema to version {version}"),
                e,
            )
        })?;
        tx.execute(
            "INSERT INTO schema_version (version, applied_at_unix_ns) VALUES (?1, ?2)",
            (version, super::codec::now_unix_ns()),
        )
        .map_err(err("recording the schema version"))?;
    }
    tx.commit().map_err(err("committing the schema"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RunStatus, Store};

    /// A store as a build of schema version 1 left it, with a run its killed controller left
    /// `running`.
    fn version_1_store(path: &Path) {
        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (
                version INTEGER PRIMARY KEY NOT NULL,
                applied_at_unix_ns INTEGER NOT NULL
            ) STRICT;",
        )
        .unwrap();
        conn.execute_batch(V1).unwrap();
        conn.execute(
            "INSERT INTO schema_version (version, applied_at_unix_ns) VALUES (1, 0)",
            [],
        )
        .unwrap();
        let settings = quietbench_record::record::test_records::sample_run::sample_run().settings;
        conn.execute(
            "INSERT INTO runs (id, started_at_unix_ns, status, settings_json, seed)
             VALUES ('old-run', 1700000000000000000, 'running', ?1, '42')",
            [super::super::codec::settings_json(&settings)],
        )
        .unwrap();
    }

    #[test]
    fn a_store_missing_a_table_is_named_as_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite3");
        drop(Store::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("DROP TABLE interval_histograms")
            .unwrap();
        drop(conn);
        let err = Store::open(&path)
            .expect_err("a damaged store is refused")
            .to_string();
        assert!(
            err.contains("lacks or changed interval_histograms(") && err.contains("backup"),
            "{err}"
        );
        assert!(!err.contains("SQL logic error"), "{err}");
    }

    #[test]
    fn a_version_1_store_gains_run_holders_and_keeps_its_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.sqlite3");
        version_1_store(&path);
        let store = Store::open(&path).unwrap();
        let version: i64 = store
            .conn
            .read_tx()
            .unwrap()
            .query_opt("SELECT max(version) FROM schema_version", &[])
            .unwrap()
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        assert_eq!(SCHEMA_VERSION, 3);
        // The old run has no holder: nothing says its controller is gone, so it reads as
        // stored.
        let list = store.list_runs(5).unwrap();
        assert_eq!(
            (list[0].id.as_str(), list[0].status),
            ("old-run", RunStatus::Running)
        );
        let old = store.load_stored_run("old-run").unwrap();
        assert_eq!(old.holder, None);
        assert_eq!(old.record.settings.seed, 42);
        // New runs in the migrated store record theirs.
        let mut run = quietbench_record::record::test_records::sample_run::sample_run();
        run.run_id = "new-run".into();
        store.begin_run(&run, None).unwrap();
        // Version 3: a host's caps and a trial's disk are kept.
        run.hosts[0].caps = Some(quietbench_record::limits::HostCaps {
            source: "DescribeInstanceTypes (test)".into(),
            notes: vec!["volumes not described".into()],
            cluster_placement_group: true,
            ..Default::default()
        });
        store.add_host("new-run", 0, &run.hosts[0]).unwrap();
        let new = store.load_stored_run("new-run").unwrap();
        assert_eq!(new.record.hosts[0].caps, run.hosts[0].caps);
        assert_eq!(new.holder.map(|h| h.pid), Some(std::process::id()));
        assert_eq!(new.status, RunStatus::Running);
        // Opening again migrates nothing twice.
        drop(store);
        assert!(Store::open(&path).is_ok());
    }
}

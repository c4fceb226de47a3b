//! The PostgreSQL store's connection: one `postgres` client, used off any runtime
//! ([`off_runtime`]), with TLS as its URL says (`postgres_tls.rs`), and made again when
//! the server ended it between transactions.

use std::sync::{Mutex, MutexGuard};

use super::db_error::DbError;

/// A PostgreSQL connection, dropped off any runtime, and made again when the server ended it.
pub struct PgConn {
    client: Mutex<Option<postgres::Client>>,
    /// For connecting again; kept in memory only.
    url: String,
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgConn")
    }
}

impl PgConn {
    /// Connects to `url`, with TLS as its `sslmode` and `sslrootcert` say (libpq's meaning;
    /// `postgres_tls.rs`).
    pub fn connect(url: &str) -> Result<Self, DbError> {
        let client = off_runtime(|| super::postgres_tls::connect(url))?;
        Ok(Self {
            client: Mutex::new(Some(client)),
            url: url.to_string(),
        })
    }

    /// Begins a transaction with `begin`. A connection the server ended since the last one (a
    /// restart, a failover, an idle timeout) is made again and the BEGIN sent once more:
    /// nothing of the transaction has been sent yet, so nothing is lost or sent twice. A
    /// connection lost inside a transaction still fails it.
    pub(super) fn begin(
        &self,
        guard: &mut Option<postgres::Client>,
        begin: &str,
    ) -> Result<(), DbError> {
        match batch(guard, begin) {
            Err(e) if guard.as_ref().is_some_and(postgres::Client::is_closed) => {
                tracing::warn!(
                    "the PostgreSQL store's connection was closed ({e}); connecting again"
                );
                let fresh = off_runtime(|| super::postgres_tls::connect(&self.url))?;
                let closed = guard.replace(fresh);
                off_runtime(move || drop(closed));
                batch(guard, begin)
            }
            other => other,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Option<postgres::Client>> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs statements without parameters (DDL, BEGIN, COMMIT).
    pub fn batch(&self, sql: &str) -> Result<(), DbError> {
        let mut guard = self.lock();
        batch(&mut guard, sql)
    }
}

/// Runs `sql` on the client in `guard`.
pub(super) fn batch(guard: &mut Option<postgres::Client>, sql: &str) -> Result<(), DbError> {
    let client = guard
        .as_mut()
        .expect("the client lives as long as its PgConn");
    off_runtime(|| client.batch_execute(sql)).map_err(DbError::from)
}

impl Drop for PgConn {
    fn drop(&mut self) {
        let client = self.lock().take();
        off_runtime(move || drop(client));
    }
}

/// Runs `f` where the `postgres` client may block: on a scoped thread when this thread is
/// inside a tokio runtime, here otherwise.
pub fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

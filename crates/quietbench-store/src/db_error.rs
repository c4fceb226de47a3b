//! The store's back ends' errors, as one type.

/// A back end's error.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite's.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL's (the server's message, or the connection's).
    #[error("{}", postgres_message(.0))]
    Postgres(#[from] postgres::Error),
    /// The URL's TLS settings, or their CA file, are wrong.
    #[error("{0}")]
    Tls(String),
    /// A column held another type than expected.
    #[error("column {column}: {detail}")]
    Type {
        /// The column's index.
        column: usize,
        /// What was found.
        detail: String,
    },
}

/// A PostgreSQL error with the server's own words where it sent some, else with its causes:
/// the client's own text is only its kind ("error performing TLS handshake"), and the why
/// (a refused connection, an unknown CA) is in its sources.
fn postgres_message(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl DbError {
    /// The SQLSTATE of a PostgreSQL error (e.g. "23505", unique violation).
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Self::Postgres(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }
}

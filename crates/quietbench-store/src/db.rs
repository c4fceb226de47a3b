//! One SQL interface over the store's two back ends, SQLite (rusqlite, the embedded default)
//! and PostgreSQL (the `postgres` crate, `--db postgres://…`), so that every query of the store
//! is written once. Values cross it as [`Value`]s: integers (booleans as 0 and 1, as SQLite
//! keeps them), reals, text and bytes. Statements are written with SQLite's `?N` placeholders;
//! PostgreSQL gets them as `$N`.
//!
//! The `postgres` client runs its own runtime and panics when called, or dropped, on a thread
//! that is inside another one (the controller writes trials from inside its runtime), so inside
//! a runtime every PostgreSQL call runs on a scoped thread of its own ([`off_runtime`], in
//! `pg_conn.rs`, with the connection).

use std::cell::RefCell;
use std::sync::MutexGuard;

pub use super::db_error::DbError;
use super::pg_conn::batch;
pub use super::pg_conn::{PgConn, off_runtime};

use postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// A value of a column or a parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// An integer.
    Int(i64),
    /// A real number.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// Something that can be a statement's parameter.
pub trait ToValue {
    /// As a value.
    fn to_value(&self) -> Value;
}

impl ToValue for i64 {
    fn to_value(&self) -> Value {
        Value::Int(*self)
    }
}
impl ToValue for u32 {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}
impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}
impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}
impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}
impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

/// Parameters, as `params!` gives them to rusqlite.
#[macro_export]
#[doc(hidden)]
macro_rules! store_args {
    ($($p:expr),* $(,)?) => {
        &[$(&$p as &dyn $crate::db::ToValue),*] as &[&dyn $crate::db::ToValue]
    };
}
pub(crate) use store_args as args;

/// Something a column can be read as.
pub trait FromValue: Sized {
    /// From a value, or why not.
    fn from_value(value: &Value) -> Result<Self, String>;
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Int(i) => Ok(*i),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}
impl FromValue for u32 {
    fn from_value(value: &Value) -> Result<Self, String> {
        let i = i64::from_value(value)?;
        u32::try_from(i).map_err(|_| format!("{i} is out of range"))
    }
}
impl FromValue for bool {
    fn from_value(value: &Value) -> Result<Self, String> {
        Ok(i64::from_value(value)? != 0)
    }
}
impl FromValue for f64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Real(f) => Ok(*f),
            Value::Int(i) => Ok(*i as f64),
            other => Err(format!("expected a real number, found {other:?}")),
        }
    }
}
impl FromValue for String {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Text(t) => Ok(t.clone()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Blob(b) => Ok(b.clone()),
            other => Err(format!("expected bytes, found {other:?}")),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// A result row.
#[derive(Debug, Clone)]
pub struct Row(Vec<Value>);

impl Row {
    /// Column `i`, as `T`.
    pub fn get<T: FromValue>(&self, i: usize) -> Result<T, DbError> {
        let value = self.0.get(i).ok_or(DbError::Type {
            column: i,
            detail: "no such column".into(),
        })?;
        T::from_value(value).map_err(|detail| DbError::Type { column: i, detail })
    }

    /// How many columns it has.
    pub fn width(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
impl From<Vec<Value>> for Row {
    fn from(values: Vec<Value>) -> Self {
        Self(values)
    }
}

/// The store's connection.
#[derive(Debug)]
pub enum Conn {
    /// An SQLite file.
    Sqlite(rusqlite::Connection),
    /// A PostgreSQL database.
    Postgres(Box<PgConn>),
}

/// Which SQL the connection speaks, where the two differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// A transaction, on either back end. Dropped without [`Tx::commit`], it rolls back.
pub struct Tx<'a> {
    /// `None` once committed.
    inner: Option<TxInner<'a>>,
}

enum TxInner<'a> {
    Sqlite(rusqlite::Transaction<'a>),
    Postgres {
        client: RefCell<MutexGuard<'a, Option<postgres::Client>>>,
    },
}

impl Conn {
    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self {
            Self::Sqlite(_) => Dialect::Sqlite,
            Self::Postgres(_) => Dialect::Postgres,
        }
    }

    /// A write transaction. SQLite: IMMEDIATE (the write lock up front: a deferred one that
    /// reads first can fail at once when another writer committed in between). PostgreSQL:
    /// READ COMMITTED, its checks then inserts guarded by the tables' keys.
    pub fn write_tx(&self) -> Result<Tx<'_>, DbError> {
        match self {
            Self::Sqlite(conn) => Ok(Tx {
                inner: Some(TxInner::Sqlite(rusqlite::Transaction::new_unchecked(
                    conn,
                    rusqlite::TransactionBehavior::Immediate,
                )?)),
            }),
            Self::Postgres(pg) => Self::pg_tx(pg, "BEGIN"),
        }
    }

    /// A read transaction: everything one call reads comes from one snapshot.
    pub fn read_tx(&self) -> Result<Tx<'_>, DbError> {
        match self {
            Self::Sqlite(conn) => Ok(Tx {
                inner: Some(TxInner::Sqlite(conn.unchecked_transaction()?)),
            }),
            Self::Postgres(pg) => {
                Self::pg_tx(pg, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            }
        }
    }

    fn pg_tx<'a>(pg: &'a PgConn, begin: &str) -> Result<Tx<'a>, DbError> {
        let mut guard = pg.lock();
        pg.begin(&mut guard, begin)?;
        Ok(Tx {
            inner: Some(TxInner::Postgres {
                client: RefCell::new(guard),
            }),
        })
    }
}

/// `?N` placeholders as PostgreSQL's `$N` (none of the store's statements has a '?' elsewhere
/// but in string literals, which are left alone).
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut in_literal = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_literal = !in_literal;
                out.push(c);
            }
            '?' if !in_literal && chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            _ => out.push(c),
        }
    }
    out
}

/// A parameter as PostgreSQL takes it: integers as the column's width, a NaN as NULL (as
/// SQLite stores it).
#[derive(Debug)]
struct PgParam(Value);

impl ToSql for PgParam {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                _ => i.to_sql(ty, out),
            },
            Value::Real(f) if f.is_nan() => Ok(IsNull::Yes),
            Value::Real(f) => f.to_sql(ty, out),
            Value::Text(t) => t.as_str().to_sql(ty, out),
            Value::Blob(b) => b.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn pg_row(row: &postgres::Row) -> Result<Row, DbError> {
    let mut values = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let value = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(i)?.map(Value::Int)
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(i)?
                .map(|v| Value::Int(v.into()))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(i)?
                .map(|v| Value::Int(v.into()))
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(i)?
                .map(|v| Value::Int(v.into()))
        } else if *ty == Type::FLOAT8 {
            row.try_get::<_, Option<f64>>(i)?.map(Value::Real)
        } else if *ty == Type::FLOAT4 {
            row.try_get::<_, Option<f32>>(i)?
                .map(|v| Value::Real(v.into()))
        } else if *ty == Type::BYTEA {
            row.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Blob)
        } else if *ty == Type::VOID {
            None
        } else {
            row.try_get::<_, Option<String>>(i)?.map(Value::Text)
        };
        values.push(value.unwrap_or(Value::Null));
    }
    Ok(Row(values))
}

fn sqlite_row(row: &rusqlite::Row<'_>, columns: usize) -> rusqlite::Result<Row> {
    use rusqlite::types::ValueRef;
    let mut values = Vec::with_capacity(columns);
    for i in 0..columns {
        values.push(match row.get_ref(i)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(v) => Value::Int(v),
            ValueRef::Real(v) => Value::Real(v),
            ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        });
    }
    Ok(Row(values))
}

fn sqlite_params(params: &[&dyn ToValue]) -> Vec<rusqlite::types::Value> {
    params
        .iter()
        .map(|p| match p.to_value() {
            Value::Null => rusqlite::types::Value::Null,
            Value::Int(i) => rusqlite::types::Value::Integer(i),
            Value::Real(f) => rusqlite::types::Value::Real(f),
            Value::Text(t) => rusqlite::types::Value::Text(t),
            Value::Blob(b) => rusqlite::types::Value::Blob(b),
        })
        .collect()
}

impl<'a> Tx<'a> {
    fn inner(&self) -> &TxInner<'a> {
        self.inner
            .as_ref()
            .expect("a transaction is used only until it commits")
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self.inner() {
            TxInner::Sqlite(_) => Dialect::Sqlite,
            TxInner::Postgres { .. } => Dialect::Postgres,
        }
    }

    /// Runs a statement; returns the rows it changed.
    pub fn execute(&self, sql: &str, params: &[&dyn ToValue]) -> Result<u64, DbError> {
        match self.inner() {
            TxInner::Sqlite(tx) => {
                let values = sqlite_params(params);
                let n = tx
                    .prepare_cached(sql)?
                    .execute(rusqlite::params_from_iter(values))?;
                Ok(n as u64)
            }
            TxInner::Postgres { client, .. } => {
                let sql = dollar_placeholders(sql);
                let values: Vec<PgParam> = params.iter().map(|p| PgParam(p.to_value())).collect();
                let refs: Vec<&(dyn ToSql + Sync)> =
                    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
                let mut guard = client.borrow_mut();
                let client = guard
                    .as_mut()
                    .expect("the client lives as long as its PgConn");
                Ok(off_runtime(|| client.execute(sql.as_str(), &refs))?)
            }
        }
    }

    /// Runs a query; returns its rows.
    pub fn query(&self, sql: &str, params: &[&dyn ToValue]) -> Result<Vec<Row>, DbError> {
        match self.inner() {
            TxInner::Sqlite(tx) => {
                let values = sqlite_params(params);
                let mut stmt = tx.prepare_cached(sql)?;
                let columns = stmt.column_count();
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(values), |r| {
                        sqlite_row(r, columns)
                    })?
                    .collect::<rusqlite::Result<Vec<Row>>>()?;
                Ok(rows)
            }
            TxInner::Postgres { client, .. } => {
                let sql = dollar_placeholders(sql);
                let values: Vec<PgParam> = params.iter().map(|p| PgParam(p.to_value())).collect();
                let refs: Vec<&(dyn ToSql + Sync)> =
                    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
                let mut guard = client.borrow_mut();
                let client = guard
                    .as_mut()
                    .expect("the client lives as long as its PgConn");
                let rows = off_runtime(|| client.query(sql.as_str(), &refs))?;
                rows.iter().map(pg_row).collect()
            }
        }
    }

    /// The query's first row, if any.
    pub fn query_opt(&self, sql: &str, params: &[&dyn ToValue]) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// Commits.
    pub fn commit(mut self) -> Result<(), DbError> {
        match self.inner.take() {
            Some(TxInner::Sqlite(tx)) => Ok(tx.commit()?),
            Some(TxInner::Postgres { client }) => batch(&mut client.borrow_mut(), "COMMIT"),
            None => Ok(()),
        }
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if let Some(TxInner::Postgres { client }) = &self.inner {
            // Rolled back: nothing it wrote stays. An error here leaves the connection as
            // broken as the one that made us roll back; the next call reports it.
            let _ = batch(&mut client.borrow_mut(), "ROLLBACK");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_literals() {
        assert_eq!(
            dollar_placeholders("SELECT '?1', x FROM t WHERE a = ?1 AND b IN (?2, ?10)"),
            "SELECT '?1', x FROM t WHERE a = $1 AND b IN ($2, $10)"
        );
    }

    #[test]
    fn values_convert_both_ways() {
        let row = Row(vec![
            Value::Int(3),
            Value::Null,
            Value::Text("x".into()),
            Value::Real(1.5),
        ]);
        assert_eq!(row.get::<i64>(0).unwrap(), 3);
        assert!(row.get::<bool>(0).unwrap());
        assert_eq!(row.get::<Option<String>>(1).unwrap(), None);
        assert_eq!(row.get::<String>(2).unwrap(), "x");
        assert_eq!(row.get::<f64>(3).unwrap(), 1.5);
        assert!(row.get::<i64>(2).is_err());
        assert!(row.get::<i64>(9).is_err());
        assert_eq!(Some(7u32).to_value(), Value::Int(7));
        assert_eq!(None::<i64>.to_value(), Value::Null);
    }
}

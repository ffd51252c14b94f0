//! What every part of the store shares with SQLite: connections, the errors it answers
//! and what they mean to a caller, rows as items, and range queries as SQL.

use std::path::Path;
use std::sync::Mutex;

use bytes::Bytes;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, Row};
use sluice_core::ports::state::{Item, Key, Page, Query};
use sluice_core::StorageError;

use super::BUSY_TIMEOUT;

pub(super) fn db(e: rusqlite::Error) -> StorageError {
    match classify(&e) {
        StorageError::Throttled { message, .. } => StorageError::Throttled { message, source: Some(Box::new(e)) },
        _ => StorageError::unavailable("sqlite", e),
    }
}

/// What an SQLite error means to a caller, without its source: another writer's lock is
/// throttling (safe to retry), anything else leaves the outcome unknown.
pub(super) fn classify(e: &rusqlite::Error) -> StorageError {
    let busy = matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked));
    if busy {
        StorageError::Throttled { message: "state store is locked by another writer".into(), source: None }
    } else {
        StorageError::Unavailable { message: format!("sqlite: {e}"), source: None }
    }
}

/// The page size of a database this store creates. At SQLite's default of 4 KiB a row over
/// about 1,000 bytes (an inline segment of one 1 KiB event is 1.2 KB) continues on an overflow
/// page, and the items table, `WITHOUT ROWID`, keeps whole rows in its interior pages too: a
/// key search then reads a separator's overflow page for each comparison with it, again in
/// every read transaction after a write (WAL mode empties a reader's page cache then). At 8 KiB
/// such rows fit their page. A database created before keeps its page size (a `VACUUM`
/// would change it); this one is set before anything creates the file's first page.
pub(super) const PAGE_SIZE: u32 = 8192;

pub(super) fn connect(path: &Path, flags: OpenFlags) -> Result<Connection, StorageError> {
    let conn = Connection::open_with_flags(path, flags).map_err(db)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(db)?;
    // A no-op on a database that has pages already (and on a reader's connection).
    conn.pragma_update(None, "page_size", PAGE_SIZE).map_err(db)?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(db)?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(db)?;
    Ok(conn)
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn item_from_row(row: &Row<'_>) -> rusqlite::Result<Item> {
    Ok(Item {
        key: Key { pk: row.get(0)?, sk: row.get(1)? },
        value: Bytes::from(row.get::<_, Vec<u8>>(2)?),
        version: row.get::<_, i64>(3)? as u64,
        expires_at_ms: row.get(4)?,
    })
}

/// The item at `key` on `conn`, unless absent or expired at `now_ms`.
pub(super) fn get_on(conn: &Connection, key: &Key, now_ms: i64) -> Result<Option<Item>, StorageError> {
    conn.prepare_cached(
        "SELECT pk, sk, value, version, expires_ms FROM items
         WHERE pk = ?1 AND sk = ?2 AND (expires_ms IS NULL OR expires_ms > ?3)",
    )
    .and_then(|mut s| s.query_row(params![key.pk, key.sk, now_ms], item_from_row).optional())
    .map_err(db)
}

/// One page of `query` on `conn`, as unexpired at `now_ms`.
pub(super) fn query_on(conn: &Connection, query: &Query, now_ms: i64) -> Result<Page, StorageError> {
    let limit = query.limit.max(1);
    let (sql, values) = query_sql(query, now_ms);
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(values), item_from_row).map_err(db)?;
    let mut items = rows.collect::<Result<Vec<_>, _>>().map_err(db)?;
    let next = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|i| i.key.sk.clone())
    } else {
        None
    };
    Ok(Page { items, next })
}

/// The `WHERE` clause and its parameters for `query` at `now_ms`, and its order.
pub(super) fn query_sql(query: &Query, now_ms: i64) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value;
    let mut sql = String::from(
        "SELECT pk, sk, value, version, expires_ms FROM items
         WHERE pk = ?1 AND (expires_ms IS NULL OR expires_ms > ?2)",
    );
    let mut values = vec![Value::Text(query.pk.clone()), Value::Integer(now_ms)];
    let mut bound = |sql: &mut String, op: &str, sk: &str| {
        values.push(Value::Text(sk.to_owned()));
        sql.push_str(&format!(" AND sk {op} ?{}", values.len()));
    };
    if let Some(from) = &query.from {
        bound(&mut sql, ">=", from);
    }
    if let Some(to) = &query.to {
        bound(&mut sql, "<=", to);
    }
    if let Some(after) = &query.after {
        bound(&mut sql, if query.forward { ">" } else { "<" }, after);
    }
    // One row more than asked for, to know whether the range holds more.
    let limit = i64::try_from(query.limit.max(1)).map_or(i64::MAX, |l| l.saturating_add(1));
    values.push(Value::Integer(limit));
    sql.push_str(&format!(" ORDER BY sk {} LIMIT ?{}", if query.forward { "ASC" } else { "DESC" }, values.len()));
    (sql, values)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use sluice_core::ports::state::{Key, StateStore, WriteOp};
    use sluice_core::SystemClock;

    use super::super::SqliteStateStore;
    use super::*;

    /// Items of one inline 1 KiB event each (1.2 KB) fit the pages of a new database, several
    /// a page: none continues on an overflow page (a page of its own per item), which a key
    /// search passing it would read.
    #[tokio::test]
    async fn a_new_database_keeps_items_of_an_inline_event_in_their_pages() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state.db");
        let store = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        let items = 40;
        for i in 0..items {
            let item = WriteOp::create(Key::new("p", format!("{i:04}")), Bytes::from(vec![b'v'; 1200]));
            store.write(vec![item]).await.expect("write");
        }
        let pages: i64 = Connection::open(&path)
            .and_then(|c| c.query_row("PRAGMA page_count", [], |r| r.get(0)))
            .expect("page count");
        assert!(pages < items, "{pages} pages for {items} items: they overflow their pages");
    }
}

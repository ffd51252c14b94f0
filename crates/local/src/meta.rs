//! [`MetaStore`] on SQLite in WAL mode with `synchronous=FULL`: a commit is on
//! disk when it returns, readers never block the writer, and SQLite's write
//! lock orders commits from every process sharing the file.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, Row, TransactionBehavior};
use sluice_core::storage::{CommitBatch, IdempotencyRecord, SegmentEntry};
use sluice_core::{MetaStore, PartitionState, StorageError, TopicConfig, TopicSpec};

use crate::blocking;

const READERS: usize = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY, id INTEGER NOT NULL, partitions INTEGER NOT NULL,
    retention_ms INTEGER, retention_bytes INTEGER, created_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS partitions (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, topic_id INTEGER NOT NULL,
    log_start INTEGER NOT NULL, next_offset INTEGER NOT NULL, bytes INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS segments (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, base_offset INTEGER NOT NULL,
    next_offset INTEGER NOT NULL, object TEXT NOT NULL, position INTEGER NOT NULL,
    len INTEGER NOT NULL, max_ts INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, base_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idempotency (
    topic TEXT NOT NULL, key TEXT NOT NULL, fingerprint BLOB NOT NULL,
    results TEXT NOT NULL, created_ms INTEGER NOT NULL,
    PRIMARY KEY (topic, key)
) WITHOUT ROWID;
";

/// Topics, index and idempotency records in one SQLite file.
pub struct SqliteMetaStore {
    writer: Arc<Mutex<Connection>>,
    readers: Arc<Vec<Mutex<Connection>>>,
    next_reader: AtomicUsize,
}

fn db(e: rusqlite::Error) -> StorageError {
    let busy = matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked));
    if busy {
        return StorageError::Throttled {
            message: "index is locked by another writer".into(),
            source: Some(Box::new(e)),
        };
    }
    StorageError::unavailable("sqlite", e)
}

fn connect(path: &Path, flags: OpenFlags) -> Result<Connection, StorageError> {
    let conn = Connection::open_with_flags(path, flags).map_err(db)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(db)?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(db)?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(db)?;
    Ok(conn)
}

impl SqliteMetaStore {
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        let mut writer = connect(path, OpenFlags::default())?;
        let tx = writer.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
        tx.execute_batch(SCHEMA).map_err(db)?;
        tx.commit().map_err(db)?;
        let readers = (0..READERS)
            .map(|_| connect(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { writer: Arc::new(Mutex::new(writer)), readers: Arc::new(readers), next_reader: AtomicUsize::new(0) })
    }

    async fn read<T, F>(&self, f: F) -> Result<T, StorageError>
    where
        F: FnOnce(&Connection) -> Result<T, StorageError> + Send + 'static,
        T: Send + 'static,
    {
        let readers = self.readers.clone();
        let i = self.next_reader.fetch_add(1, Ordering::Relaxed) % READERS;
        blocking(move || f(&readers[i].lock().unwrap_or_else(|p| p.into_inner()))).await
    }

    async fn write<T, F>(&self, f: F) -> Result<T, StorageError>
    where
        F: FnOnce(&mut Connection) -> Result<T, StorageError> + Send + 'static,
        T: Send + 'static,
    {
        let writer = self.writer.clone();
        blocking(move || f(&mut writer.lock().unwrap_or_else(|p| p.into_inner()))).await
    }
}

fn topic_from_row(row: &Row<'_>) -> rusqlite::Result<TopicConfig> {
    Ok(TopicConfig {
        name: row.get(0)?,
        id: row.get::<_, i64>(1)? as u64,
        spec: TopicSpec { partitions: row.get(2)?, retention_ms: row.get(3)?, retention_bytes: row.get(4)? },
        created_ms: row.get(5)?,
    })
}

const TOPIC_COLUMNS: &str = "name, id, partitions, retention_ms, retention_bytes, created_ms";

fn partition_from_row(row: &Row<'_>) -> rusqlite::Result<PartitionState> {
    Ok(PartitionState {
        partition: row.get(0)?,
        log_start_offset: row.get::<_, i64>(1)? as u64,
        high_watermark: row.get::<_, i64>(2)? as u64,
        bytes: row.get::<_, i64>(3)? as u64,
    })
}

fn segment_from_row(topic: &str, partition: u32, row: &Row<'_>) -> rusqlite::Result<SegmentEntry> {
    Ok(SegmentEntry {
        topic: topic.to_owned(),
        topic_id: 0,
        partition,
        base_offset: row.get::<_, i64>(0)? as u64,
        next_offset: row.get::<_, i64>(1)? as u64,
        object: row.get(2)?,
        position: row.get::<_, i64>(3)? as u64,
        len: row.get::<_, i64>(4)? as u64,
        max_timestamp_ms: row.get(5)?,
    })
}

const SEGMENT_COLUMNS: &str = "base_offset, next_offset, object, position, len, max_ts";

#[async_trait]
impl MetaStore for SqliteMetaStore {
    async fn create_topic(&self, topic: &TopicConfig) -> Result<(), StorageError> {
        let t = topic.clone();
        self.write(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
            let inserted = tx.execute(
                "INSERT INTO topics (name, id, partitions, retention_ms, retention_bytes, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (name) DO NOTHING",
                params![
                    t.name,
                    t.id as i64,
                    t.spec.partitions,
                    t.spec.retention_ms,
                    t.spec.retention_bytes,
                    t.created_ms
                ],
            );
            if inserted.map_err(db)? == 0 {
                return Err(StorageError::AlreadyExists(format!("topic {}", t.name)));
            }
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO partitions (topic, partition, topic_id, log_start, next_offset, bytes)
                         VALUES (?1, ?2, ?3, 0, 0, 0)",
                    )
                    .map_err(db)?;
                for p in 0..t.spec.partitions {
                    insert.execute(params![t.name, p, t.id as i64]).map_err(db)?;
                }
            }
            tx.commit().map_err(db)
        })
        .await
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicConfig>, StorageError> {
        let name = name.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(&format!("SELECT {TOPIC_COLUMNS} FROM topics WHERE name = ?1"))
                .and_then(|mut s| s.query_row([name], topic_from_row).optional())
                .map_err(db)
        })
        .await
    }

    async fn list_topics(&self) -> Result<Vec<TopicConfig>, StorageError> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached(&format!("SELECT {TOPIC_COLUMNS} FROM topics ORDER BY name")).map_err(db)?;
            let rows = stmt.query_map([], topic_from_row).map_err(db)?;
            rows.collect::<Result<_, _>>().map_err(db)
        })
        .await
    }

    async fn delete_topic(&self, name: &str) -> Result<(), StorageError> {
        let name = name.to_owned();
        self.write(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
            if tx.execute("DELETE FROM topics WHERE name = ?1", [&name]).map_err(db)? == 0 {
                return Err(StorageError::NotFound(format!("topic {name}")));
            }
            for table in ["partitions", "segments", "idempotency"] {
                tx.execute(&format!("DELETE FROM {table} WHERE topic = ?1"), [&name]).map_err(db)?;
            }
            tx.commit().map_err(db)
        })
        .await
    }

    async fn partitions(&self, topic: &str) -> Result<Vec<PartitionState>, StorageError> {
        let topic = topic.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT partition, log_start, next_offset, bytes FROM partitions WHERE topic = ?1 ORDER BY partition",
                )
                .map_err(db)?;
            let rows: Vec<PartitionState> =
                stmt.query_map([&topic], partition_from_row).map_err(db)?.collect::<Result<_, _>>().map_err(db)?;
            if rows.is_empty() {
                return Err(StorageError::NotFound(format!("topic {topic}")));
            }
            Ok(rows)
        })
        .await
    }

    async fn partition(&self, topic: &str, partition: u32) -> Result<PartitionState, StorageError> {
        let topic = topic.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT partition, log_start, next_offset, bytes FROM partitions WHERE topic = ?1 AND partition = ?2",
            )
            .and_then(|mut s| s.query_row(params![topic, partition], partition_from_row).optional())
            .map_err(db)?
            .ok_or_else(|| StorageError::NotFound(format!("partition {topic}/{partition}")))
        })
        .await
    }

    async fn commit(&self, batch: &CommitBatch) -> Result<(), StorageError> {
        let batch = batch.clone();
        self.write(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
            for e in &batch.entries {
                let advanced = tx
                    .prepare_cached(
                        "UPDATE partitions SET next_offset = ?1, bytes = bytes + ?2
                         WHERE topic = ?3 AND partition = ?4 AND topic_id = ?5 AND next_offset = ?6",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            e.next_offset as i64,
                            e.len as i64,
                            e.topic,
                            e.partition,
                            e.topic_id as i64,
                            e.base_offset as i64
                        ])
                    })
                    .map_err(db)?;
                if advanced == 0 {
                    let topic_id: Option<i64> = tx
                        .query_row(
                            "SELECT topic_id FROM partitions WHERE topic = ?1 AND partition = ?2",
                            params![e.topic, e.partition],
                            |r| r.get(0),
                        )
                        .optional()
                        .map_err(db)?;
                    return Err(match topic_id {
                        Some(id) if id as u64 == e.topic_id => StorageError::Precondition(format!(
                            "{}/{} is no longer at offset {}",
                            e.topic, e.partition, e.base_offset
                        )),
                        _ => StorageError::NotFound(format!("partition {}/{}", e.topic, e.partition)),
                    });
                }
                tx.prepare_cached(
                    "INSERT INTO segments (topic, partition, base_offset, next_offset, object, position, len, max_ts)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        e.topic,
                        e.partition,
                        e.base_offset as i64,
                        e.next_offset as i64,
                        e.object,
                        e.position as i64,
                        e.len as i64,
                        e.max_timestamp_ms
                    ])
                })
                .map_err(db)?;
            }
            for r in &batch.idempotency {
                let results = serde_json::to_string(&r.results)
                    .map_err(|e| StorageError::unavailable("encode idempotency results", e))?;
                let inserted = tx
                    .prepare_cached(
                        "INSERT INTO idempotency (topic, key, fingerprint, results, created_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (topic, key) DO NOTHING",
                    )
                    .and_then(|mut s| s.execute(params![r.topic, r.key, r.fingerprint, results, r.created_ms]))
                    .map_err(db)?;
                if inserted == 0 {
                    return Err(StorageError::AlreadyExists(format!("idempotency key {}", r.key)));
                }
            }
            tx.commit().map_err(db)
        })
        .await
    }

    async fn segments(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        limit: usize,
    ) -> Result<Vec<SegmentEntry>, StorageError> {
        let topic = topic.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {SEGMENT_COLUMNS} FROM segments
                     WHERE topic = ?1 AND partition = ?2 AND next_offset > ?3 AND base_offset >= COALESCE(
                        (SELECT MAX(base_offset) FROM segments WHERE topic = ?1 AND partition = ?2 AND base_offset <= ?3), 0)
                     ORDER BY base_offset LIMIT ?4"
                ))
                .map_err(db)?;
            let rows = stmt
                .query_map(params![topic, partition, offset as i64, limit as i64], |r| {
                    segment_from_row(&topic, partition, r)
                })
                .map_err(db)?;
            rows.collect::<Result<_, _>>().map_err(db)
        })
        .await
    }

    async fn segment_at_time(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: i64,
    ) -> Result<Option<SegmentEntry>, StorageError> {
        let topic = topic.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {SEGMENT_COLUMNS} FROM segments WHERE topic = ?1 AND partition = ?2 AND max_ts >= ?3
                 ORDER BY base_offset LIMIT 1"
            ))
            .and_then(|mut s| {
                s.query_row(params![topic, partition, timestamp_ms], |r| segment_from_row(&topic, partition, r))
                    .optional()
            })
            .map_err(db)
        })
        .await
    }

    async fn idempotency(&self, topic: &str, key: &str) -> Result<Option<IdempotencyRecord>, StorageError> {
        let (topic, key) = (topic.to_owned(), key.to_owned());
        self.read(move |conn| {
            let row = conn
                .prepare_cached(
                    "SELECT fingerprint, results, created_ms FROM idempotency WHERE topic = ?1 AND key = ?2",
                )
                .and_then(|mut s| {
                    s.query_row(params![topic, key], |r| {
                        Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?))
                    })
                    .optional()
                })
                .map_err(db)?;
            let Some((fingerprint, results, created_ms)) = row else { return Ok(None) };
            let results = serde_json::from_str(&results).map_err(|e| StorageError::Corrupt(e.to_string()))?;
            Ok(Some(IdempotencyRecord { topic, key, fingerprint, results, created_ms }))
        })
        .await
    }
}

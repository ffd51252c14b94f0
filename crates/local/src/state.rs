//! [`StateStore`] on one SQLite file in WAL mode with `synchronous=FULL`: a
//! write is on disk when it returns, readers never block the writer, and
//! SQLite's write lock orders the writes of every process sharing the file.
//!
//! Every item is a row of one table, `items(pk, sk, value, version,
//! expires_ms)`, keyed by `(pk, sk)`; sort keys are `TEXT` under SQLite's
//! default `BINARY` collation, so they compare as UTF-8 byte strings, as
//! DynamoDB's do. A [`StateStore::write`] checks every condition, then applies
//! every operation.
//!
//! Writes are group-committed by one thread of the store's own, the writer
//! thread: the writes waiting when it becomes free run in one `BEGIN IMMEDIATE`
//! transaction, each in a savepoint of its own (rolled back alone if a condition
//! fails; a write alone in its group needs none), with one `COMMIT` and so one
//! fsync for all of them. Each is still atomic and isolated (they apply one
//! after another), and none is answered before the commit is on disk, except a
//! group made only of [`StateStore::write_deferred`]'s writes: it commits with
//! `synchronous=NORMAL` (no fsync of its own), and the next synced commit or
//! checkpoint, which syncs the whole WAL first, makes it durable. When none comes,
//! [`SqliteStateStore::sync_deferred`] fsyncs the WAL: [`crate::open`] runs it every
//! [`DEFERRED_SYNC_MS`] on the store's clock, so a deferred write waits at most that long.
//!
//! Expired rows stay until [`StateStore::purge_expired`] removes them; until
//! then every read and condition treats them as absent. A put under
//! [`Expect::Any`] over an expired row continues from its version, as
//! DynamoDB's `ADD` does before TTL removes the item.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior};
use sluice_core::ports::state::{Expect, Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{Clock, StorageError};
use tokio::sync::oneshot;

use crate::blocking;

/// Read-only connections per store, so reads run in parallel with each other and the writer.
const READERS: usize = 4;
/// How long a writer waits for another process's write lock before giving up with `Throttled`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a write answered by [`StateStore::write_deferred`] waits for an fsync when no
/// durable write comes to sync it (Postgres' `wal_writer_delay` with `synchronous_commit=off`).
pub const DEFERRED_SYNC_MS: u64 = 200;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS items (
    pk TEXT NOT NULL, sk TEXT NOT NULL, value BLOB NOT NULL,
    version INTEGER NOT NULL, expires_ms INTEGER,
    PRIMARY KEY (pk, sk)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_expiry ON items (expires_ms) WHERE expires_ms IS NOT NULL;
";

/// A write waiting for the writer connection, and where its outcome goes.
struct PendingWrite {
    ops: Vec<WriteOp>,
    now_ms: i64,
    /// Answered only once fsynced ([`StateStore::write`]), or before ([`StateStore::write_deferred`]).
    durable: bool,
    done: oneshot::Sender<Result<(), StorageError>>,
}

/// The one connection that writes, and how its next commit is made durable.
struct Writer {
    conn: Connection,
    /// `Some(true)`: commits are fsynced (`synchronous=FULL`, as opened); `Some(false)`:
    /// not (`NORMAL`, for a group of deferred writes only); `None`: unknown after a
    /// failed change, so set again before the next commit.
    synced: Option<bool>,
    /// A group of deferred writes was committed since the WAL was last synced (by a synced
    /// commit, or by [`SqliteStateStore::sync_deferred`]). Set and cleared after each commit,
    /// under this writer's lock; read by [`SqliteStateStore::sync_deferred`] without it.
    unsynced: Arc<AtomicBool>,
}

impl Writer {
    /// Makes the connection's next commits fsynced or not, unless they already are.
    fn sync_commits(&mut self, synced: bool) -> rusqlite::Result<()> {
        if self.synced != Some(synced) {
            self.synced = None;
            let sql = if synced { "PRAGMA synchronous = FULL" } else { "PRAGMA synchronous = NORMAL" };
            self.conn.prepare_cached(sql)?.execute([])?;
            self.synced = Some(synced);
        }
        Ok(())
    }
}

/// Writes waiting for the writer thread, which sleeps on `wake` while there are none.
#[derive(Default)]
struct Queue {
    state: Mutex<Waiting>,
    wake: Condvar,
}

#[derive(Default)]
struct Waiting {
    writes: Vec<PendingWrite>,
    /// The writer thread waits on the condition variable (so the next write notifies it).
    asleep: bool,
    /// The store is dropped: the writer thread commits what is waiting and ends.
    closed: bool,
}

/// Every item of the state store, in one SQLite file.
pub struct SqliteStateStore {
    writer: Arc<Mutex<Writer>>,
    queue: Arc<Queue>,
    writer_thread: Option<std::thread::JoinHandle<()>>,
    readers: Arc<Vec<Mutex<Connection>>>,
    next_reader: AtomicUsize,
    clock: Arc<dyn Clock>,
    /// The WAL file, which [`SqliteStateStore::sync_deferred`] fsyncs.
    wal: PathBuf,
    /// The writer's [`Writer::unsynced`].
    unsynced: Arc<AtomicBool>,
}

fn db(e: rusqlite::Error) -> StorageError {
    match classify(&e) {
        StorageError::Throttled { message, .. } => StorageError::Throttled { message, source: Some(Box::new(e)) },
        _ => StorageError::unavailable("sqlite", e),
    }
}

/// What an SQLite error means to a caller, without its source: another writer's lock is
/// throttling (safe to retry), anything else leaves the outcome unknown.
fn classify(e: &rusqlite::Error) -> StorageError {
    let busy = matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked));
    if busy {
        StorageError::Throttled { message: "state store is locked by another writer".into(), source: None }
    } else {
        StorageError::Unavailable { message: format!("sqlite: {e}"), source: None }
    }
}

fn connect(path: &Path, flags: OpenFlags) -> Result<Connection, StorageError> {
    let conn = Connection::open_with_flags(path, flags).map_err(db)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(db)?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(db)?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(db)?;
    Ok(conn)
}

impl SqliteStateStore {
    /// Opens (creating if needed) the database at `path`; `clock` decides what has expired.
    /// Processes starting together on one data directory may find it locked: switching a
    /// new database to WAL takes a lock SQLite's busy handler does not wait for (it could
    /// deadlock), so the open is tried again, for as long as a busy write would wait.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<Self, StorageError> {
        let started = std::time::Instant::now();
        loop {
            match Self::open_once(path, clock.clone()) {
                Err(StorageError::Throttled { .. }) if started.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                opened => return opened,
            }
        }
    }

    fn open_once(path: &Path, clock: Arc<dyn Clock>) -> Result<Self, StorageError> {
        let mut writer = connect(path, OpenFlags::default())?;
        let tx = writer.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
        tx.execute_batch(SCHEMA).map_err(db)?;
        tx.commit().map_err(db)?;
        let readers = (0..READERS)
            .map(|_| connect(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        let unsynced = Arc::new(AtomicBool::new(false));
        let writer = Arc::new(Mutex::new(Writer { conn: writer, synced: Some(true), unsynced: unsynced.clone() }));
        let queue = Arc::new(Queue::default());
        let writer_thread = std::thread::Builder::new()
            .name("sluice-sqlite-writer".into())
            .spawn({
                let (writer, queue) = (writer.clone(), queue.clone());
                move || commit_until_closed(&writer, &queue)
            })
            .map_err(|e| StorageError::unavailable("sqlite writer thread", e))?;
        Ok(Self {
            writer,
            queue,
            writer_thread: Some(writer_thread),
            readers: Arc::new(readers),
            next_reader: AtomicUsize::new(0),
            clock,
            wal: wal_path(path),
            unsynced,
        })
    }

    /// Makes every write [`StateStore::write_deferred`] has answered so far durable, by an
    /// fsync of the WAL, unless a synced commit has done so since: answers whether it synced.
    pub async fn sync_deferred(&self) -> Result<bool, StorageError> {
        // Read first, without a hop to the blocking pool or the writer's lock: an idle store's
        // tick costs this load.
        if !self.unsynced.load(Ordering::Acquire) {
            return Ok(false);
        }
        let (unsynced, wal) = (self.unsynced.clone(), self.wal.clone());
        blocking(move || {
            // Taken before the fsync: a deferred group committed after this sets it again, and
            // one committed before wrote its frames before it set the flag, so they are in the
            // file the fsync syncs.
            if !unsynced.swap(false, Ordering::AcqRel) {
                return Ok(false);
            }
            let started = std::time::Instant::now();
            match std::fs::File::open(&wal).and_then(|f| f.sync_data()) {
                Ok(()) => {
                    metrics::histogram!(sluice_core::metrics::FSYNC, "file" => "state")
                        .record(started.elapsed().as_secs_f64());
                    Ok(true)
                }
                Err(e) => {
                    unsynced.store(true, Ordering::Release);
                    Err(StorageError::unavailable(format!("fsync {}", wal.display()), e))
                }
            }
        })
        .await
    }

    /// Queues a write for the next group commit and waits for its answer.
    async fn group_write(&self, ops: Vec<WriteOp>, durable: bool) -> Result<(), StorageError> {
        sluice_core::ports::state::validate(&ops)?;
        if ops.is_empty() {
            return Ok(());
        }
        let (done, outcome) = oneshot::channel();
        let now_ms = self.clock.now_ms();
        // One thread commits every write: a write wakes it only if it sleeps, and is
        // answered (one wake-up of this task) once its group is committed.
        let wake = {
            let mut waiting = lock(&self.queue.state);
            waiting.writes.push(PendingWrite { ops, now_ms, durable, done });
            std::mem::replace(&mut waiting.asleep, false)
        };
        if wake {
            self.queue.wake.notify_one();
        }
        outcome.await.map_err(|_| StorageError::Unavailable { message: "write abandoned".into(), source: None })?
    }

    async fn read<T, F>(&self, f: F) -> Result<T, StorageError>
    where
        F: FnOnce(&Connection) -> Result<T, StorageError> + Send + 'static,
        T: Send + 'static,
    {
        // A point read or a short range read takes microseconds: run it on the calling
        // thread when a reader connection is free, rather than pay a hop to the blocking
        // pool (two thread wake-ups) for it. Only when every reader is busy does it queue there.
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        for i in 0..READERS {
            if let Ok(conn) = self.readers[(start + i) % READERS].try_lock() {
                return f(&conn);
            }
        }
        let readers = self.readers.clone();
        let i = start % READERS;
        blocking(move || f(&readers[i].lock().unwrap_or_else(|p| p.into_inner()))).await
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, committed if `f` succeeds.
    async fn transaction<T, F>(&self, f: F) -> Result<T, StorageError>
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, StorageError> + Send + 'static,
        T: Send + 'static,
    {
        let writer = self.writer.clone();
        blocking(move || {
            let mut writer = writer.lock().unwrap_or_else(|p| p.into_inner());
            writer.sync_commits(true).map_err(db)?;
            let tx = writer.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
            let out = f(&tx)?;
            tx.commit().map_err(db)?;
            writer.unsynced.store(false, Ordering::Release); // synced, with every deferred write before it
            Ok(out)
        })
        .await
    }
}

fn item_from_row(row: &Row<'_>) -> rusqlite::Result<Item> {
    Ok(Item {
        key: Key { pk: row.get(0)?, sk: row.get(1)? },
        value: Bytes::from(row.get::<_, Vec<u8>>(2)?),
        version: row.get::<_, i64>(3)? as u64,
        expires_at_ms: row.get(4)?,
    })
}

/// Whether `expect` holds for an item at `current` (its live version, `None` if absent or expired).
fn holds(expect: Expect, current: Option<u64>) -> bool {
    match expect {
        Expect::Any => true,
        Expect::Absent => current.is_none(),
        Expect::Version(n) => current == Some(n),
    }
}

/// Applies `ops` in order inside `tx`, each with its condition folded into its
/// statement (one statement per op: the commit path's cost). The first op whose
/// condition fails ends it with [`StorageError::ConditionFailed`]; the caller then
/// drops `tx`, which rolls back the ops already applied.
fn apply(tx: &Connection, ops: &[WriteOp], now_ms: i64) -> Result<(), StorageError> {
    for (i, op) in ops.iter().enumerate() {
        let held = match op {
            WriteOp::Put { key, value, expires_at_ms, expect: Expect::Absent } => {
                // Inserts, or replaces an expired row (which counts as absent).
                tx.prepare_cached(
                    "INSERT INTO items (pk, sk, value, version, expires_ms) VALUES (?1, ?2, ?3, 1, ?4)
                     ON CONFLICT (pk, sk) DO UPDATE SET
                        value = excluded.value, version = 1, expires_ms = excluded.expires_ms
                     WHERE items.expires_ms IS NOT NULL AND items.expires_ms <= ?5",
                )
                .and_then(|mut s| s.execute(params![key.pk, key.sk, value.as_ref(), expires_at_ms, now_ms]))
                .map_err(db)?
                    == 1
            }
            WriteOp::Put { key, value, expires_at_ms, expect: Expect::Version(n) } => {
                tx.prepare_cached(
                    "UPDATE items SET value = ?3, version = ?4 + 1, expires_ms = ?5
                     WHERE pk = ?1 AND sk = ?2 AND version = ?4 AND (expires_ms IS NULL OR expires_ms > ?6)",
                )
                .and_then(|mut s| s.execute(params![key.pk, key.sk, value.as_ref(), *n as i64, expires_at_ms, now_ms]))
                .map_err(db)?
                    == 1
            }
            WriteOp::Put { key, value, expires_at_ms, expect: Expect::Any } => {
                tx.prepare_cached(
                    "INSERT INTO items (pk, sk, value, version, expires_ms) VALUES (?1, ?2, ?3, 1, ?4)
                     ON CONFLICT (pk, sk) DO UPDATE SET
                        value = excluded.value, version = items.version + 1, expires_ms = excluded.expires_ms",
                )
                .and_then(|mut s| s.execute(params![key.pk, key.sk, value.as_ref(), expires_at_ms]))
                .map_err(db)?;
                true
            }
            WriteOp::Delete { key, expect: Expect::Version(n) } => {
                tx.prepare_cached(
                    "DELETE FROM items
                     WHERE pk = ?1 AND sk = ?2 AND version = ?3 AND (expires_ms IS NULL OR expires_ms > ?4)",
                )
                .and_then(|mut s| s.execute(params![key.pk, key.sk, *n as i64, now_ms]))
                .map_err(db)?
                    == 1
            }
            WriteOp::Delete { key, expect } => {
                let ok = *expect == Expect::Any || live_version(tx, key, now_ms)?.is_none();
                if ok {
                    tx.prepare_cached("DELETE FROM items WHERE pk = ?1 AND sk = ?2")
                        .and_then(|mut s| s.execute([&key.pk, &key.sk]))
                        .map_err(db)?;
                }
                ok
            }
            WriteOp::Check { key, expect } => holds(*expect, live_version(tx, key, now_ms)?),
        };
        if !held {
            return Err(StorageError::ConditionFailed { op: i });
        }
    }
    Ok(())
}

impl Drop for SqliteStateStore {
    fn drop(&mut self) {
        lock(&self.queue.state).closed = true;
        self.queue.wake.notify_one();
        if let Some(thread) = self.writer_thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer thread: commits the writes waiting, as one group, whenever there are
/// some, until the store is dropped. A write queued while a group commits waits for the
/// next group, so under load each commit (and its fsync) carries every write that
/// arrived during the one before.
fn commit_until_closed(writer: &Mutex<Writer>, queue: &Queue) {
    loop {
        let batch = {
            let mut waiting = lock(&queue.state);
            while waiting.writes.is_empty() && !waiting.closed {
                waiting.asleep = true;
                waiting = queue.wake.wait(waiting).unwrap_or_else(|p| p.into_inner());
            }
            waiting.asleep = false;
            if waiting.writes.is_empty() {
                return;
            }
            std::mem::take(&mut waiting.writes)
        };
        // A panic drops the group's answers (each write: "abandoned", outcome unknown);
        // the thread goes on with the next group.
        let committed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit_group(&mut lock(writer), batch)));
        if committed.is_err() {
            tracing::error!("the SQLite writer thread panicked; the writes of that group are answered unavailable");
        }
    }
}

/// Commits `batch` (see [`commit_writes`]), fsynced unless every write of it is deferred.
fn commit_group(writer: &mut Writer, batch: Vec<PendingWrite>) {
    // A group of deferred writes only is committed without an fsync of its own. In WAL
    // mode every synced commit (and every checkpoint) syncs the whole log first, so what
    // survives a power cut is a prefix of the commits: a deferred write is lost only with
    // every commit after it, and is durable once the next synced one returns.
    let synced = batch.iter().any(|w| w.durable);
    if let Err(e) = writer.sync_commits(synced) {
        for w in batch {
            let _ = w.done.send(Err(classify(&e)));
        }
        return;
    }
    commit_writes(&mut writer.conn, batch, synced, &writer.unsynced);
}

/// SQLite's write-ahead log beside the database at `path`: its name with `-wal` appended.
fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Syncs `store`'s deferred writes every [`DEFERRED_SYNC_MS`] of its clock, from a task of
/// the current Tokio runtime (none outside one), until the store is dropped.
pub(crate) fn spawn_deferred_sync(store: &Arc<SqliteStateStore>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (store, clock) = (Arc::downgrade(store), store.clock.clone());
    // Ticks on a schedule of the clock's, not 200 ms after the last sync ended: a sync that
    // took a while (or a task polled late) does not push the next tick later.
    let mut tick = clock.now_ms() + DEFERRED_SYNC_MS as i64;
    runtime.spawn(async move {
        loop {
            clock.sleep((tick - clock.now_ms()).max(0) as u64).await;
            let Some(store) = store.upgrade() else {
                return;
            };
            if let Err(e) = store.sync_deferred().await {
                tracing::warn!(error = %e, "deferred writes not synced; trying again");
            }
            drop(store);
            // An idle sync answers without waiting: under a clock whose sleeps end at once (a
            // fuzz target's virtual clock) this loop would otherwise never give the thread back.
            // It yields once its task's budget is spent, so a real clock's tick never does.
            tokio::task::coop::consume_budget().await;
            // After a stall (a suspended laptop) the schedule restarts from now, not one tick
            // per window missed.
            tick = (tick + DEFERRED_SYNC_MS as i64).max(clock.now_ms());
        }
    });
}

/// Applies each write of `batch` in a savepoint of one transaction, commits once, and
/// answers each: its own condition failure, or the commit's outcome. A `COMMIT` that
/// succeeds sets `unsynced` (whether the WAL now holds a commit no fsync covers) before
/// the first answer.
fn commit_writes(conn: &mut Connection, batch: Vec<PendingWrite>, synced: bool, unsynced: &AtomicBool) {
    let tx = match GroupTx::begin(conn) {
        Ok(tx) => tx,
        Err(e) => {
            for w in batch {
                let _ = w.done.send(Err(classify(&e)));
            }
            return;
        }
    };
    // A write alone needs no savepoint: if its condition fails, the whole transaction goes.
    let alone = batch.len() == 1;
    let mut outcomes = Vec::with_capacity(batch.len());
    for w in &batch {
        // Only a failed condition is rolled back alone (to its savepoint). Any other error
        // may have ended the whole transaction: then nothing of the group is committed,
        // and every write of it is answered "unavailable" (outcome unknown to the caller).
        let outcome = if alone {
            apply(tx.conn, &w.ops, w.now_ms).map(|()| None).or_else(|e| match e {
                e @ StorageError::ConditionFailed { .. } => Ok(Some(e)),
                e => Err(e),
            })
        } else {
            tx.exec("SAVEPOINT w").map_err(db).and_then(|()| match apply(tx.conn, &w.ops, w.now_ms) {
                Ok(()) => tx.exec("RELEASE w").map_err(db).map(|()| None),
                Err(e @ StorageError::ConditionFailed { .. }) => {
                    tx.exec("ROLLBACK TO w").and_then(|()| tx.exec("RELEASE w")).map_err(db).map(|()| Some(e))
                }
                Err(e) => Err(e),
            })
        };
        match outcome {
            Ok(None) => outcomes.push(Ok(())),
            Ok(Some(refused)) => outcomes.push(Err(refused)),
            Err(e) => {
                drop(tx);
                let message = e.to_string();
                for w in batch {
                    let _ = w.done.send(Err(StorageError::Unavailable { message: message.clone(), source: None }));
                }
                return;
            }
        }
    }
    if alone && outcomes[0].is_err() {
        drop(tx); // rolled back: nothing to make durable
        let refused = outcomes.pop().expect("one outcome");
        let _ = batch.into_iter().next().expect("one write").done.send(refused);
        return;
    }
    // A synced commit is the fsync of the WAL (`synchronous=FULL`).
    let started = std::time::Instant::now();
    let committed = tx.commit();
    if synced {
        metrics::histogram!(sluice_core::metrics::FSYNC, "file" => "state").record(started.elapsed().as_secs_f64());
    }
    if committed.is_ok() {
        // Before any answer, so a deferred write answered is one the next tick syncs. A
        // synced commit syncs the whole WAL, deferred groups before it included.
        unsynced.store(!synced, Ordering::Release);
    }
    for (w, outcome) in batch.into_iter().zip(outcomes) {
        let answer = match (&committed, outcome) {
            (Ok(()), outcome) => outcome,
            (Err(e), Ok(())) => Err(classify(e)),
            // Nothing of a write whose condition failed was applied either way.
            (Err(_), Err(e)) => Err(e),
        };
        let _ = w.done.send(answer);
    }
}

/// The group commit's `BEGIN IMMEDIATE` transaction, run with cached statements:
/// rusqlite's `Transaction` and `Savepoint` parse their SQL text on every use, which was
/// a tenth of a one-event publish's instructions. Rolled back when dropped uncommitted.
struct GroupTx<'a> {
    conn: &'a Connection,
}

impl<'a> GroupTx<'a> {
    fn begin(conn: &'a Connection) -> rusqlite::Result<Self> {
        let tx = Self { conn };
        tx.exec("BEGIN IMMEDIATE")?;
        Ok(tx)
    }

    fn exec(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(drop)
    }

    fn commit(self) -> rusqlite::Result<()> {
        self.exec("COMMIT")
    }
}

impl Drop for GroupTx<'_> {
    fn drop(&mut self) {
        // Uncommitted, or a COMMIT that failed and left the transaction open.
        if !self.conn.is_autocommit() {
            let _ = self.exec("ROLLBACK");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The version of the unexpired item at `key`, if any.
fn live_version(tx: &Connection, key: &Key, now_ms: i64) -> Result<Option<u64>, StorageError> {
    tx.prepare_cached("SELECT version FROM items WHERE pk = ?1 AND sk = ?2 AND (expires_ms IS NULL OR expires_ms > ?3)")
        .and_then(|mut s| s.query_row(params![key.pk, key.sk, now_ms], |r| r.get::<_, i64>(0)).optional())
        .map(|v| v.map(|v| v as u64))
        .map_err(db)
}

/// The `WHERE` clause and its parameters for `query` at `now_ms`, and its order.
fn query_sql(query: &Query, now_ms: i64) -> (String, Vec<rusqlite::types::Value>) {
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

#[async_trait]
impl StateStore for SqliteStateStore {
    #[tracing::instrument(level = "debug", skip(self))]
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        let key = key.clone();
        let now_ms = self.clock.now_ms();
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT pk, sk, value, version, expires_ms FROM items
                 WHERE pk = ?1 AND sk = ?2 AND (expires_ms IS NULL OR expires_ms > ?3)",
            )
            .and_then(|mut s| s.query_row(params![key.pk, key.sk, now_ms], item_from_row).optional())
            .map_err(db)
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        let limit = query.limit.max(1);
        let (sql, values) = query_sql(query, self.clock.now_ms());
        self.read(move |conn| {
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
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ops = ops.len()))]
    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.group_write(ops, true).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ops = ops.len()))]
    async fn write_deferred(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.group_write(ops, false).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(keys = keys.len()))]
    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.transaction(move |tx| {
            let mut delete = tx.prepare_cached("DELETE FROM items WHERE pk = ?1 AND sk = ?2").map_err(db)?;
            for key in &keys {
                delete.execute([&key.pk, &key.sk]).map_err(db)?;
            }
            Ok(())
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        let now_ms = self.clock.now_ms();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.transaction(move |tx| {
            tx.prepare_cached(
                "DELETE FROM items WHERE (pk, sk) IN (
                    SELECT pk, sk FROM items WHERE expires_ms <= ?1 LIMIT ?2)",
            )
            .and_then(|mut s| s.execute(params![now_ms, limit]))
            .map_err(db)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::SystemClock;

    fn open() -> (tempfile::TempDir, SqliteStateStore) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStateStore::open(&dir.path().join("state.db"), Arc::new(SystemClock)).expect("open");
        (dir, store)
    }

    #[test]
    fn processes_opening_a_new_database_together_all_open_it() {
        for _ in 0..30 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join("state.db");
            let opens: Vec<_> = (0..4)
                .map(|_| {
                    let path = path.clone();
                    std::thread::spawn(move || SqliteStateStore::open(&path, Arc::new(SystemClock)).map(|_| ()))
                })
                .collect();
            for open in opens {
                open.join().expect("no panic").expect("opened, not refused as locked");
            }
        }
    }

    /// The writer connection's `PRAGMA synchronous`: 2 is FULL (each commit fsynced), 1 NORMAL.
    fn synchronous(store: &SqliteStateStore) -> i64 {
        lock(&store.writer).conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).expect("pragma")
    }

    fn create(sk: &str) -> Vec<WriteOp> {
        vec![WriteOp::create(Key::new("p", sk), Bytes::from_static(b"v"))]
    }

    #[tokio::test]
    async fn a_deferred_write_commits_unsynced_and_every_other_write_synced() {
        let (_dir, store) = open();
        assert_eq!(synchronous(&store), 2, "opened with synchronous=FULL");
        store.write_deferred(create("a")).await.expect("deferred");
        assert_eq!(synchronous(&store), 1, "a group of deferred writes only commits with NORMAL");
        store.write(create("b")).await.expect("durable");
        assert_eq!(synchronous(&store), 2, "a durable write after a deferred one is synced");
        store.write_deferred(create("c")).await.expect("deferred");
        store.delete_many(vec![Key::new("p", "c")]).await.expect("delete_many");
        assert_eq!(synchronous(&store), 2, "so is a transaction of the store's own");
        assert!(store.get(&Key::new("p", "a")).await.expect("get").is_some());
    }

    fn unsynced(store: &SqliteStateStore) -> bool {
        store.unsynced.load(Ordering::Acquire)
    }

    #[tokio::test]
    async fn deferred_writes_are_synced_by_the_next_durable_write_or_by_sync_deferred() {
        let (_dir, store) = open();
        assert!(!store.sync_deferred().await.expect("sync"), "nothing deferred: no fsync");
        store.write_deferred(create("a")).await.expect("deferred");
        assert!(unsynced(&store));
        assert!(store.sync_deferred().await.expect("sync"), "the WAL fsynced");
        assert!(!store.sync_deferred().await.expect("sync"), "and only once");
        store.write_deferred(create("b")).await.expect("deferred");
        store.write(create("c")).await.expect("durable");
        assert!(!unsynced(&store), "a synced commit syncs the deferred groups before it");
        store.write_deferred(create("d")).await.expect("deferred");
        store.delete_many(vec![Key::new("p", "d")]).await.expect("delete_many");
        assert!(!unsynced(&store), "so does a transaction of the store's own");
        assert!(!store.sync_deferred().await.expect("sync"));
    }

    /// The tick runs five times a second on an idle store: with nothing deferred it neither
    /// queues on the blocking pool nor waits for the writer's lock (held here throughout).
    #[tokio::test]
    #[allow(clippy::await_holding_lock, reason = "held on purpose: the sync must not wait for it")]
    async fn an_idle_sync_takes_neither_the_writers_lock_nor_a_blocking_thread() {
        let (_dir, store) = open();
        store.write_deferred(create("a")).await.expect("deferred");
        assert!(store.sync_deferred().await.expect("sync"));
        let held = lock(&store.writer);
        let idle = tokio::time::timeout(Duration::from_secs(10), store.sync_deferred()).await;
        assert!(!idle.expect("answered while the writer's lock is held").expect("sync"));
        drop(held);
    }

    #[tokio::test]
    async fn a_deferred_write_waits_for_its_fsync_at_most_the_sync_window_of_the_store_clock() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let clock = Arc::new(sluice_core::ManualClock::new(1_000));
        let (store, _objects) = crate::open(dir.path(), clock.clone()).expect("open");
        store.write_deferred(create("a")).await.expect("deferred");
        clock.advance(DEFERRED_SYNC_MS as i64 - 1);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(unsynced(&store), "not synced before the window ends");
        clock.advance(1);
        synced_soon(&store, "the window ended and the WAL was never synced").await;
        store.write_deferred(create("b")).await.expect("deferred");
        clock.advance(DEFERRED_SYNC_MS as i64);
        synced_soon(&store, "the next window's sync never came").await;
    }

    /// On a current-thread runtime, with a clock whose sleeps never wait, the tick must still
    /// give the thread back: a write there is answered. (Watched from this thread: a tick that
    /// never yields would hang the runtime's thread, timers included.)
    #[test]
    fn the_tick_yields_the_thread_under_a_clock_that_never_waits() {
        let (answered, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let clock = Arc::new(sluice_core::SteppingClock::new(1_000));
                let (store, _objects) = crate::open(dir.path(), clock).expect("open");
                store.write(create("a")).await.expect("written");
                let _ = answered.send(());
            });
        });
        answer.recv_timeout(Duration::from_secs(30)).expect("a write answered while the tick runs");
    }

    /// Waits, the clock standing still, for the fsync the tick started on the blocking pool.
    async fn synced_soon(store: &SqliteStateStore, never: &str) {
        for waited in 0.. {
            if !unsynced(store) {
                return;
            }
            assert!(waited < 10_000, "{never}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The writer thread sleeps between groups: every write of bursts arriving while it commits
    /// or sleeps is answered, each applied once, and dropping the store ends its thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_writer_thread_answers_every_write_of_bursts_and_ends_with_the_store() {
        let (_dir, store) = open();
        let store = Arc::new(store);
        for burst in 0..20 {
            let mut writes = tokio::task::JoinSet::new();
            for i in 0..16 {
                let store = store.clone();
                writes.spawn(async move { store.write(create(&format!("{burst}-{i}"))).await });
            }
            while let Some(write) = writes.join_next().await {
                write.expect("no panic").expect("written");
            }
        }
        assert_eq!(store.query(&Query::all("p", 1000)).await.expect("query").items.len(), 320);
        // Dropping joins the writer thread: this returns only if the thread ends.
        drop(Arc::into_inner(store).expect("the only handle"));
    }

    #[test]
    fn a_group_holding_one_durable_write_is_synced() {
        let (_dir, store) = open();
        let mut writer = lock(&store.writer);
        writer.sync_commits(false).expect("as a deferred group left it");
        let (mut answers, mut batch) = (Vec::new(), Vec::new());
        for (sk, durable) in [("a", false), ("b", true), ("c", false)] {
            let (done, answer) = oneshot::channel();
            batch.push(PendingWrite { ops: create(sk), now_ms: 0, durable, done });
            answers.push(answer);
        }
        commit_group(&mut writer, batch);
        let synced: i64 = writer.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).expect("pragma");
        assert_eq!(synced, 2);
        for mut answer in answers {
            assert!(matches!(answer.try_recv(), Ok(Ok(()))));
        }
    }
}

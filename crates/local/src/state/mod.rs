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
//! [`SqliteStateStore::sync_deferred`] fsyncs the WAL: [`crate::open`] runs it every sync
//! window ([`DEFAULT_SYNC_WINDOW_MS`] unless told otherwise) on the store's clock, so a
//! deferred write waits at most that long. With a window of 0 a deferred write is a
//! durable one. Opening the store fsyncs what a process before it left unsynced, so the
//! window holds even for a process that died before its tick.
//!
//! Expired rows stay until [`StateStore::purge_expired`] removes them; until
//! then every read and condition treats them as absent. A put under
//! [`Expect::Any`] over an expired row continues from its version, as
//! DynamoDB's `ADD` does before TTL removes the item.
//!
//! The store opens, reads and answers the port here; the group commit and its writer
//! thread are in `commit.rs`, the sync of deferred writes in `sync.rs`, and what they
//! share with SQLite (connections, errors, rows, range queries) in `sqlite.rs`.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags, Transaction, TransactionBehavior};
use sluice_core::ports::state::{Expect, Found, Item, Key, Page, Query, Read, StateStore, WriteOp};
use sluice_core::{Clock, StorageError};

use crate::blobfs::{BlobFs, OsFs};
use crate::blocking;
use cache::{Cache, Outcome};
use commit::{commit_until_closed, Queue, Writer};
use sqlite::{connect, db, get_on, lock, query_on};
pub(crate) use sync::spawn_deferred_sync;
use sync::Wal;
pub use sync::DEFAULT_SYNC_WINDOW_MS;

mod cache;
mod commit;
mod sqlite;
mod sync;

/// Read-only connections per store, so reads run in parallel with each other and the writer.
const READERS: usize = 4;
/// How long a writer waits for another process's write lock before giving up with `Throttled`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS items (
    pk TEXT NOT NULL, sk TEXT NOT NULL, value BLOB NOT NULL,
    version INTEGER NOT NULL, expires_ms INTEGER,
    PRIMARY KEY (pk, sk)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_expiry ON items (expires_ms) WHERE expires_ms IS NOT NULL;
";

/// Every item of the state store, in one SQLite file.
pub struct SqliteStateStore {
    writer: Arc<Mutex<Writer>>,
    queue: Arc<Queue>,
    writer_thread: Option<std::thread::JoinHandle<()>>,
    readers: Arc<Vec<Mutex<Connection>>>,
    next_reader: AtomicUsize,
    clock: Arc<dyn Clock>,
    /// The WAL, which [`SqliteStateStore::sync_deferred`] fsyncs (the writer's too).
    wal: Arc<Wal>,
    /// How long a deferred write may wait for its fsync, in ms of `clock`; 0: none waits.
    sync_window_ms: u64,
    /// The collections read and written here, kept in memory (`cache.rs`).
    cache: Arc<Cache>,
}

impl SqliteStateStore {
    /// Opens (creating if needed) the database at `path`; `clock` decides what has expired.
    /// Processes starting together on one data directory may find it locked: switching a
    /// new database to WAL takes a lock SQLite's busy handler does not wait for (it could
    /// deadlock), so the open is tried again, for as long as a busy write would wait.
    /// Deferred writes wait for their fsync at most [`DEFAULT_SYNC_WINDOW_MS`].
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<Self, StorageError> {
        Self::open_on(path, clock, DEFAULT_SYNC_WINDOW_MS, Arc::new(OsFs))
    }

    /// [`SqliteStateStore::open`] with deferred writes waiting at most `sync_window_ms` for
    /// their fsync (0: never, they are durable writes), the store's own fsyncs through `fs`.
    pub(crate) fn open_on(
        path: &Path,
        clock: Arc<dyn Clock>,
        sync_window_ms: u64,
        fs: Arc<dyn BlobFs>,
    ) -> Result<Self, StorageError> {
        let started = std::time::Instant::now();
        loop {
            match Self::open_once(path, clock.clone(), sync_window_ms, fs.clone()) {
                Err(StorageError::Throttled { .. }) if started.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                opened => return opened,
            }
        }
    }

    fn open_once(
        path: &Path,
        clock: Arc<dyn Clock>,
        sync_window_ms: u64,
        fs: Arc<dyn BlobFs>,
    ) -> Result<Self, StorageError> {
        let mut writer = connect(path, OpenFlags::default())?;
        let tx = writer.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
        tx.execute_batch(SCHEMA).map_err(db)?;
        tx.commit().map_err(db)?;
        // Before anything is read: a process that died (or still runs) may have answered
        // deferred writes it never synced, which the WAL holds in the page cache only.
        sync::sync_on_open(fs.as_ref(), path)?;
        let readers = (0..READERS)
            .map(|_| connect(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        let wal = Arc::new(Wal::new(path, fs));
        let cache = Arc::new(Cache::open(path)?);
        let writer =
            Arc::new(Mutex::new(Writer { conn: writer, synced: Some(true), wal: wal.clone(), cache: cache.clone() }));
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
            wal,
            sync_window_ms,
            cache,
        })
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

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, committed if `f` succeeds; `through`:
    /// what it changes, for the cache (`None`: not said, so the cache is dropped).
    async fn transaction<T, F>(&self, through: Option<Vec<WriteOp>>, f: F) -> Result<T, StorageError>
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, StorageError> + Send + 'static,
        T: Send + 'static,
    {
        let writer = self.writer.clone();
        blocking(move || {
            let mut writer = writer.lock().unwrap_or_else(|p| p.into_inner());
            writer.sync_commits(true).map_err(db)?;
            let cache = writer.cache.clone();
            let changes = writer.conn.total_changes();
            let tx = writer.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
            let out = f(&tx)?;
            let guard = cache.committing();
            let committed = tx.commit();
            let changed = writer.conn.total_changes() != changes;
            guard.committed(match (&committed, &through) {
                (Ok(()), Some(ops)) => {
                    Outcome::Applied { applied: vec![ops.as_slice()], refused: Vec::new(), wrote: changed }
                }
                _ => Outcome::Doubt,
            });
            committed.map_err(db)?;
            writer.wal.committed(true, changed)?;
            Ok(out)
        })
        .await
    }
}

impl SqliteStateStore {
    /// Answers `reads` (as [`StateStore::read_many`]) from the cache where it holds their
    /// collections, the rest from SQLite in one read transaction, loading each collection
    /// they name whole into the cache on the way (unless known too big, or while the cache
    /// skips loads after another process's commits).
    async fn read_through(&self, reads: Vec<Read>) -> Result<Vec<Found>, StorageError> {
        let now_ms = self.clock.now_ms();
        let served = self.cache.look(|held, seq| {
            let mut load = Vec::new();
            let found: Vec<Option<Found>> = reads
                .iter()
                .map(|read| match held.part(read_pk(read)) {
                    Ok(part) => Some(answer(part, read, now_ms)),
                    Err(load_it) => {
                        if load_it && !load.iter().any(|pk| pk == read_pk(read)) {
                            load.push(read_pk(read).to_owned());
                        }
                        None
                    }
                })
                .collect();
            (found, load, seq)
        });
        let (mut found, load, seq) = match served {
            Some(served) => (served.0, served.1, Some(served.2)),
            None => (vec![None; reads.len()], Vec::new(), None),
        };
        if found.iter().all(Option::is_some) {
            return Ok(found.into_iter().flatten().collect());
        }
        let (found, loaded) = self
            .read(move |conn| {
                // One statement needs no transaction of its own; more share one snapshot.
                let tx = if reads.len() > 1 { Some(conn.unchecked_transaction().map_err(db)?) } else { None };
                let on: &Connection = tx.as_deref().unwrap_or(conn);
                let mut loaded = Vec::with_capacity(load.len());
                for pk in load {
                    let part = cache::Part::load(on, &pk)?;
                    loaded.push((pk, part));
                }
                for (read, found) in reads.iter().zip(found.iter_mut()).filter(|(_, f)| f.is_none()) {
                    let part = loaded.iter().find(|(pk, _)| pk == read_pk(read)).and_then(|(_, p)| p.as_ref());
                    *found = Some(match (part, read) {
                        (Some(part), read) => answer(part, read, now_ms),
                        (None, Read::Get(key)) => Found::Item(get_on(on, key, now_ms)?),
                        (None, Read::Query(query)) => Found::Page(query_on(on, query, now_ms)?),
                    });
                }
                if let Some(tx) = tx {
                    tx.commit().map_err(db)?;
                }
                Ok((found.into_iter().flatten().collect::<Vec<_>>(), loaded))
            })
            .await?;
        if let Some(seq) = seq {
            self.cache.keep(seq, loaded);
        }
        Ok(found)
    }
}

fn read_pk(read: &Read) -> &str {
    match read {
        Read::Get(key) => &key.pk,
        Read::Query(query) => &query.pk,
    }
}

fn answer(part: &cache::Part, read: &Read, now_ms: i64) -> Found {
    match read {
        Read::Get(key) => Found::Item(part.get(&key.pk, &key.sk, now_ms)),
        Read::Query(query) => Found::Page(part.query(query, now_ms)),
    }
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

#[async_trait]
impl StateStore for SqliteStateStore {
    #[tracing::instrument(level = "debug", skip(self))]
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        let found = self.read_through(vec![Read::Get(key.clone())]).await?;
        found.into_iter().next().ok_or_else(|| StorageError::Corrupt("a read answered nothing".into()))?.into_item()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        let found = self.read_through(vec![Read::Query(query.clone())]).await?;
        found.into_iter().next().ok_or_else(|| StorageError::Corrupt("a read answered nothing".into()))?.into_page()
    }

    /// All in one read transaction: one WAL snapshot, so one read-mark lock and one check
    /// of the page cache for the lot, where each call on its own pays them; none for the
    /// reads the cache answers.
    #[tracing::instrument(level = "debug", skip_all, fields(reads = reads.len()))]
    async fn read_many(&self, reads: &[Read]) -> Result<Vec<Found>, StorageError> {
        self.read_through(reads.to_vec()).await
    }

    /// One read transaction answers a batch: a read more in it is a B-tree lookup.
    fn cheap_batched_reads(&self) -> bool {
        true
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
        let through = keys.iter().map(|key| WriteOp::Delete { key: key.clone(), expect: Expect::Any }).collect();
        self.transaction(Some(through), move |tx| {
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
        self.transaction(None, move |tx| {
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
    use super::commit::{commit_group, PendingWrite};
    use super::*;
    use bytes::Bytes;
    use sluice_core::SystemClock;
    use tokio::sync::oneshot;

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
        store.wal.unsynced.load(Ordering::Acquire)
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
        clock.advance(DEFAULT_SYNC_WINDOW_MS as i64 - 1);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(unsynced(&store), "not synced before the window ends");
        clock.advance(1);
        synced_soon(&store, "the window ended and the WAL was never synced").await;
        store.write_deferred(create("b")).await.expect("deferred");
        clock.advance(DEFAULT_SYNC_WINDOW_MS as i64);
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

    /// A write SQLite refuses (here by a trigger that ends the whole transaction, as a full
    /// disk or an I/O error may) fails alone: the rest of its group is committed.
    #[tokio::test]
    async fn given_a_write_sqlite_refuses_in_a_group_then_only_it_fails_and_the_others_commit() {
        let (_dir, store) = open();
        let mut answers = Vec::new();
        {
            let mut writer = lock(&store.writer);
            writer
                .conn
                .execute_batch(
                    "CREATE TEMP TRIGGER refuse BEFORE INSERT ON items WHEN length(NEW.value) > 1000
                     BEGIN SELECT RAISE(ROLLBACK, 'refused'); END;",
                )
                .expect("a trigger");
            let mut batch = Vec::new();
            for (sk, bytes) in [("a", 10), ("big", 2000), ("c", 10), ("taken", 10), ("taken", 10)] {
                let (done, answer) = oneshot::channel();
                let ops = vec![WriteOp::create(Key::new("p", sk), Bytes::from(vec![b'v'; bytes]))];
                batch.push(PendingWrite { ops, now_ms: 0, durable: true, done });
                answers.push((sk, answer));
            }
            commit_group(&mut writer, batch);
        }
        let outcomes: Vec<_> = answers.into_iter().map(|(sk, mut a)| (sk, a.try_recv().expect("answered"))).collect();
        assert!(matches!(outcomes[1].1, Err(StorageError::Unavailable { .. })), "{outcomes:?}");
        for i in [0, 2, 3] {
            assert!(outcomes[i].1.is_ok(), "write {i} answered for another's failure: {outcomes:?}");
        }
        assert!(matches!(outcomes[4].1, Err(StorageError::ConditionFailed { op: 0, .. })), "{outcomes:?}");
        for (sk, present) in [("a", true), ("big", false), ("c", true), ("taken", true)] {
            assert_eq!(store.get(&Key::new("p", sk)).await.expect("get").is_some(), present, "{sk}");
        }
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

    /// A group whose only rows changed were rolled back (a write refused on its second op
    /// after its first wrote; the other write changes nothing): SQLite still writes the
    /// pages to the WAL and moves the header's change counter, and the cache takes that
    /// commit for its own rather than drop what it holds.
    #[tokio::test]
    async fn given_a_group_whose_changes_were_rolled_back_then_the_cache_takes_its_commit_for_its_own() {
        let (_dir, store) = open();
        store.write(create("x")).await.expect("write");
        store.write(vec![WriteOp::create(Key::new("q", "taken"), Bytes::from_static(b"v"))]).await.expect("write");
        store.get(&Key::new("p", "x")).await.expect("get");
        assert!(store.cache.holds("p"));
        let mut answers = Vec::new();
        {
            let mut writer = lock(&store.writer);
            let refused = vec![
                WriteOp::create(Key::new("q", "new"), Bytes::from_static(b"v")),
                WriteOp::create(Key::new("q", "taken"), Bytes::from_static(b"v")),
            ];
            let nothing = vec![WriteOp::Delete { key: Key::new("r", "absent"), expect: Expect::Any }];
            let mut batch = Vec::new();
            for ops in [refused, nothing] {
                let (done, answer) = oneshot::channel();
                batch.push(PendingWrite { ops, now_ms: 0, durable: true, done });
                answers.push(answer);
            }
            commit_group(&mut writer, batch);
        }
        let outcomes: Vec<_> = answers.into_iter().map(|mut a| a.try_recv().expect("answered")).collect();
        assert!(matches!(outcomes[0], Err(StorageError::ConditionFailed { op: 1, .. })), "{outcomes:?}");
        assert!(outcomes[1].is_ok(), "{outcomes:?}");
        assert!(store.cache.holds("p"), "the cache dropped for its own commit");
    }
}

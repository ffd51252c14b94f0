//! The group commit: writes queue for the store's writer thread, which applies each
//! group in one transaction (each write in a savepoint of its own) and commits it once.

use std::sync::{Arc, Condvar, Mutex};

use rusqlite::{params, CachedStatement, Connection, OptionalExtension};
use sluice_core::ports::state::{Expect, Key, WriteOp};
use sluice_core::StorageError;
use tokio::sync::oneshot;

use super::cache::{Cache, Outcome};
use super::sqlite::{classify, db, lock};
use super::sync::Wal;
use super::SqliteStateStore;

/// A write waiting for the writer connection, and where its outcome goes.
pub(super) struct PendingWrite {
    pub(super) ops: Vec<WriteOp>,
    pub(super) now_ms: i64,
    /// Answered only once fsynced ([`StateStore::write`](super::StateStore::write)), or
    /// before ([`StateStore::write_deferred`](super::StateStore::write_deferred)).
    pub(super) durable: bool,
    pub(super) done: oneshot::Sender<Result<(), StorageError>>,
}

/// The one connection that writes, and how its next commit is made durable.
pub(super) struct Writer {
    pub(super) conn: Connection,
    /// `Some(true)`: commits are fsynced (`synchronous=FULL`, as opened); `Some(false)`:
    /// not (`NORMAL`, for a group of deferred writes only); `None`: unknown after a
    /// failed change, so set again before the next commit.
    pub(super) synced: Option<bool>,
    /// The WAL, told of each commit (see [`Wal::committed`]) before any write of it is answered.
    pub(super) wal: Arc<Wal>,
    /// Told of each commit's outcome before any write of it is answered (`cache.rs`).
    pub(super) cache: Arc<Cache>,
}

impl Writer {
    /// Makes the connection's next commits fsynced or not, unless they already are.
    pub(super) fn sync_commits(&mut self, synced: bool) -> rusqlite::Result<()> {
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
pub(super) struct Queue {
    pub(super) state: Mutex<Waiting>,
    pub(super) wake: Condvar,
}

#[derive(Default)]
pub(super) struct Waiting {
    writes: Vec<PendingWrite>,
    /// The writer thread waits on the condition variable (so the next write notifies it).
    asleep: bool,
    /// The store is dropped: the writer thread commits what is waiting and ends.
    pub(super) closed: bool,
}

impl SqliteStateStore {
    /// Queues a write for the next group commit and waits for its answer.
    pub(super) async fn group_write(&self, ops: Vec<WriteOp>, durable: bool) -> Result<(), StorageError> {
        sluice_core::ports::state::validate(&ops)?;
        if ops.is_empty() {
            return Ok(());
        }
        // With no sync window, a deferred write is a durable one.
        let durable = durable || self.sync_window_ms == 0;
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
}

/// The writer thread: commits the writes waiting, as one group, whenever there are
/// some, until the store is dropped. A write queued while a group commits waits for the
/// next group, so under load each commit (and its fsync) carries every write that
/// arrived during the one before.
pub(super) fn commit_until_closed(writer: &Mutex<Writer>, queue: &Queue) {
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
pub(super) fn commit_group(writer: &mut Writer, batch: Vec<PendingWrite>) {
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
    commit_writes(&mut writer.conn, batch, synced, &writer.wal, &writer.cache);
}

/// Applies each write of `batch` in a savepoint of one transaction, commits once, and
/// answers each: its own condition failure, or the commit's outcome. A `COMMIT` that
/// succeeds is told to `wal` before the first answer (a synced one that changed no row
/// fsyncs the WAL there, for the deferred writes before it).
///
/// A write that fails otherwise than on a condition (SQLite refused its statement: too
/// big, disk full, an I/O error) may have ended the whole transaction: it is rolled back,
/// that write answered its own error, and the rest of the group applied again without it,
/// so one write's failure is never its neighbours'. (Each pass drops the write that
/// failed, so a fault that fails every write ends after one pass per write.) A failed
/// `COMMIT` is the group's: every write of it is answered that error, its outcome unknown.
fn commit_writes(conn: &mut Connection, mut batch: Vec<PendingWrite>, synced: bool, wal: &Wal, cache: &Cache) {
    let tx = match GroupTx::begin(conn) {
        Ok(tx) => tx,
        Err(e) => {
            for w in batch {
                let _ = w.done.send(Err(classify(&e)));
            }
            return;
        }
    };
    // Rows changed by any write, kept or rolled back to its savepoint (whose pages SQLite
    // still writes to the WAL): whether the commit moves the WAL-index header, for the cache.
    let began = tx.conn.total_changes();
    // A write alone needs no savepoint: if its condition fails, the whole transaction goes.
    let alone = batch.len() == 1;
    let mut outcomes = Vec::with_capacity(batch.len());
    // Whether a write kept changes a row: only then does the commit write to the WAL.
    let mut changed = false;
    for (i, w) in batch.iter().enumerate() {
        let before = tx.conn.total_changes();
        // Only a failed condition is rolled back alone (to its savepoint).
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
            Ok(None) => {
                changed |= tx.conn.total_changes() != before;
                outcomes.push(Ok(()));
            }
            Ok(Some(refused)) => outcomes.push(Err(refused)),
            Err(e) => {
                drop(tx);
                let _ = batch.remove(i).done.send(Err(e));
                if !batch.is_empty() {
                    commit_writes(conn, batch, synced, wal, cache);
                }
                return;
            }
        }
    }
    if alone && outcomes[0].is_err() {
        drop(tx); // rolled back: nothing to make durable
        cache.refused(&batch[0].ops);
        let refused = outcomes.pop().expect("one outcome");
        let _ = batch.into_iter().next().expect("one write").done.send(refused);
        return;
    }
    let wrote = tx.conn.total_changes() != began;
    let committed = commit_through(tx, &batch, &outcomes, (synced, wrote), cache);
    // Before any answer, so a deferred write answered is one the next tick syncs.
    let committed = committed.and_then(|()| wal.committed(synced, changed));
    for (w, outcome) in batch.into_iter().zip(outcomes) {
        let answer = match (&committed, outcome) {
            (Ok(()), outcome) => outcome,
            (Err(e), Ok(())) => Err(e.same_kind()),
            // Nothing of a write whose condition failed was applied either way.
            (Err(_), Err(e)) => Err(e),
        };
        let _ = w.done.send(answer);
    }
}

/// Commits `tx` and tells `cache` its outcome: each write of `batch` applied or refused as
/// `outcomes` say (`wrote`: its writes changed rows, kept or not), or doubt if the commit failed.
/// The cache is told the commit is landing while SQLite's write lock is held (no other
/// process commits), so it notes the header the commit starts from.
fn commit_through(
    tx: GroupTx<'_>,
    batch: &[PendingWrite],
    outcomes: &[Result<(), StorageError>],
    (synced, wrote): (bool, bool),
    cache: &Cache,
) -> Result<(), StorageError> {
    let guard = cache.committing();
    // A synced commit is the fsync of the WAL (`synchronous=FULL`).
    let started = std::time::Instant::now();
    let committed = tx.commit().map_err(|e| classify(&e));
    if synced {
        metrics::histogram!(sluice_core::metrics::FSYNC, "file" => "state").record(started.elapsed().as_secs_f64());
    }
    guard.committed(match committed {
        Ok(()) => {
            let (applied, refused): (Vec<_>, Vec<_>) = batch.iter().zip(outcomes).partition(|(_, o)| o.is_ok());
            Outcome::Applied {
                applied: applied.into_iter().map(|(w, _)| w.ops.as_slice()).collect(),
                refused: refused.into_iter().map(|(w, _)| w.ops.as_slice()).collect(),
                wrote,
            }
        }
        Err(_) => Outcome::Doubt,
    });
    committed
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
/// condition fails ends it with [`StorageError::ConditionFailed`], naming it and every
/// later op whose condition fails too (each on a key of its own, so what was applied
/// before does not bear on them); the caller then drops `tx`, which rolls back the ops
/// already applied.
fn apply(tx: &Connection, ops: &[WriteOp], now_ms: i64) -> Result<(), StorageError> {
    let mut statements = Statements { conn: tx, held: Default::default() };
    for (i, op) in ops.iter().enumerate() {
        let held = match op {
            WriteOp::Put { key, value, expires_at_ms, expect: Expect::Absent } => {
                // Inserts, or replaces an expired row (which counts as absent).
                statements
                    .get(Statement::Create)?
                    .execute(params![key.pk, key.sk, value.as_ref(), expires_at_ms, now_ms])
                    .map_err(db)?
                    == 1
            }
            WriteOp::Put { key, value, expires_at_ms, expect: Expect::Version(n) } => {
                statements
                    .get(Statement::Replace)?
                    .execute(params![key.pk, key.sk, value.as_ref(), *n as i64, expires_at_ms, now_ms])
                    .map_err(db)?
                    == 1
            }
            WriteOp::Put { key, value, expires_at_ms, expect: Expect::Any } => {
                statements
                    .get(Statement::Upsert)?
                    .execute(params![key.pk, key.sk, value.as_ref(), expires_at_ms])
                    .map_err(db)?;
                true
            }
            WriteOp::Delete { key, expect: Expect::Version(n) } => {
                statements
                    .get(Statement::DeleteVersion)?
                    .execute(params![key.pk, key.sk, *n as i64, now_ms])
                    .map_err(db)?
                    == 1
            }
            WriteOp::Delete { key, expect } => {
                let ok = *expect == Expect::Any || live_version(tx, key, now_ms)?.is_none();
                if ok {
                    statements.get(Statement::Delete)?.execute([&key.pk, &key.sk]).map_err(db)?;
                }
                ok
            }
            WriteOp::Check { key, expect } => holds(*expect, live_version(tx, key, now_ms)?),
        };
        if !held {
            let mut failed = vec![i];
            for (j, op) in ops.iter().enumerate().skip(i + 1) {
                if !holds(op.expect(), live_version(tx, op.key(), now_ms)?) {
                    failed.push(j);
                }
            }
            return Err(StorageError::condition_failed(failed));
        }
    }
    Ok(())
}

/// The statements [`apply`] runs, one per kind of op.
#[derive(Clone, Copy)]
enum Statement {
    Create,
    Replace,
    Upsert,
    DeleteVersion,
    Delete,
}

impl Statement {
    fn sql(self) -> &'static str {
        match self {
            Self::Create => {
                "INSERT INTO items (pk, sk, value, version, expires_ms) VALUES (?1, ?2, ?3, 1, ?4)
                 ON CONFLICT (pk, sk) DO UPDATE SET
                    value = excluded.value, version = 1, expires_ms = excluded.expires_ms
                 WHERE items.expires_ms IS NOT NULL AND items.expires_ms <= ?5"
            }
            Self::Replace => {
                "UPDATE items SET value = ?3, version = ?4 + 1, expires_ms = ?5
                 WHERE pk = ?1 AND sk = ?2 AND version = ?4 AND (expires_ms IS NULL OR expires_ms > ?6)"
            }
            Self::Upsert => {
                "INSERT INTO items (pk, sk, value, version, expires_ms) VALUES (?1, ?2, ?3, 1, ?4)
                 ON CONFLICT (pk, sk) DO UPDATE SET
                    value = excluded.value, version = items.version + 1, expires_ms = excluded.expires_ms"
            }
            Self::DeleteVersion => {
                "DELETE FROM items
                 WHERE pk = ?1 AND sk = ?2 AND version = ?3 AND (expires_ms IS NULL OR expires_ms > ?4)"
            }
            Self::Delete => "DELETE FROM items WHERE pk = ?1 AND sk = ?2",
        }
    }
}

/// [`apply`]'s statements, each taken from the connection's cache at its first use in a
/// write and kept for the write's other ops of its kind: a group commit's write holds a
/// head and a segment item per partition, and each trip through rusqlite's cache hashes
/// the statement's text on the way out and again on the way back. (`execute` resets a
/// statement after its step, so one held between ops holds no lock or cursor.)
struct Statements<'c> {
    conn: &'c Connection,
    held: [Option<CachedStatement<'c>>; 5],
}

impl<'c> Statements<'c> {
    fn get(&mut self, which: Statement) -> Result<&mut CachedStatement<'c>, StorageError> {
        let slot = &mut self.held[which as usize];
        if slot.is_none() {
            *slot = Some(self.conn.prepare_cached(which.sql()).map_err(db)?);
        }
        slot.as_mut().ok_or_else(|| StorageError::Corrupt("a statement just prepared is missing".into()))
    }
}

/// The version of the unexpired item at `key`, if any.
fn live_version(tx: &Connection, key: &Key, now_ms: i64) -> Result<Option<u64>, StorageError> {
    tx.prepare_cached("SELECT version FROM items WHERE pk = ?1 AND sk = ?2 AND (expires_ms IS NULL OR expires_ms > ?3)")
        .and_then(|mut s| s.query_row(params![key.pk, key.sk, now_ms], |r| r.get::<_, i64>(0)).optional())
        .map(|v| v.map(|v| v as u64))
        .map_err(db)
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    /// SQLite reads an overflow page straight from the database file, a `pread` of the part
    /// it needs, whenever its page cache holds no dirty page (`SQLITE_DIRECT_OVERFLOW_READ`, on
    /// unless built without it). An inline segment's item (about 1.2 KB for a 1 KiB event)
    /// overflows its B-tree cell, and so do the copies of such keys in the interior pages, so
    /// a one-event publish's commit made about ten such reads before its first page changed:
    /// ten system calls on the writer's critical path, for pages its cache held.
    /// `.cargo/config.toml` builds the bundled SQLite without it (a build that sets
    /// `LIBSQLITE3_FLAGS` itself replaces that and must say so too).
    #[test]
    fn given_the_bundled_sqlite_when_a_search_compares_an_overflowing_key_then_its_page_cache_serves_the_overflow() {
        let conn = Connection::open_in_memory().expect("an in-memory database");
        let mut options = conn.prepare("PRAGMA compile_options").expect("pragma");
        let options: Vec<String> =
            options.query_map([], |r| r.get(0)).expect("options").collect::<Result<_, _>>().expect("options");
        assert!(
            !options.iter().any(|o| o == "DIRECT_OVERFLOW_READ"),
            "SQLite reads overflow pages around its page cache: {options:?}"
        );
    }
}

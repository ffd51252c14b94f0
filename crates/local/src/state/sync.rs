//! Deferred writes made durable: the fsync of the WAL that
//! [`SqliteStateStore::sync_deferred`] makes, the tick that runs it every sync window,
//! and the fsync of what an earlier process left unsynced, when the store opens.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_core::StorageError;

use super::SqliteStateStore;
use crate::blobfs::BlobFs;
use crate::blocking;

/// The sync window unless `serve --sync-window-ms` says otherwise: the longest a write
/// answered by [`StateStore::write_deferred`](super::StateStore::write_deferred) waits for an
/// fsync when no durable write comes to sync it (Postgres' `wal_writer_delay` with
/// `synchronous_commit=off`, Redis' `appendfsync everysec`).
pub const DEFAULT_SYNC_WINDOW_MS: u64 = 200;

/// The WAL, and whether a commit in it waits for an fsync: what the writer thread and the
/// tick share.
pub(super) struct Wal {
    pub(super) path: PathBuf,
    /// Through which the store fsyncs the WAL itself (SQLite's own syncs go around it).
    fs: Arc<dyn BlobFs>,
    /// A commit no fsync covers is in the WAL (a group of deferred writes). Set and
    /// cleared after each commit, under the writer's lock; swapped by the tick without it.
    pub(super) unsynced: AtomicBool,
}

impl Wal {
    pub(super) fn new(db: &Path, fs: Arc<dyn BlobFs>) -> Self {
        Self { path: wal_path(db), fs, unsynced: AtomicBool::new(false) }
    }

    /// Records a commit that succeeded, before any write of it is answered. `synced`:
    /// SQLite fsynced the WAL with it (`synchronous=FULL`), unless it wrote nothing to the
    /// WAL, which only a commit that `changed` no row does. Answers an error if the WAL
    /// could not be made durable where the commit's answer says it is.
    pub(super) fn committed(&self, synced: bool, changed: bool) -> Result<(), StorageError> {
        if !synced {
            self.unsynced.store(true, Ordering::Release);
            Ok(())
        } else if changed {
            // Its fsync synced the whole WAL, the deferred commits before it included.
            self.unsynced.store(false, Ordering::Release);
            Ok(())
        } else {
            // A durable write that changed nothing (a check, a purge with nothing to purge)
            // made SQLite sync nothing; its answer still says every write before it is durable.
            self.sync_if_unsynced().map(drop)
        }
    }

    /// Fsyncs the WAL if a commit in it waits for that; answers whether it synced.
    pub(super) fn sync_if_unsynced(&self) -> Result<bool, StorageError> {
        // Taken before the fsync: a deferred group committed after this sets it again, and
        // one committed before wrote its frames before it set the flag, so they are in the
        // file the fsync syncs.
        if !self.unsynced.swap(false, Ordering::AcqRel) {
            return Ok(false);
        }
        let started = std::time::Instant::now();
        match std::fs::File::open(&self.path).and_then(|f| self.fs.sync_data(&self.path, &f)) {
            Ok(()) => {
                metrics::histogram!(sluice_core::metrics::FSYNC, "file" => "state")
                    .record(started.elapsed().as_secs_f64());
                Ok(true)
            }
            Err(e) => {
                self.unsynced.store(true, Ordering::Release);
                Err(StorageError::unavailable(format!("fsync {}", self.path.display()), e))
            }
        }
    }
}

impl SqliteStateStore {
    /// Makes every write [`StateStore::write_deferred`](super::StateStore::write_deferred) has
    /// answered so far durable, by an fsync of the WAL, unless a synced commit has done so
    /// since: answers whether it synced.
    pub async fn sync_deferred(&self) -> Result<bool, StorageError> {
        // Read first, without a hop to the blocking pool or the writer's lock: an idle store's
        // tick costs this load.
        if !self.wal.unsynced.load(Ordering::Acquire) {
            return Ok(false);
        }
        let wal = self.wal.clone();
        blocking(move || wal.sync_if_unsynced()).await
    }
}

/// SQLite's write-ahead log beside the database at `path`: its name with `-wal` appended.
pub(super) fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Makes durable what the database at `path` holds, whoever wrote it: its WAL (deferred
/// writes another process answered and never synced, perhaps because it died first), the
/// database file, and their names in the directory. Until this returns, nothing read from
/// the store is known to survive a power cut, so the store answers nothing before it.
pub(super) fn sync_on_open(fs: &dyn BlobFs, path: &Path) -> Result<(), StorageError> {
    let sync = |file: &Path| match std::fs::File::open(file) {
        Ok(f) => fs.sync_data(file, &f),
        // No WAL: SQLite removed it when the last connection closed, after a checkpoint.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    for (file, synced) in [(wal_path(path), sync(&wal_path(path))), (path.to_owned(), sync(path))] {
        synced.map_err(|e| StorageError::unavailable(format!("fsync {}", file.display()), e))?;
    }
    fs.sync_dir(dir).map_err(|e| StorageError::unavailable(format!("fsync {}", dir.display()), e))
}

/// Syncs `store`'s deferred writes every sync window of its clock, from a task of the
/// current Tokio runtime (none outside one), until the store is dropped. A window of 0
/// needs none: every write is synced before its answer.
pub(crate) fn spawn_deferred_sync(store: &Arc<SqliteStateStore>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let window = store.sync_window_ms as i64;
    if window == 0 {
        return;
    }
    let (store, clock) = (Arc::downgrade(store), store.clock.clone());
    // Ticks on a schedule of the clock's, not a window after the last sync ended: a sync
    // that took a while (or a task polled late) does not push the next tick later.
    let mut tick = clock.now_ms() + window;
    runtime.spawn(async move {
        loop {
            clock.sleep_until(tick).await;
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
            tick = (tick + window).max(clock.now_ms());
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use bytes::Bytes;
    use sluice_core::ports::state::{Expect, Key, StateStore, WriteOp};
    use sluice_core::ManualClock;

    use super::*;
    use crate::blobfs::{OsFs, Synced};

    fn create(sk: &str) -> Vec<WriteOp> {
        vec![WriteOp::create(Key::new("p", sk), Bytes::from_static(b"v"))]
    }

    /// Opens the store at `path` with a sync window of `window` ms, on a clock that stands still.
    fn open(path: &Path, window: u64, fs: Arc<dyn BlobFs>) -> SqliteStateStore {
        SqliteStateStore::open_on(path, Arc::new(ManualClock::new(1_000)), window, fs).expect("open")
    }

    #[tokio::test]
    async fn given_a_window_of_0_when_a_write_is_deferred_then_it_is_synced_before_its_answer() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = open(&dir.path().join("state.db"), 0, Arc::new(OsFs));
        store.write_deferred(create("a")).await.expect("deferred");
        assert!(!store.wal.unsynced.load(Ordering::Acquire), "answered before the WAL was synced");
        let full: i64 = super::super::sqlite::lock(&store.writer)
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("pragma");
        assert_eq!(full, 2, "committed with synchronous=FULL, as a durable write");
    }

    /// A durable write that changes no row (a check, a purge with nothing to purge) makes
    /// SQLite write and sync nothing; its answer still says the deferred writes before it
    /// are durable, so the store fsyncs the WAL itself first.
    #[tokio::test]
    async fn given_deferred_writes_when_a_durable_write_changes_nothing_then_the_wal_is_synced_before_its_answer() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state.db");
        let fs = Arc::new(Synced::default());
        let store = open(&path, 3_600_000, fs.clone());
        let check = || vec![WriteOp::Check { key: Key::new("p", "d0"), expect: Expect::Version(1) }];
        for (i, durable) in [("a check", 0), ("a purge", 1), ("a delete of nothing", 2)].into_iter().enumerate() {
            store.write_deferred(create(&format!("d{i}"))).await.expect("deferred");
            fs.files.lock().expect("files").clear();
            match durable.1 {
                0 => store.write(check()).await.expect("a check that holds"),
                1 => assert_eq!(store.purge_expired(10).await.expect("purge"), 0),
                _ => store.delete_many(vec![Key::new("p", "none")]).await.expect("delete"),
            }
            let synced = fs.files.lock().expect("files").clone();
            assert_eq!(synced, [wal_path(&path)], "{}: answered with the deferred write unsynced", durable.0);
        }
        store.write(check()).await.expect("a check that holds");
        assert_eq!(fs.files.lock().expect("files").len(), 1, "nothing deferred: no fsync of its own");
    }

    /// A process that answered deferred writes and died before its tick (or one that still
    /// runs, its window not yet over) leaves them in the page cache: another process opening
    /// the store fsyncs them, and the names beside them, before it answers anything.
    #[tokio::test]
    async fn given_deferred_writes_never_synced_when_another_process_opens_the_store_then_it_syncs_them_first() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state.db");
        let first = open(&path, 3_600_000, Arc::new(OsFs));
        first.write_deferred(create("a")).await.expect("deferred");
        assert!(first.wal.unsynced.load(Ordering::Acquire), "the first process never synced it");
        let fs = Arc::new(Synced::default());
        let second = open(&path, 3_600_000, fs.clone());
        let files = fs.files.lock().expect("files").clone();
        assert!(files.contains(&wal_path(&path)), "the WAL not synced on open: {files:?}");
        assert!(files.contains(&path), "the database not synced on open: {files:?}");
        assert_eq!(*fs.dirs.lock().expect("dirs"), [dir.path().to_owned()], "their names");
        assert!(second.get(&Key::new("p", "a")).await.expect("get").is_some());
    }
}

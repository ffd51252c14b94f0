//! Deferred writes made durable: the fsync of the WAL that
//! [`SqliteStateStore::sync_deferred`] makes, and the tick that runs it.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_core::StorageError;

use super::SqliteStateStore;
use crate::blocking;

/// The longest a write answered by [`StateStore::write_deferred`](super::StateStore::write_deferred)
/// waits for an fsync when no durable write comes to sync it (Postgres' `wal_writer_delay`
/// with `synchronous_commit=off`).
pub const DEFERRED_SYNC_MS: u64 = 200;

impl SqliteStateStore {
    /// Makes every write [`StateStore::write_deferred`](super::StateStore::write_deferred) has
    /// answered so far durable, by an fsync of the WAL, unless a synced commit has done so
    /// since: answers whether it synced.
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
}

/// SQLite's write-ahead log beside the database at `path`: its name with `-wal` appended.
pub(super) fn wal_path(path: &Path) -> PathBuf {
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

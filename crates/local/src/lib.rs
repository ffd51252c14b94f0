//! The embedded backend: segment blobs appended to local files, state in SQLite.
//! Safe for several processes on one data directory (`serve`, or the Lambda
//! functions under `cargo lambda watch`): each process appends to files of its
//! own, and SQLite's write lock orders the state store's writes.

#![forbid(unsafe_code)]

mod blobfs;
mod objects;
mod state;

use std::path::Path;
use std::sync::Arc;

#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub use blobfs::{BlobFs, OsFs};
pub use objects::LocalObjectStore;
use sluice_core::{Clock, StorageError};
pub use state::{SqliteStateStore, DEFAULT_SYNC_WINDOW_MS};

/// Opens (creating if needed) the object files and the state store under
/// `data_dir`; `clock` decides which state items have expired. Deferred writes wait at
/// most [`DEFAULT_SYNC_WINDOW_MS`] for their fsync: see [`open_with_window`].
pub fn open(
    data_dir: &Path,
    clock: Arc<dyn Clock>,
) -> Result<(Arc<SqliteStateStore>, Arc<LocalObjectStore>), StorageError> {
    open_with_window(data_dir, clock, DEFAULT_SYNC_WINDOW_MS)
}

/// [`open`], with the sync window `serve --sync-window-ms` sets: a write answered by
/// [`StateStore::write_deferred`](sluice_core::ports::state::StateStore::write_deferred)
/// (an ack, a heartbeat, a commit) is fsynced at most `sync_window_ms` of `clock` after its
/// answer; 0 makes every write durable before its answer. Called inside a Tokio runtime,
/// it starts the store's tick that syncs them (see [`SqliteStateStore::sync_deferred`]).
/// Before answering anything, it fsyncs what a process before it left unsynced.
pub fn open_with_window(
    data_dir: &Path,
    clock: Arc<dyn Clock>,
    sync_window_ms: u64,
) -> Result<(Arc<SqliteStateStore>, Arc<LocalObjectStore>), StorageError> {
    open_on(data_dir, clock, sync_window_ms, Arc::new(blobfs::OsFs), objects::DEFAULT_ROLL_BYTES)
}

/// [`open_with_window`] with the blob files changed, and every file fsynced, through `fs`,
/// blobs rolled at `roll_bytes`: for tests that simulate a power cut, see [`BlobFs`].
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub fn open_with_fs(
    data_dir: &Path,
    clock: Arc<dyn Clock>,
    sync_window_ms: u64,
    fs: Arc<dyn BlobFs>,
    roll_bytes: u64,
) -> Result<(Arc<SqliteStateStore>, Arc<LocalObjectStore>), StorageError> {
    open_on(data_dir, clock, sync_window_ms, fs, roll_bytes)
}

fn open_on(
    data_dir: &Path,
    clock: Arc<dyn Clock>,
    sync_window_ms: u64,
    fs: Arc<dyn blobfs::BlobFs>,
    roll_bytes: u64,
) -> Result<(Arc<SqliteStateStore>, Arc<LocalObjectStore>), StorageError> {
    // Its name made durable too: SQLite syncs the directory it creates its WAL in, never
    // that directory's own entry in its parent.
    blobfs::create_dir_durably(fs.as_ref(), data_dir)
        .map_err(|e| StorageError::unavailable(format!("create {}", data_dir.display()), e))?;
    // Not the old `index.sqlite3`: a data directory of the earlier schema is not misread.
    let path = data_dir.join("state.sqlite3");
    let state = Arc::new(SqliteStateStore::open_on(&path, clock, sync_window_ms, fs.clone())?);
    let objects = LocalObjectStore::open_on(&data_dir.join("objects"), roll_bytes, fs)?;
    state::spawn_deferred_sync(&state);
    Ok((state, Arc::new(objects)))
}

/// The blob files the janitor writes what it compacts to, under `data_dir` beside the
/// publishes' (`objects/`), each holding one blob: a merged or moved segment, which lives until
/// retention or another merge takes it, never pins another's bytes, so its file goes with it.
pub fn open_upkeep_objects(data_dir: &Path) -> Result<LocalObjectStore, StorageError> {
    LocalObjectStore::open_with_roll(&data_dir.join("objects"), 0)
}

/// Runs blocking file or database work off the async threads.
async fn blocking<T, F>(f: F) -> Result<T, StorageError>
where
    F: FnOnce() -> Result<T, StorageError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StorageError::Unavailable { message: "blocking task failed".into(), source: Some(Box::new(e)) })?
}

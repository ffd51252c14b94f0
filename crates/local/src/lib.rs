//! The embedded backend: segment blobs appended to local files, state in SQLite.
//! Safe for several processes on one data directory (`serve`, or the Lambda
//! functions under `cargo lambda watch`): each process appends to files of its
//! own, and SQLite's write lock orders the state store's writes.

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
pub use state::{SqliteStateStore, DEFERRED_SYNC_MS};

/// Opens (creating if needed) the object files and the state store under
/// `data_dir`; `clock` decides which state items have expired. Called inside a Tokio
/// runtime, it also starts the store's sync of deferred writes (every
/// [`DEFERRED_SYNC_MS`] of `clock`, see [`SqliteStateStore::sync_deferred`]).
pub fn open(
    data_dir: &Path,
    clock: Arc<dyn Clock>,
) -> Result<(Arc<SqliteStateStore>, Arc<LocalObjectStore>), StorageError> {
    open_on(data_dir, clock, Arc::new(blobfs::OsFs), objects::DEFAULT_ROLL_BYTES)
}

/// [`open`] with the blob files changed through `fs` and rolled at `roll_bytes`: for
/// tests that simulate a power cut, see [`BlobFs`].
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub fn open_with_fs(
    data_dir: &Path,
    clock: Arc<dyn Clock>,
    fs: Arc<dyn BlobFs>,
    roll_bytes: u64,
) -> Result<(Arc<SqliteStateStore>, Arc<LocalObjectStore>), StorageError> {
    open_on(data_dir, clock, fs, roll_bytes)
}

fn open_on(
    data_dir: &Path,
    clock: Arc<dyn Clock>,
    fs: Arc<dyn blobfs::BlobFs>,
    roll_bytes: u64,
) -> Result<(Arc<SqliteStateStore>, Arc<LocalObjectStore>), StorageError> {
    // Its name made durable too: SQLite syncs the directory it creates its WAL in, never
    // that directory's own entry in its parent.
    blobfs::create_dir_durably(fs.as_ref(), data_dir)
        .map_err(|e| StorageError::unavailable(format!("create {}", data_dir.display()), e))?;
    // Not the old `index.sqlite3`: a data directory of the earlier schema is not misread.
    let state = Arc::new(SqliteStateStore::open(&data_dir.join("state.sqlite3"), clock)?);
    let objects = LocalObjectStore::open_on(&data_dir.join("objects"), roll_bytes, fs)?;
    state::spawn_deferred_sync(&state);
    Ok((state, Arc::new(objects)))
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

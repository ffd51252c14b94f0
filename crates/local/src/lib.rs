//! The embedded backend: segment blobs appended to local files, indexed in SQLite.
//! Safe for several processes on one data directory (`serve`, or the Lambda
//! functions under `cargo lambda watch`): each process appends to files of its
//! own, and SQLite's write lock orders the index commits.

mod meta;
mod objects;

use std::path::Path;
use std::sync::Arc;

pub use meta::SqliteMetaStore;
pub use objects::LocalObjectStore;
use sluice_core::StorageError;

/// Opens (creating if needed) the object files and index under `data_dir`.
pub fn open(data_dir: &Path) -> Result<(Arc<SqliteMetaStore>, Arc<LocalObjectStore>), StorageError> {
    std::fs::create_dir_all(data_dir)
        .map_err(|e| StorageError::unavailable(format!("create {}", data_dir.display()), e))?;
    let meta = SqliteMetaStore::open(&data_dir.join("index.sqlite3"))?;
    let objects = LocalObjectStore::open(&data_dir.join("objects"))?;
    Ok((Arc::new(meta), Arc::new(objects)))
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

//! [`ObjectStore`] on local files. Each process appends blobs to a file of its
//! own (so no two writers share a file) and rolls to a new one past a size.
//! `put` returns only after `fdatasync`; a crash mid-write leaves a torn tail
//! that no index entry points at.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::storage::BlobRef;
use sluice_core::{ObjectStore, StorageError};

use crate::blocking;

/// A file is closed for appends once it holds this many bytes.
const ROLL_BYTES: u64 = 256 << 20;
/// Open read handles kept; past this the cache is emptied (files are cheap to reopen).
const MAX_OPEN_READERS: usize = 256;
/// Reads up to this size of an already open file run on the calling thread.
const INLINE_READ_BYTES: u64 = 256 << 10;

/// Blobs in append-only files under one directory.
pub struct LocalObjectStore {
    dir: PathBuf,
    active: Arc<Mutex<Option<Active>>>,
    readers: Arc<Readers>,
}

struct Active {
    name: String,
    file: File,
    len: u64,
}

impl LocalObjectStore {
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| io("create objects dir", e))?;
        Ok(Self { dir: dir.to_owned(), active: Arc::default(), readers: Arc::default() })
    }
}

fn io(what: &str, e: std::io::Error) -> StorageError {
    StorageError::unavailable(what.to_owned(), e)
}

fn new_file(dir: &Path) -> Result<Active, StorageError> {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let name = format!("{ms:013}-{}-{:08x}.blobs", std::process::id(), rand::random::<u32>());
    let file = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(dir.join(&name))
        .map_err(|e| io("create blob file", e))?;
    // The new name must survive a crash too, or its blobs would vanish with it.
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io("sync objects dir", e))?;
    Ok(Active { name, file, len: 0 })
}

#[async_trait]
impl ObjectStore for LocalObjectStore {
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let dir = self.dir.clone();
        let active = self.active.clone();
        blocking(move || {
            let mut guard = active.lock().unwrap_or_else(|p| p.into_inner());
            if guard.as_ref().is_none_or(|a| a.len >= ROLL_BYTES) {
                *guard = Some(new_file(&dir)?);
            }
            let Some(a) = guard.as_mut() else { unreachable!("active file set above") };
            let position = a.len;
            let written = a.file.write_all_at(&bytes, position).and_then(|()| a.file.sync_data());
            if let Err(e) = written {
                // The file's tail is now unknown: never append to it again.
                *guard = None;
                return Err(io("write blob", e));
            }
            a.len += bytes.len() as u64;
            Ok(BlobRef { object: a.name.clone(), position })
        })
        .await
    }

    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
        if object.is_empty() || !object.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') {
            return Err(StorageError::NotFound(format!("object {object}")));
        }
        // A small range of an open file is (almost always) in the page cache: read it on the
        // calling thread rather than pay two thread wake-ups for a hop to the blocking pool.
        if len <= INLINE_READ_BYTES {
            if let Some(file) = lock(&self.readers).get(object).cloned() {
                return read_at(&file, object, position, len);
            }
        }
        let path = self.dir.join(object);
        let readers = self.readers.clone();
        let object = object.to_owned();
        blocking(move || read_range(&readers, &path, &object, position, len)).await
    }
}

type Readers = Mutex<HashMap<String, Arc<File>>>;

fn lock(readers: &Readers) -> std::sync::MutexGuard<'_, HashMap<String, Arc<File>>> {
    readers.lock().unwrap_or_else(|p| p.into_inner())
}

/// `len` bytes at `position` of a blob file, through the cache of open files.
fn read_range(readers: &Readers, path: &Path, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
    let cached = lock(readers).get(object).cloned();
    let file = match cached {
        Some(f) => f,
        None => {
            let f = Arc::new(File::open(path).map_err(|e| match e.kind() {
                ErrorKind::NotFound => StorageError::NotFound(format!("object {object}")),
                _ => io("open blob file", e),
            })?);
            let mut map = lock(readers);
            if map.len() >= MAX_OPEN_READERS {
                map.clear();
            }
            map.insert(object.to_owned(), f.clone());
            f
        }
    };
    read_at(&file, object, position, len)
}

/// `len` bytes at `position` of an open blob file.
fn read_at(file: &File, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
    let len = usize::try_from(len).map_err(|_| StorageError::Corrupt("blob length overflows".into()))?;
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, position).map_err(|e| match e.kind() {
        ErrorKind::UnexpectedEof => StorageError::Corrupt(format!("object {object} ends before {position}+{len}")),
        _ => io("read blob", e),
    })?;
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn given_two_puts_when_read_then_each_blob_comes_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalObjectStore::open(dir.path()).unwrap();
        let a = store.put(Bytes::from_static(b"first")).await.unwrap();
        let b = store.put(Bytes::from_static(b"second blob")).await.unwrap();
        assert_eq!(a.object, b.object);
        assert_eq!(b.position, 5);
        assert_eq!(store.read(&a.object, a.position, 5).await.unwrap(), "first");
        assert_eq!(store.read(&b.object, b.position, 11).await.unwrap(), "second blob");
    }

    #[tokio::test]
    async fn given_range_past_end_when_read_then_corrupt_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalObjectStore::open(dir.path()).unwrap();
        let a = store.put(Bytes::from_static(b"abc")).await.unwrap();
        assert!(matches!(store.read(&a.object, 1, 10).await, Err(StorageError::Corrupt(_))));
        assert!(matches!(store.read("missing.blobs", 0, 1).await, Err(StorageError::NotFound(_))));
        assert!(matches!(store.read("../etc/passwd", 0, 1).await, Err(StorageError::NotFound(_))));
    }
}

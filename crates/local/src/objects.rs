//! [`ObjectStore`] on local files. Each process appends blobs to a file of its
//! own (so no two writers share a file) and rolls to a new one past a size
//! (64 MiB unless opened with [`LocalObjectStore::open_with_roll`]),
//! small enough that the collector can delete whole files once every blob in one
//! is dead. `put` returns only after `fdatasync` (and, for the first blob of a
//! file, after the directory holding the new file's name was synced); a crash or a
//! power cut mid-write leaves a torn tail that no index entry points at. Every
//! change to the directory goes through [`BlobFs`] (`crate::blobfs`), the seam
//! that the power-loss test (`tests/power_loss/`) hooks.
//!
//! File names start with their creation time in ms (13 digits), so name order is
//! age order. `retire` and `delete` stop appends to the active file, so the next
//! `put` starts a new one; `delete` also closes the cached read handle, so the
//! disk space is freed at once.

use std::collections::HashMap;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::ports::objects::{BlobRef, ObjectInfo};
use sluice_core::{ObjectStore, StorageError};

use crate::blobfs::{create_dir_durably, BlobFs, OsFs};
use crate::blocking;

/// By default a file is closed for appends once it holds this many bytes.
pub(crate) const DEFAULT_ROLL_BYTES: u64 = 64 << 20;
/// Open read handles kept; past this the cache is emptied (files are cheap to reopen).
const MAX_OPEN_READERS: usize = 256;
/// Reads up to this size of an already open file run on the calling thread.
const INLINE_READ_BYTES: u64 = 256 << 10;
/// The ending of blob file names; `list` ignores every other file.
const SUFFIX: &str = ".blobs";

/// Blobs in append-only files under one directory.
pub struct LocalObjectStore {
    dir: PathBuf,
    /// Every change to `dir` goes through this ([`OsFs`] unless a test hooked it).
    fs: Arc<dyn BlobFs>,
    roll_bytes: u64,
    active: Arc<Mutex<Option<Active>>>,
    /// The active file's name and whether it was retired: apart from `active`, whose lock a
    /// put holds across `fdatasync`, so that `retire` (called on async threads) never waits on a disk.
    current: Arc<Mutex<Current>>,
    readers: Arc<Readers>,
}

struct Active {
    name: String,
    path: PathBuf,
    file: File,
    len: u64,
    created: std::time::Instant,
}

/// A file takes appends for at most this long, so every blob in a file is written within an
/// hour of its creation: the collector's doomed records (kept 30 days) outlive any commit into it.
const MAX_FILE_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

impl Active {
    /// Whether the next blob must go to a new file: this one is full, old, or deleted (by
    /// another handle on the directory: the janitor's collector).
    fn spent(&self, roll_bytes: u64) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.len >= roll_bytes
            || self.created.elapsed() >= MAX_FILE_AGE
            || self.file.metadata().map_or(true, |m| m.nlink() == 0)
    }
}

#[derive(Default)]
struct Current {
    name: Option<String>,
    retired: bool,
}

impl LocalObjectStore {
    /// Blob files under `dir` (created if needed), rolled at 64 MiB.
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        Self::open_with_roll(dir, DEFAULT_ROLL_BYTES)
    }

    /// Blob files under `dir` (created if needed); a file takes no more appends once it
    /// holds `roll_bytes` (a blob is never split, so a file may end up larger; 0: every blob
    /// in a file of its own).
    pub fn open_with_roll(dir: &Path, roll_bytes: u64) -> Result<Self, StorageError> {
        Self::open_on(dir, roll_bytes, Arc::new(OsFs))
    }

    /// [`LocalObjectStore::open_with_roll`] changing its directory through `fs`: for
    /// tests that simulate a power cut, see [`BlobFs`].
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn open_with_fs(dir: &Path, roll_bytes: u64, fs: Arc<dyn BlobFs>) -> Result<Self, StorageError> {
        Self::open_on(dir, roll_bytes, fs)
    }

    pub(crate) fn open_on(dir: &Path, roll_bytes: u64, fs: Arc<dyn BlobFs>) -> Result<Self, StorageError> {
        // The directory's own name must survive a power cut, or every file in it would vanish with it.
        create_dir_durably(fs.as_ref(), dir).map_err(|e| io("create objects dir", e))?;
        Ok(Self {
            dir: dir.to_owned(),
            fs,
            roll_bytes,
            active: Arc::default(),
            current: Arc::default(),
            readers: Arc::default(),
        })
    }
}

fn io(what: &str, e: std::io::Error) -> StorageError {
    StorageError::unavailable(what.to_owned(), e)
}

/// Whether `object` could name a file of this store (and nothing outside its directory).
fn valid_name(object: &str) -> bool {
    !object.is_empty() && object.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

fn new_file(fs: &dyn BlobFs, dir: &Path) -> Result<Active, StorageError> {
    let ms = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let name = format!("{ms:013}-{}-{:08x}{SUFFIX}", std::process::id(), rand::random::<u32>());
    let path = dir.join(&name);
    let file = fs.create_new(&path).map_err(|e| io("create blob file", e))?;
    // The new name must survive a power cut too, or its blobs would vanish with it.
    sync_dir(fs, dir)?;
    Ok(Active { name, path, file, len: 0, created: std::time::Instant::now() })
}

fn sync_dir(fs: &dyn BlobFs, dir: &Path) -> Result<(), StorageError> {
    fs.sync_dir(dir).map_err(|e| io("sync objects dir", e))
}

fn lock_current(current: &Mutex<Current>) -> std::sync::MutexGuard<'_, Current> {
    current.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes `next` the active file (`None`: the next put creates one).
fn set_active(active: &mut Option<Active>, current: &Mutex<Current>, next: Option<Active>) {
    *lock_current(current) = Current { name: next.as_ref().map(|a| a.name.clone()), retired: false };
    *active = next;
}

/// The blob files of `dir` named after `after`, in name order, at most `limit` of them.
fn list_dir(dir: &Path, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io("list objects dir", e))? {
        let entry = entry.map_err(|e| io("list objects dir", e))?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        if name.ends_with(SUFFIX) && valid_name(&name) && after.is_none_or(|a| name.as_str() > a) {
            names.push(name);
        }
    }
    names.sort_unstable();
    let mut objects = Vec::with_capacity(names.len().min(limit));
    for name in names {
        if objects.len() >= limit {
            break;
        }
        let meta = match std::fs::metadata(dir.join(&name)) {
            Ok(m) => m,
            // Deleted since the directory was read.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io("stat blob file", e)),
        };
        // Created when its name says (its mtime is its last append: an active file would look
        // young for ever and hold the collector's listing up behind it).
        let named = name.get(..13).and_then(|ms| ms.parse::<i64>().ok());
        let created_ms = named.unwrap_or_else(|| {
            meta.modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        });
        objects.push(ObjectInfo { name, size: meta.len(), created_ms });
    }
    Ok(objects)
}

#[async_trait]
impl ObjectStore for LocalObjectStore {
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let dir = self.dir.clone();
        let fs = self.fs.clone();
        let roll_bytes = self.roll_bytes;
        let active = self.active.clone();
        let current = self.current.clone();
        blocking(move || {
            let mut guard = active.lock().unwrap_or_else(|p| p.into_inner());
            let retired = lock_current(&current).retired;
            if retired || guard.as_ref().is_none_or(|a| a.spent(roll_bytes)) {
                let next = new_file(fs.as_ref(), &dir)?;
                set_active(&mut guard, &current, Some(next));
            }
            let Some(a) = guard.as_mut() else { unreachable!("active file set above") };
            let position = a.len;
            // Answered only once the bytes are on disk: the index entry the caller writes
            // next must never point at bytes that a power cut could take away.
            let written = fs.write_all_at(&a.path, &a.file, &bytes, position).and_then(|()| {
                let started = std::time::Instant::now();
                let synced = fs.sync_data(&a.path, &a.file);
                metrics::histogram!(sluice_core::metrics::FSYNC, "file" => "segment")
                    .record(started.elapsed().as_secs_f64());
                synced
            });
            if let Err(e) = written {
                // The file's tail is now unknown: never append to it again.
                set_active(&mut guard, &current, None);
                return Err(io("write blob", e));
            }
            a.len += bytes.len() as u64;
            Ok(BlobRef { object: a.name.clone(), position })
        })
        .await
    }

    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
        if !valid_name(object) {
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

    async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let dir = self.dir.clone();
        let after = after.map(str::to_owned);
        blocking(move || list_dir(&dir, after.as_deref(), limit)).await
    }

    async fn delete(&self, object: &str) -> Result<(), StorageError> {
        if !valid_name(object) {
            return Err(StorageError::Invalid(format!("object name {object:?}")));
        }
        let dir = self.dir.clone();
        let fs = self.fs.clone();
        let active = self.active.clone();
        let current = self.current.clone();
        let readers = self.readers.clone();
        let object = object.to_owned();
        blocking(move || {
            // First stop appends to it (a put in flight finishes before this lock is taken).
            {
                let mut guard = active.lock().unwrap_or_else(|p| p.into_inner());
                if guard.as_ref().is_some_and(|a| a.name == object) {
                    set_active(&mut guard, &current, None);
                }
            }
            match fs.remove_file(&dir.join(&object)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io("delete blob file", e)),
            }
            // After the unlink: a read that opens the file concurrently caches it only if it
            // is still linked (see `read_range`), so no handle keeps the space allocated.
            lock(&readers).remove(&object);
            sync_dir(fs.as_ref(), &dir)
        })
        .await
    }

    fn retire(&self, object: &str) {
        let mut current = lock_current(&self.current);
        if current.name.as_deref() == Some(object) {
            current.retired = true;
        }
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
            // Checked under the lock that `delete` takes after its unlink: a file deleted since
            // it was opened is read this once but not cached, or its space would stay allocated.
            if f.metadata().is_ok_and(|m| m.nlink() > 0) {
                if map.len() >= MAX_OPEN_READERS {
                    map.clear();
                }
                map.insert(object.to_owned(), f.clone());
            }
            f
        }
    };
    read_at(&file, object, position, len)
}

/// `len` bytes at `position` of an open blob file.
fn read_at(file: &File, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
    let len = usize::try_from(len).map_err(|_| StorageError::Corrupt("blob length overflows".into()))?;
    // Read into the buffer's spare capacity: a zeroed buffer (`vec![0; len]`) is written
    // twice, once by `memset` and once by the kernel's copy.
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let at = position + buf.len() as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at) {
            Ok(0) => return Err(StorageError::Corrupt(format!("object {object} ends before {position}+{len}"))),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io("read blob", e.into())),
        }
    }
    // A capacity larger than asked for may have taken bytes past the range.
    buf.truncate(len);
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

    fn names(list: &[ObjectInfo]) -> Vec<&str> {
        list.iter().map(|o| o.name.as_str()).collect()
    }

    /// Three blob files with distinct, ordered names (every put rolls at a 1-byte roll size).
    async fn three_files(store: &LocalObjectStore) -> Vec<String> {
        let mut objects = Vec::new();
        for blob in [&b"aa"[..], b"bbb", b"c"] {
            objects.push(store.put(Bytes::from_static(blob)).await.unwrap().object);
        }
        objects.sort();
        objects.dedup();
        assert_eq!(objects.len(), 3, "each put rolled to a new file");
        objects
    }

    #[tokio::test]
    async fn given_blob_files_and_strays_when_listed_then_name_order_after_and_limit_are_honoured() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalObjectStore::open_with_roll(dir.path(), 1).unwrap();
        let objects = three_files(&store).await;
        std::fs::write(dir.path().join("stray.tmp"), b"x").unwrap();
        std::fs::write(dir.path().join("0000000000000-not a blob.blobs"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();

        let all = store.list(None, 10).await.unwrap();
        assert_eq!(names(&all), objects.iter().map(String::as_str).collect::<Vec<_>>());
        let sizes: std::collections::HashMap<&str, u64> = all.iter().map(|o| (o.name.as_str(), o.size)).collect();
        assert_eq!(sizes.values().sum::<u64>(), 6);
        let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        assert!(all.iter().all(|o| (now - 60_000..=now + 1_000).contains(&o.created_ms)), "{all:?}");

        assert_eq!(names(&store.list(None, 2).await.unwrap()), [&objects[0], &objects[1]]);
        assert_eq!(names(&store.list(Some(&objects[0]), 10).await.unwrap()), [&objects[1], &objects[2]]);
        assert_eq!(names(&store.list(Some(&objects[1]), 1).await.unwrap()), [&objects[2]]);
        assert!(store.list(Some(&objects[2]), 10).await.unwrap().is_empty());
        assert!(store.list(None, 0).await.unwrap().is_empty());
        // `after` need not name an object: "0" sorts before every timestamped name.
        assert_eq!(store.list(Some("0"), 10).await.unwrap().len(), 3);
    }

    #[tokio::test]
    async fn given_deleted_object_when_read_or_deleted_again_then_not_found_and_ok() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalObjectStore::open_with_roll(dir.path(), 1).unwrap();
        let objects = three_files(&store).await;
        // Read first, so the open handle is cached: delete must drop it.
        assert_eq!(store.read(&objects[0], 0, 1).await.unwrap().len(), 1);

        store.delete(&objects[0]).await.unwrap();
        assert!(matches!(store.read(&objects[0], 0, 1).await, Err(StorageError::NotFound(_))));
        assert!(!dir.path().join(&objects[0]).exists());
        assert!(lock(&store.readers).get(&objects[0]).is_none(), "no handle keeps the space allocated");
        assert_eq!(names(&store.list(None, 10).await.unwrap()), [&objects[1], &objects[2]]);

        store.delete(&objects[0]).await.unwrap();
        store.delete("0000000000000-never-existed.blobs").await.unwrap();
        assert!(matches!(store.delete("../etc/passwd").await, Err(StorageError::Invalid(_))));
        assert!(matches!(store.delete("").await, Err(StorageError::Invalid(_))));
    }

    #[tokio::test]
    async fn given_active_file_deleted_when_put_then_blob_goes_to_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalObjectStore::open(dir.path()).unwrap();
        let a = store.put(Bytes::from_static(b"first")).await.unwrap();
        store.delete(&a.object).await.unwrap();
        let b = store.put(Bytes::from_static(b"second")).await.unwrap();
        assert_ne!(b.object, a.object);
        assert_eq!(b.position, 0);
        assert_eq!(store.read(&b.object, 0, 6).await.unwrap(), "second");
        assert!(!dir.path().join(&a.object).exists(), "the deleted file was not recreated");
    }

    #[tokio::test]
    async fn given_active_file_deleted_through_another_handle_when_put_then_blob_goes_to_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, collector) =
            (LocalObjectStore::open(dir.path()).unwrap(), LocalObjectStore::open(dir.path()).unwrap());
        let a = writer.put(Bytes::from_static(b"first")).await.unwrap();
        collector.delete(&a.object).await.unwrap();
        let b = writer.put(Bytes::from_static(b"second")).await.unwrap();
        assert_ne!(a.object, b.object, "never an append to a file another handle deleted");
        assert_eq!(writer.read(&b.object, b.position, 6).await.unwrap(), "second");
    }

    #[tokio::test]
    async fn given_active_file_retired_when_put_then_blob_goes_to_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalObjectStore::open(dir.path()).unwrap();
        let a = store.put(Bytes::from_static(b"first")).await.unwrap();
        // Retiring some other object leaves the active file alone.
        store.retire("0000000000000-other.blobs");
        let b = store.put(Bytes::from_static(b"second")).await.unwrap();
        assert_eq!((b.object.as_str(), b.position), (a.object.as_str(), 5));

        store.retire(&a.object);
        let c = store.put(Bytes::from_static(b"third")).await.unwrap();
        assert_ne!(c.object, a.object);
        assert_eq!(c.position, 0);
        let d = store.put(Bytes::from_static(b"fourth")).await.unwrap();
        assert_eq!((d.object.as_str(), d.position), (c.object.as_str(), 5), "the new file stays active");
        // The retired file keeps its blobs, and grows no more.
        assert_eq!(store.read(&a.object, 5, 6).await.unwrap(), "second");
        assert_eq!(std::fs::metadata(dir.path().join(&a.object)).unwrap().len(), 11);
    }

    #[tokio::test]
    async fn given_roll_size_when_files_fill_then_puts_roll_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalObjectStore::open_with_roll(dir.path(), 10).unwrap();
        let mut refs = Vec::new();
        for _ in 0..5 {
            refs.push(store.put(Bytes::from_static(b"1234")).await.unwrap());
        }
        // 4 + 4 + 4 = 12 >= 10: the third blob is the last in the first file (blobs never split).
        let positions: Vec<u64> = refs.iter().map(|r| r.position).collect();
        assert_eq!(positions, [0, 4, 8, 0, 4]);
        assert_eq!(refs[0].object, refs[2].object);
        assert_ne!(refs[2].object, refs[3].object);
        assert_eq!(refs[3].object, refs[4].object);
        let sizes: std::collections::HashMap<String, u64> =
            store.list(None, 10).await.unwrap().into_iter().map(|o| (o.name, o.size)).collect();
        assert_eq!(sizes, [(refs[0].object.clone(), 12), (refs[3].object.clone(), 8)].into());
    }
}

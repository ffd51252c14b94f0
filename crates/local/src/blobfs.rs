//! The seam between [`LocalObjectStore`](crate::LocalObjectStore) and the file
//! system: the few operations by which it changes its directory or makes a
//! change durable. Production always uses [`OsFs`], which is `std::fs` and
//! nothing more (one indirect call next to an `fdatasync`). A power-loss test
//! wraps it to learn what the disk holds for certain at every moment, and then
//! rewrites the directory as a power cut would leave it (`tests/power_loss/`).
//!
//! Why a trait object and not `cfg(test)`: the test that needs it is an
//! integration test (it drives a whole `Log` and then reopens the directory
//! with the real backend), which cannot see `cfg(test)` items; and a trait that
//! production code itself calls through means the test exercises the very code
//! path production runs, not a copy. Only the constructors that accept another
//! implementation are behind the hidden `fault-injection` feature.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Every operation through which a blob store changes its directory or makes a change durable.
///
/// Contract, for an implementation:
/// - each method does exactly what its `std` namesake (named in its doc) does, or
///   fails; it never reports success for an operation it did not perform;
/// - the store changes its directory through these methods only; it reads,
///   lists and `stat`s files with `std::fs` directly, so until it simulates a
///   power cut an implementation must leave the files as the OS shows them to
///   the running process (written bytes readable at once, as from the page cache).
///
/// What the store relies on, and so all that a power cut may not take away:
/// - bytes written to a file are on disk once [`BlobFs::sync_data`] of that file returns;
/// - a name just created (a file, or a directory) is on disk once [`BlobFs::sync_dir`]
///   of the directory holding it returns, if that directory's own name is;
/// - nothing else: a write not yet synced may be lost, kept, or torn (a prefix kept,
///   or garbage in its place), and a name not yet synced may vanish with its file.
///
/// Each method defaults to the operating system's own operation ([`OsFs`] is the trait with
/// nothing overridden), so a wrapper that watches syncs overrides just those.
#[doc(hidden)]
pub trait BlobFs: Send + Sync + 'static {
    /// `std::fs::create_dir_all`.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    /// Creates `path`, which must not exist, open for reading and writing
    /// (`OpenOptions::new().create_new(true).read(true).write(true)`).
    fn create_new(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new().create_new(true).read(true).write(true).open(path)
    }
    /// `FileExt::write_all_at` on `file`, which [`BlobFs::create_new`] opened at `path`.
    fn write_all_at(&self, _path: &Path, file: &File, bytes: &[u8], position: u64) -> io::Result<()> {
        file.write_all_at(bytes, position)
    }
    /// `File::sync_data` (`fdatasync`) on `file`, opened at `path`.
    fn sync_data(&self, _path: &Path, file: &File) -> io::Result<()> {
        file.sync_data()
    }
    /// `fsync` of the directory `dir`, which makes the names in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    /// `std::fs::remove_file`.
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
}

/// The operating system's file system: what every store opened without
/// `fault-injection` uses.
#[doc(hidden)]
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

impl BlobFs for OsFs {}

/// Creates `dir` and its missing parents so that their names survive a power cut: after
/// `create_dir_all`, the directory holding each one created is synced. (Syncing only a
/// new directory's contents leaves its own name in its parent at the disk's mercy, and
/// every file in it would vanish with it.) Directories that already exist cost nothing.
pub(crate) fn create_dir_durably(fs: &dyn BlobFs, dir: &Path) -> io::Result<()> {
    let mut created = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && !d.exists() {
        created.push(d);
        match d.parent() {
            Some(parent) => d = parent,
            None => break,
        }
    }
    fs.create_dir_all(dir)?;
    // One sync per directory created, of the directory that holds its name.
    for new in created {
        let parent = match new.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        fs.sync_dir(parent)?;
    }
    Ok(())
}

/// [`OsFs`], remembering every file and directory it synced: for the tests of what the
/// stores make durable.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Synced {
    pub(crate) files: std::sync::Mutex<Vec<std::path::PathBuf>>,
    pub(crate) dirs: std::sync::Mutex<Vec<std::path::PathBuf>>,
}

#[cfg(test)]
impl BlobFs for Synced {
    fn sync_data(&self, path: &Path, file: &File) -> io::Result<()> {
        self.files.lock().unwrap_or_else(|p| p.into_inner()).push(path.to_owned());
        OsFs.sync_data(path, file)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner()).push(dir.to_owned());
        OsFs.sync_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_missing_parents_when_created_durably_then_each_new_name_is_synced_in_its_parent_once() {
        let root = tempfile::tempdir().unwrap();
        let fs = Synced::default();
        create_dir_durably(&fs, &root.path().join("a/b/c")).unwrap();
        assert!(root.path().join("a/b/c").is_dir());
        let synced = std::mem::take(&mut *fs.dirs.lock().unwrap());
        assert_eq!(synced, [root.path().join("a/b"), root.path().join("a"), root.path().to_owned()]);

        create_dir_durably(&fs, &root.path().join("a/b/c")).unwrap();
        create_dir_durably(&fs, &root.path().join("a/b/d")).unwrap();
        assert_eq!(*fs.dirs.lock().unwrap(), [root.path().join("a/b")], "only the new directory's parent");
    }
}

//! What of SQLite's WAL is on disk for certain: the length each WAL file had when it was
//! last fsynced, whoever synced it. SQLite's own fsyncs (a `synchronous=FULL` commit, a
//! checkpoint) are seen by a VFS shim made this process's default: the OS's own VFS with
//! one change, a WAL file's `xSync` records the file's length before it syncs. The store's
//! own fsync of the WAL (`sync_deferred`, and on open) goes through its `BlobFs`, which
//! the test's [`WalSyncs`] records the same way. Deleting either fsync leaves the record
//! short, and the cut then drops what it did not cover.
//!
//! The shim is the package's only unsafe code (rusqlite has no safe way to register a
//! VFS): it copies the OS VFS and its file methods, swaps two function pointers, and
//! forwards every call unchanged.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, MutexGuard, Once, OnceLock};

use rusqlite::ffi;
use sluice_local::{BlobFs, OsFs};

/// Each WAL file's length at its last fsync, by path.
static DURABLE: LazyLock<Mutex<HashMap<PathBuf, u64>>> = LazyLock::new(Mutex::default);
/// The path of each open WAL file, by the address of its `sqlite3_file`.
static OPEN_WALS: LazyLock<Mutex<HashMap<usize, PathBuf>>> = LazyLock::new(Mutex::default);
/// The OS VFS, which the shim forwards to.
static REAL_VFS: OnceLock<usize> = OnceLock::new();
/// The OS VFS's file methods with `xSync` replaced, and its own `xSync`.
static WAL_METHODS: OnceLock<(usize, SyncFn)> = OnceLock::new();

type SyncFn = unsafe extern "C" fn(*mut ffi::sqlite3_file, c_int) -> c_int;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn record(path: &Path, len: u64) {
    let mut durable = lock(&DURABLE);
    let at = durable.entry(path.to_owned()).or_default();
    *at = (*at).max(len);
}

/// The length of the WAL at `path` at its last fsync (0: never synced).
pub(crate) fn durable_len(path: &Path) -> u64 {
    lock(&DURABLE).get(path).copied().unwrap_or(0)
}

/// Makes the recording VFS this process's default, once: every connection opened after it
/// (the store's included) goes through it.
pub(crate) fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| unsafe {
        let real = ffi::sqlite3_vfs_find(std::ptr::null());
        assert!(!real.is_null(), "SQLite has no default VFS");
        REAL_VFS.set(real as usize).expect("installed once");
        let mut shim: ffi::sqlite3_vfs = std::ptr::read(real);
        shim.zName = c"sluice-power-cut".as_ptr();
        shim.xOpen = Some(open);
        shim.pNext = std::ptr::null_mut();
        let shim = Box::leak(Box::new(shim));
        assert_eq!(ffi::sqlite3_vfs_register(shim, 1), ffi::SQLITE_OK, "register the VFS");
    });
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let real = *REAL_VFS.get().expect("installed") as *mut ffi::sqlite3_vfs;
    let rc = ((*real).xOpen.expect("xOpen"))(real, name, file, flags, out_flags);
    if rc != ffi::SQLITE_OK || flags & ffi::SQLITE_OPEN_WAL == 0 || name.is_null() || (*file).pMethods.is_null() {
        return rc;
    }
    let path = PathBuf::from(CStr::from_ptr(name).to_string_lossy().into_owned());
    lock(&OPEN_WALS).insert(file as usize, path);
    let (methods, _) = WAL_METHODS.get_or_init(|| {
        let mut methods: ffi::sqlite3_io_methods = std::ptr::read((*file).pMethods);
        let real_sync = methods.xSync.expect("xSync");
        methods.xSync = Some(sync);
        (Box::leak(Box::new(methods)) as *const ffi::sqlite3_io_methods as usize, real_sync)
    });
    (*file).pMethods = *methods as *const ffi::sqlite3_io_methods;
    rc
}

/// The OS VFS's `xSync`, recording the WAL's length as it was before the sync.
unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let (_, real_sync) = WAL_METHODS.get().expect("set on open");
    let mut size: ffi::sqlite3_int64 = 0;
    let sized = ((*(*file).pMethods).xFileSize.expect("xFileSize"))(file, &mut size);
    let rc = real_sync(file, flags);
    if rc == ffi::SQLITE_OK && sized == ffi::SQLITE_OK {
        if let Some(path) = lock(&OPEN_WALS).get(&(file as usize)) {
            record(path, size as u64);
        }
    }
    rc
}

/// [`OsFs`], recording the length of a WAL file it fsyncs, as it was before the sync.
pub(crate) struct WalSyncs;

impl BlobFs for WalSyncs {
    fn sync_data(&self, path: &Path, file: &File) -> io::Result<()> {
        let len = file.metadata()?.len();
        OsFs.sync_data(path, file)?;
        if path.to_string_lossy().ends_with("-wal") {
            record(path, len);
        }
        Ok(())
    }
}

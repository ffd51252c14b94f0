//! Whether another `sluice serve` uses this data directory. Several may, by design: each
//! process appends to object files of its own and SQLite orders the state's writes
//! (tests/shared_data_dir.rs), so a second server is not refused; it says so in one line
//! at start-up, so that nobody takes the topics it shows for a fresh directory's.
//!
//! Each `serve` holds a shared `flock` on `serve.lock` in the directory while it runs; a
//! starting one first tries an exclusive lock there, which fails while another holds its
//! shared one. The kernel drops a process's locks when it exits, `kill -9` included, so a
//! crashed server leaves nothing that a later start would take for a live one.

use std::fs::File;
use std::path::Path;

use rustix::fs::{flock, FlockOperation};

/// The lock file's name in the data directory.
const LOCK_FILE: &str = "serve.lock";

/// This process's presence in a data directory: held for as long as it is kept.
pub struct Presence {
    _lock: File,
    /// Whether another `serve` was there when this one started.
    pub shared: bool,
}

/// Marks this process as serving from `dir` (which exists), and finds whether another does.
pub fn enter(dir: &Path) -> std::io::Result<Presence> {
    let path = dir.join(LOCK_FILE);
    let probe = File::options().create(true).append(true).open(&path)?;
    let shared = match flock(&probe, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => false,
        Err(rustix::io::Errno::WOULDBLOCK) => true,
        Err(e) => return Err(e.into()),
    };
    drop(probe);
    let lock = File::open(&path)?;
    // Waits only while another server starting at the same moment holds its probe.
    flock(&lock, FlockOperation::LockShared)?;
    Ok(Presence { _lock: lock, shared })
}

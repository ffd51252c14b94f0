//! The disk as a power cut would leave it: a recording [`BlobFs`] that knows which bytes
//! and names are durable and cuts the power at a seeded step, and the image built from it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::Rng;
use sluice_local::{BlobFs, OsFs};

use crate::Tally;

/// What the disk holds for certain, beside what the running process sees; and the power switch.
#[derive(Default)]
pub(crate) struct Power {
    disk: Mutex<Disk>,
}

#[derive(Default)]
pub(crate) struct Disk {
    /// Steps are counted (and the cut can fall) only once armed: after the topic exists.
    armed: bool,
    steps: u64,
    cut_at: u64,
    /// Whether the step the cut falls on takes effect (its caller never hears) or never happens.
    lands: bool,
    /// The kind of step the cut fell on, once the power is off.
    cut: Option<&'static str>,
    /// Blob files created through the hook, by path.
    files: BTreeMap<PathBuf, FileRecord>,
    /// Directories created through the hook, and whether their names are durable.
    dirs: BTreeMap<PathBuf, bool>,
}

#[derive(Debug, Clone, Copy)]
struct FileRecord {
    /// Bytes the process wrote (the length it sees).
    written: u64,
    /// Bytes on disk for certain: the length at the last `fdatasync`.
    synced: u64,
    /// Whether its name is on disk for certain: its directory was synced after it was created.
    named: bool,
}

#[derive(Clone, Copy)]
pub(crate) enum Step {
    Run,
    /// The step takes effect, then the power goes before its caller hears.
    RunThenDie,
    Dead,
}

impl Step {
    fn answer<T>(self, t: T) -> io::Result<T> {
        match self {
            Step::Run => Ok(t),
            Step::RunThenDie | Step::Dead => Err(power_lost()),
        }
    }
}

fn power_lost() -> io::Error {
    io::Error::other("power lost")
}

impl Disk {
    pub(crate) fn step(&mut self, kind: &'static str) -> Step {
        if self.cut.is_some() {
            return Step::Dead;
        }
        if !self.armed {
            return Step::Run;
        }
        let n = self.steps;
        self.steps += 1;
        if n < self.cut_at {
            return Step::Run;
        }
        self.cut = Some(kind);
        if self.lands {
            Step::RunThenDie
        } else {
            Step::Dead
        }
    }
}

impl Power {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn arm(&self, cut_at: u64, lands: bool) {
        let mut d = self.lock();
        (d.armed, d.cut_at, d.lands) = (true, cut_at, lands);
    }

    /// Cuts the power now, if no step did: the publishers ran out first.
    pub(crate) fn cut_now(&self) -> &'static str {
        let mut d = self.lock();
        let cut = d.cut.unwrap_or("idle");
        d.cut = Some(cut);
        cut
    }

    pub(crate) fn is_off(&self) -> bool {
        self.lock().cut.is_some()
    }
}

/// Every operation runs under the disk's lock, so a cut is one instant: each operation happens
/// wholly before it, or not at all. The syncs only record what became durable: what the real
/// disk holds does not matter here, the image below is built from the record.
impl BlobFs for Power {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut d = self.lock();
        let step = d.step("create dir");
        if let Step::Dead = step {
            return Err(power_lost());
        }
        let missing: Vec<PathBuf> = dir.ancestors().take_while(|a| !a.exists()).map(Path::to_owned).collect();
        OsFs.create_dir_all(dir)?;
        for m in missing {
            d.dirs.insert(m, false);
        }
        step.answer(())
    }

    fn create_new(&self, path: &Path) -> io::Result<File> {
        let mut d = self.lock();
        let step = d.step("create file");
        if let Step::Dead = step {
            return Err(power_lost());
        }
        let file = OsFs.create_new(path)?;
        d.files.insert(path.to_owned(), FileRecord { written: 0, synced: 0, named: false });
        step.answer(file)
    }

    fn write_all_at(&self, path: &Path, file: &File, bytes: &[u8], position: u64) -> io::Result<()> {
        let mut d = self.lock();
        let step = d.step("write");
        if let Step::Dead = step {
            return Err(power_lost());
        }
        let rec = d.files.get_mut(path).expect("writes only to files it created");
        // The image below models appends only; so does the store.
        assert_eq!(position, rec.written, "blob files are appended to, never overwritten");
        OsFs.write_all_at(path, file, bytes, position)?;
        rec.written += bytes.len() as u64;
        step.answer(())
    }

    fn sync_data(&self, path: &Path, _file: &File) -> io::Result<()> {
        let mut d = self.lock();
        let step = d.step("fdatasync");
        if let Step::Dead = step {
            return Err(power_lost());
        }
        // Else one of SQLite's files, which the store fsyncs itself on open and after deferred
        // writes: the image takes them as they stand (see the module's header).
        if let Some(rec) = d.files.get_mut(path) {
            rec.synced = rec.written;
        }
        step.answer(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut d = self.lock();
        let step = d.step("sync dir");
        if let Step::Dead = step {
            return Err(power_lost());
        }
        File::open(dir)?; // fails as the real one would on a missing directory
        for (path, rec) in d.files.iter_mut() {
            if path.parent() == Some(dir) {
                rec.named = true;
            }
        }
        for (path, named) in d.dirs.iter_mut() {
            if path.parent() == Some(dir) {
                *named = true;
            }
        }
        step.answer(())
    }

    /// Taken as durable at once: only the collector deletes, and it does not run here.
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut d = self.lock();
        let step = d.step("remove file");
        if let Step::Dead = step {
            return Err(power_lost());
        }
        OsFs.remove_file(path)?;
        d.files.remove(path);
        step.answer(())
    }
}

impl Power {
    /// Writes at `image` the data directory `work` as the disk holds it after the cut.
    pub(crate) fn image(&self, work: &Path, image: &Path, rng: &mut StdRng, tally: &mut Tally) {
        let d = self.lock();
        assert!(d.cut.is_some(), "the power is still on");
        // A name never made durable may survive or not (mostly not); with a directory go its files.
        let mut lost: BTreeSet<&Path> = BTreeSet::new();
        for (dir, named) in &d.dirs {
            let under_lost = dir.ancestors().skip(1).any(|a| lost.contains(a));
            if under_lost || (!named && rng.gen_bool(0.75)) {
                lost.insert(dir);
                tally.dirs_lost += 1;
            }
        }
        let is_lost = |p: &Path| p.ancestors().any(|a| lost.contains(a));
        if lost.contains(work) {
            return;
        }
        copy_tree(work, work, image, &d.files, &is_lost, rng, tally);
    }
}

#[allow(clippy::too_many_arguments)]
fn copy_tree(
    work: &Path,
    dir: &Path,
    image: &Path,
    files: &BTreeMap<PathBuf, FileRecord>,
    is_lost: &dyn Fn(&Path) -> bool,
    rng: &mut StdRng,
    tally: &mut Tally,
) {
    let out = image.join(dir.strip_prefix(work).unwrap());
    std::fs::create_dir_all(&out).unwrap();
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if is_lost(&path) {
            continue;
        }
        let target = out.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(work, &path, image, files, is_lost, rng, tally);
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(rec) = files.get(&path) else {
            // SQLite's files, as it wrote them; its shared-memory index is rebuilt by recovery.
            assert!(name.starts_with("state.sqlite3"), "a file the blob store did not create: {}", path.display());
            if !name.ends_with("-shm") {
                std::fs::copy(&path, &target).unwrap();
            }
            continue;
        };
        if !rec.named && rng.gen_bool(0.75) {
            tally.files_lost += 1;
            continue;
        }
        let seen = std::fs::read(&path).unwrap();
        assert_eq!(seen.len() as u64, rec.written, "{}", path.display());
        let synced = usize::try_from(rec.synced).unwrap();
        let (durable, tail) = seen.split_at(synced);
        let mut bytes = durable.to_vec();
        if !tail.is_empty() {
            let cut = rng.gen_range(0..tail.len());
            match rng.gen_range(0..5) {
                0 => tally.tails_dropped += 1,
                1 => {
                    bytes.extend_from_slice(tail);
                    tally.tails_kept += 1;
                }
                2 => {
                    bytes.extend_from_slice(&tail[..cut]);
                    tally.tails_torn += 1;
                }
                3 => {
                    bytes.extend_from_slice(&tail[..cut]);
                    bytes.extend((cut..tail.len()).map(|_| rng.gen::<u8>()));
                    tally.tails_garbled += 1;
                }
                _ => {
                    bytes.extend_from_slice(&tail[..cut]);
                    bytes.resize(seen.len(), 0);
                    tally.tails_zeroed += 1;
                }
            }
        }
        std::fs::write(&target, bytes).unwrap();
    }
}

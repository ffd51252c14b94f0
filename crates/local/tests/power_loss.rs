//! Power loss on the embedded backend. `kill -9` (tests/crash.rs at the root) keeps
//! everything the process wrote, synced or not, in the page cache; a power cut keeps
//! only what reached the disk. So the blob files' writes go through a recording
//! [`BlobFs`] that knows, at every moment, which bytes and which names are durable
//! (bytes: the file was `fdatasync`ed since; a new name: its directory was synced
//! since), and cuts the power at a seeded point: at the Nth durability-relevant step
//! (a blob file or directory created, a write, an `fdatasync`, a directory sync, or a
//! state-store commit), which either never happens or happens without its caller
//! hearing of it. From then on every file operation and every state-store call
//! fails, as in a dead process. The disk image is then built from it: every
//! durable byte kept; each undurable tail dropped, kept, torn (a prefix kept), or
//! replaced from some point on by garbage or zeros of the same length; names never
//! made durable mostly lost with their files; SQLite's files as SQLite wrote them
//! (see below). The image is reopened with the real backend and checked: every
//! acknowledged event is at its partition and offset with its exact bytes; offsets
//! are dense from 0 to each head and nothing reads past it; every visible event
//! is one some publish sent, and each publish is visible whole or not at all; a
//! visible publish was acknowledged, unless the cut fell just after its commit
//! landed (its answer lost, as on any system); no read fails (no `Corrupt` for a
//! committed offset) and nothing panics; publishing continues densely from each head.
//!
//! SQLite's own power loss is not simulated: in WAL mode with `synchronous=FULL` a
//! commit returns only after its WAL frames (the last one marked as a commit) are
//! fsynced, and recovery replays the WAL up to the last commit frame whose
//! checksums hold, so a torn or unsynced tail is discarded and every commit that
//! returned survives. The image therefore takes SQLite's database and WAL as they
//! stand once no commit is in flight (without the `-shm` index, which recovery
//! rebuilds from the WAL), which is one of the states a real cut can leave. What
//! this test adds is the other half: that a blob is durable before the index row
//! that points at it commits, which is what makes "acknowledged" imply "present".
//!
//! Run with `--nocapture` to see the tally. `SLUICE_POWER_SEED=<n>` runs one seed
//! (a failure names its seed); `SLUICE_POWER_CUTS=<n>` runs more or fewer. Thread
//! scheduling is not seeded, so a seed fixes the cut point and the tearing, not the
//! interleaving.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{Clock, Log, LogConfig, NewEvent, ObjectStore, ReadRequest, StorageError, SystemClock, TopicSpec};
use sluice_local::{BlobFs, OsFs};
use sluice_testkit::{Layered, StateLayer};

const TOPIC: &str = "volts";
const PARTITIONS: u32 = 4;
const PUBLISHERS: usize = 6;
/// Each publisher stops after this many publishes if the power is still on.
const MAX_PUBLISHES: usize = 60;
/// Small files, so cuts often fall on a file's creation or its directory's sync.
const ROLL_BYTES: u64 = 4 << 10;
/// The cut falls on one of the first this many durability-relevant steps after the topic exists.
const MAX_CUT_STEP: u64 = 150;
const DEFAULT_CUTS: u64 = 200;
/// Seeds run on this many threads at once (each cut waits mostly on SQLite's fsyncs).
const THREADS: usize = 4;

// ---------------------------------------------------------------------------------------------
// The disk as a power cut would leave it.

/// What the disk holds for certain, beside what the running process sees; and the power switch.
#[derive(Default)]
struct Power {
    disk: Mutex<Disk>,
}

#[derive(Default)]
struct Disk {
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
enum Step {
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

fn state_power_lost() -> StorageError {
    StorageError::Unavailable { message: "power lost".into(), source: None }
}

impl Disk {
    fn step(&mut self, kind: &'static str) -> Step {
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
    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn arm(&self, cut_at: u64, lands: bool) {
        let mut d = self.lock();
        (d.armed, d.cut_at, d.lands) = (true, cut_at, lands);
    }

    /// Cuts the power now, if no step did: the publishers ran out first.
    fn cut_now(&self) -> &'static str {
        let mut d = self.lock();
        let cut = d.cut.unwrap_or("idle");
        d.cut = Some(cut);
        cut
    }

    fn is_off(&self) -> bool {
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
        let rec = d.files.get_mut(path).expect("syncs only files it created");
        rec.synced = rec.written;
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

/// How the power cuts went, over every seed.
#[derive(Debug, Default)]
struct Tally {
    cuts: u64,
    cut_on: BTreeMap<String, u64>,
    tails_dropped: u64,
    tails_kept: u64,
    tails_torn: u64,
    tails_garbled: u64,
    tails_zeroed: u64,
    files_lost: u64,
    dirs_lost: u64,
    publishes: u64,
    acked_publishes: u64,
    acked_events_checked: u64,
    /// Committed, but the power went before the answer: visible (whole), never acknowledged.
    unacked_visible_publishes: u64,
    events_read: u64,
}

impl Tally {
    fn torn(&self) -> u64 {
        self.tails_torn + self.tails_garbled + self.tails_zeroed
    }

    fn absorb(&mut self, other: Tally) {
        for (on, n) in other.cut_on {
            *self.cut_on.entry(on).or_default() += n;
        }
        self.cuts += other.cuts;
        self.tails_dropped += other.tails_dropped;
        self.tails_kept += other.tails_kept;
        self.tails_torn += other.tails_torn;
        self.tails_garbled += other.tails_garbled;
        self.tails_zeroed += other.tails_zeroed;
        self.files_lost += other.files_lost;
        self.dirs_lost += other.dirs_lost;
        self.publishes += other.publishes;
        self.acked_publishes += other.acked_publishes;
        self.acked_events_checked += other.acked_events_checked;
        self.unacked_visible_publishes += other.unacked_visible_publishes;
        self.events_read += other.events_read;
    }
}

impl Power {
    /// Writes at `image` the data directory `work` as the disk holds it after the cut.
    fn image(&self, work: &Path, image: &Path, rng: &mut StdRng, tally: &mut Tally) {
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

// ---------------------------------------------------------------------------------------------
// The state store of a process that dies with the power.

/// The real SQLite store, refusing everything once the power is off; its writes count as steps.
/// A write already running at the cut completes: its commit came first. A layer over the store.
struct CutState {
    power: Arc<Power>,
}

impl CutState {
    fn alive(&self) -> Result<(), StorageError> {
        if self.power.is_off() {
            Err(state_power_lost())
        } else {
            Ok(())
        }
    }

    async fn step<T, F>(&self, f: F) -> Result<T, StorageError>
    where
        F: std::future::Future<Output = Result<T, StorageError>>,
    {
        let step = self.power.lock().step("state commit");
        match step {
            Step::Run => f.await,
            Step::RunThenDie => {
                let _ = f.await;
                Err(state_power_lost())
            }
            Step::Dead => Err(state_power_lost()),
        }
    }
}

#[async_trait]
impl StateLayer for CutState {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        self.alive()?;
        inner.get(key).await
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        self.alive()?;
        inner.query(query).await
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.step(inner.write(ops)).await
    }

    /// A durable write, as the port's default made it before this was a layer.
    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write(inner, ops).await
    }

    async fn delete_many(&self, inner: &dyn StateStore, keys: Vec<Key>) -> Result<(), StorageError> {
        self.step(inner.delete_many(keys)).await
    }

    async fn purge_expired(&self, inner: &dyn StateStore, limit: usize) -> Result<usize, StorageError> {
        self.step(inner.purge_expired(limit)).await
    }
}

// ---------------------------------------------------------------------------------------------
// The workload and the checks.

/// A publish: which publisher, its sequence number there.
type PublishId = (usize, usize);

/// A batch of 1–5 events: keyed (several partitions), unkeyed (one, sticky) or at a chosen
/// partition. Each value starts with its publish and index, so a visible event names its origin.
fn batch(rng: &mut StdRng, id: PublishId) -> Vec<NewEvent> {
    let kind = rng.gen_range(0..3);
    let partition = rng.gen_range(0..PARTITIONS);
    (0..rng.gen_range(1..=5))
        .map(|i| {
            let mut value = format!("{}/{}/{i}/", id.0, id.1).into_bytes();
            value.extend((0..rng.gen_range(0..700)).map(|_| rng.gen_range(b'a'..=b'z')));
            NewEvent {
                key: (kind == 0).then(|| Bytes::from(format!("key-{}", rng.gen_range(0..32)))),
                headers: Vec::new(),
                value: Bytes::from(value),
                value_is_json: false,
                timestamp_ms: None,
                partition: (kind == 2).then_some(partition),
            }
        })
        .collect()
}

fn origin(value: &[u8]) -> (PublishId, usize) {
    let text = std::str::from_utf8(value).expect("values are ASCII");
    let mut parts = text.splitn(4, '/').map(|s| s.parse::<usize>());
    let mut next = || parts.next().and_then(Result::ok).unwrap_or_else(|| panic!("a value nobody sent: {text:?}"));
    ((next(), next()), next())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(3).enable_all().build().unwrap()
}

struct Run {
    attempts: HashMap<PublishId, Vec<NewEvent>>,
    acks: HashMap<PublishId, Vec<sluice_core::Position>>,
}

/// One seed: publish until the power goes, build the disk image, reopen it, check it.
fn power_cut(seed: u64, tally: &mut Tally) {
    let mut rng = StdRng::seed_from_u64(seed);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("data");
    let power = Arc::new(Power::default());

    let (cut_at, lands) = (rng.gen_range(0..MAX_CUT_STEP), rng.gen_bool(0.5));
    let publisher_seeds: Vec<u64> = (0..PUBLISHERS).map(|_| rng.gen()).collect();
    let rt = runtime();
    // The process's own handles, dropped only after the image is taken (as a dead process's are
    // never closed: SQLite does not checkpoint away its WAL first).
    let (state, objects) = sluice_local::open_with_fs(&work, clock.clone(), power.clone(), ROLL_BYTES).unwrap();
    let store = Arc::new(Layered::new(state.clone(), CutState { power: power.clone() }));
    let run = rt.block_on(async {
        // Odd seeds keep small groups' segments inline (in the state store's commit), even
        // seeds write every group's blob first: both ways, a blob must be durable before its index.
        let inline_segment_bytes = if seed % 2 == 1 { 2 << 10 } else { 0 };
        let config = LogConfig { inline_segment_bytes, ..LogConfig::default() };
        let log = Log::new(store, objects.clone(), clock.clone(), config);
        let spec = TopicSpec { partitions: PARTITIONS, retention_ms: None, retention_bytes: None };
        log.create_topic(TOPIC, spec).await.unwrap();
        power.arm(cut_at, lands);
        let mut tasks = Vec::new();
        for (p, seed) in publisher_seeds.into_iter().enumerate() {
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed);
                let (mut attempts, mut acks) = (Vec::new(), Vec::new());
                for seq in 0..MAX_PUBLISHES {
                    let events = batch(&mut rng, (p, seq));
                    attempts.push(((p, seq), events.clone()));
                    match log.publish(TOPIC, events, None).await {
                        Ok(positions) => acks.push(((p, seq), positions)),
                        Err(_) => break,
                    }
                }
                (attempts, acks)
            }));
        }
        let mut run = Run { attempts: HashMap::new(), acks: HashMap::new() };
        for t in tasks {
            let (attempts, acks) = t.await.unwrap();
            run.attempts.extend(attempts);
            run.acks.extend(acks);
        }
        run
    });
    let cut_on = power.cut_now();
    // No shutdown: every task is dropped where it stands (blocking calls, all failing now, return).
    rt.shutdown_timeout(Duration::from_secs(10));

    tally.cuts += 1;
    let on = match (cut_on, lands) {
        ("idle", _) => "idle (after the last publish)".to_owned(),
        (step, true) => format!("{step} (lands)"),
        (step, false) => format!("{step} (never happens)"),
    };
    *tally.cut_on.entry(on.clone()).or_default() += 1;
    tally.publishes += run.attempts.len() as u64;
    tally.acked_publishes += run.acks.len() as u64;

    let image_root = tempfile::tempdir().unwrap();
    let image = image_root.path().join("data");
    power.image(&work, &image, &mut rng, tally);
    drop((state, objects));
    drop(root);

    let what = format!("seed {seed}: cut at step {cut_at} on {on}");
    // Only a commit that landed as the power went can be visible unanswered.
    let answer_lost = cut_on == "state commit" && lands;
    runtime().block_on(check(&image, clock, &run, answer_lost, tally, &what));
}

async fn check(image: &Path, clock: Arc<dyn Clock>, run: &Run, answer_lost: bool, tally: &mut Tally, what: &str) {
    let (state, objects) = sluice_local::open(image, clock.clone()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let log = Log::new(state, objects.clone(), clock, LogConfig::default());
    let (_, partitions) = log.describe_topic(TOPIC).await.unwrap_or_else(|e| panic!("{what}: the topic: {e}"));
    assert_eq!(partitions.len(), PARTITIONS as usize, "{what}");

    // Everything visible, read from 0 to each head: dense, and nothing past the head.
    let mut visible: HashMap<(u32, u64), (PublishId, usize)> = HashMap::new();
    let mut heads = Vec::new();
    for state in &partitions {
        let (p, head) = (state.partition, state.high_watermark);
        assert_eq!(state.log_start_offset, 0, "{what}: partition {p}");
        let mut next = 0;
        loop {
            let req = ReadRequest {
                topic: TOPIC.into(),
                partition: p,
                offset: next,
                max_events: 1000,
                max_bytes: 4 << 20,
                wait_ms: 0,
            };
            let page = log.read(&req).await.unwrap_or_else(|e| panic!("{what}: read {p}/{next}: {e} ({e:?})"));
            assert_eq!(page.high_watermark, head, "{what}: partition {p}");
            if next >= head {
                assert!(page.events.is_empty(), "{what}: partition {p} reads past its head {head}");
                break;
            }
            assert!(!page.events.is_empty(), "{what}: nothing at {p}/{next}, below the head {head}");
            for e in page.events {
                assert_eq!(e.offset, next, "{what}: partition {p} is not dense");
                let (id, i) = origin(&e.record.value);
                let sent = run.attempts.get(&id).and_then(|a| a.get(i));
                let sent = sent.unwrap_or_else(|| panic!("{what}: {p}/{next} holds an event nobody sent"));
                assert_eq!(e.record.value, sent.value, "{what}: {p}/{next}: value");
                assert_eq!(e.record.key, sent.key, "{what}: {p}/{next}: key");
                assert!(visible.insert((p, next), (id, i)).is_none());
                next += 1;
                tally.events_read += 1;
            }
        }
        heads.push(head);
    }

    // Every acknowledged event where it was acknowledged.
    for (id, positions) in &run.acks {
        for (i, pos) in positions.iter().enumerate() {
            assert_eq!(
                visible.get(&(pos.partition, pos.offset)),
                Some(&(*id, i)),
                "{what}: acknowledged event {i} of publish {id:?} lost at {}/{}",
                pos.partition,
                pos.offset
            );
            tally.acked_events_checked += 1;
        }
    }

    // Each publish whole or not at all, each partition's share in request order.
    let mut by_publish: HashMap<PublishId, Vec<(usize, u32, u64)>> = HashMap::new();
    for (&(p, offset), &(id, i)) in &visible {
        by_publish.entry(id).or_default().push((i, p, offset));
    }
    for (id, mut events) in by_publish {
        events.sort_unstable();
        let sent = run.attempts[&id].len();
        assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), (0..sent).collect::<Vec<_>>(), "{what}: {id:?}");
        for (a, b) in events.iter().zip(&events[1..]) {
            assert!(a.1 != b.1 || a.2 < b.2, "{what}: publish {id:?} out of order in partition {}", a.1);
        }
        if !run.acks.contains_key(&id) {
            assert!(answer_lost, "{what}: publish {id:?} is visible but was never acknowledged");
            tally.unacked_visible_publishes += 1;
        }
    }

    // Torn tails and strays do not trouble a listing, and publishing goes on from each head.
    objects.list(None, 100_000).await.unwrap_or_else(|e| panic!("{what}: list: {e}"));
    for (p, head) in (0..PARTITIONS).zip(heads) {
        let events: Vec<NewEvent> = (0..3)
            .map(|i| NewEvent {
                key: None,
                headers: Vec::new(),
                value: Bytes::from(format!("after/{p}/{i}")),
                value_is_json: false,
                timestamp_ms: None,
                partition: Some(p),
            })
            .collect();
        let positions = log.publish(TOPIC, events, None).await.unwrap_or_else(|e| panic!("{what}: publish: {e}"));
        let offsets: Vec<u64> = positions.iter().map(|pos| pos.offset).collect();
        assert_eq!(offsets, [head, head + 1, head + 2], "{what}: partition {p} after the reopen");
        let req = ReadRequest {
            topic: TOPIC.into(),
            partition: p,
            offset: head,
            max_events: 10,
            max_bytes: 1 << 20,
            wait_ms: 0,
        };
        let page = log.read(&req).await.unwrap_or_else(|e| panic!("{what}: read after the reopen: {e}"));
        let values: Vec<Bytes> = page.events.into_iter().map(|e| e.record.value).collect();
        assert_eq!(values, (0..3).map(|i| Bytes::from(format!("after/{p}/{i}"))).collect::<Vec<_>>(), "{what}");
    }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

#[test]
fn given_power_cuts_at_seeded_points_when_reopened_then_acked_events_survive_and_nothing_else_is_committed() {
    let started = Instant::now();
    let seeds: Vec<u64> = match env("SLUICE_POWER_SEED") {
        Some(seed) => vec![seed],
        None => (0..env("SLUICE_POWER_CUTS").unwrap_or(DEFAULT_CUTS)).collect(),
    };
    let mut tally = Tally::default();
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|k| {
                let seeds: Vec<u64> = seeds.iter().copied().skip(k).step_by(THREADS).collect();
                s.spawn(move || {
                    let mut tally = Tally::default();
                    for seed in seeds {
                        power_cut(seed, &mut tally);
                    }
                    tally
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    for t in tallies {
        tally.absorb(t);
    }
    println!(
        "power loss: {} cuts in {:.1?}; cut on {:?}; undurable tails: {} torn ({} a prefix, {} garbage, {} zeros), \
         {} dropped, {} kept whole; {} files and {} directories lost with their names; {} publishes, {} acknowledged, \
         {} acknowledged events checked, {} events read back, {} publishes committed but never acknowledged (whole)",
        tally.cuts,
        started.elapsed(),
        tally.cut_on,
        tally.torn(),
        tally.tails_torn,
        tally.tails_garbled,
        tally.tails_zeroed,
        tally.tails_dropped,
        tally.tails_kept,
        tally.files_lost,
        tally.dirs_lost,
        tally.publishes,
        tally.acked_publishes,
        tally.acked_events_checked,
        tally.events_read,
        tally.unacked_visible_publishes,
    );
    if tally.cuts >= DEFAULT_CUTS {
        // Not vacuous: the cuts did tear tails, and most runs acknowledged something first.
        assert!(tally.torn() >= 10, "too few torn tails to prove anything: {tally:?}");
        assert!(tally.acked_events_checked >= 1000, "too few acknowledged events to prove anything: {tally:?}");
    }
}

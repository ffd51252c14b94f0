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
//! SQLite's own power loss is not simulated here, the other test's subject
//! (`state_cut.rs`): this workload only publishes, and in WAL mode with
//! `synchronous=FULL` a publish's commit returns only after its WAL frames are
//! fsynced. The image therefore takes SQLite's database and WAL as they stand once no
//! commit is in flight (without the `-shm` index, which recovery rebuilds from the
//! WAL), which is one of the states a real cut can leave. What this test adds is the
//! other half: that a blob is durable before the index row that points at it commits,
//! which is what makes "acknowledged" imply "present".
//!
//! Run with `--nocapture` to see the tally. `SLUICE_POWER_SEED=<n>` runs one seed
//! (a failure names its seed); `SLUICE_POWER_CUTS=<n>` runs more or fewer. Thread
//! scheduling is not seeded, so a seed fixes the cut point and the tearing, not the
//! interleaving.
//!
//! Here the workload and the runs; the recording file system and the image in `disk.rs`,
//! the state store that dies with the power in `cut_state.rs`, the checks in `check.rs`.
//! The power cut of SQLite's state (acks, heartbeats, commits inside the sync window) is
//! `state_cut.rs`, with the record of the WAL's fsyncs in `wal_vfs.rs`.

mod check;
mod cut_state;
mod disk;
mod state_cut;
mod wal_vfs;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_core::upkeep::{Janitor, JanitorConfig, STEP_BUDGET};
use sluice_core::{Clock, Log, LogConfig, NewEvent, SystemClock, TopicSpec};
use sluice_local::DEFAULT_SYNC_WINDOW_MS;

use check::check;
use cut_state::CutState;
use disk::Power;

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
    /// Segments the janitor merged or moved (to blob files of its own) before a cut.
    segments_rewritten: u64,
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
        self.segments_rewritten += other.segments_rewritten;
    }
}

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
    /// Segments the janitor merged or moved before the cut.
    rewritten: usize,
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
    let (state, objects) =
        sluice_local::open_with_fs(&work, clock.clone(), DEFAULT_SYNC_WINDOW_MS, power.clone(), ROLL_BYTES).unwrap();
    let store = Arc::new(CutState { inner: state.clone(), power: power.clone() });
    let run = rt.block_on(async {
        // Odd seeds keep small groups' segments inline (in the state store's commit), even
        // seeds write every group's blob first: both ways, a blob must be durable before its index.
        let inline_segment_bytes = if seed % 2 == 1 { 2 << 10 } else { 0 };
        let config = LogConfig { inline_segment_bytes, ..LogConfig::default() };
        let log = Log::new(store.clone(), objects.clone(), clock.clone(), config);
        let spec = TopicSpec { partitions: PARTITIONS, retention_ms: None, retention_bytes: None };
        log.create_topic(TOPIC, spec).await.unwrap();
        // Seeds 2 and 3 of every 4: the janitor settles and merges the segments meanwhile,
        // moving live blobs to files of its own and deleting the files they leave empty.
        let janitor = (seed % 4 >= 2).then(|| janitor(&work, store.clone(), clock.clone(), power.clone()));
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
        let mut run = Run { attempts: HashMap::new(), acks: HashMap::new(), rewritten: 0 };
        for t in tasks {
            let (attempts, acks) = t.await.unwrap();
            run.attempts.extend(attempts);
            run.acks.extend(acks);
        }
        run.rewritten = stop(janitor).await;
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
    tally.segments_rewritten += run.rewritten as u64;

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

/// The embedded backend's janitor as `serve` runs it (a blob file per blob it writes; commits'
/// segments settled), on the recording file system, in rounds until `stop` or the power goes.
/// A short grace period: files emptied are deleted within the run, as are blobs never indexed.
fn janitor(
    work: &std::path::Path,
    store: Arc<CutState>,
    clock: Arc<dyn Clock>,
    power: Arc<Power>,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<usize>) {
    let objects = sluice_local::LocalObjectStore::open_with_fs(&work.join("objects"), 0, power.clone()).unwrap();
    let config = JanitorConfig {
        compaction_target_bytes: 4 << 10,
        part_bytes: 1 << 10,
        grace_ms: 20,
        settle_commit_segments: true,
        ..JanitorConfig::default()
    };
    let janitor = Janitor::new(store, Arc::new(objects), clock, config);
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let mut rewritten = 0;
        while !stopped.load(Ordering::Relaxed) && !power.is_off() {
            // A round failing on the cut is what a dead process's janitor does.
            if let Ok(report) = janitor.run(STEP_BUDGET).await {
                rewritten += report.segments_written;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        rewritten
    });
    (stop, task)
}

/// Stops a [`janitor`], if one runs: answers the segments it rewrote.
async fn stop(janitor: Option<(Arc<AtomicBool>, tokio::task::JoinHandle<usize>)>) -> usize {
    let Some((stop, task)) = janitor else { return 0 };
    stop.store(true, Ordering::Relaxed);
    task.await.unwrap()
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
         {} acknowledged events checked, {} events read back, {} publishes committed but never acknowledged (whole), \
         {} segments the janitor merged or moved",
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
        tally.segments_rewritten,
    );
    if tally.cuts >= DEFAULT_CUTS {
        // Not vacuous: the cuts did tear tails, and most runs acknowledged something first.
        assert!(tally.torn() >= 10, "too few torn tails to prove anything: {tally:?}");
        assert!(tally.acked_events_checked >= 1000, "too few acknowledged events to prove anything: {tally:?}");
        assert!(tally.segments_rewritten >= 100, "too few segments moved to prove anything: {tally:?}");
    }
}

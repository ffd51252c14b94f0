//! A power cut of SQLite's state, at a sync window of 0 and of N ms. The blob test keeps
//! SQLite's files as they stand (a crash's view); this one keeps of the WAL only what was
//! fsynced (its length at its last sync, see `wal_vfs.rs`) and does to the rest what a
//! cut may do: drop it, keep it, tear it, or overwrite it with garbage or zeros.
//!
//! The workload, on a manual clock, one request at a time: keyed publishes, queue
//! receives, acks and nacks, a group member's polls (heartbeats carrying auto-commits),
//! commit requests, janitor runs, and the clock moving on (the store's tick syncing the
//! deferred writes each window). Every answered write of the state store is recorded with
//! the time of its answer and the rows the store held after it. The image, reopened (SQLite
//! recovers its WAL), must hold exactly the rows after some answered write k, a prefix of
//! the writes (what is lost is a suffix), and k must cover every write answered at least
//! the window before the cut: at a window of 0, every write answered.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_core::groups::{CommitOffset, Groups, PollRequest, ResetPolicy, TopicPartition};
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::queues::{Queues, ReceiveRequest, StartAt, SubscriptionSpec};
use sluice_core::upkeep::{Janitor, JanitorConfig};
use sluice_core::{Clock, Log, LogConfig, ManualClock, NewEvent, StorageError, TopicSpec};
use sluice_local::LocalObjectStore;

use crate::wal_vfs::{self, WalSyncs};

const TOPIC: &str = "amps";
const SUB: &str = "work";
const GROUP: &str = "readers";
const START_MS: i64 = 1_000_000;
/// Requests per seed, at most.
const MAX_REQUESTS: usize = 120;
const DEFAULT_CUTS: u64 = 60;
const RETENTION_MS: i64 = 1_500;

/// One answered write: when, whether the store could defer its fsync, and a digest of
/// every row of the store after it.
struct Answered {
    at_ms: i64,
    deferred: bool,
    rows: u64,
    /// The WAL's length once it was committed.
    wal_len: u64,
}

/// The store under test, recording every write it answers (one request at a time: nothing
/// else writes between a write and the rows read after it).
struct Recorder {
    inner: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    db: Mutex<rusqlite::Connection>,
    wal: PathBuf,
    answered: Mutex<Vec<Answered>>,
}

impl Recorder {
    fn record<T>(&self, deferred: bool, answer: Result<T, StorageError>) -> Result<T, StorageError> {
        if answer.is_ok() {
            let rows = rows(&self.db.lock().unwrap());
            let wal_len = std::fs::metadata(&self.wal).unwrap().len();
            self.answered.lock().unwrap().push(Answered { at_ms: self.clock.now_ms(), deferred, rows, wal_len });
        }
        answer
    }
}

#[async_trait]
impl StateStore for Recorder {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        self.inner.get(key).await
    }
    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        self.inner.query(query).await
    }
    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let answer = self.inner.write(ops).await;
        self.record(false, answer)
    }
    async fn write_deferred(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let answer = self.inner.write_deferred(ops).await;
        self.record(true, answer)
    }
    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        let answer = self.inner.delete_many(keys).await;
        self.record(false, answer)
    }
    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        let answer = self.inner.purge_expired(limit).await;
        self.record(false, answer)
    }
}

/// A digest of every row of the database `conn` reads, expired ones included.
fn rows(conn: &rusqlite::Connection) -> u64 {
    let mut stmt = conn.prepare_cached("SELECT pk, sk, value, version, expires_ms FROM items ORDER BY pk, sk").unwrap();
    let mut hasher = DefaultHasher::new();
    let mut rows = stmt.query([]).unwrap();
    while let Some(row) = rows.next().unwrap() {
        (row.get::<_, String>(0).unwrap(), row.get::<_, String>(1).unwrap()).hash(&mut hasher);
        (row.get::<_, Vec<u8>>(2).unwrap(), row.get::<_, i64>(3).unwrap()).hash(&mut hasher);
        row.get::<_, Option<i64>>(4).unwrap().hash(&mut hasher);
    }
    hasher.finish()
}

/// How the cuts went, over every seed.
#[derive(Debug, Default)]
pub(crate) struct StateTally {
    cuts: u64,
    writes: u64,
    deferred: u64,
    /// Writes answered, then undone by the cut (all inside their window).
    lost: u64,
    /// Cuts that undid at least one answered write.
    cuts_losing: u64,
    /// The oldest answer a cut undid, in ms before the cut.
    oldest_lost_ms: i64,
    janitor_work: usize,
    tails: BTreeMap<&'static str, u64>,
}

impl StateTally {
    fn absorb(&mut self, other: StateTally) {
        self.cuts += other.cuts;
        self.writes += other.writes;
        self.deferred += other.deferred;
        self.lost += other.lost;
        self.cuts_losing += other.cuts_losing;
        self.oldest_lost_ms = self.oldest_lost_ms.max(other.oldest_lost_ms);
        self.janitor_work += other.janitor_work;
        for (k, n) in other.tails {
            *self.tails.entry(k).or_default() += n;
        }
    }
}

/// The member of the group the workload polls as, and what it holds.
#[derive(Default)]
struct Member {
    id: Option<String>,
    generation: u64,
    positions: BTreeMap<TopicPartition, u64>,
}

fn keyed_events(rng: &mut StdRng) -> Vec<NewEvent> {
    (0..rng.gen_range(1..=3))
        .map(|_| NewEvent {
            key: Some(Bytes::from(format!("key-{}", rng.gen_range(0..8)))),
            headers: Vec::new(),
            value: Bytes::from(vec![b'a' + rng.gen_range(0..26u8); rng.gen_range(1..200)]),
            value_is_json: false,
            timestamp_ms: None,
            partition: None,
        })
        .collect()
}

struct World {
    log: Log,
    queues: Queues,
    groups: Groups,
    janitor: Janitor,
    clock: Arc<ManualClock>,
    held: Vec<String>,
    member: Member,
    /// Segments the janitor expired or merged and index items it removed.
    janitor_work: usize,
}

impl World {
    async fn poll(&mut self) {
        let req = PollRequest {
            group: GROUP.into(),
            member_id: self.member.id.clone(),
            topics: vec![TOPIC.into()],
            max_events: 10,
            max_bytes: 1 << 20,
            wait_ms: 0,
            reset: ResetPolicy::Earliest,
            session_timeout_ms: None,
            auto_commit: true,
            positions: Some(self.member.positions.clone()),
            instance_id: None,
        };
        match self.groups.poll(&req).await {
            Ok(answer) => {
                (self.member.id, self.member.generation) = (Some(answer.member_id), answer.generation);
                for e in answer.events {
                    let at = TopicPartition { topic: e.topic, partition: e.event.partition };
                    self.member.positions.insert(at, e.event.offset + 1);
                }
            }
            Err(_) => self.member = Member::default(),
        }
    }

    async fn commit(&mut self) {
        let Some(id) = self.member.id.clone() else { return };
        let offsets: Vec<CommitOffset> = (self.member.positions.iter())
            .map(|(at, &offset)| CommitOffset {
                topic: at.topic.clone(),
                partition: at.partition,
                offset,
                metadata: None,
            })
            .collect();
        if !offsets.is_empty() {
            let _ = self.groups.commit(GROUP, &id, self.member.generation, &offsets).await;
        }
    }

    async fn receive(&mut self, rng: &mut StdRng) {
        let req = ReceiveRequest { max_messages: rng.gen_range(1..=5), wait_ms: 0, visibility_timeout_ms: None };
        if let Ok(messages) = self.queues.receive(TOPIC, SUB, &req).await {
            self.held.extend(messages.into_iter().map(|m| m.receipt));
        }
    }

    async fn settle(&mut self, rng: &mut StdRng, ack: bool) {
        let n = rng.gen_range(0..=self.held.len());
        let receipts: Vec<String> = self.held.drain(..n).collect();
        if receipts.is_empty() {
            return;
        }
        let _ = if ack {
            self.queues.ack(TOPIC, SUB, &receipts).await
        } else {
            self.queues.nack(TOPIC, SUB, &receipts, 0).await
        };
    }

    /// One request, or the clock moving on.
    async fn step(&mut self, rng: &mut StdRng, window: u64) {
        match rng.gen_range(0..12) {
            0 => {
                self.log.publish(TOPIC, keyed_events(rng), None).await.expect("publish");
            }
            1 => self.receive(rng).await,
            2 | 3 => self.settle(rng, true).await,
            4 => self.settle(rng, false).await,
            5 | 6 => self.poll().await,
            7 => self.commit().await,
            8 => {
                let done = self.janitor.run(1000).await.expect("janitor");
                self.janitor_work += done.segments_expired + done.segments_merged + done.index_items_removed;
            }
            // Mostly short moves, so a cut often falls inside a window with writes in it.
            9 | 10 => self.advance(rng.gen_range(1..=window as i64 / 4 + 1)).await,
            _ => self.advance(rng.gen_range(0..=window as i64 + 100)).await,
        }
    }

    /// A request whose write may be deferred (an ack, a heartbeat, a commit), and a short
    /// move of the clock.
    async fn last_moments(&mut self, rng: &mut StdRng, window: u64) {
        match rng.gen_range(0..3) {
            0 => self.settle(rng, true).await,
            1 => self.poll().await,
            _ => self.commit().await,
        }
        self.advance(rng.gen_range(0..=window as i64 / 3)).await;
    }

    /// Moves the clock on by `ms`, and lets the store's tick run.
    async fn advance(&self, ms: i64) {
        self.clock.advance(ms);
        tokio::task::yield_now().await;
    }
}

impl World {
    /// The topic, its subscription, and the log, queues, groups and janitor on `store`.
    async fn set_up(store: Arc<dyn StateStore>, objects: Arc<LocalObjectStore>, clock: Arc<ManualClock>) -> Self {
        let log = Log::new(store.clone(), objects.clone(), clock.clone(), LogConfig::default());
        // A short retention, so the janitor's runs expire segments as the clock moves on.
        let spec = TopicSpec { partitions: 3, retention_ms: Some(RETENTION_MS), retention_bytes: None };
        log.create_topic(TOPIC, spec).await.unwrap();
        let queues = Queues::new(log.clone());
        let sub = SubscriptionSpec { start: StartAt::Earliest, max_receive_count: 3, ..SubscriptionSpec::default() };
        queues.create(TOPIC, SUB, sub).await.unwrap();
        let janitor = Janitor::new(store, objects, clock.clone(), JanitorConfig::default());
        let groups = Groups::new(log.clone());
        let (held, member) = (Vec::new(), Member::default());
        World { log, queues, groups, janitor, clock, held, member, janitor_work: 0 }
    }
}

/// One seed: set up, run requests until the cut, rebuild the disk, check it.
fn state_cut(seed: u64, tally: &mut StateTally) {
    let mut rng = StdRng::seed_from_u64(seed);
    let window: u64 = [0, 200, 50][seed as usize % 3];
    let root = tempfile::tempdir().unwrap();
    let work = root.path().canonicalize().unwrap().join("data");
    let clock = Arc::new(ManualClock::new(START_MS));
    let rt = crate::runtime();
    let (db_path, wal) = (work.join("state.sqlite3"), work.join("state.sqlite3-wal"));
    let requests = rng.gen_range(1..=MAX_REQUESTS);
    // Opened inside the runtime, which runs the store's tick.
    let (state, objects, recorder, armed) = rt.block_on(async {
        let (state, objects) =
            sluice_local::open_with_fs(&work, clock.clone(), window, Arc::new(WalSyncs), crate::ROLL_BYTES).unwrap();
        let recorder = Arc::new(Recorder {
            inner: state.clone(),
            clock: clock.clone(),
            db: Mutex::new(rusqlite::Connection::open(&db_path).unwrap()),
            wal: wal.clone(),
            answered: Mutex::new(Vec::new()),
        });
        let mut world = World::set_up(recorder.clone(), objects.clone(), clock.clone()).await;
        // Everything before this is durable: a durable write syncs the whole WAL.
        world.log.publish(TOPIC, keyed_events(&mut rng), None).await.unwrap();
        let armed = Armed::now(&db_path, &wal, recorder.answered.lock().unwrap().len());
        for _ in 0..requests {
            world.step(&mut rng, window).await;
        }
        // The last moments before the cut: deferred writes only, often inside one window.
        for _ in 0..rng.gen_range(0..4) {
            world.last_moments(&mut rng, window).await;
        }
        tally.janitor_work += world.janitor_work;
        (state, objects, recorder, armed)
    });
    // From the last write before the workload, which is durable.
    let answered = recorder.answered.lock().unwrap().split_off(armed.writes - 1);
    let cut_ms = clock.now_ms();
    let must = must_survive(&answered, window, cut_ms);
    // The tick is due on the manual clock; on the real one it may still be running: the
    // power goes once it has synced what it must (or never, after a while: then the check fails).
    for _ in 0..5_000 {
        if wal_vfs::durable_len(&wal) >= must.checked_sub(1).map_or(0, |i| answered[i].wal_len) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // The cut: what the disk holds for certain is fixed now, whatever the tick does next.
    let durable = wal_vfs::durable_len(&wal);
    let image_root = tempfile::tempdir().unwrap();
    let image = image_root.path().join("data");
    let tail = armed.image(&work, &image, durable, &mut rng);
    drop((recorder, state, objects));
    drop(rt);

    let what = format!("seed {seed}, window {window} ms, cut at {cut_ms}");
    let survived = rows(&rusqlite::Connection::open(image.join("state.sqlite3")).unwrap());
    judge(&answered, survived, must, cut_ms, &what, tally);
    *tally.tails.entry(tail).or_default() += 1;
    crate::runtime().block_on(async {
        let (state, objects) =
            sluice_local::open(&image, clock.clone()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
        let log = Log::new(state, objects, clock, LogConfig::default());
        log.describe_topic(TOPIC).await.unwrap_or_else(|e| panic!("{what}: the topic: {e}"));
    });
}

/// How many of the `answered` writes must survive a cut at `cut_ms`: every write answered
/// at least `window` ms before it (all of them at 0), and every durable write (a publish,
/// a receive's lease, a join, the janitor's) at any window, with all before it. Answers
/// came one at a time, in commit order, so these are a prefix.
fn must_survive(answered: &[Answered], window: u64, cut_ms: i64) -> usize {
    let old = if window == 0 {
        answered.len()
    } else {
        answered.iter().filter(|a| cut_ms - a.at_ms >= window as i64).count()
    };
    old.max(answered.iter().rposition(|a| !a.deferred).map_or(0, |i| i + 1))
}

/// Checks that the rows that `survived` the cut are those after some answered write, and
/// that the first `must` writes are among them.
fn judge(answered: &[Answered], survived: u64, must: usize, cut_ms: i64, what: &str, tally: &mut StateTally) {
    let kept = answered.iter().rposition(|a| a.rows == survived);
    let kept = kept.unwrap_or_else(|| panic!("{what}: the state after the cut is no prefix of the answered writes"));
    assert!(
        kept + 1 >= must,
        "{what}: {} writes answered durable or a whole window before the cut were lost (kept {} of {})",
        must - kept - 1,
        kept + 1,
        answered.len()
    );
    tally.cuts += 1;
    tally.writes += answered.len() as u64 - 1;
    tally.deferred += answered.iter().skip(1).filter(|a| a.deferred).count() as u64;
    let lost = &answered[kept + 1..];
    tally.lost += lost.len() as u64;
    tally.cuts_losing += u64::from(!lost.is_empty());
    if let Some(oldest) = lost.first() {
        tally.oldest_lost_ms = tally.oldest_lost_ms.max(cut_ms - oldest.at_ms);
    }
}

/// The files as they stood once the workload began, which the cut may not change: the
/// database (no checkpoint writes it) and the WAL's header (no checkpoint restarts it).
struct Armed {
    db: Vec<u8>,
    wal_header: Vec<u8>,
    /// Writes answered before the workload, the last of them durable.
    writes: usize,
}

impl Armed {
    fn now(db: &Path, wal: &Path, writes: usize) -> Self {
        let wal_header = std::fs::read(wal).unwrap()[..32].to_vec();
        Self { db: std::fs::read(db).unwrap(), wal_header, writes }
    }

    /// Writes at `image` the data directory `work` as a cut leaves it: the WAL's first
    /// `durable` bytes, then its unsynced tail dropped, kept, torn or overwritten. Answers
    /// what became of the tail.
    fn image(&self, work: &Path, image: &Path, durable: u64, rng: &mut StdRng) -> &'static str {
        let (db, wal) = (work.join("state.sqlite3"), work.join("state.sqlite3-wal"));
        assert_eq!(std::fs::read(&db).unwrap(), self.db, "a checkpoint ran: the workload is too big for this model");
        let seen = std::fs::read(&wal).unwrap();
        assert_eq!(seen[..32], self.wal_header[..], "the WAL restarted: the workload is too big for this model");
        copy_dir(work, image);
        let (synced, tail) = seen.split_at(usize::try_from(durable).unwrap().min(seen.len()));
        let mut bytes = synced.to_vec();
        let cut = if tail.is_empty() { 0 } else { rng.gen_range(0..tail.len()) };
        let what = match (tail.is_empty(), rng.gen_range(0..5)) {
            (true, _) => "none",
            (false, 0) => "dropped",
            (false, 1) => {
                bytes.extend_from_slice(tail);
                "kept"
            }
            (false, 2) => {
                bytes.extend_from_slice(&tail[..cut]);
                "torn"
            }
            (false, 3) => {
                bytes.extend_from_slice(&tail[..cut]);
                bytes.extend((cut..tail.len()).map(|_| rng.gen::<u8>()));
                "garbled"
            }
            (false, _) => {
                bytes.extend_from_slice(&tail[..cut]);
                bytes.resize(seen.len(), 0);
                "zeroed"
            }
        };
        std::fs::write(image.join("state.sqlite3-wal"), bytes).unwrap();
        what
    }
}

/// Copies `from` to `to`, SQLite's shared-memory index left out (recovery rebuilds it) and
/// its WAL left to [`Armed::image`]. Blob files are copied as they stand (their power cut is
/// the other test's).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            copy_dir(&path, &to.join(&name));
        } else if !name.ends_with("-shm") && !name.ends_with("-wal") {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

#[test]
fn given_power_cuts_of_the_state_when_reopened_then_only_writes_inside_the_sync_window_are_lost_and_as_a_suffix() {
    wal_vfs::install();
    let started = std::time::Instant::now();
    let seeds: Vec<u64> = match crate::env("SLUICE_STATE_SEED") {
        Some(seed) => vec![seed],
        None => (0..crate::env("SLUICE_STATE_CUTS").unwrap_or(DEFAULT_CUTS)).collect(),
    };
    let tallies: Vec<StateTally> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..crate::THREADS)
            .map(|k| {
                let seeds: Vec<u64> = seeds.iter().copied().skip(k).step_by(crate::THREADS).collect();
                s.spawn(move || {
                    let mut tally = StateTally::default();
                    for seed in seeds {
                        state_cut(seed, &mut tally);
                    }
                    tally
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut tally = StateTally::default();
    for t in tallies {
        tally.absorb(t);
    }
    println!("state power cuts in {:.1?}: {tally:?}", started.elapsed());
    if seeds.len() as u64 >= DEFAULT_CUTS {
        // Not vacuous: deferred writes were answered, some cuts undid some of them, and the
        // janitor's runs did work.
        assert!(tally.deferred >= 100 && tally.cuts_losing >= 3, "too few losses to prove anything: {tally:?}");
        assert!(tally.janitor_work >= 20, "the janitor did too little to prove anything: {tally:?}");
    }
}

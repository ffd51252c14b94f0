//! The simulation: a world of processes (each its own `Log`, committer, caches, `Groups`,
//! `Queues` and `Janitor` over a faulty view of the shared in-memory stores), logical clients
//! that call into them, a scheduler that picks who acts next from the seed, and a checker
//! that holds every answer against a model of the promises in docs/API.md and docs/DESIGN.md.
//!
//! One step: the scheduler either starts an operation of an idle client (a task on the
//! single-threaded runtime), advances the manual clock, or crashes a process; then it lets
//! the runtime run a fixed number of turns, and checks every answer that arrived. Operations
//! span steps, so many are in flight at once, interleaved by the fault layer's yields. Every
//! few steps the checker also reads the stores directly (the ground truth: no faults) and
//! checks the log's invariants there. At the end the faults stop, everything in flight is
//! drained, the janitor runs to completion, queues are drained, and the end-state promises
//! are checked.

use sluice_core::Code;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use sluice_core::groups::{
    CommitOffset, GroupDescription, Groups, PollAnswer, PollRequest, ResetPolicy, SeekTarget, TopicPartition,
};
use sluice_core::layout::{self, HeadRecord, TopicRecord};
use sluice_core::ports::state::StateStore;
use sluice_core::queues::{
    Backoff, DeadLetterPage, Message, Ordering as KeyOrdering, Queues, ReceiptError, ReceiveRequest, StartAt,
    Subscription, SubscriptionDescription, SubscriptionRecord, SubscriptionSpec, VisibilityResult,
};
use sluice_core::segment::{decode_segment, Record};
use sluice_core::upkeep::{Janitor, JanitorConfig, UpkeepReport};
use sluice_core::{
    Clock, Error, IdempotencyKey, Log, LogConfig, NewEvent, ObjectStore, OffsetQuery, Position, ReadBatch, ReadRequest,
    SeededRandom, StorageError, TopicConfig, TopicSpec,
};

use crate::clock::SimClock;
use crate::fault::{Chaos, FaultConfig, FaultyObjects, FaultyStore, Life};
use crate::mem::{MemObjects, MemStore};
use crate::rng::Rng;
use crate::trace::Trace;

const T0: i64 = 1_767_225_600_000;
const TOPIC_A: &str = "a";
const TOPIC_B: &str = "b";
const GROUP: &str = "g";
const SUB_Q: &str = "q";
const SUB_QK: &str = "qk";
/// Scheduler turns the runtime gets after each step.
const TURNS_PER_STEP: usize = 12;

/// How a run is made.
#[derive(Debug, Clone)]
pub struct Options {
    pub steps: u64,
    /// Keep every trace line (for `--trace` and the determinism test).
    pub keep_trace: bool,
    /// Properties not checked (their violations are counted but do not fail the seed).
    pub allow: BTreeSet<String>,
    /// No faults at all (a baseline: failures then are the core's, not the faults').
    pub no_faults: bool,
}

impl Default for Options {
    fn default() -> Self {
        // A member that keeps no fetch positions skips a lost answer's events: documented (API.md).
        let allow = ["group-skip-documented".to_owned()].into_iter().collect();
        Self { steps: 2000, keep_trace: false, allow, no_faults: false }
    }
}

/// A broken promise, where it was seen.
#[derive(Debug, Clone)]
pub struct Violation {
    pub step: u64,
    pub property: &'static str,
    pub detail: String,
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub seed: u64,
    pub violation: Option<Violation>,
    /// Violations of allowed properties (not failing the seed).
    pub allowed: Vec<Violation>,
    pub hash: u64,
    pub trace_lines: u64,
    pub lines: Vec<String>,
    pub stats: BTreeMap<&'static str, u64>,
}

/// Runs one seed on a fresh single-threaded runtime.
pub fn run_seed(seed: u64, options: &Options) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
    let options = options.clone();
    rt.block_on(async move {
        let mut world = World::new(seed, options);
        world.run().await;
        world.finish()
    })
}

// ---------------------------------------------------------------------------
// Operations and their answers.

/// Some fields are only read where the trace prints an operation (through `Debug`).
#[allow(dead_code)]
#[derive(Debug, Clone)]
enum Act {
    Publish {
        topic: &'static str,
        req: u64,
    },
    Read {
        topic: &'static str,
        partition: u32,
        offset: u64,
    },
    Lookup {
        topic: &'static str,
        partition: u32,
        ts: i64,
        head0: HeadRecord,
    },
    Janitor,
    Poll {
        auto_commit: bool,
    },
    Commit {
        generation: u64,
        offsets: Vec<(u32, u64)>,
        member: String,
    },
    Leave {
        member: String,
    },
    Seek {
        target: SeekTarget,
    },
    GDescribe,
    GDelete,
    Receive {
        sub: &'static str,
        visibility: u64,
    },
    Settle {
        sub: &'static str,
        how: SettleHow,
        held: Vec<Held>,
    },
    /// Acks of `held` riding on a receive (`ack_and_receive`).
    AckNext {
        sub: &'static str,
        visibility: u64,
        held: Vec<Held>,
    },
    QDescribe {
        sub: &'static str,
    },
    Redrive {
        sub: &'static str,
    },
    DeadLetters {
        sub: &'static str,
    },
    SubDelete {
        sub: &'static str,
    },
    SubCreate {
        sub: &'static str,
    },
    TopicDelete {
        topic: &'static str,
    },
    TopicCreate {
        topic: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SettleHow {
    Ack,
    Nack(u64),
    Visibility(u64),
}

/// An answer per receipt.
type Acks = Vec<Result<(), ReceiptError>>;

enum Res {
    Publish(Result<Vec<Position>, Error>),
    Read(Result<ReadBatch, Error>),
    Lookup(Result<u64, Error>),
    Janitor(Result<UpkeepReport, StorageError>),
    Poll(Result<PollAnswer, Error>),
    Unit(Result<(), Error>),
    Seek(Result<Vec<(u32, u64)>, Error>),
    GDescribe(Result<GroupDescription, Error>),
    Receive(Result<Vec<Message>, Error>),
    Acks(Result<Acks, Error>),
    AckNext(Result<(Acks, Vec<Message>), Error>),
    Vis(Result<Vec<VisibilityResult>, Error>),
    QDescribe(Result<SubscriptionDescription, Error>),
    Count(Result<u64, Error>),
    Dlq(Result<DeadLetterPage, Error>),
    SubCreate(Result<(Subscription, bool), Error>),
    TopicCreate(Result<(TopicConfig, bool), Error>),
    /// The process serving it crashed: the answer never came.
    Crashed,
}

struct Inflight {
    client: usize,
    pid: usize,
    /// A long poll: it waits on its process's commit notifications.
    long: bool,
    act: Act,
    start_seq: u64,
    start_ms: i64,
    start_step: u64,
    /// The topic record (id, version, live) as the op began, for ops on one topic.
    topic0: Option<(u64, u64, bool)>,
    /// The groups' "touch" counter (seeks and deletes) as the op began.
    touch0: u64,
    handle: tokio::task::JoinHandle<()>,
}

/// What the completion handler knows of an op.
struct Done {
    client: usize,
    act: Act,
    start_seq: u64,
    end_seq: u64,
    start_ms: i64,
    end_ms: i64,
    topic0: Option<(u64, u64, bool)>,
    touch0: u64,
    res: Res,
}

// ---------------------------------------------------------------------------
// Clients.

/// `count` is only read where the trace prints a held message (through `Debug`).
#[allow(dead_code)]
#[derive(Debug, Clone)]
struct Held {
    receipt: String,
    sub_id: u64,
    partition: u32,
    offset: u64,
    nonce: u64,
    count: u32,
}

enum Kind {
    Publisher { topic: &'static str, style: u8, retry: Option<u64> },
    Replayer { topic: &'static str, cursors: Vec<u64> },
    Lookup { topic: &'static str },
    Janitor,
    Member(Member),
    GroupAdmin,
    Worker { sub: &'static str, holding: Vec<Held>, slow: bool },
    QueueAdmin,
    TopicAdmin,
}

#[derive(Default)]
struct Member {
    id: Option<String>,
    generation: u64,
    assignment: Vec<TopicPartition>,
    delivered_max: BTreeMap<u32, u64>,
    session: u64,
    auto: bool,
    /// Sends its fetch positions with each poll (a client that keeps none skips a lost answer's events).
    keeps_positions: bool,
    /// Its stable name (Kafka's `group.instance.id`), if it has one.
    instance: Option<String>,
    /// The latest clock time a heartbeat of this member may have been written at.
    last_poll_end_ms: i64,
}

struct Client {
    kind: Kind,
    busy: bool,
    /// The process it talks to (a client retries elsewhere when its process crashed).
    pid: usize,
}

struct Process {
    life: Arc<Life>,
    log: Log,
    groups: Groups,
    queues: Queues,
    janitor: Janitor,
}

// ---------------------------------------------------------------------------
// The model.

struct EventInfo {
    topic: &'static str,
    key: Option<Bytes>,
    ts: Option<i64>,
    ts_window: (i64, i64),
    value: Bytes,
    partition: Option<u32>,
    idempotent: bool,
    /// Refused with a 4xx: must never appear.
    refused: bool,
}

struct Request {
    events: Vec<u64>,
    idem: Option<String>,
    first_answer: Option<(u64, Vec<Position>)>,
    /// An attempt's answer was lost: it may have landed.
    uncertain: bool,
    /// The highest offsets acknowledged (by topic id and partition) when the latest attempt began.
    floor: BTreeMap<(u64, u32), u64>,
}

/// A commit answered ok, as the checker saw it.
struct CommitSeen {
    value: u64,
    member: String,
    /// The seq at which its answer was seen.
    end: u64,
    /// The group's touch count as it began (a seek or delete since may undo it).
    touch: u64,
    /// The store's durable-write count when its answer was seen: a power cut before the
    /// count grows may undo it, as an ack.
    durable: u64,
}

#[derive(Default)]
struct GroupModel {
    delivered: BTreeMap<u32, BTreeSet<u64>>,
    excused_below: BTreeMap<u32, u64>,
    max_generation: u64,
    /// Polls of members that keep no positions whose answers were lost: those may skip
    /// events, as documented.
    lossy_polls: u64,
    /// End seqs of group deletes answered ok.
    resets: Vec<u64>,
    /// (start and end seq of a poll answered, its generation).
    max_generation_history: Vec<(u64, u64, u64)>,
    assignments: BTreeMap<(String, u64), Vec<TopicPartition>>,
    left: BTreeMap<String, u64>,
    /// Commits answered ok, by partition.
    commits_ok: BTreeMap<u32, Vec<CommitSeen>>,
    last_seen: BTreeMap<u32, (u64, u64)>,
    touch: u64,
    seeks_in_flight: u32,
    deletes_in_flight: u32,
}

#[derive(Debug, Clone, Default)]
struct Delivery {
    nonce: u64,
    count: u32,
    start_seq: u64,
    end_seq: u64,
    /// A lower bound of when its window ends (clock ms).
    until_lo: i64,
    /// The start seq of the first release-like op on it (ack, nack, visibility 0), if any.
    release_seq: Option<u64>,
    /// The start seq of the first ack of it, whatever its answer.
    ack_seq: Option<u64>,
    acked_ok: Option<u64>,
    /// The store's durable-write count when its ack was seen answered ok: a power cut
    /// before the count grows may undo that ack (`MemStore::power_cut`).
    ack_durable: u64,
    ack_maybe: bool,
}

#[derive(Default)]
struct MsgModel {
    deliveries: Vec<Delivery>,
}

struct SubModel {
    name: &'static str,
    record: SubscriptionRecord,
    msgs: BTreeMap<(u32, u64), MsgModel>,
    redrive_seqs: Vec<u64>,
    redrives_in_flight: u32,
    /// End seqs of receives whose answer was lost: each may have delivered (to nobody) any message.
    lost_receives: Vec<u64>,
}

pub(crate) struct World {
    seed: u64,
    options: Options,
    rng: Rng,
    trace: Trace,
    clock: Arc<SimClock>,
    mem: MemStore,
    objects: MemObjects,
    chaos: Arc<Chaos>,
    procs: Vec<Process>,
    incarnations: u64,
    clients: Vec<Client>,
    inflight: BTreeMap<u64, Inflight>,
    done: Arc<Mutex<Vec<(u64, Res)>>>,
    next_op: u64,
    seq: u64,
    step: u64,
    jconfig: JanitorConfig,
    topic_specs: BTreeMap<&'static str, TopicSpec>,
    sub_specs: BTreeMap<&'static str, SubscriptionSpec>,
    /// SUB_Q's content filter; SUB_QK has none.
    q_filter: SimFilter,
    // model
    events: BTreeMap<u64, EventInfo>,
    requests: BTreeMap<u64, Request>,
    facts: BTreeMap<(u64, u32, u64), u64>,
    placed: BTreeMap<(u64, u64), (u32, u64)>,
    acked_max: BTreeMap<(u64, u32), u64>,
    /// Acked events: (topic id, partition, offset) → event, for the never-lost check.
    acked: BTreeMap<(u64, u32, u64), u64>,
    topic_ids: BTreeMap<&'static str, BTreeSet<u64>>,
    group: GroupModel,
    subs: BTreeMap<u64, SubModel>,
    violation: Option<Violation>,
    allowed: Vec<Violation>,
    stats: BTreeMap<&'static str, u64>,
    next_event: u64,
    next_req: u64,
    /// The op about to be spawned is a long poll.
    long_next: bool,
    /// Chance that an answer is lost on its way back to the client (an HTTP timeout: the
    /// operation applied, the client cannot tell), drawn from a generator of its own so the
    /// rest of a seed's schedule is the same with and without it.
    answers_lost: f64,
    answers: Rng,
}

/// A content filter on SUB_Q, and the model's own answer to whether an event passes it
/// (written out, not by asking `sluice_core::filter`: the filter's semantics have tests of
/// their own; here the queue's use of it is under test, under faults).
#[derive(Clone, Copy, Debug, PartialEq)]
enum SimFilter {
    None,
    /// `{"key": ["k1", "k3"]}`: keyed events of two keys; unkeyed ones never.
    Keys,
    /// Key `k4`, or a value whose pad is at least `PAD` characters long.
    KeyOrLongPad,
}

impl SimFilter {
    const PAD: usize = 100;

    fn draw(rng: &mut Rng) -> Self {
        match rng.weighted(&[50, 25, 25]) {
            0 => SimFilter::None,
            1 => SimFilter::Keys,
            _ => SimFilter::KeyOrLongPad,
        }
    }

    fn pattern(self) -> Option<serde_json::Value> {
        let long_pad = format!("*{}", "x".repeat(Self::PAD));
        match self {
            SimFilter::None => None,
            SimFilter::Keys => Some(serde_json::json!({"key": ["k1", "k3"]})),
            SimFilter::KeyOrLongPad => Some(serde_json::json!({"$or": [
                {"key": [{"prefix": "k4"}]},
                {"value": {"pad": [{"wildcard": long_pad}]}},
            ]})),
        }
    }

    fn passes(self, event: &EventInfo) -> bool {
        let key = event.key.as_deref();
        match self {
            SimFilter::None => true,
            SimFilter::Keys => matches!(key, Some(b"k1" | b"k3")),
            SimFilter::KeyOrLongPad => {
                let pad = serde_json::from_slice::<serde_json::Value>(&event.value)
                    .ok()
                    .and_then(|v| v["pad"].as_str().map(str::len));
                key == Some(b"k4") || pad.is_some_and(|n| n >= Self::PAD)
            }
        }
    }
}

fn code(e: &Error) -> String {
    match e {
        Error::Invalid { code, .. } | Error::TooLarge { code, .. } => code.as_str().to_owned(),
        Error::NotFound { code, .. } | Error::Conflict { code, .. } => code.as_str().to_owned(),
        Error::TopicNotFound(_) => "topic_not_found".into(),
        Error::PartitionNotFound { .. } => "partition_not_found".into(),
        Error::GroupNotFound(_) => "group_not_found".into(),
        Error::SubscriptionNotFound { .. } => "subscription_not_found".into(),
        Error::TopicExists(_) => "topic_exists".into(),
        Error::IdempotencyKeyReused(_) => "idempotency_key_reused".into(),
        Error::OffsetOutOfRange { offset, log_start_offset, high_watermark } => {
            format!("416({offset} not in {log_start_offset}..={high_watermark})")
        }
        Error::Corrupt(m) => format!("corrupt({m})"),
        Error::Throttled(_) => "throttled".into(),
        Error::Unavailable(e) => format!("unavailable({e})"),
    }
}

/// A 5xx or 429: the request may or may not have been applied.
fn uncertain(e: &Error) -> bool {
    matches!(e, Error::Throttled(_) | Error::Unavailable(_))
}

fn receipt_parts(receipt: &str) -> Option<(u64, u32, u64, u64, u32)> {
    let b = URL_SAFE_NO_PAD.decode(receipt).ok()?;
    if b.len() < 40 {
        return None;
    }
    let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap());
    let sub = u64_at(0);
    let partition = u32::from_be_bytes(b[8..12].try_into().unwrap());
    let offset = u64_at(12);
    let nonce = u64_at(20);
    let count = u32::from_be_bytes(b[36..40].try_into().unwrap());
    Some((sub, partition, offset, nonce, count))
}

fn event_id(value: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    v.get("e")?.as_u64()
}

impl World {
    fn new(seed: u64, options: Options) -> Self {
        let mut rng = Rng::new(seed);
        let trace = Trace::new(options.keep_trace);
        let clock = Arc::new(SimClock::new(T0));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let mem = MemStore::new(dyn_clock.clone());
        let objects = MemObjects::new(dyn_clock);
        let mut frng = rng.fork();
        let intensity = frng.below(4) as f64 / 3.0;
        let faults = FaultConfig {
            enabled: false,
            fail_before: 0.03 * intensity,
            throttle: 0.02 * intensity,
            lost_answer: 0.04 * intensity,
            torn_query: 0.1 + 0.4 * intensity,
            object_read: 0.03 * intensity,
            max_yields: frng.below(5) as u32,
        };
        let chaos = Arc::new(Chaos::new(frng.next_u64(), faults, trace.clone()));
        chaos.set_verbose(std::env::var_os("SLUICE_SIM_CALLS").is_some());
        let jconfig = JanitorConfig {
            default_retention_ms: 7 * 24 * 3600 * 1000,
            compaction_target_bytes: rng.range(600, 4000) as u64,
            grace_ms: rng.range(1000, 20_000),
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            // Parts of a few events, so that commits and merges write segments in parts.
            part_bytes: rng.range(300, 3000) as usize,
        };
        let a = TopicSpec {
            partitions: rng.range(1, 3) as u32,
            retention_ms: Some(rng.range(30_000, 300_000)),
            retention_bytes: rng.chance(0.3).then(|| rng.range(2000, 8000)),
        };
        let b = TopicSpec { partitions: rng.range(1, 2) as u32, retention_ms: None, retention_bytes: None };
        let backoff = rng.chance(0.3).then(|| Backoff::Steps(vec![300, 1000]));
        let q_filter = SimFilter::draw(&mut Rng::new(seed.rotate_left(29) ^ 0x51f7_e12a_0b1d));
        let q = SubscriptionSpec {
            start: StartAt::Earliest,
            visibility_timeout_ms: rng.range(1000, 6000) as u64,
            max_receive_count: rng.range(1, 4) as u32,
            ordering: KeyOrdering::None,
            delay_ms: if rng.chance(0.2) { rng.range(200, 2000) as u64 } else { 0 },
            redelivery_backoff: backoff,
            filter: q_filter.pattern(),
            push: None,
        };
        let qk = SubscriptionSpec {
            start: StartAt::Earliest,
            visibility_timeout_ms: rng.range(1000, 5000) as u64,
            max_receive_count: rng.range(2, 4) as u32,
            ordering: KeyOrdering::Key,
            delay_ms: 0,
            redelivery_backoff: None,
            filter: None,
            push: None,
        };
        let mut world = Self {
            seed,
            options,
            rng,
            trace,
            clock,
            mem,
            objects,
            chaos,
            procs: Vec::new(),
            incarnations: 0,
            clients: Vec::new(),
            inflight: BTreeMap::new(),
            done: Arc::default(),
            next_op: 0,
            seq: 0,
            step: 0,
            jconfig,
            topic_specs: [(TOPIC_A, a), (TOPIC_B, b)].into_iter().collect(),
            sub_specs: [(SUB_Q, q), (SUB_QK, qk)].into_iter().collect(),
            q_filter,
            events: BTreeMap::new(),
            requests: BTreeMap::new(),
            facts: BTreeMap::new(),
            placed: BTreeMap::new(),
            acked_max: BTreeMap::new(),
            acked: BTreeMap::new(),
            topic_ids: BTreeMap::new(),
            group: GroupModel::default(),
            subs: BTreeMap::new(),
            violation: None,
            allowed: Vec::new(),
            stats: BTreeMap::new(),
            next_event: 0,
            next_req: 0,
            long_next: false,
            answers_lost: 0.03 * intensity,
            answers: Rng::new(seed.rotate_left(17) ^ 0xa45e_0f1a_5717),
        };
        let nprocs = world.rng.range(2, 3) as usize;
        for pid in 0..nprocs {
            let p = world.process(pid);
            world.procs.push(p);
        }
        world.trace.line(format!(
            "seed {seed}: {nprocs} processes, a={:?}, b={:?}, janitor target {} grace {}, faults {:?}, q={:?} ({:?}), qk={:?}",
            world.topic_specs[TOPIC_A],
            world.topic_specs[TOPIC_B],
            world.jconfig.compaction_target_bytes,
            world.jconfig.grace_ms,
            world.chaos.config(),
            world.sub_specs[SUB_Q],
            world.q_filter,
            world.sub_specs[SUB_QK],
        ));
        world
    }

    fn process(&mut self, pid: usize) -> Process {
        self.incarnations += 1;
        let life = Life::new(pid, self.incarnations);
        let clock: Arc<dyn Clock> = self.clock.clone();
        let inner_store: Arc<dyn StateStore> = Arc::new(self.mem.handle(clock.clone()));
        let inner_objects: Arc<dyn ObjectStore> = Arc::new(self.objects.handle(clock.clone()));
        let store: Arc<dyn StateStore> = Arc::new(FaultyStore::new(inner_store, self.chaos.clone(), life.clone()));
        let objects: Arc<dyn ObjectStore> =
            Arc::new(FaultyObjects::new(inner_objects, self.chaos.clone(), life.clone()));
        let random = Arc::new(SeededRandom::new(self.rng.next_u64()));
        // Half the processes keep small groups' segments inline (a low bound, so that they
        // write blobs too), half always write blobs, as the AWS functions do.
        let config = LogConfig {
            poll_interval: std::time::Duration::from_millis(50),
            inline_segment_bytes: if pid % 4 < 2 { 4 << 10 } else { 0 },
            part_bytes: self.jconfig.part_bytes,
            ..LogConfig::default()
        };
        let log = Log::with_random(store.clone(), objects.clone(), clock.clone(), random, config);
        let groups = Groups::new(log.clone());
        // Half the processes cache subscriptions as `serve` does, half read them as the functions do.
        let queues =
            if pid.is_multiple_of(2) { Queues::caching_subscriptions(log.clone()) } else { Queues::new(log.clone()) };
        let janitor = Janitor::new(store, objects, clock, self.jconfig.clone());
        Process { life, log, groups, queues, janitor }
    }

    fn add(&mut self, kind: Kind) {
        let pid = self.rng.below(self.procs.len() as u64) as usize;
        self.clients.push(Client { kind, busy: false, pid });
    }

    fn stat(&mut self, name: &'static str) {
        *self.stats.entry(name).or_insert(0) += 1;
    }

    fn violate(&mut self, property: &'static str, detail: String) {
        let v = Violation { step: self.step, property, detail };
        self.trace.line(format!("VIOLATION {} at step {}: {}", v.property, v.step, v.detail));
        if self.options.allow.contains(property) {
            if self.allowed.iter().all(|a| a.property != property) {
                self.allowed.push(v);
            }
            return;
        }
        if self.violation.is_none() {
            self.violation = Some(v);
        }
    }

    // -----------------------------------------------------------------------
    // Ground truth, read from the stores directly.

    fn topic_now(&self, name: &str) -> Option<(u64, u64, bool)> {
        let item = self.mem.peek(&layout::topic_key(name))?;
        let record: TopicRecord = layout::decode("topic", &item.value).ok()?;
        Some((record.id, item.version, record.deleted_ms.is_none()))
    }

    fn live_topic_id(&self, name: &str) -> Option<u64> {
        self.topic_now(name).filter(|t| t.2).map(|t| t.0)
    }

    fn head_now(&self, topic_id: u64, partition: u32) -> HeadRecord {
        self.mem
            .peek(&layout::head_key(topic_id, partition))
            .and_then(|i| layout::decode("head", &i.value).ok())
            .unwrap_or_default()
    }

    fn sub_now(&self, topic: &str, sub: &str) -> Option<SubscriptionRecord> {
        let tid = self.live_topic_id(topic)?;
        let item = self.mem.peek(&sluice_core::queues::subscription_key(tid, sub))?;
        // A deleted subscription may leave a tombstone (`"deleted": true`) rather than no item.
        let raw: serde_json::Value = serde_json::from_slice(&item.value).ok()?;
        if raw.get("deleted").and_then(|d| d.as_bool()) == Some(true) {
            return None;
        }
        layout::decode("subscription", &item.value).ok()
    }

    /// The partition's true log: every event from the segment holding the log start to the head,
    /// checking on the way that the index tiles it and every indexed object exists.
    fn true_log(&mut self, topic_id: u64, partition: u32) -> (HeadRecord, BTreeMap<u64, Record>) {
        let head = self.head_now(topic_id, partition);
        let mut out = BTreeMap::new();
        let items = self.mem.peek_all(&layout::segments_pk(topic_id, partition));
        let mut expect: Option<u64> = None;
        let mut problems = Vec::new();
        for item in items {
            let Ok(base) = layout::offset_of(&item.key.sk) else { continue };
            let Ok((seg, inline)) = layout::decode_segment_item(&item.value) else {
                problems.push(format!("undecodable segment item at {base}"));
                continue;
            };
            if seg.next <= head.start {
                continue;
            }
            match expect {
                None if base > head.start => {
                    problems.push(format!("first segment at {base} above start {}", head.start))
                }
                Some(e) if e != base => problems.push(format!("segment at {base} where {e} was expected")),
                _ => {}
            }
            expect = Some(seg.next);
            if !seg.parts.is_empty() {
                self.stat("checked_segments_in_parts");
            }
            let Some(bytes) = inline.or_else(|| self.objects.peek(&seg.object)) else {
                problems.push(format!("segment {base}..{} indexes object {} that is gone", seg.next, seg.object));
                continue;
            };
            for (delta, off, len) in seg.pieces() {
                let start = (seg.pos + off) as usize;
                let Some(part) = bytes.get(start..start + len as usize) else {
                    problems.push(format!("segment {base} reaches past its object"));
                    continue;
                };
                match decode_segment(&Bytes::copy_from_slice(part)) {
                    Ok(records) => {
                        for d in records {
                            out.insert(base + delta + u64::from(d.offset_delta), d.record);
                        }
                    }
                    Err(e) => problems.push(format!("segment {base} part {delta}: {e}")),
                }
            }
        }
        if head.next > head.start && expect != Some(head.next) {
            problems.push(format!("index ends at {expect:?}, head at {}", head.next));
        }
        let dense = out.range(head.start..).map(|(o, _)| *o).eq(head.start..head.next.max(head.start));
        if !dense {
            problems.push(format!("events of {}..{} not dense", head.start, head.next));
        }
        if !problems.is_empty() {
            self.violate("index-tiles", format!("topic {topic_id:x}/{partition}: {}", problems.join("; ")));
        }
        (head, out)
    }

    /// Every invariant of the stored log, and every acknowledged event still in it.
    fn check_truth(&mut self) {
        // Every key the core wrote is one the registry knows (crates/core/src/keys.rs).
        if let Some(key) = self.mem.keys().into_iter().find(|k| sluice_core::keys::kind_of(k).is_none()) {
            self.violate("unregistered-key", format!("{}/{} is no kind of item in the registry", key.pk, key.sk));
        }
        for name in [TOPIC_A, TOPIC_B] {
            let Some(tid) = self.live_topic_id(name) else { continue };
            for p in 0..self.topic_specs[name].partitions {
                let (head, log) = self.true_log(tid, p);
                for (o, record) in log.range(head.start..head.next) {
                    self.check_event(name, tid, p, *o, record, "truth");
                }
                let lost: Vec<(u64, u64)> = self
                    .acked
                    .range((tid, p, head.start)..(tid, p, head.next))
                    .filter(|(k, _)| !log.contains_key(&k.2))
                    .map(|(k, e)| (k.2, *e))
                    .collect();
                if let Some((o, e)) = lost.first() {
                    self.violate("never-lost", format!("{name}/{p}: acked event {e} at {o} is not in the log"));
                }
                let gone_too_far: Vec<u64> =
                    self.acked.range((tid, p, head.next)..(tid, p, u64::MAX)).map(|(k, _)| k.2).collect();
                if let Some(o) = gone_too_far.first() {
                    self.violate("never-lost", format!("{name}/{p}: acked offset {o} is past the head {}", head.next));
                }
                // Time retention takes only segments whose newest event is past it.
                if let (Some(ms), None) = (self.topic_specs[name].retention_ms, self.topic_specs[name].retention_bytes)
                {
                    let now = self.clock.now_ms();
                    let early: Vec<(u64, i64)> = self
                        .facts
                        .range((tid, p, 0)..(tid, p, head.start))
                        .filter_map(|(k, e)| self.event_ts(*e).map(|ts| (k.2, ts)))
                        .filter(|(_, ts)| *ts >= now - ms)
                        .collect();
                    if let Some((o, ts)) = early.first() {
                        self.violate(
                            "retention-early",
                            format!(
                                "{name}/{p}: offset {o} (ts {ts}) removed before its time (now {now}, retention {ms})"
                            ),
                        );
                    }
                }
            }
        }
    }

    fn event_ts(&self, e: u64) -> Option<i64> {
        self.events.get(&e).and_then(|i| i.ts)
    }

    /// An event seen at (topic id, partition, offset): it must be one that was published to
    /// this topic, to a partition it may land on, with its content, never refused, and the
    /// only one ever seen at this offset; and (idempotent or not) seen at one offset only.
    fn check_event(&mut self, topic: &'static str, tid: u64, p: u32, offset: u64, record: &Record, source: &str) {
        let Some(e) = event_id(&record.value) else {
            self.violate("replay-content", format!("{source}: {topic}/{p}@{offset}: not an event of the sim"));
            return;
        };
        let Some(info) = self.events.get(&e) else {
            self.violate("replay-content", format!("{source}: {topic}/{p}@{offset}: unknown event {e}"));
            return;
        };
        let mut problems = Vec::new();
        if info.topic != topic {
            problems.push(format!("published to {}", info.topic));
        }
        if info.key != record.key || info.value != record.value {
            problems.push("content differs".to_owned());
        }
        match info.ts {
            Some(ts) if ts != record.timestamp_ms => {
                problems.push(format!("timestamp {} != {ts}", record.timestamp_ms))
            }
            None if record.timestamp_ms < info.ts_window.0 || record.timestamp_ms > info.ts_window.1 => problems
                .push(format!("default timestamp {} outside the publish {:?}", record.timestamp_ms, info.ts_window)),
            _ => {}
        }
        if let Some(want) = info.partition {
            if want != p {
                problems.push(format!("belongs on partition {want}"));
            }
        }
        let refused = info.refused;
        let idempotent = info.idempotent;
        if !problems.is_empty() {
            self.violate(
                "replay-content",
                format!("{source}: {topic}/{p}@{offset}: event {e}: {}", problems.join(", ")),
            );
        }
        if refused {
            self.violate("refused-applied", format!("{source}: {topic}/{p}@{offset}: event {e} of a refused publish"));
        }
        if self.events.get(&e).is_some_and(|i| i.ts.is_none()) {
            self.events.get_mut(&e).unwrap().ts = Some(record.timestamp_ms);
        }
        match self.facts.get(&(tid, p, offset)) {
            Some(&other) if other != e => self
                .violate("offset-unique", format!("{source}: {topic}/{p}@{offset} holds event {e}, earlier {other}")),
            Some(_) => {}
            None => {
                self.facts.insert((tid, p, offset), e);
            }
        }
        match self.placed.get(&(tid, e)) {
            Some(&(p2, o2)) if (p2, o2) != (p, offset) => {
                let property = if idempotent { "idempotent-once" } else { "event-once" };
                self.violate(property, format!("{source}: event {e} at {topic}/{p}@{offset} and at {p2}@{o2}"))
            }
            Some(_) => {}
            None => {
                self.placed.insert((tid, e), (p, offset));
            }
        }
    }

    // -----------------------------------------------------------------------
    // The scheduler.

    async fn run(&mut self) {
        self.setup().await;
        self.chaos.set_enabled(!self.options.no_faults);
        for step in 1..=self.options.steps {
            self.step = step;
            self.one_step();
            let turns = self.rng.range(1, TURNS_PER_STEP as i64) as usize;
            self.settle(turns).await;
            if step % 25 == 0 {
                self.check_truth();
            }
            if self.violation.is_some() {
                return;
            }
        }
        self.step = self.options.steps + 1;
        self.chaos.set_enabled(false);
        self.trace.line("quiesce: faults off".into());
        self.quiesce().await;
        if self.violation.is_none() {
            self.end_checks().await;
        }
    }

    fn finish(self) -> Outcome {
        let (objects, bytes, deleted) = self.objects.stats();
        let mut stats = self.stats.clone();
        stats.insert("objects", objects as u64);
        stats.insert("object_bytes", bytes);
        stats.insert("objects_deleted", deleted);
        stats.insert("items", self.mem.len() as u64);
        stats.insert("facts", self.facts.len() as u64);
        Outcome {
            seed: self.seed,
            violation: self.violation,
            allowed: self.allowed,
            hash: self.trace.hash(),
            trace_lines: self.trace.count(),
            lines: self.trace.lines(),
            stats,
        }
    }

    /// Lets the runtime run `turns` turns, handling every answer as it arrives.
    async fn settle(&mut self, turns: usize) {
        for _ in 0..turns {
            tokio::task::yield_now().await;
            self.drain();
        }
    }

    fn drain(&mut self) {
        let done: Vec<(u64, Res)> = std::mem::take(&mut *self.done.lock().unwrap());
        for (id, res) in done {
            let Some(op) = self.inflight.remove(&id) else { continue };
            self.complete(op, res);
        }
    }

    fn complete(&mut self, op: Inflight, mut res: Res) {
        self.seq += 1;
        let faulty = !self.options.no_faults && self.step <= self.options.steps;
        if faulty && !matches!(res, Res::Crashed) && self.answers.chance(self.answers_lost) {
            self.trace.line(format!("step {} c{} ANSWER LOST {:?}", self.step, op.client, op.act));
            self.stat("answers_lost");
            res = Res::Crashed;
        }
        let done = Done {
            client: op.client,
            act: op.act,
            start_seq: op.start_seq,
            end_seq: self.seq,
            start_ms: op.start_ms,
            end_ms: self.clock.now_ms(),
            topic0: op.topic0,
            touch0: op.touch0,
            res,
        };
        self.clients[done.client].busy = false;
        self.handle(done);
    }

    async fn setup(&mut self) {
        let p = &self.procs[0];
        let (log, queues) = (p.log.clone(), p.queues.clone());
        for name in [TOPIC_A, TOPIC_B] {
            let (t, _) = log.create_topic(name, self.topic_specs[name]).await.expect("create topic");
            self.topic_ids.entry(name).or_default().insert(t.id);
        }
        for sub in [SUB_Q, SUB_QK] {
            queues.create(TOPIC_A, sub, self.sub_specs[sub].clone()).await.expect("create subscription");
            self.learn_sub(sub);
        }
        // The clients: who they are is drawn from the seed too.
        let r = &mut self.rng;
        let (pubs, replayers, members, workers) = (r.range(2, 4), r.range(1, 2), r.range(1, 3), r.range(2, 4));
        for i in 0..pubs {
            let style = (i % 3) as u8;
            self.add(Kind::Publisher { topic: TOPIC_A, style, retry: None });
        }
        self.add(Kind::Publisher { topic: TOPIC_B, style: 1, retry: None });
        for _ in 0..replayers {
            self.add(Kind::Replayer { topic: TOPIC_A, cursors: vec![0; 3] });
        }
        self.add(Kind::Replayer { topic: TOPIC_B, cursors: vec![0; 3] });
        self.add(Kind::Lookup { topic: TOPIC_A });
        self.add(Kind::Janitor);
        if self.rng.chance(0.5) {
            self.add(Kind::Janitor);
        }
        for _ in 0..members {
            let session = self.rng.range(6000, 12_000) as u64;
            let auto = self.rng.chance(0.5);
            let keeps_positions = self.rng.chance(0.8);
            let instance = self.rng.chance(0.5).then(|| format!("m{}", self.clients.len()));
            self.add(Kind::Member(Member { session, auto, keeps_positions, instance, ..Member::default() }));
        }
        self.add(Kind::GroupAdmin);
        for i in 0..workers {
            let sub = if i == 0 { SUB_QK } else { SUB_Q };
            let slow = self.rng.chance(0.3);
            self.add(Kind::Worker { sub, holding: Vec::new(), slow });
        }
        self.add(Kind::QueueAdmin);
        self.add(Kind::TopicAdmin);
        self.trace.line(format!("clients: {}", self.clients.len()));
    }

    fn learn_sub(&mut self, name: &'static str) -> Option<u64> {
        let record = self.sub_now(TOPIC_A, name)?;
        let id = record.id;
        self.subs.entry(id).or_insert_with(|| SubModel {
            name,
            record,
            msgs: BTreeMap::new(),
            redrive_seqs: Vec::new(),
            redrives_in_flight: 0,
            lost_receives: Vec::new(),
        });
        Some(id)
    }

    fn one_step(&mut self) {
        match self.rng.weighted(&[70, 22, 1]) {
            0 => {
                let c = self.rng.below(self.clients.len() as u64) as usize;
                if !self.clients[c].busy {
                    self.start(c);
                }
            }
            1 => {
                let ms = match self.rng.weighted(&[60, 30, 10]) {
                    0 => self.rng.range(1, 200),
                    1 => self.rng.range(200, 2000),
                    _ => self.rng.range(2000, 15_000),
                };
                self.clock.advance(ms);
                self.trace.line(format!("step {} clock +{ms} = {}", self.step, self.clock.now_ms() - T0));
            }
            _ => self.crash(),
        }
    }

    fn crash(&mut self) {
        self.drain();
        // Half the crashes that come while deferred writes are at risk are power cuts.
        if self.mem.at_risk() > 0 && self.rng.chance(0.5) {
            return self.power_cut();
        }
        let pid = self.rng.below(self.procs.len() as u64) as usize;
        self.procs[pid].life.kill();
        let victims: Vec<u64> = self.inflight.iter().filter(|(_, op)| op.pid == pid).map(|(id, _)| *id).collect();
        self.trace.line(format!("step {} CRASH p{pid} ({} ops in flight)", self.step, victims.len()));
        self.stat("crashes");
        for id in victims {
            let op = self.inflight.remove(&id).unwrap();
            op.handle.abort();
            self.complete(op, Res::Crashed);
        }
        let fresh = self.process(pid);
        self.procs[pid] = fresh;
    }

    /// A power cut: every process dies at once, and the store loses the deferred writes
    /// (acks, releases, heartbeats) no durable write has followed, or all but a prefix of
    /// them. What the contract allows then, the checker allows: an ack or a commit answered
    /// since the last durable write becomes unknown (its messages may come back, its offset
    /// may be lost), and a committed offset seen may go back (commits and the auto-commits
    /// riding on heartbeats are deferred). Nothing else: publishes, receives' leases,
    /// joins and seeks are durable.
    fn power_cut(&mut self) {
        let durable = self.mem.durable_count();
        let at_risk = self.mem.at_risk();
        for p in &self.procs {
            p.life.kill();
        }
        let victims: Vec<u64> = self.inflight.keys().copied().collect();
        for id in &victims {
            let op = self.inflight.remove(id).unwrap();
            op.handle.abort();
            self.complete(op, Res::Crashed);
        }
        let lost = self.mem.power_cut(self.rng.below(at_risk as u64 + 1) as usize);
        self.trace.line(format!(
            "step {} POWER CUT ({} ops in flight; {lost} of {at_risk} deferred writes lost)",
            self.step,
            victims.len()
        ));
        self.stat("power_cuts");
        // Nothing undone: every answer stands (the acks carried by durable writes too).
        if lost == 0 {
            self.restart_all();
            return;
        }
        for s in self.subs.values_mut() {
            for dl in s.msgs.values_mut().flat_map(|m| m.deliveries.iter_mut()) {
                if dl.acked_ok.is_some() && dl.ack_durable == durable {
                    dl.acked_ok = None;
                    dl.ack_maybe = true;
                }
            }
        }
        for list in self.group.commits_ok.values_mut() {
            list.retain(|c| c.durable != durable);
        }
        self.group.last_seen.clear();
        self.restart_all();
    }

    fn restart_all(&mut self) {
        for pid in 0..self.procs.len() {
            self.procs[pid] = self.process(pid);
        }
    }

    fn spawn<F>(&mut self, client: usize, act: Act, topic: Option<&str>, fut: F)
    where
        F: std::future::Future<Output = Res> + Send + 'static,
    {
        self.next_op += 1;
        self.seq += 1;
        let id = self.next_op;
        let done = self.done.clone();
        let pid = self.clients[client].pid;
        let topic0 = topic.and_then(|t| self.topic_now(t));
        let long = std::mem::take(&mut self.long_next);
        self.trace.line(format!(
            "step {} t={} c{client}@p{pid} start #{id} {act:?}",
            self.step,
            self.clock.now_ms() - T0
        ));
        let handle = tokio::spawn(async move {
            let res = fut.await;
            done.lock().unwrap().push((id, res));
        });
        self.clients[client].busy = true;
        let op = Inflight {
            client,
            pid,
            act,
            start_seq: self.seq,
            start_ms: self.clock.now_ms(),
            start_step: self.step,
            long,
            topic0,
            touch0: self.group.touch,
            handle,
        };
        self.inflight.insert(id, op);
    }

    /// Starts the next operation of an idle client.
    fn start(&mut self, c: usize) {
        if self.rng.chance(0.1) {
            // Now and then a client moves to another process (a load balancer's choice).
            self.clients[c].pid = self.rng.below(self.procs.len() as u64) as usize;
        }
        let pid = self.clients[c].pid;
        let (log, groups, queues, janitor) = {
            let p = &self.procs[pid];
            (p.log.clone(), p.groups.clone(), p.queues.clone(), p.janitor.clone())
        };
        let kind = std::mem::replace(&mut self.clients[c].kind, Kind::Janitor);
        let kind = match kind {
            Kind::Publisher { topic, style, retry } => {
                let req = match retry {
                    Some(req) => req,
                    None => self.new_request(topic, style),
                };
                let r = &self.requests[&req];
                let events: Vec<NewEvent> = r
                    .events
                    .iter()
                    .map(|e| {
                        let i = &self.events[e];
                        NewEvent {
                            key: i.key.clone(),
                            headers: Vec::new(),
                            value: i.value.clone(),
                            value_is_json: true,
                            timestamp_ms: i.ts.filter(|_| i.ts_window.0 == i64::MIN),
                            partition: i.partition.filter(|_| i.key.is_none()),
                        }
                    })
                    .collect();
                let idem = r.idem.clone().map(|key| IdempotencyKey { fingerprint: key.as_bytes().to_vec(), key });
                let now = self.clock.now_ms();
                for e in &r.events.clone() {
                    let info = self.events.get_mut(e).unwrap();
                    if info.ts_window.0 != i64::MIN {
                        // Stamped by the log at publish: somewhere in this attempt's window.
                        info.ts_window.0 = info.ts_window.0.min(now);
                        info.ts_window.1 = i64::MAX;
                    }
                }
                let floor = self.acked_max.clone();
                self.requests.get_mut(&req).unwrap().floor = floor;
                self.spawn(c, Act::Publish { topic, req }, Some(topic), async move {
                    Res::Publish(log.publish(topic, events, idem).await)
                });
                Kind::Publisher { topic, style, retry: Some(req) }
            }
            Kind::Replayer { topic, mut cursors } => {
                let partition = self.rng.below(u64::from(self.topic_specs[topic].partitions)) as u32;
                if self.rng.chance(0.05) {
                    cursors[partition as usize] = 0;
                }
                let offset = cursors[partition as usize];
                let wait_ms = self.long_wait(c, 0.2, 1000);
                let req = ReadRequest {
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    max_events: self.rng.range(1, 20) as usize,
                    max_bytes: if self.rng.chance(0.2) { self.rng.range(1, 2000) as usize } else { 1 << 20 },
                    wait_ms,
                };
                self.spawn(c, Act::Read { topic, partition, offset }, Some(topic), async move {
                    Res::Read(log.read(&req).await)
                });
                Kind::Replayer { topic, cursors }
            }
            Kind::Lookup { topic } => {
                let partition = self.rng.below(u64::from(self.topic_specs[topic].partitions)) as u32;
                let tid = self.live_topic_id(topic).unwrap_or(0);
                let known: Vec<i64> = self
                    .facts
                    .range((tid, partition, 0)..(tid, partition, u64::MAX))
                    .filter_map(|(_, e)| self.event_ts(*e))
                    .collect();
                let ts = if known.is_empty() || self.rng.chance(0.2) {
                    self.clock.now_ms() - self.rng.range(-2000, 60_000)
                } else {
                    *self.rng.pick(&known) + self.rng.range(-1, 1)
                };
                let head0 = self.head_now(tid, partition);
                self.spawn(c, Act::Lookup { topic, partition, ts, head0 }, Some(topic), async move {
                    Res::Lookup(log.offset(topic, partition, OffsetQuery::Timestamp(ts)).await)
                });
                Kind::Lookup { topic }
            }
            Kind::Janitor => {
                let budget = self.rng.range(10, 400) as usize;
                self.spawn(c, Act::Janitor, None, async move { Res::Janitor(janitor.step(budget).await) });
                Kind::Janitor
            }
            Kind::Member(mut m) => {
                self.start_member(c, &mut m, groups);
                Kind::Member(m)
            }
            Kind::GroupAdmin => {
                match self.rng.weighted(&[6, 2, 1]) {
                    0 => {
                        self.spawn(c, Act::GDescribe, None, async move { Res::GDescribe(groups.describe(GROUP).await) })
                    }
                    1 => {
                        let target = match self.rng.below(3) {
                            0 => SeekTarget::Earliest,
                            1 => SeekTarget::Offset(self.rng.below(40)),
                            _ => SeekTarget::Timestamp(self.clock.now_ms() - self.rng.range(0, 60_000)),
                        };
                        self.group.touch += 1;
                        self.group.seeks_in_flight += 1;
                        self.spawn(c, Act::Seek { target }, None, async move {
                            Res::Seek(groups.seek(GROUP, TOPIC_A, None, target).await)
                        })
                    }
                    _ => {
                        self.group.touch += 1;
                        self.group.deletes_in_flight += 1;
                        self.spawn(c, Act::GDelete, None, async move { Res::Unit(groups.delete(GROUP).await) })
                    }
                }
                Kind::GroupAdmin
            }
            Kind::Worker { sub, mut holding, slow } => {
                self.start_worker(c, sub, &mut holding, slow, queues);
                Kind::Worker { sub, holding, slow }
            }
            Kind::QueueAdmin => {
                let sub = if self.rng.chance(0.7) { SUB_Q } else { SUB_QK };
                match self.rng.weighted(&[5, 2, 2, 1, 1]) {
                    0 => self.spawn(c, Act::QDescribe { sub }, Some(TOPIC_A), async move {
                        Res::QDescribe(queues.describe(TOPIC_A, sub).await)
                    }),
                    1 if sub == SUB_Q => {
                        self.redrive_started(sub);
                        self.spawn(c, Act::Redrive { sub }, Some(TOPIC_A), async move {
                            Res::Count(queues.redrive(TOPIC_A, sub, None).await)
                        })
                    }
                    2 => self.spawn(c, Act::DeadLetters { sub }, Some(TOPIC_A), async move {
                        Res::Dlq(queues.dead_letters(TOPIC_A, sub, None, 1000).await)
                    }),
                    3 => self.spawn(c, Act::SubDelete { sub: SUB_Q }, Some(TOPIC_A), async move {
                        Res::Unit(queues.delete(TOPIC_A, SUB_Q).await)
                    }),
                    _ => {
                        let spec = self.sub_specs[SUB_Q].clone();
                        self.spawn(c, Act::SubCreate { sub: SUB_Q }, Some(TOPIC_A), async move {
                            Res::SubCreate(queues.create(TOPIC_A, SUB_Q, spec).await)
                        })
                    }
                }
                Kind::QueueAdmin
            }
            Kind::TopicAdmin => {
                if self.rng.chance(0.5) {
                    self.spawn(c, Act::TopicDelete { topic: TOPIC_B }, Some(TOPIC_B), async move {
                        Res::Unit(log.delete_topic(TOPIC_B).await)
                    })
                } else {
                    let spec = self.topic_specs[TOPIC_B];
                    self.spawn(c, Act::TopicCreate { topic: TOPIC_B }, Some(TOPIC_B), async move {
                        Res::TopicCreate(log.create_topic(TOPIC_B, spec).await)
                    })
                }
                Kind::TopicAdmin
            }
        };
        self.clients[c].kind = kind;
    }

    /// A wait for a long poll, if none is in flight on the client's process: tasks waiting on one
    /// process's commit notifications (a `tokio::sync::watch`) wake in a random order, so at most
    /// one may wait at a time for the history to be reproducible.
    fn long_wait(&mut self, c: usize, chance: f64, max: i64) -> u64 {
        let pid = self.clients[c].pid;
        if !self.rng.chance(chance) || self.inflight.values().any(|op| op.long && op.pid == pid) {
            return 0;
        }
        self.long_next = true;
        self.rng.range(1, max) as u64
    }

    fn redrive_started(&mut self, sub: &'static str) {
        let seq = self.seq + 1;
        for s in self.subs.values_mut().filter(|s| s.name == sub) {
            s.redrives_in_flight += 1;
            s.redrive_seqs.push(seq);
        }
    }

    fn new_request(&mut self, topic: &'static str, style: u8) -> u64 {
        self.next_req += 1;
        let req = self.next_req;
        let n = self.rng.range(1, 4);
        let partitions = self.topic_specs[topic].partitions;
        let mut ids = Vec::new();
        let explicit = self.rng.chance(0.1).then(|| self.rng.below(u64::from(partitions)) as u32);
        for _ in 0..n {
            self.next_event += 1;
            let e = self.next_event;
            let keyed = match style {
                0 => false,
                1 => true,
                _ => self.rng.chance(0.5),
            };
            let key = keyed.then(|| Bytes::from(format!("k{}", self.rng.below(5))));
            let partition = match &key {
                Some(k) => Some(sluice_core::partitioner::partition_for_key(k, partitions)),
                None => explicit,
            };
            let pad = "x".repeat(self.rng.below(200) as usize);
            let value = Bytes::from(format!("{{\"e\":{e},\"pad\":\"{pad}\"}}"));
            let explicit_ts = self.rng.chance(0.3).then(|| self.clock.now_ms() + self.rng.range(-20_000, 5000));
            let ts_window = if explicit_ts.is_some() { (i64::MIN, i64::MIN) } else { (i64::MAX, i64::MAX) };
            self.events.insert(
                e,
                EventInfo {
                    topic,
                    key,
                    ts: explicit_ts,
                    ts_window,
                    value,
                    partition,
                    idempotent: style == 2,
                    refused: false,
                },
            );
            ids.push(e);
        }
        // Unkeyed events of one request share a partition, whichever it is.
        let idem = (style == 2).then(|| format!("r{req}"));
        self.requests
            .insert(req, Request { events: ids, idem, first_answer: None, uncertain: false, floor: BTreeMap::new() });
        req
    }

    fn start_member(&mut self, c: usize, m: &mut Member, groups: Groups) {
        let choice = self.rng.weighted(&[70, 20, 4, 3]);
        match (choice, &m.id) {
            (1, Some(id)) => {
                let mut offsets: Vec<(u32, u64)> = m
                    .assignment
                    .iter()
                    .filter_map(|tp| m.delivered_max.get(&tp.partition).map(|o| (tp.partition, o + 1)))
                    .collect();
                let mut generation = m.generation;
                if self.rng.chance(0.1) && generation > 0 {
                    generation -= 1;
                }
                if self.rng.chance(0.1) {
                    // A partition it may not own (any more).
                    let p = self.rng.below(u64::from(self.topic_specs[TOPIC_A].partitions)) as u32;
                    if let Some(o) = m.delivered_max.get(&p) {
                        if offsets.iter().all(|(q, _)| *q != p) {
                            offsets.push((p, o + 1));
                        }
                    }
                }
                if offsets.is_empty() {
                    return self.poll(c, m, groups);
                }
                let commits: Vec<CommitOffset> = offsets
                    .iter()
                    .map(|&(partition, offset)| CommitOffset {
                        topic: TOPIC_A.into(),
                        partition,
                        offset,
                        metadata: None,
                    })
                    .collect();
                let member = id.clone();
                let act = Act::Commit { generation, offsets, member: member.clone() };
                self.spawn(c, act, None, async move {
                    Res::Unit(groups.commit(GROUP, &member, generation, &commits).await)
                });
            }
            (2, Some(id)) => {
                let member = id.clone();
                self.spawn(c, Act::Leave { member: member.clone() }, None, async move {
                    Res::Unit(groups.leave(GROUP, &member).await)
                });
            }
            (3, Some(id)) => {
                // Dies: never heard from again; its session runs out.
                self.trace.line(format!("step {} c{c} member {id} dies", self.step));
                m.id = None;
                m.assignment.clear();
            }
            _ => self.poll(c, m, groups),
        }
    }

    fn poll(&mut self, c: usize, m: &mut Member, groups: Groups) {
        let auto_commit = m.auto && self.rng.chance(0.7);
        let req = PollRequest {
            group: GROUP.into(),
            member_id: m.id.clone(),
            topics: vec![TOPIC_A.into()],
            max_events: self.rng.range(1, 8) as usize,
            max_bytes: 1 << 20,
            wait_ms: self.long_wait(c, 0.3, 2000),
            reset: ResetPolicy::Earliest,
            session_timeout_ms: Some(m.session),
            auto_commit,
            instance_id: m.instance.clone(),
            positions: m.keeps_positions.then(|| {
                m.delivered_max
                    .iter()
                    .map(|(p, o)| (TopicPartition { topic: TOPIC_A.into(), partition: *p }, o + 1))
                    .collect()
            }),
        };
        self.spawn(c, Act::Poll { auto_commit }, None, async move { Res::Poll(groups.poll(&req).await) });
    }

    fn start_worker(&mut self, c: usize, sub: &'static str, holding: &mut Vec<Held>, slow: bool, queues: Queues) {
        let busy_hands = holding.len();
        let choice =
            if busy_hands == 0 { 0 } else { self.rng.weighted(&[if busy_hands < 6 { 3 } else { 0 }, 5, 1, 1]) };
        if slow && choice != 0 && self.rng.chance(0.5) {
            return; // a slow handler: still working on what it holds
        }
        if choice == 0 {
            let (req, visibility) = self.receive_request(c, sub);
            self.spawn(c, Act::Receive { sub, visibility }, Some(TOPIC_A), async move {
                Res::Receive(queues.receive(TOPIC_A, sub, &req).await)
            });
            return;
        }
        let n = self.rng.range(1, holding.len() as i64) as usize;
        let mut held = Vec::new();
        for _ in 0..n {
            let i = self.rng.below(holding.len() as u64) as usize;
            held.push(holding.remove(i));
        }
        let receipts: Vec<String> = held.iter().map(|h| h.receipt.clone()).collect();
        let how = match choice {
            1 => SettleHow::Ack,
            2 => SettleHow::Nack(if self.rng.chance(0.5) { 0 } else { self.rng.range(1, 2000) as u64 }),
            _ => SettleHow::Visibility(if self.rng.chance(0.2) { 0 } else { self.rng.range(500, 8000) as u64 }),
        };
        // The release-like ops mark their deliveries before they start.
        let seq = self.seq + 1;
        for h in &held {
            if let Some(d) = self.delivery_mut(h) {
                if matches!(how, SettleHow::Ack | SettleHow::Nack(_) | SettleHow::Visibility(0)) {
                    d.release_seq.get_or_insert(seq);
                }
                if how == SettleHow::Ack {
                    d.ack_seq.get_or_insert(seq);
                }
            }
        }
        if let SettleHow::Visibility(v) = how {
            let lo = self.clock.now_ms() + v as i64;
            for h in &held {
                if let Some(d) = self.delivery_mut(h) {
                    // The new window ends at least here, but the change may not apply at all.
                    d.until_lo = d.until_lo.min(lo);
                }
            }
        }
        if how == SettleHow::Ack && self.rng.chance(0.4) {
            let (req, visibility) = self.receive_request(c, sub);
            self.spawn(c, Act::AckNext { sub, visibility, held }, Some(TOPIC_A), async move {
                Res::AckNext(queues.ack_and_receive(TOPIC_A, sub, &receipts, &req).await)
            });
            return;
        }
        let act = Act::Settle { sub, how, held };
        self.spawn(c, act, Some(TOPIC_A), async move {
            match how {
                SettleHow::Ack => Res::Acks(queues.ack(TOPIC_A, sub, &receipts).await),
                SettleHow::Nack(d) => Res::Acks(queues.nack(TOPIC_A, sub, &receipts, d).await),
                SettleHow::Visibility(v) => Res::Vis(queues.change_visibility(TOPIC_A, sub, &receipts, v).await),
            }
        });
    }

    /// A worker's receive: up to 5 messages, a long poll now and then, its own visibility
    /// timeout now and then; with the window it asks for.
    fn receive_request(&mut self, c: usize, sub: &'static str) -> (ReceiveRequest, u64) {
        let visibility = if self.rng.chance(0.3) { self.rng.range(500, 6000) as u64 } else { 0 };
        let req = ReceiveRequest {
            max_messages: self.rng.range(1, 5) as usize,
            wait_ms: self.long_wait(c, 0.3, 1500),
            visibility_timeout_ms: (visibility > 0).then_some(visibility),
        };
        (req, if visibility > 0 { visibility } else { self.sub_specs[sub].visibility_timeout_ms })
    }

    fn delivery_mut(&mut self, h: &Held) -> Option<&mut Delivery> {
        self.subs
            .get_mut(&h.sub_id)?
            .msgs
            .get_mut(&(h.partition, h.offset))?
            .deliveries
            .iter_mut()
            .find(|d| d.nonce == h.nonce)
    }

    // -----------------------------------------------------------------------
    // Answers, checked.

    fn handle(&mut self, d: Done) {
        let mut line = String::new();
        let _ = write!(line, "step {} t={} c{} done {:?}: ", self.step, d.end_ms - T0, d.client, d.act);
        match &d.res {
            Res::Publish(r) => match r {
                Ok(ps) => {
                    let _ = write!(line, "ok {:?}", ps.iter().map(|p| (p.partition, p.offset)).collect::<Vec<_>>());
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Read(r) => match r {
                Ok(b) => {
                    let _ = write!(
                        line,
                        "{} events next {} hw {} start {}",
                        b.events.len(),
                        b.next_offset,
                        b.high_watermark,
                        b.log_start_offset
                    );
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Lookup(r) => match r {
                Ok(o) => {
                    let _ = write!(line, "offset {o}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Janitor(r) => match r {
                Ok(rep) => {
                    let _ = write!(
                        line,
                        "expired {} merged {} written {} purged {} gc {}+{}",
                        rep.segments_expired,
                        rep.segments_merged,
                        rep.segments_written,
                        rep.purge.items_deleted,
                        rep.gc.objects_deleted,
                        rep.gc.orphans_deleted
                    );
                }
                Err(e) => {
                    let _ = write!(line, "{e}");
                }
            },
            Res::Poll(r) => match r {
                Ok(a) => {
                    let _ = write!(
                        line,
                        "member {} gen {} assigned {:?} events {:?}",
                        a.member_id,
                        a.generation,
                        a.assignment.iter().map(|tp| tp.partition).collect::<Vec<_>>(),
                        a.events.iter().map(|e| (e.event.partition, e.event.offset)).collect::<Vec<_>>()
                    );
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Unit(r) => match r {
                Ok(()) => line.push_str("ok"),
                Err(e) => line.push_str(&code(e)),
            },
            Res::Seek(r) => match r {
                Ok(m) => {
                    let _ = write!(line, "moved {m:?}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::GDescribe(r) => match r {
                Ok(g) => {
                    let _ = write!(
                        line,
                        "gen {} members {} committed {:?}",
                        g.generation,
                        g.members.len(),
                        g.partitions.iter().map(|p| (p.partition, p.committed)).collect::<Vec<_>>()
                    );
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Receive(r) => match r {
                Ok(ms) => {
                    let _ = write!(
                        line,
                        "{:?}",
                        ms.iter().map(|m| (m.event.partition, m.event.offset, m.receive_count)).collect::<Vec<_>>()
                    );
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Acks(r) => match r {
                Ok(rs) => {
                    let _ = write!(line, "{:?}", rs.iter().map(|r| r.is_ok()).collect::<Vec<_>>());
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::AckNext(r) => match r {
                Ok((rs, ms)) => {
                    let acks: Vec<bool> = rs.iter().map(|r| r.is_ok()).collect();
                    let got: Vec<_> = ms.iter().map(|m| (m.event.partition, m.event.offset, m.receive_count)).collect();
                    let _ = write!(line, "{acks:?} then {got:?}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Vis(r) => match r {
                Ok(rs) => {
                    let _ = write!(line, "{:?}", rs.iter().map(|r| r.is_ok()).collect::<Vec<_>>());
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::QDescribe(r) => match r {
                Ok(s) => {
                    let _ = write!(line, "{:?}", s.backlog);
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Count(r) => match r {
                Ok(n) => {
                    let _ = write!(line, "{n}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Dlq(r) => match r {
                Ok(p) => {
                    let _ = write!(line, "{:?}", p.entries.iter().map(|e| &e.id).collect::<Vec<_>>());
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::SubCreate(r) => match r {
                Ok((_, created)) => {
                    let _ = write!(line, "created {created}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::TopicCreate(r) => match r {
                Ok((t, created)) => {
                    let _ = write!(line, "id {:x} created {created}", t.id);
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Crashed => line.push_str("CRASHED"),
        }
        self.trace.line(line);
        let Done { act, .. } = &d;
        match act.clone() {
            Act::Publish { topic, req } => self.on_publish(&d, topic, req),
            Act::Read { topic, partition, offset } => self.on_read(&d, topic, partition, offset),
            Act::Lookup { topic, partition, ts, head0 } => self.on_lookup(&d, topic, partition, ts, head0),
            Act::Janitor => self.stat("janitor_steps"),
            Act::Poll { auto_commit } => self.on_poll(&d, auto_commit),
            Act::Commit { generation, offsets, member } => self.on_commit(&d, generation, &offsets, &member),
            Act::Leave { member } => self.on_leave(&d, &member),
            Act::Seek { .. } => self.on_seek(&d),
            Act::GDescribe => self.on_gdescribe(&d),
            Act::GDelete => self.on_gdelete(&d),
            Act::Receive { sub, visibility } => self.on_receive(&d, sub, visibility),
            Act::Settle { sub, how, held } => self.on_settle(&d, sub, how, &held),
            Act::AckNext { sub, visibility, held } => self.on_ack_next(d, sub, visibility, &held),
            Act::QDescribe { .. } => {}
            Act::Redrive { sub } => {
                for s in self.subs.values_mut().filter(|s| s.name == sub) {
                    s.redrives_in_flight = s.redrives_in_flight.saturating_sub(1);
                }
            }
            Act::DeadLetters { sub } => self.on_dead_letters(&d, sub),
            Act::SubDelete { .. } => {}
            Act::SubCreate { sub } => {
                if matches!(&d.res, Res::SubCreate(Ok(_))) {
                    self.learn_sub(sub);
                }
            }
            Act::TopicDelete { .. } => {}
            Act::TopicCreate { topic } => {
                if let Res::TopicCreate(Ok((t, _))) = &d.res {
                    self.topic_ids.entry(topic).or_default().insert(t.id);
                }
            }
        }
    }

    /// The topic id an op worked on, if the topic was not deleted or re-created while it ran.
    fn known_topic(&self, d: &Done, topic: &str) -> Option<u64> {
        let now = self.topic_now(topic);
        match (d.topic0, now) {
            (Some(a), Some(b)) if a == b && a.2 => Some(a.0),
            _ => None,
        }
    }

    fn on_publish(&mut self, d: &Done, topic: &'static str, req: u64) {
        let tid = self.known_topic(d, topic);
        let r = match &d.res {
            Res::Publish(r) => r,
            _ => return self.publish_uncertain(d.client, req, d.end_ms),
        };
        match r {
            Ok(positions) => {
                self.stat("publishes_acked");
                let request = &self.requests[&req];
                let events = request.events.clone();
                if positions.len() != events.len() {
                    return self.violate(
                        "publish-answer",
                        format!("request {req}: {} results for {} events", positions.len(), events.len()),
                    );
                }
                if let Some((first_tid, first)) = &request.first_answer {
                    if Some(*first_tid) == tid && first != positions {
                        self.violate(
                            "idempotent-once",
                            format!("request {req} answered {positions:?}, first {first:?}"),
                        );
                    }
                }
                // Where the events landed: per partition consecutive, in request order, after every
                // offset acknowledged before this request began.
                let mut last: BTreeMap<u32, u64> = BTreeMap::new();
                let mut unkeyed: Option<u32> = None;
                for (e, pos) in events.iter().zip(positions) {
                    let info = &self.events[e];
                    if let Some(want) = info.partition {
                        if want != pos.partition {
                            self.violate("publish-answer", format!("event {e} landed on {} not {want}", pos.partition));
                        }
                    } else if info.key.is_none() {
                        if unkeyed.is_some_and(|u| u != pos.partition) {
                            self.violate("publish-answer", format!("request {req}: unkeyed events on two partitions"));
                        }
                        unkeyed = Some(pos.partition);
                    }
                    if let Some(prev) = last.get(&pos.partition) {
                        if pos.offset != prev + 1 {
                            self.violate(
                                "publish-answer",
                                format!("request {req}: offsets {prev} then {} on {}", pos.offset, pos.partition),
                            );
                        }
                    }
                    last.insert(pos.partition, pos.offset);
                }
                let fresh = self.requests[&req].first_answer.is_none() && !self.requests[&req].uncertain;
                if let Some(tid) = tid {
                    if fresh {
                        for (p, o) in positions.iter().map(|p| (p.partition, p.offset)) {
                            // Commit order: after every offset acknowledged before this request began.
                            if let Some(&max) = self.requests[&req].floor.get(&(tid, p)) {
                                if o <= max {
                                    self.violate(
                                        "commit-order",
                                        format!("{topic}/{p}: request {req} got {o}, after {max} was acked"),
                                    );
                                }
                            }
                        }
                    }
                    for (e, pos) in events.iter().zip(positions) {
                        self.acked.insert((tid, pos.partition, pos.offset), *e);
                        match self.facts.get(&(tid, pos.partition, pos.offset)) {
                            Some(other) if other != e => self.violate(
                                "offset-unique",
                                format!("{topic}/{}@{}: acked for event {e}, held {other}", pos.partition, pos.offset),
                            ),
                            _ => {
                                self.facts.insert((tid, pos.partition, pos.offset), *e);
                            }
                        }
                        match self.placed.get(&(tid, *e)) {
                            Some(&(p2, o2)) if (p2, o2) != (pos.partition, pos.offset) => {
                                let property = if self.events[e].idempotent { "idempotent-once" } else { "event-once" };
                                self.violate(
                                    property,
                                    format!("event {e} acked at {}@{}, seen at {p2}@{o2}", pos.partition, pos.offset),
                                );
                            }
                            _ => {
                                self.placed.insert((tid, *e), (pos.partition, pos.offset));
                            }
                        }
                    }
                    for (p, o) in &last {
                        let m = self.acked_max.entry((tid, *p)).or_insert(0);
                        *m = (*m).max(*o);
                    }
                    let request = self.requests.get_mut(&req).unwrap();
                    request.first_answer.get_or_insert((tid, positions.clone()));
                }
                self.finish_request(d.client, req, d.end_ms);
            }
            Err(e) if uncertain(e) => self.publish_uncertain(d.client, req, d.end_ms),
            Err(Error::TopicNotFound(_)) if topic == TOPIC_B => {
                self.stat("publishes_404");
                self.refuse(req);
                self.finish_request(d.client, req, d.end_ms);
            }
            Err(e) => {
                self.violate("publish-refused", format!("request {req}: {}", code(e)));
                self.refuse(req);
                self.finish_request(d.client, req, d.end_ms);
            }
        }
    }

    fn refuse(&mut self, req: u64) {
        // A refusal is final only for a request no attempt of which may have landed before.
        let request = &self.requests[&req];
        if request.first_answer.is_some() || request.uncertain {
            return;
        }
        for e in request.events.clone() {
            self.events.get_mut(&e).unwrap().refused = true;
        }
    }

    fn finish_request(&mut self, client: usize, req: u64, end_ms: i64) {
        for e in self.requests[&req].events.clone() {
            let i = self.events.get_mut(&e).unwrap();
            if i.ts_window.0 != i64::MIN {
                i.ts_window.1 = end_ms;
            }
        }
        if let Kind::Publisher { retry, .. } = &mut self.clients[client].kind {
            *retry = None;
        }
    }

    /// A publish that may or may not have landed: an idempotent one is retried with the same
    /// key (it must then land once); any other is given up (its events may appear, once).
    fn publish_uncertain(&mut self, client: usize, req: u64, end_ms: i64) {
        self.stat("publishes_uncertain");
        self.requests.get_mut(&req).unwrap().uncertain = true;
        for e in self.requests[&req].events.clone() {
            let i = self.events.get_mut(&e).unwrap();
            if i.ts_window.0 != i64::MIN {
                i.ts_window.1 = end_ms;
            }
        }
        if self.requests[&req].idem.is_none() {
            if let Kind::Publisher { retry, .. } = &mut self.clients[client].kind {
                *retry = None;
            }
        }
    }

    fn on_read(&mut self, d: &Done, topic: &'static str, partition: u32, offset: u64) {
        let Res::Read(r) = &d.res else { return };
        let tid = self.known_topic(d, topic);
        let mut cursor = offset;
        match r {
            Ok(batch) => {
                self.stat("reads");
                for (i, e) in batch.events.iter().enumerate() {
                    if e.offset != offset + i as u64 || e.partition != partition {
                        return self.violate(
                            "replay-dense",
                            format!("{topic}/{partition} from {offset}: event {i} at {}/{}", e.partition, e.offset),
                        );
                    }
                }
                if let Some(tid) = tid {
                    for e in &batch.events {
                        self.check_event(topic, tid, partition, e.offset, &e.record, "replay");
                    }
                }
                if batch.next_offset < offset + batch.events.len() as u64 {
                    self.violate(
                        "replay-dense",
                        format!(
                            "{topic}/{partition}: next {} after {} events from {offset}",
                            batch.next_offset,
                            batch.events.len()
                        ),
                    );
                }
                cursor = batch.next_offset;
            }
            Err(Error::OffsetOutOfRange { offset: o, log_start_offset, high_watermark }) => {
                if (*log_start_offset..=*high_watermark).contains(o) {
                    self.violate(
                        "transient-416",
                        format!("replay {topic}/{partition}@{o}: 416 naming {log_start_offset}..={high_watermark}"),
                    );
                }
                cursor = if offset < *log_start_offset { *log_start_offset } else { 0 };
            }
            Err(Error::Corrupt(m)) => self.violate("replay-corrupt", format!("{topic}/{partition}@{offset}: {m}")),
            Err(e) if uncertain(e) => {}
            Err(Error::TopicNotFound(_)) if topic == TOPIC_B => cursor = 0,
            Err(e) => self.violate("replay-refused", format!("{topic}/{partition}@{offset}: {}", code(e))),
        }
        if let Kind::Replayer { cursors, .. } = &mut self.clients[d.client].kind {
            cursors[partition as usize] = cursor;
        }
    }

    fn on_lookup(&mut self, d: &Done, topic: &'static str, partition: u32, ts: i64, head0: HeadRecord) {
        let Res::Lookup(r) = &d.res else { return };
        let Some(tid) = self.known_topic(d, topic) else { return };
        let answer = match r {
            Ok(o) => *o,
            Err(e) if uncertain(e) => return,
            Err(e) => return self.violate("offset-by-time", format!("{topic}/{partition} ts {ts}: {}", code(e))),
        };
        self.stat("lookups");
        let (head1, log) = self.true_log(tid, partition);
        let mut problems = Vec::new();
        if answer < head0.start {
            problems.push(format!("answer {answer} below the log start {}", head0.start));
        }
        if answer > head1.next {
            problems.push(format!("answer {answer} past the head {}", head1.next));
        }
        // Offsets present all along (at or above the start at the end, below the head at the start).
        let upto = answer.min(head0.next).max(head1.start);
        if let Some((o, r)) = log.range(head1.start..upto).find(|(_, r)| r.timestamp_ms >= ts) {
            problems.push(format!("skipped offset {o} (ts {}) on the way to {answer}", r.timestamp_ms));
        }
        if answer < head0.next && answer >= head1.start {
            if let Some(r) = log.get(&answer).filter(|r| r.timestamp_ms < ts) {
                problems.push(format!("answer {answer} has ts {} < {ts}", r.timestamp_ms));
            }
        }
        if !problems.is_empty() {
            self.violate(
                "offset-by-time",
                format!(
                    "{topic}/{partition} ts {ts} (head {}..{} then {}..{}): {}",
                    head0.start,
                    head0.next,
                    head1.start,
                    head1.next,
                    problems.join("; ")
                ),
            );
        }
    }

    // ---- groups

    fn member_mut(&mut self, client: usize) -> &mut Member {
        match &mut self.clients[client].kind {
            Kind::Member(m) => m,
            _ => unreachable!("a member op of a non-member"),
        }
    }

    fn on_poll(&mut self, d: &Done, _auto_commit: bool) {
        let end_ms = d.end_ms;
        let partitions = self.topic_specs[TOPIC_A].partitions;
        let r = match &d.res {
            Res::Poll(r) => r,
            _ => {
                // Its heartbeat may have been written until now.
                let m = self.member_mut(d.client);
                m.last_poll_end_ms = end_ms;
                if !m.keeps_positions {
                    self.group.lossy_polls += 1;
                }
                return;
            }
        };
        match r {
            Ok(a) => {
                self.stat("polls");
                let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
                for tp in &a.assignment {
                    if tp.topic != TOPIC_A || tp.partition >= partitions {
                        self.violate("poll-answer", format!("assigned {tp:?}"));
                    }
                }
                for e in &a.events {
                    if !a.assignment.iter().any(|tp| tp.partition == e.event.partition) {
                        self.violate(
                            "poll-owned",
                            format!("event of {}/{} not assigned to {}", e.topic, e.event.partition, a.member_id),
                        );
                    }
                    self.check_event(TOPIC_A, tid, e.event.partition, e.event.offset, &e.event.record, "poll");
                    self.group.delivered.entry(e.event.partition).or_default().insert(e.event.offset);
                }
                self.group.max_generation = self.group.max_generation.max(a.generation);
                self.group.max_generation_history.push((d.start_seq, d.end_seq, a.generation));
                // A stable instance id rejoins under the same member id after it left.
                self.group.left.remove(&a.member_id);
                self.group.assignments.insert((a.member_id.clone(), a.generation), a.assignment.clone());
                let m = self.member_mut(d.client);
                if m.id.as_ref() != Some(&a.member_id) {
                    m.delivered_max.clear();
                }
                m.id = Some(a.member_id.clone());
                m.generation = a.generation;
                m.assignment = a.assignment.clone();
                m.last_poll_end_ms = end_ms;
                for e in &a.events {
                    let x = m.delivered_max.entry(e.event.partition).or_insert(0);
                    *x = (*x).max(e.event.offset);
                }
            }
            Err(Error::Conflict { code: Code::UnknownMember, .. }) => {
                let m = self.member_mut(d.client);
                m.id = None;
                m.assignment.clear();
            }
            Err(Error::OffsetOutOfRange { offset, log_start_offset, high_watermark }) => {
                self.violate(
                    "transient-416",
                    format!("poll with reset earliest: 416 for {offset} ({log_start_offset}..={high_watermark})"),
                );
            }
            Err(e) if uncertain(e) => {
                let m = self.member_mut(d.client);
                m.last_poll_end_ms = end_ms;
                if !m.keeps_positions {
                    self.group.lossy_polls += 1;
                }
            }
            Err(e) => {
                let c = code(e);
                if !c.contains("busy") {
                    self.violate("poll-refused", c);
                }
            }
        }
    }

    /// Every offset below `value` on `partition` was delivered to a member, excused by a seek,
    /// or removed by retention: a committed offset never skips an event (at least once).
    fn check_coverage(&mut self, partition: u32, value: u64, what: &str) {
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        let start = self.head_now(tid, partition).start;
        let floor = start.max(self.group.excused_below.get(&partition).copied().unwrap_or(0));
        let delivered = self.group.delivered.get(&partition);
        let missing: Vec<u64> = (floor..value).filter(|o| delivered.is_none_or(|s| !s.contains(o))).take(8).collect();
        if !missing.is_empty() {
            let property = if self.group.lossy_polls > 0 { "group-skip-documented" } else { "group-at-least-once" };
            self.violate(
                property,
                format!("{what}: committed {value} on {partition}, never delivered: {missing:?} (log start {start})"),
            );
        }
    }

    fn on_commit(&mut self, d: &Done, generation: u64, offsets: &[(u32, u64)], member: &str) {
        let Res::Unit(r) = &d.res else { return };
        match r {
            Ok(()) => {
                self.stat("commits_ok");
                let mut problems = Vec::new();
                // Generations and leaves known before the commit began.
                let floor = self.group.max_generation_at(d.start_seq);
                let reset_during =
                    self.group.resets.iter().any(|r| *r > d.start_seq) || self.group.deletes_in_flight > 0;
                if generation < floor && !reset_during {
                    problems.push(format!("generation {generation} < {floor} answered before it"));
                }
                match self.group.assignments.get(&(member.to_owned(), generation)) {
                    Some(a) => {
                        for (p, _) in offsets {
                            if !a.iter().any(|tp| tp.partition == *p) {
                                problems.push(format!("partition {p} not assigned to {member} in {generation}"));
                            }
                        }
                    }
                    None => problems.push(format!("no answer gave {member} generation {generation}")),
                }
                if self.group.left.get(member).is_some_and(|s| *s < d.start_seq) {
                    problems.push(format!("{member} had left"));
                }
                let m = self.member_mut(d.client);
                let expired_at = m.last_poll_end_ms + m.session as i64;
                if d.start_ms > expired_at {
                    problems.push(format!("{member}'s session ended at {}", expired_at - T0));
                }
                if !problems.is_empty() {
                    self.violate("fenced-commit", format!("commit by {member}: {}", problems.join("; ")));
                }
                let durable = self.mem.durable_count();
                for &(p, v) in offsets {
                    self.check_coverage(p, v, &format!("commit by {member}"));
                    // A seek or delete that began after this commit did may have applied before it.
                    let seen =
                        CommitSeen { value: v, member: member.to_owned(), end: d.end_seq, touch: d.touch0, durable };
                    self.group.commits_ok.entry(p).or_default().push(seen);
                }
            }
            Err(e) if uncertain(e) => {}
            Err(Error::Conflict { .. } | Error::GroupNotFound(_)) => self.stat("commits_fenced"),
            Err(e) => self.violate("commit-refused", code(e)),
        }
    }

    fn on_leave(&mut self, d: &Done, member: &str) {
        if let Res::Unit(Ok(())) = &d.res {
            self.group.left.insert(member.to_owned(), d.end_seq);
        }
        let m = self.member_mut(d.client);
        if !matches!(&d.res, Res::Unit(Err(e)) if uncertain(e)) {
            m.id = None;
            m.assignment.clear();
        }
    }

    fn on_seek(&mut self, d: &Done) {
        self.group.touch += 1;
        self.group.seeks_in_flight -= 1;
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        match &d.res {
            Res::Seek(Ok(moved)) => {
                for (p, x) in moved {
                    let e = self.group.excused_below.entry(*p).or_insert(0);
                    *e = (*e).max(*x);
                }
            }
            _ => {
                // Perhaps moved, to somewhere below the head.
                for p in 0..self.topic_specs[TOPIC_A].partitions {
                    let next = self.head_now(tid, p).next;
                    let e = self.group.excused_below.entry(p).or_insert(0);
                    *e = (*e).max(next);
                }
            }
        }
    }

    fn on_gdescribe(&mut self, d: &Done) {
        let Res::GDescribe(Ok(g)) = &d.res else { return };
        let strict =
            d.touch0 == self.group.touch && self.group.seeks_in_flight == 0 && self.group.deletes_in_flight == 0;
        let parts: Vec<(u32, Option<u64>)> =
            g.partitions.iter().filter(|p| p.topic == TOPIC_A).map(|p| (p.partition, p.committed)).collect();
        for (p, committed) in parts {
            let c = committed.unwrap_or(0);
            if committed.is_some() {
                self.check_coverage(p, c, "describe");
            }
            if !strict {
                self.group.last_seen.remove(&p);
                continue;
            }
            if let Some(&(prev, touch)) = self.group.last_seen.get(&p) {
                if touch == self.group.touch && c < prev {
                    self.violate(
                        "commit-regressed",
                        format!("partition {p}: committed {c} after {prev}, no seek between"),
                    );
                }
            }
            self.group.last_seen.insert(p, (c, self.group.touch));
            let lost: Vec<(u64, String)> = self
                .group
                .commits_ok
                .get(&p)
                .into_iter()
                .flatten()
                .filter(|s| s.end < d.start_seq && s.touch == self.group.touch && s.value > c)
                .map(|s| (s.value, s.member.clone()))
                .collect();
            if let Some((v, m)) = lost.first() {
                self.violate(
                    "commit-lost",
                    format!("partition {p}: committed {c}, but {m}'s commit of {v} was answered ok"),
                );
            }
        }
    }

    fn on_gdelete(&mut self, d: &Done) {
        self.group.touch += 1;
        self.group.deletes_in_flight -= 1;
        if matches!(&d.res, Res::Crashed) || matches!(&d.res, Res::Unit(Err(e)) if uncertain(e)) {
            // Perhaps deleted: generations may start again.
            self.group.resets.push(d.end_seq);
        }
        if let Res::Unit(Ok(())) = &d.res {
            self.stat("group_deletes");
            self.group.resets.push(d.end_seq);
            // Commits answered while the delete ran, by members still live: they joined after the
            // delete took effect (it refuses a group with live members), so they must survive it.
            let now = self.clock.now_ms();
            let live: BTreeSet<String> = self
                .clients
                .iter()
                .filter_map(|c| match &c.kind {
                    Kind::Member(m) if m.last_poll_end_ms + m.session as i64 > now => m.id.clone(),
                    _ => None,
                })
                .collect();
            let touch = self.group.touch;
            let start = d.start_seq;
            for list in self.group.commits_ok.values_mut() {
                for c in list.iter_mut() {
                    if c.end > start && live.contains(&c.member) && !self.group.left.contains_key(&c.member) {
                        c.touch = touch;
                    }
                }
            }
            self.group.last_seen.clear();
        }
    }

    // ---- queues

    fn receive_lost(&mut self, sub: &'static str, end_seq: u64) {
        for s in self.subs.values_mut().filter(|s| s.name == sub) {
            s.lost_receives.push(end_seq);
        }
    }

    fn on_receive(&mut self, d: &Done, sub: &'static str, visibility: u64) {
        let Res::Receive(r) = &d.res else { return self.receive_lost(sub, d.end_seq) };
        match r {
            Ok(messages) => {
                if d.end_ms - d.start_ms >= visibility as i64 {
                    // Takes whose window ended before the answer are left out of it: deliveries
                    // nobody saw, which count towards a dead letter as a lost receive's do.
                    self.receive_lost(sub, d.end_seq);
                }
                let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
                for m in messages {
                    self.stat("messages_received");
                    let Some((sub_id, p, o, nonce, count)) = receipt_parts(&m.receipt) else {
                        self.violate("receive-answer", "a receipt that does not decode".into());
                        continue;
                    };
                    if p != m.event.partition || o != m.event.offset || count != m.receive_count {
                        self.violate(
                            "receive-answer",
                            format!(
                                "receipt names {p}@{o}#{count}, message {}@{}#{}",
                                m.event.partition, m.event.offset, m.receive_count
                            ),
                        );
                    }
                    self.check_event(TOPIC_A, tid, p, o, &m.event.record, "receive");
                    if !self.subs.contains_key(&sub_id) && self.learn_sub(sub).is_none_or(|id| id != sub_id) {
                        // A subscription deleted meanwhile that we never described: nothing to hold it to.
                        continue;
                    }
                    self.check_delivery(d, sub_id, p, o, nonce, count, visibility);
                    if let Kind::Worker { holding, .. } = &mut self.clients[d.client].kind {
                        holding.push(Held {
                            receipt: m.receipt.clone(),
                            sub_id,
                            partition: p,
                            offset: o,
                            nonce,
                            count,
                        });
                    }
                }
            }
            Err(Error::OffsetOutOfRange { .. }) => {
                self.violate("transient-416", format!("receive on {sub}: {}", code(r.as_ref().unwrap_err())))
            }
            Err(e) if uncertain(e) => self.receive_lost(sub, d.end_seq),
            Err(Error::SubscriptionNotFound { .. }) => {}
            Err(e) => {
                let c = code(e);
                if !c.contains("busy") && !c.contains("contended") {
                    self.violate("receive-refused", c);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_delivery(&mut self, d: &Done, sub_id: u64, p: u32, o: u64, nonce: u64, count: u32, visibility: u64) {
        let facts_key = self.live_topic_id(TOPIC_A).map(|tid| (tid, p));
        let s = self.subs.get(&sub_id).unwrap();
        let max = s.record.spec.max_receive_count;
        let ordered = s.record.spec.ordering == KeyOrdering::Key;
        let start = s.record.starts.get(p as usize).copied().unwrap_or(0);
        let redriven = s.redrives_in_flight > 0 || s.redrive_seqs.iter().any(|r| *r < d.end_seq);
        let mut problems: Vec<(&'static str, String)> = Vec::new();
        if o < start {
            problems.push(("queue-range", format!("offset {o} below the start {start}")));
        }
        if count == 0 || count > max {
            problems.push(("receive-count", format!("receive count {count} (max {max})")));
        }
        let filter = if s.name == SUB_Q { self.q_filter } else { SimFilter::None };
        if let Some(event) = facts_key.and_then(|(tid, _)| self.facts.get(&(tid, p, o))).map(|e| &self.events[e]) {
            if !filter.passes(event) {
                problems.push(("filtered-delivered", format!("delivered, but {filter:?} does not pass it")));
            }
        }
        if let Some(m) = s.msgs.get(&(p, o)) {
            for prev in &m.deliveries {
                if prev.nonce == nonce {
                    problems.push(("two-holders", format!("delivery {nonce:x} handed out twice")));
                    continue;
                }
                // One holder per window: the earlier delivery's window surely outlasts this receive.
                if d.end_ms < prev.until_lo && prev.release_seq.is_none_or(|r| r > d.end_seq) {
                    problems.push((
                        "two-holders",
                        format!(
                            "delivered #{count} while #{} holds it until at least {} (now {})",
                            prev.count,
                            prev.until_lo - T0,
                            d.end_ms - T0
                        ),
                    ));
                }
                if prev.acked_ok.is_some() {
                    problems.push(("acked-redelivered", format!("delivered #{count} after #{} was acked", prev.count)));
                }
                if !redriven && count <= prev.count && prev.end_seq < d.start_seq {
                    problems.push(("receive-count", format!("delivered #{count} after #{}", prev.count)));
                }
            }
        }
        // Key order: every earlier message of its key is done (acked, or dead) first.
        if ordered {
            if let Some((tid, _)) = facts_key {
                let key = self.facts.get(&(tid, p, o)).and_then(|e| self.events[e].key.clone());
                let log_start = self.head_now(tid, p).start;
                if let Some(key) = key {
                    let from = start.max(log_start).min(o);
                    let earlier: Vec<u64> = self
                        .facts
                        .range((tid, p, from)..(tid, p, o))
                        .filter(|(_, e)| self.events[e].key.as_ref() == Some(&key))
                        .map(|(k, _)| k.2)
                        .collect();
                    for o1 in earlier {
                        let m = s.msgs.get(&(p, o1));
                        let acked =
                            m.is_some_and(|m| m.deliveries.iter().any(|x| x.ack_seq.is_some_and(|r| r < d.end_seq)));
                        // Deliveries nobody saw (lost receives) count towards the dead letter too.
                        let (count, since) =
                            m.and_then(|m| m.deliveries.last()).map_or((0, 0), |x| (x.count, x.start_seq));
                        let unseen = s.lost_receives.iter().filter(|e| **e > since && **e < d.end_seq).count() as u32;
                        let done = acked || count + unseen >= max;
                        if !done {
                            problems
                                .push(("key-order", format!("{p}@{o} delivered before {o1} of the same key was done")));
                        }
                    }
                }
            }
        }
        for (property, detail) in problems {
            self.violate(property, format!("sub {sub_id:x} {p}@{o}: {detail}"));
        }
        let s = self.subs.get_mut(&sub_id).unwrap();
        s.msgs.entry((p, o)).or_default().deliveries.push(Delivery {
            nonce,
            count,
            start_seq: d.start_seq,
            end_seq: d.end_seq,
            until_lo: d.start_ms + visibility as i64,
            release_seq: None,
            ack_seq: None,
            acked_ok: None,
            ack_durable: 0,
            ack_maybe: false,
        });
    }

    fn on_settle(&mut self, d: &Done, _sub: &'static str, how: SettleHow, held: &[Held]) {
        let results: Vec<Option<bool>> = match &d.res {
            Res::Acks(Ok(rs)) => rs.iter().map(|r| Some(r.is_ok())).collect(),
            Res::Vis(Ok(rs)) => rs.iter().map(|r| Some(r.is_ok())).collect(),
            Res::Acks(Err(Error::SubscriptionNotFound { .. })) | Res::Vis(Err(Error::SubscriptionNotFound { .. })) => {
                vec![Some(false); held.len()]
            }
            // Unknown: may or may not have applied.
            _ => vec![None; held.len()],
        };
        let mut keep = Vec::new();
        let durable = self.mem.durable_count();
        for (h, r) in held.iter().zip(results) {
            let now = d.start_ms;
            let Some(dl) = self.delivery_mut(h) else { continue };
            match (how, r) {
                (SettleHow::Ack, Some(true)) => {
                    dl.acked_ok = Some(d.end_seq);
                    dl.ack_durable = durable;
                }
                (SettleHow::Ack, None) => {
                    dl.ack_maybe = true;
                    keep.push(h.clone());
                }
                (SettleHow::Visibility(v), Some(true)) if v > 0 => {
                    dl.until_lo = now + v as i64;
                    keep.push(h.clone());
                }
                (SettleHow::Visibility(v), None) if v > 0 => keep.push(h.clone()),
                (SettleHow::Nack(_) | SettleHow::Visibility(_), None) => keep.push(h.clone()),
                _ => {}
            }
        }
        // What it still holds (or may): it retries those later.
        if let Kind::Worker { holding, .. } = &mut self.clients[d.client].kind {
            if how != SettleHow::Ack || self.rng.chance(0.8) {
                holding.extend(keep);
            }
        }
    }

    /// Acks riding on a receive: checked as an ack and a receive over the same span, the
    /// acks applied no later than the receive's write. A failure leaves both unknown (the
    /// acks may have ridden on a write, or not), but for a subscription not found.
    fn on_ack_next(&mut self, d: Done, sub: &'static str, visibility: u64, held: &[Held]) {
        let Done { client, act, start_seq, end_seq, start_ms, end_ms, topic0, touch0, res } = d;
        let (acks, received) = match res {
            Res::AckNext(Ok((acks, messages))) => (Res::Acks(Ok(acks)), Res::Receive(Ok(messages))),
            Res::AckNext(Err(e @ Error::SubscriptionNotFound { .. })) => {
                let again = Error::SubscriptionNotFound { topic: TOPIC_A.into(), subscription: sub.into() };
                (Res::Acks(Err(again)), Res::Receive(Err(e)))
            }
            Res::AckNext(Err(e)) => (Res::Crashed, Res::Receive(Err(e))),
            _ => (Res::Crashed, Res::Crashed),
        };
        let part = |res| Done { client, act: act.clone(), start_seq, end_seq, start_ms, end_ms, topic0, touch0, res };
        self.on_settle(&part(acks), sub, SettleHow::Ack, held);
        self.on_receive(&part(received), sub, visibility);
    }

    fn on_dead_letters(&mut self, d: &Done, sub: &'static str) {
        let Res::Dlq(Ok(page)) = &d.res else { return };
        let mut seen = BTreeSet::new();
        for e in &page.entries {
            if !seen.insert((e.partition, e.offset)) {
                self.violate("dlq-once", format!("{sub}: dead letter {} listed twice", e.id));
            }
        }
    }

    // -----------------------------------------------------------------------
    // The end: stop the faults, drain, and check what must hold once all is quiet.

    async fn quiesce(&mut self) {
        for _ in 0..2000 {
            if self.inflight.is_empty() {
                break;
            }
            self.clock.advance(100);
            self.settle(20).await;
        }
        if !self.inflight.is_empty() {
            let stuck: Vec<String> = self
                .inflight
                .values()
                .map(|op| format!("c{} {:?} since step {}", op.client, op.act, op.start_step))
                .collect();
            self.violate("liveness", format!("ops still in flight after the drain: {}", stuck.join("; ")));
        }
    }

    async fn end_checks(&mut self) {
        let p = &self.procs[0];
        let (log, groups, queues, janitor) = (p.log.clone(), p.groups.clone(), p.queues.clone(), p.janitor.clone());
        // Retention's clock: everything older than the grace period may be collected.
        self.clock.advance(self.jconfig.grace_ms + 1);
        for _ in 0..5 {
            if let Err(e) = janitor.run(1000).await {
                self.violate("janitor", format!("a quiet round failed: {e}"));
            }
            self.clock.advance(self.jconfig.grace_ms + 1);
        }
        self.check_truth();
        // Replay equals the model's log, and offsets by time equal a brute-force search.
        for name in [TOPIC_A, TOPIC_B] {
            let Some(tid) = self.live_topic_id(name) else { continue };
            for p in 0..self.topic_specs[name].partitions {
                let (head, truth) = self.true_log(tid, p);
                let mut got = Vec::new();
                let mut offset = head.start;
                while offset < head.next {
                    let req = ReadRequest {
                        topic: name.into(),
                        partition: p,
                        offset,
                        max_events: 7,
                        max_bytes: 1 << 20,
                        wait_ms: 0,
                    };
                    match log.read(&req).await {
                        Ok(b) if !b.events.is_empty() => {
                            offset = b.next_offset;
                            got.extend(b.events);
                        }
                        other => {
                            self.violate(
                                "replay-equals-model",
                                format!(
                                    "{name}/{p} at {offset}: {:?}",
                                    other.map(|b| b.events.len()).map_err(|e| code(&e))
                                ),
                            );
                            break;
                        }
                    }
                }
                let model: Vec<(u64, u64)> =
                    truth.range(head.start..).filter_map(|(o, r)| event_id(&r.value).map(|e| (*o, e))).collect();
                let replay: Vec<(u64, u64)> =
                    got.iter().filter_map(|e| event_id(&e.record.value).map(|x| (e.offset, x))).collect();
                if model != replay {
                    self.violate(
                        "replay-equals-model",
                        format!("{name}/{p}: replay of {} events differs from the log's {}", replay.len(), model.len()),
                    );
                }
                let known: Vec<(u64, u64)> =
                    self.facts.range((tid, p, head.start)..(tid, p, u64::MAX)).map(|(k, e)| (k.2, *e)).collect();
                for (o, e) in known {
                    if !model.contains(&(o, e)) {
                        self.violate(
                            "replay-equals-model",
                            format!("{name}/{p}: event {e} was seen at {o}, not there now"),
                        );
                        break;
                    }
                }
                let mut times: Vec<i64> = truth.values().map(|r| r.timestamp_ms).collect();
                times.sort_unstable();
                times.dedup();
                let mut probes: Vec<i64> = times.iter().flat_map(|t| [t - 1, *t, t + 1]).collect();
                probes.dedup();
                for ts in probes.into_iter().step_by(3.max(times.len() / 40)) {
                    let brute = truth
                        .range(head.start..head.next)
                        .find(|(_, r)| r.timestamp_ms >= ts)
                        .map_or(head.next, |(o, _)| *o);
                    match log.offset(name, p, OffsetQuery::Timestamp(ts)).await {
                        Ok(o) if o == brute => {}
                        other => {
                            self.violate(
                                "offset-by-time",
                                format!(
                                    "{name}/{p} quiet: ts {ts} answered {:?}, brute force {brute}",
                                    other.map_err(|e| code(&e))
                                ),
                            );
                            break;
                        }
                    }
                }
            }
        }
        // Groups: what is committed was delivered.
        if let Ok(g) = groups.describe(GROUP).await {
            for part in g.partitions.iter().filter(|p| p.topic == TOPIC_A) {
                if let Some(c) = part.committed {
                    self.check_coverage(part.partition, c, "final describe");
                }
            }
        }
        self.drain_queues(&queues).await;
        self.check_purges(&janitor).await;
    }

    /// Receives and acks everything left, then checks that every message of each live
    /// subscription was acked, dead-lettered or expired, exactly once, and that the counts say so.
    async fn drain_queues(&mut self, queues: &Queues) {
        for sub in [SUB_Q, SUB_QK] {
            let Some(sub_id) = self.learn_sub(sub) else { continue };
            let mut rounds = 0;
            loop {
                rounds += 1;
                let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: Some(60_000) };
                self.seq += 1;
                let start_seq = self.seq;
                let start_ms = self.clock.now_ms();
                let got = queues.receive(TOPIC_A, sub, &req).await;
                self.seq += 1;
                let d = Done {
                    client: 0,
                    act: Act::Receive { sub, visibility: 60_000 },
                    start_seq,
                    end_seq: self.seq,
                    start_ms,
                    end_ms: self.clock.now_ms(),
                    topic0: None,
                    touch0: 0,
                    res: Res::Crashed,
                };
                match got {
                    Ok(ms) if ms.is_empty() => {
                        let described = queues.describe(TOPIC_A, sub).await;
                        match described {
                            Ok(s) if s.backlog.visible + s.backlog.in_flight + s.backlog.delayed == 0 => break,
                            Ok(_) => self.clock.advance(1000),
                            Err(e) => {
                                self.violate("queue-drain", format!("{sub}: describe {}", code(&e)));
                                return;
                            }
                        }
                    }
                    Ok(ms) => {
                        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
                        let mut receipts = Vec::new();
                        for m in &ms {
                            let (sid, p, o, nonce, count) = receipt_parts(&m.receipt).unwrap();
                            self.check_event(TOPIC_A, tid, p, o, &m.event.record, "drain");
                            if sid == sub_id {
                                self.check_delivery(&d, sid, p, o, nonce, count, 60_000);
                            }
                            receipts.push(m.receipt.clone());
                        }
                        if let Ok(results) = queues.ack(TOPIC_A, sub, &receipts).await {
                            for (m, r) in ms.iter().zip(results) {
                                let (sid, p, o, nonce, _) = receipt_parts(&m.receipt).unwrap();
                                if r.is_err() {
                                    self.violate(
                                        "queue-drain",
                                        format!("{sub}: ack of {p}@{o} in a quiet queue refused"),
                                    );
                                }
                                let h = Held {
                                    receipt: String::new(),
                                    sub_id: sid,
                                    partition: p,
                                    offset: o,
                                    nonce,
                                    count: 0,
                                };
                                let seq = self.seq;
                                if let Some(dl) = self.delivery_mut(&h) {
                                    dl.acked_ok = Some(seq);
                                    dl.ack_seq.get_or_insert(seq);
                                }
                            }
                        }
                    }
                    Err(e) => {
                        self.violate("queue-drain", format!("{sub}: receive {}", code(&e)));
                        return;
                    }
                }
                if rounds > 500 {
                    self.violate("queue-drain", format!("{sub}: still not empty after 500 rounds"));
                    return;
                }
            }
            // Everything is settled now: acked, dead, or expired, each message once.
            let described = match queues.describe(TOPIC_A, sub).await {
                Ok(s) => s,
                Err(e) => return self.violate("queue-drain", code(&e)),
            };
            let mut dead = BTreeSet::new();
            let mut after: Option<String> = None;
            loop {
                match queues.dead_letters(TOPIC_A, sub, after.as_deref(), 1000).await {
                    Ok(page) => {
                        for e in &page.entries {
                            if !dead.insert((e.partition, e.offset)) {
                                self.violate("dlq-once", format!("{sub}: {} listed twice", e.id));
                            }
                        }
                        match page.next {
                            Some(n) => after = Some(n),
                            None => break,
                        }
                    }
                    Err(e) => return self.violate("queue-drain", format!("dead letters: {}", code(&e))),
                }
            }
            let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
            let s = &self.subs[&sub_id];
            let mut total = 0;
            let mut acked = BTreeSet::new();
            let mut maybe = BTreeSet::new();
            let mut problems = Vec::new();
            for (p, start) in s.record.starts.iter().enumerate() {
                let p = p as u32;
                let head = self.head_now(tid, p);
                total += head.next.saturating_sub(*start);
                for o in *start..head.next {
                    let Some(m) = s.msgs.get(&(p, o)) else { continue };
                    let last = m.deliveries.last().unwrap();
                    if m.deliveries.iter().any(|d| d.acked_ok.is_some()) {
                        acked.insert((p, o));
                        if dead.contains(&(p, o)) && last.acked_ok.is_some() {
                            problems.push(format!("{p}@{o} acked and dead"));
                        }
                    } else if last.ack_maybe && !dead.contains(&(p, o)) {
                        // Acked, or (the ack lost) expired since: one or the other.
                        maybe.insert((p, o));
                    }
                }
            }
            let b = described.backlog;
            let filter = if sub == SUB_Q { self.q_filter } else { SimFilter::None };
            // One pass over the subscription's range. An event the model never learned (its
            // publish's answer lost, nobody read it) may fail the filter, unless there is none.
            // The totals below could balance with a passing event filtered and a failing one
            // expired instead, so each event still in the log that passes must have been
            // delivered and settled (it cannot have expired).
            let mut failing = 0u64;
            for (p, start) in s.record.starts.iter().enumerate() {
                let p = p as u32;
                let head = self.head_now(tid, p);
                for o in *start..head.next {
                    let passes = match self.facts.get(&(tid, p, o)) {
                        Some(e) => filter.passes(&self.events[e]),
                        None => filter == SimFilter::None,
                    };
                    let settled = acked.contains(&(p, o)) || dead.contains(&(p, o)) || maybe.contains(&(p, o));
                    if !passes {
                        failing += 1;
                    } else if o >= head.start && !settled {
                        problems.push(format!("{p}@{o} passes {filter:?} and is in the log, but was never settled"));
                    }
                }
            }
            if b.filtered > failing {
                problems.push(format!("{} filtered, but only {failing} events fail {filter:?}", b.filtered));
            }
            if b.visible + b.in_flight + b.delayed != 0 {
                problems.push(format!("backlog not empty: {b:?}"));
            }
            if b.dead != dead.len() as u64 {
                problems.push(format!("dead counted {} but {} listed", b.dead, dead.len()));
            }
            let accounted =
                acked.iter().filter(|k| !dead.contains(k)).count() as u64 + dead.len() as u64 + b.expired + b.filtered;
            if accounted > total || accounted + (maybe.len() as u64) < total {
                problems.push(format!(
                    "{} acked (+{} perhaps) + {} dead + {} expired + {} filtered = {accounted}, but {total} messages were published",
                    acked.len(),
                    maybe.len(),
                    dead.len(),
                    b.expired,
                    b.filtered
                ));
            }
            *self.stats.entry("messages_filtered").or_default() += b.filtered;
            if !problems.is_empty() {
                self.violate("queue-exactly-once", format!("{sub}: {}", problems.join("; ")));
            }
        }
    }

    /// After a full janitor run, nothing of a deleted topic or subscription is left in the store.
    async fn check_purges(&mut self, janitor: &Janitor) {
        for _ in 0..3 {
            let _ = janitor.run(1000).await;
        }
        let live_b = self.live_topic_id(TOPIC_B);
        let dead_topics: Vec<u64> =
            self.topic_ids.get(TOPIC_B).into_iter().flatten().filter(|id| Some(**id) != live_b).copied().collect();
        let live_q = self.sub_now(TOPIC_A, SUB_Q).map(|r| r.id);
        let dead_subs: Vec<u64> =
            self.subs.iter().filter(|(id, s)| s.name == SUB_Q && Some(**id) != live_q).map(|(id, _)| *id).collect();
        let census = self.mem.census();
        let mut leaks = Vec::new();
        for id in dead_topics {
            let hex = format!("{id:016x}");
            for (pk, n) in &census {
                if pk.contains(&hex) || pk.contains(&id.to_string()) {
                    leaks.push(format!("{pk} ({n} items) of deleted topic {hex}"));
                }
            }
        }
        for id in dead_subs {
            let hex = format!("{id:016x}");
            for (pk, n) in &census {
                if pk.contains(&hex) {
                    leaks.push(format!("{pk} ({n} items) of deleted subscription {hex}"));
                }
            }
        }
        if !leaks.is_empty() {
            leaks.truncate(4);
            self.violate("purge-complete", leaks.join("; "));
        }
    }
}

impl GroupModel {
    /// The highest generation any poll answer that returned before `seq` had shown.
    /// The highest generation answered before `seq` since the group was last deleted (a
    /// deleted group starts again at generation 1).
    fn max_generation_at(&self, seq: u64) -> u64 {
        // A poll that overlapped a delete may have answered the deleted group's generation.
        let reset = self.resets.iter().filter(|r| **r < seq).max().copied().unwrap_or(0);
        self.max_generation_history
            .iter()
            .filter(|(start, end, _)| *end < seq && *start > reset)
            .map(|(_, _, g)| *g)
            .max()
            .unwrap_or(0)
    }
}

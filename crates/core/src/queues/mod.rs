//! Work queues (SQS's model) fed by the log: each subscription on a topic is a queue
//! of its own. Payloads are never copied: a queue is, per partition, a cursor into the
//! log plus lease items for what is in flight, waiting for redelivery or parked behind
//! its key, and dead-letter items. Written once, on the state store.
//!
//! | item | `pk` | `sk` | value |
//! |---|---|---|---|
//! | subscription | `subs#<topic id>` | name | [`SubscriptionRecord`] |
//! | cursor: next offset never delivered, DLQ size, expired count | `q#<sub id>#<partition>` | `c` | [`CursorRecord`] |
//! | lease: messages of one delivery, or released | `q#<sub id>#<partition>` | `l#<due ms>#<nonce>` | [`LeaseRecord`] |
//! | dead letter | `dlq#<sub id>#<partition>` | offset, 20 digits | [`DeadRecord`] |
//! | delete order of a subscription | `purge-subs` | sub id | [`SubPurgeRecord`] |
//! | receipt signing key | `queues` | `receipt-key` | 32 random bytes, hex |
//!
//! A lease's sort key starts with the time its messages become visible again (its
//! *due* time), so one ascending query of a partition's collection returns the cursor
//! and then the leases that are due, oldest first: no receive scans the backlog.
//!
//! Why a message has one holder per visibility window, and an acked message never
//! comes back, without trusting any cache:
//! - a message is held only by the lease that contains it, and a lease is created in
//!   the same atomic write that takes its messages: from the log (advancing the
//!   cursor, conditional on the cursor's version) or from due leases (each deleted or
//!   rewritten conditional on its version). Two receivers that read the same state
//!   cannot both write: the second write fails its condition and re-reads;
//! - a lease is taken only once it is due, and a held lease is due no earlier than
//!   the end of its visibility window;
//! - a receipt names the lease's random nonce and the receive count; every
//!   redelivery, release or dead-lettering gives the message a new lease with a new
//!   nonce, so an old receipt finds nothing to act on, and an ack removes the message
//!   from its lease by a write conditional on the lease's version.
//!
//! Receipts are signed (HMAC-SHA-256 with a key kept in the store), so they are opaque
//! and a forged or altered one is refused before anything is read.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::model::Event;

/// SQS's default and largest visibility timeouts.
pub const DEFAULT_VISIBILITY_TIMEOUT_MS: u64 = 30_000;
pub const MAX_VISIBILITY_TIMEOUT_MS: u64 = 12 * 3600 * 1000;
/// Deliveries before a message is dead-lettered, by default.
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 5;
pub const MAX_RECEIVE_COUNT: u32 = 1000;
/// Messages one receive returns at most, and its longest wait.
pub const MAX_RECEIVE_MESSAGES: usize = 100;
pub const MAX_RECEIVE_WAIT_MS: u64 = 20_000;
/// Longest delay of new messages (SQS's 15 minutes) and of a release or backoff step.
pub const MAX_DELAY_MS: u64 = 15 * 60 * 1000;
pub const MAX_RELEASE_DELAY_MS: u64 = MAX_VISIBILITY_TIMEOUT_MS;
/// Receipts one ack, nack or visibility request may carry.
pub const MAX_RECEIPTS: usize = 100;

/// Where a new subscription starts reading its topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartAt {
    /// Only events published after the subscription is created.
    Latest,
    /// Every event still in the log.
    Earliest,
    /// Events with a timestamp at or after this (ms since the epoch).
    #[serde(rename = "timestamp_ms")]
    Timestamp(i64),
    /// Per partition, the first offset to deliver; partitions not named start at `latest`.
    Offsets(BTreeMap<u32, u64>),
}

/// Whether a key's messages are delivered one at a time, in offset order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    #[default]
    None,
    Key,
}

/// How long a message waits before its n-th redelivery (after its n-th delivery
/// expired unacknowledged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Backoff {
    /// The n-th step for the n-th redelivery; the last step repeats (JetStream's `BackOff`).
    Steps(Vec<u64>),
    /// `initial_ms × multiplier^(n−1)`, at most `max_ms`.
    Exponential {
        initial_ms: u64,
        max_ms: u64,
        #[serde(default = "two")]
        multiplier: u32,
    },
}

fn two() -> u32 {
    2
}

/// A subscription's settings, as created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionSpec {
    pub start: StartAt,
    pub visibility_timeout_ms: u64,
    pub max_receive_count: u32,
    pub ordering: Ordering,
    /// New messages become visible this long after their timestamp.
    pub delay_ms: u64,
    pub redelivery_backoff: Option<Backoff>,
}

impl Default for SubscriptionSpec {
    fn default() -> Self {
        Self {
            start: StartAt::Latest,
            visibility_timeout_ms: DEFAULT_VISIBILITY_TIMEOUT_MS,
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            ordering: Ordering::None,
            delay_ms: 0,
            redelivery_backoff: None,
        }
    }
}

/// A subscription as stored and described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub topic: String,
    pub name: String,
    pub spec: SubscriptionSpec,
    /// Per partition, the offset the subscription started at.
    pub start_offsets: Vec<u64>,
    pub created_ms: i64,
}

/// Message counts of a queue (or one partition of it), exact at the time of reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Deliverable now (new messages, and messages due for redelivery).
    pub visible: u64,
    /// Held by a receiver within its visibility window.
    pub in_flight: u64,
    /// Waiting: new messages within `delay_ms`, released with a delay, or in redelivery backoff.
    pub delayed: u64,
    /// In the dead-letter queue (including messages whose last delivery ran out at the limit).
    pub dead: u64,
    /// Removed from the log by retention before they were delivered, or before they were
    /// delivered again: never delivered (again). Counts those a receive already passed
    /// over (kept with the cursor), and those it would pass over now: below the log start,
    /// new or due for redelivery. A message below the log start that a receiver holds, or
    /// that waits, keeps its count (`in_flight`, `delayed`) until it comes due: it can
    /// still be acked meanwhile. So the number only grows, and exactly once per message.
    pub expired: u64,
    /// How long the oldest visible message has been visible.
    pub oldest_visible_age_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionBacklog {
    pub partition: u32,
    /// The next offset never yet delivered.
    pub cursor: u64,
    pub high_watermark: u64,
    pub backlog: Backlog,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionDescription {
    pub subscription: Subscription,
    pub backlog: Backlog,
    pub partitions: Vec<PartitionBacklog>,
    /// Every partition's counts are of one moment (two reads in a row agreed); false only
    /// when a partition kept changing through every read (see `Queues::snapshot`).
    pub exact: bool,
}

/// A receive: up to `max_messages`, waiting up to `wait_ms` for the first.
#[derive(Debug, Clone)]
pub struct ReceiveRequest {
    pub max_messages: usize,
    pub wait_ms: u64,
    /// Overrides the subscription's visibility timeout for these messages.
    pub visibility_timeout_ms: Option<u64>,
}

/// A received message: the event and the receipt that acks, releases or extends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub receipt: String,
    /// Deliveries so far, this one included.
    pub receive_count: u32,
    pub first_receive_ms: i64,
    pub event: Event,
}

/// Why a receipt was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptError {
    /// Not a receipt of this subscription (malformed, altered, or another queue's).
    Invalid,
    /// The message was acked, released, redelivered or dead-lettered since.
    Stale,
}

impl ReceiptError {
    pub fn code(self) -> &'static str {
        match self {
            Self::Invalid => "invalid_receipt",
            Self::Stale => "stale_receipt",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Self::Invalid => "not a receipt handle of this subscription",
            Self::Stale => "the message was acked, released, redelivered or dead-lettered since this receipt",
        }
    }
}

/// What a visibility change answers per receipt: the receipt to use from now on, or
/// `None` when the message was made visible (a timeout of 0: nobody holds it).
pub type VisibilityResult = Result<Option<String>, ReceiptError>;

/// A message in the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// `<partition>-<offset>`: what `DELETE …/dlq/{id}` takes.
    pub id: String,
    pub reason: String,
    pub receive_count: u32,
    pub first_receive_ms: i64,
    pub last_receive_ms: i64,
    pub dead_ms: i64,
    /// The event, unless retention has removed it from the log.
    pub event: Option<Event>,
    pub partition: u32,
    pub offset: u64,
}

/// A page of dead letters, and where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterPage {
    pub entries: Vec<DeadLetter>,
    pub next: Option<String>,
}

// ---------------------------------------------------------------------------
// Implementation.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::layout::{self, HeadRecord};
use crate::log::read::rendered_size;
use crate::log::topics;
use crate::log::Log;
use crate::model::{OffsetQuery, TopicConfig};
use crate::ports::state::{Expect, Key, Query, StateStore, WriteOp, MAX_WRITE_OPS};
use crate::{names, Error, StorageError};

/// Conditional writes lost to concurrent receivers before a request gives up on a partition.
const MAX_ATTEMPTS: usize = 16;
/// Messages moved to (or out of) the dead-letter queue by one write.
const DEAD_PER_WRITE: usize = 90;
/// Leases one settling write names receipts of (each may touch two items).
const LEASES_PER_WRITE: usize = 45;
/// Messages parked behind their key (or their delay) per partition before new messages
/// wait in the log.
const PARK_LIMIT: usize = 1000;
/// Writes burying dead leases one receive makes per partition before it leaves the
/// rest (never delivered again: only buried) to the next.
const MAX_BURIALS: usize = 4;
/// Leases of messages parked until different times, made by one receive.
const MAX_DELAY_LEASES: usize = 8;
const PAGE: usize = 1000;
/// Reads of a partition's queue one describe makes at most, looking for two that agree.
const SNAPSHOT_READS: usize = 4;
const CURSOR_SK: &str = "c";
const SUB_PURGE_PK: &str = "purge-subs";
const DEAD_REASON: &str = "max_receive_count_exceeded";

/// A subscription as stored: its id keys every item of its queue, so a subscription
/// re-created under an old name shares nothing with its predecessor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionRecord {
    pub id: u64,
    pub spec: SubscriptionSpec,
    /// Per partition, the first offset the queue delivers.
    pub starts: Vec<u64>,
    pub created_ms: i64,
    /// A tombstone: the subscription `id` was deleted. It stays until a subscription of the
    /// same name replaces it (or the topic's purge removes it), so the item's version never
    /// restarts: a delete that read an older incarnation's version cannot remove a newer one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// A partition's cursor: offsets below `next` were all taken from the log into leases.
/// An absent cursor is the subscription's start offset with an empty DLQ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorRecord {
    pub next: u64,
    /// Messages in this partition's dead-letter queue.
    #[serde(default)]
    pub dead: u64,
    /// Messages removed by retention that receives passed over (new ones below the log
    /// start, and lease messages dropped when they came due), counted in the same write.
    #[serde(default)]
    pub expired: u64,
}

/// Messages delivered together (or released together), all with one receive count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Names this delivery in receipts; every redelivery or release gets a new one.
    pub nonce: u64,
    /// Deliveries of these messages so far (0: parked behind their key, never delivered).
    pub receives: u32,
    /// The end of the visibility window while held; `None` when released or parked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<i64>,
    /// When they were last delivered.
    pub delivered_ms: i64,
    pub msgs: Vec<LeaseMsg>,
    /// Put back by a redrive (never delivered since): due, not parked behind a key, so it
    /// does not count toward the keyed look-ahead's parking limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redriven: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseMsg {
    #[serde(rename = "o")]
    pub offset: u64,
    /// First delivery (0 before any).
    #[serde(rename = "f")]
    pub first_ms: i64,
    /// A hash of the event's key, kept under `ordering: key`.
    #[serde(rename = "k", default, skip_serializing_if = "Option::is_none")]
    pub key: Option<u64>,
}

/// A dead letter: which delivery history put it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadRecord {
    pub reason: String,
    pub receives: u32,
    pub first_ms: i64,
    pub last_ms: i64,
    pub dead_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<u64>,
}

/// The items of a deleted subscription still to remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubPurgeRecord {
    pub partitions: u32,
    #[serde(default)]
    pub done_partitions: u32,
}

fn subs_pk(topic_id: u64) -> String {
    format!("subs#{topic_id:016x}")
}

fn sub_key(topic_id: u64, name: &str) -> Key {
    Key::new(subs_pk(topic_id), name)
}

fn queue_pk(sub_id: u64, partition: u32) -> String {
    format!("q#{sub_id:016x}#{partition}")
}

fn dlq_pk(sub_id: u64, partition: u32) -> String {
    format!("dlq#{sub_id:016x}#{partition}")
}

/// Where a subscription's record is (layout, for tools and tests).
pub fn subscription_key(topic_id: u64, name: &str) -> Key {
    sub_key(topic_id, name)
}

/// The collections holding a subscription's state on one partition: its cursor and
/// leases, and its dead letters (layout, for tools and tests).
pub fn queue_collections(sub_id: u64, partition: u32) -> [String; 2] {
    [queue_pk(sub_id, partition), dlq_pk(sub_id, partition)]
}

fn cursor_key(sub_id: u64, partition: u32) -> Key {
    Key::new(queue_pk(sub_id, partition), CURSOR_SK)
}

fn lease_sk(due: i64, nonce: u64) -> String {
    format!("l#{:020}#{nonce:016x}", due.max(0))
}

fn parse_lease_sk(sk: &str) -> Result<i64, StorageError> {
    sk.strip_prefix("l#")
        .and_then(|rest| rest.split('#').next())
        .and_then(|due| due.parse().ok())
        .ok_or_else(|| StorageError::Corrupt(format!("lease sort key {sk:?}")))
}

fn sub_purge_key(sub_id: u64) -> Key {
    Key::new(SUB_PURGE_PK, format!("{sub_id:016x}"))
}

/// A stable 64-bit hash of an event key (FNV-1a): equal keys, equal hashes. A collision
/// only makes two keys wait for each other.
fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl Backoff {
    /// The wait before redelivery after the `n`-th delivery expired.
    pub fn delay_ms(&self, n: u32) -> u64 {
        match self {
            Self::Steps(steps) => steps.get(n.saturating_sub(1) as usize).or(steps.last()).copied().unwrap_or(0),
            Self::Exponential { initial_ms, max_ms, multiplier } => {
                let mut delay = *initial_ms;
                for _ in 1..n {
                    if delay >= *max_ms {
                        break;
                    }
                    delay = delay.saturating_mul(u64::from(*multiplier));
                }
                delay.min(*max_ms)
            }
        }
    }
}

impl SubscriptionSpec {
    fn validate(&self) -> Result<(), Error> {
        if self.visibility_timeout_ms > MAX_VISIBILITY_TIMEOUT_MS {
            return Err(Error::invalid(
                "invalid_visibility_timeout",
                format!("visibility_timeout_ms must be at most {MAX_VISIBILITY_TIMEOUT_MS} (12 h)"),
            ));
        }
        if !(1..=MAX_RECEIVE_COUNT).contains(&self.max_receive_count) {
            return Err(Error::invalid(
                "invalid_max_receive_count",
                format!("max_receive_count must be between 1 and {MAX_RECEIVE_COUNT}"),
            ));
        }
        if self.delay_ms > MAX_DELAY_MS {
            return Err(Error::invalid("invalid_delay", format!("delay_ms must be at most {MAX_DELAY_MS} (15 min)")));
        }
        let backoff_ok = match &self.redelivery_backoff {
            None => true,
            Some(Backoff::Steps(steps)) => {
                !steps.is_empty() && steps.len() <= 100 && steps.iter().all(|s| *s <= MAX_RELEASE_DELAY_MS)
            }
            Some(Backoff::Exponential { initial_ms, max_ms, multiplier }) => {
                *initial_ms >= 1
                    && initial_ms <= max_ms
                    && *max_ms <= MAX_RELEASE_DELAY_MS
                    && (1..=100).contains(multiplier)
            }
        };
        if !backoff_ok {
            return Err(Error::invalid(
                "invalid_backoff",
                format!(
                    "redelivery_backoff_ms is a list of 1 to 100 delays or {{initial_ms, max_ms, multiplier}}, \
                     each delay at most {MAX_RELEASE_DELAY_MS} ms and multiplier 1 to 100"
                ),
            ));
        }
        if let StartAt::Timestamp(ts) = self.start {
            if ts < 0 {
                return Err(Error::invalid("invalid_start", "start timestamp_ms must not be negative"));
            }
        }
        Ok(())
    }

    fn backoff_ms(&self, receives: u32) -> i64 {
        self.redelivery_backoff.as_ref().map_or(0, |b| b.delay_ms(receives) as i64)
    }
}

/// What a receipt names: one message of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Receipt {
    sub_id: u64,
    partition: u32,
    offset: u64,
    nonce: u64,
    /// Where the lease was when the receipt was issued (a hint: it may have moved since).
    due: i64,
    receives: u32,
}

const RECEIPT_BODY: usize = 40;
const RECEIPT_MAC: usize = 16;

impl Receipt {
    fn encode(&self, key: &[u8; 32]) -> String {
        let mut bytes = Vec::with_capacity(RECEIPT_BODY + RECEIPT_MAC);
        bytes.extend_from_slice(&self.sub_id.to_be_bytes());
        bytes.extend_from_slice(&self.partition.to_be_bytes());
        bytes.extend_from_slice(&self.offset.to_be_bytes());
        bytes.extend_from_slice(&self.nonce.to_be_bytes());
        bytes.extend_from_slice(&self.due.to_be_bytes());
        bytes.extend_from_slice(&self.receives.to_be_bytes());
        let mac = hmac_sha256(key, &bytes);
        bytes.extend_from_slice(&mac[..RECEIPT_MAC]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn decode(text: &str, key: &[u8; 32]) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        if bytes.len() != RECEIPT_BODY + RECEIPT_MAC {
            return None;
        }
        let (body, mac) = bytes.split_at(RECEIPT_BODY);
        let expected = hmac_sha256(key, body);
        // Compared in constant time: a forger learns nothing from how long a refusal takes.
        if expected[..RECEIPT_MAC].iter().zip(mac).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(body[i..i + 8].try_into().unwrap_or_default());
        Some(Self {
            sub_id: u64_at(0),
            partition: u32::from_be_bytes(body[8..12].try_into().unwrap_or_default()),
            offset: u64_at(12),
            nonce: u64_at(20),
            due: u64_at(28) as i64,
            receives: u32::from_be_bytes(body[36..40].try_into().unwrap_or_default()),
        })
    }
}

fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let (mut inner_pad, mut outer_pad) = ([0x36u8; 64], [0x5cu8; 64]);
    for (i, b) in key.iter().enumerate() {
        inner_pad[i] ^= b;
        outer_pad[i] ^= b;
    }
    let inner = Sha256::new().chain_update(inner_pad).chain_update(message).finalize();
    Sha256::new().chain_update(outer_pad).chain_update(inner).finalize().into()
}

/// A subscription read for one request.
struct Sub {
    topic: TopicConfig,
    name: String,
    record: SubscriptionRecord,
    version: u64,
}

impl Sub {
    fn start(&self, partition: u32) -> u64 {
        self.record.starts.get(partition as usize).copied().unwrap_or(0)
    }

    fn describe(&self) -> Subscription {
        Subscription {
            topic: self.topic.name.clone(),
            name: self.name.clone(),
            spec: self.record.spec.clone(),
            start_offsets: self.record.starts.clone(),
            created_ms: self.record.created_ms,
        }
    }
}

#[derive(Clone)]
struct Lease {
    key: Key,
    due: i64,
    version: u64,
    record: LeaseRecord,
}

/// One partition's queue state as read.
struct QueueState {
    cursor: CursorRecord,
    /// `None` while the cursor item does not exist yet.
    cursor_version: Option<u64>,
    /// In sort-key order: due time, then nonce.
    leases: Vec<Lease>,
}

impl QueueState {
    fn cursor_write(&self, sub_id: u64, partition: u32, cursor: CursorRecord) -> WriteOp {
        WriteOp::replace(cursor_key(sub_id, partition), layout::encode(&cursor), self.cursor_version)
    }
}

/// What one receive got from one partition, and when it is worth looking again.
#[derive(Default)]
struct Taken {
    messages: Vec<Message>,
    /// When the taken messages' visibility window ends.
    held_until: i64,
    /// The earliest time something not yet due becomes deliverable.
    wake_at: Option<i64>,
    /// The partition's cursor when it has nothing at all to deliver: wait for the log.
    idle_at: Option<u64>,
    /// Messages wait behind their keys: an ack elsewhere may free them at any time.
    blocked: bool,
}

/// A message a receive may deliver: from a due lease (`lease` is its index) or new from the log.
struct Candidate {
    msg: LeaseMsg,
    lease: Option<usize>,
    receives: u32,
    /// A new message still within the subscription's delay: the time it becomes visible.
    waiting: Option<i64>,
}

/// What one take chose, before its write.
#[derive(Default)]
struct Pick {
    /// Indexes of the candidates to deliver, in candidate order.
    chosen: Vec<usize>,
    /// New messages parked behind their key: visible, never delivered.
    parked: Vec<LeaseMsg>,
    /// New messages parked until their delay ends, by that time.
    delayed: BTreeMap<i64, Vec<LeaseMsg>>,
    /// Lease messages gone from the log.
    gone: HashSet<u64>,
    /// Due leases this write changes, and the receive counts of the leases it creates.
    touched: HashSet<usize>,
    groups: HashSet<u32>,
    cursor_next: u64,
}

impl Pick {
    fn parked_count(&self) -> usize {
        self.parked.len() + self.delayed.values().map(Vec::len).sum::<usize>()
    }
}

/// What a batch of receipts asks for.
#[derive(Debug, Clone, Copy)]
enum Settle {
    Ack,
    /// Visible again at this time, not held by anyone.
    Release {
        at: i64,
    },
    /// Held (by the same receipt) until this time.
    Hold {
        until: i64,
    },
}

fn min_time(a: Option<i64>, b: i64) -> Option<i64> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// Work queues on a [`Log`]. Build one per process and clone it (clones share its
/// state): it caches the receipt key and steers concurrent receives apart.
#[derive(Clone)]
pub struct Queues {
    log: Log,
    local: Arc<Local>,
}

/// What the queues of one process keep between requests. Only savings: a fresh one
/// changes no answer.
#[derive(Default)]
struct Local {
    /// The receipt-signing key, once read (it never changes).
    receipt_key: tokio::sync::OnceCell<[u8; 32]>,
    /// (subscription id, partition) pairs a receive of this process is taking from.
    claims: Arc<Mutex<HashSet<(u64, u32)>>>,
}

/// A receive's claim on one queue partition in this process, released when dropped.
/// Only steers receives apart: their conditional writes are what keeps them safe.
struct PartitionClaim {
    claims: Arc<Mutex<HashSet<(u64, u32)>>>,
    key: (u64, u32),
}

impl Drop for PartitionClaim {
    fn drop(&mut self) {
        self.claims.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.key);
    }
}

impl Queues {
    pub fn new(log: Log) -> Self {
        Self { log, local: Arc::default() }
    }

    /// Claims a queue partition for one receive of this process, unless another has it.
    fn claim_partition(&self, sub_id: u64, partition: u32) -> Option<PartitionClaim> {
        let key = (sub_id, partition);
        let claims = self.local.claims.clone();
        let fresh = claims.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
        fresh.then_some(PartitionClaim { claims, key })
    }

    fn store(&self) -> &dyn StateStore {
        self.log.store().as_ref()
    }

    fn now(&self) -> i64 {
        self.log.clock().now_ms()
    }

    fn nonce(&self) -> u64 {
        self.log.random().next_u64()
    }

    /// The key receipts are signed with: made once per store, kept in it, then cached
    /// for the life of the process (it never changes, so a cached copy is never stale).
    async fn receipt_key(&self) -> Result<[u8; 32], Error> {
        let key = self
            .local
            .receipt_key
            .get_or_try_init(|| async {
                let item_key = Key::new("queues", "receipt-key");
                for _ in 0..MAX_ATTEMPTS {
                    if let Some(item) = self.store().get(&item_key).await? {
                        let text = std::str::from_utf8(&item.value).unwrap_or_default();
                        let mut key = [0u8; 32];
                        for (i, byte) in key.iter_mut().enumerate() {
                            *byte = text
                                .get(2 * i..2 * i + 2)
                                .and_then(|h| u8::from_str_radix(h, 16).ok())
                                .ok_or_else(|| Error::Corrupt("receipt key".into()))?;
                        }
                        return Ok(key);
                    }
                    let mut key = [0u8; 32];
                    for chunk in key.chunks_mut(8) {
                        chunk.copy_from_slice(&self.nonce().to_be_bytes());
                    }
                    let value = bytes::Bytes::from(layout::hex(&key));
                    match self.store().write(vec![WriteOp::create(item_key.clone(), value)]).await {
                        Ok(()) => return Ok(key),
                        Err(StorageError::ConditionFailed { .. }) => continue,
                        Err(e) => return Err(Error::from(e)),
                    }
                }
                Err(Error::Corrupt("receipt key could not be read or made".into()))
            })
            .await?;
        Ok(*key)
    }

    async fn sub(&self, topic: &str, name: &str) -> Result<Sub, Error> {
        names::validate("topic", topic)?;
        names::validate("subscription", name)?;
        let topic = topics::live(self.store(), topic).await?;
        match self.sub_item(&topic, name).await? {
            Some(sub) if !sub.record.deleted => Ok(sub),
            _ => Err(Error::SubscriptionNotFound { topic: topic.name, subscription: name.to_owned() }),
        }
    }

    /// The subscription's item, a tombstone included.
    async fn sub_item(&self, topic: &TopicConfig, name: &str) -> Result<Option<Sub>, Error> {
        let Some(item) = self.store().get(&sub_key(topic.id, name)).await? else { return Ok(None) };
        let record = layout::decode("subscription", &item.value)?;
        Ok(Some(Sub { topic: topic.clone(), name: name.to_owned(), record, version: item.version }))
    }

    /// Creates a subscription, or answers the existing one if its settings are the same
    /// (`false`: it already existed). The start is fixed now: `latest` means the heads
    /// as they are at creation, whenever the first receive comes.
    pub async fn create(&self, topic: &str, name: &str, spec: SubscriptionSpec) -> Result<(Subscription, bool), Error> {
        names::validate("topic", topic)?;
        names::validate("subscription", name)?;
        spec.validate()?;
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            match self.sub(topic, name).await {
                Ok(existing) if existing.record.spec == spec => return Ok((existing.describe(), false)),
                Ok(_) => {
                    return Err(Error::Conflict {
                        code: "subscription_exists",
                        message: format!("subscription '{name}' of topic '{topic}' exists with other settings"),
                    })
                }
                Err(Error::SubscriptionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            let topic = topics::live(self.store(), topic).await?;
            let tombstone = self.sub_item(&topic, name).await?.filter(|s| s.record.deleted).map(|s| s.version);
            let starts = self.start_offsets(&topic, &spec.start).await?;
            let record = SubscriptionRecord {
                id: self.nonce(),
                spec: spec.clone(),
                starts,
                created_ms: self.now(),
                deleted: false,
            };
            let ops = vec![
                WriteOp::replace(sub_key(topic.id, name), layout::encode(&record), tombstone),
                // Not on a topic deleted meanwhile: its subscriptions would never be purged.
                WriteOp::Check { key: layout::topic_key(&topic.name), expect: Expect::Version(topic.version) },
            ];
            match self.store().write(ops).await {
                Ok(()) => {
                    tracing::info!(topic = %topic.name, subscription = name, "subscription created");
                    let sub = Sub { topic, name: name.to_owned(), record, version: tombstone.map_or(1, |v| v + 1) };
                    return Ok((sub.describe(), true));
                }
                Err(e) => self.lost_race(e, &mut attempt).await?,
            }
        }
        Err(contended(name))
    }

    async fn start_offsets(&self, topic: &TopicConfig, start: &StartAt) -> Result<Vec<u64>, Error> {
        let heads = topics::heads(self.store(), topic).await?;
        if let StartAt::Offsets(offsets) = start {
            if let Some(p) = offsets.keys().find(|p| **p >= topic.spec.partitions) {
                return Err(Error::invalid("invalid_start", format!("topic '{}' has no partition {p}", topic.name)));
            }
        }
        let mut starts = Vec::with_capacity(heads.len());
        for (p, (head, _)) in heads.iter().enumerate() {
            let offset = match start {
                StartAt::Latest => head.next,
                StartAt::Earliest => head.start,
                StartAt::Timestamp(ts) => self.log.offset_of(topic, p as u32, OffsetQuery::Timestamp(*ts)).await?,
                StartAt::Offsets(offsets) => match offsets.get(&(p as u32)) {
                    None => head.next,
                    Some(o) if (head.start..=head.next).contains(o) => *o,
                    Some(o) => {
                        return Err(Error::invalid(
                            "invalid_start",
                            format!(
                                "offset {o} of partition {p} is outside its readable range {}..={}",
                                head.start, head.next
                            ),
                        ))
                    }
                },
            };
            starts.push(offset);
        }
        Ok(starts)
    }

    /// The topic's subscriptions, by name.
    pub async fn list(&self, topic: &str) -> Result<Vec<Subscription>, Error> {
        names::validate("topic", topic)?;
        let topic = topics::live(self.store(), topic).await?;
        let mut subs = Vec::new();
        let mut query = Query::all(subs_pk(topic.id), PAGE);
        loop {
            let page = self.store().query(&query).await?;
            for item in page.items {
                let record: SubscriptionRecord = layout::decode("subscription", &item.value)?;
                if !record.deleted {
                    subs.push(
                        Sub { topic: topic.clone(), name: item.key.sk, record, version: item.version }.describe(),
                    );
                }
            }
            match page.next {
                Some(after) => query.after = Some(after),
                None => return Ok(subs),
            }
        }
    }

    /// Deletes a subscription at once (one write: its tombstone and purge order); the janitor
    /// removes its queue items.
    pub async fn delete(&self, topic: &str, name: &str) -> Result<(), Error> {
        let sub = self.sub(topic, name).await?;
        let order = SubPurgeRecord { partitions: sub.topic.spec.partitions, done_partitions: 0 };
        let tombstone = SubscriptionRecord { deleted: true, ..sub.record.clone() };
        let ops = vec![
            WriteOp::replace(sub_key(sub.topic.id, name), layout::encode(&tombstone), Some(sub.version)),
            WriteOp::Put {
                key: sub_purge_key(sub.record.id),
                value: layout::encode(&order),
                expires_at_ms: None,
                expect: Expect::Any,
            },
        ];
        match self.store().write(ops).await {
            Ok(()) => {
                tracing::info!(topic = %sub.topic.name, subscription = name, "subscription deleted");
                Ok(())
            }
            // Deleted meanwhile by someone else (and perhaps re-created since): the
            // subscription this request meant is deleted.
            Err(StorageError::ConditionFailed { .. }) => match self.sub(topic, name).await {
                Err(Error::SubscriptionNotFound { .. }) => Ok(()),
                Ok(now) if now.record.id != sub.record.id => Ok(()),
                Err(e) => Err(e),
                Ok(_) => Err(contended(name)),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// One partition's queue: the cursor and leases, all of them (`limit: None`) or the
    /// first `limit` items, which are the cursor and the leases due soonest.
    async fn load(&self, sub: &Sub, partition: u32, limit: Option<usize>) -> Result<QueueState, StorageError> {
        let mut state = QueueState {
            cursor: CursorRecord { next: sub.start(partition), dead: 0, expired: 0 },
            cursor_version: None,
            leases: Vec::new(),
        };
        let mut query = Query::all(queue_pk(sub.record.id, partition), limit.unwrap_or(PAGE));
        loop {
            let page = self.store().query(&query).await?;
            for item in page.items {
                if item.key.sk == CURSOR_SK {
                    state.cursor = layout::decode("cursor", &item.value)?;
                    state.cursor_version = Some(item.version);
                } else {
                    let due = parse_lease_sk(&item.key.sk)?;
                    let record = layout::decode("lease", &item.value)?;
                    state.leases.push(Lease { key: item.key, due, version: item.version, record });
                }
            }
            match (page.next, limit) {
                (Some(after), None) => query.after = Some(after),
                _ => return Ok(state),
            }
        }
    }

    /// A partition's queue items as they were at one moment, for exact counts: a query is not
    /// a snapshot (DynamoDB's can be torn by a transaction; SQLite pages by [`PAGE`]), so
    /// the items are read until two reads in a row agree on every item and its version
    /// (versions only grow, so two equal reads bracket a moment with no write in between).
    /// Under writes that never pause, the last read is answered after [`SNAPSHOT_READS`].
    async fn snapshot(&self, sub: &Sub, partition: u32) -> Result<(QueueState, bool), StorageError> {
        let fingerprint = |s: &QueueState| -> Vec<(String, u64)> {
            s.leases
                .iter()
                .map(|l| (l.key.sk.clone(), l.version))
                .chain(s.cursor_version.map(|v| (String::new(), v)))
                .collect()
        };
        let mut last = self.load(sub, partition, None).await?;
        for _ in 1..SNAPSHOT_READS {
            let again = self.load(sub, partition, None).await?;
            if fingerprint(&again) == fingerprint(&last) {
                return Ok((again, true));
            }
            last = again;
        }
        Ok((last, false))
    }

    /// Receives up to `max_messages`, waiting up to `wait_ms` for the first. Partitions are
    /// visited from a random one, so concurrent receivers mostly work on different partitions.
    pub async fn receive(&self, topic: &str, name: &str, req: &ReceiveRequest) -> Result<Vec<Message>, Error> {
        Self::check_receive(req)?;
        let sub = self.sub(topic, name).await?;
        self.receive_on(&sub, req).await
    }

    /// Acks `receipts`, then receives: a worker's whole loop in one request (JetStream's
    /// "ack next"). Everything is checked before the acks are written; the acks stand even
    /// if the receive then fails (a retry's acks answer stale).
    pub async fn ack_and_receive(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        req: &ReceiveRequest,
    ) -> Result<(Vec<Result<(), ReceiptError>>, Vec<Message>), Error> {
        Self::check_receive(req)?;
        let sub = self.sub(topic, name).await?;
        let acks = self.settle_on(&sub, receipts, Settle::Ack).await?;
        let acks = acks.into_iter().map(|r| r.map(|_| ())).collect();
        Ok((acks, self.receive_on(&sub, req).await?))
    }

    fn check_receive(req: &ReceiveRequest) -> Result<(), Error> {
        if !(1..=MAX_RECEIVE_MESSAGES).contains(&req.max_messages) {
            return Err(Error::invalid(
                "invalid_max_messages",
                format!("max_messages must be between 1 and {MAX_RECEIVE_MESSAGES}"),
            ));
        }
        if req.wait_ms > MAX_RECEIVE_WAIT_MS {
            return Err(Error::invalid("invalid_wait", format!("wait_ms must be at most {MAX_RECEIVE_WAIT_MS}")));
        }
        if req.visibility_timeout_ms.is_some_and(|v| v > MAX_VISIBILITY_TIMEOUT_MS) {
            return Err(Error::invalid(
                "invalid_visibility_timeout",
                format!("visibility_timeout_ms must be at most {MAX_VISIBILITY_TIMEOUT_MS} (12 h)"),
            ));
        }
        Ok(())
    }

    async fn receive_on(&self, sub: &Sub, req: &ReceiveRequest) -> Result<Vec<Message>, Error> {
        let visibility = req.visibility_timeout_ms.unwrap_or(sub.record.spec.visibility_timeout_ms);
        let receipt_key = self.receipt_key().await?;
        let deadline = self.now() + req.wait_ms as i64;
        let partitions = sub.topic.spec.partitions;
        loop {
            let heads = topics::heads(self.store(), &sub.topic).await?;
            let mut messages: Vec<Message> = Vec::new();
            // Per take, the end (exclusive) of its messages in `messages` and their window's end.
            let mut held: Vec<(usize, i64)> = Vec::new();
            let (mut wake_at, mut idle, mut blocked) = (None, Vec::new(), false);
            let mut bytes_left = self.log.limits().max_response_bytes;
            let start = (self.nonce() % u64::from(partitions.max(1))) as u32;
            // First the partitions no other receive of this process is taking from (two
            // would only race for one write), then, if more is wanted, the busy ones.
            let mut visits: VecDeque<(u32, bool)> = (0..partitions).map(|i| ((start + i) % partitions, true)).collect();
            while let Some((p, first_pass)) = visits.pop_front() {
                if messages.len() >= req.max_messages || bytes_left == 0 {
                    break;
                }
                let claim = if first_pass { self.claim_partition(sub.record.id, p) } else { None };
                if first_pass && claim.is_none() {
                    visits.push_back((p, false));
                    continue;
                }
                let head = heads.get(p as usize).map(|(h, _)| *h).unwrap_or_default();
                let want = req.max_messages - messages.len();
                let first = messages.is_empty();
                let taken = match self.take(sub, p, head, want, visibility, &receipt_key, &mut bytes_left, first).await
                {
                    Ok(taken) => taken,
                    // Messages already taken from other partitions are answered, not stranded.
                    Err(e) if !messages.is_empty() => {
                        tracing::warn!(error = %e, partition = p, "receive stopped early");
                        break;
                    }
                    Err(e) => return Err(e),
                };
                drop(claim);
                if !taken.messages.is_empty() {
                    held.push((messages.len() + taken.messages.len(), taken.held_until));
                }
                messages.extend(taken.messages);
                wake_at = taken.wake_at.map_or(wake_at, |t| min_time(wake_at, t));
                blocked |= taken.blocked;
                if let Some(cursor) = taken.idle_at {
                    idle.push((sub.topic.clone(), p, cursor));
                }
            }
            let now = self.now();
            if !messages.is_empty() {
                return Ok(answerable(messages, &held, now));
            }
            if now >= deadline {
                return Ok(messages);
            }
            let mut until = deadline;
            if let Some(t) = wake_at {
                until = until.min(t);
            }
            if blocked {
                until = until.min(now + self.log.poll_interval_ms() as i64);
            }
            let nap = (until - now).max(1) as u64;
            if idle.is_empty() {
                self.log.clock().sleep(nap).await;
            } else {
                self.log.wait_for_any(&idle, nap).await?;
            }
        }
    }

    /// Takes up to `want` messages of one partition: due leases first (dead ones go to the
    /// DLQ), then new messages from the log; one atomic write, retried on contention.
    /// `bytes_left` is what the receive's answer may still grow by; `first` says nothing
    /// has been taken yet (the first message is taken whatever its size).
    #[allow(clippy::too_many_arguments)]
    async fn take(
        &self,
        sub: &Sub,
        partition: u32,
        mut head: HeadRecord,
        want: usize,
        visibility: u64,
        receipt_key: &[u8; 32],
        bytes_left: &mut usize,
        first: bool,
    ) -> Result<Taken, Error> {
        let spec = &sub.record.spec;
        let keyed = spec.ordering == Ordering::Key;
        let limits = *self.log.limits();
        let (mut attempt, mut burials) = (0, 0);
        while attempt < MAX_ATTEMPTS {
            let now = self.now();
            // Unordered, the cursor and the leases due soonest are enough (one past `want`
            // tells when the next one is due); keyed, every lease's keys matter.
            let state = self.load(sub, partition, if keyed { None } else { Some(want + 2) }).await?;
            if state.cursor.next > head.next {
                // Another receiver took events published after this receive read the heads.
                head = topics::head(self.store(), sub.topic.id, partition).await?.0;
            }
            let dead: Vec<usize> = (0..state.leases.len())
                .filter(|&i| state.leases[i].due <= now && state.leases[i].record.receives >= spec.max_receive_count)
                .collect();
            if !dead.is_empty() && burials < MAX_BURIALS {
                burials += 1;
                match self.bury(sub, partition, &state, &dead, now).await {
                    Ok(()) => continue,
                    Err(e) => {
                        self.lost_race(e, &mut attempt).await?;
                        continue;
                    }
                }
            }
            let mut taken = Taken::default();
            let mut blocked_keys: HashSet<u64> = HashSet::new();
            let mut candidates = Vec::new();
            let mut parked_before = 0;
            for (i, lease) in state.leases.iter().enumerate() {
                if lease.record.held_until.is_none() && lease.record.receives == 0 && !lease.record.redriven {
                    parked_before += lease.record.msgs.len();
                }
                if lease.due > now {
                    taken.wake_at = min_time(taken.wake_at, lease.due);
                    if keyed {
                        blocked_keys.extend(lease.record.msgs.iter().filter_map(|m| m.key));
                    }
                } else if !dead.contains(&i) {
                    candidates.extend(lease.record.msgs.iter().map(|m| Candidate {
                        msg: *m,
                        lease: Some(i),
                        receives: lease.record.receives,
                        waiting: None,
                    }));
                }
            }
            // New messages from the log, only as far as they will be delivered or parked.
            let room = if keyed {
                // A look-ahead past blocked keys, not the whole park: a receive reads what it can use.
                want + PARK_LIMIT.saturating_sub(parked_before).min(want * 3)
            } else {
                want.saturating_sub(candidates.len())
            };
            // Where new messages start: offsets below the log start were removed by retention
            // before the queue took them, and are counted as expired when the cursor passes them.
            let mut base = state.cursor.next.max(head.start);
            let mut payloads: HashMap<u64, Event> = HashMap::new();
            if room > 0 && base < head.next {
                let read = self
                    .log
                    .read_at(&sub.topic, partition, base, room.min(limits.max_read_events), limits.max_read_bytes, head)
                    .await;
                let batch = match read {
                    Ok(batch) => batch,
                    // Retention moved the log start past `base` while it was read: look again
                    // from the new start (what it passes over is counted as expired then).
                    Err(Error::OffsetOutOfRange { .. }) => {
                        attempt += 1;
                        head = topics::head(self.store(), sub.topic.id, partition).await?.0;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                // The log start moved past `base` since the heads were read.
                base = base.max(batch.events.first().map_or(base, |e| e.offset));
                for event in batch.events {
                    let waiting = (spec.delay_ms > 0)
                        // From its timestamp, or from now if the publisher's clock ran ahead.
                        .then(|| event.record.timestamp_ms.min(now).saturating_add(spec.delay_ms as i64))
                        .filter(|at| *at > now);
                    let key = if keyed { event.record.key.as_deref().map(key_hash) } else { None };
                    candidates.push(Candidate {
                        msg: LeaseMsg { offset: event.offset, first_ms: 0, key },
                        lease: None,
                        receives: 0,
                        waiting,
                    });
                    payloads.insert(event.offset, event);
                }
                // Messages still within their delay at the end of what was read stay in the
                // log: the cursor stops at the first of them (timestamps growing with offsets,
                // the common case, park nothing).
                while let Some(at) = candidates.last().filter(|c| c.lease.is_none()).and_then(|c| c.waiting) {
                    taken.wake_at = min_time(taken.wake_at, at);
                    candidates.pop();
                }
            }
            if keyed {
                // Offsets in leases are all below the cursor: in offset order, a key's
                // earliest waiting message always comes first.
                candidates.sort_by_key(|c| c.msg.offset);
            }

            // Choose: at most `want`; keyed, one per key and none of a blocked key (every
            // candidate considered marks its key, so a later one of the key never overtakes
            // it); within one write's operations.
            let mut pick = Pick::default();
            // The cursor, the parked lease, and the subscription's check on a first write.
            let mut ops_left = MAX_WRITE_OPS - 3 - MAX_DELAY_LEASES;
            for (ci, c) in candidates.iter().enumerate() {
                let full = pick.chosen.len() >= want;
                if c.lease.is_none() && full {
                    break; // the cursor stops here: the rest stay in the log
                }
                if let Some(at) = c.waiting {
                    // Within its delay, but later messages are due: parked until its time,
                    // its key (if ordered) held back behind it.
                    let new_lease = !pick.delayed.contains_key(&at);
                    if parked_before + pick.parked_count() >= PARK_LIMIT
                        || (new_lease && pick.delayed.len() >= MAX_DELAY_LEASES)
                    {
                        break;
                    }
                    if let Some(k) = c.msg.key {
                        blocked_keys.insert(k);
                    }
                    pick.delayed.entry(at).or_default().push(c.msg);
                    taken.wake_at = min_time(taken.wake_at, at);
                    pick.cursor_next = c.msg.offset + 1;
                    continue;
                }
                // Removed from the log by retention: dropped from its lease, never delivered.
                if let Some(i) = c.lease.filter(|_| c.msg.offset < head.start) {
                    let cost = usize::from(!pick.touched.contains(&i));
                    if cost <= ops_left {
                        ops_left -= cost;
                        pick.touched.insert(i);
                        pick.gone.insert(c.msg.offset);
                    }
                    continue;
                }
                let free = match c.msg.key {
                    Some(k) if keyed => blocked_keys.insert(k),
                    _ => true,
                };
                if free && !full {
                    let cost = c.lease.map_or(0, |i| usize::from(!pick.touched.contains(&i)))
                        + usize::from(!pick.groups.contains(&(c.receives + 1)));
                    if cost > ops_left {
                        if c.lease.is_none() {
                            break;
                        }
                        continue;
                    }
                    ops_left -= cost;
                    if let Some(i) = c.lease {
                        pick.touched.insert(i);
                    }
                    pick.groups.insert(c.receives + 1);
                    pick.chosen.push(ci);
                } else if c.lease.is_none() {
                    if parked_before + pick.parked_count() >= PARK_LIMIT {
                        break;
                    }
                    pick.parked.push(c.msg);
                } else {
                    taken.blocked = true;
                    continue;
                }
                if c.lease.is_none() {
                    pick.cursor_next = c.msg.offset + 1;
                }
            }
            pick.cursor_next = pick.cursor_next.max(base);

            // The payloads of what was chosen from leases (new messages' are read), then the
            // answer's size: what does not fit stays (in its lease, or in the log).
            let lease_offsets: Vec<u64> = pick
                .chosen
                .iter()
                .filter(|&&ci| candidates[ci].lease.is_some())
                .map(|&ci| candidates[ci].msg.offset)
                .collect();
            payloads.extend(self.events_at(&sub.topic, partition, &lease_offsets, head).await?);
            let mut left = *bytes_left;
            let mut cut: Option<u64> = None;
            let mut kept = Vec::with_capacity(pick.chosen.len());
            for &ci in &pick.chosen {
                let c = &candidates[ci];
                if c.lease.is_none() && cut.is_some() {
                    continue;
                }
                let size = payloads.get(&c.msg.offset).map(|e| rendered_size(&e.record));
                match size {
                    Some(size) if size <= left || (first && kept.is_empty()) => {
                        left = left.saturating_sub(size);
                        kept.push(ci);
                    }
                    _ if c.lease.is_none() => cut = Some(c.msg.offset),
                    _ => {}
                }
            }
            if let Some(at) = cut {
                pick.cursor_next = at.max(base);
                pick.parked.retain(|m| m.offset < at);
                for msgs in pick.delayed.values_mut() {
                    msgs.retain(|m| m.offset < at);
                }
                pick.delayed.retain(|_, msgs| !msgs.is_empty());
            }
            taken.blocked |= !pick.parked.is_empty();
            let skipped = base - state.cursor.next.min(base);
            // Only expired messages to pass over: written, then the partition is looked at again.
            let only_expired = kept.is_empty() && pick.parked.is_empty() && pick.delayed.is_empty();
            if only_expired && pick.gone.is_empty() && skipped == 0 {
                let nothing_due = !state.leases.iter().any(|l| l.due <= now);
                if nothing_due && state.cursor.next >= head.next {
                    taken.idle_at = Some(state.cursor.next);
                } else if !candidates.is_empty() || !dead.is_empty() {
                    // Blocked keys, or dead leases left for the next burial: look again soon.
                    taken.blocked = true;
                }
                return Ok(taken);
            }

            // One write: the cursor past what was taken or parked (keyed, at least checked:
            // a lease moved while the leases were read shows as a new cursor version), the
            // due leases emptied of what was taken, a new lease per receive count, and the
            // parked messages.
            // Expired messages are counted in the write that passes over them, conditional on
            // the cursor's and the leases' versions: exactly once.
            let mut ops = Vec::new();
            if state.cursor_version.is_none() {
                // The partition's first items: created on absence, so only while the subscription
                // lives (a receive racing its delete would otherwise leave items its purge missed).
                // Later writes need no such check: the purge deletes the cursor they are conditional on.
                ops.push(WriteOp::Check {
                    key: sub_key(sub.topic.id, &sub.name),
                    expect: Expect::Version(sub.version),
                });
            }
            if pick.cursor_next > state.cursor.next || !pick.gone.is_empty() {
                let expired = state.cursor.expired + skipped + pick.gone.len() as u64;
                ops.push(state.cursor_write(
                    sub.record.id,
                    partition,
                    CursorRecord { next: pick.cursor_next, dead: state.cursor.dead, expired },
                ));
            } else if keyed {
                // Rewritten, not only checked: a keyed receiver that read the leases while
                // this write moved some of them reads an older cursor, and fails.
                ops.push(state.cursor_write(sub.record.id, partition, state.cursor));
            }
            let mut removed: BTreeMap<usize, HashSet<u64>> = BTreeMap::new();
            for &ci in &kept {
                if let Some(i) = candidates[ci].lease {
                    removed.entry(i).or_default().insert(candidates[ci].msg.offset);
                }
            }
            for (i, lease) in state.leases.iter().enumerate() {
                let gone: Vec<u64> =
                    lease.record.msgs.iter().map(|m| m.offset).filter(|o| pick.gone.contains(o)).collect();
                if !gone.is_empty() {
                    removed.entry(i).or_default().extend(gone);
                }
            }
            for (i, offsets) in &removed {
                ops.push(shrink(&state.leases[*i], offsets));
            }
            // The window counts from the write, not from the reads before it: a slow read
            // must not shorten it.
            let held_until = self.now().max(now).saturating_add(visibility as i64);
            let mut by_receives: BTreeMap<u32, Vec<LeaseMsg>> = BTreeMap::new();
            for &ci in &kept {
                let c = &candidates[ci];
                let first_ms = if c.msg.first_ms == 0 { now } else { c.msg.first_ms };
                by_receives.entry(c.receives + 1).or_default().push(LeaseMsg { first_ms, ..c.msg });
            }
            let mut delivered = Vec::new();
            for (receives, msgs) in by_receives {
                let nonce = self.nonce();
                let due = held_until.saturating_add(spec.backoff_ms(receives));
                for m in &msgs {
                    let receipt = Receipt { sub_id: sub.record.id, partition, offset: m.offset, nonce, due, receives };
                    delivered.push((m.offset, receipt.encode(receipt_key), receives, m.first_ms));
                }
                let lease = LeaseRecord {
                    nonce,
                    receives,
                    held_until: Some(held_until),
                    delivered_ms: now,
                    msgs,
                    redriven: false,
                };
                ops.push(self.new_lease(sub, partition, due, lease));
            }
            let parked = std::mem::take(&mut pick.parked);
            let waiting = std::mem::take(&mut pick.delayed);
            for (due, msgs) in std::iter::once((now, parked)).chain(waiting) {
                if !msgs.is_empty() {
                    let lease = LeaseRecord {
                        nonce: self.nonce(),
                        receives: 0,
                        held_until: None,
                        delivered_ms: now,
                        msgs,
                        redriven: false,
                    };
                    ops.push(self.new_lease(sub, partition, due, lease));
                }
            }
            let checks_sub = state.cursor_version.is_none();
            if let Err(e) = self.store().write(ops).await {
                if checks_sub && matches!(e, StorageError::ConditionFailed { op: 0 }) {
                    return Err(Error::SubscriptionNotFound {
                        topic: sub.topic.name.clone(),
                        subscription: sub.name.clone(),
                    });
                }
                // An unknown outcome may have leased messages to no one: they come back
                // when that visibility window ends, so nothing is lost or held twice.
                self.lost_race(e, &mut attempt).await?;
                continue;
            }
            if only_expired {
                continue;
            }
            *bytes_left = left;
            taken.held_until = held_until;
            delivered.sort_unstable_by_key(|(offset, ..)| *offset);
            taken.messages = delivered
                .into_iter()
                .filter_map(|(offset, receipt, receive_count, first_receive_ms)| {
                    payloads.remove(&offset).map(|event| Message { receipt, receive_count, first_receive_ms, event })
                })
                .collect();
            return Ok(taken);
        }
        Ok(Taken { blocked: true, ..Taken::default() })
    }

    /// A write that creates a lease of `partition` due at `due`.
    fn new_lease(&self, sub: &Sub, partition: u32, due: i64, lease: LeaseRecord) -> WriteOp {
        WriteOp::create(
            Key::new(queue_pk(sub.record.id, partition), lease_sk(due, lease.nonce)),
            layout::encode(&lease),
        )
    }

    /// Whether a failed conditional write is worth another read: a lost race (or, on
    /// DynamoDB, a conflicting transaction: after a jittered pause) counts an attempt;
    /// anything else is the request's error.
    async fn lost_race(&self, e: StorageError, attempt: &mut usize) -> Result<(), Error> {
        *attempt += 1;
        match e {
            StorageError::ConditionFailed { .. } => Ok(()),
            StorageError::Throttled { .. } if *attempt < MAX_ATTEMPTS => {
                self.log
                    .clock()
                    .sleep(crate::retry::Backoff::CONTENTION.wait_ms(*attempt as u32, self.log.random().next_u64()))
                    .await;
                Ok(())
            }
            e => Err(e.into()),
        }
    }

    /// Moves the messages of leases that ran out of deliveries (up to a write's worth) to
    /// the dead-letter queue: exactly once, as each lease's version is checked.
    async fn bury(
        &self,
        sub: &Sub,
        partition: u32,
        state: &QueueState,
        dead: &[usize],
        now: i64,
    ) -> Result<(), StorageError> {
        let mut ops = Vec::new();
        let mut buried = 0;
        for &i in dead {
            let lease = &state.leases[i];
            // Each lease costs its own op besides one per message.
            let room = DEAD_PER_WRITE.saturating_sub(ops.len() + 1);
            if room == 0 {
                break;
            }
            let msgs: Vec<LeaseMsg> = lease.record.msgs.iter().take(room).copied().collect();
            let offsets: HashSet<u64> = msgs.iter().map(|m| m.offset).collect();
            ops.push(shrink(lease, &offsets));
            for m in &msgs {
                let dead = DeadRecord {
                    reason: DEAD_REASON.into(),
                    receives: lease.record.receives,
                    first_ms: m.first_ms,
                    last_ms: lease.record.delivered_ms,
                    dead_ms: now,
                    key: m.key,
                };
                ops.push(WriteOp::create(
                    Key::new(dlq_pk(sub.record.id, partition), layout::offset_sk(m.offset)),
                    layout::encode(&dead),
                ));
            }
            buried += msgs.len() as u64;
        }
        ops.push(state.cursor_write(
            sub.record.id,
            partition,
            CursorRecord { dead: state.cursor.dead + buried, ..state.cursor },
        ));
        self.store().write(ops).await?;
        tracing::info!(topic = %sub.topic.name, subscription = %sub.name, partition, messages = buried, "dead-lettered");
        Ok(())
    }

    /// Buries every dead lease of a partition (before the DLQ is listed or redriven).
    async fn bury_all(&self, sub: &Sub, partition: u32) -> Result<(), Error> {
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let now = self.now();
            let state = self.load(sub, partition, None).await?;
            let dead: Vec<usize> = (0..state.leases.len())
                .filter(|&i| {
                    state.leases[i].due <= now && state.leases[i].record.receives >= sub.record.spec.max_receive_count
                })
                .collect();
            if dead.is_empty() {
                return Ok(());
            }
            if let Err(e) = self.bury(sub, partition, &state, &dead, now).await {
                self.lost_race(e, &mut attempt).await?;
            }
        }
        Err(contended(&sub.name))
    }

    /// The events at these offsets of a partition, read in runs of consecutive offsets.
    async fn events_at(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offsets: &[u64],
        head: HeadRecord,
    ) -> Result<HashMap<u64, Event>, Error> {
        let mut sorted = offsets.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut found = HashMap::with_capacity(sorted.len());
        let limits = *self.log.limits();
        let mut i = 0;
        while i < sorted.len() {
            let mut end = i;
            while end + 1 < sorted.len() && sorted[end + 1] == sorted[end] + 1 {
                end += 1;
            }
            let (first, last) = (sorted[i], sorted[end]);
            let mut next = first.max(head.start);
            while next <= last && next < head.next {
                let want = (last - next + 1) as usize;
                let read = self
                    .log
                    .read_at(topic, partition, next, want.min(limits.max_read_events), limits.max_read_bytes, head)
                    .await;
                let batch = match read {
                    Ok(batch) => batch,
                    // Retention removed them while they were read: they are not found.
                    Err(Error::OffsetOutOfRange { log_start_offset, .. }) if log_start_offset > next => {
                        next = log_start_offset;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let Some(last_read) = batch.events.last().map(|e| e.offset) else { break };
                for e in batch.events {
                    if e.offset <= last {
                        found.insert(e.offset, e);
                    }
                }
                next = last_read + 1;
            }
            i = end + 1;
        }
        Ok(found)
    }

    /// Acks: each message is removed for good, unless its receipt is stale.
    pub async fn ack(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
    ) -> Result<Vec<Result<(), ReceiptError>>, Error> {
        let results = self.settle(topic, name, receipts, Settle::Ack).await?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Releases held messages: visible again after `delay_ms`, their receive counts kept.
    pub async fn nack(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        delay_ms: u64,
    ) -> Result<Vec<Result<(), ReceiptError>>, Error> {
        if delay_ms > MAX_RELEASE_DELAY_MS {
            return Err(Error::invalid(
                "invalid_delay",
                format!("delay_ms must be at most {MAX_RELEASE_DELAY_MS} (12 h)"),
            ));
        }
        let at = self.now() + delay_ms as i64;
        let results = self.settle(topic, name, receipts, Settle::Release { at }).await?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Moves the end of held messages' visibility window to now + `visibility_timeout_ms`
    /// (0: visible now, as a release). Answers the receipt to use from now on (the old one
    /// keeps working, at the cost of a lookup), none after a release.
    pub async fn change_visibility(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        visibility_timeout_ms: u64,
    ) -> Result<Vec<VisibilityResult>, Error> {
        if visibility_timeout_ms > MAX_VISIBILITY_TIMEOUT_MS {
            return Err(Error::invalid(
                "invalid_visibility_timeout",
                format!("visibility_timeout_ms must be at most {MAX_VISIBILITY_TIMEOUT_MS} (12 h)"),
            ));
        }
        let now = self.now();
        let settle = if visibility_timeout_ms == 0 {
            Settle::Release { at: now }
        } else {
            Settle::Hold { until: now + visibility_timeout_ms as i64 }
        };
        self.settle(topic, name, receipts, settle).await
    }

    /// Applies `action` to each receipt's message; answers per receipt (with the new
    /// receipt of a held message).
    async fn settle(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        action: Settle,
    ) -> Result<Vec<Result<Option<String>, ReceiptError>>, Error> {
        let sub = self.sub(topic, name).await?;
        self.settle_on(&sub, receipts, action).await
    }

    async fn settle_on(
        &self,
        sub: &Sub,
        receipts: &[String],
        action: Settle,
    ) -> Result<Vec<Result<Option<String>, ReceiptError>>, Error> {
        if receipts.len() > MAX_RECEIPTS {
            return Err(Error::invalid("too_many_receipts", format!("at most {MAX_RECEIPTS} receipts per request")));
        }
        let receipt_key = self.receipt_key().await?;
        let mut results: Vec<Result<Option<String>, ReceiptError>> = vec![Err(ReceiptError::Invalid); receipts.len()];
        let mut by_partition: BTreeMap<u32, Vec<(usize, Receipt)>> = BTreeMap::new();
        for (i, text) in receipts.iter().enumerate() {
            match Receipt::decode(text, &receipt_key) {
                Some(r) if r.sub_id == sub.record.id && r.partition < sub.topic.spec.partitions => {
                    by_partition.entry(r.partition).or_default().push((i, r));
                }
                _ => {}
            }
        }
        for (partition, receipts) in by_partition {
            self.settle_partition(sub, partition, &receipts, action, &receipt_key, &mut results).await?;
        }
        Ok(results)
    }

    /// Settles one partition's receipts, a write's worth of leases at a time.
    async fn settle_partition(
        &self,
        sub: &Sub,
        partition: u32,
        receipts: &[(usize, Receipt)],
        action: Settle,
        receipt_key: &[u8; 32],
        results: &mut [Result<Option<String>, ReceiptError>],
    ) -> Result<(), Error> {
        let pk = queue_pk(sub.record.id, partition);
        // Keyed, a lease moved to an earlier time could hide from a receiver reading the
        // leases meanwhile: such moves also bump the cursor, which keyed receives check.
        let bump_cursor = sub.record.spec.ordering == Ordering::Key && !matches!(action, Settle::Ack);
        let mut pending: Vec<(usize, Receipt)> = receipts.to_vec();
        let mut attempt = 0;
        while !pending.is_empty() {
            if attempt >= MAX_ATTEMPTS {
                return Err(contended(&sub.name));
            }
            // The leases the receipts name, by key; the whole partition if one is not
            // where its receipt says (a visibility change moved it) or after a lost race.
            let mut leases: BTreeMap<String, Lease> = BTreeMap::new();
            let mut state = None;
            let mut everything = attempt > 0;
            if !everything {
                let mut hinted: Vec<(i64, u64)> = pending.iter().map(|(_, r)| (r.due, r.nonce)).collect();
                hinted.sort_unstable();
                hinted.dedup();
                for (due, nonce) in hinted {
                    let key = Key::new(pk.clone(), lease_sk(due, nonce));
                    if let Some(item) = self.store().get(&key).await? {
                        let record: LeaseRecord = layout::decode("lease", &item.value)?;
                        leases.insert(key.sk.clone(), Lease { key, due, version: item.version, record });
                    }
                }
                everything = pending.iter().any(|(_, r)| holder(&leases, r).is_none());
            }
            if everything {
                // A receipt whose lease is not where it says: the whole partition, as of one
                // moment, so a lease a concurrent write was moving cannot hide from a torn read
                // and make a valid receipt answer stale.
                let (loaded, settled) = self.snapshot(sub, partition).await?;
                if !settled {
                    attempt += 1;
                    continue;
                }
                leases = loaded.leases.iter().map(|l| (l.key.sk.clone(), l.clone())).collect();
                state = Some(loaded);
            } else if bump_cursor {
                state = Some(self.load(sub, partition, Some(1)).await?);
            }
            // This round: receipts in order until their messages' leases fill a write.
            let mut round: Vec<Option<(String, LeaseMsg)>> = Vec::new();
            let mut removed: BTreeMap<String, HashSet<u64>> = BTreeMap::new();
            for (_, r) in &pending {
                let found = holder(&leases, r);
                if let Some((sk, _)) = &found {
                    if !removed.contains_key(sk) && removed.len() >= LEASES_PER_WRITE {
                        break;
                    }
                    removed.entry(sk.clone()).or_default().insert(r.offset);
                }
                round.push(found);
            }
            let mut ops: Vec<WriteOp> = removed.iter().map(|(sk, offsets)| shrink(&leases[sk], offsets)).collect();
            // Where the removed messages go: nowhere (ack), a released lease, or a held one.
            let mut new_receipts: HashMap<u64, String> = HashMap::new();
            let mut moved: BTreeMap<String, LeaseRecord> = BTreeMap::new();
            for (sk, offsets) in &removed {
                let from = &leases[sk];
                let msgs: Vec<LeaseMsg> =
                    from.record.msgs.iter().filter(|m| offsets.contains(&m.offset)).copied().collect();
                let receives = from.record.receives;
                let (due, nonce, held_until) = match action {
                    Settle::Ack => continue,
                    Settle::Release { at } => (at, self.nonce(), None),
                    Settle::Hold { until } => {
                        (until.saturating_add(sub.record.spec.backoff_ms(receives)), from.record.nonce, Some(until))
                    }
                };
                if held_until.is_some() {
                    for m in &msgs {
                        let receipt =
                            Receipt { sub_id: sub.record.id, partition, offset: m.offset, nonce, due, receives };
                        new_receipts.insert(m.offset, receipt.encode(receipt_key));
                    }
                }
                let lease = moved.entry(lease_sk(due, nonce)).or_insert_with(|| LeaseRecord {
                    nonce,
                    receives,
                    held_until,
                    delivered_ms: from.record.delivered_ms,
                    msgs: Vec::new(),
                    redriven: false,
                });
                lease.msgs.extend(msgs);
            }
            for (sk, mut lease) in moved {
                let key = Key::new(pk.clone(), sk.clone());
                // Moving within one lease (same time) or into a lease already read: merged
                // with what stays there. Into one not read, the create fails and we re-read.
                let (stays, version) = match leases.get(&sk) {
                    Some(existing) => {
                        let gone = removed.get(&sk);
                        let stays: Vec<LeaseMsg> = existing
                            .record
                            .msgs
                            .iter()
                            .filter(|m| gone.is_none_or(|g| !g.contains(&m.offset)))
                            .copied()
                            .collect();
                        (stays, Some(existing.version))
                    }
                    None => (Vec::new(), None),
                };
                lease.msgs.extend(stays);
                lease.msgs.sort_by_key(|m| m.offset);
                ops.retain(|op| op.key() != &key);
                ops.push(WriteOp::replace(key, layout::encode(&lease), version));
            }
            if let (true, false, Some(state)) = (bump_cursor, ops.is_empty(), &state) {
                ops.push(state.cursor_write(sub.record.id, partition, state.cursor));
            }
            if !ops.is_empty() {
                if let Err(e) = self.store().write(ops).await {
                    self.lost_race(e, &mut attempt).await?;
                    continue;
                }
            }
            for ((i, r), found) in pending.iter().zip(&round) {
                results[*i] = match found {
                    Some(_) => Ok(new_receipts.get(&r.offset).cloned()),
                    None => Err(ReceiptError::Stale),
                };
            }
            pending.drain(..round.len());
            attempt = 0;
        }
        Ok(())
    }

    /// The subscription with exact counts: every partition's leases are read (they are
    /// what is in flight or waiting, not the backlog), new messages are counted from the
    /// cursor (or the log start, if retention moved it past the cursor) to the head.
    /// `expired` is what retention took from the queue: counted when a receive passed
    /// over it, plus what a receive would pass over now (see [`Backlog::expired`]), so
    /// it is exact whether or not a receive came since the log start moved.
    pub async fn describe(&self, topic: &str, name: &str) -> Result<SubscriptionDescription, Error> {
        let sub = self.sub(topic, name).await?;
        let heads = topics::heads(self.store(), &sub.topic).await?;
        let spec = &sub.record.spec;
        let now = self.now();
        let mut total = Backlog::default();
        let mut partitions = Vec::with_capacity(heads.len());
        let mut oldest: Option<i64> = None;
        let mut exact = true;
        for (p, (head, _)) in heads.iter().enumerate() {
            let p = p as u32;
            let (state, settled) = self.snapshot(&sub, p).await?;
            exact &= settled;
            let mut b = Backlog { dead: state.cursor.dead, expired: state.cursor.expired, ..Backlog::default() };
            // What a receive would pass over now: new messages below the log start.
            b.expired += head.start.saturating_sub(state.cursor.next);
            let mut visible_since: Option<i64> = None;
            for lease in &state.leases {
                let n = lease.record.msgs.len() as u64;
                if lease.due <= now && lease.record.receives >= spec.max_receive_count {
                    b.dead += n;
                } else if lease.due <= now {
                    // …and due messages below it.
                    let gone = lease.record.msgs.iter().filter(|m| m.offset < head.start).count() as u64;
                    b.expired += gone;
                    if n > gone {
                        b.visible += n - gone;
                        visible_since = min_time(visible_since, lease.due);
                    }
                } else if lease.record.held_until.is_some_and(|h| h > now) {
                    b.in_flight += n;
                } else {
                    b.delayed += n;
                }
            }
            let cursor = state.cursor.next.clamp(head.start, head.next.max(head.start));
            if cursor < head.next {
                // New messages are visible up to the first one still within `delay_ms`.
                let boundary = if spec.delay_ms > 0 {
                    let since = now - spec.delay_ms as i64 + 1;
                    self.log.offset_of(&sub.topic, p, OffsetQuery::Timestamp(since)).await?.clamp(cursor, head.next)
                } else {
                    head.next
                };
                b.visible += boundary - cursor;
                b.delayed += head.next - boundary;
                if boundary > cursor {
                    let first = self.events_at(&sub.topic, p, &[cursor], *head).await?;
                    if let Some(e) = first.get(&cursor) {
                        visible_since =
                            min_time(visible_since, e.record.timestamp_ms.saturating_add(spec.delay_ms as i64));
                    }
                }
            }
            b.oldest_visible_age_ms = visible_since.map(|t| now.saturating_sub(t).max(0) as u64);
            if let Some(t) = visible_since {
                oldest = min_time(oldest, t);
            }
            total.visible += b.visible;
            total.in_flight += b.in_flight;
            total.delayed += b.delayed;
            total.dead += b.dead;
            total.expired += b.expired;
            partitions.push(PartitionBacklog { partition: p, cursor, high_watermark: head.next, backlog: b });
        }
        total.oldest_visible_age_ms = oldest.map(|t| now.saturating_sub(t).max(0) as u64);
        Ok(SubscriptionDescription { subscription: sub.describe(), backlog: total, partitions, exact })
    }

    /// A page of dead letters in (partition, offset) order, after the id `after`.
    pub async fn dead_letters(
        &self,
        topic: &str,
        name: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, Error> {
        let sub = self.sub(topic, name).await?;
        let limit = limit.clamp(1, 1000);
        let after = after.map(|id| parse_dead_id(id, sub.topic.spec.partitions)).transpose()?;
        let heads = topics::heads(self.store(), &sub.topic).await?;
        let mut entries = Vec::new();
        for p in after.map_or(0, |(p, _)| p)..sub.topic.spec.partitions {
            self.bury_all(&sub, p).await?;
            let mut query = Query::all(dlq_pk(sub.record.id, p), limit - entries.len());
            if let Some((_, offset)) = after.filter(|(after_p, _)| *after_p == p) {
                query.after = Some(layout::offset_sk(offset));
            }
            let page = self.store().query(&query).await?;
            let mut found = Vec::with_capacity(page.items.len());
            for item in &page.items {
                let record: DeadRecord = layout::decode("dead letter", &item.value)?;
                found.push((layout::offset_of(&item.key.sk)?, record));
            }
            let head = heads.get(p as usize).map(|(h, _)| *h).unwrap_or_default();
            let offsets: Vec<u64> = found.iter().map(|(o, _)| *o).collect();
            let mut events = self.events_at(&sub.topic, p, &offsets, head).await?;
            for (offset, record) in found {
                entries.push(DeadLetter {
                    id: format!("{p}-{offset}"),
                    reason: record.reason,
                    receive_count: record.receives,
                    first_receive_ms: record.first_ms,
                    last_receive_ms: record.last_ms,
                    dead_ms: record.dead_ms,
                    event: events.remove(&offset),
                    partition: p,
                    offset,
                });
            }
            if entries.len() >= limit {
                let next = entries.last().map(|e| e.id.clone());
                return Ok(DeadLetterPage { entries, next });
            }
        }
        Ok(DeadLetterPage { entries, next: None })
    }

    /// Deletes one dead letter for good.
    pub async fn delete_dead_letter(&self, topic: &str, name: &str, id: &str) -> Result<(), Error> {
        let sub = self.sub(topic, name).await?;
        let (partition, offset) = parse_dead_id(id, sub.topic.spec.partitions)?;
        let key = Key::new(dlq_pk(sub.record.id, partition), layout::offset_sk(offset));
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let Some(item) = self.store().get(&key).await? else {
                return Err(Error::NotFound {
                    code: "dead_letter_not_found",
                    message: format!("subscription '{name}' has no dead letter '{id}'"),
                });
            };
            let state = self.load(&sub, partition, Some(1)).await?;
            let cursor = CursorRecord { dead: state.cursor.dead.saturating_sub(1), ..state.cursor };
            let ops = vec![
                WriteOp::Delete { key: key.clone(), expect: Expect::Version(item.version) },
                state.cursor_write(sub.record.id, partition, cursor),
            ];
            match self.store().write(ops).await {
                Ok(()) => return Ok(()),
                Err(e) => self.lost_race(e, &mut attempt).await?,
            }
        }
        Err(contended(name))
    }

    /// Moves up to `max` dead letters (all if `None`) back into the queue, visible now,
    /// their receive counts reset.
    pub async fn redrive(&self, topic: &str, name: &str, max: Option<u64>) -> Result<u64, Error> {
        self.drain_dead(topic, name, max, true).await
    }

    /// Deletes every dead letter; answers how many.
    pub async fn purge_dead_letters(&self, topic: &str, name: &str) -> Result<u64, Error> {
        self.drain_dead(topic, name, None, false).await
    }

    async fn drain_dead(&self, topic: &str, name: &str, max: Option<u64>, requeue: bool) -> Result<u64, Error> {
        let sub = self.sub(topic, name).await?;
        let mut left = max.unwrap_or(u64::MAX);
        let mut done = 0;
        for p in 0..sub.topic.spec.partitions {
            // Due dead leases first: describe counts them as dead already, so a purge (or a
            // redrive) of the dead-letter queue takes them too.
            self.bury_all(&sub, p).await?;
            let mut attempts = 0;
            while left > 0 {
                let now = self.now();
                let want = left.min(DEAD_PER_WRITE as u64) as usize;
                let page = self.store().query(&Query::all(dlq_pk(sub.record.id, p), want)).await?;
                if page.items.is_empty() {
                    break;
                }
                let state = self.load(&sub, p, Some(1)).await?;
                let n = page.items.len() as u64;
                let mut msgs = Vec::with_capacity(page.items.len());
                let mut ops = Vec::with_capacity(page.items.len() + 2);
                for item in page.items {
                    let record: DeadRecord = layout::decode("dead letter", &item.value)?;
                    msgs.push(LeaseMsg { offset: layout::offset_of(&item.key.sk)?, first_ms: 0, key: record.key });
                    ops.push(WriteOp::Delete { key: item.key, expect: Expect::Version(item.version) });
                }
                let cursor = CursorRecord { dead: state.cursor.dead.saturating_sub(n), ..state.cursor };
                ops.push(state.cursor_write(sub.record.id, p, cursor));
                if requeue {
                    let nonce = self.nonce();
                    let lease =
                        LeaseRecord { nonce, receives: 0, held_until: None, delivered_ms: now, msgs, redriven: true };
                    ops.push(WriteOp::create(
                        Key::new(queue_pk(sub.record.id, p), lease_sk(now, nonce)),
                        layout::encode(&lease),
                    ));
                }
                match self.store().write(ops).await {
                    Ok(()) => {
                        done += n;
                        left -= n;
                        // Contention is counted per write: a long redrive is not cut short by
                        // the races its earlier writes lost.
                        attempts = 0;
                    }
                    Err(e) => {
                        self.lost_race(e, &mut attempts).await?;
                        if attempts >= MAX_ATTEMPTS {
                            return Err(contended(name));
                        }
                    }
                }
            }
        }
        if done > 0 {
            let what = if requeue { "redriven" } else { "purged" };
            tracing::info!(topic = %sub.topic.name, subscription = name, messages = done, "dead letters {what}");
        }
        Ok(done)
    }
}

/// What a receive answers: the messages whose visibility window has not ended by the time
/// it answers. A receive slow to answer (its later partitions' reads took longer than an
/// earlier one's window) would otherwise hand out messages another receive may hold by then;
/// those are left as a lost answer leaves them, held by nobody, due again.
fn answerable(messages: Vec<Message>, held: &[(usize, i64)], now: i64) -> Vec<Message> {
    if held.iter().all(|(_, until)| *until > now) {
        return messages;
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(messages.len());
    let mut messages = messages.into_iter();
    for &(end, until) in held {
        let take = messages.by_ref().take(end - start);
        if until > now {
            out.extend(take);
        } else {
            let dropped = take.count();
            tracing::warn!(dropped, "receive answered after its visibility window ended; those messages are due again");
        }
        start = end;
    }
    out
}

/// The lease holding a receipt's message under the receipt's delivery (same nonce and
/// receive count), by sort key, with the message.
fn holder(leases: &BTreeMap<String, Lease>, r: &Receipt) -> Option<(String, LeaseMsg)> {
    // The lease the receipt names first: it is where the message is unless it moved.
    let hinted = leases.get(&lease_sk(r.due, r.nonce));
    hinted.into_iter().chain(leases.values()).find_map(|l| {
        let same_delivery = l.record.nonce == r.nonce && l.record.receives == r.receives;
        let msg = l.record.msgs.iter().find(|m| m.offset == r.offset);
        msg.filter(|_| same_delivery).map(|m| (l.key.sk.clone(), *m))
    })
}

/// The write that takes `offsets` out of a lease: deletes it if nothing stays.
fn shrink(lease: &Lease, offsets: &HashSet<u64>) -> WriteOp {
    let stays: Vec<LeaseMsg> = lease.record.msgs.iter().filter(|m| !offsets.contains(&m.offset)).copied().collect();
    if stays.is_empty() {
        WriteOp::Delete { key: lease.key.clone(), expect: Expect::Version(lease.version) }
    } else {
        let record = LeaseRecord { msgs: stays, ..lease.record.clone() };
        WriteOp::replace(lease.key.clone(), layout::encode(&record), Some(lease.version))
    }
}

fn parse_dead_id(id: &str, partitions: u32) -> Result<(u32, u64), Error> {
    id.split_once('-')
        .and_then(|(p, o)| Some((p.parse::<u32>().ok()?, o.parse::<u64>().ok()?)))
        .filter(|(p, _)| *p < partitions)
        .ok_or_else(|| {
            Error::invalid("invalid_dead_letter_id", format!("'{id}' is not a dead letter id (<partition>-<offset>)"))
        })
}

fn contended(name: &str) -> Error {
    Error::Throttled(StorageError::Throttled {
        message: format!("subscription '{name}' is changing too fast"),
        source: None,
    })
}

/// Removes, within `budget` deletions, the queue items of deleted subscriptions and the
/// subscriptions of deleted topics; answers how many items went, and whether work is left.
pub(crate) async fn purge_step(store: &dyn StateStore, budget: usize) -> Result<(usize, bool), StorageError> {
    let mut left = budget.max(1);
    let mut deleted = 0;
    let orders = store.query(&Query::all(SUB_PURGE_PK, 16)).await?;
    let more = orders.next.is_some();
    for item in orders.items {
        let mut order: SubPurgeRecord = layout::decode("subscription purge", &item.value)?;
        let id = u64::from_str_radix(&item.key.sk, 16)
            .map_err(|_| StorageError::Corrupt(format!("subscription purge key {:?}", item.key.sk)))?;
        let mut version = item.version;
        let partitions = order.partitions;
        let done: fn(&mut SubPurgeRecord) -> &mut u32 = |o| &mut o.done_partitions;
        let pks = |p| queue_collections(id, p).to_vec();
        let (n, finished) = crate::upkeep::drain_partitions(
            store,
            &item.key,
            &mut version,
            &mut order,
            done,
            partitions,
            pks,
            &mut left,
        )
        .await?;
        deleted += n;
        if !finished {
            return Ok((deleted, true));
        }
        store.write(vec![WriteOp::Delete { key: item.key, expect: Expect::Version(version) }]).await?;
    }
    Ok((deleted, more))
}

/// Turns the subscriptions of a deleted topic into purge orders (called by the topic's
/// purge); answers how many.
pub(crate) async fn purge_topic_subscriptions(
    store: &dyn StateStore,
    topic_id: u64,
    partitions: u32,
) -> Result<usize, StorageError> {
    let mut orders = 0;
    loop {
        let page = store.query(&Query::all(subs_pk(topic_id), 40)).await?;
        if page.items.is_empty() {
            return Ok(orders);
        }
        orders += page.items.len();
        let mut ops = Vec::new();
        for item in page.items {
            let record: SubscriptionRecord = layout::decode("subscription", &item.value)?;
            if record.deleted {
                // Its purge was ordered when it was deleted.
                orders -= 1;
                ops.push(WriteOp::Delete { key: item.key, expect: Expect::Version(item.version) });
                continue;
            }
            ops.push(WriteOp::Put {
                key: sub_purge_key(record.id),
                value: layout::encode(&SubPurgeRecord { partitions, done_partitions: 0 }),
                expires_at_ms: None,
                expect: Expect::Any,
            });
            ops.push(WriteOp::Delete { key: item.key, expect: Expect::Version(item.version) });
        }
        store.write(ops).await?;
    }
}

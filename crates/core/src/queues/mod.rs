//! Work queues (SQS's model) fed by the log: each subscription on a topic is a queue
//! of its own. Payloads are never copied: a queue is, per partition, a cursor into the
//! log plus lease items for what is in flight, waiting for redelivery or parked behind
//! its key, and dead-letter items. Written once, on the state store.
//!
//! | item | `pk` | `sk` | value |
//! |---|---|---|---|
//! | subscription | `subs#<topic id>` | name | [`SubscriptionRecord`] |
//! | cursor: next offset never delivered, DLQ size, expired count, small held leases | `q#<sub id>#<partition>` | `c` | [`CursorItem`] |
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
//!   from its lease by a write conditional on the lease's version;
//! - a small held lease may be kept inside the cursor item instead (`inline.rs`): its
//!   version is then the cursor's, so every write above stays one conditional write.
//!
//! Receipts are signed (HMAC-SHA-256 with a key kept in the store), so they are opaque
//! and a forged or altered one is refused before anything is read.

#[macro_use]
mod cache;
mod bury;
mod dead;
mod deliveries;
mod events;
pub use deliveries::PushSubscription;
mod describe;
mod peek;
pub use peek::{Peeked, MAX_PEEK_MESSAGES};
mod cursors;
use cursors::Change;
mod inline;
mod patch;
pub use patch::{PushPatch, SubscriptionPatch};
mod pause;
pub use pause::SubscriptionState;
mod purge;
mod push;
mod rate;
pub use rate::{Rate, RateRecord, MAX_RATE_PER_SECOND};
mod receipt;
mod receive;
mod secret;
pub use secret::{PreviousSecret, Rotated, SecretRotation, DEFAULT_SECRET_OVERLAP_MS, MAX_SECRET_OVERLAP_MS};
mod seek;
pub use seek::{PartitionSeek, SeekTo, Sought};
mod riding;
use riding::{written, Riding};
mod records;
mod settle;
mod state;
#[cfg(test)]
use state::test_sub;
use state::{holder, Lease, QueueState};
mod subscriptions;
mod take;
mod turns;
use turns::Turn;

pub(crate) use purge::{purge_step, purge_topic_subscriptions};
pub use push::*;
use receipt::{Receipt, ReceiptKey};
pub use records::*;

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
    /// An event pattern (EventBridge's syntax, see [`crate::filter`]): only matching
    /// messages are delivered; the others are passed over and counted as `filtered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<serde_json::Value>,
    /// Delivered by a dispatcher to this target; clients do not receive from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushSpec>,
    /// Messages per second handed out at most, across every receiver (`rate.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
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
            filter: None,
            push: None,
            rate: None,
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
    /// Whether it delivers (`pause.rs`).
    pub state: SubscriptionState,
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
    /// Published with a schedule (`crate::schedule`) not yet due: never delivered before it.
    pub scheduled: u64,
    /// In the dead-letter queue (including messages whose last delivery ran out at the limit).
    pub dead: u64,
    /// Removed from the log by retention before they were delivered, or before they were
    /// delivered again: never delivered (again). Counts those a receive already passed
    /// over (kept with the cursor), and those it would pass over now: below the log start,
    /// new or due for redelivery. A message below the log start that a receiver holds, or
    /// that waits, keeps its count (`in_flight`, `delayed`) until it comes due: it can
    /// still be acked meanwhile. So the number only grows, and exactly once per message.
    pub expired: u64,
    /// Passed over because they did not match the subscription's filter: never delivered.
    /// Counted when a receive passes over them, so the number only grows.
    pub filtered: u64,
    /// A filtered subscription's new messages past its cursor, which no receive has matched
    /// against the filter yet: each becomes visible (or delayed) or filtered once one does.
    /// Always 0 without a filter.
    pub unscanned: u64,
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
    /// Where the filter the subscription has applies from on this partition, when a change
    /// set it (`patch.rs`): messages below were judged by the filter before.
    pub filter_since: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionDescription {
    pub subscription: Subscription,
    pub backlog: Backlog,
    pub partitions: Vec<PartitionBacklog>,
    /// Every partition's counts are of one moment (two reads in a row agreed); false only
    /// when a partition kept changing through every read (see `Queues::snapshot`).
    pub exact: bool,
    /// A push subscription's deliveries so far.
    pub deliveries: Option<PushStatsRecord>,
    /// With a rate: the time it spent waiting for it so far (ms; `rate.rs`).
    pub throttled_ms: Option<u64>,
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
    /// When the visibility window this receive holds it for ends (the take's write plus
    /// the window): a push attempt must not outlast it.
    pub held_until_ms: i64,
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
    pub fn code(self) -> Code {
        match self {
            Self::Invalid => Code::InvalidReceipt,
            Self::Stale => Code::StaleReceipt,
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
use sha2::Sha256;

use crate::filter::Filter;
use crate::keys::{
    self, cursor_key, dead_key, dlq_pk, lease_key, lease_sk, parse_lease_sk, push_stats_key, queue_pk,
    receipt_signing_key, removed_dead_key, sub_purge_key, sub_purge_pk, subs_pk, CURSOR_SK, LEASE_PREFIX,
    PUSH_STATS_SK, RATE_SK,
};
use crate::layout::{self, HeadRecord};
use crate::log::topics;
use crate::log::Log;
use crate::model::{OffsetQuery, TopicConfig};
use crate::page::event_size;
use crate::ports::state::{Expect, Key, Query, StateStore, WriteOp, MAX_WRITE_OPS};
use crate::Code;
use crate::{names, Error, StorageError};

/// Conditional writes lost to concurrent receivers before a request gives up on a partition.
const MAX_ATTEMPTS: usize = 16;
/// Messages moved to (or out of) the dead-letter queue by one write.
const DEAD_PER_WRITE: usize = 90;
/// Receipts one [`Queues::dead_letter`] takes: each message is an item, beside its lease's
/// and the cursor's, in one write.
pub const MAX_BURIED_PER_CALL: usize = 40;
/// How long a deleted or purged dead letter's mark is kept: a week, as long as a topic
/// keeps its events by default (after which retention makes such an ack stale anyway).
/// Past it, an ack of one of its receipts answers `ok`, as for an acked message.
const REMOVED_DEAD_TTL_MS: i64 = 7 * 24 * 3600 * 1000;
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
const DEAD_REASON: &str = "max_receive_count_exceeded";

/// A subscription read for one request, or from this process's cache.
struct Sub {
    topic: TopicConfig,
    name: String,
    record: SubscriptionRecord,
    version: u64,
    /// From the cache (or bound for it): every write on the queue checks the subscription's
    /// and the topic's versions (see [`Queues::write_on`]).
    guarded: bool,
}

impl Sub {
    /// Adds `n` to the subscription's counter `name` (one of [`crate::metrics`]'s).
    fn count(&self, name: &'static str, n: u64) {
        if n > 0 {
            let labels = [("topic", self.topic.name.clone()), ("subscription", self.name.clone())];
            metrics::counter!(name, &labels).increment(n);
        }
    }
}

impl Sub {
    /// The subscription is gone (deleted while a request was on it).
    fn not_found(&self) -> Error {
        Error::SubscriptionNotFound { topic: self.topic.name.clone(), subscription: self.name.clone() }
    }

    fn start(&self, partition: u32) -> u64 {
        self.record.starts.get(partition as usize).copied().unwrap_or(0)
    }

    /// The subscription's filter, compiled (checked when it was created).
    fn filter(&self) -> Result<Option<Filter>, StorageError> {
        let compile =
            |p| Filter::parse_stored(p).map_err(|e| StorageError::Corrupt(format!("filter of {:?}: {e}", self.name)));
        self.record.spec.filter.as_ref().map(compile).transpose()
    }

    fn describe(&self) -> Subscription {
        Subscription {
            topic: self.topic.name.clone(),
            name: self.name.clone(),
            spec: self.record.spec.clone(),
            start_offsets: self.record.starts.clone(),
            created_ms: self.record.created_ms,
            state: self.record.state,
        }
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
    /// Moved to the dead-letter queue at `at`, for `reason` (a push target's `410 Gone`).
    Bury {
        at: i64,
        reason: &'static str,
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
    /// Asked of a push subscription's Lambda target when it is created (`push.rs`).
    targets: Option<Arc<dyn crate::ports::deliver::Targets>>,
}

/// What the queues of one process keep between requests. Only savings: a fresh one
/// changes no answer (but that of a receive or settle on a subscription deleted by another
/// process less than the cache's lifetime ago, which writes nothing: see `subs`).
#[derive(Default)]
struct Local {
    /// Subscriptions of receives and settles, when the queues cache them (`cache.rs`).
    subs: Option<cache::Subs>,
    /// Topics' heads, as push receives last read them (`cache.rs`).
    heads: cache::Heads,
    /// The receipt-signing key, once read (it never changes).
    receipt_key: tokio::sync::OnceCell<ReceiptKey>,
    /// Turns on queue partitions, so this process's receives and settles queue instead of racing.
    turns: turns::Turns,
    /// Told of every resume made by this process: its waiting receives look again at once.
    resumed: tokio::sync::Notify,
}

impl Queues {
    pub fn new(log: Log) -> Self {
        Self { log, local: Arc::default(), targets: None }
    }

    /// Queues that read a Lambda push target's timeout from `targets` when its
    /// subscription is created, and refuse a `timeout_ms` below it (`push.rs`).
    pub fn with_push_targets(self, targets: Arc<dyn crate::ports::deliver::Targets>) -> Self {
        Self { targets: Some(targets), ..self }
    }

    /// The log the queues read.
    pub fn log(&self) -> &Log {
        &self.log
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
        let Some(item) = self.store().get(&crate::keys::subscription_key(topic.id, name)).await? else {
            return Ok(None);
        };
        let record = layout::decode("subscription", &item.value)?;
        Ok(Some(Sub { topic: topic.clone(), name: name.to_owned(), record, version: item.version, guarded: false }))
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
}

fn contended(name: &str) -> Error {
    Error::Throttled(StorageError::Throttled {
        message: format!("subscription '{name}' is changing too fast"),
        source: None,
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

/// A partition of a subscription, where a queue write goes, and the key its receipts are
/// signed with.
struct Target<'a> {
    sub: &'a Sub,
    partition: u32,
    receipt_key: &'a ReceiptKey,
}

/// The item of a new lease, due at `due`.
fn new_lease(sub: &Sub, partition: u32, due: i64, lease: LeaseRecord) -> WriteOp {
    WriteOp::create(lease_key(sub.record.id, partition, due, lease.nonce), layout::encode(&lease))
}

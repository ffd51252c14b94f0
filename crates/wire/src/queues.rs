//! Work queues on the wire: subscriptions, receives, settlements and dead letters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A subscription and its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Subscription {
    pub topic: String,
    pub name: String,
    pub start: Start,
    pub visibility_timeout_ms: u64,
    pub max_receive_count: u32,
    pub ordering: Ordering,
    pub delay_ms: u64,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub redelivery_backoff_ms: Option<Backoff>,
    /// The event pattern, as given.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub filter: Option<Value>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub push: Option<Push>,
    /// Messages per second handed out at most (null: no limit; absent from older servers).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub rate: Option<Rate>,
    /// Per partition, where the subscription started.
    pub start_offsets: Vec<u64>,
    pub created_ms: i64,
    /// Whether it delivers: `paused` by `POST …/pause` until `POST …/resume`; `suspended`
    /// (push, in a description) while its endpoint keeps failing.
    #[serde(default)]
    pub state: SubscriptionState,
}

/// A subscription's delivery rate: at most `per_second` messages a second across every
/// receiver and push delivery, up to `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Rate {
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10000))]
    pub per_second: u32,
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub burst: u32,
}

/// Whether a subscription delivers. More states may come: read an unknown one as not active.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SubscriptionState {
    #[default]
    Active,
    /// Keeps counting the log's events; delivers nothing until resumed.
    Paused,
    /// A push subscription whose endpoint kept failing (`push.suspend_after`): one probe
    /// batch a minute until one is delivered, which makes it active again.
    Suspended,
}

/// When a push subscription is suspended: after `failures` failed attempts in a row, the
/// first at least `spanning_ms` before the last (default 20 over 5 minutes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SuspendAfter {
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10000))]
    pub failures: u32,
    #[cfg_attr(feature = "openapi", schema(maximum = 604800000))]
    pub spanning_ms: u64,
}

/// A push subscription's flow control and endpoint health, as a description shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PushDelivery {
    /// Batches that may be out at once now: halved by a 429, a 503 or a timeout, one more
    /// per delivered batch, at most `push.max_in_flight` (1 while suspended).
    pub in_flight_limit: u32,
    /// No batch is sent before this time (a `Retry-After` of the endpoint).
    #[cfg_attr(feature = "openapi", schema(required = true, nullable))]
    pub retry_after_until_ms: Option<i64>,
    /// Failed attempts in a row, and when the first of them was answered.
    pub consecutive_failures: u32,
    #[cfg_attr(feature = "openapi", schema(required = true, nullable))]
    pub failing_since_ms: Option<i64>,
    /// Since when the subscription is suspended (null when it is not).
    #[cfg_attr(feature = "openapi", schema(required = true, nullable))]
    pub suspended_since_ms: Option<i64>,
}

/// A push target as shown: its secret only in the answer that created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Push {
    pub url: Option<String>,
    pub lambda: Option<String>,
    pub max_batch: u32,
    pub timeout_ms: u64,
    pub max_in_flight: u32,
    /// When the subscription is suspended (always shown by this version; absent from older).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub suspend_after: Option<SuspendAfter>,
    /// The signing secret: only in the answer that created the subscription.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// When the secret the last rotation replaced stops (or stopped) signing; absent if the
    /// secret was never rotated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_ms: Option<i64>,
    /// Deliveries so far: in a description only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<Deliveries>,
    #[cfg_attr(feature = "openapi", schema(nullable))]
    pub last_error: Option<String>,
    #[cfg_attr(feature = "openapi", schema(nullable))]
    pub last_error_ms: Option<i64>,
}

/// A push subscription's deliveries so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Deliveries {
    pub attempted: u64,
    pub succeeded: u64,
    pub failed: u64,
}

/// `GET …/subscriptions`: the topic's subscriptions, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubscriptionList {
    pub subscriptions: Vec<Subscription>,
}

/// A subscription with its backlog, whole and per partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubscriptionDescription {
    pub topic: String,
    pub name: String,
    pub start: Start,
    pub visibility_timeout_ms: u64,
    pub max_receive_count: u32,
    pub ordering: Ordering,
    pub delay_ms: u64,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub redelivery_backoff_ms: Option<Backoff>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub filter: Option<Value>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub push: Option<Push>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub rate: Option<Rate>,
    pub start_offsets: Vec<u64>,
    pub created_ms: i64,
    #[serde(default)]
    pub state: SubscriptionState,
    /// With a rate: milliseconds its receives and deliveries waited for it so far (a
    /// running total; absent without a rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_ms: Option<u64>,
    /// A push subscription's flow control and endpoint health (push subscriptions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<PushDelivery>,
    pub backlog: Backlog,
    /// Every partition's counts are of one moment.
    pub exact: bool,
    pub partitions: Vec<PartitionBacklog>,
}

/// Messages by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Backlog {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
    /// Published with a schedule not yet due (`deliver_at_ms`): never delivered before it.
    #[serde(default)]
    pub scheduled: u64,
    pub dead: u64,
    pub expired: u64,
    pub filtered: u64,
    /// A filtered subscription's messages past its cursor not yet matched against the filter.
    #[serde(default)]
    pub unscanned: u64,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub oldest_visible_age_ms: Option<u64>,
}

/// One partition's part of a subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionBacklog {
    pub partition: u32,
    /// The next offset never yet delivered.
    pub cursor: u64,
    pub high_watermark: u64,
    pub backlog: Backlog,
    /// Where the filter applies from on this partition, once a change (`PATCH`) set it:
    /// messages below were judged by the filter before. Absent for the filter the
    /// subscription was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_since: Option<u64>,
}

/// A received message: the event, its receipt, and its deliveries so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Message {
    /// What ack, nack and visibility take.
    pub receipt: String,
    pub partition: u32,
    pub offset: u64,
    pub receive_count: u32,
    pub first_receive_ms: i64,
    pub timestamp_ms: i64,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub key: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Published with a schedule: no subscription delivers it before this time (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(content_encoding = "base64"))]
    pub value_base64: Option<String>,
}

/// A receive's answer; `acks` when the request carried receipts to ack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Received {
    pub messages: Vec<Message>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acks: Option<Vec<ReceiptResult>>,
}

/// A visible message seen by a peek: the event and its deliveries so far, no receipt (a
/// peek holds nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PeekedMessage {
    pub partition: u32,
    pub offset: u64,
    /// Deliveries so far: 0 for a message never delivered.
    pub receive_count: u32,
    pub timestamp_ms: i64,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub key: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Published with a schedule: no subscription delivers it before this time (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(content_encoding = "base64"))]
    pub value_base64: Option<String>,
}

/// A peek's answer: visible messages, in partition order (due redeliveries, then new ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Peeked {
    pub messages: Vec<PeekedMessage>,
}

/// One result per receipt, in the order of the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Settled {
    pub results: Vec<ReceiptResult>,
}

/// One receipt's outcome. An `ok` visibility change carries the receipt to use from now on
/// (none when the message was made visible again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReceiptResult {
    pub receipt: Option<String>,
    pub ok: bool,
    pub error: Option<ReceiptError>,
}

/// Why a receipt did nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReceiptError {
    /// `invalid_receipt`: not a receipt of this subscription; `stale_receipt`: its message was
    /// settled, redelivered or dead-lettered since.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^(invalid_receipt|stale_receipt)$"))]
    pub code: String,
    pub message: String,
}

/// A page of dead letters, and the `after` of the next (`null`: the last page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetters {
    pub dead_letters: Vec<DeadLetter>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub next: Option<String>,
}

/// A dead letter: which deliveries put it there, and its event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetter {
    /// `<partition>-<offset>`: what `DELETE …/dlq/{id}` takes.
    pub id: String,
    pub partition: u32,
    pub offset: u64,
    pub reason: String,
    pub receive_count: u32,
    pub first_receive_ms: i64,
    pub last_receive_ms: i64,
    pub dead_ms: i64,
    /// `null` once retention removed it from the log.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub event: Option<Record>,
}

/// An event's record, without its place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Record {
    pub timestamp_ms: i64,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub key: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Published with a schedule: no subscription delivers it before this time (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(content_encoding = "base64"))]
    pub value_base64: Option<String>,
}

/// How many dead letters went back to the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Redriven {
    pub redriven: u64,
}

/// How many dead letters were removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Purged {
    pub purged: u64,
}

/// Where a new subscription starts reading its topic: `latest` (only events published after
/// it is created), `earliest` (every event still in the log), the first events at or after a
/// time, or per partition the first offset (partitions not named start at `latest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Start {
    Latest,
    Earliest,
    #[serde(rename = "timestamp_ms")]
    Timestamp(i64),
    Offsets(StartOffsets),
}

// A schema of its own: client generators name an inline map inside a one-of twice and drop it.
/// Keys are partitions (`"0"`, `"1"`, …), values offsets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct StartOffsets(pub BTreeMap<String, u64>);

/// `key`: a key's messages are delivered one at a time, in offset order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    None,
    Key,
}

/// How long a message waits before its n-th redelivery: the n-th of the steps (the last
/// repeats), or `initial_ms × multiplier^(n−1)`, at most `max_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Backoff {
    Steps(Vec<u64>),
    Exponential(Exponential),
}

/// The exponential form of a backoff (`multiplier`: 2 unless given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Exponential {
    pub initial_ms: u64,
    pub max_ms: u64,
    pub multiplier: Option<u32>,
}

/// A subscription's settings; an empty body means all defaults.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSubscription {
    /// `"latest"` (default), `"earliest"`, `{"timestamp_ms": N}` or `{"offsets": {"0": 5}}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Start>))]
    pub start: Option<Value>,
    /// How long a received message stays hidden: 0 to 12 h (default 30000); 0: delivered, and
    /// visible again at once.
    #[cfg_attr(feature = "openapi", schema(maximum = 43200000))]
    pub visibility_timeout_ms: Option<u64>,
    /// Deliveries before a message goes to the dead-letter queue: 1 to 1000 (default 5).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub max_receive_count: Option<u32>,
    pub ordering: Option<Ordering>,
    /// How long a new message waits before its first delivery (default 0).
    pub delay_ms: Option<u64>,
    /// `[ms, …]` or `{"initial_ms", "max_ms", "multiplier"}` (default: none, at once).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Backoff>))]
    pub redelivery_backoff_ms: Option<Value>,
    /// An event pattern: only matching events become messages.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Value>))]
    pub filter: Option<Value>,
    /// A push target: `{"url", "secret"?, …}` or `{"lambda", …}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<PushTarget>))]
    pub push: Option<Value>,
    /// `{"per_second": 1–10000, "burst": ≥ 1}`: messages per second handed out at most,
    /// across every receiver and push delivery (default: no limit).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Rate>))]
    pub rate: Option<Value>,
}

/// `PATCH …/subscriptions/{sub}`: the settings to change; those not named stay. `start`
/// and `ordering` cannot change (named, they must be what they are); `null` removes a
/// `filter` or a `redelivery_backoff_ms`. An empty body changes nothing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchSubscription {
    /// Cannot change: refused unless it is the subscription's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Start>))]
    pub start: Option<Value>,
    /// Cannot change: refused unless it is the subscription's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering: Option<Ordering>,
    /// 0 to 12 h: from the next receive (leases already granted keep their windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 43200000))]
    pub visibility_timeout_ms: Option<u64>,
    /// 1 to 1000: from the next receive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub max_receive_count: Option<u32>,
    /// For messages a receive takes from the log from now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// `[ms, …]`, `{"initial_ms", "max_ms", "multiplier"}`, or `null` (none): for deliveries
    /// from now on.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Backoff>))]
    pub redelivery_backoff_ms: Option<Value>,
    /// An event pattern, or `null` (none): applies on each partition from its cursor at the
    /// change (`filter_since` in describe).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Value>))]
    pub filter: Option<Value>,
    /// A push subscription's target and limits (a pull subscription has none to change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PatchPush>,
    /// `{"per_second", "burst"}`, or `null` (no limit): from the next receive or delivery.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Rate>))]
    pub rate: Option<Value>,
}

/// A field given as `null` is `Some(Value::Null)`; an absent one (`default`) is `None`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A push target's changes: `url` for a URL target (its secret stays), `lambda` for a
/// function target; its kind cannot change.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchPush {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lambda: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
}

/// A push target as requested: one of `url` and `lambda`.
/// A push target as requested: exactly one of `url` and `lambda`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PushTarget {
    pub url: Option<String>,
    pub secret: Option<String>,
    pub lambda: Option<String>,
    pub max_batch: Option<u32>,
    pub timeout_ms: Option<u64>,
    /// The ceiling of the adaptive in-flight limit: 1 to 100 (default 4).
    pub max_in_flight: Option<u32>,
    /// When to suspend the subscription (default `{"failures": 20, "spanning_ms": 300000}`).
    pub suspend_after: Option<SuspendAfter>,
}

/// A receive; an empty body means all defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReceiveRequest {
    /// 1 to 100.
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(value_type = u32, minimum = 1, maximum = 100))]
    pub max_messages: usize,
    /// Long poll: up to 20 s.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 20000))]
    pub wait_ms: u64,
    /// This receive's visibility timeout, in place of the subscription's (0: delivered, and
    /// visible again at once).
    #[cfg_attr(feature = "openapi", schema(maximum = 43200000))]
    pub visibility_timeout_ms: Option<u64>,
    /// Receipts to ack before receiving (the previous batch's).
    #[serde(default)]
    pub ack: Vec<String>,
}

impl Default for ReceiveRequest {
    fn default() -> Self {
        Self { max_messages: 1, wait_ms: 0, visibility_timeout_ms: None, ack: Vec::new() }
    }
}

/// Receipts of messages done with (at most 100).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckRequest {
    pub receipts: Vec<String>,
}

/// Receipts of messages to give back (at most 100), visible again after `delay_ms` (up to 12 h).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NackRequest {
    pub receipts: Vec<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 43200000))]
    pub delay_ms: u64,
}

/// Receipts of messages to hold for `visibility_timeout_ms` from now (0: visible at once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VisibilityRequest {
    pub receipts: Vec<String>,
    #[cfg_attr(feature = "openapi", schema(maximum = 43200000))]
    pub visibility_timeout_ms: u64,
}

/// How many dead letters to send back (default: all).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RedriveRequest {
    pub max_messages: Option<u64>,
}

fn one() -> usize {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a client reads of a suspended push subscription's description.
    #[test]
    fn a_suspended_push_subscription_s_description_reads_with_its_flow_state() {
        let answer = serde_json::json!({
            "topic": "orders", "name": "hook", "start": "earliest", "visibility_timeout_ms": 30000,
            "max_receive_count": 5, "ordering": "none", "delay_ms": 0, "redelivery_backoff_ms": null,
            "filter": null, "start_offsets": [0], "created_ms": 1, "state": "suspended",
            "push": {"url": "https://example.com/", "lambda": null, "max_batch": 10, "timeout_ms": 10000,
                     "max_in_flight": 4, "suspend_after": {"failures": 20, "spanning_ms": 300000},
                     "deliveries": {"attempted": 20, "succeeded": 0, "failed": 20},
                     "last_error": "HTTP 500", "last_error_ms": 9},
            "delivery": {"in_flight_limit": 1, "retry_after_until_ms": null, "consecutive_failures": 20,
                         "failing_since_ms": 2, "suspended_since_ms": 9},
            "backlog": {"visible": 0, "in_flight": 0, "delayed": 3, "dead": 0, "expired": 0, "filtered": 0,
                        "unscanned": 0, "oldest_visible_age_ms": null},
            "exact": true, "partitions": []
        });
        let d: SubscriptionDescription = serde_json::from_value(answer).unwrap();
        assert_eq!(d.state, SubscriptionState::Suspended);
        let delivery = d.delivery.expect("delivery");
        assert_eq!((delivery.in_flight_limit, delivery.suspended_since_ms), (1, Some(9)));
        let push = d.push.expect("push");
        assert_eq!(push.suspend_after, Some(SuspendAfter { failures: 20, spanning_ms: 300_000 }));
        // An older server's answer (no flow state) still reads.
        let old = serde_json::json!({"url": null, "lambda": "f", "max_batch": 1, "timeout_ms": 1000,
            "max_in_flight": 1, "last_error": null, "last_error_ms": null});
        assert_eq!(serde_json::from_value::<Push>(old).unwrap().suspend_after, None);
    }
}

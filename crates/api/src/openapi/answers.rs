//! The answers' shapes. The handlers render their answers by hand (values are copied as
//! stored, see `read::render`), so these types describe and are never built; each denies
//! unknown fields, so an answer that gains a field the document lacks fails the replay of the
//! document's examples (tests/openapi.rs) and schemathesis' response checks. A field that is
//! always there but may be `null` is `required`; one that may be absent is not.
#![allow(dead_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A topic and its settings.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Topic {
    name: String,
    partitions: u32,
    /// `null`: the server's default retention (7 days unless the deployment sets another).
    #[schema(required = true)]
    retention_ms: Option<i64>,
    /// `null`: no bound.
    #[schema(required = true)]
    retention_bytes: Option<i64>,
    created_ms: i64,
}

/// `GET /v1/topics`: every topic, by name.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TopicList {
    topics: Vec<Topic>,
}

/// A topic, each of its partitions, and what the janitor has done to it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TopicDescription {
    name: String,
    partitions: u32,
    #[schema(required = true)]
    retention_ms: Option<i64>,
    #[schema(required = true)]
    retention_bytes: Option<i64>,
    created_ms: i64,
    partition_states: Vec<PartitionState>,
    upkeep: Upkeep,
}

/// One partition's readable range and size.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartitionState {
    partition: u32,
    /// The earliest readable offset.
    log_start_offset: u64,
    /// The offset the next event will get.
    high_watermark: u64,
    /// The readable events' size as stored: what `retention_bytes` bounds.
    bytes: u64,
}

/// What retention and compaction did to a topic so far.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Upkeep {
    segments_expired: u64,
    bytes_expired: u64,
    segments_merged: u64,
    segments_written: u64,
    /// When the janitor last changed the topic (0: never).
    last_change_ms: i64,
}

/// Where an event is: its partition and offset.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Position {
    partition: u32,
    offset: u64,
}

/// A publish's answer: where each event landed, in request order.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Published {
    results: Vec<Position>,
}

/// A stored event as replay shows it: `value` (the JSON it was published with) or
/// `value_base64` (bytes).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Event {
    partition: u32,
    offset: u64,
    timestamp_ms: i64,
    #[schema(required = true)]
    key: Option<String>,
    headers: BTreeMap<String, String>,
    /// Any JSON.
    value: Option<Value>,
    #[schema(content_encoding = "base64")]
    value_base64: Option<String>,
}

/// A page of a partition, and where to go on.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadPage {
    events: Vec<Event>,
    /// The offset to ask for next.
    next_offset: u64,
    high_watermark: u64,
    log_start_offset: u64,
}

/// One partition of one topic.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TopicPartition {
    topic: String,
    partition: u32,
}

/// An event a poll delivers, with its topic.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupEvent {
    topic: String,
    partition: u32,
    offset: u64,
    timestamp_ms: i64,
    #[schema(required = true)]
    key: Option<String>,
    headers: BTreeMap<String, String>,
    value: Option<Value>,
    #[schema(content_encoding = "base64")]
    value_base64: Option<String>,
}

/// A poll's answer: the member, its generation and partitions, and their next events.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Polled {
    /// The id to send from now on.
    member_id: String,
    generation: u64,
    assignment: Vec<TopicPartition>,
    events: Vec<GroupEvent>,
}

/// A committed offset where a seek put it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Moved {
    topic: String,
    partition: u32,
    offset: u64,
}

/// A seek's answer: each committed offset it moved.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Sought {
    offsets: Vec<Moved>,
}

/// `GET /v1/groups`: every group's name.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupList {
    groups: Vec<String>,
}

/// A group: its members, its partitions with their committed offsets and lag.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupDescription {
    group: String,
    generation: u64,
    members: Vec<Member>,
    partitions: Vec<GroupPartition>,
    /// The sum of the partitions' lag.
    lag: u64,
    /// When the janitor may remove the group's offsets unless a member joins or a seek comes
    /// first: `null` while it has members.
    #[schema(required = true)]
    offsets_expire_at_ms: Option<i64>,
}

/// A live member of a group.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Member {
    member_id: String,
    assignment: Vec<TopicPartition>,
    session_timeout_ms: u64,
    /// When the session ends unless the member polls again.
    expires_at_ms: i64,
}

/// A partition a group reads.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupPartition {
    topic: String,
    partition: u32,
    #[schema(required = true)]
    committed_offset: Option<u64>,
    #[schema(required = true)]
    metadata: Option<String>,
    log_start_offset: u64,
    high_watermark: u64,
    lag: u64,
    /// The member that owns it now, if any.
    #[schema(required = true)]
    member_id: Option<String>,
}

/// A subscription and its settings.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Subscription {
    topic: String,
    name: String,
    start: Start,
    visibility_timeout_ms: u64,
    max_receive_count: u32,
    ordering: Ordering,
    delay_ms: u64,
    #[schema(required = true)]
    redelivery_backoff_ms: Option<Backoff>,
    /// The event pattern, as given.
    #[schema(required = true)]
    filter: Option<Value>,
    #[schema(required = true)]
    push: Option<Push>,
    /// Per partition, where the subscription started.
    start_offsets: Vec<u64>,
    created_ms: i64,
}

/// A push target as shown: its secret only in the answer that created it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Push {
    url: Option<String>,
    lambda: Option<String>,
    max_batch: u32,
    timeout_ms: u64,
    max_in_flight: u32,
    /// The signing secret: only in the answer that created the subscription.
    secret: Option<String>,
    /// Deliveries so far: in a description only.
    deliveries: Option<Deliveries>,
    #[schema(nullable)]
    last_error: Option<String>,
    #[schema(nullable)]
    last_error_ms: Option<i64>,
}

/// A push subscription's deliveries so far.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Deliveries {
    attempted: u64,
    succeeded: u64,
    failed: u64,
}

/// `GET …/subscriptions`: the topic's subscriptions, by name.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubscriptionList {
    subscriptions: Vec<Subscription>,
}

/// A subscription with its backlog, whole and per partition.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubscriptionDescription {
    topic: String,
    name: String,
    start: Start,
    visibility_timeout_ms: u64,
    max_receive_count: u32,
    ordering: Ordering,
    delay_ms: u64,
    #[schema(required = true)]
    redelivery_backoff_ms: Option<Backoff>,
    #[schema(required = true)]
    filter: Option<Value>,
    #[schema(required = true)]
    push: Option<Push>,
    start_offsets: Vec<u64>,
    created_ms: i64,
    backlog: Backlog,
    /// Every partition's counts are of one moment.
    exact: bool,
    partitions: Vec<PartitionBacklog>,
}

/// Messages by state.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Backlog {
    visible: u64,
    in_flight: u64,
    delayed: u64,
    dead: u64,
    expired: u64,
    filtered: u64,
    #[schema(required = true)]
    oldest_visible_age_ms: Option<u64>,
}

/// One partition's part of a subscription.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartitionBacklog {
    partition: u32,
    /// The next offset never yet delivered.
    cursor: u64,
    high_watermark: u64,
    backlog: Backlog,
}

/// A received message: the event, its receipt, and its deliveries so far.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Message {
    /// What ack, nack and visibility take.
    receipt: String,
    partition: u32,
    offset: u64,
    receive_count: u32,
    first_receive_ms: i64,
    timestamp_ms: i64,
    #[schema(required = true)]
    key: Option<String>,
    headers: BTreeMap<String, String>,
    value: Option<Value>,
    #[schema(content_encoding = "base64")]
    value_base64: Option<String>,
}

/// A receive's answer; `acks` when the request carried receipts to ack.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Received {
    messages: Vec<Message>,
    acks: Option<Vec<ReceiptResult>>,
}

/// One result per receipt, in the order of the request.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Settled {
    results: Vec<ReceiptResult>,
}

/// One receipt's outcome. An `ok` visibility change carries the receipt to use from now on
/// (none when the message was made visible again).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReceiptResult {
    receipt: Option<String>,
    ok: bool,
    error: Option<ReceiptError>,
}

/// Why a receipt did nothing.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReceiptError {
    /// `invalid_receipt`: not a receipt of this subscription; `stale_receipt`: its message was
    /// settled, redelivered or dead-lettered since.
    #[schema(value_type = String, pattern = "^(invalid_receipt|stale_receipt)$")]
    code: String,
    message: String,
}

/// A page of dead letters, and the `after` of the next (`null`: the last page).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadLetters {
    dead_letters: Vec<DeadLetter>,
    #[schema(required = true)]
    next: Option<String>,
}

/// A dead letter: which deliveries put it there, and its event.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadLetter {
    /// `<partition>-<offset>`: what `DELETE …/dlq/{id}` takes.
    id: String,
    partition: u32,
    offset: u64,
    reason: String,
    receive_count: u32,
    first_receive_ms: i64,
    last_receive_ms: i64,
    dead_ms: i64,
    /// `null` once retention removed it from the log.
    #[schema(required = true)]
    event: Option<Record>,
}

/// An event's record, without its place.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Record {
    timestamp_ms: i64,
    #[schema(required = true)]
    key: Option<String>,
    headers: BTreeMap<String, String>,
    value: Option<Value>,
    #[schema(content_encoding = "base64")]
    value_base64: Option<String>,
}

/// How many dead letters went back to the queue.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Redriven {
    redriven: u64,
}

/// How many dead letters were removed.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Purged {
    purged: u64,
}

/// Where a new subscription starts reading its topic: `latest` (only events published after
/// it is created), `earliest` (every event still in the log), the first events at or after a
/// time, or per partition the first offset (partitions not named start at `latest`).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Start {
    Latest,
    Earliest,
    #[serde(rename = "timestamp_ms")]
    Timestamp(i64),
    Offsets(StartOffsets),
}

// A schema of its own: client generators name an inline map inside a one-of twice and drop it.
/// Keys are partitions (`"0"`, `"1"`, …), values offsets.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
pub(crate) struct StartOffsets(BTreeMap<String, u64>);

/// `key`: a key's messages are delivered one at a time, in offset order.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Ordering {
    None,
    Key,
}

/// How long a message waits before its n-th redelivery: the n-th of the steps (the last
/// repeats), or `initial_ms × multiplier^(n−1)`, at most `max_ms`.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum Backoff {
    Steps(Vec<u64>),
    Exponential(Exponential),
}

/// The exponential form of a backoff (`multiplier`: 2 unless given).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Exponential {
    initial_ms: u64,
    max_ms: u64,
    multiplier: Option<u32>,
}

/// A consumer's starting point where no committed offset applies: `earliest`, `latest`, or
/// `none` (refuse the poll).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reset {
    Earliest,
    Latest,
    None,
}

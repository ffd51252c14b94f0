//! The API's documents as the client reads and writes them (docs/API.md describes each).
//! Answers are read leniently: a field a newer server adds is ignored. Most answers are
//! sluice-wire's types, as the server documents them; the events stay the client's own
//! ([`Event`] is one type for a replay's, a poll's and a received message's event).

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use sluice_wire::{
    GroupDescription, GroupPartition, PartitionState, ReceiptError, ReceiptResult, Topic, TopicDescription,
    TopicPartition, Upkeep,
};

/// A group's live member, as a group's description lists it.
pub use sluice_wire::Member as GroupMember;
/// An offset of a partition (a position, a commit, a seek's result).
pub use sluice_wire::Moved as PartitionOffset;
/// Where a published event landed.
pub use sluice_wire::Position as Placed;

/// A topic's settings, as created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSettings {
    /// 1 to 1024 (the server's default: 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    /// How long events are kept; `None`: the server's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<u64>,
    /// The most bytes each partition keeps; `None`: no bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_bytes: Option<u64>,
}

impl TopicSettings {
    /// `n` partitions, the rest default.
    pub fn partitions(n: u32) -> Self {
        Self { partitions: Some(n), ..Self::default() }
    }
}

/// An event to publish. `value` is any JSON; [`Record::bytes`] sends bytes instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_base64: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
    /// No subscription delivers it before this time (ms since the epoch); replay and groups
    /// read it at once. At most the topic's retention after its timestamp.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliver_at_ms: Option<i64>,
    /// The same, as milliseconds from when the server accepts it (not with `deliver_at_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

impl Record {
    /// An event with a JSON value.
    pub fn json(value: Value) -> Self {
        Self {
            key: None,
            value: Some(value),
            value_base64: None,
            headers: BTreeMap::new(),
            timestamp_ms: None,
            partition: None,
            deliver_at_ms: None,
            delay_ms: None,
        }
    }

    /// An event with a bytes value.
    pub fn bytes(value: &[u8]) -> Self {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        Self { value: None, value_base64: Some(encoded), ..Self::json(Value::Null) }
    }

    /// With a key (which picks the partition).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Delivered by no subscription before `ms` (since the epoch): replaces a delay.
    pub fn deliver_at_ms(mut self, ms: i64) -> Self {
        (self.deliver_at_ms, self.delay_ms) = (Some(ms), None);
        self
    }

    /// Delivered by no subscription before `delay` after the server accepts it (whole
    /// milliseconds): replaces a `deliver_at_ms`.
    pub fn delay(mut self, delay: std::time::Duration) -> Self {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        (self.deliver_at_ms, self.delay_ms) = (None, Some(ms));
        self
    }

    /// With a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The value's size as the server counts it against its 1 MiB limit: the JSON text, or
    /// the decoded bytes.
    pub(crate) fn value_len(&self) -> usize {
        match (&self.value, &self.value_base64) {
            (_, Some(b64)) => b64.len() / 4 * 3,
            (Some(value), None) => value.to_string().len(),
            (None, None) => 0,
        }
    }

    /// About how many bytes the record takes in a request, given its `value_len`.
    pub(crate) fn size(&self, value_len: usize) -> usize {
        let headers: usize = self.headers.iter().map(|(k, v)| k.len() + v.len() + 6).sum();
        64 + value_len * 4 / 3 + self.key.as_ref().map_or(0, String::len) + headers
    }
}

/// An event as replay, polls and receives hand it back.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Event {
    /// Set by group polls (which read several topics); `None` in a replay or receive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    pub partition: u32,
    pub offset: u64,
    pub timestamp_ms: i64,
    pub key: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Published with a schedule: no subscription delivers it before this time (ms since
    /// the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at_ms: Option<i64>,
    /// The JSON value, when it was published as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The bytes value, base64, when it was published as bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_base64: Option<String>,
}

impl Event {
    /// The value's bytes: the JSON text of a JSON value, or the decoded bytes.
    pub fn value_bytes(&self) -> Vec<u8> {
        match (&self.value, &self.value_base64) {
            (_, Some(b64)) => base64::engine::general_purpose::STANDARD.decode(b64).unwrap_or_default(),
            (Some(value), None) => value.to_string().into_bytes(),
            (None, None) => Vec::new(),
        }
    }
}

/// A page of a replay.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Page {
    pub events: Vec<Event>,
    pub next_offset: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
}

/// Where a replay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    Earliest,
    Latest,
    Offset(u64),
}

impl From {
    pub(crate) fn as_query(self) -> String {
        match self {
            From::Earliest => "earliest".into(),
            From::Latest => "latest".into(),
            From::Offset(o) => o.to_string(),
        }
    }
}

/// Where a seek moves a group's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTo {
    Earliest,
    Latest,
    Offset(u64),
    Timestamp(i64),
}

/// A message received from a work queue.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Message {
    /// What ack, nack and visibility take.
    pub receipt: String,
    pub receive_count: u32,
    pub first_receive_ms: i64,
    #[serde(flatten)]
    pub event: Event,
}

/// A visible message seen by a peek: no receipt, as nothing holds it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct PeekedMessage {
    /// Deliveries so far: 0 for a message never delivered.
    pub receive_count: u32,
    #[serde(flatten)]
    pub event: Event,
}

/// A dead letter of a subscription. The client's own: its event is the JSON as answered
/// (sluice-wire's [`DeadLetter`](sluice_wire::DeadLetter) types it as a record).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct DeadLetter {
    pub id: String,
    pub partition: u32,
    pub offset: u64,
    pub reason: String,
    pub receive_count: u32,
    pub first_receive_ms: i64,
    pub last_receive_ms: i64,
    pub dead_ms: i64,
    /// The event, or `None` if the log no longer holds it.
    pub event: Option<Value>,
}

/// A page of dead letters; `next` is where the next page starts (`None` on the last).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DeadLetterPage {
    pub dead_letters: Vec<DeadLetter>,
    pub next: Option<String>,
}

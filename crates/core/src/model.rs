//! The log's vocabulary: topics, partitions, positions and events.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::segment::Record;

/// What a client asks for when it creates a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSpec {
    pub partitions: u32,
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
}

/// A topic as stored. `id` tells apart two topics created under one name;
/// `version` is the version of its record when it was read, which a commit checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    pub name: String,
    pub id: u64,
    pub spec: TopicSpec,
    pub created_ms: i64,
    pub version: u64,
}

/// A partition's bounds: offsets `log_start_offset..high_watermark` are readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    pub partition: u32,
    pub log_start_offset: u64,
    pub high_watermark: u64,
    pub bytes: u64,
}

/// Where an acknowledged event lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub partition: u32,
    pub offset: u64,
}

/// An event to publish, before the log places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub key: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
    pub value: Bytes,
    pub value_is_json: bool,
    /// `None`: the time the log accepts it.
    pub timestamp_ms: Option<i64>,
    /// `None`: chosen from the key, or spread when there is no key.
    pub partition: Option<u32>,
}

/// An event read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub partition: u32,
    pub offset: u64,
    pub record: Record,
}

/// A page of a partition read from an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBatch {
    pub events: Vec<Event>,
    /// The offset to ask for next.
    pub next_offset: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
}

/// Which offset a client looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetQuery {
    Earliest,
    Latest,
    /// The first event with timestamp ≥ this; the high watermark if there is none.
    Timestamp(i64),
}

/// A publish retried under the same key returns its first result; `fingerprint`
/// tells a true retry from a different request reusing the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub key: String,
    pub fingerprint: Vec<u8>,
}

/// Size limits, enforced before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_value_bytes: usize,
    pub max_request_bytes: usize,
    pub max_events_per_publish: usize,
    pub max_headers_per_event: usize,
    /// Bytes of an event's key, of a header's name and of a header's value: far below the
    /// request's size, so the largest event is still carried inside one page
    /// ([`Limits::max_response_bytes`]) even with every byte escaped twice.
    pub max_key_bytes: usize,
    pub max_header_name_bytes: usize,
    pub max_header_value_bytes: usize,
    /// Arrays and objects a JSON value may open inside one another: every client reads it
    /// back (serde_json stops at 128 levels, counting those of the page around the value).
    pub max_value_depth: usize,
    /// How far past now (the log's clock) an event's timestamp may be; as Kafka's
    /// `message.timestamp.after.max.ms`. A timestamp before the epoch is always refused.
    pub max_timestamp_ahead_ms: i64,
    pub max_partitions: u32,
    pub max_read_events: usize,
    pub max_read_bytes: usize,
    /// A page (replay, group poll, queue receive) stops before its events, as Lambda carries
    /// them (the JSON answer escaped once more as the proxy result's body, `page.rs`), pass
    /// this: Lambda answers at most 6,291,556 bytes, and the rest of the proxy result (its
    /// headers, a poll's assignment is counted in, a receive's ack results) fits in the rest.
    pub max_response_bytes: usize,
    pub max_wait_ms: u64,
}

impl Limits {
    /// Checks a read's bounds (a replay, a poll) against these limits: `max_events` (named
    /// `events_name` to the client, refused with `events_code`) from 1 to `max_read_events`,
    /// `max_bytes` from 1 to `max_read_bytes`, `wait_ms` up to `max_wait_ms`.
    pub fn check_read(
        &self,
        (max_events, events_name, events_code): (usize, &str, crate::Code),
        max_bytes: usize,
        wait_ms: u64,
    ) -> Result<(), crate::Error> {
        use crate::{Code, Error};
        if max_events == 0 || max_events > self.max_read_events {
            let message = format!("{events_name} must be between 1 and {}", self.max_read_events);
            return Err(Error::invalid(events_code, message));
        }
        if max_bytes == 0 || max_bytes > self.max_read_bytes {
            let message = format!("max_bytes must be between 1 and {}", self.max_read_bytes);
            return Err(Error::invalid(Code::InvalidMaxBytes, message));
        }
        if wait_ms > self.max_wait_ms {
            return Err(Error::invalid(Code::InvalidWait, format!("wait_ms must be at most {}", self.max_wait_ms)));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_value_bytes: 1 << 20,
            max_request_bytes: 6 << 20,
            max_events_per_publish: 1000,
            max_headers_per_event: 64,
            max_key_bytes: 1024,
            max_header_name_bytes: 256,
            max_header_value_bytes: 4096,
            max_value_depth: 64,
            max_timestamp_ahead_ms: 3_600_000,
            max_partitions: 1024,
            max_read_events: 10_000,
            max_read_bytes: 6 << 20,
            max_response_bytes: 5_500_000,
            max_wait_ms: 20_000,
        }
    }
}

/// What the log holds on one topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSize {
    pub topic: String,
    pub partitions: u32,
    pub events: u64,
    pub bytes: u64,
}

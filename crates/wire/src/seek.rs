//! Seeking a subscription's queue on the wire: `POST …/seek` and `POST …/purge`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a seek moves a queue: `"earliest"` (each partition's log start), `"latest"` (its
/// end: everything passed over), the first messages at or after a time, or one offset per
/// partition, each between the partition's log start and high watermark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SeekTo {
    Earliest,
    Latest,
    #[serde(rename = "timestamp_ms")]
    Timestamp(i64),
    Offsets(Vec<u64>),
}

/// `POST …/seek`: where to, and whether only to count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SeekSubscription {
    #[cfg_attr(feature = "openapi", schema(value_type = SeekTo))]
    pub to: Value,
    /// Count only: change nothing, answer what the seek would do now (default false).
    #[serde(default)]
    pub dry_run: bool,
}

/// What a seek or a purge did (or, a dry run, would do at that instant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeekOutcome {
    /// False for a dry run: nothing was changed.
    pub applied: bool,
    /// Messages done with (acked or dead-lettered) that become deliverable again.
    pub redeliver: u64,
    /// Messages still to deliver (new, in flight, waiting) that are passed over.
    pub skip: u64,
    pub partitions: Vec<PartitionSeek>,
}

/// One partition's move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionSeek {
    pub partition: u32,
    /// The first offset never delivered, before.
    pub from: u64,
    /// The first offset never delivered, after: where the queue goes on from.
    pub to: u64,
    pub redeliver: u64,
    pub skip: u64,
}

//! Consumer groups on the wire: polls, commits, leaves, seeks and a group's description.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

/// An event a poll delivers, with its topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupEvent {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
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

/// A poll's answer: the member, its generation and partitions, and their next events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Polled {
    /// The id to send from now on.
    pub member_id: String,
    pub generation: u64,
    pub assignment: Vec<TopicPartition>,
    pub events: Vec<GroupEvent>,
}

/// A committed offset where a seek put it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Moved {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
}

/// A seek's answer: each committed offset it moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sought {
    pub offsets: Vec<Moved>,
}

/// `GET /v1/groups`: every group's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupList {
    pub groups: Vec<String>,
}

/// A group: its members, its partitions with their committed offsets and lag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupDescription {
    pub group: String,
    pub generation: u64,
    pub members: Vec<Member>,
    pub partitions: Vec<GroupPartition>,
    /// The sum of the partitions' lag.
    pub lag: u64,
    /// When the janitor may remove the group's offsets unless a member joins or a seek comes
    /// first: `null` while it has members.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub offsets_expire_at_ms: Option<i64>,
}

/// A live member of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    pub member_id: String,
    pub assignment: Vec<TopicPartition>,
    pub session_timeout_ms: u64,
    /// When the session ends unless the member polls again.
    pub expires_at_ms: i64,
}

/// A partition a group reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupPartition {
    pub topic: String,
    pub partition: u32,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub committed_offset: Option<u64>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub metadata: Option<String>,
    pub log_start_offset: u64,
    pub high_watermark: u64,
    pub lag: u64,
    /// The member that owns it now, if any.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub member_id: Option<String>,
}

/// A consumer's starting point where no committed offset applies: `earliest`, `latest`, or
/// `none` (refuse the poll).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Reset {
    Earliest,
    Latest,
    None,
}

/// A poll: joins without `member_id`, then heartbeats and fetches with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PollRequest {
    /// The id the first poll answered; absent to join.
    pub member_id: Option<String>,
    /// The topics the group reads.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::name::Name>, min_items = 1))]
    pub topics: Vec<String>,
    /// Default 500.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>, minimum = 1))]
    pub max_events: Option<usize>,
    /// Default 1 MiB.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>, minimum = 1))]
    pub max_bytes: Option<usize>,
    /// Long poll, up to 20 s and half the session timeout.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 20000))]
    pub wait_ms: u64,
    /// Where a partition without a usable committed offset starts (default `earliest`).
    #[serde(default = "earliest")]
    pub reset: Reset,
    /// 6000 to 300000 (default 45000).
    #[cfg_attr(feature = "openapi", schema(minimum = 6000, maximum = 300000))]
    pub session_timeout_ms: Option<u64>,
    /// Commit the `positions` (or what the previous poll returned) before fetching.
    #[serde(default)]
    pub auto_commit: bool,
    /// The next offset the client expects per partition it has received events of.
    pub positions: Option<Vec<FetchPosition>>,
    /// A static member's stable name (Kafka's `group.instance.id`): its member id is `i.<instance_id>`.
    pub instance_id: Option<String>,
}

/// The next offset the client expects on a partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FetchPosition {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
}

/// Offsets to commit, fenced by the member's generation and partitions (at most 98).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    pub member_id: String,
    pub generation: u64,
    pub offsets: Vec<CommitOffset>,
}

/// One committed offset: the next offset to consume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitOffset {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub metadata: Option<String>,
}

/// The member that leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LeaveRequest {
    pub member_id: String,
}

/// Where to move committed offsets: exactly one of `to`, `offset` and `timestamp_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SeekRequest {
    /// One topic; every topic the group reads if absent.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::name::Name>))]
    pub topic: Option<String>,
    pub partitions: Option<Vec<u32>>,
    /// `earliest` or `latest`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::End>))]
    pub to: Option<String>,
    pub offset: Option<u64>,
    pub timestamp_ms: Option<i64>,
}

fn earliest() -> Reset {
    Reset::Earliest
}

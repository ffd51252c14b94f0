//! Consumer groups on the wire: polls, seeks and a group's description.

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

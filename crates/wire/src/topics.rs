//! Topics on the wire: a topic's settings and description, and where published events landed.

use serde::{Deserialize, Serialize};

/// A topic and its settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Topic {
    pub name: String,
    pub partitions: u32,
    /// `null`: the server's default retention (7 days unless the deployment sets another).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub retention_ms: Option<i64>,
    /// `null`: no bound.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub retention_bytes: Option<i64>,
    pub created_ms: i64,
}

/// `GET /v1/topics`: every topic, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicList {
    pub topics: Vec<Topic>,
}

/// A topic, each of its partitions, and what the janitor has done to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicDescription {
    pub name: String,
    pub partitions: u32,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub retention_ms: Option<i64>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub retention_bytes: Option<i64>,
    pub created_ms: i64,
    pub partition_states: Vec<PartitionState>,
    pub upkeep: Upkeep,
}

/// One partition's readable range and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionState {
    pub partition: u32,
    /// The earliest readable offset.
    pub log_start_offset: u64,
    /// The offset the next event will get.
    pub high_watermark: u64,
    /// The readable events' size as stored: what `retention_bytes` bounds.
    pub bytes: u64,
}

/// What retention and compaction did to a topic so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Upkeep {
    pub segments_expired: u64,
    pub bytes_expired: u64,
    pub segments_merged: u64,
    pub segments_written: u64,
    /// When the janitor last changed the topic (0: never).
    pub last_change_ms: i64,
}

/// Where an event is: its partition and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Position {
    pub partition: u32,
    pub offset: u64,
}

/// A publish's answer: where each event landed, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Published {
    pub results: Vec<Position>,
}

/// A topic's settings; an empty body means all defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTopic {
    /// 1 to 1024.
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1024, default = 1))]
    pub partitions: u32,
    /// How long events are kept, by their timestamps; the server's default (7 days) if absent.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub retention_ms: Option<i64>,
    /// The most bytes each partition keeps; no bound if absent.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub retention_bytes: Option<i64>,
}

fn one() -> u32 {
    1
}

/// `GET /healthz` and `GET /readyz`: the process answers (`ok`), the store answers a read (`ready`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    #[cfg_attr(feature = "openapi", schema(example = "ok"))]
    pub status: String,
}

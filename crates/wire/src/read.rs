//! Replay on the wire: a stored event and a page of a partition.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A stored event as replay shows it: `value` (the JSON it was published with) or
/// `value_base64` (bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub partition: u32,
    pub offset: u64,
    pub timestamp_ms: i64,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub key: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Published with a schedule: no subscription delivers it before this time (ms since
    /// the epoch). Replay and groups read it at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at_ms: Option<i64>,
    /// Any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(content_encoding = "base64"))]
    pub value_base64: Option<String>,
}

/// A page of a partition, and where to go on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReadPage {
    pub events: Vec<Event>,
    /// The offset to ask for next.
    pub next_offset: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
}

/// One end of a partition's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum End {
    Earliest,
    Latest,
}

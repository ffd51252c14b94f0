//! Path and query parameters as the document shows them. The handlers read them as text and
//! parse them themselves (to answer each bad one with its own code), so these types only
//! describe: they are never built.
#![allow(dead_code)]

use serde::Serialize;
pub(crate) use sluice_wire::openapi::Name;
pub(crate) use sluice_wire::End;
use utoipa::{IntoParams, ToSchema};

/// `{topic}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct TopicPath {
    /// The topic's name.
    #[param(example = "orders", value_type = Name)]
    topic: String,
}

/// `{topic}` and `{partition}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct PartitionPath {
    /// The topic's name.
    #[param(example = "orders", value_type = Name)]
    topic: String,
    /// A partition: 0 to the topic's partitions − 1.
    #[param(example = 0)]
    partition: u32,
}

/// `{group}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct GroupPath {
    /// The consumer group's name.
    #[param(example = "billing", value_type = Name)]
    group: String,
}

/// `{topic}` and `{sub}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct SubPath {
    /// The topic's name.
    #[param(example = "orders", value_type = Name)]
    topic: String,
    /// The subscription's name.
    #[param(example = "workers", value_type = Name)]
    sub: String,
}

/// `{topic}`, `{sub}` and a dead letter's `{id}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct DeadLetterPath {
    /// The topic's name.
    #[param(example = "orders", value_type = Name)]
    topic: String,
    /// The subscription's name.
    #[param(example = "workers", value_type = Name)]
    sub: String,
    /// `<partition>-<offset>`, as the dead-letter listing shows it.
    #[param(example = "0-1")]
    id: String,
}

/// Where a replay starts: an offset, or one end of the log.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum ReadFrom {
    /// The first offset wanted.
    Offset(u64),
    /// `earliest`: the log start; `latest`: the high watermark (only events published from now on).
    End(End),
}

/// Replay's query.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReadQuery {
    /// The first offset wanted (default `earliest`).
    #[param(value_type = Option<ReadFrom>, example = 0)]
    offset: Option<ReadFrom>,
    /// Most events: 1 to 10,000 (default 100).
    #[param(minimum = 1, maximum = 10000, example = 100)]
    limit: Option<u32>,
    /// About how many bytes of events: 1 to 6 MiB (default 1 MiB); the first event always comes.
    #[param(minimum = 1, maximum = 6291456)]
    max_bytes: Option<u32>,
    /// Long poll: wait up to this long for a first event (0 to 20,000; default 0).
    #[param(minimum = 0, maximum = 20000)]
    wait_ms: Option<u32>,
}

/// A time, or one end of the log.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum FindBy {
    /// Milliseconds since the epoch: the first event at or after it.
    Timestamp(i64),
    /// `earliest` (the log start) or `latest` (the high watermark).
    End(End),
}

/// Offset lookup's query.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct OffsetsQuery {
    /// What to find: milliseconds since the epoch, `earliest` or `latest`.
    #[param(value_type = FindBy, example = "earliest")]
    timestamp_ms: FindBy,
}

/// The dead-letter listing's query.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeadLettersQuery {
    /// Dead letters per page: 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000, example = 100)]
    limit: Option<u32>,
    /// Start after this id: the `next` of the previous page.
    #[param(example = "0-1")]
    after: Option<String>,
}

/// A peek's query.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PeekQuery {
    /// Messages at most: 1 to 100 (default 10).
    #[param(minimum = 1, maximum = 100, example = 10)]
    limit: Option<u32>,
}

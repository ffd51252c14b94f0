//! The domain's errors: what went wrong, never which backend failed.

pub use sluice_wire::Code;

use crate::ports::objects::StorageError;

/// Everything the log can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed or breaks a rule.
    #[error("{message}")]
    Invalid { code: Code, message: String },
    /// The request exceeds a size limit.
    #[error("{message}")]
    TooLarge { code: Code, message: String },
    #[error("topic '{0}' does not exist")]
    TopicNotFound(String),
    #[error("topic '{topic}' has no partition {partition}")]
    PartitionNotFound { topic: String, partition: u32 },
    #[error("group '{0}' does not exist")]
    GroupNotFound(String),
    #[error("topic '{topic}' has no subscription '{subscription}'")]
    SubscriptionNotFound { topic: String, subscription: String },
    /// Something else the request names does not exist (a dead letter, …).
    #[error("{message}")]
    NotFound { code: Code, message: String },
    /// The request conflicts with the current state (a fenced commit, a non-empty group, …).
    #[error("{message}")]
    Conflict { code: Code, message: String },
    #[error("topic '{0}' already exists with a different configuration")]
    TopicExists(String),
    #[error("Idempotency-Key '{0}' was already used for a different request")]
    IdempotencyKeyReused(String),
    #[error("offset {offset} is out of range: readable offsets are {log_start_offset}..={high_watermark}")]
    OffsetOutOfRange { offset: u64, log_start_offset: u64, high_watermark: u64 },
    /// Stored bytes failed their checks: a fault, not a client error.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// Storage is throttling: the client should retry later.
    #[error("storage is busy, retry later")]
    Throttled(#[source] StorageError),
    /// Storage failed; the write may or may not have happened only if it was never acknowledged.
    #[error("storage unavailable")]
    Unavailable(#[source] StorageError),
}

impl Error {
    pub fn invalid(code: Code, message: impl Into<String>) -> Self {
        Self::Invalid { code, message: message.into() }
    }

    pub fn too_large(code: Code, message: impl Into<String>) -> Self {
        Self::TooLarge { code, message: message.into() }
    }
}

impl From<StorageError> for Error {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Corrupt(m) => Self::Corrupt(m),
            e @ StorageError::Throttled { .. } => Self::Throttled(e),
            e => Self::Unavailable(e),
        }
    }
}

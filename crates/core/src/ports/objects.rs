//! The blob store trait, and the storage errors every adapter speaks. The state
//! store, the other half of a backend, is in [`crate::ports::state`].

use async_trait::async_trait;
use bytes::Bytes;

/// Where a blob was stored: `object` names it, `position` is where its bytes start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    pub object: String,
    pub position: u64,
}

/// Storage failures, by what went wrong rather than which backend failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// The conditions of operations of a [`crate::ports::state::StateStore::write`] did not
    /// hold; nothing was written. `op` is the first of them, `failed` every one, in order
    /// (a store that stops at the first failure names only it): a caller with many stale
    /// conditions heals them all in one round.
    #[error("condition failed on write operation {op}")]
    ConditionFailed { op: usize, failed: Vec<usize> },
    /// The store refused a malformed request (a caller's bug, e.g. two operations on one key).
    #[error("invalid storage request: {0}")]
    Invalid(String),
    #[error("throttled: {message}")]
    Throttled {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    #[error("unavailable: {message}")]
    Unavailable {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl StorageError {
    /// The same kind of error without its source (sources are not `Clone`), for
    /// answering every request of a failed group commit alike.
    pub fn same_kind(&self) -> Self {
        match self {
            Self::NotFound(m) => Self::NotFound(m.clone()),
            Self::Corrupt(m) => Self::Corrupt(m.clone()),
            Self::ConditionFailed { op, failed } => Self::ConditionFailed { op: *op, failed: failed.clone() },
            Self::Invalid(m) => Self::Invalid(m.clone()),
            Self::Throttled { message, .. } => Self::Throttled { message: message.clone(), source: None },
            Self::Unavailable { message, .. } => Self::Unavailable { message: message.clone(), source: None },
        }
    }

    /// The conditions of operations `failed` (in order, at least one) did not hold.
    pub fn condition_failed(failed: Vec<usize>) -> Self {
        Self::ConditionFailed { op: failed.first().copied().unwrap_or(0), failed }
    }

    pub fn unavailable(message: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Unavailable { message: message.into(), source: Some(Box::new(source)) }
    }
}

/// One object as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub name: String,
    pub size: u64,
    /// When it was created, by the store's clock (S3's LastModified, a file's mtime): only
    /// used to leave young objects alone for a grace period, never to decide safety.
    pub created_ms: i64,
}

/// Immutable blobs: S3 objects, or byte ranges of local files.
///
/// Objects are removed only by the collector ([`crate::upkeep::collect`]), which first dooms an object in
/// the state store so that no commit can index a blob in it afterwards; see docs/DESIGN.md.
#[async_trait]
pub trait ObjectStore: Send + Sync + 'static {
    /// Stores `bytes` as a new immutable blob, durable when this returns, and says where it lives.
    /// Never overwrites anything: the bytes at a returned [`BlobRef`] never change.
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError>;

    /// Reads `len` bytes at `position` of `object`.
    /// `NotFound` if the object does not exist; `Corrupt` if it holds fewer bytes.
    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError>;

    /// Up to `limit` objects in name order, after `after` (exclusive) when given. Names sort
    /// by creation time (they start with it), so a listing meets old objects first.
    async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError>;

    /// Deletes an object. Deleting an absent object succeeds (a retried delete is not an error).
    async fn delete(&self, object: &str) -> Result<(), StorageError>;

    /// Never puts another blob into `object` (the collector doomed it). A no-op where every
    /// put creates an object of its own.
    fn retire(&self, _object: &str) {}
}

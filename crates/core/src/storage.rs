//! The two storage traits every backend implements, and the types they trade.
//!
//! Commit protocol (the same on S3 + DynamoDB and on local files + SQLite):
//! 1. the log encodes the segments of every partition a group of publishes
//!    touches into one blob and [`ObjectStore::put`]s it: durable, but not yet
//!    visible, because readers find data only through the index;
//! 2. one [`MetaStore::commit`] makes each segment visible at its partition's
//!    next offset, conditional on that offset still being next. A commit that
//!    loses the race gets [`StorageError::Precondition`]; the log re-reads the
//!    heads and retries with the same blob. A blob never indexed is garbage.

use async_trait::async_trait;
use bytes::Bytes;

use crate::model::{PartitionState, Position, TopicConfig};

/// Where a blob was stored: `object` names it, `position` is where its bytes start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    pub object: String,
    pub position: u64,
}

/// An index entry: the segment holding offsets `base_offset..next_offset` of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEntry {
    pub topic: String,
    /// The [`TopicConfig::id`] a commit is for, so it fails on a recreated topic (0 when read back).
    pub topic_id: u64,
    pub partition: u32,
    pub base_offset: u64,
    pub next_offset: u64,
    pub object: String,
    pub position: u64,
    pub len: u64,
    pub max_timestamp_ms: i64,
}

/// The stored outcome of a publish made under an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    pub topic: String,
    pub key: String,
    pub fingerprint: Vec<u8>,
    pub results: Vec<Position>,
    pub created_ms: i64,
}

/// What one [`MetaStore::commit`] makes visible.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitBatch {
    /// At most one entry per partition, each expecting `base_offset` to be the partition's next offset.
    pub entries: Vec<SegmentEntry>,
    pub idempotency: Vec<IdempotencyRecord>,
}

/// Storage failures, by what went wrong rather than which backend failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// A conditional write found the state changed since it was read.
    #[error("precondition failed: {0}")]
    Precondition(String),
    #[error("corrupt: {0}")]
    Corrupt(String),
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
    pub fn unavailable(message: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Unavailable { message: message.into(), source: Some(Box::new(source)) }
    }
}

/// Immutable blobs: S3 objects, or byte ranges of local files.
#[async_trait]
pub trait ObjectStore: Send + Sync + 'static {
    /// Stores `bytes` as a new immutable blob, durable when this returns, and says where it lives.
    /// Never overwrites anything: the bytes at a returned [`BlobRef`] never change.
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError>;

    /// Reads `len` bytes at `position` of `object`.
    /// `NotFound` if the object does not exist; `Corrupt` if it holds fewer bytes.
    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError>;
}

/// Topics, the segment index and idempotency records, with conditional writes:
/// DynamoDB, or SQLite. Every read sees every write that returned before it.
#[async_trait]
pub trait MetaStore: Send + Sync + 'static {
    /// Creates the topic with partitions `0..spec.partitions`, each empty at offset 0, atomically.
    /// `AlreadyExists` and nothing changed if the name is taken.
    async fn create_topic(&self, topic: &TopicConfig) -> Result<(), StorageError>;

    /// The topic called `name`, if any.
    async fn topic(&self, name: &str) -> Result<Option<TopicConfig>, StorageError>;

    /// Every topic, by name.
    async fn list_topics(&self) -> Result<Vec<TopicConfig>, StorageError>;

    /// Removes the topic with its partitions, index and idempotency records. `NotFound` if absent.
    async fn delete_topic(&self, name: &str) -> Result<(), StorageError>;

    /// The state of every partition of `topic`, by partition. `NotFound` if the topic is absent.
    async fn partitions(&self, topic: &str) -> Result<Vec<PartitionState>, StorageError>;

    /// The state of one partition. `NotFound` if the topic or partition is absent.
    async fn partition(&self, topic: &str, partition: u32) -> Result<PartitionState, StorageError>;

    /// Makes every entry visible and stores every idempotency record, all or nothing.
    /// `Precondition` if an entry's `base_offset` is no longer its partition's next offset;
    /// `AlreadyExists` if an idempotency key is taken; `NotFound` if a partition is gone.
    async fn commit(&self, batch: &CommitBatch) -> Result<(), StorageError>;

    /// Up to `limit` entries of a partition in offset order, from the one holding `offset`
    /// (or the first after it). Empty when `offset` is at or past the high watermark.
    async fn segments(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        limit: usize,
    ) -> Result<Vec<SegmentEntry>, StorageError>;

    /// The first entry of a partition, in offset order, holding a timestamp ≥ `timestamp_ms`.
    async fn segment_at_time(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: i64,
    ) -> Result<Option<SegmentEntry>, StorageError>;

    /// The record stored for `key` on `topic`, if any.
    async fn idempotency(&self, topic: &str, key: &str) -> Result<Option<IdempotencyRecord>, StorageError>;
}

//! The state-store port: the one transactional key-value interface that every
//! piece of Sluice's state (topics, partition heads, the segment index,
//! idempotency records; groups, queues and retention next) is written on, in
//! core, once. DynamoDB implements it in `sluice-aws`, SQLite in `sluice-local`.
//!
//! The model is DynamoDB's, cut to what the domain needs:
//! - an [`Item`] is addressed by a [`Key`]: a partition key (`pk`, which groups
//!   items into one collection) and a sort key (`sk`, which orders them within it);
//! - it holds an opaque `value` (core encodes its own records), a `version` that
//!   the store sets to 1 when the item is created and adds 1 to on every put,
//!   and an optional expiry time;
//! - reads are strongly consistent: a read sees every write that returned before it;
//! - [`StateStore::write`] applies up to [`MAX_WRITE_OPS`] operations
//!   atomically, each optionally conditional on the item's version or absence.
//!
//! Sort keys compare as byte strings; core zero-pads numbers so that string
//! order is numeric order.

use async_trait::async_trait;
use bytes::Bytes;

use crate::ports::objects::StorageError;

/// Most operations in one [`StateStore::write`] (DynamoDB's transaction limit;
/// SQLite enforces the same, so both backends refuse and split alike).
pub const MAX_WRITE_OPS: usize = 100;

/// Where an item lives: its collection (`pk`) and its place in it (`sk`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub pk: String,
    pub sk: String,
}

impl Key {
    pub fn new(pk: impl Into<String>, sk: impl Into<String>) -> Self {
        Self { pk: pk.into(), sk: sk.into() }
    }
}

/// A stored item, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: Key,
    pub value: Bytes,
    /// See [`WriteOp::Put`]: 1 when created, +1 on every put since.
    pub version: u64,
    /// Milliseconds since the epoch after which the item reads as absent.
    pub expires_at_ms: Option<i64>,
}

/// What an operation requires of the item's current state for the write to apply.
/// An expired item counts as absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No condition.
    Any,
    /// The item does not exist.
    Absent,
    /// The item exists with exactly this version.
    Version(u64),
}

/// One operation of an atomic [`StateStore::write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Creates or replaces the item's value and expiry. Its version becomes 1
    /// under [`Expect::Absent`], `n + 1` under `Expect::Version(n)`, and under
    /// [`Expect::Any`] the stored version + 1 (1 if there was none).
    Put { key: Key, value: Bytes, expires_at_ms: Option<i64>, expect: Expect },
    /// Removes the item (nothing to remove is not an error under [`Expect::Any`]).
    Delete { key: Key, expect: Expect },
    /// Changes nothing; only its condition takes part in the write.
    Check { key: Key, expect: Expect },
}

impl WriteOp {
    pub fn key(&self) -> &Key {
        match self {
            Self::Put { key, .. } | Self::Delete { key, .. } | Self::Check { key, .. } => key,
        }
    }

    pub fn expect(&self) -> Expect {
        match self {
            Self::Put { expect, .. } | Self::Delete { expect, .. } | Self::Check { expect, .. } => *expect,
        }
    }

    /// A put that must create the item.
    pub fn create(key: Key, value: Bytes) -> Self {
        Self::Put { key, value, expires_at_ms: None, expect: Expect::Absent }
    }

    /// A put that applies only over the version read (or only if absent, for `None`).
    pub fn replace(key: Key, value: Bytes, read_version: Option<u64>) -> Self {
        let expect = read_version.map_or(Expect::Absent, Expect::Version);
        Self::Put { key, value, expires_at_ms: None, expect }
    }
}

/// A range of one collection, read in sort-key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub pk: String,
    /// Smallest sort key included, if any.
    pub from: Option<String>,
    /// Largest sort key included, if any.
    pub to: Option<String>,
    /// Ascending sort keys if true, descending otherwise.
    pub forward: bool,
    /// Most items returned (at least 1).
    pub limit: usize,
    /// Continue after this sort key (exclusive, in the query's direction): a [`Page::next`].
    pub after: Option<String>,
}

impl Query {
    /// The whole collection `pk`, ascending, `limit` items at a time.
    pub fn all(pk: impl Into<String>, limit: usize) -> Self {
        Self { pk: pk.into(), from: None, to: None, forward: true, limit, after: None }
    }
}

/// Items of a [`Query`], and where to continue if there may be more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub items: Vec<Item>,
    /// `Some(sort key)` to pass as [`Query::after`] when the range may hold more items.
    pub next: Option<String>,
}

/// One read of a [`StateStore::read_many`]: a [`StateStore::get`] or a [`StateStore::query`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Get(Key),
    Query(Query),
}

/// What one [`Read`] found: a get's item (if any), a query's page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Item(Option<Item>),
    Page(Page),
}

impl Found {
    /// A get's answer; [`StorageError::Invalid`] if this answers a query (a store's bug).
    pub fn into_item(self) -> Result<Option<Item>, StorageError> {
        match self {
            Self::Item(item) => Ok(item),
            Self::Page(_) => Err(StorageError::Invalid("a page answered a get".into())),
        }
    }

    /// A query's answer; [`StorageError::Invalid`] if this answers a get (a store's bug).
    pub fn into_page(self) -> Result<Page, StorageError> {
        match self {
            Self::Page(page) => Ok(page),
            Self::Item(_) => Err(StorageError::Invalid("an item answered a query".into())),
        }
    }
}

/// Refuses a write that no backend may apply: more than [`MAX_WRITE_OPS`] operations,
/// or two on one key. Adapters call it before sending anything.
pub fn validate(ops: &[WriteOp]) -> Result<(), StorageError> {
    if ops.len() > MAX_WRITE_OPS {
        return Err(StorageError::Invalid(format!(
            "a write of {} operations exceeds the limit of {MAX_WRITE_OPS}",
            ops.len()
        )));
    }
    let mut keys = std::collections::HashSet::with_capacity(ops.len());
    for op in ops {
        let key = op.key();
        if !keys.insert(key) {
            return Err(StorageError::Invalid(format!("two operations of one write on {}/{}", key.pk, key.sk)));
        }
    }
    Ok(())
}

/// A transactional key-value store with strongly consistent reads.
///
/// Errors: [`StorageError::ConditionFailed`] names the first operation whose
/// condition did not hold (`op`) and every one that did not (`failed`, in order),
/// and then nothing was written;
/// [`StorageError::Throttled`] means the store refused before doing anything
/// (safe to retry); [`StorageError::Unavailable`] from a write means the outcome
/// is unknown: the write may or may not have been applied.
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    /// The item at `key`, unless it is absent or expired.
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError>;

    /// Up to `query.limit` unexpired items of one collection within the bounds, in order.
    async fn query(&self, query: &Query) -> Result<Page, StorageError>;

    /// Answers every read, in the order of `reads` (a [`Found::Item`] for a [`Read::Get`], a
    /// [`Found::Page`] for a [`Read::Query`]), each as `get` or `query` would answer it at
    /// some moment between the call and its answer: each sees every write answered before
    /// the call. The moments may differ from read to read (this default makes the reads one
    /// by one, in order; SQLite answers them all from one read transaction): a caller may
    /// rely on neither, only on each answer's own consistency. An error answers nothing.
    /// A store makes no request for it that the reads one by one would not make, and weakens
    /// no read: it saves only the per-call overhead (a read transaction, a thread hop).
    async fn read_many(&self, reads: &[Read]) -> Result<Vec<Found>, StorageError> {
        let mut found = Vec::with_capacity(reads.len());
        for read in reads {
            found.push(match read {
                Read::Get(key) => Found::Item(self.get(key).await?),
                Read::Query(query) => Found::Page(self.query(query).await?),
            });
        }
        Ok(found)
    }

    /// Whether a read added to a [`StateStore::read_many`] costs next to nothing beside the
    /// batch's others (SQLite answers a batch from one read transaction; memory takes a
    /// lock), so that a caller may add reads it may not need, such as a guessed key's.
    /// `false`, this default: each read of a batch costs what it would alone (a DynamoDB
    /// request, billed), so a caller asks only for what it needs. It changes no answer,
    /// only which reads a caller chooses to make.
    fn cheap_batched_reads(&self) -> bool {
        false
    }

    /// Applies every operation or none, atomically with respect to every other
    /// read and write. At most [`MAX_WRITE_OPS`] operations, each on a different key
    /// (otherwise [`StorageError::Invalid`] and nothing written).
    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError>;

    /// Applies `ops` as [`StateStore::write`] does (the same atomicity, conditions and
    /// answers), but may answer before the write is durable against a power cut. Once
    /// answered it is applied, visible and durable against a crash of this process; a
    /// power cut may still lose it, but only together with every write answered after it
    /// (what survives a cut is a prefix of the writes in commit order), and never once a
    /// later [`StateStore::write`] has been answered. For writes whose loss only repeats
    /// work, such as an ack (its message is delivered again: at least once). A store
    /// without the distinction writes durably, as this default does.
    async fn write_deferred(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write(ops).await
    }

    /// Deletes every key, unconditionally and not atomically as a whole (each
    /// delete is atomic on its own): cheap bulk cleanup of items nothing reads any more.
    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError>;

    /// Removes up to `limit` items whose expiry has passed and answers how many;
    /// a store that removes them by itself (DynamoDB's TTL) answers 0.
    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(pk: &str, sk: &str) -> WriteOp {
        WriteOp::create(Key::new(pk, sk), Bytes::from_static(b"x"))
    }

    #[test]
    fn validate_refuses_duplicate_keys_and_too_many_ops() {
        assert!(validate(&[]).is_ok());
        assert!(validate(&[put("a", "1"), put("a", "2"), put("b", "1")]).is_ok());
        assert!(matches!(validate(&[put("a", "1"), put("a", "1")]), Err(StorageError::Invalid(_))));
        let many: Vec<WriteOp> = (0..=MAX_WRITE_OPS).map(|i| put("a", &i.to_string())).collect();
        assert!(matches!(validate(&many), Err(StorageError::Invalid(_))));
        assert!(validate(&many[..MAX_WRITE_OPS]).is_ok());
    }
}

//! The topic catalog and partition heads, on the [`StateStore`]: create, look up,
//! list and delete topics, and read the heads of their partitions.

use crate::keys;
use crate::layout::{self, HeadRecord, PurgeRecord, Tail, TopicRecord};
use crate::model::{PartitionState, TopicConfig, TopicSpec};
use crate::ports::state::{Expect, Item, Page, Query, StateStore, WriteOp, MAX_WRITE_OPS};
use crate::retry::Backoff;
use crate::{Clock, Error, Random, StorageError};

/// Items read per query when walking a collection.
pub(crate) const PAGE: usize = 1000;

/// The topic record under `name`, live or tombstone, with its version.
pub(crate) async fn record(store: &dyn StateStore, name: &str) -> Result<Option<(TopicRecord, u64)>, StorageError> {
    let Some(item) = store.get(&keys::topic_key(name)).await? else { return Ok(None) };
    Ok(Some((layout::decode_topic(&item.value)?, item.version)))
}

/// The live topic called `name`, read now (never from a cache).
pub(crate) async fn live(store: &dyn StateStore, name: &str) -> Result<TopicConfig, Error> {
    match record(store, name).await? {
        Some((r, version)) if r.deleted_ms.is_none() => Ok(r.config(name, version)),
        _ => Err(Error::TopicNotFound(name.to_owned())),
    }
}

/// Creates `name` with `id` unless it exists; `Ok((existing, false))` for the same spec.
/// A tombstone of a deleted topic is replaced (conditionally on its version), so
/// the record's version keeps growing across incarnations.
///
/// Every partition's head is created with the topic, so that a commit never creates one and
/// never checks the topic record, which every publish to the topic would then share (on
/// DynamoDB, concurrent transactions naming one item cancel one another). The record and
/// the first heads go in one atomic write; a topic of more partitions than one write holds
/// gets the rest in further writes ([`finish_heads`]). A create that stops between them
/// leaves a live topic with heads missing: a commit creates a missing head as it did before
/// heads came with the topic (checking the record), and a retry of the create finishes them.
pub(crate) async fn create(
    store: &dyn StateStore,
    name: &str,
    spec: TopicSpec,
    id: u64,
    now_ms: i64,
) -> Result<(TopicConfig, bool), Error> {
    // Two attempts: a concurrent create or delete can change the record between our read and write.
    for _ in 0..2 {
        let existing = record(store, name).await?;
        let read_version = match &existing {
            Some((r, version)) if r.deleted_ms.is_none() => {
                let topic = r.config(name, *version);
                if topic.spec != spec {
                    return Err(Error::TopicExists(name.to_owned()));
                }
                finish_heads(store, &topic).await?;
                return Ok((topic, false));
            }
            Some((_, version)) => Some(*version),
            None => None,
        };
        let topic = TopicConfig {
            name: name.to_owned(),
            id,
            spec,
            created_ms: now_ms,
            version: read_version.map_or(1, |v| v + 1),
        };
        let put = WriteOp::replace(keys::topic_key(name), layout::encode(&TopicRecord::live(&topic)), read_version);
        let first = (0..spec.partitions).take(MAX_WRITE_OPS - 1).map(|p| new_head(id, p));
        match store.write(std::iter::once(put).chain(first).collect()).await {
            Ok(()) => {
                if spec.partitions as usize >= MAX_WRITE_OPS {
                    finish_heads(store, &topic).await?;
                }
                return Ok((topic, true));
            }
            Err(StorageError::ConditionFailed { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Unavailable(StorageError::Throttled {
        message: format!("topic {name} is being changed concurrently"),
        source: None,
    }))
}

/// Creates the heads a live topic lacks (one of many partitions whose create stopped
/// halfway), each write checking that the record still has the version read: a head is
/// never created for a topic deleted meanwhile (whose purge may already have run). A
/// write that fails its condition (a commit created a head, or the topic changed) is
/// re-read and tried again; a head still missing then is created by its first commit.
async fn finish_heads(store: &dyn StateStore, topic: &TopicConfig) -> Result<(), StorageError> {
    let check = WriteOp::Check { key: keys::topic_key(&topic.name), expect: Expect::Version(topic.version) };
    let missing = |p: u32, _: HeadRecord, _: Option<Tail>, version: u64| (version == 0).then(|| new_head(topic.id, p));
    complete_heads(store, topic, Some(check), missing).await?;
    Ok(())
}

/// Writes, for each partition of `topic` whose head `write` (given the partition, its head,
/// the entry it carries and its version) answers a write for, that write, grouped with
/// `check` (if any) in writes as large as fit, or one by one without it. A write that
/// fails its condition means a rival moved a head: the heads are read again and those
/// still wanting a write are written, at most three times. Answers whether none was left.
async fn complete_heads<F>(
    store: &dyn StateStore,
    topic: &TopicConfig,
    check: Option<WriteOp>,
    mut write: F,
) -> Result<bool, StorageError>
where
    F: FnMut(u32, HeadRecord, Option<Tail>, u64) -> Option<WriteOp>,
{
    let per_write = if check.is_some() { MAX_WRITE_OPS - 1 } else { 1 };
    for _ in 0..3 {
        let wanted: Vec<WriteOp> = heads_with_tails(store, topic)
            .await?
            .into_iter()
            .enumerate()
            .filter_map(|(p, (head, tail, version))| write(p as u32, head, tail, version))
            .collect();
        let mut raced = false;
        for chunk in wanted.chunks(per_write) {
            match store.write(check.iter().chain(chunk).cloned().collect()).await {
                Ok(()) => {}
                Err(StorageError::ConditionFailed { .. }) => raced = true,
                Err(e) => return Err(e),
            }
        }
        if !raced {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The write that creates a new partition's head, empty.
fn new_head(id: u64, partition: u32) -> WriteOp {
    WriteOp::create(keys::head_key(id, partition), layout::encode(&HeadRecord::default()))
}

/// Every live topic, by name.
pub(crate) async fn list(store: &dyn StateStore) -> Result<Vec<TopicConfig>, StorageError> {
    let mut topics = Vec::new();
    let mut query = Query::all(keys::topics_pk(), PAGE);
    loop {
        let page = store.query(&query).await?;
        for item in &page.items {
            let r: TopicRecord = layout::decode_topic(&item.value)?;
            if r.deleted_ms.is_none() {
                topics.push(r.config(&item.key.sk, item.version));
            }
        }
        match page.next {
            Some(after) => query.after = Some(after),
            None => return Ok(topics),
        }
    }
}

/// Deletes a topic: its record becomes a tombstone, a purge order is filed for the
/// janitor (which removes the items), and every partition's head becomes a tombstone
/// head, created if absent. Commits condition on the head they read (not on the topic
/// record, which publishes to other partitions would then share), so the head is the
/// fence: a commit over a head read before the delete fails its condition, re-reads it
/// and answers that the topic is gone, whatever the committer has cached; one that lands
/// first is a publish before the delete. A commit that creates a head (after the purge
/// removed the tombstones) checks the topic record instead. The record, the order and
/// every fence go in one atomic write when they fit ([`MAX_WRITE_OPS`]); a larger
/// topic's other fences follow before the delete answers, and a retry of a delete cut
/// short between them writes those still open before it answers 404 ([`finish_fences`]).
pub(crate) async fn delete(store: &dyn StateStore, name: &str, patience: &Patience<'_>) -> Result<(), Error> {
    let now_ms = patience.clock.now_ms();
    let (mut raced, mut wait) = (false, 0);
    for attempt in 0..DELETE_ATTEMPTS {
        if !crate::retry::pause_within(patience.clock, patience.deadline_ms, wait).await {
            break;
        }
        let (mut r, version) = match record(store, name).await? {
            Some((r, version)) if r.deleted_ms.is_none() => (r, version),
            Some((r, version)) => {
                finish_fences(store, &r.config(name, version)).await?;
                return Err(Error::TopicNotFound(name.to_owned()));
            }
            None => return Err(Error::TopicNotFound(name.to_owned())),
        };
        r.deleted_ms = Some(now_ms);
        let purge =
            PurgeRecord { name: name.to_owned(), partitions: r.partitions, deleted_ms: now_ms, done_partitions: 0 };
        let mut ops = vec![
            WriteOp::replace(keys::topic_key(name), layout::encode(&r), Some(version)),
            WriteOp::Put {
                key: keys::purge_key(r.id),
                value: layout::encode(&purge),
                expires_at_ms: None,
                expect: Expect::Any,
            },
        ];
        // Each tombstone keeps what its head said, so that a reader racing the delete (a
        // receive, a poll) sees the partition as it was, not emptied.
        let heads = heads_with_tails(store, &r.config(name, version)).await?;
        let mut fences =
            heads.into_iter().enumerate().map(|(p, (head, tail, _))| fence(r.id, p as u32, head, tail, Expect::Any));
        ops.extend(fences.by_ref().take(MAX_WRITE_OPS - ops.len()));
        match store.write(ops).await {
            Ok(()) => {
                let rest: Vec<WriteOp> = fences.collect();
                for chunk in rest.chunks(MAX_WRITE_OPS) {
                    store.write(chunk.to_vec()).await?;
                }
                return Ok(());
            }
            Err(StorageError::ConditionFailed { .. }) if !raced => (raced, wait) = (true, 0),
            // A transaction in flight on a head it fences (a commit): nothing was written.
            // Back off and read again, as a commit does, until the request's deadline.
            Err(StorageError::Throttled { .. }) => {
                wait = Backoff::CONTENTION.wait_ms(attempt, patience.random.next_u64());
            }
            Err(StorageError::ConditionFailed { .. }) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Unavailable(StorageError::Throttled {
        message: format!("topic {name} is being changed concurrently"),
        source: None,
    }))
}

/// What bounds a topic delete's retries after its write was refused (`Throttled`): the
/// request's deadline on `clock` (none: [`DELETE_ATTEMPTS`] alone), the backoff's waits
/// drawn from `random`.
pub(crate) struct Patience<'a> {
    pub(crate) clock: &'a dyn Clock,
    pub(crate) random: &'a dyn Random,
    pub(crate) deadline_ms: Option<i64>,
}

/// A delete's attempts at most, as a commit's: with the backoff capped at 1 s, about a
/// minute of a store refusing it.
const DELETE_ATTEMPTS: u32 = 64;

/// A deleted topic's fences that a delete did not get to write (its later writes failed,
/// and its retry finds the topic gone), written before that retry answers: otherwise a
/// process that cached one of those heads could still commit to it until the purge. A head
/// that is absent needs none (a commit creating it checks the topic record), nor one the
/// purge removes meanwhile (its condition fails); one a stale commit moved is read again.
async fn finish_fences(store: &dyn StateStore, topic: &TopicConfig) -> Result<(), Error> {
    let open = |p: u32, head: HeadRecord, tail: Option<Tail>, version: u64| {
        (version > 0 && !head.deleted).then(|| fence(topic.id, p, head, tail, Expect::Version(version)))
    };
    if complete_heads(store, topic, None, open).await? {
        return Ok(());
    }
    Err(Error::Unavailable(StorageError::Throttled {
        message: format!("topic {} is being changed concurrently", topic.name),
        source: None,
    }))
}

/// The write that makes partition `partition`'s head, last read as `head`, a deleted topic's
/// tombstone, under `expect`: a delete's own write takes whatever the head holds now (its
/// version moves on, so every commit conditioned on it fails; one that landed since the
/// read is a publish before the delete all the same). The tombstone keeps the newest entry
/// the head carries (`tail`), readable as before.
fn fence(id: u64, partition: u32, head: HeadRecord, tail: Option<Tail>, expect: Expect) -> WriteOp {
    WriteOp::Put {
        key: keys::head_key(id, partition),
        value: layout::encode_head(&HeadRecord { deleted: true, ..head }, tail.as_ref()),
        expires_at_ms: None,
        expect,
    }
}

/// A partition's head and its version (0: absent, an empty partition).
pub(crate) async fn head(store: &dyn StateStore, id: u64, partition: u32) -> Result<(HeadRecord, u64), StorageError> {
    match store.get(&keys::head_key(id, partition)).await? {
        Some(item) => Ok((layout::decode("head", &item.value)?, item.version)),
        None => Ok((HeadRecord::default(), 0)),
    }
}

/// A partition's head, the newest entry it carries (see [`Tail`]) and its version (0: absent).
pub(crate) async fn head_with_tail(
    store: &dyn StateStore,
    id: u64,
    partition: u32,
) -> Result<(HeadRecord, Option<Tail>, u64), StorageError> {
    match store.get(&keys::head_key(id, partition)).await? {
        Some(item) => {
            let (head, tail) = layout::decode_head(&item.value)?;
            Ok((head, tail, item.version))
        }
        None => Ok((HeadRecord::default(), None, 0)),
    }
}

/// The heads of every partition of a topic, with their versions, by partition: one query.
/// Only the heads are decoded (every receive reads its topic's): the entries some carry are
/// skipped, unchecked, as [`layout::decode_head`] would decode and check them.
pub(crate) async fn heads(store: &dyn StateStore, topic: &TopicConfig) -> Result<Vec<(HeadRecord, u64)>, StorageError> {
    read_heads(store, topic, (HeadRecord::default(), 0), head_only).await
}

/// [`heads`] from the first page of their query (`Query::all(heads_pk(topic.id), PAGE)`),
/// read by the caller: `None` if the topic has more heads than the page holds.
pub(crate) fn heads_of_page(topic: &TopicConfig, page: &Page) -> Result<Option<Vec<(HeadRecord, u64)>>, StorageError> {
    if page.next.is_some() {
        return Ok(None);
    }
    let mut heads = vec![(HeadRecord::default(), 0); topic.spec.partitions as usize];
    place(&mut heads, page, head_only)?;
    Ok(Some(heads))
}

/// A head item's head and version, the entry it may carry skipped (see [`heads`]).
fn head_only(item: &Item) -> Result<(HeadRecord, u64), StorageError> {
    Ok((layout::decode::<HeadRecord>("head", &item.value)?, item.version))
}

/// Puts each head item of `page` in its partition's slot of `heads`, as `decode` reads it.
fn place<T>(
    heads: &mut [T],
    page: &Page,
    decode: impl Fn(&Item) -> Result<T, StorageError>,
) -> Result<(), StorageError> {
    for item in &page.items {
        let p = keys::partition_of(&item.key.sk)? as usize;
        if let Some(slot) = heads.get_mut(p) {
            *slot = decode(item)?;
        }
    }
    Ok(())
}

/// [`heads`] with the entry each carries.
async fn heads_with_tails(
    store: &dyn StateStore,
    topic: &TopicConfig,
) -> Result<Vec<(HeadRecord, Option<Tail>, u64)>, StorageError> {
    read_heads(store, topic, (HeadRecord::default(), None, 0), |item| {
        let (head, tail) = layout::decode_head(&item.value)?;
        Ok((head, tail, item.version))
    })
    .await
}

/// Every partition's head item of a topic as `decode` reads it (`absent` for a partition
/// without one), by partition: one query.
async fn read_heads<T: Clone>(
    store: &dyn StateStore,
    topic: &TopicConfig,
    absent: T,
    decode: impl Fn(&Item) -> Result<T, StorageError>,
) -> Result<Vec<T>, StorageError> {
    let mut heads = vec![absent; topic.spec.partitions as usize];
    let mut query = Query::all(keys::heads_pk(topic.id), PAGE);
    loop {
        let page = store.query(&query).await?;
        place(&mut heads, &page, &decode)?;
        match page.next {
            Some(after) => query.after = Some(after),
            None => return Ok(heads),
        }
    }
}

/// The state of every partition of a topic.
pub(crate) async fn states(store: &dyn StateStore, topic: &TopicConfig) -> Result<Vec<PartitionState>, StorageError> {
    let heads = heads(store, topic).await?;
    Ok(heads.iter().enumerate().map(|(p, (h, _))| h.state(p as u32)).collect())
}

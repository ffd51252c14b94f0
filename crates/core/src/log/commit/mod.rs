//! Group commit: one task per process takes every publish waiting at that
//! moment, writes their segments as one blob (one fsync or one PUT), then makes
//! them visible with one atomic conditional write to the state store. Concurrent
//! publishers thus share the cost of durability, and offsets are assigned in
//! commit order.
//!
//! The write, per partition touched: replace the partition's head (next offset,
//! log start, bytes) on condition that its version is the one this process read,
//! and create the segment's index item at the head's old next offset; plus the
//! requests' idempotency records, and the count of live segments of the blob's
//! object ([`ObjectRecord`]). Publishes to different partitions share no item, so
//! on DynamoDB they never cancel one another. A delete fences every head of the
//! topic (a tombstone head, see [`topics::delete`]). Heads are created with the topic
//! ([`topics::create`]); only a write that creates a head (missing: a topic created
//! before heads came with it, a create stopped halfway, or after the purge removed the
//! tombstones) also checks that the topic record still has the version read.
//! The safety argument is in docs/DESIGN.md: cached heads and topics only save
//! reads; a stale one fails its condition, is re-read, and the commit retries with
//! the same blob, unless the collector doomed the blob's object, when it retries
//! with the blob written anew. A failed write names every stale condition, and all
//! are healed before the next attempt.

mod batch;
mod plan;
mod recover;
mod tail;

pub(crate) use batch::Keeper;
use batch::*;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

use crate::keys;
use crate::layout::{self, HeadRecord, IdempotencyRecord, ObjectRecord, SegmentRecord, Tail, IDEMPOTENCY_TTL_MS};
use crate::log::topics;
use crate::model::{IdempotencyKey, Position, TopicConfig};
use crate::ports::objects::{BlobRef, ObjectStore, StorageError};
use crate::ports::state::{Expect, Key, StateStore, WriteOp, MAX_WRITE_OPS};
use crate::retry::Backoff;
use crate::segment::{encode_parts, Record};
use crate::{Clock, Error, Random};

/// A group stops growing at this many bytes or requests.
const MAX_GROUP_BYTES: usize = 16 << 20;
const MAX_GROUP_REQUESTS: usize = 4096;
/// Attempts of one write before the commit gives up (other processes keep winning, or storage keeps throttling).
const MAX_ATTEMPTS: u32 = 64;

/// Writes with a lost answer (each read back and found not applied) before the commit gives up.
const MAX_UNKNOWN_OUTCOMES: usize = 3;

/// Most partitions one idempotent publish may touch: its head and segment items,
/// its topic check, its record and its object's record must fit one atomic write.
pub const MAX_IDEMPOTENT_PARTITIONS: usize = (MAX_WRITE_OPS - 3) / 2;

/// A blob held this long without being indexed is written again before its commit, so a
/// doomed object's record (kept [`layout::DOOMED_TTL_MS`]) always outlives any commit into it.
const MAX_BLOB_AGE_MS: i64 = 3600 * 1000;
/// Times a group's blob is written anew because the collector doomed its object.
const MAX_REWRITES: usize = 3;

/// One publish request waiting for its commit.
pub(crate) struct Pending {
    pub topic: TopicConfig,
    /// Each event with the partition the log chose for it, in request order.
    pub events: Vec<(u32, Record)>,
    pub idempotency: Option<IdempotencyKey>,
    /// When the answer must be on its way (a function's invocation ends soon after), on the
    /// committer's clock; `None`: no limit (a server).
    pub deadline_ms: Option<i64>,
    pub reply: oneshot::Sender<Result<Vec<Position>, Error>>,
}

impl Pending {
    fn size(&self) -> usize {
        self.events.iter().map(|(_, r)| r.approx_size()).sum()
    }
}

/// Why a commit did not happen, beyond plain storage failures.
enum CommitError {
    /// A topic of the group was deleted (or replaced) since its request read it.
    TopicGone,
    /// An idempotency key of the group is taken.
    KeyTaken,
    /// The collector doomed the blob's object: the blob must be written again.
    Doomed,
    Storage(StorageError),
}

impl From<StorageError> for CommitError {
    fn from(e: StorageError) -> Self {
        Self::Storage(e)
    }
}

pub(crate) struct Committer {
    pub store: Arc<dyn StateStore>,
    pub clock: Arc<dyn Clock>,
    /// Each partition's head and its version as this process last wrote or read it: a hint, checked by the write.
    pub heads: HashMap<(u64, u32), (HeadRecord, u64)>,
    /// The newest entry each head in `heads` carries, where it carries one (set whenever a head
    /// is loaded or written; an entry left for a head no longer cached is never read).
    pub tails: HashMap<(u64, u32), Tail>,
    /// Whether a commit to one partition with an inline segment and no idempotency record is
    /// one single-item write of the head carrying the entry ([`LogConfig::single_write_commits`](crate::LogConfig)).
    pub single_write: bool,
    /// The index items this chunk's commit wrote out (see `write_out`), with their topic id
    /// and partition, removed again if their topic turns out to be gone.
    pub written_out: Vec<(Key, u64, u32)>,
    /// The newest version of each live topic's record (by id) this process has read: a hint too.
    pub topic_versions: HashMap<u64, u64>,
    /// The record of the object blobs were last written to, and its version (0: absent): a hint
    /// that spares a read per commit on stores that append many blobs to one object.
    pub object: Option<(String, ObjectRecord, u64)>,
    /// Where groups' segments go: inline or a blob, in parts or not (`LogConfig`); the
    /// object store and the random source the committer uses.
    pub keeper: Keeper,
    /// Bumped after every commit, to wake long polls.
    pub committed: watch::Sender<u64>,
}

/// A group whose blob has been written (or failed to be), on its way to the state store.
struct Written {
    group: Vec<Pending>,
    layout: Layout,
    stored: Result<Stored, StorageError>,
    /// When the blob was written (this process's clock).
    written_ms: i64,
}

impl Committer {
    /// Runs the two stages as a pipeline: while one group's index write is in flight,
    /// the next group is already being collected and written, so the two durable
    /// writes of consecutive groups overlap instead of queueing.
    pub async fn run(mut self, rx: mpsc::Receiver<Pending>) {
        let (written_tx, mut written) = mpsc::channel(1);
        let busy = Arc::new(AtomicBool::new(false));
        tokio::spawn(write_stage(self.keeper.clone(), busy.clone(), self.clock.clone(), rx, written_tx));
        while let Some(w) = written.recv().await {
            busy.store(true, Ordering::Relaxed);
            self.commit_group(w).await;
            busy.store(false, Ordering::Relaxed);
        }
    }

    async fn commit_group(&mut self, w: Written) {
        let Written { group, layout, stored, written_ms } = w;
        let stored = match stored {
            Ok(stored) => stored,
            Err(e) => return self.fail_all(group, e),
        };
        // A group too large for one atomic write, holding concurrent retries of one request
        // or requests for two incarnations of one topic name, or in which one request's taken
        // key or deleted topic would fail its neighbours, is committed one request at a time.
        let unusual = ops_needed(&group, &layout) > MAX_WRITE_OPS || repeats_a_key(&group) || two_incarnations(&group);
        if group.len() > 1 && unusual {
            return self.commit_each(group).await;
        }
        match self.index_fresh(&group, &layout, stored, written_ms).await {
            Ok(results) => {
                for (p, r) in group.into_iter().zip(results) {
                    let _ = p.reply.send(Ok(r));
                }
            }
            Err(CommitError::TopicGone | CommitError::KeyTaken) if group.len() > 1 => {
                self.commit_each(group).await;
            }
            Err(CommitError::Storage(e)) => self.fail_all(group, e),
            Err(e) => {
                for p in group {
                    let e = match &e {
                        CommitError::TopicGone => CommitError::TopicGone,
                        CommitError::KeyTaken => CommitError::KeyTaken,
                        CommitError::Doomed => CommitError::Doomed,
                        CommitError::Storage(e) => CommitError::Storage(e.same_kind()),
                    };
                    let answer = self.answer(&p, e).await;
                    let _ = p.reply.send(answer);
                }
            }
        }
    }

    fn fail_all(&self, group: Vec<Pending>, e: StorageError) {
        tracing::error!(error = %e, source = ?std::error::Error::source(&e), "group commit failed");
        for p in group {
            let _ = p.reply.send(Err(e.same_kind().into()));
        }
    }

    /// Commits each request of a group on its own (with a blob of its own), so each gets its own answer.
    async fn commit_each(&mut self, group: Vec<Pending>) {
        for p in group {
            let single = std::slice::from_ref(&p);
            let layout = layout(single, self.keeper.part_bytes);
            let written_ms = self.clock.now_ms();
            let result = match self.keeper.keep(&layout, true).await {
                Ok(stored) => self.index_fresh(single, &layout, stored, written_ms).await,
                Err(e) => Err(CommitError::Storage(e)),
            };
            let answer = match result {
                Ok(mut r) => Ok(r.remove(0)),
                Err(e) => self.answer(&p, e).await,
            };
            let _ = p.reply.send(answer);
        }
    }

    /// The answer a request gets when its commit failed.
    async fn answer(&self, p: &Pending, e: CommitError) -> Result<Vec<Position>, Error> {
        match e {
            // Lost a race with a concurrent retry of the same request: answer as the retry did.
            CommitError::KeyTaken => {
                let Some(idem) = &p.idempotency else {
                    return Err(StorageError::Corrupt("a key was taken by a request without one".into()).into());
                };
                let key = keys::idempotency_key(p.topic.id, &idem.key);
                match self.store.get(&key).await? {
                    Some(item) => {
                        let rec: IdempotencyRecord = layout::decode("idempotency", &item.value)?;
                        if rec.fp == layout::hex(&idem.fingerprint) {
                            Ok(rec.results)
                        } else {
                            Err(Error::IdempotencyKeyReused(idem.key.clone()))
                        }
                    }
                    None => Err(Error::IdempotencyKeyReused(idem.key.clone())),
                }
            }
            CommitError::TopicGone => Err(Error::TopicNotFound(p.topic.name.clone())),
            CommitError::Doomed => Err(StorageError::Unavailable {
                message: "the collector kept dooming this publish's blob; retry".into(),
                source: None,
            }
            .into()),
            CommitError::Storage(e) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "commit failed");
                Err(e.into())
            }
        }
    }

    /// [`Committer::index`], first writing the blob anew if it is old or its object doomed.
    async fn index_fresh(
        &mut self,
        group: &[Pending],
        layout: &Layout,
        mut stored: Stored,
        mut written_ms: i64,
    ) -> Result<Vec<Vec<Position>>, CommitError> {
        for _ in 0..MAX_REWRITES {
            match &stored {
                // Inline segments have no object to be doomed, nor to age.
                Stored::Inline(_) => return self.index(group, layout, &stored).await,
                Stored::Blob(blob) if self.clock.now_ms() - written_ms < MAX_BLOB_AGE_MS => {
                    let object = blob.object.clone();
                    match self.index(group, layout, &stored).await {
                        Err(CommitError::Doomed) => {
                            tracing::warn!(object = %object, "blob's object doomed by the collector; writing it again");
                            self.keeper.objects.retire(&object);
                            self.object = None;
                        }
                        other => return other,
                    }
                }
                // Held too long: written anew below, before its object could be doomed unseen.
                Stored::Blob(_) => {}
            }
            written_ms = self.clock.now_ms();
            stored = self.keeper.keep(layout, true).await?;
        }
        Err(CommitError::Doomed)
    }

    /// Makes a written group visible at each partition's next offset. One atomic
    /// write when it fits; a single request without an idempotency key that touches
    /// more partitions than one write holds is committed in several writes (the
    /// contract's atomicity is per partition).
    async fn index(
        &mut self,
        group: &[Pending],
        layout: &Layout,
        stored: &Stored,
    ) -> Result<Vec<Vec<Position>>, CommitError> {
        let mut bases = vec![0; layout.segments.len()];
        let chunks = chunks(group, layout);
        let with_records = chunks.len() == 1;
        if !with_records && group.iter().any(|p| p.idempotency.is_some()) {
            return Err(StorageError::Invalid("an idempotent publish must fit one atomic write".into()).into());
        }
        for chunk in chunks {
            self.written_out.clear();
            let result = self.commit_chunk(group, layout, stored, chunk.clone(), with_records, &mut bases).await;
            // Entries written out for a topic deleted meanwhile would outlive its purge. Any
            // failure may be one (a fault or the deadline can hide the delete): the heads say.
            if result.is_err() && !self.written_out.is_empty() {
                self.unwrite_out().await;
            }
            result?;
        }
        Ok(positions(layout, &bases))
    }

    /// Commits the segments `chunk` of a layout with one atomic write, retrying lost
    /// races and throttling; fills in their base offsets.
    async fn commit_chunk(
        &mut self,
        group: &[Pending],
        layout: &Layout,
        stored: &Stored,
        chunk: Range<usize>,
        with_records: bool,
        bases: &mut [u64],
    ) -> Result<(), CommitError> {
        // Bases of attempts whose outcome was lost: one of them may have landed.
        let mut unknown: Vec<Vec<u64>> = Vec::new();
        let (deadline, mut wait) = (group.iter().filter_map(|p| p.deadline_ms).min(), 0);
        for attempt in 0..MAX_ATTEMPTS {
            // The backoff after the last attempt, unless the group's deadline comes first.
            self.pause(deadline, attempt, wait, !unknown.is_empty()).await?;
            self.load_heads(&layout.segments[chunk.clone()]).await?;
            self.refuse_deleted(&layout.segments[chunk.clone()])?;
            // After a lost answer, look again with the heads just read: a write that landed
            // late shows in them, and so in its segment item now; one landing after this
            // read makes the next write's head condition fail, and is found then.
            if !unknown.is_empty() && self.resolve_unknown(layout, stored, chunk.clone(), &unknown, bases).await? {
                return Ok(());
            }
            // The entries the heads carry go to the index before the heads move past them.
            if let Some(backoff) = self.write_out_or_back_off(layout, chunk.clone(), attempt).await? {
                wait = backoff;
                continue;
            }
            let mut plan = self.plan(group, layout, stored, chunk.clone(), with_records, bases);
            let object = self.count_in_object(&mut plan, stored, &layout.segments[chunk.clone()]);
            let Plan { ops, kinds, heads } = plan;
            let outcome = self.store.write(ops).await;
            let retry = match outcome {
                Ok(()) => {
                    self.landed(layout, chunk.clone(), heads);
                    self.object = object.or(self.object.take());
                    return Ok(());
                }
                Err(StorageError::ConditionFailed { failed, .. }) => {
                    if self.resolve_unknown(layout, stored, chunk.clone(), &unknown, bases).await? {
                        return Ok(());
                    }
                    metrics::counter!(crate::metrics::COMMIT_CONFLICTS, "reason" => "condition").increment(1);
                    self.lost_races(group, layout, stored, &failed, &kinds).await?;
                    tracing::debug!(attempt, ?failed, "commit lost a race; re-reading");
                    attempt > 2
                }
                Err(e @ StorageError::Throttled { .. }) => {
                    metrics::counter!(crate::metrics::COMMIT_CONFLICTS, "reason" => "refused").increment(1);
                    tracing::debug!(attempt, error = %e, "commit throttled; backing off");
                    // Mostly a transaction in flight on a head (DynamoDB's conflict rule): it
                    // moves the head, or creates one held here as absent. Re-read, not resend.
                    self.forget_heads(layout, chunk.clone());
                    true
                }
                Err(e @ StorageError::Unavailable { .. }) => {
                    // The write may have landed: find out before answering or retrying.
                    tracing::warn!(attempt, error = %e, "commit outcome unknown; reading back");
                    unknown.push(bases[chunk.clone()].to_vec());
                    if self.resolve_unknown(layout, stored, chunk.clone(), &unknown, bases).await? {
                        return Ok(());
                    }
                    // It did not land: retry a few times, then let the client retry (storage is down).
                    if unknown.len() >= MAX_UNKNOWN_OUTCOMES {
                        return Err(e.into());
                    }
                    self.forget_heads(layout, chunk.clone());
                    self.object = None;
                    true
                }
                Err(e) => return Err(e.into()),
            };
            wait = if retry { Backoff::CONTENTION.wait_ms(attempt, self.keeper.random.next_u64()) } else { 0 };
        }
        Err(StorageError::Throttled { message: "too many concurrent commits to one partition".into(), source: None }
            .into())
    }

    /// After operations `failed` of a commit's write (of kinds `kinds`) failed their
    /// conditions: heals every one (so a process with many stale heads retries once, not once
    /// per head), then tells why the commit cannot go on, if one of them says so.
    async fn lost_races(
        &mut self,
        group: &[Pending],
        layout: &Layout,
        stored: &Stored,
        failed: &[usize],
        kinds: &[OpKind],
    ) -> Result<(), CommitError> {
        let mut first_error = None;
        for &op in failed {
            if let Err(e) = self.lost_race(group, layout, stored, op, kinds.get(op).copied()).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Drops the cached heads of a chunk's partitions: the next attempt reads them again.
    fn forget_heads(&mut self, layout: &Layout, chunk: Range<usize>) {
        for s in &layout.segments[chunk] {
            self.heads.remove(&(s.topic_id, s.partition));
        }
    }

    /// After operation `op` (of kind `kind`) of a commit's write failed its condition: drops or
    /// re-reads what it was conditioned on, or tells why the commit cannot go on.
    async fn lost_race(
        &mut self,
        group: &[Pending],
        layout: &Layout,
        stored: &Stored,
        op: usize,
        kind: Option<OpKind>,
    ) -> Result<(), CommitError> {
        match kind {
            Some(OpKind::Topic(id)) => self.reread_topic(group, id).await,
            Some(OpKind::Head(seg)) | Some(OpKind::Segment(seg)) => {
                let s = &layout.segments[seg];
                self.heads.remove(&(s.topic_id, s.partition));
                Ok(())
            }
            Some(OpKind::Record) => Err(CommitError::KeyTaken),
            Some(OpKind::Object) => match stored {
                Stored::Blob(blob) => self.reread_object(&blob.object).await,
                Stored::Inline(_) => {
                    Err(StorageError::Corrupt("an inline commit wrote an object record".into()).into())
                }
            },
            None => Err(StorageError::Corrupt(format!("store named write op {op}")).into()),
        }
    }

    /// The write to the blob's object record that adds `segments`, and the record and
    /// version it leaves.
    fn object_after(&self, blob: &BlobRef, segments: &[SegmentPlan]) -> (WriteOp, ObjectRecord, u64) {
        let (before, version) = match &self.object {
            Some((name, record, version)) if *name == blob.object => (*record, *version),
            // A blob store that makes an object per blob (S3): the record cannot exist yet.
            _ => (ObjectRecord::default(), 0),
        };
        let after = ObjectRecord {
            refs: before.refs + segments.len() as u64,
            bytes: before.bytes + segments.iter().map(|s| s.len).sum::<u64>(),
            doomed: false,
        };
        let expect = if version == 0 { Expect::Absent } else { Expect::Version(version) };
        let op = WriteOp::Put {
            key: keys::object_key(&blob.object),
            value: layout::encode(&after),
            expires_at_ms: None,
            expect,
        };
        (op, after, version + 1)
    }

    /// Reads the heads of the chunk's partitions that this process has no hint for.
    async fn load_heads(&mut self, segments: &[SegmentPlan]) -> Result<(), StorageError> {
        for s in segments {
            let at = (s.topic_id, s.partition);
            if !self.heads.contains_key(&at) {
                let (head, tail, version) =
                    topics::head_with_tail(self.store.as_ref(), s.topic_id, s.partition).await?;
                self.heads.insert(at, (head, version));
                match tail {
                    Some(tail) => self.tails.insert(at, tail),
                    None => self.tails.remove(&at),
                };
            }
        }
        Ok(())
    }

    /// Remembers the heads a successful write left, and wakes long polls.
    fn landed(&mut self, layout: &Layout, chunk: Range<usize>, heads: Vec<(HeadRecord, u64, Option<Tail>)>) {
        for (s, (head, version, tail)) in layout.segments[chunk].iter().zip(heads) {
            let at = (s.topic_id, s.partition);
            self.heads.insert(at, (head, version));
            match tail {
                Some(tail) => self.tails.insert(at, tail),
                None => self.tails.remove(&at),
            };
        }
        self.committed.send_modify(|v| *v += 1);
    }
}

/// Stage one: takes every publish waiting at that moment as one group and writes its blob,
/// unless it goes inline: only if small, and only if the commit stage is idle (not `busy`,
/// nothing queued for it). A group that must wait for the committer anyway loses nothing by
/// writing its blob meanwhile, and under load (groups large and back to back) one blob
/// append plus the index beats SQLite writing every segment into its pages.
async fn write_stage(
    keeper: Keeper,
    busy: Arc<AtomicBool>,
    clock: Arc<dyn Clock>,
    mut rx: mpsc::Receiver<Pending>,
    written: mpsc::Sender<Written>,
) {
    while let Some(first) = rx.recv().await {
        let mut bytes = first.size();
        let mut group = vec![first];
        while bytes < MAX_GROUP_BYTES && group.len() < MAX_GROUP_REQUESTS {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += p.size();
                    group.push(p);
                }
                Err(_) => break,
            }
        }
        let layout = layout(&group, keeper.part_bytes);
        let idle = !busy.load(Ordering::Relaxed) && written.capacity() == written.max_capacity();
        let stored = keeper.keep(&layout, idle).await;
        let written_ms = clock.now_ms();
        if written.send(Written { group, layout, stored, written_ms }).await.is_err() {
            return;
        }
    }
}

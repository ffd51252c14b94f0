//! Group commit: one task per process takes every publish waiting at that
//! moment, writes their segments as one blob (one fsync or one PUT), then makes
//! them visible with one conditional index commit. Concurrent publishers thus
//! share the cost of durability, and offsets are assigned in commit order.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

use crate::model::{IdempotencyKey, Position, TopicConfig};
use crate::segment::{encode_segment, Record};
use crate::storage::{BlobRef, CommitBatch, IdempotencyRecord, MetaStore, ObjectStore, SegmentEntry, StorageError};
use crate::{Clock, Error};

/// A group stops growing at this many bytes or requests.
const MAX_GROUP_BYTES: usize = 16 << 20;
const MAX_GROUP_REQUESTS: usize = 4096;
/// Races lost in a row before the commit gives up (other processes keep winning).
const MAX_ATTEMPTS: u32 = 64;

/// One publish request waiting for its commit.
pub(crate) struct Pending {
    pub topic: TopicConfig,
    /// Each event with the partition the log chose for it, in request order.
    pub events: Vec<(u32, Record)>,
    pub idempotency: Option<IdempotencyKey>,
    pub reply: oneshot::Sender<Result<Vec<Position>, Error>>,
}

impl Pending {
    fn size(&self) -> usize {
        self.events.iter().map(|(_, r)| r.approx_size()).sum()
    }
}

pub(crate) struct Committer {
    pub meta: Arc<dyn MetaStore>,
    pub objects: Arc<dyn ObjectStore>,
    pub clock: Arc<dyn Clock>,
    /// Next offset of each partition as this process last committed it: a hint, checked by the commit.
    /// Keyed by topic id, so a topic recreated under the same name never inherits the old heads.
    pub heads: HashMap<(u64, u32), u64>,
    /// Bumped after every commit, to wake long polls.
    pub committed: watch::Sender<u64>,
}

/// The segments of a group, encoded into one blob.
struct Layout {
    blob: Bytes,
    /// (topic, partition, start in blob, summary) per segment.
    segments: Vec<SegmentPlan>,
    /// For each request, for each event: (segment index, offset delta).
    placement: Vec<Vec<(usize, u32)>>,
}

struct SegmentPlan {
    topic: String,
    topic_id: u64,
    partition: u32,
    start: u64,
    len: u64,
    records: u64,
    max_timestamp_ms: i64,
}

impl Committer {
    /// Runs the two stages as a pipeline: while one group's index commit is in flight,
    /// the next group is already being collected and written, so the two durable
    /// writes of consecutive groups overlap instead of queueing.
    pub async fn run(mut self, rx: mpsc::Receiver<Pending>) {
        let (written_tx, mut written) = mpsc::channel(1);
        tokio::spawn(write_stage(self.objects.clone(), rx, written_tx));
        while let Some(w) = written.recv().await {
            self.commit_group(w).await;
        }
    }

    async fn commit_group(&mut self, w: Written) {
        let Written { group, layout, blob } = w;
        let indexed = match blob {
            Ok(blob) => self.index(&group, &layout, &blob).await,
            Err(e) => Err(e),
        };
        match indexed {
            Ok(results) => {
                for (p, r) in group.into_iter().zip(results) {
                    let _ = p.reply.send(Ok(r));
                }
            }
            // One request's duplicate key or deleted topic must not fail its neighbours:
            // commit them one by one so each gets its own answer.
            Err(StorageError::AlreadyExists(_) | StorageError::NotFound(_)) if group.len() > 1 => {
                for p in group {
                    let result = self.try_commit(std::slice::from_ref(&p)).await;
                    let answer = self.answer(&p, result.map(|mut r| r.remove(0))).await;
                    let _ = p.reply.send(answer);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "group commit failed");
                for p in group {
                    let answer = self.answer(&p, Err(clone_kind(&e))).await;
                    let _ = p.reply.send(answer);
                }
            }
        }
    }

    /// Turns a request's storage outcome into the answer its client gets.
    async fn answer(&self, p: &Pending, result: Result<Vec<Position>, StorageError>) -> Result<Vec<Position>, Error> {
        match (result, &p.idempotency) {
            (Ok(r), _) => Ok(r),
            // Lost a race with a concurrent retry of the same request: answer as the retry did.
            (Err(StorageError::AlreadyExists(_)), Some(idem)) => {
                match self.meta.idempotency(&p.topic.name, &idem.key).await? {
                    Some(rec) if rec.fingerprint == idem.fingerprint => Ok(rec.results),
                    _ => Err(Error::IdempotencyKeyReused(idem.key.clone())),
                }
            }
            (Err(StorageError::NotFound(_)), _) => Err(Error::TopicNotFound(p.topic.name.clone())),
            (Err(e), _) => Err(e.into()),
        }
    }

    /// Writes and indexes one group without the pipeline.
    async fn try_commit(&mut self, group: &[Pending]) -> Result<Vec<Vec<Position>>, StorageError> {
        let layout = layout(group);
        let blob = self.objects.put(layout.blob.clone()).await?;
        self.index(group, &layout, &blob).await
    }

    /// Makes a written group visible at each partition's next offset, retrying lost races.
    async fn index(
        &mut self,
        group: &[Pending],
        layout: &Layout,
        blob: &BlobRef,
    ) -> Result<Vec<Vec<Position>>, StorageError> {
        let now = self.clock.now_ms();
        for attempt in 0..MAX_ATTEMPTS {
            let mut bases = Vec::with_capacity(layout.segments.len());
            for s in &layout.segments {
                let key = (s.topic_id, s.partition);
                let base = match self.heads.get(&key) {
                    Some(&b) => b,
                    None => self.meta.partition(&s.topic, s.partition).await?.high_watermark,
                };
                bases.push(base);
            }
            let results: Vec<Vec<Position>> = layout
                .placement
                .iter()
                .map(|events| {
                    events
                        .iter()
                        .map(|&(seg, delta)| Position {
                            partition: layout.segments[seg].partition,
                            offset: bases[seg] + u64::from(delta),
                        })
                        .collect()
                })
                .collect();
            let batch = CommitBatch {
                entries: layout
                    .segments
                    .iter()
                    .zip(&bases)
                    .map(|(s, &base)| SegmentEntry {
                        topic: s.topic.clone(),
                        topic_id: s.topic_id,
                        partition: s.partition,
                        base_offset: base,
                        next_offset: base + s.records,
                        object: blob.object.clone(),
                        position: blob.position + s.start,
                        len: s.len,
                        max_timestamp_ms: s.max_timestamp_ms,
                    })
                    .collect(),
                idempotency: group
                    .iter()
                    .zip(&results)
                    .filter_map(|(p, r)| {
                        p.idempotency.as_ref().map(|idem| IdempotencyRecord {
                            topic: p.topic.name.clone(),
                            key: idem.key.clone(),
                            fingerprint: idem.fingerprint.clone(),
                            results: r.clone(),
                            created_ms: now,
                        })
                    })
                    .collect(),
            };
            match self.meta.commit(&batch).await {
                Ok(()) => {
                    for e in batch.entries {
                        self.heads.insert((e.topic_id, e.partition), e.next_offset);
                    }
                    self.committed.send_modify(|v| *v += 1);
                    return Ok(results);
                }
                Err(StorageError::Precondition(why)) => {
                    tracing::debug!(attempt, %why, "commit lost a race; re-reading partition heads");
                    for s in &layout.segments {
                        self.heads.remove(&(s.topic_id, s.partition));
                    }
                    if attempt > 2 {
                        tokio::time::sleep(Duration::from_micros(100 + u64::from(rand::random::<u16>() % 2000))).await;
                    }
                }
                Err(e) => {
                    for s in &layout.segments {
                        self.heads.remove(&(s.topic_id, s.partition));
                    }
                    return Err(e);
                }
            }
        }
        Err(StorageError::Throttled { message: "too many concurrent commits to one partition".into(), source: None })
    }
}

/// A group whose blob has been written (or failed to be), on its way to the index.
struct Written {
    group: Vec<Pending>,
    layout: Layout,
    blob: Result<BlobRef, StorageError>,
}

/// Stage one: takes every publish waiting at that moment as one group and writes its blob.
async fn write_stage(objects: Arc<dyn ObjectStore>, mut rx: mpsc::Receiver<Pending>, written: mpsc::Sender<Written>) {
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
        let layout = layout(&group);
        let blob = objects.put(layout.blob.clone()).await;
        if written.send(Written { group, layout, blob }).await.is_err() {
            return;
        }
    }
}

/// Groups the events of every request by (topic, partition), in arrival order, into one blob.
fn layout(group: &[Pending]) -> Layout {
    let mut by_partition: BTreeMap<(&str, u32), Vec<(usize, usize)>> = BTreeMap::new();
    for (ri, p) in group.iter().enumerate() {
        for (ei, (partition, _)) in p.events.iter().enumerate() {
            by_partition.entry((p.topic.name.as_str(), *partition)).or_default().push((ri, ei));
        }
    }
    let total: usize = group.iter().map(Pending::size).sum();
    let mut blob = Vec::with_capacity(total + 64 * by_partition.len());
    let mut placement: Vec<Vec<(usize, u32)>> = group.iter().map(|p| vec![(0, 0); p.events.len()]).collect();
    let mut segments = Vec::with_capacity(by_partition.len());
    for (seg, ((topic, partition), members)) in by_partition.into_iter().enumerate() {
        let start = blob.len();
        let records = members.iter().map(|&(ri, ei)| &group[ri].events[ei].1);
        let summary = encode_segment(records, &mut blob);
        for (delta, &(ri, ei)) in members.iter().enumerate() {
            placement[ri][ei] = (seg, delta as u32);
        }
        let topic_id = group[members[0].0].topic.id;
        segments.push(SegmentPlan {
            topic: topic.to_owned(),
            topic_id,
            partition,
            start: start as u64,
            len: summary.len as u64,
            records: u64::from(summary.record_count),
            max_timestamp_ms: summary.max_timestamp_ms,
        });
    }
    Layout { blob: Bytes::from(blob), segments, placement }
}

/// Storage errors carry boxed sources and are not `Clone`; each waiting request gets the same kind.
fn clone_kind(e: &StorageError) -> StorageError {
    match e {
        StorageError::NotFound(m) => StorageError::NotFound(m.clone()),
        StorageError::AlreadyExists(m) => StorageError::AlreadyExists(m.clone()),
        StorageError::Precondition(m) => StorageError::Precondition(m.clone()),
        StorageError::Corrupt(m) => StorageError::Corrupt(m.clone()),
        StorageError::Throttled { message, .. } => StorageError::Throttled { message: message.clone(), source: None },
        StorageError::Unavailable { message, .. } => {
            StorageError::Unavailable { message: message.clone(), source: None }
        }
    }
}

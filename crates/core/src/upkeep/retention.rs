//! Retention: a partition keeps what its topic's policy says, by time
//! (`retention_ms`: segments whose newest event is older go) and by size
//! (`retention_bytes`: the oldest segments go while the partition holds more).
//!
//! Whole segments go, from the oldest end, in two steps: first the partition's
//! log start advances past them (one conditional write of the head), so from then
//! on no reader is told their offsets exist; then their index items are removed
//! and their objects' counts lowered, in writes of their own. A step cut short
//! between the two leaves index items below the log start, which the next step
//! removes first.

use std::collections::BTreeMap;

use crate::keys;
use crate::layout;
use crate::log::index::{decode_segments, Segment};
use crate::log::topics;
use crate::model::TopicConfig;
use crate::ports::state::{Expect, Query, StateStore, WriteOp, MAX_WRITE_OPS};
use crate::upkeep::collect::{object_ops, removing, ObjectChanges};
use crate::StorageError;

/// Index items read per retention step of a partition.
const PAGE: usize = 100;
/// Segments removed per write: each costs its index item, its object's count and perhaps a free-list entry.
pub(crate) const SEGMENTS_PER_WRITE: usize = (MAX_WRITE_OPS - 2) / 3;

/// What retention did to one partition.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RetentionReport {
    /// Segments whose offsets fell below the log start.
    pub segments_expired: usize,
    /// Their bytes.
    pub bytes_expired: u64,
    /// Index items removed (below the log start).
    pub items_removed: usize,
    /// Whether more is left for another step.
    pub more: bool,
    /// The partition's log start once the step is done.
    pub log_start: u64,
}

/// Applies the topic's retention policy to one partition, then removes index items below
/// its log start. `default_retention_ms` applies when the topic sets none.
pub async fn retain(
    store: &dyn StateStore,
    topic: &TopicConfig,
    partition: u32,
    now_ms: i64,
    default_retention_ms: i64,
) -> Result<RetentionReport, StorageError> {
    let mut report = RetentionReport::default();
    // The head may carry the newest entry (not in the index yet): it expires as any segment.
    let (head, tail, version) = topics::head_with_tail(store, topic.id, partition).await?;
    if version == 0 {
        return Ok(report);
    }
    report.log_start = head.start;
    let pk = keys::segments_pk(topic.id, partition);
    let page = store.query(&Query::all(pk, PAGE)).await?;
    let full = page.next.is_some();
    let segments = decode_segments(page.items)?;
    // After the last indexed segment, on the last page: the newest one, if the head carries it.
    let newest = tail.as_ref().filter(|t| !full && segments.last().is_none_or(|s| s.base < t.base)).map(|t| Segment {
        base: t.base,
        record: t.record.clone(),
        version: 0,
        data: None,
    });
    let cutoff = now_ms.saturating_sub(topic.spec.retention_ms.unwrap_or(default_retention_ms));
    let mut after = head;
    for seg in segments.iter().chain(&newest) {
        // Only segments that meet, from the log start on: a query that is not a snapshot (a
        // compaction's swap in flight) can show an item it replaced, or miss ones it deleted.
        if seg.record.next <= after.start {
            continue;
        }
        if seg.base > after.start {
            break;
        }
        let too_old = seg.record.max_ts < cutoff;
        let too_big = topic.spec.retention_bytes.is_some_and(|limit| after.bytes > limit as u64);
        if !(too_old || too_big) {
            break;
        }
        after.start = seg.record.next;
        after.bytes = after.bytes.saturating_sub(seg.record.counted_bytes());
        report.segments_expired += 1;
        report.bytes_expired += seg.record.len;
    }
    if after.start > head.start {
        // An entry the head carries goes with the head's write once expired (nothing indexes it).
        let tail = tail.filter(|t| t.record.next > after.start);
        let value = layout::encode_head(&after, tail.as_ref());
        let op = WriteOp::replace(keys::head_key(topic.id, partition), value, Some(version));
        match store.write(vec![op]).await {
            Ok(()) => tracing::info!(
                topic = %topic.name, partition, log_start = after.start, segments = report.segments_expired,
                bytes = report.bytes_expired, "retention advanced the log start"
            ),
            // A commit moved the head meanwhile: the next step looks again.
            Err(StorageError::ConditionFailed { .. }) => {
                return Ok(RetentionReport { more: true, log_start: head.start, ..Default::default() })
            }
            Err(e) => return Err(e),
        }
    }
    report.log_start = after.start;
    let dead: Vec<Segment> = segments.into_iter().filter(|s| s.record.next <= after.start).collect();
    let found = dead.len();
    report.items_removed = remove_segments(store, topic.id, partition, dead, now_ms).await?;
    // Another page may hold more to do only if this one was full and all of it went.
    report.more = full && found > 0 && report.items_removed == found;
    Ok(report)
}

/// Removes index items and lowers their objects' counts, in writes of
/// [`SEGMENTS_PER_WRITE`], each conditional on the items' versions (so a segment is
/// never subtracted twice). Answers how many went; stops at the first write that loses a race.
pub(crate) async fn remove_segments(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    segments: Vec<Segment>,
    now_ms: i64,
) -> Result<usize, StorageError> {
    let mut removed = 0;
    for chunk in segments.chunks(SEGMENTS_PER_WRITE) {
        let mut changes: ObjectChanges = BTreeMap::new();
        let mut ops = Vec::with_capacity(chunk.len() * 3);
        for s in chunk {
            removing(&mut changes, &s.record);
            ops.push(WriteOp::Delete {
                key: keys::segment_key(topic_id, partition, s.base),
                expect: Expect::Version(s.version),
            });
        }
        let Some(object_ops) = object_ops(store, &changes, now_ms).await? else {
            return Err(StorageError::Corrupt("an object lost a segment after it was doomed".into()));
        };
        ops.extend(object_ops);
        match store.write(ops).await {
            Ok(()) => removed += chunk.len(),
            Err(StorageError::ConditionFailed { .. }) => return Ok(removed),
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

//! Retention: a partition keeps what its topic's policy says, by time
//! (`retention_ms`: segments whose newest event is older go) and by size
//! (`retention_bytes`: the oldest segments go while the partition holds more).
//!
//! Whole segments go, from the oldest end, in two steps: first the partition's
//! log start advances past them (one conditional write of the head, which also
//! removes the item ending at the new start, so that no merge can join it to what
//! stays: see `advance`), so from then on no reader is told their offsets exist;
//! then the other index items are removed and their objects' counts lowered, in
//! writes of their own. A step cut short between the two leaves index items below
//! the log start, which the next step removes first.

use std::collections::BTreeMap;

use crate::keys;
use crate::layout::{self, HeadRecord};
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
    // Never a full page's last item: a write-out it holds, ending where it ends, may be on the next page.
    let candidates = &segments[..segments.len() - usize::from(full && !segments.is_empty())];
    let cutoff = now_ms.saturating_sub(topic.spec.retention_ms.unwrap_or(default_retention_ms));
    let limit = topic.spec.retention_bytes.map(|b| b as u64);
    let after = advance(head, candidates.iter().chain(&newest), cutoff, limit, &mut report);
    let (mut at_start, mut dead): (Vec<Segment>, Vec<Segment>) =
        segments.into_iter().filter(|s| s.record.next <= after.start).partition(|s| s.record.next == after.start);
    let found = at_start.len() + dead.len();
    if after.start > head.start {
        // An entry the head carries goes with the head's write once expired (nothing indexes it).
        let tail = tail.filter(|t| t.record.next > after.start);
        let value = layout::encode_head(&after, tail.as_ref());
        let mut ops = vec![WriteOp::replace(keys::head_key(topic.id, partition), value, Some(version))];
        // The items ending at the new start go in the same write (see `advance`).
        ops.extend(removal_ops(store, topic.id, partition, &at_start, now_ms).await?);
        match store.write(ops).await {
            Ok(()) => tracing::info!(
                topic = %topic.name, partition, log_start = after.start, segments = report.segments_expired,
                bytes = report.bytes_expired, "retention advanced the log start"
            ),
            // A commit moved the head, or a merge took the segment at the start, meanwhile: the next step looks again.
            Err(StorageError::ConditionFailed { .. }) => {
                return Ok(RetentionReport { more: true, log_start: head.start, ..Default::default() })
            }
            Err(e) => return Err(e),
        }
        report.items_removed = at_start.len();
    } else {
        dead.append(&mut at_start);
    }
    report.log_start = after.start;
    report.items_removed += remove_segments(store, topic.id, partition, dead, now_ms).await?;
    // Another page may hold more to do only if this one was full and all of it went.
    report.more = full && found > 0 && report.items_removed == found;
    Ok(report)
}

/// The head once the policy has taken what it takes of `segments` (in base order), the
/// segments taken and their bytes added to `report`: from the log start, whole segments,
/// while too old (`max_ts` before `cutoff`) or while the head counts more than `limit` bytes.
///
/// Each segment taken takes off the head's count what the head counted for it, so the count
/// stays exact only if no item straddles the start: one that did (a run merged across it)
/// would be taken off whole later, its part below the start a second time. The caller makes
/// that impossible by deleting, in the head's own conditional write, every item read that
/// ends at the new start: a merge crossing the start holds one of them, and its swap is
/// conditional on that item's version. A stale write-out ending there that lands after the
/// head's write is none of them: compaction chooses its runs from a start read after its
/// index query, below which such a write-out starts none (docs/DESIGN.md, "Retention").
fn advance<'a>(
    mut head: HeadRecord,
    segments: impl Iterator<Item = &'a Segment>,
    cutoff: i64,
    limit: Option<u64>,
    report: &mut RetentionReport,
) -> HeadRecord {
    for seg in segments {
        // Only segments that meet, from the log start on: a query that is not a snapshot (a
        // compaction's swap in flight) can show an item it replaced, or miss ones it deleted.
        if seg.record.next <= head.start {
            continue;
        }
        if seg.base > head.start {
            break;
        }
        let too_old = seg.record.max_ts < cutoff;
        let too_big = limit.is_some_and(|limit| head.bytes > limit);
        if !(too_old || too_big) {
            break;
        }
        head.start = seg.record.next;
        head.bytes = head.bytes.saturating_sub(seg.record.counted_bytes());
        report.segments_expired += 1;
        report.bytes_expired += seg.record.len;
    }
    head
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
        match store.write(removal_ops(store, topic_id, partition, chunk, now_ms).await?).await {
            Ok(()) => removed += chunk.len(),
            Err(StorageError::ConditionFailed { .. }) => return Ok(removed),
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// The operations removing `segments`' index items, each conditional on its version, and
/// lowering their objects' counts (reading those objects' records now). At most
/// [`SEGMENTS_PER_WRITE`] segments fit one write.
async fn removal_ops(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    segments: &[Segment],
    now_ms: i64,
) -> Result<Vec<WriteOp>, StorageError> {
    let mut changes: ObjectChanges = BTreeMap::new();
    let mut ops = Vec::with_capacity(segments.len() * 3);
    for s in segments {
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
    Ok(ops)
}

//! The segment index as the log reads it: which segment holds an offset, the byte
//! ranges of its parts, and the records it holds. Replay, offset by time, the time
//! index, retention and compaction all walk it through these.

use bytes::Bytes;

use crate::keys;
use crate::layout::{self, HeadRecord, SegmentRecord};
use crate::ports::objects::{ObjectStore, StorageError};
use crate::ports::state::{Query, StateStore};
use crate::segment::decode_segment;

/// One segment as the index describes it.
pub(crate) struct Segment {
    pub base: u64,
    pub record: SegmentRecord,
    /// The index item's version (compaction and retention replace items on it).
    pub version: u64,
    /// An inline segment's bytes, from its index item.
    pub data: Option<Bytes>,
}

/// A byte range of an object (or of an inline segment's bytes) holding one encoded
/// segment: offsets `base..next`.
pub(crate) struct Piece {
    pub base: u64,
    pub next: u64,
    pub object: String,
    pub pos: u64,
    pub len: u64,
    /// The bytes themselves, for a piece of an inline segment: nothing to read.
    pub data: Option<Bytes>,
}

impl Segment {
    pub(crate) fn pieces(&self) -> Vec<Piece> {
        let parts = self.record.pieces();
        let nexts: Vec<u64> =
            parts.iter().skip(1).map(|p| self.base + p.0).chain(std::iter::once(self.record.next)).collect();
        parts
            .iter()
            .zip(nexts)
            .map(|(&(delta, off, len), next)| Piece {
                base: self.base + delta,
                next,
                object: self.record.object.clone(),
                pos: self.record.pos + off,
                len,
                data: self.data.as_ref().map(|d| d.slice(off as usize..(off + len) as usize)),
            })
            .collect()
    }
}

/// Every record of a segment with its offset, reading each of its parts.
pub(crate) async fn segment_records(
    objects: &dyn ObjectStore,
    seg: &Segment,
) -> Result<Vec<(u64, crate::segment::Record)>, StorageError> {
    let data = match &seg.data {
        Some(data) => data.clone(),
        None => objects.read(&seg.record.object, seg.record.pos, seg.record.len).await?,
    };
    let mut out = Vec::new();
    for (delta, off, len) in seg.record.pieces() {
        let part = data.slice(off as usize..(off + len) as usize);
        let records = decode_segment(&part).map_err(|e| {
            StorageError::Corrupt(format!("segment {}@{}: {e}", seg.record.object, seg.record.pos + off))
        })?;
        out.extend(records.into_iter().map(|d| (seg.base + delta + u64::from(d.offset_delta), d.record)));
    }
    Ok(out)
}

/// Up to `limit` segments of a partition from the one holding `offset` on: one query when a
/// segment starts there (the usual case), two when `offset` falls inside one.
pub(crate) async fn segments_from(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    offset: u64,
    limit: usize,
) -> Result<Vec<Segment>, StorageError> {
    let pk = keys::segments_pk(topic_id, partition);
    let mut found = decode_segments(store.query(&from_offset(pk.clone(), offset, limit)).await?.items)?;
    if found.first().is_some_and(|s| s.base == offset) {
        return Ok(found);
    }
    // `offset` falls inside a segment: the one holding it starts before it.
    if let Some(holder) = decode_segments(store.query(&last_at_or_before(pk, offset)).await?.items)?.pop() {
        if holder.record.next > offset {
            found.insert(0, holder);
        }
    }
    Ok(found)
}

/// How many index items a read asks for when it still wants `events` events: never more
/// than `events` (each segment holds at least one) nor `limit`; and once segments of
/// `span` events have been seen, about twice as many as segments of that size would need.
/// A short guess costs the read one more query; a long one, items fetched and decoded for
/// nothing (a work queue's receive of 10 from segments of 12 events used 2 of 32).
pub(crate) fn index_page(events: u64, span: Option<u64>, limit: usize) -> usize {
    let guess = span.filter(|&s| s > 0).map_or(events, |s| 2 * events.div_ceil(s) + 1);
    guess.min(events).min(limit as u64).max(1) as usize
}

/// Segments of a partition from the one holding `offset` on, for a read of up to `want`
/// events: the holder alone when it has them (one query, one item decoded: a work queue's
/// receive of a few messages from inside a segment, the usual case), else the holder and
/// the segments after it that the rest would take if they were the holder's size (see
/// [`index_page`]), at most `limit - 1`. The same segments as [`segments_from`], fewer of them.
pub(crate) async fn segments_for_read(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    offset: u64,
    want: u64,
    limit: usize,
) -> Result<Vec<Segment>, StorageError> {
    let pk = keys::segments_pk(topic_id, partition);
    let at_or_before = last_at_or_before(pk.clone(), offset);
    let holder = decode_segments(store.query(&at_or_before).await?.items)?.pop().filter(|h| h.record.next > offset);
    let Some(holder) = holder else {
        // Nothing holds `offset` (past the head, below the log start, or a compaction's
        // swap half-way): what follows it, for the caller to judge.
        return decode_segments(store.query(&from_offset(pk, offset, limit)).await?.items);
    };
    let rest = want.saturating_sub(holder.record.next - offset);
    if rest == 0 || limit <= 1 {
        return Ok(vec![holder]);
    }
    let mut forward = Query::all(pk, index_page(rest, Some(holder.record.next - holder.base), limit - 1));
    forward.after = Some(keys::offset_sk(holder.base));
    let mut found = vec![holder];
    found.extend(decode_segments(store.query(&forward).await?.items)?);
    Ok(found)
}

/// The segment holding `offset` when the last one starting at or before it does not: an
/// entry a stale committer wrote out again after compaction merged it into a run starting
/// below it can sit between that run and `offset` (docs/DESIGN.md, "One partition, one
/// write"). Looks back one page; for a read that found no segment at `offset`, never on the
/// usual path.
pub(crate) async fn holder_behind(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    offset: u64,
) -> Result<Option<Segment>, StorageError> {
    let query =
        Query { limit: crate::log::INDEX_PAGE, ..last_at_or_before(keys::segments_pk(topic_id, partition), offset) };
    Ok(decode_segments(store.query(&query).await?.items)?.into_iter().find(|s| s.record.next > offset))
}

/// For a read that found no segment at `offset` in the index: the partition's head as it is
/// now, and the segment holding `offset` if there is one after all: the newest, carried by
/// the head (not yet written out), or one behind an entry written out again
/// ([`holder_behind`]). `None` below the log start: retention removed it.
pub(crate) async fn holder_after_all(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    offset: u64,
) -> Result<(HeadRecord, Option<Segment>), StorageError> {
    let (now, tail, _) = crate::log::topics::head_with_tail(store, topic_id, partition).await?;
    let holder = match tail.filter(|t| t.base <= offset && offset < t.record.next) {
        Some(t) => Some(Segment { base: t.base, record: t.record, version: 0, data: Some(t.data) }),
        None if offset >= now.start => holder_behind(store, topic_id, partition, offset).await?,
        None => None,
    };
    Ok((now, holder))
}

/// The index items of up to `limit` segments starting at or after `offset`.
fn from_offset(pk: String, offset: u64, limit: usize) -> Query {
    Query { from: Some(keys::offset_sk(offset)), ..Query::all(pk, limit) }
}

/// The index item of the last segment starting at or before `offset`.
fn last_at_or_before(pk: String, offset: u64) -> Query {
    Query { pk, from: None, to: Some(keys::offset_sk(offset)), forward: false, limit: 1, after: None }
}

pub(crate) fn decode_segments(items: Vec<crate::ports::state::Item>) -> Result<Vec<Segment>, StorageError> {
    items
        .into_iter()
        .map(|i| {
            let base = keys::offset_of(&i.key.sk)?;
            let (record, data) = layout::decode_segment_item(&i.value)?;
            record.check(base)?;
            Ok(Segment { base, record, version: i.version, data })
        })
        .collect()
}

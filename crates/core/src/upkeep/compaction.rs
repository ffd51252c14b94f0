//! Compaction: runs of small segments of a partition are merged into one large
//! segment, so replaying a partition written one event at a time reads a few
//! large objects instead of one per publish.
//!
//! A merged segment keeps its offsets (the same base, the same events, byte for
//! byte) and is written as parts of about [`crate::segment::PART_BYTES`], each an encoded segment
//! of its own, whose positions its index item lists: a reader fetches only the
//! parts it needs (a sparse offset index). The swap is one atomic write per run:
//! the first item of the run is replaced by the merged segment and the others are
//! deleted, each conditionally on the version read, with the objects' counts; a
//! reader sees either the old items or the new one. The old objects go through
//! the collector, after its grace period for readers still reading them.
//! Merging repeats on the merged segments while they are small, so a partition
//! converges to segments of about the target size.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::keys;
use crate::layout::{self, SegmentRecord};
use crate::log::index::{decode_segments, segment_records, Segment};
use crate::log::topics;
use crate::model::TopicConfig;
use crate::ports::objects::ObjectStore;
use crate::ports::state::{Expect, Query, StateStore, WriteOp, MAX_WRITE_OPS};
use crate::segment::{encode_parts, Record};
use crate::upkeep::collect::{object_ops, removing, ObjectChanges};
use crate::upkeep::pace::Pacer;
use crate::upkeep::retention::remove_segments;
use crate::StorageError;

/// Segments merged per swap: each costs its index item, its object's count and perhaps a free-list entry.
const MAX_RUN: usize = (MAX_WRITE_OPS - 4) / 3;
/// Index items looked at per step of a partition.
const PAGE: usize = 200;

/// What compaction did to one partition.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CompactionReport {
    /// Segments merged away (replaced by fewer).
    pub segments_merged: usize,
    /// Merged segments written.
    pub segments_written: usize,
    /// Whether more is left for another step.
    pub more: bool,
}

/// How compaction rewrites a partition's segments.
#[derive(Clone, Copy)]
pub struct Rewriting<'a> {
    /// A segment is small below half of it; a run is at most this many bytes.
    pub target_bytes: u64,
    /// A merged segment is written in parts of about this many bytes.
    pub part_bytes: usize,
    /// Whether a segment a commit wrote and no run takes in is moved alone (see [`compact`]).
    pub settle: bool,
    /// What a rewrite waits for before it reads the log start again and writes ([`Pacer`]):
    /// the head read again and the swap's conditions then judge what changed meanwhile.
    pub pacer: Option<&'a dyn Pacer>,
}

/// Merges the first run of small segments of a partition found from its log start, if any,
/// as `how` says: a segment is small below half of its `target_bytes`; a run is at most
/// `target_bytes`, written in parts of about `part_bytes`. With `settle` (the embedded
/// backend, whose commits share a blob file among partitions), a segment a commit wrote and
/// no run takes in is moved alone to an object of its own, the partition's newest too: so
/// that retention, removing a partition's segments, frees whole files. A rewrite first waits
/// for `how.pacer`, if any.
pub async fn compact(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    topic: &TopicConfig,
    partition: u32,
    now_ms: i64,
    how: Rewriting<'_>,
) -> Result<CompactionReport, StorageError> {
    let Rewriting { target_bytes, part_bytes, settle, pacer } = how;
    let mut report = CompactionReport::default();
    let (head, version) = topics::head(store, topic.id, partition).await?;
    if version == 0 {
        return Ok(report);
    }
    // From the partition's first item, not its log start: an item may straddle the start (a
    // run merged while an older build's retention advanced the start past its first segment),
    // and what it holds above the start is what makes a stale write-out there covered.
    let mut query = Query::all(keys::segments_pk(topic.id, partition), PAGE);
    // The furthest offset the items of the pages before held.
    let mut before = 0;
    // The log start runs start from: read again once a page offers a rewrite (see below).
    let mut start = head.start;
    loop {
        let page = store.query(&query).await?;
        let more_pages = page.next.is_some();
        let mut segments = decode_segments(page.items)?;
        // Never merged, the newest segment: a committer whose answer was lost reads its segment
        // item back to learn whether it landed, and must find it as it wrote it (or moved alone,
        // saying where from: see `SegmentRecord::moved_from`).
        let newest = segments.pop_if(|s| s.record.next >= head.next);
        // A stale committer's write-out over a run merged meanwhile (docs/DESIGN.md, "One
        // partition, one write"): its events are the merged segment's, so it goes, before any
        // run could take it in and leave two merged segments overlapping (whose bytes retention
        // would then take off the head's count twice).
        let covered = covered(&segments, before);
        if !covered.is_empty() {
            let dups = segments.into_iter().enumerate().filter(|(i, _)| covered.contains(i)).map(|(_, s)| s).collect();
            report.segments_merged = remove_segments(store, topic.id, partition, dups, now_ms).await?;
            report.more = true;
            return Ok(report);
        }
        let last_page = newest.as_ref().filter(|_| !more_pages);
        let mut picked = next_rewrite(&segments, last_page, (target_bytes, start, before), settle);
        if let (Some(pacer), Some(_)) = (pacer, picked) {
            pacer.until_quiet().await;
        }
        if picked.is_some() {
            // The start again, read after this page's query: retention may have advanced it since
            // the head was read, and a stale committer's write-out ending at the new start may have
            // landed after retention's write (a key nobody holds any more). From a start read after
            // the query, such a write-out starts no run; a query before retention's write shows
            // the item ending at the start, whose version retention's write changes. One read per
            // rewrite, not per page: most passes find none. The first read's `next` stays: a
            // fresher one could expose the newest segment to a merge.
            let (now, version) = topics::head(store, topic.id, partition).await?;
            if version == 0 {
                return Ok(report);
            }
            if now.start != start {
                start = now.start;
                picked = next_rewrite(&segments, last_page, (target_bytes, start, before), settle);
            }
        }
        if let Some(run) = picked {
            if merge(store, objects, Rewrite { topic, partition, run, now_ms, part_bytes }).await? {
                report.segments_merged = run.len();
                report.segments_written = 1;
            }
            // Another step continues: more runs may follow, and merged segments may merge again.
            report.more = true;
            return Ok(report);
        }
        before = segments.iter().chain(&newest).map(|s| s.record.next).fold(before, u64::max);
        match page.next {
            Some(after) if more_pages => query.after = Some(after),
            _ => return Ok(report),
        }
    }
}

/// What to write anew next, of a page of a partition's segments (`newest` given on the last
/// page only), of those from the log `start` on, after pages whose items held offsets up to
/// `before`: the first run of small ones; else, when settling, the first segment a commit
/// wrote (not inline, not rewritten) alone; else the newest, alone, if a commit wrote it.
fn next_rewrite<'a>(
    segments: &'a [Segment],
    newest: Option<&'a Segment>,
    (target_bytes, start, before): (u64, u64, u64),
    settle: bool,
) -> Option<&'a [Segment]> {
    if let Some(run) = runs(segments, target_bytes, (start, before)).into_iter().next() {
        return Some(&segments[run]);
    }
    let committed = |s: &Segment| settle && s.base >= start && !s.record.inline && !s.record.rewritten;
    match segments.iter().position(committed) {
        Some(i) => Some(&segments[i..=i]),
        None => newest.filter(|s| committed(s)).map(std::slice::from_ref),
    }
}

/// The items of a page (in base order) whose offsets an earlier item holds whole: one of the
/// page, or one of the pages before, whose items held offsets up to `before`.
fn covered(segments: &[Segment], before: u64) -> Vec<usize> {
    let mut end = before;
    let mut out = Vec::new();
    for (i, s) in segments.iter().enumerate() {
        if s.record.next <= end {
            out.push(i);
        }
        end = end.max(s.record.next);
    }
    out
}

/// Runs of at least two adjacent small segments from the log `start` on, each at most
/// `target_bytes` and [`MAX_RUN`] long, after items that held offsets up to `before`.
fn runs(segments: &[Segment], target_bytes: u64, (start, before): (u64, u64)) -> Vec<std::ops::Range<usize>> {
    let small = |s: &Segment| s.record.len < target_bytes / 2;
    let mut runs = Vec::new();
    let mut end = before;
    let mut i = 0;
    while i < segments.len() {
        // One starting below the log start (retention's to remove), or overlapping an item
        // before it (left by a build that merged stale write-outs), starts no run: merging it
        // would carry the overlap on.
        let s = &segments[i];
        if !small(s) || s.base < start || s.base < end {
            end = end.max(s.record.next);
            i += 1;
            continue;
        }
        let mut j = i + 1;
        let mut bytes = segments[i].record.len;
        while j < segments.len()
            && j - i < MAX_RUN
            && small(&segments[j])
            && segments[j].base == segments[j - 1].record.next
            && bytes + segments[j].record.len <= target_bytes
        {
            bytes += segments[j].record.len;
            j += 1;
        }
        end = segments[j - 1].record.next;
        if j - i >= 2 {
            runs.push(i..j);
        }
        i = j;
    }
    runs
}

/// A run of a partition's segments to write anew as one.
struct Rewrite<'a> {
    topic: &'a TopicConfig,
    partition: u32,
    run: &'a [Segment],
    now_ms: i64,
    part_bytes: usize,
}

/// Merges `run` into one segment written as a new blob, and swaps it into the index (a run of
/// one moves its segment). Answers whether the swap landed (it loses to a concurrent retention
/// or compaction, harmlessly: the new blob is then never indexed, and the collector removes it).
async fn merge(store: &dyn StateStore, objects: &dyn ObjectStore, r: Rewrite<'_>) -> Result<bool, StorageError> {
    let Rewrite { topic, partition, run, now_ms, part_bytes } = r;
    let (first, last) = (&run[0], &run[run.len() - 1]);
    let mut records: Vec<(u64, Record)> = Vec::new();
    for seg in run {
        records.extend(segment_records(objects, seg).await?);
    }
    let dense = records.iter().enumerate().all(|(i, (o, _))| *o == first.base + i as u64);
    if !dense || first.base + records.len() as u64 != last.record.next {
        return Err(StorageError::Corrupt(format!(
            "{}/{partition}: segments {}..{} do not hold their offsets densely",
            topic.name, first.base, last.record.next
        )));
    }
    let mut blob = Vec::new();
    let parts = encode_parts(&records.iter().map(|(_, r)| r).collect::<Vec<_>>(), part_bytes, &mut blob);
    let (len, max_ts) = (parts.len as u64, parts.max_timestamp_ms);
    let counted: u64 = run.iter().map(|s| s.record.counted_bytes()).sum();
    let at = objects.put(Bytes::from(blob)).await?;
    // A commit's segment moved alone keeps where the commit wrote it.
    let moved_from = match run {
        [only] if !only.record.inline && !only.record.rewritten => Some((only.record.object.clone(), only.record.pos)),
        _ => None,
    };
    let merged = SegmentRecord {
        next: last.record.next,
        object: at.object.clone(),
        pos: at.position,
        len,
        max_ts,
        parts: parts.starts,
        inline: false,
        counted: Some(counted).filter(|c| *c != len),
        rewritten: true,
        moved_from,
    };
    let mut changes: ObjectChanges = BTreeMap::new();
    for seg in run {
        removing(&mut changes, &seg.record);
    }
    let c = changes.entry(at.object.clone()).or_default();
    c.0 += 1;
    c.1 += len as i64;
    let Some(object_ops) = object_ops(store, &changes, now_ms).await? else {
        // The new blob's object was doomed under us: never add to it.
        objects.retire(&at.object);
        return Ok(false);
    };
    let mut ops = vec![WriteOp::replace(
        keys::segment_key(topic.id, partition, first.base),
        layout::encode(&merged),
        Some(first.version),
    )];
    for seg in &run[1..] {
        ops.push(WriteOp::Delete {
            key: keys::segment_key(topic.id, partition, seg.base),
            expect: Expect::Version(seg.version),
        });
    }
    ops.extend(object_ops);
    match store.write(ops).await {
        Ok(()) => {
            tracing::info!(
                topic = %topic.name, partition, base = first.base, next = merged.next, segments = run.len(),
                bytes = len, "compacted a run of segments"
            );
            Ok(true)
        }
        Err(StorageError::ConditionFailed { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(base: u64, next: u64, len: u64) -> Segment {
        let record = SegmentRecord {
            next,
            object: "o".into(),
            pos: 0,
            len,
            max_ts: 0,
            parts: Vec::new(),
            inline: false,
            counted: None,
            rewritten: false,
            moved_from: None,
        };
        Segment { base, version: 1, record, data: None }
    }

    /// A segment `seg` as a commit wrote it (`c`), compaction (`r`), or inline (`i`).
    fn made(base: u64, len: u64, by: char) -> Segment {
        let mut s = seg(base, base + 1, len);
        (s.record.rewritten, s.record.inline) = (by == 'r', by == 'i');
        s
    }

    #[test]
    fn the_next_rewrite_is_a_run_else_when_settling_a_commits_segment_alone_else_the_newest() {
        let bases = |picked: Option<&[Segment]>| picked.map(|r| r.iter().map(|s| s.base).collect::<Vec<_>>());
        // (segments as (len, by), the newest as (len, by) if this is the last page, settle, picked bases)
        type Case = (Vec<(u64, char)>, Option<(u64, char)>, bool, Option<Vec<u64>>);
        let cases: Vec<Case> = vec![
            // A run first, settling or not; the newest never in one.
            (vec![(10, 'c'), (10, 'c')], Some((10, 'c')), false, Some(vec![0, 1])),
            (vec![(900, 'c'), (10, 'r'), (10, 'c')], Some((10, 'c')), true, Some(vec![1, 2])),
            // Not settling: nothing else moves.
            (vec![(900, 'c'), (10, 'c')], Some((10, 'c')), false, None),
            // Settling: a large or a lone commit's segment, oldest first; a rewritten or inline one stays.
            (vec![(10, 'r'), (900, 'r'), (900, 'c'), (10, 'c')], Some((10, 'c')), true, Some(vec![2])),
            (vec![(10, 'i'), (900, 'r'), (10, 'c')], None, true, Some(vec![2])),
            // Then the newest, on the last page only, if a commit wrote it (inline: no file to free).
            (vec![(900, 'r'), (10, 'i')], Some((10, 'c')), true, Some(vec![2])),
            (vec![(900, 'r')], None, true, None),
            (vec![(900, 'r')], Some((10, 'r')), true, None),
            (vec![(900, 'r')], Some((10, 'i')), true, None),
        ];
        for (i, (page, newest, settle, picked)) in cases.into_iter().enumerate() {
            let segments: Vec<Segment> =
                page.iter().enumerate().map(|(b, &(len, by))| made(b as u64, len, by)).collect();
            let newest = newest.map(|(len, by)| made(segments.len() as u64, len, by));
            assert_eq!(bases(next_rewrite(&segments, newest.as_ref(), (1000, 0, 0), settle)), picked, "case {i}");
        }
    }

    #[test]
    fn runs_are_adjacent_small_segments_within_the_target() {
        let segs = vec![seg(0, 1, 10), seg(1, 2, 10), seg(2, 3, 600), seg(3, 4, 10), seg(4, 5, 10), seg(5, 6, 10)];
        assert_eq!(runs(&segs, 1000, (0, 0)), vec![0..2, 3..6]);
        // A gap (a straddling segment cut away) ends a run; one small segment alone is no run.
        let gap = vec![seg(0, 1, 10), seg(2, 3, 10), seg(3, 4, 10)];
        assert_eq!(runs(&gap, 1000, (0, 0)), vec![1..3]);
        // The target bounds a run's bytes.
        let many: Vec<Segment> = (0..10).map(|i| seg(i, i + 1, 300)).collect();
        assert_eq!(runs(&many, 1000, (0, 0)), vec![0..3, 3..6, 6..9]);
    }

    #[test]
    fn a_write_out_a_merged_item_holds_is_covered_and_an_overlapping_item_starts_no_run() {
        // 0..4 merged; 2..3 a stale write-out inside it; 5..6 inside 4..8 (a page may hold several).
        let segs = vec![seg(0, 4, 40), seg(2, 3, 10), seg(3, 4, 10), seg(4, 8, 40), seg(5, 6, 10), seg(8, 9, 10)];
        assert_eq!(covered(&segs, 0), vec![1, 2, 4]);
        assert!(covered(&[seg(0, 4, 40), seg(4, 5, 10)], 0).is_empty(), "adjacent is not covered");
        // Left by an older build: 2..6 overlaps 0..4 in part; merged with 6..7 it would carry the overlap on.
        let partial = vec![seg(0, 4, 40), seg(2, 6, 40), seg(6, 7, 10), seg(7, 8, 10)];
        assert_eq!(runs(&partial, 1000, (0, 0)), vec![2..4]);
    }

    #[test]
    fn an_item_straddling_the_log_start_covers_a_write_out_above_it_and_starts_no_run() {
        // Retention moved the start to 6 past 4..6, whose removal lost to a merge into 4..8; a
        // stale committer then wrote 6..8 out again, and 8..9, 9..10 follow.
        let segs = vec![seg(4, 8, 40), seg(6, 8, 20), seg(8, 9, 10), seg(9, 10, 10)];
        assert_eq!(covered(&segs, 0), vec![1]);
        let left = vec![seg(4, 8, 40), seg(8, 9, 10), seg(9, 10, 10)];
        assert_eq!(runs(&left, 1000, (6, 0)), vec![1..3], "the straddling item is no run's first");
        // The item holding a page's first offsets may be on the page before.
        assert_eq!(covered(&segs[1..], 8), vec![0]);
        assert_eq!(runs(&segs[1..], 1000, (6, 8)), vec![1..3], "6..8 overlaps what came before");
    }
}

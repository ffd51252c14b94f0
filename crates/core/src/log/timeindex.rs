//! The time index: the first offset at or after a time, found with one query instead
//! of a walk over a partition's index.
//!
//! Event timestamps need not grow with offsets, so the index is keyed by each segment's
//! *running maximum*: the largest timestamp of that segment and every indexed one before
//! it. That key grows with the offset, and the first segment holding an event at or
//! after `ts` is exactly the first whose running maximum reaches `ts`: one query for
//! the first key at or above `ts`.
//!
//! The janitor keeps it, after compaction, for *settled* segments only (at least half
//! the compaction target: compaction never merges them again), in offset order from a
//! per-partition cursor, so the running maximum is always that of the segments before.
//! What lies past the cursor (recent, small segments) is walked as before. Retention
//! trims entries of segments below the log start, and restarts the cursor when the log
//! start passed it.

use serde::{Deserialize, Serialize};

use crate::keys::{time_cursor_key, time_entries_pk, time_entry_key, time_sk};
use crate::layout;
use crate::log::index::segments_from;
use crate::ports::state::{Expect, Query, StateStore, WriteOp};
use crate::{StorageError, TopicConfig};

/// Segments indexed per write, entries looked at per page.
const BATCH: usize = 32;
/// Pages one trim looks at (the rest waits for the next).
const TRIM_PAGES: usize = 32;

/// Where a partition's time index stands: every settled segment from the log start to
/// `upto` has an entry; `run_max` is the largest timestamp among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeCursor {
    pub upto: u64,
    pub run_max: i64,
}

/// One entry: the segment `base..next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct TimeEntry {
    base: u64,
    next: u64,
}

/// What the index says about a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The first indexed segment reaching the time starts here: no earlier offset does.
    At(u64),
    /// No indexed segment reaches it: every offset below this one is earlier.
    After(u64),
}

/// Where to start looking for the first offset at or after `ts`: one query, and one read
/// of the cursor when no entry reaches the time.
pub(crate) async fn lookup(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    ts: i64,
) -> Result<Lookup, StorageError> {
    let mut query = Query::all(time_entries_pk(topic_id, partition), 1);
    query.from = Some(time_sk(ts));
    if let Some(item) = store.query(&query).await?.items.pop() {
        let entry: TimeEntry = layout::decode("time entry", &item.value)?;
        return Ok(Lookup::At(entry.base));
    }
    let Some(item) = store.get(&time_cursor_key(topic_id, partition)).await? else { return Ok(Lookup::After(0)) };
    let cursor: TimeCursor = layout::decode("time cursor", &item.value)?;
    if cursor.run_max < ts {
        return Ok(Lookup::After(cursor.upto));
    }
    // The cursor moved past an entry reaching `ts` after the query looked: look once more, and
    // if that races too, start from the beginning (slower, never wrong).
    match store.query(&query).await?.items.pop() {
        Some(item) => Ok(Lookup::At(layout::decode::<TimeEntry>("time entry", &item.value)?.base)),
        None => Ok(Lookup::After(0)),
    }
}

/// Indexes the settled segments from the cursor on (up to [`BATCH`]), restarting at the log
/// start if retention passed the cursor; answers how many it indexed.
pub(crate) async fn extend(
    store: &dyn StateStore,
    topic: &TopicConfig,
    partition: u32,
    log_start: u64,
    settled_bytes: u64,
) -> Result<usize, StorageError> {
    let topic_id = topic.id;
    let key = time_cursor_key(topic_id, partition);
    let (mut cursor, version) = match store.get(&key).await? {
        Some(item) => (layout::decode::<TimeCursor>("time cursor", &item.value)?, Some(item.version)),
        None => (TimeCursor { upto: log_start, run_max: i64::MIN }, None),
    };
    let restarted = cursor.upto < log_start;
    if restarted {
        // Entries below the log start first: new keys must not sort among stale ones.
        trim(store, topic_id, partition, log_start).await?;
        cursor = TimeCursor { upto: log_start, run_max: i64::MIN };
    }
    let segments = segments_from(store, topic_id, partition, cursor.upto, BATCH).await?;
    let mut ops = Vec::new();
    for seg in segments {
        // In order, without a hole, and only what compaction will not merge again.
        if seg.base > cursor.upto || seg.record.next <= cursor.upto || seg.record.len < settled_bytes {
            break;
        }
        let run_max = cursor.run_max.max(seg.record.max_ts);
        let entry = TimeEntry { base: seg.base, next: seg.record.next };
        ops.push(WriteOp::Put {
            key: time_entry_key(topic_id, partition, run_max, seg.base),
            value: layout::encode(&entry),
            expires_at_ms: None,
            expect: Expect::Any,
        });
        cursor = TimeCursor { upto: seg.record.next, run_max };
    }
    let indexed = ops.len();
    if indexed == 0 && !restarted && version.is_some() {
        return Ok(0);
    }
    ops.push(WriteOp::replace(key, layout::encode(&cursor), version));
    if version.is_none() {
        // A new cursor only while the topic lives: a purge that already removed this
        // partition's index would never see these entries.
        ops.push(layout::topic_check(topic));
    }
    match store.write(ops).await {
        Ok(()) => Ok(indexed),
        // Another janitor moved the cursor: it indexed these.
        Err(StorageError::ConditionFailed { .. }) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Removes entries of segments that end at or below the log start (they come first, keys
/// growing with offsets), page by page until a page holds a live one; answers how many.
pub(crate) async fn trim(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    log_start: u64,
) -> Result<usize, StorageError> {
    let mut removed = 0;
    for _ in 0..TRIM_PAGES {
        let page = store.query(&Query::all(time_entries_pk(topic_id, partition), BATCH)).await?;
        let full = page.next.is_some();
        let mut dead = Vec::new();
        for item in page.items {
            let entry: TimeEntry = layout::decode("time entry", &item.value)?;
            if entry.next <= log_start {
                dead.push(item.key);
            }
        }
        let live_seen = dead.len() < BATCH;
        removed += dead.len();
        if !dead.is_empty() {
            store.delete_many(dead).await?;
        }
        if live_seen || !full {
            break;
        }
    }
    Ok(removed)
}

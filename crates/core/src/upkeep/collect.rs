//! The collector: deletes objects no segment needs.
//!
//! Every object's live segments are counted in its [`ObjectRecord`], changed in the
//! same atomic write that indexes or removes a segment. An object is deleted in two
//! cases, each time only after its record is **doomed** (a conditional write), so a
//! commit that would index a blob in it afterwards fails its own condition on the
//! record and writes the blob anew; nothing indexed ever points at a deleted object:
//!
//! - its count fell to zero (retention, compaction or a topic purge took its last
//!   segment, leaving a [`FreeRecord`]), and a grace period has passed for readers
//!   still reading through an index they read before;
//! - it has no record at all (a blob written but never indexed: a failed or
//!   abandoned commit) and it is older than the grace period. A listing cursor
//!   makes each object examined once.
//!
//! The grace period is for liveness only (a reader in flight, a commit about to
//! land); safety rests on the doomed record alone.

use std::collections::BTreeMap;

use crate::keys::{self, FREE_SHARDS};
use crate::layout::{self, Cursor, FreeRecord, ObjectRecord, SegmentRecord, DOOMED_TTL_MS};
use crate::ports::objects::ObjectStore;
use crate::ports::state::{Expect, Query, StateStore, WriteOp};
use crate::StorageError;

/// Objects looked at per listing request.
const LIST_PAGE: usize = 1000;

/// What one collector step did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    /// Objects whose segments were all gone, deleted.
    pub objects_deleted: usize,
    /// Blobs never indexed, deleted.
    pub orphans_deleted: usize,
    /// Bytes of the blobs never indexed, as listed (a freed object's record counts none by then).
    pub bytes_deleted: u64,
    pub more: bool,
}

/// The changes a write makes to objects' live segments: object → (segments, bytes), signed.
pub(crate) type ObjectChanges = BTreeMap<String, (i64, i64)>;

/// Counts `segment` as leaving its object (an inline segment has none).
pub(crate) fn removing(changes: &mut ObjectChanges, segment: &SegmentRecord) {
    if !segment.inline {
        let c = changes.entry(segment.object.clone()).or_default();
        c.0 -= 1;
        c.1 -= segment.len as i64;
    }
}

/// The operations that apply `changes` to the objects' records, conditionally on the
/// versions read now; an object whose count reaches zero joins the free list.
/// `None` if a segment would be added to a doomed object (the caller must write its blob anew).
pub(crate) async fn object_ops(
    store: &dyn StateStore,
    changes: &ObjectChanges,
    now_ms: i64,
) -> Result<Option<Vec<WriteOp>>, StorageError> {
    let mut ops = Vec::new();
    for (object, &(refs, bytes)) in changes {
        if refs == 0 && bytes == 0 {
            continue;
        }
        let key = keys::object_key(object);
        let item = store.get(&key).await?;
        let Some(item) = item else {
            if refs < 0 {
                // Written before objects were counted: it is never collected.
                tracing::debug!(object, "segment removed from an object without a record");
                continue;
            }
            let record = ObjectRecord { refs: refs as u64, bytes: bytes.max(0) as u64, doomed: false };
            ops.push(WriteOp::create(key, layout::encode(&record)));
            continue;
        };
        let mut record: ObjectRecord = layout::decode("object", &item.value)?;
        if record.doomed && refs > 0 {
            return Ok(None);
        }
        record.refs = (record.refs as i64 + refs).max(0) as u64;
        record.bytes = (record.bytes as i64 + bytes).max(0) as u64;
        ops.push(WriteOp::replace(key, layout::encode(&record), Some(item.version)));
        if record.refs == 0 && !record.doomed {
            let free = FreeRecord { freed_ms: now_ms };
            ops.push(WriteOp::Put {
                key: keys::free_key(object),
                value: layout::encode(&free),
                expires_at_ms: None,
                expect: Expect::Any,
            });
        }
    }
    Ok(Some(ops))
}

/// One bounded step: deletes freed objects past the grace period, then examines up to
/// `budget` listed objects for orphans.
pub async fn step(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    now_ms: i64,
    grace_ms: i64,
    budget: usize,
) -> Result<GcReport, StorageError> {
    let mut report = GcReport::default();
    let mut left = budget.max(1);
    for shard in 0..FREE_SHARDS {
        let page = store.query(&Query::all(keys::free_pk(shard), left.min(LIST_PAGE))).await?;
        report.more |= page.next.is_some();
        for item in page.items {
            left = left.saturating_sub(1);
            let free: FreeRecord = layout::decode("free", &item.value)?;
            if free.freed_ms > now_ms - grace_ms {
                continue;
            }
            let object = item.key.sk.clone();
            match collect(store, objects, &object, now_ms).await {
                Ok(true) => report.objects_deleted += 1,
                Ok(false) => {}
                // One object that cannot go (denied, storage down) is left on the list for the
                // next step; it never holds up the others.
                Err(e) => {
                    tracing::warn!(object, error = %e, "collecting an object failed");
                    continue;
                }
            }
            // Collected, or revived by a commit since: either way off the list.
            match store.write(vec![WriteOp::Delete { key: item.key, expect: Expect::Version(item.version) }]).await {
                Ok(()) | Err(StorageError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if left == 0 {
            report.more = true;
            return Ok(report);
        }
    }
    orphans(store, objects, now_ms, grace_ms, left, &mut report).await?;
    Ok(report)
}

/// Dooms and deletes `object` if no segment is in it; answers whether it did.
async fn collect(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    object: &str,
    now_ms: i64,
) -> Result<bool, StorageError> {
    let key = keys::object_key(object);
    let Some(item) = store.get(&key).await? else { return Ok(false) };
    let record: ObjectRecord = layout::decode("object", &item.value)?;
    if record.refs > 0 {
        return Ok(false);
    }
    if !record.doomed {
        let doomed = ObjectRecord { doomed: true, ..record };
        let op = WriteOp::Put {
            key,
            value: layout::encode(&doomed),
            expires_at_ms: Some(now_ms + DOOMED_TTL_MS),
            expect: Expect::Version(item.version),
        };
        match store.write(vec![op]).await {
            Ok(()) => {}
            // A commit added a segment to it meanwhile: it lives.
            Err(StorageError::ConditionFailed { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    objects.delete(object).await?;
    tracing::info!(object, "collected an object whose segments are all gone");
    Ok(true)
}

/// Deletes a listed object if no record says it is live: none (never indexed: doomed first,
/// created doomed so a commit that comes later fails), or a doomed one (a collection cut short).
async fn orphan(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    info: &crate::ports::objects::ObjectInfo,
    now_ms: i64,
) -> Result<bool, StorageError> {
    let key = keys::object_key(&info.name);
    if let Some(item) = store.get(&key).await? {
        let record: ObjectRecord = layout::decode("object", &item.value)?;
        if !(record.doomed && record.refs == 0) {
            return Ok(false);
        }
    } else {
        let doomed = ObjectRecord { refs: 0, bytes: info.size, doomed: true };
        let op = WriteOp::Put {
            key,
            value: layout::encode(&doomed),
            expires_at_ms: Some(now_ms + DOOMED_TTL_MS),
            expect: Expect::Absent,
        };
        match store.write(vec![op]).await {
            Ok(()) => {}
            // Its commit landed just now: it is live.
            Err(StorageError::ConditionFailed { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    objects.delete(&info.name).await?;
    tracing::info!(object = %info.name, bytes = info.size, "collected a blob no segment needs");
    Ok(true)
}

/// Examines listed objects after the collector's cursor: one without a record, older than
/// the grace period, is doomed (created doomed, so a commit that comes later fails) and deleted.
async fn orphans(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    now_ms: i64,
    grace_ms: i64,
    budget: usize,
    report: &mut GcReport,
) -> Result<(), StorageError> {
    let cursor_key = keys::collector_cursor_key();
    let (mut cursor, version) = match store.get(&cursor_key).await? {
        Some(item) => (layout::decode::<Cursor>("cursor", &item.value)?, Some(item.version)),
        None => (Cursor::default(), None),
    };
    let listed = objects.list(cursor.after.as_deref(), budget.min(LIST_PAGE)).await?;
    let full = listed.len() == budget.min(LIST_PAGE);
    let mut moved = false;
    let mut young = false;
    for info in listed {
        if info.created_ms > now_ms - grace_ms {
            // Too young to judge; names sort by age, so the rest are too: next time.
            young = true;
            break;
        }
        match orphan(store, objects, &info, now_ms).await {
            Ok(true) => {
                report.orphans_deleted += 1;
                report.bytes_deleted += info.size;
            }
            Ok(false) => {}
            // Left for the next step, which lists from here again.
            Err(e) => {
                tracing::warn!(object = %info.name, error = %e, "examining an object failed");
                young = true;
                break;
            }
        }
        cursor.after = Some(info.name);
        moved = true;
    }
    if moved {
        match store.write(vec![WriteOp::replace(cursor_key, layout::encode(&cursor), version)]).await {
            // Another collector moved it: the objects both examined were judged alike.
            Ok(()) | Err(StorageError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    report.more |= full && !young;
    Ok(())
}

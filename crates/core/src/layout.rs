//! Where the log keeps its state in the [`StateStore`](crate::ports::state::StateStore),
//! and the records it keeps there. Everything of a topic is keyed by its id, never
//! its name, so a topic re-created under an old name shares nothing with its
//! predecessor, whatever a stale process still has cached.
//!
//! | item | `pk` | `sk` | value |
//! |---|---|---|---|
//! | topic (live, or tombstone) | `topics` | name | [`TopicRecord`] |
//! | purge order of a deleted topic | `purge` | topic id | [`PurgeRecord`] |
//! | partition head | `head#<id>` | partition, 10 digits | [`HeadRecord`], and the newest [`Tail`] if it carries one |
//! | segment index entry | `seg#<id>#<partition>` | base offset, 20 digits | [`SegmentRecord`], then an inline segment's bytes |
//! | idempotency record | `idem#<id>#<shard>` | the key | [`IdempotencyRecord`] (expires) |
//! | blob object's live segments | `obj#<object>` | `-` | [`ObjectRecord`] |
//! | object whose segments are all gone | `free#<shard>` | object | [`FreeRecord`] |
//! | the collector's listing cursor, the upkeep pass's cursor | `upkeep` | `gc`, `pass` | [`Cursor`] |
//! | what the janitor did to a topic | `upkeep#<id>` | `-` | [`UpkeepRecord`] |
//!
//! A topic's heads share one collection, so describing a topic is one query;
//! each partition's index is a collection of its own, so partitions never share
//! a hot key; idempotency records are spread over
//! [`IDEMPOTENCY_SHARDS`](crate::keys::IDEMPOTENCY_SHARDS) keys. [`crate::keys`] builds
//! every key.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::model::{PartitionState, Position, TopicConfig, TopicSpec};
use crate::StorageError;

/// How long an idempotency record is kept (the contract promises at least 24 h).
pub const IDEMPOTENCY_TTL_MS: i64 = 48 * 3600 * 1000;

/// A topic by name. A deleted topic leaves a tombstone (`deleted_ms` set) rather
/// than no item, so the record's version only ever grows: a commit that checks the
/// version it read can never be fooled by a delete followed by a re-create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub id: u64,
    pub partitions: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_bytes: Option<i64>,
    pub created_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_ms: Option<i64>,
}

/// More partitions than any deployment may configure: a topic record claiming more is corrupt
/// (reading its heads would allocate for every one of them).
pub const MAX_STORED_PARTITIONS: u32 = 1 << 16;
/// Larger than any segment a commit (at most one request) or compaction (8 MiB targets) writes:
/// an index item claiming more is corrupt (a reader would allocate its length).
pub const MAX_STORED_SEGMENT_BYTES: u64 = 1 << 30;

/// A topic record as stored, refused as `Corrupt` if its partition count is impossible.
pub fn decode_topic(value: &[u8]) -> Result<TopicRecord, StorageError> {
    let record: TopicRecord = decode("topic", value)?;
    if record.partitions == 0 || record.partitions > MAX_STORED_PARTITIONS {
        return Err(StorageError::Corrupt(format!("topic record with {} partitions", record.partitions)));
    }
    Ok(record)
}

impl TopicRecord {
    pub fn config(&self, name: &str, version: u64) -> TopicConfig {
        TopicConfig {
            name: name.to_owned(),
            id: self.id,
            spec: TopicSpec {
                partitions: self.partitions,
                retention_ms: self.retention_ms,
                retention_bytes: self.retention_bytes,
            },
            created_ms: self.created_ms,
            version,
        }
    }

    pub fn live(topic: &TopicConfig) -> Self {
        Self {
            id: topic.id,
            partitions: topic.spec.partitions,
            retention_ms: topic.spec.retention_ms,
            retention_bytes: topic.spec.retention_bytes,
            created_ms: topic.created_ms,
            deleted_ms: None,
        }
    }
}

/// A deleted topic whose items are still to be removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeRecord {
    pub name: String,
    pub partitions: u32,
    pub deleted_ms: i64,
    /// Partitions whose index is already gone: where the next step resumes.
    #[serde(default)]
    pub done_partitions: u32,
}

/// The end of a partition's log. Every commit replaces it conditionally on the
/// version it read, and nothing but the purge of a deleted topic removes it, so
/// it is the one thing a commit's safety rests on. An absent head is an empty
/// partition (version 0). Deleting the topic turns every head into a tombstone
/// (`deleted`), which no commit writes over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadRecord {
    /// The offset the next event gets: the high watermark. Named `N` in a head that carries
    /// an entry ([`encode_head`]).
    #[serde(alias = "N")]
    pub next: u64,
    /// The first readable offset.
    pub start: u64,
    /// Bytes of the readable segments.
    pub bytes: u64,
    /// Largest event timestamp committed so far.
    pub max_ts: i64,
    /// The topic was deleted: this partition takes no more commits (see `log::topics::delete`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

impl HeadRecord {
    pub fn state(&self, partition: u32) -> PartitionState {
        PartitionState { partition, log_start_offset: self.start, high_watermark: self.next, bytes: self.bytes }
    }
}

/// The newest commit's index entry, carried in its partition's head by a commit made as one
/// single-item write (`LogConfig::single_write_commits`): segment `base..record.next`, kept
/// inline (`data`). The next commit writes it out as its own index item (the same bytes,
/// whoever writes it) before it replaces the head; until then readers find it here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub base: u64,
    pub record: SegmentRecord,
    pub data: Bytes,
}

impl Tail {
    /// The value of the index item this entry becomes when written out.
    pub fn index_item(&self) -> Bytes {
        encode_segment_item(&self.record, Some(&self.data))
    }
}

/// A head item's value as stored: the [`HeadRecord`]'s fields, and the tail's beside them
/// (a reader decoding only a [`HeadRecord`] skips it).
#[derive(Serialize, Deserialize)]
struct HeadItem {
    #[serde(flatten)]
    head: HeadRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tail: Option<TailItem>,
}

#[derive(Serialize, Deserialize)]
struct TailItem {
    base: u64,
    seg: SegmentRecord,
    /// The inline bytes, base64.
    data: String,
}

/// A head item's value: `head`, and the entry it carries, if any.
pub fn encode_head(head: &HeadRecord, tail: Option<&Tail>) -> Bytes {
    use base64::Engine;
    let tail = tail.map(|t| TailItem {
        base: t.base,
        seg: t.record.clone(),
        data: base64::engine::general_purpose::STANDARD.encode(&t.data),
    });
    let item = HeadItem { head: *head, tail };
    if item.tail.is_none() {
        return encode(&item);
    }
    // A head carrying an entry names `next` `N`: a binary from before entries were carried
    // reads `next`, would ignore `tail` and write the head back without it (retention, a
    // delete's fence) during a rolling deploy, losing acknowledged events; with no `next`
    // it fails to read the head instead.
    let mut value = serde_json::to_value(&item).unwrap_or_default();
    if let Some(fields) = value.as_object_mut() {
        if let Some(next) = fields.remove("next") {
            fields.insert("N".into(), next);
        }
    }
    encode(&value)
}

/// A head item's [`HeadRecord`] and the entry it carries, checked as an index item's would be.
pub fn decode_head(value: &[u8]) -> Result<(HeadRecord, Option<Tail>), StorageError> {
    use base64::Engine;
    let item: HeadItem = decode("head", value)?;
    let Some(t) = item.tail else { return Ok((item.head, None)) };
    let data = base64::engine::general_purpose::STANDARD
        .decode(&t.data)
        .map_err(|e| StorageError::Corrupt(format!("head's tail: {e}")))?;
    t.seg.check(t.base)?;
    if !t.seg.inline || t.seg.pos != 0 || !t.seg.parts.is_empty() || data.len() as u64 != t.seg.len {
        return Err(StorageError::Corrupt(format!("head's tail at {}: not one inline segment", t.base)));
    }
    Ok((item.head, Some(Tail { base: t.base, record: t.seg, data: Bytes::from(data) })))
}

/// One segment: offsets `base..next` of a partition, at `len` bytes from `pos` of `object`;
/// or, if `inline`, the `len` bytes that follow the record in its index item (see
/// [`encode_segment_item`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRecord {
    pub next: u64,
    /// The blob's object; for an inline segment, a name unique to the commit that wrote it
    /// (so that a commit whose answer was lost recognises its own item), never an object.
    pub object: String,
    pub pos: u64,
    pub len: u64,
    pub max_ts: i64,
    /// A compacted segment is a run of parts, each an encoded segment of its own: its sparse
    /// offset index, `[first offset - base, byte position - pos]` of every part but the first,
    /// lets a reader fetch only the parts it needs. Empty for a segment in one part.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<[u64; 2]>,
    /// The segment's bytes are in its index item, after the record (`pos` is 0): written in the
    /// same atomic write as the head that makes them visible, so one durable write, and no object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline: bool,
    /// What the partition's head counted for these events when they were published, where it
    /// is not `len`: a compaction re-encodes a run in other bytes without writing the head (a
    /// head in the merge's write would conflict with every publish to the partition), so
    /// retention takes this off the head's count, which stays the sum of its segments'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<u64>,
    /// Compaction wrote these bytes, to an object holding them alone on the embedded backend:
    /// a segment to leave where it is ([`crate::upkeep::compaction`] settles only a commit's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewritten: bool,
    /// Where a commit wrote this segment (object, position) before compaction moved it alone,
    /// offsets unchanged, to an object of its own: a committer whose answer was lost still
    /// recognises its entry, even the partition's newest, after the move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<(String, u64)>,
}

impl SegmentRecord {
    /// The bytes the partition's head counts for this segment (see [`SegmentRecord::counted`]).
    pub fn counted_bytes(&self) -> u64 {
        self.counted.unwrap_or(self.len)
    }

    /// Refuses a record that no commit or compaction writes, so that readers can trust its
    /// arithmetic: offsets `base..next` not empty, a length no segment reaches
    /// ([`MAX_STORED_SEGMENT_BYTES`]), its bytes' end within `u64`, and parts that
    /// start strictly later, in offsets and in bytes, than the one before, inside the segment.
    pub fn check(&self, base: u64) -> Result<(), StorageError> {
        let (mut delta, mut at) = (0, 0);
        let span = self.next.checked_sub(base).filter(|n| *n > 0);
        let ok = span.is_some_and(|span| {
            self.len <= MAX_STORED_SEGMENT_BYTES
                && self.pos.checked_add(self.len).is_some()
                && self.parts.iter().all(|&[d, p]| {
                    let next = d > delta && d < span && p > at && p < self.len;
                    (delta, at) = (d, p);
                    next
                })
        });
        if ok {
            Ok(())
        } else {
            Err(StorageError::Corrupt(format!("segment record at {base} of {}: inconsistent bounds", self.object)))
        }
    }

    /// The parts as (first offset delta, byte position from `pos`, length), first part included.
    pub fn pieces(&self) -> Vec<(u64, u64, u64)> {
        let mut starts = vec![[0, 0]];
        starts.extend(self.parts.iter().copied());
        let ends = starts.iter().skip(1).map(|p| p[1]).chain(std::iter::once(self.len));
        starts.iter().zip(ends).map(|(s, end)| (s[0], s[1], end.saturating_sub(s[1]))).collect()
    }
}

/// How many live segments (and their bytes) an object holds. Every commit adds its
/// segments to its blob's object in the same write that indexes them; retention and
/// compaction take them off in the write that removes them. The collector deletes an
/// object only after dooming its record (so no commit can add to it again): a doomed
/// record is kept for [`DOOMED_TTL_MS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    pub refs: u64,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub doomed: bool,
}

/// An object whose last segment went at `freed_ms`: the collector deletes it a grace period later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeRecord {
    pub freed_ms: i64,
}

/// What the janitor has done to a topic, in total: shown by its describe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpkeepRecord {
    /// Segments retention removed, and their bytes.
    pub segments_expired: u64,
    pub bytes_expired: u64,
    /// Segments compaction merged away, and the merged segments it wrote.
    pub segments_merged: u64,
    pub segments_written: u64,
    /// When the janitor last changed something in the topic.
    pub last_change_ms: i64,
}

/// Where a resumable pass of the upkeep stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The last object name (collector) or topic name (upkeep pass) done.
    #[serde(default)]
    pub after: Option<String>,
}

/// How long a doomed object's record is kept: a commit of a blob into it would have to be
/// applied this long after the blob was written to slip past (committers re-put blobs they
/// have held for an hour, and a signed DynamoDB request expires after 15 minutes).
pub const DOOMED_TTL_MS: i64 = 30 * 24 * 3600 * 1000;

/// The stored answer of a publish made under an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// Hex of the request's fingerprint: tells a true retry from another request reusing the key.
    pub fp: String,
    pub results: Vec<Position>,
}

/// A write's condition that `topic` is still the live topic of its name, as read.
pub fn topic_check(topic: &TopicConfig) -> crate::ports::state::WriteOp {
    crate::ports::state::WriteOp::Check {
        key: crate::keys::topic_key(&topic.name),
        expect: crate::ports::state::Expect::Version(topic.version),
    }
}

pub fn encode<T: Serialize>(record: &T) -> Bytes {
    // Serializing these plain structs into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(record).unwrap_or_default())
}

pub fn decode<T: DeserializeOwned>(what: &str, value: &[u8]) -> Result<T, StorageError> {
    serde_json::from_slice(value).map_err(|e| StorageError::Corrupt(format!("{what} record: {e}")))
}

/// A segment index item's value: the record, then, for an inline segment, its bytes.
pub fn encode_segment_item(record: &SegmentRecord, inline: Option<&[u8]>) -> Bytes {
    let mut value = serde_json::to_vec(record).unwrap_or_default();
    if let Some(bytes) = inline {
        value.extend_from_slice(bytes);
    }
    Bytes::from(value)
}

/// The record of a segment index item and, for an inline segment, its bytes (a slice of
/// `value`, not a copy). Refuses trailing bytes on a segment that is not inline, and inline
/// bytes that are not exactly the segment's length from position 0.
pub fn decode_segment_item(value: &Bytes) -> Result<(SegmentRecord, Option<Bytes>), StorageError> {
    let mut records = serde_json::Deserializer::from_slice(value).into_iter::<SegmentRecord>();
    let record = match records.next() {
        Some(Ok(record)) => record,
        Some(Err(e)) => return Err(StorageError::Corrupt(format!("segment record: {e}"))),
        None => return Err(StorageError::Corrupt("segment record: empty".into())),
    };
    let end = records.byte_offset();
    let rest = value.len() - end;
    match record.inline {
        false if rest == 0 => Ok((record, None)),
        true if record.pos == 0 && record.parts.is_empty() && rest as u64 == record.len => {
            Ok((record, Some(value.slice(end..))))
        }
        _ => Err(StorageError::Corrupt(format!(
            "segment record of {}: {rest} bytes after it, inline {}, length {}",
            record.object, record.inline, record.len
        ))),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_corrupt_not_a_panic() {
        let head = HeadRecord { next: 5, start: 1, bytes: 99, max_ts: 7, deleted: false };
        assert_eq!(decode::<HeadRecord>("head", &encode(&head)).unwrap(), head);
        assert!(!String::from_utf8_lossy(&encode(&head)).contains("deleted"), "a live head is encoded as before");
        let tombstone = HeadRecord { deleted: true, ..head };
        assert_eq!(decode::<HeadRecord>("head", &encode(&tombstone)).unwrap(), tombstone);
        assert!(matches!(decode::<HeadRecord>("head", b"{nope"), Err(StorageError::Corrupt(_))));
    }

    #[test]
    fn a_head_carries_its_newest_entry_and_readers_of_the_record_alone_skip_it() {
        let head = HeadRecord { next: 5, start: 1, bytes: 3, max_ts: 7, deleted: false };
        assert_eq!(encode_head(&head, None), encode(&head), "no entry: the record as before");
        let record = SegmentRecord {
            next: 5,
            object: "inline-1".into(),
            pos: 0,
            len: 3,
            max_ts: 7,
            parts: Vec::new(),
            inline: true,
            counted: None,
            rewritten: false,
            moved_from: None,
        };
        let tail = Tail { base: 4, record, data: Bytes::from_static(b"abc") };
        let value = encode_head(&head, Some(&tail));
        assert_eq!(decode_head(&value).unwrap(), (head, Some(tail.clone())));
        assert_eq!(decode::<HeadRecord>("head", &value).unwrap(), head, "the record alone, as queues read it");
        // A binary from before entries were carried must fail to read it, not drop the entry.
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct OldHead {
            next: u64,
            start: u64,
        }
        assert!(decode::<OldHead>("head", &value).is_err(), "an older binary reads a head carrying an entry");
        assert!(decode::<OldHead>("head", &encode_head(&head, None)).is_ok(), "and still reads one without");
        assert_eq!(decode_segment_item(&tail.index_item()).unwrap(), (tail.record.clone(), Some(tail.data.clone())));
        // An entry no commit writes: not inline, or bytes of another length.
        for bad in [
            Tail { record: SegmentRecord { inline: false, ..tail.record.clone() }, ..tail.clone() },
            Tail { data: Bytes::from_static(b"ab"), ..tail.clone() },
            Tail { base: 5, ..tail.clone() },
        ] {
            assert!(matches!(decode_head(&encode_head(&head, Some(&bad))), Err(StorageError::Corrupt(_))), "{bad:?}");
        }
    }

    #[test]
    fn segment_items_carry_inline_bytes_after_the_record_and_nothing_else() {
        let mut record = SegmentRecord {
            next: 9,
            object: "o".into(),
            pos: 40,
            len: 3,
            max_ts: 1,
            parts: Vec::new(),
            inline: false,
            counted: None,
            rewritten: false,
            moved_from: None,
        };
        let plain = encode_segment_item(&record, None);
        assert_eq!(decode_segment_item(&plain).unwrap(), (record.clone(), None));
        assert_eq!(plain, encode(&record), "a segment in an object is stored as before");
        let exact = r#"{"next":9,"object":"o","pos":40,"len":3,"max_ts":1}"#;
        assert_eq!(plain, exact.as_bytes(), "a commit's item, byte for byte as before moves were recorded");
        let moved = SegmentRecord { rewritten: true, moved_from: Some(("c".into(), 7)), ..record.clone() };
        let item = encode_segment_item(&moved, None);
        assert!(String::from_utf8_lossy(&item).ends_with(r#""rewritten":true,"moved_from":["c",7]}"#));
        assert_eq!(decode_segment_item(&item).unwrap(), (moved, None));

        (record.pos, record.inline) = (0, true);
        let bytes: &[u8] = b"{\x00}";
        let inline = encode_segment_item(&record, Some(bytes));
        let (decoded, data) = decode_segment_item(&inline).unwrap();
        assert_eq!((decoded, data.as_deref()), (record.clone(), Some(bytes)));

        let short = encode_segment_item(&record, Some(b"{}"));
        let trailing = Bytes::from([plain.as_ref(), b"x"].concat());
        for bad in [short, trailing, Bytes::from_static(b""), Bytes::from_static(b"{nope")] {
            assert!(matches!(decode_segment_item(&bad), Err(StorageError::Corrupt(_))), "{bad:?}");
        }
    }
}

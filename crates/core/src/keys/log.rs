//! The log's and the janitor's keys: topics, heads, segments, idempotency records, blob
//! objects and the free list, the janitor's cursors and records, the time index.

use super::push_padded;
use crate::ports::objects::StorageError;
use crate::ports::state::Key;

/// Collections a topic's idempotency records are spread over.
pub const IDEMPOTENCY_SHARDS: u32 = 16;
/// Collections the free list is spread over.
pub const FREE_SHARDS: u32 = 8;

const TOPICS_PK: &str = "topics";
const PURGE_PK: &str = "purge";
/// The collection of the janitor's cursors.
pub const UPKEEP_PK: &str = "upkeep";

/// A topic by name.
pub fn topic_key(name: &str) -> Key {
    Key::new(TOPICS_PK, name)
}

/// The collection of every topic.
pub fn topics_pk() -> &'static str {
    TOPICS_PK
}

/// The purge order of the deleted topic `id`.
pub fn purge_key(id: u64) -> Key {
    Key::new(PURGE_PK, format!("{id:016x}"))
}

/// The collection of every topic purge order.
pub fn purge_pk() -> &'static str {
    PURGE_PK
}

/// The collection of a topic's partition heads.
pub fn heads_pk(id: u64) -> String {
    format!("{HEADS_PREFIX}{id:016x}")
}

/// What every [`heads_pk`] starts with (the table stream's filter in template.yaml passes these).
pub const HEADS_PREFIX: &str = "head#";

/// The topic id of a [`heads_pk`], `None` for any other partition key.
pub fn topic_of_heads_pk(pk: &str) -> Option<u64> {
    let hex = pk.strip_prefix(HEADS_PREFIX)?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok()).flatten()
}

/// A partition's head.
pub fn head_key(id: u64, partition: u32) -> Key {
    Key::new(heads_pk(id), partition_sk(partition))
}

fn partition_sk(partition: u32) -> String {
    let mut sk = String::with_capacity(10);
    push_padded(&mut sk, u64::from(partition), 10);
    sk
}

/// The partition a head's sort key names.
pub fn partition_of(sk: &str) -> Result<u32, StorageError> {
    sk.parse().map_err(|_| StorageError::Corrupt(format!("head sort key {sk:?} is not a partition")))
}

/// What every [`segments_pk`] starts with.
pub const SEGMENTS_PREFIX: &str = "seg#";
/// What every [`object_key`]'s partition key starts with.
pub const OBJECT_PREFIX: &str = "obj#";
/// What every [`free_pk`] starts with.
pub const FREE_PREFIX: &str = "free#";

/// The collection of a partition's segment index.
pub fn segments_pk(id: u64, partition: u32) -> String {
    format!("{SEGMENTS_PREFIX}{id:016x}#{partition}")
}

/// Zero-padded so that string order is offset order.
pub fn offset_sk(offset: u64) -> String {
    let mut sk = String::with_capacity(20);
    push_padded(&mut sk, offset, 20);
    sk
}

/// The offset an [`offset_sk`] names.
pub fn offset_of(sk: &str) -> Result<u64, StorageError> {
    sk.parse().map_err(|_| StorageError::Corrupt(format!("segment sort key {sk:?} is not an offset")))
}

/// The index entry of the segment starting at `base`.
pub fn segment_key(id: u64, partition: u32, base: u64) -> Key {
    Key::new(segments_pk(id, partition), offset_sk(base))
}

/// One of the [`IDEMPOTENCY_SHARDS`] collections of a topic's idempotency records.
pub fn idempotency_pk_shard(id: u64, shard: u32) -> String {
    format!("idem#{id:016x}#{shard:02}")
}

/// The idempotency record of a publish under `key`.
pub fn idempotency_key(id: u64, key: &str) -> Key {
    Key::new(idempotency_pk_shard(id, crate::hash::fnv1a_32(key.as_bytes()) % IDEMPOTENCY_SHARDS), key)
}

/// A blob object's record.
pub fn object_key(object: &str) -> Key {
    Key::new(format!("{OBJECT_PREFIX}{object}"), "-")
}

/// One of the [`FREE_SHARDS`] collections of the free list.
pub fn free_pk(shard: u32) -> String {
    format!("{FREE_PREFIX}{shard}")
}

/// An object's entry in the free list.
pub fn free_key(object: &str) -> Key {
    Key::new(free_pk(crate::hash::fnv1a_32(object.as_bytes()) % FREE_SHARDS), object)
}

/// The collector's listing cursor.
pub fn collector_cursor_key() -> Key {
    Key::new(UPKEEP_PK, "gc")
}

/// The upkeep pass's cursor.
pub fn pass_cursor_key() -> Key {
    Key::new(UPKEEP_PK, "pass")
}

/// What the janitor did to the topic `id`.
pub fn upkeep_record_key(id: u64) -> Key {
    Key::new(format!("upkeep#{id:016x}"), "-")
}

/// The collection of a partition's time index entries.
pub fn time_entries_pk(topic_id: u64, partition: u32) -> String {
    format!("time#{topic_id:016x}#{partition}")
}

/// A time as a sort key whose string order is the time's order, negative times included.
pub fn time_sk(ts: i64) -> String {
    format!("{:020}", (ts as u64) ^ (1 << 63))
}

/// The time index entry of the segment at `base`, settled with running maximum `run_max`.
pub fn time_entry_key(topic_id: u64, partition: u32, run_max: i64, base: u64) -> Key {
    Key::new(time_entries_pk(topic_id, partition), format!("{}#{}", time_sk(run_max), offset_sk(base)))
}

/// The collection of a topic's time cursors (one item per partition).
pub fn time_cursors_pk(topic_id: u64) -> String {
    format!("tcur#{topic_id:016x}")
}

/// A partition's time index cursor.
pub fn time_cursor_key(topic_id: u64, partition: u32) -> Key {
    Key::new(time_cursors_pk(topic_id), format!("{partition:010}"))
}

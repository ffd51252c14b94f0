//! Segments recently read, decoded: the next reads of the same segment (a work queue's
//! receives a few messages at a time, consumer groups and replays reading the same
//! partition) take their records from memory instead of reading, checking and decoding
//! the bytes again.
//!
//! Why an entry is never wrong: a segment's bytes are written once under a name that is
//! never reused (a blob's object name; an inline segment's random name, one per commit,
//! shared by the commit's partitions, each at position 0), and compaction writes merged
//! segments under new names, keeping each offset's event byte for byte. So the bytes of a
//! partition's segment starting at an offset, at (object, position, length), never change,
//! and the cache is keyed by all of that; the index still says which segments a read needs
//! and where the log starts. An entry is made only from bytes whose checksum held.

use std::sync::{Arc, Mutex};

use lru::LruCache;

use crate::segment::DecodedRecord;

/// A segment's identity: its partition and first offset, its object (or inline name),
/// position and length.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct SegmentKey {
    pub topic_id: u64,
    pub partition: u32,
    pub base: u64,
    pub object: String,
    pub pos: u64,
    pub len: u64,
}

/// A segment's records, shared by every read that uses them.
pub(crate) type Records = Arc<[DecodedRecord]>;

/// Decoded segments within a budget of bytes, the least recently used evicted first.
pub(crate) struct SegmentCache {
    budget: usize,
    inner: Mutex<Lru>,
}

struct Lru {
    entries: LruCache<SegmentKey, (Records, usize)>,
    bytes: usize,
}

/// What an entry is charged besides its segment's bytes (which its records' values and keys
/// point into): the key, the list and the map's slot.
const ENTRY_OVERHEAD: usize = 160;

impl SegmentCache {
    /// A cache of at most `budget` bytes of segments; 0 keeps nothing.
    pub(crate) fn new(budget: usize) -> Self {
        Self { budget, inner: Mutex::new(Lru { entries: LruCache::unbounded(), bytes: 0 }) }
    }

    pub(crate) fn get(&self, key: &SegmentKey) -> Option<Records> {
        if self.budget == 0 {
            return None;
        }
        self.lock().entries.get(key).map(|(records, _)| records.clone())
    }

    /// Keeps `records`, decoded from `key`'s bytes, evicting the least recently used
    /// segments to stay within the budget. A segment larger than the budget is not kept.
    pub(crate) fn put(&self, key: SegmentKey, records: Records) {
        let weight = key.len as usize
            + key.object.len()
            + ENTRY_OVERHEAD
            + records.len() * std::mem::size_of::<DecodedRecord>()
            + records.iter().map(|d| d.record.headers.len() * 64).sum::<usize>();
        if weight > self.budget {
            return;
        }
        let mut lru = self.lock();
        if let Some((_, old)) = lru.entries.put(key, (records, weight)) {
            lru.bytes -= old;
        }
        lru.bytes += weight;
        while lru.bytes > self.budget {
            match lru.entries.pop_lru() {
                Some((_, (_, w))) => lru.bytes -= w,
                None => break,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Record;
    use bytes::Bytes;

    fn key(object: &str, len: u64) -> SegmentKey {
        SegmentKey { topic_id: 1, partition: 0, base: 0, object: object.into(), pos: 0, len }
    }

    fn records(n: u32) -> Records {
        (0..n)
            .map(|i| DecodedRecord {
                offset_delta: i,
                record: Record {
                    timestamp_ms: 0,
                    key: None,
                    headers: Vec::new(),
                    value: Bytes::from_static(b"v"),
                    value_is_json: false,
                },
            })
            .collect()
    }

    #[test]
    fn the_least_recently_used_segments_go_first_and_the_budget_holds() {
        let cache = SegmentCache::new(10_000);
        cache.put(key("a", 3_000), records(2));
        cache.put(key("b", 3_000), records(2));
        assert!(cache.get(&key("a", 3_000)).is_some()); // "b" is now the least recently used
        cache.put(key("c", 3_000), records(2));
        assert!(cache.get(&key("b", 3_000)).is_none());
        assert_eq!(cache.get(&key("a", 3_000)).map(|r| r.len()), Some(2));
        assert!(cache.get(&key("c", 3_000)).is_some());
        assert!(cache.bytes() <= 10_000);
        // Another range of the same object is another segment, and so is another
        // partition's segment of the same inline name.
        assert!(cache.get(&SegmentKey { pos: 1, ..key("a", 3_000) }).is_none());
        assert!(cache.get(&SegmentKey { partition: 1, ..key("a", 3_000) }).is_none());
    }

    #[test]
    fn a_segment_over_the_budget_and_a_cache_of_nothing_keep_nothing() {
        let cache = SegmentCache::new(1_000);
        cache.put(key("a", 5_000), records(1));
        assert!(cache.get(&key("a", 5_000)).is_none());
        assert_eq!(cache.bytes(), 0);
        let none = SegmentCache::new(0);
        none.put(key("a", 10), records(1));
        assert!(none.get(&key("a", 10)).is_none());
    }
}

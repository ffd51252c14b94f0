//! How a group of publishes is laid out: one segment per partition touched, in one blob;
//! the state-store writes that index them, in chunks a write can hold; and where each
//! event landed once the segments' bases are known. Pure: the committer (`mod.rs`) does the I/O.

use super::*;
use crate::log::buffers::BufferPool;

/// Blobs kept for the next groups' (see [`crate::log::buffers`]): a group of a burst of
/// batched publishes is a few MB (a larger one is left to the allocator, and so is one
/// under 256 KiB, which may go inline: `DEFAULT_INLINE_SEGMENT_BYTES`).
static BLOBS: BufferPool = BufferPool::new(256 << 10, 16 << 20);

/// The segments of a group, encoded into one blob.
pub(super) struct Layout {
    pub(super) blob: Bytes,
    pub(super) segments: Vec<SegmentPlan>,
    /// For each request, for each event: (segment index, offset delta).
    pub(super) placement: Vec<Vec<(usize, u32)>>,
}

pub(super) struct SegmentPlan {
    pub(super) topic: String,
    pub(super) topic_id: u64,
    pub(super) partition: u32,
    /// Where the segment starts in the blob.
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) records: u64,
    pub(super) max_timestamp_ms: i64,
    /// The segment's parts after the first (see [`SegmentRecord::parts`]): a partition's
    /// share of a large group is cut into parts, so a reader of a few events reads one.
    pub(super) parts: Vec<[u64; 2]>,
}

/// Where a group's segments are kept: in a blob, or in their index items.
pub(super) enum Stored {
    Blob(BlobRef),
    /// In the index items, each segment's record naming the commit by this (see
    /// [`SegmentRecord::object`]): nothing was written before the index write.
    Inline(String),
}

/// Decides where a group's segments go, and writes their blob if they need one.
#[derive(Clone)]
pub(crate) struct Keeper {
    pub(crate) objects: Arc<dyn ObjectStore>,
    pub(crate) random: Arc<dyn Random>,
    /// A group of at most this many bytes goes inline.
    pub(crate) inline_max: usize,
    /// Bytes of a part of a large segment.
    pub(crate) part_bytes: usize,
}

impl Keeper {
    /// Inline if the group is small enough and the committer `idle` (see `write_stage`), else a
    /// blob; always a blob for segments in parts (an inline item holds one part).
    pub(super) async fn keep(&self, layout: &Layout, idle: bool) -> Result<Stored, StorageError> {
        let one_part = || layout.segments.iter().all(|s| s.parts.is_empty());
        if idle && layout.blob.len() <= self.inline_max && one_part() {
            return Ok(Stored::Inline(format!("inline-{:016x}", self.random.next_u64())));
        }
        self.objects.put(layout.blob.clone()).await.map(Stored::Blob)
    }
}

impl Stored {
    /// The blob, for a group kept in one.
    pub(super) fn blob(&self) -> Option<&BlobRef> {
        match self {
            Self::Blob(blob) => Some(blob),
            Self::Inline(_) => None,
        }
    }

    /// The index entry of segment `s` for a commit that makes `next` the head, and its bytes
    /// if inline.
    pub(super) fn entry(&self, layout: &Layout, s: &SegmentPlan, next: u64) -> (SegmentRecord, Option<Bytes>) {
        let (object, pos, inline) = match self {
            Self::Blob(blob) => (blob.object.clone(), blob.position + s.start, false),
            Self::Inline(name) => (name.clone(), 0, true),
        };
        let parts = s.parts.clone();
        let (len, max_ts) = (s.len, s.max_timestamp_ms);
        let entry = SegmentRecord {
            next,
            object,
            pos,
            len,
            max_ts,
            parts,
            inline,
            counted: None,
            rewritten: false,
            moved_from: None,
        };
        let bytes = inline.then(|| layout.blob.slice(s.start as usize..(s.start + s.len) as usize));
        (entry, bytes)
    }

    /// Whether `found`, read back from the index, is the entry this group wrote for `s`.
    pub(super) fn wrote(&self, s: &SegmentPlan, found: &SegmentRecord) -> bool {
        match self {
            Self::Blob(blob) => {
                let at = blob.position + s.start;
                // Or moved since, alone and unchanged, by compaction (it keeps where it came from).
                let moved = found.moved_from.as_ref().is_some_and(|(object, pos)| *object == blob.object && *pos == at);
                !found.inline && ((found.object == blob.object && found.pos == at) || moved)
            }
            Self::Inline(name) => found.object == *name && found.inline,
        }
    }
}

/// What each operation of a commit's write is, to act on the one whose condition failed.
#[derive(Debug, Clone, Copy)]
pub(super) enum OpKind {
    Topic(u64),
    Head(usize),
    Segment(usize),
    Record,
    Object,
}

pub(super) struct Plan {
    pub(super) ops: Vec<WriteOp>,
    pub(super) kinds: Vec<OpKind>,
    /// The head (and its version) each segment's partition has once the write lands, and the
    /// entry it then carries.
    pub(super) heads: Vec<(HeadRecord, u64, Option<Tail>)>,
}

/// Whether two requests of the group carry the same idempotency key (concurrent retries).
pub(super) fn repeats_a_key(group: &[Pending]) -> bool {
    let mut keys: Vec<(u64, &str)> =
        group.iter().filter_map(|p| p.idempotency.as_ref().map(|i| (p.topic.id, i.key.as_str()))).collect();
    let n = keys.len();
    keys.sort_unstable();
    keys.dedup();
    keys.len() < n
}

/// Whether the group names one topic under two ids (a cached config and a re-created topic):
/// one write cannot check both records of one name.
pub(super) fn two_incarnations(group: &[Pending]) -> bool {
    let mut topics: Vec<(&str, u64)> = group.iter().map(|p| (p.topic.name.as_str(), p.topic.id)).collect();
    topics.sort_unstable();
    topics.dedup();
    topics.windows(2).any(|w| w[0].0 == w[1].0)
}

/// Operations one write of the whole group would need.
pub(super) fn ops_needed(group: &[Pending], layout: &Layout) -> usize {
    let mut topics: Vec<u64> = layout.segments.iter().map(|s| s.topic_id).collect();
    topics.dedup();
    topics.len() + 2 * layout.segments.len() + group.iter().filter(|p| p.idempotency.is_some()).count() + 1
}

/// Splits a layout's segments into runs that each fit one write: at worst each
/// segment needs its head, its index item and a check of its own topic, and each
/// write the object's record.
pub(super) fn chunks(group: &[Pending], layout: &Layout) -> Vec<Range<usize>> {
    let n = layout.segments.len();
    let per_chunk = if ops_needed(group, layout) <= MAX_WRITE_OPS { n.max(1) } else { (MAX_WRITE_OPS - 1) / 3 };
    (0..n).step_by(per_chunk).map(|s| s..(s + per_chunk).min(n)).collect()
}

/// Where each event of each request landed, given the segments' base offsets.
pub(super) fn positions(layout: &Layout, bases: &[u64]) -> Vec<Vec<Position>> {
    layout
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
        .collect()
}

/// Groups the events of every request by (topic, partition), in arrival order, into one blob.
pub(super) fn layout(group: &[Pending], part_bytes: usize) -> Layout {
    // (topic, topic id, partition) → (request, event) indices, in arrival order.
    type Members = Vec<(usize, usize)>;
    let mut by_partition: BTreeMap<(&str, u64, u32), Members> = BTreeMap::new();
    for (ri, p) in group.iter().enumerate() {
        for (ei, (partition, _)) in p.events.iter().enumerate() {
            by_partition.entry((p.topic.name.as_str(), p.topic.id, *partition)).or_default().push((ri, ei));
        }
    }
    let total: usize = group.iter().map(Pending::size).sum();
    let mut blob = BLOBS.take(total + 64 * by_partition.len());
    let mut placement: Vec<Vec<(usize, u32)>> = group.iter().map(|p| vec![(0, 0); p.events.len()]).collect();
    let mut segments = Vec::with_capacity(by_partition.len());
    for (seg, ((topic, topic_id, partition), members)) in by_partition.into_iter().enumerate() {
        let start = blob.len();
        let records: Vec<&Record> = members.iter().map(|&(ri, ei)| &group[ri].events[ei].1).collect();
        let parts = encode_parts(&records, part_bytes, &mut blob);
        for (delta, &(ri, ei)) in members.iter().enumerate() {
            placement[ri][ei] = (seg, delta as u32);
        }
        segments.push(SegmentPlan {
            topic: topic.to_owned(),
            topic_id,
            partition,
            start: start as u64,
            len: parts.len as u64,
            records: records.len() as u64,
            max_timestamp_ms: parts.max_timestamp_ms,
            parts: parts.starts,
        });
    }
    Layout { blob: BLOBS.freeze(blob), segments, placement }
}

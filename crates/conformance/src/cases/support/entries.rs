//! A partition's index entries as readers find them: its index items, and the newest entry
//! if its head carries it (a commit made as one write of the head; docs/DESIGN.md, "One
//! partition, one write").

use sluice_core::keys;
use sluice_core::layout::{self, SegmentRecord};
use sluice_core::ports::state::{Query, StateStore};

/// Every entry of partition `partition` of topic `id`, by base: the index items, then the
/// head's entry unless the index already holds it.
pub async fn entries(store: &dyn StateStore, id: u64, partition: u32) -> Vec<(u64, SegmentRecord)> {
    let items = store.query(&Query::all(keys::segments_pk(id, partition), 10_000)).await.expect("query the index");
    let mut out: Vec<(u64, SegmentRecord)> = items
        .items
        .iter()
        .map(|i| {
            let base = keys::offset_of(&i.key.sk).expect("an offset");
            (base, layout::decode_segment_item(&i.value).expect("an index item").0)
        })
        .collect();
    let head = store.get(&keys::head_key(id, partition)).await.expect("read the head");
    let tail = head.and_then(|h| layout::decode_head(&h.value).expect("decode the head").1);
    if let Some(tail) = tail.filter(|t| out.last().is_none_or(|(base, _)| *base < t.base)) {
        out.push((tail.base, tail.record));
    }
    out
}

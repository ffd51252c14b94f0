//! Inline and blob segments, and reads that fetch one part of a large commit.

use std::sync::Arc;

use bytes::Bytes;
use sluice_core::layout::{self};
use sluice_core::{Log, LogConfig, Position, ReadRequest, SystemClock};

use super::fixtures::*;
use crate::{unique_topic, Backend};

/// A commit of few bytes keeps its segment in its index item (no blob written, one write);
/// a larger one writes a blob. A partition holding both replays densely with exact bytes
/// from any offset, inside either kind of segment, in this process and in a fresh one.
pub async fn given_small_and_large_commits_then_small_ones_are_inline_and_replay_spans_both(backend: &dyn Backend) {
    let (store, objects) = backend.open().await;
    let counted = crate::cases::support::faults::ScriptedObjects::new(objects);
    let config = LogConfig { inline_segment_bytes: 4 << 10, ..LogConfig::default() };
    let log = Log::new(store.clone(), counted.clone(), Arc::new(SystemClock), config);
    let topic = unique_topic("inline");
    let (created, _) = log.create_topic(&topic, spec(1)).await.unwrap();
    let big = |i: usize| format!("{i}:{}", "b".repeat(1000));
    let mut expected = Vec::new();
    for round in 0..3 {
        for i in 0..3 {
            let value = format!("small {round}.{i}");
            log.publish(&topic, vec![event(&value, 0)], None).await.unwrap();
            expected.push(value);
        }
        assert_eq!(counted.puts().len(), round, "small commits write no blob");
        let batch: Vec<String> = (0..8).map(big).collect();
        log.publish(&topic, batch.iter().map(|v| event(v, 0)).collect(), None).await.unwrap();
        expected.extend(batch);
        assert_eq!(counted.puts().len(), round + 1, "8 KB of events go to a blob");
    }
    let item = |offset: u64| {
        let store = store.clone();
        async move {
            let item =
                store.get(&sluice_core::keys::segment_key(created.id, 0, offset)).await.unwrap().expect("indexed");
            layout::decode_segment_item(&item.value).unwrap()
        }
    };
    let (first, data) = item(0).await;
    assert!(first.inline && data.is_some_and(|d| d.len() as u64 == first.len), "{first:?}");
    let (batch, data) = item(3).await;
    assert!(!batch.inline && data.is_none(), "{batch:?}");

    let all: Vec<(u64, String)> = expected.iter().enumerate().map(|(o, v)| (o as u64, v.clone())).collect();
    assert_eq!(values(&read_all(&log, &topic, 0).await.unwrap()), all);
    // From inside a blob's segment and from an inline one, a few at a time, as queues read.
    for from in [1u64, 5, 11, 12, 20] {
        let mut at = from;
        while at < all.len() as u64 {
            let request = ReadRequest { max_events: 3, ..read_request(&topic, at) };
            let page = log.read(&request).await.unwrap();
            let got: Vec<(u64, Bytes)> = page.events.into_iter().map(|e| (e.offset, e.record.value)).collect();
            assert_eq!(values(&got), all[at as usize..(at as usize + 3).min(all.len())], "from {at}");
            at = page.next_offset;
        }
    }
    // A fresh process (no cache of any kind) reads the same.
    let (store2, objects2) = backend.open().await;
    let other = Log::new(store2, objects2, Arc::new(SystemClock), LogConfig::default());
    assert_eq!(values(&read_all(&other, &topic, 0).await.unwrap()), all);
}

fn read_request(topic: &str, offset: u64) -> ReadRequest {
    ReadRequest { topic: topic.to_owned(), partition: 0, offset, max_events: 10_000, max_bytes: 6 << 20, wait_ms: 0 }
}

/// A partition's share of a large commit is cut into parts of about `PART_BYTES`, listed in
/// its index item, so a read of a few events (a receive of 10, a small poll) fetches and
/// decodes the part holding them, not the whole segment; reads across parts see every event.
pub async fn given_a_commit_larger_than_a_part_then_a_read_of_a_few_events_fetches_one_part(backend: &dyn Backend) {
    let (store, objects) = backend.open().await;
    let counted = crate::cases::support::faults::ScriptedObjects::new(objects);
    let log = Log::new(store.clone(), counted.clone(), Arc::new(SystemClock), crate::log_config());
    let topic = unique_topic("parts");
    let (created, _) = log.create_topic(&topic, spec(1)).await.unwrap();
    // 700 events of about 1 KiB in one publish: one segment of about 700 KiB, in three parts.
    let all: Vec<(u64, String)> = (0..700).map(|i| (i, format!("{i}:{}", "p".repeat(1000)))).collect();
    log.publish(&topic, all.iter().map(|(_, v)| event(v, 0)).collect(), None).await.unwrap();
    let item = store.get(&sluice_core::keys::segment_key(created.id, 0, 0)).await.unwrap().expect("indexed");
    let (record, _) = layout::decode_segment_item(&item.value).unwrap();
    assert_eq!(record.parts.len(), 2, "{record:?}");

    let part = sluice_core::segment::PART_BYTES;
    for from in [0u64, 300, 600] {
        let (reads, bytes) = (counted.reads(), counted.read_bytes());
        let request = ReadRequest { max_events: 10, ..read_request(&topic, from) };
        let page = log.read(&request).await.unwrap();
        let got: Vec<(u64, Bytes)> = page.events.into_iter().map(|e| (e.offset, e.record.value)).collect();
        assert_eq!(values(&got), all[from as usize..from as usize + 10], "from {from}");
        assert_eq!(counted.reads() - reads, 1, "one part read from {from}");
        assert!(counted.read_bytes() - bytes <= part + 4096, "one part's bytes from {from}");
    }
    // Across the parts' edges, in pages of 97, and from a fresh process.
    let mut at = 0;
    while at < 700 {
        let page = log.read(&ReadRequest { max_events: 97, ..read_request(&topic, at) }).await.unwrap();
        let got: Vec<(u64, Bytes)> = page.events.into_iter().map(|e| (e.offset, e.record.value)).collect();
        assert_eq!(values(&got), all[at as usize..(at as usize + 97).min(700)], "from {at}");
        at = page.next_offset;
    }
    let (store2, objects2) = backend.open().await;
    let other = Log::new(store2, objects2, Arc::new(SystemClock), LogConfig::default());
    assert_eq!(values(&read_all(&other, &topic, 0).await.unwrap()), all);
}

/// One commit's inline segments share one name, each at position 0 of its own index item:
/// two partitions' segments of equal length differ only by partition. A process reading
/// both (its segment cache keyed by name, position and length alone gave partition 1's
/// events for partition 0) reads each partition's own, again and again.
pub async fn given_one_commit_of_equal_inline_segments_on_two_partitions_then_each_partition_reads_its_own(
    backend: &dyn Backend,
) {
    let config = LogConfig { inline_segment_bytes: 4 << 10, ..LogConfig::default() };
    let (store, objects) = backend.open().await;
    let log = Log::new(store, objects, Arc::new(SystemClock), config);
    let topic = unique_topic("inline-twins");
    log.create_topic(&topic, spec(2)).await.unwrap();
    let at = log.publish(&topic, vec![event("left", 0), event("rite", 1)], None).await.unwrap();
    assert_eq!(at, vec![Position { partition: 0, offset: 0 }, Position { partition: 1, offset: 0 }]);
    for partition in [0, 1, 0, 1] {
        let page = log.read(&ReadRequest { partition, ..read_request(&topic, 0) }).await.unwrap();
        let got: Vec<(u32, Bytes)> = page.events.into_iter().map(|e| (e.partition, e.record.value)).collect();
        let value = if partition == 0 { "left" } else { "rite" };
        assert_eq!(got, vec![(partition, Bytes::from(value))], "partition {partition}");
    }
}

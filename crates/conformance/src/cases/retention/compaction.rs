//! Compaction, and readers replaying while compaction and retention run.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::keys;
use sluice_core::ports::state::Query;
use sluice_core::upkeep::{JanitorConfig, STEP_BUDGET};
use sluice_core::{Error, ManualClock, ReadRequest, TopicSpec};

use super::fixtures::*;
use crate::cases::support::faults::ScriptedObjects;
use crate::{unique_topic, Backend};

pub async fn given_many_one_event_segments_then_compaction_keeps_every_event_and_replay_reads_few_objects(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let count = (backend.large_count() / 10) as u64;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("compact");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..count {
        // Varied sizes and times, so merged parts split at odd places.
        let value = format!("{i}:{}", "x".repeat((i % 97) as usize));
        log.publish(&topic, vec![event(value, 0, Some(t0 + i as i64))], None).await.unwrap();
    }
    let before = replay(&log, &topic, 0, 0).await.unwrap();
    assert_eq!(before.len() as u64, count);
    let config = JanitorConfig { grace_ms: 0, compaction_target_bytes: 8 << 20, ..JanitorConfig::default() };
    let janitor = janitor(&stores, &clock, config);
    for _ in 0..100 {
        if janitor.run(STEP_BUDGET).await.unwrap().segments_merged == 0 {
            break;
        }
    }
    // (Counted in the index: on a shared backend other cases' janitors merge too.)
    let id = log.describe_topic(&topic).await.unwrap().0.id;
    let index = stores.0.query(&Query::all(keys::segments_pk(id, 0), 1000)).await.unwrap().items.len();
    assert!(index <= 4, "{count} one-event segments compacted into {index}");
    // Replay through a log whose object reads are counted.
    let counting = ScriptedObjects::new(stores.1.clone());
    let reader = log_at((stores.0.clone(), counting.clone()), &clock);
    let after = replay(&reader, &topic, 0, 0).await.unwrap();
    assert_eq!(after, before, "the same events, byte for byte, at the same offsets");
    let reads = counting.reads();
    assert!(reads <= 36, "replaying {count} compacted events took {reads} object reads");
    // A read in the middle fetches only the parts it needs: one (by a process that has not
    // read the partition yet); the same read again takes that part's records from memory.
    let fresh = log_at((stores.0.clone(), counting.clone()), &clock);
    let mid_request = ReadRequest { max_events: 5, ..request(&topic, 0, count / 2) };
    for (i, expected_reads) in [1, 0].into_iter().enumerate() {
        let before_mid = counting.reads();
        let mid = fresh.read(&mid_request).await.unwrap();
        let offsets = mid.events.iter().map(|e| e.offset).collect::<Vec<_>>();
        assert_eq!(offsets, (count / 2..count / 2 + 5).collect::<Vec<_>>());
        assert_eq!(counting.reads() - before_mid, expected_reads, "read {i}: parts read");
        let values = mid.events.iter().map(|e| (e.offset, e.record.value.clone())).collect::<Vec<_>>();
        assert_eq!(values, before[(count / 2) as usize..][..5], "read {i}: the same events");
    }
    // The offset of a time still resolves exactly.
    let at = reader.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(t0 + 1234 % count as i64)).await.unwrap();
    assert_eq!(at, 1234 % count);
    // The old objects are collected (the grace period is 0), the new ones serve reads.
    janitor.run(STEP_BUDGET).await.unwrap();
    assert_eq!(replay(&log, &topic, 0, 0).await.unwrap(), before);
}

/// Size retention of a compacted run: the merged segment (re-encoded in fewer bytes than its
/// events were counted at when published) goes with what the partition's count held for it,
/// so the count stays what the segments left hold, and the bound keeps what it should.
pub async fn given_a_compacted_run_removed_by_size_retention_then_the_byte_count_stays_exact(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let values: Vec<String> = (0..20).map(|i| format!("{i}:{}", "x".repeat(40))).collect();
    // The bytes the twenty one-event segments count, on a probe topic without a bound.
    let probe = unique_topic("probe");
    log.create_topic(&probe, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for v in &values {
        log.publish(&probe, vec![event(v.clone(), 0, Some(t0))], None).await.unwrap();
    }
    let counted = log.describe_topic(&probe).await.unwrap().1[0].bytes;
    // A bound they fit under, with little room left.
    let topic = unique_topic("compact-sized");
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: Some(counted as i64 + 10) };
    log.create_topic(&topic, spec).await.unwrap();
    for v in &values {
        log.publish(&topic, vec![event(v.clone(), 0, Some(t0))], None).await.unwrap();
    }
    let config = JanitorConfig { grace_ms: 0, compaction_target_bytes: 8 << 20, ..JanitorConfig::default() };
    let janitor = janitor(&stores, &clock, config);
    janitor.run(STEP_BUDGET).await.unwrap();
    let id = log.describe_topic(&topic).await.unwrap().0.id;
    assert!(live_segments(&stores, id, 0).await.len() < 20, "the run was compacted");
    // One more event puts the partition over its bound: the merged segment goes.
    log.publish(&topic, vec![event("over".repeat(10), 0, Some(t0))], None).await.unwrap();
    janitor.run(STEP_BUDGET).await.unwrap();
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert!(states[0].log_start_offset > 0, "size retention removed the merged segment");
    let held: u64 =
        live_segments(&stores, id, states[0].log_start_offset).await.iter().map(|s| s.counted_bytes()).sum();
    assert_eq!(states[0].bytes, held, "the partition's count is what its segments hold");
}

/// The index entries of partition 0 of topic `id` that hold offsets at or above `start`.
async fn live_segments(stores: &crate::Stores, id: u64, start: u64) -> Vec<sluice_core::layout::SegmentRecord> {
    let entries = crate::cases::support::entries::entries(stores.0.as_ref(), id, 0).await;
    entries.into_iter().map(|(_, r)| r).filter(|r| r.next > start).collect()
}

pub async fn given_readers_replaying_during_compaction_and_retention_then_no_error_no_gap_same_bytes(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let clock = Arc::new(ManualClock::new(real_now()));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("busy-upkeep");
    const BOUND: i64 = 40 << 10;
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: Some(BOUND) };
    log.create_topic(&topic, spec).await.unwrap();
    let value_of = |o: u64| Bytes::from(format!("{o}:{}", "y".repeat((o % 300) as usize)));
    let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // One publisher (so offsets follow publish order), event by event.
    let publisher = {
        let (log, topic, published) = (log.clone(), topic.clone(), published.clone());
        tokio::spawn(async move {
            for o in 0..600u64 {
                let at = log.publish(&topic, vec![event(value_of(o), 0, None)], None).await.unwrap();
                assert_eq!(at[0].offset, o);
                published.store(o + 1, Ordering::SeqCst);
            }
        })
    };
    let mut readers = Vec::new();
    for r in 0..3 {
        let (stores, clock, topic, published) =
            (backend.open_with(clock.clone()).await, clock.clone(), topic.clone(), published.clone());
        readers.push(tokio::spawn(async move {
            let log = log_at(stores, &clock);
            let (mut checked, mut out_of_range) = (0usize, 0usize);
            let mut offset = 0;
            loop {
                let done = published.load(Ordering::SeqCst) == 600;
                let page = ReadRequest { max_events: 7 + r * 13, ..request(&topic, 0, offset) };
                match log.read(&page).await {
                    Ok(batch) => {
                        for (i, e) in batch.events.iter().enumerate() {
                            assert_eq!(e.offset, offset + i as u64, "no gap");
                            assert_eq!(e.record.value, value_of(e.offset), "the bytes published");
                            checked += 1;
                        }
                        offset = batch.next_offset;
                    }
                    // Retention passed this reader: the answer names the new start, where it goes on.
                    Err(Error::OffsetOutOfRange { log_start_offset, .. }) if log_start_offset > offset => {
                        out_of_range += 1;
                        offset = log_start_offset;
                    }
                    Err(e) => panic!("reader {r} at {offset}: {e:?}"),
                }
                if done && offset == 600 {
                    return (checked, out_of_range);
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let config = JanitorConfig { grace_ms: 0, compaction_target_bytes: 16 << 10, ..JanitorConfig::default() };
    let janitor = janitor(&stores, &clock, config);
    let mut upkeep = sluice_core::upkeep::UpkeepReport::default();
    while !publisher.is_finished() {
        upkeep.add(&janitor.step(STEP_BUDGET).await.unwrap());
        tokio::task::yield_now().await;
    }
    publisher.await.unwrap();
    upkeep.add(&janitor.run(STEP_BUDGET).await.unwrap());
    for r in readers {
        let (checked, _) = r.await.unwrap();
        assert!(checked > 0);
    }
    let (config, states) = log.describe_topic(&topic).await.unwrap();
    // (Seen in the topic: on a shared backend other cases' janitors work on it too.)
    let index = stores.0.query(&Query::all(keys::segments_pk(config.id, 0), 1000)).await.unwrap().items.len();
    assert!(states[0].log_start_offset > 0, "retention ran under the readers: {upkeep:?}");
    assert!(index < 100, "compaction ran under the readers: {index} segments left of 600; {upkeep:?}");
    let kept = replay(&log, &topic, 0, states[0].log_start_offset).await.unwrap();
    assert_eq!(kept.len() as u64, 600 - states[0].log_start_offset);
    assert!(kept.iter().all(|(o, v)| *v == value_of(*o)));
}

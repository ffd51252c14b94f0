//! A stale committer under one-write commits (`LogConfig::single_write_commits`) writes out
//! the entry its cached head carried, after compaction merged that entry into a run starting
//! below it: two index items then cover the same offsets (the same events). Readers, the
//! next compaction and retention must take it in their stride (docs/DESIGN.md, "One
//! partition, one write").

use std::sync::Arc;
use std::time::Duration;

use sluice_core::keys;
use sluice_core::layout;
use sluice_core::ports::state::WriteOp;
use sluice_core::upkeep::{JanitorConfig, STEP_BUDGET};
use sluice_core::{Log, LogConfig, ManualClock, TopicSpec};

use super::fixtures::*;
use crate::{unique_topic, Backend, Stores};

pub async fn given_a_stale_committer_rewriting_an_entry_compaction_merged_then_reads_stay_dense_and_exact(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let (clock, stores, other, stale) = two_committers(backend, t0).await;
    let topic = unique_topic("rewritten");
    let spec = TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None };
    other.create_topic(&topic, spec).await.unwrap();
    other.publish(&topic, vec![event("x", 0, Some(t0))], None).await.unwrap();
    // `stale` commits offset 1 and keeps the head it left, carrying that entry, in its cache.
    stale.publish(&topic, vec![event("a", 0, Some(t0))], None).await.unwrap();
    for v in ["b", "c", "d", "e", "f"] {
        other.publish(&topic, vec![event(v, 0, Some(t0))], None).await.unwrap();
    }
    let config = JanitorConfig { grace_ms: 0, compaction_target_bytes: 8 << 20, ..JanitorConfig::default() };
    let janitor = janitor(&stores, &clock, config);
    for _ in 0..20 {
        if janitor.run(STEP_BUDGET).await.unwrap().segments_merged == 0 {
            break;
        }
    }
    let id = other.describe_topic(&topic).await.unwrap().0.id;
    let key_1 = keys::segment_key(id, 0, 1);
    let at_1 = || stores.0.get(&key_1);
    assert!(at_1().await.unwrap().is_none(), "compaction merged offset 1 into a run starting at 0");
    // The stale committer writes its cached entry out again, fails its head's condition, and commits at the end.
    let acked = stale.publish(&topic, vec![event("z", 0, Some(t0))], None).await.unwrap();
    assert_eq!(acked[0].offset, 7);
    assert!(at_1().await.unwrap().is_some(), "the stale entry was written out again, over the merged run");
    let expected: Vec<(u64, String)> =
        ["x", "a", "b", "c", "d", "e", "f", "z"].iter().enumerate().map(|(i, v)| (i as u64, v.to_string())).collect();
    let values = |events: Vec<(u64, bytes::Bytes)>| -> Vec<(u64, String)> {
        events.into_iter().map(|(o, v)| (o, String::from_utf8_lossy(&v).into_owned())).collect()
    };
    for from in 0..8 {
        let read = values(replay(&other, &topic, 0, from).await.unwrap());
        assert_eq!(read, expected[from as usize..], "from {from}: dense, each event once");
    }
    // The next compaction and retention work over the overlap.
    for _ in 0..20 {
        if janitor.run(STEP_BUDGET).await.unwrap().segments_merged == 0 {
            break;
        }
    }
    assert_eq!(values(replay(&other, &topic, 0, 0).await.unwrap()), expected, "after compacting again");
    clock.set(t0 + 2 * HOUR);
    janitor.run(STEP_BUDGET).await.unwrap();
    let (_, states) = other.describe_topic(&topic).await.unwrap();
    assert_eq!((states[0].log_start_offset, states[0].high_watermark), (8, 8), "all of it expired");
    let left = crate::cases::support::entries::entries(stores.0.as_ref(), id, 0).await;
    assert!(left.iter().all(|(_, r)| r.next <= 8), "nothing above the start");
    let acked = stale.publish(&topic, vec![event("after", 0, Some(t0 + 2 * HOUR))], None).await.unwrap();
    assert_eq!(acked[0].offset, 8, "dense after retention");
    assert_eq!(values(replay(&other, &topic, 0, 8).await.unwrap()), vec![(8, "after".to_string())]);
}

/// An older build's retention advanced the log start past a segment whose removal then lost
/// to a merge of that segment into a run (the merged item straddles the start, below it and
/// above: retention now removes that segment in the head's write, which such a merge fails); a
/// stale committer then writes out again an entry of the run above the start. Compaction
/// must find it covered by the straddling item, which it reads though it starts below the
/// start, and not merge it with the segment after it: two merged items overlapping in part.
pub async fn given_a_write_out_covered_by_an_item_straddling_the_log_start_then_compaction_removes_it(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let (clock, stores, other, stale) = two_committers(backend, t0).await;
    let topic = unique_topic("straddled");
    let spec = TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None };
    other.create_topic(&topic, spec).await.unwrap();
    for v in ["x", "y"] {
        other.publish(&topic, vec![event(v, 0, Some(t0))], None).await.unwrap();
    }
    // `stale` commits offset 2 and keeps the head it left, carrying that entry, in its cache.
    stale.publish(&topic, vec![event("a", 0, Some(t0))], None).await.unwrap();
    other.publish(&topic, vec![event("b", 0, Some(t0))], None).await.unwrap();
    let config = JanitorConfig { grace_ms: 0, compaction_target_bytes: 8 << 20, ..JanitorConfig::default() };
    let janitor = janitor(&stores, &clock, config);
    let compact = || async {
        for _ in 0..20 {
            if janitor.run(STEP_BUDGET).await.unwrap().segments_merged == 0 {
                break;
            }
        }
    };
    compact().await;
    let id = other.describe_topic(&topic).await.unwrap().0.id;
    let key_2 = keys::segment_key(id, 0, 2);
    let at_2 = || stores.0.get(&key_2);
    assert!(at_2().await.unwrap().is_none(), "compaction merged offset 2 into a run starting at 0");
    // Retention's advance of the start to 1, whose removal of 0..1 lost to that merge.
    let head_key = keys::head_key(id, 0);
    let item = stores.0.get(&head_key).await.unwrap().expect("the head");
    let (mut head, tail) = layout::decode_head(&item.value).unwrap();
    head.start = 1;
    let op = WriteOp::replace(head_key, layout::encode_head(&head, tail.as_ref()), Some(item.version));
    stores.0.write(vec![op]).await.unwrap();
    let acked = stale.publish(&topic, vec![event("z", 0, Some(t0))], None).await.unwrap();
    assert_eq!(acked[0].offset, 4);
    assert!(at_2().await.unwrap().is_some(), "the stale entry was written out again, above the start");
    compact().await;
    let mut end = 0;
    for (base, record) in crate::cases::support::entries::entries(stores.0.as_ref(), id, 0).await {
        assert!(base >= end || record.next <= end, "{base}..{} overlaps in part what ends at {end}", record.next);
        end = end.max(record.next);
    }
    assert!(at_2().await.unwrap().is_none(), "the covered write-out is gone");
    let expected: Vec<(u64, String)> =
        ["y", "a", "b", "z"].iter().enumerate().map(|(i, v)| (i as u64 + 1, v.to_string())).collect();
    let read = replay(&other, &topic, 0, 1).await.unwrap();
    let read: Vec<(u64, String)> =
        read.into_iter().map(|(o, v)| (o, String::from_utf8_lossy(&v).into_owned())).collect();
    assert_eq!(read, expected, "dense, each event once");
}

/// A clock at `t0`, the stores, and two logs on them committing in one write: `other`, and
/// `stale`, which keeps the heads it leaves (and the entries they carry) for ten minutes.
async fn two_committers(backend: &dyn Backend, t0: i64) -> (Arc<ManualClock>, Stores, Log, Log) {
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let other = log_at(stores.clone(), &clock);
    let config = LogConfig {
        inline_segment_bytes: 4 << 10,
        single_write_commits: true,
        topic_cache_ttl: Duration::from_secs(600),
        ..crate::log_config()
    };
    let stale = Log::new(stores.0.clone(), stores.1.clone(), clock.clone(), config);
    (clock, stores, other, stale)
}

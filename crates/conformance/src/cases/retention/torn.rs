//! Index queries torn by a swap, and offset lookup by time over compacted segments.

use std::sync::Arc;

use sluice_core::upkeep::{JanitorConfig, STEP_BUDGET};
use sluice_core::{ManualClock, TopicSpec};

use super::fixtures::*;
use crate::cases::support::faults::{QueryAction, Scripted};
use crate::{unique_topic, Backend};

pub async fn given_an_index_query_torn_by_a_swap_then_retention_stops_at_the_hole(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("torn");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None })
        .await
        .unwrap();
    // Offsets 0 and 4 are two hours old; 1..=3 are fresh and must stay.
    for at in [t0 - 2 * HOUR, t0, t0, t0, t0 - 2 * HOUR] {
        log.publish(&topic, vec![event("e", 0, Some(at))], None).await.unwrap();
    }
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    // A query that misses 1..=3, as one racing a compaction's swap on DynamoDB can.
    let torn = Scripted::new(stores.0.clone());
    torn.at_query(sluice_core::keys::segments_pk(config.id, 0), QueryAction::Hide { offsets: 1..4, skip: 0 });
    sluice_core::upkeep::retention::retain(
        torn.as_ref(),
        &config,
        0,
        t0,
        JanitorConfig::default().default_retention_ms,
    )
    .await
    .unwrap();
    assert_eq!(torn.pending(), 0, "the torn query happened");
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert_eq!(states[0].log_start_offset, 1, "only the old segment before the hole goes");
    let kept: Vec<u64> = replay(&log, &topic, 0, 1).await.unwrap().into_iter().map(|(o, _)| o).collect();
    assert_eq!(kept, vec![1, 2, 3, 4]);
}

pub async fn given_compacted_segments_then_offset_by_time_uses_the_time_index_and_answers_exactly(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("by-time");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    // Timestamps mostly growing, some out of order (a late event, a clock jump back).
    const N: i64 = 1000;
    let stamps: Vec<i64> = (0..N).map(|i| t0 + i * 1000 - if i % 37 == 5 { 90_000 } else { 0 }).collect();
    for (i, &at) in stamps.iter().enumerate() {
        log.publish(&topic, vec![event(format!("t{i}:{}", "z".repeat(200)), 0, Some(at))], None).await.unwrap();
    }
    // A small target, so merged segments settle and enter the time index.
    let config = JanitorConfig { compaction_target_bytes: 2 << 10, grace_ms: 0, ..retention_only() };
    let janitor = janitor(&stores, &clock, config);
    for _ in 0..20 {
        if janitor.run(STEP_BUDGET).await.unwrap().segments_merged == 0 {
            break;
        }
    }
    let counting = Scripted::new(stores.0.clone());
    let reader = log_at((counting.clone(), stores.1.clone()), &clock);
    for probe in [t0 - 200_000, t0 + 4_500, t0 + 41_000, t0 + 500_000, t0 + 960_500, t0 + 998_000, t0 + 999_000] {
        let expected = stamps.iter().position(|&at| at >= probe).map_or(N as u64, |o| o as u64);
        let before = counting.queries();
        let at = reader.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(probe)).await.unwrap();
        let queries = counting.queries() - before;
        assert_eq!(at, expected, "first offset at or after {probe}");
        assert!(queries <= 3, "offset by time made {queries} index queries (a walk of the partition would make more)");
    }
}

/// Offset by time walks the index past its first page. A page torn by a compaction's swap
/// (items missing at its start) must not make it answer a later offset: it re-asks from the
/// first offset it has not examined, as a replay does.
pub async fn given_a_later_index_page_torn_by_a_swap_then_offset_by_time_still_answers_exactly(backend: &dyn Backend) {
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("torn-time");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    // One event per segment, a second apart: the walk's second index page starts at 32.
    for i in 0..40 {
        log.publish(&topic, vec![event("e", 0, Some(t0 + i * 1000))], None).await.unwrap();
    }
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let torn = Scripted::new(stores.0.clone());
    // The walk's first query of the index is its first page; the next one loses 32..35.
    torn.at_query(sluice_core::keys::segments_pk(config.id, 0), QueryAction::Hide { offsets: 32..35, skip: 1 });
    let reader = log_at((torn.clone(), stores.1.clone()), &clock);
    let at = reader.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(t0 + 33_000)).await.unwrap();
    assert_eq!(torn.pending(), 0, "the torn query happened");
    assert_eq!(at, 33, "the first event at or after the time, not one past the torn items");
}

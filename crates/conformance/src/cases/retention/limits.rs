//! Retention by age and by bytes.

use std::sync::Arc;

use bytes::Bytes;
use sluice_core::upkeep::STEP_BUDGET;
use sluice_core::{Error, Limits, Log, LogConfig, ManualClock, TopicSpec};

use super::fixtures::*;
use crate::{unique_topic, Backend};

pub async fn given_retention_ms_then_exactly_the_expired_segments_go_and_reads_below_the_start_get_416(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    // Its events are stamped up to 2 h past the clock at their publish: a log that admits that.
    let limits = Limits { max_timestamp_ahead_ms: 3 * HOUR, ..Limits::default() };
    let log = Log::new(stores.0.clone(), stores.1.clone(), clock.clone(), LogConfig { limits, ..crate::log_config() });
    let topic = unique_topic("ret-ms");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None })
        .await
        .unwrap();
    // Three segments of ten events: stamped t0, t0 + 30 min, t0 + 2 h.
    for (i, at) in [t0, t0 + HOUR / 2, t0 + 2 * HOUR].into_iter().enumerate() {
        let events = (0..10).map(|j| event(format!("e{}", i * 10 + j), 0, Some(at))).collect();
        log.publish(&topic, events, None).await.unwrap();
    }
    let janitor = janitor(&stores, &clock, retention_only());
    // What the janitor did to this topic (its report also counts other cases' topics on a shared backend).
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let index = || {
        let (store, id) = (stores.0.clone(), config.id);
        async move { crate::cases::support::entries::entries(store.as_ref(), id, 0).await.len() }
    };
    let expired_after_run = |at: i64| {
        clock.set(at);
        let (janitor, log, config) = (janitor.clone(), log.clone(), config.clone());
        async move {
            janitor.run(STEP_BUDGET).await.unwrap();
            log.upkeep_of(&config).await.unwrap().segments_expired
        }
    };
    // At t0 + 1 h nothing is older than an hour: nothing goes.
    assert_eq!(expired_after_run(t0 + HOUR).await, 0);
    assert_eq!(replay(&log, &topic, 0, 0).await.unwrap().len(), 30);
    // At t0 + 1 h 15 the first segment is (its newest event is 1 h 15 old), the second is not.
    assert_eq!(expired_after_run(t0 + HOUR + HOUR / 4).await, 1);
    assert_eq!(index().await, 2, "its index entry is gone");
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert_eq!((states[0].log_start_offset, states[0].high_watermark), (10, 30));
    match log.read(&request(&topic, 0, 3)).await {
        Err(Error::OffsetOutOfRange { offset: 3, log_start_offset: 10, high_watermark: 30 }) => {}
        other => panic!("a read below the log start is out of range, naming it: {other:?}"),
    }
    let kept = replay(&log, &topic, 0, 10).await.unwrap();
    let expected: Vec<(u64, Bytes)> = (10..30).map(|o| (o, Bytes::from(format!("e{o}")))).collect();
    assert_eq!(kept, expected, "everything from the log start is intact");
    // At t0 + 1 h 45 the second goes too; the third (t0 + 2 h) stays until t0 + 3 h.
    assert_eq!(expired_after_run(t0 + HOUR + 3 * HOUR / 4).await, 2);
    assert_eq!(expired_after_run(t0 + 3 * HOUR).await, 2, "exactly an hour old: kept");
    assert_eq!(expired_after_run(t0 + 3 * HOUR + 1).await, 3);
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert_eq!((states[0].log_start_offset, states[0].high_watermark, states[0].bytes), (30, 30, 0));
    let upkeep = log.upkeep_of(&config).await.unwrap();
    assert_eq!((upkeep.segments_expired, upkeep.last_change_ms), (3, t0 + 3 * HOUR + 1), "the describe's counts");
    assert!(matches!(
        log.read(&request(&topic, 0, 29)).await,
        Err(Error::OffsetOutOfRange { log_start_offset: 30, .. })
    ));
    // The partition still takes new events, at the next offset.
    let at = log.publish(&topic, vec![event("new", 0, None)], None).await.unwrap();
    assert_eq!(at[0].offset, 30);
    assert_eq!(replay(&log, &topic, 0, 30).await.unwrap(), vec![(30, Bytes::from("new"))]);
}

pub async fn given_retention_bytes_then_each_partition_stays_under_its_bound(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let clock = Arc::new(ManualClock::new(real_now()));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("ret-bytes");
    const BOUND: u64 = 8 << 10;
    let spec = TopicSpec { partitions: 2, retention_ms: None, retention_bytes: Some(BOUND as i64) };
    log.create_topic(&topic, spec).await.unwrap();
    let value = Bytes::from(vec![b'v'; 500]);
    let mut largest = 0;
    for i in 0..40u32 {
        let events = (0..2).map(|_| event(value.clone(), i % 2, None)).collect();
        log.publish(&topic, events, None).await.unwrap();
    }
    let (_, before) = log.describe_topic(&topic).await.unwrap();
    let janitor = janitor(&stores, &clock, retention_only());
    janitor.run(STEP_BUDGET).await.unwrap();
    let (config, states) = log.describe_topic(&topic).await.unwrap();
    assert!(log.upkeep_of(&config).await.unwrap().segments_expired > 0);
    for (s, b) in states.iter().zip(&before) {
        assert!(s.bytes <= BOUND, "partition {} holds {} bytes, bound {BOUND}", s.partition, s.bytes);
        assert!(s.log_start_offset > 0 && s.high_watermark == b.high_watermark);
        largest = largest.max(b.bytes / 20);
        // Only as much went as the bound needed: one more segment would have fitted nowhere.
        assert!(s.bytes + largest > BOUND, "partition {} kept {} bytes: too much went", s.partition, s.bytes);
        let kept = replay(&log, &topic, s.partition, s.log_start_offset).await.unwrap();
        assert_eq!(kept.len() as u64, s.high_watermark - s.log_start_offset);
        assert!(kept.iter().all(|(_, v)| *v == value));
        let below = log.read(&request(&topic, s.partition, s.log_start_offset - 1)).await;
        assert!(matches!(below, Err(Error::OffsetOutOfRange { .. })), "{below:?}");
    }
}

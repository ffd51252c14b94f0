//! Reading: replay from any offset, lookup by time, a long-polling reader woken.

use std::sync::Arc;

use std::time::Duration;

use sluice_core::{Log, NewEvent, ReadRequest};

use super::fixtures::*;
use crate::cases::support::clock::WatchedClock;
use crate::{unique_topic, Backend};

pub async fn given_events_then_replay_from_any_offset_and_offset_lookup_by_time(backend: &dyn Backend) {
    let log = log_on(backend.open().await);
    let topic = unique_topic("replay");
    log.create_topic(&topic, spec(1)).await.unwrap();
    for (batch, ts) in [(3u64, 100i64), (1, 300), (2, 200), (4, 400)] {
        let events = (0..batch)
            .map(|i| NewEvent { timestamp_ms: Some(ts + i as i64), ..event(&format!("t{ts}-{i}"), 0) })
            .collect();
        log.publish(&topic, events, None).await.unwrap();
    }
    // Segments hold offsets 0..3, 3..4, 4..6, 6..10.
    for offset in 0..10u64 {
        let request =
            ReadRequest { topic: topic.clone(), partition: 0, offset, max_events: 3, max_bytes: 1 << 20, wait_ms: 0 };
        let page = log.read(&request).await.unwrap();
        let offsets: Vec<u64> = page.events.iter().map(|e| e.offset).collect();
        let expected: Vec<u64> = (offset..(offset + 3).min(10)).collect();
        assert_eq!(offsets, expected, "from {offset}");
        assert_eq!(page.next_offset, offset + expected.len() as u64);
        assert_eq!(page.high_watermark, 10);
    }
    let at = |ts| log.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(ts));
    assert_eq!(at(0).await.unwrap(), 0);
    assert_eq!(at(101).await.unwrap(), 1);
    assert_eq!(at(150).await.unwrap(), 3, "the first event at or after the time, in offset order");
    assert_eq!(at(300).await.unwrap(), 3);
    assert_eq!(at(301).await.unwrap(), 6);
    assert_eq!(at(403).await.unwrap(), 9);
    assert_eq!(at(404).await.unwrap(), 10, "past every event: the high watermark");
}

/// A long poll that is waiting (it read the head and began its nap) is woken by a publish of
/// its process: the clock never moves, so the poll interval never passes; only the wake-up
/// can return it.
pub async fn given_a_reader_long_polling_when_an_event_is_published_then_the_publish_wakes_it(backend: &dyn Backend) {
    let clock = Arc::new(WatchedClock::new(1_767_225_600_000));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(store, objects, clock.clone(), crate::log_config());
    let topic = unique_topic("wake");
    log.create_topic(&topic, spec(1)).await.unwrap();
    for offset in 0..2u64 {
        let before = clock.sleeps();
        let waiting = {
            let request = ReadRequest {
                topic: topic.clone(),
                partition: 0,
                offset,
                max_events: 10,
                max_bytes: 1 << 20,
                wait_ms: 20_000,
            };
            let log = log.clone();
            tokio::spawn(async move { log.read(&request).await })
        };
        clock.slept_more_than(before).await;
        assert!(!waiting.is_finished(), "nothing at {offset} yet: the poll waits");
        log.publish(&topic, vec![event(&format!("e{offset}"), 0)], None).await.unwrap();
        let page = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("the publish woke the long poll")
            .unwrap()
            .unwrap();
        assert_eq!(page.events.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![offset]);
    }
}

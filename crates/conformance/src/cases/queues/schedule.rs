//! Scheduled delivery (`deliver_at_ms`): in the log at once, delivered by no queue before
//! its time, without holding back what is due; refused past the topic's retention.

use sluice_core::queues::{Backlog, Ordering, SeekTo, StartAt, SubscriptionSpec};
use sluice_core::schedule::{deliver_at, stamp};
use sluice_core::{Code, Error, NewEvent, ReadRequest, TopicSpec};

use crate::cases::support::queues::*;
use crate::{unique_topic, Backend};

/// An event for partition 0, scheduled for `at` if given.
fn scheduled(value: &str, at: Option<i64>) -> NewEvent {
    let mut e = event(value.to_owned(), Some(0), None, Some(START_MS));
    if let Some(at) = at {
        stamp(&mut e, at);
    }
    e
}

/// visible, in flight, scheduled.
fn waiting(b: &Backlog) -> [u64; 3] {
    [b.visible, b.in_flight, b.scheduled]
}

pub async fn given_scheduled_events_then_none_is_delivered_early_and_each_comes_at_its_time(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "sched", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let events = vec![
        scheduled("in 10 s", Some(START_MS + 10_000)),
        scheduled("now", None),
        scheduled("in 5 s", Some(START_MS + 5_000)),
        scheduled("due already", Some(START_MS - 1)),
    ];
    let pos = publish(&log, &topic, events).await;
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(waiting(&d.backlog), [2, 0, 2], "read from the log: two due, two scheduled");

    let got = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&got), [(0, pos[1].offset), (0, pos[3].offset)], "what is due, past what is not");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(waiting(&d.backlog), [0, 2, 2], "moved out of the way: still scheduled");
    for m in &got {
        assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Ok(()));
    }
    clock.advance(4_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the first schedule").await;
    clock.advance(1);
    let five = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&five), five.receive_count), ((0, pos[2].offset), 1));
    assert_eq!(deliver_at(&five.event.record.headers), Some(START_MS + 5_000), "the schedule comes with it");
    assert_eq!(ack(&queues, &topic, &sub, &five.receipt).await, Ok(()));
    clock.advance(4_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the second schedule").await;
    clock.advance(1);
    let ten = receive_one(&queues, &topic, &sub).await;
    assert_eq!(at(&ten), (0, pos[0].offset));
    // Once delivered, a scheduled message is settled as any other.
    assert_eq!(nack(&queues, &topic, &sub, &ten.receipt, 0).await, Ok(()));
    let again = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&again), again.receive_count), ((0, pos[0].offset), 2), "a nack redelivers it");
    assert_eq!(ack(&queues, &topic, &sub, &again.receipt).await, Ok(()));
    assert_eq!(ack(&queues, &topic, &sub, &again.receipt).await, Ok(()), "an ack's retry is ok");
    assert_nothing(&queues, &topic, &sub, "acked").await;
    assert_eq!(waiting(&queues.describe(&topic, &sub).await.unwrap().backlog), [0, 0, 0]);
}

/// A thousand and more scheduled for one time ahead of due messages, on a keyed queue too:
/// the due ones come within two receives; once the time comes, every scheduled message
/// is delivered exactly once, at most a receive's worth at a time (keyed, one of a key).
pub async fn given_thousands_scheduled_ahead_of_due_messages_then_those_are_not_held_back(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "sched-many", 1).await;
    let n = scaled(backend, 1500);
    let plain = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let keyed =
        subscribe(&queues, &topic, SubscriptionSpec { ordering: Ordering::Key, ..spec(StartAt::Earliest) }).await;
    let due_at = START_MS + 60_000;
    // A tenth of them of the due message's key: a schedule holds back no key.
    let key = |i: usize| i.is_multiple_of(10).then(|| "k".to_owned());
    let mut events: Vec<NewEvent> = (0..n)
        .map(|i| {
            let mut e = event(format!("s{i}"), Some(0), key(i), Some(START_MS));
            stamp(&mut e, due_at);
            e
        })
        .collect();
    events.push(event("due".into(), Some(0), Some("k".into()), Some(START_MS)));
    let pos = publish(&log, &topic, events).await;
    let due = (0, pos[n].offset);
    for sub in [&plain, &keyed] {
        let mut got = receive(&queues, &topic, sub, 10).await;
        if got.is_empty() {
            got = receive(&queues, &topic, sub, 10).await;
        }
        assert_eq!(positions(&got), [due], "the due message within two receives, none scheduled");
        assert_eq!(ack(&queues, &topic, sub, &got[0].receipt).await, Ok(()));
        let d = queues.describe(&topic, sub).await.unwrap();
        assert_eq!(waiting(&d.backlog), [0, 0, n as u64], "all scheduled, counted exactly");
    }
    clock.advance(60_000);
    for sub in [&plain, &keyed] {
        let mut seen = std::collections::HashSet::new();
        // Keyed, one of a key at a time: a receive per message of the key "k".
        for _ in 0..(n + 40) {
            let got = receive(&queues, &topic, sub, 100).await;
            for m in &got {
                assert!(seen.insert(at(m)), "{:?} delivered twice", at(m));
                assert_eq!(ack(&queues, &topic, sub, &m.receipt).await, Ok(()));
            }
            if seen.len() == n {
                break;
            }
        }
        assert_eq!(seen.len(), n, "every scheduled message delivered once its time came");
        assert_nothing(&queues, &topic, sub, "all acked").await;
    }
}

pub async fn given_a_subscription_created_after_a_scheduled_publish_then_it_honours_the_schedule(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "sched-later", 1).await;
    let pos = publish(&log, &topic, vec![scheduled("later", Some(START_MS + 30_000))]).await;
    clock.advance(10_000);
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    assert_eq!(waiting(&queues.describe(&topic, &sub).await.unwrap().backlog), [0, 0, 1]);
    assert!(queues.peek(&topic, &sub, 10).await.unwrap().is_empty(), "a peek does not show it");
    assert_nothing(&queues, &topic, &sub, "20 s before its time").await;
    assert!(queues.peek(&topic, &sub, 10).await.unwrap().is_empty(), "nor once a receive moved it");
    clock.advance(19_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before its time").await;
    clock.advance(1);
    assert_eq!(at(&receive_one(&queues, &topic, &sub).await), (0, pos[0].offset));
}

/// In the log at once: replay reads it with its schedule, before its time.
pub async fn given_a_scheduled_event_then_replay_reads_it_at_once_with_its_schedule(backend: &dyn Backend) {
    let (_clock, log, _queues) = manual(backend).await;
    let topic = new_topic(&log, "sched-replay", 1).await;
    publish(&log, &topic, vec![scheduled("later", Some(START_MS + 3_600_000)), scheduled("now", None)]).await;
    let read =
        ReadRequest { topic: topic.clone(), partition: 0, offset: 0, max_events: 10, max_bytes: 1 << 20, wait_ms: 0 };
    let batch = log.read(&read).await.expect("read");
    let schedules: Vec<Option<i64>> = batch.events.iter().map(|e| deliver_at(&e.record.headers)).collect();
    assert_eq!(schedules, [Some(START_MS + 3_600_000), None]);
}

/// Up to the topic's retention after the event's timestamp; past it the whole publish is
/// refused and nothing is written.
pub async fn given_a_schedule_beyond_the_topics_retention_then_refused_and_nothing_written(backend: &dyn Backend) {
    let (_clock, log, _queues) = manual(backend).await;
    let topic = unique_topic("sched-retention");
    let retention = 3_600_000;
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: Some(retention), retention_bytes: None })
        .await
        .unwrap();
    let edge = vec![scheduled("fine", None), scheduled("past", Some(START_MS + retention + 1))];
    let refused = log.publish(&topic, edge, None).await;
    assert!(matches!(refused, Err(Error::Invalid { code: Code::InvalidEvent, .. })), "{refused:?}");
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert_eq!(states[0].high_watermark, 0, "nothing written");
    let at_edge = log.publish(&topic, vec![scheduled("edge", Some(START_MS + retention))], None).await;
    assert_eq!(at_edge.expect("at the retention's edge").len(), 1);
}

/// A seek back ends the scheduled message's lease with every other: read from the log
/// again, it waits for its time again, and comes once.
pub async fn given_a_scheduled_message_moved_aside_when_sought_back_then_it_still_waits_and_comes_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "sched-seek", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let pos = publish(&log, &topic, vec![scheduled("later", Some(START_MS + 10_000)), scheduled("now", None)]).await;
    let now = receive_one(&queues, &topic, &sub).await;
    assert_eq!(ack(&queues, &topic, &sub, &now.receipt).await, Ok(()));
    let sought = queues.seek(&topic, &sub, &SeekTo::Earliest, false).await.expect("seek");
    assert_eq!((sought.redeliver, sought.skip), (1, 0), "the acked one again; the scheduled one still to come");
    assert_eq!(at(&receive_one(&queues, &topic, &sub).await), (0, pos[1].offset), "the due one again, alone");
    assert_eq!(waiting(&queues.describe(&topic, &sub).await.unwrap().backlog), [0, 1, 1]);
    clock.advance(10_000);
    let later = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&later), [(0, pos[0].offset)], "once, at its time");
    let purged = queues.purge(&topic, &sub).await.expect("purge");
    assert_eq!(purged.skip, 2, "both held, never acked: a purge passes them over, as any: {purged:?}");
}

//! Long polls woken by a publish, by the clock, by a delay coming due.

use std::sync::Arc;

use sluice_core::queues::{Message, Queues, ReceiveRequest, StartAt, SubscriptionSpec};
use sluice_core::{Clock, Error};

use crate::cases::support::clock::WatchedClock;
use crate::cases::support::queues::*;
use crate::Backend;

/// Yields, and makes one store round trip, so a spawned task gets to run.
async fn let_others_run(queues: &Queues, topic: &str, sub: &str) {
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    queues.describe(topic, sub).await.expect("describe");
    tokio::task::yield_now().await;
}

fn long_poll(
    queues: &Queues,
    topic: &str,
    sub: &str,
    wait_ms: u64,
) -> tokio::task::JoinHandle<Result<Vec<Message>, Error>> {
    let (queues, topic, sub) = (queues.clone(), topic.to_owned(), sub.to_owned());
    let req = ReceiveRequest { max_messages: 10, wait_ms, visibility_timeout_ms: None };
    tokio::spawn(async move { queues.receive(&topic, &sub, &req).await })
}

async fn finished(waiting: tokio::task::JoinHandle<Result<Vec<Message>, Error>>) -> Vec<Message> {
    tokio::time::timeout(REAL_PATIENCE, waiting).await.expect("the long poll ended").unwrap().expect("receive")
}

pub async fn given_long_poll_on_an_empty_queue_when_a_message_is_published_then_it_returns_the_message(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "wait", 2).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 5_000);
    clock.slept_more_than(before).await;
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "an empty queue: the receive waits");
    // The fake clock never moves: only the publish can end the wait.
    let pos = publish_at(&log, &topic, 1, "hello", START_MS).await;
    let got = finished(waiting).await;
    assert_eq!(positions(&got), vec![pos], "the message published during the wait");
    assert_eq!(got[0].receive_count, 1);
    assert_eq!(clock.now_ms(), START_MS);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 1, 0, 0], "held by the long poll's receiver");
}

pub async fn given_long_poll_on_an_empty_queue_when_the_clock_passes_the_wait_then_it_returns_empty_not_before(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "timeout", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 5_000);
    clock.slept_more_than(before).await;
    clock.clock.advance(4_999);
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "returned before its wait was over");
    clock.clock.advance(1);
    assert!(finished(waiting).await.is_empty(), "nothing was published");
}

pub async fn given_long_poll_when_a_delayed_message_comes_due_then_it_returns_the_message(backend: &dyn Backend) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "due", 1).await;
    let sub = subscribe(&queues, &topic, SubscriptionSpec { delay_ms: 2_000, ..spec(StartAt::Earliest) }).await;
    let pos = publish_at(&log, &topic, 0, "later", START_MS).await;
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 5_000);
    clock.slept_more_than(before).await;
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "the message is delayed: the receive waits");
    clock.clock.advance(2_000);
    let got = finished(waiting).await;
    assert_eq!(positions(&got), vec![pos], "returned when the message came due, within the wait");
}

pub async fn given_long_poll_when_a_scheduled_message_comes_due_then_it_returns_the_message_at_that_instant(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "sched-due", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let mut later = event("later".into(), Some(0), None, None);
    sluice_core::schedule::stamp(&mut later, START_MS + 2_000);
    let pos = publish(&log, &topic, vec![later]).await;
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 5_000);
    clock.slept_more_than(before).await;
    clock.clock.advance(1_999);
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "1 ms before its time: the receive waits");
    clock.clock.advance(1);
    let got = finished(waiting).await;
    assert_eq!(positions(&got), vec![(0, pos[0].offset)], "returned when it came due, within the wait");
}

pub async fn given_long_poll_when_the_only_messages_lease_ends_then_it_is_delivered_at_that_instant(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "lease-end", 1).await;
    let leased = SubscriptionSpec { visibility_timeout_ms: 3_000, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, leased).await;
    let pos = publish_at(&log, &topic, 0, "leased", START_MS).await;
    assert_eq!(at(&receive_one(&queues, &topic, &sub).await), pos, "leased until START_MS + 3000");
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 10_000);
    clock.slept_more_than(before).await;
    clock.clock.advance(2_999);
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "delivered while its lease had 1 ms left");
    // The clock stops at the lease's end: a receive that wakes a tick later never returns.
    clock.clock.advance(1);
    let got = finished(waiting).await;
    assert_eq!(positions(&got), vec![pos], "delivered again at the instant its lease ended");
    assert_eq!(got[0].receive_count, 2);
    assert_eq!(clock.now_ms(), START_MS + 3_000);
}

/// A scheduled message published while a long poll waits: the publish wakes the poll, whose
/// take moves the message aside (not yet due) and waits again, now until its time.
pub async fn given_long_poll_when_a_scheduled_message_is_published_during_the_wait_then_it_returns_it_at_its_time(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "sched-wait", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 10_000);
    clock.slept_more_than(before).await;
    let mut later = event("later".into(), Some(0), None, None);
    sluice_core::schedule::stamp(&mut later, START_MS + 3_000);
    let woken = clock.sleeps();
    let pos = publish(&log, &topic, vec![later]).await;
    clock.slept_more_than(woken).await;
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "not yet due: the receive waits on");
    clock.clock.advance(2_999);
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "1 ms before its time: the receive waits");
    clock.clock.advance(1);
    let got = finished(waiting).await;
    assert_eq!(positions(&got), vec![(0, pos[0].offset)], "returned at its time, within the wait");
    assert_eq!(clock.now_ms(), START_MS + 3_000);
}

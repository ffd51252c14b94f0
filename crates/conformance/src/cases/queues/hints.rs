//! Receives pass over partitions their process found idle (`sluice_core`'s
//! `queues/turns.rs`): a hint for liveness only, which a change made under a turn in the
//! same process forgets and which lapses after 5 s whatever happened elsewhere. A message
//! made due without a publish (here a redrive) is never starved by it. Time passes on a
//! [`ManualClock`].

use std::sync::Arc;

use sluice_core::queues::{Queues, StartAt, SubscriptionSpec};
use sluice_core::{Log, ManualClock};

use crate::cases::support::queues::{new_topic, positions, publish_at, receive, spec, START_MS};
use crate::Backend;

/// How long a process trusts that a partition has nothing for a subscription.
const HINT_MS: i64 = 5_000;

/// Two processes on the same storage, and a topic of one partition whose subscription `s`
/// has one message in its dead-letter queue; the first process's receive (which buried it)
/// found the partition idle.
async fn idle_with_a_dead_letter(backend: &dyn Backend, prefix: &str) -> (Arc<ManualClock>, Queues, Queues, String) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut queues = Vec::new();
    let mut logs = Vec::new();
    for _ in 0..2 {
        let (store, objects) = backend.open_with(clock.clone()).await;
        let log = Log::new(store, objects, clock.clone(), crate::log_config());
        queues.push(Queues::new(log.clone()));
        logs.push(log);
    }
    let (other, here) = (queues.pop().unwrap(), queues.pop().unwrap());
    let topic = new_topic(&logs[0], prefix, 1).await;
    let once = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    other.create(&topic, "s", once).await.unwrap();
    publish_at(&logs[0], &topic, 0, "m0", START_MS).await;
    assert_eq!(receive(&other, &topic, "s", 10).await.len(), 1, "its one delivery");
    clock.advance(1_000);
    assert!(receive(&here, &topic, "s", 10).await.is_empty(), "buried, nothing left to deliver");
    (clock, here, other, topic)
}

pub async fn given_a_partition_a_process_saw_idle_when_another_redrives_there_then_delivered_once_the_hint_lapses(
    backend: &dyn Backend,
) {
    let (clock, here, other, topic) = idle_with_a_dead_letter(backend, "hint-lapses").await;
    assert_eq!(other.redrive(&topic, "s", None).await.unwrap(), 1);
    // The log's head did not move: this process still trusts what it saw.
    assert!(receive(&here, &topic, "s", 10).await.is_empty(), "the hint is in use");
    clock.advance(HINT_MS);
    let got = receive(&here, &topic, "s", 10).await;
    assert_eq!(positions(&got), vec![(0, 0)], "the redriven message, once the hint lapsed");
}

pub async fn given_a_partition_a_process_saw_idle_when_it_redrives_there_itself_then_delivered_at_once(
    backend: &dyn Backend,
) {
    let (_clock, here, _other, topic) = idle_with_a_dead_letter(backend, "hint-forgotten").await;
    assert_eq!(here.redrive(&topic, "s", None).await.unwrap(), 1);
    let got = receive(&here, &topic, "s", 10).await;
    assert_eq!(positions(&got), vec![(0, 0)], "a change under this process's turn forgets the hint");
}

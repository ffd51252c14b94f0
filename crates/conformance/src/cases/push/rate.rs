//! A push subscription's rate: its deliveries follow it (a burst, then `per_second`), and a
//! message waiting for a token is not received, so it spends no receive count.

use std::sync::Arc;

use serde_json::json;
use sluice_core::push::{webhook, Dispatcher, Topics, WAKE_STAYS_MS};
use sluice_core::queues::{PushSpec, Rate, SubscriptionSpec};
use sluice_core::Clock;

use super::receiver::*;
use crate::cases::support::clock::WatchedClock;
use crate::cases::support::queues::{manual, new_topic, publish, queues_on, subscribe, REAL_PATIENCE, START_MS};
use crate::Backend;

pub async fn given_a_push_subscription_with_a_rate_then_deliveries_follow_it_and_spend_no_receive_count(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-rate", 4).await;
    let push = PushSpec { max_batch: 1, max_in_flight: 4, ..PushSpec::lambda("consumer") };
    let rate = Some(Rate { per_second: 4, burst: 2 });
    let sub = subscribe(&queues, &topic, SubscriptionSpec { rate, ..push_spec(push, 1, 100) }).await;
    let at = publish(&log, &topic, (0..20).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);

    let burst = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain").messages;
    assert_eq!(burst, 2, "the burst");
    // A token every 250 ms: each drain in between finds the bucket empty and sends nothing.
    let mut delivered = Vec::new();
    for _ in 0..18 {
        clock.advance(125);
        delivered.push(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain").messages);
    }
    assert_eq!(delivered, [0, 1].repeat(9), "one message per 250 ms, 4 a second");
    let d = queues.describe(&topic, &sub).await.expect("describe");
    assert_eq!((d.backlog.visible, d.backlog.in_flight, d.backlog.dead), (9, 0, 0), "none held or dead");
    assert!(d.throttled_ms.is_some_and(|t| t > 0), "throttled time shown: {:?}", d.throttled_ms);
    let counts: Vec<u32> = receiver.attempts().iter().flat_map(|a| a.items.iter().map(|m| m.2)).collect();
    assert!(counts.iter().all(|c| *c == 1), "one delivery each, none spent waiting: {counts:?}");
    let sent: std::collections::HashSet<String> =
        receiver.attempts().iter().flat_map(|a| a.items.iter().map(|m| m.0.clone())).collect();
    assert_eq!(sent.len(), 11);
    assert!(sent.iter().all(|id| at.iter().any(|p| webhook::message_id(&topic, p.partition, p.offset) == *id)));
}

/// Batches of 3 at 4 a second: a delivery waits for a batch's tokens instead of sending
/// each message as its token comes (fewer, fuller batches; the same rate).
pub async fn given_a_push_subscription_with_a_rate_then_a_batch_waits_for_its_tokens(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-rate-batch", 1).await;
    let push = PushSpec { max_batch: 3, max_in_flight: 1, ..PushSpec::lambda("consumer") };
    let rate = Some(Rate { per_second: 4, burst: 3 });
    subscribe(&queues, &topic, SubscriptionSpec { rate, ..push_spec(push, 1, 100) }).await;
    publish(&log, &topic, (0..20).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    let mut delivered = Vec::new();
    for _ in 0..7 {
        delivered.push(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain").messages);
        clock.advance(250);
    }
    assert_eq!(delivered, [3, 0, 0, 3, 0, 0, 3], "a batch of 3 each 750 ms");
    let sizes: Vec<usize> = receiver.attempts().iter().map(|a| a.items.len()).collect();
    assert_eq!(sizes, [3, 3, 3], "full batches only");
}

/// A rate-limited backlog on a quiet topic: the publish's run sends the burst and stops at
/// the empty bucket; it hands the next token's time over, and the run so woken sends one
/// message per token as it comes, asleep in between (no look, no claim while the bucket is
/// empty), and ends when nothing is left.
pub async fn given_a_rate_limited_backlog_on_a_quiet_topic_then_it_is_pushed_at_the_rate_neither_stalled_nor_spinning(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "push-rate-quiet", 1).await;
    let push = PushSpec { max_batch: 1, ..PushSpec::lambda("consumer") };
    let rate = Some(Rate { per_second: 1, burst: 1 });
    subscribe(&queues, &topic, SubscriptionSpec { rate, ..push_spec(push, 5, 100) }).await;
    publish(&log, &topic, (0..4).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let asked = Arc::new(Asked::default());
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone()).with_wakes(asked.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    assert_eq!(dispatcher.drain(&topics, START_MS + 57_000).await.expect("the publish's run").messages, 1);
    assert_eq!(*asked.0.lock().unwrap(), [(vec![topic.clone()], START_MS + 1_000)], "the next token's time");
    let first = clock.sleeps();
    let woken = {
        let (dispatcher, topics) = (dispatcher.clone(), topics.clone());
        tokio::spawn(
            async move { dispatcher.sweep(&topics, START_MS + 117_000, START_MS + 1_000 + WAKE_STAYS_MS).await },
        )
    };
    for delivered in 2..=4 {
        // Asleep until the next token: nothing is sent before it.
        clock.slept_more_than(first + delivered as u64 - 2).await;
        let_it_run().await;
        assert_eq!(receiver.acked().len(), delivered - 1, "nothing before the next token");
        clock.clock.advance(1_000);
        acked_eventually(&receiver, delivered).await;
    }
    let run = tokio::time::timeout(REAL_PATIENCE, woken).await.expect("the woken run ended").unwrap().expect("run");
    assert_eq!((run.messages, run.deliveries), (3, 3), "all pushed, one per token");
    assert_eq!(clock.now_ms(), START_MS + 3_000);
}

/// Lets a spawned run go on (the fake clock stands still).
async fn let_it_run() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Waits (in real time) until `n` messages were acked.
async fn acked_eventually(receiver: &Receiver, n: usize) {
    let waited = tokio::time::timeout(REAL_PATIENCE, async {
        while receiver.acked().len() < n {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    });
    waited.await.unwrap_or_else(|_| panic!("{} of {n} messages acked", receiver.acked().len()));
}

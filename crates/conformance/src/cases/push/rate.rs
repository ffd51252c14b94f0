//! A push subscription's rate: its deliveries follow it (a burst, then `per_second`), and a
//! message waiting for a token is not received, so it spends no receive count.

use serde_json::json;
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{PushSpec, Rate, SubscriptionSpec};
use sluice_core::Clock;

use super::receiver::*;
use crate::cases::support::queues::{manual, new_topic, publish, subscribe};
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

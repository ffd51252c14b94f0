//! Scheduled events on a push subscription: nothing is pushed before its time, what is due
//! is pushed past it, and the scheduled one is pushed once its time comes.

use serde_json::json;
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::PushSpec;
use sluice_core::schedule::stamp;
use sluice_core::Clock;

use super::receiver::*;
use crate::cases::support::queues::{manual, new_topic, publish, subscribe};
use crate::Backend;

pub async fn given_a_scheduled_event_on_a_push_subscription_then_it_is_pushed_at_its_time_and_not_before(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-sched", 1).await;
    subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    let due_at = clock.now_ms() + 30_000;
    let mut later = json_event(json!("later"), None);
    stamp(&mut later, due_at);
    let at = publish(&log, &topic, vec![later, json_event(json!("now"), None)]).await;
    let id = |i: usize| webhook::message_id(&topic, at[i].partition, at[i].offset);
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    for _ in 0..29 {
        dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
        clock.advance(1_000);
    }
    clock.advance(999);
    dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
    assert_eq!(receiver.acked(), [id(1)].into(), "1 ms before its time: only the due one pushed");
    clock.advance(1);
    dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
    assert_eq!(receiver.acked(), [id(0), id(1)].into(), "pushed at its time");
    let items: Vec<_> = receiver.attempts().iter().flat_map(|a| a.items.clone()).collect();
    assert_eq!(items.len(), 2, "each pushed once: {items:?}");
}

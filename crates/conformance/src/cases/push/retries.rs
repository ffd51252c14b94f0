//! What a retry pushes: the batch that failed, whole, in the same order and under the same
//! `webhook-id` (a receiver deduplicating by it, as Standard Webhooks suggests, processes
//! nothing twice), even when another dispatcher makes it; after a partial failure, the
//! messages named, as a batch of their own.

use std::collections::HashMap;

use serde_json::json;
use sluice_core::ports::deliver::Answer;
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::PushSpec;
use sluice_core::{Clock, NewEvent};

use super::receiver::*;
use crate::cases::support::queues::{mix, new_topic, publish, scaled, subscribe};
use crate::Backend;

/// A batch that must come again as it was: its message ids in order, and its webhook-id
/// (unknown for the messages a partial failure named, until their first retry).
type Expected = (Vec<String>, Option<String>);

/// Checks each attempt against what earlier ones left to retry; answers how many
/// attempts were retries.
fn check_retries(attempts: &[Attempt], died: &[Expected]) -> usize {
    let mut retry: HashMap<String, Expected> = HashMap::new();
    for (ids, webhook_id) in died {
        retry.extend(ids.iter().map(|id| (id.clone(), (ids.clone(), webhook_id.clone()))));
    }
    let mut retries = 0;
    for a in attempts {
        let ids: Vec<String> = a.items.iter().map(|i| i.0.clone()).collect();
        if let Some((want, want_id)) = ids.iter().find_map(|id| retry.get(id)) {
            assert_eq!(&ids, want, "a retry pushes the batch that failed, whole and in order");
            if want_id.is_some() {
                assert_eq!(&a.webhook_id, want_id, "a retry keeps its batch's webhook-id: {ids:?}");
            }
            retries += 1;
        }
        assert!(ids.iter().all(|id| !retry.contains_key(id) || retry[id].0 == ids), "{ids:?} mixes batches");
        for id in &ids {
            retry.remove(id);
        }
        let failed: Vec<String> = ids.iter().filter(|id| a.failed.contains(*id)).cloned().collect();
        let again: Expected =
            if failed.len() == ids.len() { (ids.clone(), a.webhook_id.clone()) } else { (failed.clone(), None) };
        retry.extend(failed.into_iter().map(|id| (id, again.clone())));
    }
    retries
}

pub async fn given_failed_attempts_then_a_retry_pushes_the_same_batch_under_the_same_webhook_id_and_a_partial_failure_the_named_messages_alone(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = crate::cases::support::queues::manual(backend).await;
    let topic = new_topic(&log, "push-retries", 3).await;
    let push = PushSpec { max_batch: 4, ..PushSpec::url("https://receiver.test/hook", Some(SECRET.into())) };
    let sub_name = subscribe(&queues, &topic, push_spec(push, 5, 100)).await;
    let n = scaled(backend, 90).max(24);
    let events: Vec<NewEvent> = (0..n).map(|i| json_event(json!({"n": i}), None)).collect();
    publish(&log, &topic, events).await;
    // The first batch of several fails its first message only; then 30% fail with 500, 15%
    // time out, 20% fail their first message only, until a message was pushed three times.
    let partial_yet = std::sync::atomic::AtomicBool::new(false);
    let receiver = Receiver::new(move |body, attempt| {
        let all = items(body);
        let first_partial = all.len() > 1 && !partial_yet.swap(true, std::sync::atomic::Ordering::SeqCst);
        if all.iter().all(|(_, _, count)| *count >= 3) && !first_partial {
            return ok(json!({}));
        }
        if first_partial {
            return ok(json!({"batchItemFailures": [{"itemIdentifier": all[0].0}]}));
        }
        match mix(attempt as u64 + 7) % 100 {
            0..30 => status(500, None),
            30..45 => Answer::TimedOut,
            45..65 if all.len() > 1 => ok(json!({"batchItemFailures": [{"itemIdentifier": all[0].0}]})),
            _ => ok(json!({})),
        }
    })
    .verifying(SECRET);
    let topics = Topics::Named(vec![topic.clone()]);
    // A dispatcher that dies holding a batch: the next one pushes that batch, as it was.
    let first = Dispatcher::new(queues.clone(), receiver.clone());
    let sub = first.subscriptions(&topics).await.unwrap().remove(0);
    let held = first.receive(&sub, 0).await.unwrap();
    assert!(!held.is_empty());
    let held_ids = held.iter().map(|m| webhook::message_id(&topic, m.event.partition, m.event.offset)).collect();
    let died = vec![(held_ids, Some(webhook::delivery_id(sub.id, &held)))];
    clock.advance(30_000);
    // Every round by a new dispatcher: what makes a batch is stored, not remembered.
    let mut idle = 0;
    for _ in 0..500 {
        let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
        let done = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
        idle = if done.deliveries == 0 { idle + 1 } else { 0 };
        if idle == 2 {
            break;
        }
        clock.advance(100);
    }
    assert_eq!(idle, 2, "the push subscription never drained");

    let attempts = receiver.attempts();
    let retries = check_retries(&attempts, &died);
    assert!(retries >= n / 8, "the receiver's failures made few retries ({retries} of {} attempts)", attempts.len());
    let partial = attempts.iter().filter(|a| !a.failed.is_empty() && a.failed.len() < a.items.len()).count();
    assert!(partial > 0, "no partial failure was answered");
    assert_eq!(*receiver.bad_signatures.lock().unwrap(), 0, "every delivery's signature verifies");
    let d = queues.describe(&topic, &sub_name).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight, d.backlog.dead), (0, 0, 0), "every message acked");
}

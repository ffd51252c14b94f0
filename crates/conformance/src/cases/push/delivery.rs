//! Push delivery: at-least-once, ordering by key, signatures, dispatcher deaths.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sluice_core::ports::deliver::Answer;
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{secret_key, Ordering, PushSpec, SubscriptionSpec};
use sluice_core::{Clock, Code, Error, NewEvent};

use super::receiver::*;
use crate::cases::support::queues::{all_dead_letters, manual, mix, new_topic, publish, scaled, subscribe};
use crate::Backend;

pub async fn given_a_flaky_receiver_then_every_matching_event_is_pushed_at_least_once_never_after_its_ack_and_poison_dead_letters_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push", 2).await;
    let filter = json!({"value": {"kind": [{"anything-but": "noise"}]}});
    let push = PushSpec { max_batch: 5, ..PushSpec::url("https://receiver.test/hook", Some(SECRET.into())) };
    let sub = subscribe(&queues, &topic, SubscriptionSpec { filter: Some(filter), ..push_spec(push, 6, 100) }).await;
    let n = scaled(backend, 120).max(40);
    let events: Vec<NewEvent> = (0..n)
        .map(|i| {
            let kind = if i % 10 == 3 { "noise" } else { "order" };
            json_event(json!({"kind": kind, "n": i, "poison": i % 17 == 5}), None)
        })
        .collect();
    let at = publish(&log, &topic, events).await;
    let id = |i: usize| webhook::message_id(&topic, at[i].partition, at[i].offset);
    let poison: HashSet<String> = (0..n).filter(|i| i % 17 == 5 && i % 10 != 3).map(id).collect();
    let noise: HashSet<String> = (0..n).filter(|i| i % 10 == 3).map(id).collect();
    let cured = Arc::new(Mutex::new(false));
    let cure = cured.clone();
    // 30% fail with 500, 10% time out, 20% name a partial failure; poison always fails until
    // cured; a message delivered four times is then taken (so only poison dies).
    let receiver = Receiver::new(move |body, attempt| {
        let dice = mix(attempt as u64) % 100;
        let all = items(body);
        let fresh = all.iter().any(|(_, _, count)| *count < 4);
        let is_poison = |m: &Value| m["value"]["poison"] == json!(true) && !*cure.lock().unwrap();
        let mut failures: Vec<Value> = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| is_poison(m) || (fresh && (40..60).contains(&dice) && m["offset"].as_u64() == Some(0)))
            .map(|m| json!({"itemIdentifier": m["id"]}))
            .collect();
        match dice {
            0..30 if fresh => status(500, None),
            30..40 if fresh => Answer::TimedOut,
            _ => {
                failures.dedup();
                ok(json!({"batchItemFailures": failures}))
            }
        }
    })
    .verifying(SECRET);
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    drain_all(&dispatcher, &clock, &topic, 100).await;

    let acked = receiver.acked();
    for i in (0..n).map(id) {
        let wanted = !noise.contains(&i) && !poison.contains(&i);
        assert_eq!(acked.contains(&i), wanted, "{i}: pushed and acked iff it matches and is not poison");
    }
    let delivered: HashSet<String> =
        receiver.attempts().iter().flat_map(|a| a.items.iter().map(|i| i.0.clone())).collect();
    assert!(delivered.is_disjoint(&noise), "a filtered event is never pushed");
    assert!(receiver.after_ack.lock().unwrap().is_empty(), "pushed again after an attempt acked it");
    let letters = all_dead_letters(&queues, &topic, &sub).await;
    let dead: Vec<String> = letters.iter().map(|l| webhook::message_id(&topic, l.partition, l.offset)).collect();
    assert_eq!(dead.len(), poison.len(), "each poison message dead-lettered exactly once: {dead:?}");
    assert_eq!(dead.iter().cloned().collect::<HashSet<_>>(), poison);
    assert!(letters.iter().all(|l| l.receive_count == 6));
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(d.backlog.filtered, noise.len() as u64, "filtered counts exactly the non-matching events");
    assert_eq!((d.backlog.visible, d.backlog.in_flight, d.backlog.dead), (0, 0, poison.len() as u64));
    let stats = d.deliveries.expect("a push subscription's describe has its deliveries");
    let attempts = receiver.attempts();
    assert_eq!(stats.attempted, attempts.len() as u64);
    assert_eq!(stats.failed, attempts.iter().filter(|a| a.failed.len() == a.items.len()).count() as u64);
    assert!(stats.last_error.is_some());

    // Redriven, the poison messages are pushed again (the receiver takes them now).
    *cured.lock().unwrap() = true;
    assert_eq!(queues.redrive(&topic, &sub, None).await.unwrap(), poison.len() as u64);
    drain_all(&dispatcher, &clock, &topic, 100).await;
    assert!(poison.is_subset(&receiver.acked()), "a redrive pushes dead letters again");
    assert!(all_dead_letters(&queues, &topic, &sub).await.is_empty());
    assert_eq!(*receiver.bad_signatures.lock().unwrap(), 0, "every delivery's signature verifies");
}

pub async fn given_ordering_by_key_under_four_pushers_then_per_key_in_offset_order_and_never_two_at_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-keyed", 2).await;
    let push = PushSpec { max_batch: 4, max_in_flight: 4, ..PushSpec::lambda("consumer") };
    let spec = SubscriptionSpec { ordering: Ordering::Key, ..push_spec(push, 1000, 50) };
    let sub = subscribe(&queues, &topic, spec).await;
    let per_key = scaled(backend, 12).max(6);
    let events: Vec<NewEvent> =
        (0..per_key * 6).map(|i| json_event(json!({"n": i}), Some(format!("k{}", i % 6)))).collect();
    publish(&log, &topic, events).await;
    let receiver = Receiver::new(|_, attempt| match mix(attempt as u64) % 4 {
        0 => status(503, None),
        _ => ok(json!({})),
    });
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    drain_all(&dispatcher, &clock, &topic, 50).await;

    assert!(receiver.overlaps.lock().unwrap().is_empty(), "two deliveries of one key at once");
    // Per key: each delivery's message comes after every earlier one of its key was acked.
    let mut acked: HashMap<String, Vec<u64>> = HashMap::new();
    for a in receiver.attempts() {
        for (id, key, _) in &a.items {
            let offset: u64 = id.rsplit('/').next().unwrap().parse().unwrap();
            let done = acked.entry(key.clone().unwrap()).or_default();
            assert!(done.last().is_none_or(|last| *last < offset), "{id} pushed before or after its key's order");
            if !a.failed.contains(id) {
                done.push(offset);
            }
        }
    }
    assert_eq!(acked.values().map(Vec::len).sum::<usize>(), per_key * 6, "every message acked once");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight, d.backlog.delayed), (0, 0, 0));
}

pub async fn given_signed_deliveries_then_they_verify_the_id_is_stable_across_retries_and_retry_after_is_honoured(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-signed", 1).await;
    let name = crate::unique_topic("sub");
    let spec = push_spec(PushSpec::url("https://receiver.test/", None), 5, 100);
    let (created, _) = queues.create(&topic, &name, spec).await.unwrap();
    let secret = created.spec.push.as_ref().and_then(PushSpec::secret).unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "a secret is generated: {secret}");
    publish(&log, &topic, vec![json_event(json!({"a": 1}), Some("k".into()))]).await;
    let receiver = Receiver::new(|_, attempt| if attempt == 0 { status(503, Some(2_000)) } else { ok(json!(null)) });
    *receiver.key.lock().unwrap() = Some(secret_key(&secret).unwrap());
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    let drain = || dispatcher.drain(&topics, clock.now_ms() + 60_000);

    assert_eq!(drain().await.unwrap().deliveries, 1);
    clock.advance(1_999);
    assert_eq!(drain().await.unwrap().deliveries, 0, "Retry-After: 2 s is honoured");
    clock.advance(1);
    assert_eq!(drain().await.unwrap().deliveries, 1);
    let attempts = receiver.attempts();
    assert_eq!(attempts.len(), 2);
    assert!(attempts[0].webhook_id.is_some());
    assert_eq!(attempts[0].webhook_id, attempts[1].webhook_id, "a retried batch keeps its webhook-id");
    assert_eq!(attempts[1].items[0].2, 2, "the retry says it is the second delivery");
    assert_eq!(*receiver.bad_signatures.lock().unwrap(), 0, "every signature verifies with the secret");
    let key = secret_key(&secret).unwrap();
    let sig = webhook::sign(&key, "msg_1", 1_800_000_000, b"{\"a\":1}");
    assert!(!webhook::verify(&key, "msg_1", "1800000000", &sig, b"{\"a\":2}", 1_800_000_000), "a changed body fails");
    // Re-creating with the same settings and no secret is the same subscription.
    let again = push_spec(PushSpec::url("https://receiver.test/", None), 5, 100);
    assert!(!queues.create(&topic, &name, again).await.unwrap().1);
}

pub async fn given_a_push_subscription_then_clients_cannot_receive_it_and_an_idle_one_sends_nothing(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-idle", 2).await;
    let sub = subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    let req = sluice_core::queues::ReceiveRequest { max_messages: 1, wait_ms: 0, visibility_timeout_ms: None };
    match queues.receive(&topic, &sub, &req).await {
        Err(Error::Conflict { code: Code::PushSubscription, .. }) => {}
        other => panic!("a client's receive from a push subscription: {other:?}"),
    }
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    // (By name: on a shared backend other cases' subscriptions have messages due.)
    let topics = Topics::Named(vec![topic.clone()]);
    for _ in 0..3 {
        let done = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap();
        assert_eq!(done.deliveries, 0);
        clock.advance(10_000);
    }
    assert!(receiver.attempts().is_empty(), "an idle push subscription sends nothing");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(d.deliveries.map(|s| s.attempted), Some(0));
    assert!(all_dead_letters(&queues, &topic, &sub).await.is_empty());
    queues.delete(&topic, &sub).await.unwrap();
    publish(&log, &topic, vec![json_event(json!(1), None)]).await;
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0, "deleted: not pushed");
}

/// A push receive's first look may use heads its process read a moment ago (50 ms); an event
/// this process published since is not passed over for them, whatever the clock says.
pub async fn given_heads_read_a_moment_ago_then_an_event_published_since_by_this_process_is_pushed_at_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-fresh", 1).await;
    subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0);
    // The clock stands still: the heads just read are as recent as can be.
    publish(&log, &topic, vec![json_event(json!("fresh"), None)]).await;
    let done = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap();
    assert_eq!(done.deliveries, 1, "an event this process published was passed over for heads read before it");
}

pub async fn given_a_dispatcher_that_dies_mid_delivery_then_its_batch_is_pushed_again_after_the_window(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-crash", 1).await;
    subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    publish(&log, &topic, (0..3).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let sub = dispatcher.subscriptions(&Topics::Named(vec![topic.clone()])).await.unwrap().remove(0);
    // Received, then the process dies before delivering or settling.
    let held = dispatcher.receive(&sub, 0).await.unwrap();
    assert_eq!(held.len(), 3);
    drop(held);
    // A wake from the table's stream names the topic by its partition heads' key.
    let id = log.describe_topic(&topic).await.unwrap().0.id;
    let heads = sluice_core::keys::heads_pk(id);
    let elsewhere = format!("{}elsewhere", sluice_core::keys::QUEUE_PREFIX);
    let topics = Topics::of_changed([elsewhere.as_str(), heads.as_str()]);
    assert_eq!(topics, Topics::Ids([id].into()), "only the heads' keys count");
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0);
    // The window covers the attempt's timeout (10 s) and settling; the default is 30 s, and
    // an expired window is followed by the redelivery backoff (100 ms here).
    clock.advance(30_099);
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0);
    clock.advance(1);
    let done = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap();
    assert_eq!(done.messages, 3, "nothing lost: pushed once the dead dispatcher's window ended");
    assert!(receiver.attempts().iter().flat_map(|a| &a.items).all(|(_, _, count)| *count == 2));
}

//! Push delivery and content filter conformance cases, on every backend, with a
//! [`ManualClock`]: the dispatcher (`sluice_core::push`) drives a scripted receiver (a
//! [`Deliver`] that answers as a flaky webhook or Lambda function would), so failures,
//! timeouts, partial batches and backoffs are exact and repeatable; the HTTP adapter is
//! tested against a real server in sluice-runtime and end to end against `serve`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};
use sluice_core::ports::deliver::{Answer, Deliver, Delivery};
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{secret_key, Backoff, Ordering, PushSpec, StartAt, SubscriptionSpec};
use sluice_core::{Clock, Code, Error, ManualClock, NewEvent};

use crate::queue_cases::{all_dead_letters, manual, mix, new_topic, publish, receive, scaled, subscribe};
use crate::Backend;

/// Generates one `#[tokio::test]` per push case; `$backend` is an async expression yielding a [`Backend`].
#[macro_export]
macro_rules! push_conformance_suite {
    ($backend:expr) => {
        $crate::push_conformance_suite!(@cases $backend;
            given_a_flaky_receiver_then_every_matching_event_is_pushed_at_least_once_never_after_its_ack_and_poison_dead_letters_once,
            given_signed_deliveries_then_they_verify_the_id_is_stable_across_retries_and_retry_after_is_honoured,
            given_a_push_subscription_then_clients_cannot_receive_it_and_an_idle_one_sends_nothing,
            given_a_dispatcher_that_dies_mid_delivery_then_its_batch_is_pushed_again_after_the_window,
            given_a_filter_on_a_pull_subscription_then_only_matching_events_are_received_and_the_rest_counted,
            given_events_with_a_trace_context_then_a_delivery_carries_the_one_its_batch_shares,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn given_ordering_by_key_under_four_pushers_then_per_key_in_offset_order_and_never_two_at_once() {
            let backend = $backend.await;
            $crate::push_cases::given_ordering_by_key_under_four_pushers_then_per_key_in_offset_order_and_never_two_at_once(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::push_cases::$case(&backend).await;
            }
        )+
    };
}

/// One attempt as the receiver saw it.
#[derive(Debug, Clone)]
struct Attempt {
    webhook_id: Option<String>,
    /// Message ids with their keys and receive counts.
    items: Vec<(String, Option<String>, u32)>,
    /// What the receiver answered failed (all of them for a non-2xx or a timeout).
    failed: HashSet<String>,
    /// The request's `traceparent` and `tracestate` headers.
    trace: (Option<String>, Option<String>),
    /// Each message's `traceparent` header, as the body has it.
    traceparents: Vec<Value>,
}

type Script = dyn Fn(&Value, usize) -> Answer + Send + Sync;

/// A scripted push target: answers each attempt as `script` says (given the body and the
/// attempt's number), keeps every attempt, and checks what at-least-once forbids.
struct Receiver {
    script: Box<Script>,
    attempts: Mutex<Vec<Attempt>>,
    acked: Mutex<HashSet<String>>,
    /// Messages delivered again after an attempt had acked them.
    after_ack: Mutex<Vec<String>>,
    /// Keys in an attempt under way, and keys seen twice at once.
    in_flight: Mutex<HashSet<String>>,
    overlaps: Mutex<Vec<String>>,
    /// The signing key, to check every delivery's signature.
    key: Mutex<Option<Vec<u8>>>,
    bad_signatures: Mutex<usize>,
}

impl Receiver {
    fn new(script: impl Fn(&Value, usize) -> Answer + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            script: Box::new(script),
            attempts: Mutex::default(),
            acked: Mutex::default(),
            after_ack: Mutex::default(),
            in_flight: Mutex::default(),
            overlaps: Mutex::default(),
            key: Mutex::default(),
            bad_signatures: Mutex::default(),
        })
    }

    fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }

    fn acked(&self) -> HashSet<String> {
        self.acked.lock().unwrap().clone()
    }

    fn check_signature(&self, delivery: &Delivery) {
        let Some(key) = self.key.lock().unwrap().clone() else { return };
        let header = |name: &str| delivery.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let (id, ts, sig) = (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"));
        let now_s = ts.as_deref().and_then(|t| t.parse().ok()).unwrap_or(0);
        let valid = match (id, ts, sig) {
            (Some(id), Some(ts), Some(sig)) => webhook::verify(&key, &id, &ts, &sig, &delivery.body, now_s),
            _ => false,
        };
        if !valid {
            *self.bad_signatures.lock().unwrap() += 1;
        }
    }
}

fn items(body: &Value) -> Vec<(String, Option<String>, u32)> {
    body["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    let id = m["id"].as_str().unwrap_or_default().to_owned();
                    (id, m["key"].as_str().map(str::to_owned), m["receive_count"].as_u64().unwrap_or(0) as u32)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[async_trait]
impl Deliver for Receiver {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        self.check_signature(delivery);
        let body: Value = serde_json::from_slice(&delivery.body).expect("a delivery's body is JSON");
        let items = items(&body);
        let keys: Vec<String> = items.iter().filter_map(|(_, k, _)| k.clone()).collect();
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            for k in &keys {
                if !in_flight.insert(k.clone()) {
                    self.overlaps.lock().unwrap().push(k.clone());
                }
            }
        }
        {
            let acked = self.acked.lock().unwrap();
            self.after_ack
                .lock()
                .unwrap()
                .extend(items.iter().filter(|(id, ..)| acked.contains(id)).map(|i| i.0.clone()));
        }
        // Let other deliveries run meanwhile (a slow receiver).
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        let n = self.attempts.lock().unwrap().len();
        let answer = (self.script)(&body, n);
        let ids: Vec<String> = items.iter().map(|i| i.0.clone()).collect();
        let failed = sluice_core::push::judge(&answer, &ids).failed;
        self.acked.lock().unwrap().extend(ids.iter().filter(|id| !failed.contains(*id)).cloned());
        let header = |name: &str| delivery.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let (webhook_id, trace) = (header("webhook-id"), (header("traceparent"), header("tracestate")));
        let traceparents = body["messages"].as_array().into_iter().flatten();
        let traceparents = traceparents.map(|m| m["headers"]["traceparent"].clone()).collect();
        self.attempts.lock().unwrap().push(Attempt { webhook_id, items, failed, trace, traceparents });
        let mut in_flight = self.in_flight.lock().unwrap();
        for k in &keys {
            in_flight.remove(k);
        }
        answer
    }
}

fn ok(body: Value) -> Answer {
    Answer::Status { status: 200, retry_after_ms: None, body: serde_json::to_vec(&body).unwrap() }
}

fn status(status: u16, retry_after_ms: Option<u64>) -> Answer {
    Answer::Status { status, retry_after_ms, body: b"nope".to_vec() }
}

fn json_event(value: Value, key: Option<String>) -> NewEvent {
    NewEvent {
        key: key.map(Bytes::from),
        headers: Vec::new(),
        value: Bytes::from(value.to_string()),
        value_is_json: true,
        timestamp_ms: None,
        partition: None,
    }
}

fn push_spec(push: PushSpec, max_receive_count: u32, backoff_ms: u64) -> SubscriptionSpec {
    SubscriptionSpec {
        start: StartAt::Earliest,
        max_receive_count,
        redelivery_backoff: Some(Backoff::Steps(vec![backoff_ms])),
        push: Some(push),
        ..SubscriptionSpec::default()
    }
}

/// Drains `topic`'s push subscriptions, moving the clock by `step` between rounds, until a
/// round delivers nothing twice in a row (nothing due, nothing waiting a step away).
async fn drain_all(dispatcher: &Dispatcher, clock: &ManualClock, topic: &str, step: i64) {
    let topics = Topics::Named(vec![topic.to_owned()]);
    let mut idle = 0;
    for _ in 0..500 {
        let done = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
        idle = if done.deliveries == 0 { idle + 1 } else { 0 };
        if idle == 2 {
            return;
        }
        clock.advance(step);
    }
    panic!("the push subscription never drained");
}

pub async fn given_a_flaky_receiver_then_every_matching_event_is_pushed_at_least_once_never_after_its_ack_and_poison_dead_letters_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push", 2).await;
    let filter = json!({"value": {"kind": [{"anything-but": "noise"}]}});
    let push = PushSpec { max_batch: 5, ..PushSpec::url("https://receiver.test/hook", None) };
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
            30..40 if fresh => Answer::Failed("timed out".into()),
            _ => {
                failures.dedup();
                ok(json!({"batchItemFailures": failures}))
            }
        }
    });
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
    assert_eq!(*receiver.bad_signatures.lock().unwrap(), 0);
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
    let heads = sluice_core::layout::heads_pk(id);
    let topics = Topics::of_changed(["q#elsewhere", heads.as_str()]);
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

pub async fn given_a_filter_on_a_pull_subscription_then_only_matching_events_are_received_and_the_rest_counted(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "filtered", 2).await;
    let filter = json!({"$or": [
        {"headers": {"type": ["order.created"]}},
        {"value": {"total": [{"numeric": [">=", 100]}]}}
    ]});
    let spec = SubscriptionSpec { start: StartAt::Earliest, filter: Some(filter), ..SubscriptionSpec::default() };
    let sub = subscribe(&queues, &topic, spec).await;
    let mut events = Vec::new();
    let mut wanted = BTreeMap::new();
    for i in 0..600u64 {
        // Bytes values match on headers only; JSON values also on their content.
        let (event, matches) = match i % 3 {
            0 => {
                let kind = if i % 2 == 0 { "order.created" } else { "order.paid" };
                let mut e = json_event(json!(null), None);
                e.value = Bytes::from(format!("raw {i}"));
                e.value_is_json = false;
                e.headers = vec![("type".into(), Bytes::from(kind))];
                (e, kind == "order.created")
            }
            _ => (json_event(json!({"total": i % 200}), None), i % 200 >= 100),
        };
        events.push(event);
        wanted.insert(i, matches);
    }
    let at = publish(&log, &topic, events).await;
    let mut got = HashSet::new();
    loop {
        let batch = receive(&queues, &topic, &sub, 10).await;
        if batch.is_empty() {
            break;
        }
        for m in &batch {
            assert!(got.insert((m.event.partition, m.event.offset)), "received twice");
            queues.ack(&topic, &sub, std::slice::from_ref(&m.receipt)).await.unwrap();
        }
    }
    let expected: HashSet<(u32, u64)> =
        at.iter().enumerate().filter(|(i, _)| wanted[&(*i as u64)]).map(|(_, p)| (p.partition, p.offset)).collect();
    assert_eq!(got, expected, "exactly the matching events are received");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(d.backlog.filtered, (600 - expected.len()) as u64);
    assert_eq!(d.backlog.visible, 0);
    // An invalid pattern is refused with its reason, and nothing is created.
    let bad =
        SubscriptionSpec { filter: Some(json!({"value": {"n": [{"prefx": "a"}]}})), ..SubscriptionSpec::default() };
    match queues.create(&topic, "bad-filter", bad).await {
        Err(Error::Invalid { code: Code::InvalidFilter, message }) => assert!(message.contains("prefx"), "{message}"),
        other => panic!("an invalid filter: {other:?}"),
    }
    assert!(queues.list(&topic).await.unwrap().iter().all(|s| s.name != "bad-filter"));
}

pub async fn given_events_with_a_trace_context_then_a_delivery_carries_the_one_its_batch_shares(backend: &dyn Backend) {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OTHER: &str = "00-11111111111111111111111111111111-2222222222222222-00";
    let traced = |value: i64, traceparent: Option<&str>| {
        let mut e = json_event(json!(value), None);
        if let Some(parent) = traceparent {
            e.headers.push(("traceparent".into(), Bytes::from(parent.to_owned())));
            e.headers.push(("tracestate".into(), Bytes::from_static(b"rojo=1")));
        }
        e
    };
    for target in [PushSpec::url("https://receiver.test/", None), PushSpec::lambda("consumer")] {
        let (clock, log, queues) = manual(backend).await;
        let topic = new_topic(&log, "push-trace", 1).await;
        subscribe(&queues, &topic, push_spec(PushSpec { max_batch: 2, ..target.clone() }, 5, 100)).await;
        // Batches of two, in offset order: one sharing PARENT; then OTHER and an untraced event.
        let events = vec![traced(1, Some(PARENT)), traced(2, Some(PARENT)), traced(3, Some(OTHER)), traced(4, None)];
        publish(&log, &topic, events).await;
        let receiver = Receiver::new(|_, _| ok(json!({})));
        drain_all(&Dispatcher::new(queues.clone(), receiver.clone()), &clock, &topic, 1_000).await;

        let attempts = receiver.attempts();
        assert_eq!(attempts.len(), 2, "{target:?}: two batches");
        assert_eq!(attempts[0].trace, (Some(PARENT.into()), Some("rojo=1".into())), "{target:?}: the shared context");
        assert_eq!(attempts[1].trace, (None, None), "{target:?}: no context when the messages' differ");
        // And each message's own, in the body (a Lambda target's payload).
        assert_eq!(attempts[0].traceparents, vec![json!(PARENT), json!(PARENT)], "{target:?}");
        assert_eq!(attempts[1].traceparents, vec![json!(OTHER), Value::Null], "{target:?}");
    }
}

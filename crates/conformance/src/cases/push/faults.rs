//! The push fault cases: a dispatcher's store write whose answer is lost (the ack after a
//! 2xx, the receive that took a batch), and two dispatchers (two processes) on one keyed
//! subscription. The promises are the pull queue's: nothing pushed again after its ack
//! was applied, nothing lost when it was not, one holder per window, per key in order.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;
use sluice_core::ports::state::{StateStore, WriteOp};
use sluice_core::push::{Dispatcher, Topics};
use sluice_core::queues::{Ordering, PushSpec, Queues, SubscriptionSpec};
use sluice_core::{Clock, Log, ManualClock, NewEvent, StorageError};
use sluice_testkit::{Layered, StateLayer};

use super::receiver::*;
use crate::cases::support::faults::{Fault, QueueWriteFaults};
use crate::cases::support::queues::{manual, mix, new_topic, publish, queues_on, scaled, subscribe, START_MS};
use crate::Backend;

/// A one-partition topic with three messages and a push subscription (backoff 100 ms) on
/// clean queues, and queues on the same storage whose queue writes meet `script`.
async fn faulty(backend: &dyn Backend, script: &[Option<Fault>]) -> (Arc<ManualClock>, Queues, Queues, String, String) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, clean) = queues_on(backend, clock.clone()).await;
    let (store, objects) = backend.open_with(clock.clone()).await;
    let store = Arc::new(Layered::new(store, QueueWriteFaults::new(script)));
    let faulty = Queues::new(Log::new(store, objects, clock.clone(), crate::log_config()));
    let topic = new_topic(&log, "push-faults", 1).await;
    let sub =
        subscribe(&clean, &topic, push_spec(PushSpec::url("https://receiver.test/", Some(SECRET.into())), 5, 100))
            .await;
    publish(&log, &topic, (0..3).map(|i| json_event(json!(i), None)).collect()).await;
    (clock, clean, faulty, topic, sub)
}

/// The receiver answered 2xx, then the ack's write lost its answer. Applied: the batch is
/// never pushed again. Not applied: it is pushed again once the window ends, the same batch
/// under the same webhook-id (a receiver that deduplicates by it does nothing twice).
pub async fn given_the_ack_answer_after_a_2xx_is_lost_then_an_applied_ack_holds_and_a_lost_one_repushes_the_batch(
    backend: &dyn Backend,
) {
    for fault in [Fault::LoseAnswer, Fault::FailBefore] {
        // The receive's write passes; the ack's meets the fault.
        let (clock, clean, faulty, topic, sub) = faulty(backend, &[None, Some(fault)]).await;
        let receiver = Receiver::new(|_, _| ok(json!({}))).verifying(SECRET);
        let topics = Topics::Named(vec![topic.clone()]);
        let dispatcher = Dispatcher::new(faulty, receiver.clone());
        let run = dispatcher.drain(&topics, clock.now_ms() + 60_000).await;
        assert!(run.is_err(), "{fault:?}: the run reports the lost answer");
        assert_eq!(receiver.attempts().len(), 1);
        let again = Dispatcher::new(clean.clone(), receiver.clone());
        // The window (30 s) and the redelivery backoff (100 ms).
        clock.advance(30_099);
        assert_eq!(again.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0, "{fault:?}");
        clock.advance(1);
        let done = again.drain(&topics, clock.now_ms() + 60_000).await.unwrap();
        let attempts = receiver.attempts();
        match fault {
            Fault::LoseAnswer => {
                assert_eq!(done.deliveries, 0, "an applied ack: never pushed again");
                assert!(receiver.after_ack.lock().unwrap().is_empty());
            }
            Fault::FailBefore => {
                assert_eq!(done.deliveries, 1, "a lost ack: pushed again");
                let ids = |i: usize| attempts[i].items.iter().map(|m| m.0.clone()).collect::<Vec<_>>();
                assert_eq!(ids(1), ids(0), "the same batch, in the same order");
                assert_eq!(attempts[1].webhook_id, attempts[0].webhook_id, "under the same webhook-id");
                assert!(attempts[1].items.iter().all(|m| m.2 == 2));
            }
            Fault::Throttle => unreachable!("not in this case's list"),
        }
        let d = clean.describe(&topic, &sub).await.unwrap();
        assert_eq!((d.backlog.visible, d.backlog.in_flight, d.backlog.dead), (0, 0, 0), "{fault:?}");
    }
}

/// The receive took the batch, and its answer was lost: nobody pushes it within that
/// window; then it is pushed, once, counting the lost delivery.
pub async fn given_a_push_receive_whose_answer_is_lost_then_nothing_is_pushed_until_its_window_ends_then_once(
    backend: &dyn Backend,
) {
    let (clock, clean, faulty, topic, sub) = faulty(backend, &[Some(Fault::LoseAnswer)]).await;
    let receiver = Receiver::new(|_, _| ok(json!({}))).verifying(SECRET);
    let topics = Topics::Named(vec![topic.clone()]);
    assert!(Dispatcher::new(faulty, receiver.clone()).drain(&topics, clock.now_ms() + 60_000).await.is_err());
    let dispatcher = Dispatcher::new(clean.clone(), receiver.clone());
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0);
    let d = clean.describe(&topic, &sub).await.unwrap();
    assert_eq!(d.backlog.in_flight, 3, "held by a receive nobody heard");
    clock.advance(30_099);
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0);
    clock.advance(1);
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 1);
    clock.advance(60_000);
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0, "pushed once");
    let attempts = receiver.attempts();
    assert_eq!(attempts.len(), 1);
    assert!(attempts[0].items.iter().all(|m| m.2 == 2), "the lost delivery counts: {:?}", attempts[0].items);
}

/// Two dispatchers (two processes: two logs and queues on one store) drain one keyed
/// subscription at once, with retries: a key's attempts never overlap and follow its
/// offsets, and each message is acked exactly once.
pub async fn given_two_dispatchers_on_one_keyed_subscription_then_a_key_is_pushed_in_order_never_twice_at_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let (_, other) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "push-two", 2).await;
    let push = PushSpec { max_batch: 3, max_in_flight: 2, ..PushSpec::lambda("consumer") };
    let spec = SubscriptionSpec { ordering: Ordering::Key, ..push_spec(push, 1000, 50) };
    let sub = subscribe(&queues, &topic, spec).await;
    let per_key = scaled(backend, 10).max(5);
    let events: Vec<NewEvent> =
        (0..per_key * 5).map(|i| json_event(json!({"n": i}), Some(format!("k{}", i % 5)))).collect();
    publish(&log, &topic, events).await;
    let receiver = Receiver::new(|_, attempt| match mix(attempt as u64 + 3) % 4 {
        0 => status(503, None),
        _ => ok(json!({})),
    });
    let (one, two) = (Dispatcher::new(queues.clone(), receiver.clone()), Dispatcher::new(other, receiver.clone()));
    let topics = Topics::Named(vec![topic.clone()]);
    let mut idle = 0;
    for _ in 0..500 {
        let deadline = clock.now_ms() + 60_000;
        let (a, b) = tokio::join!(one.drain(&topics, deadline), two.drain(&topics, deadline));
        let delivered = a.unwrap().deliveries + b.unwrap().deliveries;
        idle = if delivered == 0 { idle + 1 } else { 0 };
        if idle == 2 {
            break;
        }
        clock.advance(50);
    }
    assert_eq!(idle, 2, "never drained");
    assert!(receiver.overlaps.lock().unwrap().is_empty(), "two attempts of one key at once");
    let mut acked: HashMap<String, Vec<u64>> = HashMap::new();
    let mut acks: HashMap<String, usize> = HashMap::new();
    for a in receiver.attempts() {
        for (id, key, _) in &a.items {
            let offset: u64 = id.rsplit('/').next().unwrap().parse().unwrap();
            let done = acked.entry(key.clone().unwrap()).or_default();
            assert!(done.last().is_none_or(|last| *last < offset), "{id} pushed out of its key's order");
            if !a.failed.contains(id) {
                done.push(offset);
                *acks.entry(id.clone()).or_default() += 1;
            }
        }
    }
    assert_eq!(acks.len(), per_key * 5, "every message acked");
    assert!(acks.values().all(|n| *n == 1), "a message acked twice: {acks:?}");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight, d.backlog.dead), (0, 0, 0));
}

/// Holds the answer of the next queue write once armed (applied, not yet answered) until
/// opened: a take caught between its write and its answer.
#[derive(Default)]
struct Gate {
    armed: std::sync::atomic::AtomicBool,
    reached: tokio::sync::Notify,
    open: tokio::sync::Notify,
}

/// A store layer with a [`Gate`] in its writes.
struct Gated(Arc<Gate>);

#[async_trait::async_trait]
impl StateLayer for Gated {
    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let queue_write = ops.iter().any(|op| op.key().pk.starts_with(sluice_core::keys::QUEUE_PREFIX));
        let result = inner.write(ops).await;
        if queue_write && self.0.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.0.reached.notify_one();
            self.0.open.notified().await;
        }
        result
    }

    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write(inner, ops).await
    }
}

/// The embedded dispatcher told to stop while a receive is taking a batch: the take is not
/// cut off after its write (which would leave the batch held by no one until its window
/// ends, a delivery of each spent); the batch is delivered and settled before it stops.
pub async fn given_a_dispatcher_stopped_while_a_receive_takes_a_batch_then_the_batch_is_delivered_and_settled(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, clean) = queues_on(backend, clock.clone()).await;
    let (store, objects) = backend.open_with(clock.clone()).await;
    let gate = Arc::new(Gate::default());
    let gated =
        Queues::new(Log::new(Arc::new(Layered::new(store, Gated(gate.clone()))), objects, clock, crate::log_config()));
    let topic = new_topic(&log, "push-stop", 1).await;
    let push = PushSpec { max_in_flight: 1, ..PushSpec::url("https://receiver.test/", Some(SECRET.into())) };
    let sub = subscribe(&clean, &topic, push_spec(push, 5, 100)).await;
    publish(&log, &topic, (0..3).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, _| ok(json!({}))).verifying(SECRET);
    let dispatcher = Dispatcher::new(gated, receiver.clone());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    gate.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let topics = Topics::Named(vec![topic.clone()]);
    let running = tokio::spawn(async move { dispatcher.run_on(&topics, stopping).await });
    let patience = crate::cases::support::queues::REAL_PATIENCE;
    tokio::time::timeout(patience, gate.reached.notified()).await.expect("the receive's take was written");
    stop.send(true).unwrap();
    // Time for the dispatcher to act on the stop: a worker that dropped its receive would
    // let it end now; one that finishes its take cannot end before the gate opens.
    for _ in 0..100 {
        if running.is_finished() {
            break;
        }
        tokio::task::yield_now().await;
    }
    gate.open.notify_one();
    tokio::time::timeout(patience, running).await.expect("the dispatcher stopped").unwrap();
    let attempts = receiver.attempts();
    assert_eq!(attempts.len(), 1, "the batch taken as the stop came is delivered");
    assert!(attempts[0].items.iter().all(|m| m.2 == 1), "its first delivery: {:?}", attempts[0].items);
    let d = clean.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight), (0, 0), "and settled, not left held");
}

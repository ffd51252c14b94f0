//! The embedded dispatcher's workers (`Dispatcher::run`): a batch's acks ride on the
//! worker's next receive, one queue write per batch instead of two, and are written on
//! their own rather than held while the worker waits for a slot (a `Retry-After`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;
use sluice_core::ports::state::{StateStore, WriteOp};
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{PushSpec, Queues};
use sluice_core::{Log, ManualClock, StorageError};
use sluice_testkit::{Layered, StateLayer};

use super::receiver::*;
use crate::cases::support::queues::{new_topic, publish, queues_on, subscribe, REAL_PATIENCE, START_MS};
use crate::Backend;

/// A store layer counting the writes of queue items.
struct QueueWrites(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl StateLayer for QueueWrites {
    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        if ops.iter().any(|op| op.key().pk.starts_with(sluice_core::keys::QUEUE_PREFIX)) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        inner.write(ops).await
    }

    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        if ops.iter().any(|op| op.key().pk.starts_with(sluice_core::keys::QUEUE_PREFIX)) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        inner.write_deferred(ops).await
    }
}

/// Waits (in real time, the clock still) until `queues` shows `sub`'s backlog as
/// `(visible, in_flight, delayed)`.
async fn backlog_reaches(queues: &Queues, topic: &str, sub: &str, want: (u64, u64, u64)) -> bool {
    let deadline = tokio::time::Instant::now() + REAL_PATIENCE;
    while tokio::time::Instant::now() < deadline {
        let b = queues.describe(topic, sub).await.expect("describe").backlog;
        if (b.visible, b.in_flight, b.delayed) == want {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    false
}

pub async fn given_a_running_dispatcher_then_a_batchs_acks_ride_on_its_next_receive_one_queue_write_per_batch(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, clean) = queues_on(backend, clock.clone()).await;
    let (store, objects) = backend.open_with(clock.clone()).await;
    let writes = Arc::new(AtomicUsize::new(0));
    let counted = Queues::new(Log::new(
        Arc::new(Layered::new(store, QueueWrites(writes.clone()))),
        objects,
        clock.clone(),
        crate::log_config(),
    ));
    let topic = new_topic(&log, "push-riding", 1).await;
    let push =
        PushSpec { max_batch: 1, max_in_flight: 1, ..PushSpec::url("https://receiver.test/", Some(SECRET.into())) };
    let sub = subscribe(&clean, &topic, push_spec(push, 5, 100)).await;
    let batches = 12;
    publish(&log, &topic, (0..batches).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, _| ok(json!({}))).verifying(SECRET);
    let dispatcher = Dispatcher::new(counted, receiver.clone());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let topics = Topics::Named(vec![topic.clone()]);
    let running = tokio::spawn(async move { dispatcher.run_on(&topics, stopping).await });

    assert!(backlog_reaches(&clean, &topic, &sub, (0, 0, 0)).await, "every message pushed and acked");
    let written = writes.load(Ordering::SeqCst);
    stop.send(true).unwrap();
    tokio::time::timeout(REAL_PATIENCE, running).await.expect("the dispatcher stopped").unwrap();
    assert_eq!(receiver.attempts().len(), batches, "one attempt per message");
    assert_eq!(*receiver.bad_signatures.lock().unwrap(), 0, "signed");
    // A receive and an ack per batch would be 24; riding, a take's write carries the last
    // batch's acks, and the receive after the last batch writes its acks alone.
    assert!(written <= batches + 1, "{written} queue writes for {batches} batches: acks written on their own");
}

pub async fn given_a_running_dispatcher_waiting_for_a_retry_after_then_a_delivered_batchs_acks_are_written_not_held(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "push-riding-429", 1).await;
    let push = PushSpec { max_batch: 1, max_in_flight: 2, ..PushSpec::lambda("consumer") };
    let sub = subscribe(&queues, &topic, push_spec(push, 5, 100)).await;
    let at = publish(&log, &topic, (0..2).map(|i| json_event(json!(i), None)).collect()).await;
    // The first answer holds the subscription back for a minute, past the other batch's
    // window (30 s): its ack must not wait for it.
    let receiver = Receiver::new(|_, n| if n == 0 { status(429, Some(60_000)) } else { ok(json!({})) });
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let topics = Topics::Named(vec![topic.clone()]);
    let running = tokio::spawn(async move { dispatcher.run_on(&topics, stopping).await });

    let both = || receiver.attempts().len() == 2;
    assert!(super::pause::until(&clock, 0, both).await, "the throttled attempt and the other one");
    // The clock still, well inside the delivered batch's window: its ack is written while
    // the worker waits for Retry-After, not held for the minute (past its window).
    let acked = backlog_reaches(&queues, &topic, &sub, (0, 0, 1)).await;
    assert!(acked, "the delivered batch acked, the throttled one released for a minute");
    let id = |p: &sluice_core::Position| webhook::message_id(&topic, p.partition, p.offset);
    let all = || at.iter().all(|p| receiver.acked().contains(&id(p)));
    assert!(super::pause::until(&clock, 1_000, all).await, "both messages pushed once Retry-After passed");
    assert!(backlog_reaches(&queues, &topic, &sub, (0, 0, 0)).await, "everything acked");
    stop.send(true).unwrap();
    clock.advance(10_000);
    tokio::time::timeout(REAL_PATIENCE, running).await.expect("the dispatcher stopped").unwrap();
    let attempts = receiver.attempts();
    assert_eq!(attempts[0].failed.len(), 1, "the first attempt was throttled: {attempts:?}");
    assert_eq!(receiver.after_ack.lock().unwrap().clone(), Vec::<String>::new(), "pushed again after its 2xx");
    assert_eq!(attempts.len(), 3, "the throttled batch once more, nothing else: {attempts:?}");
}

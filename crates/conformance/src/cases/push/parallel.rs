//! Dispatcher runs in parallel (many function instances at once): a subscription is driven
//! by one run at a time, so its `max_in_flight` holds across runs, while different
//! subscriptions are delivered at the same time.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};
use sluice_core::ports::deliver::{Answer, Deliver, Delivery};
use sluice_core::push::{Dispatcher, Topics};
use sluice_core::queues::PushSpec;
use sluice_core::{Clock, NewEvent};

use super::receiver::{items, json_event, ok, push_spec};
use crate::cases::support::queues::{manual, new_topic, publish, queues_on, subscribe};
use crate::Backend;

/// A slow receiver that keeps what was in flight at once, per subscription.
#[derive(Default)]
struct Counting {
    /// Attempts under way, by subscription; and the messages in them.
    in_flight: Mutex<(HashMap<String, usize>, HashSet<String>)>,
    /// The most attempts under way at once, by subscription.
    most: Mutex<HashMap<String, usize>>,
    /// The most subscriptions with an attempt under way at once.
    most_subs: Mutex<usize>,
    /// Messages sent while an attempt holding them was under way.
    doubled: Mutex<Vec<String>>,
    acked: Mutex<HashMap<String, usize>>,
    /// Told whenever an attempt starts.
    changed: tokio::sync::Notify,
    /// Set once an attempt waited in vain for the other subscription: no attempt waits again.
    gave_up: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Deliver for Counting {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        let body: Value = serde_json::from_slice(&delivery.body).expect("a delivery's body is JSON");
        let sub = body["subscription"].as_str().unwrap_or_default().to_owned();
        // The same event is a message of each subscription: told apart by the subscription.
        let ids: Vec<String> = items(&body).into_iter().map(|(id, ..)| format!("{sub}:{id}")).collect();
        {
            let mut guard = self.in_flight.lock().unwrap();
            let (subs, messages) = &mut *guard;
            let n = subs.entry(sub.clone()).or_default();
            *n += 1;
            let mut most = self.most.lock().unwrap();
            let top = most.entry(sub.clone()).or_default();
            *top = (*top).max(*n);
            let busy = subs.values().filter(|n| **n > 0).count();
            let mut most_subs = self.most_subs.lock().unwrap();
            *most_subs = (*most_subs).max(busy);
            self.changed.notify_waiters();
            for id in &ids {
                if !messages.insert(id.clone()) {
                    self.doubled.lock().unwrap().push(id.clone());
                }
            }
        }
        // A slow receiver: every other worker of every run gets to start its attempt, and
        // until two subscriptions have been under way at once, each attempt waits for that
        // (a run on a store with real latency, moto's, starts the other's later than any
        // number of yields). The wait has a bound so that a design that never overlaps them
        // fails the assertion below instead of hanging; passing never depends on it.
        for _ in 0..64 {
            tokio::task::yield_now().await;
        }
        let overlapped = async {
            while *self.most_subs.lock().unwrap() < 2 {
                let changed = self.changed.notified();
                if *self.most_subs.lock().unwrap() >= 2 {
                    break;
                }
                changed.await;
            }
        };
        if !self.gave_up.load(std::sync::atomic::Ordering::Relaxed)
            && tokio::time::timeout(std::time::Duration::from_secs(10), overlapped).await.is_err()
        {
            self.gave_up.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut guard = self.in_flight.lock().unwrap();
        let (subs, messages) = &mut *guard;
        *subs.entry(sub).or_default() -= 1;
        let mut acked = self.acked.lock().unwrap();
        for id in ids {
            messages.remove(&id);
            *acked.entry(id).or_default() += 1;
        }
        ok(json!({}))
    }
}

/// Drains `topics` with every dispatcher at once, moving the clock between rounds, until a
/// round delivers nothing twice in a row.
async fn drain_together(dispatchers: &[Dispatcher], clock: &sluice_core::ManualClock, topics: &Topics) {
    let mut idle = 0;
    for _ in 0..200 {
        let deadline = clock.now_ms() + 60_000;
        let runs = dispatchers.iter().map(|d| d.drain(topics, deadline));
        let delivered: u64 =
            futures_util::future::join_all(runs).await.into_iter().map(|r| r.unwrap().deliveries).sum();
        idle = if delivered == 0 { idle + 1 } else { 0 };
        if idle == 2 {
            return;
        }
        clock.advance(50);
    }
    panic!("never drained");
}

pub async fn given_concurrent_runs_then_a_subscription_has_at_most_max_in_flight_and_subscriptions_run_in_parallel(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let mut dispatchers = Vec::new();
    let receiver = Arc::new(Counting::default());
    for _ in 0..3 {
        let (_, other) = queues_on(backend, clock.clone()).await;
        dispatchers.push(Dispatcher::new(other, receiver.clone()));
    }
    dispatchers.push(Dispatcher::new(queues.clone(), receiver.clone()));
    let topic = new_topic(&log, "push-parallel", 4).await;
    let push = PushSpec { max_batch: 2, max_in_flight: 2, ..PushSpec::lambda("consumer") };
    let subs = [subscribe(&queues, &topic, push_spec(push.clone(), 5, 50)).await, {
        subscribe(&queues, &topic, push_spec(push, 5, 50)).await
    }];
    let events: Vec<NewEvent> = (0..48).map(|i| json_event(json!({"n": i}), Some(format!("k{i}")))).collect();
    publish(&log, &topic, events).await;
    drain_together(&dispatchers, &clock, &Topics::Named(vec![topic.clone()])).await;
    let most = receiver.most.lock().unwrap().clone();
    for sub in &subs {
        let top = most.get(sub).copied().unwrap_or_default();
        assert!(top <= 2, "{sub}: {top} attempts at once across runs, over its max_in_flight of 2");
        assert!(top >= 1, "{sub}: nothing delivered");
    }
    assert!(receiver.doubled.lock().unwrap().is_empty(), "a message sent by two attempts at once");
    assert_eq!(*receiver.most_subs.lock().unwrap(), 2, "the two subscriptions were never delivered at once");
    // Each message of each subscription pushed once, and acked.
    let acked = receiver.acked.lock().unwrap().clone();
    assert_eq!(acked.len(), 2 * 48, "every message pushed");
    assert!(acked.values().all(|n| *n == 1), "a message pushed twice: {acked:?}");
    for sub in &subs {
        let d = queues.describe(&topic, sub).await.unwrap();
        assert_eq!((d.backlog.visible, d.backlog.in_flight), (0, 0), "{sub}");
    }
}

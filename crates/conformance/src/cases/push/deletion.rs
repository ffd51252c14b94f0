//! Push subscriptions and topics deleted while a delivery is under way: the dispatcher
//! ends that subscription's work and its run still succeeds, the others' work done.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};
use sluice_core::ports::deliver::{Answer, Deliver, Delivery};
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{PushSpec, Queues};
use sluice_core::{Clock, Log};

use super::receiver::*;
use crate::cases::support::queues::{manual, new_topic, publish, queues_on, subscribe};
use crate::Backend;

/// A target that, while the attempt for `doomed` (a subscription) or for `doomed_topic`'s
/// subscription is under way, has another process delete it, then answers as `inner`.
struct Deleter {
    inner: Arc<Receiver>,
    admin_log: Log,
    admin: Queues,
    doomed: (String, String),
    doomed_topic: String,
    /// Attempts by subscription name.
    attempts: Mutex<HashMap<String, usize>>,
}

#[async_trait]
impl Deliver for Deleter {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        let body: Value = serde_json::from_slice(&delivery.body).expect("a delivery's body is JSON");
        let (topic, sub) = (body["topic"].as_str().unwrap(), body["subscription"].as_str().unwrap());
        let first = {
            let mut attempts = self.attempts.lock().unwrap();
            let n = attempts.entry(sub.to_owned()).or_default();
            *n += 1;
            *n == 1
        };
        if first && (topic, sub) == (self.doomed.0.as_str(), self.doomed.1.as_str()) {
            self.admin.delete(topic, sub).await.expect("delete the subscription mid-delivery");
        }
        if first && topic == self.doomed_topic {
            self.admin_log.delete_topic(topic).await.expect("delete the topic mid-delivery");
        }
        self.inner.deliver(delivery).await
    }
}

pub async fn given_a_subscription_or_topic_deleted_mid_delivery_then_the_run_succeeds_and_the_others_are_delivered(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let (admin_log, admin) = queues_on(backend, clock.clone()).await;
    let push = || push_spec(PushSpec { max_batch: 2, max_in_flight: 1, ..PushSpec::lambda("consumer") }, 5, 100);
    let shared = new_topic(&log, "push-del", 1).await;
    let kept = subscribe(&queues, &shared, push()).await;
    let doomed = subscribe(&queues, &shared, push()).await;
    let other = new_topic(&log, "push-del-topic", 1).await;
    let orphan = subscribe(&queues, &other, push()).await;
    let at = publish(&log, &shared, (0..6).map(|i| json_event(json!(i), None)).collect()).await;
    publish(&log, &other, (0..6).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let deleter = Arc::new(Deleter {
        inner: receiver.clone(),
        admin_log,
        admin,
        doomed: (shared.clone(), doomed.clone()),
        doomed_topic: other.clone(),
        attempts: Mutex::default(),
    });
    let dispatcher = Dispatcher::new(queues.clone(), deleter.clone());

    let topics = Topics::Named(vec![shared.clone(), other.clone()]);
    let done = dispatcher.drain(&topics, clock.now_ms() + 60_000).await;
    let done = done.expect("a deletion mid-delivery ends that subscription's work, not the run");

    let attempts = deleter.attempts.lock().unwrap().clone();
    assert_eq!(attempts.get(&doomed), Some(&1), "nothing more for a deleted subscription");
    assert_eq!(attempts.get(&orphan), Some(&1), "nothing more for a deleted topic's subscription");
    assert_eq!(attempts.get(&kept), Some(&3), "the other subscription delivered in full");
    assert_eq!(done.deliveries, 5);
    let d = queues.describe(&shared, &kept).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight), (0, 0), "the other subscription's batches were settled");
    let acked = receiver.acked();
    assert!((0..6).all(|i| acked.contains(&webhook::message_id(&shared, at[i].partition, at[i].offset))));
    // A later run finds neither and succeeds too.
    clock.advance(60_000);
    let later = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("a run after the deletions");
    assert_eq!(later.deliveries, 0);
}

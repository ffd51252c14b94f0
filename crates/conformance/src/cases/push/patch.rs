//! A push subscription changed in place: a dispatcher holding the old settings takes
//! nothing more with them, and a running one delivers to the new target from then on.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;
use sluice_core::ports::deliver::{Answer, Deliver, Delivery, Destination};
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{PushPatch, PushSpec, SubscriptionPatch};
use sluice_core::Error;

use super::receiver::*;
use crate::cases::support::queues::{manual, new_topic, publish, subscribe, REAL_PATIENCE};
use crate::Backend;

/// The receiver, noting where each delivery went.
struct Destinations {
    receiver: Arc<Receiver>,
    seen: Mutex<Vec<Destination>>,
}

#[async_trait]
impl Deliver for Destinations {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        self.seen.lock().unwrap().push(delivery.destination.clone());
        self.receiver.deliver(delivery).await
    }
}

fn to(function: &str) -> SubscriptionPatch {
    let push = PushPatch { lambda: Some(function.into()), ..PushPatch::default() };
    SubscriptionPatch { push: Some(push), ..SubscriptionPatch::default() }
}

pub async fn given_a_push_target_changed_then_no_delivery_after_the_answer_goes_to_the_old_one(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-patched", 1).await;
    let push = PushSpec { max_in_flight: 2, ..PushSpec::lambda("before") };
    let sub = subscribe(&queues, &topic, push_spec(push, 5, 100)).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let deliver = Arc::new(Destinations { receiver: receiver.clone(), seen: Mutex::default() });
    let dispatcher = Dispatcher::new(queues.clone(), deliver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    let listed = dispatcher.subscriptions(&topics).await.unwrap().remove(0);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let running = {
        let (dispatcher, topics) = (dispatcher.clone(), topics.clone());
        tokio::spawn(async move { dispatcher.run_on(&topics, stopping).await })
    };
    let id = |p: &sluice_core::Position| webhook::message_id(&topic, p.partition, p.offset);
    let first = publish(&log, &topic, vec![json_event(json!("before"), None)]).await;
    let pushed = |ids: Vec<String>| {
        let receiver = receiver.clone();
        move || ids.iter().all(|i| receiver.acked().contains(i))
    };
    assert!(advance_until(&clock, pushed(vec![id(&first[0])])).await, "pushed to the first target");

    queues.patch(&topic, &sub, &to("after")).await.expect("change the target");
    let seen_at_answer = deliver.seen.lock().unwrap().len();
    let got = dispatcher.receive(&listed, 0).await;
    assert!(matches!(got, Err(Error::SubscriptionNotFound { .. })), "a dispatcher holding the old target: {got:?}");
    let later = publish(&log, &topic, (0..3).map(|i| json_event(json!(i), None)).collect()).await;
    assert!(advance_until(&clock, pushed(later.iter().map(id).collect())).await, "pushed after the change");
    stop.send(true).unwrap();
    running.await.unwrap();

    let after: Vec<Destination> = deliver.seen.lock().unwrap()[seen_at_answer..].to_vec();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|d| *d == Destination::Lambda("after".into())),
        "every delivery after the change answered went to the new target: {after:?}"
    );
}

/// Moves the clock a second at a time, letting the dispatcher's tasks run, until `done`.
async fn advance_until(clock: &sluice_core::ManualClock, done: impl Fn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + REAL_PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        clock.advance(100);
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    done()
}

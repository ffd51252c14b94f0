//! Leases kept inside the cursor item, and acks riding on a receive (`ack_and_receive`,
//! JetStream's "ack next"): written with the receive's own write on their partition when
//! their leases are inline in its cursor item, on their own otherwise. Either way an ack
//! answers once, an acked message never comes back, and a stale receipt is refused.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use sluice_core::queues::{Message, Queues, ReceiptError, StartAt, SubscriptionSpec};

use crate::cases::support::queues::{
    ack, assert_nothing, at, change_visibility, event, manual, new_topic, positions, publish, publish_at, request,
    scaled, spec, subscribe, START_MS,
};
use crate::Backend;

fn receipts(messages: &[Message]) -> Vec<String> {
    messages.iter().map(|m| m.receipt.clone()).collect()
}

/// One partition: a stale receipt (its window ended, the message went to another receiver)
/// answers stale and leaves that receiver's hold alone; acks in windows answer ok, whether
/// they ride on a take or, with nothing left to take, are written alone; nothing acked
/// comes back.
pub async fn given_acks_riding_on_receives_then_stale_ones_refused_and_acked_messages_never_come_back(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "riding", 1).await;
    let sub =
        subscribe(&queues, &topic, SubscriptionSpec { visibility_timeout_ms: 30_000, ..spec(StartAt::Earliest) }).await;
    for i in 0..6 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let ack_next = |receipts: Vec<String>, max| {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        async move { queues.ack_and_receive(&topic, &sub, &receipts, &request(max)).await.expect("ack and receive") }
    };
    let first = queues.receive(&topic, &sub, &request(2)).await.unwrap();
    assert_eq!(positions(&first), vec![(0, 0), (0, 1)]);
    clock.advance(30_001);
    let second = queues.receive(&topic, &sub, &request(2)).await.unwrap();
    assert_eq!(positions(&second), vec![(0, 0), (0, 1)], "due again, to another receiver");

    let (acks, third) = ack_next(receipts(&first), 2).await;
    assert_eq!(acks, vec![Err(ReceiptError::Stale); 2], "the first window ended");
    assert_eq!(positions(&third), vec![(0, 2), (0, 3)]);
    let (acks, fourth) = ack_next([receipts(&second), receipts(&third)].concat(), 10).await;
    assert_eq!(acks, vec![Ok(()); 4], "the second receiver's hold was untouched");
    assert_eq!(positions(&fourth), vec![(0, 4), (0, 5)]);
    let (acks, fifth) = ack_next(receipts(&fourth), 10).await;
    assert_eq!(acks, vec![Ok(()); 2], "written alone: nothing was left to take");
    assert!(fifth.is_empty());

    let (acks, _) = ack_next(receipts(&fourth), 10).await;
    assert_eq!(acks, vec![Ok(()); 2], "acked once; again, a retry is told so");
    clock.advance(100_000);
    assert_nothing(&queues, &topic, &sub, "an acked message came back").await;
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight, d.backlog.delayed, d.backlog.dead), (0, 0, 0, 0));
}

/// Eight workers, each acking its last batch on its next receive of ten, drain four
/// partitions with the clock stopped: every message delivered once and acked once, and
/// every ack answered ok (the riding acks contend with other receives for the cursor item).
pub async fn given_eight_workers_acking_on_their_next_receive_then_every_message_acked_exactly_once(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "riding-drain", 4).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let total = scaled(backend, 4_000);
    let events = (0..total).map(|i| event(format!("m{i}"), Some(i as u32 % 4), None, None)).collect();
    let published: BTreeSet<(u32, u64)> =
        publish(&log, &topic, events).await.into_iter().map(|p| (p.partition, p.offset)).collect();

    let delivered = Arc::new(Mutex::new(HashMap::<(u32, u64), usize>::new()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for w in 0..8usize {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        let (delivered, acked) = (delivered.clone(), acked.clone());
        workers.push(tokio::spawn(async move {
            let mut held: Vec<Message> = Vec::new();
            let mut empty_in_a_row = 0;
            loop {
                let (results, got) = worker_step(&queues, &topic, &sub, &held).await;
                for (m, result) in held.iter().zip(results) {
                    assert_eq!(result, Ok(()), "worker {w}: the ack of {:?} within its window", at(m));
                    acked.lock().unwrap().push(at(m));
                }
                for m in &got {
                    let previous = delivered.lock().unwrap().insert(at(m), w);
                    assert_eq!(previous, None, "{:?} delivered twice with the clock stopped", at(m));
                }
                if got.is_empty() {
                    empty_in_a_row += 1;
                    if delivered.lock().unwrap().len() >= total || empty_in_a_row >= 500 {
                        return;
                    }
                    tokio::task::yield_now().await;
                } else {
                    empty_in_a_row = 0;
                }
                held = got;
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let unique: BTreeSet<(u32, u64)> = acked.iter().copied().collect();
    assert_eq!(unique.len(), acked.len(), "a message was acked twice");
    assert_eq!(unique, published, "acked exactly the published messages");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight, d.backlog.delayed, d.backlog.dead), (0, 0, 0, 0));
    assert_nothing(&queues, &topic, &sub, "an acked message came back").await;
}

/// One turn of a worker: the acks of what it holds, then up to ten messages.
async fn worker_step(
    queues: &Queues,
    topic: &str,
    sub: &str,
    held: &[Message],
) -> (Vec<Result<(), ReceiptError>>, Vec<Message>) {
    queues.ack_and_receive(topic, sub, &receipts(held), &request(10)).await.expect("ack and receive")
}

/// A partition whose cursor item is full of leases: one message of a two-message lease is
/// held longer (its lease, moved, becomes an item), then the other to the same time (the
/// first move freed room in the cursor item). Both moves keep the delivery's nonce, so the
/// second one's lease names the first one's item: the two must end up in one lease, never
/// in one kept inline and an item under the same key. Acking the first then removes exactly
/// it; the second comes back once, when its window ends.
pub async fn given_two_messages_of_a_lease_held_longer_to_the_same_time_then_each_settles_alone(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "inline-moves", 1).await;
    let sub =
        subscribe(&queues, &topic, SubscriptionSpec { visibility_timeout_ms: 30_000, ..spec(StartAt::Earliest) }).await;
    for i in 0..8 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let mut batches = Vec::new();
    for _ in 0..4 {
        batches.push(queues.receive(&topic, &sub, &request(2)).await.unwrap());
    }
    assert_eq!(positions(&batches[0]), vec![(0, 0), (0, 1)]);
    let (m0, m1) = (&batches[0][0].receipt, &batches[0][1].receipt);
    let held0 = change_visibility(&queues, &topic, &sub, m0, 60_000).await.expect("m0 held longer");
    let held1 = change_visibility(&queues, &topic, &sub, m1, 60_000).await.expect("m1 held longer");
    assert_eq!(ack(&queues, &topic, &sub, &held0).await, Ok(()), "m0 acked");
    for m in batches[1..].iter().flatten() {
        assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Ok(()));
    }
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight), (0, 1), "only m1 in flight");
    clock.advance(60_001);
    let again = queues.receive(&topic, &sub, &request(10)).await.unwrap();
    assert_eq!(positions(&again), vec![(0, 1)], "m1 back once its window ended, m0 never");
    assert_eq!(again[0].receive_count, 2);
    assert_eq!(ack(&queues, &topic, &sub, &held1).await, Err(ReceiptError::Stale), "held1's window ended");
    assert_eq!(ack(&queues, &topic, &sub, &again[0].receipt).await, Ok(()));
    clock.advance(100_000);
    assert_nothing(&queues, &topic, &sub, "everything acked").await;
}

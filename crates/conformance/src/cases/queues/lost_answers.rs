//! A queue write whose answer is lost (applied or not), and messages the log start
//! passes before they are delivered.

use std::sync::Arc;

use sluice_core::queues::{Queues, ReceiptError, ReceiveRequest, StartAt, SubscriptionSpec};
use sluice_core::{Error, Log, ManualClock};
use sluice_testkit::Layered;

use crate::cases::support::faults::{Fault, QueueWriteFaults};
use crate::cases::support::groups::advance_log_start;
use crate::cases::support::queues::*;
use crate::Backend;

/// A topic of one partition with one message, a subscription (10 s visibility), queues whose
/// writes meet `faults`, and clean queues on the same storage.
async fn faulty_queue(
    backend: &dyn Backend,
    faults: &[Option<Fault>],
) -> (Arc<ManualClock>, Arc<Layered<QueueWriteFaults>>, Queues, Queues, String, String) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (clean_log, clean) = queues_on(backend, clock.clone()).await;
    let (store, objects) = backend.open_with(clock.clone()).await;
    let faulty_store = Arc::new(Layered::new(store, QueueWriteFaults::new(faults)));
    let faulty = Queues::new(Log::new(faulty_store.clone(), objects, clock.clone(), crate::log_config()));
    let topic = new_topic(&clean_log, "faults", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 10_000, ..spec(StartAt::Earliest) };
    let sub = subscribe(&clean, &topic, sub_spec).await;
    publish_at(&clean_log, &topic, 0, "work", START_MS).await;
    (clock, faulty_store, faulty, clean, topic, sub)
}

/// The receive's lease was written but its answer lost: the message is held by nobody, so no
/// one gets it within that visibility window; then it comes back, once, and counts the lost
/// delivery.
pub async fn given_receive_applied_but_answer_lost_then_nobody_holds_it_until_the_timeout_and_it_comes_back_once(
    backend: &dyn Backend,
) {
    let (clock, _, faulty, clean, topic, sub) = faulty_queue(backend, &[Some(Fault::LoseAnswer)]).await;
    let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: None };
    assert!(matches!(faulty.receive(&topic, &sub, &req).await, Err(Error::Unavailable(_))));
    assert_eq!(backlog(&clean, &topic, &sub).await, [0, 1, 0, 0], "in flight, to a receiver that never heard");
    assert_nothing(&clean, &topic, &sub, "a second holder within the lost delivery's window").await;
    clock.advance(9_999);
    assert_nothing(&clean, &topic, &sub, "1 ms before the lost delivery's window ends").await;
    clock.advance(1);
    let back = receive_one(&faulty, &topic, &sub).await;
    assert_eq!(back.receive_count, 2, "the lost delivery counts");
    assert_eq!(ack(&faulty, &topic, &sub, &back.receipt).await, Ok(()));
    clock.advance(3_600_000);
    assert_nothing(&clean, &topic, &sub, "acked").await;
}

/// The receive's write never happened: the message is visible at once, still undelivered.
pub async fn given_receive_failed_before_applying_then_the_message_is_still_visible(backend: &dyn Backend) {
    let (_clock, _, faulty, clean, topic, sub) = faulty_queue(backend, &[Some(Fault::FailBefore)]).await;
    let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: None };
    assert!(matches!(faulty.receive(&topic, &sub, &req).await, Err(Error::Unavailable(_))));
    assert_eq!(backlog(&clean, &topic, &sub).await, [1, 0, 0, 0]);
    let got = receive_one(&clean, &topic, &sub).await;
    assert_eq!(got.receive_count, 1, "nothing was delivered before");
}

/// The ack was applied but its answer lost: the retry is told `ok` (the message is acked:
/// in no lease, not dead-lettered), never `stale_receipt`, and the message never comes back.
pub async fn given_ack_applied_but_answer_lost_then_the_retry_is_ok_and_the_message_never_comes_back(
    backend: &dyn Backend,
) {
    let (clock, store, faulty, clean, topic, sub) = faulty_queue(backend, &[]).await;
    let held = receive_one(&clean, &topic, &sub).await;
    store.then(Fault::LoseAnswer);
    assert!(matches!(faulty.ack(&topic, &sub, std::slice::from_ref(&held.receipt)).await, Err(Error::Unavailable(_))));
    assert_eq!(ack(&faulty, &topic, &sub, &held.receipt).await, Ok(()), "the retry: acked by its first attempt");
    assert_eq!(backlog(&clean, &topic, &sub).await, [0; 4]);
    clock.advance(3_600_000);
    assert_nothing(&clean, &topic, &sub, "an acked message, its ack's answer lost").await;
}

/// A nack applied with its answer lost: the retry is `ok` while the message waits for a
/// receiver, and `stale_receipt` once another receive holds it (that nack did not happen).
pub async fn given_nack_applied_but_answer_lost_then_the_retry_is_ok_until_the_message_is_received_again(
    backend: &dyn Backend,
) {
    let (_clock, store, faulty, clean, topic, sub) = faulty_queue(backend, &[]).await;
    let held = receive_one(&clean, &topic, &sub).await;
    store.then(Fault::LoseAnswer);
    let lost = faulty.nack(&topic, &sub, std::slice::from_ref(&held.receipt), 0).await;
    assert!(matches!(lost, Err(Error::Unavailable(_))), "{lost:?}");
    assert_eq!(nack(&faulty, &topic, &sub, &held.receipt, 0).await, Ok(()), "the retry: released by its first attempt");
    assert_eq!(backlog(&clean, &topic, &sub).await, [1, 0, 0, 0], "visible, released once");
    let again = receive_one(&clean, &topic, &sub).await;
    assert_eq!(again.receive_count, 2);
    assert_eq!(nack(&faulty, &topic, &sub, &held.receipt, 0).await, Err(ReceiptError::Stale), "held by another now");
    assert_eq!(ack(&faulty, &topic, &sub, &held.receipt).await, Err(ReceiptError::Stale), "not acked: held by another");
    assert_eq!(backlog(&clean, &topic, &sub).await, [0, 1, 0, 0], "the new holder keeps it");
}

/// (visible, in_flight, delayed, dead, expired) of the subscription, checked against its one partition.
async fn expiry_counts(queues: &Queues, topic: &str, sub: &str) -> (u64, u64, u64, u64, u64) {
    let d = queues.describe(topic, sub).await.expect("describe");
    assert_eq!(d.partitions.len(), 1);
    let (b, p) = (d.backlog, d.partitions[0].backlog);
    assert_eq!(
        (b.visible, b.in_flight, b.delayed, b.dead, b.expired),
        (p.visible, p.in_flight, p.delayed, p.dead, p.expired)
    );
    (b.visible, b.in_flight, b.delayed, b.dead, b.expired)
}

pub async fn given_undelivered_messages_when_the_log_start_passes_them_then_counted_expired_never_delivered_and_the_rest_are(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "expired", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    publish(&log, &topic, (0..10).map(|i| event(format!("m{i}"), Some(0), None, Some(START_MS))).collect()).await;
    let got = receive(&queues, &topic, &sub, 5).await;
    assert_eq!(positions(&got), (0..5).map(|o| (0, o)).collect::<Vec<_>>());
    ack(&queues, &topic, &sub, &got[0].receipt).await.unwrap(); // 0: done
    nack(&queues, &topic, &sub, &got[2].receipt, 60_000).await.unwrap(); // 2: waits a minute for redelivery
    change_visibility(&queues, &topic, &sub, &got[3].receipt, 0).await.unwrap(); // 3: due for redelivery now
                                                                                 // 1 and 4 are in flight; 5 to 9 were never received.
    assert_eq!(expiry_counts(&queues, &topic, &sub).await, (6, 2, 1, 0, 0));

    // Retention moves the log start to 7: 1 to 6 are gone from the log.
    let topic_id = log.describe_topic(&topic).await.unwrap().0.id;
    advance_log_start(log.store().as_ref(), topic_id, 0, 7).await;
    assert_eq!(
        expiry_counts(&queues, &topic, &sub).await,
        (3, 2, 1, 0, 3),
        "5 and 6 (never received) and 3 (due) are expired; 1 and 4 are still held, 2 still waits"
    );
    ack(&queues, &topic, &sub, &got[4].receipt).await.expect("a held message can still be acked");
    assert_eq!(expiry_counts(&queues, &topic, &sub).await, (3, 1, 1, 0, 3), "an acked message is not expired");

    let rest = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&rest), vec![(0, 7), (0, 8), (0, 9)], "only what the log still holds");
    assert_eq!(rest.iter().map(value).collect::<Vec<_>>(), ["m7", "m8", "m9"]);
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(d.partitions[0].cursor, 10);
    assert_eq!(
        expiry_counts(&queues, &topic, &sub).await,
        (0, 4, 1, 0, 3),
        "counted once, when the receive passed them"
    );
    for m in &rest {
        ack(&queues, &topic, &sub, &m.receipt).await.unwrap();
    }

    // 1's visibility timeout and 2's delay end: they come due, below the log start.
    clock.advance(60_001);
    assert_eq!(expiry_counts(&queues, &topic, &sub).await, (0, 0, 0, 0, 5));
    assert_nothing(&queues, &topic, &sub, "expired messages are never delivered").await;
    assert_nothing(&queues, &topic, &sub, "nor later").await;
    assert_eq!(expiry_counts(&queues, &topic, &sub).await, (0, 0, 0, 0, 5), "never counted twice");
    assert_eq!(ack(&queues, &topic, &sub, &got[1].receipt).await, Err(ReceiptError::Stale));
    assert!(all_dead_letters(&queues, &topic, &sub).await.is_empty(), "expired, not dead");
}

//! One message's life: redelivery, visibility changes, dead letters and redrive.

use bytes::Bytes;
use sluice_core::queues::{Ordering, ReceiptError, ReceiveRequest, StartAt, SubscriptionSpec};
use sluice_core::{Clock, Error};

use crate::cases::support::queues::*;
use crate::Backend;

pub async fn given_a_worker_that_never_acks_then_redelivered_after_the_timeout_extended_by_a_visibility_change_and_released_by_nack(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "lease", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 10_000, max_receive_count: 10, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let pos = publish_at(&log, &topic, 0, "work", START_MS).await;

    let first = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&first), first.receive_count, first.first_receive_ms), (pos, 1, START_MS));
    assert_eq!(value(&first), "work");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 1, 0, 0], "held");
    assert_nothing(&queues, &topic, &sub, "a held message is not handed to anyone else").await;
    clock.advance(9_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the visibility timeout").await;

    clock.advance(1);
    let second = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&second), second.receive_count), (pos, 2), "back at the timeout, one more delivery");
    assert_eq!(second.first_receive_ms, START_MS, "first receive time kept");
    assert_ne!(second.receipt, first.receipt, "a new delivery, a new receipt");

    // The first receipt is from before the redelivery: refused, and nothing changes.
    assert_eq!(ack(&queues, &topic, &sub, &first.receipt).await, Err(ReceiptError::Stale));
    assert_eq!(nack(&queues, &topic, &sub, &first.receipt, 0).await, Err(ReceiptError::Stale));
    assert_eq!(change_visibility(&queues, &topic, &sub, &first.receipt, 0).await, Err(ReceiptError::Stale));
    assert_nothing(&queues, &topic, &sub, "a stale nack or visibility change released the current holder's message")
        .await;
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 1, 0, 0], "a stale ack removed nothing");

    // Held until START+20 s; at START+15 s the holder extends it by 20 s from now: START+35 s.
    clock.advance(5_000);
    let extended = change_visibility(&queues, &topic, &sub, &second.receipt, 20_000).await.expect("extend");
    clock.advance(5_000);
    assert_nothing(&queues, &topic, &sub, "at the old deadline, after an extension").await;
    clock.advance(14_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the new deadline").await;
    clock.advance(1);
    let third = receive_one(&queues, &topic, &sub).await;
    assert_eq!(third.receive_count, 3, "back at the new deadline");
    assert_eq!(ack(&queues, &topic, &sub, &extended).await, Err(ReceiptError::Stale), "from before the redelivery");

    // Released with a 5 s delay: visible at exactly now + 5 s.
    assert_eq!(nack(&queues, &topic, &sub, &third.receipt, 5_000).await, Ok(()));
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 1, 0], "released with a delay: delayed");
    assert_eq!(ack(&queues, &topic, &sub, &third.receipt).await, Err(ReceiptError::Stale), "released since");
    clock.advance(4_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the release delay ends").await;
    clock.advance(1);
    let fourth = receive_one(&queues, &topic, &sub).await;
    assert_eq!(fourth.receive_count, 4);

    // A visibility change to 0 makes it visible at once.
    assert!(change_visibility(&queues, &topic, &sub, &fourth.receipt, 0).await.is_ok(), "visibility 0");
    let fifth = receive_one(&queues, &topic, &sub).await;
    assert_eq!(fifth.receive_count, 5, "visible at once after a visibility change to 0");
    assert_eq!(ack(&queues, &topic, &sub, &fourth.receipt).await, Err(ReceiptError::Stale), "redelivered since");
    assert_eq!(ack(&queues, &topic, &sub, &fifth.receipt).await, Ok(()));
    assert_eq!(ack(&queues, &topic, &sub, &fifth.receipt).await, Ok(()), "acked already: a retry is told so");
    clock.advance(24 * 3600 * 1000);
    assert_nothing(&queues, &topic, &sub, "an acked message came back a day later").await;
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4]);
}

pub async fn given_a_poison_message_then_dead_lettered_once_after_max_receives_and_redrive_delivers_it_fresh(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "poison", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 5, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let poison = publish_at(&log, &topic, 0, "poison", START_MS).await;
    let good = publish_at(&log, &topic, 0, "good", START_MS).await;

    let mut deliveries = Vec::new();
    for n in 1..=5u32 {
        let got = receive(&queues, &topic, &sub, 10).await;
        for m in got.iter().filter(|m| at(m) == good) {
            assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Ok(()));
        }
        let m =
            got.into_iter().find(|m| at(m) == poison).unwrap_or_else(|| panic!("delivery {n} of the poison message"));
        assert_eq!(m.receive_count, n);
        deliveries.push((clock.now_ms(), m));
        clock.advance(1_001);
    }
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 1], "run out at the limit: counted dead at once");
    assert_nothing(&queues, &topic, &sub, "a sixth delivery past max_receive_count 5").await;
    assert_nothing(&queues, &topic, &sub, "a seventh").await;

    let letters = all_dead_letters(&queues, &topic, &sub).await;
    assert_eq!(letters.len(), 1, "dead-lettered exactly once: {letters:?}");
    let letter = &letters[0];
    assert_eq!((letter.partition, letter.offset, letter.receive_count), (poison.0, poison.1, 5));
    assert_eq!(letter.id, format!("{}-{}", poison.0, poison.1));
    assert!(!letter.reason.is_empty(), "a reason is given");
    assert_eq!(letter.first_receive_ms, deliveries[0].0);
    assert_eq!(letter.last_receive_ms, deliveries[4].0);
    assert!(letter.dead_ms >= letter.last_receive_ms);
    assert_eq!(letter.event.as_ref().map(|e| e.record.value.clone()), Some(Bytes::from_static(b"poison")));
    assert_eq!(all_dead_letters(&queues, &topic, &sub).await.len(), 1, "listing again moves nothing twice");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 1]);
    let last = &deliveries[4].1;
    assert_eq!(ack(&queues, &topic, &sub, &last.receipt).await, Err(ReceiptError::Stale), "dead-lettered since");

    assert_eq!(queues.redrive(&topic, &sub, None).await.unwrap(), 1);
    assert_eq!(backlog(&queues, &topic, &sub).await, [1, 0, 0, 0], "redriven: visible again");
    assert!(all_dead_letters(&queues, &topic, &sub).await.is_empty());
    let again = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&again), again.receive_count), (poison, 1), "the count starts over after a redrive");
    assert_eq!(value(&again), "poison");
    assert_eq!(ack(&queues, &topic, &sub, &last.receipt).await, Err(ReceiptError::Stale), "a pre-redrive receipt");
    assert_eq!(ack(&queues, &topic, &sub, &again.receipt).await, Ok(()), "the stale ack took nothing away");
    assert_eq!(queues.redrive(&topic, &sub, None).await.unwrap(), 0);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4]);
}

pub async fn given_dead_letters_then_listed_in_pages_deleted_one_by_one_redriven_partly_and_purged(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "dlq", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    assert_eq!(receive(&queues, &topic, &sub, 10).await.len(), 3);
    clock.advance(1_001);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 3]);

    let first = queues.dead_letters(&topic, &sub, None, 2).await.unwrap();
    assert_eq!(first.entries.len(), 2, "a page holds at most the limit");
    let next = first.next.clone().expect("a second page");
    let second = queues.dead_letters(&topic, &sub, Some(&next), 2).await.unwrap();
    assert_eq!((second.entries.len(), second.next.clone()), (1, None), "{second:?}");
    let offsets: Vec<u64> = first.entries.iter().chain(&second.entries).map(|l| l.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2], "every dead letter once, across pages");

    queues.delete_dead_letter(&topic, &sub, "0-1").await.expect("delete a dead letter");
    let gone = queues.delete_dead_letter(&topic, &sub, "0-1").await;
    assert!(matches!(gone, Err(Error::NotFound { .. })), "deleted already: {gone:?}");
    let left: Vec<u64> = all_dead_letters(&queues, &topic, &sub).await.iter().map(|l| l.offset).collect();
    assert_eq!(left, vec![0, 2]);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 2]);

    assert_eq!(queues.redrive(&topic, &sub, Some(1)).await.unwrap(), 1, "at most one");
    assert_eq!(backlog(&queues, &topic, &sub).await, [1, 0, 0, 1]);
    let back = receive_one(&queues, &topic, &sub).await;
    assert!([0, 2].contains(&back.event.offset) && back.receive_count == 1, "{:?} {}", at(&back), back.receive_count);
    assert_eq!(ack(&queues, &topic, &sub, &back.receipt).await, Ok(()));

    assert_eq!(queues.purge_dead_letters(&topic, &sub).await.unwrap(), 1);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4]);
    assert!(all_dead_letters(&queues, &topic, &sub).await.is_empty());
    assert_eq!(queues.redrive(&topic, &sub, None).await.unwrap(), 0, "nothing left to redrive");
    clock.advance(3_600_000);
    assert_nothing(&queues, &topic, &sub, "a deleted or purged dead letter came back").await;
}

/// A window of 0 (SQS's): each receive delivers the message, with a receipt, and leaves it
/// visible at once, so the next receive delivers it again; it is dead-lettered only after
/// `max_receive_count` deliveries. A receipt of such a delivery settles the message until
/// someone receives it again.
pub async fn given_a_zero_visibility_timeout_then_every_receive_delivers_and_it_is_visible_again_at_once(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "zero-window", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 0, max_receive_count: 3, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let pos = publish_at(&log, &topic, 0, "work", START_MS).await;

    let first = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&first), first.receive_count, value(&first)), (pos, 1, "work".to_owned()), "delivered");
    assert_eq!(backlog(&queues, &topic, &sub).await, [1, 0, 0, 0], "visible again at once, held by nobody");
    let second = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&second), second.receive_count), (pos, 2), "delivered again by the next receive");
    assert_eq!(ack(&queues, &topic, &sub, &first.receipt).await, Err(ReceiptError::Stale), "received since");
    let third = receive_one(&queues, &topic, &sub).await;
    assert_eq!(third.receive_count, 3, "the third delivery of max_receive_count 3");
    assert_nothing(&queues, &topic, &sub, "a fourth delivery past max_receive_count 3").await;
    let letters = all_dead_letters(&queues, &topic, &sub).await;
    assert_eq!(letters.iter().map(|l| (l.offset, l.receive_count)).collect::<Vec<_>>(), [(pos.1, 3)]);

    // A receive's own window of 0, on a subscription whose window is 30 s.
    let sub =
        subscribe(&queues, &topic, SubscriptionSpec { visibility_timeout_ms: 30_000, ..spec(StartAt::Earliest) }).await;
    let zero = ReceiveRequest { visibility_timeout_ms: Some(0), ..request(10) };
    let got = queues.receive(&topic, &sub, &zero).await.expect("receive with a window of 0");
    assert_eq!(positions(&got), [pos], "a receive's window of 0 delivers too");
    let again = queues.receive(&topic, &sub, &zero).await.expect("receive with a window of 0");
    assert_eq!(again.iter().map(|m| (at(m), m.receive_count)).collect::<Vec<_>>(), [(pos, 2)], "visible at once");
    // Nobody received it since: the receipt still settles it, as SQS's does.
    let held = change_visibility(&queues, &topic, &sub, &again[0].receipt, 10_000).await.expect("hold it after all");
    assert_nothing(&queues, &topic, &sub, "held by a visibility change of a 0-window receipt").await;
    assert_eq!(nack(&queues, &topic, &sub, &held, 0).await, Ok(()));
    let last = queues.receive(&topic, &sub, &zero).await.expect("receive with a window of 0");
    assert_eq!(last.iter().map(|m| (at(m), m.receive_count)).collect::<Vec<_>>(), [(pos, 3)]);
    assert_eq!(ack(&queues, &topic, &sub, &last[0].receipt).await, Ok(()), "a 0-window receipt acks");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4], "acked");
}

/// Keyed, with a window of 0: a key's head is delivered and free again at once, so the next
/// receive delivers the head again, never the key's next message; other keys flow; once the
/// head is acked, the key's next message comes.
pub async fn given_a_keyed_queue_with_a_zero_window_then_a_keys_head_comes_again_before_its_next(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "zero-keyed", 1).await;
    let keyed = SubscriptionSpec {
        ordering: Ordering::Key,
        visibility_timeout_ms: 0,
        max_receive_count: 10,
        ..spec(StartAt::Earliest)
    };
    let sub = subscribe(&queues, &topic, keyed).await;
    let events = ["k", "k", "other"].map(|k| event(format!("to {k}"), None, Some(k.to_owned()), None));
    publish(&log, &topic, events.into()).await;

    let first = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&first), [(0, 0), (0, 2)], "each key's head, one per key");
    let again = receive(&queues, &topic, &sub, 10).await;
    let counts: Vec<_> = again.iter().map(|m| (at(m), m.receive_count)).collect();
    assert_eq!(counts, [((0, 0), 2), ((0, 2), 2)], "the heads again: a key's next waits behind its head");
    assert_eq!(ack(&queues, &topic, &sub, &first[0].receipt).await, Err(ReceiptError::Stale), "received since");
    assert_eq!(ack(&queues, &topic, &sub, &again[0].receipt).await, Ok(()));
    let next = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&next), [(0, 1), (0, 2)], "k's next once its head is acked");
}

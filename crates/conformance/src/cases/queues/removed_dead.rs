//! Receipts of dead letters that were since deleted, purged or redriven: their message was
//! never acked, so an ack, a nack or a visibility change answers `stale_receipt`, while an
//! ack retried by the receipt that did ack still answers `ok`.

use sluice_core::queues::{ReceiptError, StartAt, SubscriptionSpec};

use crate::cases::support::queues::*;
use crate::Backend;

pub async fn given_dead_letters_deleted_purged_or_redriven_then_their_old_receipts_are_stale(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "gone", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let mut got = receive(&queues, &topic, &sub, 10).await;
    got.sort_by_key(|m| m.event.offset);
    let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
    clock.advance(1_001);
    assert_eq!(all_dead_letters(&queues, &topic, &sub).await.len(), 3, "each delivered once: dead");
    let refused = |what: &str| format!("{what}: never acked, so not `ok`");

    queues.delete_dead_letter(&topic, &sub, "0-0").await.expect("delete");
    assert_eq!(queues.redrive(&topic, &sub, Some(1)).await.unwrap(), 1, "0-1 back in the queue");
    assert_eq!(queues.purge_dead_letters(&topic, &sub).await.unwrap(), 1, "0-2 purged");
    for (receipt, what) in receipts.iter().zip(["deleted", "redriven", "purged"]) {
        assert_eq!(ack(&queues, &topic, &sub, receipt).await, Err(ReceiptError::Stale), "{}", refused(what));
        assert_eq!(nack(&queues, &topic, &sub, receipt, 0).await, Err(ReceiptError::Stale), "{}", refused(what));
        let visibility = change_visibility(&queues, &topic, &sub, receipt, 0).await;
        assert_eq!(visibility.map(|_| ()), Err(ReceiptError::Stale), "{}", refused(what));
    }

    // The redriven message's new delivery acks, and a retry of that ack is still told `ok`.
    let again = receive_one(&queues, &topic, &sub).await;
    assert_eq!((again.event.offset, again.receive_count), (1, 1));
    assert_eq!(ack(&queues, &topic, &sub, &again.receipt).await, Ok(()));
    assert_eq!(ack(&queues, &topic, &sub, &again.receipt).await, Ok(()), "a retried ack of the same receipt");
    // Long after (a day), the deleted and purged ones are still refused.
    clock.advance(24 * 3600 * 1000);
    for receipt in [&receipts[0], &receipts[2]] {
        assert_eq!(ack(&queues, &topic, &sub, receipt).await, Err(ReceiptError::Stale));
    }
    assert_nothing(&queues, &topic, &sub, "a deleted, purged or acked message came back").await;
}

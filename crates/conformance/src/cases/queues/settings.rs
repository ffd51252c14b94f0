//! Settings, names and receipts: idempotent creates, unknown names, tampered receipts,
//! deletes and the janitor's removal of a deleted queue's items.

use sluice_core::Code;
use std::sync::Arc;

use sluice_core::queues::{
    ReceiptError, ReceiveRequest, StartAt, SubscriptionSpec, MAX_DELAY_MS, MAX_VISIBILITY_TIMEOUT_MS,
};
use sluice_core::Error;

use crate::cases::support::queues::*;
use crate::{unique_topic, Backend};

pub async fn given_create_twice_then_idempotent_with_same_settings_and_conflict_with_others_and_invalid_settings_refused(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "settings", 2).await;
    let name = unique_topic("sub");
    let settings = SubscriptionSpec { visibility_timeout_ms: 7_000, ..spec(StartAt::Earliest) };
    let (created, fresh) = queues.create(&topic, &name, settings.clone()).await.unwrap();
    assert!(fresh);
    let (again, fresh) = queues.create(&topic, &name, settings.clone()).await.unwrap();
    assert!(!fresh, "same settings: the existing subscription");
    assert_eq!(again, created);
    let other = SubscriptionSpec { visibility_timeout_ms: 8_000, ..settings.clone() };
    let conflict = queues.create(&topic, &name, other).await;
    assert!(matches!(conflict, Err(Error::Conflict { code: Code::SubscriptionExists, .. })), "{conflict:?}");
    assert_eq!(queues.describe(&topic, &name).await.unwrap().subscription.spec, settings, "unchanged");
    assert_eq!(
        queues.list(&topic).await.unwrap().iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        vec![name.clone()]
    );

    let invalid = [
        (
            "visibility over 12 h",
            SubscriptionSpec { visibility_timeout_ms: MAX_VISIBILITY_TIMEOUT_MS + 1, ..spec(StartAt::Earliest) },
        ),
        ("max_receive_count 0", SubscriptionSpec { max_receive_count: 0, ..spec(StartAt::Earliest) }),
        ("delay over 15 min", SubscriptionSpec { delay_ms: MAX_DELAY_MS + 1, ..spec(StartAt::Earliest) }),
    ];
    for (what, bad) in invalid {
        let refused_name = unique_topic("bad");
        let refused = queues.create(&topic, &refused_name, bad).await;
        assert!(matches!(refused, Err(Error::Invalid { .. })), "{what}: {refused:?}");
        let d = queues.describe(&topic, &refused_name).await;
        assert!(matches!(d, Err(Error::SubscriptionNotFound { .. })), "{what}: nothing created: {d:?}");
    }
    assert_eq!(queues.list(&topic).await.unwrap().len(), 1, "no refused subscription listed");
    let no_topic = queues.create(&unique_topic("missing"), &name, settings).await;
    assert!(matches!(no_topic, Err(Error::TopicNotFound(_))), "{no_topic:?}");

    publish_at(&log, &topic, 0, "m", START_MS).await;
    for max_messages in [0, 101] {
        let refused = queues.receive(&topic, &name, &request(max_messages)).await;
        assert!(matches!(refused, Err(Error::Invalid { .. })), "max_messages {max_messages}: {refused:?}");
    }
    let too_long = ReceiveRequest { visibility_timeout_ms: Some(MAX_VISIBILITY_TIMEOUT_MS + 1), ..request(10) };
    let refused = queues.receive(&topic, &name, &too_long).await;
    assert!(matches!(refused, Err(Error::Invalid { .. })), "a visibility override over 12 h: {refused:?}");
    assert_eq!(backlog(&queues, &topic, &name).await, [1, 0, 0, 0], "refused receives took nothing");
    assert_eq!(receive(&queues, &topic, &name, 100).await.len(), 1, "100 is allowed");
}

pub async fn given_unknown_subscription_then_not_found_for_every_operation(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "unknown", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let receipt = receive_one(&queues, &topic, &sub).await.receipt;
    let missing = unique_topic("nobody");
    let receipts = [receipt];
    let not_found = |what: &str, e: Option<Error>| {
        assert!(matches!(e, Some(Error::SubscriptionNotFound { .. })), "{what}: {e:?}");
    };
    not_found("describe", queues.describe(&topic, &missing).await.err());
    not_found("receive", queues.receive(&topic, &missing, &request(10)).await.err());
    not_found("ack", queues.ack(&topic, &missing, &receipts).await.err());
    not_found("nack", queues.nack(&topic, &missing, &receipts, 0).await.err());
    not_found("change_visibility", queues.change_visibility(&topic, &missing, &receipts, 0).await.err());
    not_found("dead_letters", queues.dead_letters(&topic, &missing, None, 10).await.err());
    not_found("delete_dead_letter", queues.delete_dead_letter(&topic, &missing, "0-0").await.err());
    not_found("redrive", queues.redrive(&topic, &missing, None).await.err());
    not_found("purge", queues.purge_dead_letters(&topic, &missing).await.err());
    not_found("delete", queues.delete(&topic, &missing).await.err());
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 1, 0, 0], "the real subscription is untouched");
}

/// The receipt with one character in its middle changed.
fn tampered(receipt: &str) -> String {
    let mut chars: Vec<char> = receipt.chars().collect();
    let mid = chars.len() / 2;
    let i = (mid..chars.len()).chain(0..mid).find(|&i| chars[i].is_ascii_alphanumeric()).expect("a letter or digit");
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

pub async fn given_tampered_or_foreign_receipts_then_invalid_and_nothing_changes(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "receipts", 1).await;
    let a = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let b = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let ma = receive_one(&queues, &topic, &a).await;
    let mb = receive_one(&queues, &topic, &b).await;

    let forged = tampered(&ma.receipt);
    assert_ne!(forged, ma.receipt);
    for (what, receipt) in
        [("altered", forged.as_str()), ("garbage", "not-a-receipt"), ("another queue's", mb.receipt.as_str())]
    {
        assert_eq!(ack(&queues, &topic, &a, receipt).await, Err(ReceiptError::Invalid), "ack, {what}");
        assert_eq!(nack(&queues, &topic, &a, receipt, 0).await, Err(ReceiptError::Invalid), "nack, {what}");
        let changed = change_visibility(&queues, &topic, &a, receipt, 0).await;
        assert_eq!(changed, Err(ReceiptError::Invalid), "visibility, {what}");
    }
    assert_eq!(backlog(&queues, &topic, &a).await, [0, 1, 0, 0], "still held");
    assert_eq!(backlog(&queues, &topic, &b).await, [0, 1, 0, 0], "b's receipt used on a did nothing to b");

    // One result per receipt, in order: a bad receipt beside a good one does not spoil it.
    let results = queues.ack(&topic, &a, &[forged, ma.receipt.clone()]).await.unwrap();
    assert_eq!(results, vec![Err(ReceiptError::Invalid), Ok(())]);
    assert_eq!(backlog(&queues, &topic, &a).await, [0; 4]);
    assert_eq!(ack(&queues, &topic, &b, &mb.receipt).await, Ok(()));
}

pub async fn given_subscription_deleted_and_recreated_under_the_same_name_then_it_starts_fresh(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "reborn", 1).await;
    let name = unique_topic("sub");
    let settings = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    queues.create(&topic, &name, settings.clone()).await.unwrap();
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let old = receive(&queues, &topic, &name, 10).await;
    assert_eq!(old.len(), 3);
    assert_eq!(ack(&queues, &topic, &name, &old[0].receipt).await, Ok(()));
    clock.advance(1_001);
    assert_eq!(backlog(&queues, &topic, &name).await, [0, 0, 0, 2], "two dead, one acked");

    queues.delete(&topic, &name).await.unwrap();
    let gone = queues.describe(&topic, &name).await;
    assert!(matches!(gone, Err(Error::SubscriptionNotFound { .. })), "{gone:?}");
    let gone = queues.receive(&topic, &name, &request(10)).await;
    assert!(matches!(gone, Err(Error::SubscriptionNotFound { .. })), "{gone:?}");
    assert!(queues.list(&topic).await.unwrap().is_empty());

    let (_, fresh) = queues.create(&topic, &name, settings).await.unwrap();
    assert!(fresh, "a new subscription");
    assert_eq!(backlog(&queues, &topic, &name).await, [3, 0, 0, 0], "no acks, leases or dead letters carried over");
    assert!(all_dead_letters(&queues, &topic, &name).await.is_empty());
    let new = receive(&queues, &topic, &name, 10).await;
    assert_eq!(positions(&new), vec![(0, 0), (0, 1), (0, 2)]);
    assert!(new.iter().all(|m| m.receive_count == 1), "counts start over");
    let old_ack = ack(&queues, &topic, &name, &old[1].receipt).await;
    assert!(old_ack.is_err(), "a receipt of the deleted subscription: {old_ack:?}");
    assert_eq!(backlog(&queues, &topic, &name).await, [0, 3, 0, 0], "the old receipt changed nothing");
    for m in &new {
        assert_eq!(ack(&queues, &topic, &name, &m.receipt).await, Ok(()));
    }
}

/// Deleting is one write; the janitor then removes the queue's items in bounded steps:
/// the deleted subscription's, and those of every subscription of a deleted topic.
pub async fn given_a_deleted_subscription_and_a_deleted_topic_then_the_janitor_removes_every_queue_item(
    backend: &dyn Backend,
) {
    use sluice_core::keys::{queue_collections, subscription_key};
    use sluice_core::ports::state::Query;
    use sluice_core::queues::SubscriptionRecord;

    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "purged", 2).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    let deleted = subscribe(&queues, &topic, sub_spec.clone()).await;
    let orphaned = subscribe(&queues, &topic, sub_spec).await;
    for i in 0..6 {
        publish_at(&log, &topic, i % 2, "x", START_MS).await;
    }
    // Each queue gets a cursor, leases in flight and dead letters on both partitions.
    for sub in [&deleted, &orphaned] {
        assert_eq!(receive(&queues, &topic, sub, 4).await.len(), 4);
    }
    clock.advance(1_001);
    for sub in [&deleted, &orphaned] {
        assert_eq!(receive(&queues, &topic, sub, 10).await.len(), 2, "the 2 never received");
        assert_eq!(queues.describe(&topic, sub).await.unwrap().backlog.dead, 4);
    }
    let store = log.store().clone();
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let mut ids = Vec::new();
    for sub in [&deleted, &orphaned] {
        let item = store.get(&subscription_key(config.id, sub)).await.unwrap().expect("subscription record");
        ids.push(sluice_core::layout::decode::<SubscriptionRecord>("subscription", &item.value).unwrap().id);
    }
    let items = |store: Arc<dyn sluice_core::StateStore>, ids: Vec<u64>| async move {
        let mut n = 0;
        for id in ids {
            for p in 0..2 {
                for pk in queue_collections(id, p) {
                    n += store.query(&Query::all(pk, 1000)).await.unwrap().items.len();
                }
            }
        }
        n
    };
    assert!(items(store.clone(), ids.clone()).await >= 8, "cursors, leases and dead letters exist");

    queues.delete(&topic, &deleted).await.unwrap();
    assert!(matches!(
        queues
            .receive(&topic, &deleted, &ReceiveRequest { max_messages: 1, wait_ms: 0, visibility_timeout_ms: None })
            .await,
        Err(Error::SubscriptionNotFound { .. })
    ));
    let deleted_order = sluice_core::keys::sub_purge_key(ids[0]);
    assert!(store.get(&deleted_order).await.unwrap().is_some(), "the delete filed a purge order where OwnPurges looks");
    log.delete_topic(&topic).await.unwrap();
    // This case's orders only: on a shared backend other cases' janitors work on every order
    // (a step that lost a race with one of them is simply followed by the next).
    let own = crate::OwnPurges::new(store.clone(), &[config.id], &ids);
    for step in 0.. {
        assert!(step < 100, "the purge makes progress");
        if crate::janitor_step(&own, 5_000, 0).await.is_some_and(|report| !report.more) {
            break;
        }
    }
    assert!(store.get(&sluice_core::keys::purge_key(config.id)).await.unwrap().is_none(), "the topic's order is done");
    assert_eq!(items(store.clone(), ids).await, 0, "every queue item is gone");
    assert!(
        store.get(&subscription_key(config.id, &orphaned)).await.unwrap().is_none(),
        "the topic's subscriptions too"
    );
}

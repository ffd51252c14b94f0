//! Work queues: nack, visibility, redrive, dead-letter delete and purge, create and delete.

use sluice_core::Code;
use std::sync::Arc;

use sluice_core::ports::state::WriteOp;
use sluice_core::queues::{Queues, ReceiptError, StartAt, SubscriptionSpec};
use sluice_core::{Error, Log, ManualClock};
use sluice_testkit::Layered;

use super::fixtures::*;
use crate::cases::support::faults::Fault;
use crate::cases::support::faults::{deletes_at, puts_at, Action, Scripted};
use crate::cases::support::queues::{
    assert_nothing, manual, new_topic, positions, publish_at, receive, subscribe, START_MS,
};
use crate::{unique_topic, Backend};

fn earliest() -> SubscriptionSpec {
    SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() }
}

/// Queues on `backend` whose writes meet the rules of the [`Scripted`] store answered.
async fn scripted_queues(backend: &dyn Backend, clock: &Arc<ManualClock>) -> (Arc<Layered<Scripted>>, Queues) {
    let (script, log) = scripted_log(backend, clock.clone()).await;
    (script, Queues::new(log))
}

/// A settle's write: it moves (or removes) a lease of a partition's queue, an item of its
/// own or kept inline in the cursor item.
fn settles(ops: &[WriteOp]) -> bool {
    puts_at(ops, sluice_core::keys::QUEUE_PREFIX, sluice_core::keys::LEASE_PREFIX)
        || deletes_at(ops, sluice_core::keys::QUEUE_PREFIX, sluice_core::keys::LEASE_PREFIX)
        || puts_at(ops, sluice_core::keys::QUEUE_PREFIX, sluice_core::keys::CURSOR_SK)
}

/// A nack applied but unanswered, then retried: the retry answers stale (the first went
/// through) or ok, and the message is delivered exactly once more, never held twice.
pub async fn given_a_nack_applied_but_its_answer_lost_then_the_retry_is_stale_or_ok_and_the_message_comes_back_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "lost-nack", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    publish_at(&log, &topic, 0, "m0", START_MS).await;
    publish_at(&log, &topic, 0, "m1", START_MS).await;
    let got = receive(&queues, &topic, &sub, 2).await;
    assert_eq!(positions(&got), vec![(0, 0), (0, 1)]);
    let (script, faulty) = scripted_queues(backend, &clock).await;
    script.at(settles, Action::Fault(Fault::LoseAnswer));
    let receipt = vec![got[0].receipt.clone()];
    assert_unknown(faulty.nack(&topic, &sub, &receipt, 0).await, "a nack whose answer was lost");
    assert_eq!(script.pending(), 0, "the nack met its lost answer");
    let retried = faulty.nack(&topic, &sub, &receipt, 0).await.expect("the retried nack");
    assert!(matches!(retried[..], [Ok(())] | [Err(ReceiptError::Stale)]), "{retried:?}");
    let again = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&again), vec![(0, 0)], "released once, delivered once more");
    assert_eq!(again[0].receive_count, 2);
    assert_nothing(&queues, &topic, &sub, "never held twice").await;
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.visible, d.backlog.in_flight), (0, 2), "{:?}", d.backlog);
}

/// A visibility change applied but unanswered, then retried with the same receipt: the
/// retry finds the moved lease and answers a receipt; the message keeps one holder, for
/// the whole new window, and comes back once when it ends.
pub async fn given_a_visibility_change_applied_but_its_answer_lost_then_the_retry_keeps_one_holder(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "lost-visibility", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let got = receive(&queues, &topic, &sub, 1).await;
    assert_eq!(positions(&got), vec![(0, 0)]);
    let (script, faulty) = scripted_queues(backend, &clock).await;
    script.at(settles, Action::Fault(Fault::LoseAnswer));
    let receipt = vec![got[0].receipt.clone()];
    assert_unknown(faulty.change_visibility(&topic, &sub, &receipt, 60_000).await, "a lost visibility change");
    assert_eq!(script.pending(), 0, "the change met its lost answer");
    let retried = faulty.change_visibility(&topic, &sub, &receipt, 60_000).await.expect("the retried change");
    assert!(matches!(retried[..], [Ok(Some(_))]), "the retry finds the moved lease: {retried:?}");
    assert_nothing(&queues, &topic, &sub, "held by its one receiver").await;
    clock.advance(30_001);
    assert_nothing(&queues, &topic, &sub, "held past the old window").await;
    clock.advance(30_000);
    let again = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&again), vec![(0, 0)], "back once the new window ends");
    assert_eq!(again[0].receive_count, 2);
    assert_nothing(&queues, &topic, &sub, "one holder").await;
}

/// `n` messages in the dead-letter queue of a new subscription (one delivery allowed each).
async fn dead_letters(
    backend: &dyn Backend,
    prefix: &str,
    n: usize,
) -> (Arc<ManualClock>, Log, Queues, String, String) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, prefix, 1).await;
    let spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..earliest() };
    let sub = subscribe(&queues, &topic, spec).await;
    for i in 0..n {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    assert_eq!(receive(&queues, &topic, &sub, n).await.len(), n);
    clock.advance(1_001);
    let page = queues.dead_letters(&topic, &sub, None, 100).await.unwrap();
    assert_eq!(page.entries.len(), n, "buried");
    (clock, log, queues, topic, sub)
}

/// A redrive applied but unanswered, then retried: the retry finds nothing left to redrive,
/// and each dead letter is back in the queue once: delivered once, never in two leases.
pub async fn given_a_redrive_applied_but_its_answer_lost_then_the_retry_never_leases_a_dead_letter_twice(
    backend: &dyn Backend,
) {
    let (clock, _log, queues, topic, sub) = dead_letters(backend, "lost-redrive", 3).await;
    let (script, faulty) = scripted_queues(backend, &clock).await;
    // The redrive's write: it puts the dead letters back in a lease (and removes them from the DLQ).
    script.at(
        |ops| puts_at(ops, sluice_core::keys::QUEUE_PREFIX, sluice_core::keys::LEASE_PREFIX),
        Action::Fault(Fault::LoseAnswer),
    );
    assert_unknown(faulty.redrive(&topic, &sub, None).await, "a redrive whose answer was lost");
    assert_eq!(script.pending(), 0, "the redrive met its lost answer");
    assert_eq!(faulty.redrive(&topic, &sub, None).await.expect("the retried redrive"), 0, "nothing left");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.dead, d.backlog.visible, d.backlog.in_flight), (0, 3, 0), "{:?}", d.backlog);
    let got = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&got), vec![(0, 0), (0, 1), (0, 2)], "each once");
    assert!(got.iter().all(|m| m.receive_count == 1));
    assert_nothing(&queues, &topic, &sub, "never leased twice").await;
}

/// A dead letter's delete applied but unanswered: the retry is done (`404
/// dead_letter_not_found` says it is gone), the other dead letter stays, and the count is right.
pub async fn given_a_dead_letter_delete_applied_but_its_answer_lost_then_the_retry_leaves_the_count_right(
    backend: &dyn Backend,
) {
    let (clock, _log, queues, topic, sub) = dead_letters(backend, "lost-dlq-delete", 2).await;
    let (script, faulty) = scripted_queues(backend, &clock).await;
    script.at(|ops| deletes_at(ops, sluice_core::keys::DLQ_PREFIX, ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(faulty.delete_dead_letter(&topic, &sub, "0-0").await, "a lost dead letter delete");
    assert_eq!(script.pending(), 0, "the delete met its lost answer");
    match faulty.delete_dead_letter(&topic, &sub, "0-0").await {
        Ok(()) | Err(Error::NotFound { code: Code::DeadLetterNotFound, .. }) => {}
        other => panic!("a retried delete is done (ok, or not found): {other:?}"),
    }
    let page = queues.dead_letters(&topic, &sub, None, 100).await.unwrap();
    assert_eq!(page.entries.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), vec!["0-1"]);
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(d.backlog.dead, 1, "counted once: {:?}", d.backlog);
    assert_eq!(queues.purge_dead_letters(&topic, &sub).await.unwrap(), 1);
    assert_eq!(queues.describe(&topic, &sub).await.unwrap().backlog.dead, 0);
}

/// A purge of the dead-letter queue applied but unanswered: the retry purges nothing more,
/// the count is 0, and nothing comes back.
pub async fn given_a_dlq_purge_applied_but_its_answer_lost_then_the_retry_leaves_the_count_right(
    backend: &dyn Backend,
) {
    let (clock, _log, queues, topic, sub) = dead_letters(backend, "lost-dlq-purge", 2).await;
    let (script, faulty) = scripted_queues(backend, &clock).await;
    script.at(|ops| deletes_at(ops, sluice_core::keys::DLQ_PREFIX, ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(faulty.purge_dead_letters(&topic, &sub).await, "a purge whose answer was lost");
    assert_eq!(script.pending(), 0, "the purge met its lost answer");
    assert_eq!(faulty.purge_dead_letters(&topic, &sub).await.expect("the retried purge"), 0);
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.dead, d.backlog.visible, d.backlog.in_flight), (0, 0, 0), "{:?}", d.backlog);
    assert!(queues.dead_letters(&topic, &sub, None, 100).await.unwrap().entries.is_empty());
    assert_nothing(&queues, &topic, &sub, "purged for good").await;
}

/// A subscription create applied but unanswered: the retry answers the subscription (it
/// exists, same settings), there is one of it, and each message is delivered once.
pub async fn given_a_subscription_create_applied_but_its_answer_lost_then_the_retry_answers_it_and_nothing_is_doubled(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "lost-sub-create", 1).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let (script, faulty) = scripted_queues(backend, &clock).await;
    let sub = unique_topic("sub");
    script.at(|ops| puts_at(ops, sluice_core::keys::SUBS_PREFIX, ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(faulty.create(&topic, &sub, earliest()).await, "a create whose answer was lost");
    assert_eq!(script.pending(), 0, "the create met its lost answer");
    let (described, created) = faulty.create(&topic, &sub, earliest()).await.expect("the retried create");
    assert!(!created, "it existed: answered, not created again");
    assert_eq!(described.spec, earliest());
    let listed = queues.list(&topic).await.unwrap();
    assert_eq!(listed.iter().filter(|s| s.name == sub).count(), 1);
    assert_eq!(positions(&receive(&queues, &topic, &sub, 10).await), vec![(0, 0)]);
    assert_nothing(&queues, &topic, &sub, "once").await;
}

/// A subscription delete applied but unanswered: the retry is done (`404
/// subscription_not_found` says it is gone), it stays deleted, and one re-created under the
/// name starts afresh.
pub async fn given_a_subscription_delete_applied_but_its_answer_lost_then_the_retry_is_done_and_it_stays_deleted(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "lost-sub-delete", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    assert_eq!(positions(&receive(&queues, &topic, &sub, 1).await), vec![(0, 0)]);
    let (script, faulty) = scripted_queues(backend, &clock).await;
    script.at(|ops| puts_at(ops, sluice_core::keys::sub_purge_pk(), ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(faulty.delete(&topic, &sub).await, "a delete whose answer was lost");
    assert_eq!(script.pending(), 0, "the delete met its lost answer");
    match faulty.delete(&topic, &sub).await {
        Ok(()) | Err(Error::SubscriptionNotFound { .. }) => {}
        other => panic!("a retried delete is done (ok, or not found): {other:?}"),
    }
    assert!(matches!(queues.describe(&topic, &sub).await, Err(Error::SubscriptionNotFound { .. })));
    assert!(queues.list(&topic).await.unwrap().is_empty());
    let (_, created) = queues.create(&topic, &sub, earliest()).await.unwrap();
    assert!(created, "a new subscription");
    assert_eq!(positions(&receive(&queues, &topic, &sub, 10).await), vec![(0, 0)], "it starts afresh");
}

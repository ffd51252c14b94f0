//! Work queue cases at the edges a rival reaches: a describe whose query a write tears,
//! retention passing a receive's read, a receive whose reads are slow. Each names the
//! promise it holds (exact counts; no transient 416; a full visibility window).

use std::sync::Arc;

use sluice_core::queues::{Ordering, Queues, ReceiveRequest, StartAt, SubscriptionPatch, SubscriptionSpec};
use sluice_core::upkeep::JanitorConfig;
use sluice_core::{layout, Clock, Log, ManualClock, TopicSpec};
use sluice_testkit::Layered;

use crate::cases::support::faults::{puts_at, Action, Fault, QueryAction, Scripted};
use crate::cases::support::queues::{
    assert_nothing, event, manual, new_topic, positions, publish, publish_at, receive, subscribe, START_MS,
};
use crate::Backend;

const HOUR: i64 = 3600 * 1000;

/// Queues on `backend` whose queries meet the rules of the [`Scripted`] store answered.
async fn scripted_queues(backend: &dyn Backend, clock: &Arc<ManualClock>) -> (Arc<Layered<Scripted>>, Queues) {
    let (store, objects) = backend.open_with(clock.clone()).await;
    let script = Scripted::new(store);
    let log = Log::new(script.clone(), objects, clock.clone(), crate::log_config());
    (script, Queues::new(log))
}

fn earliest() -> SubscriptionSpec {
    SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() }
}

/// A describe's first read of a partition is torn (it misses the cursor, as a query racing
/// a transaction can): the counts are still exact, since it reads until two reads agree.
pub async fn given_a_describe_whose_first_read_is_torn_then_its_counts_are_still_exact(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "torn-describe", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    assert_eq!(positions(&receive(&queues, &topic, &sub, 1).await), vec![(0, 0)]);
    let (script, torn) = scripted_queues(backend, &clock).await;
    script.at_query(sluice_core::keys::QUEUE_PREFIX, QueryAction::Tear(1));
    let d = torn.describe(&topic, &sub).await.unwrap();
    assert_eq!(script.pending(), 0, "the describe's read was torn");
    assert_eq!((d.backlog.visible, d.backlog.in_flight), (2, 1), "{:?}", d.backlog);
    assert!(d.exact);
}

/// Describes taken mid-receive: a receive redelivering a parked message (deleting its lease
/// item, writing the cursor with the new lease) lands before the describe's `k`-th queue
/// read, for each `k`; the describe's first read is torn as by that receive's transaction
/// (the lease item gone, the cursor not yet rewritten). No describe shows the half-applied
/// receive: every one's counts add up to what was published, and it says they are exact.
pub async fn given_a_receive_landing_between_a_describes_reads_then_its_counts_add_up(backend: &dyn Backend) {
    const PUBLISHED: u64 = 6;
    for k in 2..=5 {
        let (clock, log, queues) = manual(backend).await;
        let topic = new_topic(&log, "mid-receive", 2).await;
        let sub = subscribe(&queues, &topic, earliest()).await;
        // The parked message on partition 0, whose reads come first; the others after it.
        publish_at(&log, &topic, 0, "parked", START_MS).await;
        let parked = receive(&queues, &topic, &sub, 1).await;
        let receipt = parked[0].receipt.clone();
        for i in 1..PUBLISHED {
            publish_at(&log, &topic, (i % 2) as u32, &format!("m{i}"), START_MS).await;
        }
        assert!(queues.nack(&topic, &sub, &[receipt], 1_000).await.unwrap()[0].is_ok());
        clock.advance(1_000);
        let (script, described) = scripted_queues(backend, &clock).await;
        script.at_query(sluice_core::keys::QUEUE_PREFIX, QueryAction::Miss(sluice_core::keys::LEASE_PREFIX));
        for _ in 2..k {
            script.at_query(sluice_core::keys::QUEUE_PREFIX, QueryAction::Miss("-"));
        }
        let (rival, t, s) = (queues.clone(), topic.clone(), sub.clone());
        let receiving = Box::pin(async move {
            let got = receive(&rival, &t, &s, 10).await;
            assert_eq!(got.len() as u64, PUBLISHED, "every message, the parked one again");
        });
        script.at_query(sluice_core::keys::QUEUE_PREFIX, QueryAction::Before(receiving));
        let d = described.describe(&topic, &sub).await.unwrap();
        assert_eq!(script.pending(), 0, "the receive landed before queue read {k}");
        let b = &d.backlog;
        assert_eq!(b.visible + b.in_flight + b.delayed, PUBLISHED, "receive before read {k}: {b:?}");
        assert!(d.exact, "receive before read {k}");
    }
}

/// Keyed: a receive whose read sees the cursor a nack rewrote but not yet the lease it
/// moved (a DynamoDB query is not a snapshot against a transaction): the key's next message
/// still waits behind it, and other keys flow.
pub async fn given_a_keyed_receive_whose_read_misses_a_moved_lease_then_the_key_still_waits(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "torn-keyed", 1).await;
    let keyed = SubscriptionSpec { ordering: Ordering::Key, ..earliest() };
    let sub = subscribe(&queues, &topic, keyed).await;
    let keys = ["k", "k", "other"].map(|k| event(format!("to {k}"), None, Some(k.to_owned()), None));
    publish(&log, &topic, keys.into()).await;
    let first = receive(&queues, &topic, &sub, 1).await;
    assert_eq!(positions(&first), vec![(0, 0)]);
    let nacked = queues.nack(&topic, &sub, &[first[0].receipt.clone()], 60_000).await.unwrap();
    assert!(nacked[0].is_ok(), "{nacked:?}");
    let (script, torn) = scripted_queues(backend, &clock).await;
    script.at_query(sluice_core::keys::QUEUE_PREFIX, QueryAction::Miss(sluice_core::keys::LEASE_PREFIX));
    let got = torn.receive(&topic, &sub, &ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: None });
    let got = got.await.unwrap();
    assert_eq!(script.pending(), 0, "the receive's read missed the lease");
    assert_eq!(positions(&got), vec![(0, 2)], "0@1 waits behind 0@0, whose lease the read missed");
    assert!(queues.ack(&topic, &sub, &[got[0].receipt.clone()]).await.unwrap()[0].is_ok());
    clock.advance(60_000);
    let again = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&again), vec![(0, 0)], "the nacked message first, when its delay ends");
    assert!(queues.ack(&topic, &sub, &[again[0].receipt.clone()]).await.unwrap()[0].is_ok());
    assert_eq!(positions(&receive(&queues, &topic, &sub, 10).await), vec![(0, 1)]);
}

/// Retention moves the log start past where a receive reads, between its look at the head
/// and its read of the index: the receive continues from the new start, no 416.
pub async fn given_retention_passing_a_receive_in_flight_then_it_answers_from_the_new_start(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = unique_retained_topic(&log).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("old{i}"), START_MS - 2 * HOUR).await;
    }
    for i in 0..2 {
        publish_at(&log, &topic, 0, &format!("new{i}"), START_MS).await;
    }
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let (script, racing) = scripted_queues(backend, &clock).await;
    let rival = {
        let (store, config) = (log.store().clone(), config.clone());
        Box::pin(async move {
            let default_ms = JanitorConfig::default().default_retention_ms;
            sluice_core::upkeep::retention::retain(store.as_ref(), &config, 0, START_MS, default_ms).await.unwrap();
        })
    };
    script.at_query(sluice_core::keys::segments_pk(config.id, 0), QueryAction::Before(rival));
    let got =
        racing.receive(&topic, &sub, &ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: None });
    let got = got.await.expect("no transient offset_out_of_range");
    assert_eq!(script.pending(), 0, "retention ran during the receive");
    assert_eq!(positions(&got), vec![(0, 3), (0, 4)]);
    assert_eq!(queues.describe(&topic, &sub).await.unwrap().backlog.expired, 3);
}

async fn unique_retained_topic(log: &Log) -> String {
    let topic = crate::unique_topic("retained-receive");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None })
        .await
        .unwrap();
    topic
}

/// A receive whose reads take 10 s still holds its message for the whole visibility
/// timeout, counted from its write.
pub async fn given_a_slow_receive_then_the_visibility_window_counts_from_its_write(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "slow-receive", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let (script, slow) = scripted_queues(backend, &clock).await;
    let stall = {
        let clock = clock.clone();
        Box::pin(async move { clock.advance(10_000) })
    };
    script.at_query(sluice_core::keys::segments_pk(config.id, 0), QueryAction::Before(stall));
    let req = ReceiveRequest { max_messages: 1, wait_ms: 0, visibility_timeout_ms: Some(30_000) };
    assert_eq!(positions(&slow.receive(&topic, &sub, &req).await.unwrap()), vec![(0, 0)]);
    assert_eq!(clock.now_ms(), START_MS + 10_000);
    clock.advance(29_999);
    assert_nothing(&queues, &topic, &sub, "held for 30 s from the receive's write").await;
    clock.advance(1);
    assert_eq!(positions(&receive(&queues, &topic, &sub, 1).await), vec![(0, 0)]);
}

/// Which queue writes may be deferred (answered before they are durable against a power
/// cut): acks and nacks, whose loss only delivers again; never a receive's lease, nor a
/// visibility change, whose loss could let a second receiver hold a message in its window.
pub async fn given_receives_acks_nacks_and_visibility_changes_then_only_acks_and_nacks_are_deferred(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (script, queues) = scripted_queues(backend, &clock).await;
    let log = queues.log().clone();
    let topic = new_topic(&log, "deferred", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let received = receive(&queues, &topic, &sub, 3).await;
    assert_eq!(received.len(), 3);
    assert_eq!(script.deferred(), 0, "a receive's lease is durable before it answers");
    let receipt = |i: usize| vec![received[i].receipt.clone()];
    assert!(queues.change_visibility(&topic, &sub, &receipt(0), 60_000).await.unwrap()[0].is_ok());
    assert_eq!(script.deferred(), 0, "a longer window is durable before it answers");
    assert!(queues.ack(&topic, &sub, &receipt(1)).await.unwrap()[0].is_ok());
    assert_eq!(script.deferred(), 1, "an ack is deferred");
    assert!(queues.nack(&topic, &sub, &receipt(2), 0).await.unwrap()[0].is_ok());
    assert_eq!(script.deferred(), 2, "a nack is deferred");
}

/// A delete that read the subscription, then lost the race to a delete and a re-create of
/// the same name: it must not delete the new subscription (whose version restarted, before
/// tombstones kept it growing).
pub async fn given_a_stale_delete_after_the_subscription_was_re_created_then_the_new_one_stays(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "aba", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    let (script, stale) = scripted_queues(backend, &clock).await;
    let rival = {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        Box::pin(async move {
            queues.delete(&topic, &sub).await.unwrap();
            let (_, created) = queues.create(&topic, &sub, earliest()).await.unwrap();
            assert!(created);
        })
    };
    script
        .at(|ops| ops.iter().any(|op| op.key().pk.starts_with(sluice_core::keys::SUBS_PREFIX)), Action::Before(rival));
    stale.delete(&topic, &sub).await.expect("the subscription it meant is deleted");
    assert_eq!(script.pending(), 0, "the rival ran");
    queues.describe(&topic, &sub).await.expect("the re-created subscription stays");
    publish_at(&log, &topic, 0, "m", START_MS).await;
    assert_eq!(positions(&receive(&queues, &topic, &sub, 1).await), vec![(0, 0)]);
}

/// A receive that read its subscription, then the subscription was deleted and purged before
/// the receive wrote its first items: they must not be created, or nothing removes them.
pub async fn given_a_receive_racing_its_subscriptions_purge_then_no_item_is_left_behind(backend: &dyn Backend) {
    use sluice_core::keys::{queue_collections, subscription_key};
    use sluice_core::ports::state::Query;
    use sluice_core::queues::SubscriptionRecord;

    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "purge-race", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let store = log.store().clone();
    let item = store.get(&subscription_key(config.id, &sub)).await.unwrap().expect("subscription record");
    let id = layout::decode::<SubscriptionRecord>("subscription", &item.value).unwrap().id;
    let (script, racing) = scripted_queues(backend, &clock).await;
    let rival = {
        let (queues, topic, sub, store) = (queues.clone(), topic.clone(), sub.clone(), store.clone());
        Box::pin(async move {
            queues.delete(&topic, &sub).await.unwrap();
            // Only this subscription's purge order: other cases' janitors share a moto table.
            let own = crate::OwnPurges::new(store.clone(), &[], &[id]);
            for _ in 0..100 {
                if crate::janitor_step(&own, 1000, START_MS).await.is_some_and(|r| !r.more) {
                    break;
                }
            }
        })
    };
    script
        .at(|ops| ops.iter().any(|op| op.key().pk.starts_with(sluice_core::keys::QUEUE_PREFIX)), Action::Before(rival));
    let got =
        racing.receive(&topic, &sub, &ReceiveRequest { max_messages: 1, wait_ms: 0, visibility_timeout_ms: None });
    let got = got.await;
    assert_eq!(script.pending(), 0, "the rival ran");
    assert!(matches!(got, Err(sluice_core::Error::SubscriptionNotFound { .. })), "{got:?}");
    for pk in queue_collections(id, 0) {
        let left = store.query(&Query::all(pk.clone(), 10)).await.unwrap().items;
        assert!(left.is_empty(), "{pk} holds {} items after its purge", left.len());
    }
}

/// An ack with the receipt of a delivery whose lease a visibility change moved: the lease is
/// not where the receipt says, so the whole partition is read, and that read is torn (it
/// misses the moved lease, as a query racing a transaction can). The receipt is still valid:
/// the ack must succeed, not answer stale.
pub async fn given_a_moved_lease_hidden_by_a_torn_read_then_its_receipt_still_acks(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "torn-settle", 1).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let got = receive(&queues, &topic, &sub, 1).await;
    let receipt = got[0].receipt.clone();
    let moved = queues.change_visibility(&topic, &sub, std::slice::from_ref(&receipt), 60_000).await.unwrap();
    assert!(moved[0].is_ok(), "{moved:?}");
    let (script, torn) = scripted_queues(backend, &clock).await;
    // The partition's items in order: the cursor, then the one (moved) lease.
    script.at_query(sluice_core::keys::QUEUE_PREFIX, QueryAction::Tear(2));
    let acked = torn.ack(&topic, &sub, &[receipt]).await.unwrap();
    assert_eq!(script.pending(), 0, "the settle's read was torn");
    assert_eq!(acked, vec![Ok(())], "a valid receipt acks");
    clock.advance(120_000);
    assert_nothing(&queues, &topic, &sub, "acked for good").await;
}

/// A message whose last delivery ran out is counted dead before a receive buries it: a
/// purge of the dead-letter queue takes it too, and describe agrees.
pub async fn given_a_dead_message_not_yet_buried_when_the_dlq_is_purged_then_it_is_purged(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "purge-due", 1).await;
    let spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..earliest() };
    let sub = subscribe(&queues, &topic, spec).await;
    publish_at(&log, &topic, 0, "poison", START_MS).await;
    assert_eq!(receive(&queues, &topic, &sub, 1).await.len(), 1);
    clock.advance(1_001);
    assert_eq!(queues.describe(&topic, &sub).await.unwrap().backlog.dead, 1, "counted dead once due");
    assert_eq!(queues.purge_dead_letters(&topic, &sub).await.unwrap(), 1, "the purge takes it");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.dead, d.backlog.visible), (0, 0), "{:?}", d.backlog);
}

/// A receive takes a message from one partition, then its read of another partition takes
/// longer than the first message's visibility timeout: by the time it answers, that window
/// has ended (another receive may hold the message), so the answer leaves it out; it is due
/// again, as after a lost answer, and delivered once more.
pub async fn given_a_receive_answering_after_a_window_ended_then_it_leaves_those_messages_out(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "late-answer", 2).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    publish_at(&log, &topic, 0, "p0", START_MS).await;
    publish_at(&log, &topic, 1, "p1", START_MS).await;
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let (script, slow) = scripted_queues(backend, &clock).await;
    // Each partition's index read stalls 10 s: the first partition's 5 s window (counted from
    // its write, after its own stall) has ended when the second one's read is done.
    for p in 0..2 {
        let clock = clock.clone();
        script.at_query(
            sluice_core::keys::segments_pk(config.id, p),
            QueryAction::Before(Box::pin(async move { clock.advance(10_000) })),
        );
    }
    let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: Some(5_000) };
    let got = slow.receive(&topic, &sub, &req).await.unwrap();
    assert_eq!((script.pending(), clock.now_ms()), (0, START_MS + 20_000), "both reads stalled");
    assert_eq!(got.len(), 1, "the first partition's message left out: {:?}", positions(&got));
    let left_out = if got[0].event.partition == 0 { 1 } else { 0 };
    let again = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&again), vec![(left_out, 0)], "due again at once");
    assert_eq!(again[0].receive_count, 2, "its first delivery was counted, as a lost answer's is");
}

/// A change whose subscription write failed after it marked the partitions leaves them
/// delivering nothing (its documented remedy: send it again). A change that asks for
/// nothing new finishes it too, so an operator who gave up on the first is not stuck.
pub async fn given_a_change_interrupted_after_its_marks_then_an_empty_change_lets_the_queue_deliver_again(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (script, queues) = scripted_queues(backend, &clock).await;
    let log = queues.log().clone();
    let topic = new_topic(&log, "patch-interrupted", 2).await;
    let sub = subscribe(&queues, &topic, earliest()).await;
    for p in 0..2 {
        publish_at(&log, &topic, p, &format!("m{p}"), START_MS).await;
    }
    let name = sub.clone();
    script.at(move |ops| puts_at(ops, sluice_core::keys::SUBS_PREFIX, &name), Action::Fault(Fault::FailBefore));
    let change = SubscriptionPatch { visibility_timeout_ms: Some(7_000), ..Default::default() };
    assert!(queues.patch(&topic, &sub, &change).await.is_err(), "the subscription write failed");
    assert_eq!(script.pending(), 0);
    assert_nothing(&queues, &topic, &sub, "marked, the settings not written: nothing is taken").await;

    let d = queues.patch(&topic, &sub, &SubscriptionPatch::default()).await.expect("an empty change");
    assert_eq!(d.spec.visibility_timeout_ms, SubscriptionSpec::default().visibility_timeout_ms, "nothing new");
    assert_eq!(positions(&receive(&queues, &topic, &sub, 10).await).len(), 2, "both partitions deliver again");
}

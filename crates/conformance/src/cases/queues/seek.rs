//! Seek and purge: a seek back redelivers what was done with, a seek forward passes over
//! what was still to deliver (its leases answer stale), each counted exactly, a dry run
//! answers the same counts and changes nothing, a purge keeps the dead letters, and no
//! receive or ack that starts after a seek has answered acts on a passed-over message.
//! Time passes on a [`ManualClock`](sluice_core::ManualClock).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use sluice_core::queues::{PartitionSeek, ReceiptError, SeekTo, Sought, StartAt, SubscriptionPatch, SubscriptionSpec};
use sluice_core::{Code, Error};

use crate::cases::support::queues::*;
use crate::Backend;

fn settings() -> SubscriptionSpec {
    SubscriptionSpec { visibility_timeout_ms: 60_000, ..spec(StartAt::Earliest) }
}

fn moved(partition: u32, from: u64, to: u64, redeliver: u64, skip: u64) -> PartitionSeek {
    PartitionSeek { partition, from, to, redeliver, skip }
}

fn sought(applied: bool, partitions: Vec<PartitionSeek>) -> Sought {
    let redeliver = partitions.iter().map(|p| p.redeliver).sum();
    let skip = partitions.iter().map(|p| p.skip).sum();
    Sought { applied, redeliver, skip, partitions }
}

async fn seek(queues: &sluice_core::queues::Queues, topic: &str, sub: &str, to: SeekTo, dry_run: bool) -> Sought {
    queues.seek(topic, sub, &to, dry_run).await.expect("seek")
}

pub async fn given_acked_messages_when_sought_back_then_a_dry_run_counts_them_and_the_seek_redelivers_them(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "seek-back", 2).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    for i in 0..5 {
        publish_at(&log, &topic, 0, &format!("a{i}"), START_MS).await;
    }
    for i in 0..3 {
        publish_at(&log, &topic, 1, &format!("b{i}"), START_MS).await;
    }
    let got = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(got.len(), 8);
    let held = got.iter().find(|m| at(m) == (0, 4)).expect("p0's last").clone();
    for m in got.iter().filter(|m| at(m) != (0, 4)) {
        assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Ok(()));
    }
    let before = queues.describe(&topic, &sub).await.expect("describe");

    let dry = seek(&queues, &topic, &sub, SeekTo::Earliest, true).await;
    let want = vec![moved(0, 5, 0, 4, 0), moved(1, 3, 0, 3, 0)];
    assert_eq!(dry, sought(false, want.clone()), "the acked ones come back; the one in flight stays to deliver");
    assert_eq!(queues.describe(&topic, &sub).await.expect("describe"), before, "a dry run changes nothing");
    assert_nothing(&queues, &topic, &sub, "after a dry run").await;

    let real = seek(&queues, &topic, &sub, SeekTo::Earliest, false).await;
    assert_eq!(real, sought(true, want), "the seek does what its dry run said");
    assert_eq!(ack(&queues, &topic, &sub, &held.receipt).await, Err(ReceiptError::Stale), "every lease ends");
    let again = receive(&queues, &topic, &sub, 10).await;
    let mut at_again = positions(&again);
    at_again.sort_unstable();
    let all: Vec<(u32, u64)> = (0..5).map(|o| (0, o)).chain((0..3).map(|o| (1, o))).collect();
    assert_eq!(at_again, all, "everything once more, from the log");
    assert!(again.iter().all(|m| m.receive_count == 1), "delivered as new");
    assert_eq!(seek(&queues, &topic, &sub, SeekTo::Earliest, true).await.redeliver, 0, "nothing acked since");
}

pub async fn given_a_seek_forward_then_skipped_messages_never_come_and_their_leases_are_stale(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "seek-forward", 1).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    for i in 0..10 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS + i * 1000).await;
    }
    let held = receive(&queues, &topic, &sub, 3).await;
    assert_eq!(positions(&held), vec![(0, 0), (0, 1), (0, 2)]);

    let before = queues.describe(&topic, &sub).await.expect("describe");
    for bad in [SeekTo::Offsets(vec![11]), SeekTo::Offsets(vec![2, 3]), SeekTo::Offsets(vec![])] {
        let refused = queues.seek(&topic, &sub, &bad, false).await;
        assert!(matches!(refused, Err(Error::Invalid { code: Code::InvalidSeek, .. })), "{bad:?}: {refused:?}");
    }
    assert_eq!(queues.describe(&topic, &sub).await.expect("describe"), before, "a refused seek changes nothing");

    let to_time = SeekTo::Timestamp(START_MS + 6_000);
    assert_eq!(seek(&queues, &topic, &sub, to_time.clone(), true).await, sought(false, vec![moved(0, 3, 6, 0, 6)]));
    let real = seek(&queues, &topic, &sub, to_time, false).await;
    assert_eq!(real, sought(true, vec![moved(0, 3, 6, 0, 6)]), "3 new and 3 held passed over");
    for m in &held {
        assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Err(ReceiptError::Stale), "{:?}", at(m));
    }
    let rest = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&rest), (6..10).map(|o| (0, o)).collect::<Vec<_>>(), "from the time on");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 4, 0, 0]);
}

pub async fn given_a_filtered_subscription_when_sought_then_unmatched_messages_count_in_neither(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "seek-filter", 1).await;
    let filter = Some(json!({"key": ["keep"]}));
    let sub = subscribe(&queues, &topic, SubscriptionSpec { filter, ..settings() }).await;
    let events = (0..10).map(|i| {
        let key = if i % 3 == 0 { "keep" } else { "drop" };
        event(format!("m{i}"), Some(0), Some(key.to_owned()), Some(START_MS))
    });
    publish(&log, &topic, events.collect()).await;
    assert_eq!(
        seek(&queues, &topic, &sub, SeekTo::Latest, true).await,
        sought(false, vec![moved(0, 0, 10, 0, 4)]),
        "only the 4 matches (0, 3, 6, 9) would have been delivered"
    );
    for m in receive(&queues, &topic, &sub, 10).await {
        assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Ok(()));
    }
    let back = seek(&queues, &topic, &sub, SeekTo::Offsets(vec![2]), false).await;
    assert_eq!(back, sought(true, vec![moved(0, 10, 2, 3, 0)]), "3, 6 and 9 come back; the others never do");
    let again: Vec<(u32, u64)> = positions(&receive(&queues, &topic, &sub, 10).await);
    assert_eq!(again, vec![(0, 3), (0, 6), (0, 9)]);
}

/// Found by the simulation: a message held across a change of filter that the new filter
/// does not match was taken off the redeliver count twice (as held, and as unmatched).
pub async fn given_held_messages_a_new_filter_does_not_match_when_sought_back_then_counted_once(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "seek-held-unmatched", 1).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    let events = (0..6).map(|i| {
        let key = if i % 2 == 0 { "keep" } else { "drop" };
        event(format!("m{i}"), Some(0), Some(key.to_owned()), Some(START_MS))
    });
    publish(&log, &topic, events.collect()).await;
    let got = receive(&queues, &topic, &sub, 10).await;
    // 1 and 3 stay held; the others are acked.
    let (held, done): (Vec<_>, Vec<_>) = got.iter().partition(|m| [1, 3].contains(&at(m).1));
    for m in done {
        assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Ok(()));
    }
    let change = SubscriptionPatch { filter: Some(Some(json!({"key": ["keep"]}))), ..Default::default() };
    queues.patch(&topic, &sub, &change).await.expect("patch");
    // Back over 0..6: 0, 2 and 4 come back; 1 and 3 (held) and 5 (acked) fail the filter.
    let want = vec![moved(0, 6, 0, 3, 0)];
    assert_eq!(seek(&queues, &topic, &sub, SeekTo::Earliest, true).await, sought(false, want.clone()));
    assert_eq!(seek(&queues, &topic, &sub, SeekTo::Earliest, false).await, sought(true, want));
    for m in held {
        assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Err(ReceiptError::Stale), "{:?}", at(m));
    }
    let again = positions(&receive(&queues, &topic, &sub, 10).await);
    assert_eq!(again, vec![(0, 0), (0, 2), (0, 4)], "exactly the 3 counted");
}

/// Found by the simulation: a dead letter stays through a seek back, and its message,
/// delivered again, can run out again; burying it then must not fail on the letter already
/// there (every receive and listing answered 429 for good).
pub async fn given_a_dead_letter_sought_back_over_when_it_runs_out_again_then_buried_once(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "seek-dead-again", 1).await;
    let settings = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, settings).await;
    publish_at(&log, &topic, 0, "poison", START_MS).await;
    for round in 0..2 {
        assert_eq!(receive(&queues, &topic, &sub, 1).await.len(), 1, "round {round}: delivered");
        clock.advance(1_000);
        let dead = queues.dead_letters(&topic, &sub, None, 10).await.expect("dead letters");
        assert_eq!(dead.entries.len(), 1, "round {round}: one dead letter");
        assert!(receive(&queues, &topic, &sub, 1).await.is_empty(), "round {round}: nothing left");
        assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 1], "round {round}: dead, once");
        let back = seek(&queues, &topic, &sub, SeekTo::Earliest, false).await;
        assert_eq!(back, sought(true, vec![moved(0, 1, 0, 1, 0)]), "round {round}: the dead letter comes back");
    }
}

/// Found by the simulation (seed 2003): a seek back keeps a dead lease not yet buried (the
/// DLQ's already, as the seek answers) while its message comes again from the log; a PATCH
/// raising `max_receive_count` before a receive buried it made the lease live again: the
/// dead letter was never written, and the message had two ways out at once, new from the
/// cursor and from its lease (the simulation saw it delivered as #1 after #4, held twice).
pub async fn given_a_dead_lease_sought_back_over_when_max_receives_is_raised_then_delivered_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "seek-dead-raised", 1).await;
    let settings = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, settings).await;
    let poison = publish_at(&log, &topic, 0, "poison", START_MS).await;
    assert_eq!(receive(&queues, &topic, &sub, 1).await.len(), 1);
    // Its one delivery runs out: dead, though no receive has buried it yet.
    clock.advance(1_000);
    let back = seek(&queues, &topic, &sub, SeekTo::Earliest, false).await;
    assert_eq!(back, sought(true, vec![moved(0, 1, 0, 1, 0)]), "the dead one comes back");
    let raised = SubscriptionPatch { max_receive_count: Some(3), ..Default::default() };
    queues.patch(&topic, &sub, &raised).await.expect("patch");
    let got = receive(&queues, &topic, &sub, 10).await;
    let got: Vec<_> = got.iter().map(|m| (at(m), m.receive_count)).collect();
    assert_eq!(got, vec![(poison, 1)], "delivered once, as new");
    assert_nothing(&queues, &topic, &sub, "held by its one receiver").await;
    clock.advance(1_000);
    let again = receive(&queues, &topic, &sub, 10).await;
    let again: Vec<_> = again.iter().map(|m| (at(m), m.receive_count)).collect();
    assert_eq!(again, vec![(poison, 2)], "its window over, once more");
    assert_eq!(all_dead_letters(&queues, &topic, &sub).await.len(), 1, "the dead letter stays");
}

pub async fn given_dead_letters_when_purged_then_the_queue_is_empty_and_the_dlq_is_kept(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "purge", 1).await;
    let settings = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, settings).await;
    publish_at(&log, &topic, 0, "poison", START_MS).await;
    assert_eq!(receive(&queues, &topic, &sub, 1).await.len(), 1);
    // Its one delivery runs out: dead, though no receive has buried it yet.
    clock.advance(1_000);
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    assert_eq!(backlog(&queues, &topic, &sub).await, [3, 0, 0, 1]);

    let dry = queues.seek(&topic, &sub, &SeekTo::Latest, true).await.expect("dry run");
    let purged = queues.purge(&topic, &sub).await.expect("purge");
    assert_eq!(purged, Sought { applied: true, ..dry.clone() }, "the dry run counted the purge");
    assert_eq!(purged, sought(true, vec![moved(0, 1, 4, 0, 3)]), "the dead one is not skipped");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 1], "the dead letter stays");
    assert_eq!(all_dead_letters(&queues, &topic, &sub).await.len(), 1);
    assert_nothing(&queues, &topic, &sub, "purged").await;
    let new = publish_at(&log, &topic, 0, "after", START_MS).await;
    assert_eq!(positions(&receive(&queues, &topic, &sub, 10).await), vec![new], "what comes after is delivered");
}

/// Workers receive and ack across four partitions while a seek moves every queue to its
/// end: no receive that started after the answer gets a message below the new position,
/// and no ack that started after it succeeds for one.
pub async fn given_receives_and_acks_racing_a_seek_then_none_after_its_answer_acts_on_a_passed_over_message(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "seek-race", 4).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    let total = scaled(backend, 400).max(80);
    publish(&log, &topic, (0..total).map(|i| event(format!("m{i}"), Some(i as u32 % 4), None, None)).collect()).await;
    let answer: Arc<Mutex<Option<Vec<u64>>>> = Arc::default();
    let answered = Arc::new(AtomicBool::new(false));
    let wrong = Arc::new(Mutex::new(Vec::new()));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let q =
            if w % 2 == 0 { sluice_core::queues::Queues::caching_subscriptions(log.clone()) } else { queues.clone() };
        let (topic, sub, answer, answered, wrong) =
            (topic.clone(), sub.clone(), answer.clone(), answered.clone(), wrong.clone());
        workers.spawn(async move {
            let (mut after, mut kept) = (0, Vec::new());
            while after < 5 {
                let started_after = answered.load(Ordering::SeqCst);
                let got = receive(&q, &topic, &sub, 3).await;
                // Every other message is kept unacked, to be acked once the seek has answered.
                for (i, m) in got.into_iter().enumerate() {
                    if started_after {
                        let to = answer.lock().unwrap().clone().expect("answered")[at(&m).0 as usize];
                        if at(&m).1 < to {
                            wrong.lock().unwrap().push(format!("received {:?} below {to}", at(&m)));
                        }
                    }
                    if i % 2 == 0 {
                        let _ = ack(&q, &topic, &sub, &m.receipt).await;
                    } else {
                        kept.push((started_after, m));
                    }
                }
                if started_after {
                    after += 1;
                }
                // The in-memory store never makes a receive wait: without a yield, workers
                // spinning on empty receives would keep every runtime thread from the
                // tasks they woke (a turn handed over).
                tokio::task::yield_now().await;
            }
            for (received_after, m) in kept.into_iter().filter(|(after, _)| !after) {
                let to = answer.lock().unwrap().clone().expect("answered")[at(&m).0 as usize];
                let acked = ack(&q, &topic, &sub, &m.receipt).await;
                if !received_after && at(&m).1 < to && acked != Err(ReceiptError::Stale) {
                    wrong.lock().unwrap().push(format!("ack of {:?} below {to} answered {acked:?}", at(&m)));
                }
            }
        });
    }
    while queues.describe(&topic, &sub).await.expect("describe").backlog.visible > total as u64 / 2 {
        tokio::task::yield_now().await;
    }
    let done = seek(&queues, &topic, &sub, SeekTo::Latest, false).await;
    *answer.lock().unwrap() = Some(done.partitions.iter().map(|p| p.to).collect());
    answered.store(true, Ordering::SeqCst);
    publish(&log, &topic, (0..8).map(|i| event(format!("n{i}"), Some(i % 4), None, None)).collect()).await;
    while workers.join_next().await.is_some() {}

    let wrong = wrong.lock().unwrap().clone();
    assert!(wrong.is_empty(), "after the seek answered: {wrong:?}");
    assert!(done.skip > 0, "the seek passed over messages still to deliver: {done:?}");
}

//! Lost answers on every write path: the write is applied, then its answer is lost
//! ([`Fault::LoseAnswer`]: the store says `Unavailable`, the outcome unknown), and the
//! client retries as a client would (or the next step runs). Each case names the path and
//! the promise a user relies on after the retry: nothing applied twice, nothing lost,
//! counts right, one holder per message, offsets that never regress. Two cases put a
//! rival's commit between the lost answer and its resolution.
//!
//! The janitor's cases run a janitor whose view is scoped to the case's own topic and
//! objects (`ScopedStore`, `ScopedObjects`), so they can share one moto server with
//! every other case without compacting or collecting under anyone else's expectations.

use sluice_core::Code;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::groups::{Groups, PollAnswer, PollRequest, SeekTarget};
use sluice_core::layout::{self, ObjectRecord};
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::queues::{Queues, ReceiptError, StartAt, SubscriptionSpec};
use sluice_core::upkeep::{Janitor, JanitorConfig, STEP_BUDGET};
use sluice_core::{
    BlobRef, Clock, Error, IdempotencyKey, Log, ManualClock, NewEvent, ObjectStore, Position, ReadRequest,
    StorageError, SystemClock, TopicSpec,
};

use crate::faults::{deletes_at, puts_at, puts_value, Action, Scripted, ScriptedObjects};
use crate::group_cases::{commit_of, committed, groups_on, offsets_of, request};
use crate::log_cases::Fault;
use crate::queue_cases::{assert_nothing, manual, new_topic, positions, publish_at, receive, subscribe, START_MS};
use crate::{unique_topic, Backend};

/// Generates one `#[tokio::test]` per lost-answer case; `$backend` is an async expression yielding a [`Backend`].
#[macro_export]
macro_rules! lost_answer_conformance_suite {
    ($backend:expr) => {
        $crate::lost_answer_conformance_suite!(@cases $backend;
            given_a_publish_commit_applied_but_its_answer_lost_and_a_rival_commit_then_it_answers_its_own_offsets,
            given_a_failed_commit_then_a_rival_on_one_partition_then_a_lost_retry_then_it_answers_the_retrys_offsets,
            given_an_s3_put_applied_but_its_answer_lost_then_the_keyed_retry_is_acknowledged_once_and_replay_is_exact,
            given_a_nack_applied_but_its_answer_lost_then_the_retry_is_stale_or_ok_and_the_message_comes_back_once,
            given_a_visibility_change_applied_but_its_answer_lost_then_the_retry_keeps_one_holder,
            given_a_redrive_applied_but_its_answer_lost_then_the_retry_never_leases_a_dead_letter_twice,
            given_a_dead_letter_delete_applied_but_its_answer_lost_then_the_retry_leaves_the_count_right,
            given_a_dlq_purge_applied_but_its_answer_lost_then_the_retry_leaves_the_count_right,
            given_a_subscription_create_applied_but_its_answer_lost_then_the_retry_answers_it_and_nothing_is_doubled,
            given_a_subscription_delete_applied_but_its_answer_lost_then_the_retry_is_done_and_it_stays_deleted,
            given_a_topic_create_applied_but_its_answer_lost_then_the_retry_answers_the_same_topic,
            given_a_topic_delete_applied_but_its_answer_lost_then_the_retry_is_done_and_it_was_deleted_once,
            given_a_group_join_applied_but_its_answer_lost_then_no_event_is_lost_and_the_ghosts_partitions_come_back,
            given_a_group_commit_applied_but_its_answer_lost_then_the_retry_commits_once_and_never_regresses,
            given_a_group_commit_lost_and_a_rival_commit_after_a_rebalance_then_the_offset_never_regresses,
            given_a_seek_applied_but_its_answer_lost_then_the_retry_leaves_the_offsets_at_the_target,
            given_a_leave_applied_but_its_answer_lost_then_the_retry_is_done_and_the_partitions_are_reassigned,
            given_retentions_head_move_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact,
            given_retentions_item_removal_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact,
            given_a_compaction_swap_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact,
            given_a_collectors_doom_applied_but_its_answer_lost_then_the_next_run_collects_and_replay_is_exact,
        );
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::lost_answer_cases::$case(&backend).await;
            }
        )+
    };
}

const HOUR: i64 = 3600 * 1000;

/// The answer a lost answer gets: `Unavailable` (the outcome unknown), never a success or another error.
fn assert_unknown<T: std::fmt::Debug>(answer: Result<T, Error>, what: &str) {
    assert!(matches!(answer, Err(Error::Unavailable(_))), "{what}: a lost answer is unavailable, got {answer:?}");
}

fn event(value: &str, partition: u32, timestamp_ms: Option<i64>) -> NewEvent {
    NewEvent {
        key: None,
        headers: vec![("h".into(), Bytes::from_static(b"x"))],
        value: Bytes::from(value.to_owned()),
        value_is_json: false,
        timestamp_ms,
        partition: Some(partition),
    }
}

/// Every event of a partition from `offset` to the end, page by page, as (offset, value).
async fn replay(log: &Log, topic: &str, partition: u32, mut offset: u64) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    loop {
        let req = ReadRequest {
            topic: topic.to_owned(),
            partition,
            offset,
            max_events: 10_000,
            max_bytes: 6 << 20,
            wait_ms: 0,
        };
        let batch = log.read(&req).await.expect("replay");
        if batch.events.is_empty() {
            return out;
        }
        for e in batch.events {
            assert_eq!(e.offset, offset, "offsets come densely");
            out.push((e.offset, String::from_utf8_lossy(&e.record.value).into_owned()));
            offset += 1;
        }
    }
}

fn expected(from: u64, values: &[&str]) -> Vec<(u64, String)> {
    values.iter().enumerate().map(|(i, v)| (from + i as u64, (*v).to_owned())).collect()
}

/// A log on `backend`'s storage whose writes meet `script`'s rules, beside the script.
async fn scripted_log(backend: &dyn Backend, clock: Arc<dyn Clock>) -> (Arc<Scripted>, Log) {
    let (store, objects) = backend.open_with(clock.clone()).await;
    let script = Scripted::new(store);
    (script.clone(), Log::new(script, objects, clock, crate::log_config()))
}

// ---------------------------------------------------------------------------
// The log: a publish commit, an S3 PUT, topic create and delete.

/// A publish's commit is applied, and before its answer (lost) comes back a rival process
/// commits to the same partition: the publish reads its own segment back and answers its
/// own offsets (not the rival's, not the head's), and nothing is written twice.
pub async fn given_a_publish_commit_applied_but_its_answer_lost_and_a_rival_commit_then_it_answers_its_own_offsets(
    backend: &dyn Backend,
) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (script, log) = scripted_log(backend, clock.clone()).await;
    let (store, objects) = backend.open().await;
    let rival = Log::new(store, objects, clock, crate::log_config());
    let topic = unique_topic("lost-rival");
    rival.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    let rival_answer = Arc::new(Mutex::new(None));
    let race = {
        let (rival, topic, answer) = (rival.clone(), topic.clone(), rival_answer.clone());
        Box::pin(async move {
            let at = rival.publish(&topic, vec![event("c", 0, None)], None).await.expect("the rival's publish");
            *answer.lock().unwrap() = Some(at);
        })
    };
    script.at(|ops| ops.iter().any(|op| op.key().pk.starts_with("seg#")), Action::LoseAnswerAfter(race));
    let acked = log.publish(&topic, vec![event("a", 0, None), event("b", 0, None)], None).await;
    assert_eq!(script.pending(), 0, "the commit met its lost answer and the rival ran");
    let acked = acked.expect("a commit that landed is acknowledged");
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }, Position { partition: 0, offset: 1 }], "its own");
    let rival_at = rival_answer.lock().unwrap().take().expect("the rival answered");
    assert_eq!(rival_at, vec![Position { partition: 0, offset: 2 }]);
    let next = log.publish(&topic, vec![event("d", 0, None)], None).await.unwrap();
    assert_eq!(next, vec![Position { partition: 0, offset: 3 }]);
    assert_eq!(replay(&rival, &topic, 0, 0).await, expected(0, &["a", "b", "c", "d"]), "nothing written twice");
}

/// Found by the simulation. A commit over two partitions fails before it applies (its
/// outcome unknown), a rival then commits to the second partition only, and the retry lands
/// but its answer is lost. Both attempts start the first partition at the same offset; only
/// the retry's second segment is where the answer must say. Reading back one segment per
/// attempt took the first attempt's offsets, acknowledging the rival's offset as its own.
pub async fn given_a_failed_commit_then_a_rival_on_one_partition_then_a_lost_retry_then_it_answers_the_retrys_offsets(
    backend: &dyn Backend,
) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (script, log) = scripted_log(backend, clock.clone()).await;
    let (store, objects) = backend.open().await;
    let rival = Log::new(store, objects, clock, crate::log_config());
    let topic = unique_topic("lost-retry");
    rival.create_topic(&topic, TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None }).await.unwrap();
    rival.publish(&topic, vec![event("p0", 0, None), event("p1", 1, None)], None).await.unwrap();
    let race = {
        let (rival, topic) = (rival.clone(), topic.clone());
        Box::pin(async move {
            let at = rival.publish(&topic, vec![event("rival", 1, None)], None).await.expect("the rival's publish");
            assert_eq!(at, vec![Position { partition: 1, offset: 1 }]);
        })
    };
    let commit = |ops: &[WriteOp]| ops.iter().any(|op| op.key().pk.starts_with("seg#"));
    script.at(commit, Action::FailAfter(race));
    script.at(commit, Action::Fault(Fault::LoseAnswer));
    let acked = log.publish(&topic, vec![event("a", 0, None), event("b", 1, None)], None).await;
    assert_eq!(script.pending(), 0, "the first attempt failed, the rival ran, the retry's answer was lost");
    let acked = acked.expect("the retry landed: acknowledged");
    assert_eq!(acked, vec![Position { partition: 0, offset: 1 }, Position { partition: 1, offset: 2 }]);
    assert_eq!(replay(&rival, &topic, 1, 0).await, expected(0, &["p1", "rival", "b"]));
    assert_eq!(replay(&rival, &topic, 0, 0).await, expected(0, &["p0", "a"]));
}

/// The blob is stored but its PUT's answer is lost: the publish answers unavailable (nothing
/// acknowledged), the client's retry under its `Idempotency-Key` is acknowledged once, replay
/// is exact, and the collector later removes the blob no segment needs (never a live one).
pub async fn given_an_s3_put_applied_but_its_answer_lost_then_the_keyed_retry_is_acknowledged_once_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-put", None).await;
    let (store, objects) = backend.open_with(world.clock.clone()).await;
    let objects = ScriptedObjects::new(Arc::new(ScopedObjects { inner: objects, scope: world.scope.clone() }));
    let log = Log::new(store, objects.clone(), world.clock.clone(), crate::blobs_only());
    let key = || Some(IdempotencyKey { key: "put-lost".into(), fingerprint: vec![7; 32] });
    objects.at_put(Fault::LoseAnswer);
    let first = log.publish(&world.topic, vec![event("a", 0, None)], key()).await;
    assert_eq!(objects.pending(), 0, "the put met its lost answer");
    assert_unknown(first, "a publish whose blob's answer was lost");
    let retried = log.publish(&world.topic, vec![event("a", 0, None)], key()).await.expect("the retry");
    assert_eq!(retried, vec![Position { partition: 0, offset: 0 }]);
    let again = log.publish(&world.topic, vec![event("a", 0, None)], key()).await.expect("a second retry");
    assert_eq!(again, retried, "the key answers the first result");
    let next = log.publish(&world.topic, vec![event("b", 0, None)], None).await.unwrap();
    assert_eq!(next, vec![Position { partition: 0, offset: 1 }]);
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &["a", "b"]), "acknowledged once");
    world.clock.advance(HOUR);
    world.janitor(JanitorConfig { grace_ms: 0, ..JanitorConfig::default() }).run(STEP_BUDGET).await.unwrap();
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &["a", "b"]), "collected nothing live");
    world.assert_every_object_live().await;
}

/// A topic create applied but unanswered; another process publishes to the topic it finds;
/// the retried create answers that same topic (not created again), and the event stays.
pub async fn given_a_topic_create_applied_but_its_answer_lost_then_the_retry_answers_the_same_topic(
    backend: &dyn Backend,
) {
    let (script, log) = scripted_log(backend, Arc::new(SystemClock)).await;
    let other = {
        let (store, objects) = backend.open().await;
        Log::new(store, objects, Arc::new(SystemClock), crate::log_config())
    };
    let topic = unique_topic("lost-create");
    let spec = TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None };
    let name = topic.clone();
    script.at(move |ops| puts_at(ops, layout::topics_pk(), &name), Action::Fault(Fault::LoseAnswer));
    assert_unknown(log.create_topic(&topic, spec).await, "a create whose answer was lost");
    assert_eq!(script.pending(), 0, "the create met its lost answer");
    let at = other.publish(&topic, vec![event("e0", 1, None)], None).await.expect("the topic exists");
    assert_eq!(at, vec![Position { partition: 1, offset: 0 }]);
    let (config, created) = log.create_topic(&topic, spec).await.expect("the retried create");
    assert!(!created, "it existed: answered, not created again");
    assert_eq!(config.spec, spec);
    let (described, _) = other.describe_topic(&topic).await.unwrap();
    assert_eq!(config.id, described.id, "the same topic");
    let listed = other.list_topics().await.unwrap().into_iter().filter(|t| t.name == topic).count();
    assert_eq!(listed, 1);
    assert_eq!(replay(&other, &topic, 1, 0).await, expected(0, &["e0"]), "the event published meanwhile stays");
}

/// A topic delete applied but unanswered: the retry is done (`404 topic_not_found` says it is
/// gone) and writes nothing more, and a topic re-created under the name starts clean.
pub async fn given_a_topic_delete_applied_but_its_answer_lost_then_the_retry_is_done_and_it_was_deleted_once(
    backend: &dyn Backend,
) {
    let (script, log) = scripted_log(backend, Arc::new(SystemClock)).await;
    let topic = unique_topic("lost-delete");
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None };
    let (config, _) = log.create_topic(&topic, spec).await.unwrap();
    log.publish(&topic, vec![event("old", 0, None)], None).await.unwrap();
    script.at(|ops| puts_at(ops, layout::purge_pk(), ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(log.delete_topic(&topic).await, "a delete whose answer was lost");
    assert_eq!(script.pending(), 0, "the delete met its lost answer");
    match log.delete_topic(&topic).await {
        Ok(()) | Err(Error::TopicNotFound(_)) => {}
        other => panic!("a retried delete is done (ok, or not found): {other:?}"),
    }
    assert!(matches!(log.describe_topic(&topic).await, Err(Error::TopicNotFound(_))));
    // Its purge order may be gone already (a janitor on a shared backend); the tombstone stays.
    let store = log.store();
    let item = store.get(&layout::topic_key(&topic)).await.unwrap().expect("the tombstone");
    assert_eq!(item.version, 2, "the record was written once, by the lost delete");
    let (again, created) = log.create_topic(&topic, spec).await.unwrap();
    assert!(created && again.id != config.id, "a new topic");
    assert_eq!(log.publish(&topic, vec![event("new", 0, None)], None).await.unwrap()[0].offset, 0);
    assert_eq!(replay(&log, &topic, 0, 0).await, expected(0, &["new"]), "nothing of its predecessor");
}

// ---------------------------------------------------------------------------
// Work queues: nack, visibility, redrive, dead-letter delete and purge, create and delete.

fn earliest() -> SubscriptionSpec {
    SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() }
}

/// Queues on `backend` whose writes meet the rules of the [`Scripted`] store answered.
async fn scripted_queues(backend: &dyn Backend, clock: &Arc<ManualClock>) -> (Arc<Scripted>, Queues) {
    let (script, log) = scripted_log(backend, clock.clone()).await;
    (script, Queues::new(log))
}

/// A settle's write: it moves (or removes) a lease of a partition's queue, an item of its
/// own or kept inline in the cursor item.
fn settles(ops: &[WriteOp]) -> bool {
    puts_at(ops, "q#", "l#") || deletes_at(ops, "q#", "l#") || puts_at(ops, "q#", "c")
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
    script.at(|ops| puts_at(ops, "q#", "l#"), Action::Fault(Fault::LoseAnswer));
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
    script.at(|ops| deletes_at(ops, "dlq#", ""), Action::Fault(Fault::LoseAnswer));
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
    script.at(|ops| deletes_at(ops, "dlq#", ""), Action::Fault(Fault::LoseAnswer));
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
    script.at(|ops| puts_at(ops, "subs#", ""), Action::Fault(Fault::LoseAnswer));
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
    script.at(|ops| puts_at(ops, "purge-subs", ""), Action::Fault(Fault::LoseAnswer));
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

// ---------------------------------------------------------------------------
// Consumer groups: join, commit (and a rival's commit), seek, leave.

/// The log and groups of `backend` beside a second pair whose writes meet `script`.
async fn scripted_groups(backend: &dyn Backend, clock: &Arc<ManualClock>) -> (Log, Groups, Arc<Scripted>, Groups) {
    let (log, groups) = groups_on(backend, clock).await;
    let (script, scripted) = scripted_log(backend, clock.clone()).await;
    (log, groups, script, Groups::new(scripted))
}

async fn topic_with(log: &Log, prefix: &str, partitions: u32, per_partition: usize) -> String {
    let topic = unique_topic(prefix);
    log.create_topic(&topic, TopicSpec { partitions, retention_ms: None, retention_bytes: None }).await.unwrap();
    for p in 0..partitions {
        let events = (0..per_partition).map(|i| event(&format!("p{p}e{i}"), p, Some(START_MS))).collect();
        log.publish(&topic, events, None).await.unwrap();
    }
    topic
}

fn short_session(mut req: PollRequest) -> PollRequest {
    req.session_timeout_ms = Some(6_000);
    req
}

fn delivered(answer: &PollAnswer) -> Vec<(u32, u64)> {
    answer.events.iter().map(|e| (e.event.partition, e.event.offset)).collect()
}

/// A join whose answer is lost leaves a ghost: a member that holds partitions for a session
/// though no client knows its id. The client's retried join gets the rest; no event is lost:
/// once the ghost's session ends its partitions come back, from the committed offset.
pub async fn given_a_group_join_applied_but_its_answer_lost_then_no_event_is_lost_and_the_ghosts_partitions_come_back(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-join", 2, 3).await;
    let group = unique_topic("g");
    let join = || short_session(request(&group, None, &topic, 100));
    script.at(
        |ops| puts_at(ops, "group#", "meta") && puts_at(ops, "group#", "member#"),
        Action::Fault(Fault::LoseAnswer),
    );
    assert_unknown(faulty.poll(&join()).await, "a join whose answer was lost");
    assert_eq!(script.pending(), 0, "the join met its lost answer");
    let first = groups.poll(&join()).await.expect("the retried join");
    let member = first.member_id.clone();
    let mut seen = delivered(&first);
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(d.members.len(), 2, "the ghost holds partitions for its session");
    assert_eq!(first.assignment.len(), 1, "the retried join gets the ghost's share's complement");
    clock.advance(4_000);
    let mine = short_session(request(&group, Some(&member), &topic, 100));
    seen.extend(delivered(&groups.poll(&mine).await.expect("a heartbeat within the session")));
    clock.advance(2_001);
    let after = groups.poll(&mine).await.expect("a poll after the ghost's session ended");
    assert_eq!(after.assignment.len(), 2, "the ghost's partitions come back");
    seen.extend(delivered(&after));
    seen.sort_unstable();
    let all: Vec<(u32, u64)> = (0..2).flat_map(|p| (0..3).map(move |o| (p, o))).collect();
    assert_eq!(seen, all, "every event delivered, once each");
    assert_eq!(groups.describe(&group).await.unwrap().members.len(), 1);
}

/// A commit applied but unanswered, retried: the retry is accepted and the offset committed
/// once; a late copy of that retry arriving after a newer commit never moves it back.
pub async fn given_a_group_commit_applied_but_its_answer_lost_then_the_retry_commits_once_and_never_regresses(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-commit", 1, 10).await;
    let group = unique_topic("g");
    let a = groups.poll(&request(&group, None, &topic, 100)).await.unwrap();
    assert_eq!(offsets_of(&a), (0..10).collect::<Vec<_>>());
    let five = [commit_of(&topic, 0, 5)];
    script.at(|ops| puts_at(ops, "goff#", ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(faulty.commit(&group, &a.member_id, a.generation, &five).await, "a lost commit");
    assert_eq!(script.pending(), 0, "the commit met its lost answer");
    faulty.commit(&group, &a.member_id, a.generation, &five).await.expect("the retried commit");
    assert_eq!(committed(&groups, &group, 0).await, Some(5));
    let store = log.store();
    let item = store.get(&Key::new(format!("goff#{group}"), format!("{topic}#{:010}", 0))).await.unwrap();
    assert_eq!(item.map(|i| i.version), Some(1), "committed once: the retry wrote nothing");
    groups.commit(&group, &a.member_id, a.generation, &[commit_of(&topic, 0, 10)]).await.unwrap();
    faulty.commit(&group, &a.member_id, a.generation, &five).await.expect("a late copy of the retry");
    assert_eq!(committed(&groups, &group, 0).await, Some(10), "never moved back");
}

/// A commit applied, and before its answer (lost) comes back the member's session ends and a
/// rival member takes the partition over, resumes at that commit and commits further: the
/// first member's retry is fenced (or ignored), and the offset never regresses.
pub async fn given_a_group_commit_lost_and_a_rival_commit_after_a_rebalance_then_the_offset_never_regresses(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-commit-rival", 1, 10).await;
    let group = unique_topic("g");
    let a = groups.poll(&short_session(request(&group, None, &topic, 5))).await.unwrap();
    assert_eq!(offsets_of(&a), vec![0, 1, 2, 3, 4]);
    let rival_saw = Arc::new(Mutex::new(Vec::new()));
    let rival = {
        let (groups, group, topic, clock, saw) =
            (groups.clone(), group.clone(), topic.clone(), clock.clone(), rival_saw.clone());
        Box::pin(async move {
            clock.advance(6_001);
            let b = groups.poll(&short_session(request(&group, None, &topic, 100))).await.expect("the rival joins");
            *saw.lock().unwrap() = offsets_of(&b);
            groups.commit(&group, &b.member_id, b.generation, &[commit_of(&topic, 0, 10)]).await.expect("its commit");
        })
    };
    script.at(|ops| puts_at(ops, "goff#", ""), Action::LoseAnswerAfter(rival));
    let five = [commit_of(&topic, 0, 5)];
    assert_unknown(faulty.commit(&group, &a.member_id, a.generation, &five).await, "a lost commit");
    assert_eq!(script.pending(), 0, "the commit met its lost answer and the rival ran");
    assert_eq!(*rival_saw.lock().unwrap(), vec![5, 6, 7, 8, 9], "the rival resumed at the lost commit");
    match faulty.commit(&group, &a.member_id, a.generation, &five).await {
        Ok(()) | Err(Error::Conflict { code: Code::UnknownMember | Code::StaleGeneration, .. }) => {}
        other => panic!("the evicted member's retry is fenced or ignored: {other:?}"),
    }
    assert_eq!(committed(&groups, &group, 0).await, Some(10), "never moved back");
}

/// A seek applied but unanswered, retried: the offsets are at the target, and members resume there.
pub async fn given_a_seek_applied_but_its_answer_lost_then_the_retry_leaves_the_offsets_at_the_target(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-seek", 1, 10).await;
    let group = unique_topic("g");
    let a = groups.poll(&request(&group, None, &topic, 100)).await.unwrap();
    groups.commit(&group, &a.member_id, a.generation, &[commit_of(&topic, 0, 10)]).await.unwrap();
    script.at(|ops| puts_at(ops, "group#", "meta") && puts_at(ops, "goff#", ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(faulty.seek(&group, &topic, None, SeekTarget::Offset(3)).await, "a seek whose answer was lost");
    assert_eq!(script.pending(), 0, "the seek met its lost answer");
    let moved = faulty.seek(&group, &topic, None, SeekTarget::Offset(3)).await.expect("the retried seek");
    assert_eq!(moved, vec![(0, 3)]);
    assert_eq!(committed(&groups, &group, 0).await, Some(3));
    let resumed = groups.poll(&request(&group, Some(&a.member_id), &topic, 100)).await.unwrap();
    assert_eq!(offsets_of(&resumed), (3..10).collect::<Vec<_>>(), "the member resumes at the target");
}

/// A leave applied but unanswered, retried: the retry is done (ok, or `unknown_member`: it
/// left), and its partitions go to the others at once.
pub async fn given_a_leave_applied_but_its_answer_lost_then_the_retry_is_done_and_the_partitions_are_reassigned(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-leave", 2, 1).await;
    let group = unique_topic("g");
    let a = groups.poll(&request(&group, None, &topic, 100)).await.unwrap();
    let b = groups.poll(&request(&group, None, &topic, 100)).await.unwrap();
    let a = groups.poll(&request(&group, Some(&a.member_id), &topic, 100)).await.unwrap();
    assert_eq!((a.assignment.len(), b.assignment.len()), (1, 1));
    let member = a.member_id.clone();
    script.at(move |ops| deletes_at(ops, "group#", &format!("member#{member}")), Action::Fault(Fault::LoseAnswer));
    assert_unknown(faulty.leave(&group, &a.member_id).await, "a leave whose answer was lost");
    assert_eq!(script.pending(), 0, "the leave met its lost answer");
    match faulty.leave(&group, &a.member_id).await {
        Ok(()) | Err(Error::Conflict { code: Code::UnknownMember, .. }) => {}
        other => panic!("a retried leave is done (ok, or unknown member): {other:?}"),
    }
    let b = groups.poll(&request(&group, Some(&b.member_id), &topic, 100)).await.unwrap();
    assert_eq!(b.assignment.len(), 2, "the leaver's partitions are reassigned");
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(d.members.iter().map(|m| m.member_id.as_str()).collect::<Vec<_>>(), vec![b.member_id.as_str()]);
}

// ---------------------------------------------------------------------------
// The janitor: retention's head move and item removals, compaction's swap, the collector's doom.

/// One case's world for a janitor: a topic, the objects its logs put, a fake clock at the
/// real time (so object stores' own timestamps and the collector's judgement of age agree),
/// and janitors that see only these, whose writes meet `script`.
struct JanitorWorld {
    /// The backend's state store, unscripted, for looking.
    store: Arc<dyn StateStore>,
    /// What the janitors write through.
    script: Arc<Scripted>,
    janitor_objects: Arc<dyn ObjectStore>,
    clock: Arc<ManualClock>,
    scope: Arc<Scope>,
    topic: String,
    t0: i64,
}

impl JanitorWorld {
    async fn new(backend: &dyn Backend, prefix: &str, retention_ms: Option<i64>) -> Self {
        let t0 = SystemClock.now_ms();
        let clock = Arc::new(ManualClock::new(t0));
        let (store, janitor_objects) = backend.open_with(clock.clone()).await;
        let topic = unique_topic(prefix);
        let scope = Arc::new(Scope { tag: unique_topic("scope"), ..Scope::default() });
        let world = Self {
            store: store.clone(),
            script: Scripted::new(store),
            janitor_objects: Arc::new(ScopedObjects { inner: janitor_objects, scope: scope.clone() }),
            clock,
            scope,
            topic,
            t0,
        };
        let spec = TopicSpec { partitions: 1, retention_ms, retention_bytes: None };
        let (config, _) = world.log(backend).await.create_topic(&world.topic, spec).await.unwrap();
        world.scope.topics.lock().unwrap().insert(world.topic.clone());
        world.scope.ids.lock().unwrap().insert(layout::purge_key(config.id).sk);
        world
    }

    /// A log of a process of its own (on the embedded backend, blobs in a file of its own),
    /// whose objects are in scope.
    async fn log(&self, backend: &dyn Backend) -> Log {
        let (store, objects) = backend.open_with(self.clock.clone()).await;
        let objects = Arc::new(ScopedObjects { inner: objects, scope: self.scope.clone() });
        Log::new(store, objects, self.clock.clone(), crate::blobs_only())
    }

    /// A janitor that sees only this world, its writes meeting `script`'s rules.
    fn janitor(&self, config: JanitorConfig) -> Janitor {
        let store = Arc::new(ScopedStore { inner: self.script.clone(), scope: self.scope.clone() });
        Janitor::new(store, self.janitor_objects.clone(), self.clock.clone(), config)
    }

    async fn index_items(&self) -> usize {
        let id = self.id().await;
        self.store.query(&Query::all(layout::segments_pk(id, 0), 1000)).await.unwrap().items.len()
    }

    async fn id(&self) -> u64 {
        let item = self.store.get(&layout::topic_key(&self.topic)).await.unwrap().expect("the topic");
        layout::decode::<layout::TopicRecord>("topic", &item.value).unwrap().id
    }

    /// Every object of this world still stored holds live segments (its record counts some):
    /// the collector left no garbage it had freed, and took nothing live (replay says that).
    async fn assert_every_object_live(&self) {
        let listed = self.janitor_objects.list(None, 1000).await.unwrap();
        for info in listed {
            let item = self.store.get(&layout::object_key(&info.name)).await.unwrap();
            let record = item.map(|i| layout::decode::<ObjectRecord>("object", &i.value).unwrap());
            assert!(record.is_some_and(|r| r.refs > 0 && !r.doomed), "{} is left: {record:?}", info.name);
        }
    }

    /// Objects of this world on the collector's free list.
    async fn freed(&self) -> Vec<String> {
        let mine = self.scope.objects.lock().unwrap().clone();
        let mut freed = Vec::new();
        for shard in 0..layout::FREE_SHARDS {
            let page = self.store.query(&Query::all(layout::free_pk(shard), 1000)).await.unwrap();
            freed.extend(page.items.into_iter().map(|i| i.key.sk).filter(|o| mine.contains(o)));
        }
        freed
    }
}

/// No compaction: a target below any segment; no grace: freed objects go at once.
fn retention_only() -> JanitorConfig {
    JanitorConfig { compaction_target_bytes: 1, grace_ms: 0, ..JanitorConfig::default() }
}

/// Two old segments (from one process) and a new one (from another): a retention of an
/// hour at t0 + 1 h takes the old ones, and with them every segment of the first process's objects.
async fn old_and_new(world: &JanitorWorld, backend: &dyn Backend) -> Log {
    let (t0, topic) = (world.t0, &world.topic);
    let old = world.log(backend).await;
    for i in 0..2 {
        let events = (0..3).map(|j| event(&format!("old{}", i * 3 + j), 0, Some(t0 - 2 * HOUR))).collect();
        old.publish(topic, events, None).await.unwrap();
    }
    let new = world.log(backend).await;
    let events = (0..3).map(|j| event(&format!("new{j}"), 0, Some(t0 + HOUR / 2))).collect();
    new.publish(topic, events, None).await.unwrap();
    world.clock.set(t0 + HOUR);
    new
}

/// What replay must answer once the two old segments are gone.
fn the_new_ones() -> Vec<(u64, String)> {
    expected(6, &["new0", "new1", "new2"])
}

async fn assert_retained(world: &JanitorWorld, log: &Log) {
    let (_, states) = log.describe_topic(&world.topic).await.unwrap();
    assert_eq!((states[0].log_start_offset, states[0].high_watermark), (6, 9));
    let below = ReadRequest {
        topic: world.topic.clone(),
        partition: 0,
        offset: 0,
        max_events: 10,
        max_bytes: 1 << 20,
        wait_ms: 0,
    };
    assert!(matches!(log.read(&below).await, Err(Error::OffsetOutOfRange { log_start_offset: 6, .. })));
    assert_eq!(replay(log, &world.topic, 0, 6).await, the_new_ones(), "every kept event once, same bytes");
    assert_eq!(world.index_items().await, 1, "the old index items are gone");
    assert!(world.freed().await.is_empty(), "every freed object collected");
    world.assert_every_object_live().await;
}

/// Retention's head move (the log start advances) is applied but its answer lost: that
/// partition's upkeep stops there; the next run removes the items below the start, the
/// collector takes their objects, and replay answers every kept event once.
pub async fn given_retentions_head_move_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-head-move", Some(HOUR)).await;
    let log = old_and_new(&world, backend).await;
    world.script.at(|ops| ops.len() == 1 && puts_at(ops, "head#", ""), Action::Fault(Fault::LoseAnswer));
    let janitor = world.janitor(retention_only());
    let first = janitor.run(STEP_BUDGET).await.expect("a janitor run");
    assert_eq!(world.script.pending(), 0, "the head move met its lost answer");
    assert_eq!(first.partitions_failed, 1, "{first:?}");
    assert_eq!(replay(&log, &world.topic, 0, 6).await, the_new_ones());
    janitor.run(STEP_BUDGET).await.expect("the next run");
    assert_retained(&world, &log).await;
}

/// Retention's removal of index items (with their objects' counts) is applied but its
/// answer lost: the next run finds nothing more to remove and subtracts nothing twice, so the
/// collector takes exactly the objects no kept segment needs.
pub async fn given_retentions_item_removal_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-removal", Some(HOUR)).await;
    let log = old_and_new(&world, backend).await;
    world.script.at(|ops| deletes_at(ops, "seg#", "") && !puts_at(ops, "seg#", ""), Action::Fault(Fault::LoseAnswer));
    let janitor = world.janitor(retention_only());
    let first = janitor.run(STEP_BUDGET).await.expect("a janitor run");
    assert_eq!(world.script.pending(), 0, "the removal met its lost answer");
    assert_eq!(first.partitions_failed, 1, "{first:?}");
    janitor.run(STEP_BUDGET).await.expect("the next run");
    assert_retained(&world, &log).await;
}

/// Compaction's swap (the merged segment in, the run's items out, the counts moved) is
/// applied but its answer lost: the next run merges nothing twice, the collector takes the
/// merged-away objects only, and replay answers every event once with the same bytes.
pub async fn given_a_compaction_swap_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-swap", None).await;
    let log = world.log(backend).await;
    let values: Vec<String> = (0..6).map(|i| format!("e{i}")).collect();
    for v in &values {
        log.publish(&world.topic, vec![event(v, 0, Some(world.t0))], None).await.unwrap();
    }
    world.clock.set(world.t0 + HOUR);
    world.script.at(|ops| puts_at(ops, "seg#", "") && deletes_at(ops, "seg#", ""), Action::Fault(Fault::LoseAnswer));
    let janitor = world.janitor(JanitorConfig { grace_ms: 0, ..JanitorConfig::default() });
    let first = janitor.run(STEP_BUDGET).await.expect("a janitor run");
    assert_eq!(world.script.pending(), 0, "the swap met its lost answer");
    assert_eq!(first.partitions_failed, 1, "{first:?}");
    let all: Vec<&str> = values.iter().map(String::as_str).collect();
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &all));
    let second = janitor.run(STEP_BUDGET).await.expect("the next run");
    assert_eq!(second.segments_merged, 0, "nothing merged twice: {second:?}");
    assert_eq!(world.index_items().await, 2, "the merged segment and the newest one");
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &all), "every event once, same bytes");
    assert!(world.freed().await.is_empty(), "every merged-away object collected");
    world.assert_every_object_live().await;
}

/// The collector's doom of a freed object is applied but its answer lost: the object stays
/// on the free list, the next run deletes it (doomed already, it is never revived), and
/// replay of what is kept is exact.
pub async fn given_a_collectors_doom_applied_but_its_answer_lost_then_the_next_run_collects_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-doom", Some(HOUR)).await;
    let log = old_and_new(&world, backend).await;
    world.script.at(|ops| puts_value(ops, "obj#", b"\"doomed\":true"), Action::Fault(Fault::LoseAnswer));
    let janitor = world.janitor(retention_only());
    janitor.run(STEP_BUDGET).await.expect("a janitor run");
    assert_eq!(world.script.pending(), 0, "the doom met its lost answer");
    let left = world.freed().await;
    assert_eq!(left.len(), 1, "the object whose doom was unanswered stays on the free list");
    janitor.run(STEP_BUDGET).await.expect("the next run");
    assert!(matches!(world.janitor_objects.read(&left[0], 0, 1).await, Err(StorageError::NotFound(_))), "collected");
    assert_retained(&world, &log).await;
}

// ---------------------------------------------------------------------------
// A janitor's view of one case's world.

/// What a scoped janitor sees: these topics (and their purge orders) and objects; its own
/// cursors (`upkeep` items are kept per scope).
#[derive(Default)]
struct Scope {
    tag: String,
    topics: Mutex<HashSet<String>>,
    /// Purge order sort keys (topic ids).
    ids: Mutex<HashSet<String>>,
    objects: Mutex<HashSet<String>>,
}

/// A state store that hides from a janitor everything outside its [`Scope`]: other topics,
/// purge orders, free-list entries, subscription purges and group expiries.
struct ScopedStore {
    inner: Arc<dyn StateStore>,
    scope: Arc<Scope>,
}

impl ScopedStore {
    fn key(&self, key: &Key) -> Key {
        if key.pk == "upkeep" {
            Key::new("upkeep", format!("{}#{}", key.sk, self.scope.tag))
        } else {
            key.clone()
        }
    }

    fn op(&self, op: WriteOp) -> WriteOp {
        match op {
            WriteOp::Put { key, value, expires_at_ms, expect } => {
                WriteOp::Put { key: self.key(&key), value, expires_at_ms, expect }
            }
            WriteOp::Delete { key, expect } => WriteOp::Delete { key: self.key(&key), expect },
            WriteOp::Check { key, expect } => WriteOp::Check { key: self.key(&key), expect },
        }
    }

    fn visible(&self, pk: &str, sk: &str) -> bool {
        if pk == layout::topics_pk() {
            self.scope.topics.lock().unwrap().contains(sk)
        } else if pk == layout::purge_pk() {
            self.scope.ids.lock().unwrap().contains(sk)
        } else if pk.starts_with("free#") {
            self.scope.objects.lock().unwrap().contains(sk)
        } else {
            !(pk == "purge-subs" || pk == "goff-expiry")
        }
    }
}

#[async_trait]
impl StateStore for ScopedStore {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        let item = self.inner.get(&self.key(key)).await?;
        Ok(item.map(|i| Item { key: key.clone(), ..i }))
    }

    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        let mut page = self.inner.query(query).await?;
        page.items.retain(|i| self.visible(&i.key.pk, &i.key.sk));
        Ok(page)
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.inner.write(ops.into_iter().map(|op| self.op(op)).collect()).await
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        self.inner.delete_many(keys.iter().map(|k| self.key(k)).collect()).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        self.inner.purge_expired(limit).await
    }
}

/// An object store that records the objects put through it in a [`Scope`], and lists only those.
struct ScopedObjects {
    inner: Arc<dyn ObjectStore>,
    scope: Arc<Scope>,
}

#[async_trait]
impl ObjectStore for ScopedObjects {
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let at = self.inner.put(bytes).await?;
        self.scope.objects.lock().unwrap().insert(at.object.clone());
        Ok(at)
    }

    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
        self.inner.read(object, position, len).await
    }

    async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError> {
        const PAGE: usize = 1000;
        let mut after = after.map(str::to_owned);
        let mut mine = Vec::new();
        loop {
            let page = self.inner.list(after.as_deref(), PAGE).await?;
            let full = page.len() == PAGE;
            after = page.last().map(|i| i.name.clone());
            let scope = self.scope.objects.lock().unwrap().clone();
            mine.extend(page.into_iter().filter(|i| scope.contains(&i.name)));
            if mine.len() >= limit || !full {
                mine.truncate(limit);
                return Ok(mine);
            }
        }
    }

    async fn delete(&self, object: &str) -> Result<(), StorageError> {
        self.inner.delete(object).await
    }

    fn retire(&self, object: &str) {
        self.inner.retire(object)
    }
}

//! The log: a publish commit, an S3 PUT, topic create and delete.

use std::sync::{Arc, Mutex};

use sluice_core::upkeep::{JanitorConfig, STEP_BUDGET};
use sluice_core::{Clock, Error, IdempotencyKey, Log, Position, SystemClock, TopicSpec};

use super::fixtures::*;
use super::scope::*;
use crate::cases::support::faults::Fault;
use crate::cases::support::faults::{puts_at, Action, ScriptedObjects};
use crate::{unique_topic, Backend};

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
    script.at(crate::is_commit, Action::LoseAnswerAfter(race));
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
    let commit = crate::is_commit;
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
    let objects = ScriptedObjects::new(ScopedObjects::over(objects, &world.scope));
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
    script.at(move |ops| puts_at(ops, sluice_core::keys::topics_pk(), &name), Action::Fault(Fault::LoseAnswer));
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
    script.at(|ops| puts_at(ops, sluice_core::keys::purge_pk(), ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(log.delete_topic(&topic).await, "a delete whose answer was lost");
    assert_eq!(script.pending(), 0, "the delete met its lost answer");
    match log.delete_topic(&topic).await {
        Ok(()) | Err(Error::TopicNotFound(_)) => {}
        other => panic!("a retried delete is done (ok, or not found): {other:?}"),
    }
    assert!(matches!(log.describe_topic(&topic).await, Err(Error::TopicNotFound(_))));
    // Its purge order may be gone already (a janitor on a shared backend); the tombstone stays.
    let store = log.store();
    let item = store.get(&sluice_core::keys::topic_key(&topic)).await.unwrap().expect("the tombstone");
    assert_eq!(item.version, 2, "the record was written once, by the lost delete");
    let (again, created) = log.create_topic(&topic, spec).await.unwrap();
    assert!(created && again.id != config.id, "a new topic");
    assert_eq!(log.publish(&topic, vec![event("new", 0, None)], None).await.unwrap()[0].offset, 0);
    assert_eq!(replay(&log, &topic, 0, 0).await, expected(0, &["new"]), "nothing of its predecessor");
}

/// A publish's commit is applied, and before its answer (lost) comes back the janitor settles
/// the partition (the embedded backend's upkeep): it moves every segment a commit wrote, the
/// newest included, alone to an object of its own. The publish reads its entry back, knows it
/// by where it was moved from, and answers its own offsets: nothing is written twice.
pub async fn given_a_publish_commit_applied_but_its_answer_lost_and_its_segment_moved_then_it_answers_its_own_offsets(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-moved", None).await;
    let (store, objects) = backend.open_with(world.clock.clone()).await;
    let script = crate::cases::support::faults::Scripted::new(store);
    let objects = ScopedObjects::over(objects, &world.scope);
    // On the real clock: a retry's backoff passes.
    let log = Log::new(script.clone(), objects, Arc::new(SystemClock), crate::blobs_only());
    log.publish(&world.topic, vec![event("a", 0, None)], None).await.unwrap();
    let race = {
        let janitor = world.janitor(JanitorConfig { settle_commit_segments: true, ..JanitorConfig::default() });
        Box::pin(async move {
            let report = janitor.run(STEP_BUDGET).await.expect("the janitor's round");
            assert_eq!(report.segments_written, 2, "both segments moved, the newest too");
        })
    };
    script.at(crate::is_commit, Action::LoseAnswerAfter(race));
    let acked = log.publish(&world.topic, vec![event("b", 0, None), event("c", 0, None)], None).await;
    assert_eq!(script.pending(), 0, "the commit met its lost answer and the janitor ran");
    let acked = acked.expect("a commit that landed is acknowledged");
    assert_eq!(acked, vec![Position { partition: 0, offset: 1 }, Position { partition: 0, offset: 2 }], "its own");
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &["a", "b", "c"]), "nothing written twice");
    let entries = crate::cases::support::entries::entries(world.store.as_ref(), world.id().await, 0).await;
    assert!(entries.iter().all(|(_, e)| e.rewritten && e.moved_from.is_some()), "both moved: {entries:?}");
}

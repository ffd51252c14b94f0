//! Publishing through injected storage faults: lost answers, failures, throttling.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sluice_core::ports::state::WriteOp;
use sluice_core::{keys, Error, IdempotencyKey, Log, Position, SeededRandom, SteppingClock, SystemClock};

use super::fixtures::*;
use crate::cases::support::faults::Fault;
use crate::cases::support::faults::{Action, Scripted};
use crate::{unique_topic, Backend};

use crate::is_commit;

/// A log whose commits meet `faults`, in order, beside a clean log on the same storage;
/// with the count of commit writes it attempts, faulty ones included.
async fn faulty_log(backend: &dyn Backend, faults: &[Fault]) -> (Log, Arc<AtomicUsize>, Log) {
    let (store, objects) = backend.open().await;
    let script = Scripted::new(store);
    let commits = script.count(is_commit);
    for fault in faults {
        script.at(is_commit, Action::Fault(*fault));
    }
    let log = Log::new(script, objects, Arc::new(SystemClock), crate::log_config());
    (log, commits, log_on(backend.open().await))
}

pub async fn given_commit_applied_but_answer_lost_when_publish_then_answered_once_and_written_once(
    backend: &dyn Backend,
) {
    let (log, faulty, clean) = faulty_log(backend, &[Fault::LoseAnswer]).await;
    let topic = unique_topic("lost");
    clean.create_topic(&topic, spec(1)).await.unwrap();
    let acked = log.publish(&topic, vec![event("a", 0), event("b", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }, Position { partition: 0, offset: 1 }]);
    assert_eq!(faulty.load(Ordering::SeqCst), 1, "resolved by reading back, not by writing again");
    let acked = log.publish(&topic, vec![event("c", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 2 }]);
    let read = values(&read_all(&clean, &topic, 0).await.unwrap());
    assert_eq!(read, vec![(0, "a".into()), (1, "b".into()), (2, "c".into())], "nothing written twice");
}

pub async fn given_commit_failed_and_answer_lost_when_publish_then_retried_and_written_once(backend: &dyn Backend) {
    let (log, faulty, clean) = faulty_log(backend, &[Fault::FailBefore]).await;
    let topic = unique_topic("unknown");
    clean.create_topic(&topic, spec(1)).await.unwrap();
    let acked = log.publish(&topic, vec![event("a", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }]);
    assert_eq!(faulty.load(Ordering::SeqCst), 2, "read back, found missing, written again");
    assert_eq!(values(&read_all(&clean, &topic, 0).await.unwrap()), vec![(0, "a".into())]);
}

pub async fn given_storage_down_when_publish_then_error_nothing_visible_and_keyed_retry_succeeds_once(
    backend: &dyn Backend,
) {
    let (log, _, clean) = faulty_log(backend, &[Fault::FailBefore; 3]).await;
    let topic = unique_topic("down");
    clean.create_topic(&topic, spec(1)).await.unwrap();
    let key = || Some(IdempotencyKey { key: "retry-me".into(), fingerprint: vec![9; 32] });
    let events = || vec![event("a", 0), event("b", 0)];
    let failed = log.publish(&topic, events(), key()).await;
    assert!(matches!(failed, Err(Error::Unavailable(_))), "{failed:?}");
    assert_eq!(read_all(&clean, &topic, 0).await.unwrap(), vec![], "nothing visible");

    // The client retries with the same key, then once more (say its ack was lost).
    let first = log.publish(&topic, events(), key()).await.unwrap();
    let again = clean.publish(&topic, events(), key()).await.unwrap();
    let expected = vec![Position { partition: 0, offset: 0 }, Position { partition: 0, offset: 1 }];
    assert_eq!((first, again), (expected.clone(), expected));
    assert_eq!(values(&read_all(&clean, &topic, 0).await.unwrap()), vec![(0, "a".into()), (1, "b".into())]);
}

pub async fn given_throttling_and_conflicts_when_publish_then_retried_and_acknowledged(backend: &dyn Backend) {
    let (log, faulty, clean) = faulty_log(backend, &[Fault::Throttle; 4]).await;
    let topic = unique_topic("throttled");
    clean.create_topic(&topic, spec(1)).await.unwrap();
    let acked = log.publish(&topic, vec![event("a", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }]);
    assert_eq!(faulty.load(Ordering::SeqCst), 5);
    assert_eq!(values(&read_all(&clean, &topic, 0).await.unwrap()), vec![(0, "a".into())]);
}

/// A matcher of the `n`-th commit write it sees (1 for the first).
fn nth_commit(n: usize) -> impl Fn(&[WriteOp]) -> bool + Send + Sync {
    let seen = AtomicUsize::new(0);
    move |ops| is_commit(ops) && seen.fetch_add(1, Ordering::SeqCst) + 1 == n
}

/// One event on each of 150 partitions, `e<partition>`.
fn one_per_partition(partitions: std::ops::Range<u32>) -> Vec<sluice_core::NewEvent> {
    partitions.map(|p| event(&format!("e{p}"), p)).collect()
}

/// Every partition of a 150-partition topic holds its one event at offset 0, once.
async fn assert_each_partition_once(log: &Log, topic: &str) {
    for p in 0..150 {
        let read = values(&read_all(log, topic, p).await.unwrap());
        assert_eq!(read, vec![(0, format!("e{p}"))], "partition {p}: nothing twice, nothing skipped");
    }
}

pub async fn given_a_150_partition_publish_when_its_second_write_lands_and_its_answer_is_lost_then_read_back(
    backend: &dyn Backend,
) {
    // Without a key, 150 partitions are committed in several writes (33 partitions each);
    // the second one lands and its answer is lost.
    let (store, objects) = backend.open().await;
    let script = Scripted::new(store);
    script.at(nth_commit(2), Action::Fault(Fault::LoseAnswer));
    let log = Log::new(script.clone(), objects, Arc::new(SystemClock), crate::log_config());
    let topic = unique_topic("wide-lost");
    log.create_topic(&topic, spec(150)).await.unwrap();
    let acked = log.publish(&topic, one_per_partition(0..150), None).await.unwrap();
    assert_eq!(acked, (0..150).map(|p| Position { partition: p, offset: 0 }).collect::<Vec<_>>());
    // (How many writes it took depends on the backend: with blobs, a write after the lost one
    // may meet an object record the read back did not note, and go again.)
    assert_eq!(script.pending(), 0, "the second write's answer was lost");
    assert_each_partition_once(&log_on(backend.open().await), &topic).await;
}

pub async fn given_keyed_groups_of_a_150_partition_publish_when_the_seconds_answer_is_lost_then_its_retry_answers_it(
    backend: &dyn Backend,
) {
    // A producer sends 150 partitions under keys, at most 48 partitions a request (one atomic
    // write each). The second request's write lands, its answer is lost and so is the read
    // back (storage went down): the caller sees it fail, and retries it under its key.
    let (store, objects) = backend.open().await;
    let script = Scripted::new(store);
    let commits = script.count(is_commit);
    let arm = script.clone();
    let storage_down = Box::pin(async move { arm.fail_gets(1) });
    script.at(nth_commit(2), Action::LoseAnswerAfter(storage_down));
    let log = Log::new(script.clone(), objects, Arc::new(SystemClock), crate::log_config());
    let topic = unique_topic("wide-keyed");
    log.create_topic(&topic, spec(150)).await.unwrap();
    for (n, start) in (0..150).step_by(48).enumerate() {
        let partitions = start..(start + 48).min(150);
        let key = || Some(IdempotencyKey { key: format!("wide-{n}"), fingerprint: vec![n as u8; 32] });
        let mut acked = log.publish(&topic, one_per_partition(partitions.clone()), key()).await;
        if n == 1 {
            assert!(matches!(acked, Err(Error::Unavailable(_))), "the second request's outcome is unknown: {acked:?}");
            acked = log.publish(&topic, one_per_partition(partitions.clone()), key()).await;
        }
        let expected: Vec<Position> = partitions.map(|p| Position { partition: p, offset: 0 }).collect();
        assert_eq!(acked.unwrap(), expected, "request {n}");
    }
    assert_eq!(commits.load(Ordering::SeqCst), 4, "the retry was answered from its key's record, not written");
    assert_each_partition_once(&log_on(backend.open().await), &topic).await;
}

/// Two processes publish one request under one idempotency key at once. Placed: the rival's
/// publish commits just before the first one's write, which then finds the key taken.
/// Free-running: both sent together, a few times. Each time the events are written once
/// and both answer the same offsets.
pub async fn given_two_publishes_racing_under_one_key_then_written_once_and_both_answer_it(backend: &dyn Backend) {
    let events = || vec![event("x", 1), event("y", 0)];
    let key = |n: u8| Some(IdempotencyKey { key: format!("race-{n}"), fingerprint: vec![n; 32] });
    let (store, objects) = backend.open().await;
    let script = Scripted::new(store);
    let rival_log = log_on(backend.open().await);
    let topic = unique_topic("race");
    rival_log.create_topic(&topic, spec(2)).await.unwrap();
    let (rival, t) = (rival_log.clone(), topic.clone());
    let (answered, rival_answer) = tokio::sync::oneshot::channel();
    let racing = Box::pin(async move { drop(answered.send(rival.publish(&t, events(), key(0)).await)) });
    script.at(is_commit, Action::Before(racing));
    let log = Log::new(script.clone(), objects, Arc::new(SystemClock), crate::log_config());
    let first = log.publish(&topic, events(), key(0)).await.unwrap();
    assert_eq!(script.pending(), 0, "the rival committed first");
    assert_eq!(first, vec![Position { partition: 1, offset: 0 }, Position { partition: 0, offset: 0 }]);
    assert_eq!(rival_answer.await.unwrap().unwrap(), first, "both answer the write that landed");

    let other = log_on(backend.open().await);
    for n in 1..=3u8 {
        let (a, b) = tokio::join!(rival_log.publish(&topic, events(), key(n)), other.publish(&topic, events(), key(n)));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a, b, "race {n}: both answer one write");
        let n = u64::from(n);
        assert_eq!(a, vec![Position { partition: 1, offset: n }, Position { partition: 0, offset: n }], "race {n}");
    }
    for (partition, value) in [(0, "y"), (1, "x")] {
        let read = values(&read_all(&rival_log, &topic, partition).await.unwrap());
        let expected: Vec<(u64, String)> = (0..4).map(|o| (o, value.to_owned())).collect();
        assert_eq!(read, expected, "partition {partition}: each race wrote once");
    }
}

/// A process whose cached heads of eight partitions all went stale (another process
/// committed to each) heals them all from one failed write: its publish over the eight
/// lands on its second write, not its ninth, at the true heads.
pub async fn given_every_cached_head_stale_when_publish_then_one_failed_write_heals_them_all(backend: &dyn Backend) {
    let (stale, commits, other) = faulty_log(backend, &[]).await;
    let topic = unique_topic("heal");
    other.create_topic(&topic, spec(8)).await.unwrap();
    stale.publish(&topic, (0..8).map(|p| event("first", p)).collect(), None).await.unwrap();
    other.publish(&topic, (0..8).map(|p| event("other", p)).collect(), None).await.unwrap();
    let before = commits.load(Ordering::SeqCst);
    let acked = stale.publish(&topic, (0..8).map(|p| event("stale", p)).collect(), None).await.unwrap();
    assert_eq!(commits.load(Ordering::SeqCst) - before, 2, "one failed write, then the one that lands");
    assert_eq!(acked, (0..8).map(|partition| Position { partition, offset: 2 }).collect::<Vec<_>>());
}

/// A log whose topic deletes of `topic` are refused for contention `throttles` times (on
/// DynamoDB, a transaction conflict with a commit in flight on a head the delete fences),
/// on a clock where a backoff takes no time; with the count of the deletes' writes.
async fn throttled_deletes(backend: &dyn Backend, topic: &str, throttles: usize) -> (Log, Arc<AtomicUsize>, Log) {
    let (store, objects) = backend.open().await;
    let clean = log_on((store.clone(), objects.clone()));
    clean.create_topic(topic, spec(4)).await.unwrap();
    let script = Scripted::new(store);
    let record = keys::topic_key(topic);
    let names_record = move |ops: &[WriteOp]| ops.iter().any(|op| *op.key() == record);
    let writes = script.count(names_record.clone());
    for _ in 0..throttles {
        script.at(names_record.clone(), Action::Fault(Fault::Throttle));
    }
    let (clock, random) = (Arc::new(SteppingClock::new(0)), Arc::new(SeededRandom::new(7)));
    (Log::with_random(script, objects, clock, random, crate::log_config()), writes, clean)
}

pub async fn given_a_topic_delete_throttled_three_times_then_it_backs_off_retries_and_the_topic_is_gone(
    backend: &dyn Backend,
) {
    let topic = unique_topic("throttled-delete");
    let (admin, writes, clean) = throttled_deletes(backend, &topic, 3).await;
    let deadline = admin.clock().now_ms() + 10_000;
    admin.delete_topic_before(&topic, deadline).await.expect("retried until it landed");
    assert_eq!(writes.load(Ordering::SeqCst), 4, "three refused, then the one that landed");
    let gone = clean.describe_topic(&topic).await;
    assert!(matches!(gone, Err(Error::TopicNotFound(_))), "{gone:?}");
    assert!(admin.clock().now_ms() < deadline, "backed off within the deadline");
}

pub async fn given_a_topic_delete_throttled_past_its_deadline_then_unavailable_and_nothing_changed(
    backend: &dyn Backend,
) {
    let topic = unique_topic("throttled-late");
    let (admin, writes, clean) = throttled_deletes(backend, &topic, 64).await;
    let deadline = admin.clock().now_ms() + 50;
    let late = admin.delete_topic_before(&topic, deadline).await;
    assert!(matches!(late, Err(Error::Unavailable(_))), "{late:?}");
    assert!(admin.clock().now_ms() <= deadline, "answered by its deadline");
    assert!((2..64).contains(&writes.load(Ordering::SeqCst)), "backed off, then stopped");
    clean.describe_topic(&topic).await.expect("the topic is still there");
}

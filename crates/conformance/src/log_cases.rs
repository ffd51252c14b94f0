//! The log's conformance cases: the promises of the contract (dense offsets,
//! acknowledged events never lost, deletes that take effect at once), checked
//! through the real [`Log`] on each backend, with other "processes" (separate
//! handles with their own caches) and injected storage faults.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sluice_core::Code;
use std::time::Duration;

use bytes::Bytes;
use sluice_core::layout::{self, HeadRecord, SegmentRecord};
use sluice_core::ports::state::{Key, Query, WriteOp};
use sluice_core::{
    Error, IdempotencyKey, Log, LogConfig, ManualClock, NewEvent, Position, ReadRequest, SystemClock, TopicSpec,
};

use crate::faults::{Action, Scripted};
use crate::{unique_topic, Backend, Stores};

/// Generates one `#[tokio::test]` per log case; `$backend` is an async expression yielding a [`Backend`].
#[macro_export]
macro_rules! log_conformance_suite {
    ($backend:expr) => {
        $crate::log_conformance_suite!(@cases $backend;
            given_warm_process_when_topic_deleted_elsewhere_then_publish_404_and_recreated_topic_starts_clean,
            given_stale_head_after_earlier_index_items_removed_when_publish_then_retries_and_offsets_stay_dense,
            given_commit_applied_but_answer_lost_when_publish_then_answered_once_and_written_once,
            given_commit_failed_and_answer_lost_when_publish_then_retried_and_written_once,
            given_storage_down_when_publish_then_error_nothing_visible_and_keyed_retry_succeeds_once,
            given_throttling_and_conflicts_when_publish_then_retried_and_acknowledged,
            given_publish_touching_150_partitions_then_committed_per_partition_or_refused_with_a_key,
            given_idempotency_key_then_retry_answers_the_same_and_other_request_is_refused,
            given_idempotency_record_older_than_its_ttl_then_key_can_be_reused,
            given_deleted_topic_with_many_index_items_then_janitor_purges_in_bounded_steps_and_nothing_shows,
            given_events_then_replay_from_any_offset_and_offset_lookup_by_time,
            given_a_reader_long_polling_when_an_event_is_published_then_the_publish_wakes_it,
            given_a_publish_in_flight_when_its_topic_is_deleted_then_it_is_refused_or_committed_before,
            given_small_and_large_commits_then_small_ones_are_inline_and_replay_spans_both,
            given_a_commit_larger_than_a_part_then_a_read_of_a_few_events_fetches_one_part,
            given_one_commit_of_equal_inline_segments_on_two_partitions_then_each_partition_reads_its_own,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn eight_concurrent_publishers_to_one_partition_get_dense_offsets() {
            let backend = $backend.await;
            $crate::log_cases::eight_concurrent_publishers_to_one_partition_get_dense_offsets(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::log_cases::$case(&backend).await;
            }
        )+
    };
}

fn spec(partitions: u32) -> TopicSpec {
    TopicSpec { partitions, retention_ms: None, retention_bytes: None }
}

fn event(value: &str, partition: u32) -> NewEvent {
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: Bytes::from(value.to_owned()),
        value_is_json: false,
        timestamp_ms: None,
        partition: Some(partition),
    }
}

/// A log on `stores` that trusts its topic cache for ten minutes: a warm, stale process.
fn warm_log((store, objects): Stores) -> Log {
    let config = LogConfig { topic_cache_ttl: Duration::from_secs(600), ..crate::log_config() };
    Log::new(store, objects, Arc::new(SystemClock), config)
}

fn log_on((store, objects): Stores) -> Log {
    Log::new(store, objects, Arc::new(SystemClock), crate::log_config())
}

async fn read_all(log: &Log, topic: &str, partition: u32) -> Result<Vec<(u64, Bytes)>, Error> {
    let request = ReadRequest {
        topic: topic.to_owned(),
        partition,
        offset: 0,
        max_events: 10_000,
        max_bytes: 6 << 20,
        wait_ms: 0,
    };
    let batch = log.read(&request).await?;
    Ok(batch.events.into_iter().map(|e| (e.offset, e.record.value)).collect())
}

fn values(events: &[(u64, Bytes)]) -> Vec<(u64, String)> {
    events.iter().map(|(o, v)| (*o, String::from_utf8_lossy(v).into_owned())).collect()
}

pub async fn given_warm_process_when_topic_deleted_elsewhere_then_publish_404_and_recreated_topic_starts_clean(
    backend: &dyn Backend,
) {
    let topic = unique_topic("reborn");
    let (a, b) = (warm_log(backend.open().await), warm_log(backend.open().await));
    a.create_topic(&topic, spec(1)).await.unwrap();
    let first: Vec<NewEvent> = (0..5).map(|i| event(&format!("old-{i}"), 0)).collect();
    a.publish(&topic, first, None).await.unwrap();
    assert_eq!(read_all(&b, &topic, 0).await.unwrap().len(), 5, "b has read (and cached) the old topic");

    b.delete_topic(&topic).await.unwrap();
    let refused = a.publish(&topic, vec![event("after-delete", 0)], None).await;
    assert!(matches!(refused, Err(Error::TopicNotFound(_))), "{refused:?}");
    assert!(matches!(read_all(&a, &topic, 0).await, Err(Error::TopicNotFound(_))));

    b.create_topic(&topic, spec(1)).await.unwrap();
    let acked = a.publish(&topic, vec![event("new-0", 0), event("new-1", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }, Position { partition: 0, offset: 1 }]);
    let expected = vec![(0, "new-0".to_owned()), (1, "new-1".to_owned())];
    assert_eq!(values(&read_all(&a, &topic, 0).await.unwrap()), expected);
    assert_eq!(values(&read_all(&b, &topic, 0).await.unwrap()), expected, "the other process too");
    let (_, states) = b.describe_topic(&topic).await.unwrap();
    assert_eq!((states[0].high_watermark, states[0].log_start_offset), (2, 0));

    // Deleted and re-created again while `a` still caches the second incarnation: its publish
    // is not told the topic does not exist; it is asked to retry, and the retry lands.
    b.delete_topic(&topic).await.unwrap();
    b.create_topic(&topic, spec(1)).await.unwrap();
    let stale = a.publish(&topic, vec![event("third-0", 0)], None).await;
    assert!(matches!(stale, Err(Error::Unavailable(_))), "{stale:?}");
    let acked = a.publish(&topic, vec![event("third-0", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }]);
}

pub async fn given_stale_head_after_earlier_index_items_removed_when_publish_then_retries_and_offsets_stay_dense(
    backend: &dyn Backend,
) {
    let topic = unique_topic("stale");
    let (a_stores, b_stores) = (backend.open().await, backend.open().await);
    let store = b_stores.0.clone();
    let (a, b) = (warm_log(a_stores), warm_log(b_stores));
    a.create_topic(&topic, spec(1)).await.unwrap();
    a.publish(&topic, vec![event("a0", 0), event("a1", 0)], None).await.unwrap();
    for i in 0..3 {
        b.publish(&topic, vec![event(&format!("b{i}"), 0)], None).await.unwrap();
    }
    // What retention will do: advance the log start in the head, then remove the index items below it.
    let id = b.describe_topic(&topic).await.unwrap().0.id;
    let head_key = layout::head_key(id, 0);
    let item = store.get(&head_key).await.unwrap().expect("head");
    let mut head: HeadRecord = layout::decode("head", &item.value).unwrap();
    assert_eq!(head.next, 5);
    head.start = 4;
    store.write(vec![WriteOp::replace(head_key, layout::encode(&head), Some(item.version))]).await.unwrap();
    let below: Vec<Key> = [0u64, 2, 3].iter().map(|&base| layout::segment_key(id, 0, base)).collect();
    store.delete_many(below).await.unwrap();

    // `a` still believes the partition ends at 2, where no item is any more.
    let acked = a.publish(&topic, vec![event("a2", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 5 }], "committed at the true head, not into the past");
    let acked = b.publish(&topic, vec![event("b3", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 6 }]);
    let mut request =
        ReadRequest { topic: topic.clone(), partition: 0, offset: 4, max_events: 100, max_bytes: 1 << 20, wait_ms: 0 };
    let page = a.read(&request).await.unwrap();
    let read: Vec<(u64, Bytes)> = page.events.into_iter().map(|e| (e.offset, e.record.value)).collect();
    assert_eq!(values(&read), vec![(4, "b2".into()), (5, "a2".into()), (6, "b3".into())]);
    request.offset = 1;
    let below_start = a.read(&request).await;
    assert!(matches!(below_start, Err(Error::OffsetOutOfRange { log_start_offset: 4, .. })), "{below_start:?}");
}

/// What an injected fault does to the next commit write (a write that indexes a segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The write is applied, then its answer is lost.
    LoseAnswer,
    /// The write is not applied and its answer is lost.
    FailBefore,
    /// The store refuses it before doing anything (throttling, a transaction conflict).
    Throttle,
}

/// Whether a write is a commit (it indexes a segment).
fn is_commit(ops: &[WriteOp]) -> bool {
    ops.iter().any(|op| op.key().pk.starts_with("seg#"))
}

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

pub async fn given_publish_touching_150_partitions_then_committed_per_partition_or_refused_with_a_key(
    backend: &dyn Backend,
) {
    let log = log_on(backend.open().await);
    let topic = unique_topic("wide");
    log.create_topic(&topic, spec(150)).await.unwrap();
    let wide = || (0..150).map(|p| event(&format!("e{p}"), p)).collect::<Vec<_>>();
    let key = IdempotencyKey { key: "wide".into(), fingerprint: vec![1; 32] };
    let refused = log.publish(&topic, wide(), Some(key)).await;
    assert!(matches!(refused, Err(Error::Invalid { code: Code::TooManyPartitions, .. })), "{refused:?}");
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert!(states.iter().all(|s| s.high_watermark == 0), "the refused publish wrote nothing");

    let acked = log.publish(&topic, wide(), None).await.unwrap();
    assert_eq!(acked, (0..150).map(|p| Position { partition: p, offset: 0 }).collect::<Vec<_>>());
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert!(states.iter().all(|s| s.high_watermark == 1), "every partition committed");
    assert_eq!(values(&read_all(&log, &topic, 149).await.unwrap()), vec![(0, "e149".into())]);
}

pub async fn given_idempotency_key_then_retry_answers_the_same_and_other_request_is_refused(backend: &dyn Backend) {
    let (a, b) = (log_on(backend.open().await), log_on(backend.open().await));
    let topic = unique_topic("idem");
    a.create_topic(&topic, spec(2)).await.unwrap();
    let key = |fp: u8| Some(IdempotencyKey { key: "k1".into(), fingerprint: vec![fp; 32] });
    let first = a.publish(&topic, vec![event("x", 1), event("y", 0)], key(1)).await.unwrap();
    let again = b.publish(&topic, vec![event("x", 1), event("y", 0)], key(1)).await.unwrap();
    assert_eq!(first, again);
    let reused = b.publish(&topic, vec![event("z", 0)], key(2)).await;
    assert!(matches!(reused, Err(Error::IdempotencyKeyReused(_))), "{reused:?}");
    assert_eq!(read_all(&a, &topic, 0).await.unwrap().len(), 1, "written once");
    // Keys belong to a topic incarnation: a re-created topic starts with none.
    a.delete_topic(&topic).await.unwrap();
    a.create_topic(&topic, spec(2)).await.unwrap();
    let fresh = b.publish(&topic, vec![event("z", 0)], key(2)).await.unwrap();
    assert_eq!(fresh, vec![Position { partition: 0, offset: 0 }]);
}

pub async fn given_idempotency_record_older_than_its_ttl_then_key_can_be_reused(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(store, objects, clock.clone(), crate::log_config());
    let topic = unique_topic("ttl");
    log.create_topic(&topic, spec(1)).await.unwrap();
    let key = |fp: u8| Some(IdempotencyKey { key: "k".into(), fingerprint: vec![fp; 32] });
    log.publish(&topic, vec![event("a", 0)], key(1)).await.unwrap();
    clock.advance(24 * 3600 * 1000);
    let reused = log.publish(&topic, vec![event("b", 0)], key(2)).await;
    assert!(matches!(reused, Err(Error::IdempotencyKeyReused(_))), "kept at least 24 h: {reused:?}");
    clock.advance(24 * 3600 * 1000 + 1000);
    let fresh = log.publish(&topic, vec![event("b", 0)], key(2)).await.unwrap();
    assert_eq!(fresh, vec![Position { partition: 0, offset: 1 }], "after its TTL the key is free again");
}

pub async fn given_deleted_topic_with_many_index_items_then_janitor_purges_in_bounded_steps_and_nothing_shows(
    backend: &dyn Backend,
) {
    let items = backend.large_count();
    let log = log_on(backend.open().await);
    let store = log.store().clone();
    let topic = unique_topic("purge");
    let (config, _) = log.create_topic(&topic, spec(2)).await.unwrap();
    log.publish(&topic, vec![event("real", 1)], None).await.unwrap();
    // Index items as `items` one-event publishes would have left them, written directly to save time.
    for chunk in (0..items as u64).collect::<Vec<_>>().chunks(100) {
        let ops = chunk
            .iter()
            .map(|&base| {
                let record = SegmentRecord {
                    next: base + 1,
                    object: "none".into(),
                    pos: 0,
                    len: 1,
                    max_ts: 0,
                    parts: Vec::new(),
                    inline: false,
                };
                WriteOp::create(layout::segment_key(config.id, 0, base), layout::encode(&record))
            })
            .collect();
        store.write(ops).await.unwrap();
    }
    log.delete_topic(&topic).await.unwrap();
    assert!(matches!(log.describe_topic(&topic).await, Err(Error::TopicNotFound(_))));

    // At least five steps on any backend.
    let budget = (items / 5).min(2_000);
    // The janitor sees this case's purge order only (on a shared backend other cases file
    // theirs) and counts what it deletes; another case's janitor may still help with this
    // order, so the case counts what its own steps delete, not the steps the purge took.
    let own = crate::OwnPurges::new(store.clone(), &[config.id], &[]);
    let order = || {
        let store = store.clone();
        async move { store.get(&layout::purge_key(config.id)).await.unwrap() }
    };
    let (mut steps, mut lost, mut recreated) = (0, 0, false);
    while order().await.is_some() {
        let before = own.deleted();
        let report = crate::janitor_step(&own, budget, 0).await;
        let deleted = own.deleted() - before;
        // Its index items and the purge order's own item at most: the budget bounds the step.
        assert!(deleted <= budget + 1, "a step stays within its budget: {deleted} items deleted");
        match &report {
            Some(report) => {
                assert!(
                    report.items_deleted <= budget && report.items_deleted <= deleted,
                    "{report:?} ({deleted} deleted)"
                );
                steps += 1;
            }
            // A race lost to another case's janitor, which made the progress instead.
            None => lost += 1,
        }
        assert!(lost < 1_000, "{lost} races lost");
        if !recreated && order().await.is_some() {
            // Half-way: the name is free again and shows nothing of its predecessor.
            recreated = true;
            log.create_topic(&topic, spec(2)).await.unwrap();
            let (_, states) = log.describe_topic(&topic).await.unwrap();
            assert!(states.iter().all(|s| s.high_watermark == 0));
            assert_eq!(read_all(&log, &topic, 0).await.unwrap(), vec![]);
        }
        // (Alone it takes about items / budget; another janitor on the same order wastes some of its reads.)
        assert!(steps <= 2 * items / budget + 5, "purge makes progress: {steps} steps, {lost} lost");
    }
    assert!(recreated, "the purge took more than one step of {budget}");
    let left = store.query(&Query::all(layout::segments_pk(config.id, 0), 10)).await.unwrap();
    assert_eq!(left.items, vec![], "the old index is gone");
    let heads = store.query(&Query::all(layout::heads_pk(config.id), 10)).await.unwrap();
    assert_eq!(heads.items, vec![], "the old heads are gone");
    // Another step leaves the new topic alone.
    log.publish(&topic, vec![event("new", 1)], None).await.unwrap();
    let (new, _) = log.describe_topic(&topic).await.unwrap();
    crate::janitor_step(&crate::OwnPurges::new(store.clone(), &[config.id, new.id], &[]), budget, 0).await;
    assert_eq!(read_all(&log, &topic, 1).await.unwrap().len(), 1, "the new topic is untouched");
}

pub async fn given_events_then_replay_from_any_offset_and_offset_lookup_by_time(backend: &dyn Backend) {
    let log = log_on(backend.open().await);
    let topic = unique_topic("replay");
    log.create_topic(&topic, spec(1)).await.unwrap();
    for (batch, ts) in [(3u64, 100i64), (1, 300), (2, 200), (4, 400)] {
        let events = (0..batch)
            .map(|i| NewEvent { timestamp_ms: Some(ts + i as i64), ..event(&format!("t{ts}-{i}"), 0) })
            .collect();
        log.publish(&topic, events, None).await.unwrap();
    }
    // Segments hold offsets 0..3, 3..4, 4..6, 6..10.
    for offset in 0..10u64 {
        let request =
            ReadRequest { topic: topic.clone(), partition: 0, offset, max_events: 3, max_bytes: 1 << 20, wait_ms: 0 };
        let page = log.read(&request).await.unwrap();
        let offsets: Vec<u64> = page.events.iter().map(|e| e.offset).collect();
        let expected: Vec<u64> = (offset..(offset + 3).min(10)).collect();
        assert_eq!(offsets, expected, "from {offset}");
        assert_eq!(page.next_offset, offset + expected.len() as u64);
        assert_eq!(page.high_watermark, 10);
    }
    let at = |ts| log.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(ts));
    assert_eq!(at(0).await.unwrap(), 0);
    assert_eq!(at(101).await.unwrap(), 1);
    assert_eq!(at(150).await.unwrap(), 3, "the first event at or after the time, in offset order");
    assert_eq!(at(300).await.unwrap(), 3);
    assert_eq!(at(301).await.unwrap(), 6);
    assert_eq!(at(403).await.unwrap(), 9);
    assert_eq!(at(404).await.unwrap(), 10, "past every event: the high watermark");
}

/// Publishers in each of this many separate "processes" (own handles, own logs).
const PUBLISHERS: usize = 8;
const PUBLISHES_EACH: usize = 12;

pub async fn eight_concurrent_publishers_to_one_partition_get_dense_offsets(backend: &dyn Backend) {
    let topic = unique_topic("race");
    let admin = log_on(backend.open().await);
    admin.create_topic(&topic, spec(1)).await.unwrap();
    let mut tasks = Vec::new();
    for p in 0..PUBLISHERS {
        let log = log_on(backend.open().await);
        let topic = topic.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..PUBLISHES_EACH {
                let value = format!("p{p}-e{i}");
                let batch = if i % 3 == 0 {
                    vec![event(&value, 0), event(&format!("{value}-b"), 0)]
                } else {
                    vec![event(&value, 0)]
                };
                let values: Vec<String> =
                    batch.iter().map(|e| String::from_utf8_lossy(&e.value).into_owned()).collect();
                let positions = tokio::time::timeout(Duration::from_secs(60), log.publish(&topic, batch, None))
                    .await
                    .expect("publish finished")
                    .expect("publish acknowledged");
                acked.extend(positions.into_iter().map(|pos| pos.offset).zip(values));
            }
            acked
        }));
    }
    let mut acked: Vec<(u64, String)> = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    acked.sort();
    let expected = PUBLISHERS * (PUBLISHES_EACH + PUBLISHES_EACH.div_ceil(3));
    assert_eq!(acked.len(), expected);
    let offsets: Vec<u64> = acked.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..expected as u64).collect::<Vec<_>>(), "offsets dense, each acknowledged once");

    let reader = log_on(backend.open().await);
    let read = values(&read_all(&reader, &topic, 0).await.unwrap());
    assert_eq!(read, acked, "every acknowledged event read back exactly once, at its offset");
    assert_eq!(admin.describe_topic(&topic).await.unwrap().1[0].high_watermark, expected as u64);
}

/// A long poll that is waiting (it read the head and began its nap) is woken by a publish of
/// its process: the clock never moves, so the poll interval never passes; only the wake-up
/// can return it.
pub async fn given_a_reader_long_polling_when_an_event_is_published_then_the_publish_wakes_it(backend: &dyn Backend) {
    let clock = Arc::new(crate::queue_cases::WatchedClock::new(1_767_225_600_000));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(store, objects, clock.clone(), crate::log_config());
    let topic = unique_topic("wake");
    log.create_topic(&topic, spec(1)).await.unwrap();
    for offset in 0..2u64 {
        let before = clock.sleeps();
        let waiting = {
            let request = ReadRequest {
                topic: topic.clone(),
                partition: 0,
                offset,
                max_events: 10,
                max_bytes: 1 << 20,
                wait_ms: 20_000,
            };
            let log = log.clone();
            tokio::spawn(async move { log.read(&request).await })
        };
        clock.slept_more_than(before).await;
        assert!(!waiting.is_finished(), "nothing at {offset} yet: the poll waits");
        log.publish(&topic, vec![event(&format!("e{offset}"), 0)], None).await.unwrap();
        let page = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("the publish woke the long poll")
            .unwrap()
            .unwrap();
        assert_eq!(page.events.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![offset]);
    }
}

/// A publish in flight when its topic is deleted either committed before the delete or is
/// refused (`TopicNotFound`), and nothing of it shows through a topic created later under the name.
pub async fn given_a_publish_in_flight_when_its_topic_is_deleted_then_it_is_refused_or_committed_before(
    backend: &dyn Backend,
) {
    use crate::faults::{Action, Scripted};

    let admin = log_on(backend.open().await);
    for delete_first in [true, false] {
        let topic = unique_topic("deleted-in-flight");
        let (config, _) = admin.create_topic(&topic, spec(1)).await.unwrap();
        let (store, objects) = backend.open().await;
        let script = Scripted::new(store);
        let publisher = Log::new(script.clone(), objects, Arc::new(SystemClock), crate::log_config());
        // Warm: the publisher holds the topic and its head in its caches.
        publisher.publish(&topic, vec![event("before", 0)], None).await.unwrap();
        let rival = {
            let (admin, topic) = (admin.clone(), topic.clone());
            Box::pin(async move { admin.delete_topic(&topic).await.unwrap() })
        };
        let heads = layout::heads_pk(config.id);
        let commit = move |ops: &[WriteOp]| ops.iter().any(|op| op.key().pk == heads);
        script.at(commit, if delete_first { Action::Before(rival) } else { Action::After(rival) });
        let answer = publisher.publish(&topic, vec![event("in flight", 0)], None).await;
        assert_eq!(script.pending(), 0, "the delete ran at the publish's commit");
        if delete_first {
            assert!(matches!(answer, Err(Error::TopicNotFound(_))), "deleted before its commit: {answer:?}");
        } else {
            assert_eq!(answer.unwrap(), vec![Position { partition: 0, offset: 1 }], "committed before the delete");
        }
        assert!(matches!(admin.describe_topic(&topic).await, Err(Error::TopicNotFound(_))));
        assert!(matches!(read_all(&publisher, &topic, 0).await, Err(Error::TopicNotFound(_))));
        admin.create_topic(&topic, spec(1)).await.unwrap();
        assert_eq!(read_all(&admin, &topic, 0).await.unwrap(), vec![], "the new topic shows nothing of the old");
        // (Through `admin`: a publisher still caching the old topic answers 404 for a publish to
        // the re-created one within its cache TTL, see the report on issue 16.)
        let at = admin.publish(&topic, vec![event("new", 0)], None).await.unwrap();
        assert_eq!(at, vec![Position { partition: 0, offset: 0 }], "the new topic starts at 0");
    }
}

/// A commit of few bytes keeps its segment in its index item (no blob written, one write);
/// a larger one writes a blob. A partition holding both replays densely with exact bytes
/// from any offset, inside either kind of segment, in this process and in a fresh one.
pub async fn given_small_and_large_commits_then_small_ones_are_inline_and_replay_spans_both(backend: &dyn Backend) {
    let (store, objects) = backend.open().await;
    let counted = crate::faults::ScriptedObjects::new(objects);
    let config = LogConfig { inline_segment_bytes: 4 << 10, ..LogConfig::default() };
    let log = Log::new(store.clone(), counted.clone(), Arc::new(SystemClock), config);
    let topic = unique_topic("inline");
    let (created, _) = log.create_topic(&topic, spec(1)).await.unwrap();
    let big = |i: usize| format!("{i}:{}", "b".repeat(1000));
    let mut expected = Vec::new();
    for round in 0..3 {
        for i in 0..3 {
            let value = format!("small {round}.{i}");
            log.publish(&topic, vec![event(&value, 0)], None).await.unwrap();
            expected.push(value);
        }
        assert_eq!(counted.puts().len(), round, "small commits write no blob");
        let batch: Vec<String> = (0..8).map(big).collect();
        log.publish(&topic, batch.iter().map(|v| event(v, 0)).collect(), None).await.unwrap();
        expected.extend(batch);
        assert_eq!(counted.puts().len(), round + 1, "8 KB of events go to a blob");
    }
    let item = |offset: u64| {
        let store = store.clone();
        async move {
            let item = store.get(&layout::segment_key(created.id, 0, offset)).await.unwrap().expect("indexed");
            layout::decode_segment_item(&item.value).unwrap()
        }
    };
    let (first, data) = item(0).await;
    assert!(first.inline && data.is_some_and(|d| d.len() as u64 == first.len), "{first:?}");
    let (batch, data) = item(3).await;
    assert!(!batch.inline && data.is_none(), "{batch:?}");

    let all: Vec<(u64, String)> = expected.iter().enumerate().map(|(o, v)| (o as u64, v.clone())).collect();
    assert_eq!(values(&read_all(&log, &topic, 0).await.unwrap()), all);
    // From inside a blob's segment and from an inline one, a few at a time, as queues read.
    for from in [1u64, 5, 11, 12, 20] {
        let mut at = from;
        while at < all.len() as u64 {
            let request = ReadRequest { max_events: 3, ..read_request(&topic, at) };
            let page = log.read(&request).await.unwrap();
            let got: Vec<(u64, Bytes)> = page.events.into_iter().map(|e| (e.offset, e.record.value)).collect();
            assert_eq!(values(&got), all[at as usize..(at as usize + 3).min(all.len())], "from {at}");
            at = page.next_offset;
        }
    }
    // A fresh process (no cache of any kind) reads the same.
    let (store2, objects2) = backend.open().await;
    let other = Log::new(store2, objects2, Arc::new(SystemClock), LogConfig::default());
    assert_eq!(values(&read_all(&other, &topic, 0).await.unwrap()), all);
}

fn read_request(topic: &str, offset: u64) -> ReadRequest {
    ReadRequest { topic: topic.to_owned(), partition: 0, offset, max_events: 10_000, max_bytes: 6 << 20, wait_ms: 0 }
}

/// A partition's share of a large commit is cut into parts of about `PART_BYTES`, listed in
/// its index item, so a read of a few events (a receive of 10, a small poll) fetches and
/// decodes the part holding them, not the whole segment; reads across parts see every event.
pub async fn given_a_commit_larger_than_a_part_then_a_read_of_a_few_events_fetches_one_part(backend: &dyn Backend) {
    let (store, objects) = backend.open().await;
    let counted = crate::faults::ScriptedObjects::new(objects);
    let log = Log::new(store.clone(), counted.clone(), Arc::new(SystemClock), crate::log_config());
    let topic = unique_topic("parts");
    let (created, _) = log.create_topic(&topic, spec(1)).await.unwrap();
    // 700 events of about 1 KiB in one publish: one segment of about 700 KiB, in three parts.
    let all: Vec<(u64, String)> = (0..700).map(|i| (i, format!("{i}:{}", "p".repeat(1000)))).collect();
    log.publish(&topic, all.iter().map(|(_, v)| event(v, 0)).collect(), None).await.unwrap();
    let item = store.get(&layout::segment_key(created.id, 0, 0)).await.unwrap().expect("indexed");
    let (record, _) = layout::decode_segment_item(&item.value).unwrap();
    assert_eq!(record.parts.len(), 2, "{record:?}");

    let part = sluice_core::segment::PART_BYTES;
    for from in [0u64, 300, 600] {
        let (reads, bytes) = (counted.reads(), counted.read_bytes());
        let request = ReadRequest { max_events: 10, ..read_request(&topic, from) };
        let page = log.read(&request).await.unwrap();
        let got: Vec<(u64, Bytes)> = page.events.into_iter().map(|e| (e.offset, e.record.value)).collect();
        assert_eq!(values(&got), all[from as usize..from as usize + 10], "from {from}");
        assert_eq!(counted.reads() - reads, 1, "one part read from {from}");
        assert!(counted.read_bytes() - bytes <= part + 4096, "one part's bytes from {from}");
    }
    // Across the parts' edges, in pages of 97, and from a fresh process.
    let mut at = 0;
    while at < 700 {
        let page = log.read(&ReadRequest { max_events: 97, ..read_request(&topic, at) }).await.unwrap();
        let got: Vec<(u64, Bytes)> = page.events.into_iter().map(|e| (e.offset, e.record.value)).collect();
        assert_eq!(values(&got), all[at as usize..(at as usize + 97).min(700)], "from {at}");
        at = page.next_offset;
    }
    let (store2, objects2) = backend.open().await;
    let other = Log::new(store2, objects2, Arc::new(SystemClock), LogConfig::default());
    assert_eq!(values(&read_all(&other, &topic, 0).await.unwrap()), all);
}

/// One commit's inline segments share one name, each at position 0 of its own index item:
/// two partitions' segments of equal length differ only by partition. A process reading
/// both (its segment cache keyed by name, position and length alone gave partition 1's
/// events for partition 0) reads each partition's own, again and again.
pub async fn given_one_commit_of_equal_inline_segments_on_two_partitions_then_each_partition_reads_its_own(
    backend: &dyn Backend,
) {
    let config = LogConfig { inline_segment_bytes: 4 << 10, ..LogConfig::default() };
    let (store, objects) = backend.open().await;
    let log = Log::new(store, objects, Arc::new(SystemClock), config);
    let topic = unique_topic("inline-twins");
    log.create_topic(&topic, spec(2)).await.unwrap();
    let at = log.publish(&topic, vec![event("left", 0), event("rite", 1)], None).await.unwrap();
    assert_eq!(at, vec![Position { partition: 0, offset: 0 }, Position { partition: 1, offset: 0 }]);
    for partition in [0, 1, 0, 1] {
        let page = log.read(&ReadRequest { partition, ..read_request(&topic, 0) }).await.unwrap();
        let got: Vec<(u32, Bytes)> = page.events.into_iter().map(|e| (e.partition, e.record.value)).collect();
        let value = if partition == 0 { "left" } else { "rite" };
        assert_eq!(got, vec![(partition, Bytes::from(value))], "partition {partition}");
    }
}

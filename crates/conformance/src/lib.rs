//! One storage conformance suite, written once and run against every backend
//! (object_store's `integration.rs` pattern): the embedded backend on every run,
//! the AWS adapters against moto's server. A backend's test file implements
//! [`Backend`] and invokes [`conformance_suite!`].
//!
//! Each case uses topics of its own (random names), so cases can share one
//! moto server or one data directory and run in parallel.

pub mod moto;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::storage::{BlobRef, CommitBatch, IdempotencyRecord, SegmentEntry};
use sluice_core::{
    IdempotencyKey, Log, LogConfig, MetaStore, NewEvent, ObjectStore, Position, ReadRequest, StorageError, SystemClock,
    TopicConfig, TopicSpec,
};

/// The two stores of one backend.
pub type Stores = (Arc<dyn MetaStore>, Arc<dyn ObjectStore>);

/// A backend under test.
#[async_trait]
pub trait Backend: Send + Sync {
    /// A new handle on the same storage, as another process would open it
    /// (its own clients and caches).
    async fn open(&self) -> Stores;
}

/// Generates one `#[tokio::test]` per conformance case; `$backend` is an async
/// expression yielding a [`Backend`].
#[macro_export]
macro_rules! conformance_suite {
    ($backend:expr) => {
        $crate::conformance_suite!(@cases $backend;
            objects_put_then_read_any_range,
            objects_read_of_missing_object_is_not_found,
            topics_create_describe_list,
            given_existing_topic_when_create_then_already_exists,
            given_commits_then_segments_found_by_any_offset_inside,
            given_stale_base_when_commit_then_precondition_and_nothing_changes,
            given_one_stale_partition_when_multi_partition_commit_then_nothing_visible,
            given_taken_idempotency_key_when_commit_then_already_exists_and_nothing_visible,
            segment_at_time_finds_first_segment_reaching_the_time,
            given_deleted_topic_then_everything_gone_and_recreated_topic_is_empty,
            given_recreated_topic_when_commit_for_old_incarnation_then_not_found,
            given_crash_between_object_write_and_commit_then_nothing_visible_and_retry_succeeds_once,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn eight_concurrent_publishers_to_one_partition_get_dense_offsets() {
            let backend = $backend.await;
            $crate::eight_concurrent_publishers_to_one_partition_get_dense_offsets(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::$case(&backend).await;
            }
        )+
    };
}

/// A topic name no other case uses.
pub fn unique_topic(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

fn topic_config(name: &str, partitions: u32) -> TopicConfig {
    TopicConfig {
        name: name.to_owned(),
        id: rand::random::<u64>() >> 1,
        spec: TopicSpec { partitions, retention_ms: Some(3_600_000), retention_bytes: None },
        created_ms: 1_700_000_000_000,
    }
}

fn entry(topic: &TopicConfig, partition: u32, base: u64, next: u64, blob: &BlobRef, len: u64, ts: i64) -> SegmentEntry {
    SegmentEntry {
        topic: topic.name.clone(),
        topic_id: topic.id,
        partition,
        base_offset: base,
        next_offset: next,
        object: blob.object.clone(),
        position: blob.position,
        len,
        max_timestamp_ms: ts,
    }
}

fn commit_of(entries: Vec<SegmentEntry>) -> CommitBatch {
    CommitBatch { entries, idempotency: Vec::new() }
}

/// A segment entry as read back: the stores do not return the topic id.
fn as_read(mut e: SegmentEntry) -> SegmentEntry {
    e.topic_id = 0;
    e
}

pub async fn objects_put_then_read_any_range(backend: &dyn Backend) {
    let (_, objects) = backend.open().await;
    let first = Bytes::from_static(b"0123456789abcdef");
    let second = Bytes::from(vec![7u8; 100_000]);
    let a = objects.put(first.clone()).await.unwrap();
    let b = objects.put(second.clone()).await.unwrap();
    assert_ne!((&a.object, a.position), (&b.object, b.position), "two puts never share a place");
    assert_eq!(objects.read(&a.object, a.position, 16).await.unwrap(), first);
    assert_eq!(objects.read(&a.object, a.position + 4, 6).await.unwrap(), Bytes::from_static(b"456789"));
    assert_eq!(objects.read(&b.object, b.position + 99_990, 10).await.unwrap(), second.slice(99_990..));
    // Asking for more than the blob holds is an error, never a short read.
    let past = objects.read(&b.object, b.position + 99_990, 20).await;
    assert!(matches!(past, Err(StorageError::Corrupt(_))), "{past:?}");
}

pub async fn objects_read_of_missing_object_is_not_found(backend: &dyn Backend) {
    let (_, objects) = backend.open().await;
    let missing = objects.read("no-such-object", 0, 10).await;
    assert!(matches!(missing, Err(StorageError::NotFound(_))), "{missing:?}");
}

pub async fn topics_create_describe_list(backend: &dyn Backend) {
    let (meta, _) = backend.open().await;
    let topic = topic_config(&unique_topic("create"), 3);
    meta.create_topic(&topic).await.unwrap();
    assert_eq!(meta.topic(&topic.name).await.unwrap(), Some(topic.clone()));
    assert!(meta.list_topics().await.unwrap().contains(&topic));
    let states = meta.partitions(&topic.name).await.unwrap();
    assert_eq!(states.iter().map(|s| s.partition).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(states.iter().all(|s| s.high_watermark == 0 && s.log_start_offset == 0 && s.bytes == 0));
    assert_eq!(meta.partition(&topic.name, 2).await.unwrap().high_watermark, 0);
    assert!(matches!(meta.partition(&topic.name, 3).await, Err(StorageError::NotFound(_))));
    let unknown = unique_topic("unknown");
    assert_eq!(meta.topic(&unknown).await.unwrap(), None);
    assert!(matches!(meta.partitions(&unknown).await, Err(StorageError::NotFound(_))));
    assert!(matches!(meta.partition(&unknown, 0).await, Err(StorageError::NotFound(_))));
}

pub async fn given_existing_topic_when_create_then_already_exists(backend: &dyn Backend) {
    let (meta, _) = backend.open().await;
    let topic = topic_config(&unique_topic("exists"), 1);
    meta.create_topic(&topic).await.unwrap();
    let mut other = topic_config(&topic.name, 5);
    other.id = topic.id + 1;
    let again = meta.create_topic(&other).await;
    assert!(matches!(again, Err(StorageError::AlreadyExists(_))), "{again:?}");
    assert_eq!(meta.topic(&topic.name).await.unwrap(), Some(topic), "the first topic is untouched");
}

pub async fn given_commits_then_segments_found_by_any_offset_inside(backend: &dyn Backend) {
    let (meta, objects) = backend.open().await;
    let topic = topic_config(&unique_topic("segments"), 2);
    meta.create_topic(&topic).await.unwrap();
    let blob = objects.put(Bytes::from_static(b"not decoded by the stores")).await.unwrap();
    let first = entry(&topic, 1, 0, 3, &blob, 10, 100);
    let second = entry(&topic, 1, 3, 5, &BlobRef { object: blob.object.clone(), position: 10 }, 15, 200);
    meta.commit(&commit_of(vec![first.clone()])).await.unwrap();
    meta.commit(&commit_of(vec![second.clone()])).await.unwrap();

    let state = meta.partition(&topic.name, 1).await.unwrap();
    assert_eq!((state.log_start_offset, state.high_watermark, state.bytes), (0, 5, 25));
    assert_eq!(meta.partition(&topic.name, 0).await.unwrap().high_watermark, 0, "other partitions untouched");
    let (first, second) = (as_read(first), as_read(second));
    let seg = |offset, limit| {
        let meta = meta.clone();
        let name = topic.name.clone();
        async move { meta.segments(&name, 1, offset, limit).await.unwrap() }
    };
    assert_eq!(seg(0, 16).await, vec![first.clone(), second.clone()]);
    assert_eq!(seg(0, 1).await, vec![first.clone()]);
    assert_eq!(seg(2, 16).await, vec![first.clone(), second.clone()], "offset inside the first segment");
    assert_eq!(seg(3, 16).await, vec![second.clone()]);
    assert_eq!(seg(4, 1).await, vec![second.clone()], "offset inside the last segment");
    assert_eq!(seg(5, 16).await, vec![], "at the high watermark");
    assert_eq!(seg(50, 16).await, vec![], "past the high watermark");
}

pub async fn given_stale_base_when_commit_then_precondition_and_nothing_changes(backend: &dyn Backend) {
    let (meta, objects) = backend.open().await;
    let topic = topic_config(&unique_topic("stale"), 1);
    meta.create_topic(&topic).await.unwrap();
    let blob = objects.put(Bytes::from_static(b"x")).await.unwrap();
    meta.commit(&commit_of(vec![entry(&topic, 0, 0, 2, &blob, 1, 1)])).await.unwrap();
    // Another process (a fresh handle, with no cached head) commits at the old base.
    let (other, _) = backend.open().await;
    let lost = other.commit(&commit_of(vec![entry(&topic, 0, 0, 7, &blob, 1, 1)])).await;
    assert!(matches!(lost, Err(StorageError::Precondition(_))), "{lost:?}");
    // And this handle, whose cache is right, loses too once the other moves on.
    other.commit(&commit_of(vec![entry(&topic, 0, 2, 4, &blob, 1, 1)])).await.unwrap();
    let lost = meta.commit(&commit_of(vec![entry(&topic, 0, 2, 9, &blob, 1, 1)])).await;
    assert!(matches!(lost, Err(StorageError::Precondition(_))), "{lost:?}");
    let state = meta.partition(&topic.name, 0).await.unwrap();
    assert_eq!((state.high_watermark, state.bytes), (4, 2));
    let bases: Vec<u64> = meta.segments(&topic.name, 0, 0, 16).await.unwrap().iter().map(|s| s.base_offset).collect();
    assert_eq!(bases, vec![0, 2]);
}

pub async fn given_one_stale_partition_when_multi_partition_commit_then_nothing_visible(backend: &dyn Backend) {
    let (meta, objects) = backend.open().await;
    let topic = topic_config(&unique_topic("multi"), 2);
    meta.create_topic(&topic).await.unwrap();
    let blob = objects.put(Bytes::from_static(b"xy")).await.unwrap();
    meta.commit(&commit_of(vec![entry(&topic, 1, 0, 1, &blob, 1, 1)])).await.unwrap();
    let batch = commit_of(vec![entry(&topic, 0, 0, 1, &blob, 1, 1), entry(&topic, 1, 0, 1, &blob, 1, 1)]);
    let lost = meta.commit(&batch).await;
    assert!(matches!(lost, Err(StorageError::Precondition(_))), "{lost:?}");
    assert_eq!(meta.partition(&topic.name, 0).await.unwrap().high_watermark, 0, "all or nothing");
    let batch = commit_of(vec![entry(&topic, 0, 0, 1, &blob, 1, 1), entry(&topic, 1, 1, 3, &blob, 1, 1)]);
    meta.commit(&batch).await.unwrap();
    let hws: Vec<u64> = meta.partitions(&topic.name).await.unwrap().iter().map(|s| s.high_watermark).collect();
    assert_eq!(hws, vec![1, 3]);
}

fn idempotency_record(topic: &str, key: &str, results: Vec<Position>) -> IdempotencyRecord {
    IdempotencyRecord {
        topic: topic.to_owned(),
        key: key.to_owned(),
        fingerprint: vec![1, 2, 3, 255],
        results,
        created_ms: 1_700_000_000_123,
    }
}

pub async fn given_taken_idempotency_key_when_commit_then_already_exists_and_nothing_visible(backend: &dyn Backend) {
    let (meta, objects) = backend.open().await;
    let topic = topic_config(&unique_topic("idem"), 1);
    meta.create_topic(&topic).await.unwrap();
    let blob = objects.put(Bytes::from_static(b"xy")).await.unwrap();
    let record = idempotency_record(&topic.name, "key-1", vec![Position { partition: 0, offset: 0 }]);
    assert_eq!(meta.idempotency(&topic.name, "key-1").await.unwrap(), None);
    let batch = CommitBatch { entries: vec![entry(&topic, 0, 0, 1, &blob, 1, 1)], idempotency: vec![record.clone()] };
    meta.commit(&batch).await.unwrap();
    assert_eq!(meta.idempotency(&topic.name, "key-1").await.unwrap(), Some(record));

    let again = idempotency_record(&topic.name, "key-1", vec![Position { partition: 0, offset: 1 }]);
    let batch = CommitBatch { entries: vec![entry(&topic, 0, 1, 2, &blob, 1, 1)], idempotency: vec![again] };
    let taken = meta.commit(&batch).await;
    assert!(matches!(taken, Err(StorageError::AlreadyExists(_))), "{taken:?}");
    assert_eq!(meta.partition(&topic.name, 0).await.unwrap().high_watermark, 1, "the entry was not committed");
    assert_eq!(meta.idempotency(&unique_topic("other"), "key-1").await.unwrap(), None, "keys are per topic");
}

pub async fn segment_at_time_finds_first_segment_reaching_the_time(backend: &dyn Backend) {
    let (meta, objects) = backend.open().await;
    let topic = topic_config(&unique_topic("time"), 1);
    meta.create_topic(&topic).await.unwrap();
    let blob = objects.put(Bytes::from_static(b"xyz")).await.unwrap();
    for (base, ts) in [(0, 100), (1, 300), (2, 200), (3, 400)] {
        meta.commit(&commit_of(vec![entry(&topic, 0, base, base + 1, &blob, 1, ts)])).await.unwrap();
    }
    let at = |ts| {
        let meta = meta.clone();
        let name = topic.name.clone();
        async move { meta.segment_at_time(&name, 0, ts).await.unwrap().map(|s| s.base_offset) }
    };
    assert_eq!(at(0).await, Some(0));
    assert_eq!(at(150).await, Some(1));
    assert_eq!(at(300).await, Some(1));
    assert_eq!(at(301).await, Some(3));
    assert_eq!(at(401).await, None);
}

pub async fn given_deleted_topic_then_everything_gone_and_recreated_topic_is_empty(backend: &dyn Backend) {
    let (meta, objects) = backend.open().await;
    let topic = topic_config(&unique_topic("delete"), 2);
    meta.create_topic(&topic).await.unwrap();
    let blob = objects.put(Bytes::from_static(b"xyz")).await.unwrap();
    let record = idempotency_record(&topic.name, "k", vec![Position { partition: 1, offset: 0 }]);
    let batch = CommitBatch { entries: vec![entry(&topic, 1, 0, 4, &blob, 3, 1)], idempotency: vec![record] };
    meta.commit(&batch).await.unwrap();

    meta.delete_topic(&topic.name).await.unwrap();
    assert_eq!(meta.topic(&topic.name).await.unwrap(), None);
    assert!(!meta.list_topics().await.unwrap().iter().any(|t| t.name == topic.name));
    assert!(matches!(meta.partitions(&topic.name).await, Err(StorageError::NotFound(_))));
    assert_eq!(meta.idempotency(&topic.name, "k").await.unwrap(), None);
    assert!(matches!(meta.delete_topic(&topic.name).await, Err(StorageError::NotFound(_))));

    let reborn = topic_config(&topic.name, 2);
    meta.create_topic(&reborn).await.unwrap();
    let state = meta.partition(&topic.name, 1).await.unwrap();
    assert_eq!((state.high_watermark, state.bytes), (0, 0));
    assert_eq!(meta.segments(&topic.name, 1, 0, 16).await.unwrap(), vec![]);
}

pub async fn given_recreated_topic_when_commit_for_old_incarnation_then_not_found(backend: &dyn Backend) {
    let (meta, objects) = backend.open().await;
    let old = topic_config(&unique_topic("reborn"), 1);
    meta.create_topic(&old).await.unwrap();
    let blob = objects.put(Bytes::from_static(b"x")).await.unwrap();
    meta.commit(&commit_of(vec![entry(&old, 0, 0, 1, &blob, 1, 1)])).await.unwrap();
    meta.delete_topic(&old.name).await.unwrap();
    let new = topic_config(&old.name, 1);
    meta.create_topic(&new).await.unwrap();
    let stale = meta.commit(&commit_of(vec![entry(&old, 0, 0, 1, &blob, 1, 1)])).await;
    assert!(matches!(stale, Err(StorageError::NotFound(_))), "{stale:?}");
    assert_eq!(meta.partition(&new.name, 0).await.unwrap().high_watermark, 0);
}

/// A [`MetaStore`] whose first commit fails after the log has written its
/// object: a process dying between the S3 write and the index commit.
struct FailFirstCommit {
    inner: Arc<dyn MetaStore>,
    failed: AtomicBool,
}

#[async_trait]
impl MetaStore for FailFirstCommit {
    async fn create_topic(&self, topic: &TopicConfig) -> Result<(), StorageError> {
        self.inner.create_topic(topic).await
    }
    async fn topic(&self, name: &str) -> Result<Option<TopicConfig>, StorageError> {
        self.inner.topic(name).await
    }
    async fn list_topics(&self) -> Result<Vec<TopicConfig>, StorageError> {
        self.inner.list_topics().await
    }
    async fn delete_topic(&self, name: &str) -> Result<(), StorageError> {
        self.inner.delete_topic(name).await
    }
    async fn partitions(&self, topic: &str) -> Result<Vec<sluice_core::PartitionState>, StorageError> {
        self.inner.partitions(topic).await
    }
    async fn partition(&self, topic: &str, partition: u32) -> Result<sluice_core::PartitionState, StorageError> {
        self.inner.partition(topic, partition).await
    }
    async fn commit(&self, batch: &CommitBatch) -> Result<(), StorageError> {
        if !self.failed.swap(true, Ordering::SeqCst) {
            return Err(StorageError::Unavailable {
                message: "injected crash before the index commit".into(),
                source: None,
            });
        }
        self.inner.commit(batch).await
    }
    async fn segments(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        limit: usize,
    ) -> Result<Vec<SegmentEntry>, StorageError> {
        self.inner.segments(topic, partition, offset, limit).await
    }
    async fn segment_at_time(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: i64,
    ) -> Result<Option<SegmentEntry>, StorageError> {
        self.inner.segment_at_time(topic, partition, timestamp_ms).await
    }
    async fn idempotency(&self, topic: &str, key: &str) -> Result<Option<IdempotencyRecord>, StorageError> {
        self.inner.idempotency(topic, key).await
    }
}

fn event(value: &str) -> NewEvent {
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: Bytes::from(value.to_owned()),
        value_is_json: false,
        timestamp_ms: None,
        partition: Some(0),
    }
}

fn log_on((meta, objects): Stores) -> Log {
    Log::new(meta, objects, Arc::new(SystemClock), LogConfig::default())
}

async fn read_all(log: &Log, topic: &str, partition: u32) -> Vec<(u64, Bytes)> {
    let request = ReadRequest {
        topic: topic.to_owned(),
        partition,
        offset: 0,
        max_events: 100_000,
        max_bytes: 64 << 20,
        wait_ms: 0,
    };
    let batch = log.read(&request).await.unwrap();
    batch.events.into_iter().map(|e| (e.offset, e.record.value)).collect()
}

pub async fn given_crash_between_object_write_and_commit_then_nothing_visible_and_retry_succeeds_once(
    backend: &dyn Backend,
) {
    let (meta, objects) = backend.open().await;
    let crashing: Arc<dyn MetaStore> =
        Arc::new(FailFirstCommit { inner: meta.clone(), failed: AtomicBool::new(false) });
    let log = log_on((crashing, objects.clone()));
    let topic = unique_topic("crash");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    let key = || Some(IdempotencyKey { key: "retry-me".into(), fingerprint: vec![9; 32] });
    let events = || vec![event("a"), event("b")];

    let crashed = log.publish(&topic, events(), key()).await;
    assert!(crashed.is_err(), "the injected failure reaches the publisher: {crashed:?}");
    let state = meta.partition(&topic, 0).await.unwrap();
    assert_eq!((state.high_watermark, state.bytes), (0, 0), "nothing visible after the crash");
    assert_eq!(meta.segments(&topic, 0, 0, 16).await.unwrap(), vec![]);
    assert_eq!(meta.idempotency(&topic, "retry-me").await.unwrap(), None);

    // The client retries with the same key, then once more (say its ack was lost).
    let first = log.publish(&topic, events(), key()).await.unwrap();
    let again = log.publish(&topic, events(), key()).await.unwrap();
    let expected = vec![Position { partition: 0, offset: 0 }, Position { partition: 0, offset: 1 }];
    assert_eq!(first, expected);
    assert_eq!(again, expected, "the retry returns the original result");
    // A reader on another handle sees the events exactly once.
    let reader = log_on(backend.open().await);
    assert_eq!(read_all(&reader, &topic, 0).await, vec![(0, Bytes::from("a")), (1, Bytes::from("b"))]);
}

/// Publishers in each of this many separate "processes" (own handles, own logs).
const PUBLISHERS: usize = 8;
const PUBLISHES_EACH: usize = 12;

pub async fn eight_concurrent_publishers_to_one_partition_get_dense_offsets(backend: &dyn Backend) {
    let topic = unique_topic("race");
    let admin = log_on(backend.open().await);
    admin.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    let mut tasks = Vec::new();
    for p in 0..PUBLISHERS {
        let log = log_on(backend.open().await);
        let topic = topic.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..PUBLISHES_EACH {
                let value = format!("p{p}-e{i}");
                let batch =
                    if i % 3 == 0 { vec![event(&value), event(&format!("{value}-b"))] } else { vec![event(&value)] };
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
    let read: Vec<(u64, String)> = read_all(&reader, &topic, 0)
        .await
        .into_iter()
        .map(|(o, v)| (o, String::from_utf8_lossy(&v).into_owned()))
        .collect();
    assert_eq!(read, acked, "every acknowledged event read back exactly once, at its offset");
    assert_eq!(admin.describe_topic(&topic).await.unwrap().1[0].high_watermark, expected as u64);
}

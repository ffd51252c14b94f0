//! Retention, compaction and the collector, through the real [`Log`] and [`Janitor`]
//! on each backend, with a fake clock: what the policy removes and only that, readers
//! that never see a gap while segments are merged and removed under them, and objects
//! deleted only when nothing indexed needs them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::layout;
use sluice_core::ports::state::Query;
use sluice_core::upkeep::{Janitor, JanitorConfig, STEP_BUDGET};
use sluice_core::{Clock, Error, Log, ManualClock, NewEvent, ReadRequest, StorageError, SystemClock, TopicSpec};

use crate::faults::{Gate, QueryAction, Scripted, ScriptedObjects};
use crate::{unique_topic, Backend, Stores};

/// Generates one `#[tokio::test]` per retention case; `$backend` is an async expression yielding a [`Backend`].
#[macro_export]
macro_rules! retention_conformance_suite {
    ($backend:expr) => {
        $crate::retention_conformance_suite!(@cases $backend;
            given_retention_ms_then_exactly_the_expired_segments_go_and_reads_below_the_start_get_416,
            given_retention_bytes_then_each_partition_stays_under_its_bound,
            given_many_one_event_segments_then_compaction_keeps_every_event_and_replay_reads_few_objects,
            given_orphan_blob_then_collected_after_the_grace_period_and_never_a_committed_one,
            given_deleted_topic_then_its_objects_are_collected_and_objects_shared_with_live_topics_stay,
            given_an_index_query_torn_by_a_swap_then_retention_stops_at_the_hole,
            given_compacted_segments_then_offset_by_time_uses_the_time_index_and_answers_exactly,
            given_a_later_index_page_torn_by_a_swap_then_offset_by_time_still_answers_exactly,
            given_a_topic_purged_during_a_janitor_pass_then_the_pass_leaves_none_of_its_items,
            given_a_deadline_when_the_janitor_runs_until_it_then_it_stops_there_and_the_next_run_finishes,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn given_readers_replaying_during_compaction_and_retention_then_no_error_no_gap_same_bytes() {
            let backend = $backend.await;
            $crate::retention_cases::given_readers_replaying_during_compaction_and_retention_then_no_error_no_gap_same_bytes(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::retention_cases::$case(&backend).await;
            }
        )+
    };
}

const HOUR: i64 = 3600 * 1000;

/// A janitor works on every topic and object of its backend, so cases that run one take
/// turns: on a shared backend (one moto server) one case's janitor would otherwise compact or
/// collect under another case's expectations. (Other suites share no moto server with these.)
static ONE_JANITOR_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The clock starts at the real time, so object stores' own timestamps (file times,
/// S3's LastModified) and the collector's judgement of age agree.
fn real_now() -> i64 {
    SystemClock.now_ms()
}

fn log_at(stores: Stores, clock: &Arc<ManualClock>) -> Log {
    Log::new(stores.0, stores.1, clock.clone(), crate::log_config())
}

/// [`log_at`] with every segment in a blob: for the cases about objects.
fn blobs_log_at(stores: Stores, clock: &Arc<ManualClock>) -> Log {
    Log::new(stores.0, stores.1, clock.clone(), crate::blobs_only())
}

fn janitor(stores: &Stores, clock: &Arc<ManualClock>, config: JanitorConfig) -> Janitor {
    Janitor::new(stores.0.clone(), stores.1.clone(), clock.clone(), config)
}

fn event(value: impl Into<Bytes>, partition: u32, timestamp_ms: Option<i64>) -> NewEvent {
    NewEvent {
        key: None,
        headers: vec![("h".into(), Bytes::from_static(b"x"))],
        value: value.into(),
        value_is_json: false,
        timestamp_ms,
        partition: Some(partition),
    }
}

fn request(topic: &str, partition: u32, offset: u64) -> ReadRequest {
    ReadRequest { topic: topic.to_owned(), partition, offset, max_events: 10_000, max_bytes: 6 << 20, wait_ms: 0 }
}

/// Every event of a partition from `offset` to the end, page by page.
async fn replay(log: &Log, topic: &str, partition: u32, mut offset: u64) -> Result<Vec<(u64, Bytes)>, Error> {
    let mut out = Vec::new();
    loop {
        let batch = log.read(&request(topic, partition, offset)).await?;
        if batch.events.is_empty() {
            return Ok(out);
        }
        for e in batch.events {
            assert_eq!(e.offset, offset, "offsets come densely");
            out.push((e.offset, e.record.value));
            offset += 1;
        }
    }
}

/// No compaction: a target below any segment.
fn retention_only() -> JanitorConfig {
    JanitorConfig { compaction_target_bytes: 1, grace_ms: 0, ..JanitorConfig::default() }
}

pub async fn given_retention_ms_then_exactly_the_expired_segments_go_and_reads_below_the_start_get_416(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("ret-ms");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None })
        .await
        .unwrap();
    // Three segments of ten events: stamped t0, t0 + 30 min, t0 + 2 h.
    for (i, at) in [t0, t0 + HOUR / 2, t0 + 2 * HOUR].into_iter().enumerate() {
        let events = (0..10).map(|j| event(format!("e{}", i * 10 + j), 0, Some(at))).collect();
        log.publish(&topic, events, None).await.unwrap();
    }
    let janitor = janitor(&stores, &clock, retention_only());
    // What the janitor did to this topic (its report also counts other cases' topics on a shared backend).
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let index = || {
        let (store, id) = (stores.0.clone(), config.id);
        async move { store.query(&Query::all(layout::segments_pk(id, 0), 100)).await.unwrap().items.len() }
    };
    let expired_after_run = |at: i64| {
        clock.set(at);
        let (janitor, log, config) = (janitor.clone(), log.clone(), config.clone());
        async move {
            janitor.run(STEP_BUDGET).await.unwrap();
            log.upkeep_of(&config).await.unwrap().segments_expired
        }
    };
    // At t0 + 1 h nothing is older than an hour: nothing goes.
    assert_eq!(expired_after_run(t0 + HOUR).await, 0);
    assert_eq!(replay(&log, &topic, 0, 0).await.unwrap().len(), 30);
    // At t0 + 1 h 15 the first segment is (its newest event is 1 h 15 old), the second is not.
    assert_eq!(expired_after_run(t0 + HOUR + HOUR / 4).await, 1);
    assert_eq!(index().await, 2, "its index item is gone");
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert_eq!((states[0].log_start_offset, states[0].high_watermark), (10, 30));
    match log.read(&request(&topic, 0, 3)).await {
        Err(Error::OffsetOutOfRange { offset: 3, log_start_offset: 10, high_watermark: 30 }) => {}
        other => panic!("a read below the log start is out of range, naming it: {other:?}"),
    }
    let kept = replay(&log, &topic, 0, 10).await.unwrap();
    let expected: Vec<(u64, Bytes)> = (10..30).map(|o| (o, Bytes::from(format!("e{o}")))).collect();
    assert_eq!(kept, expected, "everything from the log start is intact");
    // At t0 + 1 h 45 the second goes too; the third (t0 + 2 h) stays until t0 + 3 h.
    assert_eq!(expired_after_run(t0 + HOUR + 3 * HOUR / 4).await, 2);
    assert_eq!(expired_after_run(t0 + 3 * HOUR).await, 2, "exactly an hour old: kept");
    assert_eq!(expired_after_run(t0 + 3 * HOUR + 1).await, 3);
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert_eq!((states[0].log_start_offset, states[0].high_watermark, states[0].bytes), (30, 30, 0));
    let upkeep = log.upkeep_of(&config).await.unwrap();
    assert_eq!((upkeep.segments_expired, upkeep.last_change_ms), (3, t0 + 3 * HOUR + 1), "the describe's counts");
    assert!(matches!(
        log.read(&request(&topic, 0, 29)).await,
        Err(Error::OffsetOutOfRange { log_start_offset: 30, .. })
    ));
    // The partition still takes new events, at the next offset.
    let at = log.publish(&topic, vec![event("new", 0, None)], None).await.unwrap();
    assert_eq!(at[0].offset, 30);
    assert_eq!(replay(&log, &topic, 0, 30).await.unwrap(), vec![(30, Bytes::from("new"))]);
}

pub async fn given_retention_bytes_then_each_partition_stays_under_its_bound(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let clock = Arc::new(ManualClock::new(real_now()));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("ret-bytes");
    const BOUND: u64 = 8 << 10;
    let spec = TopicSpec { partitions: 2, retention_ms: None, retention_bytes: Some(BOUND as i64) };
    log.create_topic(&topic, spec).await.unwrap();
    let value = Bytes::from(vec![b'v'; 500]);
    let mut largest = 0;
    for i in 0..40u32 {
        let events = (0..2).map(|_| event(value.clone(), i % 2, None)).collect();
        log.publish(&topic, events, None).await.unwrap();
    }
    let (_, before) = log.describe_topic(&topic).await.unwrap();
    let janitor = janitor(&stores, &clock, retention_only());
    janitor.run(STEP_BUDGET).await.unwrap();
    let (config, states) = log.describe_topic(&topic).await.unwrap();
    assert!(log.upkeep_of(&config).await.unwrap().segments_expired > 0);
    for (s, b) in states.iter().zip(&before) {
        assert!(s.bytes <= BOUND, "partition {} holds {} bytes, bound {BOUND}", s.partition, s.bytes);
        assert!(s.log_start_offset > 0 && s.high_watermark == b.high_watermark);
        largest = largest.max(b.bytes / 20);
        // Only as much went as the bound needed: one more segment would have fitted nowhere.
        assert!(s.bytes + largest > BOUND, "partition {} kept {} bytes: too much went", s.partition, s.bytes);
        let kept = replay(&log, &topic, s.partition, s.log_start_offset).await.unwrap();
        assert_eq!(kept.len() as u64, s.high_watermark - s.log_start_offset);
        assert!(kept.iter().all(|(_, v)| *v == value));
        let below = log.read(&request(&topic, s.partition, s.log_start_offset - 1)).await;
        assert!(matches!(below, Err(Error::OffsetOutOfRange { .. })), "{below:?}");
    }
}

pub async fn given_many_one_event_segments_then_compaction_keeps_every_event_and_replay_reads_few_objects(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let count = (backend.large_count() / 10) as u64;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("compact");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..count {
        // Varied sizes and times, so merged parts split at odd places.
        let value = format!("{i}:{}", "x".repeat((i % 97) as usize));
        log.publish(&topic, vec![event(value, 0, Some(t0 + i as i64))], None).await.unwrap();
    }
    let before = replay(&log, &topic, 0, 0).await.unwrap();
    assert_eq!(before.len() as u64, count);
    let config = JanitorConfig { grace_ms: 0, compaction_target_bytes: 8 << 20, ..JanitorConfig::default() };
    let janitor = janitor(&stores, &clock, config);
    for _ in 0..100 {
        if janitor.run(STEP_BUDGET).await.unwrap().segments_merged == 0 {
            break;
        }
    }
    // (Counted in the index: on a shared backend other cases' janitors merge too.)
    let id = log.describe_topic(&topic).await.unwrap().0.id;
    let index = stores.0.query(&Query::all(layout::segments_pk(id, 0), 1000)).await.unwrap().items.len();
    assert!(index <= 4, "{count} one-event segments compacted into {index}");
    // Replay through a log whose object reads are counted.
    let counting = ScriptedObjects::new(stores.1.clone());
    let reader = log_at((stores.0.clone(), counting.clone()), &clock);
    let after = replay(&reader, &topic, 0, 0).await.unwrap();
    assert_eq!(after, before, "the same events, byte for byte, at the same offsets");
    let reads = counting.reads();
    assert!(reads <= 36, "replaying {count} compacted events took {reads} object reads");
    // A read in the middle fetches only the parts it needs: one (by a process that has not
    // read the partition yet); the same read again takes that part's records from memory.
    let fresh = log_at((stores.0.clone(), counting.clone()), &clock);
    let mid_request = ReadRequest { max_events: 5, ..request(&topic, 0, count / 2) };
    for (i, expected_reads) in [1, 0].into_iter().enumerate() {
        let before_mid = counting.reads();
        let mid = fresh.read(&mid_request).await.unwrap();
        let offsets = mid.events.iter().map(|e| e.offset).collect::<Vec<_>>();
        assert_eq!(offsets, (count / 2..count / 2 + 5).collect::<Vec<_>>());
        assert_eq!(counting.reads() - before_mid, expected_reads, "read {i}: parts read");
        let values = mid.events.iter().map(|e| (e.offset, e.record.value.clone())).collect::<Vec<_>>();
        assert_eq!(values, before[(count / 2) as usize..][..5], "read {i}: the same events");
    }
    // The offset of a time still resolves exactly.
    let at = reader.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(t0 + 1234 % count as i64)).await.unwrap();
    assert_eq!(at, 1234 % count);
    // The old objects are collected (the grace period is 0), the new ones serve reads.
    janitor.run(STEP_BUDGET).await.unwrap();
    assert_eq!(replay(&log, &topic, 0, 0).await.unwrap(), before);
}

pub async fn given_readers_replaying_during_compaction_and_retention_then_no_error_no_gap_same_bytes(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let clock = Arc::new(ManualClock::new(real_now()));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("busy-upkeep");
    const BOUND: i64 = 40 << 10;
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: Some(BOUND) };
    log.create_topic(&topic, spec).await.unwrap();
    let value_of = |o: u64| Bytes::from(format!("{o}:{}", "y".repeat((o % 300) as usize)));
    let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // One publisher (so offsets follow publish order), event by event.
    let publisher = {
        let (log, topic, published) = (log.clone(), topic.clone(), published.clone());
        tokio::spawn(async move {
            for o in 0..600u64 {
                let at = log.publish(&topic, vec![event(value_of(o), 0, None)], None).await.unwrap();
                assert_eq!(at[0].offset, o);
                published.store(o + 1, Ordering::SeqCst);
            }
        })
    };
    let mut readers = Vec::new();
    for r in 0..3 {
        let (stores, clock, topic, published) =
            (backend.open_with(clock.clone()).await, clock.clone(), topic.clone(), published.clone());
        readers.push(tokio::spawn(async move {
            let log = log_at(stores, &clock);
            let (mut checked, mut out_of_range) = (0usize, 0usize);
            let mut offset = 0;
            loop {
                let done = published.load(Ordering::SeqCst) == 600;
                let page = ReadRequest { max_events: 7 + r * 13, ..request(&topic, 0, offset) };
                match log.read(&page).await {
                    Ok(batch) => {
                        for (i, e) in batch.events.iter().enumerate() {
                            assert_eq!(e.offset, offset + i as u64, "no gap");
                            assert_eq!(e.record.value, value_of(e.offset), "the bytes published");
                            checked += 1;
                        }
                        offset = batch.next_offset;
                    }
                    // Retention passed this reader: the answer names the new start, where it goes on.
                    Err(Error::OffsetOutOfRange { log_start_offset, .. }) if log_start_offset > offset => {
                        out_of_range += 1;
                        offset = log_start_offset;
                    }
                    Err(e) => panic!("reader {r} at {offset}: {e:?}"),
                }
                if done && offset == 600 {
                    return (checked, out_of_range);
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let config = JanitorConfig { grace_ms: 0, compaction_target_bytes: 16 << 10, ..JanitorConfig::default() };
    let janitor = janitor(&stores, &clock, config);
    let mut upkeep = sluice_core::upkeep::UpkeepReport::default();
    while !publisher.is_finished() {
        upkeep.add(&janitor.step(STEP_BUDGET).await.unwrap());
        tokio::task::yield_now().await;
    }
    publisher.await.unwrap();
    upkeep.add(&janitor.run(STEP_BUDGET).await.unwrap());
    for r in readers {
        let (checked, _) = r.await.unwrap();
        assert!(checked > 0);
    }
    let (config, states) = log.describe_topic(&topic).await.unwrap();
    // (Seen in the topic: on a shared backend other cases' janitors work on it too.)
    let index = stores.0.query(&Query::all(layout::segments_pk(config.id, 0), 1000)).await.unwrap().items.len();
    assert!(states[0].log_start_offset > 0, "retention ran under the readers: {upkeep:?}");
    assert!(index < 100, "compaction ran under the readers: {index} segments left of 600; {upkeep:?}");
    let kept = replay(&log, &topic, 0, states[0].log_start_offset).await.unwrap();
    assert_eq!(kept.len() as u64, 600 - states[0].log_start_offset);
    assert!(kept.iter().all(|(o, v)| *v == value_of(*o)));
}

pub async fn given_orphan_blob_then_collected_after_the_grace_period_and_never_a_committed_one(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    const GRACE: i64 = 10 * 60 * 1000;
    let clock = Arc::new(ManualClock::new(real_now()));
    let stores = backend.open_with(clock.clone()).await;
    let config = JanitorConfig { grace_ms: GRACE, ..retention_only() };
    // A blob written but never indexed, by a process that crashed before its commit.
    let crashed = backend.open_with(clock.clone()).await;
    let orphan = crashed.1.put(Bytes::from_static(b"never indexed")).await.unwrap();
    drop(crashed);
    let janitor_now = janitor(&stores, &clock, config.clone());
    janitor_now.run(STEP_BUDGET).await.unwrap();
    assert!(stores.1.read(&orphan.object, orphan.position, 13).await.is_ok(), "younger than the grace period: kept");

    // A publish whose blob is written, then whose commit waits at a gate.
    let gate = Arc::new(Gate::default());
    let gated = Scripted::new(stores.0.clone());
    gated.gate(gate.clone());
    let publisher = blobs_log_at((gated, stores.1.clone()), &clock);
    let topic = unique_topic("orphans");
    publisher
        .create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None })
        .await
        .unwrap();
    gate.close();
    let (landed, on_landed) = tokio::sync::oneshot::channel();
    let pending = {
        let (publisher, topic) = (publisher.clone(), topic.clone());
        tokio::spawn(async move {
            let answer = publisher.publish(&topic, vec![event("landed late", 0, None)], None).await;
            let _ = landed.send(());
            answer
        })
    };
    gate.wait_for_blocked().await;
    // The collector lists after the grace period; the commit lands just after the listing.
    clock.advance(GRACE + 60_000);
    let failpoint = ScriptedObjects::new(stores.1.clone());
    let opens = gate.clone();
    failpoint.after_list(Box::pin(async move {
        opens.open();
        // The commit lands (its publish is acknowledged) before the collector goes on.
        let _ = on_landed.await;
    }));
    let collector = Janitor::new(stores.0.clone(), failpoint.clone(), clock.clone(), config.clone());
    let report = collector.run(STEP_BUDGET).await.unwrap();
    let acked = pending.await.unwrap().expect("the publish is acknowledged");
    assert!(report.gc.orphans_deleted >= 1, "the true orphan went: {report:?}");
    assert!(matches!(stores.1.read(&orphan.object, orphan.position, 13).await, Err(StorageError::NotFound(_))));
    let reader = blobs_log_at(backend.open_with(clock.clone()).await, &clock);
    let read = replay(&reader, &topic, 0, 0).await.unwrap();
    assert_eq!(
        read,
        vec![(acked[0].offset, Bytes::from("landed late"))],
        "the segment committed after the listing is intact"
    );
    // And the other order: the collector dooms the blob first; the commit then writes it anew.
    // The blob goes to an object that holds nothing indexed (on the embedded backend, where a
    // process appends its blobs to one file, the file of another process), or the collector
    // would leave it alone for the segment beside it.
    let other = backend.open_with(clock.clone()).await;
    let gate = Arc::new(Gate::default());
    let gated = Scripted::new(other.0);
    gated.gate(gate.clone());
    let blobs = ScriptedObjects::new(other.1);
    let publisher = blobs_log_at((gated, blobs.clone()), &clock);
    gate.close();
    let pending = {
        let (publisher, topic) = (publisher.clone(), topic.clone());
        tokio::spawn(async move { publisher.publish(&topic, vec![event("written anew", 0, None)], None).await })
    };
    gate.wait_for_blocked().await;
    let first = blobs.puts();
    assert_eq!(first.len(), 1, "the blob is written, its commit waits: {first:?}");
    clock.advance(GRACE + 60_000);
    let report = janitor_now.run(STEP_BUDGET).await.unwrap();
    assert!(report.gc.orphans_deleted >= 1, "the blob not yet indexed was doomed: {report:?}");
    let gone = stores.1.read(&first[0].object, first[0].position, 1).await;
    assert!(matches!(gone, Err(StorageError::NotFound(_))), "and deleted: {gone:?}");
    gate.open();
    let acked = pending.await.unwrap().expect("the publish is acknowledged");
    let written = blobs.puts();
    assert_eq!(written.len(), 2, "its blob was written anew: {written:?}");
    let (config, _) = reader.describe_topic(&topic).await.unwrap();
    let item = stores.0.get(&layout::segment_key(config.id, 0, acked[0].offset)).await.unwrap().expect("indexed");
    let (segment, _) = layout::decode_segment_item(&item.value).unwrap();
    assert_eq!(segment.object, written[1].object, "indexed in the new object");
    assert_ne!(segment.object, first[0].object);
    for _ in 0..3 {
        clock.advance(GRACE + 60_000);
        janitor_now.run(STEP_BUDGET).await.unwrap();
    }
    let values: Vec<Bytes> = replay(&reader, &topic, 0, 0).await.unwrap().into_iter().map(|(_, v)| v).collect();
    assert_eq!(values, vec![Bytes::from("landed late"), Bytes::from("written anew")]);
}

pub async fn given_deleted_topic_then_its_objects_are_collected_and_objects_shared_with_live_topics_stay(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let clock = Arc::new(ManualClock::new(real_now()));
    let stores = backend.open_with(clock.clone()).await;
    let log = blobs_log_at(stores.clone(), &clock);
    let (gone, kept) = (unique_topic("gone"), unique_topic("kept"));
    let spec = TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None };
    log.create_topic(&gone, spec).await.unwrap();
    log.create_topic(&kept, spec).await.unwrap();
    // Concurrent publishes to both topics share blobs (one group commit).
    let mut tasks = Vec::new();
    for i in 0..40u32 {
        let (log, topic) = (log.clone(), if i % 2 == 0 { gone.clone() } else { kept.clone() });
        tasks.push(tokio::spawn(async move {
            log.publish(&topic, vec![event(format!("{i}"), i % 4 / 2, None)], None).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let objects_of = |topic: &str| {
        let (store, topic, log) = (stores.0.clone(), topic.to_owned(), log.clone());
        async move {
            let config = log.describe_topic(&topic).await.unwrap().0.id;
            let mut objects = Vec::new();
            for p in 0..2 {
                let page = store.query(&Query::all(layout::segments_pk(config, p), 1000)).await.unwrap();
                for item in page.items {
                    let (seg, _) = layout::decode_segment_item(&item.value).unwrap();
                    objects.push(seg.object);
                }
            }
            objects
        }
    };
    // And publishes to the deleted topic alone, from another process: objects only it needs
    // (on the embedded backend a process appends to one blob file, so the objects above are
    // all shared).
    let alone = blobs_log_at(backend.open_with(clock.clone()).await, &clock);
    for i in 0..4 {
        alone.publish(&gone, vec![event(format!("alone {i}"), i % 2, None)], None).await.unwrap();
    }
    drop(alone);
    let doomed_objects = objects_of(&gone).await;
    let kept_before = replay(&log, &kept, 0, 0).await.unwrap().len() + replay(&log, &kept, 1, 0).await.unwrap().len();
    log.delete_topic(&gone).await.unwrap();
    let config = JanitorConfig { grace_ms: 60_000, ..retention_only() };
    let janitor = janitor(&stores, &clock, config);
    janitor.run(STEP_BUDGET).await.unwrap();
    clock.advance(120_000);
    janitor.run(STEP_BUDGET).await.unwrap();
    let kept_objects = objects_of(&kept).await;
    let only_gone: Vec<&String> = doomed_objects.iter().filter(|o| !kept_objects.contains(o)).collect();
    assert!(!only_gone.is_empty(), "some objects held only the deleted topic: {doomed_objects:?}");
    for object in &doomed_objects {
        let live = kept_objects.contains(object);
        let read = stores.1.read(object, 0, 1).await;
        if live {
            assert!(read.is_ok(), "{object} also holds a live topic's segment: kept");
        } else {
            assert!(matches!(read, Err(StorageError::NotFound(_))), "{object} held only the deleted topic: {read:?}");
        }
    }
    let kept_after = replay(&log, &kept, 0, 0).await.unwrap().len() + replay(&log, &kept, 1, 0).await.unwrap().len();
    assert_eq!(kept_after, kept_before);
}

pub async fn given_an_index_query_torn_by_a_swap_then_retention_stops_at_the_hole(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("torn");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None })
        .await
        .unwrap();
    // Offsets 0 and 4 are two hours old; 1..=3 are fresh and must stay.
    for at in [t0 - 2 * HOUR, t0, t0, t0, t0 - 2 * HOUR] {
        log.publish(&topic, vec![event("e", 0, Some(at))], None).await.unwrap();
    }
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    // A query that misses 1..=3, as one racing a compaction's swap on DynamoDB can.
    let torn = Scripted::new(stores.0.clone());
    torn.at_query(layout::segments_pk(config.id, 0), QueryAction::Hide { offsets: 1..4, skip: 0 });
    sluice_core::upkeep::retention::retain(
        torn.as_ref(),
        &config,
        0,
        t0,
        JanitorConfig::default().default_retention_ms,
    )
    .await
    .unwrap();
    assert_eq!(torn.pending(), 0, "the torn query happened");
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert_eq!(states[0].log_start_offset, 1, "only the old segment before the hole goes");
    let kept: Vec<u64> = replay(&log, &topic, 0, 1).await.unwrap().into_iter().map(|(o, _)| o).collect();
    assert_eq!(kept, vec![1, 2, 3, 4]);
}

pub async fn given_compacted_segments_then_offset_by_time_uses_the_time_index_and_answers_exactly(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("by-time");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    // Timestamps mostly growing, some out of order (a late event, a clock jump back).
    const N: i64 = 1000;
    let stamps: Vec<i64> = (0..N).map(|i| t0 + i * 1000 - if i % 37 == 5 { 90_000 } else { 0 }).collect();
    for (i, &at) in stamps.iter().enumerate() {
        log.publish(&topic, vec![event(format!("t{i}:{}", "z".repeat(200)), 0, Some(at))], None).await.unwrap();
    }
    // A small target, so merged segments settle and enter the time index.
    let config = JanitorConfig { compaction_target_bytes: 2 << 10, grace_ms: 0, ..retention_only() };
    let janitor = janitor(&stores, &clock, config);
    for _ in 0..20 {
        if janitor.run(STEP_BUDGET).await.unwrap().segments_merged == 0 {
            break;
        }
    }
    let counting = Scripted::new(stores.0.clone());
    let reader = log_at((counting.clone(), stores.1.clone()), &clock);
    for probe in [t0 - 200_000, t0 + 4_500, t0 + 41_000, t0 + 500_000, t0 + 960_500, t0 + 998_000, t0 + 999_000] {
        let expected = stamps.iter().position(|&at| at >= probe).map_or(N as u64, |o| o as u64);
        let before = counting.queries();
        let at = reader.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(probe)).await.unwrap();
        let queries = counting.queries() - before;
        assert_eq!(at, expected, "first offset at or after {probe}");
        assert!(queries <= 3, "offset by time made {queries} index queries (a walk of the partition would make more)");
    }
}

/// Offset by time walks the index past its first page. A page torn by a compaction's swap
/// (items missing at its start) must not make it answer a later offset: it re-asks from the
/// first offset it has not examined, as a replay does.
pub async fn given_a_later_index_page_torn_by_a_swap_then_offset_by_time_still_answers_exactly(backend: &dyn Backend) {
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("torn-time");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    // One event per segment, a second apart: the walk's second index page starts at 32.
    for i in 0..40 {
        log.publish(&topic, vec![event("e", 0, Some(t0 + i * 1000))], None).await.unwrap();
    }
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let torn = Scripted::new(stores.0.clone());
    // The walk's first query of the index is its first page; the next one loses 32..35.
    torn.at_query(layout::segments_pk(config.id, 0), QueryAction::Hide { offsets: 32..35, skip: 1 });
    let reader = log_at((torn.clone(), stores.1.clone()), &clock);
    let at = reader.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(t0 + 33_000)).await.unwrap();
    assert_eq!(torn.pending(), 0, "the torn query happened");
    assert_eq!(at, 33, "the first event at or after the time, not one past the torn items");
}

/// One janitor compacts a topic and indexes its settled segments by time while another
/// deletes and purges the topic: the first must not re-create the time index cursor or the
/// upkeep record that the purge already removed (nothing would ever remove them again).
pub async fn given_a_topic_purged_during_a_janitor_pass_then_the_pass_leaves_none_of_its_items(backend: &dyn Backend) {
    use crate::faults::{Action, Scripted};

    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("purged-mid-pass");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..40 {
        log.publish(&topic, vec![event(format!("e{i}:{}", "z".repeat(200)), 0, Some(t0 + i))], None).await.unwrap();
    }
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let script = Scripted::new(stores.0.clone());
    let rival = {
        let (log, store, topic) = (log.clone(), stores.0.clone(), topic.clone());
        Box::pin(async move {
            log.delete_topic(&topic).await.unwrap();
            for _ in 0..100 {
                if !sluice_core::upkeep::step(store.as_ref(), STEP_BUDGET, t0).await.unwrap().more {
                    break;
                }
            }
        })
    };
    let cursors = sluice_core::log::timeindex::cursors_pk(config.id);
    script.at(move |ops| ops.iter().any(|op| op.key().pk == cursors), Action::Before(rival));
    let config_small = JanitorConfig { compaction_target_bytes: 2 << 10, grace_ms: 0, ..retention_only() };
    let racing = Janitor::new(script.clone(), stores.1.clone(), clock.clone(), config_small);
    racing.run(STEP_BUDGET).await.unwrap();
    assert_eq!(script.pending(), 0, "the purge ran during the pass");
    let store = stores.0.clone();
    let cursors = store.query(&Query::all(sluice_core::log::timeindex::cursors_pk(config.id), 10)).await.unwrap();
    let entries = store.query(&Query::all(sluice_core::log::timeindex::entries_pk(config.id, 0), 10)).await.unwrap();
    assert!(cursors.items.is_empty() && entries.items.is_empty(), "time index items of a purged topic were re-created");
    assert!(store.get(&layout::upkeep_record_key(config.id)).await.unwrap().is_none(), "upkeep record re-created");
}

/// `run_until` (the janitor function's loop) steps until its deadline by the janitor's clock,
/// and no further; a later run resumes and finishes.
pub async fn given_a_deadline_when_the_janitor_runs_until_it_then_it_stops_there_and_the_next_run_finishes(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("run-until");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..20 {
        log.publish(&topic, vec![event(format!("e{i}"), 0, Some(t0 + i))], None).await.unwrap();
    }
    log.delete_topic(&topic).await.unwrap();
    let janitor = janitor(&stores, &clock, retention_only());
    // The deadline has come: one step (its purge takes 3 of the 20 index items), then it stops.
    let first = janitor.run_until(t0, 3).await.unwrap();
    assert!(first.more(), "one step cannot purge 20 items 3 at a time: {first:?}");
    assert!(first.purge.items_deleted <= 3, "{first:?}");
    // A later run with time left (the clock stands still) goes on until nothing is left.
    let rest = janitor.run_until(t0 + 60_000, 3).await.unwrap();
    assert!(!rest.more(), "{rest:?}");
    assert!(
        first.purge.items_deleted + rest.purge.items_deleted >= 21,
        "20 index items and a head: {first:?} {rest:?}"
    );
}

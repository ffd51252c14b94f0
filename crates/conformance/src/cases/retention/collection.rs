//! The collector: orphan blobs and a deleted topic's objects.

use std::sync::Arc;

use bytes::Bytes;
use sluice_core::layout;
use sluice_core::ports::state::Query;
use sluice_core::upkeep::{Janitor, JanitorConfig, STEP_BUDGET};
use sluice_core::{Log, ManualClock, StorageError, TopicSpec};

use super::fixtures::*;
use crate::cases::support::faults::{Gate, Scripted, ScriptedObjects};
use crate::{unique_topic, Backend, Stores};

/// How long the collector leaves an unindexed blob alone.
const GRACE: i64 = 10 * 60 * 1000;

pub async fn given_orphan_blob_then_collected_after_the_grace_period_and_never_a_committed_one(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
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
    written_anew_after_its_blob_was_doomed(backend, &stores, &clock, &janitor_now, (&reader, &topic)).await;
}

/// The other order: the collector dooms a blob whose commit waits at a gate; the commit then
/// writes it anew, and both events replay.
async fn written_anew_after_its_blob_was_doomed(
    backend: &dyn Backend,
    stores: &Stores,
    clock: &Arc<ManualClock>,
    janitor_now: &Janitor,
    (reader, topic): (&Log, &str),
) {
    // The blob goes to an object that holds nothing indexed (on the embedded backend, where a
    // process appends its blobs to one file, the file of another process), or the collector
    // would leave it alone for the segment beside it.
    let other = backend.open_with(clock.clone()).await;
    let gate = Arc::new(Gate::default());
    let gated = Scripted::new(other.0);
    gated.gate(gate.clone());
    let blobs = ScriptedObjects::new(other.1);
    let publisher = blobs_log_at((gated, blobs.clone()), clock);
    gate.close();
    let pending = {
        let (publisher, topic) = (publisher.clone(), topic.to_owned());
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
    let (config, _) = reader.describe_topic(topic).await.unwrap();
    let item =
        stores.0.get(&sluice_core::keys::segment_key(config.id, 0, acked[0].offset)).await.unwrap().expect("indexed");
    let (segment, _) = layout::decode_segment_item(&item.value).unwrap();
    assert_eq!(segment.object, written[1].object, "indexed in the new object");
    assert_ne!(segment.object, first[0].object);
    for _ in 0..3 {
        clock.advance(GRACE + 60_000);
        janitor_now.run(STEP_BUDGET).await.unwrap();
    }
    let values: Vec<Bytes> = replay(reader, topic, 0, 0).await.unwrap().into_iter().map(|(_, v)| v).collect();
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
                let page = store.query(&Query::all(sluice_core::keys::segments_pk(config, p), 1000)).await.unwrap();
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

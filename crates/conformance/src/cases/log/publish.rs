//! Publishing: stale caches and heads, partition fan-out, idempotency keys, concurrent
//! publishers.

use std::sync::Arc;

use sluice_core::Code;
use std::time::Duration;

use bytes::Bytes;
use sluice_core::layout;
use sluice_core::ports::state::{Key, WriteOp};
use sluice_core::{Error, IdempotencyKey, Log, ManualClock, NewEvent, Position, ReadRequest};

use super::fixtures::*;
use crate::{unique_topic, Backend};

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
    let head_key = sluice_core::keys::head_key(id, 0);
    let item = store.get(&head_key).await.unwrap().expect("head");
    let (mut head, tail) = layout::decode_head(&item.value).unwrap();
    assert_eq!(head.next, 5);
    head.start = 4;
    let value = layout::encode_head(&head, tail.as_ref());
    store.write(vec![WriteOp::replace(head_key, value, Some(item.version))]).await.unwrap();
    let below: Vec<Key> = [0u64, 2, 3].iter().map(|&base| sluice_core::keys::segment_key(id, 0, base)).collect();
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
                // A guard against a hang, not a latency bound: on a serialized emulator and a
                // loaded machine one publish losing race after race once took over 60 s.
                let positions = tokio::time::timeout(Duration::from_secs(300), log.publish(&topic, batch, None))
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

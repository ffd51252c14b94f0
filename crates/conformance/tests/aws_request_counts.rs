//! AWS requests per operation, counted by the adapters' own counters while the
//! real log publishes and replays against moto. docs/AWS.md's cost model is
//! computed from the table this test prints (`cargo test --test
//! aws_request_counts -- --nocapture`); the assertions pin the counts that the
//! commit protocol promises, so a change that adds requests fails here.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use sluice_aws::{DynamoMetaStore, S3ObjectStore};
use sluice_conformance::moto::{adapters, moto};
use sluice_conformance::unique_topic;
use sluice_core::{IdempotencyKey, Log, LogConfig, NewEvent, ReadRequest, SystemClock, TopicSpec};

type Counts = BTreeMap<&'static str, u64>;

fn all_counts(meta: &DynamoMetaStore, objects: &S3ObjectStore) -> Counts {
    let mut counts = meta.requests().snapshot();
    counts.extend(objects.requests().snapshot());
    counts
}

fn delta(after: &Counts, before: &Counts) -> Counts {
    after.iter().map(|(op, n)| (*op, n - before.get(op).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect()
}

/// A 1 KiB JSON-free value, on partition 0.
fn kib_event(i: usize) -> NewEvent {
    let mut value = format!("event-{i:06}-").into_bytes();
    value.resize(1024, b'x');
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: Bytes::from(value),
        value_is_json: false,
        timestamp_ms: None,
        partition: Some(0),
    }
}

fn per_request(label: &str, counts: &Counts, requests: usize) {
    let per: Vec<String> = counts.iter().map(|(op, n)| format!("{op}={:.2}", *n as f64 / requests as f64)).collect();
    println!("COUNTS {label}: {requests} requests; per request: {}", per.join(" "));
}

#[tokio::test]
async fn requests_per_publish_and_replay_are_what_the_cost_model_says() {
    let (meta, objects) = adapters(&moto().settings).await;
    // A long topic cache, as a warm Lambda instance has between config changes; the cold
    // reads are counted separately below.
    let config = LogConfig { topic_cache_ttl: std::time::Duration::from_secs(600), ..LogConfig::default() };
    let log = Log::new(meta.clone(), objects.clone(), Arc::new(SystemClock), config);
    let topic = unique_topic("costs");
    let spec = TopicSpec { partitions: 4, retention_ms: None, retention_bytes: None };

    let before = all_counts(&meta, &objects);
    log.create_topic(&topic, spec).await.unwrap();
    let create = delta(&all_counts(&meta, &objects), &before);
    per_request("create topic", &create, 1);
    assert_eq!(create, Counts::from([("dynamodb:PutItem", 1)]));

    // The first publish of a fresh instance reads the topic and the partition's head; the head
    // of an empty partition costs one more topic read (to tell empty from missing).
    let before = all_counts(&meta, &objects);
    log.publish(&topic, vec![kib_event(0)], None).await.unwrap();
    let cold = delta(&all_counts(&meta, &objects), &before);
    per_request("cold publish, batch 1", &cold, 1);
    assert_eq!(
        cold,
        Counts::from([("dynamodb:GetItem", 2), ("dynamodb:PutItem", 1), ("dynamodb:Query", 1), ("s3:PutObject", 1)])
    );

    const WARM: usize = 50;
    let before = all_counts(&meta, &objects);
    for i in 0..WARM {
        log.publish(&topic, vec![kib_event(i)], None).await.unwrap();
    }
    let batch1 = delta(&all_counts(&meta, &objects), &before);
    per_request("warm publish, batch 1", &batch1, WARM);
    assert_eq!(batch1, Counts::from([("dynamodb:PutItem", WARM as u64), ("s3:PutObject", WARM as u64)]));

    const BATCHES: usize = 5;
    let before = all_counts(&meta, &objects);
    for b in 0..BATCHES {
        log.publish(&topic, (0..100).map(|i| kib_event(b * 100 + i)).collect(), None).await.unwrap();
    }
    let batch100 = delta(&all_counts(&meta, &objects), &before);
    per_request("warm publish, batch 100", &batch100, BATCHES);
    assert_eq!(batch100, Counts::from([("dynamodb:PutItem", BATCHES as u64), ("s3:PutObject", BATCHES as u64)]));

    let before = all_counts(&meta, &objects);
    for i in 0..10 {
        let key = IdempotencyKey { key: format!("k{i}"), fingerprint: vec![1; 32] };
        log.publish(&topic, vec![kib_event(i)], Some(key)).await.unwrap();
    }
    let idempotent = delta(&all_counts(&meta, &objects), &before);
    per_request("warm publish with Idempotency-Key, batch 1", &idempotent, 10);
    assert_eq!(
        idempotent,
        Counts::from([("dynamodb:GetItem", 10), ("dynamodb:TransactWriteItems", 10), ("s3:PutObject", 10)])
    );

    // Replay: 100 events written as one segment, then 50 written one per segment.
    let read = |offset: u64, max_events: usize| ReadRequest {
        topic: topic.clone(),
        partition: 0,
        offset,
        max_events,
        max_bytes: 6 << 20,
        wait_ms: 0,
    };
    let before = all_counts(&meta, &objects);
    let page = log.read(&read(1 + WARM as u64, 100)).await.unwrap();
    assert_eq!(page.events.len(), 100);
    let replay100 = delta(&all_counts(&meta, &objects), &before);
    per_request("replay 100 events from one batch-100 segment", &replay100, 1);
    assert_eq!(replay100, Counts::from([("dynamodb:Query", 2), ("s3:GetObject", 1)]));

    let before = all_counts(&meta, &objects);
    let page = log.read(&read(1, WARM)).await.unwrap();
    assert_eq!(page.events.len(), WARM);
    let replay_singles = delta(&all_counts(&meta, &objects), &before);
    per_request("replay 50 events stored one per segment", &replay_singles, 1);
    assert_eq!(replay_singles.get("s3:GetObject"), Some(&(WARM as u64)), "one ranged GET per segment");
}

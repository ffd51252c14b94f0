//! Where a subscription starts: earliest, a timestamp, latest, named offsets.

use std::collections::{BTreeMap, BTreeSet};

use sluice_core::queues::{Message, Queues, StartAt};

use crate::cases::support::queues::*;
use crate::{unique_topic, Backend};

/// Receives and acks until a receive comes back empty; every message must be new (count 1).
async fn drain(queues: &Queues, topic: &str, sub: &str) -> Vec<Message> {
    let mut all = Vec::new();
    for _ in 0..1000 {
        let got = receive(queues, topic, sub, 100).await;
        if got.is_empty() {
            return all;
        }
        let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
        let results = queues.ack(topic, sub, &receipts).await.expect("ack");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert!(got.iter().all(|m| m.receive_count == 1), "redelivered with the clock stopped");
        all.extend(got);
    }
    panic!("the queue never ran dry");
}

pub async fn given_start_earliest_after_1000_events_on_four_partitions_then_each_received_exactly_once(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "earliest", 4).await;
    let events = (0..1000).map(|i| event(format!("m{i}"), Some(i % 4), None, None)).collect();
    let published: BTreeSet<(u32, u64)> =
        publish(&log, &topic, events).await.into_iter().map(|p| (p.partition, p.offset)).collect();
    let name = unique_topic("sub");
    let (sub, _) = queues.create(&topic, &name, spec(StartAt::Earliest)).await.unwrap();
    assert_eq!(sub.start_offsets, vec![0, 0, 0, 0]);
    let got = positions(&drain(&queues, &topic, &name).await);
    let unique: BTreeSet<(u32, u64)> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "received a message twice");
    assert_eq!(unique, published, "all 1,000, from the start of every partition");
    assert_eq!(backlog(&queues, &topic, &name).await, [0; 4]);
}

pub async fn given_start_timestamp_then_exactly_the_events_at_or_after_it_are_received(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "since", 2).await;
    let base = START_MS - 60_000;
    let mut expected = BTreeSet::new();
    for i in 0..10i64 {
        // Partition 0 every 10 ms, partition 1 every 20 ms; the start is base + 50 ms.
        let p0 = publish_at(&log, &topic, 0, &format!("a{i}"), base + 10 * i).await;
        let p1 = publish_at(&log, &topic, 1, &format!("b{i}"), base + 20 * i).await;
        if 10 * i >= 50 {
            expected.insert(p0);
        }
        if 20 * i >= 50 {
            expected.insert(p1);
        }
    }
    let name = unique_topic("sub");
    let (sub, _) = queues.create(&topic, &name, spec(StartAt::Timestamp(base + 50))).await.unwrap();
    assert_eq!(sub.start_offsets, vec![5, 3], "the first event stamped at or after the start, per partition");
    let got: BTreeSet<(u32, u64)> = positions(&drain(&queues, &topic, &name).await).into_iter().collect();
    assert_eq!(got, expected, "exactly the events at or after the timestamp (the one stamped at it included)");
}

pub async fn given_start_latest_then_only_events_published_after_creation_are_received(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "latest", 2).await;
    publish(&log, &topic, (0..6).map(|i| event(format!("old{i}"), Some(i % 2), None, None)).collect()).await;
    let name = unique_topic("sub");
    let (sub, _) = queues.create(&topic, &name, spec(StartAt::Latest)).await.unwrap();
    assert_eq!(sub.start_offsets, vec![3, 3]);
    assert_nothing(&queues, &topic, &name, "events from before a latest subscription").await;
    let later: BTreeSet<(u32, u64)> =
        publish(&log, &topic, (0..3).map(|i| event(format!("new{i}"), Some(i % 2), None, None)).collect())
            .await
            .into_iter()
            .map(|p| (p.partition, p.offset))
            .collect();
    let got: BTreeSet<(u32, u64)> = positions(&drain(&queues, &topic, &name).await).into_iter().collect();
    assert_eq!(got, later, "only the later events");
}

pub async fn given_start_offsets_then_named_partitions_start_there_and_others_at_latest(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "offsets", 3).await;
    publish(&log, &topic, (0..30).map(|i| event(format!("e{i}"), Some(i % 3), None, None)).collect()).await;
    let name = unique_topic("sub");
    let start = StartAt::Offsets(BTreeMap::from([(0, 7), (1, 0)]));
    let (sub, _) = queues.create(&topic, &name, spec(start)).await.unwrap();
    assert_eq!(sub.start_offsets, vec![7, 0, 10], "partition 2, not named, starts at latest");
    let got: BTreeSet<(u32, u64)> = positions(&drain(&queues, &topic, &name).await).into_iter().collect();
    let expected: BTreeSet<(u32, u64)> = (7..10).map(|o| (0, o)).chain((0..10).map(|o| (1, o))).collect();
    assert_eq!(got, expected);
    let later = publish_at(&log, &topic, 2, "late", START_MS).await;
    assert_eq!(at(&receive_one(&queues, &topic, &name).await), later, "partition 2 delivers what comes after");
}

//! The checks of a reopened disk image: offsets dense to each head, every acknowledged
//! event where it was acknowledged, each publish whole or not at all, publishing going on.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::{Clock, Log, LogConfig, NewEvent, ObjectStore, PartitionState, ReadRequest};

use crate::{origin, PublishId, Run, Tally, PARTITIONS, TOPIC};

/// Each visible event's publish and index there, by partition and offset.
type Visible = HashMap<(u32, u64), (PublishId, usize)>;

pub(crate) async fn check(
    image: &Path,
    clock: Arc<dyn Clock>,
    run: &Run,
    answer_lost: bool,
    tally: &mut Tally,
    what: &str,
) {
    let (state, objects) = sluice_local::open(image, clock.clone()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let log = Log::new(state, objects.clone(), clock, LogConfig::default());
    let (_, partitions) = log.describe_topic(TOPIC).await.unwrap_or_else(|e| panic!("{what}: the topic: {e}"));
    assert_eq!(partitions.len(), PARTITIONS as usize, "{what}");
    let (visible, heads) = read_visible(&log, &partitions, run, tally, what).await;
    acked_events_stay_put(run, &visible, tally, what);
    publishes_are_whole(run, &visible, answer_lost, tally, what);
    // Torn tails and strays do not trouble a listing, and publishing goes on from each head.
    objects.list(None, 100_000).await.unwrap_or_else(|e| panic!("{what}: list: {e}"));
    publishing_goes_on(&log, heads, what).await;
}

/// Everything visible, read from 0 to each head: dense, and nothing past the head. Answers
/// it with the heads.
async fn read_visible(
    log: &Log,
    partitions: &[PartitionState],
    run: &Run,
    tally: &mut Tally,
    what: &str,
) -> (Visible, Vec<u64>) {
    let mut visible: Visible = HashMap::new();
    let mut heads = Vec::new();
    for state in partitions {
        let (p, head) = (state.partition, state.high_watermark);
        assert_eq!(state.log_start_offset, 0, "{what}: partition {p}");
        let mut next = 0;
        loop {
            let req = ReadRequest {
                topic: TOPIC.into(),
                partition: p,
                offset: next,
                max_events: 1000,
                max_bytes: 4 << 20,
                wait_ms: 0,
            };
            let page = log.read(&req).await.unwrap_or_else(|e| panic!("{what}: read {p}/{next}: {e} ({e:?})"));
            assert_eq!(page.high_watermark, head, "{what}: partition {p}");
            if next >= head {
                assert!(page.events.is_empty(), "{what}: partition {p} reads past its head {head}");
                break;
            }
            assert!(!page.events.is_empty(), "{what}: nothing at {p}/{next}, below the head {head}");
            for e in page.events {
                assert_eq!(e.offset, next, "{what}: partition {p} is not dense");
                let (id, i) = origin(&e.record.value);
                let sent = run.attempts.get(&id).and_then(|a| a.get(i));
                let sent = sent.unwrap_or_else(|| panic!("{what}: {p}/{next} holds an event nobody sent"));
                assert_eq!(e.record.value, sent.value, "{what}: {p}/{next}: value");
                assert_eq!(e.record.key, sent.key, "{what}: {p}/{next}: key");
                assert!(visible.insert((p, next), (id, i)).is_none());
                next += 1;
                tally.events_read += 1;
            }
        }
        heads.push(head);
    }
    (visible, heads)
}

/// Every acknowledged event where it was acknowledged.
fn acked_events_stay_put(run: &Run, visible: &Visible, tally: &mut Tally, what: &str) {
    for (id, positions) in &run.acks {
        for (i, pos) in positions.iter().enumerate() {
            assert_eq!(
                visible.get(&(pos.partition, pos.offset)),
                Some(&(*id, i)),
                "{what}: acknowledged event {i} of publish {id:?} lost at {}/{}",
                pos.partition,
                pos.offset
            );
            tally.acked_events_checked += 1;
        }
    }
}

/// Each publish whole or not at all, each partition's share in request order.
fn publishes_are_whole(run: &Run, visible: &Visible, answer_lost: bool, tally: &mut Tally, what: &str) {
    let mut by_publish: HashMap<PublishId, Vec<(usize, u32, u64)>> = HashMap::new();
    for (&(p, offset), &(id, i)) in visible {
        by_publish.entry(id).or_default().push((i, p, offset));
    }
    for (id, mut events) in by_publish {
        events.sort_unstable();
        let sent = run.attempts[&id].len();
        assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), (0..sent).collect::<Vec<_>>(), "{what}: {id:?}");
        for (a, b) in events.iter().zip(&events[1..]) {
            assert!(a.1 != b.1 || a.2 < b.2, "{what}: publish {id:?} out of order in partition {}", a.1);
        }
        if !run.acks.contains_key(&id) {
            assert!(answer_lost, "{what}: publish {id:?} is visible but was never acknowledged");
            tally.unacked_visible_publishes += 1;
        }
    }
}

/// Publishing goes on densely from each head, and reads back.
async fn publishing_goes_on(log: &Log, heads: Vec<u64>, what: &str) {
    for (p, head) in (0..PARTITIONS).zip(heads) {
        let events: Vec<NewEvent> = (0..3)
            .map(|i| NewEvent {
                key: None,
                headers: Vec::new(),
                value: Bytes::from(format!("after/{p}/{i}")),
                value_is_json: false,
                timestamp_ms: None,
                partition: Some(p),
            })
            .collect();
        let positions = log.publish(TOPIC, events, None).await.unwrap_or_else(|e| panic!("{what}: publish: {e}"));
        let offsets: Vec<u64> = positions.iter().map(|pos| pos.offset).collect();
        assert_eq!(offsets, [head, head + 1, head + 2], "{what}: partition {p} after the reopen");
        let req = ReadRequest {
            topic: TOPIC.into(),
            partition: p,
            offset: head,
            max_events: 10,
            max_bytes: 1 << 20,
            wait_ms: 0,
        };
        let page = log.read(&req).await.unwrap_or_else(|e| panic!("{what}: read after the reopen: {e}"));
        let values: Vec<Bytes> = page.events.into_iter().map(|e| e.record.value).collect();
        assert_eq!(values, (0..3).map(|i| Bytes::from(format!("after/{p}/{i}"))).collect::<Vec<_>>(), "{what}");
    }
}

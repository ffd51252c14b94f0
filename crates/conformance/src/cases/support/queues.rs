//! Work queue helpers the queue, push and lost-answer cases share: a log and its
//! queues on a backend, publishing, receiving and settling in one call.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_core::queues::{Backlog, Message, Queues, ReceiptError, ReceiveRequest, StartAt, SubscriptionSpec};
use sluice_core::{Clock, Log, ManualClock, NewEvent, Position, TopicSpec};

use crate::{unique_topic, Backend};

pub(crate) const START_MS: i64 = 1_800_000_000_000;
/// How long a test waits in real time for something the fake clock has already made due.
pub(crate) const REAL_PATIENCE: Duration = Duration::from_secs(30);

/// `embedded` scaled to the backend: the same on the embedded backend, less on moto ([`Backend::large_count`]).
pub(crate) fn scaled(backend: &dyn Backend, embedded: usize) -> usize {
    (embedded * backend.large_count() / 100_000).max(1)
}

/// A log and its queues on `backend`, reading time from `clock`.
pub(crate) async fn queues_on(backend: &dyn Backend, clock: Arc<dyn Clock>) -> (Log, Queues) {
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(store, objects, clock, crate::log_config());
    let queues = if backend.caches_subscriptions() {
        Queues::caching_subscriptions(log.clone())
    } else {
        Queues::new(log.clone())
    };
    (log, queues)
}

pub(crate) async fn manual(backend: &dyn Backend) -> (Arc<ManualClock>, Log, Queues) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    (clock, log, queues)
}

pub(crate) async fn new_topic(log: &Log, prefix: &str, partitions: u32) -> String {
    let topic = unique_topic(prefix);
    log.create_topic(&topic, TopicSpec { partitions, retention_ms: None, retention_bytes: None }).await.unwrap();
    topic
}

pub(crate) fn spec(start: StartAt) -> SubscriptionSpec {
    SubscriptionSpec { start, ..SubscriptionSpec::default() }
}

pub(crate) async fn subscribe(queues: &Queues, topic: &str, spec: SubscriptionSpec) -> String {
    let name = unique_topic("sub");
    let (_, created) = queues.create(topic, &name, spec).await.expect("create subscription");
    assert!(created);
    name
}

pub(crate) fn event(value: String, partition: Option<u32>, key: Option<String>, timestamp_ms: Option<i64>) -> NewEvent {
    NewEvent {
        key: key.map(Bytes::from),
        headers: Vec::new(),
        value: Bytes::from(value),
        value_is_json: false,
        timestamp_ms,
        partition,
    }
}

/// Publishes `events`, a thousand per request, and answers where each landed.
pub(crate) async fn publish(log: &Log, topic: &str, events: Vec<NewEvent>) -> Vec<Position> {
    let mut positions = Vec::with_capacity(events.len());
    let mut events = events.into_iter().peekable();
    while events.peek().is_some() {
        let chunk: Vec<NewEvent> = events.by_ref().take(1000).collect();
        positions.extend(log.publish(topic, chunk, None).await.expect("publish"));
    }
    positions
}

/// Publishes one event to `partition` with an explicit timestamp.
pub(crate) async fn publish_at(log: &Log, topic: &str, partition: u32, value: &str, timestamp_ms: i64) -> (u32, u64) {
    let at = publish(log, topic, vec![event(value.to_owned(), Some(partition), None, Some(timestamp_ms))]).await;
    (at[0].partition, at[0].offset)
}

pub(crate) fn request(max_messages: usize) -> ReceiveRequest {
    ReceiveRequest { max_messages, wait_ms: 0, visibility_timeout_ms: None }
}

pub(crate) async fn receive(queues: &Queues, topic: &str, sub: &str, max: usize) -> Vec<Message> {
    let got = queues.receive(topic, sub, &request(max)).await.expect("receive");
    assert!(got.len() <= max, "asked for at most {max}, got {}", got.len());
    got
}

/// The one message a receive must return now.
pub(crate) async fn receive_one(queues: &Queues, topic: &str, sub: &str) -> Message {
    let mut got = receive(queues, topic, sub, 10).await;
    assert_eq!(got.len(), 1, "exactly one message expected: {:?}", positions(&got));
    got.remove(0)
}

pub(crate) async fn assert_nothing(queues: &Queues, topic: &str, sub: &str, why: &str) {
    let got = receive(queues, topic, sub, 10).await;
    assert!(got.is_empty(), "{why}: received {:?}", got.iter().map(|m| (at(m), m.receive_count)).collect::<Vec<_>>());
}

pub(crate) fn at(m: &Message) -> (u32, u64) {
    (m.event.partition, m.event.offset)
}

pub(crate) fn positions(messages: &[Message]) -> Vec<(u32, u64)> {
    messages.iter().map(at).collect()
}

pub(crate) fn value(m: &Message) -> String {
    String::from_utf8_lossy(&m.event.record.value).into_owned()
}

pub(crate) async fn ack(queues: &Queues, topic: &str, sub: &str, receipt: &str) -> Result<(), ReceiptError> {
    let mut results = queues.ack(topic, sub, &[receipt.to_owned()]).await.expect("ack");
    assert_eq!(results.len(), 1, "one result per receipt");
    results.remove(0)
}

pub(crate) async fn nack(
    queues: &Queues,
    topic: &str,
    sub: &str,
    receipt: &str,
    delay_ms: u64,
) -> Result<(), ReceiptError> {
    let mut results = queues.nack(topic, sub, &[receipt.to_owned()], delay_ms).await.expect("nack");
    assert_eq!(results.len(), 1, "one result per receipt");
    results.remove(0)
}

pub(crate) async fn change_visibility(
    queues: &Queues,
    topic: &str,
    sub: &str,
    receipt: &str,
    ms: u64,
) -> Result<String, ReceiptError> {
    let mut results = queues.change_visibility(topic, sub, &[receipt.to_owned()], ms).await.expect("visibility");
    assert_eq!(results.len(), 1, "one result per receipt");
    // A release (0) answers no receipt: nobody holds the message.
    results.remove(0).map(|renewed| renewed.unwrap_or_default())
}

/// visible, in flight, delayed, dead.
pub(crate) fn counts(b: &Backlog) -> [u64; 4] {
    [b.visible, b.in_flight, b.delayed, b.dead]
}

pub(crate) async fn backlog(queues: &Queues, topic: &str, sub: &str) -> [u64; 4] {
    counts(&queues.describe(topic, sub).await.expect("describe").backlog)
}

/// Every dead letter of a subscription, page by page.
pub(crate) async fn all_dead_letters(queues: &Queues, topic: &str, sub: &str) -> Vec<sluice_core::queues::DeadLetter> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..1000 {
        let page = queues.dead_letters(topic, sub, after.as_deref(), 50).await.expect("dead letters");
        assert!(page.entries.len() <= 50);
        all.extend(page.entries);
        match page.next {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
    panic!("dead letter pages never ended");
}

/// A SplitMix64 step: deterministic "random" choices from what a message is.
pub(crate) fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) fn dice(m: &Message) -> u64 {
    mix(((m.event.partition as u64) << 48) ^ (m.event.offset << 8) ^ m.receive_count as u64)
}

//! Work queue conformance cases, on every backend, with a [`ManualClock`]:
//! visibility timeouts, delays and backoffs pass by advancing it, never by sleeping.
//! Where a case runs concurrent workers, the clock stays put while they run, so any
//! second delivery of a message within a case's run is a bug, not a timeout.

use sluice_core::Code;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sluice_core::clock::Sleep;
use sluice_core::queues::{
    Backlog, Backoff, Message, Ordering, Queues, ReceiptError, ReceiveRequest, StartAt, SubscriptionSpec, MAX_DELAY_MS,
    MAX_RECEIVE_COUNT, MAX_VISIBILITY_TIMEOUT_MS,
};
use sluice_core::{Clock, Error, Log, ManualClock, NewEvent, Position, TopicSpec};
use tokio::sync::{watch, Notify};

use crate::group_cases::advance_log_start;
pub use crate::queue_cache_cases::*;
pub use crate::queue_fault_cases::*;
pub use crate::queue_riding_cases::*;
use crate::{unique_topic, Backend};

/// Generates one `#[tokio::test]` per queue case; `$backend` is an async expression yielding a [`Backend`].
#[macro_export]
macro_rules! queue_conformance_suite {
    ($backend:expr) => {
        $crate::queue_conformance_suite!(@cases $backend;
            given_a_worker_that_never_acks_then_redelivered_after_the_timeout_extended_by_a_visibility_change_and_released_by_nack,
            given_a_poison_message_then_dead_lettered_once_after_max_receives_and_redrive_delivers_it_fresh,
            given_dead_letters_then_listed_in_pages_deleted_one_by_one_redriven_partly_and_purged,
            given_start_earliest_after_1000_events_on_four_partitions_then_each_received_exactly_once,
            given_start_timestamp_then_exactly_the_events_at_or_after_it_are_received,
            given_start_latest_then_only_events_published_after_creation_are_received,
            given_start_offsets_then_named_partitions_start_there_and_others_at_latest,
            given_delay_then_new_messages_visible_at_their_timestamp_plus_delay_and_not_before,
            given_out_of_order_timestamps_in_one_partition_when_delay_then_each_visible_at_its_own_time,
            given_an_event_stamped_in_the_future_then_the_events_after_it_are_not_held_behind_it,
            given_redelivery_backoff_then_the_nth_redelivery_waits_the_nth_step,
            given_create_twice_then_idempotent_with_same_settings_and_conflict_with_others_and_invalid_settings_refused,
            given_unknown_subscription_then_not_found_for_every_operation,
            given_tampered_or_foreign_receipts_then_invalid_and_nothing_changes,
            given_subscription_deleted_and_recreated_under_the_same_name_then_it_starts_fresh,
            given_a_deleted_subscription_and_a_deleted_topic_then_the_janitor_removes_every_queue_item,
            given_receive_applied_but_answer_lost_then_nobody_holds_it_until_the_timeout_and_it_comes_back_once,
            given_receive_failed_before_applying_then_the_message_is_still_visible,
            given_ack_applied_but_answer_lost_then_the_retry_is_stale_and_the_message_never_comes_back,
            given_long_poll_on_an_empty_queue_when_a_message_is_published_then_it_returns_the_message,
            given_long_poll_on_an_empty_queue_when_the_clock_passes_the_wait_then_it_returns_empty_not_before,
            given_long_poll_when_a_delayed_message_comes_due_then_it_returns_the_message,
            given_undelivered_messages_when_the_log_start_passes_them_then_counted_expired_never_delivered_and_the_rest_are,
            given_a_describe_whose_first_read_is_torn_then_its_counts_are_still_exact,
            given_a_keyed_receive_whose_read_misses_a_moved_lease_then_the_key_still_waits,
            given_retention_passing_a_receive_in_flight_then_it_answers_from_the_new_start,
            given_a_slow_receive_then_the_visibility_window_counts_from_its_write,
            given_receives_acks_nacks_and_visibility_changes_then_only_acks_and_nacks_are_deferred,
            given_a_stale_delete_after_the_subscription_was_re_created_then_the_new_one_stays,
            given_a_receive_racing_its_subscriptions_purge_then_no_item_is_left_behind,
            given_a_moved_lease_hidden_by_a_torn_read_then_its_receipt_still_acks,
            given_a_dead_message_not_yet_buried_when_the_dlq_is_purged_then_it_is_purged,
            given_a_receive_answering_after_a_window_ended_then_it_leaves_those_messages_out,
            given_a_cached_subscription_deleted_elsewhere_then_no_write_acts_on_it,
            given_a_cached_subscription_re_created_elsewhere_then_requests_go_to_the_new_one,
            given_a_cached_subscription_re_created_elsewhere_then_acks_riding_on_its_receive_are_invalid,
            given_a_cached_subscriptions_topic_deleted_elsewhere_then_no_write_acts_on_it,
            given_a_cached_subscription_deleted_elsewhere_then_an_empty_receive_finds_out_within_the_ttl,
            given_a_cached_subscription_re_created_elsewhere_as_push_then_a_client_cannot_receive,
            given_acks_riding_on_receives_then_stale_ones_refused_and_acked_messages_never_come_back,
            given_two_messages_of_a_lease_held_longer_to_the_same_time_then_each_settles_alone,
        );
        $crate::queue_conformance_suite!(@concurrent $backend;
            given_eight_workers_draining_a_queue_then_every_message_acked_exactly_once_and_backlog_ends_empty,
            given_ordering_by_key_under_eight_workers_with_nacks_then_one_in_flight_per_key_and_acked_in_offset_order,
            given_concurrent_receives_acks_and_nacks_then_backlog_counts_match_a_model_of_what_happened,
            given_eight_workers_acking_on_their_next_receive_then_every_message_acked_exactly_once,
            given_sixteen_workers_on_one_partition_then_no_ack_is_refused_for_contention,
        );
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::queue_cases::$case(&backend).await;
            }
        )+
    };
    (@concurrent $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let backend = $backend.await;
                $crate::queue_cases::$case(&backend).await;
            }
        )+
    };
}

pub(crate) const START_MS: i64 = 1_800_000_000_000;
/// How long a test waits in real time for something the fake clock has already made due.
const REAL_PATIENCE: Duration = Duration::from_secs(30);

/// `embedded` scaled to the backend: the same on the embedded backend, less on moto ([`Backend::large_count`]).
pub(crate) fn scaled(backend: &dyn Backend, embedded: usize) -> usize {
    (embedded * backend.large_count() / 100_000).max(1)
}

/// A log and its queues on `backend`, reading time from `clock`.
async fn queues_on(backend: &dyn Backend, clock: Arc<dyn Clock>) -> (Log, Queues) {
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
async fn receive_one(queues: &Queues, topic: &str, sub: &str) -> Message {
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

fn value(m: &Message) -> String {
    String::from_utf8_lossy(&m.event.record.value).into_owned()
}

pub(crate) async fn ack(queues: &Queues, topic: &str, sub: &str, receipt: &str) -> Result<(), ReceiptError> {
    let mut results = queues.ack(topic, sub, &[receipt.to_owned()]).await.expect("ack");
    assert_eq!(results.len(), 1, "one result per receipt");
    results.remove(0)
}

async fn nack(queues: &Queues, topic: &str, sub: &str, receipt: &str, delay_ms: u64) -> Result<(), ReceiptError> {
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
fn counts(b: &Backlog) -> [u64; 4] {
    [b.visible, b.in_flight, b.delayed, b.dead]
}

async fn backlog(queues: &Queues, topic: &str, sub: &str) -> [u64; 4] {
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

fn dice(m: &Message) -> u64 {
    mix(((m.event.partition as u64) << 48) ^ (m.event.offset << 8) ^ m.receive_count as u64)
}

/// A [`ManualClock`] that also counts the sleeps started on it, so a test can tell
/// that a long poll is waiting before it publishes or moves the clock.
pub(crate) struct WatchedClock {
    pub(crate) clock: ManualClock,
    sleeps: watch::Sender<u64>,
}

impl WatchedClock {
    pub(crate) fn new(now_ms: i64) -> Self {
        Self { clock: ManualClock::new(now_ms), sleeps: watch::Sender::new(0) }
    }

    pub(crate) fn sleeps(&self) -> u64 {
        *self.sleeps.borrow()
    }

    /// Resolves once more than `before` sleeps have been started.
    pub(crate) async fn slept_more_than(&self, before: u64) {
        let mut sleeps = self.sleeps.subscribe();
        tokio::time::timeout(REAL_PATIENCE, sleeps.wait_for(|n| *n > before))
            .await
            .expect("the receive never started waiting on the clock")
            .expect("clock alive");
    }
}

impl Clock for WatchedClock {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn sleep(&self, ms: u64) -> Sleep {
        self.sleeps.send_modify(|n| *n += 1);
        self.clock.sleep(ms)
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrent workers.

/// Eight workers, each receiving ten at a time and acking what it got, drain the queue.
/// The clock never moves, so no visibility timeout can run out: every message must be
/// delivered once, to one worker, and acked once.
pub async fn given_eight_workers_draining_a_queue_then_every_message_acked_exactly_once_and_backlog_ends_empty(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "drain", 4).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let total = scaled(backend, 10_000);
    let events = (0..total).map(|i| event(format!("m{i}"), Some(i as u32 % 4), None, None)).collect();
    let published: BTreeSet<(u32, u64)> =
        publish(&log, &topic, events).await.into_iter().map(|p| (p.partition, p.offset)).collect();
    assert_eq!(published.len(), total);

    let delivered = Arc::new(Mutex::new(HashMap::<(u32, u64), usize>::new()));
    let duplicates = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for w in 0..8usize {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        let (delivered, duplicates, acked, refused) =
            (delivered.clone(), duplicates.clone(), acked.clone(), refused.clone());
        workers.push(tokio::spawn(async move {
            let mut empty_in_a_row = 0;
            loop {
                let got = receive(&queues, &topic, &sub, 10).await;
                if got.is_empty() {
                    // Every message was handed out, or (a bug) some never is: stop either way.
                    if delivered.lock().unwrap().len() >= total || empty_in_a_row >= 500 {
                        return;
                    }
                    empty_in_a_row += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                empty_in_a_row = 0;
                {
                    let mut delivered = delivered.lock().unwrap();
                    for m in &got {
                        if let Some(other) = delivered.insert(at(m), w) {
                            duplicates.lock().unwrap().push((at(m), other, w, m.receive_count));
                        }
                    }
                }
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                let results = queues.ack(&topic, &sub, &receipts).await.expect("ack");
                assert_eq!(results.len(), got.len(), "one result per receipt");
                for (m, result) in got.iter().zip(results) {
                    match result {
                        Ok(()) => acked.lock().unwrap().push(at(m)),
                        Err(e) => refused.lock().unwrap().push((at(m), e)),
                    }
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }

    let duplicates = duplicates.lock().unwrap().clone();
    assert!(
        duplicates.is_empty(),
        "{} messages delivered twice with the clock stopped (position, first worker, second worker, receive_count): {:?}",
        duplicates.len(),
        &duplicates[..duplicates.len().min(10)]
    );
    let refused = refused.lock().unwrap().clone();
    assert!(
        refused.is_empty(),
        "acks of receipts within their visibility window refused: {:?}",
        &refused[..refused.len().min(10)]
    );
    let acked = acked.lock().unwrap().clone();
    let unique: BTreeSet<(u32, u64)> = acked.iter().copied().collect();
    assert_eq!(unique.len(), acked.len(), "an offset was acked twice");
    let missing: Vec<_> = published.difference(&unique).take(10).collect();
    assert!(missing.is_empty(), "{} of {total} never acked, e.g. {missing:?}", published.len() - unique.len());
    assert_eq!(unique, published, "acked exactly the published messages");

    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(counts(&d.backlog), [0, 0, 0, 0], "drained: {:?}", d.backlog);
    for p in &d.partitions {
        assert_eq!(p.cursor, p.high_watermark, "partition {}: everything delivered", p.partition);
        assert_eq!(counts(&p.backlog), [0; 4], "partition {}: {:?}", p.partition, p.backlog);
    }
    assert_nothing(&queues, &topic, &sub, "an acked message came back").await;
}

/// Sixteen workers on a queue of one partition, each receiving one message at a time and
/// acking it on its own: every receive and every ack rewrites that partition's cursor.
/// However hard they contend, no ack is refused as "changing too fast": requests of one
/// process take turns on a partition instead of racing for its write.
pub async fn given_sixteen_workers_on_one_partition_then_no_ack_is_refused_for_contention(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "contended", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let total = scaled(backend, 1_600);
    publish(&log, &topic, (0..total).map(|i| event(format!("m{i}"), Some(0), None, None)).collect()).await;
    // A worker whose ack is refused stops them all: the message it held would never come back.
    let (acked, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        let (acked, stop) = (acked.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            while acked.load(AtomicOrdering::SeqCst) < total && !stop.load(AtomicOrdering::SeqCst) {
                let got = receive(&queues, &topic, &sub, 1).await;
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                match queues.ack(&topic, &sub, &receipts).await {
                    Ok(results) => assert!(results.iter().all(Result::is_ok), "acks in the window: {results:?}"),
                    Err(e) => {
                        stop.store(true, AtomicOrdering::SeqCst);
                        return Err(format!("ack: {e}"));
                    }
                }
                acked.fetch_add(got.len(), AtomicOrdering::SeqCst);
            }
            Ok(())
        }));
    }
    let mut refused = Vec::new();
    for w in workers {
        refused.extend(w.await.unwrap().err());
    }
    assert!(refused.is_empty(), "{} workers' acks refused: {:?}", refused.len(), refused.first());
    assert_eq!(acked.load(AtomicOrdering::SeqCst), total, "every message acked once");
    assert_nothing(&queues, &topic, &sub, "an acked message came back").await;
}

/// Key ordering: eight workers, some of whose messages are nacked (released at once).
/// A shared map holds the keys in flight: a key received while its earlier message is
/// still held is a violation; each key's messages must be acked in offset order.
pub async fn given_ordering_by_key_under_eight_workers_with_nacks_then_one_in_flight_per_key_and_acked_in_offset_order(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "ordered", 2).await;
    let sub_spec =
        SubscriptionSpec { ordering: Ordering::Key, max_receive_count: MAX_RECEIVE_COUNT, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let keys = 8usize;
    let per_key = scaled(backend, 60).max(8);
    let mut events = Vec::new();
    for i in 0..per_key {
        for k in 0..keys {
            events.push(event(format!("k{k}-{i}"), None, Some(format!("k{k}")), None));
        }
    }
    let placed = publish(&log, &topic, events).await;
    let mut expected: BTreeMap<String, Vec<(u32, u64)>> = BTreeMap::new();
    for (i, p) in placed.iter().enumerate() {
        expected.entry(format!("k{}", i % keys)).or_default().push((p.partition, p.offset));
    }
    let total = placed.len();

    let in_flight = Arc::new(Mutex::new(HashMap::<String, (u32, u64)>::new()));
    let violations = Arc::new(Mutex::new(Vec::new()));
    // Appended while the message is still held (before its ack is sent), so the order is the ack order.
    let acked_order = Arc::new(Mutex::new(BTreeMap::<String, Vec<(u32, u64)>>::new()));
    let done = Arc::new(AtomicUsize::new(0));
    let nacks = Arc::new(AtomicUsize::new(0));
    // Told after every ack or nack: a worker that found nothing waits for one rather than spin
    // (on moto, spinning workers would crowd out the ones with work, one request at a time).
    let settled = Arc::new(Notify::new());
    let mut workers = Vec::new();
    for _ in 0..8usize {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        let (in_flight, violations, acked_order, done, nacks, settled) =
            (in_flight.clone(), violations.clone(), acked_order.clone(), done.clone(), nacks.clone(), settled.clone());
        workers.push(tokio::spawn(async move {
            while done.load(AtomicOrdering::SeqCst) < total {
                // Listening before the receive: an ack landing after it cannot be missed.
                let next_settle = settled.notified();
                tokio::pin!(next_settle);
                next_settle.as_mut().enable();
                let got = receive(&queues, &topic, &sub, 10).await;
                if got.is_empty() {
                    // Every message still to ack is held by another worker. Nothing settled for
                    // a long while means a message went missing: stop, and the asserts tell.
                    if done.load(AtomicOrdering::SeqCst) >= total
                        || tokio::time::timeout(REAL_PATIENCE, next_settle).await.is_err()
                    {
                        return;
                    }
                    continue;
                }
                let key_of =
                    |m: &Message| String::from_utf8_lossy(m.event.record.key.as_deref().unwrap_or(b"")).into_owned();
                {
                    let mut held = in_flight.lock().unwrap();
                    for m in &got {
                        if let Some(other) = held.insert(key_of(m), at(m)) {
                            violations.lock().unwrap().push((key_of(m), other, at(m)));
                        }
                    }
                }
                let (mut to_ack, mut to_release) = (Vec::new(), Vec::new());
                for m in &got {
                    let key = key_of(m);
                    // A quarter of first and second deliveries are released for redelivery instead.
                    let release = m.receive_count <= 2 && matches!(dice(m) % 4, 0);
                    let mut held = in_flight.lock().unwrap();
                    if held.get(&key) == Some(&at(m)) {
                        held.remove(&key);
                    }
                    if release {
                        to_release.push(m.receipt.clone());
                    } else {
                        acked_order.lock().unwrap().entry(key).or_default().push(at(m));
                        to_ack.push(m.receipt.clone());
                    }
                }
                if !to_release.is_empty() {
                    nacks.fetch_add(to_release.len(), AtomicOrdering::SeqCst);
                    let results = queues.nack(&topic, &sub, &to_release, 0).await.expect("nack");
                    assert!(results.iter().all(Result::is_ok), "nacks within the visibility window: {results:?}");
                }
                if !to_ack.is_empty() {
                    let results = queues.ack(&topic, &sub, &to_ack).await.expect("ack");
                    assert!(results.iter().all(Result::is_ok), "acks within the visibility window: {results:?}");
                    done.fetch_add(to_ack.len(), AtomicOrdering::SeqCst);
                }
                // Each settled message may free its key's next one: wake a worker per message
                // (not all of them, which would only crowd the store), or all at the end.
                if done.load(AtomicOrdering::SeqCst) >= total {
                    settled.notify_waiters();
                } else {
                    (0..got.len()).for_each(|_| settled.notify_one());
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }

    let violations = violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "a key delivered while its earlier message was in flight (key, held, delivered): {:?}",
        &violations[..violations.len().min(10)]
    );
    assert!(nacks.load(AtomicOrdering::SeqCst) > 0, "the case releases some messages");
    assert_eq!(done.load(AtomicOrdering::SeqCst), total, "every message acked");
    let acked_order = acked_order.lock().unwrap().clone();
    assert_eq!(acked_order, expected, "each key's messages acked once each, in offset order");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4]);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Visible,
    InFlight,
    Delayed,
    Dead,
}

/// Where the model believes a message is.
#[derive(Clone, Copy, Debug)]
enum State {
    New,
    Held { until: i64 },
    Released { at: i64 },
    Acked,
}

#[derive(Clone, Copy, Debug)]
struct Tracked {
    state: State,
    count: u32,
}

impl Tracked {
    fn kind(&self, now: i64, max_receive_count: u32) -> Option<Kind> {
        match self.state {
            State::New => Some(Kind::Visible),
            State::Held { until } if now < until => Some(Kind::InFlight),
            State::Held { .. } if self.count >= max_receive_count => Some(Kind::Dead),
            State::Held { .. } => Some(Kind::Visible),
            State::Released { at } if now < at => Some(Kind::Delayed),
            State::Released { .. } => Some(Kind::Visible),
            State::Acked => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Ack,
    Nack(u64),
    Hold,
}

/// What a worker does with a message: fixed by the message and its delivery, whichever worker got it.
/// Never a release at the last allowed delivery (its place, delayed or dead, is not the case's point).
fn action(m: &Message, max_receive_count: u32) -> Action {
    match dice(m) % 8 {
        0..=2 => Action::Ack,
        3 if m.receive_count < max_receive_count => Action::Nack(2_500),
        4 if m.receive_count < max_receive_count => Action::Nack(6_000),
        _ => Action::Hold,
    }
}

fn model_counts(model: &BTreeMap<(u32, u64), Tracked>, partition: Option<u32>, now: i64, max: u32) -> [u64; 4] {
    let mut c = [0; 4];
    for (_, t) in model.iter().filter(|((p, _), _)| partition.is_none_or(|want| *p == want)) {
        match t.kind(now, max) {
            Some(Kind::Visible) => c[0] += 1,
            Some(Kind::InFlight) => c[1] += 1,
            Some(Kind::Delayed) => c[2] += 1,
            Some(Kind::Dead) => c[3] += 1,
            None => {}
        }
    }
    c
}

async fn assert_backlog_matches(
    queues: &Queues,
    topic: &str,
    sub: &str,
    model: &BTreeMap<(u32, u64), Tracked>,
    now: i64,
    max: u32,
    when: &str,
) {
    let d = queues.describe(topic, sub).await.expect("describe");
    assert_eq!(counts(&d.backlog), model_counts(model, None, now, max), "{when}: [visible, in flight, delayed, dead]");
    for p in &d.partitions {
        assert_eq!(
            counts(&p.backlog),
            model_counts(model, Some(p.partition), now, max),
            "{when}, partition {}: [visible, in flight, delayed, dead]",
            p.partition
        );
    }
}

/// Rounds of four concurrent workers receiving and then acking, releasing with a delay or
/// holding what they got; between rounds (workers paused) the clock moves 1.7 s and
/// describe's counts must equal a model built from what the receives returned and what was
/// done with each message. The model also checks each receive: only visible messages,
/// each with the next receive count.
pub async fn given_concurrent_receives_acks_and_nacks_then_backlog_counts_match_a_model_of_what_happened(
    backend: &dyn Backend,
) {
    const VISIBILITY: u64 = 4_000;
    const MAX: u32 = 3;
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "model", 3).await;
    let sub_spec =
        SubscriptionSpec { visibility_timeout_ms: VISIBILITY, max_receive_count: MAX, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let mut model: BTreeMap<(u32, u64), Tracked> = BTreeMap::new();
    let mut published = 0usize;
    let mut publish_some = |n: usize| {
        let events: Vec<NewEvent> = (0..n)
            .map(|i| event(format!("m{}", published + i), Some((published + i) as u32 % 3), None, None))
            .collect();
        published += n;
        events
    };
    for p in publish(&log, &topic, publish_some(45)).await {
        model.insert((p.partition, p.offset), Tracked { state: State::New, count: 0 });
    }
    assert_backlog_matches(&queues, &topic, &sub, &model, clock.now_ms(), MAX, "before any receive").await;

    for round in 0..14 {
        if round % 3 == 2 {
            for p in publish(&log, &topic, publish_some(6)).await {
                model.insert((p.partition, p.offset), Tracked { state: State::New, count: 0 });
            }
        }
        let now = clock.now_ms();
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
            workers.push(tokio::spawn(async move {
                let got = receive(&queues, &topic, &sub, 5).await;
                let mut done = Vec::new();
                for m in got {
                    let a = action(&m, MAX);
                    let result = match a {
                        Action::Ack => ack(&queues, &topic, &sub, &m.receipt).await,
                        Action::Nack(delay) => nack(&queues, &topic, &sub, &m.receipt, delay).await,
                        Action::Hold => Ok(()),
                    };
                    done.push((m, a, result));
                }
                done
            }));
        }
        let mut this_round = BTreeSet::new();
        for w in workers {
            for (m, a, result) in w.await.unwrap() {
                let pos = at(&m);
                assert!(this_round.insert(pos), "round {round}: {pos:?} received by two workers at once");
                let tracked = model.get_mut(&pos).unwrap_or_else(|| panic!("round {round}: received unknown {pos:?}"));
                assert_eq!(
                    tracked.kind(now, MAX),
                    Some(Kind::Visible),
                    "round {round}: {pos:?} received while the model has it {tracked:?}"
                );
                assert_eq!(m.receive_count, tracked.count + 1, "round {round}: {pos:?}'s receive count");
                assert_eq!(result, Ok(()), "round {round}: {a:?} of {pos:?} within its window");
                tracked.count = m.receive_count;
                tracked.state = match a {
                    Action::Ack => State::Acked,
                    Action::Nack(delay) => State::Released { at: now + delay as i64 },
                    Action::Hold => State::Held { until: now + VISIBILITY as i64 },
                };
            }
        }
        assert_backlog_matches(&queues, &topic, &sub, &model, now, MAX, &format!("after round {round}")).await;
        // 1.7 s never lands on a deadline (4 s, 2.5 s, 6 s after a round): no boundary is tested here.
        clock.advance(1_700);
        assert_backlog_matches(
            &queues,
            &topic,
            &sub,
            &model,
            clock.now_ms(),
            MAX,
            &format!("1.7 s after round {round}"),
        )
        .await;
    }

    // Everything held or released comes due; a last worker drains the rest.
    clock.advance(100_000);
    let now = clock.now_ms();
    assert_backlog_matches(&queues, &topic, &sub, &model, now, MAX, "after every deadline").await;
    let dead: BTreeSet<(u32, u64)> =
        model.iter().filter(|(_, t)| t.kind(now, MAX) == Some(Kind::Dead)).map(|(p, _)| *p).collect();
    assert!(!dead.is_empty(), "the case dead-letters some messages");
    for _ in 0..100 {
        let got = receive(&queues, &topic, &sub, 100).await;
        if got.is_empty() {
            break;
        }
        for m in got {
            let tracked = model.get_mut(&at(&m)).expect("known message");
            assert_eq!(tracked.kind(now, MAX), Some(Kind::Visible), "drained {:?} while {tracked:?}", at(&m));
            assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Ok(()));
            tracked.state = State::Acked;
        }
    }
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, dead.len() as u64], "only the dead remain");
    let letters = all_dead_letters(&queues, &topic, &sub).await;
    let listed: BTreeSet<(u32, u64)> = letters.iter().map(|l| (l.partition, l.offset)).collect();
    assert_eq!(listed.len(), letters.len(), "each dead letter listed once");
    assert_eq!(listed, dead, "the dead letters are the messages held {MAX} times");
    assert!(letters.iter().all(|l| l.receive_count == MAX), "{letters:?}");
}

// ---------------------------------------------------------------------------------------------
// One message's life.

pub async fn given_a_worker_that_never_acks_then_redelivered_after_the_timeout_extended_by_a_visibility_change_and_released_by_nack(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "lease", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 10_000, max_receive_count: 10, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let pos = publish_at(&log, &topic, 0, "work", START_MS).await;

    let first = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&first), first.receive_count, first.first_receive_ms), (pos, 1, START_MS));
    assert_eq!(value(&first), "work");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 1, 0, 0], "held");
    assert_nothing(&queues, &topic, &sub, "a held message is not handed to anyone else").await;
    clock.advance(9_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the visibility timeout").await;

    clock.advance(1);
    let second = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&second), second.receive_count), (pos, 2), "back at the timeout, one more delivery");
    assert_eq!(second.first_receive_ms, START_MS, "first receive time kept");
    assert_ne!(second.receipt, first.receipt, "a new delivery, a new receipt");

    // The first receipt is from before the redelivery: refused, and nothing changes.
    assert_eq!(ack(&queues, &topic, &sub, &first.receipt).await, Err(ReceiptError::Stale));
    assert_eq!(nack(&queues, &topic, &sub, &first.receipt, 0).await, Err(ReceiptError::Stale));
    assert_eq!(change_visibility(&queues, &topic, &sub, &first.receipt, 0).await, Err(ReceiptError::Stale));
    assert_nothing(&queues, &topic, &sub, "a stale nack or visibility change released the current holder's message")
        .await;
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 1, 0, 0], "a stale ack removed nothing");

    // Held until START+20 s; at START+15 s the holder extends it by 20 s from now: START+35 s.
    clock.advance(5_000);
    let extended = change_visibility(&queues, &topic, &sub, &second.receipt, 20_000).await.expect("extend");
    clock.advance(5_000);
    assert_nothing(&queues, &topic, &sub, "at the old deadline, after an extension").await;
    clock.advance(14_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the new deadline").await;
    clock.advance(1);
    let third = receive_one(&queues, &topic, &sub).await;
    assert_eq!(third.receive_count, 3, "back at the new deadline");
    assert_eq!(ack(&queues, &topic, &sub, &extended).await, Err(ReceiptError::Stale), "from before the redelivery");

    // Released with a 5 s delay: visible at exactly now + 5 s.
    assert_eq!(nack(&queues, &topic, &sub, &third.receipt, 5_000).await, Ok(()));
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 1, 0], "released with a delay: delayed");
    assert_eq!(ack(&queues, &topic, &sub, &third.receipt).await, Err(ReceiptError::Stale), "released since");
    clock.advance(4_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the release delay ends").await;
    clock.advance(1);
    let fourth = receive_one(&queues, &topic, &sub).await;
    assert_eq!(fourth.receive_count, 4);

    // A visibility change to 0 makes it visible at once.
    assert!(change_visibility(&queues, &topic, &sub, &fourth.receipt, 0).await.is_ok(), "visibility 0");
    let fifth = receive_one(&queues, &topic, &sub).await;
    assert_eq!(fifth.receive_count, 5, "visible at once after a visibility change to 0");
    assert_eq!(ack(&queues, &topic, &sub, &fourth.receipt).await, Err(ReceiptError::Stale), "redelivered since");
    assert_eq!(ack(&queues, &topic, &sub, &fifth.receipt).await, Ok(()));
    assert_eq!(ack(&queues, &topic, &sub, &fifth.receipt).await, Err(ReceiptError::Stale), "acked already");
    clock.advance(24 * 3600 * 1000);
    assert_nothing(&queues, &topic, &sub, "an acked message came back a day later").await;
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4]);
}

pub async fn given_a_poison_message_then_dead_lettered_once_after_max_receives_and_redrive_delivers_it_fresh(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "poison", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 5, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let poison = publish_at(&log, &topic, 0, "poison", START_MS).await;
    let good = publish_at(&log, &topic, 0, "good", START_MS).await;

    let mut deliveries = Vec::new();
    for n in 1..=5u32 {
        let got = receive(&queues, &topic, &sub, 10).await;
        for m in got.iter().filter(|m| at(m) == good) {
            assert_eq!(ack(&queues, &topic, &sub, &m.receipt).await, Ok(()));
        }
        let m =
            got.into_iter().find(|m| at(m) == poison).unwrap_or_else(|| panic!("delivery {n} of the poison message"));
        assert_eq!(m.receive_count, n);
        deliveries.push((clock.now_ms(), m));
        clock.advance(1_001);
    }
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 1], "run out at the limit: counted dead at once");
    assert_nothing(&queues, &topic, &sub, "a sixth delivery past max_receive_count 5").await;
    assert_nothing(&queues, &topic, &sub, "a seventh").await;

    let letters = all_dead_letters(&queues, &topic, &sub).await;
    assert_eq!(letters.len(), 1, "dead-lettered exactly once: {letters:?}");
    let letter = &letters[0];
    assert_eq!((letter.partition, letter.offset, letter.receive_count), (poison.0, poison.1, 5));
    assert_eq!(letter.id, format!("{}-{}", poison.0, poison.1));
    assert!(!letter.reason.is_empty(), "a reason is given");
    assert_eq!(letter.first_receive_ms, deliveries[0].0);
    assert_eq!(letter.last_receive_ms, deliveries[4].0);
    assert!(letter.dead_ms >= letter.last_receive_ms);
    assert_eq!(letter.event.as_ref().map(|e| e.record.value.clone()), Some(Bytes::from_static(b"poison")));
    assert_eq!(all_dead_letters(&queues, &topic, &sub).await.len(), 1, "listing again moves nothing twice");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 1]);
    let last = &deliveries[4].1;
    assert_eq!(ack(&queues, &topic, &sub, &last.receipt).await, Err(ReceiptError::Stale), "dead-lettered since");

    assert_eq!(queues.redrive(&topic, &sub, None).await.unwrap(), 1);
    assert_eq!(backlog(&queues, &topic, &sub).await, [1, 0, 0, 0], "redriven: visible again");
    assert!(all_dead_letters(&queues, &topic, &sub).await.is_empty());
    let again = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&again), again.receive_count), (poison, 1), "the count starts over after a redrive");
    assert_eq!(value(&again), "poison");
    assert_eq!(ack(&queues, &topic, &sub, &last.receipt).await, Err(ReceiptError::Stale), "a pre-redrive receipt");
    assert_eq!(ack(&queues, &topic, &sub, &again.receipt).await, Ok(()), "the stale ack took nothing away");
    assert_eq!(queues.redrive(&topic, &sub, None).await.unwrap(), 0);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4]);
}

pub async fn given_dead_letters_then_listed_in_pages_deleted_one_by_one_redriven_partly_and_purged(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "dlq", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    assert_eq!(receive(&queues, &topic, &sub, 10).await.len(), 3);
    clock.advance(1_001);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 3]);

    let first = queues.dead_letters(&topic, &sub, None, 2).await.unwrap();
    assert_eq!(first.entries.len(), 2, "a page holds at most the limit");
    let next = first.next.clone().expect("a second page");
    let second = queues.dead_letters(&topic, &sub, Some(&next), 2).await.unwrap();
    assert_eq!((second.entries.len(), second.next.clone()), (1, None), "{second:?}");
    let offsets: Vec<u64> = first.entries.iter().chain(&second.entries).map(|l| l.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2], "every dead letter once, across pages");

    queues.delete_dead_letter(&topic, &sub, "0-1").await.expect("delete a dead letter");
    let gone = queues.delete_dead_letter(&topic, &sub, "0-1").await;
    assert!(matches!(gone, Err(Error::NotFound { .. })), "deleted already: {gone:?}");
    let left: Vec<u64> = all_dead_letters(&queues, &topic, &sub).await.iter().map(|l| l.offset).collect();
    assert_eq!(left, vec![0, 2]);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, 2]);

    assert_eq!(queues.redrive(&topic, &sub, Some(1)).await.unwrap(), 1, "at most one");
    assert_eq!(backlog(&queues, &topic, &sub).await, [1, 0, 0, 1]);
    let back = receive_one(&queues, &topic, &sub).await;
    assert!([0, 2].contains(&back.event.offset) && back.receive_count == 1, "{:?} {}", at(&back), back.receive_count);
    assert_eq!(ack(&queues, &topic, &sub, &back.receipt).await, Ok(()));

    assert_eq!(queues.purge_dead_letters(&topic, &sub).await.unwrap(), 1);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4]);
    assert!(all_dead_letters(&queues, &topic, &sub).await.is_empty());
    assert_eq!(queues.redrive(&topic, &sub, None).await.unwrap(), 0, "nothing left to redrive");
    clock.advance(3_600_000);
    assert_nothing(&queues, &topic, &sub, "a deleted or purged dead letter came back").await;
}

// ---------------------------------------------------------------------------------------------
// Where a subscription starts.

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

// ---------------------------------------------------------------------------------------------
// Delays and backoff.

pub async fn given_delay_then_new_messages_visible_at_their_timestamp_plus_delay_and_not_before(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "delay", 2).await;
    let sub_spec = SubscriptionSpec { delay_ms: 10_000, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let now_stamped = publish_at(&log, &topic, 0, "now", START_MS).await;
    let old_stamped = publish_at(&log, &topic, 1, "old", START_MS - 4_000).await;

    assert_nothing(&queues, &topic, &sub, "within the delay").await;
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 2, 0], "both delayed");
    clock.advance(5_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the older one's timestamp + delay").await;
    clock.advance(1);
    let old = receive_one(&queues, &topic, &sub).await;
    assert_eq!(at(&old), old_stamped, "visible at its timestamp + delay");
    assert_eq!(ack(&queues, &topic, &sub, &old.receipt).await, Ok(()));
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 1, 0]);
    clock.advance(3_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the newer one's timestamp + delay").await;
    clock.advance(1);
    assert_eq!(at(&receive_one(&queues, &topic, &sub).await), now_stamped);
}

/// Timestamps are the publisher's: a later offset may carry an earlier time. Each message
/// is due at its own timestamp + delay, not behind an earlier offset's.
pub async fn given_out_of_order_timestamps_in_one_partition_when_delay_then_each_visible_at_its_own_time(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "skew", 1).await;
    let sub_spec = SubscriptionSpec { delay_ms: 10_000, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let late = publish_at(&log, &topic, 0, "stamped now", START_MS).await;
    let early = publish_at(&log, &topic, 0, "stamped 8 s ago", START_MS - 8_000).await;
    clock.advance(1_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the earlier-stamped message is due").await;
    clock.advance(1);
    let first = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&first), vec![early], "offset 1 is due 8 s before offset 0");
    clock.advance(7_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before offset 0 is due").await;
    clock.advance(1);
    assert_eq!(at(&receive_one(&queues, &topic, &sub).await), late);
}

/// A publisher's clock may run ahead. An event stamped an hour from now must not hold back
/// the events after it in its partition on a subscription without a delay, and describe's
/// visible count must be what a receive then gets.
pub async fn given_an_event_stamped_in_the_future_then_the_events_after_it_are_not_held_behind_it(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "ahead", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    publish_at(&log, &topic, 0, "from a clock an hour fast", START_MS + 3_600_000).await;
    let on_time = publish_at(&log, &topic, 0, "on time", START_MS).await;
    let visible = queues.describe(&topic, &sub).await.unwrap().backlog.visible;
    let got = receive(&queues, &topic, &sub, 10).await;
    assert!(
        positions(&got).contains(&on_time),
        "the on-time event is held behind the future-stamped one: received {:?}",
        positions(&got)
    );
    assert_eq!(got.len() as u64, visible, "describe's visible count is what a receive gets");
}

/// Never acks; after each delivery's hold runs out, checks the message is not back until
/// the expected wait has passed, and is back then.
async fn assert_redelivery_waits(
    clock: &ManualClock,
    queues: &Queues,
    topic: &str,
    sub: &str,
    visibility: u64,
    waits: &[u64],
    what: &str,
) {
    let first = receive_one(queues, topic, sub).await;
    assert_eq!(first.receive_count, 1);
    for (n, wait) in waits.iter().enumerate() {
        clock.advance((visibility + wait - 1) as i64);
        assert_eq!(
            backlog(queues, topic, sub).await,
            [0, 0, 1, 0],
            "{what}: redelivery {} of {wait} ms, 1 ms before it: in backoff, delayed",
            n + 1
        );
        assert_nothing(queues, topic, sub, &format!("{what}: 1 ms before redelivery {} (wait {wait} ms)", n + 1)).await;
        clock.advance(1);
        let m = receive_one(queues, topic, sub).await;
        assert_eq!(m.receive_count, n as u32 + 2, "{what}: redelivery {} after {wait} ms", n + 1);
    }
}

pub async fn given_redelivery_backoff_then_the_nth_redelivery_waits_the_nth_step(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "backoff", 1).await;
    publish_at(&log, &topic, 0, "flaky", START_MS).await;
    let base = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 10, ..spec(StartAt::Earliest) };

    let steps = Backoff::Steps(vec![2_000, 5_000, 9_000]);
    let sub = subscribe(&queues, &topic, SubscriptionSpec { redelivery_backoff: Some(steps), ..base.clone() }).await;
    assert_redelivery_waits(
        &clock,
        &queues,
        &topic,
        &sub,
        1_000,
        &[2_000, 5_000, 9_000, 9_000],
        "steps (the last repeats)",
    )
    .await;

    let exponential = Backoff::Exponential { initial_ms: 1_000, max_ms: 3_000, multiplier: 2 };
    let sub = subscribe(&queues, &topic, SubscriptionSpec { redelivery_backoff: Some(exponential), ..base }).await;
    assert_redelivery_waits(&clock, &queues, &topic, &sub, 1_000, &[1_000, 2_000, 3_000, 3_000], "exponential").await;
}

// ---------------------------------------------------------------------------------------------
// Settings, names and receipts.

pub async fn given_create_twice_then_idempotent_with_same_settings_and_conflict_with_others_and_invalid_settings_refused(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "settings", 2).await;
    let name = unique_topic("sub");
    let settings = SubscriptionSpec { visibility_timeout_ms: 7_000, ..spec(StartAt::Earliest) };
    let (created, fresh) = queues.create(&topic, &name, settings.clone()).await.unwrap();
    assert!(fresh);
    let (again, fresh) = queues.create(&topic, &name, settings.clone()).await.unwrap();
    assert!(!fresh, "same settings: the existing subscription");
    assert_eq!(again, created);
    let other = SubscriptionSpec { visibility_timeout_ms: 8_000, ..settings.clone() };
    let conflict = queues.create(&topic, &name, other).await;
    assert!(matches!(conflict, Err(Error::Conflict { code: Code::SubscriptionExists, .. })), "{conflict:?}");
    assert_eq!(queues.describe(&topic, &name).await.unwrap().subscription.spec, settings, "unchanged");
    assert_eq!(
        queues.list(&topic).await.unwrap().iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        vec![name.clone()]
    );

    let invalid = [
        (
            "visibility over 12 h",
            SubscriptionSpec { visibility_timeout_ms: MAX_VISIBILITY_TIMEOUT_MS + 1, ..spec(StartAt::Earliest) },
        ),
        ("max_receive_count 0", SubscriptionSpec { max_receive_count: 0, ..spec(StartAt::Earliest) }),
        ("delay over 15 min", SubscriptionSpec { delay_ms: MAX_DELAY_MS + 1, ..spec(StartAt::Earliest) }),
    ];
    for (what, bad) in invalid {
        let refused_name = unique_topic("bad");
        let refused = queues.create(&topic, &refused_name, bad).await;
        assert!(matches!(refused, Err(Error::Invalid { .. })), "{what}: {refused:?}");
        let d = queues.describe(&topic, &refused_name).await;
        assert!(matches!(d, Err(Error::SubscriptionNotFound { .. })), "{what}: nothing created: {d:?}");
    }
    assert_eq!(queues.list(&topic).await.unwrap().len(), 1, "no refused subscription listed");
    let no_topic = queues.create(&unique_topic("missing"), &name, settings).await;
    assert!(matches!(no_topic, Err(Error::TopicNotFound(_))), "{no_topic:?}");

    publish_at(&log, &topic, 0, "m", START_MS).await;
    for max_messages in [0, 101] {
        let refused = queues.receive(&topic, &name, &request(max_messages)).await;
        assert!(matches!(refused, Err(Error::Invalid { .. })), "max_messages {max_messages}: {refused:?}");
    }
    let too_long = ReceiveRequest { visibility_timeout_ms: Some(MAX_VISIBILITY_TIMEOUT_MS + 1), ..request(10) };
    let refused = queues.receive(&topic, &name, &too_long).await;
    assert!(matches!(refused, Err(Error::Invalid { .. })), "a visibility override over 12 h: {refused:?}");
    assert_eq!(backlog(&queues, &topic, &name).await, [1, 0, 0, 0], "refused receives took nothing");
    assert_eq!(receive(&queues, &topic, &name, 100).await.len(), 1, "100 is allowed");
}

pub async fn given_unknown_subscription_then_not_found_for_every_operation(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "unknown", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let receipt = receive_one(&queues, &topic, &sub).await.receipt;
    let missing = unique_topic("nobody");
    let receipts = [receipt];
    let not_found = |what: &str, e: Option<Error>| {
        assert!(matches!(e, Some(Error::SubscriptionNotFound { .. })), "{what}: {e:?}");
    };
    not_found("describe", queues.describe(&topic, &missing).await.err());
    not_found("receive", queues.receive(&topic, &missing, &request(10)).await.err());
    not_found("ack", queues.ack(&topic, &missing, &receipts).await.err());
    not_found("nack", queues.nack(&topic, &missing, &receipts, 0).await.err());
    not_found("change_visibility", queues.change_visibility(&topic, &missing, &receipts, 0).await.err());
    not_found("dead_letters", queues.dead_letters(&topic, &missing, None, 10).await.err());
    not_found("delete_dead_letter", queues.delete_dead_letter(&topic, &missing, "0-0").await.err());
    not_found("redrive", queues.redrive(&topic, &missing, None).await.err());
    not_found("purge", queues.purge_dead_letters(&topic, &missing).await.err());
    not_found("delete", queues.delete(&topic, &missing).await.err());
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 1, 0, 0], "the real subscription is untouched");
}

/// The receipt with one character in its middle changed.
fn tampered(receipt: &str) -> String {
    let mut chars: Vec<char> = receipt.chars().collect();
    let mid = chars.len() / 2;
    let i = (mid..chars.len()).chain(0..mid).find(|&i| chars[i].is_ascii_alphanumeric()).expect("a letter or digit");
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

pub async fn given_tampered_or_foreign_receipts_then_invalid_and_nothing_changes(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "receipts", 1).await;
    let a = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let b = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    publish_at(&log, &topic, 0, "m", START_MS).await;
    let ma = receive_one(&queues, &topic, &a).await;
    let mb = receive_one(&queues, &topic, &b).await;

    let forged = tampered(&ma.receipt);
    assert_ne!(forged, ma.receipt);
    for (what, receipt) in
        [("altered", forged.as_str()), ("garbage", "not-a-receipt"), ("another queue's", mb.receipt.as_str())]
    {
        assert_eq!(ack(&queues, &topic, &a, receipt).await, Err(ReceiptError::Invalid), "ack, {what}");
        assert_eq!(nack(&queues, &topic, &a, receipt, 0).await, Err(ReceiptError::Invalid), "nack, {what}");
        let changed = change_visibility(&queues, &topic, &a, receipt, 0).await;
        assert_eq!(changed, Err(ReceiptError::Invalid), "visibility, {what}");
    }
    assert_eq!(backlog(&queues, &topic, &a).await, [0, 1, 0, 0], "still held");
    assert_eq!(backlog(&queues, &topic, &b).await, [0, 1, 0, 0], "b's receipt used on a did nothing to b");

    // One result per receipt, in order: a bad receipt beside a good one does not spoil it.
    let results = queues.ack(&topic, &a, &[forged, ma.receipt.clone()]).await.unwrap();
    assert_eq!(results, vec![Err(ReceiptError::Invalid), Ok(())]);
    assert_eq!(backlog(&queues, &topic, &a).await, [0; 4]);
    assert_eq!(ack(&queues, &topic, &b, &mb.receipt).await, Ok(()));
}

pub async fn given_subscription_deleted_and_recreated_under_the_same_name_then_it_starts_fresh(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "reborn", 1).await;
    let name = unique_topic("sub");
    let settings = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    queues.create(&topic, &name, settings.clone()).await.unwrap();
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let old = receive(&queues, &topic, &name, 10).await;
    assert_eq!(old.len(), 3);
    assert_eq!(ack(&queues, &topic, &name, &old[0].receipt).await, Ok(()));
    clock.advance(1_001);
    assert_eq!(backlog(&queues, &topic, &name).await, [0, 0, 0, 2], "two dead, one acked");

    queues.delete(&topic, &name).await.unwrap();
    let gone = queues.describe(&topic, &name).await;
    assert!(matches!(gone, Err(Error::SubscriptionNotFound { .. })), "{gone:?}");
    let gone = queues.receive(&topic, &name, &request(10)).await;
    assert!(matches!(gone, Err(Error::SubscriptionNotFound { .. })), "{gone:?}");
    assert!(queues.list(&topic).await.unwrap().is_empty());

    let (_, fresh) = queues.create(&topic, &name, settings).await.unwrap();
    assert!(fresh, "a new subscription");
    assert_eq!(backlog(&queues, &topic, &name).await, [3, 0, 0, 0], "no acks, leases or dead letters carried over");
    assert!(all_dead_letters(&queues, &topic, &name).await.is_empty());
    let new = receive(&queues, &topic, &name, 10).await;
    assert_eq!(positions(&new), vec![(0, 0), (0, 1), (0, 2)]);
    assert!(new.iter().all(|m| m.receive_count == 1), "counts start over");
    let old_ack = ack(&queues, &topic, &name, &old[1].receipt).await;
    assert!(old_ack.is_err(), "a receipt of the deleted subscription: {old_ack:?}");
    assert_eq!(backlog(&queues, &topic, &name).await, [0, 3, 0, 0], "the old receipt changed nothing");
    for m in &new {
        assert_eq!(ack(&queues, &topic, &name, &m.receipt).await, Ok(()));
    }
}

// ---------------------------------------------------------------------------------------------
// Long polls.

/// Yields, and makes one store round trip, so a spawned task gets to run.
async fn let_others_run(queues: &Queues, topic: &str, sub: &str) {
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    queues.describe(topic, sub).await.expect("describe");
    tokio::task::yield_now().await;
}

fn long_poll(
    queues: &Queues,
    topic: &str,
    sub: &str,
    wait_ms: u64,
) -> tokio::task::JoinHandle<Result<Vec<Message>, Error>> {
    let (queues, topic, sub) = (queues.clone(), topic.to_owned(), sub.to_owned());
    let req = ReceiveRequest { max_messages: 10, wait_ms, visibility_timeout_ms: None };
    tokio::spawn(async move { queues.receive(&topic, &sub, &req).await })
}

async fn finished(waiting: tokio::task::JoinHandle<Result<Vec<Message>, Error>>) -> Vec<Message> {
    tokio::time::timeout(REAL_PATIENCE, waiting).await.expect("the long poll ended").unwrap().expect("receive")
}

pub async fn given_long_poll_on_an_empty_queue_when_a_message_is_published_then_it_returns_the_message(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "wait", 2).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 5_000);
    clock.slept_more_than(before).await;
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "an empty queue: the receive waits");
    // The fake clock never moves: only the publish can end the wait.
    let pos = publish_at(&log, &topic, 1, "hello", START_MS).await;
    let got = finished(waiting).await;
    assert_eq!(positions(&got), vec![pos], "the message published during the wait");
    assert_eq!(got[0].receive_count, 1);
    assert_eq!(clock.now_ms(), START_MS);
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 1, 0, 0], "held by the long poll's receiver");
}

pub async fn given_long_poll_on_an_empty_queue_when_the_clock_passes_the_wait_then_it_returns_empty_not_before(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "timeout", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 5_000);
    clock.slept_more_than(before).await;
    clock.clock.advance(4_999);
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "returned before its wait was over");
    clock.clock.advance(1);
    assert!(finished(waiting).await.is_empty(), "nothing was published");
}

pub async fn given_long_poll_when_a_delayed_message_comes_due_then_it_returns_the_message(backend: &dyn Backend) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "due", 1).await;
    let sub = subscribe(&queues, &topic, SubscriptionSpec { delay_ms: 2_000, ..spec(StartAt::Earliest) }).await;
    let pos = publish_at(&log, &topic, 0, "later", START_MS).await;
    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 5_000);
    clock.slept_more_than(before).await;
    let_others_run(&queues, &topic, &sub).await;
    assert!(!waiting.is_finished(), "the message is delayed: the receive waits");
    clock.clock.advance(2_000);
    let got = finished(waiting).await;
    assert_eq!(positions(&got), vec![pos], "returned when the message came due, within the wait");
}

/// Deleting is one write; the janitor then removes the queue's items in bounded steps:
/// the deleted subscription's, and those of every subscription of a deleted topic.
pub async fn given_a_deleted_subscription_and_a_deleted_topic_then_the_janitor_removes_every_queue_item(
    backend: &dyn Backend,
) {
    use sluice_core::ports::state::Query;
    use sluice_core::queues::{queue_collections, subscription_key, SubscriptionRecord};

    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "purged", 2).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 1, ..spec(StartAt::Earliest) };
    let deleted = subscribe(&queues, &topic, sub_spec.clone()).await;
    let orphaned = subscribe(&queues, &topic, sub_spec).await;
    for i in 0..6 {
        publish_at(&log, &topic, i % 2, "x", START_MS).await;
    }
    // Each queue gets a cursor, leases in flight and dead letters on both partitions.
    for sub in [&deleted, &orphaned] {
        assert_eq!(receive(&queues, &topic, sub, 4).await.len(), 4);
    }
    clock.advance(1_001);
    for sub in [&deleted, &orphaned] {
        assert_eq!(receive(&queues, &topic, sub, 10).await.len(), 2, "the 2 never received");
        assert_eq!(queues.describe(&topic, sub).await.unwrap().backlog.dead, 4);
    }
    let store = log.store().clone();
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let mut ids = Vec::new();
    for sub in [&deleted, &orphaned] {
        let item = store.get(&subscription_key(config.id, sub)).await.unwrap().expect("subscription record");
        ids.push(sluice_core::layout::decode::<SubscriptionRecord>("subscription", &item.value).unwrap().id);
    }
    let items = |store: Arc<dyn sluice_core::StateStore>, ids: Vec<u64>| async move {
        let mut n = 0;
        for id in ids {
            for p in 0..2 {
                for pk in queue_collections(id, p) {
                    n += store.query(&Query::all(pk, 1000)).await.unwrap().items.len();
                }
            }
        }
        n
    };
    assert!(items(store.clone(), ids.clone()).await >= 8, "cursors, leases and dead letters exist");

    queues.delete(&topic, &deleted).await.unwrap();
    assert!(matches!(
        queues
            .receive(&topic, &deleted, &ReceiveRequest { max_messages: 1, wait_ms: 0, visibility_timeout_ms: None })
            .await,
        Err(Error::SubscriptionNotFound { .. })
    ));
    let deleted_order = sluice_core::ports::state::Key::new(crate::SUB_PURGE_PK, format!("{:016x}", ids[0]));
    assert!(store.get(&deleted_order).await.unwrap().is_some(), "the delete filed a purge order where OwnPurges looks");
    log.delete_topic(&topic).await.unwrap();
    // This case's orders only: on a shared backend other cases' janitors work on every order
    // (a step that lost a race with one of them is simply followed by the next).
    let own = crate::OwnPurges::new(store.clone(), &[config.id], &ids);
    for step in 0.. {
        assert!(step < 100, "the purge makes progress");
        if crate::janitor_step(&own, 5_000, 0).await.is_some_and(|report| !report.more) {
            break;
        }
    }
    assert!(
        store.get(&sluice_core::layout::purge_key(config.id)).await.unwrap().is_none(),
        "the topic's order is done"
    );
    assert_eq!(items(store.clone(), ids).await, 0, "every queue item is gone");
    assert!(
        store.get(&subscription_key(config.id, &orphaned)).await.unwrap().is_none(),
        "the topic's subscriptions too"
    );
}

// ---------------------------------------------------------------------------------------------
// Faults: a queue write whose answer is lost (applied or not).

/// What the next queue write (one touching a queue collection) meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueueFault {
    /// Applied, then its answer is lost.
    LoseAnswer,
    /// Not applied, and its answer is lost.
    FailBefore,
}

/// A [`StateStore`](sluice_core::StateStore) injecting faults into queue writes, in order.
struct FaultyQueueStore {
    inner: Arc<dyn sluice_core::StateStore>,
    faults: Mutex<std::collections::VecDeque<QueueFault>>,
}

#[async_trait::async_trait]
impl sluice_core::StateStore for FaultyQueueStore {
    async fn get(
        &self,
        key: &sluice_core::ports::state::Key,
    ) -> Result<Option<sluice_core::ports::state::Item>, sluice_core::StorageError> {
        self.inner.get(key).await
    }

    async fn query(
        &self,
        query: &sluice_core::ports::state::Query,
    ) -> Result<sluice_core::ports::state::Page, sluice_core::StorageError> {
        self.inner.query(query).await
    }

    async fn write(&self, ops: Vec<sluice_core::ports::state::WriteOp>) -> Result<(), sluice_core::StorageError> {
        let queue_write = ops.iter().any(|op| op.key().pk.starts_with("q#"));
        let fault = if queue_write { self.faults.lock().unwrap().pop_front() } else { None };
        let lost = || sluice_core::StorageError::Unavailable { message: "injected: answer lost".into(), source: None };
        match fault {
            None => self.inner.write(ops).await,
            Some(QueueFault::LoseAnswer) => {
                self.inner.write(ops).await?;
                Err(lost())
            }
            Some(QueueFault::FailBefore) => Err(lost()),
        }
    }

    async fn delete_many(&self, keys: Vec<sluice_core::ports::state::Key>) -> Result<(), sluice_core::StorageError> {
        self.inner.delete_many(keys).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, sluice_core::StorageError> {
        self.inner.purge_expired(limit).await
    }
}

/// A topic of one partition with one message, a subscription (10 s visibility), queues whose
/// writes meet `faults`, and clean queues on the same storage.
async fn faulty_queue(
    backend: &dyn Backend,
    faults: &[QueueFault],
) -> (Arc<ManualClock>, Arc<FaultyQueueStore>, Queues, Queues, String, String) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (clean_log, clean) = queues_on(backend, clock.clone()).await;
    let (store, objects) = backend.open_with(clock.clone()).await;
    let faulty_store =
        Arc::new(FaultyQueueStore { inner: store, faults: Mutex::new(faults.iter().copied().collect()) });
    let faulty = Queues::new(Log::new(faulty_store.clone(), objects, clock.clone(), crate::log_config()));
    let topic = new_topic(&clean_log, "faults", 1).await;
    let sub_spec = SubscriptionSpec { visibility_timeout_ms: 10_000, ..spec(StartAt::Earliest) };
    let sub = subscribe(&clean, &topic, sub_spec).await;
    publish_at(&clean_log, &topic, 0, "work", START_MS).await;
    (clock, faulty_store, faulty, clean, topic, sub)
}

/// The receive's lease was written but its answer lost: the message is held by nobody, so no
/// one gets it within that visibility window; then it comes back, once, and counts the lost
/// delivery.
pub async fn given_receive_applied_but_answer_lost_then_nobody_holds_it_until_the_timeout_and_it_comes_back_once(
    backend: &dyn Backend,
) {
    let (clock, _, faulty, clean, topic, sub) = faulty_queue(backend, &[QueueFault::LoseAnswer]).await;
    let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: None };
    assert!(matches!(faulty.receive(&topic, &sub, &req).await, Err(Error::Unavailable(_))));
    assert_eq!(backlog(&clean, &topic, &sub).await, [0, 1, 0, 0], "in flight, to a receiver that never heard");
    assert_nothing(&clean, &topic, &sub, "a second holder within the lost delivery's window").await;
    clock.advance(9_999);
    assert_nothing(&clean, &topic, &sub, "1 ms before the lost delivery's window ends").await;
    clock.advance(1);
    let back = receive_one(&faulty, &topic, &sub).await;
    assert_eq!(back.receive_count, 2, "the lost delivery counts");
    assert_eq!(ack(&faulty, &topic, &sub, &back.receipt).await, Ok(()));
    clock.advance(3_600_000);
    assert_nothing(&clean, &topic, &sub, "acked").await;
}

/// The receive's write never happened: the message is visible at once, still undelivered.
pub async fn given_receive_failed_before_applying_then_the_message_is_still_visible(backend: &dyn Backend) {
    let (_clock, _, faulty, clean, topic, sub) = faulty_queue(backend, &[QueueFault::FailBefore]).await;
    let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: None };
    assert!(matches!(faulty.receive(&topic, &sub, &req).await, Err(Error::Unavailable(_))));
    assert_eq!(backlog(&clean, &topic, &sub).await, [1, 0, 0, 0]);
    let got = receive_one(&clean, &topic, &sub).await;
    assert_eq!(got.receive_count, 1, "nothing was delivered before");
}

/// The ack was applied but its answer lost: the client's retry is told `stale_receipt`
/// (the message is acked either way), and the message never comes back.
pub async fn given_ack_applied_but_answer_lost_then_the_retry_is_stale_and_the_message_never_comes_back(
    backend: &dyn Backend,
) {
    let (clock, store, faulty, clean, topic, sub) = faulty_queue(backend, &[]).await;
    let held = receive_one(&clean, &topic, &sub).await;
    store.faults.lock().unwrap().push_back(QueueFault::LoseAnswer);
    assert!(matches!(faulty.ack(&topic, &sub, std::slice::from_ref(&held.receipt)).await, Err(Error::Unavailable(_))));
    assert_eq!(ack(&faulty, &topic, &sub, &held.receipt).await, Err(ReceiptError::Stale), "the retry");
    assert_eq!(backlog(&clean, &topic, &sub).await, [0; 4]);
    clock.advance(3_600_000);
    assert_nothing(&clean, &topic, &sub, "an acked message, its ack's answer lost").await;
}

/// (visible, in_flight, delayed, dead, expired) of the subscription, checked against its one partition.
async fn expiry_counts(queues: &Queues, topic: &str, sub: &str) -> (u64, u64, u64, u64, u64) {
    let d = queues.describe(topic, sub).await.expect("describe");
    assert_eq!(d.partitions.len(), 1);
    let (b, p) = (d.backlog, d.partitions[0].backlog);
    assert_eq!(
        (b.visible, b.in_flight, b.delayed, b.dead, b.expired),
        (p.visible, p.in_flight, p.delayed, p.dead, p.expired)
    );
    (b.visible, b.in_flight, b.delayed, b.dead, b.expired)
}

pub async fn given_undelivered_messages_when_the_log_start_passes_them_then_counted_expired_never_delivered_and_the_rest_are(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "expired", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    publish(&log, &topic, (0..10).map(|i| event(format!("m{i}"), Some(0), None, Some(START_MS))).collect()).await;
    let got = receive(&queues, &topic, &sub, 5).await;
    assert_eq!(positions(&got), (0..5).map(|o| (0, o)).collect::<Vec<_>>());
    ack(&queues, &topic, &sub, &got[0].receipt).await.unwrap(); // 0: done
    nack(&queues, &topic, &sub, &got[2].receipt, 60_000).await.unwrap(); // 2: waits a minute for redelivery
    change_visibility(&queues, &topic, &sub, &got[3].receipt, 0).await.unwrap(); // 3: due for redelivery now
                                                                                 // 1 and 4 are in flight; 5 to 9 were never received.
    assert_eq!(expiry_counts(&queues, &topic, &sub).await, (6, 2, 1, 0, 0));

    // Retention moves the log start to 7: 1 to 6 are gone from the log.
    let topic_id = log.describe_topic(&topic).await.unwrap().0.id;
    advance_log_start(log.store().as_ref(), topic_id, 0, 7).await;
    assert_eq!(
        expiry_counts(&queues, &topic, &sub).await,
        (3, 2, 1, 0, 3),
        "5 and 6 (never received) and 3 (due) are expired; 1 and 4 are still held, 2 still waits"
    );
    ack(&queues, &topic, &sub, &got[4].receipt).await.expect("a held message can still be acked");
    assert_eq!(expiry_counts(&queues, &topic, &sub).await, (3, 1, 1, 0, 3), "an acked message is not expired");

    let rest = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&rest), vec![(0, 7), (0, 8), (0, 9)], "only what the log still holds");
    assert_eq!(rest.iter().map(value).collect::<Vec<_>>(), ["m7", "m8", "m9"]);
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(d.partitions[0].cursor, 10);
    assert_eq!(
        expiry_counts(&queues, &topic, &sub).await,
        (0, 4, 1, 0, 3),
        "counted once, when the receive passed them"
    );
    for m in &rest {
        ack(&queues, &topic, &sub, &m.receipt).await.unwrap();
    }

    // 1's visibility timeout and 2's delay end: they come due, below the log start.
    clock.advance(60_001);
    assert_eq!(expiry_counts(&queues, &topic, &sub).await, (0, 0, 0, 0, 5));
    assert_nothing(&queues, &topic, &sub, "expired messages are never delivered").await;
    assert_nothing(&queues, &topic, &sub, "nor later").await;
    assert_eq!(expiry_counts(&queues, &topic, &sub).await, (0, 0, 0, 0, 5), "never counted twice");
    assert_eq!(ack(&queues, &topic, &sub, &got[1].receipt).await, Err(ReceiptError::Stale));
    assert!(all_dead_letters(&queues, &topic, &sub).await.is_empty(), "expired, not dead");
}

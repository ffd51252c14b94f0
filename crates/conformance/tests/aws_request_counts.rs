//! AWS requests per operation, counted by the adapters' own counters while the
//! real log publishes and replays against moto. docs/AWS.md's cost model is
//! computed from the table this test prints (`cargo test -p sluice-conformance
//! --test aws_request_counts -- --nocapture`); the assertions pin the counts the
//! commit protocol promises, so a change that adds requests fails here.
//!
//! The tests, by what they count: `log` (publish, replay, long polls, groups), `queues`,
//! `janitor` (upkeep), `push`, and `prices` (the cost targets).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_aws::S3ObjectStore;
use sluice_conformance::billed::Billed;
use sluice_conformance::moto::{adapters, moto};
use sluice_conformance::unique_topic;
use sluice_core::groups::{CommitOffset, Groups, PollRequest, ResetPolicy, TopicPartition};
use sluice_core::upkeep;
use sluice_core::{
    Clock, IdempotencyKey, Log, LogConfig, NewEvent, ReadRequest, StateStore, SteppingClock, SystemClock, TopicSpec,
    AWS_INLINE_SEGMENT_BYTES,
};

type Counts = BTreeMap<&'static str, u64>;

/// The counted adapters on moto, and a log on them ([`counted_log`]).
type Counted = (Arc<Billed>, Arc<S3ObjectStore>, Log);

/// The requests sent by operation, and DynamoDB's billed units (`READ_UNITS`, `WRITE_UNITS`).
fn all_counts(state: &Billed, objects: &S3ObjectStore) -> Counts {
    let mut counts = state.requests().snapshot();
    counts.extend(objects.requests().snapshot());
    let units = state.units();
    counts.insert(READ_UNITS, units.read);
    counts.insert(WRITE_UNITS, units.write);
    counts
}

const READ_UNITS: &str = "dynamodb read units";
const WRITE_UNITS: &str = "dynamodb write units";

/// The requests alone, without the units.
fn requests(counts: &Counts) -> Counts {
    counts.iter().filter(|(op, _)| ![READ_UNITS, WRITE_UNITS].contains(op)).map(|(op, n)| (*op, *n)).collect()
}

fn delta(after: &Counts, before: &Counts) -> Counts {
    after.iter().map(|(op, n)| (*op, n - before.get(op).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect()
}

/// A 1 KiB value, with a key (spread over partitions by the partitioner) or on partition 0.
fn kib_event(i: usize, keyed: bool) -> NewEvent {
    let mut value = format!("event-{i:06}-").into_bytes();
    value.resize(1024, b'x');
    NewEvent {
        key: keyed.then(|| Bytes::from(format!("key-{i}"))),
        headers: Vec::new(),
        value: Bytes::from(value),
        value_is_json: false,
        timestamp_ms: None,
        partition: (!keyed).then_some(0),
    }
}

/// The values of partition 0's first `n` events.
async fn read_values(log: &Log, topic: &str, n: usize) -> Vec<Bytes> {
    let mut values = Vec::new();
    while values.len() < n {
        let request = ReadRequest {
            topic: topic.to_owned(),
            partition: 0,
            offset: values.len() as u64,
            max_events: n - values.len(),
            max_bytes: 6 << 20,
            wait_ms: 0,
        };
        values.extend(log.read(&request).await.unwrap().events.into_iter().map(|e| e.record.value));
    }
    values
}

fn per_request(label: &str, counts: &Counts, requests: usize) {
    let per: Vec<String> = counts.iter().map(|(op, n)| format!("{op}={:.2}", *n as f64 / requests as f64)).collect();
    println!("COUNTS {label}: {requests} requests; per request: {}", per.join(" "));
}

/// Runs `f` and answers its value and the requests it made.
macro_rules! counted {
    ($state:expr, $objects:expr, $f:expr) => {{
        let before = all_counts(&$state, &$objects);
        let value = $f;
        (value, delta(&all_counts(&$state, &$objects), &before))
    }};
}

/// The tests of this file share one moto server and the janitor purges whatever is
/// deleted in it: one test at a time, so each counts only its own purge.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The adapters on moto, and a log on them configured as a warm Lambda instance is: a long
/// topic cache (between config changes; cold reads are counted separately), long polls
/// checking every 500 ms, as on AWS.
async fn counted_log() -> (Arc<Billed>, Arc<S3ObjectStore>, Log) {
    counted_log_on(Arc::new(SystemClock)).await
}

/// [`counted_log`] on `clock`: a clock that stands still keeps every cache fresh for the
/// whole count, so what is counted does not depend on how fast the machine runs.
async fn counted_log_on(clock: Arc<dyn Clock>) -> (Arc<Billed>, Arc<S3ObjectStore>, Log) {
    let (state, objects) = adapters(&moto().settings, clock.clone()).await;
    let (peek, _) = adapters(&moto().settings, clock.clone()).await;
    let state = Arc::new(Billed::new(state, peek));
    let config = LogConfig {
        topic_cache_ttl: Duration::from_secs(600),
        poll_interval: Duration::from_millis(500),
        // As the functions run: a commit of at most 4 KiB keeps its segments inline.
        inline_segment_bytes: AWS_INLINE_SEGMENT_BYTES,
        // As the functions run: such a commit to one partition is one write of its head.
        single_write_commits: true,
        ..LogConfig::default()
    };
    let log = Log::new(state.clone(), objects.clone(), clock, config);
    (state, objects, log)
}

#[path = "aws_request_counts/janitor.rs"]
mod janitor;
#[path = "aws_request_counts/log.rs"]
mod log;
#[path = "aws_request_counts/prices.rs"]
mod prices;
#[path = "aws_request_counts/push.rs"]
mod push;
#[path = "aws_request_counts/queues.rs"]
mod queues;
#[path = "aws_request_counts/schedule.rs"]
mod schedule;

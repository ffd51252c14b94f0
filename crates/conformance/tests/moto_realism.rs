//! The AWS adapters and the core's promises on moto with infra/moto_realism.py on: DynamoDB's
//! and S3's latency outside moto's lock, and DynamoDB's transaction conflict rule (a
//! transaction cancelled with `TransactionConflict` reasons, a single-item write refused with
//! `TransactionConflictException`, while another transaction holds the item). A moto server
//! of this binary's own, realistic whatever the environment says; the latency is scaled by
//! `SLUICE_MOTO_LATENCY_SCALE` (0.2 unless set) to keep the lane short.
//!
//! Each concurrent case reads the layer's conflict counters before and after, and a case
//! that exists to show conflicts asserts that some happened: a run in which the rule never
//! fired would prove nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use sluice_conformance::cases::log::{read_all, values};
use sluice_conformance::moto::{adapters, start_with, Moto};
use sluice_conformance::{unique_topic, Backend, Stores};
use sluice_core::ports::state::{Expect, Key, WriteOp};
use sluice_core::queues::{Queues, ReceiveRequest, StartAt, SubscriptionSpec};
use sluice_core::{Clock, Error, Log, NewEvent, StorageError, SystemClock, TopicSpec};

/// This binary's moto server, with the realism layer on.
fn realistic() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(|| {
        let scale = std::env::var("SLUICE_MOTO_LATENCY_SCALE").unwrap_or_else(|_| "0.2".into());
        start_with(&["--realism", "--latency-scale", &scale])
    })
}

/// The layer's counters (`GET /_sluice_realism`): requests by operation, conflicts by kind.
async fn counters() -> BTreeMap<String, serde_json::Value> {
    let endpoint = realistic().settings.endpoint_url.clone().expect("moto's endpoint");
    let answer = reqwest::get(format!("{endpoint}/_sluice_realism")).await.expect("the realism counters");
    answer.json().await.expect("counters as JSON")
}

/// How much `counter` grew since `before`.
fn grew(
    before: &BTreeMap<String, serde_json::Value>,
    after: &BTreeMap<String, serde_json::Value>,
    counter: &str,
) -> u64 {
    let count = |counters: &BTreeMap<String, serde_json::Value>| counters.get(counter).and_then(|v| v.as_u64());
    count(after).unwrap_or(0) - count(before).unwrap_or(0)
}

/// The AWS adapters on the realistic server.
struct Realistic;

#[async_trait]
impl Backend for Realistic {
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores {
        sluice_conformance::segments_inline_up_to(sluice_core::AWS_INLINE_SEGMENT_BYTES);
        sluice_conformance::commits_in_one_write();
        let (state, objects) = adapters(&realistic().settings, clock).await;
        (state, objects)
    }

    fn large_count(&self) -> usize {
        500
    }
}

fn log_on((store, objects): Stores) -> Log {
    Log::new(store, objects, Arc::new(SystemClock), sluice_conformance::log_config())
}

fn spec(partitions: u32) -> TopicSpec {
    TopicSpec { partitions, retention_ms: None, retention_bytes: None }
}

fn event(value: String, partition: u32) -> NewEvent {
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: Bytes::from(value),
        value_is_json: false,
        timestamp_ms: None,
        partition: Some(partition),
    }
}

fn put(key: &Key, value: &'static [u8]) -> WriteOp {
    WriteOp::Put { key: key.clone(), value: Bytes::from_static(value), expires_at_ms: None, expect: Expect::Any }
}

/// Rounds of concurrent requests before a case gives up waiting for the rule to fire.
const ROUNDS: usize = 50;

/// Concurrent transactions over one item: the losers are cancelled with a
/// `TransactionConflict` reason, which the adapter answers as `Throttled` (retry after a
/// pause), never as a lost race (`ConditionFailed`) or an unknown outcome (`Unavailable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_transactions_over_one_item_in_flight_together_then_the_losers_are_throttled_by_transaction_conflict() {
    let before = counters().await;
    let (store, _) = Realistic.open().await;
    let pk = unique_topic("tx-conflict");
    let (shared, mut conflicts) = (Key::new(&pk, "shared"), 0);
    for round in 0..ROUNDS {
        let writes = (0..6).map(|i| {
            let (store, shared) = (store.clone(), shared.clone());
            let own = Key::new(&pk, format!("own-{round}-{i}"));
            // A check counts as holding the item, as a write does (the conservative reading).
            let ops = if i % 2 == 0 {
                vec![put(&own, b"x"), put(&shared, b"x")]
            } else {
                vec![put(&own, b"x"), WriteOp::Check { key: shared, expect: Expect::Any }]
            };
            tokio::spawn(async move { store.write(ops).await })
        });
        for answer in futures_util::future::join_all(writes).await {
            match answer.expect("joined") {
                Ok(()) => {}
                Err(StorageError::Throttled { message, .. }) => {
                    assert!(message.contains("TransactionConflict"), "{message}");
                    conflicts += 1;
                }
                Err(e) => panic!("a conflicting transaction answered {e:?}"),
            }
        }
        if conflicts > 0 {
            break;
        }
    }
    assert!(conflicts > 0, "{ROUNDS} rounds of six transactions over one item never conflicted");
    assert!(grew(&before, &counters().await, "transaction_conflicts") >= conflicts);
}

/// A single-item write while a transaction holds its item is refused with
/// `TransactionConflictException`: `Throttled` (retry after a pause), and nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_transaction_in_flight_when_a_single_write_meets_its_item_then_throttled_and_nothing_written() {
    let before = counters().await;
    let (store, _) = Realistic.open().await;
    let pk = unique_topic("single-conflict");
    let (a, b) = (Key::new(&pk, "a"), Key::new(&pk, "b"));
    let mut refused = 0;
    for _ in 0..ROUNDS {
        let tx = tokio::spawn({
            let (store, ops) = (store.clone(), vec![put(&a, b"tx"), put(&b, b"tx")]);
            async move { store.write(ops).await }
        });
        let single = tokio::spawn({
            let (store, ops) = (store.clone(), vec![put(&a, b"single")]);
            async move { store.write(ops).await }
        });
        // Neither writes b alone: b tells whether the transaction landed.
        let (tx, single) = (tx.await.expect("joined"), single.await.expect("joined"));
        tx.expect("the transaction met no other transaction");
        match single {
            Ok(()) => {}
            Err(StorageError::Throttled { message, .. }) => {
                assert!(message.contains("TransactionConflictException"), "{message}");
                let value = store.get(&a).await.expect("get").expect("written by the transaction").value;
                assert_eq!(value, Bytes::from_static(b"tx"), "the refused write changed nothing");
                refused += 1;
                break;
            }
            Err(e) => panic!("a single write meeting a transaction answered {e:?}"),
        }
    }
    assert!(refused > 0, "{ROUNDS} single writes beside a transaction on their item were never refused");
    assert!(grew(&before, &counters().await, "single_write_conflicts") >= refused);
}

/// Publishers in eight separate instances (own clients, own caches), single events spread
/// over eight partitions, now and then a batch over two: every publish is acknowledged
/// despite the conflicts (every publish condition-checks the topic's record), offsets are
/// dense per partition, and every acknowledged event reads back at its offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_eight_instances_publishing_over_eight_partitions_then_offsets_dense_despite_conflicts() {
    const INSTANCES: u32 = 8;
    const PUBLISHES: u32 = 12;
    let before = counters().await;
    let topic = unique_topic("realism-publish");
    let admin = log_on(Realistic.open().await);
    admin.create_topic(&topic, spec(INSTANCES)).await.expect("create");
    let mut publishers = Vec::new();
    for p in 0..INSTANCES {
        let (log, topic) = (log_on(Realistic.open().await), topic.clone());
        publishers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..PUBLISHES {
                let partition = (p + i) % INSTANCES;
                let mut batch = vec![event(format!("p{p}-e{i}"), partition)];
                if i % 4 == 3 {
                    batch.push(event(format!("p{p}-e{i}-b"), (partition + 1) % INSTANCES));
                }
                let values: Vec<String> =
                    batch.iter().map(|e| String::from_utf8_lossy(&e.value).into_owned()).collect();
                let positions = log.publish(&topic, batch, None).await.expect("publish acknowledged");
                acked.extend(positions.into_iter().zip(values).map(|(at, v)| (at.partition, at.offset, v)));
            }
            acked
        }));
    }
    let mut acked: BTreeMap<u32, Vec<(u64, String)>> = BTreeMap::new();
    for publisher in publishers {
        for (partition, offset, value) in publisher.await.expect("joined") {
            acked.entry(partition).or_default().push((offset, value));
        }
    }
    let reader = log_on(Realistic.open().await);
    for (partition, events) in &mut acked {
        events.sort();
        let offsets: Vec<u64> = events.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, (0..events.len() as u64).collect::<Vec<_>>(), "partition {partition}: dense, once each");
        assert_eq!(
            &values(&read_all(&reader, &topic, *partition).await.expect("read")),
            events,
            "partition {partition}: read back"
        );
    }
    let total: usize = acked.values().map(Vec::len).sum();
    assert_eq!(total, (INSTANCES * (PUBLISHES + PUBLISHES / 4)) as usize);
    let after = counters().await;
    let conflicts = grew(&before, &after, "transaction_conflicts");
    println!("realism publish: {total} events; {conflicts} transactions cancelled for a conflict");
    assert!(conflicts > 0, "eight instances publishing to one topic never conflicted: the rule did not fire");
}

/// Workers in separate instances receive and ack concurrently under a visibility timeout
/// no run reaches: each message is handed to one holder, acked once, and the queue ends
/// empty. Receives and acks rewrite the partitions' cursors under conflicts and latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_workers_in_separate_instances_receiving_and_acking_then_one_holder_each_and_every_message_acked_once() {
    const WORKERS: usize = 6;
    const MESSAGES: u32 = 120;
    let before = counters().await;
    let admin = log_on(Realistic.open().await);
    let topic = unique_topic("realism-queue");
    admin.create_topic(&topic, spec(4)).await.expect("create");
    let sub = unique_topic("sub");
    let visibility =
        SubscriptionSpec { start: StartAt::Earliest, visibility_timeout_ms: 600_000, ..SubscriptionSpec::default() };
    Queues::new(admin.clone()).create(&topic, &sub, visibility).await.expect("subscribe");
    let events = (0..MESSAGES).map(|i| event(format!("m{i}"), i % 4)).collect();
    let published: BTreeSet<(u32, u64)> = admin
        .publish(&topic, events, None)
        .await
        .expect("publish")
        .into_iter()
        .map(|p| (p.partition, p.offset))
        .collect();

    let delivered = Arc::new(Mutex::new(BTreeMap::<(u32, u64), usize>::new()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let queues = Queues::new(log_on(Realistic.open().await));
        let (topic, sub, delivered, acked) = (topic.clone(), sub.clone(), delivered.clone(), acked.clone());
        workers.push(tokio::spawn(async move {
            let request = ReceiveRequest { max_messages: 5, wait_ms: 0, visibility_timeout_ms: None };
            let mut empty = 0;
            while empty < 20 {
                let got = queues.receive(&topic, &sub, &request).await.expect("receive");
                if got.is_empty() {
                    empty += 1;
                    continue;
                }
                empty = 0;
                for m in &got {
                    let at = (m.event.partition, m.event.offset);
                    let other = delivered.lock().unwrap().insert(at, w);
                    assert_eq!(other, None, "{at:?} handed to worker {w} while worker {other:?} held it");
                }
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                let results = queues.ack(&topic, &sub, &receipts).await.expect("ack");
                for (m, result) in got.iter().zip(results) {
                    assert_eq!(result, Ok(()), "an ack within its visibility window was refused");
                    acked.lock().unwrap().push((m.event.partition, m.event.offset));
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a worker failed");
    }
    let acked = acked.lock().unwrap().clone();
    let unique: BTreeSet<(u32, u64)> = acked.iter().copied().collect();
    assert_eq!(unique.len(), acked.len(), "a message was acked twice");
    assert_eq!(unique, published, "every published message acked");
    let after = counters().await;
    println!(
        "realism queue: {} messages by {WORKERS} workers; {} transactions and {} single writes refused for a conflict",
        acked.len(),
        grew(&before, &after, "transaction_conflicts"),
        grew(&before, &after, "single_write_conflicts")
    );
}

/// A topic deleted while publishers in four instances keep publishing to it: every publish
/// is acknowledged or refused as `TopicNotFound` (never another error), none that began
/// after the delete returned is acknowledged, the acknowledged offsets are dense per
/// partition, and a topic created again under the name starts empty, at offset 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_publishes_racing_a_topic_delete_then_each_committed_before_it_or_refused() {
    const INSTANCES: u32 = 4;
    let admin = log_on(Realistic.open().await);
    let topic = unique_topic("realism-delete");
    admin.create_topic(&topic, spec(INSTANCES)).await.expect("create");
    let acks = Arc::new(AtomicUsize::new(0));
    let deleted_at = Arc::new(OnceLock::<Instant>::new());
    let mut publishers = Vec::new();
    for p in 0..INSTANCES {
        let (log, topic) = (log_on(Realistic.open().await), topic.clone());
        let (acks, deleted_at) = (acks.clone(), deleted_at.clone());
        publishers.push(tokio::spawn(async move {
            let (mut acked, mut refusals) = (Vec::new(), 0);
            for i in 0.. {
                let after_delete = deleted_at.get().is_some();
                match log.publish(&topic, vec![event(format!("p{p}-e{i}"), (p + i) % INSTANCES)], None).await {
                    Ok(at) => {
                        assert!(!after_delete, "a publish begun after the delete returned was acknowledged");
                        acked.push((at[0].partition, at[0].offset));
                        acks.fetch_add(1, AtomicOrdering::Relaxed);
                    }
                    Err(Error::TopicNotFound(_)) => refusals += 1,
                    Err(e) => panic!("a publish racing the delete answered {e:?}"),
                }
                if refusals >= 3 {
                    return acked;
                }
            }
            acked
        }));
    }
    while acks.load(AtomicOrdering::Relaxed) < 24 {
        tokio::task::yield_now().await;
    }
    // The delete's transaction conflicts with every publish in flight (each checks the
    // topic's record): it is answered `Throttled`, changing nothing, and sent again as a
    // client would on the API's 429/503.
    let mut refused = 0;
    loop {
        match admin.delete_topic(&topic).await {
            Ok(()) => break,
            Err(Error::Throttled(e)) if refused < 200 => {
                assert!(e.to_string().contains("TransactionConflict"), "{e}");
                refused += 1;
            }
            Err(e) => panic!("delete after {refused} refusals: {e:?}"),
        }
    }
    deleted_at.set(Instant::now()).expect("deleted once");
    let mut by_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for publisher in publishers {
        for (partition, offset) in publisher.await.expect("a publisher failed") {
            by_partition.entry(partition).or_default().push(offset);
        }
    }
    for (partition, offsets) in &mut by_partition {
        offsets.sort_unstable();
        assert_eq!(*offsets, (0..offsets.len() as u64).collect::<Vec<_>>(), "partition {partition}: dense");
    }
    println!("realism delete: refused {refused} times for a conflict with the publishes in flight");
    admin.create_topic(&topic, spec(1)).await.expect("create again");
    assert_eq!(
        values(&read_all(&admin, &topic, 0).await.expect("read")),
        vec![],
        "the new topic shows nothing of the old"
    );
    let at = admin.publish(&topic, vec![event("new".into(), 0)], None).await.expect("publish to the new topic");
    assert_eq!((at[0].partition, at[0].offset), (0, 0), "the new topic starts at 0");
}

/// The log suite's concurrent cases (each on the system clock), on the realistic server.
mod log {
    use super::Realistic;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn eight_concurrent_publishers_to_one_partition_get_dense_offsets() {
        sluice_conformance::cases::log::eight_concurrent_publishers_to_one_partition_get_dense_offsets(&Realistic)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn given_two_publishes_racing_under_one_key_then_written_once_and_both_answer_it() {
        sluice_conformance::cases::log::given_two_publishes_racing_under_one_key_then_written_once_and_both_answer_it(
            &Realistic,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn given_a_publish_in_flight_when_its_topic_is_deleted_then_it_is_refused_or_committed_before() {
        sluice_conformance::cases::log::given_a_publish_in_flight_when_its_topic_is_deleted_then_it_is_refused_or_committed_before(&Realistic).await;
    }
}

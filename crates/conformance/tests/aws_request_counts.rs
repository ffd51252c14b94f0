//! AWS requests per operation, counted by the adapters' own counters while the
//! real log publishes and replays against moto. docs/AWS.md's cost model is
//! computed from the table this test prints (`cargo test -p sluice-conformance
//! --test aws_request_counts -- --nocapture`); the assertions pin the counts the
//! commit protocol promises, so a change that adds requests fails here.

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
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (state, objects) = adapters(&moto().settings, clock.clone()).await;
    let (peek, _) = adapters(&moto().settings, clock.clone()).await;
    let state = Arc::new(Billed::new(state, peek));
    let config = LogConfig {
        topic_cache_ttl: Duration::from_secs(600),
        poll_interval: Duration::from_millis(500),
        // As the functions run: a commit of at most 4 KiB keeps its segments inline.
        inline_segment_bytes: AWS_INLINE_SEGMENT_BYTES,
        ..LogConfig::default()
    };
    let log = Log::new(state.clone(), objects.clone(), clock, config);
    (state, objects, log)
}

#[tokio::test]
async fn requests_per_operation_are_what_the_cost_model_says() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (state, objects, log) = counted_log().await;
    let topic = unique_topic("costs");
    let spec = TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None };

    let ((created, _), create) = counted!(state, objects, log.create_topic(&topic, spec).await.unwrap());
    per_request("create topic", &create, 1);
    assert_eq!(requests(&create), Counts::from([("dynamodb:GetItem", 1), ("dynamodb:UpdateItem", 1)]));

    // A fresh (or long-frozen) instance reads the topic and the partition head first.
    let (cold_result, cold) =
        counted!(state, objects, log.publish(&topic, vec![kib_event(0, false)], None).await.unwrap());
    per_request("cold publish, batch 1", &cold, 1);
    assert_eq!(
        requests(&cold),
        Counts::from([("dynamodb:GetItem", 2), ("dynamodb:TransactWriteItems", 1)]),
        "inline: no S3 PUT"
    );
    // What the transaction is billed for that item: 2 write units per started KB.
    let cold_at = cold_result[0].partition;
    let key = sluice_core::layout::segment_key(created.id, cold_at, 0);
    let item = state.get(&key).await.unwrap().expect("indexed");
    let item_bytes =
        "pk".len() + key.pk.len() + "sk".len() + key.sk.len() + "d".len() + item.value.len() + "v".len() + 1;
    println!("inline segment item of one 1 KiB event: {item_bytes} bytes as DynamoDB sizes it");
    assert!(item_bytes <= 2048, "a batch-1 commit's segment item is 2 KB units at most, as docs/AWS.md prices it");

    const WARM: usize = 20;
    let (_, batch1) = counted!(state, objects, {
        for i in 0..WARM {
            log.publish(&topic, vec![kib_event(i, false)], None).await.unwrap();
        }
    });
    per_request("warm publish, batch 1", &batch1, WARM);
    assert_eq!(requests(&batch1), Counts::from([("dynamodb:TransactWriteItems", WARM as u64)]));

    const BATCHES: usize = 5;
    let (_, batch100) = counted!(state, objects, {
        for b in 0..BATCHES {
            log.publish(&topic, (0..100).map(|i| kib_event(b * 100 + i, false)).collect(), None).await.unwrap();
        }
    });
    per_request("warm publish, batch 100, one partition", &batch100, BATCHES);
    assert_eq!(
        requests(&batch100),
        Counts::from([("dynamodb:TransactWriteItems", BATCHES as u64), ("s3:PutObject", BATCHES as u64)])
    );

    // Keyed over 8 partitions: the first batch reads the 7 heads this instance has not seen yet.
    let keyed = |b: usize| (0..100).map(|i| kib_event(10_000 + b * 100 + i, true)).collect::<Vec<_>>();
    log.publish(&topic, keyed(0), None).await.unwrap();
    let (_, spread) = counted!(state, objects, {
        for b in 1..=BATCHES {
            log.publish(&topic, keyed(b), None).await.unwrap();
        }
    });
    per_request("warm publish, batch 100 keyed over 8 partitions", &spread, BATCHES);
    assert_eq!(
        requests(&spread),
        Counts::from([("dynamodb:TransactWriteItems", BATCHES as u64), ("s3:PutObject", BATCHES as u64)])
    );

    let (_, idempotent) = counted!(state, objects, {
        for i in 0..10 {
            let key = IdempotencyKey { key: format!("k{i}"), fingerprint: vec![1; 32] };
            log.publish(&topic, vec![kib_event(i, false)], Some(key)).await.unwrap();
        }
    });
    per_request("warm publish with Idempotency-Key, batch 1", &idempotent, 10);
    assert_eq!(
        requests(&idempotent),
        Counts::from([("dynamodb:GetItem", 20), ("dynamodb:TransactWriteItems", 10)]),
        "the topic and the key are read afresh"
    );

    // Replay: 100 events written as one segment, then 20 written one per segment.
    let read = |offset: u64, max_events: usize, wait_ms: u64| ReadRequest {
        topic: topic.clone(),
        partition: 0,
        offset,
        max_events,
        max_bytes: 6 << 20,
        wait_ms,
    };
    let (_, replay100) = counted!(state, objects, {
        let page = log.read(&read(1 + WARM as u64, 100, 0)).await.unwrap();
        assert_eq!(page.events.len(), 100);
    });
    per_request("replay 100 events from one batch-100 segment", &replay100, 1);
    assert_eq!(
        requests(&replay100),
        Counts::from([("dynamodb:GetItem", 2), ("dynamodb:Query", 1), ("s3:GetObject", 1)])
    );

    let (_, singles) = counted!(state, objects, {
        let page = log.read(&read(1, WARM, 0)).await.unwrap();
        assert_eq!(page.events.len(), WARM);
    });
    per_request("replay 20 events stored one per segment", &singles, 1);
    assert_eq!(
        requests(&singles),
        Counts::from([("dynamodb:GetItem", 2), ("dynamodb:Query", 1)]),
        "inline: the query brings the bytes"
    );

    // An idle long poll: one head read per check interval. Its clock passes each nap at once,
    // so the poll checks exactly at 0, 500, …, 2000 ms of its wait, however slow the machine.
    let hw = log.describe_topic(&topic).await.unwrap().1[0].high_watermark;
    let stepping = Arc::new(SteppingClock::new(SystemClock.now_ms()));
    let idle_log = Log::new(
        state.clone(),
        objects.clone(),
        stepping.clone(),
        LogConfig {
            poll_interval: Duration::from_millis(500),
            inline_segment_bytes: AWS_INLINE_SEGMENT_BYTES,
            ..LogConfig::default()
        },
    );
    let started = stepping.now_ms();
    let (_, idle) = counted!(state, objects, {
        let page = idle_log.read(&read(hw, 10, 2_000)).await.unwrap();
        assert!(page.events.is_empty());
    });
    assert_eq!(stepping.now_ms() - started, 2_000, "the poll waited out its 2 s");
    per_request("idle long poll of 2 s at a 500 ms interval", &idle, 1);
    assert_eq!(requests(&idle), Counts::from([("dynamodb:GetItem", 1 + 5)]), "a cold topic read, then 5 head checks");

    // A consumer group on the topic: join, polls of 100 events with a commit each, an idle poll.
    let groups = Groups::new(log.clone());
    let group = unique_topic("readers");
    let poll = |member: Option<String>, max_events: usize| PollRequest {
        group: group.clone(),
        member_id: member,
        topics: vec![topic.clone()],
        max_events,
        max_bytes: 6 << 20,
        wait_ms: 0,
        reset: ResetPolicy::Earliest,
        session_timeout_ms: None,
        auto_commit: false,
        positions: None,
        instance_id: None,
    };
    let (answer, join) = counted!(state, objects, groups.poll(&poll(None, 100)).await.unwrap());
    per_request("group poll: join (first member, 100 events)", &join, 1);
    let member = answer.member_id;
    const POLLS: usize = 5;
    let mut last = None;
    let (_, steady) = counted!(state, objects, {
        for _ in 0..POLLS {
            let a = groups.poll(&poll(Some(member.clone()), 100)).await.unwrap();
            assert_eq!(a.events.len(), 100);
            last = Some(a);
        }
    });
    per_request("group poll: steady member, 100 events", &steady, POLLS);
    assert_eq!(steady.get("dynamodb:UpdateItem"), Some(&(POLLS as u64)), "one small write per poll: the heartbeat");
    assert!(!steady.contains_key("dynamodb:TransactWriteItems"), "a poll that changes nothing writes one item");
    let last = last.unwrap();
    let mut next: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &last.events {
        next.insert(e.event.partition, e.event.offset + 1);
    }
    let offsets: Vec<CommitOffset> = next
        .iter()
        .map(|(&partition, &offset)| CommitOffset { topic: topic.clone(), partition, offset, metadata: None })
        .collect();
    let (_, commit) =
        counted!(state, objects, groups.commit(&group, &member, last.generation, &offsets).await.unwrap());
    per_request(&format!("group commit of {} partitions", offsets.len()), &commit, 1);
    assert_eq!(commit.get("dynamodb:TransactWriteItems"), Some(&1));
    // The same cycle with the commit riding on the next poll (`auto_commit` with the positions
    // the client confirms): the commit's writes go in the heartbeat's, one transaction.
    let between = groups.poll(&poll(Some(member.clone()), 100)).await.unwrap();
    for e in &between.events {
        next.insert(e.event.partition, e.event.offset + 1);
    }
    let mut riding = poll(Some(member.clone()), 100);
    riding.auto_commit = true;
    riding.positions =
        Some(next.iter().map(|(&partition, &o)| (TopicPartition { topic: topic.clone(), partition }, o)).collect());
    let (_, ridden) = counted!(state, objects, assert_eq!(groups.poll(&riding).await.unwrap().events.len(), 100));
    per_request("group poll with auto_commit of the previous poll's positions, 100 events", &ridden, 1);
    assert_eq!(ridden.get("dynamodb:TransactWriteItems"), Some(&1), "{ridden:?}");
    assert_eq!(ridden.get("dynamodb:UpdateItem"), None, "the heartbeat is in the commit's transaction: {ridden:?}");
    let (drained, rest) =
        counted!(state, objects, groups.poll(&poll(Some(member.clone()), 1000)).await.unwrap().events.len());
    per_request(&format!("group poll: steady member, max 1000 events ({drained} left to read)"), &rest, 1);
    let (_, idle) = counted!(state, objects, {
        let a = groups.poll(&poll(Some(member.clone()), 1000)).await.unwrap();
        assert!(a.events.is_empty());
    });
    per_request("group poll: idle member, nothing new", &idle, 1);
    assert_eq!(idle.get("dynamodb:UpdateItem"), None, "an idle poll early in its session writes nothing: {idle:?}");
    assert!(!idle.contains_key("s3:GetObject"));

    let (_, delete) = counted!(state, objects, log.delete_topic(&topic).await.unwrap());
    per_request("delete topic", &delete, 1);
    assert_eq!(requests(&delete), Counts::from([("dynamodb:GetItem", 1), ("dynamodb:TransactWriteItems", 1)]));

    let (_, purge) =
        counted!(state, objects, { while upkeep::step(state.as_ref(), upkeep::STEP_BUDGET, 0).await.unwrap().more {} });
    per_request("janitor: purge the deleted topic (~560 index items)", &purge, 1);
    assert!(purge.contains_key("dynamodb:BatchWriteItem"), "{purge:?}");
}

#[tokio::test]
async fn queue_requests_per_receive_and_ack_are_what_the_cost_model_says() {
    let _serial = ONE_AT_A_TIME.lock().await;
    use sluice_core::queues::{Queues, ReceiveRequest, StartAt, SubscriptionSpec};
    let (state, objects, log) = counted_log().await;
    let topic = unique_topic("queue-costs");
    log.create_topic(&topic, TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None }).await.unwrap();
    // Published as batches of 100 keyed events over 8 partitions: ~12 events per segment.
    for batch in 0..20 {
        log.publish(&topic, (0..100).map(|i| kib_event(batch * 100 + i, true)).collect(), None).await.unwrap();
    }
    let queues = Queues::new(log.clone());
    let spec = SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() };
    let (_, create) = counted!(state, objects, queues.create(&topic, "work", spec).await.unwrap());
    per_request("create subscription", &create, 1);
    let receive = |max_messages| ReceiveRequest { max_messages, wait_ms: 0, visibility_timeout_ms: None };
    // The receipt key is read (or made) once per process.
    let first = queues.receive(&topic, "work", &receive(10)).await.unwrap();
    queues.ack(&topic, "work", &first.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>()).await.unwrap();

    for batch in [10, 100] {
        const ROUNDS: usize = 5;
        let mut received = Vec::new();
        let (_, receives) = counted!(state, objects, {
            for _ in 0..ROUNDS {
                received.push(queues.receive(&topic, "work", &receive(batch)).await.unwrap());
            }
        });
        let messages: usize = received.iter().map(Vec::len).sum();
        per_request(&format!("queue receive, batch {batch} ({messages} messages)"), &receives, ROUNDS);
        assert_eq!(messages, ROUNDS * batch);
        let (_, acks) = counted!(state, objects, {
            for got in &received {
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                assert!(queues.ack(&topic, "work", &receipts).await.unwrap().iter().all(Result::is_ok));
            }
        });
        per_request(&format!("queue ack, batch {batch}"), &acks, ROUNDS);
        // A receive's messages usually come from one partition: one write takes them.
        let writes = receives.get("dynamodb:TransactWriteItems").copied().unwrap_or(0);
        assert!(writes as usize <= 2 * ROUNDS, "about one write per receive: {receives:?}");
        let ack_writes: u64 = ["dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:TransactWriteItems"]
            .iter()
            .map(|op| acks.get(op).copied().unwrap_or(0))
            .sum();
        assert!(ack_writes as usize <= 2 * ROUNDS, "about one write per ack: {acks:?}");
    }

    // Release, extend and ack-next: each settles one lease with one write.
    let receipts = |got: &[sluice_core::queues::Message]| got.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>();
    let got = queues.receive(&topic, "work", &receive(10)).await.unwrap();
    let (_, nack) = counted!(state, objects, queues.nack(&topic, "work", &receipts(&got), 0).await.unwrap());
    per_request("queue nack, batch 10", &nack, 1);
    let got = queues.receive(&topic, "work", &receive(10)).await.unwrap();
    let (renewed, visibility) =
        counted!(state, objects, queues.change_visibility(&topic, "work", &receipts(&got), 60_000).await.unwrap());
    per_request("queue visibility change, batch 10", &visibility, 1);
    let renewed: Vec<String> = renewed.into_iter().map(|r| r.unwrap().unwrap()).collect();
    queues.ack(&topic, "work", &renewed).await.unwrap();
    let held = queues.receive(&topic, "work", &receive(10)).await.unwrap();
    let ((acks, next), ack_next) =
        counted!(state, objects, queues.ack_and_receive(&topic, "work", &receipts(&held), &receive(10)).await.unwrap());
    per_request("queue receive carrying the previous batch's acks, batch 10", &ack_next, 1);
    assert!(acks.iter().all(Result::is_ok) && next.len() == 10);
    queues.ack(&topic, "work", &receipts(&next)).await.unwrap();
    // A release or a move is one write: the lease out of the cursor item, the moved messages
    // into a lease item of their own.
    assert_eq!(nack.get("dynamodb:TransactWriteItems"), Some(&1), "{nack:?}");
    assert_eq!(visibility.get("dynamodb:TransactWriteItems"), Some(&1), "{visibility:?}");
    // The acks ride on the receive's one write: the cursor item, with the leases in it.
    assert_eq!(ack_next.get("dynamodb:GetItem"), Some(&2), "topic and subscription read once: {ack_next:?}");
    assert_eq!(ack_next.get("dynamodb:UpdateItem"), Some(&1), "one write: {ack_next:?}");
    assert_eq!(ack_next.get("dynamodb:TransactWriteItems"), None, "one write: {ack_next:?}");

    // Dead letters: a queue whose messages die at their first expiry.
    let dying = SubscriptionSpec {
        start: StartAt::Earliest,
        visibility_timeout_ms: 0,
        max_receive_count: 1,
        ..SubscriptionSpec::default()
    };
    queues.create(&topic, "dying", dying).await.unwrap();
    queues.receive(&topic, "dying", &receive(10)).await.unwrap();
    let (page, list) = counted!(state, objects, queues.dead_letters(&topic, "dying", None, 100).await.unwrap());
    per_request("dead letters listed, first time (10 buried, 8 partitions)", &list, 1);
    assert_eq!(page.entries.len(), 10);
    let (_, redrive) = counted!(state, objects, queues.redrive(&topic, "dying", None).await.unwrap());
    per_request("redrive 10 dead letters (8 partitions)", &redrive, 1);
    queues.receive(&topic, "dying", &receive(10)).await.unwrap();
    queues.dead_letters(&topic, "dying", None, 100).await.unwrap();
    let (_, purge) = counted!(state, objects, queues.purge_dead_letters(&topic, "dying").await.unwrap());
    per_request("purge 10 dead letters (8 partitions)", &purge, 1);
    let (_, delete) = counted!(state, objects, queues.delete(&topic, "dying").await.unwrap());
    per_request("delete subscription", &delete, 1);
    assert_eq!(delete.get("dynamodb:TransactWriteItems"), Some(&1), "one write: {delete:?}");
    let (_, purge) =
        counted!(state, objects, { while upkeep::step(state.as_ref(), upkeep::STEP_BUDGET, 0).await.unwrap().more {} });
    per_request("janitor: purge the deleted subscription (8 partitions)", &purge, 1);

    // Drain, then an empty receive reads and writes nothing.
    loop {
        let got = queues.receive(&topic, "work", &receive(100)).await.unwrap();
        if got.is_empty() {
            break;
        }
        queues.ack(&topic, "work", &got.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>()).await.unwrap();
    }
    let (_, empty) =
        counted!(state, objects, assert!(queues.receive(&topic, "work", &receive(10)).await.unwrap().is_empty()));
    per_request("queue receive, empty queue (8 partitions)", &empty, 1);
    for op in ["dynamodb:UpdateItem", "dynamodb:TransactWriteItems", "dynamodb:DeleteItem", "s3:GetObject"] {
        assert!(!empty.contains_key(op), "an empty receive writes nothing and reads no object: {empty:?}");
    }
    let (d, describe) = counted!(state, objects, queues.describe(&topic, "work").await.unwrap());
    per_request("describe subscription (8 partitions)", &describe, 1);
    assert_eq!((d.backlog.visible, d.backlog.in_flight), (0, 0));
}

/// The janitor's requests: compaction of a partition written one event per publish, replay
/// before and after, retention, and an idle run over every partition (docs/AWS.md's upkeep rows).
#[tokio::test]
async fn upkeep_requests_are_what_the_cost_model_says() {
    use sluice_core::upkeep::{Janitor, JanitorConfig};
    let _serial = ONE_AT_A_TIME.lock().await;
    let (state, objects, log) = counted_log().await;
    let janitor = Janitor::new(
        state.clone(),
        objects.clone(),
        Arc::new(SystemClock),
        JanitorConfig { grace_ms: 0, ..JanitorConfig::default() },
    );
    // Settle what other tests left (deleted topics, free objects), so each count below is its own.
    janitor.run(upkeep::STEP_BUDGET).await.unwrap();
    let topic = unique_topic("upkeep");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    const SINGLES: usize = 320;
    // Segments in S3 objects, as events over 4 KiB (or a deployment with inline segments off) make.
    let blob_config = LogConfig { inline_segment_bytes: 0, ..LogConfig::default() };
    let blob_log = Log::new(state.clone(), objects.clone(), Arc::new(SystemClock), blob_config);
    for i in 0..SINGLES {
        blob_log.publish(&topic, vec![kib_event(i, false)], None).await.unwrap();
    }
    let (_, before) = counted!(state, objects, read_values(&log, &topic, SINGLES).await);
    per_request(&format!("replay {SINGLES} 1 KiB events stored one per segment"), &before, 1);
    assert_eq!(before.get("s3:GetObject"), Some(&(SINGLES as u64)));

    let (report, compaction) = counted!(state, objects, janitor.run(upkeep::STEP_BUDGET).await.unwrap());
    per_request(
        &format!(
            "janitor: compact {} of {SINGLES} one-event segments into 1 ({} merges; old objects collected)",
            report.segments_merged - report.segments_written + 1,
            report.segments_written
        ),
        &compaction,
        1,
    );
    let (_, after) = counted!(state, objects, read_values(&log, &topic, SINGLES).await);
    per_request(&format!("replay {SINGLES} 1 KiB events: one compacted segment and the newest one"), &after, 1);
    assert!(after.get("s3:GetObject").copied().unwrap_or(0) <= 3, "{after:?}");

    // The same, written as the functions write single events: inline, in the index items.
    let inline = unique_topic("upkeep-inline");
    log.create_topic(&inline, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..SINGLES {
        log.publish(&inline, vec![kib_event(i, false)], None).await.unwrap();
    }
    let (_, before) = counted!(state, objects, read_values(&log, &inline, SINGLES).await);
    per_request(&format!("replay {SINGLES} 1 KiB events stored inline"), &before, 1);
    assert_eq!(before.get("s3:GetObject"), None, "{before:?}");
    let (report, compaction) = counted!(state, objects, janitor.run(upkeep::STEP_BUDGET).await.unwrap());
    per_request(
        &format!(
            "janitor: compact {} of {SINGLES} inline segments into 1 ({} merges)",
            report.segments_merged - report.segments_written + 1,
            report.segments_written
        ),
        &compaction,
        1,
    );
    // Inline bytes come with the index items: what is read from S3, and then collected, is
    // only what compaction itself wrote in its first round of merges (of at most 32 segments).
    let first_round = report.segments_written as u64 - 1;
    assert_eq!(compaction.get("s3:GetObject"), Some(&first_round), "{compaction:?}");
    assert_eq!(compaction.get("s3:DeleteObject"), Some(&first_round), "{compaction:?}");
    assert_eq!(
        read_values(&log, &inline, SINGLES).await,
        (0..SINGLES).map(|i| kib_event(i, false).value).collect::<Vec<_>>()
    );

    // Offset by time: the time index (here its cursor: a 320 KiB segment is below the settled
    // size of half the 8 MiB target), then the segments from there, and one ranged GET.
    let request =
        ReadRequest { topic: topic.clone(), partition: 0, offset: 160, max_events: 1, max_bytes: 1 << 20, wait_ms: 0 };
    let at = log.read(&request).await.unwrap().events[0].record.timestamp_ms;
    let (found, by_time) =
        counted!(state, objects, log.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(at)).await.unwrap());
    per_request("offset by time (compacted partition)", &by_time, 1);
    assert!(found <= 160, "the first offset at or after the 160th event's time");
    assert!(by_time.get("s3:GetObject").copied().unwrap_or(0) <= 2, "{by_time:?}");

    // An idle run: nothing to expire, merge or collect; it still looks at every partition.
    let partitions: u32 = log.list_topics().await.unwrap().iter().map(|t| t.spec.partitions).sum();
    let (_, idle) = counted!(state, objects, janitor.run(upkeep::STEP_BUDGET).await.unwrap());
    per_request(&format!("janitor: idle run over {partitions} partitions"), &idle, 1);
    assert!(!idle.contains_key("dynamodb:TransactWriteItems") && !idle.contains_key("s3:DeleteObject"), "{idle:?}");

    // Retention by size drops the compacted segment (400 KiB over a 150 KiB bound).
    let bounded = unique_topic("bounded");
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: Some(150 << 10) };
    log.create_topic(&bounded, spec).await.unwrap();
    for b in 0..4 {
        log.publish(&bounded, (0..100).map(|i| kib_event(b * 100 + i, false)).collect(), None).await.unwrap();
    }
    let (report, retention) = counted!(state, objects, janitor.run(upkeep::STEP_BUDGET).await.unwrap());
    per_request(
        &format!("janitor: retention drops {} of 4 segments of 100 KiB (objects collected)", report.segments_expired),
        &retention,
        1,
    );
    assert_eq!(report.segments_expired, 3, "{report:?}");
}

/// Acknowledges every delivery, as a healthy webhook does.
struct AckAll;

#[async_trait::async_trait]
impl sluice_core::ports::deliver::Deliver for AckAll {
    async fn deliver(&self, _: &sluice_core::ports::deliver::Delivery) -> sluice_core::ports::deliver::Answer {
        sluice_core::ports::deliver::Answer::Status { status: 200, retry_after_ms: None, body: b"{}".to_vec() }
    }
}

#[tokio::test]
async fn push_requests_per_message_are_what_the_cost_model_says() {
    let _serial = ONE_AT_A_TIME.lock().await;
    use sluice_core::push::{Dispatcher, Topics};
    use sluice_core::queues::{PushSpec, Queues, StartAt, SubscriptionSpec};
    let (state, objects, log) = counted_log().await;
    let queues = Queues::new(log.clone());
    let dispatcher = Dispatcher::new(queues.clone(), Arc::new(AckAll));
    const EVENTS: usize = 200;
    for batch in [1u32, 10, 100] {
        let topic = unique_topic("push-costs");
        log.create_topic(&topic, TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None }).await.unwrap();
        let push = PushSpec { max_batch: batch, ..PushSpec::url("https://example.com/hook", None) };
        let spec = SubscriptionSpec { start: StartAt::Earliest, push: Some(push), ..SubscriptionSpec::default() };
        queues.create(&topic, "hook", spec).await.unwrap();
        log.publish(&topic, (0..EVENTS).map(|i| kib_event(i, true)).collect(), None).await.unwrap();
        let id = log.describe_topic(&topic).await.unwrap().0.id;
        // One wake from the stream, as a batch of commits sends it: every event delivered.
        let wake = Topics::Ids([id].into());
        // (moto answers slowly: a deadline no delivery reaches here, as a Lambda run's would not.)
        let deadline = || SystemClock.now_ms() + 600_000;
        let (drained, counts) = counted!(state, objects, dispatcher.drain(&wake, deadline()).await.unwrap());
        assert_eq!(drained.messages, EVENTS as u64, "{drained:?}");
        per_request(&format!("push, batch {batch}, per message"), &counts, EVENTS);
        let sent: u64 = requests(&counts).values().sum();
        // Per receive: the subscription, cursors and leases of the partitions it visits
        // (reads), one write, the segments' bytes; per delivery an ack; per wake the topic
        // list, the subscriptions, the workers' empty receives and the counts.
        let most = match batch {
            1 => 14.0,
            10 => 2.5,
            _ => 1.5,
        };
        assert!(sent as f64 <= most * EVENTS as f64, "{sent} requests for {EVENTS} messages: {counts:?}");
    }
    // A sweep with nothing due: what the schedule costs while nothing is published.
    let (drained, sweep) =
        counted!(state, objects, dispatcher.drain(&Topics::All, SystemClock.now_ms() + 60_000).await);
    drained.unwrap();
    per_request("push sweep, nothing due", &sweep, 1);
}

/// List prices (us-east-1, as docs/AWS.md prices them), dollars per request or unit.
const PRICES: [(&str, f64); 4] =
    [(WRITE_UNITS, 0.625e-6), (READ_UNITS, 0.125e-6), ("s3:PutObject", 5.0e-6), ("s3:GetObject", 0.4e-6)];
/// Dollars per HTTP request: API Gateway's HTTP API and a Lambda invocation.
const PER_HTTP_REQUEST: f64 = 1.0e-6 + 0.2e-6;

/// Prints what `counts` costs per million items when `items` were handled by `http` API
/// requests, line by line; answers the DynamoDB + S3 + request total (Lambda's duration,
/// which this test cannot see, is not in it: docs/AWS.md adds it).
fn price(label: &str, counts: &Counts, http: usize, items: usize) -> f64 {
    let per_million = |dollars: f64| dollars * 1e6 / items as f64;
    let mut total = 0.0;
    let mut lines = Vec::new();
    for (what, unit) in PRICES {
        let dollars = per_million(counts.get(what).copied().unwrap_or(0) as f64 * unit);
        total += dollars;
        lines.push(format!("{what} ${dollars:.4}"));
    }
    let requests = per_million(http as f64 * PER_HTTP_REQUEST);
    total += requests;
    lines.push(format!("API Gateway + Lambda requests ${requests:.4}"));
    println!("PRICE {label}: ${total:.3} per million before Lambda duration ({})", lines.join(", "));
    total
}

/// The three AWS targets at their shapes, priced from the counted requests and the
/// units DynamoDB bills for the items they touched: publish at batch 100 over 8 partitions,
/// a consumer group at polls of 100 committing as it goes, a work queue at batches of 10
/// and 100 (acks separate, and riding on the next receive).
#[tokio::test]
async fn the_cost_targets_priced_from_counted_units() {
    let _serial = ONE_AT_A_TIME.lock().await;
    use sluice_core::queues::{Queues, ReceiveRequest, StartAt, SubscriptionSpec};
    let (state, objects, log) = counted_log().await;
    let topic = unique_topic("targets");
    log.create_topic(&topic, TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None }).await.unwrap();
    let keyed = |b: usize| (0..100).map(|i| kib_event(b * 100 + i, true)).collect::<Vec<_>>();
    // The first batch reads the heads; the rest are what a warm instance does.
    log.publish(&topic, keyed(0), None).await.unwrap();
    const BATCHES: usize = 39;
    let (_, publish) = counted!(state, objects, {
        for b in 1..=BATCHES {
            log.publish(&topic, keyed(b), None).await.unwrap();
        }
    });
    per_request("target: publish, batch 100 keyed over 8 partitions", &publish, BATCHES);
    assert_eq!(publish.get(WRITE_UNITS), Some(&(36 * BATCHES as u64)), "8 heads, 8 index items, 1 object record");
    let mut targets = vec![("publish, batch 100 over 8 partitions", 0.15)];
    let mut priced = vec![price(targets[0].0, &publish, BATCHES, BATCHES * 100)];

    // A consumer group: one member polling 100 at a time, each poll committing the positions
    // the previous one answered (`auto_commit` with `positions`, as the Rust consumer does).
    let groups = Groups::new(log.clone());
    let group = unique_topic("targets-group");
    let mut request = PollRequest {
        group: group.clone(),
        member_id: None,
        topics: vec![topic.clone()],
        max_events: 100,
        max_bytes: 6 << 20,
        wait_ms: 0,
        reset: ResetPolicy::Earliest,
        session_timeout_ms: None,
        auto_commit: true,
        positions: None,
        instance_id: None,
    };
    let first = groups.poll(&request).await.unwrap();
    request.member_id = Some(first.member_id.clone());
    let mut positions: BTreeMap<u32, u64> = BTreeMap::new();
    let mut confirm = |events: &[sluice_core::groups::GroupEvent], request: &mut PollRequest| {
        for e in events {
            positions.insert(e.event.partition, e.event.offset + 1);
        }
        let tp = |partition| TopicPartition { topic: topic.clone(), partition };
        request.positions = Some(positions.iter().map(|(&p, &o)| (tp(p), o)).collect());
    };
    confirm(&first.events, &mut request);
    const POLLS: usize = 20;
    let (_, polls) = counted!(state, objects, {
        for _ in 0..POLLS {
            let answer = groups.poll(&request).await.unwrap();
            assert_eq!(answer.events.len(), 100);
            confirm(&answer.events, &mut request);
        }
    });
    per_request("target: group poll of 100 committing the previous poll's positions", &polls, POLLS);
    // A poll of a backlog takes its 100 from one partition (two when that one runs out): a
    // transaction of the member's heartbeat, the group's check and one or two offsets.
    assert!(polls[WRITE_UNITS] <= 8 * POLLS as u64, "{polls:?}");
    targets.push(("consumer group, polls of 100 with commits riding", 0.10));
    priced.push(price(targets[1].0, &polls, POLLS, POLLS * 100));

    // A work queue, receiving from the start of the same log.
    let queues = Queues::new(log.clone());
    let spec = SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() };
    queues.create(&topic, "work", spec).await.unwrap();
    let receive = |max_messages| ReceiveRequest { max_messages, wait_ms: 0, visibility_timeout_ms: None };
    let receipts = |got: &[sluice_core::queues::Message]| got.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>();
    // The receipt key is read (or made) once per process.
    let first = queues.receive(&topic, "work", &receive(10)).await.unwrap();
    queues.ack(&topic, "work", &receipts(&first)).await.unwrap();
    for batch in [10, 100] {
        const CYCLES: usize = 10;
        let (_, plain) = counted!(state, objects, {
            for _ in 0..CYCLES {
                let got = queues.receive(&topic, "work", &receive(batch)).await.unwrap();
                assert_eq!(got.len(), batch);
                assert!(queues.ack(&topic, "work", &receipts(&got)).await.unwrap().iter().all(Result::is_ok));
            }
        });
        per_request(&format!("target: queue receive + ack, batch {batch}"), &plain, CYCLES);
        price(&format!("work queue, batch {batch}, receive then ack"), &plain, 2 * CYCLES, CYCLES * batch);
        let mut held = queues.receive(&topic, "work", &receive(batch)).await.unwrap();
        let (_, riding) = counted!(state, objects, {
            for _ in 0..CYCLES {
                let (acks, next) =
                    queues.ack_and_receive(&topic, "work", &receipts(&held), &receive(batch)).await.unwrap();
                assert!(acks.iter().all(Result::is_ok) && next.len() == batch);
                held = next;
            }
        });
        queues.ack(&topic, "work", &receipts(&held)).await.unwrap();
        per_request(&format!("target: queue receive carrying the previous acks, batch {batch}"), &riding, CYCLES);
        let label = format!("work queue, batch {batch}, acks riding on the next receive");
        let dollars = price(&label, &riding, CYCLES, CYCLES * batch);
        if batch == 10 {
            targets.push(("work queue, batch 10, acks riding", 0.40));
            priced.push(dollars);
        }
    }
    for ((label, target), dollars) in targets.iter().zip(priced) {
        println!("TARGET {label}: ${dollars:.3} per million before Lambda duration; the issue's target ${target:.2}");
    }
}

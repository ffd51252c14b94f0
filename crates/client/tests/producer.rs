//! The producer when one topic cannot be written: a real server behind a proxy that
//! refuses every publish to one topic (`503`, as an unreachable or overloaded endpoint)
//! until the test opens it. The other topics' sends must complete meanwhile, and the held
//! topic's events must land once, in send order, when it comes back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::FutureExt;
use serde_json::json;
use sluice_client::{Client, From, Producer, ProducerConfig, Record, RetryPolicy, TopicSettings};
use sluice_runtime::LocalServer;
use tokio::sync::Notify;

/// Forwards to `upstream`, except publishes to `held` while it is closed: those are
/// answered `503` and counted, each count announced on `refused`.
struct Gate {
    upstream: String,
    held: String,
    open: AtomicBool,
    refusals: AtomicU64,
    refused: Notify,
    http: reqwest::Client,
}

impl Gate {
    /// Waits until the held topic's publishes have been refused `n` times.
    async fn refused_at_least(&self, n: u64) {
        loop {
            let announced = self.refused.notified();
            if self.refusals.load(Ordering::SeqCst) >= n {
                return;
            }
            announced.await;
        }
    }
}

async fn forward(State(gate): State<Arc<Gate>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if parts.uri.path() == gate.held && !gate.open.load(Ordering::SeqCst) {
        gate.refusals.fetch_add(1, Ordering::SeqCst);
        gate.refused.notify_waiters();
        return Response::builder().status(503).header("retry-after", "0").body(Body::from("held")).unwrap();
    }
    let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let url = format!("{}{}", gate.upstream, parts.uri.path_and_query().map_or("", |p| p.as_str()));
    let mut outgoing = gate.http.request(parts.method.clone(), url).body(body);
    for (name, value) in &parts.headers {
        if name != "host" {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = outgoing.send().await.expect("the server answers");
    let (status, bytes) = (answer.status(), answer.bytes().await.unwrap_or_default());
    Response::builder()
        .status(status.as_u16())
        .header("content-type", "application/json")
        .body(Body::from(bytes))
        .unwrap()
}

/// A gate in front of `upstream` holding `topic`'s publishes, on a loopback port; answers its URL.
async fn gate(upstream: &str, topic: &str) -> (String, Arc<Gate>) {
    let gate = Arc::new(Gate {
        upstream: upstream.to_owned(),
        held: format!("/v1/topics/{topic}/events"),
        open: AtomicBool::new(false),
        refusals: AtomicU64::new(0),
        refused: Notify::new(),
        http: reqwest::Client::new(),
    });
    let app = axum::Router::new().fallback(forward).with_state(gate.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_topic_failing_and_retrying_when_another_topic_sends_then_its_sends_complete_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let (url, gate) = gate(server.url(), "stuck").await;
    let retry = RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
    };
    let client = Client::builder(&url).retry(retry).build().unwrap();
    for topic in ["stuck", "free"] {
        client.create_topic(topic, &TopicSettings::partitions(1)).await.unwrap();
    }
    // Two events a batch: the held topic has a batch retrying and the next one queued behind
    // it; one request at a time, so a request slot held while waiting would show as well.
    let config = ProducerConfig {
        max_batch_events: 2,
        max_in_flight: 1,
        linger: Duration::from_millis(1),
        ..ProducerConfig::default()
    };
    let producer = Producer::with_config(client.clone(), config);
    let mut stuck = Vec::new();
    for n in 0..6u64 {
        stuck.push(producer.send("stuck", None, json!(n), []).await.unwrap());
    }
    gate.refused_at_least(1).await;
    let mut free = Vec::new();
    for n in 0..6u64 {
        free.push(producer.send("free", None, json!(n), []).await.unwrap());
    }
    // Not a timed promise: the free topic's events land before the held topic's first batch
    // has been refused 30 times (its producer-level resends are 500 ms apart, so that takes
    // seconds, and its delivery timeout is the default 120 s).
    let landed = async {
        let mut offsets = Vec::new();
        for delivery in free {
            offsets.push(delivery.await.unwrap().offset);
        }
        offsets
    };
    tokio::select! {
        offsets = landed => assert_eq!(offsets, [0, 1, 2, 3, 4, 5], "the free topic's events, in send order"),
        () = gate.refused_at_least(30) => panic!("the free topic waited behind the held topic's retries"),
    }
    assert!((&mut stuck[0]).now_or_never().is_none(), "the held topic's first batch is still being sent");
    gate.open.store(true, Ordering::SeqCst);
    producer.flush().await.unwrap();
    for (n, delivery) in stuck.into_iter().enumerate() {
        assert_eq!(delivery.await.unwrap().offset, n as u64, "each held event once, in send order");
    }
    let page = client.read("stuck", 0, From::Earliest, 100, 0).await.unwrap();
    assert_eq!(page.events.len(), 6, "no batch written twice");
}

/// An event naming a partition the topic does not have fails alone: the events batched with
/// it land (sent, it would have made the server refuse their whole batch).
#[tokio::test]
async fn given_an_event_for_a_partition_the_topic_lacks_then_it_fails_alone_and_its_batch_lands() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let client = Client::builder(server.url()).build().unwrap();
    client.create_topic("two", &TopicSettings::partitions(2)).await.unwrap();
    let config =
        ProducerConfig { max_batch_events: 10, linger: Duration::from_millis(50), ..ProducerConfig::default() };
    let producer = Producer::with_config(client.clone(), config);
    let mut deliveries = Vec::new();
    for partition in [0, 5, 1] {
        let mut record = Record::json(json!(partition));
        record.partition = Some(partition);
        deliveries.push(producer.send_record("two", record).await.unwrap());
    }
    producer.flush().await.unwrap();
    let mut outcomes = Vec::new();
    for delivery in deliveries {
        outcomes.push(delivery.await.map(|d| d.partition).map_err(|e| e.to_string()));
    }
    assert_eq!(outcomes[0], Ok(0));
    assert!(matches!(&outcomes[1], Err(e) if e.contains("partition 5 does not exist")), "{:?}", outcomes[1]);
    assert_eq!(outcomes[2], Ok(1), "the event batched after it lands");
}

/// A record sent with a schedule lands at once: replay hands back its `deliver_at_ms`, a
/// delay's as the time it ends, and a receive leaves both until then.
#[tokio::test]
async fn given_records_sent_with_a_schedule_then_replay_carries_it_and_a_receive_waits() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalServer::start(dir.path()).await.unwrap();
    let client = Client::builder(server.url()).build().unwrap();
    client.create_topic("later", &TopicSettings::partitions(1)).await.unwrap();
    client.create_subscription("later", "work", &json!({"start": "earliest"})).await.unwrap();
    let producer = Producer::new(client.clone());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let at = now + 7_200_000;
    let sent = [
        Record::json(json!("at")).deliver_at_ms(at),
        Record::json(json!("in an hour")).delay(Duration::from_secs(3600)),
        Record::json(json!("now")),
    ];
    let mut deliveries = Vec::new();
    for record in sent {
        deliveries.push(producer.send_record("later", record).await.unwrap());
    }
    producer.flush().await.unwrap();
    for delivery in deliveries {
        delivery.await.unwrap();
    }
    let page = client.read("later", 0, From::Earliest, 10, 0).await.unwrap();
    let schedules: Vec<Option<i64>> = page.events.iter().map(|e| e.deliver_at_ms).collect();
    assert_eq!(schedules[0], Some(at));
    assert!(schedules[1].is_some_and(|t| t > page.events[1].timestamp_ms + 3_500_000), "{schedules:?}");
    assert_eq!(schedules[2], None);
    let request = sluice_client::Receive { max_messages: 10, wait_ms: 0, visibility_timeout_ms: None, ack: Vec::new() };
    let received = client.receive("later", "work", &request).await.unwrap();
    let values: Vec<_> = received.messages.iter().map(|m| m.event.value.clone()).collect();
    assert_eq!(values, [Some(json!("now"))], "only what is due");
}

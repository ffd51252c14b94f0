//! The Rust client against the AWS deployment's functions: publish, read, admin, groups
//! and queues run under `cargo lambda watch` on the AWS adapters and moto, behind a
//! stand-in for API Gateway (a loopback proxy that routes each path to its function as
//! template.yaml does). The client signs every request with SigV4 as it would on AWS;
//! the stand-in does not check signatures, so this shows the signed requests go through,
//! and that the producer, group consumer, worker and DLQ administration work there as
//! they do against `serve`. Each function's metrics come out of its log as CloudWatch
//! EMF, and the janitor, invoked once, logs the lag and backlog gauges: the test parses
//! those lines and checks them against what the story did.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::{json, Value};
use sluice_client::{
    Client, ConsumerConfig, GroupConsumer, Message, Nack, Producer, TopicSettings, Worker, WorkerConfig,
};
use sluice_conformance::unique_topic;
use sluice_conformance::watch::{free_port, function_for, start_logged, Watch, BUILD_TIMEOUT};

const FUNCTIONS: [&str; 6] =
    ["sluice-admin", "sluice-publish", "sluice-read", "sluice-groups", "sluice-queues", "sluice-janitor"];

/// The function URLs, by function name.
struct Routes {
    ports: Vec<u16>,
    http: reqwest::Client,
}

impl Routes {
    fn url(&self, function: &str) -> String {
        let port = FUNCTIONS.iter().zip(&self.ports).find(|(f, _)| **f == function).map_or(0, |(_, p)| *p);
        format!("http://127.0.0.1:{port}/lambda-url/{function}")
    }
}

/// API Gateway's part: the request, signature headers and all, to the function its path is for.
async fn route(State(routes): State<Arc<Routes>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let path = parts.uri.path_and_query().map_or("", |p| p.as_str());
    let url = format!("{}{path}", routes.url(function_for(parts.uri.path())));
    let mut outgoing = routes.http.request(parts.method.clone(), url).body(body);
    for (name, value) in &parts.headers {
        if name != "host" {
            outgoing = outgoing.header(name, value);
        }
    }
    match outgoing.send().await {
        Ok(answer) => {
            let mut response = Response::builder().status(answer.status().as_u16());
            for (name, value) in answer.headers() {
                response = response.header(name, value);
            }
            response.body(Body::from(answer.bytes().await.unwrap_or_default())).unwrap()
        }
        Err(error) => Response::builder().status(502).body(Body::from(error.to_string())).unwrap(),
    }
}

/// The functions under cargo lambda watch, up, the API ones behind the stand-in, each
/// logging to `logs/<function>.log`; answers the stand-in's URL.
async fn gateway(logs: &Path) -> (String, Arc<Routes>, Vec<Watch>) {
    let ports: Vec<u16> = FUNCTIONS.iter().map(|_| free_port()).collect();
    let watches = FUNCTIONS
        .iter()
        .zip(&ports)
        .map(|(f, &port)| start_logged(f, port, &[], Some(&logs.join(format!("{f}.log")))))
        .collect();
    let routes = Arc::new(Routes { ports, http: reqwest::Client::builder().timeout(BUILD_TIMEOUT).build().unwrap() });
    let deadline = Instant::now() + BUILD_TIMEOUT;
    // The first request to each function waits while cargo lambda builds it.
    for function in &FUNCTIONS[..5] {
        loop {
            match routes.http.get(format!("{}/v1/not-a-route", routes.url(function))).send().await {
                Ok(r) if r.status() == 404 => break,
                other => {
                    assert!(Instant::now() < deadline, "{function} never came up under cargo lambda watch: {other:?}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
    let app = axum::Router::new().fallback(route).with_state(routes.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, routes, watches)
}

/// One invocation of the janitor, as its schedule makes one, through cargo lambda
/// watch's Invoke API (built on first use).
async fn invoke_janitor(routes: &Routes) -> Value {
    let port = routes.ports[5];
    let url = format!("http://127.0.0.1:{port}/2015-03-31/functions/sluice-janitor/invocations");
    let scheduled: Value =
        serde_json::from_str(include_str!("../../../tests/fixtures/eventbridge-scheduled.json")).unwrap();
    // cargo lambda watch answers 408 when the function it builds on first use is not up in
    // time; a sweep is idempotent, so it is sent again as the schedule would.
    for _ in 0..3 {
        let answer = routes.http.post(&url).json(&scheduled).send().await.unwrap();
        if answer.status() != reqwest::StatusCode::REQUEST_TIMEOUT {
            assert!(answer.status().is_success(), "janitor: {}", answer.status());
            return answer.json().await.unwrap();
        }
    }
    panic!("janitor: 408 Request Timeout three times")
}

/// The EMF documents a function logged: each line whose JSON has `_aws`.
fn emf_lines(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line.get(line.find('{')?..)?).ok())
        .filter(|doc| doc.get("_aws").is_some())
        .collect()
}

/// The sum of metric `name` over the EMF documents of `log` whose dimensions include
/// every `(dimension, value)` of `labels`; each document must declare it in the Sluice
/// namespace with its labels as dimensions, as CloudWatch reads it.
fn emf_sum(log: &Path, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut sum = 0.0;
    for doc in emf_lines(log) {
        let declared = &doc["_aws"]["CloudWatchMetrics"][0];
        if !declared["Metrics"].as_array().unwrap().iter().any(|m| m["Name"] == name) {
            continue;
        }
        assert_eq!(declared["Namespace"], "Sluice", "{doc}");
        let dimensions: Vec<&str> =
            declared["Dimensions"][0].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        if labels.iter().all(|(k, v)| dimensions.contains(k) && doc[*k] == *v) {
            sum += match &doc[name] {
                Value::Array(values) => values.len() as f64,
                value => value.as_f64().unwrap(),
            };
        }
    }
    sum
}

/// Waits (bounded) until `emf_sum` is `expected`: a function flushes after it answers.
async fn await_emf(log: &Path, name: &str, labels: &[(&str, &str)], expected: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = emf_sum(log, name, labels);
        if got == expected {
            return;
        }
        assert!(Instant::now() < deadline, "{name}{labels:?} in {}: {got}, expected {expected}", log.display());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn given_the_functions_behind_a_gateway_then_the_client_produces_consumes_and_works() {
    // SigV4 credentials from the standard chain: here, the environment.
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    std::env::set_var("AWS_REGION", "us-east-1");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(scenario());
}

async fn scenario() {
    let logs = tempfile::tempdir().unwrap();
    let (url, routes, _watches) = gateway(logs.path()).await;
    let client = Client::builder(&url).aws().await.unwrap().build().unwrap();
    let topic = unique_topic("client");
    client.create_topic(&topic, &TopicSettings::partitions(3)).await.unwrap();

    // The producer: 60 keyed events, each placed once, dense per partition.
    let producer = Producer::new(client.clone());
    let mut deliveries = Vec::new();
    for n in 0..60 {
        let key = format!("k{}", n % 6);
        deliveries.push(producer.send(&topic, Some(&key), json!({"n": n}), []).await.unwrap());
    }
    producer.flush().await.unwrap();
    let mut placed = BTreeSet::new();
    for delivery in deliveries {
        let at = delivery.await.unwrap();
        assert!(placed.insert((at.partition, at.offset)), "{at:?} twice");
    }
    let described = client.describe_topic(&topic).await.unwrap();
    let total: u64 = described.partition_states.iter().map(|p| p.high_watermark).sum();
    assert_eq!(total, 60, "{described:?}");

    // A group member reads all 60, then leaves with them committed.
    let group = format!("{topic}-readers");
    let config = ConsumerConfig { wait_ms: 1_000, ..ConsumerConfig::default() };
    let mut consumer = GroupConsumer::new(client.clone(), &group, &[&topic]).with_config(config);
    let mut seen = BTreeSet::new();
    for _ in 0..20 {
        let events = consumer.poll().await.unwrap();
        if events.is_empty() && seen.len() == 60 {
            break;
        }
        seen.extend(events.into_iter().map(|e| (e.partition, e.offset)));
    }
    assert_eq!(seen, placed, "the group read every event");
    consumer.leave().await.unwrap();
    assert_eq!(client.describe_group(&group).await.unwrap().lag, 0);

    // A worker: every message acked but one, which is nacked into the DLQ; then redriven.
    let settings = json!({"start": "earliest", "max_receive_count": 1});
    client.create_subscription(&topic, "w", &settings).await.unwrap();
    let handled = Arc::new(Mutex::new(0usize));
    let (count, (stop, stopped)) = (handled.clone(), tokio::sync::watch::channel(false));
    let handler = move |message: Message| {
        let done = {
            let mut count = count.lock().unwrap();
            *count += 1;
            *count == 60
        };
        let stop = stop.clone();
        async move {
            if done {
                let _ = stop.send(true);
            }
            match message.event.value.as_ref().and_then(|v| v["n"].as_u64()) {
                Some(13) => Err(Nack::default()),
                _ => Ok(()),
            }
        }
    };
    let mut stopped = stopped;
    let config = WorkerConfig { concurrency: 4, batch: 10, wait_ms: 1_000, ..WorkerConfig::default() };
    let stats = Worker::new(client.clone(), &topic, "w")
        .with_config(config)
        .run(handler, async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })
        .await
        .unwrap();
    assert_eq!((stats.received, stats.acked, stats.nacked), (60, 59, 1), "{stats:?}");
    let dead = client.dead_letters(&topic, "w", 10, None).await.unwrap();
    assert_eq!(dead.dead_letters.len(), 1, "{dead:?}");
    assert_eq!(dead.dead_letters[0].event.as_ref().map(|e| e["value"]["n"].clone()), Some(json!(13)));
    assert_eq!(client.redrive(&topic, "w", None).await.unwrap(), 1);
    emf_checks(logs.path(), &routes, &topic, &group).await;
    assert_eq!(client.purge_dead_letters(&topic, "w").await.unwrap(), 0);
    client.delete_topic(&topic).await.unwrap();
}

/// What the functions' EMF lines say about the story, and the janitor's gauges.
async fn emf_checks(logs: &Path, routes: &Routes, topic: &str, group: &str) {
    let log = |f: &str| -> PathBuf { logs.join(format!("{f}.log")) };
    let t = [("topic", topic)];
    await_emf(&log("sluice-publish"), "sluice_events_published_total", &t, 60.0).await;
    let route = [("route", "/v1/topics/{topic}/events"), ("method", "POST"), ("status", "200")];
    assert!(emf_sum(&log("sluice-publish"), "sluice_http_requests_total", &route) >= 1.0);
    assert!(emf_sum(&log("sluice-publish"), "sluice_publish_commit_seconds", &t) >= 1.0);
    await_emf(&log("sluice-groups"), "sluice_events_read_total", &[("topic", topic), ("via", "group")], 60.0).await;
    let sub = [("topic", topic), ("subscription", "w")];
    await_emf(&log("sluice-queues"), "sluice_messages_acked_total", &sub, 59.0).await;
    await_emf(&log("sluice-queues"), "sluice_messages_nacked_total", &sub, 1.0).await;
    await_emf(&log("sluice-queues"), "sluice_messages_dead_lettered_total", &sub, 1.0).await;
    await_emf(&log("sluice-queues"), "sluice_messages_redriven_total", &sub, 1.0).await;

    let report = invoke_janitor(routes).await;
    assert!(report["topics"].as_array().is_some_and(|t| !t.is_empty()), "{report}");
    let janitor = log("sluice-janitor");
    await_emf(&janitor, "sluice_janitor_runs_total", &[("outcome", "ok")], 1.0).await;
    // Summed per topic on Lambda (no partition dimension), as the alarms read them.
    await_emf(&janitor, "sluice_group_lag", &[("group", group), ("topic", topic)], 0.0).await;
    assert!(emf_lines(&janitor).iter().any(|d| d["group"] == group && d.get("sluice_group_lag").is_some()));
    assert!(!emf_lines(&janitor).iter().any(|d| d.get("partition").is_some()), "no per-partition label sets");
    let visible = [("topic", topic), ("subscription", "w"), ("state", "visible")];
    await_emf(&janitor, "sluice_subscription_messages", &visible, 1.0).await;
    let dead = [("topic", topic), ("subscription", "w"), ("state", "dead")];
    await_emf(&janitor, "sluice_subscription_messages", &dead, 0.0).await;
}

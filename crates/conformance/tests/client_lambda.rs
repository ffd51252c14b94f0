//! The Rust client against the AWS deployment's functions: publish, read, admin, groups
//! and queues run under `cargo lambda watch` on the AWS adapters and moto, behind a
//! stand-in for API Gateway (a loopback proxy that routes each path to its function as
//! template.yaml does). The client signs every request with SigV4 as it would on AWS;
//! the stand-in does not check signatures, so this shows the signed requests go through,
//! and that the producer, group consumer, worker and DLQ administration work there as
//! they do against `serve`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::json;
use sluice_client::{
    Client, ConsumerConfig, GroupConsumer, Message, Nack, Producer, TopicSettings, Worker, WorkerConfig,
};
use sluice_conformance::unique_topic;
use sluice_conformance::watch::{free_port, function_for, start, Watch, BUILD_TIMEOUT};

const FUNCTIONS: [&str; 5] = ["sluice-admin", "sluice-publish", "sluice-read", "sluice-groups", "sluice-queues"];

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

/// The five functions under cargo lambda watch, up, behind the stand-in; answers its URL.
async fn gateway() -> (String, Vec<Watch>) {
    let ports: Vec<u16> = FUNCTIONS.iter().map(|_| free_port()).collect();
    let watches = FUNCTIONS.iter().zip(&ports).map(|(f, &port)| start(f, port, &[])).collect();
    let routes = Arc::new(Routes { ports, http: reqwest::Client::builder().timeout(BUILD_TIMEOUT).build().unwrap() });
    let deadline = Instant::now() + BUILD_TIMEOUT;
    // The first request to each function waits while cargo lambda builds it.
    for function in FUNCTIONS {
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
    let app = axum::Router::new().fallback(route).with_state(routes);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, watches)
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
    let (url, _watches) = gateway().await;
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
    assert_eq!(client.purge_dead_letters(&topic, "w").await.unwrap(), 0);
    client.delete_topic(&topic).await.unwrap();
}

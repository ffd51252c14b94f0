//! Push subscriptions end to end: `sluice serve` delivering to a real local webhook
//! receiver (an HTTP server of this test on a free loopback port), which checks every
//! signature as the Standard Webhooks libraries do, and fails, refuses or never answers
//! as flaky endpoints do; and a kill -9 of `serve` while a delivery is under way.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use common::{client, create_topic, get_json, Server};
use serde_json::{json, Value};
use sluice_core::push::webhook;
use sluice_core::queues::secret_key;

/// What the receiver saw: per attempt, its webhook-id and message ids with receive counts.
#[derive(Default)]
struct Seen {
    key: Option<Vec<u8>>,
    /// A second key (a rotated secret's new one), and per attempt since it was set whether
    /// the delivery verified with it too.
    also: Option<Vec<u8>>,
    also_verified: Vec<bool>,
    /// The newest delivery's `webhook-id`, `webhook-timestamp`, `webhook-signature` and body.
    last: Option<([String; 3], Bytes)>,
    attempts: Vec<(String, Vec<(String, u64)>)>,
    acked: HashSet<String>,
    /// Messages pushed again after the receiver had acked them.
    after_ack: Vec<String>,
    bad_signatures: usize,
    /// The first attempt is told here, then never answered (its server is about to die).
    hang_first: Option<Arc<tokio::sync::Notify>>,
}

type Behaviour = Arc<dyn Fn(usize, &[String]) -> Response + Send + Sync>;

#[derive(Clone)]
struct Receiver {
    seen: Arc<Mutex<Seen>>,
    behaviour: Behaviour,
}

async fn hook(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or_default();
    let items: Vec<(String, u64)> = parsed["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| (m["id"].as_str().unwrap_or_default().to_owned(), m["receive_count"].as_u64().unwrap_or(0)))
        .collect();
    let ids: Vec<String> = items.iter().map(|i| i.0.clone()).collect();
    let attempt = {
        let mut seen = r.seen.lock().unwrap();
        let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let (id, ts, sig) = (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"));
        let verifies = |k: &Vec<u8>| webhook::verify(k, &id, &ts, &sig, &body, now_s);
        let valid = seen.key.as_ref().is_some_and(verifies);
        if let Some(also) = seen.also.as_ref().map(verifies) {
            seen.also_verified.push(also);
        }
        if !valid || header("content-type") != "application/json" {
            seen.bad_signatures += 1;
        }
        let again: Vec<String> = ids.iter().filter(|id| seen.acked.contains(*id)).cloned().collect();
        seen.after_ack.extend(again);
        seen.last = Some(([id.clone(), ts, sig], body.clone()));
        seen.attempts.push((id, items));
        seen.attempts.len() - 1
    };
    let hang = r.seen.lock().unwrap().hang_first.clone().filter(|_| attempt == 0);
    if let Some(arrived) = hang {
        arrived.notify_one();
        std::future::pending::<()>().await;
    }
    let answer = (r.behaviour)(attempt, &ids);
    if answer.status().is_success() {
        // What the answer fails is named in its body; the test's behaviours fail the first id.
        let failed_first = answer.headers().contains_key("x-failed-first");
        let mut seen = r.seen.lock().unwrap();
        seen.acked.extend(ids.iter().skip(usize::from(failed_first)).cloned());
    }
    answer
}

async fn start_receiver(behaviour: Behaviour) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = axum::Router::new().route("/hook", post(hook)).with_state(Receiver { seen: seen.clone(), behaviour });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// Creates the push subscription `hook`; answers its secret (the receiver checks with it).
async fn subscribe(c: &reqwest::Client, s: &Server, topic: &str, body: Value, seen: &Mutex<Seen>) -> String {
    let r = c.put(s.url(&format!("/v1/topics/{topic}/subscriptions/hook"))).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let secret = created["push"]["secret"].as_str().expect("the secret, once").to_owned();
    seen.lock().unwrap().key = Some(secret_key(&secret).unwrap());
    secret
}

/// Whether the Standard Webhooks reference library (Python's `standardwebhooks`, installed
/// by infra/setup.sh) verifies a delivery with `secret`.
fn standard_webhooks_verifies(secret: &str, (headers, body): &([String; 3], Bytes)) -> bool {
    const VERIFY: &str = "import sys, standardwebhooks as sw
secret, id, ts, sig = sys.argv[1:5]
headers = {'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': sig}
try:
    sw.Webhook(secret).verify(sys.stdin.buffer.read(), headers)
except sw.WebhookVerificationError:
    sys.exit(3)";
    use std::io::Write;
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let mut child = std::process::Command::new(python)
        .args(["-c", VERIFY, secret, &headers[0], &headers[1], &headers[2]])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("the venv's python (infra/setup.sh)");
    child.stdin.take().unwrap().write_all(body).unwrap();
    match child.wait().unwrap().code() {
        Some(0) => true,
        Some(3) => false,
        other => panic!("standardwebhooks failed to run: {other:?}"),
    }
}

async fn publish(c: &reqwest::Client, s: &Server, topic: &str, events: Vec<Value>) -> Vec<String> {
    let r = c.post(s.url(&format!("/v1/topics/{topic}/events"))).json(&json!({ "events": events })).send().await;
    let answer: Value = r.unwrap().json().await.unwrap();
    let results = answer["results"].as_array().expect("publish results");
    results.iter().map(|r| format!("{topic}/{}/{}", r["partition"], r["offset"])).collect()
}

/// Waits (in real time: the server runs on the system clock) until `done` holds.
async fn eventually(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_serve_and_a_flaky_receiver_then_matching_events_are_pushed_signed_until_acked() {
    // Per attempt: 30% 500, 10% 503 with Retry-After 1 s, 20% a partial failure, else 200.
    let behaviour: Behaviour = Arc::new(|attempt, ids| match attempt % 10 {
        0..=2 => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
        3 => (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "1")], "later").into_response(),
        4 | 5 => {
            let failures = json!({"batchItemFailures": [{"itemIdentifier": ids[0]}]});
            (StatusCode::OK, [("x-failed-first", "1")], axum::Json(failures)).into_response()
        }
        _ => StatusCode::NO_CONTENT.into_response(),
    });
    let (url, seen) = start_receiver(behaviour).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = client();
    create_topic(&c, &server, "orders", 2).await;
    let body = json!({
        "start": "earliest",
        "redelivery_backoff_ms": [100],
        "max_receive_count": 50,
        "filter": {"value": {"kind": ["keep"]}},
        "push": {"url": url, "max_batch": 10},
    });
    subscribe(&c, &server, "orders", body, &seen).await;
    let events: Vec<Value> = (0..200)
        .map(|i| json!({"key": format!("k{}", i % 7), "value": {"kind": if i % 4 == 0 { "drop" } else { "keep" }, "i": i}}))
        .collect();
    let ids = publish(&c, &server, "orders", events).await;
    let keep: HashSet<String> = ids.iter().enumerate().filter(|(i, _)| i % 4 != 0).map(|(_, id)| id.clone()).collect();

    eventually("every matching event acked", Duration::from_secs(60), || keep.is_subset(&seen.lock().unwrap().acked))
        .await;
    // Settled (nothing visible or in flight): nothing is left to push, so a repeat after an
    // ack would have been seen by now.
    let described = settled(&c, &server, "orders").await;
    let attempts = {
        let seen = seen.lock().unwrap();
        check_flaky_run(&seen, &keep);
        seen.attempts.len() as u64
    };
    assert_eq!(described["backlog"]["filtered"], 50);
    // Counts reach the store within a second of the attempts.
    let deliveries = &described["push"]["deliveries"];
    assert!(deliveries["attempted"].as_u64().unwrap() <= attempts, "{deliveries}");
    let r = c.post(server.url("/v1/topics/orders/subscriptions/hook/receive")).send().await.unwrap();
    assert_eq!(r.status(), 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_rotated_secret_then_serve_signs_each_delivery_with_both_over_http() {
    let (url, seen) = start_receiver(Arc::new(|_, _| StatusCode::NO_CONTENT.into_response())).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = client();
    create_topic(&c, &server, "orders", 1).await;
    // One worker: each worker's receive already waiting at the rotation may push one batch more
    // signed with the old secret alone.
    let body = json!({"start": "earliest", "push": {"url": url, "max_in_flight": 1}});
    let old = subscribe(&c, &server, "orders", body, &seen).await;
    let first = publish(&c, &server, "orders", vec![json!({"value": 1})]).await;
    let acked = |ids: &[String]| ids.iter().all(|id| seen.lock().unwrap().acked.contains(id));
    eventually("pushed before the rotation", Duration::from_secs(30), || acked(&first)).await;

    let r = c.post(server.url("/v1/topics/orders/subscriptions/hook/secret")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let rotated: Value = r.json().await.unwrap();
    let new = rotated["secret"].as_str().expect("the new secret").to_owned();
    seen.lock().unwrap().also = Some(secret_key(&new).unwrap());
    // The worker's receive already waiting may push one batch signed with the old secret
    // alone (docs/API.md: liveness, not safety); every batch after it carries both.
    for round in 0..2 {
        let ids = publish(&c, &server, "orders", (0..3).map(|i| json!({"value": i})).collect()).await;
        eventually(&format!("round {round} pushed after the rotation"), Duration::from_secs(30), || acked(&ids)).await;
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.bad_signatures, 0, "every delivery of the overlap verifies with the old secret");
    let with_new = &seen.also_verified;
    assert!(with_new.last() == Some(&true), "the last delivery verifies with the new secret too: {with_new:?}");
    assert!(with_new.iter().filter(|v| !**v).count() <= 1, "one batch at most without the new: {with_new:?}");
    let last = seen.last.as_ref().expect("a delivery");
    assert!(standard_webhooks_verifies(&old, last), "standardwebhooks verifies the overlap's delivery with the old");
    assert!(standard_webhooks_verifies(&new, last), "standardwebhooks verifies it with the new");
    let other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    assert!(!standard_webhooks_verifies(other, last), "and with no other secret");
}

/// Waits until the subscription `hook` of `topic` has nothing visible or in flight (the
/// dispatcher settles an attempt just after the receiver answers it), and answers its describe.
async fn settled(c: &reqwest::Client, server: &Server, topic: &str) -> Value {
    let start = Instant::now();
    loop {
        let described = get_json(c, server.url(&format!("/v1/topics/{topic}/subscriptions/hook"))).await;
        let backlog = (&described["backlog"]["in_flight"], &described["backlog"]["visible"]);
        if backlog == (&json!(0), &json!(0)) {
            return described;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the pushed batches are settled: {backlog:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a flaky run must show: signed deliveries of matching events only, none pushed
/// again after its ack, each retry the batch that failed under its webhook-id.
fn check_flaky_run(seen: &Seen, keep: &HashSet<String>) {
    assert_eq!(seen.bad_signatures, 0, "every delivery is signed with the subscription's secret");
    assert!(seen.after_ack.is_empty(), "pushed again after the receiver acked them: {:?}", seen.after_ack);
    let pushed: HashSet<&String> = seen.attempts.iter().flat_map(|(_, items)| items.iter().map(|i| &i.0)).collect();
    assert!(pushed.iter().all(|id| keep.contains(*id)), "only matching events are pushed");
    // A retried batch keeps its webhook-id: ids of attempts with the same messages agree.
    let mut by_messages: HashMap<Vec<String>, HashSet<String>> = HashMap::new();
    for (id, items) in &seen.attempts {
        let mut m: Vec<String> = items.iter().map(|i| i.0.clone()).collect();
        m.sort();
        by_messages.entry(m).or_default().insert(id.clone());
    }
    assert!(by_messages.values().all(|ids| ids.len() == 1), "one webhook-id per batch of messages");
    // A retry is the batch that failed (the behaviour's attempts 0-3 of 10 fail all, 4-5
    // the first message), whole, in order, under its webhook-id.
    let mut retry: HashMap<String, (Vec<String>, Option<String>)> = HashMap::new();
    for (n, (webhook_id, items)) in seen.attempts.iter().enumerate() {
        let ids: Vec<String> = items.iter().map(|i| i.0.clone()).collect();
        if let Some((want, want_id)) = ids.iter().find_map(|id| retry.get(id)) {
            assert_eq!(&ids, want, "a retry pushes the batch that failed");
            assert!(want_id.as_ref().is_none_or(|w| w == webhook_id), "a retry keeps its webhook-id");
        }
        for id in &ids {
            retry.remove(id);
        }
        let failed = match n % 10 {
            0..=3 => ids.clone(),
            4 | 5 => ids[..1].to_vec(),
            _ => Vec::new(),
        };
        // The failed messages' batch: the same one if all failed (its id known), else their own.
        let again = (failed.clone(), (failed.len() == ids.len()).then(|| webhook_id.clone()));
        retry.extend(failed.into_iter().map(|id| (id, again.clone())));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_kill_9_while_a_delivery_is_under_way_then_after_restart_it_is_pushed_again() {
    let (url, seen) = start_receiver(Arc::new(|_, _| StatusCode::OK.into_response())).await;
    let arrived = Arc::new(tokio::sync::Notify::new());
    seen.lock().unwrap().hang_first = Some(arrived.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = client();
    create_topic(&c, &server, "jobs", 1).await;
    // The window of a delivery: its timeout (1 s) and 5 s to settle.
    let body = json!({"start": "earliest", "visibility_timeout_ms": 1000, "redelivery_backoff_ms": [0],
                      "push": {"url": url, "timeout_ms": 1000}});
    subscribe(&c, &server, "jobs", body, &seen).await;
    let ids: HashSet<String> =
        publish(&c, &server, "jobs", (0..3).map(|i| json!({"value": i})).collect()).await.into_iter().collect();
    tokio::time::timeout(Duration::from_secs(20), arrived.notified()).await.expect("the first delivery arrived");
    server.kill9();

    let server = Server::start(dir.path());
    eventually("the held batch pushed again", Duration::from_secs(30), || ids.is_subset(&seen.lock().unwrap().acked))
        .await;
    {
        let seen = seen.lock().unwrap();
        let (first_id, first) = &seen.attempts[0];
        let (again_id, again) = &seen.attempts[1];
        assert_eq!(first.iter().map(|i| &i.0).collect::<HashSet<_>>(), ids.iter().collect());
        assert_eq!(first_id, again_id, "the same batch, the same webhook-id");
        assert!(again.iter().all(|(_, count)| *count == 2), "the second delivery says so: {again:?}");
    }
    // The receiver counts a batch acked when it answers; the dispatcher settles it just after.
    settled(&c, &server, "jobs").await;
    assert!(seen.lock().unwrap().after_ack.is_empty(), "pushed again after its ack");
}

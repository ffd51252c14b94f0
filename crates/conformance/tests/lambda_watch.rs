//! End to end: the publish, read, admin, groups and queues Lambda functions run
//! under `cargo lambda watch` (its Lambda runtime emulator and function URLs) on
//! the AWS adapters against moto, and answer a sequence of HTTP requests exactly
//! as `serve`'s router on the embedded backend answers the same sequence.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sluice_conformance::moto::{adapters, moto};
use sluice_conformance::unique_topic;
use sluice_conformance::watch::{free_port, function_for, start, Watch, BUILD_TIMEOUT};
use sluice_core::ports::state::StateStore;
use sluice_core::SystemClock;
use sluice_runtime::Config;

/// Sends one request and returns its status and JSON body.
async fn call(client: &reqwest::Client, base: &str, method: Method, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut request = client.request(method, format!("{base}{path}"));
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Values that differ between two runs by nature (the clock, random ids and receipts),
/// replaced by a marker; a null stays null.
fn normalize(mut v: Value) -> Value {
    match &mut v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                *x = match k.as_str() {
                    _ if x.is_null() => Value::Null,
                    "created_ms"
                    | "expires_at_ms"
                    | "first_receive_ms"
                    | "last_receive_ms"
                    | "dead_ms"
                    | "oldest_visible_age_ms" => json!("<time>"),
                    "member_id" => json!("<member>"),
                    "receipt" => json!("<receipt>"),
                    _ => normalize(x.take()),
                };
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| *x = normalize(x.take())),
        _ => {}
    }
    v
}

/// Replaces every string equal to a name in `vars` (`$member`, `$receipt0`, …) by its value.
fn substitute(v: Value, vars: &HashMap<String, String>) -> Value {
    match v {
        Value::String(s) => Value::String(vars.get(&s).cloned().unwrap_or(s)),
        Value::Array(items) => Value::Array(items.into_iter().map(|x| substitute(x, vars)).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, x)| (k, substitute(x, vars))).collect()),
        other => other,
    }
}

/// One request of the script: method, path, body.
type Step = (Method, String, Option<Value>);

/// The script's topic and consumer group requests, and a topic deleted and re-created.
fn topic_and_group_steps(topic: &str) -> Vec<Step> {
    let t = format!("/v1/topics/{topic}");
    let g = format!("/v1/groups/{topic}-readers");
    let publish = json!({"events": [
        {"key": "customer-42", "value": {"n": 1}, "timestamp_ms": 1_700_000_000_000_i64},
        {"value": "plain", "partition": 1, "headers": {"h": "v"}, "timestamp_ms": 1_700_000_000_001_i64},
        {"value_base64": "AAEC", "partition": 1, "timestamp_ms": 1_700_000_000_002_i64},
    ]});
    vec![
        (Method::PUT, t.clone(), Some(json!({"partitions": 2}))),
        (Method::PUT, t.clone(), Some(json!({"partitions": 2}))),
        (Method::PUT, t.clone(), Some(json!({"partitions": 3}))),
        (Method::GET, "/v1/topics".into(), None),
        (Method::POST, format!("{t}/events"), Some(publish.clone())),
        (Method::POST, format!("{t}/events"), Some(publish)),
        (Method::GET, format!("{t}/partitions/1/events?offset=0&limit=10"), None),
        (Method::GET, format!("{t}/partitions/1/events?offset=3"), None),
        (Method::GET, format!("{t}/partitions/1/events?offset=99"), None),
        (Method::GET, format!("{t}/partitions/1/offsets?timestamp_ms=1700000000002"), None),
        (Method::GET, t.clone(), None),
        (Method::POST, "/v1/topics/no-such-topic/events".into(), Some(json!({"events": [{"value": 1}]}))),
        // A consumer group reads the topic: join and fetch, commit, describe with lag, leave.
        (Method::POST, format!("{g}/poll"), Some(json!({"topics": [topic], "max_events": 100}))),
        (
            Method::POST,
            format!("{g}/commit"),
            Some(
                json!({"member_id": "$member", "generation": 1, "offsets": [{"topic": topic, "partition": 1, "offset": 2}]}),
            ),
        ),
        (Method::GET, g.clone(), None),
        (Method::POST, format!("{g}/leave"), Some(json!({"member_id": "$member"}))),
        (Method::GET, "/v1/groups".into(), None),
        (Method::DELETE, t.clone(), None),
        (Method::GET, t.clone(), None),
        // The sequence that once acked a publish to a deleted topic on AWS and showed its
        // events under a re-created one: refused at once, and the new topic starts clean.
        (Method::POST, format!("{t}/events"), Some(json!({"events": [{"value": "after-delete", "partition": 1}]}))),
        (Method::PUT, t.clone(), Some(json!({"partitions": 2}))),
        (
            Method::POST,
            format!("{t}/events"),
            Some(json!({"events": [{"value": "reborn", "partition": 1, "timestamp_ms": 1_700_000_000_003_i64}]})),
        ),
        (Method::GET, format!("{t}/partitions/1/events?offset=0&limit=10"), None),
    ]
}

/// The script's work queue requests, on the re-created topic.
fn queue_steps(topic: &str) -> Vec<Step> {
    let t = format!("/v1/topics/{topic}");
    let q = format!("{t}/subscriptions/workers");
    vec![
        // A work queue on the new topic, from its start (index 23 on).
        (
            Method::PUT,
            q.clone(),
            Some(json!({"start": "earliest", "visibility_timeout_ms": 60000, "max_receive_count": 3})),
        ),
        (
            Method::PUT,
            q.clone(),
            Some(json!({"start": "earliest", "visibility_timeout_ms": 60000, "max_receive_count": 3})),
        ),
        (Method::PUT, q.clone(), Some(json!({"start": "latest"}))),
        (Method::GET, format!("{t}/subscriptions"), None),
        (
            Method::POST,
            format!("{t}/events"),
            Some(json!({"events": [
                {"key": "k", "value": {"job": 1}, "partition": 1, "timestamp_ms": 1_700_000_000_004_i64},
                {"value_base64": "AAEC", "partition": 1, "headers": {"h": "v"}, "timestamp_ms": 1_700_000_000_005_i64},
            ]})),
        ),
        (Method::POST, format!("{q}/receive"), Some(json!({"max_messages": 10}))),
        (Method::POST, format!("{q}/ack"), Some(json!({"receipts": ["$receipt0", "not-a-receipt"]}))),
        (Method::POST, format!("{q}/ack"), Some(json!({"receipts": ["$receipt0"]}))),
        (Method::POST, format!("{q}/nack"), Some(json!({"receipts": ["$receipt1"]}))),
        (
            Method::POST,
            format!("{q}/visibility"),
            Some(json!({"receipts": ["$receipt2"], "visibility_timeout_ms": 120000})),
        ),
        (Method::POST, format!("{q}/receive"), Some(json!({"max_messages": 10}))),
        (Method::GET, q.clone(), None),
        (Method::GET, format!("{q}/dlq?limit=10"), None),
        (Method::POST, format!("{q}/dlq/redrive"), Some(json!({}))),
        (Method::DELETE, format!("{q}/dlq"), None),
        (Method::POST, format!("{t}/subscriptions/nobody/receive"), Some(json!({}))),
        (Method::POST, format!("{q}/receive"), Some(json!({"max_messages": 101}))),
        (Method::DELETE, q.clone(), None),
        (Method::GET, q.clone(), None),
    ]
}

/// Runs the same requests against `base(path)` and records each answer.
async fn script(client: &reqwest::Client, base: &dyn Fn(&str) -> String, topic: &str) -> Vec<(String, u16, Value)> {
    let mut steps = topic_and_group_steps(topic);
    steps.extend(queue_steps(topic));
    let mut answers = Vec::new();
    // What earlier answers gave, for the steps after them (it differs between runs): the
    // member id a poll answered (`$member`), the receipts of the last receive (`$receipt0`, …).
    let mut vars = HashMap::new();
    for (method, path, body) in steps {
        let label = format!("{method} {path}");
        let body = body.map(|b| substitute(b, &vars));
        let (status, value) = call(client, &base(&path), method, &path, body.as_ref()).await;
        if let Some(id) = value.get("member_id").and_then(Value::as_str) {
            vars.insert("$member".to_owned(), id.to_owned());
        }
        for (i, m) in value.get("messages").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(receipt) = m.get("receipt").and_then(Value::as_str) {
                vars.insert(format!("$receipt{i}"), receipt.to_owned());
            }
        }
        answers.push((label, status, normalize(value)));
    }
    answers
}

/// The function serving a path, as template.yaml routes it (the script POSTs to every …/events it uses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_functions_under_cargo_lambda_watch_on_moto_then_answers_match_serve() {
    let client = reqwest::Client::builder().timeout(BUILD_TIMEOUT).build().unwrap();
    let topic = unique_topic("e2e");

    // `serve`: the full router on the embedded backend, on a loopback socket.
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_env().map(|c| Config { data_dir: dir.path().to_owned(), ..c }).unwrap();
    let log = sluice_runtime::open_embedded(&config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let serve_base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, sluice_api::router(log)).await });
    let expected = script(&client, &|_| serve_base.clone(), &topic).await;

    let functions = ["sluice-admin", "sluice-publish", "sluice-read", "sluice-groups", "sluice-queues"];
    let ports: Vec<u16> = functions.iter().map(|_| free_port()).collect();
    let _watches: Vec<Watch> = functions.iter().zip(&ports).map(|(f, &port)| start(f, port, &[])).collect();
    let url = |function: &str| {
        let port = functions.iter().zip(&ports).find(|(f, _)| **f == function).map(|(_, p)| *p).unwrap_or_default();
        format!("http://127.0.0.1:{port}/lambda-url/{function}")
    };
    let deadline = Instant::now() + BUILD_TIMEOUT;
    // The first request to each function waits while cargo lambda builds it.
    for function in functions {
        loop {
            match client.get(format!("{}/v1/not-a-route", url(function))).send().await {
                Ok(r) if r.status() == StatusCode::NOT_FOUND => break,
                other => {
                    assert!(Instant::now() < deadline, "{function} never came up under cargo lambda watch: {other:?}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
    let routed = script(&client, &|path| url(function_for(path)), &topic).await;
    assert_eq!(routed.len(), expected.len());
    for (got, want) in routed.iter().zip(&expected) {
        assert_eq!(got, want, "cargo lambda watch on moto and serve disagree on {}", want.0);
    }
    assert_answers_say_something(&expected);

    // And they ran on moto, not on a local fallback: the table holds the topic they created.
    let (state, _) = adapters(&moto().settings, Arc::new(SystemClock)).await;
    let item = state.get(&sluice_core::keys::topic_key(&topic)).await.unwrap();
    assert!(item.is_some_and(|i| i.version >= 3), "created, deleted and re-created on moto's table");
}

/// The script's answers say something: the publish landed, the replay found it, the delete
/// took hold, and the work queue was created once, delivered each event once, acked, released
/// and extended.
fn assert_answers_say_something(expected: &[(String, u16, Value)]) {
    assert_eq!(expected[4].1, 200);
    assert!(expected[6].2["events"].as_array().map_or(0, Vec::len) >= 4, "{}", expected[6].2);
    assert_eq!(
        expected[12].2["events"].as_array().map(Vec::len),
        Some(6),
        "the group got every event: {:?}",
        expected[12]
    );
    assert_eq!(expected[13].1, 204, "commit: {:?}", expected[13]);
    assert_eq!(expected[14].2["lag"], 4, "lag after committing 2 of partition 1's 4 events: {:?}", expected[14]);
    assert_eq!(expected[19].1, 404, "publish to a deleted topic: {:?}", expected[19]);
    let reborn = &expected[22].2["events"];
    assert_eq!(reborn.as_array().map(Vec::len), Some(1), "only the new topic's event: {reborn}");
    assert_eq!(reborn[0]["offset"], 0);
    // The work queue: created once, delivered each event once, acked, released, extended.
    let statuses: Vec<u16> = expected[23..].iter().map(|a| a.1).collect();
    assert_eq!(
        statuses,
        [201, 200, 409, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 404, 400, 204, 404],
        "{:?}",
        &expected[23..]
    );
    assert_eq!(expected[25].2["error"]["code"], "subscription_exists", "{:?}", expected[25]);
    let received = &expected[28].2["messages"];
    let offsets: Vec<&Value> =
        received.as_array().map(|m| m.iter().map(|m| &m["offset"]).collect()).unwrap_or_default();
    assert_eq!(offsets, [&json!(0), &json!(1), &json!(2)], "partition 1 from its start: {received}");
    assert_eq!(received[0]["value"], "reborn");
    assert_eq!(received[2]["value_base64"], "AAEC");
    let ack = &expected[29].2["results"];
    assert_eq!((&ack[0]["ok"], &ack[1]["error"]["code"]), (&json!(true), &json!("invalid_receipt")), "{ack}");
    // Acked again: already done (a retry's answer), on both.
    assert_eq!(expected[30].2["results"][0]["ok"], true, "{:?}", expected[30]);
    assert_eq!(expected[32].2["results"][0]["ok"], true, "{:?}", expected[32]);
    let again = &expected[33].2["messages"];
    assert_eq!(again.as_array().map(Vec::len), Some(1), "only the released message: {again}");
    assert_eq!((&again[0]["offset"], &again[0]["receive_count"]), (&json!(1), &json!(2)), "{again}");
    let backlog = &expected[34].2["backlog"];
    assert_eq!((&backlog["visible"], &backlog["in_flight"], &backlog["dead"]), (&json!(0), &json!(2), &json!(0)));
    assert_eq!(expected[35].2, json!({"dead_letters": [], "next": null}));
    assert_eq!(expected[38].2["error"]["code"], "subscription_not_found", "{:?}", expected[38]);
}

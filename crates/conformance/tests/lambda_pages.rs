//! The largest page each reading route makes (replay, group poll, queue receive), carried as
//! Lambda carries it: the answer inside API Gateway's proxy result (lambda_http's
//! `ApiGatewayV2httpResponse`, serialized as the runtime posts it), where the JSON body is a
//! JSON string, every quote, backslash and escape of it escaped once more. The whole result
//! must fit Lambda's synchronous response limit, or the platform answers 5xx after the
//! function has already leased (a receive) or moved positions (a poll).

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use serde_json::{json, Value};
use sluice_runtime::Config;
use tower::ServiceExt;

/// Lambda's synchronous response limit: "6 MB" in its quotas, 6,291,556 bytes in the error
/// its runtime API answers past it (`Exceeded maximum allowed payload size (6291556 bytes)`).
const LAMBDA_RESPONSE_LIMIT: usize = 6_291_556;

/// The largest `max_bytes` a read may ask for (6 MiB).
const MAX_BYTES: usize = 6 << 20;

/// The proxy result lambda_http makes of a function's answer, as the runtime posts it.
async fn proxy_result(response: axum::response::Response) -> (u16, Vec<u8>, Value) {
    let response = lambda_http::IntoResponse::into_response(response).await;
    let (parts, body) = response.into_parts();
    let page: Value = serde_json::from_slice(body.as_ref()).unwrap_or(Value::Null);
    let mut result = ApiGatewayV2httpResponse::default();
    result.status_code = parts.status.as_u16().into();
    result.is_base64_encoded = matches!(body, lambda_http::Body::Binary(_));
    result.body = Some(body);
    result.headers = parts.headers;
    (parts.status.as_u16(), serde_json::to_vec(&result).unwrap(), page)
}

async fn call(app: &Router, method: &str, uri: &str, body: Option<Value>) -> (u16, Vec<u8>, Value) {
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let request = Request::builder().method(method).uri(uri).header("content-type", "application/json").body(body);
    proxy_result(app.clone().oneshot(request.unwrap()).await.unwrap()).await
}

/// A topic of one partition holding `events`, published `per_request` at a time.
async fn topic_with(app: &Router, topic: &str, events: &[Value], per_request: usize) {
    let (status, _, answer) = call(app, "PUT", &format!("/v1/topics/{topic}"), Some(json!({"partitions": 1}))).await;
    assert!(status == 200 || status == 201, "create {topic}: {status} {answer}");
    for chunk in events.chunks(per_request) {
        let uri = format!("/v1/topics/{topic}/events");
        let (status, _, answer) = call(app, "POST", &uri, Some(json!({ "events": chunk }))).await;
        assert_eq!(status, 200, "publish to {topic}: {answer}");
    }
}

/// Many short strings, each a quote and a backslash escaped: the body doubles once escaped.
fn quote_dense(bytes: usize) -> Value {
    json!({ "value": vec!["\"\\"; bytes / 7] })
}

fn binary(bytes: usize) -> Value {
    use base64::Engine;
    let value: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
    json!({ "value_base64": base64::engine::general_purpose::STANDARD.encode(value) })
}

/// A key and header values of control characters: six bytes each in the body, seven carried.
fn control_keys() -> Value {
    let control = |n: usize| "\u{1}".repeat(n);
    let headers = json!({ format!("{}a", control(255)): control(4096), format!("{}b", control(255)): control(4096) });
    json!({ "key": control(1024), "headers": headers, "value": 1 })
}

/// Replay, group poll and queue receive of `topic` (each its largest page) answer 200 with
/// fewer events than the topic holds (the page budget cut them): the pages past Lambda's
/// limit, described.
async fn pages_past_the_limit(app: &Router, topic: &str, held: usize) -> Vec<String> {
    let replay = format!("/v1/topics/{topic}/partitions/0/events?offset=0&limit=10000&max_bytes={MAX_BYTES}");
    let (status, result, page) = call(app, "GET", &replay, None).await;
    assert_eq!(status, 200, "replay {topic}: {page}");
    let mut past = Vec::new();
    past.extend(check(topic, "replay", &result, page["events"].as_array().map_or(0, Vec::len), held));

    let mut poll = json!({"topics": [topic], "max_events": 10_000, "max_bytes": MAX_BYTES});
    let group = format!("/v1/groups/pages-{topic}/poll");
    let (mut status, mut result, mut page) = call(app, "POST", &group, Some(poll.clone())).await;
    // The first poll joins; a member that got nothing yet polls once more.
    if status == 200 && page["events"].as_array().is_some_and(Vec::is_empty) {
        poll["member_id"] = page["member_id"].clone();
        (status, result, page) = call(app, "POST", &group, Some(poll)).await;
    }
    assert_eq!(status, 200, "group poll {topic}: {page}");
    past.extend(check(topic, "group poll", &result, page["events"].as_array().map_or(0, Vec::len), held));

    let sub = format!("/v1/topics/{topic}/subscriptions/pages");
    let (status, _, answer) = call(app, "PUT", &sub, Some(json!({"start": "earliest"}))).await;
    assert!(status == 200 || status == 201, "subscribe {topic}: {status} {answer}");
    let (status, result, page) = call(app, "POST", &format!("{sub}/receive"), Some(json!({"max_messages": 100}))).await;
    assert_eq!(status, 200, "receive {topic}: {page}");
    past.extend(check(topic, "receive", &result, page["messages"].as_array().map_or(0, Vec::len), held.min(100)));
    past
}

fn check(topic: &str, route: &str, result: &[u8], events: usize, held: usize) -> Option<String> {
    let said = format!("{route} of {topic}: {events} of {held} events, a proxy result of {} bytes", result.len());
    println!("{said}");
    assert!(events > 0 && events < held, "{said}: the budget did not cut the page");
    (result.len() > LAMBDA_RESPONSE_LIMIT).then_some(said)
}

#[tokio::test]
async fn given_the_largest_pages_of_each_route_when_carried_by_lambda_then_they_fit_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_env().map(|c| Config { data_dir: dir.path().to_owned(), ..c }).unwrap();
    let app = sluice_api::router(sluice_runtime::open_embedded(&config).unwrap());

    let quotes: Vec<Value> = (0..120).map(|_| quote_dense(60_000)).collect();
    topic_with(&app, "quotes", &quotes, 40).await;
    let mut past = pages_past_the_limit(&app, "quotes", quotes.len()).await;

    let bytes: Vec<Value> = (0..8).map(|_| binary(700 << 10)).collect();
    topic_with(&app, "bytes", &bytes, 4).await;
    past.extend(pages_past_the_limit(&app, "bytes", bytes.len()).await);

    let control: Vec<Value> = (0..120).map(|_| control_keys()).collect();
    topic_with(&app, "control", &control, 40).await;
    past.extend(pages_past_the_limit(&app, "control", control.len()).await);
    assert!(past.is_empty(), "past Lambda's {LAMBDA_RESPONSE_LIMIT} bytes: {past:#?}");
}

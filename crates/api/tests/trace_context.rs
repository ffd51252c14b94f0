//! W3C trace context through the router: a publish's `traceparent` (the request's header,
//! an event's own, or CloudEvents' distributed tracing extension) is stored as each event's
//! header and comes back from replay, a receive, a group poll and the dead-letter queue;
//! a malformed one is ignored, as W3C asks of a receiver, and never fails the publish.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const STATE: &str = "rojo=00f067aa0ba902b7";
const OWN: &str = "00-11111111111111111111111111111111-2222222222222222-00";

/// The full router on a fresh embedded backend (the directory lives as long as the router).
fn app() -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let clock: std::sync::Arc<dyn sluice_core::Clock> = std::sync::Arc::new(sluice_core::SystemClock);
    let (store, objects) = sluice_local::open(dir.path(), clock.clone()).unwrap();
    let log = sluice_core::Log::new(store, objects, clock, sluice_core::LogConfig::default());
    (sluice_api::router(log), dir)
}

/// A request's headers, in order.
type Headers<'a> = Vec<(&'a str, &'a str)>;

async fn call(app: &Router, method: Method, path: &str, headers: &[(&str, &str)], body: &str) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app.clone().oneshot(request.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
}

async fn ok(app: &Router, method: Method, path: &str, body: &str) -> Value {
    let (status, value) = call(app, method.clone(), path, &[("content-type", "application/json")], body).await;
    assert!(status.is_success(), "{method} {path}: {status} {value}");
    value
}

/// A topic of one partition, with a work queue that dead-letters after one delivery.
async fn given_a_topic_and_a_queue() -> (Router, tempfile::TempDir) {
    let (app, dir) = app();
    ok(&app, Method::PUT, "/v1/topics/orders", r#"{"partitions": 1}"#).await;
    ok(&app, Method::PUT, "/v1/topics/orders/subscriptions/work", r#"{"start": "earliest", "max_receive_count": 1}"#)
        .await;
    (app, dir)
}

async fn replay(app: &Router) -> Vec<Value> {
    let page = ok(app, Method::GET, "/v1/topics/orders/partitions/0/events?offset=earliest", "").await;
    page["events"].as_array().unwrap().clone()
}

#[tokio::test]
async fn given_a_traceparent_header_then_each_event_keeps_it_unless_it_has_its_own_and_every_read_returns_it() {
    let (app, _dir) = given_a_topic_and_a_queue().await;
    let events = json!({"events": [
        {"value": 1, "headers": {"source": "shop"}},
        {"value": 2, "headers": {"traceparent": OWN}}]});
    let headers = [("content-type", "application/json"), ("traceparent", PARENT), ("tracestate", STATE)];
    let (status, answer) = call(&app, Method::POST, "/v1/topics/orders/events", &headers, &events.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let inherited = json!({"source": "shop", "traceparent": PARENT, "tracestate": STATE});
    let own = json!({"traceparent": OWN});
    let replayed = replay(&app).await;
    assert_eq!(replayed[0]["headers"], inherited, "replay");
    assert_eq!(replayed[1]["headers"], own, "an event's own context wins, the request's tracestate with it");

    let received =
        ok(&app, Method::POST, "/v1/topics/orders/subscriptions/work/receive", r#"{"max_messages": 10}"#).await;
    let received = received["messages"].as_array().unwrap();
    assert_eq!((received[0]["headers"].clone(), received[1]["headers"].clone()), (inherited.clone(), own.clone()));

    let polled = ok(&app, Method::POST, "/v1/groups/readers/poll", r#"{"topics": ["orders"]}"#).await;
    assert_eq!(polled["events"][0]["headers"], inherited, "group poll");

    // Both messages back at once, out of deliveries: the next receive dead-letters them.
    let receipts: Vec<&Value> = received.iter().map(|m| &m["receipt"]).collect();
    let nack = json!({"receipts": receipts, "delay_ms": 0}).to_string();
    ok(&app, Method::POST, "/v1/topics/orders/subscriptions/work/nack", &nack).await;
    ok(&app, Method::POST, "/v1/topics/orders/subscriptions/work/receive", "{}").await;
    let dead = ok(&app, Method::GET, "/v1/topics/orders/subscriptions/work/dlq", "").await;
    assert_eq!(dead["dead_letters"][0]["event"]["headers"], inherited, "dead-letter queue: {dead}");
}

#[tokio::test]
async fn given_no_traceparent_then_nothing_is_added_not_even_from_an_xray_header() {
    let (app, _dir) = given_a_topic_and_a_queue().await;
    // On Lambda this header is the invocation's own trace, not the producer's: not stored,
    // so an event is stored the same wherever Sluice runs.
    let xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let headers = [("content-type", "application/json"), ("x-amzn-trace-id", xray), ("tracestate", STATE)];
    let (status, _) =
        call(&app, Method::POST, "/v1/topics/orders/events", &headers, r#"{"events": [{"value": 1}]}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replay(&app).await[0]["headers"], json!({}), "a tracestate alone means nothing");
}

#[tokio::test]
async fn given_cloudevents_with_the_distributed_tracing_extension_then_it_is_the_event_s_trace_context() {
    let (app, _dir) = given_a_topic_and_a_queue().await;
    let event = |id: &str| json!({"specversion": "1.0", "id": id, "source": "/shop", "type": "order.paid", "data": 1});
    let mut traced = event("e-1");
    traced["traceparent"] = json!(OWN);
    traced["tracestate"] = json!("verde=1");
    let structured = [("content-type", "application/cloudevents+json"), ("traceparent", PARENT)];
    let (status, _) = call(&app, Method::POST, "/v1/topics/orders/events", &structured, &traced.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    // A batch: the request's context for the event without one.
    let batch = [("content-type", "application/cloudevents-batch+json"), ("traceparent", PARENT)];
    let body = json!([event("e-2")]).to_string();
    assert_eq!(call(&app, Method::POST, "/v1/topics/orders/events", &batch, &body).await.0, StatusCode::OK);
    let binary = [
        ("ce-specversion", "1.0"),
        ("ce-id", "e-3"),
        ("ce-source", "/shop"),
        ("ce-type", "order.paid"),
        ("ce-traceparent", OWN),
        ("traceparent", PARENT),
        ("content-type", "application/json"),
    ];
    assert_eq!(call(&app, Method::POST, "/v1/topics/orders/events", &binary, "1").await.0, StatusCode::OK);

    let replayed = replay(&app).await;
    let header = |i: usize, name: &str| replayed[i]["headers"][name].clone();
    assert_eq!((header(0, "traceparent"), header(0, "tracestate")), (json!(OWN), json!("verde=1")), "structured");
    assert_eq!((header(1, "traceparent"), header(1, "tracestate")), (json!(PARENT), Value::Null), "batch");
    // Binary mode: stored once, as `traceparent` (not also as `ce_traceparent`).
    assert_eq!((header(2, "traceparent"), header(2, "ce_traceparent")), (json!(OWN), Value::Null), "binary");
}

#[tokio::test]
async fn given_a_malformed_trace_context_then_it_is_ignored_and_the_events_are_stored() {
    let (app, _dir) = given_a_topic_and_a_queue().await;
    let json_type = ("content-type", "application/json");
    let one = r#"{"events": [{"value": 1, "headers": {"tracestate": "lone=1"}}]}"#;
    let cloudevent = |extra: Value| {
        let mut e = json!({"specversion": "1.0", "id": "e", "source": "/s", "type": "t"});
        e.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        e.to_string()
    };
    let upper = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01";
    let zeros = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let ce_type = ("content-type", "application/cloudevents+json");
    // (request headers, body, the stored event's headers)
    let cases: Vec<(Headers, String, Value)> = vec![
        (vec![json_type, ("traceparent", upper)], one.into(), json!({"tracestate": "lone=1"})),
        (vec![json_type, ("traceparent", zeros)], one.into(), json!({"tracestate": "lone=1"})),
        (vec![json_type, ("traceparent", "garbage")], one.into(), json!({"tracestate": "lone=1"})),
        (vec![json_type, ("traceparent", PARENT), ("traceparent", OWN)], one.into(), json!({"tracestate": "lone=1"})),
        // A malformed tracestate is dropped; the event's lone one is replaced by nothing.
        (
            vec![json_type, ("traceparent", PARENT), ("tracestate", "no value")],
            one.into(),
            json!({"traceparent": PARENT}),
        ),
        // An event's own header is the producer's: kept as sent, and it wins.
        (
            vec![json_type, ("traceparent", PARENT)],
            r#"{"events": [{"value": 2, "headers": {"traceparent": "x"}}]}"#.into(),
            json!({"traceparent": "x"}),
        ),
        (
            vec![ce_type],
            cloudevent(json!({"traceparent": zeros})),
            json!({"content-type": "application/cloudevents+json"}),
        ),
        (
            vec![ce_type],
            cloudevent(json!({"traceparent": PARENT, "tracestate": "Bad=1"})),
            json!({"content-type": "application/cloudevents+json", "traceparent": PARENT}),
        ),
        (
            vec![
                ("ce-specversion", "1.0"),
                ("ce-id", "e"),
                ("ce-source", "/s"),
                ("ce-type", "t"),
                ("ce-traceparent", upper),
            ],
            "1".into(),
            json!({"ce_specversion": "1.0", "ce_id": "e", "ce_source": "/s", "ce_type": "t", "ce_traceparent": upper}),
        ),
    ];
    let n = cases.len();
    for (headers, body, stored) in cases {
        let (status, answer) = call(&app, Method::POST, "/v1/topics/orders/events", &headers, &body).await;
        assert_eq!(status, StatusCode::OK, "{headers:?} {body}: {answer}");
        let last = replay(&app).await.pop().unwrap();
        assert_eq!(last["headers"], stored, "{headers:?} {body}");
    }
    assert_eq!(replay(&app).await.len(), n, "every publish was stored");
}

#[tokio::test]
async fn given_an_idempotent_retry_with_another_traceparent_then_it_is_the_same_request() {
    let (app, _dir) = given_a_topic_and_a_queue().await;
    let send = |traceparent: &'static str| {
        let app = app.clone();
        async move {
            let headers =
                [("content-type", "application/json"), ("idempotency-key", "k-1"), ("traceparent", traceparent)];
            call(&app, Method::POST, "/v1/topics/orders/events", &headers, r#"{"events": [{"value": 1}]}"#).await
        }
    };
    let first = send(PARENT).await;
    // A traced client's retry is a new span: it must not make the request a different one.
    assert_eq!(send(OWN).await, first);
    let replayed = replay(&app).await;
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0]["headers"]["traceparent"], PARENT, "the first attempt's context stays");
}

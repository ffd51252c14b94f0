//! A store that answers unavailable or throttled: every route answers `503 unavailable` or
//! `429 throttled` with `Retry-After: 1` (the client's cue to retry), and nothing changes.
//! A publish with a deadline (a Lambda invocation's) answers `503` by then.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::StorageError;
use sluice_testkit::{Layered, MemObjects, MemStore, StateLayer};
use tower::ServiceExt;

const THROUGH: u8 = 0;
const UNAVAILABLE: u8 = 1;
const THROTTLED: u8 = 2;
/// Reads go through; every write is refused as throttled.
const WRITES_THROTTLED: u8 = 3;

/// Answers every call with the fault it is set to, or passes it through.
#[derive(Default)]
struct Faulty(AtomicU8);

impl Faulty {
    fn fault(&self) -> Result<(), StorageError> {
        let message = "injected".to_owned();
        match self.0.load(Ordering::SeqCst) {
            UNAVAILABLE => Err(StorageError::Unavailable { message, source: None }),
            THROTTLED => Err(StorageError::Throttled { message, source: None }),
            _ => Ok(()),
        }
    }

    fn write_fault(&self) -> Result<(), StorageError> {
        match self.0.load(Ordering::SeqCst) {
            WRITES_THROTTLED => Err(StorageError::Throttled { message: "injected".into(), source: None }),
            _ => self.fault(),
        }
    }
}

#[async_trait]
impl StateLayer for Faulty {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        self.fault()?;
        inner.get(key).await
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        self.fault()?;
        inner.query(query).await
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write_fault()?;
        inner.write(ops).await
    }

    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write_fault()?;
        inner.write_deferred(ops).await
    }
}

/// A router on an in-memory store behind [`Faulty`], its clock stepping (waits take no time).
fn faulty_app() -> (Arc<sluice_core::SteppingClock>, Arc<Layered<Faulty>>, Router) {
    let clock = Arc::new(sluice_core::SteppingClock::new(1_767_225_600_000));
    let store = Arc::new(Layered::new(Arc::new(MemStore::new(clock.clone())), Faulty::default()));
    let objects = Arc::new(MemObjects::new(clock.clone()));
    let log = sluice_core::Log::new(store.clone(), objects, clock.clone(), sluice_core::LogConfig::default());
    (clock, store, sluice_api::router(log))
}

async fn call(app: &Router, method: Method, path: &str, body: &str) -> (StatusCode, Option<String>, Value) {
    let request = Request::builder().method(method).uri(path).header("content-type", "application/json");
    send(app, request.body(Body::from(body.to_owned())).unwrap()).await
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, Option<String>, Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let (status, retry) = (response.status(), response.headers().get("retry-after").cloned());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let retry = retry.map(|v| v.to_str().unwrap().to_owned());
    (status, retry, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
}

#[tokio::test]
async fn given_a_store_unavailable_or_throttled_then_503_or_429_with_retry_after_and_nothing_changes() {
    // Waiting takes no time: the core's retries of a busy store back off without sleeping.
    let (_, store, app) = faulty_app();
    assert_eq!(call(&app, Method::PUT, "/v1/topics/t", r#"{"partitions": 2}"#).await.0, StatusCode::CREATED);
    let publish = r#"{"events": [{"value": 1}]}"#;
    assert_eq!(call(&app, Method::POST, "/v1/topics/t/events", publish).await.0, StatusCode::OK);
    let snapshot = || async { call(&app, Method::GET, "/v1/topics/t", "").await.2 };
    let before = snapshot().await;

    let requests = [
        (Method::POST, "/v1/topics/t/events", publish),
        (Method::PUT, "/v1/topics/other", "{}"),
        (Method::PUT, "/v1/topics/t/subscriptions/s", "{}"),
        (Method::POST, "/v1/groups/g/poll", r#"{"topics": ["t"]}"#),
        (Method::GET, "/v1/groups/g", ""),
    ];
    for (fault, status, code) in [
        (UNAVAILABLE, StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        (THROTTLED, StatusCode::TOO_MANY_REQUESTS, "throttled"),
    ] {
        store.0.store(fault, Ordering::SeqCst);
        for (method, path, body) in &requests {
            let (got, retry, answer) = call(&app, method.clone(), path, body).await;
            let what = format!("{method} {path} under {code}: {answer}");
            assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{what}");
            assert_eq!(retry.as_deref(), Some("1"), "{what}: Retry-After");
        }
        store.0.store(THROUGH, Ordering::SeqCst);
        assert_eq!(snapshot().await, before, "a refused request under {code} changed the topic");
        assert_eq!(call(&app, Method::GET, "/v1/groups/g", "").await.0, StatusCode::NOT_FOUND, "under {code}");
        assert_eq!(call(&app, Method::GET, "/v1/topics/other", "").await.0, StatusCode::NOT_FOUND, "under {code}");
        let subscription = call(&app, Method::GET, "/v1/topics/t/subscriptions/s", "").await.0;
        assert_eq!(subscription, StatusCode::NOT_FOUND, "under {code}");
    }
}

/// A store that keeps refusing a publish's commit (throttled, as under rival commits) and a
/// request with a deadline: the commit stops retrying in time and the answer is a `503` with
/// `Retry-After` before the deadline, not a function stopped mid-retry (a platform error).
#[tokio::test]
async fn given_a_deadline_when_the_commit_keeps_being_refused_then_503_with_retry_after_before_it() {
    let (clock, store, app) = faulty_app();
    assert_eq!(call(&app, Method::PUT, "/v1/topics/t", r#"{"partitions": 2}"#).await.0, StatusCode::CREATED);
    store.0.store(WRITES_THROTTLED, Ordering::SeqCst);

    let deadline = sluice_core::Clock::now_ms(clock.as_ref()) + 3_000;
    let mut request = Request::builder().method(Method::POST).uri("/v1/topics/t/events");
    request = request.header("content-type", "application/json").extension(sluice_api::Deadline(deadline));
    let (status, retry, answer) = send(&app, request.body(Body::from(r#"{"events": [{"value": 1}]}"#)).unwrap()).await;
    let now = sluice_core::Clock::now_ms(clock.as_ref());
    assert_eq!((status, answer["error"]["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable")));
    assert_eq!(retry.as_deref(), Some("1"), "Retry-After");
    assert!(now <= deadline, "answered {} ms after the deadline", now - deadline);

    store.0.store(THROUGH, Ordering::SeqCst);
    let events = call(&app, Method::GET, "/v1/topics/t/partitions/0/events?offset=0", "").await.2;
    let more = call(&app, Method::GET, "/v1/topics/t/partitions/1/events?offset=0", "").await.2;
    assert_eq!(
        (events["events"].as_array().map(Vec::len), more["events"].as_array().map(Vec::len)),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn given_a_store_unavailable_then_readyz_answers_503_and_healthz_still_200() {
    let (_, store, app) = faulty_app();
    let (ready, _, answer) = call(&app, Method::GET, "/readyz", "").await;
    assert_eq!((ready, answer["status"].as_str()), (StatusCode::OK, Some("ready")));
    store.0.store(UNAVAILABLE, Ordering::SeqCst);
    let (ready, retry, answer) = call(&app, Method::GET, "/readyz", "").await;
    assert_eq!((ready, answer["error"]["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable")));
    assert_eq!(retry.as_deref(), Some("1"));
    let (live, _, answer) = call(&app, Method::GET, "/healthz", "").await;
    assert_eq!((live, answer["status"].as_str()), (StatusCode::OK, Some("ok")), "liveness reads nothing");
}

/// A long poll with a deadline (a Lambda invocation's) on an empty replay, group poll and
/// queue receive: each answers by the deadline though it asked to wait 20 s, and a wait the
/// route refuses without a deadline is refused with one.
#[tokio::test]
async fn given_a_deadline_when_a_long_poll_asks_to_wait_past_it_then_it_answers_by_the_deadline() {
    let (clock, _, app) = faulty_app();
    assert_eq!(call(&app, Method::PUT, "/v1/topics/t", r#"{"partitions": 1}"#).await.0, StatusCode::CREATED);
    let sub = r#"{"start": "earliest"}"#;
    assert_eq!(call(&app, Method::PUT, "/v1/topics/t/subscriptions/s", sub).await.0, StatusCode::CREATED);
    let now = || sluice_core::Clock::now_ms(clock.as_ref());
    let routes = [
        (Method::GET, "/v1/topics/t/partitions/0/events?offset=0&wait_ms=20000", ""),
        (Method::POST, "/v1/groups/g/poll", r#"{"topics": ["t"], "wait_ms": 20000}"#),
        (Method::POST, "/v1/topics/t/subscriptions/s/receive", r#"{"wait_ms": 20000}"#),
    ];
    for (method, path, body) in routes {
        let deadline = now() + 3_000;
        let request = Request::builder().method(method.clone()).uri(path).header("content-type", "application/json");
        let request = request.extension(sluice_api::Deadline(deadline)).body(Body::from(body)).unwrap();
        let (status, _, answer) = send(&app, request).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        assert!(now() <= deadline, "{path}: answered {} ms after the deadline", now() - deadline);
    }
    let too_long = r#"{"wait_ms": 20001}"#;
    let request = Request::builder().method(Method::POST).uri("/v1/topics/t/subscriptions/s/receive");
    let request = request.header("content-type", "application/json").extension(sluice_api::Deadline(now() + 3_000));
    let (status, _, answer) = send(&app, request.body(Body::from(too_long)).unwrap()).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_wait")));
}

/// What a log reader of a failed publish needs: the fault's event inside a `publish` span that
/// names the topic and the request's trace (the span is made only for a refusal).
#[tokio::test]
async fn given_a_store_unavailable_when_a_publish_fails_then_its_fault_is_logged_with_the_topic_and_trace() {
    let (_, store, app) = faulty_app();
    assert_eq!(call(&app, Method::PUT, "/v1/topics/t", r#"{"partitions": 2}"#).await.0, StatusCode::CREATED);
    let logs = Arc::new(logs::Captured::default());
    let _logging = tracing::subscriber::set_default(logs::Capture(logs.clone()));
    store.0.store(UNAVAILABLE, Ordering::SeqCst);
    let fields = refused_in_span(&app, &logs, "/v1/topics/t/events", r#"{"events": [{"value": 1}]}"#, "publish").await;
    assert_eq!((field(&fields, "topic"), field(&fields, "trace_id")), (Some("t"), Some(TRACE_ID)));
}

/// The same for a poll: its fault inside a `poll` span naming the group and the trace (the
/// span is made only for a refusal, as publish's).
#[tokio::test]
async fn given_a_store_unavailable_when_a_poll_fails_then_its_fault_is_logged_with_the_group_and_trace() {
    let (_, store, app) = faulty_app();
    assert_eq!(call(&app, Method::PUT, "/v1/topics/t", r#"{"partitions": 2}"#).await.0, StatusCode::CREATED);
    let logs = Arc::new(logs::Captured::default());
    let _logging = tracing::subscriber::set_default(logs::Capture(logs.clone()));
    store.0.store(UNAVAILABLE, Ordering::SeqCst);
    let fields = refused_in_span(&app, &logs, "/v1/groups/g/poll", r#"{"topics": ["t"], "wait_ms": 0}"#, "poll").await;
    assert_eq!((field(&fields, "group"), field(&fields, "trace_id")), (Some("g"), Some(TRACE_ID)));
}

/// As a publish's: a refused receive's fault is logged inside a `receive` span that names the
/// topic, the subscription and the request's trace (made only for a refusal), with acks
/// riding on it or not.
#[tokio::test]
async fn given_a_store_unavailable_when_a_receive_fails_then_its_fault_is_logged_with_the_subscription_and_trace() {
    let (_, store, app) = faulty_app();
    assert_eq!(call(&app, Method::PUT, "/v1/topics/t", r#"{"partitions": 2}"#).await.0, StatusCode::CREATED);
    assert_eq!(call(&app, Method::PUT, "/v1/topics/t/subscriptions/s", "{}").await.0, StatusCode::CREATED);
    let logs = Arc::new(logs::Captured::default());
    let _logging = tracing::subscriber::set_default(logs::Capture(logs.clone()));
    store.0.store(UNAVAILABLE, Ordering::SeqCst);
    for body in [r#"{"max_messages": 10}"#, r#"{"max_messages": 10, "ack": ["not-a-receipt"]}"#] {
        let fields = refused_in_span(&app, &logs, "/v1/topics/t/subscriptions/s/receive", body, "receive").await;
        let got = (field(&fields, "topic"), field(&fields, "sub"), field(&fields, "trace_id"));
        assert_eq!(got, (Some("t"), Some("s"), Some(TRACE_ID)), "{body}");
    }
}

/// The trace the refused requests carry, and its id as a span records it.
const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "\"4bf92f3577b34da6a3ce929d0e0e4736\"";

/// POSTs `body` to `uri` with [`TRACE`] while the store is unavailable, checks it is refused
/// with a 503, and answers the fields of the span named `span` its fault was logged in.
async fn refused_in_span(
    app: &Router,
    logs: &logs::Captured,
    uri: &str,
    body: &str,
    span: &str,
) -> Vec<(String, String)> {
    logs.events.lock().unwrap().clear();
    let request = Request::builder().method(Method::POST).uri(uri);
    let request = request.header("content-type", "application/json").header("traceparent", TRACE);
    let (status, _, answer) = send(app, request.body(Body::from(body.to_owned())).unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}: {answer}");
    logs.fault_span("storage unavailable", span)
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// A subscriber that keeps each event's message with the spans it was logged in (name and
/// fields, innermost last), on the thread that set it.
mod logs {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    type Span = (String, Vec<(String, String)>);

    #[derive(Default)]
    pub struct Captured {
        next: AtomicU64,
        spans: Mutex<HashMap<u64, Span>>,
        entered: Mutex<Vec<u64>>,
        pub events: Mutex<Vec<(String, Vec<Span>)>>,
    }

    struct Fields(Vec<(String, String)>);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push((field.name().to_owned(), format!("{value:?}")));
        }
    }

    impl Captured {
        /// The fields of the span named `span` that the event `message` was logged in.
        pub fn fault_span(&self, message: &str, span: &str) -> Vec<(String, String)> {
            let events = self.events.lock().unwrap();
            let fault = events.iter().find(|(m, _)| m == message);
            let (_, spans) = fault.unwrap_or_else(|| panic!("no fault logged: {events:?}"));
            let found = spans.iter().find(|(name, _)| name == span).unwrap_or_else(|| panic!("no span: {spans:?}"));
            found.1.clone()
        }
    }

    pub struct Capture(pub Arc<Captured>);

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            let id = self.0.next.fetch_add(1, Ordering::SeqCst) + 1;
            let mut fields = Fields(Vec::new());
            span.record(&mut fields);
            self.0.spans.lock().unwrap().insert(id, (span.metadata().name().to_owned(), fields.0));
            Id::from_u64(id)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields(Vec::new());
            event.record(&mut fields);
            let message = fields.0.iter().find(|(n, _)| n == "message").map(|(_, v)| v.clone()).unwrap_or_default();
            let spans = self.0.spans.lock().unwrap();
            let within = self.0.entered.lock().unwrap().iter().filter_map(|id| spans.get(id).cloned()).collect();
            self.0.events.lock().unwrap().push((message, within));
        }
        fn enter(&self, span: &Id) {
            self.0.entered.lock().unwrap().push(span.into_u64());
        }
        fn exit(&self, span: &Id) {
            let mut entered = self.0.entered.lock().unwrap();
            if let Some(at) = entered.iter().rposition(|id| *id == span.into_u64()) {
                entered.remove(at);
            }
        }
    }
}

//! A store that answers unavailable or throttled: every route answers `503 unavailable` or
//! `429 throttled` with `Retry-After: 1` (the client's cue to retry), and nothing changes.

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
        self.fault()?;
        inner.write(ops).await
    }

    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.fault()?;
        inner.write_deferred(ops).await
    }
}

async fn call(app: &Router, method: Method, path: &str, body: &str) -> (StatusCode, Option<String>, Value) {
    let request = Request::builder().method(method).uri(path).header("content-type", "application/json");
    let response = app.clone().oneshot(request.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
    let (status, retry) = (response.status(), response.headers().get("retry-after").cloned());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let retry = retry.map(|v| v.to_str().unwrap().to_owned());
    (status, retry, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
}

#[tokio::test]
async fn given_a_store_unavailable_or_throttled_then_503_or_429_with_retry_after_and_nothing_changes() {
    // Waiting takes no time: the core's retries of a busy store back off without sleeping.
    let clock: Arc<dyn sluice_core::Clock> = Arc::new(sluice_core::SteppingClock::new(1_767_225_600_000));
    let store = Arc::new(Layered::new(Arc::new(MemStore::new(clock.clone())), Faulty::default()));
    let objects = Arc::new(MemObjects::new(clock.clone()));
    let log = sluice_core::Log::new(store.clone(), objects, clock, sluice_core::LogConfig::default());
    let app = sluice_api::router(log);
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

#[tokio::test]
async fn given_a_store_unavailable_then_readyz_answers_503_and_healthz_still_200() {
    let clock: Arc<dyn sluice_core::Clock> = Arc::new(sluice_core::SteppingClock::new(1_767_225_600_000));
    let store = Arc::new(Layered::new(Arc::new(MemStore::new(clock.clone())), Faulty::default()));
    let objects = Arc::new(MemObjects::new(clock.clone()));
    let app =
        sluice_api::router(sluice_core::Log::new(store.clone(), objects, clock, sluice_core::LogConfig::default()));
    let (ready, _, answer) = call(&app, Method::GET, "/readyz", "").await;
    assert_eq!((ready, answer["status"].as_str()), (StatusCode::OK, Some("ready")));
    store.0.store(UNAVAILABLE, Ordering::SeqCst);
    let (ready, retry, answer) = call(&app, Method::GET, "/readyz", "").await;
    assert_eq!((ready, answer["error"]["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable")));
    assert_eq!(retry.as_deref(), Some("1"));
    let (live, _, answer) = call(&app, Method::GET, "/healthz", "").await;
    assert_eq!((live, answer["status"].as_str()), (StatusCode::OK, Some("ok")), "liveness reads nothing");
}

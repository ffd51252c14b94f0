//! Work queues: subscriptions of a topic, each a queue of its own over the topic's log.
//! `PUT|GET|PATCH|DELETE /v1/topics/{topic}/subscriptions/{sub}`, `GET …/subscriptions`
//! and `POST …/{sub}/pause`, `…/resume` (`subscriptions`), `POST …/{sub}/seek`, `…/purge` (`seek`),
//! `POST …/{sub}/secret` (`secret`),
//! `POST …/{sub}/receive`, `…/ack`, `…/nack`, `…/visibility`
//! (`messages`), and the dead-letter queue: `GET|DELETE …/{sub}/dlq`, `DELETE
//! …/{sub}/dlq/{id}`, `POST …/{sub}/dlq/redrive` (`dead`). Parsing and rendering only:
//! [`Queues`](sluice_core::queues::Queues) checks every value before it writes.

mod dead;
mod messages;
mod secret;
mod seek;
mod subscriptions;

pub use dead::*;
pub use messages::*;
pub use secret::*;
pub use seek::*;
pub use subscriptions::*;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::body::parse_object;
use crate::ApiError;

use crate::path::Path;

/// Queue requests are small JSON documents (at most 100 receipts).
const MAX_BODY: usize = 256 << 10;

/// `{topic}` and `{sub}`.
type SubPath = Path<(String, String)>;

/// A body whose fields are all optional: empty (or only whitespace) means all defaults.
fn parse_optional<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        parse_object(body)
    }
}

pub(crate) fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use axum::Router;
    use serde_json::{json, Value};
    use sluice_core::queues::ReceiptError;
    use tower::ServiceExt;

    use super::*;

    pub(super) const SUB: &str = "/v1/topics/jobs/subscriptions/workers";

    /// The full router on a fresh embedded backend (the directory lives as long as the router).
    fn app() -> (Router, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let clock: std::sync::Arc<dyn sluice_core::Clock> = std::sync::Arc::new(sluice_core::SystemClock);
        let (store, objects) = sluice_local::open(dir.path(), clock.clone()).unwrap();
        let log = sluice_core::Log::new(store, objects, clock, sluice_core::LogConfig::default());
        (crate::router(log), dir)
    }

    pub(super) async fn call(app: &Router, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(path);
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request.body(Body::from(body.unwrap_or_default().to_owned())).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
    }

    async fn ok(app: &Router, method: Method, path: &str, body: Option<&str>) -> Value {
        let (status, value) = call(app, method.clone(), path, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {value}");
        value
    }

    /// A topic of 2 partitions, a subscription from its start, and 3 events on partition 1.
    pub(super) async fn given_a_queue_with_three_messages() -> (Router, tempfile::TempDir) {
        let (app, dir) = app();
        ok(&app, Method::PUT, "/v1/topics/jobs", Some(r#"{"partitions": 2}"#)).await;
        let (status, _) = call(&app, Method::PUT, SUB, Some(r#"{"start": "earliest", "max_receive_count": 2}"#)).await;
        assert_eq!(status, StatusCode::CREATED);
        let events = r#"{"events": [{"value": 1, "partition": 1}, {"value": 2, "partition": 1},
                                    {"value_base64": "AAEC", "key": "k", "headers": {"h": "v"}, "partition": 1}]}"#;
        ok(&app, Method::POST, "/v1/topics/jobs/events", Some(events)).await;
        (app, dir)
    }

    /// What a client can see of the queues: the list, the description (the age of the oldest
    /// visible message moves with the clock: only whether there is one), the dead letters.
    pub(super) async fn snapshot(app: &Router) -> Value {
        let mut described = ok(app, Method::GET, SUB, None).await;
        let mask = |b: &mut Value| b["oldest_visible_age_ms"] = json!(b["oldest_visible_age_ms"].is_u64());
        mask(&mut described["backlog"]);
        for p in described["partitions"].as_array_mut().unwrap() {
            mask(&mut p["backlog"]);
        }
        json!({
            "list": ok(app, Method::GET, "/v1/topics/jobs/subscriptions", None).await,
            "described": described,
            "dlq": ok(app, Method::GET, &format!("{SUB}/dlq"), None).await,
            "topic": ok(app, Method::GET, "/v1/topics/jobs", None).await,
        })
    }

    #[tokio::test]
    async fn given_bad_requests_then_each_is_its_4xx_json_error_and_nothing_changes() {
        let (app, _dir) = given_a_queue_with_three_messages().await;
        let before = snapshot(&app).await;
        assert_eq!(before["described"]["backlog"]["visible"], 3, "{before}");
        let other = "/v1/topics/jobs/subscriptions/other";
        let receipts = serde_json::to_string(&json!({ "receipts": vec!["r"; 101] })).unwrap();
        let huge = format!(r#"{{"receipts": ["{}"]}}"#, "r".repeat(MAX_BODY));
        let cases: Vec<(Method, String, Option<&str>, StatusCode, &str)> = vec![
            // Creating: the body's shape, then each setting.
            (Method::PUT, other.into(), Some("{"), StatusCode::BAD_REQUEST, "invalid_json"),
            (Method::PUT, other.into(), Some("[]"), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::PUT, other.into(), Some(r#"{"colour": "red"}"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::PUT, other.into(), Some(r#"{"start": "middle"}"#), StatusCode::BAD_REQUEST, "invalid_start"),
            (Method::PUT, other.into(), Some(r#"{"start": 5}"#), StatusCode::BAD_REQUEST, "invalid_start"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"start": {"timestamp_ms": -1}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_start",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"start": {"offsets": {"7": 0}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_start",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"start": {"offsets": {"1": 99}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_start",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"start": {"offsets": {"one": 0}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_start",
            ),
            (Method::PUT, other.into(), Some(r#"{"ordering": "random"}"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"visibility_timeout_ms": 43200001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_visibility_timeout",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"visibility_timeout_ms": -1}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"max_receive_count": 0}"#),
                StatusCode::BAD_REQUEST,
                "invalid_max_receive_count",
            ),
            (Method::PUT, other.into(), Some(r#"{"delay_ms": 900001}"#), StatusCode::BAD_REQUEST, "invalid_delay"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"redelivery_backoff_ms": []}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"redelivery_backoff_ms": "1s"}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"redelivery_backoff_ms": {"initial_ms": 10, "max_ms": 100, "factor": 2}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"redelivery_backoff_ms": {"initial_ms": 100, "max_ms": 10}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (Method::PUT, "/v1/topics/jobs/subscriptions/a%20b".into(), None, StatusCode::BAD_REQUEST, "invalid_name"),
            (Method::PUT, "/v1/topics/nope/subscriptions/x".into(), None, StatusCode::NOT_FOUND, "topic_not_found"),
            // The same name with other settings.
            (Method::PUT, SUB.into(), Some(r#"{"start": "latest"}"#), StatusCode::CONFLICT, "subscription_exists"),
            // Pause and resume take no fields; an unknown subscription is not found.
            (
                Method::POST,
                format!("{SUB}/pause"),
                Some(r#"{"now": true}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (Method::POST, format!("{SUB}/resume"), Some("{"), StatusCode::BAD_REQUEST, "invalid_json"),
            (Method::POST, format!("{other}/pause"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            // A change: unknown fields (`rate` among them, for now), what cannot change, and
            // each value as create checks it.
            (
                Method::PATCH,
                SUB.into(),
                Some(r#"{"rate": {"per_second": 5}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (Method::PATCH, SUB.into(), Some(r#"{"start": "latest"}"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::PATCH, SUB.into(), Some(r#"{"ordering": "key"}"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (
                Method::PATCH,
                SUB.into(),
                Some(r#"{"push": {"url": "http://a"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (
                Method::PATCH,
                SUB.into(),
                Some(r#"{"max_receive_count": 0}"#),
                StatusCode::BAD_REQUEST,
                "invalid_max_receive_count",
            ),
            (Method::PATCH, SUB.into(), Some(r#"{"filter": []}"#), StatusCode::BAD_REQUEST, "invalid_filter"),
            (
                Method::PATCH,
                SUB.into(),
                Some(r#"{"redelivery_backoff_ms": 5}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (Method::PATCH, SUB.into(), Some("{"), StatusCode::BAD_REQUEST, "invalid_json"),
            (Method::PATCH, other.into(), Some("{}"), StatusCode::NOT_FOUND, "subscription_not_found"),
            (
                Method::POST,
                "/v1/topics/nope/subscriptions/x/resume".into(),
                None,
                StatusCode::NOT_FOUND,
                "topic_not_found",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"filter": {"value": {"kind": "a"}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_filter",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"filter": {"value": {"n": [{"prefx": "a"}]}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_filter",
            ),
            (Method::PUT, other.into(), Some(r#"{"filter": []}"#), StatusCode::BAD_REQUEST, "invalid_filter"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "ftp://x"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (Method::PUT, other.into(), Some(r#"{"push": {}}"#), StatusCode::BAD_REQUEST, "invalid_push"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "lambda": "f"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"lambda": "f", "secret": "whsec_AAAAAAAAAAAAAAAAAAAAAAAA"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "secret": "nope"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "max_batch": 101}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "timeout_ms": 999}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "max_in_flight": 0}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "suspend_after": {"failures": 0, "spanning_ms": 0}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"lambda": "f", "suspend_after": {"failures": 3}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "colour": "red"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            // Receiving.
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"max_messages": 0}"#),
                StatusCode::BAD_REQUEST,
                "invalid_max_messages",
            ),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"max_messages": 101}"#),
                StatusCode::BAD_REQUEST,
                "invalid_max_messages",
            ),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"wait_ms": 20001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_wait",
            ),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"visibility_timeout_ms": 43200001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_visibility_timeout",
            ),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"max_messages": "ten"}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (Method::POST, format!("{SUB}/receive"), Some(r#"{"max": 1}"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some("{\"max_messages\""),
                StatusCode::BAD_REQUEST,
                "invalid_json",
            ),
            (Method::POST, format!("{other}/receive"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (
                Method::POST,
                "/v1/topics/nope/subscriptions/x/receive".into(),
                None,
                StatusCode::NOT_FOUND,
                "topic_not_found",
            ),
            (Method::GET, format!("{SUB}/receive"), None, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            // Settling.
            (Method::POST, format!("{SUB}/ack"), Some(&receipts), StatusCode::BAD_REQUEST, "too_many_receipts"),
            (Method::POST, format!("{SUB}/nack"), Some(&receipts), StatusCode::BAD_REQUEST, "too_many_receipts"),
            (Method::POST, format!("{SUB}/ack"), Some("{}"), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::POST, format!("{SUB}/ack"), Some(r#"[["r"]]"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::POST, format!("{SUB}/receive"), Some("[1]"), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::POST, format!("{SUB}/ack"), None, StatusCode::BAD_REQUEST, "invalid_json"),
            (
                Method::POST,
                format!("{SUB}/ack"),
                Some(r#"{"receipts": ["r"], "delay_ms": 5}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (Method::POST, format!("{SUB}/ack"), Some(&huge), StatusCode::PAYLOAD_TOO_LARGE, "request_too_large"),
            (
                Method::POST,
                format!("{SUB}/nack"),
                Some(r#"{"receipts": ["r"], "delay_ms": 43200001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_delay",
            ),
            (
                Method::POST,
                format!("{SUB}/visibility"),
                Some(r#"{"receipts": ["r"]}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (
                Method::POST,
                format!("{SUB}/visibility"),
                Some(r#"{"receipts": ["r"], "visibility_timeout_ms": 43200001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_visibility_timeout",
            ),
            (
                Method::POST,
                format!("{other}/ack"),
                Some(r#"{"receipts": ["r"]}"#),
                StatusCode::NOT_FOUND,
                "subscription_not_found",
            ),
            // The dead-letter queue.
            (Method::GET, format!("{SUB}/dlq?limit=ten"), None, StatusCode::BAD_REQUEST, "invalid_limit"),
            (Method::GET, format!("{SUB}/dlq?after=x"), None, StatusCode::BAD_REQUEST, "invalid_dead_letter_id"),
            (Method::GET, format!("{other}/dlq"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (Method::DELETE, format!("{SUB}/dlq/zz"), None, StatusCode::BAD_REQUEST, "invalid_dead_letter_id"),
            (Method::DELETE, format!("{SUB}/dlq/9-0"), None, StatusCode::NOT_FOUND, "partition_not_found"),
            (Method::GET, format!("{SUB}/dlq?after=9-0"), None, StatusCode::NOT_FOUND, "partition_not_found"),
            (Method::GET, format!("{SUB}/dlq?limit=0"), None, StatusCode::BAD_REQUEST, "invalid_limit"),
            (Method::GET, format!("{SUB}/dlq?limit=1001"), None, StatusCode::BAD_REQUEST, "invalid_limit"),
            (Method::GET, format!("{SUB}/dlq?limt=5"), None, StatusCode::BAD_REQUEST, "invalid_query"),
            (Method::DELETE, format!("{SUB}/dlq/1-0"), None, StatusCode::NOT_FOUND, "dead_letter_not_found"),
            (
                Method::POST,
                format!("{SUB}/dlq/redrive"),
                Some(r#"{"max_messages": -1}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (Method::POST, format!("{other}/dlq/redrive"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (Method::DELETE, format!("{other}/dlq"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            // Describing and deleting.
            (Method::GET, other.into(), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (Method::DELETE, other.into(), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (Method::GET, "/v1/topics/nope/subscriptions".into(), None, StatusCode::NOT_FOUND, "topic_not_found"),
        ];
        for (method, path, body, status, code) in cases {
            let label = format!("{method} {path} {}", body.unwrap_or_default().chars().take(80).collect::<String>());
            let (got, answer) = call(&app, method, &path, body).await;
            assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{label}: {answer}");
            assert!(answer["error"]["message"].is_string(), "{label}: {answer}");
            assert_eq!(snapshot(&app).await, before, "{label} changed something");
        }
    }

    #[tokio::test]
    async fn given_receipts_good_and_bad_then_each_has_its_result_and_only_good_ones_act() {
        let (app, _dir) = given_a_queue_with_three_messages().await;
        let received = ok(&app, Method::POST, &format!("{SUB}/receive"), Some(r#"{"max_messages": 10}"#)).await;
        let messages = received["messages"].as_array().unwrap();
        let fields: Vec<(&Value, &Value, &Value)> =
            messages.iter().map(|m| (&m["partition"], &m["offset"], &m["receive_count"])).collect();
        assert_eq!(
            fields,
            [(&json!(1), &json!(0), &json!(1)), (&json!(1), &json!(1), &json!(1)), (&json!(1), &json!(2), &json!(1))]
        );
        // The event as replay renders it.
        let replay = ok(&app, Method::GET, "/v1/topics/jobs/partitions/1/events?offset=2", None).await;
        let mut third = messages[2].clone();
        for field in ["receipt", "receive_count", "first_receive_ms"] {
            third.as_object_mut().unwrap().remove(field);
        }
        assert_eq!(third, replay["events"][0]);
        assert_eq!(third["value_base64"], "AAEC");
        let receipt = |i: usize| messages[i]["receipt"].as_str().unwrap().to_owned();

        let body = json!({ "receipts": [receipt(0), "not-a-receipt"] }).to_string();
        let acked = ok(&app, Method::POST, &format!("{SUB}/ack"), Some(&body)).await;
        assert_eq!(acked["results"][0], json!({ "receipt": receipt(0), "ok": true }));
        assert_eq!(acked["results"][1]["error"]["code"], "invalid_receipt", "{acked}");
        assert_eq!(acked["results"][1]["ok"], false);
        let again =
            ok(&app, Method::POST, &format!("{SUB}/ack"), Some(&json!({ "receipts": [receipt(0)] }).to_string())).await;
        assert_eq!(
            again["results"][0],
            json!({ "receipt": receipt(0), "ok": true }),
            "acked already, as a retry finds"
        );

        let body = json!({ "receipts": [receipt(2)], "visibility_timeout_ms": 60000 }).to_string();
        let extended = ok(&app, Method::POST, &format!("{SUB}/visibility"), Some(&body)).await;
        assert_eq!(extended["results"][0]["ok"], true, "{extended}");
        let renewed = extended["results"][0]["receipt"].as_str().unwrap().to_owned();
        assert_ne!(renewed, receipt(2), "a new receipt for the new window");

        let nacked =
            ok(&app, Method::POST, &format!("{SUB}/nack"), Some(&json!({ "receipts": [receipt(1)] }).to_string()))
                .await;
        assert_eq!(nacked["results"][0], json!({ "receipt": receipt(1), "ok": true }));
        let described = ok(&app, Method::GET, SUB, None).await;
        assert_eq!(described["backlog"]["visible"], 1, "{described}");
        assert_eq!(described["backlog"]["in_flight"], 1, "{described}");
        assert_eq!(described["partitions"][1]["cursor"], 3, "{described}");
        // A refused receipt is echoed; one made visible has no receipt (nobody holds it now).
        let body = json!({ "receipts": ["not-a-receipt", renewed], "visibility_timeout_ms": 0 }).to_string();
        let released = ok(&app, Method::POST, &format!("{SUB}/visibility"), Some(&body)).await;
        let invalid = ReceiptError::Invalid;
        let refused = json!({ "receipt": "not-a-receipt", "ok": false,
            "error": { "code": invalid.code().as_str(), "message": invalid.message() } });
        assert_eq!(released["results"], json!([refused, { "ok": true }]), "{released}");

        // The released message comes back with its count; at the limit (2) it goes to the DLQ
        // when released again, and a redrive brings it back.
        let back = ok(&app, Method::POST, &format!("{SUB}/receive"), Some(r#"{"max_messages": 10}"#)).await;
        assert_eq!((&back["messages"][0]["offset"], &back["messages"][0]["receive_count"]), (&json!(1), &json!(2)));
        let last = back["messages"][0]["receipt"].as_str().unwrap();
        ok(&app, Method::POST, &format!("{SUB}/nack"), Some(&json!({ "receipts": [last] }).to_string())).await;
        let dlq = ok(&app, Method::GET, &format!("{SUB}/dlq"), None).await;
        let dead = &dlq["dead_letters"];
        assert_eq!(dead.as_array().map(Vec::len), Some(1), "{dlq}");
        assert_eq!(
            (&dead[0]["id"], &dead[0]["receive_count"], &dead[0]["event"]["value"]),
            (&json!("1-1"), &json!(2), &json!(2))
        );
        assert_eq!(dlq["next"], Value::Null);
        let redriven = ok(&app, Method::POST, &format!("{SUB}/dlq/redrive"), None).await;
        assert_eq!(redriven, json!({ "redriven": 1 }));
        let purged = ok(&app, Method::DELETE, &format!("{SUB}/dlq"), None).await;
        assert_eq!(purged, json!({ "purged": 0 }));

        let (status, _) = call(&app, Method::DELETE, SUB, None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(call(&app, Method::GET, SUB, None).await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn given_a_receive_carrying_acks_then_it_acks_them_and_receives_the_next_batch() {
        let (app, _dir) = given_a_queue_with_three_messages().await;
        let first = ok(&app, Method::POST, &format!("{SUB}/receive"), Some(r#"{"max_messages": 2}"#)).await;
        assert!(first.get("acks").is_none(), "no acks asked for, none answered: {first}");
        let receipts: Vec<&str> =
            first["messages"].as_array().unwrap().iter().map(|m| m["receipt"].as_str().unwrap()).collect();
        let body = json!({ "max_messages": 10, "ack": [receipts[0], receipts[1], "not-a-receipt"] }).to_string();
        let next = ok(&app, Method::POST, &format!("{SUB}/receive"), Some(&body)).await;
        assert_eq!(next["acks"][0], json!({ "receipt": receipts[0], "ok": true }), "{next}");
        assert_eq!(next["acks"][1]["ok"], true);
        assert_eq!(next["acks"][2]["error"]["code"], "invalid_receipt");
        assert_eq!(next["messages"].as_array().map(Vec::len), Some(1), "the third message: {next}");
        let described = ok(&app, Method::GET, SUB, None).await;
        assert_eq!((&described["backlog"]["visible"], &described["backlog"]["in_flight"]), (&json!(0), &json!(1)));

        // A bad receive acks nothing.
        let last = next["messages"][0]["receipt"].as_str().unwrap();
        let body = json!({ "max_messages": 0, "ack": [last] }).to_string();
        let (status, error) = call(&app, Method::POST, &format!("{SUB}/receive"), Some(&body)).await;
        assert_eq!((status, &error["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_max_messages")));
        let described = ok(&app, Method::GET, SUB, None).await;
        assert_eq!(described["backlog"]["in_flight"], 1, "still held: {described}");
    }

    #[tokio::test]
    async fn given_settings_then_created_once_and_rendered_as_given() {
        let (app, _dir) = app();
        ok(&app, Method::PUT, "/v1/topics/jobs", Some(r#"{"partitions": 2}"#)).await;
        let body = r#"{"start": {"offsets": {"1": 0}}, "visibility_timeout_ms": 5000, "max_receive_count": 9,
                       "ordering": "key", "delay_ms": 10, "redelivery_backoff_ms": {"initial_ms": 100, "max_ms": 800}}"#;
        let (status, created) = call(&app, Method::PUT, SUB, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        assert_eq!(created["start"], json!({"offsets": {"1": 0}}));
        assert_eq!(created["ordering"], "key");
        assert_eq!(created["redelivery_backoff_ms"], json!({"initial_ms": 100, "max_ms": 800, "multiplier": 2}));
        assert_eq!(created["start_offsets"], json!([0, 0]));
        let (status, again) = call(&app, Method::PUT, SUB, Some(body)).await;
        assert_eq!((status, &again), (StatusCode::OK, &created));

        // No body: every default.
        let (status, plain) = call(&app, Method::PUT, "/v1/topics/jobs/subscriptions/plain", None).await;
        assert_eq!(status, StatusCode::CREATED, "{plain}");
        assert_eq!(
            (&plain["start"], &plain["visibility_timeout_ms"], &plain["max_receive_count"], &plain["ordering"]),
            (&json!("latest"), &json!(30000), &json!(5), &json!("none"))
        );
        assert_eq!((&plain["delay_ms"], &plain["redelivery_backoff_ms"]), (&json!(0), &Value::Null));
        let steps = r#"{"redelivery_backoff_ms": [10, 20]}"#;
        let (_, stepped) = call(&app, Method::PUT, "/v1/topics/jobs/subscriptions/steps", Some(steps)).await;
        assert_eq!(stepped["redelivery_backoff_ms"], json!([10, 20]));

        let list = ok(&app, Method::GET, "/v1/topics/jobs/subscriptions", None).await;
        let names: Vec<&Value> = list["subscriptions"].as_array().unwrap().iter().map(|s| &s["name"]).collect();
        assert_eq!(names, [&json!("plain"), &json!("steps"), &json!("workers")]);
        let empty = ok(&app, Method::POST, &format!("{SUB}/receive"), None).await;
        assert_eq!(empty, json!({ "messages": [] }));
    }

    #[tokio::test]
    async fn given_a_push_subscription_then_its_secret_shows_once_and_clients_cannot_receive() {
        let (app, _dir) = app();
        ok(&app, Method::PUT, "/v1/topics/jobs", Some(r#"{"partitions": 2}"#)).await;
        let body = r#"{"push": {"url": "http://127.0.0.1:3000/hook", "max_batch": 20}, "filter": {"key": [{"prefix": "eu-"}]}}"#;
        let (status, created) = call(&app, Method::PUT, SUB, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let secret = created["push"]["secret"].as_str().expect("the create answer shows the secret").to_owned();
        assert!(secret.starts_with("whsec_"));
        assert_eq!(created["push"]["url"], "http://127.0.0.1:3000/hook");
        assert_eq!((&created["push"]["max_batch"], &created["push"]["timeout_ms"]), (&json!(20), &json!(10000)));
        assert_eq!(created["filter"], json!({"key": [{"prefix": "eu-"}]}));
        let (status, again) = call(&app, Method::PUT, SUB, Some(body)).await;
        assert_eq!(status, StatusCode::OK, "the same settings without a secret: the same subscription");
        assert_eq!(again["push"].get("secret"), None, "only the create answer shows the secret");
        let described = ok(&app, Method::GET, SUB, None).await;
        assert_eq!(described["push"].get("secret"), None);
        assert_eq!(described["push"]["deliveries"], json!({"attempted": 0, "succeeded": 0, "failed": 0}));
        assert_eq!(described["push"]["suspend_after"], json!({"failures": 20, "spanning_ms": 300000}));
        assert_eq!(described["state"], "active");
        let delivery = json!({"in_flight_limit": 4, "retry_after_until_ms": null, "consecutive_failures": 0,
            "failing_since_ms": null, "suspended_since_ms": null});
        assert_eq!(described["delivery"], delivery, "a push subscription's flow state, at its ceiling");
        assert_eq!(described["backlog"]["filtered"], 0);
        assert!(!described.to_string().contains(&secret));
        let listed = ok(&app, Method::GET, "/v1/topics/jobs/subscriptions", None).await;
        assert!(!listed.to_string().contains(&secret));
        let (status, refused) = call(&app, Method::POST, &format!("{SUB}/receive"), None).await;
        assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("push_subscription")));
        let given = r#"{"push": {"lambda": "arn:aws:lambda:eu-west-1:123456789012:function:f",
            "suspend_after": {"failures": 5, "spanning_ms": 60000}}}"#;
        let (status, lambda) = call(&app, Method::PUT, "/v1/topics/jobs/subscriptions/fn", Some(given)).await;
        assert_eq!(status, StatusCode::CREATED, "{lambda}");
        assert_eq!(lambda["push"]["lambda"], "arn:aws:lambda:eu-west-1:123456789012:function:f");
        assert_eq!(lambda["push"].get("secret"), None);
        assert_eq!(lambda["push"]["suspend_after"], json!({"failures": 5, "spanning_ms": 60000}));
    }
}

//! The topics API's bad-input matrix: each request with the status and the error code the
//! API documents for it.

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::Server;

/// (method, path, body, expected status, expected error code)
pub type Case = (Method, String, Option<Vec<u8>>, u16, &'static str);

/// Refused writes (topic `t` exists, with two partitions): malformed, oversized or
/// misaddressed publishes, bad names and partition counts, topics that exist or do not.
pub fn bad_writes() -> Vec<Case> {
    let big_value = "x".repeat((1 << 20) + 1);
    let big_request = json!({ "events": (0..7).map(|_| json!({ "value": "y".repeat(1 << 20) })).collect::<Vec<_>>() });
    let too_many = json!({ "events": (0..1001).map(|i| json!({ "value": i })).collect::<Vec<_>>() });
    let too_many_headers: serde_json::Map<String, Value> = (0..65).map(|i| (format!("h{i}"), json!("v"))).collect();
    let publish_url = "/v1/topics/t/events";
    vec![
        (Method::POST, publish_url.into(), Some(b"{\"events\": [".to_vec()), 400, "invalid_json"),
        (
            Method::POST,
            "/v1/topics/%C3%28/events".into(),
            Some(br#"{"events": [{"value": 1}]}"#.to_vec()),
            400,
            "invalid_path",
        ),
        (Method::POST, publish_url.into(), Some(b"{\"events\": 3}".to_vec()), 400, "invalid_request"),
        (Method::POST, publish_url.into(), Some(br#"{"events": []}"#.to_vec()), 400, "empty_batch"),
        (Method::POST, publish_url.into(), Some(br#"{"events": [{"key": "k"}]}"#.to_vec()), 400, "invalid_event"),
        (
            Method::POST,
            "/v1/topics/nope/events".into(),
            Some(br#"{"events": [{"value": 1}]}"#.to_vec()),
            404,
            "topic_not_found",
        ),
        (
            Method::POST,
            "/v1/topics/bad%20name/events".into(),
            Some(br#"{"events": [{"value": 1}]}"#.to_vec()),
            400,
            "invalid_name",
        ),
        (Method::PUT, "/v1/topics/bad%2Fname".into(), Some(b"{}".to_vec()), 400, "invalid_name"),
        (Method::PUT, format!("/v1/topics/{}", "n".repeat(250)), Some(b"{}".to_vec()), 400, "invalid_name"),
        (Method::PUT, "/v1/topics/zero".into(), Some(br#"{"partitions": 0}"#.to_vec()), 400, "invalid_partitions"),
        (Method::PUT, "/v1/topics/t".into(), Some(br#"{"partitions": 3}"#.to_vec()), 409, "topic_exists"),
        (
            Method::POST,
            publish_url.into(),
            Some(serde_json::to_vec(&json!({ "events": [{ "value": big_value }] })).unwrap()),
            413,
            "value_too_large",
        ),
        (Method::POST, publish_url.into(), Some(serde_json::to_vec(&big_request).unwrap()), 413, "request_too_large"),
        (Method::POST, publish_url.into(), Some(serde_json::to_vec(&too_many).unwrap()), 413, "too_many_events"),
        (
            Method::POST,
            publish_url.into(),
            Some(serde_json::to_vec(&json!({ "events": [{ "value": 1, "headers": too_many_headers }] })).unwrap()),
            400,
            "too_many_headers",
        ),
        (
            Method::POST,
            publish_url.into(),
            Some(br#"{"events": [{"value_base64": "not base64!"}]}"#.to_vec()),
            400,
            "invalid_base64",
        ),
        (
            Method::POST,
            publish_url.into(),
            Some(br#"{"events": [{"value": 1}, {"value": 2, "partition": 2}]}"#.to_vec()),
            400,
            "partition_out_of_range",
        ),
        (Method::DELETE, "/v1/topics/nope".into(), None, 404, "topic_not_found"),
        (Method::PUT, "/v1/topics/r".into(), Some(br#"{"retention_ms": 0}"#.to_vec()), 400, "invalid_retention"),
        (Method::PUT, "/v1/topics/r".into(), Some(br#"{"retention_bytes": -1}"#.to_vec()), 400, "invalid_retention"),
        (Method::PUT, "/v1/topics/r".into(), Some(b"[2, null, null]".to_vec()), 400, "invalid_request"),
        (Method::PUT, "/v1/topics/r".into(), Some(br#"{"partition": 2}"#.to_vec()), 400, "invalid_request"),
    ]
    .into_iter()
    .chain(bad_publish_shapes())
    .collect()
}

/// Publishes a reader could not read back, or that do not have the documented shape: a value
/// nested past the limit, fields publish does not know, a timestamp before the epoch or
/// too far ahead of now.
fn bad_publish_shapes() -> Vec<Case> {
    let publish = |body: String, status, code| {
        (Method::POST, "/v1/topics/t/events".to_owned(), Some(body.into_bytes()), status, code)
    };
    let deep = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    let far_future = 4_000_000_000_000i64; // the year 2096
    vec![
        publish(format!(r#"{{"events": [{{"value": 1}}, {{"value": {}}}]}}"#, deep(65)), 400, "invalid_event"),
        publish(format!(r#"{{"events": [{{"value": {{"a": {}}}}}]}}"#, deep(64)), 400, "invalid_event"),
        publish(format!(r#"{{"events": [{{"value": {}}}]}}"#, deep(126)), 400, "invalid_event"),
        publish(r#"{"events": [{"value": 1}], "idempotency_key": "k"}"#.into(), 400, "invalid_request"),
        publish(r#"[[{"value": 1}]]"#.into(), 400, "invalid_request"),
        publish(r#"{"events": [[null, 1, null, {}, null, null]]}"#.into(), 400, "invalid_request"),
        publish(r#"{"events": [{"value": 1, "timestamp_ms": -1}]}"#.into(), 400, "invalid_event"),
        publish(format!(r#"{{"events": [{{"value": 1, "timestamp_ms": {far_future}}}]}}"#), 400, "invalid_event"),
        // Keys and headers past their bounds (1 KiB, 256 bytes, 4 KiB), far below the request's.
        publish(
            json!({ "events": [{ "value": 1 }, { "value": 1, "key": "k".repeat(1025) }] }).to_string(),
            400,
            "invalid_event",
        ),
        publish(
            json!({ "events": [{ "value": 1, "headers": { "h".repeat(257): "v" } }] }).to_string(),
            400,
            "invalid_event",
        ),
        publish(
            json!({ "events": [{ "value": 1, "headers": { "h": "v".repeat(4097) } }] }).to_string(),
            400,
            "invalid_event",
        ),
    ]
}

/// Refused CloudEvents publishes: (content type, body, expected status, expected error code).
pub fn bad_cloudevents() -> Vec<(&'static str, String, u16, &'static str)> {
    let deep = format!("{}1{}", "[".repeat(64), "]".repeat(64));
    let event = |extra: &str| format!(r#"{{"specversion": "1.0", "id": "1", "source": "s", "type": "t"{extra}}}"#);
    vec![
        (
            "application/cloudevents+json",
            r#"{"specversion": "1.0", "id": "1", "type": "t"}"#.into(),
            400,
            "invalid_cloudevent",
        ),
        ("application/cloudevents+json", event(&format!(r#", "data": {deep}"#)), 400, "invalid_event"),
        (
            "application/cloudevents-batch+json",
            format!("[{}, {}]", event(""), event(&format!(r#", "data": {deep}"#))),
            400,
            "invalid_event",
        ),
        ("application/cloudevents+json", event(r#", "time": "1969-12-31T23:59:59Z""#), 400, "invalid_event"),
        ("application/cloudevents+json", event(r#", "time": "2096-01-01T00:00:00Z""#), 400, "invalid_event"),
    ]
}

/// Refused reads: bad paths, partitions, offsets, limits, waits and timestamps.
pub fn bad_reads() -> Vec<Case> {
    let events = "/v1/topics/t/partitions/0/events";
    vec![
        (Method::GET, "/v1/topics/t/partitions/%FF/events".into(), None, 400, "invalid_path"),
        (Method::GET, "/v1/topics/t/partitions/2/events".into(), None, 404, "partition_not_found"),
        (Method::GET, "/v1/topics/t/partitions/-1/events".into(), None, 400, "invalid_partition"),
        (Method::GET, format!("{events}?offset=-1"), None, 400, "invalid_offset"),
        (Method::GET, format!("{events}?offset=abc"), None, 400, "invalid_offset"),
        (Method::GET, format!("{events}?offset=3"), None, 416, "offset_out_of_range"),
        (Method::GET, format!("{events}?limit=0"), None, 400, "invalid_limit"),
        (Method::GET, format!("{events}?wait_ms=20001"), None, 400, "invalid_wait"),
        (Method::GET, format!("{events}?max_bytes=0"), None, 400, "invalid_max_bytes"),
        (Method::GET, format!("{events}?max_bytes=6291457"), None, 400, "invalid_max_bytes"),
        // Unknown parameters are refused, never ignored (a replay from the start for `ofset`).
        (Method::GET, format!("{events}?ofset=3"), None, 400, "invalid_query"),
        (Method::GET, format!("{events}?offset=0&limt=1"), None, 400, "invalid_query"),
        (Method::GET, "/v1/topics/t/partitions/0/offsets?timestamp_ms=1&at=2".into(), None, 400, "invalid_query"),
        (Method::GET, "/v1/topics/t/partitions/0/offsets?timestamp_ms=soon".into(), None, 400, "invalid_timestamp"),
        (Method::GET, "/v1/topics/nope".into(), None, 404, "topic_not_found"),
        (Method::GET, "/v1/nothing-here".into(), None, 404, "not_found"),
    ]
}

/// Sends `case`'s request and checks its answer: the status and the JSON error (code and
/// message) it documents.
pub async fn refused_as_documented(c: &reqwest::Client, s: &Server, (method, path, body, status, code): Case) {
    let mut req = c.request(method.clone(), s.url(&path)).header("content-type", "application/json");
    if let Some(b) = body {
        req = req.body(b);
    }
    let r = req.send().await.unwrap();
    let got = r.status().as_u16();
    let err: Value = r.json().await.unwrap_or_else(|e| panic!("{method} {path}: body is not JSON: {e}"));
    assert_eq!((got, err["error"]["code"].as_str()), (status, Some(code)), "{method} {path}: {err}");
    assert!(err["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{method} {path}: no message");
}

/// Bodies in a content type that is not JSON, on routes that take only JSON: each `415
/// unsupported_media_type`, as on publish. (method, path, content type, body)
pub fn not_json() -> Vec<(Method, &'static str, &'static str, &'static str)> {
    vec![
        (Method::PUT, "/v1/topics/new", "text/plain", r#"{"partitions": 1}"#),
        (Method::PUT, "/v1/topics/new", "application/x-www-form-urlencoded", r#"{"partitions": 1}"#),
        (Method::POST, "/v1/groups/g/poll", "text/plain", r#"{"member_id": "m", "topics": ["t"]}"#),
        (Method::PUT, "/v1/topics/t/subscriptions/s", "text/xml", "{}"),
        (Method::POST, "/v1/topics/t/events", "text/plain", r#"{"events": [{"value": 1}]}"#),
    ]
}

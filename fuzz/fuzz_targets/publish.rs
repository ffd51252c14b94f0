//! The publish parsers, through the real handler: `POST /v1/topics/{topic}/events` on the
//! axum router over an embedded backend. The input is a request as it would arrive,
//! header lines, an empty line, then the body:
//!
//! ```text
//! content-type: application/cloudevents+json
//! idempotency-key: k1
//!
//! {"specversion":"1.0","id":"1","source":"/s","type":"t","data":1}
//! ```
//!
//! Without an empty line the whole input is the body (a JSON batch by default). The
//! content type and `ce-*` headers choose the parser: JSON events, or CloudEvents in
//! structured, batch or binary mode. Limits are small, so inputs reach them.
//!
//! Oracle: no panic, no 5xx, a JSON answer (an error document when refused). A refused
//! publish writes nothing; an accepted one adds at most its events, each of which reads
//! back (from a replay page that is valid JSON) with the key, value, headers and
//! timestamp the request gave, as this harness reads the request on its own.

#![no_main]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sluice_core::{Limits, Log, TopicSpec};
use sluice_fuzz::{block_on, call, check_answer, text, VirtualClock};

const TOPIC: &str = "events";
const PARTITIONS: u32 = 4;
const START_MS: i64 = 1_704_067_200_000;

struct App {
    log: Log,
    router: Router,
}

fn app() -> &'static App {
    static APP: OnceLock<App> = OnceLock::new();
    APP.get_or_init(|| {
        block_on(async {
            let limits = Limits {
                max_value_bytes: 512,
                max_request_bytes: 2048,
                max_events_per_publish: 16,
                max_headers_per_event: 8,
                ..Limits::default()
            };
            let log = sluice_fuzz::open_log(
                &sluice_fuzz::lasting_scratch_dir(),
                Arc::new(VirtualClock::new(START_MS)),
                1,
                limits,
            );
            let spec = TopicSpec { partitions: PARTITIONS, retention_ms: None, retention_bytes: None };
            log.create_topic(TOPIC, spec).await.expect("create the topic");
            App { router: sluice_api::router(log.clone()), log }
        })
    })
}

/// The header lines before the first empty line, and the body after it. Lines that are
/// not a valid header are dropped: the HTTP layer never hands such a request on.
fn split(data: &[u8]) -> (HeaderMap, &[u8]) {
    let Some(end) = data.windows(2).position(|w| w == b"\n\n") else { return (HeaderMap::new(), data) };
    let mut headers = HeaderMap::new();
    for line in data[..end].split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let value = line[colon + 1..].trim_ascii_start();
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(&line[..colon]), HeaderValue::from_bytes(value)) {
            headers.append(name, value);
        }
    }
    (headers, &data[end + 2..])
}

/// An event as the harness reads the request: what a replay must show of it.
#[derive(Debug)]
struct Expected {
    key: Option<String>,
    value: Payload,
    headers: BTreeMap<String, String>,
    timestamp_ms: Option<i64>,
}

#[derive(Debug, PartialEq)]
enum Payload {
    Json(Value),
    Bytes(Vec<u8>),
}

impl Payload {
    /// Whether a replay shows this payload: JSON as it was, bytes as they were (or as the
    /// JSON they are, when published as JSON in binary mode).
    fn shown_as(&self, replayed: &Payload) -> bool {
        match (self, replayed) {
            (Payload::Bytes(bytes), Payload::Json(value)) => {
                serde_json::from_slice::<Value>(bytes).is_ok_and(|v| v == *value)
            }
            (want, got) => want == got,
        }
    }
}

enum Mode {
    JsonBatch,
    Structured,
    CloudEventsBatch,
    Binary,
}

fn mode(headers: &HeaderMap) -> Option<Mode> {
    if headers.contains_key("ce-specversion") {
        return Some(Mode::Binary);
    }
    let content_type = headers.get(CONTENT_TYPE).map_or(Some("application/json"), |v| v.to_str().ok())?;
    let mime = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match mime.as_str() {
        "application/json" | "" => Some(Mode::JsonBatch),
        "application/cloudevents+json" => Some(Mode::Structured),
        "application/cloudevents-batch+json" => Some(Mode::CloudEventsBatch),
        _ => None,
    }
}

fn json_event(e: &Value) -> Option<Expected> {
    let value = match e.get("value").filter(|v| !v.is_null()) {
        Some(v) => Payload::Json(v.clone()),
        None => Payload::Bytes(STANDARD.decode(e.get("value_base64")?.as_str()?).ok()?),
    };
    let headers = match e.get("headers") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(h) => {
            h.as_object()?.iter().map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect::<Option<_>>()?
        }
    };
    Some(Expected {
        key: e.get("key").and_then(Value::as_str).map(str::to_owned),
        value,
        headers,
        timestamp_ms: e.get("timestamp_ms").and_then(Value::as_i64),
    })
}

fn structured_event(e: &Value) -> Expected {
    Expected {
        key: e.get("partitionkey").and_then(Value::as_str).map(str::to_owned),
        value: Payload::Json(e.clone()),
        headers: BTreeMap::from([("content-type".to_owned(), "application/cloudevents+json".to_owned())]),
        timestamp_ms: None,
    }
}

fn binary_event(headers: &HeaderMap, body: &[u8]) -> Expected {
    let mut record_headers = BTreeMap::new();
    for (name, value) in headers {
        if let Some(attr) = name.as_str().strip_prefix("ce-") {
            record_headers.insert(format!("ce_{attr}"), String::from_utf8_lossy(value.as_bytes()).into_owned());
        }
    }
    if let Some(ct) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        record_headers.insert("content-type".to_owned(), ct.to_owned());
    }
    Expected {
        key: headers.get("ce-partitionkey").and_then(|v| v.to_str().ok()).map(str::to_owned),
        value: Payload::Bytes(body.to_vec()),
        headers: record_headers,
        timestamp_ms: None,
    }
}

/// The events of an accepted request, if the harness can tell them (it reads JSON with
/// `serde_json::Value`, which refuses some texts the handler rightly accepts, e.g. 1e400).
fn expected(headers: &HeaderMap, body: &[u8]) -> Option<Vec<Expected>> {
    match mode(headers)? {
        Mode::Binary => Some(vec![binary_event(headers, body)]),
        Mode::JsonBatch => {
            serde_json::from_slice::<Value>(body).ok()?["events"].as_array()?.iter().map(json_event).collect()
        }
        Mode::Structured => Some(vec![structured_event(&serde_json::from_slice(body).ok()?)]),
        Mode::CloudEventsBatch => {
            Some(serde_json::from_slice::<Value>(body).ok()?.as_array()?.iter().map(structured_event).collect())
        }
    }
}

/// An event of a replay page, as [`Expected`].
fn replayed(e: &Value) -> Expected {
    let value = match (e.get("value"), e.get("value_base64").and_then(Value::as_str)) {
        (Some(v), None) => Payload::Json(v.clone()),
        (None, Some(b64)) => Payload::Bytes(STANDARD.decode(b64).expect("replay's value_base64 is base64")),
        _ => panic!("a replayed event has one of value and value_base64: {e}"),
    };
    let headers = e["headers"].as_object().expect("replayed headers are an object");
    Expected {
        key: e["key"].as_str().map(str::to_owned),
        value,
        headers: headers.iter().map(|(k, v)| (k.clone(), v.as_str().expect("header values").to_owned())).collect(),
        timestamp_ms: e["timestamp_ms"].as_i64(),
    }
}

/// Events readable from the topic: the sum of its high watermarks.
async fn published(log: &Log) -> u64 {
    let (_, states) = log.describe_topic(TOPIC).await.expect("describe the topic");
    states.iter().map(|s| s.high_watermark).sum()
}

async fn run(app: &App, data: &[u8]) {
    let (headers, body) = split(data);
    let mut request = Request::builder().method(Method::POST).uri(format!("/v1/topics/{TOPIC}/events"));
    if let Some(h) = request.headers_mut() {
        *h = headers.clone();
    }
    let request = request.body(Body::from(body.to_vec())).expect("a request");
    let before = published(&app.log).await;
    let (status, answer) = call(&app.router, request).await;
    let document = check_answer(status, &answer);
    let after = published(&app.log).await;
    if status != StatusCode::OK {
        assert_eq!(after, before, "a refused publish ({status}) wrote events: {}", text(&answer));
        return;
    }
    let results = document["results"].as_array().expect("an accepted publish answers its results");
    // A retry under an idempotency key answers the first publish's results and writes nothing.
    assert!(after == before || after == before + results.len() as u64, "{before} + {} != {after}", results.len());
    let expected = expected(&headers, body);
    if let Some(expected) = &expected {
        assert_eq!(expected.len(), results.len(), "one result per event: {}", text(&answer));
    }
    for (i, position) in results.iter().enumerate() {
        let (partition, offset) = (&position["partition"], &position["offset"]);
        let uri = format!("/v1/topics/{TOPIC}/partitions/{partition}/events?offset={offset}&limit=1");
        let (status, page) = call(&app.router, Request::get(uri).body(Body::empty()).expect("a request")).await;
        assert_eq!(status, StatusCode::OK, "event {i} at {position} does not read back: {}", text(&page));
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&page) {
            panic!("replay page is not JSON ({e}): {}", text(&page));
        }
        let Some(expected) = &expected else { continue };
        let Ok(page) = serde_json::from_slice::<Value>(&page) else { continue };
        let event = &page["events"][0];
        assert_eq!(&event["offset"], offset, "replay from {offset} starts elsewhere: {page}");
        let (got, want) = (replayed(event), &expected[i]);
        let same_time = want.timestamp_ms.is_none() || want.timestamp_ms == got.timestamp_ms;
        let same = want.key == got.key && want.value.shown_as(&got.value) && want.headers == got.headers;
        assert!(same && same_time, "event {i} reads back as {got:?}, not {want:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let app = app();
    block_on(run(app, data));
});

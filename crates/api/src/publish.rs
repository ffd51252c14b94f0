//! `POST /v1/topics/{topic}/events`: a JSON batch, or CloudEvents 1.0 in
//! structured, batch or binary mode. Every check happens before the log is called.

use sluice_core::Code;
use std::borrow::Cow;
use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use sluice_core::{IdempotencyKey, Log, NewEvent, Position};

use utoipa::ToSchema;

use crate::body::{parse_json, read_body, Object};
use crate::cloudevents;
use crate::openapi::answers::Published;
use crate::openapi::params::TopicPath;
use crate::openapi::{errors, examples as ex};
use crate::path::Path;
use crate::read::write_int;
use crate::{metrics, trace, ApiError, Deadline};

/// A batch of 1 to 1000 events.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PublishBatch)]
pub(crate) struct Batch<'a> {
    #[serde(borrow)]
    #[schema(min_items = 1, max_items = 1000, value_type = Vec<JsonEvent>)]
    events: Vec<Object<JsonEvent<'a>>>,
}

/// An event to publish: exactly one of `value` (any JSON) and `value_base64` (bytes).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewEvent)]
pub(crate) struct JsonEvent<'a> {
    /// Picks the partition, as Kafka's default partitioner does; at most 1 KiB (UTF-8 bytes).
    #[serde(borrow)]
    #[schema(value_type = Option<String>)]
    key: Option<Cow<'a, str>>,
    /// Stored as sent and replayed as the same JSON; nested at most 64 arrays and objects deep.
    #[serde(borrow)]
    #[schema(value_type = Option<Value>)]
    value: Option<&'a RawValue>,
    /// Standard alphabet, padded; replayed as `value_base64`.
    #[schema(content_encoding = "base64")]
    value_base64: Option<String>,
    /// At most 64, each name at most 256 bytes and each value at most 4 KiB. An event's own
    /// `traceparent` (and `tracestate`) is kept over the request's trace context.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Milliseconds since the epoch, 0 to 1 hour (the server's `SLUICE_MAX_TIMESTAMP_AHEAD_MS`)
    /// ahead of now; default: when Sluice accepted the request.
    timestamp_ms: Option<i64>,
    /// An explicit partition, 0 to partitions − 1.
    partition: Option<u32>,
    /// Milliseconds since the epoch before which no subscription delivers the event (it is
    /// in the log at once): at most the topic's retention after its timestamp.
    deliver_at_ms: Option<i64>,
    /// The same, as milliseconds from now (when Sluice accepts the request); not with
    /// `deliver_at_ms`.
    #[schema(minimum = 0)]
    delay_ms: Option<i64>,
}

/// Publish a batch of events: a JSON batch, or CloudEvents 1.0 (structured, batch, or binary
/// mode: attributes in `ce-*` headers and the body as the data, in any content type). The
/// answer comes once the events are stored durably: where each landed, in request order.
/// A W3C `traceparent` (and `tracestate`) is stored with each event that has none of its own.
#[utoipa::path(post, path = "/v1/topics/{topic}/events", tag = "publish", operation_id = "publish",
    params(TopicPath, ("Idempotency-Key" = Option<String>, Header, example = "order-42-created",
        description = "1 to 255 visible ASCII characters: the same request again under it writes nothing"),
        ("traceparent" = Option<String>, Header, example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        pattern = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        description = "W3C trace context: stored as the `traceparent` header of each event without one (ignored if malformed)"),
        ("tracestate" = Option<String>, Header, example = "rojo=00f067aa0ba902b7",
        description = "W3C trace context: stored with the `traceparent`, as each event's `tracestate` header (dropped if malformed)")),
    request_body(content(
        (Batch = "application/json", example = ex::publish),
        (cloudevents::Envelope = "application/cloudevents+json", example = ex::cloudevent),
        (Vec<cloudevents::Envelope> = "application/cloudevents-batch+json", example = ex::cloudevents))),
    responses((status = 200, description = "Stored", body = Published, example = ex::published), errors::Publish))]
pub async fn publish(
    State(log): State<Log>,
    Path(topic): Path<String>,
    deadline: Option<Extension<Deadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let deadline = deadline.map(|Extension(d)| d);
    let outcome = store(&log, &topic, &headers, body, deadline).await;
    // Counted per topic only for a topic that exists (many refusals come before the log
    // looks it up): made-up names must not add label sets.
    let exists = match &outcome {
        Ok(_) => true,
        Err(e) if matches!(e.code, Code::TopicNotFound | Code::InvalidName) => false,
        Err(_) => log.topic_exists(&topic).await,
    };
    if exists {
        metrics::published(&topic, outcome.as_ref().map(|(_, stored)| stored));
    }
    let (results, _) = outcome?;
    Ok(([(header::CONTENT_TYPE, "application/json")], render_results(&results)).into_response())
}

/// Checks the request, then has the log store its events; what it stored, for the metrics.
async fn store(
    log: &Log,
    topic: &str,
    headers: &HeaderMap,
    body: Body,
    deadline: Option<Deadline>,
) -> Result<(Vec<Position>, metrics::Stored), ApiError> {
    let body = read_body(body, log.limits().max_request_bytes).await?;
    let idempotency = idempotency_key(headers, &body)?;
    let trace = trace::request_context(headers);
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json");
    let mime = content_type.split(';').next().unwrap_or_default().trim();
    // What a `delay_ms` counts from: the log's clock, as the event's timestamp.
    let now = log.clock().now_ms();
    let is = |m: &str| mime.eq_ignore_ascii_case(m);
    let mut events = if headers.contains_key("ce-specversion") {
        vec![cloudevents::binary(headers, &body, now)?]
    } else if is("application/cloudevents+json") {
        vec![cloudevents::structured(&body, now)?]
    } else if is("application/cloudevents-batch+json") {
        cloudevents::batch(&body, log.limits().max_events_per_publish, now)?
    } else if is("application/json") || mime.is_empty() {
        json_batch(&body, log.limits().max_events_per_publish, now)?
    } else {
        return Err(ApiError::new(
            Code::UnsupportedMediaType,
            format!("content type '{mime}' is not accepted: send application/json or CloudEvents"),
        ));
    };
    if let Some(trace) = &trace {
        events.iter_mut().for_each(|e| trace.inherit(e, log.limits().max_headers_per_event));
    }
    let stored = metrics::Stored::of(&events);
    let started = std::time::Instant::now();
    let results = match deadline {
        Some(Deadline(ms)) => log.publish_before(topic, events, idempotency, ms).await,
        None => log.publish(topic, events, idempotency).await,
    };
    let results = results.map_err(|e| refused(e, topic, headers))?;
    Ok((results, stored.committed_in(started.elapsed())))
}

/// The log's refusal as an answer, its fault logged (see [`ApiError`]'s `From`) in a
/// `publish` span naming the topic and the request's trace. The span is made only here, for
/// a refusal: every span the fmt subscriber sees has its fields formatted into a string
/// when made, and is entered, left and freed, about 4,600 instructions (6 %) of a
/// single-event publish at 64 connections, for the logs of the few that fail. The checks
/// before the log log nothing above `debug`.
fn refused(e: sluice_core::Error, topic: &str, headers: &HeaderMap) -> ApiError {
    tracing::info_span!("publish", %topic, trace_id = trace::trace_id(headers)).in_scope(|| ApiError::from(e))
}

/// `{"results":[{"partition":P,"offset":O},…]}`, written directly (numbers through itoa,
/// not `format!`): this answers every publish.
fn render_results(results: &[Position]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 40 * results.len());
    out.extend_from_slice(b"{\"results\":[");
    for (i, p) in results.iter().enumerate() {
        write_int(&mut out, if i == 0 { "{\"partition\":" } else { ",{\"partition\":" }, p.partition);
        write_int(&mut out, ",\"offset\":", p.offset);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

fn json_batch(body: &Bytes, max_events: usize, now: i64) -> Result<Vec<NewEvent>, ApiError> {
    // Count before building anything, so a huge batch is refused cheaply.
    let Object(batch): Object<Batch<'_>> = parse_json(body)?;
    if batch.events.len() > max_events {
        return Err(ApiError::new(
            Code::TooManyEvents,
            format!("{} events in one publish; the limit is {max_events}", batch.events.len()),
        ));
    }
    batch.events.into_iter().enumerate().map(|(i, Object(e))| json_event(body, i, e, now)).collect()
}

/// Builds an event whose key and value share the request body's memory where the JSON
/// holds them verbatim (a value always does; a key does unless it has escapes).
fn json_event(body: &Bytes, i: usize, e: JsonEvent<'_>, now: i64) -> Result<NewEvent, ApiError> {
    let invalid = |why: String| ApiError::bad_request(Code::InvalidEvent, format!("event {i}: {why}"));
    crate::schedule::check_headers(e.headers.keys()).map_err(invalid)?;
    let (value, value_is_json) = match (e.value, e.value_base64) {
        (Some(v), None) => (body.slice_ref(v.get().as_bytes()), true),
        (None, Some(b64)) => (
            decode_base64(&b64).map_err(|m| ApiError::bad_request(Code::InvalidBase64, format!("event {i}: {m}")))?,
            false,
        ),
        _ => {
            return Err(ApiError::bad_request(
                Code::InvalidEvent,
                format!("event {i}: give exactly one of 'value' (any JSON) or 'value_base64'"),
            ))
        }
    };
    let key = e.key.map(|k| match k {
        Cow::Borrowed(k) => body.slice_ref(k.as_bytes()),
        Cow::Owned(k) => Bytes::from(k),
    });
    let headers: Vec<(String, Bytes)> = e.headers.into_iter().map(|(k, v)| (k, Bytes::from(v))).collect();
    let mut event =
        NewEvent { key, headers, value, value_is_json, timestamp_ms: e.timestamp_ms, partition: e.partition };
    crate::schedule::apply(&mut event, e.deliver_at_ms, e.delay_ms, now).map_err(invalid)?;
    Ok(event)
}

pub fn decode_base64(s: &str) -> Result<Bytes, String> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map(Bytes::from)
        .map_err(|e| format!("value_base64 is not valid base64: {e}"))
}

/// The `Idempotency-Key` header, with a fingerprint of everything that makes the request what it is.
fn idempotency_key(headers: &HeaderMap, body: &[u8]) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(key) = headers.get("idempotency-key") else { return Ok(None) };
    let key = key
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::bad_request(Code::InvalidIdempotencyKey, "Idempotency-Key must be 1-255 visible ASCII characters")
        })?;
    let mut hash = Sha256::new();
    let mut fields: Vec<(&str, &[u8])> = headers
        .iter()
        .filter(|(n, _)| *n == header::CONTENT_TYPE || n.as_str().starts_with("ce-"))
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    fields.sort();
    for (name, value) in fields {
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name);
        hash.update((value.len() as u64).to_le_bytes());
        hash.update(value);
    }
    hash.update(body);
    Ok(Some(IdempotencyKey { key: key.to_owned(), fingerprint: hash.finalize().to_vec() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that arrives in the given frames, as a streaming client sends it.
    struct Frames(std::collections::VecDeque<Bytes>);

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(http_body::Frame::data(b))))
        }
    }

    fn chunked(chunks: &[&'static [u8]]) -> Body {
        Body::new(Frames(chunks.iter().map(|c| Bytes::from_static(c)).collect()))
    }

    #[tokio::test]
    async fn given_body_in_several_frames_when_read_then_frames_are_joined_in_order() {
        let body = read_body(chunked(&[b"{\"ev", b"ents\":", b"[]}"]), 100).await.unwrap();
        assert_eq!(body, "{\"events\":[]}");
        let one = read_body(Body::from("whole"), 100).await.unwrap();
        assert_eq!(one, "whole");
    }

    #[tokio::test]
    async fn given_frames_past_the_limit_when_read_then_413() {
        let err = read_body(chunked(&[b"12345", b"67890", b"x"]), 10).await.unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(read_body(chunked(&[b"12345", b"67890"]), 10).await.unwrap(), "1234567890");
    }

    #[test]
    fn results_render_as_json() {
        let rendered = render_results(&[Position { partition: 1, offset: 7 }, Position { partition: 0, offset: 0 }]);
        assert_eq!(rendered, br#"{"results":[{"partition":1,"offset":7},{"partition":0,"offset":0}]}"#);
        let v: serde_json::Value = serde_json::from_slice(&rendered).unwrap();
        assert_eq!(v, serde_json::json!({"results": [{"partition": 1, "offset": 7}, {"partition": 0, "offset": 0}]}));
    }

    #[test]
    fn given_a_body_not_of_the_documented_shape_when_parsed_then_invalid_request_naming_it() {
        let cases: [(&[u8], &str); 3] = [
            (br#"{"events": [{"value": 1}], "idempotency_key": "k"}"#, "unknown field `idempotency_key`"),
            (br#"[[{"value": 1}]]"#, "expected a JSON object"),
            (br#"{"events": [[null, 1, null, {}, null, null]]}"#, "expected a JSON object"),
        ];
        for (body, why) in cases {
            let Err(err) = json_batch(&Bytes::from_static(body), 10, 0) else {
                panic!("accepted: {}", String::from_utf8_lossy(body))
            };
            assert_eq!(err.code, Code::InvalidRequest, "{}", err.message);
            assert!(err.message.contains(why), "{}", err.message);
        }
    }

    #[test]
    fn given_plain_and_escaped_keys_when_parsed_then_both_keep_their_text() {
        let body = Bytes::from_static(br#"{"events":[{"key":"k1","value":{"a":1}},{"key":"k\"2","value":"v"}]}"#);
        let events = json_batch(&body, 10, 0).unwrap();
        assert_eq!(events[0].key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(events[0].value, r#"{"a":1}"#);
        assert_eq!(events[1].key.as_deref(), Some(&b"k\"2"[..]));
        assert_eq!(events[1].value, r#""v""#);
    }

    /// Text inside a JSON string that serde_json takes: plain, multi-byte, escaped (lone
    /// surrogates too: a raw value keeps them as sent).
    const IN_STRING: &[&str] = &[
        "a",
        " ",
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "é",
        "😀",
        "\\n",
        "\\\"",
        "\\\\",
        "\\/",
        "\\u0041",
        "\\ud800",
        "\\udc00",
        "\\ud83d\\ude00",
        "\u{7f}",
        "\u{ffff}",
    ];
    /// Numbers and literals serde_json takes as a value.
    const LEAVES: &[&str] = &["0", "-0", "1.5", "1e999", "-1E+2", "123456789012345678901234567890", "true", "null"];
    /// What spoils a body wherever it lands: control bytes, UTF-8 cut short, overlong or
    /// encoding a surrogate or a code point past U+10FFFF, bad escapes and numbers, brackets.
    const SPOILERS: &[&[u8]] = &[
        b"\x00",
        b"\x1f",
        b"\t",
        b"\n",
        b"\xc3",
        b"\x80",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xf0\x9f\x98",
        b"\\u12",
        b"\\x",
        b"\\",
        b"\"",
        b"01",
        b".5",
        b"1.",
        b"-",
        b"nul",
        b"[",
        b"]",
        b"{",
        b"}",
        b",",
        b":",
    ];

    /// A JSON string made of [`IN_STRING`].
    fn strings() -> impl proptest::strategy::Strategy<Value = String> + Clone {
        use proptest::prelude::*;
        proptest::collection::vec(proptest::sample::select(IN_STRING), 0..40)
            .prop_map(|t| format!("\"{}\"", t.concat()))
    }

    /// Any JSON value made of the pieces above, nested up to 140 deep (past serde_json's
    /// limit of 128) in places.
    fn values() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let string = strings();
        let leaf = prop_oneof![string.clone(), proptest::sample::select(LEAVES).prop_map(str::to_owned)];
        let deep = (120usize..140).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n)));
        let leaf = prop_oneof![20 => leaf, 1 => deep];
        leaf.prop_recursive(4, 24, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec((string.clone(), inner), 0..4).prop_map(|fields| {
                    let fields: Vec<String> = fields.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    /// A body of the publish's shape, as is or spoiled: a piece of [`SPOILERS`] put in, or
    /// a byte taken out, anywhere, so that it lands anywhere in a vector's lanes.
    fn bodies() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let key = proptest::option::of(prop_oneof![3 => strings(), 1 => values()]);
        let event = (values(), key).prop_map(|(value, key)| match key {
            Some(key) => format!("{{\"key\":{key},\"value\":{value}}}"),
            None => format!("{{\"value\":{value}}}"),
        });
        let body = proptest::collection::vec(event, 1..4).prop_map(|e| format!("{{\"events\":[{}]}}", e.join(",")));
        let spoil = proptest::option::of((
            any::<proptest::sample::Index>(),
            proptest::option::of(proptest::sample::select(SPOILERS)),
        ));
        (body, spoil).prop_map(|(body, spoil)| {
            let mut body = body.into_bytes();
            match spoil {
                Some((at, Some(piece))) => {
                    let at = at.index(body.len() + 1);
                    body.splice(at..at, piece.iter().copied());
                }
                Some((at, None)) => {
                    body.remove(at.index(body.len()));
                }
                None => {}
            }
            body
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// The publish's parse (the body's UTF-8 checked at once, then parsed as text) takes
        /// exactly the bodies `serde_json::from_slice` takes, with the same keys and values,
        /// and refuses the others as malformed JSON where serde_json finds them malformed.
        #[test]
        fn the_parse_takes_and_refuses_what_serde_json_does(body in bodies()) {
            use proptest::prop_assert_eq;
            let ours = parse_json::<Object<Batch<'_>>>(&body);
            let theirs = serde_json::from_slice::<Object<Batch<'_>>>(&body);
            match (ours, theirs) {
                (Ok(Object(ours)), Ok(Object(theirs))) => {
                    let texts = |b: Batch<'_>| -> Vec<(Option<String>, Option<String>)> {
                        b.events.into_iter().map(|Object(e)| (e.key.map(Into::into), e.value.map(|v| v.get().to_owned()))).collect()
                    };
                    prop_assert_eq!(texts(ours), texts(theirs));
                }
                // serde_json meets bad UTF-8 only where it reads it, after a field of the
                // wrong shape before it perhaps; ours is seen first, and named.
                (Err(ours), Err(theirs)) => match std::str::from_utf8(&body) {
                    Err(e) => {
                        let want = format!("malformed JSON: not UTF-8 at byte {}", e.valid_up_to());
                        prop_assert_eq!((ours.code, ours.message), (Code::InvalidJson, want));
                    }
                    Ok(_) => {
                        prop_assert_eq!(ours.code == Code::InvalidJson, !theirs.is_data(), "{} / {}", ours.message, theirs)
                    }
                },
                (ours, theirs) => proptest::prop_assert!(false, "ours {:?}, serde_json's {:?}: {}",
                    ours.map(|_| ()).map_err(|e| e.message), theirs.map(|_| ()), String::from_utf8_lossy(&body)),
            }
        }
    }
}

//! CloudEvents 1.0 over HTTP. Structured and batch events are stored whole, as
//! JSON values (with a `content-type: application/cloudevents+json` header);
//! binary events store the body as the value and each `ce-*` header as a
//! `ce_*` record header, as the CloudEvents Kafka binding does. The
//! `partitionkey` extension is the key; `time` is the timestamp; the distributed tracing
//! extension's `traceparent` and `tracestate` are also stored as the event's headers of
//! those names (its trace context, which wins over the request's).

use axum::http::{header, HeaderMap};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use sluice_core::trace::TraceContext;
use sluice_core::Code;
use sluice_core::NewEvent;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::body::{parse_json, parse_json_owned, Object};
use crate::ApiError;

/// A CloudEvent in structured mode, stored whole; other attributes and `data` are kept as sent.
#[derive(Deserialize, ToSchema)]
#[schema(as = CloudEvent)]
pub(crate) struct Envelope {
    #[schema(required = true, value_type = String, pattern = "^1\\.0$", example = "1.0")]
    specversion: Option<String>,
    #[schema(required = true, value_type = String, min_length = 1)]
    id: Option<String>,
    #[schema(required = true, value_type = String, min_length = 1)]
    source: Option<String>,
    #[serde(rename = "type")]
    #[schema(required = true, value_type = String, min_length = 1)]
    kind: Option<String>,
    /// RFC 3339: the event's timestamp.
    #[schema(value_type = Option<String>, format = DateTime)]
    time: Option<String>,
    /// The key: picks the partition.
    partitionkey: Option<String>,
    /// W3C trace context (the distributed tracing extension): also stored as the event's
    /// `traceparent` header.
    #[schema(example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]
    traceparent: Option<String>,
    /// Stored as the event's `tracestate` header, with its `traceparent`.
    tracestate: Option<String>,
    /// RFC 3339: no subscription delivers the event before this time (Sluice's
    /// `deliver_at_ms`); not with `delayms`.
    #[schema(value_type = Option<String>, format = DateTime)]
    deliverat: Option<String>,
    /// Milliseconds from now before which no subscription delivers the event (Sluice's
    /// `delay_ms`); not with `deliverat`.
    #[schema(minimum = 0)]
    delayms: Option<i64>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(Code::InvalidCloudevent, message)
}

fn check_required(
    specversion: Option<&str>,
    id: Option<&str>,
    source: Option<&str>,
    kind: Option<&str>,
) -> Result<(), ApiError> {
    if specversion != Some("1.0") {
        return Err(invalid("specversion must be \"1.0\""));
    }
    for (name, v) in [("id", id), ("source", source), ("type", kind)] {
        if v.is_none_or(str::is_empty) {
            return Err(invalid(format!("required attribute '{name}' is missing")));
        }
    }
    Ok(())
}

fn parse_time(time: Option<&str>) -> Result<Option<i64>, ApiError> {
    time.map(|t| {
        OffsetDateTime::parse(t, &Rfc3339)
            .map(|dt| (dt.unix_timestamp_nanos() / 1_000_000) as i64)
            .map_err(|e| invalid(format!("time '{t}' is not RFC 3339: {e}")))
    })
    .transpose()
}

/// The distributed tracing extension's attributes as the event's `traceparent` and
/// `tracestate` headers: none without a well-formed `traceparent` (read as W3C asks, see
/// [`TraceContext::lenient`]).
fn trace_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Vec<(String, Bytes)> {
    let context = traceparent.and_then(|parent| TraceContext::lenient(parent, tracestate));
    context.map_or_else(Vec::new, |c| c.headers().into_iter().map(|(name, value)| (name, Bytes::from(value))).collect())
}

fn structured_event(raw: &RawValue, now: i64) -> Result<NewEvent, ApiError> {
    let Object(env): Object<Envelope> = parse_json_owned(raw.get().as_bytes())?;
    check_required(env.specversion.as_deref(), env.id.as_deref(), env.source.as_deref(), env.kind.as_deref())?;
    let mut headers = vec![("content-type".into(), Bytes::from_static(b"application/cloudevents+json"))];
    headers.extend(trace_headers(env.traceparent.as_deref(), env.tracestate.as_deref()));
    let mut event = NewEvent {
        key: env.partitionkey.map(Bytes::from),
        headers,
        value: Bytes::copy_from_slice(raw.get().as_bytes()),
        value_is_json: true,
        timestamp_ms: parse_time(env.time.as_deref())?,
        partition: None,
    };
    let deliver_at = parse_time(env.deliverat.as_deref())?;
    crate::schedule::apply(&mut event, deliver_at, env.delayms, now).map_err(invalid)?;
    Ok(event)
}

/// `application/cloudevents+json`: one event, the body is the event.
pub fn structured(body: &[u8], now: i64) -> Result<NewEvent, ApiError> {
    let raw: &RawValue = parse_json(body)?;
    structured_event(raw, now)
}

/// `application/cloudevents-batch+json`: a JSON array of structured events.
pub fn batch(body: &[u8], max_events: usize, now: i64) -> Result<Vec<NewEvent>, ApiError> {
    let raws: Vec<&RawValue> = parse_json(body)?;
    if raws.len() > max_events {
        return Err(ApiError::new(
            Code::TooManyEvents,
            format!("{} events in one publish; the limit is {max_events}", raws.len()),
        ));
    }
    raws.into_iter().map(|raw| structured_event(raw, now)).collect()
}

/// Binary mode: attributes in `ce-*` headers, the body is the data.
pub fn binary(headers: &HeaderMap, body: &Bytes, now: i64) -> Result<NewEvent, ApiError> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    check_required(get("ce-specversion"), get("ce-id"), get("ce-source"), get("ce-type"))?;
    // A well-formed trace context is stored as the `traceparent` and `tracestate` headers
    // alone (not also as `ce_traceparent`, which would take two more header slots).
    let mut record_headers = trace_headers(get("ce-traceparent"), get("ce-tracestate"));
    let traced = !record_headers.is_empty();
    for (name, value) in headers {
        if let Some(attr) = name.as_str().strip_prefix("ce-") {
            if (traced && matches!(attr, "traceparent" | "tracestate")) || matches!(attr, "deliverat" | "delayms") {
                continue;
            }
            record_headers.push((format!("ce_{attr}"), Bytes::copy_from_slice(value.as_bytes())));
        }
    }
    let content_type = get(header::CONTENT_TYPE.as_str());
    if let Some(ct) = content_type {
        record_headers.push(("content-type".into(), Bytes::copy_from_slice(ct.as_bytes())));
    }
    let json_type = content_type.is_some_and(|ct| {
        let mime = ct.split(';').next().unwrap_or_default().trim();
        mime == "application/json" || mime.ends_with("+json")
    });
    let value_is_json = json_type && serde_json::from_slice::<&RawValue>(body).is_ok();
    let mut event = NewEvent {
        key: get("ce-partitionkey").map(|k| Bytes::copy_from_slice(k.as_bytes())),
        headers: record_headers,
        value: body.clone(),
        value_is_json,
        timestamp_ms: parse_time(get("ce-time"))?,
        partition: None,
    };
    let delay = get("ce-delayms")
        .map(|d| d.trim().parse().map_err(|_| invalid(format!("delayms '{d}' is not an integer"))))
        .transpose()?;
    crate::schedule::apply(&mut event, parse_time(get("ce-deliverat"))?, delay, now).map_err(invalid)?;
    Ok(event)
}

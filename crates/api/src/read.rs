//! Replay (`…/partitions/{p}/events`) and offset lookup (`…/partitions/{p}/offsets`).

use sluice_core::Code;
use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde_json::{json, Value};
use sluice_core::log::buffers::BufferPool;
use sluice_core::schedule::DELIVER_AT_HEADER;
use sluice_core::segment::Record;
use sluice_core::{Log, OffsetQuery, ReadBatch, ReadRequest};

use crate::openapi::answers::{Position, ReadPage};
use crate::openapi::params::{OffsetsQuery, PartitionPath, ReadQuery};
use crate::openapi::{errors, examples as ex};
use crate::path::Path;
use crate::ApiError;

/// Big answers' buffers kept for the next answers (see [`BufferPool`]), shared by replay
/// and group poll under one budget of 8 MiB: a few pages of 1,000 events of 1 KiB, about
/// 1.5 MB each. Smaller answers (below 64 KiB) are left to the allocator. Receive and peek
/// (about 130 KB for 100 messages of 1 KiB) do not use it: measured, it did not help them
/// (docs/PERFORMANCE.md, "Group poll answers in kept buffers").
pub(crate) static ANSWERS: BufferPool = BufferPool::new(64 << 10, 8 << 20);

const DEFAULT_LIMIT: usize = 100;
const DEFAULT_MAX_BYTES: usize = 1 << 20;

pub(crate) type Params = Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>;

/// The query's parameters, checked as a body's fields are: one the route does not take
/// (`known`) is `400 invalid_query` naming it, never ignored.
pub(crate) fn params(q: Params, known: &[&str]) -> Result<HashMap<String, String>, ApiError> {
    let q = q.map(|Query(q)| q).map_err(|e| ApiError::bad_request(Code::InvalidQuery, e.body_text()))?;
    let mut unknown: Vec<&str> = q.keys().map(String::as_str).filter(|name| !known.contains(name)).collect();
    if unknown.is_empty() {
        return Ok(q);
    }
    unknown.sort_unstable();
    let message = format!("unknown query parameter '{}': this route takes {}", unknown.join("', '"), known.join(", "));
    Err(ApiError::bad_request(Code::InvalidQuery, message))
}

fn partition(raw: &str) -> Result<u32, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::bad_request(Code::InvalidPartition, format!("partition '{raw}' is not a non-negative integer"))
    })
}

/// The `limit` query parameter (`400 invalid_limit` unless a non-negative integer), or
/// `default` without one: replay, peek and the DLQ listing take it alike (each checks
/// its own bounds).
pub(crate) fn limit(q: &HashMap<String, String>, default: usize) -> Result<usize, ApiError> {
    Ok(number(q, "limit", Code::InvalidLimit)?.unwrap_or(default))
}

pub(crate) fn number<T: std::str::FromStr>(
    q: &HashMap<String, String>,
    name: &str,
    code: Code,
) -> Result<Option<T>, ApiError> {
    q.get(name)
        .map(|v| {
            v.parse().map_err(|_| {
                ApiError::bad_request(code, format!("{name} '{v}' is not a non-negative integer in range"))
            })
        })
        .transpose()
}

/// Replay a partition from an offset, with long polling.
#[utoipa::path(get, path = "/v1/topics/{topic}/partitions/{partition}/events", tag = "read",
    operation_id = "readEvents", params(PartitionPath, ReadQuery),
    responses((status = 200, description = "A page of events", body = ReadPage, example = ex::read_page),
        errors::ReadEvents))]
pub async fn events(
    State(log): State<Log>,
    Path((topic, p)): Path<(String, String)>,
    deadline: Option<axum::Extension<crate::Deadline>>,
    q: Params,
) -> Result<Response, ApiError> {
    let q = params(q, &["offset", "limit", "max_bytes", "wait_ms"])?;
    let partition = partition(&p)?;
    let offset = match q.get("offset").map(String::as_str) {
        None | Some("earliest") => log.offset(&topic, partition, OffsetQuery::Earliest).await?,
        Some("latest") => log.offset(&topic, partition, OffsetQuery::Latest).await?,
        Some(_) => number(&q, "offset", Code::InvalidOffset)?.unwrap_or_default(),
    };
    // The core checks the bounds (the same contract for a program embedding it).
    let max_events = limit(&q, DEFAULT_LIMIT)?;
    let max_bytes = number(&q, "max_bytes", Code::InvalidMaxBytes)?.unwrap_or(DEFAULT_MAX_BYTES);
    let wait_ms = number(&q, "wait_ms", Code::InvalidWait)?.unwrap_or(0);
    let deadline = deadline.map(|axum::Extension(d)| d);
    let wait_ms = crate::Deadline::cap_wait(
        deadline,
        wait_ms,
        log.limits().max_wait_ms,
        sluice_core::Clock::now_ms(log.clock().as_ref()),
    );
    let request = ReadRequest { topic, partition, offset, max_events, max_bytes, wait_ms };
    let batch = log.read(&request).await?;
    crate::metrics::read("replay", batch.events.iter().map(|e| (request.topic.as_str(), e)));
    Ok(([(header::CONTENT_TYPE, "application/json")], render(&batch)).into_response())
}

/// Renders a page by hand: JSON values are copied as stored (they were validated on publish)
/// instead of being parsed and re-serialized; into a kept buffer, whose pages are mapped.
fn render(batch: &ReadBatch) -> bytes::Bytes {
    let size: usize = batch.events.iter().map(|e| e.record.approx_size() * 4 / 3 + 96).sum();
    let mut out = ANSWERS.take(size + 128);
    out.extend_from_slice(b"{\"events\":[");
    for (i, e) in batch.events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_int(&mut out, "{\"partition\":", e.partition);
        write_int(&mut out, ",\"offset\":", e.offset);
        out.push(b',');
        write_record(&mut out, &e.record);
        out.push(b'}');
    }
    out.extend_from_slice(
        format!(
            "],\"next_offset\":{},\"high_watermark\":{},\"log_start_offset\":{}}}",
            batch.next_offset, batch.high_watermark, batch.log_start_offset
        )
        .as_bytes(),
    );
    ANSWERS.freeze(out)
}

pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// `prefix` then `n` in decimal: a number field of a JSON answer, without a `format!`.
pub(crate) fn write_int(out: &mut Vec<u8>, prefix: &str, n: impl itoa::Integer) {
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

pub(crate) fn write_record(out: &mut Vec<u8>, r: &Record) {
    write_int(out, "\"timestamp_ms\":", r.timestamp_ms);
    out.extend_from_slice(b",\"key\":");
    match &r.key {
        None => out.extend_from_slice(b"null"),
        Some(k) => write_str(out, &String::from_utf8_lossy(k)),
    }
    out.extend_from_slice(b",\"headers\":{");
    // The schedule is kept as a header (`sluice_core::schedule`), shown as a field of its own.
    let shown = r.headers.iter().filter(|(name, _)| name != DELIVER_AT_HEADER);
    for (i, (name, value)) in shown.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, name);
        out.push(b':');
        write_str(out, &String::from_utf8_lossy(value));
    }
    out.push(b'}');
    if let Some(at) = sluice_core::schedule::deliver_at(&r.headers) {
        write_int(out, ",\"deliver_at_ms\":", at);
    }
    if r.value_is_json {
        out.extend_from_slice(b",\"value\":");
        out.extend_from_slice(&r.value);
    } else {
        out.extend_from_slice(b",\"value_base64\":\"");
        // Encoded in place, not into a string of its own.
        let start = out.len();
        out.resize(start + r.value.len().div_ceil(3) * 4, 0);
        let written = base64::engine::general_purpose::STANDARD.encode_slice(&r.value, &mut out[start..]).unwrap_or(0);
        out.truncate(start + written);
        out.push(b'"');
    }
}

/// Find an offset: the first event at or after a time, or one end of the log.
#[utoipa::path(get, path = "/v1/topics/{topic}/partitions/{partition}/offsets", tag = "read",
    operation_id = "findOffset", params(PartitionPath, OffsetsQuery),
    responses((status = 200, description = "The offset", body = Position, example = ex::offset), errors::FindOffset))]
pub async fn offsets(
    State(log): State<Log>,
    Path((topic, p)): Path<(String, String)>,
    q: Params,
) -> Result<Json<Value>, ApiError> {
    let q = params(q, &["timestamp_ms"])?;
    let partition = partition(&p)?;
    let query = match q.get("timestamp_ms").map(String::as_str) {
        Some("earliest") => OffsetQuery::Earliest,
        Some("latest") => OffsetQuery::Latest,
        Some(t) => OffsetQuery::Timestamp(t.parse().map_err(|_| {
            ApiError::bad_request(
                Code::InvalidTimestamp,
                format!("timestamp_ms '{t}' is not an integer, 'earliest' or 'latest'"),
            )
        })?),
        None => {
            return Err(ApiError::bad_request(
                Code::InvalidTimestamp,
                "give timestamp_ms: milliseconds, 'earliest' or 'latest'",
            ))
        }
    };
    let offset = log.offset(&topic, partition, query).await?;
    Ok(Json(json!({ "partition": partition, "offset": offset })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(value: &[u8], value_is_json: bool) -> Value {
        let record = Record {
            timestamp_ms: 7,
            key: Some(bytes::Bytes::from_static(b"k\"1")),
            headers: vec![("h".to_owned(), bytes::Bytes::from_static(b"v"))],
            value: bytes::Bytes::copy_from_slice(value),
            value_is_json,
        };
        let mut out = b"{".to_vec();
        write_record(&mut out, &record);
        out.push(b'}');
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn unknown_query_parameters_are_refused_by_name_and_known_ones_pass() {
        let query =
            |names: &[&str]| -> Params { Ok(Query(names.iter().map(|n| (n.to_string(), "1".into())).collect())) };
        let known = ["offset", "limit"];
        assert_eq!(params(query(&["offset", "limit"]), &known).unwrap().len(), 2);
        let e = params(query(&["zz", "limit", "ofset"]), &known).err().unwrap();
        assert_eq!((e.status.as_u16(), e.code), (400, Code::InvalidQuery));
        assert_eq!(e.message, "unknown query parameter 'ofset', 'zz': this route takes offset, limit");
    }

    #[test]
    fn records_render_as_json_with_bytes_in_base64() {
        for len in 0..8 {
            let value: Vec<u8> = (0..len).map(|i| 250 - i as u8).collect();
            let v = rendered(&value, false);
            let expected = base64::engine::general_purpose::STANDARD.encode(&value);
            assert_eq!(v["value_base64"], expected, "{len} bytes");
            assert_eq!(v["key"], "k\"1");
        }
        let v = rendered(br#"{"a":[1,2]}"#, true);
        assert_eq!(v, json!({"timestamp_ms": 7, "key": "k\"1", "headers": {"h": "v"}, "value": {"a": [1, 2]}}));
    }
}

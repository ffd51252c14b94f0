//! What a publish's events must be before the log places them: within the size limits,
//! readable back by every client (a JSON value nested at most [`Limits::max_value_depth`]
//! levels), and timestamped between the epoch and a little ahead of now. Pure: the caller
//! passes the time.

use crate::model::{Limits, NewEvent};
use crate::{Code, Error};

/// Checks `events` against `limits` at `now_ms` (the log's clock); the first refusal names
/// the event by its index in the request.
pub(super) fn check(limits: &Limits, events: &[NewEvent], now_ms: i64) -> Result<(), Error> {
    let l = limits;
    if events.is_empty() {
        return Err(Error::invalid(Code::EmptyBatch, "a publish needs at least one event"));
    }
    if events.len() > l.max_events_per_publish {
        return Err(Error::too_large(
            Code::TooManyEvents,
            format!("{} events in one publish; the limit is {}", events.len(), l.max_events_per_publish),
        ));
    }
    let latest = now_ms.saturating_add(l.max_timestamp_ahead_ms);
    events.iter().enumerate().try_for_each(|(i, e)| check_event(l, i, e, latest))
}

/// One event, `i` in the request, against `limits`; `latest` is the last timestamp taken.
fn check_event(l: &Limits, i: usize, e: &NewEvent, latest: i64) -> Result<(), Error> {
    if e.value.len() > l.max_value_bytes {
        return Err(Error::too_large(
            Code::ValueTooLarge,
            format!("event {i}: value is {} bytes; the limit is {}", e.value.len(), l.max_value_bytes),
        ));
    }
    if e.headers.len() > l.max_headers_per_event {
        return Err(Error::invalid(
            Code::TooManyHeaders,
            format!("event {i}: {} headers; the limit is {}", e.headers.len(), l.max_headers_per_event),
        ));
    }
    let invalid = |why: String| Err(Error::invalid(Code::InvalidEvent, format!("event {i}: {why}")));
    if let Some(key) = e.key.as_ref().filter(|k| k.len() > l.max_key_bytes) {
        return invalid(format!("key is {} bytes; the limit is {}", key.len(), l.max_key_bytes));
    }
    for (name, value) in &e.headers {
        if name.len() > l.max_header_name_bytes {
            return invalid(format!("a header name is {} bytes; the limit is {}", name.len(), l.max_header_name_bytes));
        }
        if value.len() > l.max_header_value_bytes {
            let limit = l.max_header_value_bytes;
            return invalid(format!("header '{name}' is {} bytes; the limit is {limit}", value.len()));
        }
    }
    if e.value_is_json && nests_deeper_than(&e.value, l.max_value_depth) {
        return invalid(format!("value nests more than {} levels of arrays and objects", l.max_value_depth));
    }
    if let Some(ts) = e.timestamp_ms.filter(|ts| !(0..=latest).contains(ts)) {
        let ahead = l.max_timestamp_ahead_ms;
        return invalid(format!("timestamp {ts} ms is before the epoch or more than {ahead} ms ahead of now"));
    }
    Ok(())
}

/// Whether the JSON text `json` opens more than `max` arrays and objects inside one another:
/// one pass over the bytes, counting brackets outside strings (the text was parsed already,
/// so it is well-formed), stopping at the first level past `max`.
pub(crate) fn nests_deeper_than(json: &[u8], max: usize) -> bool {
    // Nesting past `max` opens more than `max` brackets, so a text with no more than that
    // (strings' included) cannot: one cheap count, at the CPU's widest vector lanes, spares
    // most events the scan below (a 1 KB event, by callgrind: about 220 instructions with
    // AVX2, against 14.9 k for the scan).
    if crate::scan::opening_brackets(json) <= max {
        return false;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn nested(levels: usize, inner: &str) -> String {
        format!("{}{inner}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_counts_arrays_and_objects_but_not_brackets_in_strings() {
        let cases: Vec<(String, usize, bool)> = vec![
            ("1".into(), 0, false),
            ("[]".into(), 0, true),
            ("[]".into(), 1, false),
            (r#"{"a": [1, {"b": 2}]}"#.into(), 3, false),
            (r#"{"a": [1, {"b": 2}]}"#.into(), 2, true),
            (r#"[[], [], [], []]"#.into(), 2, false),
            (r#"["[[[[", "{{{{"]"#.into(), 1, false),
            (r#"["\"[[[", "\\", [[]]]"#.into(), 3, false),
            (r#"["\"[[[", "\\", [[]]]"#.into(), 2, true),
            (nested(64, "1"), 64, false),
            (nested(65, "1"), 64, true),
            (nested(63, r#"{"a": 1}"#), 64, false),
            (nested(64, r#"{"a": 1}"#), 64, true),
        ];
        for (json, max, deeper) in cases {
            assert_eq!(nests_deeper_than(json.as_bytes(), max), deeper, "{json} past {max}");
        }
    }

    fn event(value: &str, value_is_json: bool, timestamp_ms: Option<i64>) -> NewEvent {
        let value = Bytes::copy_from_slice(value.as_bytes());
        NewEvent { key: None, headers: vec![], value, value_is_json, timestamp_ms, partition: None }
    }

    #[test]
    fn events_nested_too_deep_or_timestamped_out_of_range_are_refused_by_index() {
        let l = Limits::default();
        let now = 1_700_000_000_000;
        let hour = 3_600_000;
        let deep = nested(65, "1");
        let cases: Vec<(NewEvent, Option<&str>)> = vec![
            (event(&nested(64, "1"), true, None), None),
            (event(&deep, true, None), Some("nests more than 64 levels")),
            (event(&deep, false, None), None), // bytes, replayed as base64: no nesting
            (event("1", true, Some(0)), None),
            (event("1", true, Some(now + hour)), None),
            (event("1", true, Some(-1)), Some("timestamp -1 ms is before the epoch")),
            (event("1", true, Some(now + hour + 1)), Some("more than 3600000 ms ahead of now")),
            (event("1", true, Some(i64::MAX)), Some("ahead of now")),
        ];
        for (e, refused) in cases {
            let events = [event("1", true, None), e];
            match (check(&l, &events, now), refused) {
                (Ok(()), None) => {}
                (Err(err @ Error::Invalid { code: Code::InvalidEvent, .. }), Some(why)) => {
                    let message = err.to_string();
                    assert!(message.contains("event 1: ") && message.contains(why), "{message}");
                }
                (got, want) => panic!("{:?}: got {got:?}, want a refusal {want:?}", events[1].timestamp_ms),
            }
        }
        let wider = Limits { max_timestamp_ahead_ms: 2 * hour, ..l };
        assert!(check(&wider, &[event("1", true, Some(now + hour + 1))], now).is_ok());
    }

    #[test]
    fn keys_and_headers_past_their_bounds_are_refused_by_index_naming_the_bound() {
        let l = Limits::default();
        let with = |key: usize, name: usize, value: usize| NewEvent {
            key: Some(Bytes::from("k".repeat(key))),
            headers: vec![("n".repeat(name), Bytes::from("v".repeat(value)))],
            ..event("1", true, None)
        };
        let cases: Vec<(NewEvent, Option<&str>)> = vec![
            (with(1024, 256, 4096), None),
            (with(1025, 1, 1), Some("key is 1025 bytes; the limit is 1024")),
            (with(1, 257, 1), Some("a header name is 257 bytes; the limit is 256")),
            (with(1, 1, 4097), Some("header 'n' is 4097 bytes; the limit is 4096")),
        ];
        for (e, refused) in cases {
            let events = [event("1", true, None), e];
            match (check(&l, &events, 0), refused) {
                (Ok(()), None) => {}
                (Err(err @ Error::Invalid { code: Code::InvalidEvent, .. }), Some(why)) => {
                    assert_eq!(err.to_string(), format!("event 1: {why}"));
                }
                (got, want) => panic!("got {got:?}, want a refusal {want:?}"),
            }
        }
    }

    /// The largest event the limits admit, every byte of its key and headers a control
    /// character and its value bytes (base64) or a string of escapes (JSON, doubling once
    /// carried), takes less than one page as Lambda carries it, so a page of one always fits.
    #[test]
    fn the_largest_admitted_event_is_carried_inside_one_page() {
        let l = Limits::default();
        let control = |n: usize| Bytes::from(vec![1u8; n]);
        // `"\\"…"`: a JSON string of backslashes escaped, every byte escaped again when carried.
        let mut escapes = vec![b'\\'; l.max_value_bytes - 2];
        escapes.insert(0, b'"');
        escapes.push(b'"');
        for (value, value_is_json) in [(control(l.max_value_bytes), false), (Bytes::from(escapes), true)] {
            let record = crate::segment::Record {
                timestamp_ms: i64::MAX,
                key: Some(control(l.max_key_bytes)),
                headers: (0..l.max_headers_per_event)
                    .map(|_| ("\u{1}".repeat(l.max_header_name_bytes), control(l.max_header_value_bytes)))
                    .collect(),
                value,
                value_is_json,
            };
            let events = [NewEvent {
                key: record.key.clone(),
                headers: record.headers.clone(),
                value: record.value.clone(),
                value_is_json,
                timestamp_ms: None,
                partition: None,
            }];
            assert!(check(&l, &events, 0).is_ok(), "the limits admit it");
            let carried = crate::page::event_size(&record);
            assert!(carried <= l.max_response_bytes, "{carried} bytes carried, past a page's {}", l.max_response_bytes);
        }
    }
}

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
    for (i, e) in events.iter().enumerate() {
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
        if e.value_is_json && nests_deeper_than(&e.value, l.max_value_depth) {
            return Err(Error::invalid(
                Code::InvalidEvent,
                format!("event {i}: value nests more than {} levels of arrays and objects", l.max_value_depth),
            ));
        }
        if let Some(ts) = e.timestamp_ms.filter(|ts| !(0..=latest).contains(ts)) {
            let ahead = l.max_timestamp_ahead_ms;
            return Err(Error::invalid(
                Code::InvalidEvent,
                format!("event {i}: timestamp {ts} ms is before the epoch or more than {ahead} ms ahead of now"),
            ));
        }
    }
    Ok(())
}

/// Whether the JSON text `json` opens more than `max` arrays and objects inside one another:
/// one pass over the bytes, counting brackets outside strings (the text was parsed already,
/// so it is well-formed), stopping at the first level past `max`.
pub(crate) fn nests_deeper_than(json: &[u8], max: usize) -> bool {
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
}

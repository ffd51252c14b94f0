//! Content filters ([`Filter`]): compiling any pattern and matching it against any event.
//! The input is text: the pattern's JSON on the first line, the event's JSON after it.
//! Inputs that are not two JSON documents are skipped (serde_json is not under test).
//!
//! Oracle: neither compiling nor matching panics or runs away (libFuzzer's timeout); a
//! pattern accepted is within [`MAX_PATTERN_BYTES`]; matching is deterministic; and three
//! rewritings that must not change the answer, whenever they are themselves accepted:
//! `{"$or": [P, P]}`, `{"$or": [P, <a field the event lacks exists>]}`, and P nested under
//! a field `w` matched against the event nested under `w`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use sluice_core::filter::{Filter, MAX_PATTERN_BYTES};

/// A field no generated event holds: the fuzzer would need to write these bytes exactly.
const ABSENT: &str = "\u{1}absent-field\u{1}";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (pattern, event) = text.split_once('\n').unwrap_or((text, "{}"));
    let (Ok(pattern), Ok(event)) = (serde_json::from_str::<Value>(pattern), serde_json::from_str::<Value>(event))
    else {
        return;
    };
    let Ok(filter) = Filter::parse(&pattern) else { return };
    let size = serde_json::to_vec(&pattern).map_or(usize::MAX, |v| v.len());
    assert!(size <= MAX_PATTERN_BYTES, "a pattern of {size} bytes was accepted");
    let matched = filter.matches(&event);
    assert_eq!(filter.matches(&event), matched, "matching is not deterministic");

    let same = |rewritten: Value, event: &Value, what: &str| {
        if let Ok(f) = Filter::parse(&rewritten) {
            assert_eq!(f.matches(event), matched, "{what} changed the answer: {rewritten} on {event}");
        }
    };
    same(json!({"$or": [pattern, pattern]}), &event, "P or P");
    if event.get(ABSENT).is_none() {
        same(json!({"$or": [pattern, {ABSENT: [{"exists": true}]}]}), &event, "P or an absent field");
    }
    if event.is_object() {
        same(json!({"w": pattern}), &json!({"w": event}), "nesting under w");
    }
});

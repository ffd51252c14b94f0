//! Content filters ([`Filter`]): compiling any pattern and matching it against any event.
//! The input is text: the pattern's JSON on the first line, the event's JSON after it.
//! Inputs that are not two JSON documents are skipped (serde_json is not under test).
//!
//! Oracle: neither compiling nor matching panics or runs away (libFuzzer's timeout); a
//! pattern accepted is within [`MAX_PATTERN_BYTES`]; matching is deterministic; and
//! rewritings that must not change the answer, whenever they are themselves accepted:
//! - `{"$or": [P, P]}`, `{"$or": [P, <a field the event lacks exists>]}`, and P nested under
//!   a field `w` matched against the event nested under `w`;
//! - every `anything-but` list (of values, or of prefixes, suffixes, wildcards or
//!   case-insensitive strings) reversed;
//! - where the event holds no array on the way to a field, an `anything-but` list there
//!   answers as the conjunction of one `anything-but` per element (EventBridge's meaning:
//!   a value none of them accepts).

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use sluice_core::filter::{Filter, MAX_PATTERN_BYTES};

/// A field no generated event holds: the fuzzer would need to write these bytes exactly.
const ABSENT: &str = "\u{1}absent-field\u{1}";

/// The operators whose `anything-but` operand may be a list of strings.
const LISTED: [&str; 4] = ["prefix", "suffix", "wildcard", "equals-ignore-case"];

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
    for site in anything_but_lists(&pattern, Some(&event), true) {
        same(site.reversed, &event, "reversing an anything-but list");
        if let Some(singles) = site.singles {
            let compiled: Option<Vec<Filter>> = singles.iter().map(|p| Filter::parse(p).ok()).collect();
            if let Some(compiled) = compiled {
                let all = compiled.iter().all(|f| f.matches(&event));
                assert_eq!(all, matched, "{pattern} on {event}: a list is not the conjunction of {singles:?}");
            }
        }
    }
});

/// One `anything-but` list of a pattern, rewritten.
struct Site {
    /// The pattern with that list reversed.
    reversed: Value,
    /// The pattern once per element, with the list replaced by that element alone; `None`
    /// when the event may hold an array on the way (the matcher then sees several values,
    /// and a list is not the conjunction).
    singles: Option<Vec<Value>>,
}

/// Every `anything-but` list in the pattern object `pattern`, matched against `event`
/// (`None`: missing); `once` says the event held no array on the way here.
fn anything_but_lists(pattern: &Value, event: Option<&Value>, once: bool) -> Vec<Site> {
    let mut sites = Vec::new();
    let Some(fields) = pattern.as_object() else { return sites };
    for (name, value) in fields {
        let at = if name == "$or" { event } else { event.and_then(|e| e.get(name)) };
        let once = once && !at.is_some_and(Value::is_array);
        let inner: Vec<Site> = match value {
            Value::Object(_) => anything_but_lists(value, at, once),
            Value::Array(items) => (0..items.len())
                .flat_map(|i| {
                    let found = if name == "$or" {
                        anything_but_lists(&items[i], at, once)
                    } else {
                        lists_of(&items[i], once).into_iter().collect()
                    };
                    found.into_iter().map(move |site| wrap(site, |v| with_item(items, i, v)))
                })
                .collect(),
            _ => Vec::new(),
        };
        sites.extend(inner.into_iter().map(|site| wrap(site, |v| with_field(fields, name, v))));
    }
    sites
}

/// The rewritings of one matcher, `{"anything-but": [a, b]}` or `{"anything-but": {"prefix": [a, b]}}`.
fn lists_of(matcher: &Value, once: bool) -> Option<Site> {
    let operand = matcher.as_object().filter(|m| m.len() == 1)?.get("anything-but")?;
    let (list, rebuild): (&Vec<Value>, Box<dyn Fn(Value) -> Value>) = match operand {
        Value::Array(list) => (list, Box::new(|v| json!({ "anything-but": v }))),
        Value::Object(inner) if inner.len() == 1 => {
            let (name, list) = inner.iter().next()?;
            let name = LISTED.iter().find(|n| **n == name.as_str())?;
            (list.as_array()?, Box::new(move |v| json!({"anything-but": { *name: v }})))
        }
        _ => return None,
    };
    let reversed = rebuild(Value::Array(list.iter().rev().cloned().collect()));
    let singles = once.then(|| list.iter().cloned().map(&rebuild).collect());
    Some(Site { reversed, singles })
}

/// A site of a nested value, with that value put back in place by `place`.
fn wrap(site: Site, place: impl Fn(Value) -> Value) -> Site {
    Site { reversed: place(site.reversed), singles: site.singles.map(|s| s.into_iter().map(&place).collect()) }
}

/// `items` with element `i` replaced by `value`.
fn with_item(items: &[Value], i: usize, value: Value) -> Value {
    let mut items = items.to_vec();
    items[i] = value;
    Value::Array(items)
}

/// The object `fields` with field `name` replaced by `value`.
fn with_field(fields: &Map<String, Value>, name: &str, value: Value) -> Value {
    let mut fields = fields.clone();
    fields.insert(name.to_owned(), value);
    Value::Object(fields)
}

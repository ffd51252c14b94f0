//! Content filters: EventBridge-style event patterns, compiled once ([`Filter::parse`]) and
//! matched against any JSON document ([`Filter::matches`]). Sluice matches them against
//! `{"partition": n, "key": "...", "headers": {...}, "value": <any JSON>}`.
//!
//! # Patterns
//!
//! A pattern is a JSON object. Each field maps either to a nested object, matched against
//! the event's value at that field, or to a non-empty array of matchers, any one of which
//! may match (OR). Every field must match (AND). `"$or": [p1, p2, ...]` (two or more
//! pattern objects) may sit at any level: one alternative must match, together with the
//! sibling fields. An empty object, an empty array and a bare value where a field's array
//! or object belongs are refused, and so is a field named as an operator (`prefix`,
//! `numeric`, ... and the other names EventBridge reserves): `{"total": {"numeric": [">", 1]}}`
//! is an operator written outside its array, which EventBridge refuses too.
//!
//! Matchers in a field's array:
//! - a string, number, boolean or null: equality. Numbers compare by value (`3` matches
//!   `3.0`); a string never equals a number (`"3"` is not `3`).
//! - `{"prefix": s}`, `{"suffix": s}`, `{"equals-ignore-case": s}` and
//!   `{"prefix" | "suffix": {"equals-ignore-case": s}}`: strings only. Case is ignored by
//!   lower-casing each character (Unicode's simple mapping).
//! - `{"wildcard": "a*b"}`: strings only; `*` is any run of characters, `\*` a literal star,
//!   `\\` a literal backslash; `**` and other escapes are refused.
//! - `{"numeric": [">", 0, "<=", 5]}`: JSON numbers only (never numeric strings); one
//!   comparison (`=`, `<`, `<=`, `>`, `>=`) or a lower (`>`, `>=`) then an upper (`<`, `<=`)
//!   bound; an empty range is refused. Compared as `f64`.
//! - `{"cidr": "10.0.0.0/24"}`: a string holding an IPv4 or IPv6 address of the block's family.
//! - `{"exists": true | false}`: whether the field holds a value (see below).
//! - `{"anything-but": x}` where x is a string, a number, a non-empty list of only strings or
//!   only numbers, or `{"prefix" | "suffix" | "wildcard" | "equals-ignore-case": s | [s, ...]}`:
//!   any present value (string, number, boolean or null) that none of the inner tests accept,
//!   so `{"anything-but": {"prefix": "us-"}}` accepts the number `7`. A missing field never
//!   matches `anything-but`. An empty prefix or suffix is refused (every string has it).
//!
//! # Events
//!
//! - A field whose value is an array matches if any element does (nested arrays are
//!   flattened), so `anything-but: "a"` matches `["a", "b"]`, as in EventBridge.
//! - A field whose value is an object is matched only by a nested pattern or `exists: false`.
//! - A nested pattern over an array of objects matches if one element matches it whole
//!   (fields are not mixed across elements). Over a missing field or a non-object value it
//!   sees an object with no fields, so only `exists: false` can match inside it.
//! - `exists` tests leaves, as EventBridge does (it flattens an event to its leaf values): a
//!   field exists when it holds a string, number, boolean or null, alone or in an array. An
//!   object, an empty array or an array of objects is not a leaf, so `{"c": {"c1": 100}}`
//!   matches `{"c": [{"exists": false}]}`.
//!
//! # Bounds
//!
//! A pattern is refused when its compact JSON is over [`MAX_PATTERN_BYTES`], when pattern
//! objects nest deeper than [`MAX_DEPTH`], or when it holds more than [`MAX_VALUES`] values.
//! Matching only descends where the pattern does and flattens event arrays with a loop, so
//! its cost is bounded by the pattern's size times the event's and no event can exhaust the
//! stack. Neither compiling nor matching panics, whatever the input.
//!
//! # Why by hand
//!
//! The Rust ports considered were `quamina` (a many-patterns automaton; no `$or` nor
//! `prefix`/`suffix` with `equals-ignore-case`, and a newer toolchain than this workspace's)
//! and `event-ruler` (an unmaintained stub). One pattern per subscription needs no automaton:
//! a direct walk of the compiled pattern is short, and its semantics are written down here.

mod ops;
mod parse;

use serde_json::{Map, Number, Value};

use ops::{Cidr, Range, Wildcard};

/// The longest pattern accepted, in bytes of its compact JSON serialization.
pub const MAX_PATTERN_BYTES: usize = 2048;

/// The deepest nesting of pattern objects accepted: the top object is level 1, and each
/// nested field object or `$or` alternative is one level below its parent.
pub const MAX_DEPTH: usize = 8;

/// The most values a pattern may hold: each element of a field's array counts one, and each
/// further element of an `anything-but` list counts one more.
pub const MAX_VALUES: usize = 150;

/// A compiled event pattern.
#[derive(Debug, Clone)]
pub struct Filter {
    root: Node,
}

impl Filter {
    /// Compiles a pattern; Err is a human-readable reason, naming where in the pattern the
    /// problem is (it becomes a `400 invalid_filter`).
    pub fn parse(pattern: &Value) -> Result<Filter, String> {
        parse::pattern(pattern, false).map(|root| Filter { root })
    }

    /// Compiles a pattern a subscription was stored with: as [`Filter::parse`], except that
    /// what an earlier version accepted (a field named as an operator; `anything-but` an
    /// empty prefix or suffix, which excludes every string) compiles as it did then, so a
    /// subscription created before a rule was made stricter keeps working.
    pub fn parse_stored(pattern: &Value) -> Result<Filter, String> {
        parse::pattern(pattern, true).map(|root| Filter { root })
    }

    /// Whether the event document matches.
    pub fn matches(&self, event: &Value) -> bool {
        self.root.matches(event.as_object())
    }
}

/// One pattern object: every field must match, and one of the `$or` alternatives if any.
#[derive(Debug, Clone)]
struct Node {
    fields: Vec<(String, Field)>,
    any_of: Vec<Node>,
}

/// What a pattern field holds.
#[derive(Debug, Clone)]
enum Field {
    /// A pattern for the object at this field.
    Nested(Node),
    /// Matchers for the value at this field, any of which may match.
    Leaf(Vec<Matcher>),
}

/// One element of a field's array.
#[derive(Debug, Clone)]
enum Matcher {
    /// Some value at the field passes the test.
    Is(Test),
    /// Some value at the field is a scalar that fails the test (`anything-but`).
    Not(Test),
    /// The field is present (`true`) or absent (`false`).
    Exists(bool),
}

/// A test of one scalar value (string, number, boolean or null).
#[derive(Debug, Clone)]
enum Test {
    /// Equal to one of these scalars, numbers by value.
    Equals(Vec<Value>),
    /// A string equal to one of these, already lower-cased, ignoring case.
    IgnoreCase(Vec<String>),
    Prefix(String),
    /// A string starting with this lower-cased text, ignoring case.
    PrefixIgnoreCase(String),
    Suffix(String),
    /// A string ending with this lower-cased text, ignoring case.
    SuffixIgnoreCase(String),
    Wildcard(Wildcard),
    Numeric(Range),
    Cidr(Cidr),
    /// Passes one of these (`anything-but` a list of prefixes, suffixes or wildcards).
    AnyOf(Vec<Test>),
}

impl Node {
    /// Matches the fields of `object`; `None` stands for a missing or non-object value.
    fn matches(&self, object: Option<&Map<String, Value>>) -> bool {
        let fields = self.fields.iter().all(|(name, field)| field.matches(object.and_then(|o| o.get(name))));
        fields && (self.any_of.is_empty() || self.any_of.iter().any(|alternative| alternative.matches(object)))
    }
}

impl Field {
    /// Matches the event's value at this field, `None` when the field is missing.
    fn matches(&self, value: Option<&Value>) -> bool {
        match (self, value) {
            (Field::Leaf(matchers), _) => matchers.iter().any(|m| m.matches(value)),
            (Field::Nested(node), Some(Value::Array(_))) => {
                let mut any_element = false;
                let matched = any_element_where(value, |element| {
                    any_element = true;
                    node.matches(element.as_object())
                });
                matched || (!any_element && node.matches(None))
            }
            (Field::Nested(node), _) => node.matches(value.and_then(Value::as_object)),
        }
    }
}

impl Matcher {
    /// Matches the event's value at a field, `None` when the field is missing.
    fn matches(&self, value: Option<&Value>) -> bool {
        match self {
            // EventBridge flattens an event to its leaves: a field exists when it holds a
            // scalar (null included), alone or in an array, never as an object or `[]`.
            Matcher::Exists(wanted) => *wanted == any_element_where(value, |v| !v.is_object()),
            Matcher::Is(test) => any_element_where(value, |v| !v.is_object() && test.accepts(v)),
            Matcher::Not(test) => any_element_where(value, |v| !v.is_object() && !test.accepts(v)),
        }
    }
}

impl Test {
    /// Whether the scalar `value` passes.
    fn accepts(&self, value: &Value) -> bool {
        let text = value.as_str();
        match self {
            Test::Equals(wanted) => wanted.iter().any(|w| same_scalar(w, value)),
            Test::IgnoreCase(folded) => text.is_some_and(|s| folded.iter().any(|f| ops::eq_folded(s, f))),
            Test::Prefix(prefix) => text.is_some_and(|s| s.starts_with(prefix.as_str())),
            Test::PrefixIgnoreCase(folded) => text.is_some_and(|s| ops::starts_with_folded(s, folded)),
            Test::Suffix(suffix) => text.is_some_and(|s| s.ends_with(suffix.as_str())),
            Test::SuffixIgnoreCase(folded) => text.is_some_and(|s| ops::ends_with_folded(s, folded)),
            Test::Wildcard(wildcard) => text.is_some_and(|s| wildcard.matches(s)),
            Test::Numeric(range) => value.as_f64().is_some_and(|n| range.contains(n)),
            Test::Cidr(cidr) => text.is_some_and(|s| cidr.contains(s)),
            Test::AnyOf(tests) => tests.iter().any(|test| test.accepts(value)),
        }
    }
}

/// Whether some non-array value in `value`, looking through arrays at any depth, satisfies
/// `test`. A loop over a stack rather than recursion, so no event can exhaust the call stack.
fn any_element_where(value: Option<&Value>, mut test: impl FnMut(&Value) -> bool) -> bool {
    let mut pending: Vec<&Value> = match value {
        None => return false,
        Some(Value::Array(items)) => items.iter().rev().collect(),
        Some(scalar_or_object) => return test(scalar_or_object),
    };
    while let Some(next) = pending.pop() {
        match next {
            Value::Array(items) => pending.extend(items.iter().rev()),
            other if test(other) => return true,
            _ => {}
        }
    }
    false
}

/// Equality of two scalars, numbers by value.
fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => same_number(x, y),
        _ => a == b,
    }
}

/// `3 == 3.0`; integers compare exactly, anything else as `f64`.
fn same_number(x: &Number, y: &Number) -> bool {
    if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
        return x == y;
    }
    matches!((x.as_f64(), y.as_f64()), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Compiles `pattern`, then checks it against events that must and must not match.
    fn check(pattern: Value, matching: &[Value], not_matching: &[Value]) {
        let filter = Filter::parse(&pattern).unwrap_or_else(|e| panic!("{pattern} refused: {e}"));
        for event in matching {
            assert!(filter.matches(event), "{pattern} should match {event}");
        }
        for event in not_matching {
            assert!(!filter.matches(event), "{pattern} should not match {event}");
        }
    }

    fn refused(pattern: Value) -> String {
        match Filter::parse(&pattern) {
            Ok(filter) => panic!("{pattern} was accepted as {filter:?}"),
            Err(reason) => reason,
        }
    }

    #[test]
    fn fields_are_and_array_elements_are_or() {
        check(
            json!({"source": ["aws.ec2"], "detail": {"state": ["running", "pending"]}}),
            &[
                json!({"source": "aws.ec2", "detail": {"state": "running", "other": 1}}),
                json!({"source": "aws.ec2", "detail": {"state": "pending"}}),
            ],
            &[
                json!({"source": "aws.s3", "detail": {"state": "running"}}),
                json!({"source": "aws.ec2", "detail": {"state": "stopped"}}),
                json!({"source": "aws.ec2"}),
                json!({"source": "aws.ec2", "detail": "running"}),
            ],
        );
    }

    #[test]
    fn exact_values_compare_numbers_by_value_and_never_across_types() {
        check(json!({"x": [3]}), &[json!({"x": 3}), json!({"x": 3.0}), json!({"x": [1, 3]})], &[json!({"x": "3"})]);
        check(json!({"price": [100]}), &[json!({"price": 1e2})], &[json!({"price": 100.5})]);
        check(json!({"UserID": [null]}), &[json!({"UserID": null})], &[json!({}), json!({"UserID": "null"})]);
        check(json!({"LastName": [""]}), &[json!({"LastName": ""})], &[json!({"LastName": " "})]);
        check(json!({"ok": [true]}), &[json!({"ok": true})], &[json!({"ok": "true"}), json!({"ok": 1})]);
        check(json!({"big": [u64::MAX]}), &[json!({"big": u64::MAX})], &[json!({"big": u64::MAX - 1})]);
    }

    #[test]
    fn prefix_and_suffix_match_strings_with_or_without_case() {
        check(
            json!({"time": [{"prefix": "2017-10-02"}]}),
            &[json!({"time": "2017-10-02T18:43:48Z"})],
            &[json!({"time": "2017-10-03T18:43:48Z"}), json!({"time": 2017}), json!({})],
        );
        check(
            json!({"detail": {"service": [{"prefix": {"equals-ignore-case": "EventB"}}]}}),
            &[json!({"detail": {"service": "EventBridge"}}), json!({"detail": {"service": "eventbus"}})],
            &[json!({"detail": {"service": "Lambda"}}), json!({"detail": {"service": "Event"}})],
        );
        check(
            json!({"FileName": [{"suffix": ".png"}]}),
            &[json!({"FileName": "image.png"})],
            &[json!({"FileName": "image.PNG"}), json!({"FileName": "image.jpg"})],
        );
        check(
            json!({"detail": {"FileName": [{"suffix": {"equals-ignore-case": ".png"}}]}}),
            &[json!({"detail": {"FileName": "image.PNG"}}), json!({"detail": {"FileName": "a.Png"}})],
            &[json!({"detail": {"FileName": "image.jpg"}}), json!({"detail": {"FileName": "png"}})],
        );
    }

    #[test]
    fn equals_ignore_case_matches_any_casing() {
        check(
            json!({"detail-type": [{"equals-ignore-case": "ec2 instance state-change notification"}]}),
            &[json!({"detail-type": "EC2 Instance State-change Notification"})],
            &[json!({"detail-type": "EC2 Instance State-change"}), json!({"detail-type": 1})],
        );
        check(json!({"name": [{"equals-ignore-case": "ÉTÉ"}]}), &[json!({"name": "été"})], &[json!({"name": "ete"})]);
    }

    #[test]
    fn anything_but_values_and_lists() {
        check(
            json!({"detail": {"state": [{"anything-but": "initializing"}]}}),
            &[json!({"detail": {"state": "running"}}), json!({"detail": {"state": 5}})],
            &[json!({"detail": {"state": "initializing"}}), json!({"detail": {}}), json!({})],
        );
        check(
            json!({"detail": {"x-limit": [{"anything-but": 123}]}}),
            &[json!({"detail": {"x-limit": 124}})],
            &[json!({"detail": {"x-limit": 123.0}})],
        );
        check(
            json!({"detail": {"state": [{"anything-but": ["stopped", "overloaded"]}]}}),
            &[json!({"detail": {"state": "running"}})],
            &[json!({"detail": {"state": "stopped"}}), json!({"detail": {"state": "overloaded"}})],
        );
        check(
            json!({"detail": {"x-limit": [{"anything-but": [100, 200, 300]}]}}),
            &[json!({"detail": {"x-limit": 150}})],
            &[json!({"detail": {"x-limit": 200}})],
        );
    }

    #[test]
    fn anything_but_prefix_suffix_ignore_case_and_wildcard() {
        check(
            json!({"detail": {"state": [{"anything-but": {"prefix": "init"}}]}}),
            &[json!({"detail": {"state": "running"}}), json!({"detail": {"state": 7}})],
            &[json!({"detail": {"state": "initializing"}})],
        );
        check(
            json!({"FileName": [{"anything-but": {"suffix": ".png"}}]}),
            &[json!({"FileName": "a.jpg"})],
            &[json!({"FileName": "a.png"})],
        );
        check(
            json!({"state": [{"anything-but": {"equals-ignore-case": "initializing"}}]}),
            &[json!({"state": "running"})],
            &[json!({"state": "INITIALIZING"}), json!({"state": "Initializing"})],
        );
        check(
            json!({"state": [{"anything-but": {"equals-ignore-case": ["Stopped", "overloaded"]}}]}),
            &[json!({"state": "running"})],
            &[json!({"state": "STOPPED"}), json!({"state": "Overloaded"})],
        );
        check(
            json!({"FilePath": [{"anything-but": {"wildcard": "*/lib/*"}}]}),
            &[json!({"FilePath": "/usr/bin/ls"})],
            &[json!({"FilePath": "/usr/lib/libc.so"})],
        );
    }

    #[test]
    fn anything_but_lists_of_prefixes_suffixes_and_wildcards_exclude_each() {
        check(
            json!({"state": [{"anything-but": {"prefix": ["init", "error"]}}]}),
            &[json!({"state": "running"}), json!({"state": 7}), json!({"state": ["init-1", "ok"]})],
            &[json!({"state": "initializing"}), json!({"state": "error: disk"}), json!({"state": ["init", "error"]})],
        );
        check(
            json!({"id": [{"anything-but": {"suffix": ["1234", "6789"]}}]}),
            &[json!({"id": "i-0000"})],
            &[json!({"id": "i-1234"}), json!({"id": "i-6789"}), json!({})],
        );
        check(
            json!({"path": [{"anything-but": {"wildcard": ["*/bin/*.jar", "*/bin/*.class"]}}]}),
            &[json!({"path": "/opt/lib/a.jar"})],
            &[json!({"path": "/opt/bin/a.jar"}), json!({"path": "/opt/bin/A.class"})],
        );
        check(json!({"s": [{"anything-but": {"wildcard": ""}}]}), &[json!({"s": "x"})], &[json!({"s": ""})]);
        check(json!({"s": [{"anything-but": {"equals-ignore-case": ""}}]}), &[json!({"s": "x"})], &[json!({"s": ""})]);
    }

    #[test]
    fn anything_but_on_arrays_objects_and_missing_fields() {
        let pattern = json!({"state": [{"anything-but": "a"}]});
        // As in EventBridge: one element other than "a" is enough.
        check(pattern.clone(), &[json!({"state": ["a", "b"]})], &[json!({"state": ["a"]}), json!({"state": []})]);
        check(pattern, &[], &[json!({"state": {"a": 1}}), json!({}), json!({"state": [{"x": 1}]})]);
    }

    #[test]
    fn numeric_ranges_from_the_eventbridge_example() {
        let pattern = json!({"detail": {
            "c-count": [{"numeric": [">", 0, "<=", 5]}],
            "d-count": [{"numeric": ["<", 10]}],
            "x-limit": [{"numeric": ["=", 3.018e2]}]
        }});
        check(
            pattern,
            &[json!({"detail": {"c-count": 5, "d-count": 7, "x-limit": 301.8}})],
            &[
                json!({"detail": {"c-count": 0, "d-count": 7, "x-limit": 301.8}}),
                json!({"detail": {"c-count": 5, "d-count": 10, "x-limit": 301.8}}),
                json!({"detail": {"c-count": 5, "d-count": 7, "x-limit": 301}}),
                json!({"detail": {"c-count": "5", "d-count": 7, "x-limit": 301.8}}),
                json!({"detail": {"d-count": 7, "x-limit": 301.8}}),
            ],
        );
        check(
            json!({"n": [{"numeric": [">=", -1.5, "<", 2]}]}),
            &[json!({"n": -1.5}), json!({"n": 1.99}), json!({"n": [5, 0]})],
            &[json!({"n": 2}), json!({"n": -2}), json!({"n": null})],
        );
        check(json!({"n": [{"numeric": [">=", 5, "<=", 5]}]}), &[json!({"n": 5})], &[json!({"n": 5.0001})]);
    }

    #[test]
    fn cidr_matches_addresses_of_either_family() {
        check(
            json!({"detail": {"sourceIPAddress": [{"cidr": "10.0.0.0/24"}]}}),
            &[json!({"detail": {"sourceIPAddress": "10.0.0.255"}}), json!({"detail": {"sourceIPAddress": "10.0.0.0"}})],
            &[
                json!({"detail": {"sourceIPAddress": "10.0.1.0"}}),
                json!({"detail": {"sourceIPAddress": "::ffff:10.0.0.1"}}),
                json!({"detail": {"sourceIPAddress": "not an address"}}),
                json!({"detail": {"sourceIPAddress": 167772160}}),
            ],
        );
        check(
            json!({"ip": [{"cidr": "2001:db8::/32"}]}),
            &[json!({"ip": "2001:db8:1::1"}), json!({"ip": "2001:0DB8::"})],
            &[json!({"ip": "2001:db9::1"}), json!({"ip": "10.0.0.1"})],
        );
        check(json!({"ip": [{"cidr": "0.0.0.0/0"}]}), &[json!({"ip": "8.8.8.8"})], &[json!({"ip": "::1"})]);
        check(json!({"ip": [{"cidr": "10.1.2.3/32"}]}), &[json!({"ip": "10.1.2.3"})], &[json!({"ip": "10.1.2.4"})]);
        check(json!({"ip": [{"cidr": "10.1.2.99/24"}]}), &[json!({"ip": "10.1.2.3"})], &[json!({"ip": "10.1.3.3"})]);
    }

    #[test]
    fn exists_tests_leaf_values_as_eventbridge_does() {
        check(
            json!({"detail": {"c-count": [{"exists": true}]}}),
            &[
                json!({"detail": {"c-count": 5}}),
                json!({"detail": {"c-count": null}}),
                json!({"detail": {"c-count": [1]}}),
                json!({"detail": {"c-count": [[], [null]]}}),
            ],
            &[
                json!({"detail": {}}),
                json!({"detail": 5}),
                json!({}),
                json!({"detail": {"c-count": {"c1": 100}}}),
                json!({"detail": {"c-count": []}}),
                json!({"detail": {"c-count": [{"c1": 100}]}}),
            ],
        );
        check(
            json!({"detail": {"c-count": [{"exists": false}]}}),
            &[
                json!({"detail": {"d-count": 1}}),
                json!({"detail": "text"}),
                json!({}),
                json!([1]),
                json!({"detail": {"c-count": {"c1": 100}}}),
                json!({"detail": {"c-count": []}}),
            ],
            &[
                json!({"detail": {"c-count": null}}),
                json!({"detail": {"c-count": 0}}),
                json!({"detail": {"c-count": [0]}}),
            ],
        );
        check(
            json!({"state": [{"exists": false}, "ready"]}),
            &[json!({}), json!({"state": "ready"})],
            &[json!({"state": "busy"})],
        );
    }

    #[test]
    fn wildcards_with_stars_and_escapes() {
        check(
            json!({"EventBusArn": [{"wildcard": "arn:aws:events:us-east-1:*:event-bus/*"}]}),
            &[json!({"EventBusArn": "arn:aws:events:us-east-1:123456789012:event-bus/default"})],
            &[json!({"EventBusArn": "arn:aws:events:us-west-2:123456789012:event-bus/default"})],
        );
        check(
            json!({"Filename": [{"wildcard": "dir/*.png"}]}),
            &[json!({"Filename": "dir/a.png"}), json!({"Filename": "dir/sub/b.png"}), json!({"Filename": "dir/.png"})],
            &[json!({"Filename": "dir/a.jpg"}), json!({"Filename": "other/a.png"}), json!({"Filename": "dir.png"})],
        );
        check(
            json!({"s": [{"wildcard": "a*b*c"}]}),
            &[json!({"s": "abc"}), json!({"s": "aXbYbZc"})],
            &[json!({"s": "acb"})],
        );
        check(
            json!({"s": [{"wildcard": "ab*ba"}]}),
            &[json!({"s": "abba"}), json!({"s": "ab-ba"})],
            &[json!({"s": "aba"})],
        );
        check(json!({"s": [{"wildcard": "*"}]}), &[json!({"s": ""}), json!({"s": "x"})], &[json!({"s": 1})]);
        check(json!({"s": [{"wildcard": "exact"}]}), &[json!({"s": "exact"})], &[json!({"s": "exactly"})]);
        check(json!({"s": [{"wildcard": r"a\*b"}]}), &[json!({"s": "a*b"})], &[json!({"s": "axb"})]);
        check(
            json!({"s": [{"wildcard": r"a\\*"}]}),
            &[json!({"s": r"a\"}), json!({"s": r"a\bc"})],
            &[json!({"s": "ab"})],
        );
    }

    #[test]
    fn or_alternatives_combine_with_their_siblings() {
        let nested = json!({"detail": {"$or": [
            {"c-count": [{"numeric": [">", 0, "<=", 5]}]},
            {"d-count": [{"numeric": ["<", 10]}]},
            {"x-limit": [{"numeric": [">", 0, "<", 100]}]}
        ]}});
        check(
            nested,
            &[json!({"detail": {"c-count": 3}}), json!({"detail": {"d-count": 9}}), json!({"detail": {"x-limit": 50}})],
            &[json!({"detail": {"c-count": 6, "d-count": 10, "x-limit": 100}}), json!({"detail": {}})],
        );
        let top = json!({
            "source": ["aws.ec2"],
            "$or": [{"detail-type": ["EC2 Instance State-change Notification"]}, {"detail": {"state": ["terminated"]}}]
        });
        check(
            top,
            &[
                json!({"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"}),
                json!({"source": "aws.ec2", "detail": {"state": "terminated"}}),
            ],
            &[json!({"source": "aws.s3", "detail": {"state": "terminated"}}), json!({"source": "aws.ec2"})],
        );
        let inner = json!({"$or": [{"a": [1]}, {"$or": [{"b": [2]}, {"c": [3]}]}]});
        check(inner, &[json!({"a": 1}), json!({"c": 3})], &[json!({"d": 4})]);
    }

    #[test]
    fn array_fields_match_when_any_element_does() {
        check(
            json!({"resources": [
                "arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f",
                "arn:aws:ec2:us-east-1:111122223333:instance/i-b188560f"
            ]}),
            &[json!({"resources": [
                "arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f",
                "arn:aws:ec2:us-east-1:444455556666:instance/i-b188560f"
            ]})],
            &[
                json!({"resources": ["arn:aws:ec2:us-east-1:444455556666:instance/i-b188560f"]}),
                json!({"resources": []}),
            ],
        );
        check(json!({"a": [3]}), &[json!({"a": [[1, 2], [[3]]]})], &[json!({"a": [[1, 2]]})]);
        check(json!({"tags": [{"prefix": "team-"}]}), &[json!({"tags": ["x", "team-a"]})], &[json!({"tags": ["x"]})]);
    }

    #[test]
    fn nested_patterns_over_arrays_match_one_element_whole() {
        let pattern = json!({"items": {"sku": ["a"], "qty": [2]}});
        check(
            pattern,
            &[
                json!({"items": [{"sku": "b", "qty": 1}, {"sku": "a", "qty": 2}]}),
                json!({"items": {"sku": "a", "qty": 2}}),
            ],
            &[json!({"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}), json!({"items": []})],
        );
        check(
            json!({"items": {"sku": [{"exists": false}]}}),
            &[json!({"items": []}), json!({"items": [1, {"sku": "a"}]}), json!({"items": "text"})],
            &[json!({"items": [{"sku": "a"}]})],
        );
    }

    #[test]
    fn object_values_are_matched_only_by_nested_patterns_or_exists() {
        check(json!({"a": ["x"]}), &[], &[json!({"a": {"x": 1}}), json!({"a": [{"x": 1}]})]);
        check(json!({"a": [{"prefix": ""}]}), &[json!({"a": ""})], &[json!({"a": {}})]);
        check(json!({"a": {"x": [1]}}), &[json!({"a": {"x": 1}})], &[json!({"a": 1})]);
    }

    #[test]
    fn sluice_event_documents() {
        let pattern = json!({
            "key": [{"prefix": "user-"}],
            "headers": {"type": ["created", "updated"]},
            "value": {"amount": [{"numeric": [">=", 100]}], "currency": [{"anything-but": "XXX"}]}
        });
        let event = |key: &str, kind: &str, amount: f64| json!({"partition": 3, "key": key, "headers": {"type": kind}, "value": {"amount": amount, "currency": "EUR"}});
        check(
            pattern,
            &[event("user-1", "created", 100.0), event("user-2", "updated", 1e6)],
            &[event("order-1", "created", 100.0), event("user-1", "deleted", 100.0), event("user-1", "created", 99.9)],
        );
        check(
            json!({"value": [{"exists": false}]}),
            &[json!("a scalar document"), json!(null)],
            &[json!({"value": 1})],
        );
    }

    #[test]
    fn a_stored_pattern_compiles_as_an_earlier_version_accepted_it() {
        let operator_named = json!({"total": {"numeric": [">", 1]}});
        assert!(Filter::parse(&operator_named).is_err(), "refused when written");
        let stored = Filter::parse_stored(&operator_named).expect("a stored one still compiles");
        assert!(stored.matches(&json!({"total": {"numeric": ">"}})), "as the field it was taken for");
        assert!(!stored.matches(&json!({"total": 2})));
        let empty_prefix = json!({"a": [{"anything-but": {"prefix": ""}}]});
        assert!(Filter::parse(&empty_prefix).is_err());
        let stored = Filter::parse_stored(&empty_prefix).expect("a stored one still compiles");
        assert!(!stored.matches(&json!({"a": "x"})), "every string has the empty prefix");
        assert!(stored.matches(&json!({"a": 1})));
        let bad = json!({"a": [{"nope": 1}]});
        assert!(Filter::parse_stored(&bad).is_err(), "only the rules made stricter are relaxed");
    }

    #[test]
    fn invalid_patterns_say_where_and_why() {
        let cases = [
            (json!([1]), "pattern: must be a JSON object, got an array"),
            (json!({}), "pattern: is an empty pattern object"),
            (json!({"a": {}}), "a: is an empty pattern object"),
            (json!({"a": []}), "a: is an empty array"),
            (json!({"a": "x"}), "a: must be an array of values to match or a nested object, got a string"),
            (json!({"a": [[1]]}), "a[0]: is an array"),
            (json!({"detail": {"state": [{"prefx": "x"}]}}), r#"detail.state[0]: unknown operator "prefx""#),
            (json!({"a": [{"prefix": 1}]}), "a[0]: prefix needs a string"),
            (json!({"a": [{"prefix": {"equals-ignore-case": 1}}]}), "a[0]: prefix needs a string or"),
            (json!({"a": [{"suffix": ["x"]}]}), "a[0]: suffix needs a string"),
            (json!({"a": [{"prefix": "x", "suffix": "y"}]}), "a[0]: an operator object must have exactly one key"),
            (json!({"a": [{}]}), "a[0]: an operator object must have exactly one key"),
            (json!({"a": [{"equals-ignore-case": 5}]}), "a[0]: equals-ignore-case needs a string, got a number"),
            (json!({"a": [{"numeric": [">", "5"]}]}), r#"a[0]: numeric bounds must be numbers, got "5""#),
            (json!({"a": [{"numeric": ["<", 5, ">", 1]}]}), "the lower bound comes first"),
            (json!({"a": [{"numeric": [">", 5, "<", 1]}]}), "a[0]: numeric range from 5 to 1 is empty"),
            (json!({"a": [{"numeric": [">", 5, "<", 5]}]}), "is empty"),
            (json!({"a": [{"numeric": ["!=", 5]}]}), r#"a[0]: unknown numeric operator "!=""#),
            (json!({"a": [{"numeric": [">", 1, "<"]}]}), "a[0]: numeric needs [op, number]"),
            (json!({"a": [{"numeric": 5}]}), "a[0]: numeric needs [op, number]"),
            (json!({"a": [{"exists": "yes"}]}), "a[0]: exists needs true or false, got a string"),
            (json!({"a": [{"anything-but": []}]}), "a list must be non-empty"),
            (json!({"a": [{"anything-but": ["x", 1]}]}), "all strings or all numbers"),
            (json!({"a": [{"anything-but": true}]}), "a[0]: anything-but needs a string"),
            (json!({"a": [{"anything-but": {"contains": "x"}}]}), r#"got "contains""#),
            (json!({"a": [{"anything-but": {"prefix": 1}}]}), "a[0]: prefix needs a string or a non-empty list"),
            (json!({"a": [{"anything-but": {"prefix": ""}}]}), "a[0]: anything-but refuses an empty prefix"),
            (json!({"a": [{"anything-but": {"suffix": ""}}]}), "a[0]: anything-but refuses an empty suffix"),
            (json!({"a": [{"anything-but": {"prefix": ["x", ""]}}]}), "refuses an empty prefix"),
            (json!({"a": [{"anything-but": {"suffix": [1]}}]}), "suffix needs a string or a non-empty list"),
            (json!({"a": [{"anything-but": {"wildcard": []}}]}), "wildcard needs a string or a non-empty list"),
            (json!({"a": [{"anything-but": {"wildcard": ["x", "a**"]}}]}), "consecutive wildcard characters"),
            (json!({"total": {"numeric": [">", 1]}}), r#"total.numeric: "numeric" is an operator, not a field"#),
            (json!({"a": {"b": {"prefix": ["x"]}}}), r#"a.b.prefix: "prefix" is an operator"#),
            (json!({"$or": [{"cidr": ["x"]}, {"b": [1]}]}), r#"$or[0].cidr: "cidr" is an operator"#),
            (json!({"a": [{"anything-but": {"equals-ignore-case": ["x", 1]}}]}), "equals-ignore-case needs a string"),
            (json!({"a": [{"anything-but": {"equals-ignore-case": []}}]}), "equals-ignore-case needs a string"),
            (json!({"a": [{"wildcard": "a**b"}]}), "a[0]: consecutive wildcard characters"),
            (json!({"a": [{"wildcard": r"a\b"}]}), "a[0]: in a wildcard, a backslash must be followed"),
            (json!({"a": [{"wildcard": "a\\"}]}), "a backslash must be followed"),
            (json!({"a": [{"cidr": "10.0.0.0"}]}), "a[0]: cidr needs an address/prefix-length"),
            (json!({"a": [{"cidr": "10.0.0.0/33"}]}), "a[0]: cidr prefix length 33 is too long"),
            (json!({"a": [{"cidr": "::/129"}]}), "too long"),
            (json!({"a": [{"cidr": "nonsense/8"}]}), "cidr needs an address/prefix-length"),
            (json!({"a": [{"cidr": "10.0.0.0/-1"}]}), "cidr needs an address/prefix-length"),
            (json!({"$or": [{"a": [1]}]}), "$or: must be an array of at least two pattern objects"),
            (json!({"$or": {"a": [1]}}), "$or: must be an array"),
            (json!({"$or": [{"a": [1]}, 5]}), "$or[1]: must be a pattern object, got a number"),
            (json!({"x": {"$or": [{"a": [1]}, {}]}}), "x.$or[1]: is an empty pattern object"),
            (json!({"a": [{"$or": [{"b": [1]}, {"c": [2]}]}]}), r#"a[0]: unknown operator "$or""#),
        ];
        for (pattern, expected) in cases {
            let reason = refused(pattern.clone());
            assert!(reason.contains(expected), "{pattern}: {reason:?} does not contain {expected:?}");
        }
    }

    /// `{"a": {"a": ... [1] ...}}` with `levels` pattern objects.
    fn nested(levels: usize) -> Value {
        (1..levels).fold(json!({"a": [1]}), |inner, _| json!({ "a": inner }))
    }

    #[test]
    fn depth_is_bounded() {
        assert!(Filter::parse(&nested(MAX_DEPTH)).is_ok());
        assert!(refused(nested(MAX_DEPTH + 1)).contains("deeper than 8 levels"));
        let mut or_chain = json!({"x": [1]});
        for _ in 0..MAX_DEPTH {
            or_chain = json!({"$or": [or_chain, {"y": [2]}]});
        }
        assert!(refused(or_chain).contains("deeper than 8 levels"));
    }

    #[test]
    fn deep_patterns_match_deep_events() {
        let mut event = json!(1);
        for _ in 1..MAX_DEPTH {
            event = json!({ "a": event });
        }
        check(nested(MAX_DEPTH), &[json!({ "a": event })], &[event]);
    }

    #[test]
    fn value_count_is_bounded() {
        let values = |n: usize| json!({"a": vec![1; n]});
        assert!(Filter::parse(&values(MAX_VALUES)).is_ok());
        assert!(refused(values(MAX_VALUES + 1)).contains("a[150]: brings the pattern over 150 values"));
        let excluded: Vec<u32> = (0..150).collect(); // 1 for the operator + 149 more = 150
        assert!(Filter::parse(&json!({"a": [{"anything-but": excluded}]})).is_ok());
        let excluded: Vec<u32> = (0..151).collect();
        assert!(refused(json!({"a": [{"anything-but": excluded}]})).contains("over 150 values"));
        let split = json!({"a": vec![1; 75], "b": vec![2; 76]});
        assert!(refused(split).contains("b[75]"));
    }

    #[test]
    fn size_is_bounded() {
        let fits = json!({"a": ["x".repeat(MAX_PATTERN_BYTES - r#"{"a":[""]}"#.len())]});
        assert!(Filter::parse(&fits).is_ok());
        let over = json!({"a": ["x".repeat(MAX_PATTERN_BYTES)]});
        assert!(refused(over).contains("pattern: is over 2048 bytes"));
    }

    #[test]
    fn hostile_events_do_not_exhaust_the_stack() {
        // serde_json refuses to parse JSON nested over 128 levels; a built value can go deeper
        // (kept moderate: serde_json's own clone and drop recurse).
        let mut deep = json!("needle");
        for _ in 0..1_000 {
            deep = Value::Array(vec![deep]);
        }
        let event = json!({"a": deep});
        assert!(Filter::parse(&json!({"a": ["needle"]})).is_ok_and(|f| f.matches(&event)));
        assert!(Filter::parse(&json!({"a": {"b": [{"exists": false}]}})).is_ok_and(|f| f.matches(&event)));
    }

    /// JSON built from words the parser knows, so that many generated patterns compile.
    fn json_value() -> impl Strategy<Value = Value> {
        let words = prop::sample::select(vec![
            "a",
            "b",
            "$or",
            "prefix",
            "suffix",
            "numeric",
            "anything-but",
            "exists",
            "wildcard",
            "cidr",
            "equals-ignore-case",
            ">",
            "<=",
            "=",
            "10.0.0.0/8",
            "::1",
            "a*",
            "A",
            "",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..3).prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            words.clone().prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 48, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((words.clone(), inner), 0..4)
                    .prop_map(|entries| Value::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            ]
        })
    }

    /// Valid patterns over the fields `a` and `b`, nested and with `$or`, from known-good matchers.
    fn valid_pattern() -> impl Strategy<Value = Value> {
        let matcher = prop::sample::select(vec![
            json!("a"),
            json!(1),
            json!(null),
            json!(true),
            json!({"prefix": "a"}),
            json!({"suffix": {"equals-ignore-case": "A"}}),
            json!({"equals-ignore-case": "a"}),
            json!({"anything-but": ["a", ""]}),
            json!({"anything-but": {"wildcard": "*a*"}}),
            json!({"anything-but": {"prefix": ["a", "b"]}}),
            json!({"anything-but": {"suffix": ["a"]}}),
            json!({"anything-but": {"wildcard": ["*a", ""]}}),
            json!({"numeric": [">", -1, "<=", 1]}),
            json!({"exists": false}),
            json!({"exists": true}),
            json!({"cidr": "10.0.0.0/8"}),
            json!({"wildcard": "a*"}),
        ]);
        let leaf = prop::collection::vec(matcher, 1..3).prop_map(Value::Array);
        let object =
            |fields: Vec<(&str, Value)>| Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
        let keys = prop::sample::select(vec!["a", "b"]);
        let flat = prop::collection::vec((keys.clone(), leaf.clone()), 1..3).prop_map(object);
        flat.prop_recursive(4, 24, 3, move |inner| {
            prop_oneof![
                prop::collection::vec((keys.clone(), prop_oneof![leaf.clone(), inner.clone()]), 1..3).prop_map(object),
                prop::collection::vec(inner, 2..4).prop_map(|alternatives| json!({ "$or": alternatives })),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics_on_any_pattern_or_event(pattern in json_value(), event in json_value()) {
            if let Ok(filter) = Filter::parse(&pattern) {
                filter.matches(&event);
                filter.matches(&pattern);
            }
        }

        #[test]
        fn valid_patterns_compile_and_match_without_panicking(pattern in valid_pattern(), event in json_value()) {
            let filter = Filter::parse(&pattern);
            prop_assert!(filter.is_ok(), "{} refused: {:?}", pattern, filter.err());
            if let Ok(filter) = filter {
                filter.matches(&event);
            }
        }
    }
}

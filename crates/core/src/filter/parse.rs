//! Compiling a pattern: its shape, each operator's operand type, and the bounds. Every
//! error names the place in the pattern where it was found (`detail.state[0]`).

use std::io;

use serde_json::{Map, Value};

use super::ops::{fold, Cidr, Range, Wildcard};
use super::{Field, Matcher, Node, Test, MAX_DEPTH, MAX_PATTERN_BYTES, MAX_VALUES};

/// The operators a leaf array may hold, for the message that refuses any other.
const OPERATORS: &str = "anything-but, cidr, equals-ignore-case, exists, numeric, prefix, suffix, wildcard";

/// Names EventBridge reserves for operators (event-ruler's `RESERVED_FIELD_NAMES_IN_OR_RELATIONSHIP`):
/// a pattern field so named is an operator written outside its array, such as
/// `{"total": {"numeric": [">", 1]}}`, and is refused rather than matched as a field.
const RESERVED: &[&str] = &[
    "exactly",
    "equals-ignore-case",
    "prefix",
    "suffix",
    "anything-but",
    "exists",
    "wildcard",
    "numeric",
    "cidr",
    "=",
    "<",
    "<=",
    ">",
    ">=",
    "regex",
    "not-wildcard",
    "not-equals-ignore-case",
    "date-after",
    "date-on-or-after",
    "date-before",
    "date-on-or-before",
    "in-date-range",
    "ip-address-in-range",
    "ip-address-not-in-range",
];

/// Compiles a whole pattern. `stored`: one a subscription was created with, which an
/// earlier version may have accepted under rules since made stricter (a field named as an
/// operator, `anything-but` an empty prefix or suffix): it compiles as it did then, so an
/// upgrade never leaves a subscription unreadable.
pub(super) fn pattern(pattern: &Value, stored: bool) -> Result<Node, String> {
    check_size(pattern)?;
    let object = pattern.as_object().ok_or_else(|| format!("pattern: must be a JSON object, got {}", kind(pattern)))?;
    Compiler { values: 0, stored }.node(object, "", 1)
}

/// Refuses a pattern whose compact JSON is over [`MAX_PATTERN_BYTES`], without writing
/// more than that much of it.
fn check_size(pattern: &Value) -> Result<(), String> {
    /// A sink that fails once more than the bound has been written to it.
    struct Bounded(usize);
    impl io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            if self.0 > MAX_PATTERN_BYTES {
                return Err(io::Error::other("pattern too large"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Bounded(0), pattern)
        .map_err(|_| format!("pattern: is over {MAX_PATTERN_BYTES} bytes of JSON"))
}

/// Walks the pattern, counting its values against [`MAX_VALUES`].
struct Compiler {
    values: usize,
    /// Compiling a stored pattern: see [`pattern`].
    stored: bool,
}

impl Compiler {
    /// One pattern object at `path`, `depth` levels down (the top is level 1).
    fn node(&mut self, object: &Map<String, Value>, path: &str, depth: usize) -> Result<Node, String> {
        if depth > MAX_DEPTH {
            return Err(at(path, &format!("nests pattern objects deeper than {MAX_DEPTH} levels")));
        }
        if object.is_empty() {
            return Err(at(path, "is an empty pattern object; give at least one field"));
        }
        let mut node = Node { fields: Vec::new(), any_of: Vec::new() };
        for (name, value) in object {
            let child = field_path(path, name);
            if name == "$or" {
                node.any_of = self.alternatives(value, &child, depth)?;
                continue;
            }
            if !self.stored && RESERVED.contains(&name.as_str()) {
                let reason = format!(
                    "{name:?} is an operator, not a field: operators go in a field's array, \
                     as in \"total\": [{{{name:?}: ...}}]"
                );
                return Err(at(&child, &reason));
            }
            let field = match value {
                Value::Object(inner) => Field::Nested(self.node(inner, &child, depth + 1)?),
                Value::Array(items) => Field::Leaf(self.leaf(items, &child)?),
                other => {
                    let reason = format!("must be an array of values to match or a nested object, got {}", kind(other));
                    return Err(at(&child, &reason));
                }
            };
            node.fields.push((name.clone(), field));
        }
        Ok(node)
    }

    /// `text` unless it is empty: EventBridge refuses `anything-but` an empty prefix or suffix,
    /// which every string has.
    fn not_empty(&self, name: &str, text: String) -> Result<String, String> {
        if text.is_empty() && !self.stored {
            return Err(format!("anything-but refuses an empty {name}, which every string has"));
        }
        Ok(text)
    }

    /// The operand of `$or`: two or more pattern objects.
    fn alternatives(&mut self, value: &Value, path: &str, depth: usize) -> Result<Vec<Node>, String> {
        let items = match value {
            Value::Array(items) if items.len() >= 2 => items,
            _ => return Err(at(path, "must be an array of at least two pattern objects")),
        };
        let mut alternatives = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            let object = item
                .as_object()
                .ok_or_else(|| at(&item_path, &format!("must be a pattern object, got {}", kind(item))))?;
            alternatives.push(self.node(object, &item_path, depth + 1)?);
        }
        Ok(alternatives)
    }

    /// A leaf array: exact values and operator objects, any of which may match.
    fn leaf(&mut self, items: &[Value], path: &str) -> Result<Vec<Matcher>, String> {
        if items.is_empty() {
            return Err(at(path, "is an empty array, which would match nothing"));
        }
        let mut matchers = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            self.count(1, &item_path)?;
            let matcher = match item {
                Value::Array(_) => return Err(at(&item_path, "is an array; arrays in a pattern cannot nest")),
                Value::Object(operator) => self.operator(operator, &item_path)?,
                scalar => Matcher::Is(Test::Equals(vec![scalar.clone()])),
            };
            matchers.push(matcher);
        }
        Ok(matchers)
    }

    /// One operator object, such as `{"prefix": "eu-"}`.
    fn operator(&mut self, object: &Map<String, Value>, path: &str) -> Result<Matcher, String> {
        let mut entries = object.iter();
        let (Some((name, operand)), None) = (entries.next(), entries.next()) else {
            return Err(at(path, "an operator object must have exactly one key, such as {\"prefix\": \"eu-\"}"));
        };
        let compiled = match name.as_str() {
            "prefix" => affix(name, operand, Test::Prefix, Test::PrefixIgnoreCase).map(Matcher::Is),
            "suffix" => affix(name, operand, Test::Suffix, Test::SuffixIgnoreCase).map(Matcher::Is),
            "equals-ignore-case" => string(name, operand).map(|s| Matcher::Is(Test::IgnoreCase(vec![fold(s)]))),
            "wildcard" => string(name, operand).and_then(Wildcard::parse).map(|w| Matcher::Is(Test::Wildcard(w))),
            "numeric" => Range::parse(operand).map(|r| Matcher::Is(Test::Numeric(r))),
            "cidr" => string(name, operand).and_then(Cidr::parse).map(|c| Matcher::Is(Test::Cidr(c))),
            "exists" => match operand {
                Value::Bool(wanted) => Ok(Matcher::Exists(*wanted)),
                other => Err(format!("exists needs true or false, got {}", kind(other))),
            },
            "anything-but" => self.anything_but(operand, path).map(Matcher::Not),
            unknown => Err(format!("unknown operator {unknown:?}; known operators are {OPERATORS}")),
        };
        compiled.map_err(|reason| at(path, &reason))
    }

    /// The operand of `anything-but`: a value, a list of strings or of numbers, or one of
    /// `prefix`, `suffix`, `wildcard`, `equals-ignore-case` with a string or a list of them.
    fn anything_but(&mut self, operand: &Value, path: &str) -> Result<Test, String> {
        const SHAPE: &str = "anything-but needs a string, a number, a list of strings or of numbers, \
                             or an object with one of prefix, suffix, wildcard, equals-ignore-case";
        match operand {
            Value::String(_) | Value::Number(_) => Ok(Test::Equals(vec![operand.clone()])),
            Value::Array(items) => {
                let strings = items.iter().all(Value::is_string);
                let numbers = items.iter().all(Value::is_number);
                if items.is_empty() || !(strings || numbers) {
                    return Err(format!("{SHAPE}; a list must be non-empty and all strings or all numbers"));
                }
                self.count(items.len() - 1, path)?;
                Ok(Test::Equals(items.clone()))
            }
            Value::Object(inner) if inner.len() == 1 => {
                let Some((name, value)) = inner.iter().next() else { return Err(SHAPE.to_owned()) };
                let strings = self.strings(name, value, path)?;
                let tests: Result<Vec<Test>, String> = match name.as_str() {
                    "equals-ignore-case" => return Ok(Test::IgnoreCase(strings.iter().map(|s| fold(s)).collect())),
                    "prefix" => strings.into_iter().map(|s| self.not_empty("prefix", s).map(Test::Prefix)).collect(),
                    "suffix" => strings.into_iter().map(|s| self.not_empty("suffix", s).map(Test::Suffix)).collect(),
                    "wildcard" => strings.iter().map(|s| Wildcard::parse(s).map(Test::Wildcard)).collect(),
                    other => Err(format!("{SHAPE}; got {other:?}")),
                };
                tests.map(|mut tests| if tests.len() == 1 { tests.remove(0) } else { Test::AnyOf(tests) })
            }
            other => Err(format!("{SHAPE}; got {}", kind(other))),
        }
    }

    /// The operand of an operator inside `anything-but`: a string or a non-empty list of
    /// strings, each further string counted as a value.
    fn strings(&mut self, name: &str, value: &Value, path: &str) -> Result<Vec<String>, String> {
        let strings: Vec<String> = match value {
            Value::String(s) => vec![s.clone()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let all_strings = value.as_array().is_none_or(|items| items.len() == strings.len());
        if strings.is_empty() || !all_strings {
            return Err(format!("{name} needs a string or a non-empty list of strings, got {value}"));
        }
        self.count(strings.len() - 1, path)?;
        Ok(strings)
    }

    /// Counts `n` more values, refusing the pattern past [`MAX_VALUES`].
    fn count(&mut self, n: usize, path: &str) -> Result<(), String> {
        self.values += n;
        if self.values > MAX_VALUES {
            return Err(at(path, &format!("brings the pattern over {MAX_VALUES} values")));
        }
        Ok(())
    }
}

/// The operand of `prefix` or `suffix`: a string, or `{"equals-ignore-case": string}`.
fn affix(name: &str, operand: &Value, exact: fn(String) -> Test, folded: fn(String) -> Test) -> Result<Test, String> {
    match operand {
        Value::String(s) => Ok(exact(s.clone())),
        Value::Object(inner) if inner.len() == 1 => match inner.get("equals-ignore-case") {
            Some(Value::String(s)) => Ok(folded(fold(s))),
            _ => Err(format!("{name} needs a string or {{\"equals-ignore-case\": string}}, got {operand}")),
        },
        other => Err(format!("{name} needs a string or {{\"equals-ignore-case\": string}}, got {}", kind(other))),
    }
}

/// The operand of an operator that takes a string.
fn string<'a>(name: &str, operand: &'a Value) -> Result<&'a str, String> {
    operand.as_str().ok_or_else(|| format!("{name} needs a string, got {}", kind(operand)))
}

/// A value's JSON type, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The path of field `name` inside the object at `path`.
fn field_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// An error message for the place `path` (the top of the pattern when empty).
fn at(path: &str, reason: &str) -> String {
    if path.is_empty() {
        format!("pattern: {reason}")
    } else {
        format!("{path}: {reason}")
    }
}

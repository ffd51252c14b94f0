//! Request bodies: reading one within a limit (a JSON 413 past it), and parsing JSON
//! with errors that tell malformed JSON from a body of the wrong shape. Every handler
//! that takes a body uses these.

use axum::body::Body;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use sluice_core::Code;

use crate::ApiError;

/// Past the limit, a body is still read and discarded up to this many more bytes, so the
/// client (still sending) receives the 413 instead of a reset connection.
const DRAIN_BYTES: usize = 16 << 20;

/// Reads a whole body, refusing it with 413 once it passes `limit` bytes. A body that
/// arrives in one frame (the usual case) is returned as is, without a copy.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    use axum::body::HttpBody;
    // A body in more than one frame is copied once, into a buffer of its announced size.
    let announced = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX).min(limit);
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut rest = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame =
            frame.map_err(|e| ApiError::bad_request(Code::UnreadableBody, format!("could not read the body: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        seen = seen.saturating_add(data.len());
        if seen <= limit {
            if first.is_none() && rest.is_empty() {
                first = Some(data);
            } else {
                if let Some(first) = first.take() {
                    rest.reserve(announced.max(first.len() + data.len()));
                    rest.extend_from_slice(&first);
                }
                rest.extend_from_slice(&data);
            }
        } else if seen > limit.saturating_add(DRAIN_BYTES) {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::new(Code::RequestTooLarge, format!("request body is larger than {limit} bytes")));
    }
    Ok(first.unwrap_or_else(|| rest.freeze()))
}

/// Every route that takes a body takes JSON: a request that names another content type is
/// `415`. No content type reads as JSON. Publish is left to answer for itself: it also takes
/// CloudEvents, in any content type in binary mode.
pub async fn json_only(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let route = request.extensions().get::<axum::extract::MatchedPath>();
    let publish = route.is_some_and(|r| r.as_str() == "/v1/topics/{topic}/events");
    let content_type = request.headers().get(axum::http::header::CONTENT_TYPE);
    let mime = content_type.map(|v| v.to_str().unwrap_or("?").split(';').next().unwrap_or_default().trim());
    match mime {
        Some(mime) if !publish && !mime.is_empty() && !mime.eq_ignore_ascii_case("application/json") => {
            let message = format!("content type '{mime}' is not accepted: send application/json");
            ApiError::new(Code::UnsupportedMediaType, message).into_response()
        }
        _ => next.run(request).await,
    }
}

/// Parses JSON, telling malformed JSON (`invalid_json`) from a well-formed body of the wrong
/// shape (`invalid_request`, naming the field, what it takes and what it got).
pub fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    parse_json_ranged(body, &[])
}

/// [`parse_json`], with `ranges` saying what more fields take, by name: bounds the server's
/// configuration sets (`partitions`: 1 to its `max_partitions`).
///
/// A body is parsed without tracking the path first: `serde_path_to_error` wraps every
/// field's deserializer and clones every key it passes, a third of a one-event publish's
/// parse. Only a body that fails is parsed again, tracked, for the field to name: the same
/// text through the same deserializer fails the same way.
fn parse_json_ranged<'a, T: Deserialize<'a>>(body: &'a [u8], ranges: &[(&str, String)]) -> Result<T, ApiError> {
    let text = utf8(body)?;
    let mut json = serde_json::Deserializer::from_str(text);
    if let Ok(value) = T::deserialize(&mut json) {
        json.end().map_err(|e| json_error(e, ".", ranges))?;
        return Ok(value);
    }
    let mut json = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut json).map_err(|e| {
        let path = e.path().to_string();
        json_error(e.into_inner(), &path, ranges)
    })?;
    json.end().map_err(|e| json_error(e, ".", ranges))?;
    Ok(value)
}

/// [`parse_json`] into a type that borrows nothing from the body.
pub fn parse_json_owned<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    parse_json(body)
}

/// A request body of the documented shape: a JSON object (see [`Object`]), whose unknown
/// fields the type refuses (`deny_unknown_fields`), each `400 invalid_request` naming it.
pub fn parse_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    parse_object_ranged(body, &[])
}

/// [`parse_object`], with `ranges` as [`parse_json_ranged`] takes them.
pub fn parse_object_ranged<T: DeserializeOwned>(body: &[u8], ranges: &[(&str, String)]) -> Result<T, ApiError> {
    parse_json_ranged::<Object<T>>(body, ranges).map(|Object(t)| t)
}

/// The body as text (JSON is UTF-8), checked once in one pass: `serde_json::from_slice`
/// would check each string and each raw value on its own, at about twice the cost. The pass
/// is `simdutf8`'s, 32 bytes at a time with AVX2 (chosen at run time) or 16 with NEON, where
/// std's goes a word at a time; only a body that fails is checked again by std, for the byte
/// to name (`simdutf8::basic` says only that it failed).
fn utf8(body: &[u8]) -> Result<&str, ApiError> {
    simdutf8::basic::from_utf8(body).map_err(|_| {
        let at = std::str::from_utf8(body).err().map_or(body.len(), |e| e.valid_up_to());
        ApiError::bad_request(Code::InvalidJson, format!("malformed JSON: not UTF-8 at byte {at}"))
    })
}

/// A `T` read only from a JSON object: serde's derived structs also take an array of their
/// fields in order (`[[{"value": 1}]]` as a publish batch), which no documented shape is.
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData)).map(Object)
    }
}

/// The error of a body that failed to parse; `path` is the field it failed at (`.` for the
/// body itself, `events[0].key` inside).
fn json_error(e: serde_json::Error, path: &str, ranges: &[(&str, String)]) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::bad_request(Code::InvalidJson, format!("malformed JSON: {e}"))
        }
        Category::Data => ApiError::bad_request(Code::InvalidRequest, shape_message(&e.to_string(), path, ranges)),
    }
}

/// serde's "invalid value: integer `-1`, expected u32 at line 1 column 17", said as
/// "partitions: expected an integer from 1 to 1024, got -1": the field, what it takes (in the
/// API's words where it has a documented range, or one in `ranges`), what it got. Other
/// messages (a missing or unknown field) keep serde's words, after the field they are in.
fn shape_message(serde: &str, path: &str, ranges: &[(&str, String)]) -> String {
    let message = serde.rfind(" at line ").map_or(serde, |at| &serde[..at]);
    let wrong = message.strip_prefix("invalid type: ").or_else(|| message.strip_prefix("invalid value: "));
    let Some((got, expected)) = wrong.and_then(|m| m.split_once(", expected ")) else {
        return if path == "." { message.to_owned() } else { format!("{path}: {message}") };
    };
    let field = path.rsplit('.').next().unwrap_or(path);
    let configured = ranges.iter().find(|(name, _)| *name == field).map(|(_, text)| text.as_str());
    let expected = configured.or_else(|| expected_for(field)).map_or_else(|| plain_type(expected), str::to_owned);
    let field = if path == "." { "body".to_owned() } else { path.to_owned() };
    format!("{field}: expected {expected}, got {}", plain_value(got))
}

/// The documented range of a numeric field the body parsers read, by name.
fn expected_for(field: &str) -> Option<&'static str> {
    use std::sync::LazyLock;
    static RANGES: LazyLock<Vec<(&str, String)>> = LazyLock::new(|| {
        use sluice_core::queues::*;
        vec![
            ("max_messages", format!("an integer from 1 to {MAX_RECEIVE_MESSAGES}")),
            ("wait_ms", format!("an integer from 0 to {MAX_RECEIVE_WAIT_MS}")),
            ("visibility_timeout_ms", format!("an integer from 0 to {MAX_VISIBILITY_TIMEOUT_MS}")),
            ("max_receive_count", format!("an integer from 1 to {MAX_RECEIVE_COUNT}")),
            ("delay_ms", format!("an integer from 0 to {MAX_DELAY_MS}")),
        ]
    });
    RANGES.iter().find(|(name, _)| *name == field).map(|(_, text)| text.as_str())
}

/// serde's name of a type, in the API's words.
fn plain_type(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative integer".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" | "bool" => "true or false".into(),
        other => other.to_owned(),
    }
}

/// serde's account of a value (`integer \`-1\``, `string "x"`), as the JSON it was.
fn plain_value(got: &str) -> String {
    for kind in ["integer ", "floating point ", "boolean "] {
        if let Some(v) = got.strip_prefix(kind) {
            return v.trim_matches('`').to_owned();
        }
    }
    got.strip_prefix("string ").map_or_else(|| got.to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Shape<'a> {
        #[serde(borrow)]
        value: &'a serde_json::value::RawValue,
        #[serde(borrow)]
        name: std::borrow::Cow<'a, str>,
    }

    #[test]
    fn bodies_are_text_checked_once_and_malformed_ones_say_where() {
        let ok: Shape = parse_json(r#"{"value": {"é": ["ü", 1]}, "name": "naïve"}"#.as_bytes()).unwrap();
        assert_eq!((ok.value.get(), ok.name.as_ref()), (r#"{"é": ["ü", 1]}"#, "naïve"));
        // Invalid UTF-8 inside a raw value, and inside a string: both malformed JSON.
        for body in [&b"{\"value\": \"\xff\", \"name\": \"n\"}"[..], &b"{\"value\": 1, \"name\": \"\xc3\"}"[..]] {
            let e = parse_json::<Shape>(body).err().unwrap();
            assert_eq!((e.status.as_u16(), e.code), (400, Code::InvalidJson), "{}", e.message);
            assert!(e.message.contains("not UTF-8 at byte"), "{}", e.message);
        }
        let e = parse_json_owned::<serde_json::Value>(b"{\"a\": ").err().unwrap();
        assert_eq!(e.code, Code::InvalidJson);
        let e = parse_json::<Shape>(br#"{"value": 1}"#).err().unwrap();
        assert_eq!(e.code, Code::InvalidRequest, "well-formed, wrong shape: {}", e.message);
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Numbers {
        partitions: Option<u32>,
        other: Option<u64>,
        name: Option<String>,
        inner: Option<Vec<Numbers>>,
    }

    #[test]
    fn a_wrong_type_or_value_names_the_field_what_it_takes_and_what_it_got() {
        let cases = [
            (r#"{"partitions": -1}"#, "partitions: expected an integer from 1 to 1024, got -1"),
            (r#"{"partitions": "4"}"#, r#"partitions: expected an integer from 1 to 1024, got "4""#),
            (r#"{"other": 1.5}"#, "other: expected a non-negative integer, got 1.5"),
            (r#"{"name": true}"#, "name: expected a string, got true"),
            (r#"{"inner": [{"partitions": 0.5}]}"#, "inner[0].partitions: expected an integer from 1 to 1024, got 0.5"),
            (
                r#"{"inner": [{"nope": 1}]}"#,
                "inner[0].nope: unknown field `nope`, expected one of `partitions`, `other`, `name`, `inner`",
            ),
            (r#"[1]"#, "body: expected a JSON object, got sequence"),
        ];
        let ranges = [("partitions", "an integer from 1 to 1024".to_owned())];
        for (body, want) in cases {
            let e = parse_object_ranged::<Numbers>(body.as_bytes(), &ranges).err().unwrap();
            assert_eq!((e.code, e.message.as_str()), (Code::InvalidRequest, want), "{body}");
        }
        let e = parse_object::<Numbers>(br#"{"partitions": 2} x"#).err().unwrap();
        assert_eq!(e.code, Code::InvalidJson, "trailing characters: {}", e.message);
    }

    #[test]
    fn objects_are_read_from_json_objects_alone_keeping_what_they_borrow() {
        let Object(ok) = parse_json::<Object<Shape>>(br#"{"value": [1, {"a": 2}], "name": "n"}"#).unwrap();
        assert_eq!((ok.value.get(), ok.name.as_ref()), (r#"[1, {"a": 2}]"#, "n"));
        assert!(matches!(ok.name, std::borrow::Cow::Borrowed(_)), "the name is borrowed from the body");
        // The same fields as an array, which serde's derive would take in field order.
        assert!(parse_json::<Shape>(br#"[1, "n"]"#).is_ok(), "the derive alone takes an array");
        let e = parse_json::<Object<Shape>>(br#"[1, "n"]"#).err().unwrap();
        assert_eq!(e.code, Code::InvalidRequest, "{}", e.message);
        assert!(e.message.contains("expected a JSON object"), "{}", e.message);
    }
}

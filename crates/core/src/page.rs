//! What an event costs a page (a replay's, a group poll's, a queue receive's): its bytes in
//! the answer as Lambda carries it. API Gateway's proxy result holds the JSON answer as a
//! JSON *string*, so every quote and backslash of the answer, and every escape in it, is
//! escaped once more: a page of quote-dense values doubles on the way out. Pages are cut by
//! this carried size, counted before anything is written (a receive leases only what fits,
//! a poll moves positions only over what it answers), so the answer always fits Lambda's
//! response limit (6,291,556 bytes) with room for the proxy result around the events.
//!
//! `serve` cuts pages by the same rule: one rule everywhere, so a page ends at the same event
//! whichever backend serves it, and a program tested on `serve` pages as it will on Lambda.
//! It costs `serve` only smaller pages of quote-dense values (a request more per ~2.7 MB).

use crate::scan::{self, Escapes};
use crate::segment::Record;

/// Bytes of the fields every event's rendering has beyond its key, headers and value, counted
/// at their longest and escaped: a queue message's (the longest, with its receipt and counts)
/// `{"receipt":"…","partition":…,"offset":…,"receive_count":…,"first_receive_ms":…,
/// "timestamp_ms":…,"key":null,"headers":{},"value_base64":""},` (a test checks it).
const EVENT_FIELDS: usize = 360;

/// Bytes each header adds besides its name and value: `"name":"value",`, quotes escaped.
const HEADER_FIELDS: usize = 10;

/// Bytes a JSON text takes once escaped as a JSON string's content (serde_json's escapes:
/// `\"`, `\\`, the short escapes of \b \t \n \f \r, `\u00XX` for other control characters).
pub(crate) fn escaped_len(json: &[u8]) -> usize {
    escaped_by(json, &ESCAPED)
}

/// Bytes `text` (as the answer writes it: invalid UTF-8 replaced) takes as a JSON string's
/// content, then escaped once more as the proxy result's body: a quote 4, a control character
/// up to 7.
fn carried_text(text: &[u8]) -> usize {
    let text = String::from_utf8_lossy(text);
    escaped_by(text.as_bytes(), &ESCAPED_TWICE)
}

/// The sum of `table` over `bytes`, for a table made by [`table()`]: 1 for every byte but
/// the control characters, `"` and `\`. Every event published, read, polled or received is
/// counted by it (its value most of all, a receive's twice), so the bytes escaped and the
/// control characters among them are counted at the CPU's widest vector lanes
/// ([`scan::escapes`]; a table lookup per byte cannot be vectorized: 8 instructions a byte,
/// two thirds of a replay read's). Control characters are rare: only a text holding some is
/// read again, for the short escapes.
fn escaped_by(bytes: &[u8], table: &[u8; 256]) -> usize {
    let Escapes { escaped, control } = scan::escapes(bytes);
    let excess = |b: u8| usize::from(table[usize::from(b)] - 1);
    let mut total = bytes.len() + (escaped - control) * excess(b'"');
    if control > 0 {
        let short = bytes.iter().filter(|&&b| matches!(b, 0x08..=0x0a | 0x0c | 0x0d)).count();
        total += short * excess(0x08) + (control - short) * excess(0x01);
    }
    total
}

/// The bytes an event takes in a page as Lambda carries it: exact for its key, headers and
/// value, its numbers and field names counted at their longest.
pub(crate) fn event_size(r: &Record) -> usize {
    let key = r.key.as_ref().map_or(0, |k| carried_text(k));
    let headers: usize =
        r.headers.iter().map(|(n, v)| carried_text(n.as_bytes()) + carried_text(v) + HEADER_FIELDS).sum();
    let value = if r.value_is_json { escaped_len(&r.value) } else { r.value.len().div_ceil(3) * 4 };
    EVENT_FIELDS + key + headers + value
}

/// The bytes a topic's name adds to a group poll's event (`"topic":"…",`), or to an entry of
/// its assignment (`{"topic":"…","partition":…},`): names need no escaping.
pub(crate) fn topic_size(name: &str) -> usize {
    name.len() + 48
}

/// Per byte, its length once escaped as a JSON string's content.
const ESCAPED: [u8; 256] = table(2, 2, 6);

/// Per byte, its length escaped twice: the answer's string, then the proxy result's body.
const ESCAPED_TWICE: [u8; 256] = table(4, 3, 7);

const fn table(quote: u8, short: u8, long: u8) -> [u8; 256] {
    let mut t = [1u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = long;
        b += 1;
    }
    t[0x08] = short;
    t[0x09] = short;
    t[0x0a] = short;
    t[0x0c] = short;
    t[0x0d] = short;
    t[b'"' as usize] = quote;
    t[b'\\' as usize] = quote;
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// `s` as a JSON string (serde_json's rendering, as the answer writes it).
    fn json_string(s: &str) -> String {
        serde_json::to_string(s).unwrap()
    }

    #[test]
    fn every_byte_escapes_as_serde_json_escapes_it_once_and_twice() {
        for b in 0u8..0x80 {
            let s = char::from(b).to_string();
            let once = json_string(&s);
            assert_eq!(escaped_len(s.as_bytes()), once.len() - 2, "byte {b:#x} once");
            assert_eq!(carried_text(s.as_bytes()), json_string(&once).len() - 2 - 2 * 2, "byte {b:#x} twice");
        }
        assert_eq!(carried_text(&[0xff, b'a']), "\u{fffd}a".len(), "invalid UTF-8 is replaced");
    }

    proptest::proptest! {
        /// Eight bytes at a time counts what a lookup of every byte counts, whatever bytes
        /// and wherever they fall in the words (few distinct bytes, so specials meet often).
        #[test]
        fn counting_by_words_is_counting_by_bytes(
            bytes in proptest::collection::vec(proptest::sample::select(vec![
                0u8, 0x08, 0x0a, 0x1f, b' ', b'!', b'"', b'#', b'\\', b']', b'a', 0x7f, 0x80, 0x9f, 0xa0, 0xdc, 0xff,
            ]), 0..100),
        ) {
            for table in [&ESCAPED, &ESCAPED_TWICE] {
                let bytewise: usize = bytes.iter().map(|&b| usize::from(table[usize::from(b)])).sum();
                proptest::prop_assert_eq!(escaped_by(&bytes, table), bytewise);
            }
        }
    }

    /// Long texts are counted in runs: one of 70,000 quotes would overflow a single run's
    /// 8-bit count; controls with and without short escapes mixed are counted apart.
    #[test]
    fn a_long_texts_escaped_length_is_serde_jsons() {
        let mixed: String = (0..3000).map(|i| ["a", "\"", "\\", "\n", "\u{1}", "é", "\u{7f}"][i % 7]).collect();
        for text in ["\u{1}".repeat(20_000), "\"".repeat(70_000), mixed, "x".repeat(10_000)] {
            assert_eq!(escaped_len(text.as_bytes()), json_string(&text).len() - 2, "{} bytes", text.len());
        }
    }

    #[test]
    fn a_run_of_the_longest_escapes_counts_whole() {
        for b in [0x01u8, b'"'] {
            for table in [&ESCAPED, &ESCAPED_TWICE] {
                let run = vec![b; 1000];
                assert_eq!(escaped_by(&run, table), 1000 * usize::from(table[usize::from(b)]), "1000 × {b:#x}");
            }
        }
    }

    #[test]
    fn every_byte_counts_alone_and_in_every_place_of_a_block() {
        for special in 0..=255u8 {
            for at in 0..33 {
                let mut bytes = vec![b'a'; 33];
                bytes[at] = special;
                for table in [&ESCAPED, &ESCAPED_TWICE] {
                    let expected = 32 + usize::from(table[usize::from(special)]);
                    assert_eq!(escaped_by(&bytes, table), expected, "byte {special:#x} at {at}");
                }
            }
        }
    }

    #[test]
    fn an_events_size_is_at_least_its_rendering_carried() {
        let control = |n: usize| Bytes::from(vec![1u8; n]);
        let quotes = Bytes::from(serde_json::to_vec(&vec!["\"\\"; 100]).unwrap());
        let record = Record {
            timestamp_ms: i64::MIN,
            key: Some(Bytes::from_static(b"k\"\n\x01")),
            headers: vec![("\u{1}h".into(), control(5)), ("h\"".into(), Bytes::from_static(b"\\"))],
            value: quotes.clone(),
            value_is_json: true,
        };
        // The longest rendering there is: a queue message's, every number at its longest.
        let headers: serde_json::Map<String, serde_json::Value> =
            record.headers.iter().map(|(n, v)| (n.clone(), String::from_utf8_lossy(v).into())).collect();
        let message = serde_json::json!({
            "receipt": "A".repeat(76), "partition": u32::MAX, "offset": u64::MAX, "receive_count": u32::MAX,
            "first_receive_ms": i64::MIN, "timestamp_ms": i64::MIN, "key": "k\"\n\u{1}", "headers": headers,
            "value": serde_json::from_slice::<serde_json::Value>(&quotes).unwrap(),
        });
        let rendered = format!("{message},");
        let carried = json_string(&rendered).len() - 2;
        let size = event_size(&record);
        assert!(carried <= size && size <= carried + 64, "carried {carried}, counted {size}");
        let binary = Record { value: control(1000), value_is_json: false, ..record };
        assert_eq!(event_size(&binary) - size, 1336 - escaped_len(&quotes), "base64: 4 bytes per 3");
    }
}

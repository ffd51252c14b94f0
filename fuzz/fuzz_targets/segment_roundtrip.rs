//! The segment codec on arbitrary records (structured input, via `arbitrary`): what the
//! encoder writes, after any prefix of the output buffer, the decoder returns unchanged.
//!
//! Oracle: decode(encode(records)) == records with dense offset deltas; the summary is
//! right; the segment cut short by a byte, or with one byte changed, is refused.

#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_core::segment::{decode_segment, encode_segment, Record};

#[derive(Arbitrary, Debug)]
struct ArbitraryRecord {
    timestamp_ms: i64,
    key: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
    value: Vec<u8>,
    value_is_json: bool,
}

impl From<ArbitraryRecord> for Record {
    fn from(r: ArbitraryRecord) -> Self {
        Record {
            timestamp_ms: r.timestamp_ms,
            key: r.key.map(Bytes::from),
            headers: r.headers.into_iter().map(|(name, value)| (name, Bytes::from(value))).collect(),
            value: Bytes::from(r.value),
            value_is_json: r.value_is_json,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// What the output buffer already holds (a blob of several segments).
    prefix: Vec<u8>,
    first: ArbitraryRecord,
    rest: Vec<ArbitraryRecord>,
    /// A byte to change (index taken modulo the length) and a non-zero change.
    flip_at: usize,
    flip: std::num::NonZeroU8,
}

fuzz_target!(|input: Input| {
    let records: Vec<Record> = std::iter::once(input.first).chain(input.rest).map(Record::from).collect();
    let mut out = input.prefix;
    let start = out.len();
    let summary = encode_segment(&records, &mut out);
    assert_eq!(out[..start].len() + summary.len, out.len());
    assert_eq!(summary.record_count as usize, records.len());
    assert_eq!(summary.last_offset_delta as usize, records.len() - 1);
    assert_eq!(Some(summary.max_timestamp_ms), records.iter().map(|r| r.timestamp_ms).max());

    let segment = Bytes::from(out).slice(start..);
    let decoded = decode_segment(&segment).expect("a segment the encoder made decodes");
    assert!(decoded.iter().enumerate().all(|(i, d)| d.offset_delta as usize == i), "deltas not dense");
    assert!(decoded.into_iter().map(|d| d.record).eq(records.iter().cloned()), "records differ");

    assert!(decode_segment(&segment.slice(..segment.len() - 1)).is_err(), "a truncated segment decoded");
    let mut changed = segment.to_vec();
    changed[input.flip_at % segment.len()] ^= input.flip.get();
    assert!(decode_segment(&Bytes::from(changed)).is_err(), "a segment with a changed byte decoded");
});

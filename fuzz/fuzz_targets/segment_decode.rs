//! The segment decoder on arbitrary bytes. The seed corpus holds segments made by the
//! encoder, so mutations get past the magic and checksum checks into the records.
//!
//! Oracle: no panic; what decodes has increasing offset deltas and encodes again into a
//! segment that decodes to the same records (with dense deltas), whose summary is right.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_core::segment::{decode_segment, encode_segment, Record, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(decoded) = decode_segment(&Bytes::copy_from_slice(data)) else { return };
    assert!(data.len() >= HEADER_LEN);
    assert!(decoded.windows(2).all(|w| w[0].offset_delta < w[1].offset_delta), "offset deltas not increasing");
    if decoded.is_empty() {
        return;
    }
    let records: Vec<Record> = decoded.into_iter().map(|d| d.record).collect();
    let mut encoded = Vec::new();
    let summary = encode_segment(&records, &mut encoded);
    assert_eq!(summary.len, encoded.len());
    assert_eq!(summary.record_count as usize, records.len());
    assert_eq!(summary.last_offset_delta as usize, records.len() - 1);
    assert_eq!(Some(summary.max_timestamp_ms), records.iter().map(|r| r.timestamp_ms).max());
    let again = decode_segment(&Bytes::from(encoded)).expect("a segment the encoder made decodes");
    assert!(again.iter().enumerate().all(|(i, d)| d.offset_delta as usize == i), "re-encoded deltas not dense");
    assert!(again.into_iter().map(|d| d.record).eq(records), "re-encoded records differ");
});

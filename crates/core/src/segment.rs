//! The segment codec: a versioned, CRC32C-checked run of records of one partition.
//!
//! A segment never stores absolute offsets: each record carries an offset delta
//! from the segment's base, and the base lives in the index entry that makes the
//! segment visible. So an object is written once and never rewritten, whatever
//! offset its commit ends up at.
//!
//! ```text
//! segment := magic "SLC" | version u8 (=1) | crc32c u32le | attributes u8
//!            | record_count u32le | last_offset_delta u32le
//!            | base_timestamp i64le | max_timestamp i64le | records_len u32le
//!            | record*                      (crc32c covers attributes..end)
//! record  := attributes u8 (bit 0: value is JSON) | offset_delta uvarint
//!            | timestamp_delta zigzag varint | key_len uvarint (0 = no key, else len + 1)
//!            | key | header_count uvarint | (name_len uvarint name value_len uvarint value)*
//!            | value_len uvarint | value
//! ```

use bytes::Bytes;
use thiserror::Error;

const MAGIC: &[u8; 3] = b"SLC";
const VERSION: u8 = 1;
/// Bytes before the first record.
pub const HEADER_LEN: usize = 37;
const CRC_START: usize = 8;
const VALUE_IS_JSON: u8 = 0b1;

/// One event as stored: everything but its offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
    pub value: Bytes,
    /// The value is a JSON text (published as `value`), not opaque bytes.
    pub value_is_json: bool,
}

impl Record {
    /// Bytes the record occupies in memory and on the wire, roughly: used for size limits.
    pub fn approx_size(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        self.key.as_ref().map_or(0, Bytes::len) + headers + self.value.len() + 24
    }
}

/// A record decoded from a segment, with its offset relative to the segment's base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    pub offset_delta: u32,
    pub record: Record,
}

/// What a reader needs to know about an encoded segment without decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    pub len: usize,
    pub record_count: u32,
    pub last_offset_delta: u32,
    pub max_timestamp_ms: i64,
}

/// Why bytes are not a valid segment. Decoding never panics on bad input.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("segment truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("not a segment (bad magic)")]
    BadMagic,
    #[error("unsupported segment version {0}")]
    UnsupportedVersion(u8),
    #[error("segment checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { stored: u32, computed: u32 },
    #[error("malformed segment: {0}")]
    Malformed(&'static str),
}

/// Bytes of one part of a segment written in parts, the unit a reader fetches and decodes,
/// unless configured (`LogConfig::part_bytes`, `JanitorConfig::part_bytes`).
pub const PART_BYTES: usize = 256 << 10;

/// A run of records written as parts (see [`encode_parts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    /// Bytes of every part together.
    pub len: usize,
    /// Every part but the first: `[first offset delta, byte position from the first part]`,
    /// the sparse index a segment's index item keeps.
    pub starts: Vec<[u64; 2]>,
    pub max_timestamp_ms: i64,
}

/// Appends `records` (offset deltas 0, 1, …; not empty) to `out` as parts of about
/// `part_bytes` (in production [`PART_BYTES`]), each an encoded segment of its own (a
/// record larger than a part is a part alone), so a reader of a few records fetches and
/// decodes one part, not the whole run.
/// A run of at most `part_bytes` is one part: exactly [`encode_segment`]'s bytes.
pub fn encode_parts(records: &[&Record], part_bytes: usize, out: &mut Vec<u8>) -> Parts {
    let start = out.len();
    let (mut starts, mut max_timestamp_ms, mut i) = (Vec::new(), i64::MIN, 0);
    while i < records.len() {
        let (mut j, mut bytes) = (i, 0);
        while j < records.len() && (j == i || bytes + records[j].approx_size() <= part_bytes) {
            bytes += records[j].approx_size();
            j += 1;
        }
        if i > 0 {
            starts.push([i as u64, (out.len() - start) as u64]);
        }
        let summary = encode_segment(records[i..j].iter().copied(), out);
        max_timestamp_ms = max_timestamp_ms.max(summary.max_timestamp_ms);
        i = j;
    }
    Parts { len: out.len() - start, starts, max_timestamp_ms }
}

/// Appends one segment holding `records` (offset deltas 0, 1, …) to `out`.
///
/// `records` must not be empty and must hold fewer than 2^32 records.
pub fn encode_segment<'a, I>(records: I, out: &mut Vec<u8>) -> SegmentSummary
where
    I: IntoIterator<Item = &'a Record>,
    I::IntoIter: Clone,
{
    let records = records.into_iter();
    let start = out.len();
    let base_ts = records.clone().next().map_or(0, |r| r.timestamp_ms);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&[0; 4]); // crc, patched below
    out.push(0); // attributes: uncompressed
    let count_at = out.len();
    out.extend_from_slice(&[0; 4 + 4 + 8 + 8 + 4]);

    let records_start = out.len();
    let mut count: u32 = 0;
    let mut max_ts = i64::MIN;
    for record in records {
        out.push(if record.value_is_json { VALUE_IS_JSON } else { 0 });
        put_uvarint(out, u64::from(count));
        put_uvarint(out, zigzag(record.timestamp_ms.wrapping_sub(base_ts)));
        match &record.key {
            None => put_uvarint(out, 0),
            Some(key) => put_bytes(out, key, 1),
        }
        put_uvarint(out, record.headers.len() as u64);
        for (name, value) in &record.headers {
            put_bytes(out, name.as_bytes(), 0);
            put_bytes(out, value, 0);
        }
        put_bytes(out, &record.value, 0);
        max_ts = max_ts.max(record.timestamp_ms);
        count += 1;
    }
    let records_len = (out.len() - records_start) as u32;
    let last_delta = count.saturating_sub(1);
    let mut header = Vec::with_capacity(28);
    header.extend_from_slice(&count.to_le_bytes());
    header.extend_from_slice(&last_delta.to_le_bytes());
    header.extend_from_slice(&base_ts.to_le_bytes());
    header.extend_from_slice(&max_ts.to_le_bytes());
    header.extend_from_slice(&records_len.to_le_bytes());
    out[count_at..count_at + header.len()].copy_from_slice(&header);
    let crc = crc32c::crc32c(&out[start + CRC_START..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    SegmentSummary {
        len: out.len() - start,
        record_count: count,
        last_offset_delta: last_delta,
        max_timestamp_ms: max_ts,
    }
}

/// Decodes one whole segment, checking its checksum and every length in it.
pub fn decode_segment(bytes: &Bytes) -> Result<Vec<DecodedRecord>, CodecError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    if r.take(3)? != MAGIC.as_slice() {
        return Err(CodecError::BadMagic);
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(CodecError::UnsupportedVersion(version));
    }
    let stored = u32::from_le_bytes(r.array()?);
    if bytes.len() < HEADER_LEN {
        return Err(CodecError::Truncated { needed: HEADER_LEN - bytes.len() });
    }
    let attributes = r.u8()?;
    let count = u32::from_le_bytes(r.array()?);
    let last_delta = u32::from_le_bytes(r.array()?);
    let base_ts = i64::from_le_bytes(r.array()?);
    let _max_ts = i64::from_le_bytes(r.array()?);
    let records_len = u32::from_le_bytes(r.array()?) as usize;
    let end = HEADER_LEN + records_len;
    if bytes.len() < end {
        return Err(CodecError::Truncated { needed: end - bytes.len() });
    }
    if bytes.len() > end {
        return Err(CodecError::Malformed("trailing bytes after records"));
    }
    let computed = crc32c::crc32c(&bytes[CRC_START..end]);
    if computed != stored {
        return Err(CodecError::ChecksumMismatch { stored, computed });
    }
    if attributes != 0 {
        return Err(CodecError::Malformed("unknown segment attributes"));
    }

    // Each record takes at least 6 bytes, so a lying count cannot make us over-allocate.
    let mut records = Vec::with_capacity((count as usize).min(records_len / 6 + 1));
    for _ in 0..count {
        let flags = r.u8()?;
        if flags & !VALUE_IS_JSON != 0 {
            return Err(CodecError::Malformed("unknown record attributes"));
        }
        let offset_delta = u32::try_from(r.uvarint()?).map_err(|_| CodecError::Malformed("offset delta overflows"))?;
        let timestamp_ms = base_ts.wrapping_add(unzigzag(r.uvarint()?));
        let key = match r.uvarint()? {
            0 => None,
            n => Some(r.slice(usize::try_from(n - 1).map_err(|_| CodecError::Malformed("key length"))?)?),
        };
        let header_count = r.len()?;
        let mut headers = Vec::with_capacity(header_count.min(64));
        for _ in 0..header_count {
            let name_len = r.len()?;
            let name = std::str::from_utf8(r.take(name_len)?)
                .map_err(|_| CodecError::Malformed("header name is not UTF-8"))?
                .to_owned();
            let value_len = r.len()?;
            headers.push((name, r.slice(value_len)?));
        }
        let value_len = r.len()?;
        let value = r.slice(value_len)?;
        records.push(DecodedRecord {
            offset_delta,
            record: Record { timestamp_ms, key, headers, value, value_is_json: flags & VALUE_IS_JSON != 0 },
        });
    }
    if r.pos != end {
        return Err(CodecError::Malformed("record count does not match records length"));
    }
    if records.last().map(|d| d.offset_delta) != Some(last_delta) && count > 0 {
        return Err(CodecError::Malformed("last offset delta does not match records"));
    }
    if records.windows(2).any(|w| w[0].offset_delta >= w[1].offset_delta) {
        return Err(CodecError::Malformed("offset deltas not increasing"));
    }
    Ok(records)
}

struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], CodecError> {
        let end = self.pos.checked_add(n).ok_or(CodecError::Malformed("length overflows"))?;
        if end > self.buf.len() {
            return Err(CodecError::Truncated { needed: end - self.buf.len() });
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn slice(&mut self, n: usize) -> Result<Bytes, CodecError> {
        let start = self.pos;
        self.take(n)?;
        Ok(self.buf.slice(start..self.pos))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    fn uvarint(&mut self) -> Result<u64, CodecError> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            if shift == 63 && byte > 1 {
                return Err(CodecError::Malformed("varint overflows 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(CodecError::Malformed("varint longer than 10 bytes"))
    }

    fn len(&mut self) -> Result<usize, CodecError> {
        usize::try_from(self.uvarint()?).map_err(|_| CodecError::Malformed("length overflows"))
    }
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8], len_bias: u64) {
    put_uvarint(out, bytes.len() as u64 + len_bias);
    out.extend_from_slice(bytes);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parts_split_at_the_part_size_and_index_their_first_offsets() {
        let value = Bytes::from(vec![7u8; 100 << 10]);
        let records: Vec<(u64, Record)> = (0..7)
            .map(|i| {
                let r = Record {
                    timestamp_ms: i,
                    key: None,
                    headers: Vec::new(),
                    value: value.clone(),
                    value_is_json: false,
                };
                (40 + i as u64, r)
            })
            .collect();
        let mut blob = vec![9u8; 5]; // appended after what `out` already holds
        let parts = encode_parts(&records.iter().map(|(_, r)| r).collect::<Vec<_>>(), PART_BYTES, &mut blob);
        let blob = Bytes::from(blob).slice(5..);
        assert_eq!((parts.max_timestamp_ms, parts.len), (6, blob.len()));
        // 100 KiB records, 256 KiB parts: two per part.
        assert_eq!(parts.starts.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![2, 4, 6]);
        let (len, max_ts) = (blob.len() as u64, parts.max_timestamp_ms);
        let record = crate::layout::SegmentRecord {
            next: 47,
            object: "o".into(),
            pos: 0,
            len,
            max_ts,
            parts: parts.starts,
            inline: false,
            counted: None,
            rewritten: false,
            moved_from: None,
        };
        let mut offsets = Vec::new();
        for (delta, off, len) in record.pieces() {
            let part = blob.slice(off as usize..(off + len) as usize);
            let decoded = crate::segment::decode_segment(&part).unwrap();
            offsets.extend(decoded.iter().map(|d| 40 + delta + u64::from(d.offset_delta)));
        }
        assert_eq!(offsets, (40..47).collect::<Vec<_>>());
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        (
            any::<i64>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::collection::vec(("[a-z-]{0,12}", proptest::collection::vec(any::<u8>(), 0..20)), 0..5),
            proptest::collection::vec(any::<u8>(), 0..300),
            any::<bool>(),
        )
            .prop_map(|(timestamp_ms, key, headers, value, value_is_json)| Record {
                timestamp_ms,
                key: key.map(Bytes::from),
                headers: headers.into_iter().map(|(n, v)| (n, Bytes::from(v))).collect(),
                value: Bytes::from(value),
                value_is_json,
            })
    }

    fn encode(records: &[Record]) -> Bytes {
        let mut out = Vec::new();
        encode_segment(records, &mut out);
        Bytes::from(out)
    }

    proptest! {
        #[test]
        fn round_trip_returns_every_record_with_dense_deltas(records in proptest::collection::vec(arb_record(), 1..20)) {
            let bytes = encode(&records);
            let decoded = decode_segment(&bytes).unwrap();
            prop_assert_eq!(decoded.len(), records.len());
            for (i, (d, r)) in decoded.iter().zip(&records).enumerate() {
                prop_assert_eq!(d.offset_delta as usize, i);
                prop_assert_eq!(&d.record, r);
            }
        }

        #[test]
        fn any_flipped_byte_is_an_error_not_a_panic(records in proptest::collection::vec(arb_record(), 1..5), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut bytes = encode(&records).to_vec();
            let i = pos.index(bytes.len());
            bytes[i] ^= 1 << bit;
            prop_assert!(decode_segment(&Bytes::from(bytes)).is_err());
        }

        #[test]
        fn any_truncation_is_an_error_not_a_panic(records in proptest::collection::vec(arb_record(), 1..5), cut in any::<prop::sample::Index>()) {
            let bytes = encode(&records);
            let cut = cut.index(bytes.len());
            prop_assert!(decode_segment(&bytes.slice(..cut)).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_segment(&Bytes::from(bytes));
        }
    }

    #[test]
    fn given_corrupt_payload_when_decoded_then_checksum_mismatch() {
        let record = Record {
            timestamp_ms: 1,
            key: None,
            headers: vec![],
            value: Bytes::from_static(b"hello"),
            value_is_json: false,
        };
        let mut bytes = encode(&[record]).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        assert!(matches!(decode_segment(&Bytes::from(bytes)), Err(CodecError::ChecksumMismatch { .. })));
    }

    #[test]
    fn given_future_version_when_decoded_then_refused() {
        let record = Record { timestamp_ms: 1, key: None, headers: vec![], value: Bytes::new(), value_is_json: false };
        let mut bytes = encode(&[record]).to_vec();
        bytes[3] = 9;
        assert_eq!(decode_segment(&Bytes::from(bytes)), Err(CodecError::UnsupportedVersion(9)));
    }

    #[test]
    fn summary_reports_count_length_and_max_timestamp() {
        let mk = |ts| Record {
            timestamp_ms: ts,
            key: Some(Bytes::from_static(b"k")),
            headers: vec![],
            value: Bytes::from_static(b"v"),
            value_is_json: true,
        };
        let mut out = vec![0xAA];
        let summary = encode_segment(&[mk(5), mk(9), mk(7)], &mut out);
        assert_eq!(summary.len, out.len() - 1);
        assert_eq!(summary.record_count, 3);
        assert_eq!(summary.last_offset_delta, 2);
        assert_eq!(summary.max_timestamp_ms, 9);
        let decoded = decode_segment(&Bytes::from(out).slice(1..)).unwrap();
        assert_eq!(decoded[2].record.timestamp_ms, 7);
    }
}

//! Byte counts over whole texts at the CPU's widest vector lanes. Every event published,
//! read, polled or received is counted by them (its escapes, for what it costs a page; its
//! brackets, for the publish's nesting check), so they are written for the compiler to
//! vectorize: comparisons alone, summed in [`LANES`] `u8` lanes (one per byte of a chunk)
//! that are drained into a `usize` once every 255 chunks, before a lane can overflow.
//!
//! The release build targets baseline x86-64 (SSE2: 16-byte vectors), so each count is
//! compiled twice by `multiversion`: for that baseline and for AVX2 (32-byte vectors, which
//! every x86 host Lambda runs on has), chosen once at run time by the CPU's features; the
//! binary still runs on a baseline CPU. aarch64 (Lambda's arm64, Graviton) has NEON in its
//! baseline and needs no second copy. AVX-512 was measured no faster than AVX2 on 1 KiB
//! values (docs/PERFORMANCE.md, "The byte counts at the CPU's width") and is left out.

use multiversion::multiversion;

/// Bytes counted per chunk, one `u8` lane each: a 64-byte chunk fills four SSE2 vectors or
/// two AVX2 ones, every one independent of the others.
const LANES: usize = 64;

/// Chunks a lane takes before it is drained: one count each at most, so at most 255.
const BLOCK: usize = 255 * LANES;

/// Of a text, the bytes JSON escapes and the control characters among them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Escapes {
    /// `"`, `\` and the control characters (below 0x20).
    pub(crate) escaped: usize,
    /// The control characters alone.
    pub(crate) control: usize,
}

/// The bytes of `bytes` that JSON escapes, and the control characters among them, counted at
/// the widest vector lanes the CPU has.
#[multiversion(targets("x86_64+avx2"))]
pub(crate) fn escapes(bytes: &[u8]) -> Escapes {
    escapes_in_lanes(bytes)
}

/// How many `[` and `{` `bytes` holds (strings' included), counted at the widest vector
/// lanes the CPU has.
#[multiversion(targets("x86_64+avx2"))]
pub(crate) fn opening_brackets(bytes: &[u8]) -> usize {
    opening_brackets_in_lanes(bytes)
}

/// [`escapes`] in the baseline's lanes, inlined into each of its copies.
#[inline(always)]
fn escapes_in_lanes(bytes: &[u8]) -> Escapes {
    let mut lanes = EscapeLanes { escaped: [0; LANES], control: [0; LANES], total: Escapes::default() };
    count_in_lanes(bytes, &mut lanes);
    lanes.total
}

/// [`opening_brackets`] in the baseline's lanes, inlined into each of its copies.
#[inline(always)]
fn opening_brackets_in_lanes(bytes: &[u8]) -> usize {
    let mut lanes = BracketLanes { opens: [0; LANES], total: 0 };
    count_in_lanes(bytes, &mut lanes);
    lanes.total
}

/// Counts kept in `u8` lanes, one per byte of a chunk.
trait Lanes {
    /// Adds one chunk's bytes, each to its lane (at most 1 each).
    fn add(&mut self, chunk: &[u8; LANES]);
    /// Moves the lanes' counts into the total and zeroes them.
    fn drain(&mut self);
}

/// Feeds `bytes` to `lanes` a chunk at a time, draining them every [`BLOCK`] bytes and at the
/// end; the last chunk is padded with spaces, which no count counts.
#[inline(always)]
fn count_in_lanes(bytes: &[u8], lanes: &mut impl Lanes) {
    let (whole, tail) = bytes.split_at(bytes.len() - bytes.len() % LANES);
    for block in whole.chunks(BLOCK) {
        for chunk in block.chunks_exact(LANES) {
            if let Ok(chunk) = <&[u8; LANES]>::try_from(chunk) {
                lanes.add(chunk);
            }
        }
        if block.len() == BLOCK {
            lanes.drain();
        }
    }
    // The lanes hold fewer than 255 chunks here: one more fits.
    let mut last = [b' '; LANES];
    last[..tail.len()].copy_from_slice(tail);
    lanes.add(&last);
    lanes.drain();
}

struct EscapeLanes {
    escaped: [u8; LANES],
    control: [u8; LANES],
    total: Escapes,
}

impl Lanes for EscapeLanes {
    #[inline(always)]
    fn add(&mut self, chunk: &[u8; LANES]) {
        for ((escaped, control), &b) in self.escaped.iter_mut().zip(&mut self.control).zip(chunk) {
            let is_control = u8::from(b < 0x20);
            *control += is_control;
            *escaped += is_control | u8::from(b == b'"') | u8::from(b == b'\\');
        }
    }

    #[inline(always)]
    fn drain(&mut self) {
        self.total.escaped += sum(&self.escaped);
        self.total.control += sum(&self.control);
        self.escaped = [0; LANES];
        self.control = [0; LANES];
    }
}

struct BracketLanes {
    opens: [u8; LANES],
    total: usize,
}

impl Lanes for BracketLanes {
    #[inline(always)]
    fn add(&mut self, chunk: &[u8; LANES]) {
        for (opens, &b) in self.opens.iter_mut().zip(chunk) {
            *opens += u8::from(b == b'[' || b == b'{');
        }
    }

    #[inline(always)]
    fn drain(&mut self) {
        self.total += sum(&self.opens);
        self.opens = [0; LANES];
    }
}

/// The sum of `lanes`, eight at a time in a word: each byte pair summed into a 16-bit field
/// (at most 510, and 8 words' at most 4,080), then the four fields by one multiplication
/// (at most 16,320: no field overflows). The compiler sums a byte array a byte at a time,
/// which cost more than the counting of a 1 KiB text.
#[inline(always)]
fn sum(lanes: &[u8; LANES]) -> usize {
    const LOW_BYTES: u64 = 0x00ff_00ff_00ff_00ff;
    let mut fields = 0u64;
    for word in lanes.chunks_exact(8) {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let word = u64::from_le_bytes(bytes);
        fields += (word & LOW_BYTES) + ((word >> 8) & LOW_BYTES);
    }
    // Truncation is the point: the top 16 bits hold the sum of the four fields.
    (fields.wrapping_mul(0x0001_0001_0001_0001) >> 48) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Few distinct bytes, so the counted ones meet often; every boundary of the counts.
    const BYTES: [u8; 18] =
        [0, 0x08, 0x0a, 0x1f, b' ', b'!', b'"', b'#', b'[', b'\\', b']', b'{', b'a', 0x7f, 0x80, 0x9f, 0xdc, 0xff];

    fn reference(bytes: &[u8]) -> (Escapes, usize) {
        let control = bytes.iter().filter(|&&b| b < 0x20).count();
        let escaped = control + bytes.iter().filter(|&&b| b == b'"' || b == b'\\').count();
        (Escapes { escaped, control }, bytes.iter().filter(|&&b| b == b'[' || b == b'{').count())
    }

    /// Both copies: the dispatched one (AVX2 where the CPU has it, as on every host this
    /// runs on) and the baseline's.
    fn both(bytes: &[u8]) -> [(Escapes, usize); 2] {
        [(escapes(bytes), opening_brackets(bytes)), (escapes_in_lanes(bytes), opening_brackets_in_lanes(bytes))]
    }

    proptest::proptest! {
        /// Dispatched and baseline count what a byte-by-byte count counts, whatever bytes,
        /// wherever they fall in the chunks, and past a chunk's tail.
        #[test]
        fn the_lanes_count_what_a_byte_by_byte_count_counts(
            bytes in proptest::collection::vec(proptest::sample::select(BYTES.to_vec()), 0..300),
        ) {
            for counted in both(&bytes) {
                proptest::prop_assert_eq!(counted, reference(&bytes));
            }
        }
    }

    /// Past 255 chunks a lane is drained before it overflows: every byte counted, in texts
    /// of one block, one block and a byte, and many.
    #[test]
    fn texts_of_counted_bytes_only_count_whole_past_a_block() {
        for len in [BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17] {
            for b in BYTES {
                let text = vec![b; len];
                for counted in both(&text) {
                    assert_eq!(counted, reference(&text), "{len} × {b:#x}");
                }
            }
        }
    }

    #[test]
    fn a_full_lanes_sum_is_every_count() {
        assert_eq!(sum(&[255; LANES]), 255 * LANES);
        let ramp: [u8; LANES] = std::array::from_fn(|i| i as u8 * 3);
        assert_eq!(sum(&ramp), ramp.iter().map(|&n| usize::from(n)).sum::<usize>());
    }
}

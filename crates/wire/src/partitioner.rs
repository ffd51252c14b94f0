//! Kafka-compatible partitioning: a key lands on the same partition number as
//! it would with Kafka's default partitioner (`Utils.murmur2`, seed 0x9747b28c).

/// Kafka's 32-bit murmur2 of `data`, bit for bit (`org.apache.kafka.common.utils.Utils#murmur2`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    let length = data.len();
    let mut h: u32 = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    // Kafka sign-extends nothing here: it masks each tail byte with 0xff.
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which overflows on `i32::MIN`).
pub fn to_positive(x: i32) -> u32 {
    (x & 0x7fff_ffff) as u32
}

/// The partition Kafka's default partitioner picks for `key` among `partitions` (> 0).
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    to_positive(murmur2(key)) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_own_test_vectors() {
        assert_eq!(murmur2(b"21"), -973_932_308);
        assert_eq!(murmur2(b"foobar"), -790_332_482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985_981_536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1_486_304_829);
        assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58_897_971);
        assert_eq!(murmur2(b"abc"), 479_470_107);
    }

    #[test]
    fn given_twelve_partitions_when_keyed_then_lands_where_kafka_puts_it() {
        assert_eq!(partition_for_key(b"21", 12), 0);
        assert_eq!(partition_for_key(b"foobar", 12), 6);
        assert_eq!(partition_for_key(b"abc", 12), 3);
    }

    #[test]
    fn to_positive_clears_only_the_sign_bit() {
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), 0x7fff_ffff);
        assert_eq!(to_positive(5), 5);
    }
}

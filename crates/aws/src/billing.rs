//! What DynamoDB bills for [`DynamoStateStore`](crate::DynamoStateStore)'s requests, in
//! request units, by DynamoDB's sizing rules applied to the adapter's item layout (see
//! [`crate::state`]). The adapter's counters count requests; these functions turn the items a
//! request touched into units, so a meter around the store (the conformance suite's
//! `aws_request_counts`) can price an operation from what it really wrote and read.
//!
//! The rules (on-demand capacity):
//! - an item's size is the sum, over its attributes, of the name's length and the value's
//!   size: a string's UTF-8 bytes, a binary's bytes, a number's significant digits two to a
//!   byte plus one byte;
//! - a write is billed 1 write unit per started KB of the item: a put (an `UpdateItem`) the
//!   larger of the item before and after, a delete the item deleted; a write whose condition
//!   fails is billed as well;
//! - in a `TransactWriteItems` each item is billed twice that, condition checks included;
//! - a strongly consistent read is billed 1 read unit per started 4 KB read: a `GetItem` the
//!   item, a `Query` the summed size of the items it returned; a read that finds nothing is
//!   still one unit.

use sluice_core::ports::state::{Expect, Item, Key, WriteOp};

use crate::state::{shape, Shape};

const WRITE_UNIT: usize = 1024;
const READ_UNIT: usize = 4096;

/// Bytes DynamoDB sizes a number at.
fn number_bytes(n: u64) -> usize {
    let digits = n.to_string();
    let significant = digits.trim_end_matches('0').len().max(1);
    significant.div_ceil(2) + 1
}

/// The size DynamoDB bills for the item the adapter stores at `key` with this value,
/// version and expiry.
pub fn item_bytes(key: &Key, value_len: usize, version: u64, expires_at_ms: Option<i64>) -> usize {
    let mut size = "pk".len() + key.pk.len() + "sk".len() + key.sk.len() + "d".len() + value_len;
    size += "v".len() + number_bytes(version);
    if let Some(ms) = expires_at_ms {
        let ms = ms.max(0) as u64;
        size += "exp_ms".len() + number_bytes(ms) + "expires_at".len() + number_bytes(ms.div_ceil(1000));
    }
    size
}

/// The size of a stored item.
pub fn stored_bytes(item: &Item) -> usize {
    item_bytes(&item.key, item.value.len(), item.version, item.expires_at_ms)
}

/// Read units of a strongly consistent `GetItem` or `Query` that returned items of these
/// sizes in all.
pub fn read_units(bytes: usize) -> u64 {
    bytes.div_ceil(READ_UNIT).max(1) as u64
}

/// Write units of one `write` of these operations, as the adapter sends it; `before` answers
/// the item each key holds now (`None`: absent).
pub fn write_units(ops: &[WriteOp], before: impl Fn(&Key) -> Option<Item>) -> u64 {
    let units = |op: &WriteOp| -> u64 {
        let old = before(op.key());
        let old_bytes = old.as_ref().map_or(0, stored_bytes);
        let bytes = match op {
            WriteOp::Put { key, value, expires_at_ms, expect } => {
                let version = match expect {
                    Expect::Absent => 1,
                    Expect::Version(n) => n + 1,
                    Expect::Any => old.as_ref().map_or(1, |i| i.version + 1),
                };
                old_bytes.max(item_bytes(key, value.len(), version, *expires_at_ms))
            }
            WriteOp::Delete { .. } | WriteOp::Check { .. } => old_bytes,
        };
        bytes.div_ceil(WRITE_UNIT).max(1) as u64
    };
    match shape(ops) {
        Shape::Nothing => 0,
        Shape::One((_, op)) => units(op),
        Shape::Transaction(sent) => sent.iter().map(|(_, op)| 2 * units(op)).sum(),
    }
}

/// Write units of a `delete_many` of these items (one `BatchWriteItem` per 25): each delete
/// is billed the item it deletes.
pub fn batch_delete_units(deleted: impl IntoIterator<Item = Option<Item>>) -> u64 {
    deleted.into_iter().map(|i| i.as_ref().map_or(0, stored_bytes).div_ceil(WRITE_UNIT).max(1) as u64).sum()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn put(sk: &str, len: usize, expect: Expect) -> WriteOp {
        WriteOp::Put { key: Key::new("p", sk), value: Bytes::from(vec![0; len]), expires_at_ms: None, expect }
    }

    #[test]
    fn numbers_are_sized_by_significant_digits() {
        assert_eq!(number_bytes(1), 2);
        assert_eq!(number_bytes(100), 2, "trailing zeroes are trimmed");
        assert_eq!(number_bytes(12_345), 4);
        assert_eq!(number_bytes(1_764_780_000_123), 8);
    }

    #[test]
    fn a_put_is_billed_by_the_larger_item_and_a_transaction_twice_per_item() {
        let key = Key::new("p", "a");
        // pk + "p", sk + "a", d, v + 2: 10 bytes of overhead around the value.
        assert_eq!(item_bytes(&key, 0, 1, None), 10);
        let absent = |_: &Key| None;
        assert_eq!(write_units(&[put("a", 1014, Expect::Absent)], absent), 1);
        assert_eq!(write_units(&[put("a", 1015, Expect::Absent)], absent), 2);
        let big = |_: &Key| {
            Some(Item { key: key.clone(), value: Bytes::from(vec![0; 3000]), version: 1, expires_at_ms: None })
        };
        assert_eq!(write_units(&[put("a", 10, Expect::Version(1))], big), 3, "an update bills the item before");
        let ops = [put("a", 10, Expect::Absent), WriteOp::Check { key: Key::new("p", "b"), expect: Expect::Absent }];
        assert_eq!(write_units(&ops, absent), 4, "two items, twice each");
        let unsent = [put("a", 10, Expect::Absent), WriteOp::Check { key: Key::new("p", "b"), expect: Expect::Any }];
        assert_eq!(write_units(&unsent, absent), 1, "a check of nothing is not sent: one UpdateItem");
        assert_eq!(read_units(0), 1);
        assert_eq!(read_units(4097), 2);
    }
}

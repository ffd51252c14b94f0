//! DynamoDB's transaction-conflict rule, as the fault layer applies it (issue 45 §4;
//! docs/RELIABILITY.md, "Deterministic simulation"). While a `TransactWriteItems` is in
//! flight it holds every item it names (a `ConditionCheck` included: the conservative
//! reading, as `infra/moto_realism.py` takes it). Another transaction naming a held item is
//! cancelled at once (`TransactionConflict`), and a single-item write or delete of a held
//! item is refused (`TransactionConflictException`); `sluice-aws` answers both
//! `StorageError::Throttled`, nothing written. Reads never conflict: Sluice sends no
//! `TransactGetItems`. `delete_many` (`BatchWriteItem`) is left out, as the moto layer leaves
//! it: DynamoDB documents no conflict of it with a transaction in flight.
//!
//! The simulation's stores are in memory, not DynamoDB, but the rule only ever answers
//! `Throttled` before anything applied, which the port allows any store to do, so it applies
//! on every seed whenever faults are on.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use sluice_core::ports::state::{Expect, Key, WriteOp};

/// What a write is on DynamoDB (`sluice-aws`'s `shape`): a `Check` with no condition is not
/// sent; one put or delete alone is a single-item request; anything else is a transaction.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Nothing is sent.
    Nothing,
    /// One `UpdateItem` or `DeleteItem`.
    Single(Key),
    /// One `TransactWriteItems` naming these items.
    Transaction(Vec<Key>),
}

impl Shape {
    pub(crate) fn of(ops: &[WriteOp]) -> Self {
        let sent: Vec<&WriteOp> =
            ops.iter().filter(|op| !matches!(op, WriteOp::Check { expect: Expect::Any, .. })).collect();
        match sent.as_slice() {
            [] => Shape::Nothing,
            [one @ (WriteOp::Put { .. } | WriteOp::Delete { .. })] => Shape::Single(one.key().clone()),
            _ => Shape::Transaction(sent.into_iter().map(|op| op.key().clone()).collect()),
        }
    }
}

/// The items held by the transactions in flight, shared by every process of a simulation.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    held: Mutex<BTreeSet<Key>>,
}

impl Holds {
    /// Whether a transaction in flight holds `key`.
    pub(crate) fn held(&self, key: &Key) -> bool {
        self.held.lock().unwrap().contains(key)
    }

    /// A transaction arriving: it holds all of `keys` until the [`Hold`] is dropped, or, if
    /// one of them is held already, it is cancelled (that key is answered) and holds nothing.
    pub(crate) fn take(self: &Arc<Self>, keys: &[Key]) -> Result<Hold, Key> {
        let mut held = self.held.lock().unwrap();
        if let Some(key) = keys.iter().find(|k| held.contains(*k)) {
            return Err(key.clone());
        }
        held.extend(keys.iter().cloned());
        Ok(Hold { holds: self.clone(), keys: keys.to_vec() })
    }
}

/// A transaction's items, held until it ends: dropped when its write answers, or when its
/// task is aborted by a crash (DynamoDB finishes a transaction its client stopped waiting for).
#[derive(Debug)]
pub(crate) struct Hold {
    holds: Arc<Holds>,
    keys: Vec<Key>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = self.holds.held.lock().unwrap_or_else(|p| p.into_inner());
        for key in &self.keys {
            held.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn key(sk: &str) -> Key {
        Key::new("p", sk)
    }

    fn check(sk: &str, expect: Expect) -> WriteOp {
        WriteOp::Check { key: key(sk), expect }
    }

    #[test]
    fn a_write_is_shaped_as_the_aws_adapter_sends_it() {
        let put = |sk: &str| WriteOp::create(key(sk), Bytes::from_static(b"x"));
        let del = |sk: &str| WriteOp::Delete { key: key(sk), expect: Expect::Any };
        let cases: Vec<(Vec<WriteOp>, Shape)> = vec![
            (vec![], Shape::Nothing),
            (vec![check("a", Expect::Any)], Shape::Nothing),
            (vec![put("a")], Shape::Single(key("a"))),
            (vec![del("a"), check("b", Expect::Any)], Shape::Single(key("a"))),
            (vec![check("a", Expect::Version(3))], Shape::Transaction(vec![key("a")])),
            (vec![put("a"), del("b")], Shape::Transaction(vec![key("a"), key("b")])),
            (vec![put("a"), check("b", Expect::Absent)], Shape::Transaction(vec![key("a"), key("b")])),
        ];
        for (ops, want) in cases {
            assert_eq!(Shape::of(&ops), want, "{ops:?}");
        }
    }

    #[test]
    fn a_held_item_refuses_others_until_its_transaction_ends() {
        let holds = Arc::new(Holds::default());
        let first = holds.take(&[key("a"), key("b")]).expect("nothing held yet");
        assert_eq!(holds.take(&[key("c"), key("b")]).unwrap_err(), key("b"));
        assert!(holds.held(&key("a")));
        assert!(!holds.held(&key("c")), "a cancelled transaction holds nothing");
        drop(first);
        assert!(!holds.held(&key("a")) && !holds.held(&key("b")));
        assert!(holds.take(&[key("b")]).is_ok());
    }
}

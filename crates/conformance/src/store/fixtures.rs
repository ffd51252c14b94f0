//! Helpers the state store cases share: keys, values, puts, pages and walks.

use std::sync::Arc;

use bytes::Bytes;
use sluice_core::ports::state::{Expect, Item, Key, Page, Query, StateStore, WriteOp, MAX_WRITE_OPS};
use sluice_core::{Clock, ManualClock, StorageError, SystemClock};

pub(super) fn key(pk: &str, sk: &str) -> Key {
    Key::new(pk, sk)
}

pub(super) fn bytes(v: &str) -> Bytes {
    Bytes::copy_from_slice(v.as_bytes())
}

pub(super) fn put(key: &Key, value: &str, expect: Expect) -> WriteOp {
    WriteOp::Put { key: key.clone(), value: bytes(value), expires_at_ms: None, expect }
}

pub(super) fn put_expiring(key: &Key, value: &str, expires_at_ms: i64, expect: Expect) -> WriteOp {
    WriteOp::Put { key: key.clone(), value: bytes(value), expires_at_ms: Some(expires_at_ms), expect }
}

/// Sort key `i`, zero-padded so string order is numeric order.
pub(super) fn sk(i: usize) -> String {
    format!("{i:04}")
}

pub(super) async fn get(store: &dyn StateStore, key: &Key) -> Option<Item> {
    store.get(key).await.expect("get")
}

/// (value, version) of the item at `key`, if any.
pub(super) async fn value_version(store: &dyn StateStore, key: &Key) -> Option<(Bytes, u64)> {
    get(store, key).await.map(|i| (i.value, i.version))
}

/// Items `0..n` of collection `pk` (value = the sort key), created in writes of at most [`MAX_WRITE_OPS`].
pub(super) async fn fill(store: &dyn StateStore, pk: &str, n: usize) {
    let ops: Vec<WriteOp> = (0..n).map(|i| put(&key(pk, &sk(i)), &sk(i), Expect::Absent)).collect();
    for chunk in ops.chunks(MAX_WRITE_OPS) {
        store.write(chunk.to_vec()).await.expect("fill");
    }
}

/// The sort keys of one page.
pub(super) fn sks(page: &Page) -> Vec<String> {
    page.items.iter().map(|i| i.key.sk.clone()).collect()
}

/// Every sort key `query` reaches, page by page, following [`Page::next`].
pub(super) async fn walk(store: &dyn StateStore, mut query: Query) -> Vec<String> {
    let mut found = Vec::new();
    for _ in 0..1_000 {
        let page = store.query(&query).await.expect("query");
        assert!(page.items.len() <= query.limit, "a page holds at most `limit` items");
        found.extend(sks(&page));
        match page.next {
            Some(next) => query.after = Some(next),
            None => return found,
        }
    }
    panic!("the walk did not end: {found:?}");
}

pub(super) fn query(pk: &str, from: Option<usize>, to: Option<usize>, forward: bool, limit: usize) -> Query {
    Query { pk: pk.to_owned(), from: from.map(sk), to: to.map(sk), forward, limit, after: None }
}

pub(super) fn expect_condition_failed(result: Result<(), StorageError>, op: usize) {
    match result {
        Err(StorageError::ConditionFailed { op: first, failed }) => {
            assert_eq!(first, op, "the first failing op");
            assert_eq!(failed.first(), Some(&op), "every failing op, the first first: {failed:?}");
        }
        other => panic!("expected ConditionFailed {{ op: {op} }}, got {other:?}"),
    }
}

/// A write whose operations `failed` (in order) failed their conditions, each named.
pub(super) fn expect_conditions_failed(result: Result<(), StorageError>, failed: &[usize]) {
    match result {
        Err(StorageError::ConditionFailed { op, failed: named }) => {
            assert_eq!((op, named.as_slice()), (failed[0], failed), "the first failed op, and every one")
        }
        other => panic!("expected ConditionFailed {{ failed: {failed:?} }}, got {other:?}"),
    }
}

pub(super) fn expect_invalid(result: Result<(), StorageError>) {
    assert!(matches!(result, Err(StorageError::Invalid(_))), "expected Invalid, got {result:?}");
}

/// A manual clock at the system's time (so no emulator's TTL takes the items early).
pub(super) fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(SystemClock.now_ms()))
}

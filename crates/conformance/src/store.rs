//! The [`StateStore`] port's conformance cases, written once: a backend's test
//! file invokes [`store_conformance_suite!`](crate::store_conformance_suite),
//! which makes one `#[tokio::test]` of each case.
//!
//! Every case works in collections (`pk`s) of its own, so cases can share a
//! table or a data directory and run in parallel.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_core::ports::state::{Expect, Item, Key, Page, Query, StateStore, WriteOp, MAX_WRITE_OPS};
use sluice_core::{Clock, ManualClock, StorageError, SystemClock};

use crate::{unique_topic, Backend};

/// What a backend's [`StateStore::purge_expired`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purge {
    /// Deletes expired items and counts them (SQLite).
    Deletes,
    /// Answers 0: the store removes expired items by itself (DynamoDB's TTL).
    LeavesToStore,
}

/// Generates one `#[tokio::test]` per state-store case. `$backend` is an async
/// expression yielding a [`Backend`]; `$purge` is the backend's [`Purge`].
#[macro_export]
macro_rules! store_conformance_suite {
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::store::$case(&backend).await;
            }
        )+
    };
    ($backend:expr, $purge:expr) => {
        $crate::store_conformance_suite!(@cases $backend;
            given_put_then_get_round_trips_value_and_expiry_and_versions_count_1_2_3,
            given_existing_item_when_put_absent_then_condition_failed_and_value_kept,
            given_version_mismatch_when_put_then_condition_failed_and_nothing_written,
            given_op_2_fails_when_write_then_condition_failed_on_op_2_and_ops_0_and_1_not_applied,
            given_check_op_when_write_then_its_condition_decides_and_it_changes_nothing,
            given_deferred_writes_among_writes_then_each_applies_as_a_write_does,
            given_delete_when_write_then_item_removed_only_if_its_condition_holds,
            given_two_ops_on_one_key_when_write_then_invalid_and_nothing_written,
            given_101_ops_when_write_then_invalid_and_nothing_written,
            given_100_ops_when_write_then_all_applied,
            given_bounds_when_query_then_inclusive_range_in_either_direction,
            given_limit_when_paging_with_next_then_collection_walked_exactly_once_in_order,
            given_expiry_passed_then_item_invisible_and_absent_put_recreates_it_at_version_1,
            given_expired_items_among_live_ones_when_paging_then_only_live_items_and_walk_completes,
            given_60_keys_when_delete_many_then_all_gone_and_other_items_kept,
        );
        #[tokio::test]
        async fn given_expired_items_when_purge_expired_then_they_stay_invisible_and_live_items_stay() {
            let backend = $backend.await;
            $crate::store::given_expired_items_when_purge_expired_then_they_stay_invisible_and_live_items_stay(
                &backend, $purge,
            )
            .await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn given_8_handles_incrementing_one_counter_under_version_conditions_then_no_update_lost() {
            let backend = $backend.await;
            $crate::store::given_8_handles_incrementing_one_counter_under_version_conditions_then_no_update_lost(
                &backend,
            )
            .await;
        }
    };
}

fn key(pk: &str, sk: &str) -> Key {
    Key::new(pk, sk)
}

fn bytes(v: &str) -> Bytes {
    Bytes::copy_from_slice(v.as_bytes())
}

fn put(key: &Key, value: &str, expect: Expect) -> WriteOp {
    WriteOp::Put { key: key.clone(), value: bytes(value), expires_at_ms: None, expect }
}

fn put_expiring(key: &Key, value: &str, expires_at_ms: i64, expect: Expect) -> WriteOp {
    WriteOp::Put { key: key.clone(), value: bytes(value), expires_at_ms: Some(expires_at_ms), expect }
}

/// Sort key `i`, zero-padded so string order is numeric order.
fn sk(i: usize) -> String {
    format!("{i:04}")
}

async fn get(store: &dyn StateStore, key: &Key) -> Option<Item> {
    store.get(key).await.expect("get")
}

/// (value, version) of the item at `key`, if any.
async fn value_version(store: &dyn StateStore, key: &Key) -> Option<(Bytes, u64)> {
    get(store, key).await.map(|i| (i.value, i.version))
}

/// Items `0..n` of collection `pk` (value = the sort key), created in writes of at most [`MAX_WRITE_OPS`].
async fn fill(store: &dyn StateStore, pk: &str, n: usize) {
    let ops: Vec<WriteOp> = (0..n).map(|i| put(&key(pk, &sk(i)), &sk(i), Expect::Absent)).collect();
    for chunk in ops.chunks(MAX_WRITE_OPS) {
        store.write(chunk.to_vec()).await.expect("fill");
    }
}

/// The sort keys of one page.
fn sks(page: &Page) -> Vec<String> {
    page.items.iter().map(|i| i.key.sk.clone()).collect()
}

/// Every sort key `query` reaches, page by page, following [`Page::next`].
async fn walk(store: &dyn StateStore, mut query: Query) -> Vec<String> {
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

fn query(pk: &str, from: Option<usize>, to: Option<usize>, forward: bool, limit: usize) -> Query {
    Query { pk: pk.to_owned(), from: from.map(sk), to: to.map(sk), forward, limit, after: None }
}

fn expect_condition_failed(result: Result<(), StorageError>, op: usize) {
    match result {
        Err(StorageError::ConditionFailed { op: failed }) => assert_eq!(failed, op, "the first failing op"),
        other => panic!("expected ConditionFailed {{ op: {op} }}, got {other:?}"),
    }
}

fn expect_invalid(result: Result<(), StorageError>) {
    assert!(matches!(result, Err(StorageError::Invalid(_))), "expected Invalid, got {result:?}");
}

/// A manual clock at the system's time (so no emulator's TTL takes the items early).
fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(SystemClock.now_ms()))
}

pub async fn given_put_then_get_round_trips_value_and_expiry_and_versions_count_1_2_3(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("roundtrip");
    let k = key(&pk, "item");
    assert_eq!(get(store, &k).await, None, "nothing there yet");

    store.write(vec![put(&k, "one", Expect::Absent)]).await.expect("create");
    let item = get(store, &k).await.expect("created");
    assert_eq!(item, Item { key: k.clone(), value: bytes("one"), version: 1, expires_at_ms: None });

    store.write(vec![put(&k, "two", Expect::Version(1))]).await.expect("replace at version 1");
    assert_eq!(value_version(store, &k).await, Some((bytes("two"), 2)));

    let far = SystemClock.now_ms() + 86_400_000;
    store.write(vec![put_expiring(&k, "three", far, Expect::Any)]).await.expect("unconditional put");
    let item = get(store, &k).await.expect("still there");
    assert_eq!((item.value, item.version, item.expires_at_ms), (bytes("three"), 3, Some(far)));

    // Any on an absent item starts at version 1; binary and empty values survive.
    let binary = key(&pk, "binary");
    let value = Bytes::from(vec![0u8, 1, 2, 255, 0]);
    let write = WriteOp::Put { key: binary.clone(), value: value.clone(), expires_at_ms: None, expect: Expect::Any };
    store.write(vec![write]).await.expect("put binary");
    assert_eq!(value_version(store, &binary).await, Some((value, 1)));
    let empty = key(&pk, "empty");
    store.write(vec![WriteOp::create(empty.clone(), Bytes::new())]).await.expect("put empty");
    assert_eq!(value_version(store, &empty).await, Some((Bytes::new(), 1)));

    // A second handle, as another process, reads the same.
    let (other, _) = backend.open().await;
    assert_eq!(value_version(other.as_ref(), &k).await, Some((bytes("three"), 3)));
}

pub async fn given_existing_item_when_put_absent_then_condition_failed_and_value_kept(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let k = key(&unique_topic("absent"), "item");
    store.write(vec![WriteOp::create(k.clone(), bytes("first"))]).await.expect("create");
    expect_condition_failed(store.write(vec![WriteOp::create(k.clone(), bytes("second"))]).await, 0);
    assert_eq!(value_version(store, &k).await, Some((bytes("first"), 1)));
}

pub async fn given_version_mismatch_when_put_then_condition_failed_and_nothing_written(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("mismatch");
    let k = key(&pk, "item");
    store.write(vec![WriteOp::create(k.clone(), bytes("v1"))]).await.expect("create");
    store.write(vec![put(&k, "v2", Expect::Version(1))]).await.expect("replace");
    // Stale (1), future (3) and zero versions all fail.
    for stale in [1, 3, 0] {
        expect_condition_failed(store.write(vec![put(&k, "lost", Expect::Version(stale))]).await, 0);
    }
    assert_eq!(value_version(store, &k).await, Some((bytes("v2"), 2)));
    // A version condition never holds for an absent item.
    let missing = key(&pk, "missing");
    expect_condition_failed(store.write(vec![put(&missing, "x", Expect::Version(1))]).await, 0);
    assert_eq!(get(store, &missing).await, None);
}

pub async fn given_op_2_fails_when_write_then_condition_failed_on_op_2_and_ops_0_and_1_not_applied(
    backend: &dyn Backend,
) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("atomic");
    let (a, b, c, d) = (key(&pk, "a"), key(&pk, "b"), key(&pk, "c"), key(&pk, "d"));
    store
        .write(vec![
            WriteOp::create(b.clone(), bytes("b1")),
            WriteOp::create(c.clone(), bytes("c1")),
            WriteOp::create(d.clone(), bytes("d1")),
        ])
        .await
        .expect("setup");

    // Op 0 creates, op 1 replaces, op 2's item exists, op 3 deletes: all or nothing.
    let ops = vec![
        WriteOp::create(a.clone(), bytes("a1")),
        put(&b, "b2", Expect::Version(1)),
        WriteOp::create(c.clone(), bytes("c2")),
        WriteOp::Delete { key: d.clone(), expect: Expect::Version(1) },
    ];
    expect_condition_failed(store.write(ops).await, 2);
    assert_eq!(get(store, &a).await, None, "op 0 not applied");
    assert_eq!(value_version(store, &b).await, Some((bytes("b1"), 1)), "op 1 not applied");
    assert_eq!(value_version(store, &c).await, Some((bytes("c1"), 1)));
    assert_eq!(value_version(store, &d).await, Some((bytes("d1"), 1)), "op 3 not applied");

    // The first failing op is reported when several fail.
    let ops = vec![
        WriteOp::create(a.clone(), bytes("a1")),
        put(&b, "b2", Expect::Version(7)),
        WriteOp::create(c.clone(), bytes("c2")),
    ];
    expect_condition_failed(store.write(ops).await, 1);

    // The same write with every condition holding applies every op.
    let ops = vec![
        WriteOp::create(a.clone(), bytes("a1")),
        put(&b, "b2", Expect::Version(1)),
        put(&c, "c2", Expect::Version(1)),
        WriteOp::Delete { key: d.clone(), expect: Expect::Version(1) },
    ];
    store.write(ops).await.expect("every condition holds");
    assert_eq!(value_version(store, &a).await, Some((bytes("a1"), 1)));
    assert_eq!(value_version(store, &b).await, Some((bytes("b2"), 2)));
    assert_eq!(value_version(store, &c).await, Some((bytes("c2"), 2)));
    assert_eq!(get(store, &d).await, None);
}

/// `write_deferred` differs from `write` only in when it is durable against a power cut:
/// its conditions, atomicity and answers are the same, also when deferred and durable
/// writes are in flight together (SQLite commits them in one group).
pub async fn given_deferred_writes_among_writes_then_each_applies_as_a_write_does(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("deferred");
    let (a, b) = (key(&pk, "a"), key(&pk, "b"));
    store.write_deferred(vec![WriteOp::create(a.clone(), bytes("a1"))]).await.expect("a deferred create");
    let refused = store.write_deferred(vec![put(&a, "a2", Expect::Version(1)), put(&b, "b1", Expect::Version(3))]);
    expect_condition_failed(refused.await, 1);
    assert_eq!(value_version(store, &a).await, Some((bytes("a1"), 1)), "nothing of a refused write applied");
    assert_eq!(get(store, &b).await, None);

    // Twenty writes at once, every other one deferred, each creating its own item and
    // bumping a shared one under a version it cannot know: one bump per version wins.
    let writes = (0..20).map(|i| {
        let ops =
            vec![WriteOp::create(key(&pk, &format!("w{i:02}")), bytes("w")), put(&a, "bumped", Expect::Version(1))];
        async move {
            if i % 2 == 0 {
                store.write_deferred(ops).await
            } else {
                store.write(ops).await
            }
        }
    });
    let outcomes = futures_util::future::join_all(writes).await;
    let won = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(won, 1, "one write of version 1's bump lands: {outcomes:?}");
    for (i, outcome) in outcomes.iter().enumerate() {
        let created = get(store, &key(&pk, &format!("w{i:02}"))).await.is_some();
        assert_eq!(created, outcome.is_ok(), "write {i} applied whole or not at all: {outcome:?}");
        if let Err(e) = outcome {
            assert!(matches!(e, StorageError::ConditionFailed { op: 1 }), "write {i}: {e:?}");
        }
    }
    assert_eq!(value_version(store, &a).await, Some((bytes("bumped"), 2)));
}

pub async fn given_check_op_when_write_then_its_condition_decides_and_it_changes_nothing(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("check");
    let (guard, target, missing) = (key(&pk, "guard"), key(&pk, "target"), key(&pk, "missing"));
    store.write(vec![WriteOp::create(guard.clone(), bytes("g"))]).await.expect("create guard");

    // A failing check stops the put beside it.
    let ops = vec![
        WriteOp::create(target.clone(), bytes("t")),
        WriteOp::Check { key: guard.clone(), expect: Expect::Version(2) },
    ];
    expect_condition_failed(store.write(ops).await, 1);
    assert_eq!(get(store, &target).await, None);
    let ops = vec![
        WriteOp::Check { key: guard.clone(), expect: Expect::Absent },
        WriteOp::create(target.clone(), bytes("t")),
    ];
    expect_condition_failed(store.write(ops).await, 0);
    assert_eq!(get(store, &target).await, None);

    // Holding checks (on a present and an absent item) let it through, and change nothing.
    let ops = vec![
        WriteOp::Check { key: guard.clone(), expect: Expect::Version(1) },
        WriteOp::Check { key: missing.clone(), expect: Expect::Absent },
        WriteOp::create(target.clone(), bytes("t")),
    ];
    store.write(ops).await.expect("checks hold");
    assert_eq!(value_version(store, &guard).await, Some((bytes("g"), 1)), "a check leaves the version");
    assert_eq!(get(store, &missing).await, None, "a check creates nothing");
    assert_eq!(value_version(store, &target).await, Some((bytes("t"), 1)));

    // An unconditional check counts as an op: the index of a later failing op is unchanged.
    let ops =
        vec![WriteOp::Check { key: guard.clone(), expect: Expect::Any }, WriteOp::create(target.clone(), bytes("t2"))];
    expect_condition_failed(store.write(ops).await, 1);
    // A lone check, holding or not.
    store.write(vec![WriteOp::Check { key: guard.clone(), expect: Expect::Version(1) }]).await.expect("lone check");
    expect_condition_failed(store.write(vec![WriteOp::Check { key: missing, expect: Expect::Version(1) }]).await, 0);
    store.write(vec![WriteOp::Check { key: guard, expect: Expect::Any }]).await.expect("unconditional check");
}

pub async fn given_delete_when_write_then_item_removed_only_if_its_condition_holds(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("delete");
    let (k, missing) = (key(&pk, "item"), key(&pk, "missing"));
    store.write(vec![WriteOp::create(k.clone(), bytes("x"))]).await.expect("create");
    store.write(vec![put(&k, "y", Expect::Version(1))]).await.expect("replace");

    expect_condition_failed(store.write(vec![WriteOp::Delete { key: k.clone(), expect: Expect::Version(1) }]).await, 0);
    expect_condition_failed(store.write(vec![WriteOp::Delete { key: k.clone(), expect: Expect::Absent }]).await, 0);
    assert_eq!(value_version(store, &k).await, Some((bytes("y"), 2)), "still there");
    store.write(vec![WriteOp::Delete { key: k.clone(), expect: Expect::Version(2) }]).await.expect("delete at version");
    assert_eq!(get(store, &k).await, None);

    // Nothing to delete: fine unconditionally or expecting absence, not expecting a version.
    store.write(vec![WriteOp::Delete { key: missing.clone(), expect: Expect::Any }]).await.expect("delete nothing");
    store.write(vec![WriteOp::Delete { key: missing.clone(), expect: Expect::Absent }]).await.expect("absent holds");
    expect_condition_failed(store.write(vec![WriteOp::Delete { key: missing, expect: Expect::Version(1) }]).await, 0);

    // Recreated after a delete: versions start again at 1.
    store.write(vec![WriteOp::create(k.clone(), bytes("z"))]).await.expect("recreate");
    assert_eq!(value_version(store, &k).await, Some((bytes("z"), 1)));
    store.write(vec![WriteOp::Delete { key: k.clone(), expect: Expect::Any }]).await.expect("unconditional delete");
    assert_eq!(get(store, &k).await, None);
}

pub async fn given_two_ops_on_one_key_when_write_then_invalid_and_nothing_written(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("twice");
    let (k, other) = (key(&pk, "item"), key(&pk, "other"));
    let ops = vec![
        WriteOp::create(other.clone(), bytes("o")),
        WriteOp::create(k.clone(), bytes("a")),
        WriteOp::Check { key: k.clone(), expect: Expect::Any },
    ];
    expect_invalid(store.write(ops).await);
    let ops = vec![WriteOp::create(k.clone(), bytes("a")), WriteOp::Delete { key: k.clone(), expect: Expect::Any }];
    expect_invalid(store.write(ops).await);
    assert_eq!(get(store, &k).await, None);
    assert_eq!(get(store, &other).await, None);
}

pub async fn given_101_ops_when_write_then_invalid_and_nothing_written(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("toomany");
    let ops: Vec<WriteOp> = (0..=MAX_WRITE_OPS).map(|i| WriteOp::create(key(&pk, &sk(i)), bytes("x"))).collect();
    assert_eq!(ops.len(), 101);
    expect_invalid(store.write(ops).await);
    assert_eq!(store.query(&Query::all(&pk, 10)).await.expect("query"), Page::default());
}

pub async fn given_100_ops_when_write_then_all_applied(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("hundred");
    store.write(Vec::new()).await.expect("an empty write is fine");
    let ops: Vec<WriteOp> = (0..MAX_WRITE_OPS).map(|i| WriteOp::create(key(&pk, &sk(i)), bytes(&sk(i)))).collect();
    store.write(ops).await.expect("100 ops");
    let all = walk(store, Query::all(&pk, 1_000)).await;
    assert_eq!(all, (0..MAX_WRITE_OPS).map(sk).collect::<Vec<_>>());
    // And 100 conditional replaces of them, at once.
    let ops: Vec<WriteOp> = (0..MAX_WRITE_OPS).map(|i| put(&key(&pk, &sk(i)), "again", Expect::Version(1))).collect();
    store.write(ops).await.expect("100 replaces");
    let page = store.query(&Query::all(&pk, MAX_WRITE_OPS)).await.expect("query");
    assert_eq!(page.items.len(), MAX_WRITE_OPS);
    assert!(page.items.iter().all(|i| i.version == 2 && i.value == bytes("again")));
}

pub async fn given_bounds_when_query_then_inclusive_range_in_either_direction(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("bounds");
    fill(store, &pk, 10).await;
    // Neighbouring collections (a prefix, an extension) are never mixed in.
    for neighbour in [format!("{pk}-x"), format!("{pk}0"), pk[..pk.len() - 1].to_owned()] {
        fill(store, &neighbour, 3).await;
    }
    let range = |r: std::ops::RangeInclusive<usize>| r.map(sk).collect::<Vec<_>>();
    let rev = |r: std::ops::RangeInclusive<usize>| r.rev().map(sk).collect::<Vec<_>>();
    let page = |q: Query| async move { store.query(&q).await.expect("query") };

    let all = page(query(&pk, None, None, true, 100)).await;
    assert_eq!((sks(&all), all.next), (range(0..=9), None));
    let item = &all.items[3];
    assert_eq!((item.key.pk.as_str(), item.value.clone(), item.version), (pk.as_str(), bytes(&sk(3)), 1));
    assert_eq!(sks(&page(query(&pk, None, None, false, 100)).await), rev(0..=9));
    assert_eq!(sks(&page(query(&pk, Some(3), Some(6), true, 100)).await), range(3..=6));
    assert_eq!(sks(&page(query(&pk, Some(3), Some(6), false, 100)).await), rev(3..=6));
    assert_eq!(sks(&page(query(&pk, Some(7), None, true, 100)).await), range(7..=9));
    assert_eq!(sks(&page(query(&pk, Some(7), None, false, 100)).await), rev(7..=9));
    assert_eq!(sks(&page(query(&pk, None, Some(2), true, 100)).await), range(0..=2));
    assert_eq!(sks(&page(query(&pk, None, Some(2), false, 100)).await), rev(0..=2));
    assert_eq!(sks(&page(query(&pk, Some(4), Some(4), true, 100)).await), range(4..=4));
    // Bounds between keys, and outside them.
    let between = Query { from: Some("0002x".into()), to: Some("0005x".into()), ..Query::all(&pk, 100) };
    assert_eq!(sks(&page(between).await), range(3..=5));
    assert_eq!(page(query(&pk, Some(6), Some(3), true, 100)).await, Page::default(), "from > to: empty");
    assert_eq!(page(query(&pk, Some(20), None, true, 100)).await, Page::default());
    assert_eq!(page(Query::all(unique_topic("empty"), 10)).await, Page::default());

    // The first `limit` items in the query's direction, and where to go on.
    let first = page(query(&pk, Some(2), Some(8), true, 3)).await;
    assert_eq!(sks(&first), range(2..=4));
    assert!(first.next.is_some(), "more to read");
    let last = page(query(&pk, Some(2), Some(8), false, 3)).await;
    assert_eq!(sks(&last), rev(6..=8));
    assert!(last.next.is_some(), "more to read");

    // Sort keys compare as byte strings: upper case before lower, ASCII before the rest.
    let bytewise = unique_topic("bytes");
    let keys = ["b", "a", "é", "B", "ab", "~", "A"];
    store.write(keys.iter().map(|sk| WriteOp::create(key(&bytewise, sk), bytes(sk))).collect()).await.expect("fill");
    assert_eq!(sks(&page(Query::all(&bytewise, 100)).await), ["A", "B", "a", "ab", "b", "~", "é"]);
}

pub async fn given_limit_when_paging_with_next_then_collection_walked_exactly_once_in_order(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("paging");
    fill(store, &pk, 25).await;
    fill(store, &format!("{pk}-other"), 5).await;
    let forward: Vec<String> = (0..25).map(sk).collect();
    let backward: Vec<String> = forward.iter().rev().cloned().collect();
    for limit in [1, 7, 25, 100] {
        assert_eq!(walk(store, query(&pk, None, None, true, limit)).await, forward, "forward by {limit}");
        assert_eq!(walk(store, query(&pk, None, None, false, limit)).await, backward, "backward by {limit}");
    }
    // Within bounds: the walk stays inside them.
    assert_eq!(walk(store, query(&pk, Some(5), Some(17), true, 4)).await, forward[5..=17]);
    assert_eq!(walk(store, query(&pk, Some(5), Some(17), false, 4)).await, backward[7..=19]);
    // `after` alone: strictly after it, in the query's direction.
    let after = |forward, after: usize| Query { forward, after: Some(sk(after)), ..Query::all(&pk, 100) };
    assert_eq!(walk(store, after(true, 20)).await, forward[21..]);
    assert_eq!(walk(store, after(false, 3)).await, backward[22..]);
    assert_eq!(walk(store, after(true, 24)).await, Vec::<String>::new());
    // `after` outside the bounds: nothing skipped, or nothing left.
    let bounded =
        |forward, after: usize| Query { after: Some(sk(after)), ..query(&pk, Some(5), Some(17), forward, 100) };
    assert_eq!(walk(store, bounded(true, 2)).await, forward[5..=17]);
    assert_eq!(walk(store, bounded(false, 20)).await, backward[7..=19]);
    assert_eq!(walk(store, bounded(true, 17)).await, Vec::<String>::new());
    assert_eq!(walk(store, bounded(false, 5)).await, Vec::<String>::new());
}

pub async fn given_expiry_passed_then_item_invisible_and_absent_put_recreates_it_at_version_1(backend: &dyn Backend) {
    let clock = manual_clock();
    let (store, _) = backend.open_with(clock.clone()).await;
    let store = store.as_ref();
    let pk = unique_topic("expiry");
    let (k, lasting) = (key(&pk, "item"), key(&pk, "lasting"));
    let expires = clock.now_ms() + 1_000;
    store.write(vec![put_expiring(&k, "v1", expires, Expect::Absent)]).await.expect("create");
    store.write(vec![put_expiring(&k, "v2", expires, Expect::Version(1))]).await.expect("replace");
    store.write(vec![WriteOp::create(lasting.clone(), bytes("l"))]).await.expect("create lasting");

    clock.advance(999);
    let item = get(store, &k).await.expect("visible until its expiry");
    assert_eq!((item.value, item.version, item.expires_at_ms), (bytes("v2"), 2, Some(expires)));
    assert_eq!(sks(&store.query(&Query::all(&pk, 10)).await.expect("query")), ["item", "lasting"]);
    expect_condition_failed(store.write(vec![WriteOp::create(k.clone(), bytes("early"))]).await, 0);

    clock.advance(1);
    assert_eq!(get(store, &k).await, None, "expired at its expiry time");
    assert_eq!(sks(&store.query(&Query::all(&pk, 10)).await.expect("query")), ["lasting"]);
    // An expired item is absent to every condition.
    expect_condition_failed(store.write(vec![put(&k, "stale", Expect::Version(2))]).await, 0);
    expect_condition_failed(store.write(vec![WriteOp::Delete { key: k.clone(), expect: Expect::Version(2) }]).await, 0);
    let ops = vec![WriteOp::Check { key: k.clone(), expect: Expect::Absent }, put(&lasting, "l2", Expect::Version(1))];
    store.write(ops).await.expect("absent holds for an expired item");
    store.write(vec![WriteOp::create(k.clone(), bytes("again"))]).await.expect("recreate");
    assert_eq!(
        get(store, &k).await,
        Some(Item { key: k.clone(), value: bytes("again"), version: 1, expires_at_ms: None })
    );

    // A put without expiry clears it; one with an expiry sets it.
    clock.advance(1_000_000);
    assert_eq!(value_version(store, &k).await, Some((bytes("again"), 1)), "no expiry: never expires");
    let soon = clock.now_ms() + 10;
    store.write(vec![put_expiring(&k, "brief", soon, Expect::Version(1))]).await.expect("set expiry");
    store.write(vec![put(&k, "kept", Expect::Version(2))]).await.expect("clear expiry");
    clock.advance(20);
    assert_eq!(get(store, &k).await, Some(Item { key: k, value: bytes("kept"), version: 3, expires_at_ms: None }));

    // A handle on another clock judges by its own: the item is there, not expired, for it.
    let (system, _) = backend.open().await;
    let fresh = key(&pk, "fresh");
    store.write(vec![put_expiring(&fresh, "f", SystemClock.now_ms() + 60_000, Expect::Absent)]).await.expect("put");
    clock.advance(120_000);
    assert_eq!(get(store, &fresh).await, None, "expired for the manual clock");
    assert!(get(system.as_ref(), &fresh).await.is_some(), "live for the system clock");
}

pub async fn given_expired_items_among_live_ones_when_paging_then_only_live_items_and_walk_completes(
    backend: &dyn Backend,
) {
    let clock = manual_clock();
    let (store, _) = backend.open_with(clock.clone()).await;
    let store = store.as_ref();
    let pk = unique_topic("expiredpages");
    let expires = clock.now_ms() + 1_000;
    // Items 0..30; every one but each third expires, in runs longer than a page.
    let ops: Vec<WriteOp> = (0..30)
        .map(|i| {
            let k = key(&pk, &sk(i));
            if i % 3 == 0 {
                put(&k, "live", Expect::Absent)
            } else {
                put_expiring(&k, "brief", expires, Expect::Absent)
            }
        })
        .collect();
    store.write(ops).await.expect("fill");
    assert_eq!(walk(store, Query::all(&pk, 4)).await.len(), 30, "all live before the expiry");
    clock.advance(1_000);
    let live: Vec<String> = (0..30).step_by(3).map(sk).collect();
    for limit in [1, 2, 4, 100] {
        assert_eq!(walk(store, Query::all(&pk, limit)).await, live, "forward by {limit}");
        let backward = Query { forward: false, ..Query::all(&pk, limit) };
        assert_eq!(walk(store, backward).await, live.iter().rev().cloned().collect::<Vec<_>>(), "backward by {limit}");
    }
}

pub async fn given_expired_items_when_purge_expired_then_they_stay_invisible_and_live_items_stay(
    backend: &dyn Backend,
    purge: Purge,
) {
    let clock = manual_clock();
    let (store, _) = backend.open_with(clock.clone()).await;
    let store = store.as_ref();
    let pk = unique_topic("purge");
    let expires = clock.now_ms() + 1_000;
    let ops: Vec<WriteOp> = (0..6)
        .map(|i| {
            let k = key(&pk, &sk(i));
            if i < 3 {
                put_expiring(&k, "brief", expires, Expect::Absent)
            } else {
                put(&k, "live", Expect::Absent)
            }
        })
        .collect();
    store.write(ops).await.expect("fill");
    let later = key(&pk, "later");
    store.write(vec![put_expiring(&later, "later", expires + 60_000, Expect::Absent)]).await.expect("put");
    assert_eq!(store.purge_expired(100).await.expect("purge before expiry"), 0, "nothing has expired yet");

    clock.advance(1_000);
    let purged = store.purge_expired(100).await.expect("purge");
    match purge {
        Purge::Deletes => {
            // Other cases' expired items may share the store: at least these three.
            assert!(purged >= 3, "purged {purged}");
            assert_eq!(store.purge_expired(100).await.expect("purge again"), 0, "nothing left to purge");
        }
        Purge::LeavesToStore => assert_eq!(purged, 0),
    }
    let live: Vec<String> = (3..6).map(sk).chain(["later".to_owned()]).collect();
    assert_eq!(walk(store, Query::all(&pk, 2)).await, live);
    assert_eq!(get(store, &key(&pk, &sk(0))).await, None);
    assert!(get(store, &later).await.is_some(), "not yet expired: kept");
    store.write(vec![WriteOp::create(key(&pk, &sk(0)), bytes("new"))]).await.expect("recreate a purged item");
    assert_eq!(value_version(store, &key(&pk, &sk(0))).await, Some((bytes("new"), 1)));
}

pub async fn given_60_keys_when_delete_many_then_all_gone_and_other_items_kept(backend: &dyn Backend) {
    let (store, _) = backend.open().await;
    let store = store.as_ref();
    let pk = unique_topic("deletemany");
    fill(store, &pk, 70).await;
    let mut keys: Vec<Key> = (0..60).map(|i| key(&pk, &sk(i))).collect();
    // A key twice, and one never written: both fine.
    keys.push(key(&pk, &sk(7)));
    keys.push(key(&pk, "never"));
    store.delete_many(keys).await.expect("delete_many");
    assert_eq!(walk(store, Query::all(&pk, 100)).await, (60..70).map(sk).collect::<Vec<_>>());
    store.delete_many(Vec::new()).await.expect("nothing to delete");
}

/// Increments `counter` by one: read it, write the next value over the version read, again on a lost race.
async fn increment(store: &dyn StateStore, counter: &Key) -> u32 {
    let mut lost = 0;
    loop {
        let read = get(store, counter).await;
        let value: u64 = read.as_ref().map_or(0, |i| std::str::from_utf8(&i.value).unwrap().parse().unwrap());
        let op = WriteOp::replace(counter.clone(), bytes(&(value + 1).to_string()), read.map(|i| i.version));
        match store.write(vec![op]).await {
            Ok(()) => return lost,
            Err(StorageError::ConditionFailed { op: 0 }) => lost += 1,
            Err(StorageError::Throttled { .. }) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("increment: {e:?}"),
        }
    }
}

pub async fn given_8_handles_incrementing_one_counter_under_version_conditions_then_no_update_lost(
    backend: &dyn Backend,
) {
    const TASKS: u64 = 8;
    const INCREMENTS: u64 = 10;
    let counter = key(&unique_topic("counter"), "n");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (store, _) = backend.open().await;
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut lost = 0;
            for _ in 0..INCREMENTS {
                lost += increment(store.as_ref(), &counter).await;
            }
            lost
        }));
    }
    let mut lost = 0;
    for task in tasks {
        lost += task.await.expect("task");
    }
    let (store, _) = backend.open().await;
    let total = TASKS * INCREMENTS;
    assert_eq!(value_version(store.as_ref(), &counter).await, Some((bytes(&total.to_string()), total)));
    // Not asserted (scheduling decides), but a run without races would test nothing.
    eprintln!("{lost} races lost and retried");
}

//! Writes: puts, conditions, deferred writes, checks, deletes, batch bounds, `delete_many`.

use bytes::Bytes;
use sluice_core::ports::state::{Expect, Item, Key, Page, Query, WriteOp, MAX_WRITE_OPS};
use sluice_core::{Clock, StorageError, SystemClock};

use super::fixtures::*;
use crate::{unique_topic, Backend};

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

    // Op 0 creates, op 1 replaces, op 2's item exists, op 3 deletes at a version it does not
    // have: all or nothing, and both failures named (a caller heals every one at once).
    let ops = vec![
        WriteOp::create(a.clone(), bytes("a1")),
        put(&b, "b2", Expect::Version(1)),
        WriteOp::create(c.clone(), bytes("c2")),
        WriteOp::Delete { key: d.clone(), expect: Expect::Version(7) },
    ];
    expect_conditions_failed(store.write(ops).await, &[2, 3]);
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
            assert!(matches!(e, StorageError::ConditionFailed { op: 1, .. }), "write {i}: {e:?}");
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

//! Expiry: invisible once passed, skipped by pages, purged.

use sluice_core::ports::state::{Expect, Item, Query, WriteOp};
use sluice_core::{Clock, SystemClock};

use super::fixtures::*;
use super::Purge;
use crate::{unique_topic, Backend};

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

//! Queries: bounds in either direction, and paging.

use sluice_core::ports::state::{Expect, Found, Page, Query, Read, WriteOp};
use sluice_core::Clock;

use super::fixtures::*;
use crate::{unique_topic, Backend};

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

/// A batched read answers each read in its place as a get or a query alone would: what a
/// write answered before it left, expired items hidden, pages bounded with where to go on.
pub async fn given_reads_when_read_many_then_each_answered_in_order_as_a_get_or_query_alone(backend: &dyn Backend) {
    let clock = manual_clock();
    let (store, _) = backend.open_with(clock.clone()).await;
    let store = store.as_ref();
    let (pk, other) = (unique_topic("many"), unique_topic("many-other"));
    fill(store, &pk, 5).await;
    fill(store, &other, 3).await;
    let brief = key(&other, "brief");
    store.write(vec![put_expiring(&brief, "b", clock.now_ms() + 10, Expect::Absent)]).await.expect("brief");
    store.write(vec![put(&key(&pk, &sk(1)), "v2", Expect::Version(1))]).await.expect("replace");
    clock.advance(10);
    let reads = [
        Read::Query(query(&pk, None, None, true, 3)),
        Read::Get(key(&pk, &sk(1))),
        Read::Get(key(&pk, "absent")),
        Read::Query(Query::all(&other, 10)),
        Read::Get(brief.clone()),
        Read::Query(query(&pk, Some(2), None, false, 10)),
        Read::Get(key(&other, &sk(2))),
    ];
    let found = store.read_many(&reads).await.expect("read_many");
    assert_eq!(found.len(), reads.len(), "one answer per read");
    for (read, found) in reads.iter().zip(found) {
        let alone = match read {
            Read::Get(k) => Found::Item(store.get(k).await.expect("get")),
            Read::Query(q) => Found::Page(store.query(q).await.expect("query")),
        };
        assert_eq!(found, alone, "{read:?}");
    }
    // And what they are, so a store answering every read alike wrongly fails too.
    let found = store.read_many(&reads).await.expect("read_many");
    let page = |i: usize| match &found[i] {
        Found::Page(p) => p.clone(),
        other => panic!("a query answered {other:?}"),
    };
    let item = |i: usize| match &found[i] {
        Found::Item(item) => item.as_ref().map(|i| (i.value.clone(), i.version)),
        other => panic!("a get answered {other:?}"),
    };
    assert_eq!(sks(&page(0)), [sk(0), sk(1), sk(2)]);
    assert!(page(0).next.is_some(), "more to read");
    assert_eq!(item(1), Some((bytes("v2"), 2)), "the write answered before it");
    assert_eq!((item(2), item(4)), (None, None), "absent, and expired");
    assert_eq!(sks(&page(3)), [sk(0), sk(1), sk(2)], "the expired item left out");
    assert_eq!((sks(&page(5)), page(5).next), (vec![sk(4), sk(3), sk(2)], None));
    assert_eq!(item(6), Some((bytes(&sk(2)), 1)));
    assert_eq!(store.read_many(&[]).await.expect("no reads"), Vec::new());
}

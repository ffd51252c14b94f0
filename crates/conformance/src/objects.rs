//! The [`ObjectStore`] port's contract, on every backend: what a put promises (durable,
//! never overwritten, every ref distinct), ranged reads, `NotFound` and `Corrupt`, listings
//! in name order from a cursor, deletes that may be retried, and `retire`.
//!
//! Other cases put objects into the same store (one moto bucket is shared), so each case
//! looks only at the objects it put.

use std::collections::BTreeSet;

use bytes::Bytes;
use sluice_core::{BlobRef, ObjectStore, StorageError};

use crate::Backend;

/// Generates one `#[tokio::test]` per object store case; `$backend` is an async expression
/// yielding a [`Backend`].
#[macro_export]
macro_rules! objects_conformance_suite {
    ($backend:expr) => {
        $crate::objects_conformance_suite!(@cases $backend;
            given_a_put_when_read_whole_or_in_part_then_its_bytes_come_back,
            given_many_puts_at_once_then_every_ref_is_distinct_and_keeps_its_bytes,
            given_an_absent_object_or_a_range_past_its_end_then_not_found_or_corrupt,
            given_objects_when_listed_from_a_cursor_then_name_order_sizes_and_no_repeats,
            given_a_delete_then_the_object_is_gone_and_a_retried_delete_succeeds,
            given_a_retired_object_then_later_puts_go_elsewhere,
        );
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::objects::$case(&backend).await;
            }
        )+
    };
}

fn blob(tag: &str, len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| tag.as_bytes()[i % tag.len()]).collect::<Vec<u8>>())
}

async fn read_all(objects: &dyn ObjectStore, at: &BlobRef, len: usize) -> Bytes {
    objects.read(&at.object, at.position, len as u64).await.unwrap()
}

pub async fn given_a_put_when_read_whole_or_in_part_then_its_bytes_come_back(backend: &dyn Backend) {
    let (_, objects) = backend.open().await;
    let bytes = blob("abcdefg", 10_000);
    let at = objects.put(bytes.clone()).await.unwrap();
    assert_eq!(read_all(objects.as_ref(), &at, bytes.len()).await, bytes);
    let part = objects.read(&at.object, at.position + 1_000, 2_345).await.unwrap();
    assert_eq!(part, bytes.slice(1_000..3_345));
    // Another handle (another process) reads the same bytes.
    let (_, other) = backend.open().await;
    assert_eq!(read_all(other.as_ref(), &at, bytes.len()).await, bytes);
}

pub async fn given_many_puts_at_once_then_every_ref_is_distinct_and_keeps_its_bytes(backend: &dyn Backend) {
    let (_, objects) = backend.open().await;
    let puts = (0..16).map(|i| {
        let objects = objects.clone();
        async move {
            let bytes = blob(&format!("p{i:02}"), 500 + i * 37);
            (objects.put(bytes.clone()).await.unwrap(), bytes)
        }
    });
    let stored = futures_util::future::join_all(puts).await;
    let refs: BTreeSet<(String, u64)> = stored.iter().map(|(at, _)| (at.object.clone(), at.position)).collect();
    assert_eq!(refs.len(), stored.len(), "two puts answered the same place");
    for (at, bytes) in &stored {
        assert_eq!(read_all(objects.as_ref(), at, bytes.len()).await, *bytes, "{at:?} changed");
    }
}

pub async fn given_an_absent_object_or_a_range_past_its_end_then_not_found_or_corrupt(backend: &dyn Backend) {
    let (_, objects) = backend.open().await;
    let missing = objects.read("segments/0-never-written", 0, 10).await;
    assert!(matches!(missing, Err(StorageError::NotFound(_))), "{missing:?}");
    let at = objects.put(blob("xyz", 100)).await.unwrap();
    // Past the end of what this put wrote: the object may hold more (a local blob file takes
    // later puts), so only a range past everything the object can hold must be refused.
    let past = objects.read(&at.object, at.position + (1 << 30), 10).await;
    assert!(matches!(past, Err(StorageError::Corrupt(_)) | Err(StorageError::NotFound(_))), "{past:?}");
}

pub async fn given_objects_when_listed_from_a_cursor_then_name_order_sizes_and_no_repeats(backend: &dyn Backend) {
    let (_, objects) = backend.open().await;
    let mut mine = BTreeSet::new();
    for i in 0..5 {
        let at = objects.put(blob(&format!("list{i}"), 64)).await.unwrap();
        objects.retire(&at.object);
        mine.insert(at.object);
    }
    // Page with a small limit until past the last of mine (other cases keep putting
    // objects into a shared store): every name once, in order.
    let last_of_mine = mine.last().cloned().unwrap_or_default();
    let mut seen: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    while after.as_ref().is_none_or(|a| *a < last_of_mine) {
        let page = objects.list(after.as_deref(), 3).await.unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        for info in &page {
            if mine.contains(&info.name) {
                assert!(info.size >= 64, "{info:?}");
                assert!(info.created_ms > 0, "{info:?}");
            }
        }
        after = Some(last.name.clone());
        seen.extend(page.into_iter().map(|info| info.name));
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "a listing goes in name order, each name once");
    let listed: BTreeSet<String> = seen.into_iter().filter(|n| mine.contains(n)).collect();
    assert_eq!(listed, mine);
}

pub async fn given_a_delete_then_the_object_is_gone_and_a_retried_delete_succeeds(backend: &dyn Backend) {
    let (_, objects) = backend.open().await;
    let at = objects.put(blob("gone", 64)).await.unwrap();
    objects.retire(&at.object);
    objects.delete(&at.object).await.unwrap();
    let read = objects.read(&at.object, at.position, 64).await;
    assert!(matches!(read, Err(StorageError::NotFound(_))), "{read:?}");
    objects.delete(&at.object).await.unwrap();
    let listed = objects.list(None, 100_000).await.unwrap();
    assert!(!listed.iter().any(|info| info.name == at.object), "a deleted object is still listed");
}

pub async fn given_a_retired_object_then_later_puts_go_elsewhere(backend: &dyn Backend) {
    let (_, objects) = backend.open().await;
    let first = objects.put(blob("one", 64)).await.unwrap();
    objects.retire(&first.object);
    let second = objects.put(blob("two", 64)).await.unwrap();
    assert_ne!(first.object, second.object, "a put went into a retired object");
    assert_eq!(read_all(objects.as_ref(), &first, 64).await, blob("one", 64));
}

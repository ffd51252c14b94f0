//! Creating topics: every partition's head comes with the topic, so a publish never names
//! the topic's record (which every publish to the topic would share); a create stopped
//! halfway is finished by its retry, and a head missing all the same is made by its first
//! commit, as for a topic created before heads came with it.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sluice_core::ports::state::{Expect, Key, Query, StateStore, WriteOp};
use sluice_core::{keys, Error, StorageError};
use sluice_testkit::{Layered, StateLayer};

use super::fixtures::*;
use crate::{unique_topic, Backend};

/// Records the keys of every write, and refuses the `fail_at`-th write (counted from 0)
/// without applying it, as a store gone down would.
#[derive(Default)]
struct Writes {
    keys: Mutex<Vec<Vec<Key>>>,
    fail_at: Mutex<Option<usize>>,
}

impl Writes {
    fn named(&self, key: &Key) -> bool {
        self.keys.lock().unwrap().iter().flatten().any(|k| k == key)
    }

    fn count(&self) -> usize {
        self.keys.lock().unwrap().len()
    }
}

#[async_trait]
impl StateLayer for Writes {
    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let n = {
            let mut keys = self.keys.lock().unwrap();
            keys.push(ops.iter().map(|op| op.key().clone()).collect());
            keys.len() - 1
        };
        if *self.fail_at.lock().unwrap() == Some(n) {
            return Err(StorageError::Unavailable { message: "injected: store down".into(), source: None });
        }
        inner.write(ops).await
    }
}

/// How many heads `id` has in the store.
async fn head_count(store: &dyn StateStore, id: u64) -> usize {
    let page = store.query(&Query::all(keys::heads_pk(id), 2000)).await.unwrap();
    assert!(page.next.is_none());
    page.items.len()
}

pub async fn given_a_new_topic_of_150_partitions_when_cold_processes_publish_then_no_write_names_its_record(
    backend: &dyn Backend,
) {
    let (store, objects) = backend.open().await;
    let topic = unique_topic("heads");
    let (config, created) = log_on((store.clone(), objects.clone())).create_topic(&topic, spec(150)).await.unwrap();
    assert!(created);
    assert_eq!(head_count(store.as_ref(), config.id).await, 150, "every head came with the topic");
    let writes = Arc::new(Layered::new(store.clone(), Writes::default()));
    for p in [0, 98, 99, 149] {
        // A process of its own each: nothing cached, as 1,000 cold function instances.
        let log = log_on((writes.clone(), objects.clone()));
        let at = log.publish(&topic, vec![event("e", p)], None).await.unwrap();
        assert_eq!(at[0].offset, 0);
    }
    assert!(writes.count() >= 4);
    assert!(!writes.named(&keys::topic_key(&topic)), "a commit checked the topic record");
}

pub async fn given_a_create_stopped_after_its_first_write_when_retried_then_its_heads_are_finished(
    backend: &dyn Backend,
) {
    let (store, objects) = backend.open().await;
    let writes = Arc::new(Layered::new(store.clone(), Writes::default()));
    *writes.fail_at.lock().unwrap() = Some(1);
    let log = log_on((writes.clone(), objects.clone()));
    let topic = unique_topic("halfway");
    assert!(log.create_topic(&topic, spec(150)).await.is_err(), "the second write failed");
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    assert_eq!(head_count(store.as_ref(), config.id).await, 99, "the record and the first heads landed together");
    // Meanwhile a publish to a partition without a head still commits (it makes the head).
    let at = log.publish(&topic, vec![event("early", 120)], None).await.unwrap();
    assert_eq!(at[0].offset, 0);
    let (again, created) = log.create_topic(&topic, spec(150)).await.unwrap();
    assert!(!created);
    assert_eq!(again.id, config.id);
    assert_eq!(head_count(store.as_ref(), config.id).await, 150, "the retry finished the heads");
    let at = log.publish(&topic, vec![event("late", 120)], None).await.unwrap();
    assert_eq!(at[0].offset, 1, "the head made by the early publish was kept");
}

pub async fn given_a_topic_whose_heads_are_missing_when_published_then_offsets_start_at_zero(backend: &dyn Backend) {
    let (store, objects) = backend.open().await;
    let log = log_on((store.clone(), objects));
    let topic = unique_topic("oldtopic");
    let (config, _) = log.create_topic(&topic, spec(3)).await.unwrap();
    // As a topic created before heads came with it.
    let deletes = (0..3).map(|p| WriteOp::Delete { key: keys::head_key(config.id, p), expect: Expect::Any });
    store.write(deletes.collect()).await.unwrap();
    for p in 0..3 {
        let at = log.publish(&topic, vec![event("a", p), event("b", p)], None).await.unwrap();
        assert_eq!((at[0].offset, at[1].offset), (0, 1));
    }
    assert_eq!(values(&read_all(&log, &topic, 2).await.unwrap()), vec![(0, "a".into()), (1, "b".into())]);
}

/// A delete of a topic larger than one write, its later fences refused: the retry answers
/// that the topic is gone, and first writes the fences, so a process that cached a head past
/// the first write's is refused as every other (before, it could still publish, acknowledged,
/// into a deleted topic until the purge).
pub async fn given_a_delete_of_150_partitions_stopped_after_its_first_write_when_retried_then_every_head_is_fenced(
    backend: &dyn Backend,
) {
    let (store, objects) = backend.open().await;
    let topic = unique_topic("halfgone");
    log_on((store.clone(), objects.clone())).create_topic(&topic, spec(150)).await.unwrap();
    let stale = warm_log((store.clone(), objects.clone()));
    stale.publish(&topic, vec![event("before", 120)], None).await.unwrap();
    let writes = Arc::new(Layered::new(store.clone(), Writes::default()));
    *writes.fail_at.lock().unwrap() = Some(1);
    let admin = log_on((writes.clone(), objects.clone()));
    assert!(admin.delete_topic(&topic).await.is_err(), "the second write failed");
    let again = admin.delete_topic(&topic).await;
    assert!(matches!(again, Err(Error::TopicNotFound(_))), "{again:?}");
    let late = stale.publish(&topic, vec![event("after", 120)], None).await;
    assert!(matches!(late, Err(Error::TopicNotFound(_))), "a head past the first write is fenced: {late:?}");
}

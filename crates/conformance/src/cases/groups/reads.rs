//! What a poll reads: in one batch of the state store where batched reads are cheap, and on
//! a store billed per read (DynamoDB), only the heads of topics the member holds partitions of.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use sluice_core::groups::Groups;
use sluice_core::keys::topic_of_heads_pk;
use sluice_core::ports::state::{Found, Item, Key, Page, Query, Read, StateStore};
use sluice_core::{Log, LogConfig, ManualClock, StorageError, TopicSpec};
use sluice_testkit::{Layered, StateLayer};

use crate::cases::support::groups::*;
use crate::{unique_topic, Backend};

/// Counts a store's reads: batches, reads made alone, and heads queries either way; and may
/// say batched reads are not cheap, as DynamoDB's adapter does.
#[derive(Default)]
struct Reads {
    cheap: Option<bool>,
    batches: AtomicUsize,
    alone: AtomicUsize,
    heads: AtomicUsize,
}

impl Reads {
    fn on(inner: Arc<dyn StateStore>, cheap: Option<bool>) -> Arc<Layered<Self>> {
        Arc::new(Layered::new(inner, Self { cheap, ..Self::default() }))
    }

    fn note(&self, query: &Query) {
        if topic_of_heads_pk(&query.pk).is_some() {
            self.heads.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// (batches, reads alone, heads queries) since the last call.
    fn take(&self) -> (usize, usize, usize) {
        let take = |n: &AtomicUsize| n.swap(0, Ordering::SeqCst);
        (take(&self.batches), take(&self.alone), take(&self.heads))
    }
}

#[async_trait]
impl StateLayer for Reads {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        self.alone.fetch_add(1, Ordering::SeqCst);
        inner.get(key).await
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        self.alone.fetch_add(1, Ordering::SeqCst);
        self.note(query);
        inner.query(query).await
    }

    /// The inner store's own batch (one read transaction on SQLite), counted once.
    async fn read_many(&self, inner: &dyn StateStore, reads: &[Read]) -> Result<Vec<Found>, StorageError> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        reads.iter().for_each(|read| {
            if let Read::Query(query) = read {
                self.note(query)
            }
        });
        inner.read_many(reads).await
    }

    fn cheap_batched_reads(&self, inner: &dyn StateStore) -> bool {
        self.cheap.unwrap_or_else(|| inner.cheap_batched_reads())
    }
}

/// A member polling on from where its last poll (in this process) left, with new events in
/// both its partitions: where batched reads are cheap, everything it reads before its
/// heartbeat (topic, group, heads, and each partition's segment index) is one batch; on a
/// store billed per read, the heads and each index query are read on their own, as before.
pub async fn given_a_member_polling_on_from_its_last_poll_then_its_reads_are_one_batch_where_batches_are_cheap(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let reads = Reads::on(store, None);
    // Every segment written to the index (none left in its head alone), whatever the backend.
    let config = LogConfig { single_write_commits: false, ..crate::log_config() };
    let log = Log::new(reads.clone(), objects, clock.clone(), config);
    let groups = Groups::new(log.clone());
    let (topic, group) = (unique_topic("batched"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None }).await.unwrap();
    for p in 0..2 {
        publish(&log, &topic, p, (0..2).map(|i| (format!("old{p}{i}"), START_MS))).await;
    }
    let first = poll(&groups, &group, None, &topic).await;
    assert_eq!(first.events.len(), 4);
    for p in 0..2 {
        publish(&log, &topic, p, (0..3).map(|i| (format!("new{p}{i}"), START_MS))).await;
    }
    reads.take();
    let next = poll(&groups, &group, Some(&first.member_id), &topic).await;
    let mut got: Vec<(u32, u64)> = next.events.iter().map(|e| (e.event.partition, e.event.offset)).collect();
    got.sort_unstable();
    assert_eq!(got, [(0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4)], "every new event, none twice");
    let (batches, alone, _) = reads.take();
    if reads.cheap_batched_reads() {
        assert_eq!((batches, alone), (1, 0), "one batch: topic, group, heads and both partitions' index");
    } else {
        assert_eq!((batches, alone), (1, 3), "one batch (topic, group), then the heads and each index query");
    }
}

/// More members than partitions, on a store billed per read: the member assigned nothing
/// reads no heads (it fetches nothing), where a batch that guessed them would pay a query.
pub async fn given_more_members_than_partitions_then_one_assigned_nothing_reads_no_heads_where_reads_are_billed(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let reads = Reads::on(store, Some(false));
    let log = Log::new(reads.clone(), objects, clock.clone(), crate::log_config());
    let groups = Groups::new(log.clone());
    let (topic, group) = (unique_topic("idle"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, [("e".to_owned(), START_MS)]).await;
    let a = poll(&groups, &group, None, &topic).await.member_id;
    let b = poll(&groups, &group, None, &topic).await.member_id;
    // Both see the last generation: one holds the partition, the other nothing.
    let (a, b) = (poll(&groups, &group, Some(&a), &topic).await, poll(&groups, &group, Some(&b), &topic).await);
    assert_eq!(a.generation, b.generation);
    let idle = if a.assignment.is_empty() { a } else { b };
    assert!(idle.assignment.is_empty(), "one partition, two members: one holds nothing");
    reads.take();
    let again = poll(&groups, &group, Some(&idle.member_id), &topic).await;
    assert!(again.assignment.is_empty() && again.events.is_empty());
    let (_, _, heads) = reads.take();
    assert_eq!(heads, 0, "a member holding nothing of the topic reads none of its heads");
}

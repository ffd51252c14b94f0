//! Offsets expiry of groups whose last member left, on a namespaced view of the store.

use sluice_core::Code;
use std::sync::Arc;

use async_trait::async_trait;
use sluice_core::groups::{Groups, GroupsConfig, ResetPolicy, DEFAULT_OFFSETS_RETENTION_MS};
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{Clock, Error, Log, ManualClock, StorageError, TopicSpec};
use sluice_testkit::{Layered, StateLayer};

use crate::cases::support::groups::*;
use crate::{unique_topic, Backend};

/// A state-store layer that puts a prefix of its own on every collection: a case that runs
/// the janitor's offsets expiry (which scans one index for every group) on a table other
/// cases share sees only its own groups, and they never see its clock.
pub struct Namespaced {
    prefix: String,
}

impl Namespaced {
    pub fn new(inner: Arc<dyn StateStore>) -> Layered<Self> {
        Layered::new(inner, Self { prefix: format!("{}/", unique_topic("ns")) })
    }

    fn wrap(&self, key: &Key) -> Key {
        Key::new(format!("{}{}", self.prefix, key.pk), key.sk.clone())
    }

    fn unwrap(&self, mut item: Item) -> Item {
        item.key.pk = item.key.pk.strip_prefix(&self.prefix).unwrap_or(&item.key.pk).to_owned();
        item
    }
}

#[async_trait]
impl StateLayer for Namespaced {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        Ok(inner.get(&self.wrap(key)).await?.map(|i| self.unwrap(i)))
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        let query = Query { pk: format!("{}{}", self.prefix, query.pk), ..query.clone() };
        let page = inner.query(&query).await?;
        Ok(Page { items: page.items.into_iter().map(|i| self.unwrap(i)).collect(), next: page.next })
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let ops = ops
            .into_iter()
            .map(|op| match op {
                WriteOp::Put { key, value, expires_at_ms, expect } => {
                    WriteOp::Put { key: self.wrap(&key), value, expires_at_ms, expect }
                }
                WriteOp::Delete { key, expect } => WriteOp::Delete { key: self.wrap(&key), expect },
                WriteOp::Check { key, expect } => WriteOp::Check { key: self.wrap(&key), expect },
            })
            .collect();
        inner.write(ops).await
    }

    /// As a write (the port's default for a store without the distinction).
    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write(inner, ops).await
    }

    async fn delete_many(&self, inner: &dyn StateStore, keys: Vec<Key>) -> Result<(), StorageError> {
        inner.delete_many(keys.iter().map(|k| self.wrap(k)).collect()).await
    }
}

/// A log and its groups on `backend` under a namespace of their own (see [`Namespaced`]).
async fn namespaced_groups_on(backend: &dyn Backend, clock: &Arc<ManualClock>, config: GroupsConfig) -> (Log, Groups) {
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(Arc::new(Namespaced::new(store)), objects, clock.clone(), crate::log_config());
    (log.clone(), Groups::with_config(log, config))
}

/// A group of one member on `topic` that fetched everything, committed 3 and left.
async fn used_and_left(groups: &Groups, topic: &str) -> String {
    let group = unique_topic("g");
    let member = poll(groups, &group, None, topic).await;
    groups.commit(&group, &member.member_id, member.generation, &[commit_of(topic, 0, 3)]).await.unwrap();
    groups.leave(&group, &member.member_id).await.unwrap();
    group
}

pub async fn given_groups_whose_last_member_left_then_offsets_expire_after_the_retention_and_not_before(
    backend: &dyn Backend,
) {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    assert_eq!(DEFAULT_OFFSETS_RETENTION_MS, 7 * DAY_MS, "Kafka's default");
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = namespaced_groups_on(backend, &clock, GroupsConfig::default()).await;
    let topic = unique_topic("expiry");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..5).map(|i| (format!("e{i}"), START_MS))).await;
    assert_eq!(groups.expire_offsets(1000).await.unwrap(), 0, "nothing to expire");

    let early = used_and_left(&groups, &topic).await;
    clock.advance(2);
    let late = used_and_left(&groups, &topic).await;
    // A member that never leaves: its session (6 s) ends at START_MS + 2 + 6 s.
    let silent = unique_topic("g");
    let mut req = request(&silent, None, &topic, 10);
    req.session_timeout_ms = Some(6_000);
    let member = groups.poll(&req).await.unwrap();
    groups.commit(&silent, &member.member_id, member.generation, &[commit_of(&topic, 0, 3)]).await.unwrap();
    let d = groups.describe(&late).await.unwrap();
    assert_eq!(d.offsets_expire_at_ms, Some(START_MS + 2 + 7 * DAY_MS));
    assert_eq!(groups.describe(&silent).await.unwrap().offsets_expire_at_ms, None, "a live member: no expiry");

    // 7 days + 1 ms after `early` left, 7 days − 1 ms after `late` did.
    clock.advance(7 * DAY_MS - 1);
    assert!(groups.expire_offsets(1000).await.unwrap() > 0);
    assert!(matches!(groups.describe(&early).await, Err(Error::GroupNotFound(_))), "offsets and group gone");
    assert!(!groups.list().await.unwrap().contains(&early));
    assert_eq!(committed(&groups, &late, 0).await, Some(3), "7 days − 1 ms: kept");
    assert_eq!(committed(&groups, &silent, 0).await, Some(3), "its session ended 7 days − 6 s ago: kept");
    assert_eq!(groups.expire_offsets(1000).await.unwrap(), 0, "nothing more: one query");
    // A new member of the expired group starts as its reset policy says.
    let mut none = request(&early, None, &topic, 10);
    none.reset = ResetPolicy::None;
    let refused = groups.poll(&none).await;
    assert!(matches!(refused, Err(Error::Invalid { code: Code::NoCommittedOffset, .. })), "{refused:?}");
    let back = poll(&groups, &early, None, &topic).await;
    assert_eq!(offsets_of(&back), vec![0, 1, 2, 3, 4], "earliest: from the log start");
    groups.leave(&early, &back.member_id).await.unwrap();

    clock.advance(2);
    assert!(groups.expire_offsets(1000).await.unwrap() > 0);
    assert!(matches!(groups.describe(&late).await, Err(Error::GroupNotFound(_))), "7 days + 1 ms: gone");
    // A session that ended (rather than a leave) counts with up to an hour's slack.
    assert_eq!(committed(&groups, &silent, 0).await, Some(3), "just past 7 days after its session ended: kept");
    clock.advance(6_000 + 3600 * 1000);
    assert!(groups.expire_offsets(1000).await.unwrap() > 0);
    assert!(matches!(groups.describe(&silent).await, Err(Error::GroupNotFound(_))), "7 days and an hour: gone");
}

pub async fn given_a_group_with_a_live_member_then_its_offsets_never_expire_and_after_it_leaves_they_do(
    backend: &dyn Backend,
) {
    // A retention of one minute, and a member that polls every 30 s for ten minutes.
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = namespaced_groups_on(backend, &clock, GroupsConfig { offsets_retention_ms: 60_000 }).await;
    let (topic, group) = (unique_topic("alive"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..5).map(|i| (format!("e{i}"), START_MS))).await;
    let member = poll(&groups, &group, None, &topic).await;
    groups.commit(&group, &member.member_id, member.generation, &[commit_of(&topic, 0, 3)]).await.unwrap();
    for _ in 0..20 {
        clock.advance(30_000);
        poll(&groups, &group, Some(&member.member_id), &topic).await;
        assert_eq!(groups.expire_offsets(1000).await.unwrap(), 0);
        assert_eq!(committed(&groups, &group, 0).await, Some(3), "a commit ten times older than the retention");
    }
    groups.leave(&group, &member.member_id).await.unwrap();
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(d.offsets_expire_at_ms, Some(clock.now_ms() + 60_000), "a minute after the leave");
    clock.advance(59_999);
    assert_eq!(groups.expire_offsets(1000).await.unwrap(), 0, "a millisecond short of the retention: kept");
    assert_eq!(committed(&groups, &group, 0).await, Some(3));
    clock.advance(1);
    // A budget of one item per step: resumable, a step at a time.
    let mut steps = 0;
    while groups.expire_offsets(1).await.unwrap() > 0 {
        steps += 1;
        assert!(steps < 10, "bounded");
    }
    assert!(matches!(groups.describe(&group).await, Err(Error::GroupNotFound(_))), "after {steps} steps");
}

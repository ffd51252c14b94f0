//! Consumer groups over stateless HTTP, with server-side assignment (Kafka's
//! KIP-848 idea): members join and heartbeat by polling; the server assigns the
//! partitions of the group's topics over the live members, numbers every
//! assignment with a generation, tracks each member's fetch position, and fences
//! offset commits by generation and ownership. Written once, on the state store.
//!
//! | item | `pk` | `sk` | value |
//! |---|---|---|---|
//! | group registry entry | `groups` | group | [`RegistryRecord`] |
//! | group state (generation, assignment) | `group#<group>` | `meta` | [`GroupRecord`] |
//! | member (expires when its session does) | `group#<group>` | `member#<id>` | [`MemberRecord`] |
//! | committed offset | `goff#<group>` | `<topic>#<partition>` | [`OffsetRecord`] |
//! | activity: no member's session outlasts `until` | `group#<group>` | `active` | [`ActivityRecord`] |
//! | offsets expiry index entry | `goff-expiry` | `<until, 20 digits>#<group>` | [`ActivityRecord`] |
//!
//! Why it holds up without clocks deciding safety:
//! - The group record changes only by a write conditional on the version read,
//!   so two members rebalancing at once cannot both win; its version grows on
//!   every change (rebalance, seek, leave).
//! - A member's liveness is its item's expiry: the store hides an expired item,
//!   so a member silent past its session timeout is not live to anyone, and its
//!   commits fail their check of its item. The next poll by anyone rebalances it away.
//! - A commit is one write that checks the group record's version and the
//!   member's item, so a commit racing a rebalance or an eviction fails whole.
//! - A position is only trusted if it was recorded at or after the group version
//!   at which its member got the partition (or at which the partition was last
//!   seeked); otherwise the member resumes from the committed offset. A member
//!   therefore never skips events another owner fetched but did not commit.
//!
//! Offsets expiry (Kafka's `offsets.retention.minutes`): the offsets of a group
//! without members go [`GroupsConfig::offsets_retention_ms`] after its last member
//! left or its session ended. The activity item bounds, from above, when any
//! member's session ends: a write that gives a member a later expiry also moves
//! `until` (by a slack, so a busy group moves it about once an hour, not on every
//! heartbeat), conditional on the activity item's version; the last member's
//! leave sets it to the time it left, a seek to at least the time of the seek. The
//! index entry mirrors `until` in the same writes, so the janitor (`expire_step`)
//! finds expired groups with one query. An expired group goes as a deleted one does
//! (`removal`): its first write, which checks the activity item (a member joining
//! meanwhile makes it fail), leaves a tombstone that no joiner inherits offsets from.

mod admin;
mod commit;
mod compact;
mod expiry;
mod membership;
mod plan;
mod poll;
mod read;
mod removal;
mod seek;

pub(crate) use expiry::expire_step;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::keys::{
    activity_key, expiry_key, group_meta_key, group_pk, groups_pk, member_key, member_of, offset_key, offsets_pk,
    registry_key, tp_key, ACTIVITY_SK, GROUP_META_SK,
};
use crate::layout::{self, HeadRecord};
use crate::log::topics;
use crate::log::Log;
use crate::model::{Event, OffsetQuery, TopicConfig};
use crate::ports::state::{Expect, Key, Page, Query, StateStore, WriteOp, MAX_WRITE_OPS};
use crate::Code;
use crate::{names, Error, StorageError};

/// Kafka's bounds for a session timeout, and KIP-848's default.
pub const MIN_SESSION_TIMEOUT_MS: u64 = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: u64 = 300_000;
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 45_000;
/// How a static member's id starts (random ids are 16 hex digits, so never collide).
const STATIC_MEMBER_PREFIX: &str = "i.";
/// Most partitions one group reads, over all its topics: its record and a member's stay a
/// quarter below DynamoDB's 400 KB item limit (see `compact`).
pub const MAX_GROUP_PARTITIONS: u32 = 10_000;
/// Conditional writes lost to concurrent members before a request gives up.
const MAX_ATTEMPTS: usize = 16;
/// Offsets one commit may carry: its checks and puts must fit one atomic write.
pub const MAX_COMMIT_OFFSETS: usize = MAX_WRITE_OPS - 2;
/// How long the offsets of a group without members are kept by default (Kafka's
/// `offsets.retention.minutes`): 7 days.
pub const DEFAULT_OFFSETS_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;
/// Most a group's activity `until` runs ahead of its members' sessions: the offsets
/// of a group whose last member's session ended (rather than it leaving) may be
/// kept this much longer than the retention.
const MAX_ACTIVITY_SLACK_MS: i64 = 3600 * 1000;
/// Offsets seek writes at once: with the group record, the registry entry and the
/// three writes that move the activity item, they fit one atomic write.
const SEEK_OFFSETS_PER_WRITE: usize = MAX_WRITE_OPS - 5;
/// Entries of the offsets expiry index one janitor step looks at.
const EXPIRY_ENTRIES_PER_STEP: usize = 16;

/// How groups behave, beyond the log they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupsConfig {
    /// How long the committed offsets of a group without members are kept after its
    /// last member left (or its session ended), or after its last seek; the
    /// janitor then removes them and the group. A group with a member keeps them.
    pub offsets_retention_ms: i64,
}

impl Default for GroupsConfig {
    fn default() -> Self {
        Self { offsets_retention_ms: DEFAULT_OFFSETS_RETENTION_MS }
    }
}

/// Where a member starts on a partition with no usable committed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResetPolicy {
    Earliest,
    Latest,
    None,
}

/// One partition of one topic (the API's own type: members are assigned these).
pub use sluice_wire::TopicPartition;

/// A poll: join (no member id) or heartbeat, and fetch.
#[derive(Debug, Clone)]
pub struct PollRequest {
    pub group: String,
    pub member_id: Option<String>,
    pub topics: Vec<String>,
    pub max_events: usize,
    pub max_bytes: usize,
    pub wait_ms: u64,
    pub reset: ResetPolicy,
    pub session_timeout_ms: Option<u64>,
    /// Before fetching, commit the positions this request carries (with `positions: None`,
    /// what this member's previous poll returned).
    pub auto_commit: bool,
    /// The next offset the client expects on each partition it has received events of, as a
    /// Kafka consumer holds its fetch positions. `None` for a client that keeps none: the
    /// server's record of what it last sent stands in (a lost answer then skips its events).
    pub positions: Option<BTreeMap<TopicPartition, u64>>,
    /// A client's stable name for itself (Kafka's `group.instance.id`): a join with it gets
    /// the member id `i.<instance_id>`, the same on every join, so a join retried after a lost
    /// answer (or a restart within the session) resumes that member instead of adding one.
    pub instance_id: Option<String>,
}

/// An event with the topic it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEvent {
    pub topic: String,
    pub event: Event,
}

/// What a poll answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollAnswer {
    pub member_id: String,
    pub generation: u64,
    pub assignment: Vec<TopicPartition>,
    pub events: Vec<GroupEvent>,
}

/// One offset to commit: the next offset to read (last processed + 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffset {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub metadata: Option<String>,
}

/// Where a seek moves the committed offsets to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTarget {
    Earliest,
    Latest,
    Offset(u64),
    /// The first event with a timestamp at or after this.
    Timestamp(i64),
}

/// A group as described: members, assignment, and per partition the committed offset and lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group: String,
    pub generation: u64,
    pub members: Vec<MemberDescription>,
    pub partitions: Vec<PartitionLag>,
    /// When the janitor may remove the group's offsets (and the group) unless a member
    /// joins or a seek comes first: `None` while it has members (or it has not been used
    /// since offsets expiry exists).
    pub offsets_expire_at_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub assignment: Vec<TopicPartition>,
    pub session_timeout_ms: u64,
    /// When the session ends unless the member polls again.
    pub expires_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: u32,
    pub committed: Option<u64>,
    pub metadata: Option<String>,
    pub log_start_offset: u64,
    pub high_watermark: u64,
    /// High watermark − committed (from the log start when nothing is committed).
    pub lag: u64,
    pub owner: Option<String>,
}

/// A group's entry in the list of groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryRecord {
    pub created_ms: i64,
}

/// A group's state: changed only by conditional writes, on membership change, seek or leave.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub generation: u64,
    /// Each member's assigned partitions.
    #[serde(with = "crate::groups::compact::assignment")]
    pub members: BTreeMap<String, Vec<TopicPartition>>,
    /// The ids of the topics the assignment was made for (a re-created topic forces a new one).
    pub topics: BTreeMap<String, u64>,
    /// Per partition (`topic#partition`): the group version from which fetch positions
    /// recorded for it are trusted (when it changed hands, or was last seeked).
    #[serde(with = "crate::groups::compact::by_partition")]
    pub since: BTreeMap<String, u64>,
    /// The group version from which committed offsets are the group's: one recorded at an
    /// older version belongs to a deleted incarnation whose delete has not removed it yet
    /// (see `admin::delete`). 0 for a group never deleted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offsets_from: u64,
    /// The topics the group read when its last member left (while `topics` is empty):
    /// a describe lists their partitions as long as the group's offsets are kept.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub left_topics: BTreeSet<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A member: its subscription and fetch positions. Its expiry is its session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub topics: Vec<String>,
    pub session_timeout_ms: u64,
    /// Per partition (`topic#partition`): the next offset to fetch.
    #[serde(with = "crate::groups::compact::by_partition")]
    pub positions: BTreeMap<String, u64>,
    /// The group version the positions were recorded at.
    pub positions_version: u64,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRecord {
    /// The topic incarnation it was committed for: an offset of a deleted topic means nothing.
    pub topic_id: u64,
    pub offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
    /// The version of the group record the write that committed it checked (or, for a seek,
    /// made): told apart from [`GroupRecord::offsets_from`]. 0 in offsets stored before it was.
    #[serde(default)]
    pub group_version: u64,
}

impl OffsetRecord {
    /// Whether it means anything to `record`'s group on the topic incarnation `topic_id`: an
    /// offset of a deleted topic, or of a deleted incarnation of the group, does not.
    fn counts(&self, topic_id: u64, record: &GroupRecord) -> bool {
        self.topic_id == topic_id && self.group_version >= record.offsets_from
    }
}

/// When a group was last used: no member's session outlasts `until` (see the module doc).
/// Also the value of the group's entry in the offsets expiry index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityRecord {
    pub until: i64,
}

/// The writes that make the activity item say `until`, conditional on the version read
/// (or on its absence), and move its index entry with it.
fn activity_ops(group: &str, current: Option<&(ActivityRecord, u64)>, until: i64) -> Vec<WriteOp> {
    let record = ActivityRecord { until };
    let mut ops = vec![WriteOp::replace(activity_key(group), layout::encode(&record), current.map(|(_, v)| *v))];
    if let Some((old, _)) = current.filter(|(old, _)| expiry_key(old.until, group) != expiry_key(until, group)) {
        ops.push(WriteOp::Delete { key: expiry_key(old.until, group), expect: Expect::Any });
    }
    ops.push(WriteOp::Put {
        key: expiry_key(until, group),
        value: layout::encode(&record),
        expires_at_ms: None,
        expect: Expect::Any,
    });
    ops
}

/// Conditional writes kept losing to other members: the client should retry later.
fn too_busy(group: &str) -> Error {
    Error::Throttled(StorageError::Throttled { message: format!("group '{group}' is changing too fast"), source: None })
}

fn conflict(code: Code, message: impl Into<String>) -> Error {
    Error::Conflict { code, message: message.into() }
}

/// What one read of a group's collection found.
#[derive(Default)]
struct GroupState {
    record: GroupRecord,
    /// 0 when the group has no record yet.
    version: u64,
    /// Live members (unexpired items) with their item versions and expiry.
    members: BTreeMap<String, (MemberRecord, u64, i64)>,
    /// The activity item and its version, if the group has one.
    activity: Option<(ActivityRecord, u64)>,
}

impl GroupState {
    /// Whether the group is yet to be made: no record, or only the tombstone a delete left
    /// (a poll or seek then makes the group anew, registry entry included).
    fn unborn(&self) -> bool {
        self.version == 0 || self.version == self.record.offsets_from
    }
}

/// Reads a group's collection: its record, live members and activity.
async fn read_state(store: &dyn StateStore, group: &str) -> Result<GroupState, StorageError> {
    let first = store.query(&Query::all(group_pk(group), 1000)).await?;
    read_state_from(store, group, first).await
}

/// [`read_state`] from its first page, already read (as a query of 1,000 items).
async fn read_state_from(store: &dyn StateStore, group: &str, first: Page) -> Result<GroupState, StorageError> {
    let mut state = GroupState::default();
    let mut query = Query::all(group_pk(group), 1000);
    let mut page = first;
    loop {
        for item in page.items {
            if item.key.sk == GROUP_META_SK {
                state.record = layout::decode("group", &item.value)?;
                state.version = item.version;
            } else if item.key.sk == ACTIVITY_SK {
                state.activity = Some((layout::decode("group activity", &item.value)?, item.version));
            } else if let Some(id) = member_of(&item.key.sk) {
                let member: MemberRecord = layout::decode("member", &item.value)?;
                state.members.insert(id.to_owned(), (member, item.version, item.expires_at_ms.unwrap_or(i64::MAX)));
            }
        }
        match page.next {
            Some(after) => query.after = Some(after),
            None => return Ok(state),
        }
        page = store.query(&query).await?;
    }
}

/// Consumer groups on a [`Log`].
#[derive(Clone)]
pub struct Groups {
    log: Log,
    config: GroupsConfig,
    /// Where this process last saw each topic's heads (see `read`).
    ids: read::TopicIds,
    /// Where each member this process answered fetches next (see `read`).
    fetches: read::NextFetches,
}

impl Groups {
    /// Groups with the default [`GroupsConfig`].
    pub fn new(log: Log) -> Self {
        Self::with_config(log, GroupsConfig::default())
    }

    pub fn with_config(log: Log, config: GroupsConfig) -> Self {
        Self { log, config, ids: read::TopicIds::default(), fetches: read::NextFetches::default() }
    }

    /// The log these groups read.
    pub fn log(&self) -> &Log {
        &self.log
    }

    fn store(&self) -> &dyn StateStore {
        self.log.store().as_ref()
    }

    fn now(&self) -> i64 {
        self.log.clock().now_ms()
    }

    async fn state(&self, group: &str) -> Result<GroupState, StorageError> {
        read_state(self.store(), group).await
    }

    /// The writes that make the activity item cover a member session ending at
    /// `expires`, if it does not already: `until` moves past it by a slack, so that
    /// a busy group writes the item about once per slack, not on every heartbeat.
    /// Answers the writes and the item (with its version) they leave.
    fn cover(
        &self,
        group: &str,
        activity: Option<&(ActivityRecord, u64)>,
        expires: i64,
    ) -> Option<(Vec<WriteOp>, (ActivityRecord, u64))> {
        if activity.is_some_and(|(a, _)| a.until >= expires) {
            return None;
        }
        let slack = (self.config.offsets_retention_ms / 24).clamp(0, MAX_ACTIVITY_SLACK_MS);
        let until = expires.saturating_add(slack);
        let after = (ActivityRecord { until }, activity.map_or(1, |(_, v)| v + 1));
        Some((activity_ops(group, activity, until), after))
    }

    /// Removes (about `budget` items of) the groups whose offsets expired under this
    /// groups' [`GroupsConfig::offsets_retention_ms`], by this log's clock: the
    /// janitor's step, for tools and tests. Answers how many items went.
    pub async fn expire_offsets(&self, budget: usize) -> Result<usize, Error> {
        Ok(expire_step(self.store(), self.now(), self.config.offsets_retention_ms, budget).await?)
    }

    async fn offsets(&self, group: &str) -> Result<BTreeMap<String, (OffsetRecord, u64)>, StorageError> {
        read_offsets(self.store(), group).await
    }
}

/// Every offset stored for `group` (whatever incarnation committed it), with its item version.
async fn read_offsets(
    store: &dyn StateStore,
    group: &str,
) -> Result<BTreeMap<String, (OffsetRecord, u64)>, StorageError> {
    let first = store.query(&Query::all(offsets_pk(group), 1000)).await?;
    read_offsets_from(store, group, first).await
}

/// [`read_offsets`] from its first page, already read (as a query of 1,000 items).
async fn read_offsets_from(
    store: &dyn StateStore,
    group: &str,
    first: Page,
) -> Result<BTreeMap<String, (OffsetRecord, u64)>, StorageError> {
    let mut offsets = BTreeMap::new();
    let mut query = Query::all(offsets_pk(group), 1000);
    let mut page = first;
    loop {
        for item in page.items {
            offsets.insert(item.key.sk.clone(), (layout::decode("offset", &item.value)?, item.version));
        }
        match page.next {
            Some(after) => query.after = Some(after),
            None => return Ok(offsets),
        }
        page = store.query(&query).await?;
    }
}

fn head_of(heads: &BTreeMap<u64, Vec<(HeadRecord, u64)>>, topic_id: u64, partition: u32) -> HeadRecord {
    heads.get(&topic_id).and_then(|h| h.get(partition as usize)).map(|(h, _)| *h).unwrap_or_default()
}

impl Groups {
    /// The heads of every partition of these topics: one query per topic.
    async fn heads<'a>(
        &self,
        topics: impl Iterator<Item = &'a TopicConfig>,
    ) -> Result<BTreeMap<u64, Vec<(HeadRecord, u64)>>, StorageError> {
        let mut heads = BTreeMap::new();
        for topic in topics {
            if let std::collections::btree_map::Entry::Vacant(slot) = heads.entry(topic.id) {
                slot.insert(topics::heads(self.store(), topic).await?);
            }
        }
        Ok(heads)
    }
}

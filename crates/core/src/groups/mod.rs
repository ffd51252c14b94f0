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
//! index entry mirrors `until` in the same writes, so the janitor ([`expire_step`])
//! finds expired groups with one query, and deletes their offsets in writes that
//! check the activity item: a member joining meanwhile makes them fail.

mod compact;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::layout::{self, HeadRecord};
use crate::log::topics;
use crate::log::Log;
use crate::model::{Event, OffsetQuery, TopicConfig};
use crate::ports::state::{Expect, Key, Query, StateStore, WriteOp, MAX_WRITE_OPS};
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
const ACTIVITY_SK: &str = "active";
const EXPIRY_PK: &str = "goff-expiry";

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

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

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
}

/// When a group was last used: no member's session outlasts `until` (see the module doc).
/// Also the value of the group's entry in the offsets expiry index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityRecord {
    pub until: i64,
}

fn group_pk(group: &str) -> String {
    format!("group#{group}")
}

fn meta_key(group: &str) -> Key {
    Key::new(group_pk(group), "meta")
}

fn member_key(group: &str, member: &str) -> Key {
    Key::new(group_pk(group), format!("member#{member}"))
}

fn activity_key(group: &str) -> Key {
    Key::new(group_pk(group), ACTIVITY_SK)
}

fn expiry_key(until: i64, group: &str) -> Key {
    Key::new(EXPIRY_PK, format!("{:020}#{group}", until.max(0)))
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

fn registry_key(group: &str) -> Key {
    Key::new("groups", group)
}

fn offsets_pk(group: &str) -> String {
    format!("goff#{group}")
}

use crate::groups::compact::tp_key;

fn offset_key(group: &str, topic: &str, partition: u32) -> Key {
    Key::new(offsets_pk(group), tp_key(topic, partition))
}

/// Conditional writes kept losing to other members: the client should retry later.
fn too_busy(group: &str) -> Error {
    Error::Throttled(StorageError::Throttled { message: format!("group '{group}' is changing too fast"), source: None })
}

fn conflict(code: &'static str, message: impl Into<String>) -> Error {
    Error::Conflict { code, message: message.into() }
}

/// What one read of a group's collection found.
struct GroupState {
    record: GroupRecord,
    /// 0 when the group has no record yet.
    version: u64,
    /// Live members (unexpired items) with their item versions and expiry.
    members: BTreeMap<String, (MemberRecord, u64, i64)>,
    /// The activity item and its version, if the group has one.
    activity: Option<(ActivityRecord, u64)>,
}

/// Reads a group's collection: its record, live members and activity.
async fn read_state(store: &dyn StateStore, group: &str) -> Result<GroupState, StorageError> {
    let mut state = GroupState { record: GroupRecord::default(), version: 0, members: BTreeMap::new(), activity: None };
    let mut query = Query::all(group_pk(group), 1000);
    loop {
        let page = store.query(&query).await?;
        for item in page.items {
            if item.key.sk == "meta" {
                state.record = layout::decode("group", &item.value)?;
                state.version = item.version;
            } else if item.key.sk == ACTIVITY_SK {
                state.activity = Some((layout::decode("group activity", &item.value)?, item.version));
            } else if let Some(id) = item.key.sk.strip_prefix("member#") {
                let member: MemberRecord = layout::decode("member", &item.value)?;
                state.members.insert(id.to_owned(), (member, item.version, item.expires_at_ms.unwrap_or(i64::MAX)));
            }
        }
        match page.next {
            Some(after) => query.after = Some(after),
            None => return Ok(state),
        }
    }
}

/// Consumer groups on a [`Log`].
#[derive(Clone)]
pub struct Groups {
    log: Log,
    config: GroupsConfig,
}

impl Groups {
    /// Groups with the default [`GroupsConfig`].
    pub fn new(log: Log) -> Self {
        Self::with_config(log, GroupsConfig::default())
    }

    pub fn with_config(log: Log, config: GroupsConfig) -> Self {
        Self { log, config }
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
        let mut offsets = BTreeMap::new();
        let mut query = Query::all(offsets_pk(group), 1000);
        loop {
            let page = self.store().query(&query).await?;
            for item in page.items {
                offsets.insert(item.key.sk.clone(), (layout::decode("offset", &item.value)?, item.version));
            }
            match page.next {
                Some(after) => query.after = Some(after),
                None => return Ok(offsets),
            }
        }
    }

    /// Joins or heartbeats, rebalancing if membership changed, then fetches events of the
    /// member's partitions from its positions (waiting up to `wait_ms` for the first).
    pub async fn poll(&self, req: &PollRequest) -> Result<PollAnswer, Error> {
        names::validate("group", &req.group)?;
        if req.topics.is_empty() {
            return Err(Error::invalid("invalid_topics", "a poll names at least one topic"));
        }
        for t in &req.topics {
            names::validate("topic", t)?;
        }
        if let Some(instance) = &req.instance_id {
            names::validate("instance_id", instance)?;
        }
        let session = req.session_timeout_ms.unwrap_or(DEFAULT_SESSION_TIMEOUT_MS);
        if !(MIN_SESSION_TIMEOUT_MS..=MAX_SESSION_TIMEOUT_MS).contains(&session) {
            return Err(Error::invalid(
                "invalid_session_timeout",
                format!("session_timeout_ms must be between {MIN_SESSION_TIMEOUT_MS} and {MAX_SESSION_TIMEOUT_MS}"),
            ));
        }
        let limits = *self.log.limits();
        let max_events = req.max_events.clamp(1, limits.max_read_events);
        let max_bytes = req.max_bytes.clamp(1, limits.max_read_bytes);
        // A member must heartbeat within its session: a long poll never outlasts half of it.
        let wait_ms = req.wait_ms.min(limits.max_wait_ms).min(session / 2);
        let mut subscribed: Vec<String> = req.topics.clone();
        subscribed.sort();
        subscribed.dedup();

        for _ in 0..MAX_ATTEMPTS {
            let mut topics = BTreeMap::new();
            for name in &subscribed {
                topics.insert(name.clone(), topics::live(self.store(), name).await?);
            }
            let state = self.state(&req.group).await?;
            let member_id = match &req.member_id {
                Some(id) if state.members.contains_key(id) => id.clone(),
                Some(id) => {
                    return Err(conflict(
                        "unknown_member",
                        format!(
                        "member '{id}' is not in group '{}' (its session ended): poll without a member_id to rejoin",
                        req.group
                    ),
                    ))
                }
                // A static member (Kafka's `group.instance.id`) always has the same id: a join
                // retried after its answer was lost finds the member it made, not a second one
                // that would hold partitions, unpolled, for a whole session.
                None => match &req.instance_id {
                    Some(instance) => format!("{STATIC_MEMBER_PREFIX}{instance}"),
                    None => format!("{:016x}", self.log.random().next_u64()),
                },
            };
            // The other topics the group reads (other members' subscriptions) count for the assignment too.
            let mut all_topics = topics.clone();
            for (id, (m, _, _)) in &state.members {
                if *id == member_id {
                    continue;
                }
                for name in &m.topics {
                    if !all_topics.contains_key(name) {
                        match topics::live(self.store(), name).await {
                            Ok(t) => {
                                all_topics.insert(name.clone(), t);
                            }
                            Err(Error::TopicNotFound(_)) => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
            let partitions: u32 = all_topics.values().map(|t| t.spec.partitions).sum();
            if partitions > MAX_GROUP_PARTITIONS {
                return Err(Error::invalid(
                    "too_many_partitions",
                    format!("group '{}' would read {partitions} partitions: at most {MAX_GROUP_PARTITIONS}", req.group),
                ));
            }
            let mut subscriptions: BTreeMap<String, Vec<String>> =
                state.members.iter().map(|(id, (m, _, _))| (id.clone(), m.topics.clone())).collect();
            subscriptions.insert(member_id.clone(), subscribed.clone());
            let topic_ids: BTreeMap<String, u64> = all_topics.iter().map(|(n, t)| (n.clone(), t.id)).collect();
            let assignment = assign(&state.record, &subscriptions, &all_topics);
            let rebalance = assignment != state.record.members || topic_ids != state.record.topics;
            let version_after = if rebalance { state.version + 1 } else { state.version };
            let record = if rebalance {
                next_generation(&state.record, version_after, assignment, topic_ids)
            } else {
                state.record.clone()
            };
            let mine = record.members.get(&member_id).cloned().unwrap_or_default();

            // Where to fetch each partition from; nothing is written before this can fail.
            let previous = state.members.get(&member_id).map(|(m, _, _)| m.clone()).unwrap_or_default();
            let mut positions: Vec<(TopicConfig, u32, u64)> = Vec::with_capacity(mine.len());
            let mut auto_commits: Vec<(TopicPartition, u64)> = Vec::new();
            let heads = self.heads(mine.iter().map(|tp| &all_topics[&tp.topic])).await?;
            // Where the member resumes on a partition it keeps, if anywhere but its committed offset.
            // The server's record (what it last sent) counts only if recorded since the partition
            // last changed hands or was seeked. A client's own position (what it received) wins over
            // it: an answer may have been lost. One past the record means the client's position
            // predates a reset it has not seen, and the record stands. A client that sends
            // positions and has none for a partition resumes at the committed offset.
            let kept = |tp: &TopicPartition| {
                let key = tp_key(&tp.topic, tp.partition);
                let trusted_from = record.since.get(&key).copied().unwrap_or(0);
                let head = head_of(&heads, all_topics[&tp.topic].id, tp.partition);
                let sent = previous.positions.get(&key).copied().filter(|_| previous.positions_version >= trusted_from);
                let resume = match &req.positions {
                    None => sent,
                    Some(received) => sent.and_then(|s| received.get(tp).map(|r| (*r).min(s))),
                };
                resume.filter(|p| *p >= head.start)
            };
            // Committed offsets are read only when a poll needs them: a steady member resumes from its positions.
            let offsets = if req.auto_commit || mine.iter().any(|tp| kept(tp).is_none()) {
                self.offsets(&req.group).await?
            } else {
                BTreeMap::new()
            };
            for tp in &mine {
                let topic = &all_topics[&tp.topic];
                let key = tp_key(&tp.topic, tp.partition);
                let kept = kept(tp);
                let head = head_of(&heads, topic.id, tp.partition);
                let committed = offsets
                    .get(&key)
                    .filter(|(o, _)| o.topic_id == topic.id && o.offset >= head.start && o.offset <= head.next)
                    .map(|(o, _)| o.offset);
                if req.auto_commit && !rebalance {
                    if let Some(p) = kept.filter(|p| committed.is_none_or(|c| *p > c)) {
                        auto_commits.push((tp.clone(), p));
                    }
                }
                // Without a usable position or committed offset (none yet, or retention moved the
                // log start past it), the reset policy decides, as Kafka's `auto.offset.reset`.
                let start = match (kept, committed, req.reset) {
                    (Some(p), _, _) => p,
                    (_, Some(c), _) => c,
                    (_, None, ResetPolicy::Earliest) => head.start,
                    (_, None, ResetPolicy::Latest) => head.next,
                    (_, None, ResetPolicy::None) => {
                        // Kafka's OffsetOutOfRange when there was a place to resume from, below the
                        // log start now; its NoOffsetForPartition when there was none.
                        let trusted = previous.positions_version >= record.since.get(&key).copied().unwrap_or(0);
                        let below = previous
                            .positions
                            .get(&key)
                            .copied()
                            .filter(|_| trusted)
                            .or_else(|| {
                                offsets.get(&key).filter(|(o, _)| o.topic_id == topic.id).map(|(o, _)| o.offset)
                            })
                            .filter(|o| *o < head.start);
                        if let Some(offset) = below {
                            return Err(Error::OffsetOutOfRange {
                                offset,
                                log_start_offset: head.start,
                                high_watermark: head.next,
                            });
                        }
                        return Err(Error::invalid(
                            "no_committed_offset",
                            format!(
                                "group '{}' has no usable committed offset for {}/{} and reset is 'none'",
                                req.group, tp.topic, tp.partition
                            ),
                        ));
                    }
                };
                positions.push((topic.clone(), tp.partition, start));
            }

            let expires = self.now() + session as i64;
            let mut member = MemberRecord {
                topics: subscribed.clone(),
                session_timeout_ms: session,
                positions: positions.iter().map(|(t, p, o)| (tp_key(&t.name, *p), *o)).collect(),
                positions_version: version_after,
            };
            // The member item's version as this poll leaves it: every write to it is conditional,
            // so an evicted member's late heartbeat cannot bring it back.
            let mut member_version = state.members.get(&member_id).map_or(0, |(_, v, _)| *v);
            let mut activity = state.activity;
            if rebalance {
                // The new assignment takes effect before anything is fetched under it.
                let mut ops = vec![
                    WriteOp::replace(
                        meta_key(&req.group),
                        layout::encode(&record),
                        (state.version > 0).then_some(state.version),
                    ),
                    WriteOp::Put {
                        key: member_key(&req.group, &member_id),
                        value: layout::encode(&member),
                        expires_at_ms: Some(expires),
                        expect: if member_version == 0 { Expect::Absent } else { Expect::Version(member_version) },
                    },
                ];
                member_version += 1;
                if state.version == 0 {
                    ops.push(WriteOp::Put {
                        key: registry_key(&req.group),
                        value: layout::encode(&RegistryRecord { created_ms: self.now() }),
                        expires_at_ms: None,
                        expect: Expect::Any,
                    });
                }
                let covered = self.cover(&req.group, activity.as_ref(), expires);
                if let Some((cover, _)) = &covered {
                    ops.extend(cover.iter().cloned());
                }
                match self.store().write(ops).await {
                    Ok(()) => {
                        if let Some((_, after)) = covered {
                            activity = Some(after);
                        }
                        tracing::info!(group = %req.group, generation = record.generation, members = record.members.len(), "rebalanced")
                    }
                    Err(StorageError::ConditionFailed { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            } else if !auto_commits.is_empty() {
                let commits: Vec<CommitOffset> = auto_commits
                    .iter()
                    .map(|(tp, o)| CommitOffset {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                        offset: *o,
                        metadata: None,
                    })
                    .collect();
                // Each write carries its two checks, so a member owning many partitions commits in chunks.
                let mut raced = false;
                for chunk in commits.chunks(MAX_COMMIT_OFFSETS) {
                    let written = self
                        .write_commit(&req.group, &state, &member_id, member_version, &all_topics, &offsets, chunk)
                        .await;
                    match written {
                        Ok(()) => {}
                        Err(Error::Conflict { .. }) => {
                            raced = true;
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                }
                if raced {
                    continue;
                }
            }

            let events = self.fetch(&positions, heads, max_events, max_bytes, wait_ms).await?;
            for e in &events {
                member.positions.insert(tp_key(&e.topic, e.event.partition), e.event.offset + 1);
            }
            // An idle poll whose member item already says all this, with more than half its
            // session left, needs no write at all: the common case of a long-polling idle member.
            let unchanged = !rebalance
                && member_version > 0
                && state
                    .members
                    .get(&member_id)
                    .is_some_and(|(m, _, expires)| *m == member && *expires - self.now() > (session / 2) as i64);
            if unchanged {
                return Ok(PollAnswer { member_id, generation: record.generation, assignment: mine, events });
            }
            // The heartbeat: one small item, whatever happened to the group meanwhile (positions
            // recorded under an older group version are simply not trusted by the next poll),
            // and now and then the activity item, when the session outgrows it.
            let expires = self.now() + session as i64;
            let mut attempts = 0;
            loop {
                let mut ops = vec![WriteOp::Put {
                    key: member_key(&req.group, &member_id),
                    value: layout::encode(&member),
                    expires_at_ms: Some(expires),
                    expect: if member_version == 0 { Expect::Absent } else { Expect::Version(member_version) },
                }];
                ops.extend(self.cover(&req.group, activity.as_ref(), expires).into_iter().flat_map(|(ops, _)| ops));
                match self.store().write(ops).await {
                    Ok(()) => break,
                    // The events are answered even when the heartbeat's outcome is unknown (or it
                    // was refused): the member's next poll resumes from its own positions or the
                    // server's, at or before the end of these, so a duplicate is possible and a gap is not.
                    Err(e @ (StorageError::Unavailable { .. } | StorageError::Throttled { .. })) => {
                        tracing::warn!(group = %req.group, member = %member_id, error = %e, "heartbeat not confirmed; answering the poll");
                        break;
                    }
                    // Its session ended while it waited (or it left): the events go to the next owner.
                    Err(StorageError::ConditionFailed { op: 0 }) => {
                        return Err(conflict(
                            "unknown_member",
                            format!("member '{member_id}' was evicted from group '{}' during its poll", req.group),
                        ))
                    }
                    // Another member moved the activity item first: read it again.
                    Err(StorageError::ConditionFailed { .. }) if attempts < MAX_ATTEMPTS => {
                        attempts += 1;
                        activity = match self.store().get(&activity_key(&req.group)).await? {
                            Some(item) => Some((layout::decode("group activity", &item.value)?, item.version)),
                            None => None,
                        };
                    }
                    Err(StorageError::ConditionFailed { .. }) => return Err(too_busy(&req.group)),
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(PollAnswer { member_id, generation: record.generation, assignment: mine, events });
        }
        Err(too_busy(&req.group))
    }

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

    /// Reads up to `max_events` from the positions, waiting up to `wait_ms` for the first
    /// event. The budget goes round the partitions from a random one, so a deep backlog on
    /// one partition cannot starve the others.
    async fn fetch(
        &self,
        positions: &[(TopicConfig, u32, u64)],
        mut heads: BTreeMap<u64, Vec<(HeadRecord, u64)>>,
        max_events: usize,
        max_bytes: usize,
        wait_ms: u64,
    ) -> Result<Vec<GroupEvent>, Error> {
        let mut events = Vec::new();
        if positions.is_empty() {
            // Nothing assigned (more members than partitions): hold the poll rather than spin.
            self.log.clock().sleep(wait_ms).await;
            return Ok(events);
        }
        let first = (self.log.random().next_u64() % positions.len() as u64) as usize;
        for round in 0..2 {
            let (mut events_left, mut bytes_left) = (max_events, max_bytes);
            // The answer's rendering is bounded across partitions (each read bounds only its own).
            let mut rendered_left = self.log.limits().max_response_bytes;
            'partitions: for i in 0..positions.len() {
                let (topic, partition, offset) = &positions[(first + i) % positions.len()];
                if events_left == 0 || bytes_left == 0 {
                    break;
                }
                let head = head_of(&heads, topic.id, *partition);
                if *offset >= head.next || *offset < head.start {
                    continue;
                }
                // Retention may move the log start past the position since the heads were read (the
                // events in between are gone): the partition sits this poll out, and the next one
                // applies the reset policy to it.
                let batch = match self.log.read_at(topic, *partition, *offset, events_left, bytes_left, head).await {
                    Ok(batch) if batch.events.first().is_none_or(|e| e.offset == *offset) => batch,
                    Ok(_) | Err(Error::OffsetOutOfRange { .. }) => continue,
                    Err(e) => return Err(e),
                };
                for e in batch.events {
                    // Like a replay, the first event goes whatever its size; what does not fit
                    // is not answered, and the member's position stays before it.
                    let rendering = crate::log::rendered_size(&e.record) + topic.name.len();
                    if !events.is_empty() && rendering > rendered_left {
                        break 'partitions;
                    }
                    rendered_left = rendered_left.saturating_sub(rendering);
                    events_left -= 1;
                    bytes_left = bytes_left.saturating_sub(e.record.approx_size());
                    events.push(GroupEvent { topic: topic.name.clone(), event: e });
                }
            }
            if !events.is_empty() || wait_ms == 0 || round == 1 {
                break;
            }
            self.log.wait_for_any(positions, wait_ms).await?;
            heads = self.heads(positions.iter().map(|(t, _, _)| t)).await?;
        }
        Ok(events)
    }

    /// Commits offsets for a member, fenced: a stale generation, an unknown (or
    /// evicted) member, or a partition it does not own is refused and nothing moves.
    /// Committed offsets never go backwards (a lower offset is accepted and ignored).
    pub async fn commit(
        &self,
        group: &str,
        member_id: &str,
        generation: u64,
        offsets: &[CommitOffset],
    ) -> Result<(), Error> {
        names::validate("group", group)?;
        if offsets.len() > MAX_COMMIT_OFFSETS {
            return Err(Error::invalid(
                "too_many_offsets",
                format!("one commit carries at most {MAX_COMMIT_OFFSETS} offsets"),
            ));
        }
        for _ in 0..MAX_ATTEMPTS {
            let state = self.state(group).await?;
            if state.version == 0 {
                return Err(Error::GroupNotFound(group.to_owned()));
            }
            let Some((_, member_version, _)) = state.members.get(member_id) else {
                return Err(conflict("unknown_member", format!("member '{member_id}' is not in group '{group}'")));
            };
            if !state.record.members.contains_key(member_id) {
                return Err(conflict("unknown_member", format!("member '{member_id}' is not in group '{group}'")));
            }
            if generation != state.record.generation {
                return Err(conflict(
                    "stale_generation",
                    format!("generation {generation} is stale: group '{group}' is at {}", state.record.generation),
                ));
            }
            let mut topics_read = BTreeMap::new();
            for o in offsets {
                if !topics_read.contains_key(&o.topic) {
                    topics_read.insert(o.topic.clone(), topics::live(self.store(), &o.topic).await?);
                }
            }
            // An offset past the end would freeze the partition's committed offset (they never go back).
            let heads = self.heads(topics_read.values()).await?;
            for o in offsets {
                let Some(topic) = topics_read.get(&o.topic) else { continue };
                let head = head_of(&heads, topic.id, o.partition);
                if o.offset > head.next {
                    return Err(Error::OffsetOutOfRange {
                        offset: o.offset,
                        log_start_offset: head.start,
                        high_watermark: head.next,
                    });
                }
            }
            let current = self.offsets(group).await?;
            match self.write_commit(group, &state, member_id, *member_version, &topics_read, &current, offsets).await {
                Err(Error::Conflict { code: "raced", .. }) => continue,
                other => return other,
            }
        }
        Err(too_busy(group))
    }

    /// One fenced commit write: checks the group version and the member's item, puts the offsets that advance.
    #[allow(clippy::too_many_arguments)]
    async fn write_commit(
        &self,
        group: &str,
        state: &GroupState,
        member_id: &str,
        member_version: u64,
        topics: &BTreeMap<String, TopicConfig>,
        current: &BTreeMap<String, (OffsetRecord, u64)>,
        offsets: &[CommitOffset],
    ) -> Result<(), Error> {
        let owned: BTreeSet<&TopicPartition> = state.record.members.get(member_id).into_iter().flatten().collect();
        let mut ops = vec![
            WriteOp::Check { key: meta_key(group), expect: Expect::Version(state.version) },
            WriteOp::Check { key: member_key(group, member_id), expect: Expect::Version(member_version) },
        ];
        let mut seen = BTreeSet::new();
        for o in offsets {
            let tp = TopicPartition { topic: o.topic.clone(), partition: o.partition };
            if !owned.contains(&tp) {
                return Err(conflict(
                    "not_assigned",
                    format!("{}/{} is not assigned to member '{member_id}' in this generation", o.topic, o.partition),
                ));
            }
            let Some(topic) = topics.get(&o.topic) else { return Err(Error::TopicNotFound(o.topic.clone())) };
            if state.record.topics.get(&o.topic) != Some(&topic.id) {
                // The topic was re-created since this generation's assignment: its offsets mean nothing now.
                return Err(conflict(
                    "stale_generation",
                    format!("topic '{}' was re-created since generation {}", o.topic, state.record.generation),
                ));
            }
            let key = tp_key(&o.topic, o.partition);
            if !seen.insert(key.clone()) {
                return Err(Error::invalid("duplicate_offset", format!("{}/{} appears twice", o.topic, o.partition)));
            }
            let existing = current.get(&key).filter(|(r, _)| r.topic_id == topic.id);
            if existing.is_some_and(|(r, _)| r.offset >= o.offset) {
                continue;
            }
            let record = OffsetRecord { topic_id: topic.id, offset: o.offset, metadata: o.metadata.clone() };
            let expect = current.get(&key).map_or(Expect::Absent, |(_, v)| Expect::Version(*v));
            ops.push(WriteOp::Put {
                key: offset_key(group, &o.topic, o.partition),
                value: layout::encode(&record),
                expires_at_ms: None,
                expect,
            });
        }
        match self.store().write(ops).await {
            Ok(()) => Ok(()),
            Err(StorageError::ConditionFailed { op: 0 | 1 }) => {
                // The group changed or the member's session ended: the caller re-reads and decides.
                Err(conflict("raced", "the group changed during the commit"))
            }
            Err(StorageError::ConditionFailed { .. }) => Err(conflict("raced", "an offset changed during the commit")),
            Err(e) => Err(e.into()),
        }
    }

    /// Leaves the group at once: its partitions are reassigned to the others.
    pub async fn leave(&self, group: &str, member_id: &str) -> Result<(), Error> {
        names::validate("group", group)?;
        for _ in 0..MAX_ATTEMPTS {
            let state = self.state(group).await?;
            if !state.members.contains_key(member_id) && !state.record.members.contains_key(member_id) {
                return Err(conflict("unknown_member", format!("member '{member_id}' is not in group '{group}'")));
            }
            let mut subscriptions: BTreeMap<String, Vec<String>> =
                state.members.iter().map(|(id, (m, _, _))| (id.clone(), m.topics.clone())).collect();
            subscriptions.remove(member_id);
            let mut all_topics = BTreeMap::new();
            for name in subscriptions.values().flatten() {
                if !all_topics.contains_key(name) {
                    if let Ok(t) = topics::live(self.store(), name).await {
                        all_topics.insert(name.clone(), t);
                    }
                }
            }
            let assignment = assign(&state.record, &subscriptions, &all_topics);
            let topic_ids: BTreeMap<String, u64> = all_topics.iter().map(|(n, t)| (n.clone(), t.id)).collect();
            let record = next_generation(&state.record, state.version + 1, assignment, topic_ids);
            let mut ops = vec![
                WriteOp::replace(meta_key(group), layout::encode(&record), Some(state.version).filter(|v| *v > 0)),
                WriteOp::Delete { key: member_key(group, member_id), expect: Expect::Any },
            ];
            // The last member leaving: the group's offsets expire counting from now.
            if state.members.keys().all(|id| id == member_id) {
                let now = self.now();
                let until = state.activity.map_or(now, |(a, _)| a.until.min(now));
                if state.activity.is_none_or(|(a, _)| a.until != until) {
                    ops.extend(activity_ops(group, state.activity.as_ref(), until));
                }
            }
            match self.store().write(ops).await {
                Ok(()) => return Ok(()),
                Err(StorageError::ConditionFailed { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(too_busy(group))
    }

    /// Moves committed offsets (of every partition of `topic`, or only `partitions`) to
    /// `target`; members' next polls continue from there.
    pub async fn seek(
        &self,
        group: &str,
        topic: &str,
        partitions: Option<&[u32]>,
        target: SeekTarget,
    ) -> Result<Vec<(u32, u64)>, Error> {
        names::validate("group", group)?;
        names::validate("topic", topic)?;
        let t = topics::live(self.store(), topic).await?;
        let mut chosen: Vec<u32> = match partitions {
            Some(ps) => ps.to_vec(),
            None => (0..t.spec.partitions).collect(),
        };
        chosen.sort_unstable();
        chosen.dedup();
        if let Some(p) = chosen.iter().find(|p| **p >= t.spec.partitions) {
            return Err(Error::PartitionNotFound { topic: topic.to_owned(), partition: *p });
        }
        let mut moved = Vec::with_capacity(chosen.len());
        for &p in &chosen {
            let (head, _) = topics::head(self.store(), t.id, p).await?;
            let offset = match target {
                SeekTarget::Earliest => head.start,
                SeekTarget::Latest => head.next,
                SeekTarget::Offset(o) => o.clamp(head.start, head.next),
                SeekTarget::Timestamp(ts) => self.log.offset_of(&t, p, OffsetQuery::Timestamp(ts)).await?,
            };
            moved.push((p, offset));
        }
        // Each write moves a chunk of offsets and bumps the group record together: a commit that
        // read the group before fails its check, so no commit can undo the seek, and commits of
        // progress made before it carry a generation that is now stale. Members' next polls
        // resume from the new offsets (their positions predate the partitions' `since`).
        for chunk in moved.chunks(SEEK_OFFSETS_PER_WRITE) {
            let mut done = false;
            for _ in 0..MAX_ATTEMPTS {
                let state = self.state(group).await?;
                let mut record = state.record.clone();
                record.generation += 1;
                for &(p, _) in chunk {
                    record.since.insert(tp_key(topic, p), state.version + 1);
                }
                let mut ops = vec![WriteOp::replace(
                    meta_key(group),
                    layout::encode(&record),
                    Some(state.version).filter(|v| *v > 0),
                )];
                // A seek uses the group: its offsets expire counting from now at the earliest.
                let now = self.now();
                if state.activity.is_none_or(|(a, _)| a.until < now) {
                    ops.extend(activity_ops(group, state.activity.as_ref(), now));
                }
                if state.version == 0 {
                    ops.push(WriteOp::Put {
                        key: registry_key(group),
                        value: layout::encode(&RegistryRecord { created_ms: self.now() }),
                        expires_at_ms: None,
                        expect: Expect::Any,
                    });
                }
                ops.extend(chunk.iter().map(|&(p, offset)| WriteOp::Put {
                    key: offset_key(group, topic, p),
                    value: layout::encode(&OffsetRecord { topic_id: t.id, offset, metadata: None }),
                    expires_at_ms: None,
                    expect: Expect::Any,
                }));
                match self.store().write(ops).await {
                    Ok(()) => {
                        done = true;
                        break;
                    }
                    Err(StorageError::ConditionFailed { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if !done {
                return Err(too_busy(group));
            }
        }
        Ok(moved)
    }

    /// Every group, by name.
    pub async fn list(&self) -> Result<Vec<String>, Error> {
        let mut names = Vec::new();
        let mut query = Query::all("groups", 1000);
        loop {
            let page = self.store().query(&query).await?;
            names.extend(page.items.into_iter().map(|i| i.key.sk));
            match page.next {
                Some(after) => query.after = Some(after),
                None => return Ok(names),
            }
        }
    }

    /// Members, assignment, generation, and per partition committed offset, high watermark and lag.
    pub async fn describe(&self, group: &str) -> Result<GroupDescription, Error> {
        names::validate("group", group)?;
        let state = self.state(group).await?;
        let offsets = self.offsets(group).await?;
        if state.version == 0 && offsets.is_empty() {
            return Err(Error::GroupNotFound(group.to_owned()));
        }
        let members = state
            .members
            .iter()
            .map(|(id, (m, _, expires))| MemberDescription {
                member_id: id.clone(),
                assignment: state.record.members.get(id).cloned().unwrap_or_default(),
                session_timeout_ms: m.session_timeout_ms,
                expires_at_ms: *expires,
            })
            .collect();
        let mut names: BTreeSet<String> = state.record.topics.keys().cloned().collect();
        for key in offsets.keys() {
            if let Some((topic, _)) = key.rsplit_once('#') {
                names.insert(topic.to_owned());
            }
        }
        let owners: BTreeMap<&TopicPartition, &String> =
            state.record.members.iter().flat_map(|(id, parts)| parts.iter().map(move |tp| (tp, id))).collect();
        let mut partitions = Vec::new();
        for name in names {
            let Ok(topic) = topics::live(self.store(), &name).await else { continue };
            for (p, (head, _)) in topics::heads(self.store(), &topic).await?.into_iter().enumerate() {
                let p = p as u32;
                let committed = offsets.get(&tp_key(&name, p)).filter(|(o, _)| o.topic_id == topic.id);
                let from = committed.map_or(head.start, |(o, _)| o.offset.max(head.start));
                let tp = TopicPartition { topic: name.clone(), partition: p };
                partitions.push(PartitionLag {
                    committed: committed.map(|(o, _)| o.offset),
                    metadata: committed.and_then(|(o, _)| o.metadata.clone()),
                    log_start_offset: head.start,
                    high_watermark: head.next,
                    lag: head.next.saturating_sub(from),
                    owner: owners.get(&tp).map(|id| (*id).clone()),
                    topic: name.clone(),
                    partition: p,
                });
            }
        }
        let offsets_expire_at_ms = state
            .activity
            .filter(|_| state.members.is_empty())
            .map(|(a, _)| a.until.saturating_add(self.config.offsets_retention_ms));
        Ok(GroupDescription {
            group: group.to_owned(),
            generation: state.record.generation,
            members,
            partitions,
            offsets_expire_at_ms,
        })
    }

    /// Deletes a group with no live members: its record, offsets and registry entry.
    ///
    /// Every deletion is conditional on the version read, so a member that joins (or commits)
    /// meanwhile is never erased. The first write removes the record, registry entry and
    /// activity with as many offsets as fit, atomically: a join before it makes it fail whole
    /// (`group_not_empty`). Offsets past the first write's room go after it, each at the
    /// version read; one a new incarnation of the group committed over stays.
    pub async fn delete(&self, group: &str) -> Result<(), Error> {
        names::validate("group", group)?;
        for _ in 0..MAX_ATTEMPTS {
            let state = self.state(group).await?;
            let offsets = self.offsets(group).await?;
            if state.version == 0 && offsets.is_empty() {
                return Err(Error::GroupNotFound(group.to_owned()));
            }
            if !state.members.is_empty() {
                return Err(conflict(
                    "group_not_empty",
                    format!("group '{group}' has live members: they must leave first"),
                ));
            }
            let registry = self.store().get(&registry_key(group)).await?.map(|i| i.version);
            let at = |key: Key, version: Option<u64>| match version {
                Some(v) => WriteOp::Delete { key, expect: Expect::Version(v) },
                None => WriteOp::Check { key, expect: Expect::Absent },
            };
            let mut ops = vec![
                at(meta_key(group), Some(state.version).filter(|v| *v > 0)),
                at(registry_key(group), registry),
                at(activity_key(group), state.activity.map(|(_, v)| v)),
            ];
            if let Some((a, _)) = state.activity {
                ops.push(WriteOp::Delete { key: expiry_key(a.until, group), expect: Expect::Any });
            }
            let mut offset_ops =
                offsets.iter().map(|(sk, (_, v))| at(Key::new(offsets_pk(group), sk.clone()), Some(*v)));
            let room = MAX_WRITE_OPS - ops.len();
            ops.extend(offset_ops.by_ref().take(room));
            match self.store().write(ops).await {
                Ok(()) => {}
                // A member joined, committed or sought meanwhile: look again.
                Err(StorageError::ConditionFailed { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
            let rest: Vec<WriteOp> = offset_ops.collect();
            for chunk in rest.chunks(MAX_WRITE_OPS) {
                self.delete_unchanged(chunk.to_vec()).await?;
            }
            return Ok(());
        }
        Err(too_busy(group))
    }

    /// Applies conditional deletes, leaving out each one whose item changed since it was read.
    async fn delete_unchanged(&self, mut ops: Vec<WriteOp>) -> Result<(), Error> {
        while !ops.is_empty() {
            match self.store().write(ops.clone()).await {
                Ok(()) => return Ok(()),
                Err(StorageError::ConditionFailed { op }) if op < ops.len() => {
                    ops.remove(op);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// The janitor's step of offsets expiry: removes the offsets, record, registry entry and
/// activity of groups without members whose activity ended `retention_ms` before
/// `now_ms`, deleting at most about `budget` items; answers how many it deleted.
///
/// One query when nothing is expired (the index is in time order). Resumable: a group's
/// index entry goes last, so a step cut short leaves it for the next one. Safe against
/// a member joining meanwhile: every deletion checks the activity item's version, which
/// any join (and seek) of an expired group changes.
pub(crate) async fn expire_step(
    store: &dyn StateStore,
    now_ms: i64,
    retention_ms: i64,
    budget: usize,
) -> Result<usize, StorageError> {
    let threshold = now_ms.saturating_sub(retention_ms.max(0));
    if threshold < 0 {
        return Ok(0);
    }
    let query = Query {
        pk: EXPIRY_PK.to_owned(),
        from: None,
        // Every entry of a time up to the threshold ('$' sorts right after '#').
        to: Some(format!("{threshold:020}$")),
        forward: true,
        limit: EXPIRY_ENTRIES_PER_STEP,
        after: None,
    };
    let mut left = budget.max(1);
    let mut deleted = 0;
    for entry in store.query(&query).await?.items {
        if left == 0 {
            break;
        }
        let parsed = entry.key.sk.split_once('#').and_then(|(t, g)| Some((t.parse::<i64>().ok()?, g.to_owned())));
        let Some((until, group)) = parsed else {
            return Err(StorageError::Corrupt(format!("offsets expiry entry {:?}", entry.key.sk)));
        };
        let state = read_state(store, &group).await?;
        let Some((_, version)) = state.activity.filter(|(a, _)| expiry_key(a.until, &group) == entry.key) else {
            // Left over by a deleted group: its activity is gone or has an entry of its own.
            match store.write(vec![WriteOp::Delete { key: entry.key, expect: Expect::Version(entry.version) }]).await {
                Ok(()) => {
                    deleted += 1;
                    left -= 1;
                }
                Err(StorageError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
            continue;
        };
        if let Some(latest) = state.members.values().map(|(_, _, expires)| *expires).max() {
            // A live member the activity does not cover (never written so): cover it.
            let ops = activity_ops(&group, state.activity.as_ref(), latest.max(until));
            match store.write(ops).await {
                Ok(()) | Err(StorageError::ConditionFailed { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        // The offsets, a write's worth at a time, each write checking that nobody used the group.
        let mut finished = true;
        loop {
            if left == 0 {
                finished = false;
                break;
            }
            let page = store.query(&Query::all(offsets_pk(&group), left.min(MAX_WRITE_OPS - 1))).await?;
            if page.items.is_empty() {
                break;
            }
            let n = page.items.len();
            let mut ops = vec![WriteOp::Check { key: activity_key(&group), expect: Expect::Version(version) }];
            ops.extend(page.items.into_iter().map(|i| WriteOp::Delete { key: i.key, expect: Expect::Any }));
            match store.write(ops).await {
                Ok(()) => {
                    deleted += n;
                    left = left.saturating_sub(n);
                }
                // Used meanwhile: the next step finds its entry moved (or deletes what is left).
                Err(StorageError::ConditionFailed { .. }) => {
                    finished = false;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if !finished {
            continue;
        }
        let mut ops = vec![
            WriteOp::Delete { key: activity_key(&group), expect: Expect::Version(version) },
            WriteOp::Delete { key: entry.key, expect: Expect::Any },
            WriteOp::Delete { key: registry_key(&group), expect: Expect::Any },
        ];
        if state.version > 0 {
            ops.push(WriteOp::Delete { key: meta_key(&group), expect: Expect::Version(state.version) });
        }
        let n = ops.len();
        match store.write(ops).await {
            Ok(()) => {
                deleted += n;
                left = left.saturating_sub(n);
                tracing::info!(group = %group, "group offsets expired");
            }
            Err(StorageError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

fn head_of(heads: &BTreeMap<u64, Vec<(HeadRecord, u64)>>, topic_id: u64, partition: u32) -> HeadRecord {
    heads.get(&topic_id).and_then(|h| h.get(partition as usize)).map(|(h, _)| *h).unwrap_or_default()
}

/// Balanced, sticky assignment, per topic over the members subscribed to it: each
/// member keeps what it had of the topic up to the fair share (one more for as many
/// members as the remainder allows), then every partition left goes to the least
/// loaded member, so counts differ by at most one.
/// The group record of a new generation (written at `version_after`): the assignment, the
/// topics' incarnations, and `since` for every partition that changed hands (or whose topic
/// was re-created) now; `since` is kept only for assigned partitions, which are all it is read
/// for, so the record stays bounded by the partitions the group reads.
fn next_generation(
    previous: &GroupRecord,
    version_after: u64,
    assignment: BTreeMap<String, Vec<TopicPartition>>,
    topic_ids: BTreeMap<String, u64>,
) -> GroupRecord {
    let held: BTreeSet<(&String, &TopicPartition)> =
        previous.members.iter().flat_map(|(id, parts)| parts.iter().map(move |tp| (id, tp))).collect();
    let mut since = BTreeMap::new();
    for (id, parts) in &assignment {
        for tp in parts {
            let key = tp_key(&tp.topic, tp.partition);
            let same_topic = previous.topics.get(&tp.topic) == topic_ids.get(&tp.topic);
            let kept = held.contains(&(id, tp)) && same_topic;
            let from = if kept { previous.since.get(&key).copied().unwrap_or(0) } else { version_after };
            since.insert(key, from);
        }
    }
    GroupRecord { generation: previous.generation + 1, members: assignment, topics: topic_ids, since }
}

fn assign(
    previous: &GroupRecord,
    subscriptions: &BTreeMap<String, Vec<String>>,
    topics: &BTreeMap<String, TopicConfig>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut result: BTreeMap<String, Vec<TopicPartition>> =
        subscriptions.keys().map(|id| (id.clone(), Vec::new())).collect();
    for (name, topic) in topics {
        let eligible: Vec<&String> =
            subscriptions.iter().filter(|(_, ts)| ts.contains(name)).map(|(id, _)| id).collect();
        if eligible.is_empty() {
            continue;
        }
        let n = topic.spec.partitions as usize;
        let fair = n / eligible.len();
        let same_incarnation = previous.topics.get(name) == Some(&topic.id);
        let mut owner: Vec<Option<&String>> = vec![None; n];
        let mut counts: BTreeMap<&String, usize> = eligible.iter().map(|id| (*id, 0)).collect();
        // Up to the fair share first, then one more for as many members as the remainder allows.
        let mut extra = n % eligible.len();
        for pass in 0..2 {
            for id in &eligible {
                let Some(old) = previous.members.get(*id).filter(|_| same_incarnation) else { continue };
                for tp in old.iter().filter(|tp| &tp.topic == name && (tp.partition as usize) < n) {
                    let count = counts.entry(id).or_default();
                    let room = if pass == 0 { *count < fair } else { *count == fair && extra > 0 };
                    if room && owner[tp.partition as usize].is_none() {
                        owner[tp.partition as usize] = Some(id);
                        *count += 1;
                        if pass == 1 {
                            extra -= 1;
                        }
                    }
                }
            }
        }
        for slot in owner.iter_mut().filter(|o| o.is_none()) {
            if let Some((id, count)) = counts.iter_mut().min_by_key(|(id, count)| (**count, **id)) {
                *slot = Some(id);
                *count += 1;
            }
        }
        for (p, id) in owner.into_iter().enumerate() {
            if let Some(parts) = id.and_then(|id| result.get_mut(id)) {
                parts.push(TopicPartition { topic: name.clone(), partition: p as u32 });
            }
        }
    }
    for parts in result.values_mut() {
        parts.sort();
    }
    result
}

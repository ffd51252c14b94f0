//! A poll's decisions, apart from its reads and writes: the limits it runs under, the
//! member's id, the generation it joins (rebalancing when membership or topics changed),
//! where the member resumes on each partition, and what `auto_commit` commits. Pure: the
//! shell in `poll.rs` reads the group, topics, heads and offsets, and writes what these say.

use super::membership::{assignment, next_generation};
use super::*;
use crate::model::Limits;
use crate::Code;

/// The bounds one poll runs under, from its request and the log's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PollBounds {
    pub session: u64,
    pub max_events: usize,
    pub max_bytes: usize,
    pub wait_ms: u64,
    /// The topics the member subscribes to, sorted, once each.
    pub subscribed: Vec<String>,
}

/// Checks a poll request and the bounds it runs under; nothing is read or written first.
pub(super) fn bounds(req: &PollRequest, limits: &Limits) -> Result<PollBounds, Error> {
    limits.check_read((req.max_events, "max_events", Code::InvalidMaxEvents), req.max_bytes, req.wait_ms)?;
    names::validate("group", &req.group)?;
    if req.topics.is_empty() {
        return Err(Error::invalid(Code::InvalidTopics, "a poll names at least one topic"));
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
            Code::InvalidSessionTimeout,
            format!("session_timeout_ms must be between {MIN_SESSION_TIMEOUT_MS} and {MAX_SESSION_TIMEOUT_MS}"),
        ));
    }
    let mut subscribed: Vec<String> = req.topics.clone();
    subscribed.sort();
    subscribed.dedup();
    Ok(PollBounds {
        session,
        max_events: req.max_events,
        max_bytes: req.max_bytes,
        // A member must heartbeat within its session: a long poll never outlasts half of it.
        wait_ms: req.wait_ms.min(session / 2),
        subscribed,
    })
}

/// The member's id: the one it sent, if still a member; a static member's own (Kafka's
/// `group.instance.id`: a join retried after its answer was lost finds the member it made,
/// not a second one that would hold partitions, unpolled, for a whole session); else a
/// fresh one from `random`.
pub(super) fn member_id(req: &PollRequest, state: &GroupState, random: impl FnOnce() -> u64) -> Result<String, Error> {
    match &req.member_id {
        Some(id) if state.members.contains_key(id) => Ok(id.clone()),
        Some(id) => Err(conflict(
            Code::UnknownMember,
            format!(
                "member '{id}' is not in group '{}' (its session ended): poll without a member_id to rejoin",
                req.group
            ),
        )),
        None => Ok(match &req.instance_id {
            Some(instance) => format!("{STATIC_MEMBER_PREFIX}{instance}"),
            None => format!("{:016x}", random()),
        }),
    }
}

/// The generation a poll leaves the group in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Generation {
    pub record: GroupRecord,
    /// The record changes (membership or a topic's incarnation did): written at `version_after`.
    pub rebalance: bool,
    pub version_after: u64,
    /// The member's partitions in it.
    pub mine: Vec<TopicPartition>,
}

/// The assignment with `member_id` subscribed to `subscribed` among the live members, over
/// every topic the group reads (`all_topics`): the current generation if nothing changed,
/// else the next one. A group reads at most [`MAX_GROUP_PARTITIONS`] partitions.
pub(super) fn generation(
    group: &str,
    state: &GroupState,
    member_id: &str,
    subscribed: &[String],
    all_topics: &BTreeMap<String, TopicConfig>,
) -> Result<Generation, Error> {
    let partitions: u32 = all_topics.values().map(|t| t.spec.partitions).sum();
    if partitions > MAX_GROUP_PARTITIONS {
        return Err(Error::invalid(
            Code::TooManyPartitions,
            format!("group '{group}' would read {partitions} partitions: at most {MAX_GROUP_PARTITIONS}"),
        ));
    }
    let mut subscriptions: BTreeMap<String, Vec<String>> =
        state.members.iter().map(|(id, (m, _, _))| (id.clone(), m.topics.clone())).collect();
    subscriptions.insert(member_id.to_owned(), subscribed.to_vec());
    let (assignment, topic_ids) = assignment(&state.record, &subscriptions, all_topics);
    let rebalance = assignment != state.record.members || topic_ids != state.record.topics;
    let version_after = if rebalance { state.version + 1 } else { state.version };
    let record = if rebalance {
        next_generation(&state.record, version_after, assignment, topic_ids)
    } else {
        state.record.clone()
    };
    let mine = record.members.get(member_id).cloned().unwrap_or_default();
    Ok(Generation { record, rebalance, version_after, mine })
}

/// What a poll knows when it decides where its member resumes.
pub(super) struct Resume<'a> {
    pub req: &'a PollRequest,
    pub generation: &'a Generation,
    /// The member's item as the poll read it (default for a new member).
    pub previous: &'a MemberRecord,
    pub heads: &'a BTreeMap<u64, Vec<(HeadRecord, u64)>>,
    pub all_topics: &'a BTreeMap<String, TopicConfig>,
}

impl Resume<'_> {
    /// Where the member resumes on a partition it keeps, if anywhere but its committed
    /// offset. The server's record (what it last sent) counts only if recorded since the
    /// partition last changed hands or was seeked. A client's own position (what it
    /// received) wins over it: an answer may have been lost. One past the record means the
    /// client's position predates a reset it has not seen, and the record stands. A client
    /// that sends positions and has none for a partition resumes at the committed offset.
    pub fn kept(&self, tp: &TopicPartition) -> Option<u64> {
        let key = tp_key(&tp.topic, tp.partition);
        let trusted_from = self.generation.record.since.get(&key).copied().unwrap_or(0);
        let head = head_of(self.heads, self.all_topics[&tp.topic].id, tp.partition);
        let sent =
            self.previous.positions.get(&key).copied().filter(|_| self.previous.positions_version >= trusted_from);
        let resume = match &self.req.positions {
            None => sent,
            Some(received) => sent.and_then(|s| received.get(tp).map(|r| (*r).min(s))),
        };
        resume.filter(|p| *p >= head.start)
    }

    /// Whether the committed offsets are needed: a steady member resumes from its positions.
    pub fn needs_offsets(&self) -> bool {
        self.req.auto_commit || self.generation.mine.iter().any(|tp| self.kept(tp).is_none())
    }

    /// Where the member fetches each of its partitions from, and what `auto_commit`
    /// commits (the positions the request carries past the committed offsets; nothing in
    /// a rebalance). Without a usable position or committed offset (none yet, or retention
    /// moved the log start past it), the reset policy decides, as Kafka's `auto.offset.reset`.
    #[allow(clippy::type_complexity)]
    pub fn starts(
        &self,
        offsets: &BTreeMap<String, (OffsetRecord, u64)>,
    ) -> Result<(Vec<(TopicConfig, u32, u64)>, Vec<(TopicPartition, u64)>), Error> {
        let mut positions = Vec::with_capacity(self.generation.mine.len());
        let mut auto_commits = Vec::new();
        for tp in &self.generation.mine {
            let topic = &self.all_topics[&tp.topic];
            let key = tp_key(&tp.topic, tp.partition);
            let kept = self.kept(tp);
            let head = head_of(self.heads, topic.id, tp.partition);
            let record = &self.generation.record;
            let committed = offsets
                .get(&key)
                .filter(|(o, _)| o.counts(topic.id, record) && o.offset >= head.start && o.offset <= head.next)
                .map(|(o, _)| o.offset);
            if self.req.auto_commit && !self.generation.rebalance {
                if let Some(p) = kept.filter(|p| committed.is_none_or(|c| *p > c)) {
                    auto_commits.push((tp.clone(), p));
                }
            }
            let start = match (kept, committed, self.req.reset) {
                (Some(p), _, _) => p,
                (_, Some(c), _) => c,
                (_, None, ResetPolicy::Earliest) => head.start,
                (_, None, ResetPolicy::Latest) => head.next,
                (_, None, ResetPolicy::None) => return Err(self.no_reset(tp, topic, head, offsets)),
            };
            positions.push((topic.clone(), tp.partition, start));
        }
        Ok((positions, auto_commits))
    }

    /// Reset `none` with nothing to resume from: Kafka's OffsetOutOfRange when there was a
    /// place to resume from, below the log start now; its NoOffsetForPartition when there
    /// was none.
    fn no_reset(
        &self,
        tp: &TopicPartition,
        topic: &TopicConfig,
        head: HeadRecord,
        offsets: &BTreeMap<String, (OffsetRecord, u64)>,
    ) -> Error {
        let key = tp_key(&tp.topic, tp.partition);
        let trusted = self.previous.positions_version >= self.generation.record.since.get(&key).copied().unwrap_or(0);
        let below = self
            .previous
            .positions
            .get(&key)
            .copied()
            .filter(|_| trusted)
            .or_else(|| {
                offsets.get(&key).filter(|(o, _)| o.counts(topic.id, &self.generation.record)).map(|(o, _)| o.offset)
            })
            .filter(|o| *o < head.start);
        if let Some(offset) = below {
            return Error::OffsetOutOfRange { offset, log_start_offset: head.start, high_watermark: head.next };
        }
        Error::invalid(
            Code::NoCommittedOffset,
            format!(
                "group '{}' has no usable committed offset for {}/{} and reset is 'none'",
                self.req.group, tp.topic, tp.partition
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TopicSpec;

    fn topic(name: &str, id: u64, partitions: u32) -> TopicConfig {
        let spec = TopicSpec { partitions, retention_ms: None, retention_bytes: None };
        TopicConfig { name: name.into(), id, spec, created_ms: 0, version: 1 }
    }

    fn request(positions: Option<&[(u32, u64)]>, auto_commit: bool, reset: ResetPolicy) -> PollRequest {
        PollRequest {
            group: "g".into(),
            member_id: Some("m".into()),
            topics: vec!["t".into()],
            max_events: 10,
            max_bytes: 1 << 20,
            wait_ms: 0,
            reset,
            session_timeout_ms: None,
            auto_commit,
            positions: positions
                .map(|ps| ps.iter().map(|&(p, o)| (TopicPartition { topic: "t".into(), partition: p }, o)).collect()),
            instance_id: None,
        }
    }

    fn head(start: u64, next: u64) -> (HeadRecord, u64) {
        (HeadRecord { next, start, ..HeadRecord::default() }, 1)
    }

    /// Member `m` owns partition 0 of `t` (id 1), whose log is `start..next`; its item says
    /// it was last sent up to `sent` (recorded at group version `recorded`); the partition
    /// changed hands at version `since`.
    struct World {
        generation: Generation,
        previous: MemberRecord,
        heads: BTreeMap<u64, Vec<(HeadRecord, u64)>>,
        all_topics: BTreeMap<String, TopicConfig>,
    }

    fn world(start: u64, next: u64, sent: Option<u64>, recorded: u64, since: u64) -> World {
        let tp = TopicPartition { topic: "t".into(), partition: 0 };
        let mut record = GroupRecord::default();
        record.members.insert("m".into(), vec![tp.clone()]);
        record.since.insert(tp_key("t", 0), since);
        let generation = Generation { record, rebalance: false, version_after: 5, mine: vec![tp] };
        let previous = MemberRecord {
            positions: sent.map(|s| (tp_key("t", 0), s)).into_iter().collect(),
            positions_version: recorded,
            ..MemberRecord::default()
        };
        World {
            generation,
            previous,
            heads: BTreeMap::from([(1, vec![head(start, next)])]),
            all_topics: BTreeMap::from([("t".to_owned(), topic("t", 1, 1))]),
        }
    }

    fn committed(offset: u64) -> BTreeMap<String, (OffsetRecord, u64)> {
        let record = OffsetRecord { topic_id: 1, offset, metadata: None, group_version: 1 };
        BTreeMap::from([(tp_key("t", 0), (record, 1))])
    }

    /// Table: (case, the world, the request's positions, auto_commit, reset, committed) →
    /// (where the member starts, what auto_commit commits).
    #[test]
    fn where_a_member_resumes_and_what_auto_commit_commits() {
        type Case = (&'static str, World, Option<&'static [(u32, u64)]>, bool, Option<u64>, u64, Option<u64>);
        let cases: Vec<Case> = vec![
            (
                "the server's record, trusted, with no positions sent",
                world(0, 100, Some(40), 5, 3),
                None,
                false,
                Some(10),
                40,
                None,
            ),
            (
                "a record older than the hand-over: the committed offset",
                world(0, 100, Some(40), 2, 3),
                None,
                false,
                Some(10),
                10,
                None,
            ),
            (
                "the client's position wins (a lost answer)",
                world(0, 100, Some(40), 5, 3),
                Some(&[(0, 30)]),
                false,
                Some(10),
                30,
                None,
            ),
            (
                "a position past the record predates a reset: the record",
                world(0, 100, Some(40), 5, 3),
                Some(&[(0, 45)]),
                false,
                Some(10),
                40,
                None,
            ),
            (
                "positions sent, none for the partition: committed",
                world(0, 100, Some(40), 5, 3),
                Some(&[]),
                false,
                Some(10),
                10,
                None,
            ),
            (
                "auto_commit commits what the request carries",
                world(0, 100, Some(40), 5, 3),
                Some(&[(0, 30)]),
                true,
                Some(10),
                30,
                Some(30),
            ),
            (
                "auto_commit never moves a commit back",
                world(0, 100, Some(40), 5, 3),
                Some(&[(0, 30)]),
                true,
                Some(35),
                30,
                None,
            ),
            (
                "a position below the log start: the committed offset",
                world(50, 100, Some(40), 5, 3),
                None,
                false,
                Some(60),
                60,
                None,
            ),
            ("nothing to resume from: earliest", world(20, 100, None, 0, 0), None, false, None, 20, None),
        ];
        for (name, w, positions, auto_commit, commit, start, auto) in cases {
            let req = request(positions, auto_commit, ResetPolicy::Earliest);
            let r = Resume {
                req: &req,
                generation: &w.generation,
                previous: &w.previous,
                heads: &w.heads,
                all_topics: &w.all_topics,
            };
            let offsets = commit.map(committed).unwrap_or_default();
            let (starts, commits) = r.starts(&offsets).unwrap();
            assert_eq!(starts.iter().map(|(_, _, o)| *o).collect::<Vec<_>>(), vec![start], "{name}");
            assert_eq!(commits.first().map(|(_, o)| *o), auto, "{name}");
        }
    }

    #[test]
    fn reset_none_tells_a_position_lost_to_retention_from_none_at_all() {
        let w = world(50, 100, Some(40), 5, 3);
        let req = request(None, false, ResetPolicy::None);
        let r = Resume {
            req: &req,
            generation: &w.generation,
            previous: &w.previous,
            heads: &w.heads,
            all_topics: &w.all_topics,
        };
        assert!(matches!(r.starts(&BTreeMap::new()), Err(Error::OffsetOutOfRange { offset: 40, .. })));
        let w = world(0, 100, None, 0, 0);
        let r = Resume {
            req: &req,
            generation: &w.generation,
            previous: &w.previous,
            heads: &w.heads,
            all_topics: &w.all_topics,
        };
        assert!(matches!(r.starts(&BTreeMap::new()), Err(Error::Invalid { code: Code::NoCommittedOffset, .. })));
    }

    #[test]
    fn an_offset_of_a_deleted_incarnation_of_the_group_is_not_resumed_from() {
        // A delete left a tombstone at version 7; a member joins over it.
        let topics = BTreeMap::from([("t".to_owned(), topic("t", 1, 1))]);
        let tombstone = GroupRecord { offsets_from: 7, ..GroupRecord::default() };
        let state = GroupState { record: tombstone, version: 7, members: BTreeMap::new(), activity: None };
        assert!(state.unborn());
        let g = generation("g", &state, "m", &["t".into()], &topics).unwrap();
        assert_eq!((g.record.generation, g.record.offsets_from, g.version_after), (1, 7, 8));
        let w = world(0, 100, None, 0, 0);
        let req = request(None, false, ResetPolicy::Earliest);
        let r = Resume { req: &req, generation: &g, previous: &w.previous, heads: &w.heads, all_topics: &w.all_topics };
        let start = |offsets| r.starts(&offsets).unwrap().0.iter().map(|(_, _, o)| *o).collect::<Vec<_>>();
        let at = |group_version| {
            let record = OffsetRecord { topic_id: 1, offset: 10, metadata: None, group_version };
            BTreeMap::from([(tp_key("t", 0), (record, 1))])
        };
        assert_eq!(start(at(6)), vec![0], "committed before the delete: the reset policy decides");
        assert_eq!(start(at(8)), vec![10], "committed by the new incarnation: resumed from");
    }

    #[test]
    fn a_new_member_rebalances_and_a_steady_one_does_not() {
        let topics = BTreeMap::from([("t".to_owned(), topic("t", 1, 4))]);
        let empty = GroupState { record: GroupRecord::default(), version: 0, members: BTreeMap::new(), activity: None };
        let g = generation("g", &empty, "m", &["t".into()], &topics).unwrap();
        assert!(g.rebalance);
        assert_eq!(g.version_after, 1);
        assert_eq!(g.mine.len(), 4);
        let member = MemberRecord { topics: vec!["t".into()], ..MemberRecord::default() };
        let steady = GroupState {
            record: g.record.clone(),
            version: 1,
            members: BTreeMap::from([("m".to_owned(), (member, 1, i64::MAX))]),
            activity: None,
        };
        let again = generation("g", &steady, "m", &["t".into()], &topics).unwrap();
        assert!(!again.rebalance);
        assert_eq!(again.record, g.record);
        let wide = BTreeMap::from([("t".to_owned(), topic("t", 1, MAX_GROUP_PARTITIONS + 1))]);
        assert!(generation("g", &empty, "m", &["t".into()], &wide).is_err());
    }

    #[test]
    fn member_ids_a_member_a_static_member_and_an_unknown_one() {
        let state = GroupState { record: GroupRecord::default(), version: 0, members: BTreeMap::new(), activity: None };
        let mut req = request(None, false, ResetPolicy::Earliest);
        req.member_id = None;
        assert_eq!(member_id(&req, &state, || 0xab).unwrap(), "00000000000000ab");
        req.instance_id = Some("w1".into());
        assert_eq!(member_id(&req, &state, || 0xab).unwrap(), "i.w1");
        req.member_id = Some("gone".into());
        assert!(matches!(member_id(&req, &state, || 0), Err(Error::Conflict { code: Code::UnknownMember, .. })));
    }

    #[test]
    fn bounds_refuse_what_is_past_the_limits_and_wait_half_the_session() {
        let mut req = request(None, false, ResetPolicy::Earliest);
        req.wait_ms = 20_000;
        req.session_timeout_ms = Some(10_000);
        req.topics = vec!["b".into(), "a".into(), "b".into()];
        let b = bounds(&req, &Limits::default()).unwrap();
        assert_eq!(b.wait_ms, 5_000);
        assert_eq!(b.subscribed, vec!["a".to_owned(), "b".to_owned()]);
        let code = |req: &PollRequest| match bounds(req, &Limits::default()) {
            Err(Error::Invalid { code, .. }) => Some(code),
            _ => None,
        };
        assert_eq!(
            code(&PollRequest { session_timeout_ms: Some(1), ..req.clone() }),
            Some(Code::InvalidSessionTimeout)
        );
        assert_eq!(code(&PollRequest { wait_ms: 20_001, ..req.clone() }), Some(Code::InvalidWait));
        assert_eq!(code(&PollRequest { max_events: 0, ..req.clone() }), Some(Code::InvalidMaxEvents));
        assert_eq!(code(&PollRequest { max_events: 10_001, ..req.clone() }), Some(Code::InvalidMaxEvents));
        assert_eq!(code(&PollRequest { max_bytes: (6 << 20) + 1, ..req.clone() }), Some(Code::InvalidMaxBytes));
    }
}

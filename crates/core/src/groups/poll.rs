//! A poll: join or heartbeat, rebalance when membership changed, then fetch from the
//! member's positions (its own, sent with the request, win over the server's record).

use super::commit::commit_ops;
use super::plan;
use super::read;
use super::*;
use crate::log::index::decode_segments;
use crate::Code;

/// The most offsets a poll's auto-commit carries in its heartbeat's write: what one write
/// holds besides the member's item, the activity items (up to 3) and the group's check.
const MAX_RIDING_OFFSETS: usize = MAX_WRITE_OPS - 5;

/// The polling member as its writes see it: its group, its id, and its item's version as
/// this poll leaves it (every write to the item is conditional on it, so an evicted
/// member's late heartbeat cannot bring it back).
struct Seat<'a> {
    group: &'a str,
    id: &'a str,
    version: u64,
}

impl Groups {
    /// Joins or heartbeats, rebalancing if membership changed, then fetches events of the
    /// member's partitions from its positions (waiting up to `wait_ms` for the first). The
    /// decisions are `plan.rs`'s; this reads what they need and writes what they answer.
    pub async fn poll(&self, req: &PollRequest) -> Result<PollAnswer, Error> {
        let bounds = plan::bounds(req, self.log.limits())?;
        let names: Vec<&str> = bounds.subscribed.iter().map(String::as_str).collect();
        for _ in 0..MAX_ATTEMPTS {
            // The topics, the group and, if cheap, the heads and the index: one batch.
            let read::Batch { topics, state, mut heads, index, .. } = self.poll_batch(req, &names).await?;
            if let Some(name) = names.iter().find(|name| !topics.contains_key(**name)) {
                return Err(Error::TopicNotFound((*name).to_owned()));
            }
            let member_id = plan::member_id(req, &state, || self.log.random().next_u64())?;
            let all_topics = self.group_topics(&state, &member_id, topics).await?;
            let generation = plan::generation(&req.group, &state, &member_id, &bounds.subscribed, &all_topics)?;
            // Where to fetch each partition from; nothing is written before this can fail.
            let previous = state.members.get(&member_id).map(|(m, _, _)| m.clone()).unwrap_or_default();
            self.heads_of_mine(&mut heads, &generation.mine, &all_topics).await?;
            let resume = plan::Resume {
                req,
                generation: &generation,
                previous: &previous,
                heads: &heads,
                all_topics: &all_topics,
            };
            // Committed offsets are read only when a poll needs them.
            let offsets = if resume.needs_offsets() { self.offsets(&req.group).await? } else { BTreeMap::new() };
            let (positions, auto_commits) = resume.starts(&offsets)?;
            let mut member = MemberRecord {
                topics: bounds.subscribed.clone(),
                session_timeout_ms: bounds.session,
                positions: positions.iter().map(|(t, p, o)| (tp_key(&t.name, *p), *o)).collect(),
                positions_version: generation.version_after,
            };
            let mut seat = Seat {
                group: &req.group,
                id: &member_id,
                version: state.members.get(&member_id).map_or(0, |(_, v, _)| *v),
            };
            let mut activity = state.activity;
            // The auto-commit's writes, made with the heartbeat's (one write per cycle) unless
            // they do not fit in it, or the poll waits for events first (`fetch_riding`).
            let mut rider = Vec::new();
            if generation.rebalance {
                match self.rebalance(&seat, &state, &generation, &member, bounds.session).await? {
                    Some(covered) => {
                        seat.version += 1;
                        activity = covered.or(activity);
                    }
                    None => continue,
                }
            } else if !auto_commits.is_empty() {
                match self.auto_commit(&seat, &state, &all_topics, &offsets, &auto_commits).await? {
                    Some(riding) => rider = riding,
                    None => continue,
                }
            }
            let Some(events) = self.fetch_riding(&seat, &positions, (heads, index), &bounds, &mut rider).await? else {
                continue;
            };
            self.fetches.left(&req.group, &member_id, advance(&mut member, &positions, &events));
            // An idle poll whose member item already says all this, with more than half its
            // session left, needs no write at all: the common case of a long-polling idle member.
            let unchanged = !generation.rebalance
                && seat.version > 0
                && state
                    .members
                    .get(&member_id)
                    .is_some_and(|(m, _, expires)| *m == member && *expires - self.now() > (bounds.session / 2) as i64);
            if !unchanged || !rider.is_empty() {
                self.heartbeat(&seat, activity, &member, bounds.session, rider).await?;
            }
            let assignment = generation.mine;
            return Ok(PollAnswer { member_id, generation: generation.record.generation, assignment, events });
        }
        Err(too_busy(&req.group))
    }

    /// Adds the heads of the member's topics (`mine`) that the batch did not read.
    async fn heads_of_mine(
        &self,
        heads: &mut read::HeadsById,
        mine: &[TopicPartition],
        all_topics: &BTreeMap<String, TopicConfig>,
    ) -> Result<(), StorageError> {
        let unread = mine.iter().filter_map(|tp| all_topics.get(&tp.topic)).filter(|t| !heads.contains_key(&t.id));
        let unread: Vec<&TopicConfig> = unread.collect();
        heads.extend(self.heads(unread.into_iter()).await?);
        Ok(())
    }

    /// Every topic the group reads: the member's own (`topics`), and the other members'
    /// subscriptions, which count for the assignment too (a deleted one is left out).
    async fn group_topics(
        &self,
        state: &GroupState,
        member_id: &str,
        mut topics: BTreeMap<String, TopicConfig>,
    ) -> Result<BTreeMap<String, TopicConfig>, Error> {
        for (id, (m, _, _)) in &state.members {
            if id == member_id {
                continue;
            }
            for name in &m.topics {
                if !topics.contains_key(name) {
                    match topics::live(self.store(), name).await {
                        Ok(t) => {
                            topics.insert(name.clone(), t);
                        }
                        Err(Error::TopicNotFound(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(topics)
    }

    /// Writes the next generation, before anything is fetched under it: the record, the
    /// member's item, the registry entry of a new group, the activity item if the session
    /// outgrows it. `None`: another write came first, poll again; else the activity item as
    /// the write left it, if it moved.
    async fn rebalance(
        &self,
        seat: &Seat<'_>,
        state: &GroupState,
        generation: &plan::Generation,
        member: &MemberRecord,
        session: u64,
    ) -> Result<Option<Option<(ActivityRecord, u64)>>, Error> {
        let (group, member_id, member_version) = (seat.group, seat.id, seat.version);
        let expires = self.now() + session as i64;
        let mut ops = vec![
            WriteOp::replace(
                group_meta_key(group),
                layout::encode(&generation.record),
                (state.version > 0).then_some(state.version),
            ),
            WriteOp::Put {
                key: member_key(group, member_id),
                value: layout::encode(member),
                expires_at_ms: Some(expires),
                expect: if member_version == 0 { Expect::Absent } else { Expect::Version(member_version) },
            },
        ];
        if state.unborn() {
            ops.push(WriteOp::Put {
                key: registry_key(group),
                value: layout::encode(&RegistryRecord { created_ms: self.now() }),
                expires_at_ms: None,
                expect: Expect::Any,
            });
        }
        let covered = self.cover(group, state.activity.as_ref(), expires);
        if let Some((cover, _)) = &covered {
            ops.extend(cover.iter().cloned());
        }
        match self.store().write(ops).await {
            Ok(()) => {
                let record = &generation.record;
                tracing::info!(group = %group, generation = record.generation, members = record.members.len(), "rebalanced");
                Ok(Some(covered.map(|(_, after)| after)))
            }
            Err(StorageError::ConditionFailed { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// What `auto_commit` decided: the writes to make with the heartbeat (none if nothing
    /// advances), when they fit in its write; else committed now, in chunks (each write
    /// carries its two checks, so a member owning many partitions commits in several).
    /// `None`: the group moved on meanwhile, poll again.
    async fn auto_commit(
        &self,
        seat: &Seat<'_>,
        state: &GroupState,
        all_topics: &BTreeMap<String, TopicConfig>,
        offsets: &BTreeMap<String, (OffsetRecord, u64)>,
        auto_commits: &[(TopicPartition, u64)],
    ) -> Result<Option<Vec<WriteOp>>, Error> {
        let (group, member_id, member_version) = (seat.group, seat.id, seat.version);
        let commits = as_commits(auto_commits);
        if commits.len() <= MAX_RIDING_OFFSETS {
            return match commit_ops(group, state, member_id, all_topics, offsets, &commits) {
                // Only the group's check: nothing advances.
                Ok(ops) if ops.len() == 1 => Ok(Some(Vec::new())),
                Ok(ops) => Ok(Some(ops)),
                Err(Error::Conflict { .. }) => Ok(None),
                Err(e) => Err(e),
            };
        }
        for chunk in commits.chunks(MAX_COMMIT_OFFSETS) {
            match self.write_commit(group, state, member_id, member_version, all_topics, offsets, chunk).await {
                Ok(Ok(())) => {}
                Ok(Err(super::commit::Raced)) | Err(Error::Conflict { .. }) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(Vec::new()))
    }

    /// Fetches as [`Self::fetch`] does. With a `rider` (an auto-commit to make with the
    /// heartbeat), looks without waiting first: if nothing is there and the poll may wait, the
    /// commit is made on its own before the wait, never held through it. `None`: that commit
    /// lost a race, poll again.
    async fn fetch_riding(
        &self,
        seat: &Seat<'_>,
        positions: &[(TopicConfig, u32, u64)],
        (heads, mut index): (read::HeadsById, read::IndexPages),
        bounds: &plan::PollBounds,
        rider: &mut Vec<WriteOp>,
    ) -> Result<Option<Vec<GroupEvent>>, Error> {
        let (max_events, max_bytes, wait_ms) = (bounds.max_events, bounds.max_bytes, bounds.wait_ms);
        if !rider.is_empty() && wait_ms > 0 {
            let index = std::mem::take(&mut index);
            let events = self.fetch(positions, (heads.clone(), index), max_events, max_bytes, 0).await?;
            if !events.is_empty() {
                return Ok(Some(events));
            }
            let mut ops =
                vec![WriteOp::Check { key: member_key(seat.group, seat.id), expect: Expect::Version(seat.version) }];
            ops.append(rider);
            match self.store().write(ops).await {
                Ok(()) => {}
                Err(StorageError::ConditionFailed { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        self.fetch(positions, (heads, index), max_events, max_bytes, wait_ms).await.map(Some)
    }

    /// The heartbeat: one small item, whatever happened to the group meanwhile (positions
    /// recorded under an older group version are simply not trusted by the next poll), now
    /// and then the activity item, when the session outgrows it, and the auto-commit's
    /// writes riding on it (`rider`), if any: they check the group's version, so if the
    /// group (or an offset) moved on since the poll read it, the heartbeat is made without
    /// them; the member's next poll carries its positions again.
    async fn heartbeat(
        &self,
        seat: &Seat<'_>,
        mut activity: Option<(ActivityRecord, u64)>,
        member: &MemberRecord,
        session: u64,
        mut rider: Vec<WriteOp>,
    ) -> Result<(), Error> {
        let (group, member_id, member_version) = (seat.group, seat.id, seat.version);
        let expires = self.now() + session as i64;
        let mut attempts = 0;
        loop {
            let mut ops = vec![WriteOp::Put {
                key: member_key(group, member_id),
                value: layout::encode(member),
                expires_at_ms: Some(expires),
                expect: if member_version == 0 { Expect::Absent } else { Expect::Version(member_version) },
            }];
            ops.extend(self.cover(group, activity.as_ref(), expires).into_iter().flat_map(|(ops, _)| ops));
            let riding_from = ops.len();
            ops.extend(rider.iter().cloned());
            // The member's item and the auto-commit riding on it are soft: lost to a power
            // cut, the member resumes from older positions (duplicates, never a gap), as
            // Kafka's asynchronous auto-commit may. A join (the item created) and the
            // activity items, which decide when the group expires, are durable first.
            let soft = member_version > 0 && riding_from == 1;
            let written = if soft { self.store().write_deferred(ops).await } else { self.store().write(ops).await };
            match written {
                Ok(()) => return Ok(()),
                // The events are answered even when the heartbeat's outcome is unknown (or it
                // was refused): the member's next poll resumes from its own positions or the
                // server's, at or before the end of these, so a duplicate is possible and a gap is not.
                Err(e @ (StorageError::Unavailable { .. } | StorageError::Throttled { .. })) => {
                    tracing::warn!(group = %group, member = %member_id, error = %e, "heartbeat not confirmed; answering the poll");
                    return Ok(());
                }
                // Its session ended while it waited (or it left): the events go to the next owner.
                Err(StorageError::ConditionFailed { op: 0, .. }) => {
                    return Err(conflict(
                        Code::UnknownMember,
                        format!("member '{member_id}' was evicted from group '{group}' during its poll"),
                    ))
                }
                Err(StorageError::ConditionFailed { op, .. }) if op >= riding_from && !rider.is_empty() => {
                    tracing::debug!(group = %group, member = %member_id, "auto-commit raced; heartbeat alone");
                    rider.clear();
                }
                // Another member moved the activity item first: read it again.
                Err(StorageError::ConditionFailed { .. }) if attempts < MAX_ATTEMPTS => {
                    attempts += 1;
                    activity = match self.store().get(&activity_key(group)).await? {
                        Some(item) => Some((layout::decode("group activity", &item.value)?, item.version)),
                        None => None,
                    };
                }
                Err(StorageError::ConditionFailed { .. }) => return Err(too_busy(group)),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads up to `max_events` from the positions, waiting up to `wait_ms` for the first
    /// event. The budget goes round the partitions from a random one, so a deep backlog on
    /// one partition cannot starve the others. `index`: the batch's index items from where
    /// fetches start (see `read`), for the first look only.
    async fn fetch(
        &self,
        positions: &[(TopicConfig, u32, u64)],
        (mut heads, mut index): (read::HeadsById, read::IndexPages),
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
            // The answer as Lambda carries it is bounded across partitions (each read bounds only
            // its own), its assignment (one entry per position) counted first.
            let assignment: usize = positions.iter().map(|(t, _, _)| crate::page::topic_size(&t.name)).sum();
            let mut carried_left = self.log.limits().max_response_bytes.saturating_sub(assignment);
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
                let first = index.remove(&(topic.id, *partition, *offset)).map(decode_segments).transpose()?;
                let bounds = (events_left, bytes_left);
                let batch = match self.log.read_onward(topic, *partition, *offset, bounds, head, first).await {
                    Ok(batch) if batch.events.first().is_none_or(|e| e.offset == *offset) => batch,
                    Ok(_) | Err(Error::OffsetOutOfRange { .. }) => continue,
                    Err(e) => return Err(e),
                };
                for e in batch.events {
                    // Like a replay, the first event goes whatever its size; what does not fit
                    // is not answered, and the member's position stays before it.
                    let carried = crate::page::event_size(&e.record) + crate::page::topic_size(&topic.name);
                    if !events.is_empty() && carried > carried_left {
                        break 'partitions;
                    }
                    carried_left = carried_left.saturating_sub(carried);
                    events_left -= 1;
                    bytes_left = bytes_left.saturating_sub(e.record.approx_size());
                    events.push(GroupEvent { topic: topic.name.clone(), event: e });
                }
            }
            if !events.is_empty() || wait_ms == 0 || round == 1 {
                break;
            }
            index.clear();
            self.log.wait_for_any(positions, wait_ms).await?;
            heads = self.heads(positions.iter().map(|(t, _, _)| t)).await?;
        }
        Ok(events)
    }
}

/// Moves the member's positions past the events answered (one key formatted per partition
/// that had any) and answers where those partitions fetch next: where the next poll's
/// events most likely are (a partition with nothing now costs its guess for nothing).
fn advance(member: &mut MemberRecord, positions: &[(TopicConfig, u32, u64)], events: &[GroupEvent]) -> Vec<read::At> {
    let mut sent: BTreeMap<(&str, u32), u64> = BTreeMap::new();
    for e in events {
        sent.insert((&e.topic, e.event.partition), e.event.offset + 1);
    }
    let mut next = Vec::with_capacity(sent.len());
    for (topic, partition, _) in positions {
        if let Some(&after) = sent.get(&(topic.name.as_str(), *partition)) {
            member.positions.insert(tp_key(&topic.name, *partition), after);
            next.push((topic.id, *partition, after));
        }
    }
    next
}

/// What an auto-commit commits, as a commit request names it.
fn as_commits(auto_commits: &[(TopicPartition, u64)]) -> Vec<CommitOffset> {
    auto_commits
        .iter()
        .map(|(tp, o)| CommitOffset { topic: tp.topic.clone(), partition: tp.partition, offset: *o, metadata: None })
        .collect()
}

//! A poll: join or heartbeat, rebalance when membership changed, then fetch from the
//! member's positions (its own, sent with the request, win over the server's record).

use super::membership::{assign, next_generation};
use super::*;

impl Groups {
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
                    let rendering = crate::log::read::rendered_size(&e.record) + topic.name.len();
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
}

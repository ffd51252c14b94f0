//! Committing offsets: fenced by generation and ownership, applied in one write.

use super::read;
use super::*;

/// A commit write lost a race with another write to the group: read again.
pub(super) struct Raced;
use crate::Code;

impl Groups {
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
                Code::TooManyOffsets,
                format!("one commit carries at most {MAX_COMMIT_OFFSETS} offsets"),
            ));
        }
        let mut names: Vec<&str> = offsets.iter().map(|o| o.topic.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for _ in 0..MAX_ATTEMPTS {
            // The group, the topics, the committed offsets and the heads: one batch.
            let read::Batch { topics: topics_read, state, offsets: current, heads, .. } =
                self.read_batch(group, &names, true, read::Heads::All, (&[], 0)).await?;
            if state.unborn() {
                return Err(Error::GroupNotFound(group.to_owned()));
            }
            let Some((_, member_version, _)) = state.members.get(member_id) else {
                return Err(conflict(Code::UnknownMember, format!("member '{member_id}' is not in group '{group}'")));
            };
            if !state.record.members.contains_key(member_id) {
                return Err(conflict(Code::UnknownMember, format!("member '{member_id}' is not in group '{group}'")));
            }
            let fenced = !crate::mutation::skipped(crate::mutation::Mutation::CommitGenerationFence);
            if generation != state.record.generation && fenced {
                return Err(conflict(
                    Code::StaleGeneration,
                    format!("generation {generation} is stale: group '{group}' is at {}", state.record.generation),
                ));
            }
            for o in offsets {
                if !topics_read.contains_key(&o.topic) {
                    return Err(Error::TopicNotFound(o.topic.clone()));
                }
            }
            // An offset past the end would freeze the partition's committed offset (they never go back).
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
            let current = current.unwrap_or_default();
            match self.write_commit(group, &state, member_id, *member_version, &topics_read, &current, offsets).await {
                Ok(Err(Raced)) => continue,
                Ok(Ok(())) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Err(too_busy(group))
    }

    /// One fenced commit write: checks the group version and the member's item, puts the
    /// offsets that advance. `Ok(Err(Raced))`: something it checked changed first. Written
    /// deferred, as acks and the auto-commits riding on heartbeats are: durable with the
    /// store's next durable write, so a power cut can undo only the latest commits, and the
    /// group then resumes earlier (events delivered again, never skipped).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn write_commit(
        &self,
        group: &str,
        state: &GroupState,
        member_id: &str,
        member_version: u64,
        topics: &BTreeMap<String, TopicConfig>,
        current: &BTreeMap<String, (OffsetRecord, u64)>,
        offsets: &[CommitOffset],
    ) -> Result<Result<(), Raced>, Error> {
        let mut ops =
            vec![WriteOp::Check { key: member_key(group, member_id), expect: Expect::Version(member_version) }];
        ops.extend(commit_ops(group, state, member_id, topics, current, offsets)?);
        match self.store().write_deferred(ops).await {
            Ok(()) => Ok(Ok(())),
            // The group changed, the member's session ended, or an offset moved: the caller
            // re-reads and decides.
            Err(StorageError::ConditionFailed { .. }) => Ok(Err(Raced)),
            Err(e) => Err(e.into()),
        }
    }
}

/// A commit's writes but the member's own check (which the caller's write makes): a check of
/// the group's version, and a put of each offset that advances, conditioned on the version read
/// in `current`. Refuses a partition the member does not own, a topic re-created since, and an
/// offset named twice.
pub(super) fn commit_ops(
    group: &str,
    state: &GroupState,
    member_id: &str,
    topics: &BTreeMap<String, TopicConfig>,
    current: &BTreeMap<String, (OffsetRecord, u64)>,
    offsets: &[CommitOffset],
) -> Result<Vec<WriteOp>, Error> {
    let owned: BTreeSet<&TopicPartition> = state.record.members.get(member_id).into_iter().flatten().collect();
    let mut ops = vec![WriteOp::Check { key: group_meta_key(group), expect: Expect::Version(state.version) }];
    let mut seen = BTreeSet::new();
    for o in offsets {
        let tp = TopicPartition { topic: o.topic.clone(), partition: o.partition };
        if !owned.contains(&tp) {
            return Err(conflict(
                Code::NotAssigned,
                format!("{}/{} is not assigned to member '{member_id}' in this generation", o.topic, o.partition),
            ));
        }
        let Some(topic) = topics.get(&o.topic) else { return Err(Error::TopicNotFound(o.topic.clone())) };
        if state.record.topics.get(&o.topic) != Some(&topic.id) {
            // The topic was re-created since this generation's assignment: its offsets mean nothing now.
            return Err(conflict(
                Code::StaleGeneration,
                format!("topic '{}' was re-created since generation {}", o.topic, state.record.generation),
            ));
        }
        let key = tp_key(&o.topic, o.partition);
        if !seen.insert(key.clone()) {
            return Err(Error::invalid(Code::DuplicateOffset, format!("{}/{} appears twice", o.topic, o.partition)));
        }
        let existing = current.get(&key).filter(|(r, _)| r.counts(topic.id, &state.record));
        if existing.is_some_and(|(r, _)| r.offset >= o.offset) {
            continue;
        }
        let record = OffsetRecord {
            topic_id: topic.id,
            offset: o.offset,
            metadata: o.metadata.clone(),
            group_version: state.version,
        };
        let expect = current.get(&key).map_or(Expect::Absent, |(_, v)| Expect::Version(*v));
        ops.push(WriteOp::Put {
            key: offset_key(group, &o.topic, o.partition),
            value: layout::encode(&record),
            expires_at_ms: None,
            expect,
        });
    }
    Ok(ops)
}

//! Seeking: moving a group's committed offsets, with a rebalance so members resume there.

use super::*;

impl Groups {
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
                SeekTarget::Timestamp(ts) => self.log.offset_of(&t, p, OffsetQuery::Timestamp(ts)).await?,
                _ => target_offset(target, head),
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
                match self.store().write(seek_ops(group, &t, &state, chunk, self.now())).await {
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
}

/// Where a seek puts a partition whose log is `head` (a timestamp is looked up instead).
fn target_offset(target: SeekTarget, head: HeadRecord) -> u64 {
    match target {
        SeekTarget::Earliest => head.start,
        SeekTarget::Latest | SeekTarget::Timestamp(_) => head.next,
        SeekTarget::Offset(o) => o.clamp(head.start, head.next),
    }
}

/// One write of a seek: the next generation's record (the chunk's partitions trusted from
/// its version), the activity if the seek outlasts it (offsets expire counting from now at
/// the earliest), the registry entry of a new group, and the chunk's offsets.
fn seek_ops(group: &str, topic: &TopicConfig, state: &GroupState, chunk: &[(u32, u64)], now: i64) -> Vec<WriteOp> {
    let mut record = state.record.clone();
    record.generation += 1;
    for &(p, _) in chunk {
        record.since.insert(tp_key(&topic.name, p), state.version + 1);
    }
    let mut ops =
        vec![WriteOp::replace(group_meta_key(group), layout::encode(&record), Some(state.version).filter(|v| *v > 0))];
    if state.activity.is_none_or(|(a, _)| a.until < now) {
        ops.extend(activity_ops(group, state.activity.as_ref(), now));
    }
    if state.unborn() {
        ops.push(WriteOp::Put {
            key: registry_key(group),
            value: layout::encode(&RegistryRecord { created_ms: now }),
            expires_at_ms: None,
            expect: Expect::Any,
        });
    }
    ops.extend(chunk.iter().map(|&(p, offset)| WriteOp::Put {
        key: offset_key(group, &topic.name, p),
        value: layout::encode(&OffsetRecord {
            topic_id: topic.id,
            offset,
            metadata: None,
            group_version: state.version + 1,
        }),
        expires_at_ms: None,
        expect: Expect::Any,
    }));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TopicSpec;

    #[test]
    fn targets_land_within_the_log() {
        let head = HeadRecord { start: 10, next: 20, ..HeadRecord::default() };
        assert_eq!(target_offset(SeekTarget::Earliest, head), 10);
        assert_eq!(target_offset(SeekTarget::Latest, head), 20);
        assert_eq!(target_offset(SeekTarget::Offset(3), head), 10);
        assert_eq!(target_offset(SeekTarget::Offset(15), head), 15);
        assert_eq!(target_offset(SeekTarget::Offset(99), head), 20);
    }

    #[test]
    fn a_seek_bumps_the_generation_and_distrusts_positions_of_its_partitions() {
        let spec = TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None };
        let topic = TopicConfig { name: "t".into(), id: 1, spec, created_ms: 0, version: 1 };
        let state = GroupState {
            record: GroupRecord { generation: 4, ..GroupRecord::default() },
            version: 7,
            members: BTreeMap::new(),
            activity: Some((ActivityRecord { until: 1_000 }, 2)),
        };
        let ops = seek_ops("g", &topic, &state, &[(1, 5)], 500);
        // The record (on version 7) and the offset; the activity still covers now, no registry.
        assert_eq!(ops.len(), 2);
        let WriteOp::Put { value, expect, .. } = &ops[0] else { panic!("{:?}", ops[0]) };
        assert_eq!(*expect, Expect::Version(7));
        let record: GroupRecord = layout::decode("group", value).unwrap();
        assert_eq!(record.generation, 5);
        assert_eq!(record.since.get(&tp_key("t", 1)), Some(&8));
        assert_eq!(record.since.get(&tp_key("t", 0)), None);
        // A group first used by a seek, after its activity ran out: registry and activity too.
        let fresh = GroupState { record: GroupRecord::default(), version: 0, members: BTreeMap::new(), activity: None };
        let ops = seek_ops("g", &topic, &fresh, &[(0, 0)], 500);
        assert!(ops.iter().any(|op| op.key() == &registry_key("g")));
        assert!(ops.iter().any(|op| op.key() == &activity_key("g")));
    }
}

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
}

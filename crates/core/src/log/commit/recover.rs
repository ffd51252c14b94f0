//! What a commit does when a write of it did not simply succeed: finds out whether a write
//! whose answer was lost landed, re-reads what a failed condition was on, and stops at the
//! requests' deadline.

use super::*;

impl Committer {
    /// Waits `wait_ms` (the backoff after the last attempt) before attempt `attempt`, unless
    /// the group's `deadline` comes first: then the commit stops, answering in time.
    pub(super) async fn pause(
        &self,
        deadline: Option<i64>,
        attempt: u32,
        wait_ms: u64,
        unknown: bool,
    ) -> Result<(), StorageError> {
        if !crate::retry::pause_within(self.clock.as_ref(), deadline, wait_ms).await {
            return Err(out_of_time(attempt, unknown));
        }
        Ok(())
    }

    /// After the object record's condition failed: another commit added to it, retention or
    /// compaction took from it, or the collector doomed (or deleted) it.
    pub(super) async fn reread_object(&mut self, object: &str) -> Result<(), CommitError> {
        let item = self.store.get(&keys::object_key(object)).await?;
        let record = match &item {
            Some(item) => layout::decode::<ObjectRecord>("object", &item.value)?,
            None => ObjectRecord::default(),
        };
        let expected = self.object.as_ref().filter(|(name, _, _)| name == object).map_or(0, |(_, _, v)| *v);
        // Gone after this process saw it (collected), or doomed: nothing may be added to it.
        if record.doomed || (item.is_none() && expected > 0) {
            self.object = None;
            return Err(CommitError::Doomed);
        }
        self.object = Some((object.to_owned(), record, item.map_or(0, |i| i.version)));
        Ok(())
    }

    /// Whether one of the attempts whose answer was lost in fact landed; if so, takes its bases.
    /// An attempt landed if every one of its segment entries is there (in the index, or carried
    /// by the head), pointing at this blob's bytes (or, inline, naming this commit): a write
    /// lands whole or not at all, no other commit can index these bytes, and at most one
    /// attempt lands (each conditions on the heads the one before it moved). One
    /// segment is not enough: two attempts can share the first partition's base and differ
    /// on another (a rival committed there in between), and the first one's answer was
    /// then taken for the second's.
    pub(super) async fn resolve_unknown(
        &mut self,
        layout: &Layout,
        stored: &Stored,
        chunk: Range<usize>,
        unknown: &[Vec<u64>],
        bases: &mut [u64],
    ) -> Result<bool, StorageError> {
        let segments = &layout.segments[chunk.clone()];
        'attempts: for attempt in unknown {
            for (s, base) in segments.iter().zip(attempt) {
                // A single write's entry is in the head until the next commit writes it out,
                // which it does before moving the head: the head read first, then the index.
                if self.single_write {
                    let (_, tail, _) = topics::head_with_tail(self.store.as_ref(), s.topic_id, s.partition).await?;
                    if tail.is_some_and(|t| t.base == *base && stored.wrote(s, &t.record)) {
                        continue;
                    }
                }
                let key = keys::segment_key(s.topic_id, s.partition, *base);
                let Some(item) = self.store.get(&key).await? else { continue 'attempts };
                let (seg, _) = layout::decode_segment_item(&item.value)?;
                if !stored.wrote(s, &seg) {
                    continue 'attempts;
                }
            }
            tracing::info!("a commit whose answer was lost had landed");
            bases[chunk.clone()].copy_from_slice(attempt);
            for s in segments {
                self.heads.remove(&(s.topic_id, s.partition));
            }
            self.committed.send_modify(|v| *v += 1);
            return Ok(true);
        }
        Ok(false)
    }

    /// Refuses a commit to a partition whose head is a deleted topic's tombstone (read now, or
    /// cached by a failed write's re-read): the topic is gone, and so are its cached heads.
    pub(super) fn refuse_deleted(&mut self, segments: &[SegmentPlan]) -> Result<(), CommitError> {
        let deleted =
            segments.iter().find(|s| self.heads.get(&(s.topic_id, s.partition)).is_some_and(|(h, _)| h.deleted));
        let Some(s) = deleted else { return Ok(()) };
        let id = s.topic_id;
        self.heads.retain(|(topic, _), _| *topic != id);
        Err(CommitError::TopicGone)
    }

    /// After a topic check failed: the topic changed. Live under the same id: remember
    /// its version and retry; otherwise the topic is gone.
    pub(super) async fn reread_topic(&mut self, group: &[Pending], id: u64) -> Result<(), CommitError> {
        let Some(name) = group.iter().find(|p| p.topic.id == id).map(|p| p.topic.name.clone()) else {
            return Err(CommitError::TopicGone);
        };
        match topics::record(self.store.as_ref(), &name).await? {
            Some((r, version)) if r.id == id && r.deleted_ms.is_none() => {
                self.topic_versions.insert(id, version);
                Ok(())
            }
            _ => {
                self.heads.retain(|(topic, _), _| *topic != id);
                Err(CommitError::TopicGone)
            }
        }
    }
}

/// A commit that reached its requests' deadline after `attempts` attempts: the client
/// retries (a `503` with `Retry-After`), before the function running it is stopped.
fn out_of_time(attempts: u32, unknown: bool) -> StorageError {
    let outcome = if unknown { "its outcome is unknown" } else { "nothing was written" };
    tracing::warn!(attempts, unknown, "commit reached the request's deadline");
    StorageError::Unavailable {
        message: format!("the commit did not finish before the request's deadline ({attempts} attempts; {outcome})"),
        source: None,
    }
}

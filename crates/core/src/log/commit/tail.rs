//! The entry a head carries (see [`Tail`]): written out as its own index item before a commit
//! replaces the head, so that no commit overwrites an entry the index does not hold.

use super::*;

impl Committer {
    /// [`Committer::write_out`] for a chunk's partitions; `Some(backoff)` when the store
    /// refused it or its outcome is unknown (it is idempotent: the next attempt writes it
    /// again, over heads read anew).
    pub(super) async fn write_out_or_back_off(
        &mut self,
        layout: &Layout,
        chunk: Range<usize>,
        attempt: u32,
    ) -> Result<Option<u64>, StorageError> {
        match self.write_out(&layout.segments[chunk.clone()]).await {
            Ok(()) => Ok(None),
            Err(e @ (StorageError::Throttled { .. } | StorageError::Unavailable { .. })) => {
                tracing::debug!(attempt, error = %e, "writing out a head's entry failed; backing off");
                self.forget_heads(layout, chunk);
                Ok(Some(Backoff::CONTENTION.wait_ms(attempt, self.keeper.random.next_u64())))
            }
            Err(e) => Err(e),
        }
    }

    /// Writes out, each as its own index item, the entries the chunk's cached heads carry:
    /// one conditional create per head that carries one (none on a store whose commits never
    /// leave one). An item already there (written out by another committer, or by this one
    /// before a lost race) is the same entry, or one compaction merged from it: nothing to do.
    /// Safe whatever is cached: a stale head's entry re-written after retention or compaction
    /// removed it lies below the log start or over offsets an item merged, which readers and
    /// the janitor tolerate (docs/DESIGN.md, "One partition, one write").
    pub(super) async fn write_out(&mut self, segments: &[SegmentPlan]) -> Result<(), StorageError> {
        for s in segments {
            let Some(tail) = self.tails.get(&(s.topic_id, s.partition)) else { continue };
            if !self.heads.contains_key(&(s.topic_id, s.partition)) {
                continue;
            }
            let key = keys::segment_key(s.topic_id, s.partition, tail.base);
            match self.store.write(vec![WriteOp::create(key.clone(), tail.index_item())]).await {
                Ok(()) => self.written_out.push((key, s.topic_id, s.partition)),
                Err(StorageError::ConditionFailed { .. }) => {}
                // It may have landed (after a purge, for a topic deleted meanwhile): removed
                // with the others if the commit fails and its topic is found gone.
                Err(e @ StorageError::Unavailable { .. }) => {
                    self.written_out.push((key, s.topic_id, s.partition));
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Removes the index items this chunk's commit wrote out (or may have: an answer lost)
    /// whose topic is found gone: its partition's head a delete's tombstone, or absent (only
    /// a deleted topic's purge removes a head, and an entry is written out from a head that
    /// carried it). A stale
    /// committer's write-out may follow the purge of a deleted topic, which would never
    /// visit that item again. An entry whose head reads live, or cannot be read, stays:
    /// an entry of a live topic is never removed. (A crash, or a failed read or delete,
    /// leaves one: a small item of a topic nothing can reach, see docs/DESIGN.md.)
    pub(super) async fn unwrite_out(&mut self) {
        let mut gone = Vec::new();
        let mut written_out = std::mem::take(&mut self.written_out);
        // One key twice (an answer lost, then written again) would be refused by a batch delete.
        written_out.sort_unstable();
        written_out.dedup();
        for (key, topic_id, partition) in written_out {
            let dead = match self.store.get(&keys::head_key(topic_id, partition)).await {
                Ok(None) => true,
                Ok(Some(item)) => layout::decode::<HeadRecord>("head", &item.value).is_ok_and(|h| h.deleted),
                Err(_) => false,
            };
            if dead {
                gone.push(key);
            }
        }
        if gone.is_empty() {
            return;
        }
        if let Err(e) = self.store.delete_many(gone).await {
            tracing::warn!(error = %e, "could not remove entries written out for a deleted topic");
        }
    }
}

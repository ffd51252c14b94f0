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
                Ok(()) => self.written_out.push(key),
                Err(StorageError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Removes the index items this chunk's commit wrote out, once its topic is found gone: a
    /// stale committer's write-out may follow the purge of a deleted topic, which would never
    /// visit that item again. (A crash between the two leaves it: one small item of a topic
    /// nothing can reach, see docs/DESIGN.md.)
    pub(super) async fn unwrite_out(&mut self) {
        let keys = std::mem::take(&mut self.written_out);
        if keys.is_empty() {
            return;
        }
        if let Err(e) = self.store.delete_many(keys).await {
            tracing::warn!(error = %e, "could not remove entries written out for a deleted topic");
        }
    }
}

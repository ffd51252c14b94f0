//! Seek and purge: every partition's queue moves to a new position in the log. After a
//! seek to offset `P`, the partition is as if every message below `P` had been acked
//! and none at or after it had ever been delivered:
//! - every lease ends (in flight, released, in backoff, delayed or parked behind a key):
//!   its receipts answer `stale_receipt`; but one that ran out of deliveries is the
//!   DLQ's (describe counts it dead) and stays for the next take to bury;
//! - the messages below `P` that were still to be delivered (new ones, and those of the
//!   leases) are passed over: `skip` counts them;
//! - the messages at or after `P` are delivered from the log, as new (receive count 1):
//!   `redeliver` counts those that were done with (acked, or dead-lettered: the dead
//!   letter stays), which become deliverable again; a message that was still to be
//!   delivered stays so and is in neither count;
//! - a message the filter does not match is in neither count (it is never delivered),
//!   nor is one below the log start (retention removed it: `earliest` is the log start).
//!   Those below the log start that the move passes over join the cursor's `expired`.
//!
//! Why no receive that starts after a seek has answered grants a lease on a passed-over
//! message, or one from the old position, on any process: each partition's move is one
//! write, conditional on the cursor item's version read and on every lease item's, that
//! moves the cursor and deletes every lease (`Queues::change_cursors`). Every take names
//! its partition's cursor item at the version it read, and every lease it takes at its
//! own: a take that read before the move fails its write and reads the moved queue. So
//! per partition a seek is linearizable with receives and acks; across partitions it is
//! not atomic (each moves in turn, all before the answer).

use std::collections::BTreeSet;

use super::take::document;
use super::*;

/// Where a seek moves a subscription's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeekTo {
    /// The log start of each partition.
    Earliest,
    /// The high watermark of each partition: everything passed over (a purge).
    Latest,
    /// Each partition's first message with a timestamp at or after this (ms since the
    /// epoch); the high watermark if none.
    Timestamp(i64),
    /// One offset per partition, each within the partition's log start and high watermark.
    Offsets(Vec<u64>),
}

/// One partition's move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionSeek {
    pub partition: u32,
    /// The cursor before: the first offset never delivered.
    pub from: u64,
    pub to: u64,
    /// Messages done with that become deliverable again.
    pub redeliver: u64,
    /// Messages still to deliver that are passed over.
    pub skip: u64,
}

/// What a seek did (or, a dry run, would do at that instant).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sought {
    /// False for a dry run: nothing was changed.
    pub applied: bool,
    pub redeliver: u64,
    pub skip: u64,
    pub partitions: Vec<PartitionSeek>,
}

/// A partition's move, counted from its queue as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    redeliver: u64,
    skip: u64,
    /// Messages below the log start the move passes over, never delivered.
    expired: u64,
}

/// Counts a move from `from` to `to` on a log starting at `log_start`: `held` are the
/// offsets the leases hold, `unmatched` those the filter does not match (between the
/// two positions; none without a filter).
fn count(from: u64, to: u64, log_start: u64, held: &BTreeSet<u64>, unmatched: &BTreeSet<u64>) -> Counts {
    let span = |lo: u64, hi: u64| hi.saturating_sub(lo);
    let within = |set: &BTreeSet<u64>, lo: u64, hi: u64| if lo < hi { set.range(lo..hi).count() as u64 } else { 0 };
    // Done with: below `from`, in no lease; and matched. A held message may be unmatched
    // too (the filter changed since it was taken): taken off once.
    let lo = to.max(log_start);
    let held_unmatched =
        if lo < from { held.range(lo..from).filter(|o| unmatched.contains(o)).count() as u64 } else { 0 };
    let redeliver =
        span(lo, from).saturating_sub(within(held, lo, from) + within(unmatched, lo, from) - held_unmatched);
    // Still to deliver: new from `from`, and every leased message, below `to`.
    let lo = from.max(log_start);
    let new = span(lo, to).saturating_sub(within(unmatched, lo, to));
    let skip = new + within(held, log_start, to);
    let expired = span(from, to.min(log_start)) + within(held, 0, to.min(log_start));
    Counts { redeliver, skip, expired }
}

impl Queues {
    /// Moves every partition of a subscription's queue (see the module's header); a dry
    /// run changes nothing and answers what the seek would do at that instant.
    pub async fn seek(&self, topic: &str, name: &str, to: &SeekTo, dry_run: bool) -> Result<Sought, Error> {
        let sub = self.sub(topic, name).await?;
        let targets = self.targets(&sub, to).await?;
        let filter = sub.filter()?;
        let at = (&sub, filter.as_ref(), dry_run);
        let partitions = self
            .change_cursors(&sub, None, |p, state| self.move_partition(at, p, (targets[p as usize], to), state))
            .await?;
        if !dry_run {
            // Waiting receives look again: a seek back has messages for them.
            self.local.resumed.notify_waiters();
            tracing::info!(topic, subscription = name, ?to, "subscription sought");
        }
        let (redeliver, skip) = partitions.iter().fold((0, 0), |(r, s), p| (r + p.redeliver, s + p.skip));
        Ok(Sought { applied: !dry_run, redeliver, skip, partitions })
    }

    /// Purges a subscription's queue: a seek to `latest`. Its dead letters stay.
    pub async fn purge(&self, topic: &str, name: &str) -> Result<Sought, Error> {
        self.seek(topic, name, &SeekTo::Latest, false).await
    }

    /// Each partition's target, `None` for the log's end read with the partition's queue
    /// (so a take racing the seek cannot have moved the cursor past it). Offsets out of
    /// range are refused before anything is changed.
    async fn targets(&self, sub: &Sub, to: &SeekTo) -> Result<Vec<Option<u64>>, Error> {
        let partitions = sub.topic.spec.partitions;
        match to {
            SeekTo::Earliest | SeekTo::Latest => Ok(vec![None; partitions as usize]),
            SeekTo::Timestamp(ts) => {
                let mut out = Vec::with_capacity(partitions as usize);
                for p in 0..partitions {
                    let query = crate::model::OffsetQuery::Timestamp(*ts);
                    out.push(Some(self.log.offset_of(&sub.topic, p, query).await?));
                }
                Ok(out)
            }
            SeekTo::Offsets(offsets) => {
                let heads = topics::heads(self.store(), &sub.topic).await?;
                if offsets.len() != heads.len() {
                    let message = format!("\"offsets\" needs one offset per partition: {}", heads.len());
                    return Err(Error::Invalid { code: Code::InvalidSeek, message });
                }
                for (p, (&o, (head, _))) in offsets.iter().zip(&heads).enumerate() {
                    if o < head.start || o > head.next {
                        let message =
                            format!("offset {o} of partition {p} is out of range: {}..={}", head.start, head.next);
                        return Err(Error::Invalid { code: Code::InvalidSeek, message });
                    }
                }
                Ok(offsets.iter().map(|o| Some(*o)).collect())
            }
        }
    }

    /// One partition's move from its queue as read: the write (none for a dry run, or when
    /// nothing would change) and the answer.
    async fn move_partition(
        &self,
        (sub, filter, dry_run): (&Sub, Option<&Filter>, bool),
        partition: u32,
        (target, to): (Option<u64>, &SeekTo),
        state: QueueState,
    ) -> Result<Change<PartitionSeek>, Error> {
        let (head, _) = topics::head(self.store(), sub.topic.id, partition).await?;
        let to = match (target, to) {
            (Some(offset), _) => offset,
            (None, SeekTo::Earliest) => head.start,
            (None, _) => head.next,
        };
        let from = state.cursor.next;
        // A lease that ran out of deliveries is the DLQ's already (describe counts it dead):
        // it stays, for the next take to bury, and is in neither count.
        let (now, max) = (self.now(), sub.record.spec.max_receive_count);
        let (dead, live): (Vec<&Lease>, Vec<&Lease>) =
            state.leases.iter().partition(|l| super::take::is_dead(l, from, now, max));
        let held: BTreeSet<u64> = live.iter().flat_map(|l| l.record.msgs.iter().map(|m| m.offset)).collect();
        let unmatched = match filter {
            Some(f) => self.unmatched(sub, partition, (from.min(to).max(head.start), from.max(to)), head, f).await?,
            None => BTreeSet::new(),
        };
        let counts = count(from, to, head.start, &held, &unmatched);
        let answer = PartitionSeek { partition, from, to, redeliver: counts.redeliver, skip: counts.skip };
        if dry_run || (from == to && live.is_empty()) {
            return Ok(Change::Keep(answer));
        }
        let deletes: Vec<WriteOp> = live
            .iter()
            .filter(|l| !l.inline)
            .map(|l| WriteOp::Delete { key: l.key.clone(), expect: Expect::Version(l.version) })
            .collect();
        if deletes.len() >= MAX_WRITE_OPS {
            // One write ends them all, or the move is not one write: refused, nothing changed.
            return Err(Error::Throttled(StorageError::Throttled {
                message: format!("partition {partition} has {} leases out: more than one seek ends", deletes.len()),
                source: None,
            }));
        }
        let cursor = CursorRecord { next: to, expired: state.cursor.expired + counts.expired, ..state.cursor };
        let kept: Vec<_> = dead.iter().filter(|l| l.inline).map(|l| l.encoded()).collect();
        let mut state = state;
        state.marks.sought = to;
        let mut ops = vec![state.cursor_item_write(sub.record.id, partition, cursor, &kept, &deletes)];
        ops.extend(deletes);
        Ok(Change::Write(ops, answer))
    }

    /// The offsets in `[lo, hi)` of a partition's log whose events `filter` does not match.
    async fn unmatched(
        &self,
        sub: &Sub,
        partition: u32,
        (mut lo, hi): (u64, u64),
        head: HeadRecord,
        filter: &Filter,
    ) -> Result<BTreeSet<u64>, Error> {
        let limits = *self.log.limits();
        let mut out = BTreeSet::new();
        while lo < hi {
            let max = ((hi - lo).min(limits.max_read_events as u64) as usize, limits.max_read_bytes);
            // Retention may remove them while they are read: those are not counted anyway.
            let events = self.read_from(&sub.topic, partition, &mut lo, max, head).await?;
            let Some(last) = events.last().map(|e| e.offset) else { break };
            let events = events.iter().filter(|e| e.offset < hi);
            out.extend(events.filter(|e| !filter.matches(&document(e))).map(|e| e.offset));
            lo = last + 1;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(offsets: &[u64]) -> BTreeSet<u64> {
        offsets.iter().copied().collect()
    }

    #[test]
    fn a_move_counts_what_comes_back_and_what_is_passed_over() {
        let c = |redeliver, skip, expired| Counts { redeliver, skip, expired };
        // (from, to, log start, held, unmatched) → counts.
        let cases = [
            // Back over 10 done with, 2 of them held (they stay to deliver), 1 unmatched.
            (20, 10, 0, set(&[12, 15]), set(&[11]), c(7, 0, 0)),
            // Back to the log start: what retention removed is not redelivered.
            (20, 5, 5, set(&[]), set(&[]), c(15, 0, 0)),
            // Forward over 10 new, 1 unmatched, and the 2 held below `from` passed over too.
            (20, 30, 0, set(&[3, 18]), set(&[25]), c(0, 11, 0)),
            // Purge of a drained queue whose last messages are out.
            (20, 20, 0, set(&[18, 19]), set(&[]), c(0, 2, 0)),
            // Forward from behind the log start: those below it expire, not skipped.
            (2, 30, 10, set(&[1]), set(&[]), c(0, 20, 9)),
            // Back, keeping in flight what is above the target (no count: still to deliver).
            (20, 18, 0, set(&[18, 19]), set(&[]), c(0, 0, 0)),
            // Back with a lease below the target: passed over.
            (20, 18, 0, set(&[4, 19]), set(&[]), c(1, 1, 0)),
            (7, 7, 0, set(&[]), set(&[]), c(0, 0, 0)),
            // Back over a held message the filter (changed since it was taken) does not match:
            // not done with, and not deliverable; taken off once.
            (6, 0, 0, set(&[1, 3]), set(&[1, 3, 5]), c(3, 0, 0)),
        ];
        for (from, to, start, held, unmatched, want) in cases {
            assert_eq!(count(from, to, start, &held, &unmatched), want, "{from} → {to}, start {start}, held {held:?}");
        }
    }
}

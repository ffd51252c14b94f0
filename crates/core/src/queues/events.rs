//! Reading a partition's events by offset: those of messages held in leases, and runs
//! from an offset on.

use super::*;
use crate::log::read::Lookup;

impl Queues {
    /// The events at these offsets of a partition, read in runs of consecutive offsets.
    pub(super) async fn events_at(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offsets: &[u64],
        head: HeadRecord,
    ) -> Result<HashMap<u64, Event>, Error> {
        let mut sorted = offsets.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut found = HashMap::with_capacity(sorted.len());
        let limits = *self.log.limits();
        let mut i = 0;
        while i < sorted.len() {
            let mut end = i;
            while end + 1 < sorted.len() && sorted[end + 1] == sorted[end] + 1 {
                end += 1;
            }
            let (first, last) = (sorted[i], sorted[end]);
            let mut next = first.max(head.start);
            while next <= last && next < head.next {
                let want = (last - next + 1) as usize;
                let max = (want.min(limits.max_read_events), limits.max_read_bytes);
                // Retention may remove them while they are read: those are not found.
                let events = self.read_from(topic, partition, &mut next, max, head).await?;
                let Some(last_read) = events.last().map(|e| e.offset) else { break };
                for e in events {
                    if e.offset <= last {
                        found.insert(e.offset, e);
                    }
                }
                next = last_read + 1;
            }
            i = end + 1;
        }
        Ok(found)
    }

    /// Events of a partition from `*from` up to `head` (at most `max` events and bytes) as a
    /// receive reads them; when retention has removed them meanwhile, `*from` moves to the
    /// log's new start first (a receive would pass them over). None at or past `head.next`
    /// are answered: what `head` says is there is what a caller counts against.
    pub(super) async fn read_from(
        &self,
        topic: &TopicConfig,
        partition: u32,
        from: &mut u64,
        max: (usize, usize),
        head: HeadRecord,
    ) -> Result<Vec<Event>, Error> {
        while *from < head.next {
            match self.log.read_at(topic, partition, *from, max, head, Lookup::Holder).await {
                Ok(mut batch) => {
                    // A segment read whole may run past `head` (written after it was read).
                    batch.events.truncate(batch.events.partition_point(|e| e.offset < head.next));
                    return Ok(batch.events);
                }
                Err(Error::OffsetOutOfRange { log_start_offset, .. }) if log_start_offset > *from => {
                    *from = log_start_offset;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Vec::new())
    }
}

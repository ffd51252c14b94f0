//! Reading the events of messages held in leases, by offset.

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
                let read = self
                    .log
                    .read_at(
                        topic,
                        partition,
                        next,
                        (want.min(limits.max_read_events), limits.max_read_bytes),
                        head,
                        Lookup::Holder,
                    )
                    .await;
                let batch = match read {
                    Ok(batch) => batch,
                    // Retention removed them while they were read: they are not found.
                    Err(Error::OffsetOutOfRange { log_start_offset, .. }) if log_start_offset > next => {
                        next = log_start_offset;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let Some(last_read) = batch.events.last().map(|e| e.offset) else { break };
                for e in batch.events {
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
}

//! Offsets by time: the first offset whose timestamp is at or after a time, found
//! through the time index and a walk of the segment index as replay walks it.

use super::index::{holder_after_all, segment_records, segments_from, Segment};
use super::{check_partition, topics, Log, INDEX_PAGE};
use crate::model::{OffsetQuery, TopicConfig};
use crate::ports::objects::StorageError;
use crate::{names, Error};

impl Log {
    /// Looks up an offset of a partition: earliest, latest, or the first at or after a time.
    pub async fn offset(&self, topic: &str, partition: u32, query: OffsetQuery) -> Result<u64, Error> {
        names::validate("topic", topic)?;
        let topic = topics::live(self.inner.store.as_ref(), topic).await?;
        check_partition(&topic, partition)?;
        self.offset_of(&topic, partition, query).await
    }

    /// [`Log::offset`] for a topic already read.
    pub(crate) async fn offset_of(
        &self,
        topic: &TopicConfig,
        partition: u32,
        query: OffsetQuery,
    ) -> Result<u64, Error> {
        let store = self.inner.store.as_ref();
        let (head, _) = topics::head(store, topic.id, partition).await?;
        let ts = match query {
            OffsetQuery::Earliest => return Ok(head.start),
            OffsetQuery::Latest => return Ok(head.next),
            OffsetQuery::Timestamp(ts) if ts > head.max_ts => return Ok(head.next),
            OffsetQuery::Timestamp(ts) => ts,
        };
        // The time index says where to start (a segment reaching the time, or the end of what it
        // covers); the segments from there are walked to the first event at or after the time.
        let from = match crate::log::timeindex::lookup(store, topic.id, partition, ts).await? {
            crate::log::timeindex::Lookup::At(base) | crate::log::timeindex::Lookup::After(base) => {
                base.max(head.start)
            }
        };
        // Walked as a replay is: each page from the first offset not yet examined, with the
        // segment holding it (compaction may have merged it into one that starts earlier),
        // cut at a hole (a query that is not a snapshot, DynamoDB's during a swap, can miss
        // items). Asking from the last base + 1 instead skipped a run merged across pages.
        let mut next = from;
        let (mut holes, mut gone) = (0, 0);
        'pages: while next < head.next {
            let page = segments_from(self.inner.store.as_ref(), topic.id, partition, next, INDEX_PAGE).await?;
            let mut page: Vec<Segment> = page.into_iter().filter(|s| s.record.next > next).collect();
            if let Some(gap) = page.windows(2).position(|w| w[1].base > w[0].record.next) {
                page.truncate(gap + 1);
            }
            if page.first().is_none_or(|s| s.base > next) {
                // The newest entry is still in the head (not yet written out), retention removed
                // `next` since the head was read (what is left starts later), or the query was
                // torn (a second look finds it).
                let (now, holder) = holder_after_all(store, topic.id, partition, next).await?;
                match holder {
                    Some(holder) => page = vec![holder],
                    None if next < now.start => {
                        next = now.start;
                        continue;
                    }
                    None if holes < 3 => {
                        holes += 1;
                        continue;
                    }
                    None => {
                        return Err(Error::Corrupt(format!(
                            "{}/{partition}: offset {next} is in the log (start {}) but not in its index",
                            topic.name, now.start
                        )))
                    }
                }
            }
            for seg in &page {
                if seg.record.max_ts >= ts {
                    let records = match segment_records(self.inner.objects.as_ref(), seg).await {
                        Ok(records) => records,
                        // Compaction replaced the segment and its old object went: look again.
                        Err(StorageError::NotFound(_)) if gone < 3 => {
                            gone += 1;
                            continue 'pages;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    if let Some((o, _)) = records.iter().find(|(o, r)| *o >= next && r.timestamp_ms >= ts) {
                        return Ok(*o);
                    }
                }
                next = seg.record.next;
            }
        }
        Ok(head.next.max(next))
    }
}

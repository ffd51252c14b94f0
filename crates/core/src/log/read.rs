//! Replay: reading a partition from an offset, across segments and index pages
//! (a torn page or a compaction swap mid-read never skips an offset), and long
//! polls that wait for the next publish.

use super::index::{segments_from, Piece, Segment};
use super::{check_partition, topics, Log, ReadRequest, INDEX_PAGE, READ_CONCURRENCY};
use crate::layout::HeadRecord;
use crate::model::{Event, ReadBatch, TopicConfig};
use crate::ports::objects::StorageError;
use crate::segment::{decode_segment, Record};
use crate::{names, Error};
use futures_util::{stream, StreamExt, TryStreamExt};
use std::time::Duration;

/// About how many bytes an event takes once rendered as JSON (base64 grows bytes by a third).
pub(crate) fn rendered_size(r: &Record) -> usize {
    // Keys and headers are JSON strings: a control character escapes to six bytes.
    let headers: usize = r.headers.iter().map(|(k, v)| (k.len() + v.len()) * 6 + 6).sum();
    let key = r.key.as_ref().map_or(4, |k| k.len() * 6 + 2);
    let value = if r.value_is_json { r.value.len() } else { r.value.len().div_ceil(3) * 4 + 2 };
    128 + key + headers + value
}

impl Log {
    /// Events of one partition from an offset, waiting for the first one up to `wait_ms`.
    /// The topic is read afresh, so a reader never sees a deleted topic's events under
    /// a re-created topic's name.
    pub async fn read(&self, req: &ReadRequest) -> Result<ReadBatch, Error> {
        names::validate("topic", &req.topic)?;
        let topic = topics::live(self.inner.store.as_ref(), &req.topic).await?;
        check_partition(&topic, req.partition)?;
        let limits = self.limits();
        let max_events = req.max_events.clamp(1, limits.max_read_events);
        let max_bytes = req.max_bytes.clamp(1, limits.max_read_bytes);
        let wait = Duration::from_millis(req.wait_ms.min(limits.max_wait_ms));
        let head = self.wait_for_data(&topic, req.partition, req.offset, wait).await?;
        self.read_at(&topic, req.partition, req.offset, max_events, max_bytes, head).await
    }

    /// Up to `max_events` and about `max_bytes` of a partition from `offset`, which the
    /// caller has checked against `head` (read after it, so every offset below it is readable).
    pub(crate) async fn read_at(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offset: u64,
        max_events: usize,
        max_bytes: usize,
        head: HeadRecord,
    ) -> Result<ReadBatch, Error> {
        let limits = self.limits();
        let mut events: Vec<Event> = Vec::new();
        let (mut bytes, mut rendered) = (0, 0);
        let mut next = offset;
        // Second looks: at the index (a hole in a query), at an object gone under a reader.
        let (mut holes, mut gone) = (0, 0);
        'pages: while events.len() < max_events && next < head.next {
            let page = self.segments(topic, partition, next).await?;
            let mut page: Vec<Piece> = page.iter().flat_map(|s| s.pieces()).filter(|p| p.next > next).collect();
            // Only pieces that meet: a query that is not a snapshot (DynamoDB's, during a
            // compaction's swap) can show an old item without its deleted neighbours.
            if let Some(gap) = page.windows(2).position(|w| w[1].base > w[0].next) {
                page.truncate(gap + 1);
            }
            // The index no longer holds `next`: retention removed it since the head was read,
            // or the query caught a compaction's swap half-way (then a second look finds it).
            if page.first().is_none_or(|p| p.base > next) {
                let (now, _) = topics::head(self.inner.store.as_ref(), topic.id, partition).await?;
                if next >= now.start && holes < 3 {
                    holes += 1;
                    continue 'pages;
                }
                return self.below_start(topic, partition, next, events, head).await;
            }
            // Read only the parts this page can use: every object read is billed.
            let (mut events_left, mut bytes_left) = (max_events - events.len(), max_bytes.saturating_sub(bytes));
            let needed = page
                .iter()
                .position(|s| {
                    events_left = events_left.saturating_sub((s.next - s.base.max(next)) as usize);
                    bytes_left = bytes_left.saturating_sub(s.len as usize);
                    events_left == 0 || bytes_left == 0
                })
                .map_or(page.len(), |last| last + 1);
            page.truncate(needed);
            let reads: Vec<(String, u64, u64)> = page.iter().map(|s| (s.object.clone(), s.pos, s.len)).collect();
            let objects = self.inner.objects.clone();
            let mut data = stream::iter(reads)
                .map(move |(object, pos, len)| {
                    let objects = objects.clone();
                    async move { objects.read(&object, pos, len).await }
                })
                .buffered(READ_CONCURRENCY);
            for seg in &page {
                let bytes_read = match data.try_next().await {
                    Ok(Some(b)) => b,
                    Ok(None) => break,
                    // Compaction replaced the segment and its old object went after a grace
                    // period, or retention removed it: look again.
                    Err(StorageError::NotFound(_)) if gone < 3 => {
                        gone += 1;
                        continue 'pages;
                    }
                    Err(StorageError::NotFound(what)) => {
                        let (now, _) = topics::head(self.inner.store.as_ref(), topic.id, partition).await?;
                        if next < now.start {
                            return self.below_start(topic, partition, next, events, now).await;
                        }
                        return Err(StorageError::NotFound(what).into());
                    }
                    Err(e) => return Err(e.into()),
                };
                let records = decode_segment(&bytes_read).map_err(|e| {
                    Error::Corrupt(format!("segment {}@{} of {}/{}: {e}", seg.object, seg.pos, topic.name, partition))
                })?;
                for d in records {
                    let offset = seg.base + u64::from(d.offset_delta);
                    if offset < next {
                        continue;
                    }
                    let size = d.record.approx_size();
                    let rendering = rendered_size(&d.record);
                    // Like Kafka, always return the first event even if it alone exceeds max_bytes.
                    if !events.is_empty()
                        && (bytes + size > max_bytes || rendered + rendering > limits.max_response_bytes)
                    {
                        break 'pages;
                    }
                    bytes += size;
                    rendered += rendering;
                    events.push(Event { partition, offset, record: d.record });
                    next = offset + 1;
                    if events.len() >= max_events {
                        break 'pages;
                    }
                }
                next = next.max(seg.next);
            }
        }
        Ok(ReadBatch { events, next_offset: next, high_watermark: head.next.max(next), log_start_offset: head.start })
    }

    /// A read that found `next` gone from the index: what it has so far, or, with nothing yet,
    /// `offset_out_of_range` naming the log start as it is now.
    async fn below_start(
        &self,
        topic: &TopicConfig,
        partition: u32,
        next: u64,
        events: Vec<Event>,
        head: HeadRecord,
    ) -> Result<ReadBatch, Error> {
        let (now, _) = topics::head(self.inner.store.as_ref(), topic.id, partition).await?;
        if !events.is_empty() {
            return Ok(ReadBatch { events, next_offset: next, high_watermark: now.next, log_start_offset: now.start });
        }
        if next < now.start {
            return Err(Error::OffsetOutOfRange {
                offset: next,
                log_start_offset: now.start,
                high_watermark: now.next,
            });
        }
        // Deleted (and perhaps purged) since it was read: its head and index go with it.
        match topics::live(self.inner.store.as_ref(), &topic.name).await {
            Ok(live) if live.id == topic.id => {}
            Ok(_) | Err(Error::TopicNotFound(_)) => return Err(Error::TopicNotFound(topic.name.clone())),
            Err(e) => return Err(e),
        }
        Err(Error::Corrupt(format!(
            "{}/{partition}: offset {next} is in the log (start {}, head {} when read) but not in its index",
            topic.name, now.start, head.next
        )))
    }

    /// Up to a page of a partition's segments, from the one holding `offset`.
    pub(super) async fn segments(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offset: u64,
    ) -> Result<Vec<Segment>, Error> {
        Ok(segments_from(self.inner.store.as_ref(), topic.id, partition, offset, INDEX_PAGE).await?)
    }

    /// The partition's head once `offset` is readable or `wait` has passed; refuses offsets out of range.
    async fn wait_for_data(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offset: u64,
        wait: Duration,
    ) -> Result<HeadRecord, Error> {
        let clock = &self.inner.clock;
        let deadline = clock.now_ms() + wait.as_millis() as i64;
        let mut committed = self.inner.committed.clone();
        loop {
            committed.borrow_and_update();
            let (head, _) = topics::head(self.inner.store.as_ref(), topic.id, partition).await?;
            if offset < head.start || offset > head.next {
                return Err(Error::OffsetOutOfRange {
                    offset,
                    log_start_offset: head.start,
                    high_watermark: head.next,
                });
            }
            let now = clock.now_ms();
            if offset < head.next || now >= deadline {
                return Ok(head);
            }
            let nap = (self.poll_interval_ms() as i64).min(deadline - now);
            tokio::select! {
                _ = committed.changed() => {}
                () = clock.sleep(nap as u64) => {}
            }
        }
    }

    /// Waits up to `wait_ms` until any of `positions` ((topic, partition, offset)) has an
    /// event at or past its offset: woken at once by this process's commits, and re-reading
    /// the topics' heads (one query per topic) every poll interval for other processes'.
    pub(crate) async fn wait_for_any(&self, positions: &[(TopicConfig, u32, u64)], wait_ms: u64) -> Result<(), Error> {
        let clock = &self.inner.clock;
        let deadline = clock.now_ms() + wait_ms as i64;
        let mut committed = self.inner.committed.clone();
        loop {
            committed.borrow_and_update();
            let now = clock.now_ms();
            if positions.is_empty() || now >= deadline {
                return Ok(());
            }
            let mut checked: Vec<u64> = Vec::new();
            for (topic, _, _) in positions {
                if checked.contains(&topic.id) {
                    continue;
                }
                checked.push(topic.id);
                let heads = topics::heads(self.inner.store.as_ref(), topic).await?;
                let ready = positions
                    .iter()
                    .filter(|(t, _, _)| t.id == topic.id)
                    .any(|(_, p, offset)| heads.get(*p as usize).is_some_and(|(h, _)| h.next > *offset));
                if ready {
                    return Ok(());
                }
            }
            let nap = (self.poll_interval_ms() as i64).min(deadline - now);
            tokio::select! {
                _ = committed.changed() => {}
                () = clock.sleep(nap as u64) => {}
            }
        }
    }
}

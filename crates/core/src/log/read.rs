//! Replay: reading a partition from an offset, across segments and index pages
//! (a torn page or a compaction swap mid-read never skips an offset), and long
//! polls that wait for the next publish.

use super::cache::{Records, SegmentKey};
use super::index::{holder_after_all, index_page, segments_for_read, segments_from, Piece, Segment};
use super::{check_partition, topics, Log, ReadRequest, INDEX_PAGE, READ_CONCURRENCY};
use crate::layout::HeadRecord;
use crate::model::{Event, ReadBatch, TopicConfig};
use crate::ports::objects::StorageError;
use crate::segment::decode_segment;
use crate::{names, Code, Error};
use bytes::Bytes;
use futures_util::{stream, StreamExt, TryStreamExt};
use std::time::Duration;

/// Partitions whose segment size a process remembers (see [`Log::span_hint`]).
const MAX_SPAN_HINTS: usize = 65_536;

/// How a read finds its first segment in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// From the offset forward, then back to the segment holding it if none starts there:
    /// one query when the offset starts a segment (a replay's, a group's position).
    Forward,
    /// As `Forward`, the first query sized by the segments this process last read on the
    /// partition ([`index_page`]): for a reader going through the log in order (a group
    /// member's position), whose last page lies just before its next one. A replay may
    /// jump anywhere, where the last size says nothing.
    Onward,
    /// The segment holding the offset first, which alone serves most small reads with one
    /// query ([`segments_for_read`]): for offsets that usually fall inside a segment (a work
    /// queue's cursor, a lease's messages).
    Holder,
}

impl Log {
    /// Events of one partition from an offset, waiting for the first one up to `wait_ms`.
    /// The topic is read afresh, so a reader never sees a deleted topic's events under
    /// a re-created topic's name.
    pub async fn read(&self, req: &ReadRequest) -> Result<ReadBatch, Error> {
        names::validate("topic", &req.topic)?;
        // `limit` is what the HTTP API calls `max_events`.
        self.limits().check_read((req.max_events, "limit", Code::InvalidLimit), req.max_bytes, req.wait_ms)?;
        let topic = topics::live(self.inner.store.as_ref(), &req.topic).await?;
        check_partition(&topic, req.partition)?;
        let wait = Duration::from_millis(req.wait_ms);
        let head = self.wait_for_data(&topic, req.partition, req.offset, wait).await?;
        self.read_at(&topic, req.partition, req.offset, (req.max_events, req.max_bytes), head, Lookup::Forward).await
    }

    /// Up to `max_events` and about `max_bytes` of a partition from `offset`, which the
    /// caller has checked against `head` (read after it, so every offset below it is readable).
    /// `lookup` says how the index is searched for the first segment.
    pub(crate) async fn read_at(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offset: u64,
        bounds: (usize, usize),
        head: HeadRecord,
        lookup: Lookup,
    ) -> Result<ReadBatch, Error> {
        self.read_from(topic, partition, offset, bounds, head, (lookup, None)).await
    }

    /// [`Self::read_at`] with [`Lookup::Onward`], its first index query answered by `first`
    /// if given (the index items from `offset` on, as a query read them at any moment since
    /// the caller began: a group poll's batch) and one of them starts at `offset`.
    pub(crate) async fn read_onward(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offset: u64,
        bounds: (usize, usize),
        head: HeadRecord,
        first: Option<Vec<Segment>>,
    ) -> Result<ReadBatch, Error> {
        let first = first.filter(|page| page.first().is_some_and(|s| s.base == offset));
        self.read_from(topic, partition, offset, bounds, head, (Lookup::Onward, first)).await
    }

    /// [`Self::read_at`], the first page of the index given or not.
    async fn read_from(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offset: u64,
        (max_events, max_bytes): (usize, usize),
        head: HeadRecord,
        (mut lookup, mut given): (Lookup, Option<Vec<Segment>>),
    ) -> Result<ReadBatch, Error> {
        let mut acc = Gather::new(offset, max_events, max_bytes, self.limits().max_response_bytes);
        // Second looks: at the index (a hole in a query), at an object gone under a reader.
        let (mut holes, mut gone) = (0, 0);
        // Events per segment in the last page: how many index items the next query asks for.
        let mut span = if lookup == Lookup::Onward { self.span_hint(topic.id, partition, None) } else { None };
        'pages: while acc.events.len() < max_events && acc.next < head.next {
            // After the first page, `next` is where a segment ends: the next one starts there.
            let store = self.inner.store.as_ref();
            let want = ((max_events - acc.events.len()) as u64).min(head.next - acc.next);
            let this = std::mem::replace(&mut lookup, Lookup::Forward);
            let page = match given.take() {
                Some(page) => page,
                None => self.index_at(topic.id, partition, acc.next, want, span, this).await?,
            };
            if let (Some(first), Some(last)) = (page.first(), page.last()) {
                let mean = (last.record.next - first.base) / page.len() as u64;
                span = self.span_hint(topic.id, partition, Some(mean));
            }
            let mut page = usable(page, acc.next);
            // The index does not hold `next`: the newest entry is still in the head (a single
            // write's, not yet written out), retention removed it since the head was read, or
            // the query caught a compaction's swap half-way (then a second look finds it).
            if page.first().is_none_or(|p| p.base > acc.next) {
                let (now, holder) = holder_after_all(store, topic.id, partition, acc.next).await?;
                match holder {
                    Some(holder) => page = usable(vec![holder], acc.next),
                    None if acc.next >= now.start && holes < 3 => {
                        holes += 1;
                        continue 'pages;
                    }
                    None => return self.below_start(topic, partition, acc.next, acc.events, head).await,
                }
            }
            // Read only the parts this page can use: every object read is billed.
            page.truncate(acc.needed(&page));
            let mut data = self.read_pieces(topic.id, partition, &page);
            for seg in &page {
                let records = match data.try_next().await {
                    Ok(Some(records)) => records,
                    Ok(None) => break,
                    // Compaction replaced the segment and its old object went after a grace
                    // period, or retention removed it: look again.
                    Err(StorageError::NotFound(_)) if gone < 3 => {
                        gone += 1;
                        continue 'pages;
                    }
                    Err(StorageError::NotFound(what)) => {
                        let (now, _) = topics::head(self.inner.store.as_ref(), topic.id, partition).await?;
                        if acc.next < now.start {
                            return self.below_start(topic, partition, acc.next, acc.events, now).await;
                        }
                        return Err(StorageError::NotFound(what).into());
                    }
                    Err(StorageError::Corrupt(what)) => {
                        return Err(Error::Corrupt(format!("{what}, in {}/{}", topic.name, partition)));
                    }
                    Err(e) => return Err(e.into()),
                };
                if acc.add(partition, seg, &records) {
                    break 'pages;
                }
            }
        }
        let next = acc.next;
        Ok(ReadBatch {
            events: acc.events,
            next_offset: next,
            high_watermark: head.next.max(next),
            log_start_offset: head.start,
        })
    }

    /// The index items a read goes on from at `next`, for up to `want` events, as `lookup` says.
    async fn index_at(
        &self,
        topic_id: u64,
        partition: u32,
        next: u64,
        want: u64,
        span: Option<u64>,
        lookup: Lookup,
    ) -> Result<Vec<Segment>, StorageError> {
        let store = self.inner.store.as_ref();
        if lookup == Lookup::Holder {
            segments_for_read(store, topic_id, partition, next, want, INDEX_PAGE).await
        } else {
            segments_from(store, topic_id, partition, next, index_page(want, span, INDEX_PAGE)).await
        }
    }

    /// The events per segment last seen on a partition, after noting `seen` if given.
    fn span_hint(&self, topic_id: u64, partition: u32, seen: Option<u64>) -> Option<u64> {
        let mut spans = self.inner.spans.lock().unwrap_or_else(|e| e.into_inner());
        let Some(seen) = seen else { return spans.get(&(topic_id, partition)).copied() };
        // A bound on the memory of guesses: forgetting them costs a few larger queries.
        if spans.len() >= MAX_SPAN_HINTS {
            spans.clear();
        }
        spans.insert((topic_id, partition), seen);
        Some(seen)
    }

    /// The pieces' records, in order: kept from an earlier read
    /// ([`super::cache::SegmentCache`]), or read (up to [`READ_CONCURRENCY`] at once),
    /// checked, decoded and kept.
    fn read_pieces(
        &self,
        topic_id: u64,
        partition: u32,
        page: &[Piece],
    ) -> impl futures_util::Stream<Item = Result<Records, StorageError>> + Unpin + use<> {
        let reads: Vec<(SegmentKey, Option<Bytes>)> = page
            .iter()
            .map(|s| {
                let key =
                    SegmentKey { topic_id, partition, base: s.base, object: s.object.clone(), pos: s.pos, len: s.len };
                (key, s.data.clone())
            })
            .collect();
        let inner = self.inner.clone();
        stream::iter(reads)
            .map(move |(key, data)| {
                let inner = inner.clone();
                async move {
                    if let Some(records) = inner.segments.get(&key) {
                        return Ok(records);
                    }
                    let bytes = match data {
                        // An inline segment's bytes came with its index item.
                        Some(data) => data,
                        None => inner.objects.read(&key.object, key.pos, key.len).await?,
                    };
                    let records: Records = decode_segment(&bytes)
                        .map_err(|e| StorageError::Corrupt(format!("segment {}@{}: {e}", key.object, key.pos)))?
                        .into();
                    inner.segments.put(key, records.clone());
                    Ok(records)
                }
            })
            .buffered(READ_CONCURRENCY)
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

/// A page of the index as pieces from `next` on, only as far as they meet: a query that is
/// not a snapshot (DynamoDB's, during a compaction's swap) can show an old item without its
/// deleted neighbours.
fn usable(page: Vec<Segment>, next: u64) -> Vec<Piece> {
    let mut pieces: Vec<Piece> = page.iter().flat_map(|s| s.pieces()).filter(|p| p.next > next).collect();
    if let Some(gap) = pieces.windows(2).position(|w| w[1].base > w[0].next) {
        pieces.truncate(gap + 1);
    }
    pieces
}

/// The events a read gathers, within its bounds: `max_events`, about `max_bytes`, and the
/// answer as Lambda carries it within `max_carried` ([`crate::page`]). Like Kafka, the first
/// event goes whatever its size.
struct Gather {
    events: Vec<Event>,
    /// The next offset to read.
    next: u64,
    bytes: usize,
    carried: usize,
    max_events: usize,
    max_bytes: usize,
    max_carried: usize,
}

impl Gather {
    fn new(offset: u64, max_events: usize, max_bytes: usize, max_carried: usize) -> Self {
        Gather { events: Vec::new(), next: offset, bytes: 0, carried: 0, max_events, max_bytes, max_carried }
    }

    /// How many of the page's pieces this read can use.
    fn needed(&self, page: &[Piece]) -> usize {
        let (mut events_left, mut bytes_left) =
            (self.max_events - self.events.len(), self.max_bytes.saturating_sub(self.bytes));
        page.iter()
            .position(|s| {
                events_left = events_left.saturating_sub((s.next - s.base.max(self.next)) as usize);
                bytes_left = bytes_left.saturating_sub(s.len as usize);
                events_left == 0 || bytes_left == 0
            })
            .map_or(page.len(), |last| last + 1)
    }

    /// Adds a piece's records from `next` on; `true` when the read is full (`next` then
    /// stays after the last event taken, not at the piece's end).
    fn add(&mut self, partition: u32, seg: &Piece, records: &[crate::segment::DecodedRecord]) -> bool {
        for d in records {
            let offset = seg.base + u64::from(d.offset_delta);
            if offset < self.next {
                continue;
            }
            let size = d.record.approx_size();
            let carried = crate::page::event_size(&d.record);
            if !self.events.is_empty()
                && (self.bytes + size > self.max_bytes || self.carried + carried > self.max_carried)
            {
                return true;
            }
            self.bytes += size;
            self.carried += carried;
            self.events.push(Event { partition, offset, record: d.record.clone() });
            self.next = offset + 1;
            if self.events.len() >= self.max_events {
                return true;
            }
        }
        self.next = self.next.max(seg.next);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::SegmentRecord;
    use crate::segment::{DecodedRecord, Record};

    fn segment(base: u64, next: u64) -> Segment {
        let record = SegmentRecord {
            next,
            object: format!("o{base}"),
            pos: 0,
            len: 100,
            max_ts: 0,
            parts: Vec::new(),
            inline: false,
            counted: None,
            rewritten: false,
            moved_from: None,
        };
        Segment { base, record, version: 1, data: None }
    }

    fn records(n: u32, value_len: usize) -> Vec<DecodedRecord> {
        (0..n)
            .map(|d| DecodedRecord {
                offset_delta: d,
                record: Record {
                    timestamp_ms: 0,
                    key: None,
                    headers: Vec::new(),
                    value: bytes::Bytes::from(vec![b'x'; value_len]),
                    value_is_json: false,
                },
            })
            .collect()
    }

    #[test]
    fn a_page_is_used_only_as_far_as_its_segments_meet() {
        let pieces = usable(vec![segment(0, 10), segment(10, 20), segment(25, 30)], 5);
        assert_eq!(pieces.iter().map(|p| (p.base, p.next)).collect::<Vec<_>>(), vec![(0, 10), (10, 20)]);
        let pieces = usable(vec![segment(0, 10), segment(10, 20)], 12);
        assert_eq!(pieces.iter().map(|p| p.base).collect::<Vec<_>>(), vec![10], "pieces before `next` are skipped");
    }

    #[test]
    fn a_read_takes_from_next_on_within_its_bounds_but_always_one_event() {
        let piece = usable(vec![segment(0, 10)], 0).remove(0);
        let mut g = Gather::new(3, 100, usize::MAX, usize::MAX);
        assert!(!g.add(0, &piece, &records(10, 1)));
        assert_eq!(g.events.iter().map(|e| e.offset).collect::<Vec<_>>(), (3..10).collect::<Vec<_>>());
        assert_eq!(g.next, 10);

        let mut g = Gather::new(0, 4, usize::MAX, usize::MAX);
        assert!(g.add(0, &piece, &records(10, 1)), "full at max_events");
        assert_eq!((g.events.len(), g.next), (4, 4));

        let mut g = Gather::new(0, 100, 1, usize::MAX);
        assert!(g.add(0, &piece, &records(10, 1000)), "over max_bytes after the first event");
        assert_eq!((g.events.len(), g.next), (1, 1));
    }

    #[test]
    fn index_pages_ask_for_about_the_segments_a_read_can_use() {
        assert_eq!(index_page(100, None, INDEX_PAGE), INDEX_PAGE, "sizes unknown: a whole page");
        assert_eq!(index_page(3, None, INDEX_PAGE), 3, "never more segments than events wanted");
        assert_eq!(index_page(5, Some(12), 31), 3, "segments of 12 events: one would do");
        assert_eq!(index_page(100, Some(12), INDEX_PAGE), 19);
        assert_eq!(index_page(100, Some(1), INDEX_PAGE), INDEX_PAGE);
        assert_eq!(index_page(0, Some(0), INDEX_PAGE), 1, "a query asks for one item at least");
    }

    #[test]
    fn only_the_pieces_a_read_can_use_are_fetched() {
        let page = usable(vec![segment(0, 10), segment(10, 20), segment(20, 30)], 0);
        assert_eq!(Gather::new(0, 15, usize::MAX, usize::MAX).needed(&page), 2);
        assert_eq!(Gather::new(0, 100, 150, usize::MAX).needed(&page), 2, "100 bytes a piece");
        assert_eq!(Gather::new(0, 100, usize::MAX, usize::MAX).needed(&page), 3);
    }
}

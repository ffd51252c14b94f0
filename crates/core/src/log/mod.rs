//! The log: topics, publish and replay, over an [`ObjectStore`] for segment
//! bytes and a [`StateStore`] for everything else (see [`crate::layout`]).

pub(crate) mod commit;
pub mod timeindex;
pub(crate) mod topics;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{stream, StreamExt, TryStreamExt};
use tokio::sync::{mpsc, oneshot, watch};

use crate::layout::{self, HeadRecord, IdempotencyRecord, SegmentRecord};
use crate::log::commit::{Committer, Pending, MAX_IDEMPOTENT_PARTITIONS};
use crate::model::{
    Event, IdempotencyKey, Limits, NewEvent, OffsetQuery, PartitionState, Position, ReadBatch, TopicConfig, TopicSpec,
};
use crate::partitioner::partition_for_key;
use crate::ports::objects::{ObjectStore, StorageError};
use crate::ports::state::{Query, StateStore};
use crate::segment::{decode_segment, Record};
use crate::{names, Clock, Error, Random, SystemRandom};

/// Segment index items read per query during a replay.
const INDEX_PAGE: usize = 32;
/// Segment reads in flight at once during a replay.
const READ_CONCURRENCY: usize = 8;

/// How the log behaves, beyond its storage.
#[derive(Debug, Clone)]
pub struct LogConfig {
    pub limits: Limits,
    /// How long the publish path reuses a topic's config before reading it again. Only a
    /// saving: every commit checks the topic record's version, so a deleted topic refuses
    /// publishes at once whatever is cached.
    pub topic_cache_ttl: Duration,
    /// How often a long poll re-reads the partition head for publishes made by other
    /// processes (one small consistent read each). Publishes made by this process wake it at once.
    pub poll_interval: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            topic_cache_ttl: Duration::from_secs(1),
            poll_interval: Duration::from_millis(50),
        }
    }
}

/// A replay request: up to `max_events` and about `max_bytes` from `offset`,
/// waiting up to `wait_ms` for the first event if there is none yet.
#[derive(Debug, Clone)]
pub struct ReadRequest {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub max_events: usize,
    pub max_bytes: usize,
    pub wait_ms: u64,
}

/// The partitioned log. Cheap to clone; clones share one group committer.
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn StateStore>,
    objects: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Random>,
    config: LogConfig,
    commits: mpsc::Sender<Pending>,
    committed: watch::Receiver<u64>,
    /// Topic configs for publishing, with the clock time they were read at.
    topics: Mutex<HashMap<String, (TopicConfig, i64)>>,
    /// Round-robin cursor for events without a key.
    spread: AtomicU32,
}

/// One segment as the index describes it.
pub(crate) struct Segment {
    pub base: u64,
    pub record: SegmentRecord,
    /// The index item's version (compaction and retention replace items on it).
    pub version: u64,
}

/// A byte range of an object holding one encoded segment: offsets `base..next`.
struct Piece {
    base: u64,
    next: u64,
    object: String,
    pos: u64,
    len: u64,
}

impl Segment {
    fn pieces(&self) -> Vec<Piece> {
        let parts = self.record.pieces();
        let nexts: Vec<u64> =
            parts.iter().skip(1).map(|p| self.base + p.0).chain(std::iter::once(self.record.next)).collect();
        parts
            .iter()
            .zip(nexts)
            .map(|(&(delta, off, len), next)| Piece {
                base: self.base + delta,
                next,
                object: self.record.object.clone(),
                pos: self.record.pos + off,
                len,
            })
            .collect()
    }
}

/// Every record of a segment with its offset, reading each of its parts.
pub(crate) async fn segment_records(
    objects: &dyn ObjectStore,
    seg: &Segment,
) -> Result<Vec<(u64, crate::segment::Record)>, StorageError> {
    let data = objects.read(&seg.record.object, seg.record.pos, seg.record.len).await?;
    let mut out = Vec::new();
    for (delta, off, len) in seg.record.pieces() {
        let part = data.slice(off as usize..(off + len) as usize);
        let records = decode_segment(&part).map_err(|e| {
            StorageError::Corrupt(format!("segment {}@{}: {e}", seg.record.object, seg.record.pos + off))
        })?;
        out.extend(records.into_iter().map(|d| (seg.base + delta + u64::from(d.offset_delta), d.record)));
    }
    Ok(out)
}

impl Log {
    /// Starts the log and its group-commit task on the current tokio runtime.
    pub fn new(
        store: Arc<dyn StateStore>,
        objects: Arc<dyn ObjectStore>,
        clock: Arc<dyn Clock>,
        config: LogConfig,
    ) -> Self {
        Self::with_random(store, objects, clock, Arc::new(SystemRandom), config)
    }

    /// [`Log::new`] with the source of topic ids and jitter given.
    pub fn with_random(
        store: Arc<dyn StateStore>,
        objects: Arc<dyn ObjectStore>,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
        config: LogConfig,
    ) -> Self {
        let (commits, rx) = mpsc::channel(8192);
        let (committed_tx, committed) = watch::channel(0);
        let committer = Committer {
            store: store.clone(),
            objects: objects.clone(),
            clock: clock.clone(),
            random: random.clone(),
            heads: HashMap::new(),
            topic_versions: HashMap::new(),
            object: None,
            committed: committed_tx,
        };
        tokio::spawn(committer.run(rx));
        let spread = AtomicU32::new(random.next_u64() as u32);
        let inner = Inner {
            store,
            objects,
            clock,
            random,
            config,
            commits,
            committed,
            topics: Mutex::new(HashMap::new()),
            spread,
        };
        Self { inner: Arc::new(inner) }
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
    }

    /// The state store the log keeps its state in (the janitor works on it too).
    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.inner.store
    }

    /// The blob store the log keeps segments in (the janitor compacts and collects there).
    pub fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.objects
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// How often a long poll re-reads heads written by other processes.
    pub(crate) fn poll_interval_ms(&self) -> u64 {
        self.inner.config.poll_interval.as_millis() as u64
    }

    pub fn random(&self) -> &Arc<dyn Random> {
        &self.inner.random
    }

    /// Creates a topic; `Ok((topic, false))` if it already exists with the same spec.
    pub async fn create_topic(&self, name: &str, spec: TopicSpec) -> Result<(TopicConfig, bool), Error> {
        names::validate("topic", name)?;
        let max = self.limits().max_partitions;
        if spec.partitions == 0 || spec.partitions > max {
            return Err(Error::invalid("invalid_partitions", format!("partitions must be between 1 and {max}")));
        }
        if spec.retention_ms.is_some_and(|v| v <= 0) || spec.retention_bytes.is_some_and(|v| v <= 0) {
            return Err(Error::invalid("invalid_retention", "retention_ms and retention_bytes must be positive"));
        }
        let id = self.inner.random.next_u64() >> 1;
        topics::create(self.inner.store.as_ref(), name, spec, id, self.inner.clock.now_ms()).await
    }

    pub async fn list_topics(&self) -> Result<Vec<TopicConfig>, Error> {
        Ok(topics::list(self.inner.store.as_ref()).await?)
    }

    /// The topic and the state of each of its partitions.
    pub async fn describe_topic(&self, name: &str) -> Result<(TopicConfig, Vec<PartitionState>), Error> {
        names::validate("topic", name)?;
        let topic = topics::live(self.inner.store.as_ref(), name).await?;
        let states = topics::states(self.inner.store.as_ref(), &topic).await?;
        Ok((topic, states))
    }

    /// What the janitor has done to the topic so far (retention, compaction), if anything.
    pub async fn upkeep_of(&self, topic: &TopicConfig) -> Result<layout::UpkeepRecord, Error> {
        let item = self.inner.store.get(&layout::upkeep_record_key(topic.id)).await?;
        Ok(item.map(|i| layout::decode("upkeep", &i.value)).transpose()?.unwrap_or_default())
    }

    /// Deletes a topic at once (one atomic write); its data is removed afterwards by the janitor.
    pub async fn delete_topic(&self, name: &str) -> Result<(), Error> {
        names::validate("topic", name)?;
        self.forget_topic(name);
        topics::delete(self.inner.store.as_ref(), name, self.inner.clock.now_ms()).await
    }

    /// Appends `events` to `topic`, durably, and answers where each landed, in request order.
    /// All events for one partition become visible together or not at all.
    pub async fn publish(
        &self,
        topic: &str,
        events: Vec<NewEvent>,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<Vec<Position>, Error> {
        names::validate("topic", topic)?;
        self.check_limits(&events)?;
        let topic = match &idempotency {
            // A stored answer is final: look it up under the topic as it is now, never a cached one.
            Some(idem) => {
                let topic = topics::live(self.inner.store.as_ref(), topic).await?;
                if let Some(results) = self.previous_answer(&topic, idem).await? {
                    return Ok(results);
                }
                topic
            }
            None => self.topic(topic).await?,
        };
        let sent_to = topic.id;
        let partitions = topic.spec.partitions;
        // Kafka's sticky idea: a request's unkeyed events share one partition, the next request another.
        let sticky = self.inner.spread.fetch_add(1, Ordering::Relaxed) % partitions;
        let now = self.inner.clock.now_ms();
        let mut placed = Vec::with_capacity(events.len());
        for e in events {
            let partition = match (e.partition, &e.key) {
                (Some(p), _) if p >= partitions => {
                    return Err(Error::invalid(
                        "partition_out_of_range",
                        format!("partition {p} does not exist: topic '{}' has {partitions}", topic.name),
                    ))
                }
                (Some(p), _) => p,
                (None, Some(key)) => partition_for_key(key, partitions),
                (None, None) => sticky,
            };
            let record = Record {
                timestamp_ms: e.timestamp_ms.unwrap_or(now),
                key: e.key,
                headers: e.headers,
                value: e.value,
                value_is_json: e.value_is_json,
            };
            placed.push((partition, record));
        }
        if idempotency.is_some() {
            let mut touched: Vec<u32> = placed.iter().map(|(p, _)| *p).collect();
            touched.sort_unstable();
            touched.dedup();
            if touched.len() > MAX_IDEMPOTENT_PARTITIONS {
                return Err(Error::invalid(
                    "too_many_partitions",
                    format!(
                        "a publish with an Idempotency-Key may touch at most {MAX_IDEMPOTENT_PARTITIONS} partitions \
                         (this one touches {}): its record must commit atomically with every partition",
                        touched.len()
                    ),
                ));
            }
        }
        let name = topic.name.clone();
        let (reply, answer) = oneshot::channel();
        let pending = Pending { topic, events: placed, idempotency, reply };
        let closed =
            || Error::Unavailable(StorageError::Unavailable { message: "log is shutting down".into(), source: None });
        self.inner.commits.send(pending).await.map_err(|_| closed())?;
        let result = answer.await.map_err(|_| closed())?;
        if matches!(result, Err(Error::TopicNotFound(_))) {
            self.forget_topic(&name);
            // Placed for an incarnation deleted since (this process's cache was stale), while a
            // topic of that name lives again: not a 404. Nothing was written; a retry places
            // the events for the topic as it is now.
            if topics::live(self.inner.store.as_ref(), &name).await.is_ok_and(|now| now.id != sent_to) {
                return Err(Error::Unavailable(StorageError::Unavailable {
                    message: format!("topic '{name}' was re-created while this publish was placed: retry"),
                    source: None,
                }));
            }
        }
        result
    }

    /// The stored answer of an earlier publish under the same key, if any.
    async fn previous_answer(
        &self,
        topic: &TopicConfig,
        idem: &IdempotencyKey,
    ) -> Result<Option<Vec<Position>>, Error> {
        let Some(item) = self.inner.store.get(&layout::idempotency_key(topic.id, &idem.key)).await? else {
            return Ok(None);
        };
        let record: IdempotencyRecord = layout::decode("idempotency", &item.value)?;
        if record.fp == layout::hex(&idem.fingerprint) {
            Ok(Some(record.results))
        } else {
            Err(Error::IdempotencyKeyReused(idem.key.clone()))
        }
    }

    fn check_limits(&self, events: &[NewEvent]) -> Result<(), Error> {
        let l = self.limits();
        if events.is_empty() {
            return Err(Error::invalid("empty_batch", "a publish needs at least one event"));
        }
        if events.len() > l.max_events_per_publish {
            return Err(Error::too_large(
                "too_many_events",
                format!("{} events in one publish; the limit is {}", events.len(), l.max_events_per_publish),
            ));
        }
        for (i, e) in events.iter().enumerate() {
            if e.value.len() > l.max_value_bytes {
                return Err(Error::too_large(
                    "value_too_large",
                    format!("event {i}: value is {} bytes; the limit is {}", e.value.len(), l.max_value_bytes),
                ));
            }
            if e.headers.len() > l.max_headers_per_event {
                return Err(Error::invalid(
                    "too_many_headers",
                    format!("event {i}: {} headers; the limit is {}", e.headers.len(), l.max_headers_per_event),
                ));
            }
        }
        Ok(())
    }

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
    async fn segments(&self, topic: &TopicConfig, partition: u32, offset: u64) -> Result<Vec<Segment>, Error> {
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
            let mut page: Vec<Segment> =
                self.segments(topic, partition, next).await?.into_iter().filter(|s| s.record.next > next).collect();
            if let Some(gap) = page.windows(2).position(|w| w[1].base > w[0].record.next) {
                page.truncate(gap + 1);
            }
            if page.first().is_none_or(|s| s.base > next) {
                // Retention removed `next` since the head was read (what is left starts later),
                // or the query was torn (a second look finds it).
                let (now, _) = topics::head(store, topic.id, partition).await?;
                if next < now.start {
                    next = now.start;
                    continue;
                }
                if holes < 3 {
                    holes += 1;
                    continue;
                }
                return Err(Error::Corrupt(format!(
                    "{}/{partition}: offset {next} is in the log (start {}) but not in its index",
                    topic.name, now.start
                )));
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

    /// The topic's config for publishing, from a short-lived cache (the commit checks it).
    async fn topic(&self, name: &str) -> Result<TopicConfig, Error> {
        let ttl = self.inner.config.topic_cache_ttl.as_millis() as i64;
        let now = self.inner.clock.now_ms();
        if let Some((t, at)) = self.inner.topics.lock().unwrap_or_else(|p| p.into_inner()).get(name) {
            if now - at < ttl {
                return Ok(t.clone());
            }
        }
        let topic = topics::live(self.inner.store.as_ref(), name).await?;
        self.inner
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), (topic.clone(), self.inner.clock.now_ms()));
        Ok(topic)
    }

    fn forget_topic(&self, name: &str) {
        self.inner.topics.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    }
}

/// Up to `limit` segments of a partition from the one holding `offset` on: one query when a
/// segment starts there (the usual case), two when `offset` falls inside one.
pub(crate) async fn segments_from(
    store: &dyn StateStore,
    topic_id: u64,
    partition: u32,
    offset: u64,
    limit: usize,
) -> Result<Vec<Segment>, StorageError> {
    let pk = layout::segments_pk(topic_id, partition);
    let mut forward = Query::all(pk.clone(), limit);
    forward.from = Some(layout::offset_sk(offset));
    let mut found = decode_segments(store.query(&forward).await?.items)?;
    if found.first().is_some_and(|s| s.base == offset) {
        return Ok(found);
    }
    // `offset` falls inside a segment: the one holding it starts before it.
    let backward = Query { pk, from: None, to: Some(layout::offset_sk(offset)), forward: false, limit: 1, after: None };
    if let Some(holder) = decode_segments(store.query(&backward).await?.items)?.pop() {
        if holder.record.next > offset {
            found.insert(0, holder);
        }
    }
    Ok(found)
}

pub(crate) fn decode_segments(items: Vec<crate::ports::state::Item>) -> Result<Vec<Segment>, StorageError> {
    items
        .into_iter()
        .map(|i| {
            let base = layout::offset_of(&i.key.sk)?;
            let record: SegmentRecord = layout::decode("segment", &i.value)?;
            record.check(base)?;
            Ok(Segment { base, record, version: i.version })
        })
        .collect()
}

/// About how many bytes an event takes once rendered as JSON (base64 grows bytes by a third).
pub(crate) fn rendered_size(r: &Record) -> usize {
    // Keys and headers are JSON strings: a control character escapes to six bytes.
    let headers: usize = r.headers.iter().map(|(k, v)| (k.len() + v.len()) * 6 + 6).sum();
    let key = r.key.as_ref().map_or(4, |k| k.len() * 6 + 2);
    let value = if r.value_is_json { r.value.len() } else { r.value.len().div_ceil(3) * 4 + 2 };
    128 + key + headers + value
}

fn check_partition(topic: &TopicConfig, partition: u32) -> Result<(), Error> {
    if partition >= topic.spec.partitions {
        return Err(Error::PartitionNotFound { topic: topic.name.clone(), partition });
    }
    Ok(())
}

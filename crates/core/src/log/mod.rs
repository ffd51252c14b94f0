//! The log: topics, publish and replay, over an [`ObjectStore`] for segment
//! bytes and a [`StateStore`] for everything else (see [`crate::layout`]).

mod admit;
pub mod buffers;
mod cache;
pub(crate) mod commit;
pub(crate) mod index;
mod offsets;
pub(crate) mod read;
pub mod timeindex;
pub(crate) mod topics;

use crate::Code;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::keys;
use crate::layout::{self, IdempotencyRecord};
use crate::log::commit::{Committer, Pending, MAX_IDEMPOTENT_PARTITIONS};
use crate::model::{IdempotencyKey, Limits, NewEvent, PartitionState, Position, TopicConfig, TopicSize, TopicSpec};
use crate::partitioner::partition_for_key;
use crate::ports::objects::{ObjectStore, StorageError};
use crate::ports::state::StateStore;
use crate::segment::Record;
use crate::{names, Clock, Error, Random, SystemRandom};

/// Segment index items read per query during a replay.
pub(crate) const INDEX_PAGE: usize = 32;
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
    /// A commit whose segments take at most this many bytes in all keeps them in their index
    /// items instead of a blob: one durable write instead of two. 0 turns it off; the AWS
    /// functions keep it at [`AWS_INLINE_SEGMENT_BYTES`] (a DynamoDB write unit is 1 KB,
    /// where an S3 PUT takes any size).
    pub inline_segment_bytes: usize,
    /// A partition's segment of a commit larger than this is written in parts of about this
    /// many bytes ([`crate::segment::PART_BYTES`]; smaller in the simulation).
    pub part_bytes: usize,
    /// Bytes of decoded segments a process keeps for its next reads: a work
    /// queue's receives take a few messages of a segment at a time, groups and replays read
    /// the same partitions. 0 keeps none.
    pub segment_cache_bytes: usize,
    /// A commit to one partition whose segment goes inline and that files no idempotency
    /// record is one conditional single-item write of the partition's head, which carries the
    /// commit's index entry until the next commit writes it out (docs/DESIGN.md, "One
    /// partition, one write"). On DynamoDB that is a plain `PutItem` instead of a transaction
    /// (about a third of its latency, half its write units, and a loser only fails its
    /// condition). Off, every commit is one atomic write of the head and the entry's index
    /// item: on SQLite a write of two items costs the same fsync as one of one, so the
    /// embedded backend keeps it.
    pub single_write_commits: bool,
}

/// [`LogConfig::inline_segment_bytes`] unless configured: a few single-event publishes.
pub const DEFAULT_INLINE_SEGMENT_BYTES: usize = 32 << 10;

/// [`LogConfig::segment_cache_bytes`] unless configured.
pub const DEFAULT_SEGMENT_CACHE_BYTES: usize = 16 << 20;

/// [`LogConfig::inline_segment_bytes`] of the AWS functions: 4 KiB. There it is a matter of
/// price, not of fsyncs (docs/AWS.md): an inline segment costs 2 write units per started KB of
/// its index item in the commit's transaction; a blob costs an S3 PUT ($5.00 per million, the
/// price of 8 write units) plus 2 units for its object record. Inline is the cheaper up to
/// about 5.9 KB; 4 KiB leaves room for the item's keys and record.
pub const AWS_INLINE_SEGMENT_BYTES: usize = 4 << 10;

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            topic_cache_ttl: Duration::from_secs(1),
            poll_interval: Duration::from_millis(50),
            inline_segment_bytes: DEFAULT_INLINE_SEGMENT_BYTES,
            part_bytes: crate::segment::PART_BYTES,
            segment_cache_bytes: DEFAULT_SEGMENT_CACHE_BYTES,
            single_write_commits: false,
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
    /// Events per segment, on average, in the last index page read of each partition (topic
    /// id, partition): how many index items a read's first query there asks for. A guess of
    /// size, never trusted for what is read.
    spans: Mutex<HashMap<(u64, u32), u64>>,
    /// Segments recently read, decoded.
    segments: cache::SegmentCache,
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
            clock: clock.clone(),
            heads: HashMap::new(),
            tails: HashMap::new(),
            single_write: config.single_write_commits,
            written_out: Vec::new(),
            topic_versions: HashMap::new(),
            object: None,
            keeper: commit::Keeper {
                objects: objects.clone(),
                random: random.clone(),
                inline_max: config.inline_segment_bytes,
                part_bytes: config.part_bytes,
            },
            committed: committed_tx,
        };
        tokio::spawn(committer.run(rx));
        let spread = AtomicU32::new(random.next_u64() as u32);
        let segments = cache::SegmentCache::new(config.segment_cache_bytes);
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
            spans: Mutex::new(HashMap::new()),
            segments,
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

    /// How long a cached topic (or subscription) record serves before it is read again.
    pub(crate) fn cache_ttl_ms(&self) -> i64 {
        i64::try_from(self.inner.config.topic_cache_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// How many commits this process has made (any topic): a change says a head it read
    /// before may have moved.
    pub(crate) fn commits_here(&self) -> u64 {
        *self.inner.committed.borrow()
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
            return Err(Error::invalid(Code::InvalidPartitions, format!("partitions must be between 1 and {max}")));
        }
        if spec.retention_ms.is_some_and(|v| v <= 0) || spec.retention_bytes.is_some_and(|v| v <= 0) {
            return Err(Error::invalid(Code::InvalidRetention, "retention_ms and retention_bytes must be positive"));
        }
        let id = self.inner.random.next_u64() >> 1;
        topics::create(self.inner.store.as_ref(), name, spec, id, self.inner.clock.now_ms()).await
    }

    pub async fn list_topics(&self) -> Result<Vec<TopicConfig>, Error> {
        Ok(topics::list(self.inner.store.as_ref()).await?)
    }

    /// Whether the state store answers a read: one query of at most one item, whatever it finds.
    pub async fn ready(&self) -> Result<(), Error> {
        let query = crate::ports::state::Query::all(keys::topics_pk(), 1);
        self.inner.store.query(&query).await?;
        Ok(())
    }

    /// The topic and the state of each of its partitions.
    pub async fn describe_topic(&self, name: &str) -> Result<(TopicConfig, Vec<PartitionState>), Error> {
        names::validate("topic", name)?;
        let topic = topics::live(self.inner.store.as_ref(), name).await?;
        let states = topics::states(self.inner.store.as_ref(), &topic).await?;
        Ok((topic, states))
    }

    /// How many events and bytes each live topic holds (the janitor function's report).
    pub async fn sizes(&self) -> Result<Vec<TopicSize>, Error> {
        let mut sizes = Vec::new();
        for topic in self.list_topics().await? {
            let states = topics::states(self.inner.store.as_ref(), &topic).await?;
            sizes.push(TopicSize {
                topic: topic.name,
                partitions: topic.spec.partitions,
                events: states.iter().map(|p| p.high_watermark - p.log_start_offset).sum(),
                bytes: states.iter().map(|p| p.bytes).sum(),
            });
        }
        Ok(sizes)
    }

    /// What the janitor has done to the topic so far (retention, compaction), if anything.
    pub async fn upkeep_of(&self, topic: &TopicConfig) -> Result<layout::UpkeepRecord, Error> {
        let item = self.inner.store.get(&keys::upkeep_record_key(topic.id)).await?;
        Ok(item.map(|i| layout::decode("upkeep", &i.value)).transpose()?.unwrap_or_default())
    }

    /// Deletes a topic at once (one atomic write); its data is removed afterwards by the janitor.
    pub async fn delete_topic(&self, name: &str) -> Result<(), Error> {
        self.delete_topic_within(name, None).await
    }

    /// [`Log::delete_topic`] that answers by `deadline_ms` (this log's clock): a delete
    /// refused for contention (a commit in flight on a head it fences) backs off and tries
    /// again until then, and answers [`Error::Unavailable`] if it could not.
    pub async fn delete_topic_before(&self, name: &str, deadline_ms: i64) -> Result<(), Error> {
        self.delete_topic_within(name, Some(deadline_ms)).await
    }

    async fn delete_topic_within(&self, name: &str, deadline_ms: Option<i64>) -> Result<(), Error> {
        names::validate("topic", name)?;
        self.forget_topic(name);
        let patience =
            topics::Patience { clock: self.inner.clock.as_ref(), random: self.inner.random.as_ref(), deadline_ms };
        topics::delete(self.inner.store.as_ref(), name, &patience).await
    }

    /// Appends `events` to `topic`, durably, and answers where each landed, in request order.
    /// All events for one partition become visible together or not at all.
    pub async fn publish(
        &self,
        topic: &str,
        events: Vec<NewEvent>,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<Vec<Position>, Error> {
        self.publish_within(topic, events, idempotency, None).await
    }

    /// [`Log::publish`] that answers by `deadline_ms` (this log's clock): a commit that
    /// keeps losing races or meeting a busy store stops retrying before then and answers
    /// [`Error::Unavailable`] (the client retries), rather than run past the end of the
    /// function that serves it.
    pub async fn publish_before(
        &self,
        topic: &str,
        events: Vec<NewEvent>,
        idempotency: Option<IdempotencyKey>,
        deadline_ms: i64,
    ) -> Result<Vec<Position>, Error> {
        self.publish_within(topic, events, idempotency, Some(deadline_ms)).await
    }

    async fn publish_within(
        &self,
        topic: &str,
        events: Vec<NewEvent>,
        idempotency: Option<IdempotencyKey>,
        deadline_ms: Option<i64>,
    ) -> Result<Vec<Position>, Error> {
        names::validate("topic", topic)?;
        admit::check(self.limits(), &events, self.inner.clock.now_ms())?;
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
        crate::schedule::check(&topic, &events, self.inner.clock.now_ms())?;
        let sent_to = topic.id;
        let partitions = topic.spec.partitions;
        // Kafka's sticky idea: a request's unkeyed events share one partition, the next request another.
        let sticky = self.inner.spread.fetch_add(1, Ordering::Relaxed) % partitions;
        let now = self.inner.clock.now_ms();
        let placed = place(&topic, events, sticky, now)?;
        if idempotency.is_some() {
            check_idempotent_spread(&placed)?;
        }
        let name = topic.name.clone();
        let (reply, answer) = oneshot::channel();
        let pending = Pending { topic, events: placed, idempotency, deadline_ms, reply };
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
        let Some(item) = self.inner.store.get(&keys::idempotency_key(topic.id, &idem.key)).await? else {
            return Ok(None);
        };
        let record: IdempotencyRecord = layout::decode("idempotency", &item.value)?;
        if record.fp == layout::hex(&idem.fingerprint) {
            Ok(Some(record.results))
        } else {
            Err(Error::IdempotencyKeyReused(idem.key.clone()))
        }
    }

    /// Whether `name` is a live topic, as the publish path sees it (from its short-lived
    /// cache): for a caller that labels refused publishes by topic only when it exists.
    pub async fn topic_exists(&self, name: &str) -> bool {
        names::validate("topic", name).is_ok() && self.topic(name).await.is_ok()
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

/// Each event's partition (its own, else its key's, else the request's `sticky` one) and
/// record (timestamped `now` unless it says otherwise), in request order.
fn place(topic: &TopicConfig, events: Vec<NewEvent>, sticky: u32, now: i64) -> Result<Vec<(u32, Record)>, Error> {
    let partitions = topic.spec.partitions;
    let mut placed = Vec::with_capacity(events.len());
    for (i, e) in events.into_iter().enumerate() {
        let partition = match (e.partition, &e.key) {
            (Some(p), _) if p >= partitions => {
                return Err(Error::invalid(
                    Code::PartitionOutOfRange,
                    format!("event {i}: partition {p} does not exist: topic '{}' has {partitions}", topic.name),
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
    Ok(placed)
}

/// An idempotent publish's record commits atomically with every partition it touches: at
/// most [`MAX_IDEMPOTENT_PARTITIONS`] of them.
fn check_idempotent_spread(placed: &[(u32, Record)]) -> Result<(), Error> {
    let mut touched: Vec<u32> = placed.iter().map(|(p, _)| *p).collect();
    touched.sort_unstable();
    touched.dedup();
    if touched.len() > MAX_IDEMPOTENT_PARTITIONS {
        return Err(Error::invalid(
            Code::TooManyPartitions,
            format!(
                "a publish with an Idempotency-Key may touch at most {MAX_IDEMPOTENT_PARTITIONS} partitions \
                 (this one touches {}): its record must commit atomically with every partition",
                touched.len()
            ),
        ));
    }
    Ok(())
}

fn check_partition(topic: &TopicConfig, partition: u32) -> Result<(), Error> {
    if partition >= topic.spec.partitions {
        return Err(Error::PartitionNotFound { topic: topic.name.clone(), partition });
    }
    Ok(())
}

//! The log: topics, publish and replay, over an [`ObjectStore`] and a [`MetaStore`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use crate::commit::{Committer, Pending};
use crate::model::{
    Event, IdempotencyKey, Limits, NewEvent, OffsetQuery, PartitionState, Position, ReadBatch, TopicConfig, TopicSpec,
};
use crate::partitioner::partition_for_key;
use crate::segment::{decode_segment, Record};
use crate::storage::{MetaStore, ObjectStore, StorageError};
use crate::{names, Clock, Error};

/// How the log behaves, beyond its storage.
#[derive(Debug, Clone)]
pub struct LogConfig {
    pub limits: Limits,
    /// How long a topic's config is trusted before it is read again (deletes elsewhere show up after this).
    pub topic_cache_ttl: Duration,
    /// How often a long poll re-checks storage for publishes made by other processes.
    /// Publishes made by this process wake it at once.
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
    meta: Arc<dyn MetaStore>,
    objects: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    config: LogConfig,
    commits: mpsc::Sender<Pending>,
    committed: watch::Receiver<u64>,
    topics: Mutex<HashMap<String, (TopicConfig, Instant)>>,
    /// Round-robin cursor for events without a key.
    spread: AtomicU32,
}

impl Log {
    /// Starts the log and its group-commit task on the current tokio runtime.
    pub fn new(
        meta: Arc<dyn MetaStore>,
        objects: Arc<dyn ObjectStore>,
        clock: Arc<dyn Clock>,
        config: LogConfig,
    ) -> Self {
        let (commits, rx) = mpsc::channel(8192);
        let (committed_tx, committed) = watch::channel(0);
        let committer = Committer {
            meta: meta.clone(),
            objects: objects.clone(),
            clock: clock.clone(),
            heads: HashMap::new(),
            committed: committed_tx,
        };
        tokio::spawn(committer.run(rx));
        let inner = Inner {
            meta,
            objects,
            clock,
            config,
            commits,
            committed,
            topics: Mutex::new(HashMap::new()),
            spread: AtomicU32::new(rand::random()),
        };
        Self { inner: Arc::new(inner) }
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
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
        let topic = TopicConfig {
            name: name.to_owned(),
            id: rand::random::<u64>() >> 1,
            spec,
            created_ms: self.inner.clock.now_ms(),
        };
        match self.inner.meta.create_topic(&topic).await {
            Ok(()) => Ok((topic, true)),
            Err(StorageError::AlreadyExists(_)) => match self.inner.meta.topic(name).await? {
                Some(existing) if existing.spec == spec => Ok((existing, false)),
                Some(_) => Err(Error::TopicExists(name.to_owned())),
                // Deleted between our create and our read: a client retry will create it.
                None => Err(Error::Unavailable(StorageError::Precondition(format!("topic {name} changed")))),
            },
            Err(e) => Err(e.into()),
        }
    }

    pub async fn list_topics(&self) -> Result<Vec<TopicConfig>, Error> {
        Ok(self.inner.meta.list_topics().await?)
    }

    /// The topic and the state of each of its partitions.
    pub async fn describe_topic(&self, name: &str) -> Result<(TopicConfig, Vec<PartitionState>), Error> {
        names::validate("topic", name)?;
        let topic = self.inner.meta.topic(name).await?.ok_or_else(|| Error::TopicNotFound(name.to_owned()))?;
        let partitions = self.inner.meta.partitions(name).await.map_err(|e| not_found_topic(e, name))?;
        Ok((topic, partitions))
    }

    pub async fn delete_topic(&self, name: &str) -> Result<(), Error> {
        names::validate("topic", name)?;
        self.inner.topics.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        self.inner.meta.delete_topic(name).await.map_err(|e| not_found_topic(e, name))
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
        let topic = self.topic(topic).await?;
        if let Some(idem) = &idempotency {
            if let Some(rec) = self.inner.meta.idempotency(&topic.name, &idem.key).await? {
                return if rec.fingerprint == idem.fingerprint {
                    Ok(rec.results)
                } else {
                    Err(Error::IdempotencyKeyReused(idem.key.clone()))
                };
            }
        }
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
        let (reply, answer) = oneshot::channel();
        let pending = Pending { topic, events: placed, idempotency, reply };
        let closed =
            || Error::Unavailable(StorageError::Unavailable { message: "log is shutting down".into(), source: None });
        self.inner.commits.send(pending).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
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
    pub async fn read(&self, req: &ReadRequest) -> Result<ReadBatch, Error> {
        names::validate("topic", &req.topic)?;
        let topic = self.topic(&req.topic).await?;
        check_partition(&topic, req.partition)?;
        let limits = self.limits();
        let max_events = req.max_events.clamp(1, limits.max_read_events);
        let max_bytes = req.max_bytes.clamp(1, limits.max_read_bytes);
        let wait = Duration::from_millis(req.wait_ms.min(limits.max_wait_ms));
        let state = self.wait_for_data(&topic, req.partition, req.offset, wait).await?;

        let meta = &self.inner.meta;
        let mut events: Vec<Event> = Vec::new();
        let mut bytes = 0;
        let mut next = req.offset;
        'pages: while events.len() < max_events {
            let page = meta
                .segments(&topic.name, req.partition, next, 16)
                .await
                .map_err(|e| not_found_topic(e, &topic.name))?;
            if page.is_empty() {
                break;
            }
            for seg in page {
                let data = self.inner.objects.read(&seg.object, seg.position, seg.len).await?;
                let records = decode_segment(&data).map_err(|e| {
                    Error::Corrupt(format!(
                        "segment {}@{} of {}/{}: {e}",
                        seg.object, seg.position, seg.topic, seg.partition
                    ))
                })?;
                for d in records {
                    let offset = seg.base_offset + u64::from(d.offset_delta);
                    if offset < next {
                        continue;
                    }
                    let size = d.record.approx_size();
                    // Like Kafka, always return the first event even if it alone exceeds max_bytes.
                    if !events.is_empty() && bytes + size > max_bytes {
                        break 'pages;
                    }
                    bytes += size;
                    events.push(Event { partition: req.partition, offset, record: d.record });
                    next = offset + 1;
                    if events.len() >= max_events {
                        break 'pages;
                    }
                }
                next = next.max(seg.next_offset);
            }
        }
        Ok(ReadBatch {
            events,
            next_offset: next,
            high_watermark: state.high_watermark.max(next),
            log_start_offset: state.log_start_offset,
        })
    }

    /// The partition's state once `offset` is readable or `wait` has passed; refuses offsets out of range.
    async fn wait_for_data(
        &self,
        topic: &TopicConfig,
        partition: u32,
        offset: u64,
        wait: Duration,
    ) -> Result<PartitionState, Error> {
        let deadline = Instant::now() + wait;
        let mut committed = self.inner.committed.clone();
        loop {
            committed.borrow_and_update();
            let state =
                self.inner.meta.partition(&topic.name, partition).await.map_err(|e| not_found_topic(e, &topic.name))?;
            if offset < state.log_start_offset || offset > state.high_watermark {
                return Err(Error::OffsetOutOfRange {
                    offset,
                    log_start_offset: state.log_start_offset,
                    high_watermark: state.high_watermark,
                });
            }
            let now = Instant::now();
            if offset < state.high_watermark || now >= deadline {
                return Ok(state);
            }
            let nap = self.inner.config.poll_interval.min(deadline - now);
            tokio::select! {
                _ = committed.changed() => {}
                () = tokio::time::sleep(nap) => {}
            }
        }
    }

    /// Looks up an offset of a partition: earliest, latest, or the first at or after a time.
    pub async fn offset(&self, topic: &str, partition: u32, query: OffsetQuery) -> Result<u64, Error> {
        names::validate("topic", topic)?;
        let topic = self.topic(topic).await?;
        check_partition(&topic, partition)?;
        let meta = &self.inner.meta;
        let state = meta.partition(&topic.name, partition).await.map_err(|e| not_found_topic(e, &topic.name))?;
        let ts = match query {
            OffsetQuery::Earliest => return Ok(state.log_start_offset),
            OffsetQuery::Latest => return Ok(state.high_watermark),
            OffsetQuery::Timestamp(ts) => ts,
        };
        let Some(seg) = meta.segment_at_time(&topic.name, partition, ts).await? else {
            return Ok(state.high_watermark);
        };
        let data = self.inner.objects.read(&seg.object, seg.position, seg.len).await?;
        let records = decode_segment(&data).map_err(|e| Error::Corrupt(format!("segment {}: {e}", seg.object)))?;
        let found =
            records.iter().find(|d| d.record.timestamp_ms >= ts).map(|d| seg.base_offset + u64::from(d.offset_delta));
        Ok(found.unwrap_or(seg.next_offset).max(state.log_start_offset))
    }

    /// The topic's config, from a short-lived cache: its partition count never changes.
    async fn topic(&self, name: &str) -> Result<TopicConfig, Error> {
        let ttl = self.inner.config.topic_cache_ttl;
        if let Some((t, at)) = self.inner.topics.lock().unwrap_or_else(|p| p.into_inner()).get(name) {
            if at.elapsed() < ttl {
                return Ok(t.clone());
            }
        }
        let topic = self.inner.meta.topic(name).await?.ok_or_else(|| Error::TopicNotFound(name.to_owned()))?;
        self.inner
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), (topic.clone(), Instant::now()));
        Ok(topic)
    }
}

fn check_partition(topic: &TopicConfig, partition: u32) -> Result<(), Error> {
    if partition >= topic.spec.partitions {
        return Err(Error::PartitionNotFound { topic: topic.name.clone(), partition });
    }
    Ok(())
}

fn not_found_topic(e: StorageError, topic: &str) -> Error {
    match e {
        StorageError::NotFound(_) => Error::TopicNotFound(topic.to_owned()),
        e => e.into(),
    }
}

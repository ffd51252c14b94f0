//! The producer: `send` queues an event and answers a [`Delivery`], a future of where it
//! landed; a background task batches queued events by topic (linger time, count, bytes)
//! and publishes up to `max_in_flight` batches at once, one per topic at a time, so the
//! events of a topic land in the order they were sent (as Kafka's idempotent producer
//! keeps them per partition). When the bound is reached and the queue is full, `send`
//! waits: backpressure.
//!
//! Every batch carries an `Idempotency-Key` and is retried with it, so a batch is written
//! once however often it is sent. A batch holds events of at most 48 partitions, which
//! keeps it one atomic write (the server refuses idempotent publishes over more): the
//! producer computes keyed events' partitions as the server does, from the topic's
//! partition count, read once per topic.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::Value;
use sluice_wire::partitioner::partition_for_key;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::types::{Placed, Record};
use crate::{Client, Error};
use sluice_wire::Code;

/// Partitions one idempotent publish may touch.
const MAX_PARTITIONS_PER_BATCH: usize = 48;
/// The server's limits on one event (docs/API.md, Limits).
const MAX_VALUE_BYTES: usize = 1 << 20;
const MAX_HEADERS: usize = 64;

/// How a [`Producer`] batches.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// How long a batch waits for more events after its first (Kafka's `linger.ms`).
    pub linger: Duration,
    /// Events per request, at most 1000.
    pub max_batch_events: usize,
    /// About how many bytes per request (the server takes 6 MiB).
    pub max_batch_bytes: usize,
    /// Requests under way at once.
    pub max_in_flight: usize,
    /// Events queued before `send` waits.
    pub buffer: usize,
    /// How long a batch is sent again (under its key) while the server is busy or
    /// unreachable, before its events fail (Kafka's `delivery.timeout.ms`).
    pub delivery_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            linger: Duration::from_millis(5),
            max_batch_events: 500,
            max_batch_bytes: 1 << 20,
            max_in_flight: 4,
            buffer: 10_000,
            delivery_timeout: Duration::from_secs(120),
        }
    }
}

/// Where an event landed, once its batch is published: `delivery.await`.
pub struct Delivery(oneshot::Receiver<Result<Placed, Error>>);

impl Future for Delivery {
    type Output = Result<Placed, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

enum Command {
    Send { topic: String, record: Record, done: oneshot::Sender<Result<Placed, Error>> },
    Flush(oneshot::Sender<()>),
}

/// Publishes events in batches. Dropping it publishes what is queued, in the background;
/// `flush().await` first to know the outcome.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?; let server = sluice_runtime::LocalServer::start(dir.path()).await?;
/// use sluice_client::{Client, Producer, TopicSettings};
/// use serde_json::json;
///
/// let client = Client::new(server.url())?;
/// client.create_topic("orders", &TopicSettings::partitions(3)).await?;
/// let producer = Producer::new(client);
/// let mut deliveries = Vec::new();
/// for n in 0..100 {
///     let key = format!("order-{}", n % 7);
///     deliveries.push(producer.send("orders", Some(&key), json!({"n": n}), []).await?);
/// }
/// producer.flush().await?;
/// let first = deliveries.remove(0).await?;
/// assert_eq!(first.offset, 0);
/// # Ok(()) }
/// ```
pub struct Producer {
    commands: mpsc::Sender<Command>,
}

impl Producer {
    /// A producer with the default batching.
    pub fn new(client: Client) -> Self {
        Self::with_config(client, ProducerConfig::default())
    }

    /// A producer that batches as `config` says.
    pub fn with_config(client: Client, config: ProducerConfig) -> Self {
        let (commands, queue) = mpsc::channel(config.buffer.max(1));
        tokio::spawn(Batcher::new(client, config).run(queue));
        Self { commands }
    }

    /// Queues an event for `topic` (waiting while the queue is full) and answers its
    /// [`Delivery`]. `key` picks the partition; `headers` are string pairs.
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&str>,
        value: Value,
        headers: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Delivery, Error> {
        let mut record = Record::json(value);
        record.key = key.map(str::to_owned);
        record.headers.extend(headers);
        self.send_record(topic, record).await
    }

    /// [`Producer::send`] for a [`Record`] (bytes values, timestamps, explicit partitions).
    pub async fn send_record(&self, topic: &str, record: Record) -> Result<Delivery, Error> {
        let (done, delivery) = oneshot::channel();
        let command = Command::Send { topic: topic.to_owned(), record, done };
        self.commands.send(command).await.map_err(|_| Error::Closed)?;
        Ok(Delivery(delivery))
    }

    /// Publishes everything queued so far and waits until every request is answered. The
    /// outcome of each event is its [`Delivery`]'s.
    pub async fn flush(&self) -> Result<(), Error> {
        let (done, flushed) = oneshot::channel();
        self.commands.send(Command::Flush(done)).await.map_err(|_| Error::Closed)?;
        flushed.await.map_err(|_| Error::Closed)
    }
}

/// The events of one topic waiting to be sent together.
#[derive(Default)]
struct Batch {
    records: Vec<Record>,
    done: Vec<oneshot::Sender<Result<Placed, Error>>>,
    bytes: usize,
    partitions: HashSet<Option<u32>>,
    deadline: Option<Instant>,
}

struct Batcher {
    client: Client,
    config: ProducerConfig,
    batches: BTreeMap<String, Batch>,
    partition_counts: Arc<std::sync::Mutex<HashMap<String, u32>>>,
    permits: Arc<Semaphore>,
    /// Held by a topic's request under way: the next one waits for its answer.
    topic_turns: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    in_flight: JoinSet<()>,
    key_prefix: String,
    sequence: u64,
}

impl Batcher {
    fn new(client: Client, config: ProducerConfig) -> Self {
        let permits = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
        let key_prefix = format!("{:032x}", rand::random::<u128>());
        Self {
            client,
            config,
            batches: BTreeMap::new(),
            partition_counts: Arc::default(),
            permits,
            topic_turns: HashMap::new(),
            in_flight: JoinSet::new(),
            key_prefix,
            sequence: 0,
        }
    }

    async fn run(mut self, mut queue: mpsc::Receiver<Command>) {
        loop {
            let deadline = self.batches.values().filter_map(|b| b.deadline).min();
            tokio::select! {
                command = queue.recv() => match command {
                    Some(Command::Send { topic, record, done }) => self.add(topic, record, done).await,
                    Some(Command::Flush(done)) => {
                        self.send_all().await;
                        while self.in_flight.join_next().await.is_some() {}
                        let _ = done.send(());
                    }
                    None => break,
                },
                () = sleep_until(deadline) => {
                    let now = Instant::now();
                    let due: Vec<String> =
                        self.batches.iter().filter(|(_, b)| b.deadline.is_some_and(|d| d <= now)).map(|(t, _)| t.clone()).collect();
                    for topic in due {
                        self.send_batch(&topic).await;
                    }
                }
                Some(_) = self.in_flight.join_next(), if !self.in_flight.is_empty() => {}
            }
        }
        self.send_all().await;
        while self.in_flight.join_next().await.is_some() {}
    }

    /// The partition a record will land on, as far as the client can tell: `None` for
    /// the unkeyed events of a batch, which the server puts on one partition together.
    async fn partition_of(&mut self, topic: &str, record: &Record) -> Result<Option<u32>, Error> {
        if let Some(partition) = record.partition {
            return Ok(Some(partition));
        }
        let Some(key) = &record.key else { return Ok(None) };
        let known = self.partition_counts.lock().unwrap_or_else(|p| p.into_inner()).get(topic).copied();
        let count = match known {
            Some(count) => count,
            None => {
                let count = self.client.describe_topic(topic).await?.partitions;
                self.partition_counts.lock().unwrap_or_else(|p| p.into_inner()).insert(topic.to_owned(), count);
                count
            }
        };
        Ok(Some(partition_for_key(key.as_bytes(), count)))
    }

    async fn add(&mut self, topic: String, record: Record, done: oneshot::Sender<Result<Placed, Error>>) {
        // An event over a limit of the server fails alone, not the batch it would be in.
        let value_len = record.value_len();
        if value_len > MAX_VALUE_BYTES || record.headers.len() > MAX_HEADERS {
            let why =
                format!("an event's value is at most {MAX_VALUE_BYTES} bytes and it has at most {MAX_HEADERS} headers");
            return drop(done.send(Err(Error::Invalid(why))));
        }
        let partition = match self.partition_of(&topic, &record).await {
            Ok(partition) => partition,
            Err(error) => return drop(done.send(Err(error))),
        };
        let size = record.size(value_len);
        let full = self.batches.get(&topic).is_some_and(|b| {
            b.records.len() >= self.config.max_batch_events.clamp(1, 1000)
                || b.bytes + size > self.config.max_batch_bytes
                || (!b.partitions.contains(&partition) && b.partitions.len() >= MAX_PARTITIONS_PER_BATCH)
        });
        if full {
            self.send_batch(&topic).await;
        }
        let linger = self.config.linger;
        let batch = self.batches.entry(topic).or_default();
        batch.deadline.get_or_insert_with(|| Instant::now() + linger);
        batch.bytes += size;
        batch.partitions.insert(partition);
        batch.records.push(record);
        batch.done.push(done);
    }

    async fn send_all(&mut self) {
        let topics: Vec<String> = self.batches.keys().cloned().collect();
        for topic in topics {
            self.send_batch(&topic).await;
        }
    }

    /// Sends a topic's batch once a request slot is free (the wait is the backpressure).
    async fn send_batch(&mut self, topic: &str) {
        let Some(batch) = self.batches.remove(topic) else { return };
        let turn = self.topic_turns.entry(topic.to_owned()).or_default().clone().lock_owned().await;
        let Ok(permit) = self.permits.clone().acquire_owned().await else { return };
        self.sequence += 1;
        let key = format!("{}-{}", self.key_prefix, self.sequence);
        let (client, topic) = (self.client.clone(), topic.to_owned());
        let (deadline, counts) = (Instant::now() + self.config.delivery_timeout, self.partition_counts.clone());
        self.in_flight.spawn(async move {
            // Sent again under the same key until it is answered or the delivery timeout
            // passes (the client's own retries are short); the topic's next batch waits,
            // so its events cannot overtake these.
            let result = loop {
                match client.publish(&topic, &batch.records, Some(&key)).await {
                    Err(e) if e.is_transient() && Instant::now() < deadline => {
                        tracing::warn!(error = %e, %topic, "publish failed; sending the batch again");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    // The topic may have been re-created with another partition count.
                    Err(e)
                        if e.code()
                            .is_some_and(|c| matches!(c, Code::TooManyPartitions | Code::PartitionOutOfRange)) =>
                    {
                        counts.lock().unwrap_or_else(|p| p.into_inner()).remove(&topic);
                        break Err(e);
                    }
                    other => break other,
                }
            };
            drop((permit, turn));
            for (n, done) in batch.done.into_iter().enumerate() {
                let placed = result.as_ref().map_err(Clone::clone).and_then(|placed| {
                    placed
                        .get(n)
                        .copied()
                        .ok_or_else(|| Error::Invalid("the publish answered fewer results than events".into()))
                });
                let _ = done.send(placed);
            }
        });
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

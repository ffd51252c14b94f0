//! The producer: `send` queues an event and answers a [`Delivery`], a future of where it
//! landed. Each topic has a lane of its own (`lane.rs`): one task batches the topic's
//! events (linger time, count, bytes), another publishes its batches one at a time, so the
//! events of a topic land in the order they were sent (as Kafka's idempotent producer
//! keeps them per partition), and a topic whose batch is being sent again, for up to the
//! delivery timeout, holds up no other topic. Up to `max_in_flight` requests are under way
//! at once over all topics; once `buffer` events are queued or in flight, `send` waits:
//! backpressure.
//!
//! Every batch carries an `Idempotency-Key` and is retried with it, so a batch is written
//! once however often it is sent. A batch holds events of at most 48 partitions, which
//! keeps it one atomic write (the server refuses idempotent publishes over more): the
//! producer computes keyed events' partitions as the server does, from the topic's
//! partition count, read once per topic.

mod lane;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::types::{Placed, Record};
use crate::{Client, Error};

/// How a [`Producer`] batches.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// How long a batch waits for more events after its first (Kafka's `linger.ms`).
    pub linger: Duration,
    /// Events per request, at most 1000.
    pub max_batch_events: usize,
    /// About how many bytes per request (the server takes 6 MiB).
    pub max_batch_bytes: usize,
    /// Requests under way at once, over all topics (a topic has one at a time).
    pub max_in_flight: usize,
    /// Events queued or in flight before `send` waits.
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

/// What a topic's lane is asked to do, in the order `send` and `flush` were called.
enum Command {
    Send(Record, Waiter),
    Flush(oneshot::Sender<()>),
}

/// Who waits for an event's outcome, and the room in the buffer the event takes until then.
struct Waiter {
    done: oneshot::Sender<Result<Placed, Error>>,
    _room: OwnedSemaphorePermit,
}

impl Waiter {
    fn answer(self, outcome: Result<Placed, Error>) {
        let _ = self.done.send(outcome);
    }
}

/// What every lane of a producer shares.
struct Shared {
    client: Client,
    config: ProducerConfig,
    /// A permit per request under way.
    requests: Semaphore,
    key_prefix: String,
    sequence: AtomicU64,
}

impl Shared {
    /// A key no other batch of any producer carries.
    fn next_key(&self) -> String {
        format!("{}-{}", self.key_prefix, self.sequence.fetch_add(1, Ordering::Relaxed) + 1)
    }
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
    shared: Arc<Shared>,
    room: Arc<Semaphore>,
    /// Each topic's lane, started by the topic's first event; dropping one ends its lane
    /// once what it holds is sent.
    lanes: Mutex<HashMap<String, mpsc::UnboundedSender<Command>>>,
}

impl Producer {
    /// A producer with the default batching.
    pub fn new(client: Client) -> Self {
        Self::with_config(client, ProducerConfig::default())
    }

    /// A producer that batches as `config` says.
    pub fn with_config(client: Client, config: ProducerConfig) -> Self {
        let room = Arc::new(Semaphore::new(config.buffer.max(1)));
        let shared = Shared {
            requests: Semaphore::new(config.max_in_flight.max(1)),
            key_prefix: format!("{:032x}", rand::random::<u128>()),
            sequence: AtomicU64::new(0),
            client,
            config,
        };
        Self { shared: Arc::new(shared), room, lanes: Mutex::default() }
    }

    /// Queues an event for `topic` (waiting while the buffer is full) and answers its
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
        let room = self.room.clone().acquire_owned().await.map_err(|_| Error::Closed)?;
        let (done, delivery) = oneshot::channel();
        self.lane(topic).send(Command::Send(record, Waiter { done, _room: room })).map_err(|_| Error::Closed)?;
        Ok(Delivery(delivery))
    }

    /// Publishes everything queued so far and waits until every request is answered. The
    /// outcome of each event is its [`Delivery`]'s.
    pub async fn flush(&self) -> Result<(), Error> {
        let flushed: Vec<oneshot::Receiver<()>> = {
            let lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
            lanes
                .values()
                .map(|lane| {
                    let (done, flushed) = oneshot::channel();
                    let _ = lane.send(Command::Flush(done));
                    flushed
                })
                .collect()
        };
        for lane in flushed {
            lane.await.map_err(|_| Error::Closed)?;
        }
        Ok(())
    }

    /// `topic`'s lane, started if this is its first event.
    fn lane(&self, topic: &str) -> mpsc::UnboundedSender<Command> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        lanes.entry(topic.to_owned()).or_insert_with(|| lane::start(self.shared.clone(), topic)).clone()
    }
}

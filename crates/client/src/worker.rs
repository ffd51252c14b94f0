//! The queue worker: SQS's consumer loop. Its receivers (`receivers` of them) receive
//! batches while handlers have room for them, runs a handler per message with bounded concurrency, acks finished messages on
//! its next receive (one request per cycle), extends the visibility of a message whose
//! handler is still running when two thirds of its timeout have passed, and nacks a
//! failed message with the subscription's redelivery backoff (or the delay the handler
//! asks for).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::queues::Receive;
use crate::types::Message;
use crate::{Client, Error};

/// Why a handler failed a message: it comes back after `delay`, or after the
/// subscription's redelivery backoff when `delay` is `None`.
#[derive(Debug, Default)]
pub struct Nack {
    pub delay: Option<Duration>,
    pub reason: String,
}

impl Nack {
    /// Back after this long.
    pub fn after(delay: Duration) -> Self {
        Self { delay: Some(delay), reason: String::new() }
    }
}

impl<E: std::error::Error> From<E> for Nack {
    fn from(error: E) -> Self {
        Self { delay: None, reason: error.to_string() }
    }
}

/// How a [`Worker`] receives.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Handlers running at once; at least `receivers × batch` lets receives overlap.
    pub concurrency: usize,
    /// Messages per receive, 1 to 100.
    pub batch: u32,
    /// Long poll of an idle worker, at most 20,000.
    pub wait_ms: u64,
    /// The visibility timeout of each delivery; `None`: the subscription's.
    pub visibility_timeout_ms: Option<u64>,
    /// Receives under way at once (each for up to `batch` messages while handlers have room).
    pub receivers: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self { concurrency: 20, batch: 10, wait_ms: 10_000, visibility_timeout_ms: None, receivers: 2 }
    }
}

/// What a worker did, when it stops.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WorkerStats {
    pub received: u64,
    pub acked: u64,
    pub nacked: u64,
    pub extended: u64,
}

#[derive(Default)]
struct Counters {
    received: AtomicU64,
    acked: AtomicU64,
    nacked: AtomicU64,
    extended: AtomicU64,
}

/// Runs a handler over a subscription's messages.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?; let server = sluice_runtime::LocalServer::start(dir.path()).await?;
/// use sluice_client::{Client, Message, Nack, Record, TopicSettings, Worker};
/// use serde_json::json;
///
/// let client = Client::new(server.url())?;
/// client.create_topic("jobs", &TopicSettings::partitions(2)).await?;
/// client.create_subscription("jobs", "resize", &json!({"start": "earliest"})).await?;
/// client.publish("jobs", &[Record::json(json!({"image": 1})), Record::json(json!({"image": 2}))], None).await?;
///
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let stop = std::sync::Mutex::new(Some(stop));
/// let stats = Worker::new(client, "jobs", "resize")
///     .run(
///         move |message: Message| {
///             let _ = stop.lock().unwrap().take().map(|s| s.send(())); // one is enough here
///             async move { println!("resizing {:?}", message.event.value); Ok::<(), Nack>(()) }
///         },
///         async move { let _ = stopped.await; },
///     )
///     .await?;
/// assert!(stats.acked >= 1);
/// # Ok(()) }
/// ```
pub struct Worker {
    client: Client,
    topic: String,
    subscription: String,
    config: WorkerConfig,
}

impl Worker {
    /// A worker of `subscription` of `topic`, with the default config.
    pub fn new(client: Client, topic: &str, subscription: &str) -> Self {
        Self { client, topic: topic.to_owned(), subscription: subscription.to_owned(), config: WorkerConfig::default() }
    }

    /// With this config.
    pub fn with_config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Runs `handler` over the messages until `shutdown` resolves; then stops receiving
    /// (a receive under way is answered first, and what it brings is released unhandled,
    /// visible again at once), lets running handlers finish, acks what they finished, and
    /// answers what it did.
    pub async fn run<H, F>(self, handler: H, shutdown: impl Future<Output = ()>) -> Result<WorkerStats, Error>
    where
        H: Fn(Message) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), Nack>> + Send + 'static,
    {
        let settings = self.client.describe_subscription(&self.topic, &self.subscription).await?;
        let visibility =
            self.config.visibility_timeout_ms.or(settings["visibility_timeout_ms"].as_u64()).unwrap_or(30_000);
        let concurrency = self.config.concurrency.max(1);
        let shared = Arc::new(Shared {
            client: self.client.clone(),
            topic: self.topic.clone(),
            subscription: self.subscription.clone(),
            config: self.config.clone(),
            backoff: settings["redelivery_backoff_ms"].clone(),
            visibility: Duration::from_millis(visibility),
            slots: Arc::new(Semaphore::new(concurrency)),
            done: Mutex::new(Vec::new()),
            counters: Counters::default(),
        });
        let handler = Arc::new(handler);
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let mut receivers = tokio::task::JoinSet::new();
        for _ in 0..self.config.receivers.max(1) {
            receivers.spawn(shared.clone().receive_loop(handler.clone(), stopping.clone()));
        }
        // Until the shutdown, or until a receiver fails.
        let mut failed = tokio::select! {
            () = shutdown => None,
            Some(ended) = receivers.join_next() => Some(ended.map_err(|_| Error::Closed).and_then(|r| r).err()),
        };
        let _ = stop.send(true);
        while let Some(ended) = receivers.join_next().await {
            if let Err(error) = ended.map_err(|_| Error::Closed).and_then(|r| r) {
                failed.get_or_insert(Some(error));
            }
        }
        // Running handlers finish; their acks go out, 100 a request.
        let _all = shared.slots.acquire_many(concurrency as u32).await;
        loop {
            let done = shared.take_done();
            if done.is_empty() {
                break;
            }
            let results = self.client.ack(&self.topic, &self.subscription, &done).await?;
            shared.counters.acked.fetch_add(results.iter().filter(|r| r.ok).count() as u64, Ordering::Relaxed);
        }
        match failed.flatten() {
            Some(error) => Err(error),
            None => Ok(shared.stats()),
        }
    }
}

/// What the receive loop and the handlers' tasks share.
struct Shared {
    client: Client,
    topic: String,
    subscription: String,
    config: WorkerConfig,
    backoff: Value,
    /// One permit per handler that may run; a receive asks for as many messages as it
    /// holds permits, so a received message never waits for a slot (its visibility runs).
    slots: Arc<Semaphore>,
    visibility: Duration,
    /// Receipts of finished messages, to ack on the next receive.
    done: Mutex<Vec<String>>,
    counters: Counters,
}

impl Shared {
    /// One receiver: waits for room, receives (acking what finished), hands each message
    /// to a handler's task; until `stopping`.
    async fn receive_loop<H, F>(
        self: Arc<Self>,
        handler: Arc<H>,
        mut stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), Error>
    where
        H: Fn(Message) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), Nack>> + Send + 'static,
    {
        loop {
            let Some(mut room) = self.room(&mut stopping).await? else { return Ok(()) };
            let want = room.num_permits() as u32;
            let ack = self.take_done();
            // While handlers run or acks ride along, a short wait: acks go out soon, and a
            // shutdown waits for the receive under way.
            let busy = self.slots.available_permits() + (want as usize) < self.config.concurrency.max(1);
            let short = busy || !ack.is_empty();
            let request = Receive {
                max_messages: want,
                wait_ms: if short { self.config.wait_ms.min(1_000) } else { self.config.wait_ms },
                visibility_timeout_ms: self.config.visibility_timeout_ms,
                ack,
            };
            let acks = request.ack.len() as u64;
            // Never dropped once sent, even when told to stop: the server may have put
            // messages in flight for it, and a dropped answer would hide them for a whole
            // visibility window. A stop waits for it (its long poll at most `wait_ms`).
            let received = self.client.receive(&self.topic, &self.subscription, &request).await;
            let received = match received {
                Ok(received) => received,
                // The server stayed busy or unreachable through the client's retries: the
                // worker waits and goes on (its acks wait with it); anything else stops it.
                Err(error) if error.is_transient() => {
                    tracing::warn!(%error, "receive failed; trying again in a second");
                    self.requeue(request.ack);
                    drop(room);
                    tokio::select! {
                        () = stopped(&mut stopping) => return Ok(()),
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
                Err(error) => {
                    self.requeue(request.ack);
                    return Err(error);
                }
            };
            let acked = received.acks.iter().filter(|a| a.ok).count() as u64;
            self.counters.acked.fetch_add(acks.min(acked), Ordering::Relaxed);
            // One permit per message, held by its handler; the unused ones go back now.
            // Received once the worker is stopping (or past its room), a message is not
            // handled but released at once, for another receiver.
            let mut release = Vec::new();
            for message in received.messages {
                let permit = if *stopping.borrow() { None } else { room.split(1) };
                let Some(permit) = permit else {
                    release.push(message.receipt);
                    continue;
                };
                self.counters.received.fetch_add(1, Ordering::Relaxed);
                let (shared, handler) = (self.clone(), handler.clone());
                tokio::spawn(async move {
                    shared.handle(message, handler.as_ref()).await;
                    drop(permit);
                });
            }
            self.release(release).await;
        }
    }

    /// Gives messages back unhandled, visible again at once (a nack with no delay).
    async fn release(&self, receipts: Vec<String>) {
        if receipts.is_empty() {
            return;
        }
        match self.client.nack(&self.topic, &self.subscription, &receipts, 0).await {
            Ok(results) if results.iter().all(|r| r.ok) => {}
            other => tracing::warn!(?other, "release refused or failed: the messages come back after their timeout"),
        }
    }

    /// Room for one message at least (a handler that finishes frees its slot, so no finished
    /// message's ack waits here behind a slow handler), then for up to a batch: handlers
    /// finishing now free theirs within a moment (a smaller receive costs as much), and slow
    /// ones do not hold the receive up. `None` once stopping.
    async fn room(
        &self,
        stopping: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, Error> {
        let mut room = tokio::select! {
            // Stopping wins over free room: a receive after the stop would only be released.
            biased;
            () = stopped(stopping) => return Ok(None),
            room = self.slots.clone().acquire_owned() => room.map_err(|_| Error::Closed)?,
        };
        let most = self.config.batch.clamp(1, 100).min(self.config.concurrency.max(1) as u32) as usize;
        while room.num_permits() < most {
            let more = tokio::time::timeout(GATHER_WAIT, self.slots.clone().acquire_owned()).await;
            match more {
                Ok(Ok(permit)) => room.merge(permit),
                _ => break,
            }
        }
        Ok(Some(room))
    }

    fn take_done(&self) -> Vec<String> {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        let n = done.len().min(100);
        done.drain(..n).collect()
    }

    fn requeue(&self, receipts: Vec<String>) {
        self.done.lock().unwrap_or_else(|e| e.into_inner()).extend(receipts);
    }

    fn stats(&self) -> WorkerStats {
        let c = &self.counters;
        WorkerStats {
            received: c.received.load(Ordering::Relaxed),
            acked: c.acked.load(Ordering::Relaxed),
            nacked: c.nacked.load(Ordering::Relaxed),
            extended: c.extended.load(Ordering::Relaxed),
        }
    }

    /// Runs the handler, extending the message's visibility while it runs; then queues
    /// the ack, or nacks.
    async fn handle<H, F>(&self, message: Message, handler: &H)
    where
        H: Fn(Message) -> F,
        F: Future<Output = Result<(), Nack>>,
    {
        let mut receipt = message.receipt.clone();
        let receive_count = message.receive_count;
        let mut held_since = Instant::now();
        let work = handler(message);
        tokio::pin!(work);
        let outcome = loop {
            tokio::select! {
                outcome = &mut work => break outcome,
                // (A visibility of 0 is not extended: the message is released at once anyway.)
                () = tokio::time::sleep_until(held_since + extend_after(self.visibility)), if !self.visibility.is_zero() => {
                    let receipts = [receipt.clone()];
                    let ms = self.visibility.as_millis() as u64;
                    match self.client.change_visibility(&self.topic, &self.subscription, &receipts, ms).await {
                        Ok(results) => match results.into_iter().next() {
                            Some(r) if r.ok => {
                                receipt = r.receipt.unwrap_or(receipt);
                                self.counters.extended.fetch_add(1, Ordering::Relaxed);
                            }
                            other => tracing::warn!(?other, "visibility extension refused: the message may be handled twice"),
                        },
                        Err(error) => tracing::warn!(%error, "visibility extension failed"),
                    }
                    held_since = Instant::now();
                }
            }
        };
        match outcome {
            Ok(()) => self.done.lock().unwrap_or_else(|e| e.into_inner()).push(receipt),
            Err(nack) => {
                let delay = nack.delay.unwrap_or_else(|| redelivery_delay(&self.backoff, receive_count));
                tracing::debug!(reason = %nack.reason, ?delay, "handler failed the message");
                let result =
                    self.client.nack(&self.topic, &self.subscription, &[receipt], delay.as_millis() as u64).await;
                match result {
                    Ok(results) if results.iter().all(|r| r.ok) => {
                        self.counters.nacked.fetch_add(1, Ordering::Relaxed);
                    }
                    other => tracing::warn!(
                        ?other,
                        "nack refused or failed: the message comes back when its visibility timeout ends"
                    ),
                }
            }
        }
    }
}

/// Resolves once the worker is told to stop.
async fn stopped(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// How long a receiver waits for each further slot of a batch.
const GATHER_WAIT: Duration = Duration::from_millis(2);

/// When a running handler's message needs more time: two thirds into its timeout.
fn extend_after(visibility: Duration) -> Duration {
    visibility.mul_f64(2.0 / 3.0)
}

/// The subscription's redelivery backoff for a message delivered `receive_count` times
/// (docs/API.md): a list's n-th delay (the last repeating), or `initial_ms ×
/// multiplier^(n−1)` capped at `max_ms`; none without a backoff.
fn redelivery_delay(backoff: &Value, receive_count: u32) -> Duration {
    let n = receive_count.max(1) as usize;
    let ms = match backoff {
        Value::Array(delays) => delays.get(n - 1).or(delays.last()).and_then(Value::as_u64).unwrap_or(0),
        Value::Object(exp) => {
            let initial = exp.get("initial_ms").and_then(Value::as_u64).unwrap_or(0) as f64;
            let multiplier = exp.get("multiplier").and_then(Value::as_f64).unwrap_or(2.0);
            let max = exp.get("max_ms").and_then(Value::as_u64).unwrap_or(u64::MAX) as f64;
            (initial * multiplier.powi(n as i32 - 1)).min(max) as u64
        }
        _ => 0,
    };
    Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn given_a_subscription_backoff_then_the_nack_delay_follows_it() {
        let list = json!([1000, 10000, 60000]);
        let exp = json!({"initial_ms": 1000, "max_ms": 5000, "multiplier": 2});
        let cases = [
            (&list, 1, 1000),
            (&list, 2, 10000),
            (&list, 3, 60000),
            (&list, 9, 60000),
            (&exp, 1, 1000),
            (&exp, 2, 2000),
            (&exp, 3, 4000),
            (&exp, 4, 5000),
            (&Value::Null, 3, 0),
        ];
        for (backoff, count, ms) in cases {
            assert_eq!(redelivery_delay(backoff, count), Duration::from_millis(ms), "{backoff} after delivery {count}");
        }
    }

    #[test]
    fn given_a_timeout_then_extension_comes_before_it_ends() {
        assert_eq!(extend_after(Duration::from_secs(30)), Duration::from_secs(20));
        assert!(extend_after(Duration::from_millis(1500)) < Duration::from_millis(1500));
    }
}

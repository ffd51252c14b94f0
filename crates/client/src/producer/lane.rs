//! One topic's lane: a batching task that gathers the topic's events into batches and
//! seals each when it is full or its linger time is up, and a sending task that publishes
//! the sealed batches one after another, each until it is answered or its delivery
//! timeout passes. Between them, a queue in send order: a batch is sent only once the one
//! before it is answered, and a flush is answered once every batch sealed before it is.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_wire::partitioner::partition_for_key;
use sluice_wire::Code;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{Command, Shared, Waiter};
use crate::types::{Placed, Record};
use crate::Error;

/// Partitions one idempotent publish may touch.
const MAX_PARTITIONS_PER_BATCH: usize = 48;
/// The server's limits on one event (docs/API.md, Limits).
const MAX_VALUE_BYTES: usize = 1 << 20;
const MAX_HEADERS: usize = 64;
/// The pause before a batch is sent again, once the client's own retries gave up.
const RESEND_PAUSE: Duration = Duration::from_millis(500);

/// Starts `topic`'s lane; answers where to send it commands. The lane ends once that
/// sender is dropped and what it holds is sent.
pub(super) fn start(shared: Arc<Shared>, topic: &str) -> mpsc::UnboundedSender<Command> {
    let (commands, queue) = mpsc::unbounded_channel();
    let (sealed, outbox) = mpsc::unbounded_channel();
    // The topic's partition count once read (0: not yet, or refused since).
    let partitions = Arc::new(AtomicU32::new(0));
    let batcher = Batcher {
        shared: shared.clone(),
        topic: topic.to_owned(),
        partitions: partitions.clone(),
        open: Batch::default(),
        sealed,
    };
    tokio::spawn(batcher.run(queue));
    tokio::spawn(send_batches(shared, topic.to_owned(), partitions, outbox));
    commands
}

/// Events of the topic to be sent together.
#[derive(Default)]
struct Batch {
    records: Vec<Record>,
    waiters: Vec<Waiter>,
    bytes: usize,
    partitions: HashSet<Option<u32>>,
    /// When its linger time is up; set by its first event.
    deadline: Option<Instant>,
}

impl Batch {
    /// Answers each event of the batch from the publish's outcome.
    fn answer(self, outcome: Result<Vec<Placed>, Error>) {
        for (n, waiter) in self.waiters.into_iter().enumerate() {
            let placed = outcome.as_ref().map_err(Clone::clone).and_then(|placed| {
                placed
                    .get(n)
                    .copied()
                    .ok_or_else(|| Error::Invalid("the publish answered fewer results than events".into()))
            });
            waiter.answer(placed);
        }
    }
}

/// What the batching task hands the sending task, in order.
enum Sealed {
    Batch(Batch),
    Flush(oneshot::Sender<()>),
}

struct Batcher {
    shared: Arc<Shared>,
    topic: String,
    partitions: Arc<AtomicU32>,
    open: Batch,
    sealed: mpsc::UnboundedSender<Sealed>,
}

impl Batcher {
    async fn run(mut self, mut queue: mpsc::UnboundedReceiver<Command>) {
        loop {
            tokio::select! {
                command = queue.recv() => match command {
                    Some(Command::Send(record, waiter)) => self.add(record, waiter).await,
                    Some(Command::Flush(done)) => {
                        self.seal();
                        let _ = self.sealed.send(Sealed::Flush(done));
                    }
                    None => break,
                },
                () = sleep_until(self.open.deadline) => self.seal(),
            }
        }
        self.seal();
    }

    /// Hands the open batch, if it has events, to the sending task.
    fn seal(&mut self) {
        if !self.open.records.is_empty() {
            let _ = self.sealed.send(Sealed::Batch(std::mem::take(&mut self.open)));
        }
    }

    async fn add(&mut self, record: Record, waiter: Waiter) {
        // An event over a limit of the server fails alone, not the batch it would be in.
        let value_len = record.value_len();
        if value_len > MAX_VALUE_BYTES || record.headers.len() > MAX_HEADERS {
            let why =
                format!("an event's value is at most {MAX_VALUE_BYTES} bytes and it has at most {MAX_HEADERS} headers");
            return waiter.answer(Err(Error::Invalid(why)));
        }
        let partition = match self.partition_of(&record).await {
            Ok(partition) => partition,
            Err(error) => return waiter.answer(Err(error)),
        };
        let size = record.size(value_len);
        let batch = &self.open;
        let config = &self.shared.config;
        let full = batch.records.len() >= config.max_batch_events.clamp(1, 1000)
            || batch.bytes + size > config.max_batch_bytes
            || (!batch.partitions.contains(&partition) && batch.partitions.len() >= MAX_PARTITIONS_PER_BATCH);
        if full {
            self.seal();
        }
        let linger = self.shared.config.linger;
        let batch = &mut self.open;
        batch.deadline.get_or_insert_with(|| Instant::now() + linger);
        batch.bytes += size;
        batch.partitions.insert(partition);
        batch.records.push(record);
        batch.waiters.push(waiter);
    }

    /// The partition a record will land on, as far as the client can tell: `None` for
    /// the unkeyed events of a batch, which the server puts on one partition together. An
    /// explicit partition the topic does not have fails this record alone: sent, it would
    /// make the server refuse the whole batch it rides in.
    async fn partition_of(&mut self, record: &Record) -> Result<Option<u32>, Error> {
        if let Some(partition) = record.partition {
            // The count is asked again before refusing, in case the topic was made anew wider.
            if partition >= self.partition_count(false).await? {
                let count = self.partition_count(true).await?;
                if partition >= count {
                    let topic = &self.topic;
                    let why = format!("partition {partition} does not exist: topic '{topic}' has {count} partitions");
                    return Err(Error::Invalid(why));
                }
            }
            return Ok(Some(partition));
        }
        let Some(key) = &record.key else { return Ok(None) };
        let count = self.partition_count(false).await?;
        Ok(Some(partition_for_key(key.as_bytes(), count)))
    }

    /// The topic's partition count: the one known, unless `fresh` or none is, then asked.
    async fn partition_count(&mut self, fresh: bool) -> Result<u32, Error> {
        match self.partitions.load(Ordering::SeqCst) {
            count if count > 0 && !fresh => Ok(count),
            _ => {
                let count = self.shared.client.describe_topic(&self.topic).await?.partitions;
                self.partitions.store(count, Ordering::SeqCst);
                Ok(count)
            }
        }
    }
}

/// The sending task: each sealed batch in turn, then each flush once the batches before it
/// are answered.
async fn send_batches(
    shared: Arc<Shared>,
    topic: String,
    partitions: Arc<AtomicU32>,
    mut outbox: mpsc::UnboundedReceiver<Sealed>,
) {
    while let Some(sealed) = outbox.recv().await {
        match sealed {
            Sealed::Batch(batch) => {
                let outcome = publish(&shared, &topic, &partitions, &batch.records).await;
                batch.answer(outcome);
            }
            Sealed::Flush(done) => drop(done.send(())),
        }
    }
}

/// Publishes a batch under one key, sent again until it is answered or the delivery
/// timeout passes (the client's own retries are short). A request slot is held only while
/// a request is under way, so a batch waiting to be sent again keeps no other topic waiting.
async fn publish(
    shared: &Shared,
    topic: &str,
    partitions: &AtomicU32,
    records: &[Record],
) -> Result<Vec<Placed>, Error> {
    let key = shared.next_key();
    let mut deadline = None;
    loop {
        let Ok(slot) = shared.requests.acquire().await else { return Err(Error::Closed) };
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + shared.config.delivery_timeout);
        match shared.client.publish(topic, records, Some(&key)).await {
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tracing::warn!(error = %e, %topic, "publish failed; sending the batch again");
            }
            // The topic may have been re-created with another partition count.
            Err(e) if e.code().is_some_and(|c| matches!(c, Code::TooManyPartitions | Code::PartitionOutOfRange)) => {
                partitions.store(0, Ordering::SeqCst);
                return Err(e);
            }
            other => return other,
        }
        drop(slot);
        tokio::time::sleep(RESEND_PAUSE).await;
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

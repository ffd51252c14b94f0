//! A `queue` run's workers: receive, then ack every receipt (or ack with the next receive),
//! until the run is done; and each worker's counts and latencies.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::BoxError;

use super::client::{QueueClient, Received};
use super::run::QueueRun;

/// One worker's counts and latencies (microseconds).
pub struct WorkerStats {
    pub receives: u64,
    pub empty: u64,
    pub acks: u64,
    /// Messages received again (receive count above 1).
    pub redelivered: u64,
    /// Receipts an ack refused, by error code.
    pub refused: BTreeMap<String, u64>,
    /// Refused requests and transport errors.
    pub errors: u64,
    /// Receives that returned messages, from send to answer.
    pub receive: Histogram<u64>,
    pub ack: Histogram<u64>,
    /// From a receive's answer to its ack's answer.
    pub receive_to_ack: Histogram<u64>,
    /// From a message's publish being sent to its ack's answer (live publishers).
    pub publish_to_ack: Histogram<u64>,
}

impl WorkerStats {
    pub fn new() -> Result<Self, BoxError> {
        let h = Histogram::<u64>::new(3)?;
        Ok(Self {
            receives: 0,
            empty: 0,
            acks: 0,
            redelivered: 0,
            refused: BTreeMap::new(),
            errors: 0,
            receive: h.clone(),
            ack: h.clone(),
            receive_to_ack: h.clone(),
            publish_to_ack: h,
        })
    }

    pub fn add(&mut self, o: &WorkerStats) -> Result<(), BoxError> {
        self.receives += o.receives;
        self.empty += o.empty;
        self.acks += o.acks;
        self.redelivered += o.redelivered;
        for (code, n) in &o.refused {
            *self.refused.entry(code.clone()).or_default() += n;
        }
        self.errors += o.errors;
        self.receive.add(&o.receive)?;
        self.ack.add(&o.ack)?;
        self.receive_to_ack.add(&o.receive_to_ack)?;
        self.publish_to_ack.add(&o.publish_to_ack)?;
        Ok(())
    }
}

/// A worker: receive, ack every receipt, until the run is done.
pub async fn queue_worker(mut client: QueueClient, run: Arc<QueueRun>) -> Result<WorkerStats, BoxError> {
    let mut stats = WorkerStats::new()?;
    while !run.done.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let messages = match client.receive().await {
            Ok(Ok(messages)) => messages,
            Ok(Err(refused)) => {
                eprintln!("{refused}");
                stats.errors += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(_) => {
                stats.errors += 1;
                client.reopen().await?;
                continue;
            }
        };
        let received = Instant::now();
        stats.receives += 1;
        if messages.is_empty() {
            stats.empty += 1;
            continue;
        }
        let _ = stats.receive.record(received.duration_since(t0).as_micros() as u64);
        stats.redelivered += messages.iter().filter(|m| m.receive_count > 1).count() as u64;
        let receipts: Vec<String> = messages.iter().map(|m| m.receipt.clone()).collect();
        let t1 = Instant::now();
        let results = match client.ack(&receipts).await {
            Ok(Ok(results)) => results,
            // Not acked: the messages come back when their visibility window ends.
            Ok(Err(refused)) => {
                eprintln!("{refused}");
                stats.errors += 1;
                continue;
            }
            Err(_) => {
                stats.errors += 1;
                client.reopen().await?;
                continue;
            }
        };
        record_acks(&mut stats, &run, &messages, results, received, t1, Instant::now());
    }
    Ok(stats)
}

/// Counts an ack's results: `sent` is when the ack left, `received` when its messages came.
fn record_acks(
    stats: &mut WorkerStats,
    run: &QueueRun,
    messages: &[Received],
    results: Vec<Option<String>>,
    received: Instant,
    sent: Instant,
    acked_at: Instant,
) {
    stats.acks += 1;
    let _ = stats.ack.record(acked_at.duration_since(sent).as_micros() as u64);
    let _ = stats.receive_to_ack.record(acked_at.duration_since(received).as_micros() as u64);
    let acked_ns = acked_at.duration_since(run.clock).as_nanos() as u64;
    let mut acked = Vec::with_capacity(messages.len());
    for (m, result) in messages.iter().zip(results) {
        match result {
            None => {
                acked.push((m.partition, m.offset, m.value_len));
                if let Some(sent) = m.sent_ns {
                    let _ = stats.publish_to_ack.record(acked_ns.saturating_sub(sent) / 1000);
                }
            }
            Some(code) => *stats.refused.entry(code).or_default() += 1,
        }
    }
    run.record(&acked);
}

/// A worker whose acks ride on its next receive (`--ack-next`); the last batch is acked alone.
pub async fn queue_worker_acking_next(mut client: QueueClient, run: Arc<QueueRun>) -> Result<WorkerStats, BoxError> {
    let mut stats = WorkerStats::new()?;
    let mut held: Vec<Received> = Vec::new();
    let mut received = Instant::now();
    loop {
        let done = run.done.load(Ordering::Relaxed);
        if done && held.is_empty() {
            return Ok(stats);
        }
        let receipts: Vec<String> = held.iter().map(|m| m.receipt.clone()).collect();
        let sent = Instant::now();
        let answer = if done {
            client.ack(&receipts).await.map(|a| a.map(|acks| (Vec::new(), acks)))
        } else {
            client.receive_acking(&receipts).await
        };
        let (messages, results) = match answer {
            Ok(Ok(answer)) => answer,
            // Not acked: the held messages come back when their visibility window ends.
            Ok(Err(refused)) => {
                eprintln!("{refused}");
                stats.errors += 1;
                held.clear();
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(_) => {
                stats.errors += 1;
                held.clear();
                client.reopen().await?;
                continue;
            }
        };
        let answered = Instant::now();
        if !held.is_empty() {
            record_acks(&mut stats, &run, &held, results, received, sent, answered);
        }
        if done {
            return Ok(stats);
        }
        stats.receives += 1;
        if messages.is_empty() {
            stats.empty += 1;
        } else {
            let _ = stats.receive.record(answered.duration_since(sent).as_micros() as u64);
            stats.redelivered += messages.iter().filter(|m| m.receive_count > 1).count() as u64;
        }
        held = messages;
        received = answered;
    }
}

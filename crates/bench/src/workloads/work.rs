//! `work`: the client's worker, through `sluice-client` rather than hand-made requests: a
//! backlog, then a `Worker` (acks riding on receives) draining a fresh subscription of it.
//! What an application using the client gets, client overhead included.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde_json::json;
use sluice_client::{Client, Message, Nack, Producer, Worker, WorkerConfig};

use crate::args::WorkArgs;
use crate::report::Report;
use crate::target::{unique_group_name, Target};
use crate::BoxError;

pub async fn run(t: &Target, a: WorkArgs) -> Result<Report, BoxError> {
    let WorkArgs { concurrency, receivers, batch, count, event_size } = a;
    work(t, WorkSettings { concurrency, receivers, batch, count, event_size }).await
}

/// How a `work` run goes.
struct WorkSettings {
    concurrency: usize,
    receivers: usize,
    batch: u32,
    count: u64,
    event_size: usize,
}

async fn work(t: &Target, s: WorkSettings) -> Result<Report, BoxError> {
    let client = Client::new(&t.base)?;
    let subscription = unique_group_name();
    client.create_subscription(&t.topic, &subscription, &json!({})).await?;
    // The backlog, published through the producer.
    let producer = Producer::new(client.clone());
    let value = "x".repeat(s.event_size);
    for n in 0..s.count {
        drop(producer.send(&t.topic, Some(&format!("k{}", n % 1000)), json!(value), []).await?);
    }
    producer.flush().await?;
    let seen: Arc<Mutex<HashSet<(u32, u64)>>> = Arc::default();
    let (done, finished) = tokio::sync::watch::channel(false);
    let (handled, count) = (seen.clone(), s.count);
    let handler = move |message: Message| {
        let all = {
            let mut seen = handled.lock().unwrap_or_else(|p| p.into_inner());
            seen.insert((message.event.partition, message.event.offset));
            seen.len() as u64 >= count
        };
        if all {
            let _ = done.send(true);
        }
        async { Ok::<(), Nack>(()) }
    };
    let config = WorkerConfig {
        concurrency: s.concurrency,
        batch: s.batch,
        wait_ms: 1_000,
        receivers: s.receivers,
        ..WorkerConfig::default()
    };
    let started = Instant::now();
    let mut finished = finished;
    let stop = async move {
        let _ = finished.wait_for(|all| *all).await;
    };
    let stats = Worker::new(client.clone(), &t.topic, &subscription).with_config(config).run(handler, stop).await?;
    let elapsed = started.elapsed();
    let backlog = client.describe_subscription(&t.topic, &subscription).await?["backlog"].clone();
    let left = backlog["visible"].as_u64().unwrap_or(0) + backlog["in_flight"].as_u64().unwrap_or(0);
    let distinct = seen.lock().unwrap_or_else(|p| p.into_inner()).len() as u64;
    let failure = (distinct < s.count || left > 0)
        .then(|| format!("{distinct} of {} messages handled, {left} left in the queue", s.count));
    client.delete_subscription(&t.topic, &subscription).await?;
    Ok(Report {
        workload: "work",
        settings: json!({ "concurrency": s.concurrency, "receivers": s.receivers, "batch": s.batch, "count": s.count, "event_size": s.event_size }),
        events: stats.acked,
        bytes: stats.acked * s.event_size as u64,
        requests: 0,
        errors: 0,
        elapsed,
        latency: Histogram::<u64>::new(3)?,
        latency_of: "none (throughput only)",
        counts: vec![("received", stats.received), ("duplicates", stats.received.saturating_sub(distinct))],
        histograms: Vec::new(),
        extra: Vec::new(),
        failure,
    })
}

//! The client's own paths, through `sluice-client` rather than hand-made requests:
//! `produce`, single-event sends batched by the `Producer` (each timed from `send` to its
//! delivery), and `work`, a `Worker` draining a backlog (acks riding on receives). They
//! measure what an application using the client gets, client overhead included.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use sluice_client::{Client, Message, Nack, Producer, ProducerConfig, Worker, WorkerConfig};

use super::{unique_group_name, BoxError, Report, Target};

/// How a `produce` run goes.
pub struct ProduceSettings {
    pub senders: usize,
    pub count: u64,
    pub event_size: usize,
    pub linger_ms: u64,
}

pub async fn produce(t: &Target, s: ProduceSettings) -> Result<Report, BoxError> {
    let client = Client::new(&t.base)?;
    let config = ProducerConfig { linger: Duration::from_millis(s.linger_ms), ..ProducerConfig::default() };
    let producer = Arc::new(Producer::with_config(client, config));
    let value = "x".repeat(s.event_size);
    let started = Instant::now();
    let per_sender = s.count / s.senders.max(1) as u64;
    let mut tasks = Vec::new();
    for sender in 0..s.senders.max(1) {
        let (producer, topic, value) = (producer.clone(), t.topic.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut latency = Histogram::<u64>::new(3)?;
            let mut pending = Vec::with_capacity(per_sender as usize);
            for n in 0..per_sender {
                let key = format!("k{}", (sender as u64 * per_sender + n) % 1000);
                let sent = Instant::now();
                pending.push((sent, producer.send(&topic, Some(&key), json!(value), []).await?));
            }
            let mut errors = 0u64;
            for (sent, delivery) in pending {
                match delivery.await {
                    Ok(_) => latency.record(sent.elapsed().as_micros() as u64)?,
                    Err(_) => errors += 1,
                }
            }
            Ok::<_, BoxError>((latency, errors))
        }));
    }
    let mut latency = Histogram::<u64>::new(3)?;
    let mut errors = 0;
    for task in tasks {
        let (h, e) = task.await??;
        latency.add(&h)?;
        errors += e;
    }
    producer.flush().await?;
    let events = latency.len();
    Ok(Report {
        workload: "produce",
        settings: json!({ "senders": s.senders, "count": s.count, "event_size": s.event_size, "linger_ms": s.linger_ms }),
        events,
        bytes: events * s.event_size as u64,
        requests: 0,
        errors,
        elapsed: started.elapsed(),
        latency,
        latency_of: "event, send to delivery",
        counts: Vec::new(),
        histograms: Vec::new(),
        extra: Vec::new(),
        failure: (errors > 0).then(|| format!("{errors} events were not delivered")),
    })
}

/// How a `work` run goes.
pub struct WorkSettings {
    pub concurrency: usize,
    pub receivers: usize,
    pub batch: u32,
    pub count: u64,
    pub event_size: usize,
}

pub async fn work(t: &Target, s: WorkSettings) -> Result<Report, BoxError> {
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

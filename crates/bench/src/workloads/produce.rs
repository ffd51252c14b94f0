//! `produce`: the client's producer, through `sluice-client` rather than hand-made
//! requests: `--senders` tasks each `send` single events (keyed), batched by the `Producer`,
//! each timed from `send` to its delivery. What an application using the client gets,
//! client overhead included.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use sluice_client::{Client, Producer, ProducerConfig};

use crate::args::ProduceArgs;
use crate::report::Report;
use crate::target::Target;
use crate::BoxError;

pub async fn run(t: &Target, a: ProduceArgs) -> Result<Report, BoxError> {
    let ProduceArgs { senders, count, event_size, linger_ms } = a;
    produce(t, ProduceSettings { senders, count, event_size, linger_ms }).await
}

/// How a `produce` run goes.
struct ProduceSettings {
    senders: usize,
    count: u64,
    event_size: usize,
    linger_ms: u64,
}

async fn produce(t: &Target, s: ProduceSettings) -> Result<Report, BoxError> {
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

//! `publish`: concurrent clients publishing batches of keyed events, each with one request
//! in flight. Also how `latency` times its single publishes and how the consuming workloads
//! publish their backlog.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::args::{PublishArgs, PublishShape};
use crate::conn::Conn;
use crate::report::{spawn_progress, Report};
use crate::target::Target;
use crate::BoxError;

pub async fn run(t: &Target, a: PublishArgs) -> Result<Report, BoxError> {
    publish(t, a.shape, a.clients, Duration::from_secs_f64(a.duration), a.count.unwrap_or(u64::MAX)).await
}

/// Request bodies made up front, so the load generator spends its time on the wire.
fn bodies(shape: PublishShape, variants: usize) -> Vec<Bytes> {
    let value = json!("x".repeat(shape.event_size.saturating_sub(2)));
    (0..variants)
        .map(|v| {
            let events: Vec<Value> = (0..shape.batch)
                .map(|i| {
                    let mut e = json!({ "value": value });
                    if shape.keys > 0 {
                        e["key"] = json!(format!("key-{}", (v * shape.batch + i) as u64 % shape.keys));
                    }
                    e
                })
                .collect();
            Bytes::from(serde_json::to_vec(&json!({ "events": events })).unwrap_or_default())
        })
        .collect()
}

pub async fn publish(
    t: &Target,
    shape: PublishShape,
    clients: usize,
    duration: Duration,
    count: u64,
) -> Result<Report, BoxError> {
    let bodies = Arc::new(bodies(shape, 64));
    let path = format!("/v1/topics/{}/events", t.topic);
    let sent = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let latency = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let start = Instant::now();
    let progress = spawn_progress(sent.clone(), done.clone());
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (base, path, bodies) = (t.base.clone(), path.clone(), bodies.clone());
        let (sent, errors, done, latency) = (sent.clone(), errors.clone(), done.clone(), latency.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&base).await?;
            let mut local = Histogram::<u64>::new(3)?;
            let mut i = c;
            while !done.load(Ordering::Relaxed) {
                let before = sent.fetch_add(shape.batch as u64, Ordering::Relaxed);
                if before >= count || start.elapsed() >= duration {
                    sent.fetch_sub(shape.batch as u64, Ordering::Relaxed);
                    done.store(true, Ordering::Relaxed);
                    break;
                }
                let body = bodies[i % bodies.len()].clone();
                i += clients;
                let t0 = Instant::now();
                let ok = match conn.send(hyper::Method::POST, &path, body).await {
                    Ok((status, _)) => status == 200,
                    // The connection is unusable after a transport error: open another.
                    Err(_) => {
                        conn = Conn::open(&base).await?;
                        false
                    }
                };
                if ok {
                    let _ = local.record(t0.elapsed().as_micros() as u64);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    sent.fetch_sub(shape.batch as u64, Ordering::Relaxed);
                }
            }
            let _ = latency.lock().map(|mut h| h.add(&local));
            Ok::<_, BoxError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = start.elapsed();
    done.store(true, Ordering::Relaxed);
    progress.await?;
    let events = sent.load(Ordering::Relaxed);
    let latency = latency.lock().map_err(|_| "latency lock poisoned")?.clone();
    Ok(Report {
        workload: "publish",
        settings: json!({ "event_size": shape.event_size, "batch": shape.batch, "clients": clients, "keys": shape.keys }),
        events,
        bytes: events * shape.event_size as u64,
        requests: latency.len(),
        errors: errors.load(Ordering::Relaxed),
        elapsed,
        latency,
        latency_of: "request",
        counts: Vec::new(),
        histograms: Vec::new(),
        extra: Vec::new(),
        failure: None,
    })
}

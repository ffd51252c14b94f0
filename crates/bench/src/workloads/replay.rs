//! `replay`: the whole topic read back from offset 0, all partitions in parallel, one
//! connection each.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::conn::Conn;
use crate::report::{spawn_progress, Report};
use crate::target::Target;
use crate::BoxError;

pub async fn replay(t: &Target, limit: usize) -> Result<Report, BoxError> {
    let partitions = t.partitions().await?;
    let events = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let progress = spawn_progress(events.clone(), done.clone());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (p, end) in partitions.clone() {
        let (t, events) = (t.clone(), events.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&t.base).await?;
            let mut hist = Histogram::<u64>::new(3)?;
            let (mut offset, mut bytes, mut requests) = (0u64, 0u64, 0u64);
            while offset < end {
                let path = format!("/v1/topics/{}/partitions/{p}/events?offset={offset}&limit={limit}", t.topic);
                let t0 = Instant::now();
                let (status, body) = conn.send(hyper::Method::GET, &path, Bytes::new()).await?;
                if status != 200 {
                    return Err(format!("replay of partition {p}: HTTP {status}").into());
                }
                let _ = hist.record(t0.elapsed().as_micros() as u64);
                requests += 1;
                let page: Value = serde_json::from_slice(&body)?;
                let n = page["events"].as_array().map_or(0, Vec::len) as u64;
                let next = page["next_offset"].as_u64().ok_or("replay: no next_offset")?;
                if n == 0 || next <= offset {
                    return Err::<_, BoxError>(format!("replay of partition {p} stalled at {offset}").into());
                }
                events.fetch_add(n, Ordering::Relaxed);
                bytes += body.len() as u64;
                offset = next;
            }
            Ok((bytes, requests, hist))
        }));
    }
    let (mut bytes, mut requests) = (0, 0);
    let mut latency = Histogram::<u64>::new(3)?;
    for task in tasks {
        let (b, r, h) = task.await??;
        bytes += b;
        requests += r;
        latency.add(&h)?;
    }
    let elapsed = start.elapsed();
    done.store(true, Ordering::Relaxed);
    progress.await?;
    Ok(Report {
        workload: "replay",
        settings: json!({ "partitions": partitions.len(), "limit": limit }),
        events: events.load(Ordering::Relaxed),
        bytes,
        requests,
        errors: 0,
        elapsed,
        latency,
        latency_of: "request",
        counts: Vec::new(),
        histograms: Vec::new(),
        extra: Vec::new(),
        failure: None,
    })
}

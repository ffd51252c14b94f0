//! What feeds the consuming workloads (`group`, `queue`): a backlog published before the
//! clock starts, or live publishers whose events carry the instant they were sent.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;

use crate::args::PublishShape;
use crate::conn::Conn;
use crate::BoxError;

/// The header in which live publishers carry their send instant: nanoseconds since the
/// bench's clock base, so publish and delivery are timed on one monotonic clock.
const SENT_HEADER: &str = "bench_sent_ns";

/// What feeds a group or queue run: a backlog published before the clock starts, or live
/// publishers.
#[derive(Debug, Clone, Copy)]
pub enum GroupLoad {
    Backlog { count: u64 },
    Live { publishers: usize, duration: Duration },
}

/// Where live publishers publish, and the clock base of their send instants.
#[derive(Clone)]
pub struct LiveTarget {
    pub base_url: String,
    pub topic: String,
    pub clock: Instant,
}

/// A live publisher: one request in flight until `until`, every event carrying the
/// instant its request was sent in [`SENT_HEADER`]. Returns its request latencies.
async fn live_publisher(
    run: LiveTarget,
    shape: PublishShape,
    first_key: u64,
    stride: u64,
    until: Instant,
    acked: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) -> Result<Histogram<u64>, BoxError> {
    let path = format!("/v1/topics/{}/events", run.topic);
    let value = serde_json::to_vec(&"x".repeat(shape.event_size.saturating_sub(2)))?;
    let mut conn = Conn::open(&run.base_url).await?;
    let mut latency = Histogram::<u64>::new(3)?;
    let mut key = first_key;
    while Instant::now() < until {
        let mut body = Vec::with_capacity(16 + shape.batch * (value.len() + 80));
        let sent = run.clock.elapsed().as_nanos() as u64;
        body.extend_from_slice(b"{\"events\":[");
        for i in 0..shape.batch {
            if i > 0 {
                body.push(b',');
            }
            body.push(b'{');
            if shape.keys > 0 {
                write!(body, "\"key\":\"key-{}\",", key % shape.keys)?;
            }
            write!(body, "\"headers\":{{\"{SENT_HEADER}\":\"{sent}\"}},\"value\":")?;
            body.extend_from_slice(&value);
            body.push(b'}');
            key += stride;
        }
        body.extend_from_slice(b"]}");
        let t0 = Instant::now();
        match conn.send(hyper::Method::POST, &path, Bytes::from(body)).await {
            Ok((200, _)) => {
                acked.fetch_add(shape.batch as u64, Ordering::Relaxed);
                let _ = latency.record(t0.elapsed().as_micros() as u64);
            }
            Ok(_) => {
                failed.fetch_add(1, Ordering::Relaxed);
            }
            // The connection is unusable after a transport error: open another.
            Err(_) => {
                failed.fetch_add(1, Ordering::Relaxed);
                conn = Conn::open(&run.base_url).await?;
            }
        }
    }
    Ok(latency)
}

/// What the live publishers of a run did: events acked, requests failed, request latencies.
pub struct Published {
    pub acked: u64,
    pub failed: u64,
    pub latency: Histogram<u64>,
}

impl Published {
    /// A backlog run's: no live publishers.
    pub fn none() -> Result<Self, BoxError> {
        Ok(Self { acked: 0, failed: 0, latency: Histogram::<u64>::new(3)? })
    }
}

/// Runs `publishers` live publishers to `to` until `until`, each publishing its own keys.
pub async fn publish_live(
    to: &LiveTarget,
    shape: PublishShape,
    publishers: usize,
    until: Instant,
) -> Result<Published, BoxError> {
    let (acked, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..publishers)
        .map(|i| {
            let (to, acked, failed) = (to.clone(), acked.clone(), failed.clone());
            tokio::spawn(live_publisher(to, shape, i as u64, publishers as u64, until, acked, failed))
        })
        .collect();
    let mut latency = Histogram::<u64>::new(3)?;
    for task in tasks {
        latency.add(&task.await??)?;
    }
    Ok(Published { acked: acked.load(Ordering::Relaxed), failed: failed.load(Ordering::Relaxed), latency })
}

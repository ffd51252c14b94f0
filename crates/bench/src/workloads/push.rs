//! `push`: a push subscription delivering to a webhook receiver in this process. Live
//! (`--rate N`): a publisher sends N events/s in steady 10 ms steps, and each message is
//! timed from its event's timestamp (the server's clock at publish) to its arrival at the
//! receiver (this machine's clock: the same one). Backlog (`--rate 0`): `--count` events
//! are published first, then a subscription starting before them is timed until every
//! message arrived (delivered messages/s).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes as Body;
use axum::extract::State;
use axum::http::StatusCode;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::args::PushArgs;
use crate::report::Report;
use crate::target::{unique_group_name, Target};
use crate::BoxError;

/// How the receiver saw the run.
#[derive(Default)]
struct Received {
    ids: HashSet<String>,
    duplicates: u64,
    deliveries: u64,
    last_ms: i64,
}

struct Receiver {
    received: Mutex<Received>,
    /// Publish-to-delivery, microseconds.
    latency: Mutex<Histogram<u64>>,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

async fn hook(State(r): State<Arc<Receiver>>, body: Body) -> StatusCode {
    let now = now_ms();
    let Ok(body) = serde_json::from_slice::<Value>(&body) else { return StatusCode::BAD_REQUEST };
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let mut received = r.received.lock().unwrap_or_else(|p| p.into_inner());
    let mut latency = r.latency.lock().unwrap_or_else(|p| p.into_inner());
    received.deliveries += 1;
    received.last_ms = now;
    for m in messages {
        let id = m["id"].as_str().unwrap_or_default().to_owned();
        if received.ids.insert(id) {
            let waited_ms = (now - m["timestamp_ms"].as_i64().unwrap_or(now)).max(0) as u64;
            let _ = latency.record(waited_ms * 1000);
        } else {
            received.duplicates += 1;
        }
    }
    StatusCode::NO_CONTENT
}

/// The settings of one push run.
struct PushSettings {
    rate: u64,
    count: u64,
    max_batch: u32,
    max_in_flight: u32,
    duration: Duration,
    event_size: usize,
}

pub async fn run(target: &Target, a: PushArgs) -> Result<Report, BoxError> {
    let PushArgs { rate, count, max_batch, max_in_flight, duration, event_size } = a;
    let duration = Duration::from_secs_f64(duration);
    push(target, PushSettings { rate, count, max_batch, max_in_flight, duration, event_size }).await
}

async fn push(target: &Target, s: PushSettings) -> Result<Report, BoxError> {
    let (receiver, url) = serve_receiver().await?;
    let start_ms = now_ms();
    let value = json!("x".repeat(s.event_size.saturating_sub(2)));
    let events_url = format!("{}/v1/topics/{}/events", target.base, target.topic);
    let send = |n: u64| {
        let events: Vec<Value> = (0..n).map(|i| json!({ "key": format!("k{}", i % 1000), "value": value })).collect();
        target.http.post(&events_url).json(&json!({ "events": events })).send()
    };
    let subscribe = || async {
        let sub_url = format!("{}/v1/topics/{}/subscriptions/{}", target.base, target.topic, unique_group_name());
        let body = json!({
            "start": { "timestamp_ms": start_ms },
            "push": { "url": url, "max_batch": s.max_batch, "max_in_flight": s.max_in_flight },
        });
        let r = target.http.put(&sub_url).json(&body).send().await?;
        if r.status() != 201 {
            return Err::<(), BoxError>(format!("creating the push subscription: {}", r.text().await?).into());
        }
        Ok(())
    };
    let (mut published, mut errors) = (0u64, 0u64);
    let began;
    // Live: the rate the publisher reached (it may fall short of `--rate` on a loaded machine).
    let mut offered = None;
    if s.rate == 0 {
        while published < s.count {
            let n = (s.count - published).min(1000);
            let ok = send(n).await?.status().is_success();
            (published, errors) = (published + n * u64::from(ok), errors + u64::from(!ok));
        }
        began = now_ms();
        subscribe().await?;
    } else {
        subscribe().await?;
        // `serve` looks for new push subscriptions once a second: time the steady state.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        began = now_ms();
        let step = Duration::from_millis(10);
        let per_step = (s.rate / 100).max(1);
        let mut ticks = tokio::time::interval(step);
        let until = Instant::now() + s.duration;
        while Instant::now() < until {
            ticks.tick().await;
            let ok = send(per_step).await?.status().is_success();
            (published, errors) = (published + per_step * u64::from(ok), errors + u64::from(!ok));
        }
        let publishing_s = (now_ms() - began).max(1) as f64 / 1000.0;
        offered = Some(published as f64 / publishing_s);
    }
    wait_for_arrivals(&receiver, published, start_ms).await;
    let latency = receiver.latency.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let received = std::mem::take(&mut *receiver.received.lock().unwrap_or_else(|p| p.into_inner()));
    // From the first publish (live) or the subscription's creation (backlog) to the last arrival.
    let elapsed = Duration::from_millis((received.last_ms - began).max(1) as u64);
    let delivered = received.ids.len() as u64;
    let never = published.saturating_sub(delivered);
    Ok(Report {
        workload: "push",
        settings: json!({ "rate": s.rate, "max_batch": s.max_batch, "max_in_flight": s.max_in_flight, "event_size": s.event_size, "published": published }),
        events: delivered,
        bytes: delivered * s.event_size as u64,
        requests: received.deliveries,
        errors,
        elapsed,
        latency,
        latency_of: "message, publish to delivery",
        counts: vec![("deliveries", received.deliveries), ("duplicates", received.duplicates)],
        histograms: Vec::new(),
        extra: Vec::from_iter(
            offered.map(|o| ("offered_per_sec", json!(o), vec![format!("{:<24}{:>14.0}", "offered events/s", o)])),
        ),
        failure: (never > 0).then(|| format!("{never} of {published} messages were never pushed")),
    })
}

/// Starts the webhook receiver on a free loopback port; answers it and its URL.
async fn serve_receiver() -> Result<(Arc<Receiver>, String), BoxError> {
    let receiver = Arc::new(Receiver {
        received: Mutex::default(),
        latency: Mutex::new(Histogram::new_with_bounds(1, 600_000_000, 3)?),
    });
    let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((receiver, url))
}

/// Waits until every one of `published` messages arrived, or 30 s after the last arrival.
async fn wait_for_arrivals(receiver: &Receiver, published: u64, start_ms: i64) {
    loop {
        let (got, last) = {
            let r = receiver.received.lock().unwrap_or_else(|p| p.into_inner());
            (r.ids.len() as u64, r.last_ms)
        };
        if got >= published || (now_ms() - last.max(start_ms)) > 30_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

//! `queue`: the workers of one fresh subscription (a work queue) receive and ack until
//! every message of the run is acked, fed a backlog published first or live publishers; then
//! the run is checked: every message acked exactly once. Over HTTP, or (`--embedded`) on a
//! log in this process whose stores count their calls.

mod backend;
mod client;
mod profile;
mod run;
mod worker;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::args::{PublishShape, QueueArgs};
use crate::report::{spawn_progress, Report};
use crate::target::{unique_group_name, Target};
use crate::BoxError;

use self::backend::QueueBackend;
use self::client::{QueueClient, QueueSettings};
use self::run::QueueRun;
use self::worker::{queue_worker, queue_worker_acking_next, WorkerStats};
use super::load::{publish_live, GroupLoad, LiveTarget, Published};

pub async fn run(t: &Target, a: QueueArgs, partitions: u32) -> Result<Report, BoxError> {
    if a.workers == 0 {
        return Err("--workers must be at least 1".into());
    }
    let default_batch = if a.publishers == 0 { 100 } else { 1 };
    let shape =
        PublishShape { event_size: a.event_size, batch: a.publish_batch.unwrap_or(default_batch).max(1), keys: 1000 };
    let settings = QueueSettings {
        subscription: unique_group_name(),
        workers: a.workers,
        batch: a.batch,
        wait_ms: a.wait_ms,
        visibility_timeout_ms: a.visibility_timeout_ms,
        shape,
        ack_next: a.ack_next,
    };
    let load = match a.publishers {
        0 => GroupLoad::Backlog { count: a.count },
        p => GroupLoad::Live { publishers: p, duration: Duration::from_secs_f64(a.duration) },
    };
    let backend = match a.embedded {
        None => QueueBackend::Http(t.clone()),
        Some(dir) => {
            if a.publishers > 0 {
                return Err("--embedded runs a backlog only (--publishers 0)".into());
            }
            QueueBackend::embedded(&dir, &t.topic, partitions, a.cache_immutable).await?
        }
    };
    queue(backend, settings, load).await
}

/// The `queue` workload: a fresh subscription of the topic, drained by workers that ack
/// every receive, then checked: every message of the run acked exactly once.
async fn queue(backend: QueueBackend, settings: QueueSettings, load: GroupLoad) -> Result<Report, BoxError> {
    if !(1..=100).contains(&settings.batch) {
        return Err("--batch must be between 1 and 100 (the most messages of one receive)".into());
    }
    let (run, mut ends, clients) = prepare(&backend, &settings, load).await?;
    let partitions = run.starts.len();
    if let QueueBackend::Embedded { profile, .. } = &backend {
        profile.reset();
    }

    let start = Instant::now();
    let progress = spawn_progress(run.acked.clone(), run.done.clone());
    let workers: Vec<_> = clients
        .into_iter()
        .map(|c| {
            if settings.ack_next {
                tokio::spawn(queue_worker_acking_next(c, run.clone()))
            } else {
                tokio::spawn(queue_worker(c, run.clone()))
            }
        })
        .collect();
    let published = match (load, &backend) {
        (GroupLoad::Live { publishers, duration }, QueueBackend::Http(t)) => {
            let to = LiveTarget { base_url: t.base.clone(), topic: t.topic.clone(), clock: run.clock };
            let published = publish_live(&to, settings.shape, publishers, start + duration).await?;
            let hw = backend.high_watermarks().await?;
            run.set_end(&hw);
            ends = Some(hw);
            published
        }
        _ => Published::none()?,
    };
    wait_until_acked(&run, &settings, &workers).await;
    let end = run.end.lock().map_err(|_| "end lock poisoned")?.unwrap_or_else(Instant::now);
    let elapsed = end.duration_since(start);
    progress.await?;
    let mut stats = WorkerStats::new()?;
    for worker in workers {
        stats.add(&worker.await??)?;
    }

    let ends = ends.ok_or("no end offsets")?;
    let checks = check(&backend, &settings.subscription, &run, &ends, &stats).await?;
    let profile = match &backend {
        QueueBackend::Embedded { profile, .. } => Some(profile.report(stats.receives, stats.acks)),
        QueueBackend::Http(_) => None,
    };
    // Only a clean run's subscription goes: a failed one stays for a look.
    if checks.problems.is_empty() {
        backend.delete(&settings.subscription).await?;
    }
    let finished = Finished { partitions, stats, published, checks, profile, elapsed };
    Ok(report(backend.transport(), &settings, load, &run, finished))
}

/// Before the clock starts: the backlog published (if that is the load), the subscription
/// created where the run's messages begin, and a client per worker. Answers the run, its
/// end offsets once known (a backlog's), and the clients.
async fn prepare(
    backend: &QueueBackend,
    settings: &QueueSettings,
    load: GroupLoad,
) -> Result<(Arc<QueueRun>, Option<Vec<u64>>, Vec<QueueClient>), BoxError> {
    let before = backend.high_watermarks().await?;
    let partitions = before.len();
    let (start_at, published) = match load {
        GroupLoad::Backlog { count } => {
            let (events, took) = backend.preload(settings.shape, count).await?;
            eprintln!("published {events} events in {:.1} s", took.as_secs_f64());
            // `earliest` on a fresh topic; on one used before, where this run's events begin.
            let start = if before.iter().all(|hw| *hw == 0) {
                json!("earliest")
            } else {
                json!({ "offsets": before.iter().enumerate().map(|(p, o)| (p.to_string(), json!(o))).collect::<serde_json::Map<_, _>>() })
            };
            (start, Some(events))
        }
        GroupLoad::Live { .. } => (json!("latest"), None),
    };
    let starts = backend.create(settings, start_at.clone()).await?;
    if starts.len() != partitions || (published.is_some() && starts != before) {
        return Err(format!("subscription starts at {starts:?}, expected {before:?}").into());
    }
    let run = Arc::new(QueueRun::new(starts));
    let mut ends = None;
    if published.is_some() {
        let hw = backend.high_watermarks().await?;
        run.set_end(&hw);
        ends = Some(hw);
    }
    let mut clients = Vec::with_capacity(settings.workers);
    for _ in 0..settings.workers {
        clients.push(backend.client(settings).await?);
    }
    eprintln!(
        "subscription {} ({start_at}): {} workers, receive batch {}, {} messages to ack",
        settings.subscription,
        settings.workers,
        settings.batch,
        published.map_or_else(|| "live".to_owned(), |_| run.expected.load(Ordering::Relaxed).to_string())
    );
    Ok((run, ends, clients))
}

/// Waits until every message is acked; a stall longer than a visibility window (lost
/// messages come back after it), or a worker failing, ends the run.
async fn wait_until_acked(
    run: &QueueRun,
    settings: &QueueSettings,
    workers: &[tokio::task::JoinHandle<Result<WorkerStats, BoxError>>],
) {
    let stall = Duration::from_millis(settings.visibility_timeout_ms.unwrap_or(30_000) + 10_000);
    let mut progress_at = (run.acked.load(Ordering::Relaxed), Instant::now());
    while !run.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let acked = run.acked.load(Ordering::Relaxed);
        if acked != progress_at.0 {
            progress_at = (acked, Instant::now());
        } else if progress_at.1.elapsed() > stall || workers.iter().any(|w| w.is_finished()) {
            eprintln!("subscription {}: stopped with {acked} messages acked", settings.subscription);
            run.done.store(true, Ordering::Relaxed);
        }
    }
}

/// What the checks of a run found: messages never acked, acked twice, outside the run,
/// receipts refused as stale and otherwise, and each problem as a sentence.
struct Checks {
    missing: u64,
    twice: u64,
    outside: u64,
    stale: u64,
    refused: u64,
    problems: Vec<String>,
}

/// The checks: every message acked once by the bench's count, and none left by the server's.
async fn check(
    backend: &QueueBackend,
    subscription: &str,
    run: &QueueRun,
    ends: &[u64],
    stats: &WorkerStats,
) -> Result<Checks, BoxError> {
    let (missing, twice, outside) = run.verify(ends);
    let backlog = backend.backlog(subscription).await?;
    let mut problems = Vec::new();
    if missing > 0 {
        problems.push(format!("{missing} messages never acked"));
    }
    if twice > 0 {
        problems.push(format!("{twice} messages acked more than once"));
    }
    if outside > 0 {
        problems.push(format!("{outside} acks of messages outside the run"));
    }
    if backlog != [0; 4] {
        problems.push(format!(
            "the subscription still counts {} visible, {} in flight, {} delayed, {} dead",
            backlog[0], backlog[1], backlog[2], backlog[3]
        ));
    }
    // A stale receipt is a message redelivered after its visibility window ran out (its
    // later holder acks it); any other refusal is the bench's or the server's fault.
    let stale = stats.refused.get("stale_receipt").copied().unwrap_or(0);
    let refused: u64 = stats.refused.values().sum::<u64>() - stale;
    if refused > 0 {
        problems.push(format!("{refused} receipts refused: {:?}", stats.refused));
    }
    Ok(Checks { missing, twice, outside, stale, refused, problems })
}

/// What a finished run measured and found, for its report.
struct Finished {
    partitions: usize,
    /// The workers' merged counts and latencies.
    stats: WorkerStats,
    /// What the live publishers published (nothing with a backlog).
    published: Published,
    checks: Checks,
    /// The store calls of an embedded run: JSON and lines of text.
    profile: Option<(Value, Vec<String>)>,
    elapsed: Duration,
}

/// The figures of a finished run over `transport`.
fn report(transport: &str, s: &QueueSettings, load: GroupLoad, run: &QueueRun, f: Finished) -> Report {
    let Finished { partitions, stats, published, checks, profile, elapsed } = f;
    let Checks { missing, twice, outside, stale, refused, problems } = checks;
    let expected = run.expected.load(Ordering::Relaxed);
    let mut json_settings = json!({
        "subscription": s.subscription, "transport": transport, "workers": s.workers,
        "batch": s.batch, "partitions": partitions, "wait_ms": s.wait_ms,
        "visibility_timeout_ms": s.visibility_timeout_ms, "event_size": s.shape.event_size,
        "publish_batch": s.shape.batch, "messages": expected,
    });
    let mut counts = vec![
        ("receives", stats.receives),
        ("acks", stats.acks),
        ("empty receives", stats.empty),
        ("redelivered", stats.redelivered),
        ("stale receipts", stale),
    ];
    let mut histograms = vec![("receive", stats.receive), ("ack", stats.ack)];
    let (latency, latency_of) = match load {
        GroupLoad::Backlog { count } => {
            json_settings["mode"] = json!("backlog");
            json_settings["count"] = json!(count);
            (stats.receive_to_ack, "receive-to-ack")
        }
        GroupLoad::Live { publishers, duration } => {
            json_settings["mode"] = json!("live");
            json_settings["publishers"] = json!(publishers);
            json_settings["duration"] = json!(duration.as_secs_f64());
            counts.push(("published", published.acked));
            histograms.insert(0, ("receive-to-ack", stats.receive_to_ack));
            histograms.push(("publish", published.latency));
            (stats.publish_to_ack, "publish-to-ack")
        }
    };
    if missing + twice + outside > 0 {
        counts.push(("missing", missing));
        counts.push(("acked twice", twice));
    }
    Report {
        workload: "queue",
        settings: json_settings,
        events: run.acked.load(Ordering::Relaxed),
        bytes: run.bytes.load(Ordering::Relaxed),
        requests: stats.receives + stats.acks,
        errors: stats.errors + published.failed + refused + missing + twice + outside,
        elapsed,
        latency,
        latency_of,
        counts,
        histograms,
        extra: profile.into_iter().map(|(json, lines)| ("store_calls", json, lines)).collect(),
        failure: (!problems.is_empty()).then(|| format!("queue run not exactly-once: {}", problems.join("; "))),
    }
}

//! `sluice bench`: a load generator for a running Sluice, in the spirit of
//! `nats bench` and `kafka-producer-perf-test`. Each workload drives the HTTP
//! API and yields a [`Report`]; the table and `--json` output work for any
//! workload. `bench queue --embedded DIR` alone runs in process, on an embedded
//! log whose stores count their calls: a profiling aid, not a figure to compare.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io::Write as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[path = "client.rs"]
mod client;
#[path = "push.rs"]
mod push;

/// One keep-alive HTTP/1.1 connection driven by hyper directly: the load generator shares
/// the machine with the server, so every microsecond it spends per request is taken from it.
struct Conn {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>,
    authority: String,
}

impl Conn {
    async fn open(base: &str) -> Result<Self, BoxError> {
        let authority = base.strip_prefix("http://").ok_or("bench speaks plain http:// only")?.trim_end_matches('/');
        let stream = tokio::net::TcpStream::connect(authority).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Self { sender, authority: authority.to_owned() })
    }

    /// Sends one request and reads the whole answer.
    async fn send(&mut self, method: hyper::Method, path: &str, body: Bytes) -> Result<(u16, Bytes), BoxError> {
        use http_body_util::BodyExt;
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(body))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        Ok((status, resp.into_body().collect().await?.to_bytes()))
    }
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Base URL of the Sluice to load.
    #[arg(long, env = "SLUICE_URL", default_value = "http://127.0.0.1:8080", global = true)]
    url: String,
    /// Topic to use; created if missing.
    #[arg(long, default_value = "bench", global = true)]
    topic: String,
    /// Partitions of the topic if it is created.
    #[arg(long, default_value_t = 8, global = true)]
    partitions: u32,
    /// Print the result as JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand, Debug)]
enum Workload {
    /// Concurrent clients publishing batches of keyed events.
    Publish {
        #[command(flatten)]
        shape: PublishShape,
        /// Concurrent clients, each with one request in flight.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Stop after this many seconds…
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// …or after this many events, whichever comes first.
        #[arg(long)]
        count: Option<u64>,
    },
    /// Read the whole topic back from offset 0, all partitions in parallel.
    Replay {
        /// Events per read request.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// One client, one event per request, each awaited: the latency of a durable publish.
    Latency {
        /// Bytes of each event's value.
        #[arg(long, default_value_t = 1024)]
        event_size: usize,
        /// Publishes to time.
        #[arg(long, default_value_t = 10_000)]
        count: u64,
    },
    /// Members of one fresh consumer group reading the topic end to end, each committing
    /// after every poll (with `--riding-commits`, in its next poll instead). With
    /// `--publishers 0` they drain a backlog of `--count` events published first
    /// (throughput); with live publishers, each event is timed from its publish being sent
    /// to its arrival in a poll answer.
    Group {
        /// Members of the group, each with one poll or commit in flight.
        #[arg(long, default_value_t = 4)]
        members: usize,
        /// Most events per poll.
        #[arg(long, default_value_t = 1000)]
        max_events: usize,
        /// Most bytes per poll (default: room for `--max-events` events, at most 6 MiB).
        #[arg(long)]
        max_bytes: Option<usize>,
        /// How long a member's poll waits for events when there are none, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        wait_ms: u64,
        /// Live publishers, each with one request in flight; 0 publishes a backlog first.
        #[arg(long, default_value_t = 0)]
        publishers: usize,
        /// Events of the backlog (with `--publishers 0`).
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        /// Seconds the live publishers run.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Bytes of each event's value.
        #[arg(long, default_value_t = 1024)]
        event_size: usize,
        /// Events per publish request (default: 100 for the backlog, 1 for live publishers).
        #[arg(long)]
        batch: Option<usize>,
        /// Commit as the Rust client's consumer does: each poll carries the member's
        /// positions with `auto_commit`, committing what the previous polls returned, in
        /// place of a commit request after every poll (Kafka's `commitSync`).
        #[arg(long)]
        riding_commits: bool,
    },
    /// Workers of one fresh subscription (a work queue), each looping: receive up to
    /// `--batch` messages, then ack every receipt it got, each answered once applied. With
    /// `--publishers 0` they drain a backlog of `--count` events published first
    /// (throughput); with live publishers, each message is timed from its publish being
    /// sent to its ack's answer. The run fails unless every message was acked exactly once.
    Queue {
        /// Workers, each with one receive or ack in flight.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// Most messages per receive (1 to 100); each ack carries one receive's receipts.
        #[arg(long, default_value_t = 10)]
        batch: usize,
        /// How long a receive waits for a message when there is none, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        wait_ms: u64,
        /// Visibility timeout asked for by each receive (default: the subscription's, 30 s).
        #[arg(long)]
        visibility_timeout_ms: Option<u64>,
        /// Live publishers, each with one request in flight; 0 publishes a backlog first.
        #[arg(long, default_value_t = 0)]
        publishers: usize,
        /// Events of the backlog (with `--publishers 0`).
        #[arg(long, default_value_t = 200_000)]
        count: u64,
        /// Seconds the live publishers run.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Bytes of each event's value.
        #[arg(long, default_value_t = 1024)]
        event_size: usize,
        /// Events per publish request (default: 100 for the backlog, 1 for live publishers).
        #[arg(long)]
        publish_batch: Option<usize>,
        /// Profiling aid: run in this process on an embedded log in this directory (created
        /// if missing) instead of over HTTP, and count state-store and object-store calls per
        /// receive and per ack. Backlog only; `--url` is not used.
        #[arg(long)]
        embedded: Option<PathBuf>,
        /// With `--embedded`, an experiment: serve the items a run never changes (topic,
        /// subscription, receipt key) and the immutable segment blobs from memory, as a
        /// cache in the core would, to see what their store calls cost.
        #[arg(long, requires = "embedded")]
        cache_immutable: bool,
        /// Each worker sends its acks with its next receive (`"ack"` in the receive body):
        /// one request per batch instead of two. Over HTTP only.
        #[arg(long, conflicts_with = "embedded")]
        ack_next: bool,
    },
    /// The client's producer: `--senders` tasks each `send` single events (keyed), batched
    /// by `sluice-client`'s Producer; each event timed from `send` to its delivery.
    Produce {
        #[arg(long, default_value_t = 8)]
        senders: usize,
        #[arg(long, default_value_t = 200_000)]
        count: u64,
        #[arg(long, default_value_t = 1024)]
        event_size: usize,
        /// The producer's linger, in milliseconds.
        #[arg(long, default_value_t = 5)]
        linger_ms: u64,
    },
    /// The client's worker: a backlog of `--count` events, then a `sluice-client` Worker
    /// (acks riding on receives) drains a fresh subscription of it. Fails unless every
    /// message was handled.
    Work {
        /// Handlers at once.
        #[arg(long, default_value_t = 40)]
        concurrency: usize,
        /// Receives under way at once.
        #[arg(long, default_value_t = 4)]
        receivers: usize,
        #[arg(long, default_value_t = 10)]
        batch: u32,
        #[arg(long, default_value_t = 50_000)]
        count: u64,
        #[arg(long, default_value_t = 1024)]
        event_size: usize,
    },
    /// A push subscription delivering to a webhook receiver in this process. With `--rate N`,
    /// N events/s are published in steady 10 ms steps for `--duration` seconds and each
    /// message is timed from its publish to its arrival; with `--rate 0`, a backlog of
    /// `--count` events is published first and its delivery timed (messages/s).
    Push {
        /// Events per second (0: a backlog).
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        /// Events of the backlog (with `--rate 0`).
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        /// Messages per delivery.
        #[arg(long, default_value_t = 10)]
        max_batch: u32,
        /// Deliveries under way at once.
        #[arg(long, default_value_t = 4)]
        max_in_flight: u32,
        /// Seconds the live publisher runs.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Bytes of each event's value.
        #[arg(long, default_value_t = 1024)]
        event_size: usize,
    },
}

#[derive(Args, Debug, Clone, Copy)]
struct PublishShape {
    /// Bytes of each event's value.
    #[arg(long, default_value_t = 1024)]
    event_size: usize,
    /// Events per publish request.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Distinct keys (0: no keys, events are spread).
    #[arg(long, default_value_t = 1000)]
    keys: u64,
}

/// What one workload run measured.
pub struct Report {
    workload: &'static str,
    settings: Value,
    events: u64,
    bytes: u64,
    requests: u64,
    errors: u64,
    elapsed: Duration,
    /// Request latencies, microseconds.
    latency: Histogram<u64>,
    /// What `latency` times: each request, unless a workload says otherwise.
    latency_of: &'static str,
    /// Further counts of the workload, each also reported per second.
    counts: Vec<(&'static str, u64)>,
    /// Further latencies of the workload, microseconds.
    histograms: Vec<(&'static str, Histogram<u64>)>,
    /// Further findings, as JSON, each also printed as lines of text.
    extra: Vec<(&'static str, Value, Vec<String>)>,
    /// Why the run does not count (printed after the figures; the command then fails).
    failure: Option<String>,
}

pub async fn run(args: BenchArgs) -> Result<(), BoxError> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(1024).tcp_nodelay(true).build()?;
    let target = Target { http, base: args.url.trim_end_matches('/').to_owned(), topic: args.topic.clone() };
    if !matches!(args.workload, Workload::Queue { embedded: Some(_), .. }) {
        target.ensure_topic(args.partitions).await?;
    }
    let report = match args.workload {
        Workload::Publish { shape, clients, duration, count } => {
            publish(&target, shape, clients, Duration::from_secs_f64(duration), count.unwrap_or(u64::MAX)).await?
        }
        Workload::Replay { limit } => replay(&target, limit).await?,
        Workload::Latency { event_size, count } => {
            let shape = PublishShape { event_size, batch: 1, keys: 1000 };
            let mut r = publish(&target, shape, 1, Duration::from_secs(3600), count).await?;
            r.workload = "latency";
            r
        }
        Workload::Produce { senders, count, event_size, linger_ms } => {
            client::produce(&target, client::ProduceSettings { senders, count, event_size, linger_ms }).await?
        }
        Workload::Work { concurrency, receivers, batch, count, event_size } => {
            client::work(&target, client::WorkSettings { concurrency, receivers, batch, count, event_size }).await?
        }
        Workload::Push { rate, count, max_batch, max_in_flight, duration, event_size } => {
            let duration = Duration::from_secs_f64(duration);
            push::push(&target, push::PushSettings { rate, count, max_batch, max_in_flight, duration, event_size })
                .await?
        }
        Workload::Group {
            members,
            max_events,
            max_bytes,
            wait_ms,
            publishers,
            count,
            duration,
            event_size,
            batch,
            riding_commits,
        } => {
            if members == 0 {
                return Err("--members must be at least 1".into());
            }
            let settings = GroupSettings {
                group: unique_group_name(),
                members,
                max_events,
                // The server counts an event as its value plus 24 bytes, key and headers.
                max_bytes: max_bytes.unwrap_or((max_events * (event_size + 96)).min(6 << 20)),
                wait_ms,
                riding_commits,
            };
            let default_batch = if publishers == 0 { 100 } else { 1 };
            let shape = PublishShape { event_size, batch: batch.unwrap_or(default_batch).max(1), keys: 1000 };
            let load = match publishers {
                0 => GroupLoad::Backlog { count },
                p => GroupLoad::Live { publishers: p, duration: Duration::from_secs_f64(duration) },
            };
            group(&target, settings, shape, load).await?
        }
        Workload::Queue {
            workers,
            batch,
            wait_ms,
            visibility_timeout_ms,
            publishers,
            count,
            duration,
            event_size,
            publish_batch,
            embedded,
            cache_immutable,
            ack_next,
        } => {
            if workers == 0 {
                return Err("--workers must be at least 1".into());
            }
            let default_batch = if publishers == 0 { 100 } else { 1 };
            let shape = PublishShape { event_size, batch: publish_batch.unwrap_or(default_batch).max(1), keys: 1000 };
            let settings = QueueSettings {
                subscription: unique_group_name(),
                workers,
                batch,
                wait_ms,
                visibility_timeout_ms,
                shape,
                ack_next,
            };
            let load = match publishers {
                0 => GroupLoad::Backlog { count },
                p => GroupLoad::Live { publishers: p, duration: Duration::from_secs_f64(duration) },
            };
            let backend = match embedded {
                None => QueueBackend::Http(target.clone()),
                Some(dir) => {
                    if publishers > 0 {
                        return Err("--embedded runs a backlog only (--publishers 0)".into());
                    }
                    QueueBackend::embedded(&dir, &args.topic, args.partitions, cache_immutable).await?
                }
            };
            queue(backend, settings, load).await?
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        report.print_table();
    }
    match report.failure {
        Some(failure) => Err(failure.into()),
        None => Ok(()),
    }
}

#[derive(Clone)]
struct Target {
    http: reqwest::Client,
    base: String,
    topic: String,
}

impl Target {
    async fn ensure_topic(&self, partitions: u32) -> Result<(), BoxError> {
        let url = format!("{}/v1/topics/{}", self.base, self.topic);
        let r = self.http.put(&url).json(&json!({ "partitions": partitions })).send().await?;
        // 409: it exists with other settings; benchmark it as it is.
        if !(r.status().is_success() || r.status() == 409) {
            return Err(format!("creating topic {}: {} {}", self.topic, r.status(), r.text().await?).into());
        }
        Ok(())
    }

    async fn partitions(&self) -> Result<Vec<(u32, u64)>, BoxError> {
        let d: Value = self.http.get(format!("{}/v1/topics/{}", self.base, self.topic)).send().await?.json().await?;
        let states = d["partition_states"].as_array().ok_or("describe: no partition_states")?;
        Ok(states
            .iter()
            .map(|p| (p["partition"].as_u64().unwrap_or(0) as u32, p["high_watermark"].as_u64().unwrap_or(0)))
            .collect())
    }
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

async fn publish(
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

async fn replay(t: &Target, limit: usize) -> Result<Report, BoxError> {
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

/// The header in which live publishers carry their send instant: nanoseconds since the
/// bench's clock base, so publish and delivery are timed on one monotonic clock.
const SENT_HEADER: &str = "bench_sent_ns";

/// How the members of a `group` run poll.
#[derive(Debug, Clone)]
struct GroupSettings {
    group: String,
    members: usize,
    max_events: usize,
    max_bytes: usize,
    wait_ms: u64,
    /// Commits ride on the next poll (`positions` with `auto_commit`), no commit requests.
    riding_commits: bool,
}

/// What feeds the group: a backlog published before the clock starts, or live publishers.
#[derive(Debug, Clone, Copy)]
enum GroupLoad {
    Backlog { count: u64 },
    Live { publishers: usize, duration: Duration },
}

/// A group name no earlier run used, so every run starts with no members and no offsets.
fn unique_group_name() -> String {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    format!("bench-{}-{ms}", std::process::id())
}

/// A poll's answer, with only what the bench needs: values are checked for their size, not parsed.
#[derive(Deserialize)]
struct PollAnswer<'a> {
    #[serde(borrow)]
    member_id: Cow<'a, str>,
    generation: u64,
    assignment: Vec<serde::de::IgnoredAny>,
    #[serde(borrow)]
    events: Vec<PolledEvent<'a>>,
}

#[derive(Deserialize)]
struct PolledEvent<'a> {
    partition: u32,
    offset: u64,
    #[serde(default, borrow)]
    headers: SentHeader<'a>,
    #[serde(borrow)]
    value: Option<&'a RawValue>,
    #[serde(borrow)]
    value_base64: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct SentHeader<'a> {
    #[serde(borrow, rename = "bench_sent_ns")]
    sent_ns: Option<Cow<'a, str>>,
}

impl SentHeader<'_> {
    /// When the event's publish was sent, on the bench's clock (bench publishers' events only).
    fn ns(&self) -> Option<u64> {
        self.sent_ns.as_deref().and_then(|s| s.parse().ok())
    }
}

/// Bytes of a value as published: a JSON value's text, or the decoded size of a binary one.
fn value_len(value: Option<&RawValue>, value_base64: Option<&str>) -> u64 {
    match (value, value_base64) {
        (Some(v), _) => v.get().len() as u64,
        (None, Some(b)) => (b.len() / 4 * 3) as u64,
        (None, None) => 0,
    }
}

impl PolledEvent<'_> {
    fn value_len(&self) -> u64 {
        value_len(self.value, self.value_base64.as_deref())
    }
}

/// Per partition, how far the group has got: the next offset no member has been given yet,
/// and (once known) the offset at which the run is complete.
struct Frontier {
    next: Vec<u64>,
    end: Option<Vec<u64>>,
}

/// What the members of one run share.
struct GroupRun {
    base_url: String,
    topic: String,
    settings: GroupSettings,
    poll_path: String,
    commit_path: String,
    leave_path: String,
    frontier: Mutex<Frontier>,
    /// Events given to a member for the first time, and their value bytes.
    delivered: Arc<AtomicU64>,
    bytes: AtomicU64,
    /// Events given again (a member resumes from the last commit after a rebalance).
    redelivered: AtomicU64,
    done: Arc<AtomicBool>,
    /// When the last event of the run was delivered (and committed).
    end: Mutex<Option<Instant>>,
    /// The clock base of the publishers' send instants.
    clock: Instant,
}

impl GroupRun {
    /// Records a poll's events against the frontier; returns how many were new. The delivery
    /// latency of each new event that carries a send instant goes into `latency`.
    fn deliver(&self, events: &[PolledEvent<'_>], arrived: Instant, latency: &mut Histogram<u64>) -> u64 {
        let arrived_ns = arrived.duration_since(self.clock).as_nanos() as u64;
        let (mut fresh, mut bytes, mut again) = (0, 0, 0);
        let mut f = self.frontier.lock().unwrap_or_else(|p| p.into_inner());
        for e in events {
            let Some(next) = f.next.get_mut(e.partition as usize) else { continue };
            if e.offset < *next {
                again += 1;
                continue;
            }
            *next = e.offset + 1;
            fresh += 1;
            bytes += e.value_len();
            if let Some(sent) = e.headers.ns() {
                let _ = latency.record(arrived_ns.saturating_sub(sent) / 1000);
            }
        }
        self.delivered.fetch_add(fresh, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.redelivered.fetch_add(again, Ordering::Relaxed);
        fresh
    }

    /// Ends the run once every partition has been delivered up to its end.
    fn check_done(&self) {
        let f = self.frontier.lock().unwrap_or_else(|p| p.into_inner());
        let Some(end) = &f.end else { return };
        if f.next.iter().zip(end).all(|(n, e)| n >= e) {
            let mut at = self.end.lock().unwrap_or_else(|p| p.into_inner());
            at.get_or_insert_with(Instant::now);
            self.done.store(true, Ordering::Relaxed);
        }
    }

    fn set_end(&self, end: Vec<u64>) {
        self.frontier.lock().unwrap_or_else(|p| p.into_inner()).end = Some(end);
        self.check_done();
    }

    /// Events no member got before the run ended.
    fn missing(&self) -> u64 {
        let f = self.frontier.lock().unwrap_or_else(|p| p.into_inner());
        f.end.as_ref().map_or(0, |end| f.next.iter().zip(end).map(|(n, e)| e.saturating_sub(*n)).sum())
    }
}

/// One member's counts and latencies (microseconds) over the timed phase.
struct MemberStats {
    polls: u64,
    commits: u64,
    /// Commits refused with 409: the group moved on (a rebalance) since the poll.
    fenced: u64,
    /// Polls refused with 409 (the session ended), after which the member joins afresh.
    rejoins: u64,
    errors: u64,
    poll: Histogram<u64>,
    commit: Histogram<u64>,
    delivery: Histogram<u64>,
}

impl MemberStats {
    fn new() -> Result<Self, BoxError> {
        let h = Histogram::<u64>::new(3)?;
        Ok(Self {
            polls: 0,
            commits: 0,
            fenced: 0,
            rejoins: 0,
            errors: 0,
            poll: h.clone(),
            commit: h.clone(),
            delivery: h,
        })
    }

    fn add(&mut self, o: &MemberStats) -> Result<(), BoxError> {
        self.polls += o.polls;
        self.commits += o.commits;
        self.fenced += o.fenced;
        self.rejoins += o.rejoins;
        self.errors += o.errors;
        self.poll.add(&o.poll)?;
        self.commit.add(&o.commit)?;
        self.delivery.add(&o.delivery)?;
        Ok(())
    }
}

/// One consumer: a connection, its member id and generation once joined.
struct Member {
    conn: Conn,
    id: Option<String>,
    generation: u64,
    assignment: usize,
    /// With riding commits: per partition, the offset after the last event received in
    /// this generation, sent (and so committed) with the next poll.
    positions: BTreeMap<u32, u64>,
    stats: MemberStats,
}

impl Member {
    async fn open(run: &GroupRun) -> Result<Self, BoxError> {
        Ok(Self {
            conn: Conn::open(&run.base_url).await?,
            id: None,
            generation: 0,
            assignment: 0,
            positions: BTreeMap::new(),
            stats: MemberStats::new()?,
        })
    }

    /// Sends a request; a transport error costs the connection, which is opened again.
    async fn send(&mut self, run: &GroupRun, path: &str, body: Value) -> Result<Option<(u16, Bytes)>, BoxError> {
        match self.conn.send(hyper::Method::POST, path, Bytes::from(serde_json::to_vec(&body)?)).await {
            Ok(answer) => Ok(Some(answer)),
            Err(_) => {
                self.conn = Conn::open(&run.base_url).await?;
                self.stats.errors += 1;
                Ok(None)
            }
        }
    }

    /// One poll (joining first if need be), then one commit of the next offsets of what it
    /// got; with riding commits, the poll commits what the previous ones got instead.
    async fn poll_and_commit(&mut self, run: &GroupRun, wait_ms: u64) -> Result<(), BoxError> {
        let s = &run.settings;
        let mut poll =
            json!({ "topics": [run.topic], "max_events": s.max_events, "max_bytes": s.max_bytes, "wait_ms": wait_ms });
        if let Some(id) = &self.id {
            poll["member_id"] = json!(id);
            if s.riding_commits && !self.positions.is_empty() {
                let positions: Vec<Value> = self
                    .positions
                    .iter()
                    .map(|(p, o)| json!({ "topic": run.topic, "partition": p, "offset": o }))
                    .collect();
                poll["positions"] = json!(positions);
                poll["auto_commit"] = json!(true);
                self.stats.commits += 1;
            }
        }
        let t0 = Instant::now();
        let Some((status, body)) = self.send(run, &run.poll_path, poll).await? else { return Ok(()) };
        let arrived = Instant::now();
        self.stats.polls += 1;
        match status {
            200 => {}
            409 => {
                // The session ended (the member was silent too long): join again, as a consumer would.
                self.id = None;
                self.stats.rejoins += 1;
                return Ok(());
            }
            _ => {
                self.stats.errors += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
                return Ok(());
            }
        }
        let _ = self.stats.poll.record(arrived.duration_since(t0).as_micros() as u64);
        let answer: PollAnswer = serde_json::from_slice(&body)?;
        if self.id.as_deref() != Some(&answer.member_id) {
            self.id = Some(answer.member_id.clone().into_owned());
        }
        if answer.generation != self.generation {
            // A new generation resumes from the committed offsets: positions start over.
            self.positions.clear();
        }
        self.generation = answer.generation;
        self.assignment = answer.assignment.len();
        if answer.events.is_empty() {
            return Ok(());
        }
        if s.riding_commits {
            for e in &answer.events {
                let next = self.positions.entry(e.partition).or_default();
                *next = (*next).max(e.offset + 1);
            }
            run.deliver(&answer.events, arrived, &mut self.stats.delivery);
            run.check_done();
            return Ok(());
        }
        // The next offset of each partition the poll returned events of.
        let mut next: Vec<(u32, u64)> = Vec::new();
        for e in &answer.events {
            match next.iter_mut().find(|(p, _)| *p == e.partition) {
                Some((_, o)) => *o = (*o).max(e.offset + 1),
                None => next.push((e.partition, e.offset + 1)),
            }
        }
        let offsets: Vec<Value> =
            next.iter().map(|(p, o)| json!({ "topic": run.topic, "partition": p, "offset": o })).collect();
        let commit = json!({ "member_id": answer.member_id, "generation": answer.generation, "offsets": offsets });
        let t0 = Instant::now();
        match self.send(run, &run.commit_path, commit).await? {
            Some((204, _)) => {
                self.stats.commits += 1;
                let _ = self.stats.commit.record(t0.elapsed().as_micros() as u64);
            }
            // Fenced: a rebalance happened since the poll; the next poll carries the new generation.
            Some((409, _)) => self.stats.fenced += 1,
            Some(_) => self.stats.errors += 1,
            None => {}
        }
        // Counted once committed, so the run ends with no commit in flight.
        run.deliver(&answer.events, arrived, &mut self.stats.delivery);
        run.check_done();
        Ok(())
    }

    /// Polls and commits until the run is done, then leaves the group.
    async fn consume(mut self, run: Arc<GroupRun>) -> Result<MemberStats, BoxError> {
        self.stats = MemberStats::new()?;
        while !run.done.load(Ordering::Relaxed) {
            self.poll_and_commit(&run, run.settings.wait_ms).await?;
        }
        if let Some(id) = self.id.take() {
            if let Some((status, body)) = self.send(&run, &run.leave_path, json!({ "member_id": id })).await? {
                if status != 204 {
                    eprintln!("member {id} could not leave: HTTP {status} {}", String::from_utf8_lossy(&body));
                }
            }
        }
        Ok(self.stats)
    }
}

/// Joins every member, one at a time, then polls each until all agree on one generation
/// whose assignment covers every partition, so the timed phase starts without rebalances.
async fn settle(run: &GroupRun, members: &mut [Member], partitions: usize) -> Result<(), BoxError> {
    for _ in 0..10 {
        for m in members.iter_mut() {
            m.poll_and_commit(run, 0).await?;
        }
        let generation = members[0].generation;
        let assigned: usize = members.iter().map(|m| m.assignment).sum();
        if members.iter().all(|m| m.id.is_some() && m.generation == generation) && assigned == partitions {
            return Ok(());
        }
    }
    Err(format!("group {} did not settle on one generation", run.settings.group).into())
}

/// The `group` workload: a fresh group, started at the end of the topic, reads what this run
/// publishes (a backlog published first, or live publishers), committing after every poll.
async fn group(t: &Target, settings: GroupSettings, shape: PublishShape, load: GroupLoad) -> Result<Report, BoxError> {
    // Start the group at the end of the topic: it reads only what this run publishes.
    let url = format!("{}/v1/groups/{}", t.base, settings.group);
    let r = t.http.post(format!("{url}/seek")).json(&json!({ "topic": t.topic, "to": "latest" })).send().await?;
    if !r.status().is_success() {
        return Err(format!("seeking group {}: {} {}", settings.group, r.status(), r.text().await?).into());
    }
    let seek: Value = r.json().await?;
    let mut next = Vec::new();
    for o in seek["offsets"].as_array().ok_or("seek: no offsets")? {
        let (p, offset) =
            (o["partition"].as_u64().ok_or("seek: no partition")? as usize, o["offset"].as_u64().unwrap_or(0));
        next.resize(next.len().max(p + 1), 0);
        next[p] = offset;
    }
    let partitions = next.len();
    let run = Arc::new(GroupRun {
        base_url: t.base.clone(),
        topic: t.topic.clone(),
        poll_path: format!("/v1/groups/{}/poll", settings.group),
        commit_path: format!("/v1/groups/{}/commit", settings.group),
        leave_path: format!("/v1/groups/{}/leave", settings.group),
        settings,
        frontier: Mutex::new(Frontier { next, end: None }),
        delivered: Arc::new(AtomicU64::new(0)),
        bytes: AtomicU64::new(0),
        redelivered: AtomicU64::new(0),
        done: Arc::new(AtomicBool::new(false)),
        end: Mutex::new(None),
        clock: Instant::now(),
    });
    let mut members = Vec::with_capacity(run.settings.members);
    for _ in 0..run.settings.members {
        members.push(Member::open(&run).await?);
    }
    settle(&run, &mut members, partitions).await?;
    eprintln!(
        "group {}: {} members at generation {}, {partitions} partitions",
        run.settings.group, run.settings.members, members[0].generation
    );

    if let GroupLoad::Backlog { count } = load {
        let r = publish(t, shape, 8, Duration::from_secs(3600), count).await?;
        eprintln!("published {} events in {:.1} s; the group drains them", r.events, r.elapsed.as_secs_f64());
        run.set_end(high_watermarks(t).await?);
    }
    let start = Instant::now();
    let progress = spawn_progress(run.delivered.clone(), run.done.clone());
    let mut consumers: Vec<_> = members.into_iter().map(|m| tokio::spawn(m.consume(run.clone()))).collect();
    let (acked, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut publish_latency = Histogram::<u64>::new(3)?;
    if let GroupLoad::Live { publishers, duration } = load {
        let tasks: Vec<_> = (0..publishers)
            .map(|i| {
                let to = LiveTarget { base_url: run.base_url.clone(), topic: run.topic.clone(), clock: run.clock };
                let (acked, failed) = (acked.clone(), failed.clone());
                tokio::spawn(live_publisher(to, shape, i as u64, publishers as u64, start + duration, acked, failed))
            })
            .collect();
        for task in tasks {
            publish_latency.add(&task.await??)?;
        }
        run.set_end(high_watermarks(t).await?);
    }
    // Until every partition is read to its end; 30 s without progress, or a member failing, ends it.
    let mut progress_at = (run.delivered.load(Ordering::Relaxed), Instant::now());
    while !run.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let delivered = run.delivered.load(Ordering::Relaxed);
        if delivered != progress_at.0 {
            progress_at = (delivered, Instant::now());
        } else if progress_at.1.elapsed() > Duration::from_secs(30) || consumers.iter().any(|c| c.is_finished()) {
            eprintln!("group {}: stopped with {} events not delivered", run.settings.group, run.missing());
            run.done.store(true, Ordering::Relaxed);
        }
    }
    let end = run.end.lock().map_err(|_| "end lock poisoned")?.unwrap_or_else(Instant::now);
    let elapsed = end.duration_since(start);
    progress.await?;
    let mut stats = MemberStats::new()?;
    for consumer in consumers.drain(..) {
        stats.add(&consumer.await??)?;
    }
    // Every member has left: the group goes too, so runs leave nothing behind.
    let r = t.http.delete(&url).send().await?;
    if !r.status().is_success() {
        eprintln!("deleting group {}: {} {}", run.settings.group, r.status(), r.text().await?);
    }

    let s = &run.settings;
    let missing = run.missing();
    let mut settings = json!({
        "group": s.group, "members": s.members, "partitions": partitions, "max_events": s.max_events,
        "max_bytes": s.max_bytes, "wait_ms": s.wait_ms, "event_size": shape.event_size, "batch": shape.batch,
        "riding_commits": s.riding_commits,
    });
    let mut counts = vec![
        ("polls", stats.polls),
        ("commits", stats.commits),
        ("fenced", stats.fenced),
        ("redelivered", run.redelivered.load(Ordering::Relaxed)),
        ("rejoins", stats.rejoins),
    ];
    let mut histograms = vec![("poll", stats.poll)];
    let (latency, latency_of) = match load {
        GroupLoad::Backlog { count } => {
            settings["mode"] = json!("backlog");
            settings["count"] = json!(count);
            (stats.commit, "commit")
        }
        GroupLoad::Live { publishers, duration } => {
            settings["mode"] = json!("live");
            settings["publishers"] = json!(publishers);
            settings["duration"] = json!(duration.as_secs_f64());
            counts.push(("published", acked.load(Ordering::Relaxed)));
            histograms.push(("commit", stats.commit));
            histograms.push(("publish", publish_latency));
            (stats.delivery, "delivery")
        }
    };
    if missing > 0 {
        counts.push(("missing", missing));
    }
    Ok(Report {
        workload: "group",
        settings,
        events: run.delivered.load(Ordering::Relaxed),
        bytes: run.bytes.load(Ordering::Relaxed),
        requests: stats.polls,
        errors: stats.errors + failed.load(Ordering::Relaxed) + missing,
        elapsed,
        latency,
        latency_of,
        counts,
        histograms,
        extra: Vec::new(),
        failure: None,
    })
}

/// Each partition's high watermark, indexed by partition.
async fn high_watermarks(t: &Target) -> Result<Vec<u64>, BoxError> {
    let mut ends = Vec::new();
    for (p, hw) in t.partitions().await? {
        ends.resize(ends.len().max(p as usize + 1), 0);
        ends[p as usize] = hw;
    }
    Ok(ends)
}

/// Where live publishers publish, and the clock base of their send instants.
struct LiveTarget {
    base_url: String,
    topic: String,
    clock: Instant,
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

/// Prints a line a second to stderr while a workload runs.
fn spawn_progress(counter: Arc<AtomicU64>, done: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let start = Instant::now();
        let mut last = 0;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        while !done.load(Ordering::Relaxed) {
            tick.tick().await;
            let now = counter.load(Ordering::Relaxed);
            eprintln!(
                "  {:>5.1}s  {:>12} events  {:>10.0} events/s",
                start.elapsed().as_secs_f64(),
                now,
                (now - last.min(now)) as f64
            );
            last = now;
        }
    })
}

impl Report {
    fn rate(&self, n: u64) -> f64 {
        n as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn quantile_ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1000.0
    }

    fn to_json(&self) -> Value {
        json!({
            "workload": self.workload,
            "settings": self.settings,
            "events": self.events,
            "bytes": self.bytes,
            "requests": self.requests,
            "errors": self.errors,
            "seconds": self.elapsed.as_secs_f64(),
            "events_per_sec": self.rate(self.events),
            "mb_per_sec": self.rate(self.bytes) / 1e6,
            "requests_per_sec": self.rate(self.requests),
            "latency_of": self.latency_of,
            "latency_ms": quantiles_ms(&self.latency),
            "counts": self.counts.iter().map(|(name, n)| (name.to_string(), json!({ "total": n, "per_sec": self.rate(*n) }))).collect::<serde_json::Map<_, _>>(),
            "latencies_ms": self.histograms.iter().map(|(name, h)| (name.to_string(), quantiles_ms(h))).collect::<serde_json::Map<_, _>>(),
            "extra": self.extra.iter().map(|(name, v, _)| (name.to_string(), v.clone())).collect::<serde_json::Map<_, _>>(),
            "failure": self.failure,
        })
    }

    fn print_table(&self) {
        println!("workload   {} {}", self.workload, self.settings);
        println!("{:<24}{:>14}", "events", self.events);
        println!("{:<24}{:>14}", "errors", self.errors);
        println!("{:<24}{:>14.2}", "seconds", self.elapsed.as_secs_f64());
        println!("{:<24}{:>14.0}", "events/s", self.rate(self.events));
        println!("{:<24}{:>14.1}", "MB/s", self.rate(self.bytes) / 1e6);
        println!("{:<24}{:>14.0}", "requests/s", self.rate(self.requests));
        let of = if self.latency_of == "request" { String::new() } else { format!("{} ", self.latency_of) };
        println!("{:<24}{:>14.3}", format!("{of}p50 ms"), self.quantile_ms(0.5));
        println!("{:<24}{:>14.3}", format!("{of}p99 ms"), self.quantile_ms(0.99));
        println!("{:<24}{:>14.3}", format!("{of}p99.9 ms"), self.quantile_ms(0.999));
        println!("{:<24}{:>14.3}", format!("{of}max ms"), self.latency.max() as f64 / 1000.0);
        for (name, n) in &self.counts {
            println!("{:<24}{:>14}{:>12.0}/s", name, n, self.rate(*n));
        }
        for (name, h) in &self.histograms {
            let q = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            let max = h.max() as f64 / 1000.0;
            println!(
                "{:<24}{:>14.3}{:>10.3}{:>10.3}{:>10.3}  ms p50 p99 p99.9 max",
                name,
                q(0.5),
                q(0.99),
                q(0.999),
                max
            );
        }
        for (_, _, lines) in &self.extra {
            for line in lines {
                println!("{line}");
            }
        }
        if let Some(failure) = &self.failure {
            println!("FAILED            {failure}");
        }
    }
}

/// p50, p99, p99.9 and max of a histogram of microseconds, in milliseconds.
fn quantiles_ms(h: &Histogram<u64>) -> Value {
    let q = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    json!({ "p50": q(0.5), "p99": q(0.99), "p999": q(0.999), "max": h.max() as f64 / 1000.0 })
}

// ---------------------------------------------------------------------------
// Work queues: `bench queue`.

/// How the workers of a `queue` run receive and ack.
#[derive(Debug, Clone)]
struct QueueSettings {
    subscription: String,
    workers: usize,
    batch: usize,
    wait_ms: u64,
    visibility_timeout_ms: Option<u64>,
    /// What the backlog or the live publishers publish.
    shape: PublishShape,
    /// Acks ride on the next receive.
    ack_next: bool,
}

/// Where a `queue` run runs: a Sluice over HTTP (the figures), or an embedded log in this
/// process whose stores count their calls (the profile).
enum QueueBackend {
    Http(Target),
    /// `queues` is built once, as the HTTP API builds its `App`: it caches the receipt key
    /// and steers receives apart.
    Embedded {
        log: sluice_core::Log,
        queues: sluice_core::queues::Queues,
        topic: String,
        profile: Arc<Profile>,
    },
}

/// A message as a worker sees it.
struct Received {
    receipt: String,
    partition: u32,
    offset: u64,
    receive_count: u32,
    value_len: u64,
    /// When its publish was sent, on the bench's clock (live publishers' events only).
    sent_ns: Option<u64>,
}

/// A receive's answer, with only what the bench needs.
#[derive(Deserialize)]
struct ReceiveAnswer<'a> {
    #[serde(borrow)]
    messages: Vec<ReceivedMessage<'a>>,
    /// The results of the acks the receive carried.
    #[serde(default, borrow)]
    acks: Vec<AckResult<'a>>,
}

#[derive(Deserialize)]
struct ReceivedMessage<'a> {
    #[serde(borrow)]
    receipt: Cow<'a, str>,
    partition: u32,
    offset: u64,
    receive_count: u32,
    #[serde(default, borrow)]
    headers: SentHeader<'a>,
    #[serde(borrow)]
    value: Option<&'a RawValue>,
    #[serde(borrow)]
    value_base64: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct AckAnswer<'a> {
    #[serde(borrow)]
    results: Vec<AckResult<'a>>,
}

#[derive(Deserialize)]
struct AckResult<'a> {
    ok: bool,
    #[serde(default, borrow)]
    error: Option<AckError<'a>>,
}

#[derive(Deserialize)]
struct AckError<'a> {
    #[serde(borrow)]
    code: Cow<'a, str>,
}

/// One worker's way to the queue: a keep-alive connection, or the embedded log.
enum QueueClient {
    Http {
        conn: Conn,
        base: String,
        receive_path: String,
        ack_path: String,
        receive_body: Bytes,
        /// The receive body as JSON, to add acks to.
        receive_json: serde_json::Value,
    },
    Embedded {
        queues: sluice_core::queues::Queues,
        topic: String,
        subscription: String,
        request: sluice_core::queues::ReceiveRequest,
    },
}

/// A refusal (an HTTP status other than 200, or the core's error) as text; transport
/// errors are the outer `Err`.
type Answered<T> = Result<Result<T, String>, BoxError>;

/// `None` for an ack that went through, else its error code.
fn ack_outcome(r: AckResult<'_>) -> Option<String> {
    match (r.ok, r.error) {
        (true, _) => None,
        (false, e) => Some(e.map_or_else(|| "unknown".to_owned(), |e| e.code.into_owned())),
    }
}

impl QueueClient {
    async fn receive(&mut self) -> Answered<Vec<Received>> {
        Ok(self.receive_acking(&[]).await?.map(|(messages, _)| messages))
    }

    /// Acks `receipts` and receives, in one request (HTTP only); answers the messages and,
    /// per receipt, `None` (acked) or the error code.
    async fn receive_acking(&mut self, receipts: &[String]) -> Answered<(Vec<Received>, Vec<Option<String>>)> {
        match self {
            Self::Http { conn, receive_path, receive_body, receive_json, .. } => {
                let body = if receipts.is_empty() {
                    receive_body.clone()
                } else {
                    let mut with_acks = receive_json.clone();
                    with_acks["ack"] = json!(receipts);
                    Bytes::from(serde_json::to_vec(&with_acks)?)
                };
                let (status, body) = conn.send(hyper::Method::POST, receive_path, body).await?;
                if status != 200 {
                    return Ok(Err(format!("receive: HTTP {status} {}", String::from_utf8_lossy(&body))));
                }
                let answer: ReceiveAnswer = serde_json::from_slice(&body)?;
                if answer.acks.len() != receipts.len() {
                    return Ok(Err(format!(
                        "receive: {} ack results for {} receipts",
                        answer.acks.len(),
                        receipts.len()
                    )));
                }
                let acks = answer.acks.into_iter().map(ack_outcome).collect();
                let messages = answer
                    .messages
                    .into_iter()
                    .map(|m| Received {
                        value_len: value_len(m.value, m.value_base64.as_deref()),
                        sent_ns: m.headers.ns(),
                        receipt: m.receipt.into_owned(),
                        partition: m.partition,
                        offset: m.offset,
                        receive_count: m.receive_count,
                    })
                    .collect();
                Ok(Ok((messages, acks)))
            }
            Self::Embedded { queues, topic, subscription, request } => {
                let answer = OP.scope("receive", queues.receive(topic, subscription, request)).await;
                Ok(answer
                    .map(|messages| {
                        messages
                            .into_iter()
                            .map(|m| Received {
                                value_len: m.event.record.value.len() as u64,
                                sent_ns: None,
                                receipt: m.receipt,
                                partition: m.event.partition,
                                offset: m.event.offset,
                                receive_count: m.receive_count,
                            })
                            .collect()
                    })
                    .map(|messages| (messages, Vec::new()))
                    .map_err(|e| format!("receive: {e}")))
            }
        }
    }

    /// Acks; answers per receipt `None` (acked) or the error code.
    async fn ack(&mut self, receipts: &[String]) -> Answered<Vec<Option<String>>> {
        match self {
            Self::Http { conn, ack_path, .. } => {
                let body = Bytes::from(serde_json::to_vec(&json!({ "receipts": receipts }))?);
                let (status, body) = conn.send(hyper::Method::POST, ack_path, body).await?;
                if status != 200 {
                    return Ok(Err(format!("ack: HTTP {status} {}", String::from_utf8_lossy(&body))));
                }
                let answer: AckAnswer = serde_json::from_slice(&body)?;
                if answer.results.len() != receipts.len() {
                    return Ok(Err(format!("ack: {} results for {} receipts", answer.results.len(), receipts.len())));
                }
                Ok(Ok(answer.results.into_iter().map(ack_outcome).collect()))
            }
            Self::Embedded { queues, topic, subscription, .. } => {
                let answer = OP.scope("ack", queues.ack(topic, subscription, receipts)).await;
                Ok(answer
                    .map(|results| results.into_iter().map(|r| r.err().map(|e| e.code().as_str().to_owned())).collect())
                    .map_err(|e| format!("ack: {e}")))
            }
        }
    }

    /// After a transport error: a new connection (the old one is unusable).
    async fn reopen(&mut self) -> Result<(), BoxError> {
        if let Self::Http { conn, base, .. } = self {
            *conn = Conn::open(base).await?;
        }
        Ok(())
    }
}

impl QueueBackend {
    /// Opens the embedded log in `dir`, its stores wrapped to count calls, and creates the topic.
    async fn embedded(dir: &std::path::Path, topic: &str, partitions: u32, cache: bool) -> Result<Self, BoxError> {
        use sluice_core::{Clock, ObjectStore, StateStore, SystemClock};
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let (store, objects) = sluice_local::open(dir, clock.clone())?;
        let profile = Arc::new(Profile::default());
        let store: Arc<dyn StateStore> =
            Arc::new(CountingStore { inner: store, profile: profile.clone(), cache: cache.then(Mutex::default) });
        let objects: Arc<dyn ObjectStore> =
            Arc::new(CountingObjects { inner: objects, profile: profile.clone(), cache: cache.then(Mutex::default) });
        let log = sluice_core::Log::new(store, objects, clock, sluice_core::LogConfig::default());
        let spec = sluice_core::TopicSpec { partitions, retention_ms: None, retention_bytes: None };
        log.create_topic(topic, spec).await?;
        let queues = sluice_core::queues::Queues::new(log.clone());
        Ok(Self::Embedded { log, queues, topic: topic.to_owned(), profile })
    }

    fn transport(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Embedded { .. } => "embedded",
        }
    }

    fn sub_path(&self, subscription: &str) -> String {
        let topic = match self {
            Self::Http(t) => &t.topic,
            Self::Embedded { topic, .. } => topic,
        };
        format!("/v1/topics/{topic}/subscriptions/{subscription}")
    }

    async fn high_watermarks(&self) -> Result<Vec<u64>, BoxError> {
        match self {
            Self::Http(t) => high_watermarks(t).await,
            Self::Embedded { log, topic, .. } => {
                Ok(log.describe_topic(topic).await?.1.iter().map(|p| p.high_watermark).collect())
            }
        }
    }

    /// Publishes `count` events, 8 requests in flight; answers how many and how long it took.
    async fn preload(&self, shape: PublishShape, count: u64) -> Result<(u64, Duration), BoxError> {
        match self {
            Self::Http(t) => {
                let r = publish(t, shape, 8, Duration::from_secs(3600), count).await?;
                if r.errors > 0 {
                    return Err(format!("preload: {} publish requests failed", r.errors).into());
                }
                Ok((r.events, r.elapsed))
            }
            Self::Embedded { log, topic, .. } => {
                let start = Instant::now();
                let next = Arc::new(AtomicU64::new(0));
                let value = Bytes::from(serde_json::to_vec(&"x".repeat(shape.event_size.saturating_sub(2)))?);
                let tasks: Vec<_> = (0..8)
                    .map(|_| {
                        let (log, topic, next, value) = (log.clone(), topic.clone(), next.clone(), value.clone());
                        tokio::spawn(async move {
                            loop {
                                let first = next.fetch_add(shape.batch as u64, Ordering::Relaxed);
                                if first >= count {
                                    return Ok::<_, BoxError>(());
                                }
                                let events = (first..(first + shape.batch as u64).min(count))
                                    .map(|i| sluice_core::NewEvent {
                                        key: Some(Bytes::from(format!("key-{}", i % shape.keys.max(1)))),
                                        headers: Vec::new(),
                                        value: value.clone(),
                                        value_is_json: true,
                                        timestamp_ms: None,
                                        partition: None,
                                    })
                                    .collect();
                                log.publish(&topic, events, None).await?;
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await??;
                }
                Ok((count, start.elapsed()))
            }
        }
    }

    /// Creates the subscription; answers its start offset of each partition.
    async fn create(&self, settings: &QueueSettings, start: Value) -> Result<Vec<u64>, BoxError> {
        match self {
            Self::Http(t) => {
                let url = format!("{}{}", t.base, self.sub_path(&settings.subscription));
                let r = t.http.put(&url).json(&json!({ "start": start })).send().await?;
                if r.status() != 201 {
                    return Err(format!("creating {url}: {} {}", r.status(), r.text().await?).into());
                }
                let created: Value = r.json().await?;
                let starts = created["start_offsets"].as_array().ok_or("create: no start_offsets")?;
                Ok(starts.iter().map(|o| o.as_u64().unwrap_or(0)).collect())
            }
            Self::Embedded { queues, topic, .. } => {
                let spec = sluice_core::queues::SubscriptionSpec {
                    start: serde_json::from_value(start)?,
                    ..Default::default()
                };
                let (sub, _) = queues.create(topic, &settings.subscription, spec).await?;
                Ok(sub.start_offsets)
            }
        }
    }

    async fn client(&self, settings: &QueueSettings) -> Result<QueueClient, BoxError> {
        match self {
            Self::Http(t) => {
                let mut receive = json!({ "max_messages": settings.batch, "wait_ms": settings.wait_ms });
                if let Some(v) = settings.visibility_timeout_ms {
                    receive["visibility_timeout_ms"] = json!(v);
                }
                let path = self.sub_path(&settings.subscription);
                Ok(QueueClient::Http {
                    conn: Conn::open(&t.base).await?,
                    base: t.base.clone(),
                    receive_path: format!("{path}/receive"),
                    ack_path: format!("{path}/ack"),
                    receive_body: Bytes::from(serde_json::to_vec(&receive)?),
                    receive_json: receive,
                })
            }
            Self::Embedded { queues, topic, .. } => Ok(QueueClient::Embedded {
                queues: queues.clone(),
                topic: topic.clone(),
                subscription: settings.subscription.clone(),
                request: sluice_core::queues::ReceiveRequest {
                    max_messages: settings.batch,
                    wait_ms: settings.wait_ms,
                    visibility_timeout_ms: settings.visibility_timeout_ms,
                },
            }),
        }
    }

    /// The subscription's backlog as the server counts it: visible, in flight, delayed, dead.
    async fn backlog(&self, subscription: &str) -> Result<[u64; 4], BoxError> {
        match self {
            Self::Http(t) => {
                let url = format!("{}{}", t.base, self.sub_path(subscription));
                let d: Value = t.http.get(&url).send().await?.json().await?;
                let b = &d["backlog"];
                let n = |f: &str| b[f].as_u64().ok_or_else(|| format!("describe {url}: no backlog.{f}: {d}"));
                Ok([n("visible")?, n("in_flight")?, n("delayed")?, n("dead")?])
            }
            Self::Embedded { queues, topic, .. } => {
                let d = queues.describe(topic, subscription).await?;
                Ok([d.backlog.visible, d.backlog.in_flight, d.backlog.delayed, d.backlog.dead])
            }
        }
    }

    async fn delete(&self, subscription: &str) -> Result<(), BoxError> {
        match self {
            Self::Http(t) => {
                let url = format!("{}{}", t.base, self.sub_path(subscription));
                let r = t.http.delete(&url).send().await?;
                if !r.status().is_success() {
                    return Err(format!("deleting {url}: {} {}", r.status(), r.text().await?).into());
                }
                Ok(())
            }
            Self::Embedded { queues, topic, .. } => Ok(queues.delete(topic, subscription).await?),
        }
    }
}

/// What the workers of one run share: which messages were acked, how often.
struct QueueRun {
    /// Per partition, the subscription's start offset.
    starts: Vec<u64>,
    /// Per partition, per offset from its start: times acked (saturating).
    acks: Mutex<Vec<Vec<u8>>>,
    /// Per partition, the end of the run once known: messages from there on are not the run's.
    ends: Mutex<Option<Vec<u64>>>,
    /// Acks of messages of no partition, or before a partition's start.
    foreign: AtomicU64,
    /// Messages acked at least once (counted at their first ack), and their value bytes.
    acked: Arc<AtomicU64>,
    bytes: AtomicU64,
    /// Messages of the run, once known (`u64::MAX` before).
    expected: AtomicU64,
    done: Arc<AtomicBool>,
    /// When the last message of the run was acked.
    end: Mutex<Option<Instant>>,
    /// The clock base of the live publishers' send instants.
    clock: Instant,
}

impl QueueRun {
    /// Counts acked messages: `(partition, offset, value bytes)`.
    fn record(&self, acked: &[(u32, u64, u64)]) {
        let (mut fresh, mut bytes) = (0, 0);
        {
            let ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
            let mut acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
            for &(p, offset, len) in acked {
                let start = self.starts.get(p as usize).copied().unwrap_or(0);
                let (Some(counts), Some(i)) = (acks.get_mut(p as usize), offset.checked_sub(start)) else {
                    self.foreign.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let i = i as usize;
                if counts.len() <= i {
                    counts.resize(i + 1, 0);
                }
                // Past the end (someone else publishing): recorded for `verify`, not counted.
                let within = ends.as_ref().is_none_or(|e| offset < e.get(p as usize).copied().unwrap_or(0));
                if counts[i] == 0 && within {
                    fresh += 1;
                    bytes += len;
                }
                counts[i] = counts[i].saturating_add(1);
            }
        }
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.acked.fetch_add(fresh, Ordering::Relaxed);
        self.check_done();
    }

    fn check_done(&self) {
        if self.acked.load(Ordering::Relaxed) >= self.expected.load(Ordering::Relaxed) {
            self.end.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(Instant::now);
            self.done.store(true, Ordering::Relaxed);
        }
    }

    /// Fixes the end of the run. Called while no worker runs, or (live) before any worker
    /// can have seen a message past `ends`.
    fn set_end(&self, ends: &[u64]) {
        let expected = ends.iter().zip(&self.starts).map(|(e, s)| e.saturating_sub(*s)).sum();
        *self.ends.lock().unwrap_or_else(|p| p.into_inner()) = Some(ends.to_vec());
        self.expected.store(expected, Ordering::Relaxed);
        self.check_done();
    }

    /// Messages of `starts..ends` never acked, acked more than once, and messages outside
    /// it acked (or acks of no partition).
    fn verify(&self, ends: &[u64]) -> (u64, u64, u64) {
        let acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        let (mut missing, mut twice, mut outside) = (0, 0, self.foreign.load(Ordering::Relaxed));
        for (p, counts) in acks.iter().enumerate() {
            let want = ends.get(p).copied().unwrap_or(0).saturating_sub(self.starts[p]) as usize;
            for i in 0..want.max(counts.len()) {
                match (i < want, counts.get(i).copied().unwrap_or(0)) {
                    (true, 0) => missing += 1,
                    (true, 1) | (false, 0) => {}
                    (true, _) => twice += 1,
                    (false, _) => outside += 1,
                }
            }
        }
        (missing, twice, outside)
    }
}

/// One worker's counts and latencies (microseconds).
struct WorkerStats {
    receives: u64,
    empty: u64,
    acks: u64,
    /// Messages received again (receive count above 1).
    redelivered: u64,
    /// Receipts an ack refused, by error code.
    refused: BTreeMap<String, u64>,
    /// Refused requests and transport errors.
    errors: u64,
    /// Receives that returned messages, from send to answer.
    receive: Histogram<u64>,
    ack: Histogram<u64>,
    /// From a receive's answer to its ack's answer.
    receive_to_ack: Histogram<u64>,
    /// From a message's publish being sent to its ack's answer (live publishers).
    publish_to_ack: Histogram<u64>,
}

impl WorkerStats {
    fn new() -> Result<Self, BoxError> {
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

    fn add(&mut self, o: &WorkerStats) -> Result<(), BoxError> {
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
async fn queue_worker(mut client: QueueClient, run: Arc<QueueRun>) -> Result<WorkerStats, BoxError> {
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
async fn queue_worker_acking_next(mut client: QueueClient, run: Arc<QueueRun>) -> Result<WorkerStats, BoxError> {
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

/// The `queue` workload: a fresh subscription of the topic, drained by workers that ack
/// every receive, then checked: every message of the run acked exactly once.
async fn queue(backend: QueueBackend, settings: QueueSettings, load: GroupLoad) -> Result<Report, BoxError> {
    if !(1..=100).contains(&settings.batch) {
        return Err("--batch must be between 1 and 100 (the most messages of one receive)".into());
    }
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
    let starts = backend.create(&settings, start_at.clone()).await?;
    if starts.len() != partitions || (published.is_some() && starts != before) {
        return Err(format!("subscription starts at {starts:?}, expected {before:?}").into());
    }
    let run = Arc::new(QueueRun {
        acks: Mutex::new(vec![Vec::new(); partitions]),
        ends: Mutex::new(None),
        foreign: AtomicU64::new(0),
        starts,
        acked: Arc::new(AtomicU64::new(0)),
        bytes: AtomicU64::new(0),
        expected: AtomicU64::new(u64::MAX),
        done: Arc::new(AtomicBool::new(false)),
        end: Mutex::new(None),
        clock: Instant::now(),
    });
    let mut ends = None;
    if published.is_some() {
        let hw = backend.high_watermarks().await?;
        run.set_end(&hw);
        ends = Some(hw);
    }
    let mut clients = Vec::with_capacity(settings.workers);
    for _ in 0..settings.workers {
        clients.push(backend.client(&settings).await?);
    }
    eprintln!(
        "subscription {} ({start_at}): {} workers, receive batch {}, {} messages to ack",
        settings.subscription,
        settings.workers,
        settings.batch,
        published.map_or_else(|| "live".to_owned(), |_| run.expected.load(Ordering::Relaxed).to_string())
    );
    if let QueueBackend::Embedded { profile, .. } = &backend {
        profile.reset();
    }

    let start = Instant::now();
    let progress = spawn_progress(run.acked.clone(), run.done.clone());
    let mut workers: Vec<_> = clients
        .into_iter()
        .map(|c| {
            if settings.ack_next {
                tokio::spawn(queue_worker_acking_next(c, run.clone()))
            } else {
                tokio::spawn(queue_worker(c, run.clone()))
            }
        })
        .collect();
    let (published_live, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut publish_latency = Histogram::<u64>::new(3)?;
    if let (GroupLoad::Live { publishers, duration }, QueueBackend::Http(t)) = (load, &backend) {
        let tasks: Vec<_> = (0..publishers)
            .map(|i| {
                let to = LiveTarget { base_url: t.base.clone(), topic: t.topic.clone(), clock: run.clock };
                let (acked, failed) = (published_live.clone(), failed.clone());
                let until = start + duration;
                tokio::spawn(live_publisher(to, settings.shape, i as u64, publishers as u64, until, acked, failed))
            })
            .collect();
        for task in tasks {
            publish_latency.add(&task.await??)?;
        }
        let hw = backend.high_watermarks().await?;
        run.set_end(&hw);
        ends = Some(hw);
    }
    // Until every message is acked; a stall longer than a visibility window (lost messages
    // come back after it), or a worker failing, ends it.
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
    let end = run.end.lock().map_err(|_| "end lock poisoned")?.unwrap_or_else(Instant::now);
    let elapsed = end.duration_since(start);
    progress.await?;
    let mut stats = WorkerStats::new()?;
    for worker in workers.drain(..) {
        stats.add(&worker.await??)?;
    }

    // The checks: every message acked once by the bench's count, and none left by the server's.
    let ends = ends.ok_or("no end offsets")?;
    let (missing, twice, outside) = run.verify(&ends);
    let backlog = backend.backlog(&settings.subscription).await?;
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
    let profile = match &backend {
        QueueBackend::Embedded { profile, .. } => Some(profile.report(stats.receives, stats.acks)),
        QueueBackend::Http(_) => None,
    };
    // Only a clean run's subscription goes: a failed one stays for a look.
    if problems.is_empty() {
        backend.delete(&settings.subscription).await?;
    }

    let s = &settings;
    let expected = run.expected.load(Ordering::Relaxed);
    let mut json_settings = json!({
        "subscription": s.subscription, "transport": backend.transport(), "workers": s.workers,
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
            counts.push(("published", published_live.load(Ordering::Relaxed)));
            histograms.insert(0, ("receive-to-ack", stats.receive_to_ack));
            histograms.push(("publish", publish_latency));
            (stats.publish_to_ack, "publish-to-ack")
        }
    };
    if missing + twice + outside > 0 {
        counts.push(("missing", missing));
        counts.push(("acked twice", twice));
    }
    Ok(Report {
        workload: "queue",
        settings: json_settings,
        events: run.acked.load(Ordering::Relaxed),
        bytes: run.bytes.load(Ordering::Relaxed),
        requests: stats.receives + stats.acks,
        errors: stats.errors + failed.load(Ordering::Relaxed) + refused + missing + twice + outside,
        elapsed,
        latency,
        latency_of,
        counts,
        histograms,
        extra: profile.into_iter().map(|(json, lines)| ("store_calls", json, lines)).collect(),
        failure: (!problems.is_empty()).then(|| format!("queue run not exactly-once: {}", problems.join("; "))),
    })
}

// ---------------------------------------------------------------------------
// The profile of `bench queue --embedded`: stores that count their calls.

tokio::task_local! {
    /// What the calling task is doing: `receive`, `ack`; anything else is `other`.
    static OP: &'static str;
}

/// Calls, items written and time, per (operation, store call, item kind).
#[derive(Default)]
struct Profile {
    calls: Mutex<BTreeMap<(&'static str, &'static str, String), CallStats>>,
}

#[derive(Default, Clone, Copy)]
struct CallStats {
    calls: u64,
    /// Items written (writes) or returned (queries), or bytes read (object reads).
    items: u64,
    nanos: u64,
}

type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, sluice_core::StorageError>> + Send + 'a>>;

impl Profile {
    fn reset(&self) {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    async fn time<T>(
        &self,
        call: &'static str,
        kind: String,
        fut: impl Future<Output = Result<T, sluice_core::StorageError>>,
        items: impl FnOnce(&T) -> u64,
    ) -> Result<T, sluice_core::StorageError> {
        let op = OP.try_with(|o| *o).unwrap_or("other");
        let t0 = Instant::now();
        let result = fut.await;
        let nanos = t0.elapsed().as_nanos() as u64;
        let n = result.as_ref().map_or(0, items);
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let stats = calls.entry((op, call, kind)).or_default();
        stats.calls += 1;
        stats.items += n;
        stats.nanos += nanos;
        result
    }

    /// Per receive and per ack: each kind of call, how many, how long; JSON and lines of text.
    fn report(&self, receives: u64, acks: u64) -> (Value, Vec<String>) {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let mut json = serde_json::Map::new();
        let mut lines = Vec::new();
        for (op, n) in [("receive", receives), ("ack", acks)] {
            let per = |x: u64| x as f64 / n.max(1) as f64;
            lines.push(format!("store calls per {op} ({n} {op}s; mean wall time per call, items per call):"));
            let mut rows = Vec::new();
            let (mut total, mut writes) = (0, 0);
            for ((_, call, kind), s) in calls.iter().filter(|((o, ..), _)| *o == op) {
                if !call.ends_with(".cached") {
                    total += s.calls;
                }
                if *call == "write" {
                    writes += s.calls;
                }
                let mean_us = s.nanos as f64 / s.calls.max(1) as f64 / 1000.0;
                let items = s.items as f64 / s.calls.max(1) as f64;
                lines.push(format!(
                    "  {:<14}{:<30}{:>8.2}{:>10.1} µs{:>10.1} items",
                    call,
                    kind,
                    per(s.calls),
                    mean_us,
                    items
                ));
                rows.push(json!({ "call": call, "kind": kind, "per_op": per(s.calls), "mean_us": mean_us, "items_per_call": items }));
            }
            let store_calls = calls
                .iter()
                .filter(|((o, c, _), _)| *o == op && !c.starts_with("object") && !c.ends_with(".cached"))
                .map(|(_, s)| s.calls)
                .sum::<u64>();
            lines.push(format!(
                "  total {:.2} calls ({:.2} state store), {:.2} writes (each one SQLite commit: one WAL fsync) per {op}",
                per(total),
                per(store_calls),
                per(writes)
            ));
            json.insert(
                op.to_owned(),
                json!({ "ops": n, "calls": rows, "calls_per_op": per(total), "writes_per_op": per(writes) }),
            );
        }
        (Value::Object(json), lines)
    }
}

/// What an item is, from its key (the layouts of `sluice_core::layout` and `queues`).
fn key_kind(key: &sluice_core::ports::state::Key) -> String {
    let kind = match key.pk.split('#').next().unwrap_or_default() {
        "q" if key.sk == "c" => "queue cursor",
        "q" => "queue lease",
        "subs" => "subscription",
        "head" => "partition head",
        "seg" => "segment index",
        "topics" => "topic",
        "queues" => "receipt key",
        "dlq" => "dead letter",
        "idem" => "idempotency",
        other => return other.to_owned(),
    };
    kind.to_owned()
}

/// A write's kinds of items, e.g. `queue cursor+queue lease`.
fn write_kind(ops: &[sluice_core::ports::state::WriteOp]) -> String {
    let mut kinds: Vec<String> = ops.iter().map(|op| key_kind(op.key())).collect();
    kinds.sort();
    kinds.dedup();
    kinds.join("+")
}

struct CountingStore {
    inner: Arc<sluice_local::SqliteStateStore>,
    profile: Arc<Profile>,
    /// `--cache-immutable`: items of the kinds a run never changes, once read.
    cache: Option<Mutex<HashMap<sluice_core::ports::state::Key, sluice_core::ports::state::Item>>>,
}

/// Kinds of items `--cache-immutable` serves from memory: a queue run never writes them.
fn cacheable(kind: &str) -> bool {
    matches!(kind, "topic" | "subscription" | "receipt key")
}

// `async_trait`'s expansion, by hand: the bench does not depend on the macro.
impl sluice_core::StateStore for CountingStore {
    fn get<'a, 'b, 'c>(
        &'a self,
        key: &'b sluice_core::ports::state::Key,
    ) -> StoreFuture<'c, Option<sluice_core::ports::state::Item>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let kind = key_kind(key);
        let Some(cache) = self.cache.as_ref().filter(|_| cacheable(&kind)) else {
            return Box::pin(self.profile.time("get", kind, self.inner.get(key), |i| u64::from(i.is_some())));
        };
        if let Some(item) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned() {
            return Box::pin(self.profile.time("get.cached", kind, async { Ok(Some(item)) }, |_| 1));
        }
        Box::pin(async move {
            let item = self.profile.time("get", kind, self.inner.get(key), |i| u64::from(i.is_some())).await?;
            if let Some(item) = &item {
                cache.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), item.clone());
            }
            Ok(item)
        })
    }

    fn query<'a, 'b, 'c>(
        &'a self,
        query: &'b sluice_core::ports::state::Query,
    ) -> StoreFuture<'c, sluice_core::ports::state::Page>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let kind = key_kind(&sluice_core::ports::state::Key::new(query.pk.clone(), ""));
        Box::pin(self.profile.time("query", kind, self.inner.query(query), |p| p.items.len() as u64))
    }

    fn write<'a, 'c>(&'a self, ops: Vec<sluice_core::ports::state::WriteOp>) -> StoreFuture<'c, ()>
    where
        'a: 'c,
        Self: 'c,
    {
        let (kind, n) = (write_kind(&ops), ops.len() as u64);
        if let Some(cache) = &self.cache {
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            for op in &ops {
                cache.remove(op.key());
            }
        }
        Box::pin(self.profile.time("write", kind, self.inner.write(ops), move |_| n))
    }

    fn delete_many<'a, 'c>(&'a self, keys: Vec<sluice_core::ports::state::Key>) -> StoreFuture<'c, ()>
    where
        'a: 'c,
        Self: 'c,
    {
        let n = keys.len() as u64;
        Box::pin(self.profile.time("delete_many", String::new(), self.inner.delete_many(keys), move |_| n))
    }

    fn purge_expired<'a, 'c>(&'a self, limit: usize) -> StoreFuture<'c, usize>
    where
        'a: 'c,
        Self: 'c,
    {
        Box::pin(self.profile.time("purge_expired", String::new(), self.inner.purge_expired(limit), |n| *n as u64))
    }
}

/// An object, a position in it and a length.
type BlobRange = (String, u64, u64);

struct CountingObjects {
    inner: Arc<sluice_local::LocalObjectStore>,
    profile: Arc<Profile>,
    /// `--cache-immutable`: blob ranges once read (blobs never change), at most 1 GiB.
    cache: Option<Mutex<HashMap<BlobRange, Bytes>>>,
}

impl sluice_core::ObjectStore for CountingObjects {
    fn put<'a, 'c>(&'a self, bytes: Bytes) -> StoreFuture<'c, sluice_core::BlobRef>
    where
        'a: 'c,
        Self: 'c,
    {
        let n = bytes.len() as u64;
        Box::pin(self.profile.time("object.put", "blob".to_owned(), self.inner.put(bytes), move |_| n))
    }

    fn read<'a, 'b, 'c>(&'a self, object: &'b str, position: u64, len: u64) -> StoreFuture<'c, Bytes>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let kind = "blob (items: bytes)".to_owned();
        let Some(cache) = &self.cache else {
            return Box::pin(
                self.profile.time("object.read", kind, self.inner.read(object, position, len), |b| b.len() as u64),
            );
        };
        let at = (object.to_owned(), position, len);
        if let Some(bytes) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&at).cloned() {
            return Box::pin(self.profile.time("object.read.cached", kind, async { Ok(bytes) }, |b| b.len() as u64));
        }
        Box::pin(async move {
            let bytes = self
                .profile
                .time("object.read", kind, self.inner.read(object, position, len), |b| b.len() as u64)
                .await?;
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.values().map(Bytes::len).sum::<usize>() > 1 << 30 {
                cache.clear();
            }
            cache.insert(at, bytes.clone());
            Ok(bytes)
        })
    }

    fn list<'a, 'b, 'c>(
        &'a self,
        after: Option<&'b str>,
        limit: usize,
    ) -> StoreFuture<'c, Vec<sluice_core::ports::objects::ObjectInfo>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        Box::pin(
            self.profile.time("object.list", "objects".to_owned(), self.inner.list(after, limit), |l| l.len() as u64),
        )
    }

    fn delete<'a, 'b, 'c>(&'a self, object: &'b str) -> StoreFuture<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        Box::pin(self.profile.time("object.delete", "object".to_owned(), self.inner.delete(object), |()| 1))
    }

    fn retire(&self, object: &str) {
        self.inner.retire(object);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(starts: Vec<u64>) -> QueueRun {
        QueueRun {
            acks: Mutex::new(vec![Vec::new(); starts.len()]),
            ends: Mutex::new(None),
            foreign: AtomicU64::new(0),
            starts,
            acked: Arc::new(AtomicU64::new(0)),
            bytes: AtomicU64::new(0),
            expected: AtomicU64::new(u64::MAX),
            done: Arc::new(AtomicBool::new(false)),
            end: Mutex::new(None),
            clock: Instant::now(),
        }
    }

    #[test]
    fn given_every_message_acked_once_then_done_and_verified_clean() {
        let r = run(vec![5, 0]);
        r.set_end(&[7, 1]);
        r.record(&[(0, 5, 10), (1, 0, 10)]);
        assert!(!r.done.load(Ordering::Relaxed));
        r.record(&[(0, 6, 10)]);
        assert!(r.done.load(Ordering::Relaxed));
        assert_eq!((r.acked.load(Ordering::Relaxed), r.bytes.load(Ordering::Relaxed)), (3, 30));
        assert_eq!(r.verify(&[7, 1]), (0, 0, 0));
    }

    #[test]
    fn given_missing_duplicate_and_foreign_acks_then_each_is_counted() {
        let r = run(vec![5, 0]);
        r.set_end(&[8, 1]);
        // Offset 5 twice, 6 never, 7 once; 4 is before the start, 1 of partition 1 after the end.
        r.record(&[(0, 5, 1), (0, 5, 1), (0, 7, 1), (0, 4, 1), (1, 0, 1), (1, 1, 1), (9, 0, 1)]);
        assert_eq!(r.acked.load(Ordering::Relaxed), 3, "5 and 7 of partition 0, 0 of partition 1");
        assert!(!r.done.load(Ordering::Relaxed), "6 is missing");
        assert_eq!(r.verify(&[8, 1]), (1, 1, 3), "6 missing; 5 twice; 4, 1 of partition 1 and partition 9 outside");
    }
}

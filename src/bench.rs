//! `sluice bench`: a load generator for a running Sluice, in the spirit of
//! `nats bench` and `kafka-producer-perf-test`. Each workload drives the HTTP
//! API and yields a [`Report`]; the table and `--json` output work for any
//! workload, so consumer-group and queue workloads can be added as new variants.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
}

pub async fn run(args: BenchArgs) -> Result<(), BoxError> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(1024).tcp_nodelay(true).build()?;
    let target = Target { http, base: args.url.trim_end_matches('/').to_owned(), topic: args.topic.clone() };
    target.ensure_topic(args.partitions).await?;
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
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        report.print_table();
    }
    Ok(())
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
    })
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
            "latency_ms": { "p50": self.quantile_ms(0.5), "p99": self.quantile_ms(0.99), "p999": self.quantile_ms(0.999), "max": self.latency.max() as f64 / 1000.0 },
        })
    }

    fn print_table(&self) {
        println!("workload   {} {}", self.workload, self.settings);
        println!("{:<14}{:>14}", "events", self.events);
        println!("{:<14}{:>14}", "errors", self.errors);
        println!("{:<14}{:>14.2}", "seconds", self.elapsed.as_secs_f64());
        println!("{:<14}{:>14.0}", "events/s", self.rate(self.events));
        println!("{:<14}{:>14.1}", "MB/s", self.rate(self.bytes) / 1e6);
        println!("{:<14}{:>14.0}", "requests/s", self.rate(self.requests));
        println!("{:<14}{:>14.3}", "p50 ms", self.quantile_ms(0.5));
        println!("{:<14}{:>14.3}", "p99 ms", self.quantile_ms(0.99));
        println!("{:<14}{:>14.3}", "p99.9 ms", self.quantile_ms(0.999));
    }
}

//! `sluice bench`: a load generator for a running Sluice, in the spirit of
//! `nats bench` and `kafka-producer-perf-test`. Each workload drives the HTTP
//! API and yields a [`Report`]; the table and `--json` output work for any
//! workload, so queue workloads can be added as new variants.

use std::borrow::Cow;
use std::io::Write as _;
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
    /// after every poll. With `--publishers 0` they drain a backlog of `--count` events
    /// published first (throughput); with live publishers, each event is timed from its
    /// publish being sent to its arrival in a poll answer.
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
        Workload::Group { members, max_events, max_bytes, wait_ms, publishers, count, duration, event_size, batch } => {
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
            };
            let default_batch = if publishers == 0 { 100 } else { 1 };
            let shape = PublishShape { event_size, batch: batch.unwrap_or(default_batch).max(1), keys: 1000 };
            let load = match publishers {
                0 => GroupLoad::Backlog { count },
                p => GroupLoad::Live { publishers: p, duration: Duration::from_secs_f64(duration) },
            };
            group(&target, settings, shape, load).await?
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
        latency_of: "request",
        counts: Vec::new(),
        histograms: Vec::new(),
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

impl PolledEvent<'_> {
    /// Bytes of the value as published: a JSON value's text, or the decoded size of a binary one.
    fn value_len(&self) -> u64 {
        match (&self.value, &self.value_base64) {
            (Some(v), _) => v.get().len() as u64,
            (None, Some(b)) => (b.len() / 4 * 3) as u64,
            (None, None) => 0,
        }
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
            if let Some(sent) = e.headers.sent_ns.as_deref().and_then(|s| s.parse::<u64>().ok()) {
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
    stats: MemberStats,
}

impl Member {
    async fn open(run: &GroupRun) -> Result<Self, BoxError> {
        Ok(Self {
            conn: Conn::open(&run.base_url).await?,
            id: None,
            generation: 0,
            assignment: 0,
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

    /// One poll (joining first if need be), then one commit of the next offsets of what it got.
    async fn poll_and_commit(&mut self, run: &GroupRun, wait_ms: u64) -> Result<(), BoxError> {
        let s = &run.settings;
        let mut poll =
            json!({ "topics": [run.topic], "max_events": s.max_events, "max_bytes": s.max_bytes, "wait_ms": wait_ms });
        if let Some(id) = &self.id {
            poll["member_id"] = json!(id);
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
        self.generation = answer.generation;
        self.assignment = answer.assignment.len();
        if answer.events.is_empty() {
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
                let (run, acked, failed) = (run.clone(), acked.clone(), failed.clone());
                tokio::spawn(live_publisher(run, shape, i as u64, publishers as u64, start + duration, acked, failed))
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

/// A live publisher: one request in flight until `until`, every event carrying the
/// instant its request was sent in [`SENT_HEADER`]. Returns its request latencies.
async fn live_publisher(
    run: Arc<GroupRun>,
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
        })
    }

    fn print_table(&self) {
        println!("workload   {} {}", self.workload, self.settings);
        println!("{:<18}{:>14}", "events", self.events);
        println!("{:<18}{:>14}", "errors", self.errors);
        println!("{:<18}{:>14.2}", "seconds", self.elapsed.as_secs_f64());
        println!("{:<18}{:>14.0}", "events/s", self.rate(self.events));
        println!("{:<18}{:>14.1}", "MB/s", self.rate(self.bytes) / 1e6);
        println!("{:<18}{:>14.0}", "requests/s", self.rate(self.requests));
        let of = if self.latency_of == "request" { String::new() } else { format!("{} ", self.latency_of) };
        println!("{:<18}{:>14.3}", format!("{of}p50 ms"), self.quantile_ms(0.5));
        println!("{:<18}{:>14.3}", format!("{of}p99 ms"), self.quantile_ms(0.99));
        println!("{:<18}{:>14.3}", format!("{of}p99.9 ms"), self.quantile_ms(0.999));
        for (name, n) in &self.counts {
            println!("{:<18}{:>14}{:>12.0}/s", name, n, self.rate(*n));
        }
        for (name, h) in &self.histograms {
            let q = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            println!("{:<18}{:>14.3}{:>10.3}{:>10.3}  ms p50 p99 p99.9", name, q(0.5), q(0.99), q(0.999));
        }
    }
}

/// p50, p99, p99.9 and max of a histogram of microseconds, in milliseconds.
fn quantiles_ms(h: &Histogram<u64>) -> Value {
    let q = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    json!({ "p50": q(0.5), "p99": q(0.99), "p999": q(0.999), "max": h.max() as f64 / 1000.0 })
}

//! The command line: the options every workload shares and each workload's own, as clap
//! parses them; the workloads turn them into their settings.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// The options every workload shares, and the workload to run.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Base URL of the Sluice to load.
    #[arg(long, env = "SLUICE_URL", default_value = "http://127.0.0.1:8080", global = true)]
    pub url: String,
    /// Topic to use; created if missing.
    #[arg(long, default_value = "bench", global = true)]
    pub topic: String,
    /// Partitions of the topic if it is created.
    #[arg(long, default_value_t = 8, global = true)]
    pub partitions: u32,
    /// Print the result as JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub workload: Workload,
}

/// The workloads, each a subcommand.
#[derive(Subcommand, Debug)]
pub enum Workload {
    /// Concurrent clients publishing batches of keyed events.
    Publish(PublishArgs),
    /// Read the whole topic back from offset 0, all partitions in parallel.
    Replay(ReplayArgs),
    /// One client, one event per request, each awaited: the latency of a durable publish.
    Latency(LatencyArgs),
    /// Members of one fresh consumer group reading the topic end to end, each committing
    /// after every poll (with `--riding-commits`, in its next poll instead). With
    /// `--publishers 0` they drain a backlog of `--count` events published first
    /// (throughput); with live publishers, each event is timed from its publish being sent
    /// to its arrival in a poll answer.
    Group(GroupArgs),
    /// Workers of one fresh subscription (a work queue), each looping: receive up to
    /// `--batch` messages, then ack every receipt it got, each answered once applied. With
    /// `--publishers 0` they drain a backlog of `--count` events published first
    /// (throughput); with live publishers, each message is timed from its publish being
    /// sent to its ack's answer. The run fails unless every message was acked exactly once.
    Queue(QueueArgs),
    /// The client's producer: `--senders` tasks each `send` single events (keyed), batched
    /// by `sluice-client`'s Producer; each event timed from `send` to its delivery.
    Produce(ProduceArgs),
    /// The client's worker: a backlog of `--count` events, then a `sluice-client` Worker
    /// (acks riding on receives) drains a fresh subscription of it. Fails unless every
    /// message was handled.
    Work(WorkArgs),
    /// A push subscription delivering to a webhook receiver in this process. With `--rate N`,
    /// N events/s are published in steady 10 ms steps for `--duration` seconds and each
    /// message is timed from its publish to its arrival; with `--rate 0`, a backlog of
    /// `--count` events is published first and its delivery timed (messages/s).
    Push(PushArgs),
}

/// The options of `publish`.
#[derive(Args, Debug)]
pub struct PublishArgs {
    #[command(flatten)]
    pub shape: PublishShape,
    /// Concurrent clients, each with one request in flight.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Stop after this many seconds…
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// …or after this many events, whichever comes first.
    #[arg(long)]
    pub count: Option<u64>,
}

/// The options of `replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Events per read request.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
}

/// The options of `latency`.
#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// Bytes of each event's value.
    #[arg(long, default_value_t = 1024)]
    pub event_size: usize,
    /// Publishes to time.
    #[arg(long, default_value_t = 10_000)]
    pub count: u64,
}

/// The options of `group`.
#[derive(Args, Debug)]
pub struct GroupArgs {
    /// Members of the group, each with one poll or commit in flight.
    #[arg(long, default_value_t = 4)]
    pub members: usize,
    /// Most events per poll.
    #[arg(long, default_value_t = 1000)]
    pub max_events: usize,
    /// Most bytes per poll (default: room for `--max-events` events, at most 6 MiB).
    #[arg(long)]
    pub max_bytes: Option<usize>,
    /// How long a member's poll waits for events when there are none, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub wait_ms: u64,
    /// Live publishers, each with one request in flight; 0 publishes a backlog first.
    #[arg(long, default_value_t = 0)]
    pub publishers: usize,
    /// Events of the backlog (with `--publishers 0`).
    #[arg(long, default_value_t = 1_000_000)]
    pub count: u64,
    /// Seconds the live publishers run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Bytes of each event's value.
    #[arg(long, default_value_t = 1024)]
    pub event_size: usize,
    /// Events per publish request (default: 100 for the backlog, 1 for live publishers).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Commit as the Rust client's consumer does: each poll carries the member's
    /// positions with `auto_commit`, committing what the previous polls returned, in
    /// place of a commit request after every poll (Kafka's `commitSync`).
    #[arg(long)]
    pub riding_commits: bool,
}

/// The options of `queue`.
#[derive(Args, Debug)]
pub struct QueueArgs {
    /// Workers, each with one receive or ack in flight.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Most messages per receive (1 to 100); each ack carries one receive's receipts.
    #[arg(long, default_value_t = 10)]
    pub batch: usize,
    /// How long a receive waits for a message when there is none, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub wait_ms: u64,
    /// Visibility timeout asked for by each receive (default: the subscription's, 30 s).
    #[arg(long)]
    pub visibility_timeout_ms: Option<u64>,
    /// Live publishers, each with one request in flight; 0 publishes a backlog first.
    #[arg(long, default_value_t = 0)]
    pub publishers: usize,
    /// Events of the backlog (with `--publishers 0`).
    #[arg(long, default_value_t = 200_000)]
    pub count: u64,
    /// Seconds the live publishers run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Bytes of each event's value.
    #[arg(long, default_value_t = 1024)]
    pub event_size: usize,
    /// Events per publish request (default: 100 for the backlog, 1 for live publishers).
    #[arg(long)]
    pub publish_batch: Option<usize>,
    /// Profiling aid: run in this process on an embedded log in this directory (created
    /// if missing) instead of over HTTP, and count state-store and object-store calls per
    /// receive and per ack. Backlog only; `--url` is not used.
    #[arg(long)]
    pub embedded: Option<PathBuf>,
    /// With `--embedded`, an experiment: serve the items a run never changes (topic,
    /// subscription, receipt key) and the immutable segment blobs from memory, as a
    /// cache in the core would, to see what their store calls cost.
    #[arg(long, requires = "embedded")]
    pub cache_immutable: bool,
    /// Each worker sends its acks with its next receive (`"ack"` in the receive body):
    /// one request per batch instead of two. Over HTTP only.
    #[arg(long, conflicts_with = "embedded")]
    pub ack_next: bool,
}

/// The options of `produce`.
#[derive(Args, Debug)]
pub struct ProduceArgs {
    #[arg(long, default_value_t = 8)]
    pub senders: usize,
    #[arg(long, default_value_t = 200_000)]
    pub count: u64,
    #[arg(long, default_value_t = 1024)]
    pub event_size: usize,
    /// The producer's linger, in milliseconds.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
}

/// The options of `work`.
#[derive(Args, Debug)]
pub struct WorkArgs {
    /// Handlers at once.
    #[arg(long, default_value_t = 40)]
    pub concurrency: usize,
    /// Receives under way at once.
    #[arg(long, default_value_t = 4)]
    pub receivers: usize,
    #[arg(long, default_value_t = 10)]
    pub batch: u32,
    #[arg(long, default_value_t = 50_000)]
    pub count: u64,
    #[arg(long, default_value_t = 1024)]
    pub event_size: usize,
}

/// The options of `push`.
#[derive(Args, Debug)]
pub struct PushArgs {
    /// Events per second (0: a backlog).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Events of the backlog (with `--rate 0`).
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Messages per delivery.
    #[arg(long, default_value_t = 10)]
    pub max_batch: u32,
    /// Deliveries under way at once.
    #[arg(long, default_value_t = 4)]
    pub max_in_flight: u32,
    /// Seconds the live publisher runs.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Bytes of each event's value.
    #[arg(long, default_value_t = 1024)]
    pub event_size: usize,
}

/// What each publish request carries.
#[derive(Args, Debug, Clone, Copy)]
pub struct PublishShape {
    /// Bytes of each event's value.
    #[arg(long, default_value_t = 1024)]
    pub event_size: usize,
    /// Events per publish request.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Distinct keys (0: no keys, events are spread).
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
}

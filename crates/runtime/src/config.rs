//! Configuration, read once at start from flags or `SLUICE_*` environment variables.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use sluice_core::groups::GroupsConfig;
use sluice_core::upkeep::pace::PaceSettings;
use sluice_core::upkeep::JanitorConfig;
use sluice_core::{Limits, LogConfig, AWS_INLINE_SEGMENT_BYTES, DEFAULT_INLINE_SEGMENT_BYTES};

/// `--sync-window-ms` unless set: the embedded backend's own default
/// (`sluice_local::DEFAULT_SYNC_WINDOW_MS`, which this crate may be built without).
pub const DEFAULT_SYNC_WINDOW_MS: u64 = 200;

/// What every Sluice process needs: where the data lives and the request limits.
/// With `bucket` and `table` set the data lives in S3 and DynamoDB, otherwise in `data_dir`.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Directory of the embedded backend (created if missing).
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "sluice-data")]
    pub data_dir: PathBuf,
    /// S3 bucket for segment objects; with `table`, selects the AWS backend.
    #[arg(long, env = "SLUICE_BUCKET")]
    pub bucket: Option<String>,
    /// DynamoDB table for topics, the index and idempotency records; with `bucket`, selects the AWS backend.
    #[arg(long, env = "SLUICE_TABLE")]
    pub table: Option<String>,
    /// AWS region of the bucket and table (default: the environment's, e.g. `AWS_REGION` on Lambda).
    #[arg(long, env = "SLUICE_AWS_REGION")]
    pub aws_region: Option<String>,
    /// Endpoint for both S3 and DynamoDB, e.g. moto's on loopback (default: AWS's own).
    #[arg(long, env = "SLUICE_AWS_ENDPOINT_URL")]
    pub aws_endpoint_url: Option<String>,
    /// Largest event value, in bytes.
    #[arg(long, env = "SLUICE_MAX_VALUE_BYTES", default_value_t = Limits::default().max_value_bytes)]
    pub max_value_bytes: usize,
    /// Largest request body, in bytes (Lambda's synchronous payload limit by default).
    #[arg(long, env = "SLUICE_MAX_REQUEST_BYTES", default_value_t = Limits::default().max_request_bytes)]
    pub max_request_bytes: usize,
    /// Most events in one publish.
    #[arg(long, env = "SLUICE_MAX_EVENTS_PER_PUBLISH", default_value_t = Limits::default().max_events_per_publish)]
    pub max_events_per_publish: usize,
    /// Most headers on one event.
    #[arg(long, env = "SLUICE_MAX_HEADERS_PER_EVENT", default_value_t = Limits::default().max_headers_per_event)]
    pub max_headers_per_event: usize,
    /// How far ahead of now an event's timestamp may be, in ms (Kafka's
    /// `message.timestamp.after.max.ms`): a far-future one would hold back retention.
    #[arg(long, env = "SLUICE_MAX_TIMESTAMP_AHEAD_MS", default_value_t = Limits::default().max_timestamp_ahead_ms,
        value_parser = clap::value_parser!(i64).range(0..))]
    pub max_timestamp_ahead_ms: i64,
    /// Most partitions a topic may have.
    #[arg(long, env = "SLUICE_MAX_PARTITIONS", default_value_t = Limits::default().max_partitions)]
    pub max_partitions: u32,
    /// How often a long poll re-reads a partition head for publishes of other processes
    /// (default: 50 ms embedded, 500 ms on AWS, where each check is a billed read).
    #[arg(long, env = "SLUICE_POLL_INTERVAL_MS")]
    pub poll_interval_ms: Option<u64>,
    /// A commit of at most this many bytes of segments keeps them in the state store's index
    /// items instead of a blob: one durable write instead of two (default: 32768 embedded,
    /// 0 (off) on AWS, where DynamoDB bills writes by the KB and S3 by the request).
    #[arg(long, env = "SLUICE_INLINE_SEGMENT_BYTES")]
    pub inline_segment_bytes: Option<usize>,
    /// Embedded: the longest an answered ack, nack, commit or heartbeat waits for its fsync,
    /// in ms (a power cut may undo those of the last window: docs/RELIABILITY.md, "The sync
    /// window"); 0 makes every answered write durable before its answer. Publishes and
    /// receives are durable before their answer at any setting.
    #[arg(long, env = "SLUICE_SYNC_WINDOW_MS", default_value_t = DEFAULT_SYNC_WINDOW_MS)]
    pub sync_window_ms: u64,
    /// Bytes of decoded segments a process keeps for its next reads (queue receives,
    /// group polls and replays of the same partitions); 0 keeps none.
    #[arg(long, env = "SLUICE_SEGMENT_CACHE_BYTES", default_value_t = LogConfig::default().segment_cache_bytes)]
    pub segment_cache_bytes: usize,
    /// How often `serve` runs the janitor (purges, retention, compaction, collection).
    #[arg(long, env = "SLUICE_JANITOR_INTERVAL_MS", default_value_t = 60_000)]
    pub janitor_interval_ms: u64,
    /// How often `serve` checks, between and during janitor rounds, for partitions over their
    /// `retention_bytes`, and applies retention to them (again at once while it removes
    /// something); 0 leaves retention to the rounds.
    #[arg(long, env = "SLUICE_RETENTION_INTERVAL_MS", default_value_t = 250)]
    pub retention_interval_ms: u64,
    /// The longest `serve`'s janitor holds back a compaction rewrite while requests keep
    /// coming (more than one in 50 ms); 0 never holds one back.
    #[arg(long, env = "SLUICE_JANITOR_YIELD_MS", default_value_t = PaceSettings::default().max_wait_ms)]
    pub janitor_yield_ms: u64,
    /// Retention of topics created without `retention_ms`.
    #[arg(long, env = "SLUICE_DEFAULT_RETENTION_MS", default_value_t = JanitorConfig::default().default_retention_ms)]
    pub default_retention_ms: i64,
    /// The size compaction merges runs of small segments up to.
    #[arg(long, env = "SLUICE_COMPACTION_TARGET_BYTES", default_value_t = JanitorConfig::default().compaction_target_bytes)]
    pub compaction_target_bytes: u64,
    /// How long an unneeded object is kept before it is deleted (readers and commits in flight).
    #[arg(long, env = "SLUICE_GC_GRACE_MS", default_value_t = JanitorConfig::default().grace_ms)]
    pub gc_grace_ms: i64,
    /// How long a consumer group without members keeps its committed offsets.
    #[arg(long, env = "SLUICE_OFFSETS_RETENTION_MS", default_value_t = JanitorConfig::default().offsets_retention_ms)]
    pub offsets_retention_ms: i64,
    /// Deliver to loopback, private and link-local addresses (default: yes embedded, where
    /// `http://localhost:3000` is the common receiver; no on AWS).
    #[arg(long, env = "SLUICE_PUSH_ALLOW_PRIVATE")]
    pub push_allow_private: Option<bool>,
    /// Lambda Invoke API endpoint for push targets that are functions (e.g. `cargo lambda
    /// watch`'s `http://127.0.0.1:9000`); on AWS, Lambda's own.
    #[arg(long, env = "SLUICE_LAMBDA_ENDPOINT")]
    pub lambda_endpoint: Option<String>,
}

#[derive(Parser)]
struct EnvOnly {
    #[command(flatten)]
    config: Config,
}

impl Config {
    /// Reads the configuration from the environment alone (the Lambda functions' way).
    pub fn from_env() -> Result<Self, clap::Error> {
        EnvOnly::try_parse_from(["sluice"]).map(|e| e.config)
    }

    /// The janitor's configuration.
    pub fn janitor_config(&self) -> JanitorConfig {
        JanitorConfig {
            default_retention_ms: self.default_retention_ms,
            compaction_target_bytes: self.compaction_target_bytes,
            grace_ms: self.gc_grace_ms,
            offsets_retention_ms: self.offsets_retention_ms,
            ..JanitorConfig::default()
        }
    }

    /// How `serve`'s janitor paces its rewrites against live requests: `None` if it does not.
    pub fn pace_settings(&self) -> Option<PaceSettings> {
        (self.janitor_yield_ms > 0)
            .then(|| PaceSettings { max_wait_ms: self.janitor_yield_ms, ..PaceSettings::default() })
    }

    /// The consumer groups' configuration.
    pub fn groups_config(&self) -> GroupsConfig {
        GroupsConfig { offsets_retention_ms: self.offsets_retention_ms }
    }

    /// The log's configuration; `aws` says which backend it runs on (its default poll interval differs).
    pub fn log_config(&self, aws: bool) -> LogConfig {
        let default_poll = if aws { 500 } else { 50 };
        LogConfig {
            limits: self.limits(),
            poll_interval: Duration::from_millis(self.poll_interval_ms.unwrap_or(default_poll)),
            inline_segment_bytes: self.inline_segment_bytes.unwrap_or(if aws {
                AWS_INLINE_SEGMENT_BYTES
            } else {
                DEFAULT_INLINE_SEGMENT_BYTES
            }),
            segment_cache_bytes: self.segment_cache_bytes,
            // On DynamoDB a plain conditional put instead of a transaction; SQLite gains nothing.
            single_write_commits: aws,
            ..LogConfig::default()
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_value_bytes: self.max_value_bytes,
            max_request_bytes: self.max_request_bytes,
            max_events_per_publish: self.max_events_per_publish,
            max_headers_per_event: self.max_headers_per_event,
            max_timestamp_ahead_ms: self.max_timestamp_ahead_ms,
            max_partitions: self.max_partitions.min(sluice_core::layout::MAX_STORED_PARTITIONS),
            ..Limits::default()
        }
    }
}

//! The names of Sluice's metrics, one list for both backends: `serve` renders them for
//! Prometheus at `GET /metrics`, the Lambda functions write them in CloudWatch's
//! Embedded Metric Format. They are recorded through the `metrics` facade, which does
//! nothing until a process installs a recorder (the simulation and the tests of the
//! core install none).
//!
//! Labels, where they apply: `topic`, `partition`, `group`, `subscription`; HTTP
//! metrics carry `route` (the matched path template, never the raw path), `method` and
//! `status`. A per-topic label is recorded only once the topic is known to exist, so a
//! stream of requests for made-up names cannot grow the label sets.

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

/// HTTP requests answered, by `route`, `method`, `status`.
pub const HTTP_REQUESTS: &str = "sluice_http_requests_total";
/// Time to answer, by `route`, `method` (long polls included: they wait on purpose).
pub const HTTP_DURATION: &str = "sluice_http_request_duration_seconds";

/// Publish requests by `topic` and `outcome` (`ok`, `rejected`: a 4xx, `failed`: a 5xx).
pub const PUBLISH_REQUESTS: &str = "sluice_publish_requests_total";
/// Events acknowledged to publishers, by `topic` (a repeated idempotent request counts
/// again, though the log stores them once).
pub const EVENTS_PUBLISHED: &str = "sluice_events_published_total";
/// Bytes of keys, headers and values acknowledged to publishers, by `topic`.
pub const BYTES_PUBLISHED: &str = "sluice_bytes_published_total";
/// From a valid batch to its durable acknowledgement, by `topic`.
pub const PUBLISH_COMMIT: &str = "sluice_publish_commit_seconds";
/// Commit writes that did not apply and were retried, by `reason`: `condition` (a cached
/// head, topic or object record was stale: another process committed, or a lost race) or
/// `refused` (throttled, or on DynamoDB cancelled by a conflicting transaction). A steady
/// rate means publishers contend for the same items.
pub const COMMIT_CONFLICTS: &str = "sluice_commit_conflicts_total";
/// One `fdatasync` of a file, by `file` (`segment`, or `state` for SQLite's commit);
/// embedded backend only.
pub const FSYNC: &str = "sluice_fsync_seconds";

/// Events handed out, by `topic` and `via` (`replay`, `group`, `queue`).
pub const EVENTS_READ: &str = "sluice_events_read_total";
/// Bytes of those events, by `topic` and `via`.
pub const BYTES_READ: &str = "sluice_bytes_read_total";

/// A partition's next offset, by `topic`, `partition`.
pub const HIGH_WATERMARK: &str = "sluice_partition_high_watermark";
/// A partition's first readable offset, by `topic`, `partition`.
pub const LOG_START: &str = "sluice_partition_log_start_offset";
/// Bytes a topic's partitions hold, by `topic`.
pub const TOPIC_BYTES: &str = "sluice_topic_bytes";

/// A group's committed offset, by `group`, `topic`, `partition` (absent until a commit).
pub const GROUP_COMMITTED: &str = "sluice_group_committed_offset";
/// High watermark − committed, by `group`, `topic`, `partition` (`group`, `topic` on
/// Lambda, summed over the partitions).
pub const GROUP_LAG: &str = "sluice_group_lag";
/// A group's live members, by `group`.
pub const GROUP_MEMBERS: &str = "sluice_group_members";
/// Rebalances so far: the group's generation, by `group` (a gauge read from the store).
pub const GROUP_GENERATION: &str = "sluice_group_generation";

/// A subscription's messages by `topic`, `subscription`, `state` (`visible`,
/// `in_flight`, `delayed`, `dead`).
pub const SUB_MESSAGES: &str = "sluice_subscription_messages";
/// Messages its filter passed over so far, by `topic`, `subscription` (a running total
/// kept by the store, so a gauge: it starts again at 0 for a re-created subscription).
pub const SUB_FILTERED: &str = "sluice_subscription_filtered";
/// Messages retention took before they were settled, so far, by `topic`, `subscription`
/// (a running total kept by the store).
pub const SUB_EXPIRED: &str = "sluice_subscription_expired";
/// 1 while a subscription is paused, 0 while it delivers, by `topic`, `subscription`.
pub const SUB_PAUSED: &str = "sluice_subscription_paused";
/// Age of the oldest visible message, by `topic`, `subscription` (0 when none).
pub const SUB_OLDEST_AGE: &str = "sluice_subscription_oldest_visible_age_seconds";
/// A push subscription's deliveries so far by `topic`, `subscription`, `outcome`
/// (`succeeded`, `failed`): every dispatcher's, a running total kept by the store.
pub const PUSH_DELIVERIES: &str = "sluice_push_deliveries";
/// Push subscriptions suspended (their endpoint kept failing), by `topic`, `subscription`.
pub const PUSH_SUSPENSIONS: &str = "sluice_push_suspensions_total";
/// Suspended push subscriptions resumed by a delivered probe, by `topic`, `subscription`.
pub const PUSH_RESUMPTIONS: &str = "sluice_push_resumptions_total";
/// 1 while a push subscription is suspended, 0 otherwise, by `topic`, `subscription`.
pub const SUB_SUSPENDED: &str = "sluice_subscription_suspended";
/// Time a subscription with a rate waited for it so far (its receives found no token), by
/// `topic`, `subscription` (a running total kept by the store).
pub const SUB_THROTTLED: &str = "sluice_subscription_throttled_seconds";
/// A push subscription's in-flight limit in use (adaptive, at most `max_in_flight`), by
/// `topic`, `subscription`.
pub const PUSH_IN_FLIGHT_LIMIT: &str = "sluice_push_in_flight_limit";

/// Messages received, by `topic`, `subscription`.
pub const RECEIVED: &str = "sluice_messages_received_total";
/// Messages acknowledged, by `topic`, `subscription`.
pub const ACKED: &str = "sluice_messages_acked_total";
/// Messages given back, by `topic`, `subscription`.
pub const NACKED: &str = "sluice_messages_nacked_total";
/// Messages moved to the dead-letter queue, by `topic`, `subscription`.
pub const DEAD_LETTERED: &str = "sluice_messages_dead_lettered_total";
/// Dead letters sent back to their queue, by `topic`, `subscription`.
pub const REDRIVEN: &str = "sluice_messages_redriven_total";

/// Janitor passes, by `outcome` (`ok`, `failed`).
pub const JANITOR_RUNS: &str = "sluice_janitor_runs_total";
/// Segments retention removed.
pub const JANITOR_SEGMENTS_EXPIRED: &str = "sluice_janitor_segments_expired_total";
/// Segments compaction merged into larger ones.
pub const JANITOR_SEGMENTS_MERGED: &str = "sluice_janitor_segments_merged_total";
/// Bytes retention freed.
pub const JANITOR_BYTES_FREED: &str = "sluice_janitor_bytes_freed_total";
/// Unreferenced objects the collector deleted.
pub const JANITOR_OBJECTS_COLLECTED: &str = "sluice_janitor_objects_collected_total";

/// Time a scrape's (or the janitor's) sample of the store took.
pub const SAMPLE_DURATION: &str = "sluice_state_sample_seconds";
/// 1 when the last sample left topics, groups or subscriptions out (its bounds, or an
/// error reading one).
pub const SAMPLE_TRUNCATED: &str = "sluice_state_sample_truncated";
/// Topics, groups or subscriptions a sample could not read (logged, then skipped).
pub const SAMPLE_ERRORS: &str = "sluice_state_sample_errors_total";

/// Registers each metric's unit and help text with the installed recorder: Prometheus
/// prints them as `# HELP`, CloudWatch takes the unit.
pub fn describe() {
    let counters: [(&'static str, Unit, &'static str); 20] = [
        (HTTP_REQUESTS, Unit::Count, "HTTP requests answered, by route, method and status"),
        (PUBLISH_REQUESTS, Unit::Count, "Publish requests by topic and outcome (ok, rejected, failed)"),
        (EVENTS_PUBLISHED, Unit::Count, "Events acknowledged to publishers"),
        (BYTES_PUBLISHED, Unit::Bytes, "Bytes of keys, headers and values acknowledged to publishers"),
        (COMMIT_CONFLICTS, Unit::Count, "Commit writes refused and retried, by reason (condition, refused)"),
        (EVENTS_READ, Unit::Count, "Events handed out by replay, group polls and receives"),
        (BYTES_READ, Unit::Bytes, "Bytes of the events handed out"),
        (SAMPLE_ERRORS, Unit::Count, "Topics, groups or subscriptions a state sample could not read"),
        (RECEIVED, Unit::Count, "Messages received from a subscription"),
        (ACKED, Unit::Count, "Messages acknowledged"),
        (NACKED, Unit::Count, "Messages given back"),
        (DEAD_LETTERED, Unit::Count, "Messages moved to the dead-letter queue"),
        (REDRIVEN, Unit::Count, "Dead letters sent back to their queue"),
        (PUSH_SUSPENSIONS, Unit::Count, "Push subscriptions suspended because their endpoint kept failing"),
        (PUSH_RESUMPTIONS, Unit::Count, "Suspended push subscriptions resumed by a delivered probe"),
        (JANITOR_RUNS, Unit::Count, "Janitor passes by outcome"),
        (JANITOR_SEGMENTS_EXPIRED, Unit::Count, "Segments retention removed"),
        (JANITOR_SEGMENTS_MERGED, Unit::Count, "Segments compaction merged"),
        (JANITOR_BYTES_FREED, Unit::Bytes, "Bytes retention freed"),
        (JANITOR_OBJECTS_COLLECTED, Unit::Count, "Unreferenced objects deleted"),
    ];
    for (name, unit, help) in counters {
        describe_counter!(name, unit, help);
    }
    let gauges: [(&'static str, Unit, &'static str); 17] = [
        (HIGH_WATERMARK, Unit::Count, "A partition's next offset"),
        (LOG_START, Unit::Count, "A partition's first readable offset"),
        (TOPIC_BYTES, Unit::Bytes, "Bytes a topic's partitions hold"),
        (GROUP_COMMITTED, Unit::Count, "A consumer group's committed offset"),
        (GROUP_LAG, Unit::Count, "Events a consumer group has not committed"),
        (GROUP_MEMBERS, Unit::Count, "Live members of a consumer group"),
        (GROUP_GENERATION, Unit::Count, "Rebalances of a consumer group so far (its generation)"),
        (SUB_FILTERED, Unit::Count, "Messages a subscription's filter passed over so far"),
        (SUB_EXPIRED, Unit::Count, "Messages retention took before they were settled, so far"),
        (PUSH_DELIVERIES, Unit::Count, "Push deliveries so far by outcome, as the store keeps them"),
        (SUB_MESSAGES, Unit::Count, "A subscription's messages by state"),
        (SUB_OLDEST_AGE, Unit::Seconds, "Age of a subscription's oldest visible message"),
        (SUB_PAUSED, Unit::Count, "1 while a subscription is paused"),
        (SUB_SUSPENDED, Unit::Count, "1 while a push subscription is suspended"),
        (SUB_THROTTLED, Unit::Seconds, "Time a subscription waited for its rate so far"),
        (PUSH_IN_FLIGHT_LIMIT, Unit::Count, "A push subscription's adaptive in-flight limit in use"),
        (SAMPLE_TRUNCATED, Unit::Count, "1 when the last state sample stopped at its bounds"),
    ];
    for (name, unit, help) in gauges {
        describe_gauge!(name, unit, help);
    }
    let histograms: [(&'static str, &'static str); 4] = [
        (HTTP_DURATION, "Time to answer an HTTP request"),
        (PUBLISH_COMMIT, "From a valid publish batch to its durable acknowledgement"),
        (FSYNC, "One fdatasync of a segment file or of the state store's commit"),
        (SAMPLE_DURATION, "Time a state sample took"),
    ];
    for (name, help) in histograms {
        describe_histogram!(name, Unit::Seconds, help);
    }
}

/// The histograms' bucket bounds in seconds, from a fast fsync to a long poll.
pub const SECONDS_BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0];

//! The push dispatcher Lambda function. Two things wake it:
//! - the table's DynamoDB Stream, through an event source mapping whose filter passes only
//!   changes of partition heads (one per commit): it then delivers what the push
//!   subscriptions of those topics have due, so a publish reaches its subscribers at the
//!   mapping's next poll (no batching window);
//! - a schedule: a sweep of every topic, for what comes due while nothing is published (a
//!   scheduled message, a nack's backoff, an attempt's window that ended with its
//!   dispatcher). The sweep stays for what comes due before the next one starts and
//!   delivers it at its time ([`Dispatcher::sweep`]): nothing waits behind a sweep, while a
//!   stream run holds its shard's next wakes back as long as it lasts.
//!
//! Either way it receives, delivers and settles through the same core code as `sluice
//! serve` ([`Dispatcher::drain`]) until nothing is due or no attempt would end before its
//! deadline; what it leaves, the next wake delivers. Runs overlap (wakes of several shards,
//! a sweep): each drives only the subscriptions whose lease it claimed, so different
//! subscriptions are delivered in parallel and each one's `max_in_flight` holds across
//! runs.

use aws_lambda_events::dynamodb;
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use serde::Serialize;
use serde_json::Value;
use sluice_core::push::{Dispatcher, Drained, Topics, Wake, WAKE_STAYS_MS};
use sluice_core::queues::Queues;
use sluice_runtime::Config;

/// Time kept back from the invocation's deadline for settling and adding the counts.
const RESERVE_MS: i64 = 3_000;
/// How long a stream run may last, whatever the function's timeout: its shard's next wakes
/// wait for it (the timeout is longer for the sweeps' sake).
const STREAM_RUN_MS: i64 = 60_000 - RESERVE_MS;
/// How far past its start a sweep stays for what comes due: the schedule's period
/// (`PushSweepSchedule`, `rate(1 minute)`), after which the next sweep takes over.
const SWEEP_STAYS_MS: i64 = 60_000;

/// What one run did.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Report {
    /// Topics woken by the stream, or `None` for a sweep of every topic.
    topics: Option<usize>,
    deliveries: u64,
    messages: u64,
    failed_messages: u64,
}

/// What woke this run.
#[derive(Debug, PartialEq, Eq)]
enum Woken {
    /// A batch of the table stream's records: the topics whose partition heads changed.
    Stream(Topics),
    /// The schedule's event (any other event): a sweep of every topic.
    Sweep,
    /// A wake a stream run handed over: a run that stays for a due time.
    At(Wake),
}

fn woken(payload: Value) -> Result<Woken, serde_json::Error> {
    if let Some(wake) = Wake::of_event(&payload) {
        return Ok(Woken::At(wake?));
    }
    if payload.get("Records").is_none() {
        return Ok(Woken::Sweep);
    }
    let batch: dynamodb::Event = serde_json::from_value(payload)?;
    let pks: Vec<String> = batch
        .records
        .iter()
        .filter_map(|r| match r.change.keys.get("pk") {
            Some(serde_dynamo::AttributeValue::S(pk)) => Some(pk.clone()),
            _ => None,
        })
        .collect();
    Ok(Woken::Stream(Topics::of_changed(pks.iter().map(String::as_str))))
}

async fn dispatch(dispatcher: &Dispatcher, event: LambdaEvent<Value>) -> Result<Report, Error> {
    let woken = woken(event.payload)?;
    let now_ms = dispatcher.now_ms();
    let deadline_ms = sluice_runtime::invocation_deadline_ms(event.context.deadline, now_ms) - RESERVE_MS;
    tracing::debug!(?woken, budget_ms = deadline_ms - now_ms, "woken");
    let (topics, drained) = match woken {
        Woken::Stream(topics) => {
            let drained = dispatcher.drain(&topics, deadline_ms.min(now_ms + STREAM_RUN_MS)).await?;
            (Some(topics), drained)
        }
        Woken::Sweep => (None, dispatcher.sweep(&Topics::All, deadline_ms, now_ms + SWEEP_STAYS_MS).await?),
        Woken::At(wake) => {
            let topics = Topics::Named(wake.topics);
            let drained = dispatcher.sweep(&topics, deadline_ms, wake.at_ms.max(now_ms) + WAKE_STAYS_MS).await?;
            (Some(topics), drained)
        }
    };
    let Drained { deliveries, messages, failed_messages } = drained;
    let woken = match &topics {
        Some(Topics::Ids(ids)) => Some(ids.len()),
        Some(Topics::Named(names)) => Some(names.len()),
        Some(Topics::All) | None => None,
    };
    let report = Report { topics: woken, deliveries, messages, failed_messages };
    // A run that delivered nothing (most sweeps) is not worth a log line's cost.
    if deliveries == 0 {
        tracing::debug!(request_id = %event.context.request_id, ?report, "dispatched");
    } else {
        tracing::info!(request_id = %event.context.request_id, ?report, "dispatched");
    }
    Ok(report)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let log = sluice_runtime::open_backend(&config).await?;
    // Lambda names the function it runs: a stream run wakes this one for a due time.
    let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok();
    let dispatcher = sluice_runtime::dispatcher(&config, Queues::new(log), function).await?;
    // Dead-lettered messages are counted in the log as CloudWatch EMF after each invocation.
    let metrics = sluice_runtime::metrics::emf::collector()?;
    sluice_runtime::metrics::emf::run_service(metrics, service_fn(|event| dispatch(&dispatcher, event))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = include_str!("../../../tests/fixtures/dynamodb-stream.json");
    const SCHEDULED: &str = include_str!("../../../tests/fixtures/eventbridge-scheduled.json");

    #[test]
    fn given_stream_records_then_the_topics_of_changed_heads_a_schedule_sweeps_and_a_wake_stays() {
        let topics = woken(serde_json::from_str(STREAM).unwrap()).unwrap();
        assert_eq!(topics, Woken::Stream(Topics::Ids([0x2a, 0x10].into())), "heads only, each topic once");
        assert_eq!(woken(serde_json::from_str(SCHEDULED).unwrap()).unwrap(), Woken::Sweep);
        assert!(woken(serde_json::json!({"Records": [{"nonsense": 1}]})).is_err(), "a malformed batch is an error");
        let wake = Wake { topics: vec!["orders".into()], at_ms: 1_800_000_020_000 };
        assert_eq!(woken(serde_json::from_str(&wake.event()).unwrap()).unwrap(), Woken::At(wake));
        assert!(woken(serde_json::json!({"sluice_wake": {"topics": 1}})).is_err(), "a malformed wake is an error");
    }
}

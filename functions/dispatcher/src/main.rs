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
use sluice_core::push::{Dispatcher, Drained, Topics};
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

/// What woke this run: a batch of the table stream's records names the topics whose
/// partition heads changed; any other event (the schedule's) asks for a sweep.
fn wake(payload: Value) -> Result<Topics, serde_json::Error> {
    if payload.get("Records").is_none() {
        return Ok(Topics::All);
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
    Ok(Topics::of_changed(pks.iter().map(String::as_str)))
}

async fn dispatch(dispatcher: &Dispatcher, event: LambdaEvent<Value>) -> Result<Report, Error> {
    let topics = wake(event.payload)?;
    let now_ms = dispatcher.now_ms();
    let deadline_ms = sluice_runtime::invocation_deadline_ms(event.context.deadline, now_ms) - RESERVE_MS;
    tracing::debug!(?topics, budget_ms = deadline_ms - now_ms, "woken");
    let drained = match topics {
        Topics::All => dispatcher.sweep(&topics, deadline_ms, now_ms + SWEEP_STAYS_MS).await?,
        _ => dispatcher.drain(&topics, deadline_ms.min(now_ms + STREAM_RUN_MS)).await?,
    };
    let Drained { deliveries, messages, failed_messages } = drained;
    let woken = match &topics {
        Topics::Ids(ids) => Some(ids.len()),
        Topics::Named(names) => Some(names.len()),
        Topics::All => None,
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
    let dispatcher = sluice_runtime::dispatcher(&config, Queues::new(log)).await?;
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
    fn given_stream_records_then_the_topics_of_changed_heads_and_a_schedule_sweeps_all() {
        let topics = wake(serde_json::from_str(STREAM).unwrap()).unwrap();
        assert_eq!(topics, Topics::Ids([0x2a, 0x10].into()), "heads only, each topic once");
        assert_eq!(wake(serde_json::from_str(SCHEDULED).unwrap()).unwrap(), Topics::All);
        assert!(wake(serde_json::json!({"Records": [{"nonsense": 1}]})).is_err(), "a malformed batch is an error");
    }
}

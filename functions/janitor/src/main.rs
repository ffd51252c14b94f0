//! The janitor Lambda function, run by an EventBridge schedule. Retention (the
//! upkeep it exists for) arrives with its own issue; until then its one job is
//! an honest report: per topic, how many events and bytes the log holds, as one
//! structured log line each and as the invocation's result. Expired idempotency
//! records need no janitor: DynamoDB's TTL deletes them.

use lambda_runtime::{run, service_fn, tracing, Error, LambdaEvent};
use serde::Serialize;
use serde_json::Value;
use sluice_api::Config;
use sluice_core::Log;

/// What the log holds on one topic.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct TopicReport {
    topic: String,
    partitions: u32,
    events: u64,
    bytes: u64,
}

/// One scheduled run; the event's content does not matter, only that it came.
async fn janitor(log: &Log, event: LambdaEvent<Value>) -> Result<Vec<TopicReport>, Error> {
    let scheduled = event.payload.get("time").and_then(Value::as_str).unwrap_or("unknown");
    tracing::info!(request_id = %event.context.request_id, scheduled, "janitor run");
    let mut reports = Vec::new();
    for topic in log.list_topics().await? {
        let (topic, partitions) = log.describe_topic(&topic.name).await?;
        let report = TopicReport {
            topic: topic.name,
            partitions: topic.spec.partitions,
            events: partitions.iter().map(|p| p.high_watermark - p.log_start_offset).sum(),
            bytes: partitions.iter().map(|p| p.bytes).sum(),
        };
        tracing::info!(topic = %report.topic, events = report.events, bytes = report.bytes, "topic size");
        reports.push(report);
    }
    Ok(reports)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let log = sluice_api::open_backend(&config).await?;
    run(service_fn(|event| janitor(&log, event))).await
}

#[cfg(test)]
mod tests {
    use aws_lambda_events::eventbridge::EventBridgeEvent;
    use sluice_core::{NewEvent, TopicSpec};

    use super::*;

    const SCHEDULED: &str = include_str!("../../../tests/fixtures/eventbridge-scheduled.json");

    #[tokio::test]
    async fn given_scheduled_event_then_reports_each_topic_size() {
        let scheduled: EventBridgeEvent = serde_json::from_str(SCHEDULED).unwrap();
        assert_eq!(scheduled.detail_type, "Scheduled Event", "the fixture is EventBridge's scheduled event");
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_env().map(|c| Config { data_dir: dir.path().to_owned(), ..c }).unwrap();
        let log = sluice_api::open_embedded(&config).unwrap();
        log.create_topic("orders", TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None })
            .await
            .unwrap();
        let event = |p| NewEvent {
            key: None,
            headers: Vec::new(),
            value: "{}".into(),
            value_is_json: true,
            timestamp_ms: None,
            partition: Some(p),
        };
        log.publish("orders", vec![event(0), event(1), event(1)], None).await.unwrap();

        let payload = serde_json::from_str(SCHEDULED).unwrap();
        let reports = janitor(&log, LambdaEvent::new(payload, Default::default())).await.unwrap();
        assert_eq!(reports.len(), 1);
        assert_eq!((reports[0].topic.as_str(), reports[0].partitions, reports[0].events), ("orders", 2, 3));
        assert!(reports[0].bytes > 0);
    }
}

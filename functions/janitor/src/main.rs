//! The janitor Lambda function, run by an EventBridge schedule: purges deleted
//! topics and expired records, applies retention and compaction, and collects
//! unneeded objects, in bounded steps until its time is nearly up (whatever is
//! left, the next run continues); then reports per topic how many events and
//! bytes the log holds, as one structured log line each and as the invocation's
//! result. It is the only function allowed to delete objects.

use std::time::{Duration, SystemTime};

use lambda_runtime::{run, service_fn, tracing, Error, LambdaEvent};
use serde::Serialize;
use serde_json::Value;
use sluice_api::Config;
use sluice_core::upkeep::{Janitor, UpkeepReport, STEP_BUDGET};
use sluice_core::Log;

/// Time kept back from the invocation's deadline for the report.
const RESERVE: Duration = Duration::from_secs(15);

/// What the log holds on one topic.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct TopicReport {
    topic: String,
    partitions: u32,
    events: u64,
    bytes: u64,
}

/// What one run did and found.
#[derive(Debug, Serialize)]
struct Report {
    upkeep: UpkeepReport,
    topics: Vec<TopicReport>,
}

/// One scheduled run; the event's content does not matter, only that it came.
async fn janitor(log: &Log, config: &Config, event: LambdaEvent<Value>) -> Result<Report, Error> {
    let scheduled = event.payload.get("time").and_then(Value::as_str).unwrap_or("unknown");
    tracing::info!(request_id = %event.context.request_id, scheduled, "janitor run");
    let deadline = event.context.deadline().checked_sub(RESERVE);
    let janitor =
        Janitor::new(log.store().clone(), log.objects().clone(), log.clock().clone(), config.janitor_config());
    let mut upkeep = UpkeepReport::default();
    loop {
        let step = janitor.step(STEP_BUDGET).await?;
        upkeep.add(&step);
        if !step.more() || deadline.is_some_and(|d| SystemTime::now() >= d) {
            break;
        }
    }
    tracing::info!(?upkeep, "upkeep done");
    let mut topics = Vec::new();
    for topic in log.list_topics().await? {
        let (topic, partitions) = log.describe_topic(&topic.name).await?;
        let report = TopicReport {
            topic: topic.name,
            partitions: topic.spec.partitions,
            events: partitions.iter().map(|p| p.high_watermark - p.log_start_offset).sum(),
            bytes: partitions.iter().map(|p| p.bytes).sum(),
        };
        tracing::info!(topic = %report.topic, events = report.events, bytes = report.bytes, "topic size");
        topics.push(report);
    }
    Ok(Report { upkeep, topics })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let log = sluice_api::open_backend(&config).await?;
    run(service_fn(|event| janitor(&log, &config, event))).await
}

#[cfg(test)]
mod tests {
    use aws_lambda_events::eventbridge::EventBridgeEvent;
    use sluice_core::{NewEvent, TopicSpec};

    use super::*;

    const SCHEDULED: &str = include_str!("../../../tests/fixtures/eventbridge-scheduled.json");

    #[tokio::test]
    async fn given_scheduled_event_then_purges_deleted_topics_and_reports_each_topic_size() {
        let scheduled: EventBridgeEvent = serde_json::from_str(SCHEDULED).unwrap();
        assert_eq!(scheduled.detail_type, "Scheduled Event", "the fixture is EventBridge's scheduled event");
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_env().map(|c| Config { data_dir: dir.path().to_owned(), ..c }).unwrap();
        let log = sluice_api::open_embedded(&config).unwrap();
        let spec = TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None };
        let event = |p| NewEvent {
            key: None,
            headers: Vec::new(),
            value: "{}".into(),
            value_is_json: true,
            timestamp_ms: None,
            partition: Some(p),
        };
        for name in ["orders", "old"] {
            log.create_topic(name, spec).await.unwrap();
            log.publish(name, vec![event(0), event(1), event(1)], None).await.unwrap();
        }
        log.delete_topic("old").await.unwrap();

        let payload = serde_json::from_str(SCHEDULED).unwrap();
        let mut context = lambda_runtime::Context::default();
        context.deadline =
            (SystemTime::now() + Duration::from_secs(120)).duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis()
                as u64;
        let report = janitor(&log, &config, LambdaEvent::new(payload, context)).await.unwrap();
        assert_eq!(report.upkeep.purge.topics_purged, 1, "{:?}", report.upkeep);
        assert_eq!(report.upkeep.purge.items_deleted, 4, "two heads and two segment entries: {:?}", report.upkeep);
        assert!(!report.upkeep.more());
        let topics = &report.topics;
        assert_eq!(topics.len(), 1);
        assert_eq!((topics[0].topic.as_str(), topics[0].partitions, topics[0].events), ("orders", 2, 3));
        assert!(topics[0].bytes > 0);
    }
}

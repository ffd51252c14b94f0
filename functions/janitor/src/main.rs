//! The janitor Lambda function, run by an EventBridge schedule: purges deleted
//! topics and expired records, applies retention and compaction, and collects
//! unneeded objects, in bounded steps until its time is nearly up (whatever is
//! left, the next run continues); then reports per topic how many events and
//! bytes the log holds, as one structured log line each and as the invocation's
//! result. Its work, and the gauges CloudWatch alarms on (group lag and subscription
//! backlogs, summed per topic), go to the log as CloudWatch EMF. It is the only function
//! allowed to delete objects.

use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use serde::Serialize;
use serde_json::Value;
use sluice_api::metrics::{sample, Detail, SampleBounds};
use sluice_core::upkeep::{Janitor, UpkeepReport, STEP_BUDGET};
use sluice_core::TopicSize;
use sluice_runtime::metrics::emf;
use sluice_runtime::{App, Config};

/// Time kept back from the invocation's deadline for the report, in milliseconds.
const RESERVE_MS: i64 = 15_000;

/// What one run did and found.
#[derive(Debug, Serialize)]
struct Report {
    upkeep: UpkeepReport,
    topics: Vec<TopicSize>,
}

/// One scheduled run; the event's content does not matter, only that it came.
async fn janitor(app: &App, janitor: &Janitor, event: LambdaEvent<Value>) -> Result<Report, Error> {
    let scheduled = event.payload.get("time").and_then(Value::as_str).unwrap_or("unknown");
    tracing::info!(request_id = %event.context.request_id, scheduled, "janitor run");
    let now_ms = app.log.clock().now_ms();
    let deadline_ms = sluice_runtime::invocation_deadline_ms(event.context.deadline, now_ms) - RESERVE_MS;
    // The gauges first, within the invocation's time, whatever upkeep then does: the
    // alarms read them. A sample that cannot even list is logged, not the run's failure.
    match sample(app, Detail::Topic, SampleBounds::default()).await {
        Ok(sampled) => tracing::info!(?sampled, "gauges sampled"),
        Err(error) => tracing::warn!(%error, "gauges not sampled"),
    }
    let upkeep = janitor.run_until(deadline_ms, STEP_BUDGET).await.inspect_err(|_| UpkeepReport::record_failure())?;
    upkeep.record();
    tracing::info!(?upkeep, "upkeep done");
    let topics = app.log.sizes().await?;
    for t in &topics {
        tracing::info!(topic = %t.topic, events = t.events, bytes = t.bytes, "topic size");
    }
    Ok(Report { upkeep, topics })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let log = sluice_runtime::open_backend(&config).await?;
    // Built as `serve` builds its janitor: on the embedded backend (under `cargo lambda
    // watch`) it compacts into blob files of its own, not into the log's.
    let janitor = sluice_runtime::janitor(&config, &log)?;
    let app = App::new(log, config.groups_config());
    emf::run_service(emf::collector()?, service_fn(|event| self::janitor(&app, &janitor, event))).await
}

// On the embedded backend, which a deploy build (no default features) leaves out.
#[cfg(all(test, feature = "local"))]
mod tests {
    use std::time::{Duration, SystemTime};

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
        let log = sluice_runtime::open_embedded(&config).unwrap();
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
        let upkeep = sluice_runtime::janitor(&config, &log).unwrap();
        let app = App::from(log);
        let report = janitor(&app, &upkeep, LambdaEvent::new(payload, context)).await.unwrap();
        assert_eq!(report.upkeep.purge.topics_purged, 1, "{:?}", report.upkeep);
        assert_eq!(report.upkeep.purge.items_deleted, 4, "two heads and two segment entries: {:?}", report.upkeep);
        assert!(!report.upkeep.more());
        let topics = &report.topics;
        assert_eq!(topics.len(), 1);
        assert_eq!((topics[0].topic.as_str(), topics[0].partitions, topics[0].events), ("orders", 2, 3));
        assert!(topics[0].bytes > 0);
    }
}

//! What the janitor costs: compaction, offset by time, an idle run, retention.

use sluice_core::upkeep::{Janitor, JanitorConfig};

use super::*;

/// Events published one per request, to be compacted.
const SINGLES: usize = 320;

/// The janitor's requests: compaction of a partition written one event per publish, replay
/// before and after, retention, and an idle run over every partition (docs/AWS.md's upkeep rows).
#[tokio::test]
async fn upkeep_requests_are_what_the_cost_model_says() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let counted = counted_log().await;
    let (state, objects, log) = &counted;
    let janitor = Janitor::new(
        state.clone(),
        objects.clone(),
        Arc::new(SystemClock),
        JanitorConfig { grace_ms: 0, ..JanitorConfig::default() },
    );
    // Settle what other tests left (deleted topics, free objects), so each count below is its own.
    janitor.run(upkeep::STEP_BUDGET).await.unwrap();
    let topic = unique_topic("upkeep");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    compaction_of_blobs(&counted, &janitor, &topic).await;
    compaction_of_inline(&counted, &janitor).await;

    // Offset by time: the time index (here its cursor: a 320 KiB segment is below the settled
    // size of half the 8 MiB target), then the segments from there, and one ranged GET.
    let request =
        ReadRequest { topic: topic.clone(), partition: 0, offset: 160, max_events: 1, max_bytes: 1 << 20, wait_ms: 0 };
    let at = log.read(&request).await.unwrap().events[0].record.timestamp_ms;
    let (found, by_time) =
        counted!(state, objects, log.offset(&topic, 0, sluice_core::OffsetQuery::Timestamp(at)).await.unwrap());
    per_request("offset by time (compacted partition)", &by_time, 1);
    // Events published in one millisecond share its time: the first of them is the answer.
    let mut stamps = Vec::new();
    while stamps.len() <= 160 {
        let (offset, max_events) = (stamps.len() as u64, 161 - stamps.len());
        let request =
            ReadRequest { topic: topic.clone(), partition: 0, offset, max_events, max_bytes: 1 << 20, wait_ms: 0 };
        stamps.extend(log.read(&request).await.unwrap().events.iter().map(|e| e.record.timestamp_ms));
    }
    let first_at = stamps.iter().position(|&t| t >= at).map(|o| o as u64);
    assert_eq!(Some(found), first_at, "the first offset at or after the 160th event's time");
    assert_eq!(by_time.get("s3:GetObject"), Some(&1), "one ranged GET: {by_time:?}");

    // An idle run: nothing to expire, merge or collect; it still looks at every partition.
    let partitions: u32 = log.list_topics().await.unwrap().iter().map(|t| t.spec.partitions).sum();
    let (_, idle) = counted!(state, objects, janitor.run(upkeep::STEP_BUDGET).await.unwrap());
    per_request(&format!("janitor: idle run over {partitions} partitions"), &idle, 1);
    assert!(!idle.contains_key("dynamodb:TransactWriteItems") && !idle.contains_key("s3:DeleteObject"), "{idle:?}");

    retention_by_size(&counted, &janitor).await;
}

/// Segments in S3 objects, as events over 4 KiB (or a deployment with inline segments off)
/// make: replayed, compacted, replayed again.
async fn compaction_of_blobs((state, objects, log): &Counted, janitor: &Janitor, topic: &str) {
    let blob_config = LogConfig { inline_segment_bytes: 0, ..LogConfig::default() };
    let blob_log = Log::new(state.clone(), objects.clone(), Arc::new(SystemClock), blob_config);
    for i in 0..SINGLES {
        blob_log.publish(topic, vec![kib_event(i, false)], None).await.unwrap();
    }
    let (_, before) = counted!(state, objects, read_values(log, topic, SINGLES).await);
    per_request(&format!("replay {SINGLES} 1 KiB events stored one per segment"), &before, 1);
    assert_eq!(before.get("s3:GetObject"), Some(&(SINGLES as u64)));

    let (report, compaction) = counted!(state, objects, janitor.run(upkeep::STEP_BUDGET).await.unwrap());
    per_request(
        &format!(
            "janitor: compact {} of {SINGLES} one-event segments into 1 ({} merges; old objects collected)",
            report.segments_merged - report.segments_written + 1,
            report.segments_written
        ),
        &compaction,
        1,
    );
    let (_, after) = counted!(state, objects, read_values(log, topic, SINGLES).await);
    per_request(&format!("replay {SINGLES} 1 KiB events: one compacted segment and the newest one"), &after, 1);
    assert_eq!(after.get("s3:GetObject"), Some(&2), "the compacted segment and the newest one: {after:?}");
}

/// The same, written as the functions write single events: inline, in the index items.
async fn compaction_of_inline((state, objects, log): &Counted, janitor: &Janitor) {
    let inline = unique_topic("upkeep-inline");
    log.create_topic(&inline, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..SINGLES {
        log.publish(&inline, vec![kib_event(i, false)], None).await.unwrap();
    }
    let (_, before) = counted!(state, objects, read_values(log, &inline, SINGLES).await);
    per_request(&format!("replay {SINGLES} 1 KiB events stored inline"), &before, 1);
    assert_eq!(before.get("s3:GetObject"), None, "{before:?}");
    let (report, compaction) = counted!(state, objects, janitor.run(upkeep::STEP_BUDGET).await.unwrap());
    per_request(
        &format!(
            "janitor: compact {} of {SINGLES} inline segments into 1 ({} merges)",
            report.segments_merged - report.segments_written + 1,
            report.segments_written
        ),
        &compaction,
        1,
    );
    // Inline bytes come with the index items: what is read from S3, and then collected, is
    // only what compaction itself wrote in its first round of merges (of at most 32 segments).
    let first_round = report.segments_written as u64 - 1;
    assert_eq!(compaction.get("s3:GetObject"), Some(&first_round), "{compaction:?}");
    assert_eq!(compaction.get("s3:DeleteObject"), Some(&first_round), "{compaction:?}");
    assert_eq!(
        read_values(log, &inline, SINGLES).await,
        (0..SINGLES).map(|i| kib_event(i, false).value).collect::<Vec<_>>()
    );
}

/// Retention by size drops the compacted segment (400 KiB over a 150 KiB bound).
async fn retention_by_size((state, objects, log): &Counted, janitor: &Janitor) {
    let bounded = unique_topic("bounded");
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: Some(150 << 10) };
    log.create_topic(&bounded, spec).await.unwrap();
    for b in 0..4 {
        log.publish(&bounded, (0..100).map(|i| kib_event(b * 100 + i, false)).collect(), None).await.unwrap();
    }
    let (report, retention) = counted!(state, objects, janitor.run(upkeep::STEP_BUDGET).await.unwrap());
    per_request(
        &format!("janitor: retention drops {} of 4 segments of 100 KiB (objects collected)", report.segments_expired),
        &retention,
        1,
    );
    assert_eq!(report.segments_expired, 3, "{report:?}");
}

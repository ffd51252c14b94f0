//! Describe of a group that has committed nothing: its assigned partitions, with no
//! committed offset and the lag from the log start (where such a group resumes).

use sluice_core::model::TopicSpec;
use sluice_core::ManualClock;
use std::sync::Arc;

use crate::cases::support::groups::*;
use crate::Backend;

pub async fn given_a_member_that_committed_nothing_then_describe_lists_its_partitions_with_null_and_full_lag(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (crate::unique_topic("never"), crate::unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 3, retention_ms: None, retention_bytes: None }).await.unwrap();
    for p in 0..3 {
        publish(&log, &topic, p, (0..5).map(|i| (format!("{p}-{i}"), START_MS))).await;
    }
    let answer = groups.poll(&request(&group, None, &topic, 2)).await.expect("poll");
    assert_eq!(partitions(&answer), [0, 1, 2]);
    let d = groups.describe(&group).await.expect("describe");
    let seen: Vec<_> = d.partitions.iter().map(|p| (p.partition, p.committed, p.lag, p.owner.is_some())).collect();
    assert_eq!(seen, [(0, None, 5, true), (1, None, 5, true), (2, None, 5, true)], "{d:?}");
}

pub async fn given_the_last_member_left_then_describe_still_lists_every_partition_of_its_topic(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group, idle) = (crate::unique_topic("left"), crate::unique_topic("g"), crate::unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 3, retention_ms: None, retention_bytes: None }).await.unwrap();
    for p in 0..3 {
        publish(&log, &topic, p, (0..5).map(|i| (format!("{p}-{i}"), START_MS))).await;
    }
    // One group commits a partition before leaving, the other commits nothing.
    let answer = groups.poll(&request(&group, None, &topic, 2)).await.expect("poll");
    groups.commit(&group, &answer.member_id, answer.generation, &[commit_of(&topic, 0, 2)]).await.expect("commit");
    groups.leave(&group, &answer.member_id).await.expect("leave");
    let other = groups.poll(&request(&idle, None, &topic, 2)).await.expect("poll");
    groups.leave(&idle, &other.member_id).await.expect("leave");

    let d = groups.describe(&group).await.expect("describe");
    let seen: Vec<_> =
        d.partitions.iter().map(|p| (p.partition, p.committed, p.high_watermark, p.lag, p.owner.clone())).collect();
    assert_eq!(seen, [(0, Some(2), 5, 3, None), (1, None, 5, 5, None), (2, None, 5, 5, None)], "{d:?}");
    let d = groups.describe(&idle).await.expect("describe");
    let seen: Vec<_> =
        d.partitions.iter().map(|p| (p.partition, p.committed, p.high_watermark, p.lag, p.owner.clone())).collect();
    assert_eq!(seen, [(0, None, 5, 5, None), (1, None, 5, 5, None), (2, None, 5, 5, None)], "{d:?}");
}

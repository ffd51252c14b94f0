//! Independent groups, seeks by timestamp, lag and the `none` reset policy.

use sluice_core::Code;
use std::collections::BTreeSet;
use std::sync::Arc;

use sluice_core::groups::{ResetPolicy, SeekTarget};
use sluice_core::{Error, ManualClock, TopicSpec};

use crate::cases::support::groups::*;
use crate::{unique_topic, Backend};

pub async fn given_two_groups_then_independent_and_a_late_group_replays_everything_from_earliest(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let topic = unique_topic("replay");
    log.create_topic(&topic, TopicSpec { partitions: 4, retention_ms: None, retention_bytes: None }).await.unwrap();
    const TOTAL: usize = 10_000;
    for batch in 0..(TOTAL / 1000) {
        for p in 0..4u32 {
            publish(&log, &topic, p, (0..250).map(|i| (format!("b{batch}-p{p}-{i}"), START_MS))).await;
        }
    }
    let consume_all = |group: String| {
        let groups = groups.clone();
        let topic = topic.clone();
        async move {
            let mut seen = BTreeSet::new();
            let mut member = None;
            for _ in 0..100 {
                let mut req = request(&group, member.as_deref(), &topic, 2_000);
                req.auto_commit = true;
                let answer = groups.poll(&req).await.unwrap();
                member = Some(answer.member_id.clone());
                for e in &answer.events {
                    assert!(seen.insert((e.event.partition, e.event.offset)), "no repeats within one member");
                }
                if seen.len() == TOTAL {
                    break;
                }
            }
            seen.len()
        }
    };
    let first = unique_topic("g1");
    assert_eq!(consume_all(first.clone()).await, TOTAL);
    let late = unique_topic("g2");
    assert_eq!(consume_all(late.clone()).await, TOTAL, "a group created after 10,000 events replays them all");
    let d1 = groups.describe(&first).await.unwrap();
    let d2 = groups.describe(&late).await.unwrap();
    assert!(d1.partitions.iter().all(|p| p.high_watermark == 2_500));
    assert_ne!(d1.members[0].member_id, d2.members[0].member_id, "independent memberships");
}

pub async fn given_seek_by_timestamp_then_first_event_at_or_after_and_lag_is_watermark_minus_committed(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("seek"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..10).map(|i| (format!("e{i}"), 1_000 + 10 * i))).await;
    let answer = poll(&groups, &group, None, &topic).await;
    assert_eq!(answer.events.len(), 10);
    groups.commit(&group, &answer.member_id, answer.generation, &[commit_of(&topic, 0, 7)]).await.unwrap();
    let d = groups.describe(&group).await.unwrap();
    assert_eq!((d.partitions[0].committed, d.partitions[0].high_watermark, d.partitions[0].lag), (Some(7), 10, 3));

    // 1,041 falls between the events stamped 1,040 (offset 4) and 1,050 (offset 5).
    let past_end = groups.commit(&group, &answer.member_id, answer.generation, &[commit_of(&topic, 0, 11)]).await;
    assert!(matches!(past_end, Err(Error::OffsetOutOfRange { high_watermark: 10, .. })), "{past_end:?}");
    let moved = groups.seek(&group, &topic, None, SeekTarget::Timestamp(1_041)).await.unwrap();
    assert_eq!(moved, vec![(0, 5)]);
    let undo = groups.commit(&group, &answer.member_id, answer.generation, &[commit_of(&topic, 0, 10)]).await;
    assert!(
        matches!(undo, Err(Error::Conflict { code: Code::StaleGeneration, .. })),
        "progress from before a seek cannot undo it: {undo:?}"
    );
    let d = groups.describe(&group).await.unwrap();
    assert_eq!((d.partitions[0].committed, d.partitions[0].lag), (Some(5), 5), "seek may move backwards");
    let after = poll(&groups, &group, Some(&answer.member_id), &topic).await;
    let offsets: Vec<u64> = after.events.iter().map(|e| e.event.offset).collect();
    assert_eq!(offsets, (5..10).collect::<Vec<_>>(), "the member's next poll continues from the seek");
    groups.seek(&group, &topic, Some(&[0]), SeekTarget::Latest).await.unwrap();
    assert_eq!(groups.describe(&group).await.unwrap().partitions[0].lag, 0);
}

pub async fn given_reset_none_without_offsets_when_poll_then_refused_and_nothing_written(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("none"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    let mut req = request(&group, None, &topic, 10);
    req.reset = ResetPolicy::None;
    let refused = groups.poll(&req).await;
    assert!(matches!(refused, Err(Error::Invalid { code: Code::NoCommittedOffset, .. })), "{refused:?}");
    assert!(!groups.list().await.unwrap().contains(&group), "not even a join");
    assert!(matches!(groups.describe(&group).await, Err(Error::GroupNotFound(_))));
}

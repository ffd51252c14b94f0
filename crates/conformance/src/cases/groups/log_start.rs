//! A group positioned below a log start that retention moved: each reset policy.

use std::sync::Arc;

use sluice_core::groups::{Groups, PollAnswer, PollRequest, ResetPolicy, SeekTarget};
use sluice_core::{Error, Log, ManualClock, TopicSpec};

use crate::cases::support::groups::*;
use crate::{unique_topic, Backend};

/// A topic of one partition holding offsets 0..10; group `member` has fetched 0..3 (its
/// position is 3) and committed 2; group `committed` has committed 2 and has no member. Then
/// retention moves the log start to 6. Answers the log, groups, topic and the two groups.
async fn below_the_log_start(backend: &dyn Backend) -> (Log, Groups, String, (String, PollAnswer), String) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, member_group, committed_group) = (unique_topic("retained"), unique_topic("g"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..10).map(|i| (format!("e{i}"), START_MS))).await;
    let member = groups.poll(&request(&member_group, None, &topic, 3)).await.unwrap();
    assert_eq!(offsets_of(&member), vec![0, 1, 2]);
    groups.commit(&member_group, &member.member_id, member.generation, &[commit_of(&topic, 0, 2)]).await.unwrap();
    let other = groups.poll(&request(&committed_group, None, &topic, 2)).await.unwrap();
    groups.commit(&committed_group, &other.member_id, other.generation, &[commit_of(&topic, 0, 2)]).await.unwrap();
    groups.leave(&committed_group, &other.member_id).await.unwrap();

    let topic_id = log.describe_topic(&topic).await.unwrap().0.id;
    advance_log_start(log.store().as_ref(), topic_id, 0, 6).await;
    let d = groups.describe(&member_group).await.unwrap();
    assert_eq!((d.partitions[0].log_start_offset, d.partitions[0].committed), (6, Some(2)));
    assert_eq!(d.partitions[0].lag, 4, "lag counts from the log start when the committed offset is below it");
    (log, groups, topic, (member_group, member), committed_group)
}

fn with_reset(mut req: PollRequest, reset: ResetPolicy) -> PollRequest {
    req.reset = reset;
    req
}

pub async fn given_a_group_positioned_below_the_new_log_start_then_earliest_resumes_at_the_start(
    backend: &dyn Backend,
) {
    let (_, groups, topic, (group, member), committed_group) = below_the_log_start(backend).await;
    let req = with_reset(request(&group, Some(&member.member_id), &topic, 100), ResetPolicy::Earliest);
    let next = groups.poll(&req).await.unwrap();
    assert_eq!(offsets_of(&next), vec![6, 7, 8, 9], "a member that keeps polling continues from the new log start");
    let rejoin = groups.poll(&with_reset(request(&committed_group, None, &topic, 100), ResetPolicy::Earliest)).await;
    assert_eq!(offsets_of(&rejoin.unwrap()), vec![6, 7, 8, 9], "a committed offset below the start: from the start");
}

pub async fn given_a_group_positioned_below_the_new_log_start_then_latest_jumps_to_the_end(backend: &dyn Backend) {
    let (log, groups, topic, (group, member), committed_group) = below_the_log_start(backend).await;
    let req = with_reset(request(&group, Some(&member.member_id), &topic, 100), ResetPolicy::Latest);
    assert!(groups.poll(&req).await.unwrap().events.is_empty(), "a member below the start jumps to the end");
    let joining = with_reset(request(&committed_group, None, &topic, 100), ResetPolicy::Latest);
    let joined = groups.poll(&joining).await.unwrap();
    assert!(joined.events.is_empty(), "so does a committed offset below the start");
    publish(&log, &topic, 0, (10..12).map(|i| (format!("e{i}"), START_MS))).await;
    assert_eq!(offsets_of(&groups.poll(&req).await.unwrap()), vec![10, 11], "and continues from there");
    let again = with_reset(request(&committed_group, Some(&joined.member_id), &topic, 100), ResetPolicy::Latest);
    assert_eq!(offsets_of(&groups.poll(&again).await.unwrap()), vec![10, 11]);
}

pub async fn given_a_group_positioned_below_the_new_log_start_then_none_refuses_with_offset_out_of_range(
    backend: &dyn Backend,
) {
    let (_, groups, topic, (group, member), committed_group) = below_the_log_start(backend).await;
    let req = with_reset(request(&group, Some(&member.member_id), &topic, 100), ResetPolicy::None);
    for _ in 0..2 {
        let refused = groups.poll(&req).await;
        assert!(
            matches!(refused, Err(Error::OffsetOutOfRange { offset: 3, log_start_offset: 6, high_watermark: 10 })),
            "the member's position is below the start: {refused:?}"
        );
    }
    let joining = with_reset(request(&committed_group, None, &topic, 100), ResetPolicy::None);
    let refused = groups.poll(&joining).await;
    assert!(
        matches!(refused, Err(Error::OffsetOutOfRange { offset: 2, log_start_offset: 6, high_watermark: 10 })),
        "the committed offset is below the start: {refused:?}"
    );
    let d = groups.describe(&committed_group).await.unwrap();
    assert!(d.members.is_empty(), "a refused join writes nothing: {:?}", d.members);
    assert_eq!(d.partitions[0].committed, Some(2), "nor moves the offset");
    // The application decides: a seek to the start, and polls with `none` go on from there.
    groups.seek(&group, &topic, None, SeekTarget::Earliest).await.unwrap();
    assert_eq!(offsets_of(&groups.poll(&req).await.unwrap()), vec![6, 7, 8, 9]);
}

//! Consumer group conformance cases, on every backend, with a [`ManualClock`]:
//! session timeouts pass by advancing it, never by sleeping.

use sluice_core::Code;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::groups::{
    CommitOffset, Groups, GroupsConfig, PollAnswer, PollRequest, ResetPolicy, SeekTarget, DEFAULT_OFFSETS_RETENTION_MS,
};
use sluice_core::layout::{self, HeadRecord};
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{Clock, Error, Log, ManualClock, NewEvent, StorageError, TopicSpec};

pub use crate::group_fault_cases::*;
use crate::{unique_topic, Backend};

/// Generates one `#[tokio::test]` per group case; `$backend` is an async expression yielding a [`Backend`].
#[macro_export]
macro_rules! group_conformance_suite {
    ($backend:expr) => {
        $crate::group_conformance_suite!(@cases $backend;
            given_three_members_on_six_partitions_then_two_each_and_leave_and_eviction_rebalance,
            given_evicted_member_when_commit_then_refused_and_unowned_partition_refused,
            given_member_killed_between_poll_and_commit_then_new_owner_gets_its_events,
            given_two_groups_then_independent_and_a_late_group_replays_everything_from_earliest,
            given_seek_by_timestamp_then_first_event_at_or_after_and_lag_is_watermark_minus_committed,
            given_reset_none_without_offsets_when_poll_then_refused_and_nothing_written,
            given_long_polling_member_when_event_published_then_poll_returns_it_without_waiting_out,
            given_member_owning_120_partitions_when_auto_commit_then_every_partition_commits,
            given_session_ending_during_a_long_poll_then_unknown_member_and_not_brought_back,
            given_partition_back_at_its_old_owner_then_it_resumes_from_the_commit_not_its_old_position,
            given_a_group_positioned_below_the_new_log_start_then_earliest_resumes_at_the_start,
            given_a_group_positioned_below_the_new_log_start_then_latest_jumps_to_the_end,
            given_a_group_positioned_below_the_new_log_start_then_none_refuses_with_offset_out_of_range,
            given_groups_whose_last_member_left_then_offsets_expire_after_the_retention_and_not_before,
            given_a_group_with_a_live_member_then_its_offsets_never_expire_and_after_it_leaves_they_do,
            given_a_poll_answer_lost_when_retried_with_positions_then_same_events_and_commit_stays,
            given_a_heartbeat_applied_but_unanswered_then_the_poll_still_answers_its_events,
            given_a_heartbeat_refused_then_the_poll_answers_and_the_next_one_delivers_again,
            given_auto_commit_with_events_ready_then_one_write_commits_and_heartbeats,
            given_auto_commit_and_nothing_new_then_it_commits_before_the_long_poll_waits,
            given_a_rebalance_before_a_riding_auto_commit_then_the_commit_is_dropped_and_the_poll_answers,
            given_a_member_joining_and_committing_while_its_group_is_deleted_then_its_commit_stays,
            given_a_wide_group_deleted_while_a_member_commits_then_that_commit_stays,
            given_a_group_over_three_topics_of_1024_partitions_then_it_rebalances_and_commits,
            given_a_static_join_answer_lost_when_retried_then_the_same_member_and_no_ghost,
            given_a_member_silent_for_exactly_its_session_then_evicted_and_not_a_millisecond_before,
            given_members_joining_and_leaving_then_the_assignment_is_sticky,
            given_a_group_with_a_live_member_then_delete_refused_and_once_it_left_deleted_with_its_offsets,
            given_segments_of_very_different_sizes_then_polls_of_any_size_deliver_every_offset_once_in_order,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn given_members_joining_and_leaving_while_publishers_write_then_every_acked_event_delivered() {
            let backend = $backend.await;
            $crate::group_cases::given_members_joining_and_leaving_while_publishers_write_then_every_acked_event_delivered(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::group_cases::$case(&backend).await;
            }
        )+
    };
}

pub(crate) const START_MS: i64 = 1_800_000_000_000;

/// A log and its groups on `backend`, reading time from `clock`.
pub(crate) async fn groups_on(backend: &dyn Backend, clock: &Arc<ManualClock>) -> (Log, Groups) {
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(store, objects, clock.clone(), crate::log_config());
    (log.clone(), Groups::new(log))
}

pub(crate) fn request(group: &str, member: Option<&str>, topic: &str, max_events: usize) -> PollRequest {
    PollRequest {
        group: group.to_owned(),
        member_id: member.map(str::to_owned),
        topics: vec![topic.to_owned()],
        max_events,
        max_bytes: 6 << 20,
        wait_ms: 0,
        reset: ResetPolicy::Earliest,
        session_timeout_ms: None,
        auto_commit: false,
        positions: None,
        instance_id: None,
    }
}

pub(crate) async fn poll(groups: &Groups, group: &str, member: Option<&str>, topic: &str) -> PollAnswer {
    groups.poll(&request(group, member, topic, 1000)).await.expect("poll")
}

fn partitions(answer: &PollAnswer) -> Vec<u32> {
    answer.assignment.iter().map(|tp| tp.partition).collect()
}

pub(crate) async fn publish(log: &Log, topic: &str, partition: u32, values: impl IntoIterator<Item = (String, i64)>) {
    let events = values
        .into_iter()
        .map(|(v, ts)| NewEvent {
            key: None,
            headers: Vec::new(),
            value: Bytes::from(v),
            value_is_json: false,
            timestamp_ms: Some(ts),
            partition: Some(partition),
        })
        .collect();
    log.publish(topic, events, None).await.expect("publish");
}

pub(crate) fn commit_of(topic: &str, partition: u32, offset: u64) -> CommitOffset {
    CommitOffset { topic: topic.to_owned(), partition, offset, metadata: None }
}

pub(crate) async fn committed(groups: &Groups, group: &str, partition: u32) -> Option<u64> {
    let d = groups.describe(group).await.expect("describe");
    d.partitions.iter().find(|p| p.partition == partition).and_then(|p| p.committed)
}

pub async fn given_three_members_on_six_partitions_then_two_each_and_leave_and_eviction_rebalance(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("six"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 6, retention_ms: None, retention_bytes: None }).await.unwrap();
    let a = poll(&groups, &group, None, &topic).await.member_id;
    let b = poll(&groups, &group, None, &topic).await.member_id;
    let c = poll(&groups, &group, None, &topic).await.member_id;
    let answers = [
        poll(&groups, &group, Some(&a), &topic).await,
        poll(&groups, &group, Some(&b), &topic).await,
        poll(&groups, &group, Some(&c), &topic).await,
    ];
    let all: Vec<u32> = answers.iter().flat_map(partitions).collect();
    assert!(answers.iter().all(|x| x.assignment.len() == 2), "two each: {answers:?}");
    assert_eq!(all.iter().copied().collect::<BTreeSet<_>>(), (0..6).collect(), "disjoint and complete");
    assert!(answers.iter().all(|x| x.generation == answers[0].generation));

    groups.leave(&group, &c).await.unwrap();
    let (pa, pb) = (poll(&groups, &group, Some(&a), &topic).await, poll(&groups, &group, Some(&b), &topic).await);
    assert_eq!((pa.assignment.len(), pb.assignment.len()), (3, 3), "{pa:?} {pb:?}");
    assert!(pa.generation > answers[0].generation, "every change bumps the generation");
    let rejoin = groups.poll(&request(&group, Some(&c), &topic, 10)).await;
    assert!(matches!(rejoin, Err(Error::Conflict { code: Code::UnknownMember, .. })), "{rejoin:?}");

    // b goes silent; a keeps polling. After b's session timeout (45 s) a holds everything.
    clock.advance(30_000);
    assert_eq!(poll(&groups, &group, Some(&a), &topic).await.assignment.len(), 3, "b is still within its session");
    clock.advance(15_001);
    let alone = poll(&groups, &group, Some(&a), &topic).await;
    assert_eq!(partitions(&alone), (0..6).collect::<Vec<_>>(), "b's partitions moved to a");
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.generation, alone.generation);
}

pub async fn given_evicted_member_when_commit_then_refused_and_unowned_partition_refused(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("fence"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..5).map(|i| (format!("e{i}"), START_MS))).await;
    publish(&log, &topic, 1, (0..5).map(|i| (format!("e{i}"), START_MS))).await;
    let a = poll(&groups, &group, None, &topic).await.member_id;
    let b = poll(&groups, &group, None, &topic).await.member_id;
    let pa = poll(&groups, &group, Some(&a), &topic).await;
    let pb = poll(&groups, &group, Some(&b), &topic).await;
    let (a_part, b_part) = (pa.assignment[0].partition, pb.assignment[0].partition);
    assert_ne!(a_part, b_part);

    let not_mine = groups.commit(&group, &a, pa.generation, &[commit_of(&topic, b_part, 3)]).await;
    assert!(matches!(not_mine, Err(Error::Conflict { code: Code::NotAssigned, .. })), "{not_mine:?}");
    let stale = groups.commit(&group, &a, pa.generation - 1, &[commit_of(&topic, a_part, 3)]).await;
    assert!(matches!(stale, Err(Error::Conflict { code: Code::StaleGeneration, .. })), "{stale:?}");
    assert_eq!(committed(&groups, &group, b_part).await, None, "a refused commit moves nothing");

    // b goes silent while a keeps polling; b's session ends, nobody has rebalanced yet,
    // and its commit is refused all the same.
    clock.advance(30_000);
    let heartbeat = poll(&groups, &group, Some(&a), &topic).await;
    assert_eq!(heartbeat.generation, pa.generation, "a heartbeat alone changes nothing");
    clock.advance(15_001);
    let zombie = groups.commit(&group, &b, pb.generation, &[commit_of(&topic, b_part, 4)]).await;
    assert!(matches!(zombie, Err(Error::Conflict { code: Code::UnknownMember, .. })), "{zombie:?}");
    let a_again = poll(&groups, &group, Some(&a), &topic).await;
    assert_eq!(a_again.assignment.len(), 2);
    let zombie = groups.commit(&group, &b, pb.generation, &[commit_of(&topic, b_part, 4)]).await;
    assert!(matches!(zombie, Err(Error::Conflict { .. })), "{zombie:?}");
    assert_eq!(committed(&groups, &group, b_part).await, None, "no offset moved");

    groups.commit(&group, &a, a_again.generation, &[commit_of(&topic, b_part, 4)]).await.unwrap();
    groups.commit(&group, &a, a_again.generation, &[commit_of(&topic, b_part, 2)]).await.unwrap();
    assert_eq!(committed(&groups, &group, b_part).await, Some(4), "committed offsets never go backwards");
}

pub async fn given_member_killed_between_poll_and_commit_then_new_owner_gets_its_events(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("killed"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..10).map(|i| (format!("e{i}"), START_MS))).await;

    let first = groups.poll(&request(&group, None, &topic, 4)).await.unwrap();
    let offsets: Vec<u64> = first.events.iter().map(|e| e.event.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3]);
    groups.commit(&group, &first.member_id, first.generation, &[commit_of(&topic, 0, 4)]).await.unwrap();
    let second = groups.poll(&request(&group, Some(&first.member_id), &topic, 4)).await.unwrap();
    let offsets: Vec<u64> = second.events.iter().map(|e| e.event.offset).collect();
    assert_eq!(offsets, vec![4, 5, 6, 7], "successive polls continue without repeats");
    // …and the member dies before committing them.

    let other = poll(&groups, &group, None, &topic).await;
    assert!(other.events.is_empty(), "the partition is still the first member's");
    clock.advance(30_000);
    let waiting = poll(&groups, &group, Some(&other.member_id), &topic).await;
    assert!(waiting.events.is_empty(), "still within the first member's session");
    clock.advance(15_001);
    let taken = groups.poll(&request(&group, Some(&other.member_id), &topic, 100)).await.unwrap();
    assert_eq!(partitions(&taken), vec![0]);
    let offsets: Vec<u64> = taken.events.iter().map(|e| e.event.offset).collect();
    assert_eq!(offsets, (4..10).collect::<Vec<_>>(), "resumes at the committed offset: nothing skipped");
}

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

pub async fn given_long_polling_member_when_event_published_then_poll_returns_it_without_waiting_out(
    backend: &dyn Backend,
) {
    // A clock that never moves and tells when the poll starts waiting on it.
    let clock = Arc::new(crate::queue_cases::WatchedClock::new(START_MS));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(store, objects, clock.clone(), crate::log_config());
    let groups = Groups::new(log.clone());
    let (topic, group) = (unique_topic("wait"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None }).await.unwrap();
    let member = poll(&groups, &group, None, &topic).await.member_id;
    let mut req = request(&group, Some(&member), &topic, 10);
    req.wait_ms = 20_000;
    let before = clock.sleeps();
    let waiting = tokio::spawn({
        let groups = groups.clone();
        async move { groups.poll(&req).await }
    });
    // The poll found nothing and waits (its heads read, its nap begun): the fake clock never
    // moves, so only the publish's wake-up can end the wait.
    clock.slept_more_than(before).await;
    assert!(!waiting.is_finished(), "nothing published: the poll waits");
    publish(&log, &topic, 1, [("hello".to_owned(), START_MS)]).await;
    let answer = tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
        .await
        .expect("the publish woke the long poll")
        .unwrap()
        .unwrap();
    assert_eq!(answer.events.len(), 1);
    assert_eq!((answer.events[0].event.partition, answer.events[0].event.offset), (1, 0));
}

pub async fn given_member_owning_120_partitions_when_auto_commit_then_every_partition_commits(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("wide"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 120, retention_ms: None, retention_bytes: None }).await.unwrap();
    let events: Vec<NewEvent> = (0..120u32)
        .map(|p| NewEvent {
            key: None,
            headers: Vec::new(),
            value: Bytes::from(format!("e{p}")),
            value_is_json: false,
            timestamp_ms: None,
            partition: Some(p),
        })
        .collect();
    log.publish(&topic, events, None).await.unwrap();
    let mut req = request(&group, None, &topic, 1000);
    req.auto_commit = true;
    let first = groups.poll(&req).await.unwrap();
    assert_eq!(first.events.len(), 120);
    req.member_id = Some(first.member_id);
    let second = groups.poll(&req).await.unwrap();
    assert!(second.events.is_empty());
    let d = groups.describe(&group).await.unwrap();
    assert!(d.partitions.iter().all(|p| p.committed == Some(1)), "more offsets than one write holds, all committed");
    assert_eq!(d.partitions.iter().map(|p| p.lag).sum::<u64>(), 0);
}

pub async fn given_session_ending_during_a_long_poll_then_unknown_member_and_not_brought_back(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("late"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    let mut req = request(&group, None, &topic, 10);
    req.session_timeout_ms = Some(6_000);
    let member = groups.poll(&req).await.unwrap().member_id;
    req.member_id = Some(member.clone());
    req.wait_ms = 3_000;
    let waiting = tokio::spawn({
        let groups = groups.clone();
        async move { groups.poll(&req).await }
    });
    tokio::task::yield_now().await;
    clock.advance(6_001);
    let late = tokio::time::timeout(std::time::Duration::from_secs(30), waiting).await.expect("poll ended").unwrap();
    assert!(matches!(late, Err(Error::Conflict { code: Code::UnknownMember, .. })), "{late:?}");
    let d = groups.describe(&group).await.unwrap();
    assert!(d.members.is_empty(), "a late heartbeat does not bring an evicted member back: {:?}", d.members);
}

pub async fn given_partition_back_at_its_old_owner_then_it_resumes_from_the_commit_not_its_old_position(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("back"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None }).await.unwrap();
    for p in 0..2 {
        publish(&log, &topic, p, (0..4).map(|i| (format!("p{p}-{i}"), START_MS))).await;
    }
    // a alone reads both partitions to the end, committing nothing.
    let a = poll(&groups, &group, None, &topic).await;
    assert_eq!(a.events.len(), 8);
    // b joins and takes one of them; it fetches that partition from the committed offset (none: 0)…
    let b = poll(&groups, &group, None, &topic).await;
    assert_eq!(b.assignment.len(), 1);
    let moved = b.assignment[0].partition;
    let fetched: Vec<u64> = b.events.iter().map(|e| e.event.offset).collect();
    assert_eq!(fetched, vec![0, 1, 2, 3]);
    // …and leaves without committing. The partition returns to a, whose old position is 4.
    groups.leave(&group, &b.member_id).await.unwrap();
    let back = poll(&groups, &group, Some(&a.member_id), &topic).await;
    let again: Vec<(u32, u64)> = back.events.iter().map(|e| (e.event.partition, e.event.offset)).collect();
    assert_eq!(again, (0..4).map(|o| (moved, o)).collect::<Vec<_>>(), "what b fetched but never committed comes back");
}

/// Publishers and members at once; members join and leave. Checks at-least-once
/// delivery of every acknowledged event and monotonic committed offsets.
pub async fn given_members_joining_and_leaving_while_publishers_write_then_every_acked_event_delivered(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("busy"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 4, retention_ms: None, retention_bytes: None }).await.unwrap();
    const PUBLISHERS: usize = 4;
    const EACH: usize = 60;
    let mut publishers = Vec::new();
    for p in 0..PUBLISHERS {
        let log = log.clone();
        let topic = topic.clone();
        publishers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..EACH {
                let event = NewEvent {
                    key: Some(Bytes::from(format!("k{p}-{i}"))),
                    headers: Vec::new(),
                    value: Bytes::from(format!("p{p}-{i}")),
                    value_is_json: false,
                    timestamp_ms: None,
                    partition: None,
                };
                let at = log.publish(&topic, vec![event], None).await.expect("publish");
                acked.push((at[0].partition, at[0].offset));
            }
            acked
        }));
    }
    let delivered = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    // Held across the describe, so the sequences are in the order the offsets were observed.
    let commits = Arc::new(tokio::sync::Mutex::new(BTreeMap::<u32, Vec<u64>>::new()));
    let mut members = Vec::new();
    for m in 0..4usize {
        let (groups, topic, group) = (groups.clone(), topic.clone(), group.clone());
        let (delivered, commits) = (delivered.clone(), commits.clone());
        members.push(tokio::spawn(async move {
            let mut member: Option<String> = None;
            for round in 0..400usize {
                // Members 2 and 3 leave now and then, and come back as new members.
                if m >= 2 && round % 25 == 24 {
                    if let Some(id) = member.take() {
                        groups.leave(&group, &id).await.expect("leave");
                    }
                    continue;
                }
                let answer = match groups.poll(&request(&group, member.as_deref(), &topic, 50)).await {
                    Ok(a) => a,
                    Err(Error::Conflict { code: Code::UnknownMember, .. }) => {
                        member = None;
                        continue;
                    }
                    Err(e) => panic!("poll: {e:?}"),
                };
                member = Some(answer.member_id.clone());
                let mut next: BTreeMap<u32, u64> = BTreeMap::new();
                for e in &answer.events {
                    delivered.lock().unwrap().insert((e.event.partition, e.event.offset));
                    next.insert(e.event.partition, e.event.offset + 1);
                }
                let offsets: Vec<CommitOffset> = next.iter().map(|(&p, &o)| commit_of(&topic, p, o)).collect();
                if offsets.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                match groups.commit(&group, &answer.member_id, answer.generation, &offsets).await {
                    Ok(()) => {
                        let mut c = commits.lock().await;
                        let d = groups.describe(&group).await.expect("describe");
                        for p in &d.partitions {
                            c.entry(p.partition).or_default().push(p.committed.unwrap_or(0));
                        }
                    }
                    Err(Error::Conflict { .. }) => {} // fenced by a rebalance: the new owner redelivers
                    Err(e) => panic!("commit: {e:?}"),
                }
            }
            // The clock is frozen, so a member that stopped polling would stay alive and keep
            // its partitions from the final drain below: members leave when they are done.
            if let Some(id) = member {
                groups.leave(&group, &id).await.expect("leave");
            }
        }));
    }
    let mut acked = BTreeSet::new();
    for p in publishers {
        acked.extend(p.await.unwrap());
    }
    for m in members {
        m.await.unwrap();
    }
    // A final member drains what is left from the committed offsets.
    let mut last = poll(&groups, &group, None, &topic).await;
    for _ in 0..50 {
        delivered.lock().unwrap().extend(last.events.iter().map(|e| (e.event.partition, e.event.offset)));
        let next: BTreeMap<u32, u64> = last.events.iter().map(|e| (e.event.partition, e.event.offset + 1)).collect();
        if next.is_empty() && acked.is_subset(&delivered.lock().unwrap()) {
            break;
        }
        let offsets: Vec<CommitOffset> = next.iter().map(|(&p, &o)| commit_of(&topic, p, o)).collect();
        let _ = groups.commit(&group, &last.member_id, last.generation, &offsets).await;
        last = poll(&groups, &group, Some(&last.member_id), &topic).await;
    }
    assert_eq!(acked.len(), PUBLISHERS * EACH);
    let delivered = delivered.lock().unwrap().clone();
    let missing: Vec<_> = acked.difference(&delivered).collect();
    assert!(missing.is_empty(), "acknowledged events never delivered: {missing:?}");
    for (p, seq) in commits.lock().await.iter() {
        assert!(seq.windows(2).all(|w| w[0] <= w[1]), "partition {p}: committed offsets went backwards: {seq:?}");
    }
}

/// Moves a partition's log start to `start`, as the janitor's first retention step does:
/// the head item rewritten with only `start` changed, conditional on the version read.
/// The index items and objects below it stay (the janitor removes them afterwards), so a
/// reader that still read below the start would get the events: the cases can tell.
pub async fn advance_log_start(store: &dyn StateStore, topic_id: u64, partition: u32, start: u64) {
    let key = layout::head_key(topic_id, partition);
    let item = store.get(&key).await.expect("read the head").expect("the partition has a head");
    let mut head: HeadRecord = layout::decode("head", &item.value).expect("decode the head");
    assert!(start <= head.next, "a log start past the high watermark {}", head.next);
    head.start = start;
    store.write(vec![WriteOp::replace(key, layout::encode(&head), Some(item.version))]).await.expect("write the head");
}

/// A state store seen through a prefix of its own on every collection: a case that runs
/// the janitor's offsets expiry (which scans one index for every group) on a table other
/// cases share sees only its own groups, and they never see its clock.
pub struct Namespaced {
    inner: Arc<dyn StateStore>,
    prefix: String,
}

impl Namespaced {
    pub fn new(inner: Arc<dyn StateStore>) -> Self {
        Self { inner, prefix: format!("{}/", unique_topic("ns")) }
    }

    fn wrap(&self, key: &Key) -> Key {
        Key::new(format!("{}{}", self.prefix, key.pk), key.sk.clone())
    }

    fn unwrap(&self, mut item: Item) -> Item {
        item.key.pk = item.key.pk.strip_prefix(&self.prefix).unwrap_or(&item.key.pk).to_owned();
        item
    }
}

#[async_trait]
impl StateStore for Namespaced {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        Ok(self.inner.get(&self.wrap(key)).await?.map(|i| self.unwrap(i)))
    }

    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        let query = Query { pk: format!("{}{}", self.prefix, query.pk), ..query.clone() };
        let page = self.inner.query(&query).await?;
        Ok(Page { items: page.items.into_iter().map(|i| self.unwrap(i)).collect(), next: page.next })
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let ops = ops
            .into_iter()
            .map(|op| match op {
                WriteOp::Put { key, value, expires_at_ms, expect } => {
                    WriteOp::Put { key: self.wrap(&key), value, expires_at_ms, expect }
                }
                WriteOp::Delete { key, expect } => WriteOp::Delete { key: self.wrap(&key), expect },
                WriteOp::Check { key, expect } => WriteOp::Check { key: self.wrap(&key), expect },
            })
            .collect();
        self.inner.write(ops).await
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        self.inner.delete_many(keys.iter().map(|k| self.wrap(k)).collect()).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        self.inner.purge_expired(limit).await
    }
}

/// A log and its groups on `backend` under a namespace of their own (see [`Namespaced`]).
async fn namespaced_groups_on(backend: &dyn Backend, clock: &Arc<ManualClock>, config: GroupsConfig) -> (Log, Groups) {
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(Arc::new(Namespaced::new(store)), objects, clock.clone(), crate::log_config());
    (log.clone(), Groups::with_config(log, config))
}

pub(crate) fn offsets_of(answer: &PollAnswer) -> Vec<u64> {
    answer.events.iter().map(|e| e.event.offset).collect()
}

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

/// A group of one member on `topic` that fetched everything, committed 3 and left.
async fn used_and_left(groups: &Groups, topic: &str) -> String {
    let group = unique_topic("g");
    let member = poll(groups, &group, None, topic).await;
    groups.commit(&group, &member.member_id, member.generation, &[commit_of(topic, 0, 3)]).await.unwrap();
    groups.leave(&group, &member.member_id).await.unwrap();
    group
}

pub async fn given_groups_whose_last_member_left_then_offsets_expire_after_the_retention_and_not_before(
    backend: &dyn Backend,
) {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    assert_eq!(DEFAULT_OFFSETS_RETENTION_MS, 7 * DAY_MS, "Kafka's default");
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = namespaced_groups_on(backend, &clock, GroupsConfig::default()).await;
    let topic = unique_topic("expiry");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..5).map(|i| (format!("e{i}"), START_MS))).await;
    assert_eq!(groups.expire_offsets(1000).await.unwrap(), 0, "nothing to expire");

    let early = used_and_left(&groups, &topic).await;
    clock.advance(2);
    let late = used_and_left(&groups, &topic).await;
    // A member that never leaves: its session (6 s) ends at START_MS + 2 + 6 s.
    let silent = unique_topic("g");
    let mut req = request(&silent, None, &topic, 10);
    req.session_timeout_ms = Some(6_000);
    let member = groups.poll(&req).await.unwrap();
    groups.commit(&silent, &member.member_id, member.generation, &[commit_of(&topic, 0, 3)]).await.unwrap();
    let d = groups.describe(&late).await.unwrap();
    assert_eq!(d.offsets_expire_at_ms, Some(START_MS + 2 + 7 * DAY_MS));
    assert_eq!(groups.describe(&silent).await.unwrap().offsets_expire_at_ms, None, "a live member: no expiry");

    // 7 days + 1 ms after `early` left, 7 days − 1 ms after `late` did.
    clock.advance(7 * DAY_MS - 1);
    assert!(groups.expire_offsets(1000).await.unwrap() > 0);
    assert!(matches!(groups.describe(&early).await, Err(Error::GroupNotFound(_))), "offsets and group gone");
    assert!(!groups.list().await.unwrap().contains(&early));
    assert_eq!(committed(&groups, &late, 0).await, Some(3), "7 days − 1 ms: kept");
    assert_eq!(committed(&groups, &silent, 0).await, Some(3), "its session ended 7 days − 6 s ago: kept");
    assert_eq!(groups.expire_offsets(1000).await.unwrap(), 0, "nothing more: one query");
    // A new member of the expired group starts as its reset policy says.
    let mut none = request(&early, None, &topic, 10);
    none.reset = ResetPolicy::None;
    let refused = groups.poll(&none).await;
    assert!(matches!(refused, Err(Error::Invalid { code: Code::NoCommittedOffset, .. })), "{refused:?}");
    let back = poll(&groups, &early, None, &topic).await;
    assert_eq!(offsets_of(&back), vec![0, 1, 2, 3, 4], "earliest: from the log start");
    groups.leave(&early, &back.member_id).await.unwrap();

    clock.advance(2);
    assert!(groups.expire_offsets(1000).await.unwrap() > 0);
    assert!(matches!(groups.describe(&late).await, Err(Error::GroupNotFound(_))), "7 days + 1 ms: gone");
    // A session that ended (rather than a leave) counts with up to an hour's slack.
    assert_eq!(committed(&groups, &silent, 0).await, Some(3), "just past 7 days after its session ended: kept");
    clock.advance(6_000 + 3600 * 1000);
    assert!(groups.expire_offsets(1000).await.unwrap() > 0);
    assert!(matches!(groups.describe(&silent).await, Err(Error::GroupNotFound(_))), "7 days and an hour: gone");
}

pub async fn given_a_group_with_a_live_member_then_its_offsets_never_expire_and_after_it_leaves_they_do(
    backend: &dyn Backend,
) {
    // A retention of one minute, and a member that polls every 30 s for ten minutes.
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = namespaced_groups_on(backend, &clock, GroupsConfig { offsets_retention_ms: 60_000 }).await;
    let (topic, group) = (unique_topic("alive"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..5).map(|i| (format!("e{i}"), START_MS))).await;
    let member = poll(&groups, &group, None, &topic).await;
    groups.commit(&group, &member.member_id, member.generation, &[commit_of(&topic, 0, 3)]).await.unwrap();
    for _ in 0..20 {
        clock.advance(30_000);
        poll(&groups, &group, Some(&member.member_id), &topic).await;
        assert_eq!(groups.expire_offsets(1000).await.unwrap(), 0);
        assert_eq!(committed(&groups, &group, 0).await, Some(3), "a commit ten times older than the retention");
    }
    groups.leave(&group, &member.member_id).await.unwrap();
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(d.offsets_expire_at_ms, Some(clock.now_ms() + 60_000), "a minute after the leave");
    clock.advance(59_999);
    assert_eq!(groups.expire_offsets(1000).await.unwrap(), 0, "a millisecond short of the retention: kept");
    assert_eq!(committed(&groups, &group, 0).await, Some(3));
    clock.advance(1);
    // A budget of one item per step: resumable, a step at a time.
    let mut steps = 0;
    while groups.expire_offsets(1).await.unwrap() > 0 {
        steps += 1;
        assert!(steps < 10, "bounded");
    }
    assert!(matches!(groups.describe(&group).await, Err(Error::GroupNotFound(_))), "after {steps} steps");
}

/// The default session is 45 s: a member silent for 44,999 ms is still in the group; at
/// 45,000 ms it is gone (its partitions go to the others) and its next poll is refused.
pub async fn given_a_member_silent_for_exactly_its_session_then_evicted_and_not_a_millisecond_before(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("session"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None }).await.unwrap();
    let a = poll(&groups, &group, None, &topic).await.member_id;
    clock.advance(1_000);
    let b = poll(&groups, &group, None, &topic).await.member_id;
    let a_at = groups.describe(&group).await.unwrap();
    let a_desc = a_at.members.iter().find(|m| m.member_id == a).expect("a is a member").clone();
    assert_eq!((a_desc.session_timeout_ms, a_desc.expires_at_ms), (45_000, START_MS + 45_000));
    clock.set(START_MS + 44_999);
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(d.members.len(), 2, "44,999 ms of silence: still a member");
    // b keeps polling; a stays silent.
    let b_poll = poll(&groups, &group, Some(&b), &topic).await;
    assert_eq!(b_poll.assignment.len(), 1, "a still holds its partition");
    clock.set(START_MS + 45_000);
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(
        d.members.iter().map(|m| m.member_id.as_str()).collect::<Vec<_>>(),
        vec![b.as_str()],
        "evicted at 45,000 ms"
    );
    let b_poll = poll(&groups, &group, Some(&b), &topic).await;
    assert_eq!(b_poll.assignment.len(), 2, "its partition went to b");
    let late = groups.poll(&request(&group, Some(&a), &topic, 10)).await;
    assert!(matches!(late, Err(Error::Conflict { code: Code::UnknownMember, .. })), "{late:?}");
}

/// Balanced and sticky: a member that joins takes only what balance needs, from the members
/// with the most; a member that leaves gives its partitions away and nobody else moves.
pub async fn given_members_joining_and_leaving_then_the_assignment_is_sticky(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("sticky"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 6, retention_ms: None, retention_bytes: None }).await.unwrap();
    let assignment = || {
        let (groups, group) = (groups.clone(), group.clone());
        async move {
            let d = groups.describe(&group).await.unwrap();
            d.members
                .into_iter()
                .map(|m| (m.member_id, m.assignment.iter().map(|tp| tp.partition).collect::<BTreeSet<u32>>()))
                .collect::<BTreeMap<String, BTreeSet<u32>>>()
        }
    };
    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(poll(&groups, &group, None, &topic).await.member_id);
    }
    let three = assignment().await;
    assert!(three.values().all(|p| p.len() == 2), "{three:?}");
    // A fourth joins: counts 2, 2, 1, 1; the others keep what they had up to their share.
    let d = poll(&groups, &group, None, &topic).await.member_id;
    let four = assignment().await;
    let mut sizes: Vec<usize> = four.values().map(BTreeSet::len).collect();
    sizes.sort();
    assert_eq!(sizes, vec![1, 1, 2, 2], "{four:?}");
    for m in &members {
        assert!(four[m].is_subset(&three[m]), "{m} kept only partitions it had: {three:?} -> {four:?}");
    }
    assert_eq!(four[&d].len(), 1, "the newcomer takes what balance needs: {four:?}");
    let moved: usize = members.iter().map(|m| three[m].len() - four[m].len()).sum();
    assert_eq!(moved, 1, "one partition moved: {three:?} -> {four:?}");
    // The first leaves: its partitions go to the others, who keep all of theirs.
    groups.leave(&group, &members[0]).await.unwrap();
    let left = assignment().await;
    assert_eq!(left.values().map(BTreeSet::len).sum::<usize>(), 6, "{left:?}");
    for (m, parts) in &left {
        assert!(parts.is_superset(&four[m]), "{m} lost a partition when another left: {four:?} -> {left:?}");
        assert_eq!(parts.len(), 2, "{left:?}");
    }
}

/// Deleting a group: refused with `group_not_empty` while a member lives (nothing changes);
/// once it left, the group, its offsets and its listing go, and a group created later under
/// the name starts afresh.
pub async fn given_a_group_with_a_live_member_then_delete_refused_and_once_it_left_deleted_with_its_offsets(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("deleted"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    publish(&log, &topic, 0, (0..4).map(|i| (format!("e{i}"), START_MS))).await;
    assert!(matches!(groups.delete(&group).await, Err(Error::GroupNotFound(_))), "no such group yet");
    let first = poll(&groups, &group, None, &topic).await;
    assert_eq!(first.events.len(), 4);
    groups.commit(&group, &first.member_id, first.generation, &[commit_of(&topic, 0, 3)]).await.unwrap();
    let refused = groups.delete(&group).await;
    assert!(matches!(refused, Err(Error::Conflict { code: Code::GroupNotEmpty, .. })), "{refused:?}");
    assert_eq!(committed(&groups, &group, 0).await, Some(3), "a refused delete changes nothing");
    assert_eq!(groups.describe(&group).await.unwrap().members.len(), 1);
    groups.leave(&group, &first.member_id).await.unwrap();
    groups.delete(&group).await.unwrap();
    assert!(matches!(groups.describe(&group).await, Err(Error::GroupNotFound(_))));
    assert!(!groups.list().await.unwrap().contains(&group), "no longer listed");
    assert!(matches!(groups.delete(&group).await, Err(Error::GroupNotFound(_))), "deleted once");
    // The name again: a new group, without the old commit (it reads from `earliest`).
    let again = poll(&groups, &group, None, &topic).await;
    assert_eq!(again.events.iter().map(|e| e.event.offset).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
}

/// A poll sizes its first index query by the segments it last read on the partition (a
/// guess): along a log whose segments go from 1 event to 200 and back, polls of any size
/// still deliver every offset once, in order, the guess short or long.
pub async fn given_segments_of_very_different_sizes_then_polls_of_any_size_deliver_every_offset_once_in_order(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("sizes"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    let sizes = [1, 100, 1, 1, 1, 50, 3, 200, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 40, 2, 1, 1, 30];
    let mut total = 0;
    for (segment, n) in sizes.iter().enumerate() {
        publish(&log, &topic, 0, (0..*n).map(|i| (format!("s{segment}-{i}"), START_MS))).await;
        total += n;
    }
    let mut delivered = Vec::new();
    let mut member = None;
    for max_events in [7, 100, 3, 250, 1, 20].into_iter().cycle().take(200) {
        let mut req = request(&group, member.as_deref(), &topic, max_events);
        req.auto_commit = true;
        let answer = groups.poll(&req).await.unwrap();
        member = Some(answer.member_id.clone());
        assert!(answer.events.len() <= max_events);
        delivered.extend(answer.events.iter().map(|e| e.event.offset));
        if delivered.len() >= total as usize {
            break;
        }
    }
    assert_eq!(delivered, (0..total).collect::<Vec<u64>>(), "every offset once, in order");
}

//! Members joining, leaving, evicted and killed between a poll and its commit.

use sluice_core::Code;
use std::collections::BTreeSet;
use std::sync::Arc;

use sluice_core::{Error, ManualClock, TopicSpec};

use crate::cases::support::groups::*;
use crate::{unique_topic, Backend};

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

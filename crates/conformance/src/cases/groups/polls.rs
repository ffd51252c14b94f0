//! Polls: long polls woken by a publish, auto commit, sessions ending mid-poll, and
//! polls of any size over segments of any size.

use sluice_core::Code;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::groups::Groups;
use sluice_core::{Error, Log, ManualClock, NewEvent, TopicSpec};

use crate::cases::support::clock::WatchedClock;
use crate::cases::support::groups::*;
use crate::{unique_topic, Backend};

pub async fn given_long_polling_member_when_event_published_then_poll_returns_it_without_waiting_out(
    backend: &dyn Backend,
) {
    // A clock that never moves and tells when the poll starts waiting on it.
    let clock = Arc::new(WatchedClock::new(START_MS));
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

/// A poll and a commit read a topic's heads at the id the process last saw it under, in the
/// batch that reads the topic: after the topic is re-created (a new id) they must read the new
/// incarnation's heads, not the old one's (2 events there, 5 here).
pub async fn given_a_topic_re_created_since_a_process_last_read_it_then_its_polls_and_commits_see_the_new_one(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    // Two processes on the same stores, both of which see only the first incarnation.
    let earlier = Groups::new(log.clone());
    let (topic, group) = (unique_topic("recreated"), unique_topic("g"));
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None };
    log.create_topic(&topic, spec).await.unwrap();
    publish(&log, &topic, 0, (0..2).map(|i| (format!("old{i}"), START_MS))).await;
    let old = poll(&earlier, &group, None, &topic).await;
    assert_eq!(old.events.len(), 2);
    earlier.commit(&group, &old.member_id, old.generation, &[commit_of(&topic, 0, 2)]).await.unwrap();
    let left = poll(&groups, &group, Some(&old.member_id), &topic).await;
    assert!(left.events.is_empty());

    log.delete_topic(&topic).await.unwrap();
    log.create_topic(&topic, spec).await.unwrap();
    publish(&log, &topic, 0, (0..5).map(|i| (format!("new{i}"), START_MS))).await;
    let new = earlier.poll(&request(&group, Some(&old.member_id), &topic, 1000)).await.unwrap();
    let values: Vec<&[u8]> = new.events.iter().map(|e| e.event.record.value.as_ref()).collect();
    assert_eq!(values, [&b"new0"[..], b"new1", b"new2", b"new3", b"new4"], "every event of the new incarnation");
    // `groups` still last saw the old incarnation: its commit of the new one's end is accepted.
    groups.commit(&group, &new.member_id, new.generation, &[commit_of(&topic, 0, 5)]).await.unwrap();
    assert_eq!(committed(&groups, &group, 0).await, Some(5));
}

//! Session timeouts to the millisecond, sticky assignment, and deleting a group.

use sluice_core::Code;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sluice_core::{Error, ManualClock, TopicSpec};

use crate::cases::support::groups::*;
use crate::{unique_topic, Backend};

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

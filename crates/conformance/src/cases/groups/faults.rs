//! Consumer group cases at the edges a retried request or a rival reaches: a poll whose
//! answer is lost, a heartbeat whose outcome is unknown, a member joining while its group
//! is deleted. Each names the promise it holds (at-least-once across retries; an accepted
//! commit is never erased).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::groups::{Groups, GroupsConfig, PollAnswer, PollRequest, TopicPartition};
use sluice_core::keys::OFFSETS_PREFIX;
use sluice_core::ports::state::{Query, StateStore, WriteOp};
use sluice_core::{Log, ManualClock, NewEvent, TopicSpec};
use sluice_testkit::Layered;

use super::expiry::Namespaced;
use crate::cases::support::clock::WatchedClock;
use crate::cases::support::faults::Fault;
use crate::cases::support::faults::{deletes, deletes_at, puts, Action, QueryAction, Scripted};
use crate::cases::support::groups::{commit_of, committed, groups_on, offsets_of, poll, publish, request, START_MS};
use crate::{unique_topic, Backend};

/// The log and groups of `backend` beside a second pair whose writes meet `script`.
async fn scripted_groups_on(
    backend: &dyn Backend,
    clock: &Arc<ManualClock>,
) -> (Log, Groups, Arc<Layered<Scripted>>, Groups) {
    let (log, groups) = groups_on(backend, clock).await;
    let (store, objects) = backend.open_with(clock.clone()).await;
    let script = Scripted::new(store);
    let scripted = Log::new(script.clone(), objects, clock.clone(), crate::log_config());
    (log, groups, script, Groups::new(scripted))
}

fn with_positions(mut req: PollRequest, topic: &str, positions: &[(u32, u64)]) -> PollRequest {
    let map: BTreeMap<TopicPartition, u64> = positions
        .iter()
        .map(|&(partition, offset)| (TopicPartition { topic: topic.to_owned(), partition }, offset))
        .collect();
    req.positions = Some(map);
    req
}

async fn one_partition_topic(log: &Log, prefix: &str) -> String {
    let topic = unique_topic(prefix);
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    topic
}

fn five(from: u64) -> impl Iterator<Item = (String, i64)> {
    (from..from + 5).map(|i| (format!("e{i}"), START_MS))
}

/// The contract's example: poll (0–4), the answer is lost, the client polls again with
/// its positions (p → 0) and auto-commit: it gets 0–4 again and the commit stays at 0.
pub async fn given_a_poll_answer_lost_when_retried_with_positions_then_same_events_and_commit_stays(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let topic = one_partition_topic(&log, "retried").await;
    let group = unique_topic("g");
    publish(&log, &topic, 0, five(0)).await;
    let lost = groups.poll(&request(&group, None, &topic, 5)).await.unwrap();
    assert_eq!(offsets_of(&lost), vec![0, 1, 2, 3, 4]);
    let member = lost.member_id.clone();

    let mut retry = with_positions(request(&group, Some(&member), &topic, 5), &topic, &[(0, 0)]);
    retry.auto_commit = true;
    let again = groups.poll(&retry).await.unwrap();
    assert_eq!(offsets_of(&again), vec![0, 1, 2, 3, 4], "the retried poll answers what the lost one held");
    assert_eq!(committed(&groups, &group, 0).await, Some(0), "auto-commit commits what the client confirms");

    // Confirming 0–4 commits 5 and moves on; a client sending no positions gets the server's record.
    let mut next = with_positions(request(&group, Some(&member), &topic, 5), &topic, &[(0, 5)]);
    next.auto_commit = true;
    publish(&log, &topic, 0, five(5)).await;
    assert_eq!(offsets_of(&groups.poll(&next).await.unwrap()), vec![5, 6, 7, 8, 9]);
    assert_eq!(committed(&groups, &group, 0).await, Some(5));
    assert!(poll(&groups, &group, Some(&member), &topic).await.events.is_empty(), "the server's record is at 10");

    // Positions the client held before a seek are ignored: the seek wins.
    let ahead = with_positions(request(&group, Some(&member), &topic, 5), &topic, &[(0, 7)]);
    groups.seek(&group, &topic, None, sluice_core::groups::SeekTarget::Offset(2)).await.unwrap();
    assert_eq!(offsets_of(&groups.poll(&ahead).await.unwrap()), vec![2, 3, 4, 5, 6], "a seek wins over positions");
}

/// The heartbeat that records a poll's positions is applied but its answer is lost: the poll
/// answers its events anyway, and a retry with positions gets them again.
pub async fn given_a_heartbeat_applied_but_unanswered_then_the_poll_still_answers_its_events(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, _, script, groups) = scripted_groups_on(backend, &clock).await;
    let topic = one_partition_topic(&log, "heartbeat").await;
    let group = unique_topic("g");
    let joined = groups.poll(&request(&group, None, &topic, 5)).await.unwrap();
    publish(&log, &topic, 0, five(0)).await;
    script.at(puts(sluice_core::keys::MEMBER_PREFIX), Action::Fault(Fault::LoseAnswer));
    let answered = groups.poll(&request(&group, Some(&joined.member_id), &topic, 5)).await;
    assert_eq!(script.pending(), 0, "the heartbeat met its fault");
    let answered = answered.expect("an unknown heartbeat outcome still answers the events");
    assert_eq!(offsets_of(&answered), vec![0, 1, 2, 3, 4]);
    let retry = with_positions(request(&group, Some(&joined.member_id), &topic, 5), &topic, &[(0, 0)]);
    assert_eq!(offsets_of(&groups.poll(&retry).await.unwrap()), vec![0, 1, 2, 3, 4]);
}

/// A heartbeat that fails before it applies: the poll answers, and the server's record still
/// says where the member was, so even a client without positions gets the events again.
pub async fn given_a_heartbeat_refused_then_the_poll_answers_and_the_next_one_delivers_again(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, _, script, groups) = scripted_groups_on(backend, &clock).await;
    let topic = one_partition_topic(&log, "refused").await;
    let group = unique_topic("g");
    let joined = groups.poll(&request(&group, None, &topic, 5)).await.unwrap();
    publish(&log, &topic, 0, five(0)).await;
    script.at(puts(sluice_core::keys::MEMBER_PREFIX), Action::Fault(Fault::FailBefore));
    let answered = groups.poll(&request(&group, Some(&joined.member_id), &topic, 5)).await.unwrap();
    assert_eq!(offsets_of(&answered), vec![0, 1, 2, 3, 4]);
    let again = groups.poll(&request(&group, Some(&joined.member_id), &topic, 5)).await.unwrap();
    assert_eq!(offsets_of(&again), vec![0, 1, 2, 3, 4], "a duplicate, never a gap");
}

/// A member joins and commits right after the delete removed the group's record: its
/// commit and the group's listing survive the rest of the delete.
pub async fn given_a_member_joining_and_committing_while_its_group_is_deleted_then_its_commit_stays(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, deleting) = scripted_groups_on(backend, &clock).await;
    let topic = one_partition_topic(&log, "deleted").await;
    let group = unique_topic("g");
    publish(&log, &topic, 0, five(0)).await;
    let old = poll(&groups, &group, None, &topic).await;
    groups.commit(&group, &old.member_id, old.generation, &[commit_of(&topic, 0, 3)]).await.unwrap();
    groups.leave(&group, &old.member_id).await.unwrap();

    let rival = {
        let (groups, group, topic) = (groups.clone(), group.clone(), topic.clone());
        Box::pin(async move {
            let new = poll(&groups, &group, None, &topic).await;
            groups.commit(&group, &new.member_id, new.generation, &[commit_of(&topic, 0, 5)]).await.unwrap();
        })
    };
    script.at(deletes("meta"), Action::After(rival));
    deleting.delete(&group).await.unwrap();
    assert_eq!(script.pending(), 0, "the rival ran");
    assert_eq!(committed(&groups, &group, 0).await, Some(5), "the new member's accepted commit stays");
    assert!(groups.list().await.unwrap().contains(&group), "the group the new member joined is listed");
}

/// The same race on a group whose offsets take more than one write to delete: an offset
/// the new member commits over is left alone, the rest go.
pub async fn given_a_wide_group_deleted_while_a_member_commits_then_that_commit_stays(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, deleting) = scripted_groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("wide-deleted"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 120, retention_ms: None, retention_bytes: None }).await.unwrap();
    let events: Vec<NewEvent> = (0..120u32)
        .flat_map(|p| (0..2).map(move |i| (p, i)))
        .map(|(p, i)| NewEvent {
            key: None,
            headers: Vec::new(),
            value: Bytes::from(format!("e{p}.{i}")),
            value_is_json: false,
            timestamp_ms: None,
            partition: Some(p),
        })
        .collect();
    log.publish(&topic, events, None).await.unwrap();
    let old = poll(&groups, &group, None, &topic).await;
    let all: Vec<_> = (0..120).map(|p| commit_of(&topic, p, 1)).collect();
    for chunk in all.chunks(90) {
        groups.commit(&group, &old.member_id, old.generation, chunk).await.unwrap();
    }
    groups.leave(&group, &old.member_id).await.unwrap();

    let rival = {
        let (groups, group, topic) = (groups.clone(), group.clone(), topic.clone());
        Box::pin(async move {
            let new = groups.poll(&request(&group, None, &topic, 1)).await.unwrap();
            groups.commit(&group, &new.member_id, new.generation, &[commit_of(&topic, 110, 2)]).await.unwrap();
        })
    };
    // The delete's first write (the one that removes the registry entry), then the rival.
    script.at(|ops: &[WriteOp]| deletes_at(ops, "groups", ""), Action::After(rival));
    deleting.delete(&group).await.unwrap();
    assert_eq!(script.pending(), 0, "the rival ran");
    let d = groups.describe(&group).await.unwrap();
    let kept: Vec<(u32, Option<u64>)> =
        d.partitions.iter().filter(|p| p.committed.is_some()).map(|p| (p.partition, p.committed)).collect();
    assert_eq!(kept, vec![(110, Some(2))], "only the rival's commit is left");
}

/// A member joining a wide group between the delete's first write and the deletes of the
/// offsets that did not fit in it: the group it joins is a new one, so it starts every
/// partition at its reset policy, never at an offset of the deleted group waiting to go.
pub async fn given_a_member_joining_between_a_wide_groups_delete_phases_then_no_old_offset_is_inherited(
    backend: &dyn Backend,
) {
    const PARTITIONS: u32 = 150;
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, deleting) = scripted_groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("wide-rejoined"), unique_topic("g"));
    committed_at_2_and_left(&log, &groups, &topic, &group, PARTITIONS).await;

    // The delete's later phase: a write of offset deletes alone, after the one that removed
    // the group's registry entry. The new member joins and polls just before it.
    let later_phase = |ops: &[WriteOp]| {
        ops.iter().all(|op| deletes_at(std::slice::from_ref(op), sluice_core::keys::OFFSETS_PREFIX, ""))
    };
    let joined = Arc::new(std::sync::Mutex::new(None));
    let rival = {
        let (groups, group, topic, joined) = (groups.clone(), group.clone(), topic.clone(), joined.clone());
        Box::pin(async move {
            let answer = groups.poll(&request(&group, None, &topic, 1000)).await.unwrap();
            *joined.lock().unwrap() = Some(answer);
        })
    };
    script.at(later_phase, Action::Before(rival));
    deleting.delete(&group).await.unwrap();
    assert_eq!(script.pending(), 0, "the new member joined between the delete's phases");
    let new = joined.lock().unwrap().take().expect("the rival polled");
    assert_eq!(new.assignment.len(), PARTITIONS as usize);
    assert_started_at_earliest(&new, PARTITIONS);
    // The new member committed nothing, so no offset item is left.
    assert_eq!(
        offsets_left(&log, &group).await,
        Vec::<String>::new(),
        "no offset of the deleted group is left in the store"
    );
    assert!(groups.list().await.unwrap().contains(&group), "the group the new member joined is listed");
}

/// The same race against the janitor's offsets expiry: a member joining an expired wide
/// group between the expiry's first write and the deletes of the offsets that did not fit
/// in it joins a new group, so it starts every partition at its reset policy.
pub async fn given_a_member_joining_between_a_wide_groups_expiry_phases_then_no_old_offset_is_inherited(
    backend: &dyn Backend,
) {
    const PARTITIONS: u32 = 150;
    let clock = Arc::new(ManualClock::new(START_MS));
    let config = GroupsConfig { offsets_retention_ms: 60_000 };
    let (store, objects) = backend.open_with(clock.clone()).await;
    // A namespace of its own: the expiry scans an index every group of the table shares.
    let store: Arc<dyn StateStore> = Arc::new(Namespaced::new(store));
    let log = Log::new(store.clone(), objects.clone(), clock.clone(), crate::log_config());
    let groups = Groups::with_config(log.clone(), config);
    let script = Scripted::new(store);
    let expiring = Groups::with_config(Log::new(script.clone(), objects, clock.clone(), crate::log_config()), config);
    let (topic, group) = (unique_topic("wide-expired"), unique_topic("g"));
    committed_at_2_and_left(&log, &groups, &topic, &group, PARTITIONS).await;
    clock.advance(60_001);

    // The expiry's second write that deletes offsets; the new member joins and polls before it.
    let offset_writes = AtomicUsize::new(0);
    let second = move |ops: &[WriteOp]| {
        let deletes_offsets = ops.iter().any(|op| deletes_at(std::slice::from_ref(op), OFFSETS_PREFIX, ""));
        deletes_offsets && offset_writes.fetch_add(1, Ordering::SeqCst) == 1
    };
    let joined = Arc::new(std::sync::Mutex::new(None));
    let rival = {
        let (groups, group, topic, joined) = (groups.clone(), group.clone(), topic.clone(), joined.clone());
        Box::pin(async move {
            let answer = groups.poll(&request(&group, None, &topic, 1000)).await.unwrap();
            *joined.lock().unwrap() = Some(answer);
        })
    };
    script.at(second, Action::Before(rival));
    while expiring.expire_offsets(1000).await.unwrap() > 0 {}
    assert_eq!(script.pending(), 0, "the new member joined between the expiry's phases");
    let new = joined.lock().unwrap().take().expect("the rival polled");
    assert_eq!(new.assignment.len(), PARTITIONS as usize);
    assert_started_at_earliest(&new, PARTITIONS);
    assert_eq!(offsets_left(&log, &group).await, Vec::<String>::new(), "no offset of the expired group is left");
    assert!(groups.list().await.unwrap().contains(&group), "the group the new member joined is listed");
}

/// A group delete whose read of the offsets misses one (as a query racing a commit's
/// transaction can, or as a commit landing between that read and the delete's first write
/// would): the delete still removes it, so a group made anew under the name starts at its
/// reset policy, never at the deleted group's offset.
pub async fn given_a_group_delete_whose_offsets_read_misses_one_then_a_group_made_anew_inherits_nothing(
    backend: &dyn Backend,
) {
    const PARTITIONS: u32 = 4;
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, deleting) = scripted_groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("missed-offset"), unique_topic("g"));
    committed_at_2_and_left(&log, &groups, &topic, &group, PARTITIONS).await;

    script.at_query(sluice_core::keys::OFFSETS_PREFIX, QueryAction::Tear(1));
    deleting.delete(&group).await.unwrap();
    assert_eq!(script.pending(), 0, "the delete's read of the offsets missed one");
    assert_eq!(
        offsets_left(&log, &group).await,
        Vec::<String>::new(),
        "no offset of the deleted group is left in the store"
    );

    let new = groups.poll(&request(&group, None, &topic, 1000)).await.unwrap();
    assert_started_at_earliest(&new, PARTITIONS);
}

/// A topic of `partitions` with three events in each, and a group that committed offset 2
/// on every partition, whose member then left: a group ready to be deleted.
async fn committed_at_2_and_left(log: &Log, groups: &Groups, topic: &str, group: &str, partitions: u32) {
    let spec = TopicSpec { partitions, retention_ms: None, retention_bytes: None };
    log.create_topic(topic, spec).await.unwrap();
    for p in 0..partitions {
        publish(log, topic, p, (0..3).map(|i| (format!("e{p}.{i}"), START_MS))).await;
    }
    let old = poll(groups, group, None, topic).await;
    let all: Vec<_> = (0..partitions).map(|p| commit_of(topic, p, 2)).collect();
    for chunk in all.chunks(90) {
        groups.commit(group, &old.member_id, old.generation, chunk).await.unwrap();
    }
    groups.leave(group, &old.member_id).await.unwrap();
}

/// The sort keys of the offsets the store holds for `group`, read from the store rather than
/// through describe (which itself leaves out offsets below the record's `offsets_from`).
async fn offsets_left(log: &Log, group: &str) -> Vec<String> {
    let offsets = log.store().query(&Query::all(sluice_core::keys::offsets_pk(group), 1000)).await.unwrap();
    offsets.items.into_iter().map(|i| i.key.sk).collect()
}

/// A new member's first poll started every one of `partitions` at earliest (0), none at an
/// offset of the group deleted before it.
fn assert_started_at_earliest(new: &PollAnswer, partitions: u32) {
    let mut first: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &new.events {
        first.entry(e.event.partition).or_insert(e.event.offset);
    }
    let inherited: Vec<(u32, u64)> = first.iter().filter(|(_, o)| **o != 0).map(|(p, o)| (*p, *o)).collect();
    assert_eq!(inherited, vec![], "partitions started at the deleted group's offsets, not at earliest (0)");
    assert_eq!(first.len(), partitions as usize, "every partition delivered from earliest");
}

/// A group over three topics of 1,024 partitions: its record and its members' stay well
/// within DynamoDB's 400 KB item (each rebalance writes them whole), so it keeps working.
pub async fn given_a_group_over_three_topics_of_1024_partitions_then_it_rebalances_and_commits(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let group = unique_topic("wide-group");
    let mut topics = Vec::new();
    for _ in 0..3 {
        let topic = unique_topic(&"t".repeat(60));
        log.create_topic(&topic, TopicSpec { partitions: 1024, retention_ms: None, retention_bytes: None })
            .await
            .unwrap();
        publish(&log, &topic, 1000, five(0)).await;
        topics.push(topic);
    }
    let join = |member: Option<String>| {
        let mut req = request(&group, member.as_deref(), &topics[0], 100);
        req.topics = topics.clone();
        req
    };
    let a = groups.poll(&join(None)).await.unwrap();
    assert_eq!(a.assignment.len(), 3 * 1024);
    let b = groups.poll(&join(None)).await.unwrap();
    let a = groups.poll(&join(Some(a.member_id))).await.unwrap();
    assert_eq!((a.assignment.len(), b.assignment.len()), (1536, 1536), "balanced");
    let owned = &a.assignment[0];
    groups.commit(&group, &a.member_id, a.generation, &[commit_of(&owned.topic, owned.partition, 0)]).await.unwrap();
    let d = groups.describe(&group).await.unwrap();
    assert_eq!((d.members.len(), d.partitions.len()), (2, 3 * 1024));
    let store = log.store();
    for key in [sluice_core::keys::group_meta_key(&group), sluice_core::keys::member_key(&group, &a.member_id)] {
        let item = store.get(&key).await.unwrap().expect("stored");
        assert!(item.value.len() < 100_000, "{} takes {} bytes", key.sk, item.value.len());
    }
    groups.leave(&group, &b.member_id).await.unwrap();
    let a = groups.poll(&join(Some(a.member_id))).await.unwrap();
    assert_eq!(a.assignment.len(), 3 * 1024, "the leaver's partitions came back");
}

/// A join whose answer is lost, retried with the same `instance_id`: the retry is the same
/// member (no second member holding partitions it never polls), in the same generation.
pub async fn given_a_static_join_answer_lost_when_retried_then_the_same_member_and_no_ghost(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let topic = unique_topic("static");
    log.create_topic(&topic, TopicSpec { partitions: 4, retention_ms: None, retention_bytes: None }).await.unwrap();
    let group = unique_topic("g");
    let join = || {
        let mut req = request(&group, None, &topic, 10);
        req.instance_id = Some("worker-1".to_owned());
        req
    };
    let lost = groups.poll(&join()).await.unwrap();
    assert_eq!(lost.member_id, "i.worker-1");
    let retried = groups.poll(&join()).await.unwrap();
    assert_eq!((retried.member_id.as_str(), retried.generation), ("i.worker-1", lost.generation));
    assert_eq!(retried.assignment.len(), 4, "it holds every partition, alone");
    assert_eq!(groups.describe(&group).await.unwrap().members.len(), 1, "no ghost member");
}

/// A poll whose auto-commit confirms the last batch, with events ready: the commit rides on
/// the heartbeat, one write for the whole cycle.
pub async fn given_auto_commit_with_events_ready_then_one_write_commits_and_heartbeats(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, _, script, groups) = scripted_groups_on(backend, &clock).await;
    let topic = one_partition_topic(&log, "riding").await;
    let group = unique_topic("g");
    publish(&log, &topic, 0, five(0)).await;
    let joining = script.count(|_| true);
    let first = groups.poll(&request(&group, None, &topic, 5)).await.unwrap();
    assert_eq!(offsets_of(&first), vec![0, 1, 2, 3, 4]);
    let (joined, deferred) = (joining.load(std::sync::atomic::Ordering::SeqCst), script.deferred());
    assert_eq!((joined, deferred), (2, 1), "the rebalance making it a member durable, then its heartbeat deferred");
    publish(&log, &topic, 0, five(5)).await;
    let writes = script.count(|_| true);
    let mut next = with_positions(request(&group, Some(&first.member_id), &topic, 5), &topic, &[(0, 5)]);
    next.auto_commit = true;
    assert_eq!(offsets_of(&groups.poll(&next).await.unwrap()), vec![5, 6, 7, 8, 9]);
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 1, "the commit and the heartbeat in one write");
    // Soft state: lost to a power cut, the member resumes earlier (at least once).
    assert_eq!(script.deferred(), 2, "a member's heartbeat and its riding auto-commit are deferred");
    assert_eq!(committed(&groups, &group, 0).await, Some(5));
    // A commit request is written the same way (docs/API.md, "Commit").
    let offsets = [crate::cases::support::groups::commit_of(&topic, 0, 10)];
    groups.commit(&group, &first.member_id, first.generation, &offsets).await.unwrap();
    assert_eq!(script.deferred(), 3, "a commit request is deferred too");
    assert_eq!(committed(&groups, &group, 0).await, Some(10), "and seen at once");
}

/// A poll whose auto-commit confirms everything there is, waiting for more: the commit lands
/// before the wait, not when the wait ends.
pub async fn given_auto_commit_and_nothing_new_then_it_commits_before_the_long_poll_waits(backend: &dyn Backend) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let log = Log::new(store, objects, clock.clone(), crate::log_config());
    let groups = Groups::new(log.clone());
    let topic = one_partition_topic(&log, "waiting").await;
    let group = unique_topic("g");
    publish(&log, &topic, 0, five(0)).await;
    let first = groups.poll(&request(&group, None, &topic, 5)).await.unwrap();
    let mut next = with_positions(request(&group, Some(&first.member_id), &topic, 5), &topic, &[(0, 5)]);
    next.auto_commit = true;
    next.wait_ms = 20_000;
    let before = clock.sleeps();
    let waiting = tokio::spawn({
        let groups = groups.clone();
        async move { groups.poll(&next).await }
    });
    // The fake clock never moves: the poll waits until the publish below wakes it.
    clock.slept_more_than(before).await;
    assert!(!waiting.is_finished(), "nothing new: the poll waits");
    assert_eq!(committed(&groups, &group, 0).await, Some(5), "committed before the wait");
    publish(&log, &topic, 0, [("late".to_owned(), START_MS)]).await;
    let answer = tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
        .await
        .expect("the publish woke the long poll")
        .unwrap()
        .unwrap();
    assert_eq!(offsets_of(&answer), vec![5]);
}

/// Another member joins between a poll's reads and its heartbeat, whose write carries the
/// auto-commit: the group's version moved, so the commit is dropped (the next owner may
/// deliver again: at least once), the heartbeat lands alone and the poll answers its events.
pub async fn given_a_rebalance_before_a_riding_auto_commit_then_the_commit_is_dropped_and_the_poll_answers(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, clean, script, groups) = scripted_groups_on(backend, &clock).await;
    let topic = one_partition_topic(&log, "dropped").await;
    let group = unique_topic("g");
    publish(&log, &topic, 0, five(0)).await;
    let first = groups.poll(&request(&group, None, &topic, 5)).await.unwrap();
    publish(&log, &topic, 0, five(5)).await;
    let rival = {
        let (clean, group, topic) = (clean.clone(), group.clone(), topic.clone());
        Box::pin(async move {
            clean.poll(&request(&group, None, &topic, 5)).await.expect("a second member joins");
        })
    };
    script.at(puts(sluice_core::keys::MEMBER_PREFIX), Action::Before(rival));
    let mut next = with_positions(request(&group, Some(&first.member_id), &topic, 5), &topic, &[(0, 5)]);
    next.auto_commit = true;
    let answered = groups.poll(&next).await.expect("the poll answers");
    assert_eq!(script.pending(), 0, "the rival joined before the heartbeat");
    assert_eq!(offsets_of(&answered), vec![5, 6, 7, 8, 9]);
    assert_eq!(committed(&groups, &group, 0).await, None, "the commit of a moved-on generation is dropped");
    let members = clean.describe(&group).await.unwrap().members.len();
    assert_eq!(members, 2, "the heartbeat landed: the member is still in the group");
}

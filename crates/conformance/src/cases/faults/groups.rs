//! Consumer groups: join, commit (and a rival's commit), seek, leave.

use sluice_core::Code;
use std::sync::{Arc, Mutex};

use sluice_core::groups::{Groups, PollAnswer, PollRequest, SeekTarget};
use sluice_core::{Error, Log, ManualClock, TopicSpec};
use sluice_testkit::Layered;

use super::fixtures::*;
use crate::cases::support::faults::Fault;
use crate::cases::support::faults::{deletes_at, puts_at, Action, Scripted};
use crate::cases::support::groups::{commit_of, committed, groups_on, offsets_of, request};
use crate::cases::support::queues::START_MS;
use crate::{unique_topic, Backend};

/// The log and groups of `backend` beside a second pair whose writes meet `script`.
async fn scripted_groups(
    backend: &dyn Backend,
    clock: &Arc<ManualClock>,
) -> (Log, Groups, Arc<Layered<Scripted>>, Groups) {
    let (log, groups) = groups_on(backend, clock).await;
    let (script, scripted) = scripted_log(backend, clock.clone()).await;
    (log, groups, script, Groups::new(scripted))
}

async fn topic_with(log: &Log, prefix: &str, partitions: u32, per_partition: usize) -> String {
    let topic = unique_topic(prefix);
    log.create_topic(&topic, TopicSpec { partitions, retention_ms: None, retention_bytes: None }).await.unwrap();
    for p in 0..partitions {
        let events = (0..per_partition).map(|i| event(&format!("p{p}e{i}"), p, Some(START_MS))).collect();
        log.publish(&topic, events, None).await.unwrap();
    }
    topic
}

fn short_session(mut req: PollRequest) -> PollRequest {
    req.session_timeout_ms = Some(6_000);
    req
}

fn delivered(answer: &PollAnswer) -> Vec<(u32, u64)> {
    answer.events.iter().map(|e| (e.event.partition, e.event.offset)).collect()
}

/// A join whose answer is lost leaves a ghost: a member that holds partitions for a session
/// though no client knows its id. The client's retried join gets the rest; no event is lost:
/// once the ghost's session ends its partitions come back, from the committed offset.
pub async fn given_a_group_join_applied_but_its_answer_lost_then_no_event_is_lost_and_the_ghosts_partitions_come_back(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-join", 2, 3).await;
    let group = unique_topic("g");
    let join = || short_session(request(&group, None, &topic, 100));
    script.at(
        |ops| {
            puts_at(ops, sluice_core::keys::GROUP_PREFIX, sluice_core::keys::GROUP_META_SK)
                && puts_at(ops, sluice_core::keys::GROUP_PREFIX, sluice_core::keys::MEMBER_PREFIX)
        },
        Action::Fault(Fault::LoseAnswer),
    );
    assert_unknown(faulty.poll(&join()).await, "a join whose answer was lost");
    assert_eq!(script.pending(), 0, "the join met its lost answer");
    let first = groups.poll(&join()).await.expect("the retried join");
    let member = first.member_id.clone();
    let mut seen = delivered(&first);
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(d.members.len(), 2, "the ghost holds partitions for its session");
    assert_eq!(first.assignment.len(), 1, "the retried join gets the ghost's share's complement");
    clock.advance(4_000);
    let mine = short_session(request(&group, Some(&member), &topic, 100));
    seen.extend(delivered(&groups.poll(&mine).await.expect("a heartbeat within the session")));
    clock.advance(2_001);
    let after = groups.poll(&mine).await.expect("a poll after the ghost's session ended");
    assert_eq!(after.assignment.len(), 2, "the ghost's partitions come back");
    seen.extend(delivered(&after));
    seen.sort_unstable();
    let all: Vec<(u32, u64)> = (0..2).flat_map(|p| (0..3).map(move |o| (p, o))).collect();
    assert_eq!(seen, all, "every event delivered, once each");
    assert_eq!(groups.describe(&group).await.unwrap().members.len(), 1);
}

/// A commit applied but unanswered, retried: the retry is accepted and the offset committed
/// once; a late copy of that retry arriving after a newer commit never moves it back.
pub async fn given_a_group_commit_applied_but_its_answer_lost_then_the_retry_commits_once_and_never_regresses(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-commit", 1, 10).await;
    let group = unique_topic("g");
    let a = groups.poll(&request(&group, None, &topic, 100)).await.unwrap();
    assert_eq!(offsets_of(&a), (0..10).collect::<Vec<_>>());
    let five = [commit_of(&topic, 0, 5)];
    script.at(|ops| puts_at(ops, sluice_core::keys::OFFSETS_PREFIX, ""), Action::Fault(Fault::LoseAnswer));
    assert_unknown(faulty.commit(&group, &a.member_id, a.generation, &five).await, "a lost commit");
    assert_eq!(script.pending(), 0, "the commit met its lost answer");
    faulty.commit(&group, &a.member_id, a.generation, &five).await.expect("the retried commit");
    assert_eq!(committed(&groups, &group, 0).await, Some(5));
    let store = log.store();
    let item = store.get(&sluice_core::keys::offset_key(&group, &topic, 0)).await.unwrap();
    assert_eq!(item.map(|i| i.version), Some(1), "committed once: the retry wrote nothing");
    groups.commit(&group, &a.member_id, a.generation, &[commit_of(&topic, 0, 10)]).await.unwrap();
    faulty.commit(&group, &a.member_id, a.generation, &five).await.expect("a late copy of the retry");
    assert_eq!(committed(&groups, &group, 0).await, Some(10), "never moved back");
}

/// A commit applied, and before its answer (lost) comes back the member's session ends and a
/// rival member takes the partition over, resumes at that commit and commits further: the
/// first member's retry is fenced (or ignored), and the offset never regresses.
pub async fn given_a_group_commit_lost_and_a_rival_commit_after_a_rebalance_then_the_offset_never_regresses(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-commit-rival", 1, 10).await;
    let group = unique_topic("g");
    let a = groups.poll(&short_session(request(&group, None, &topic, 5))).await.unwrap();
    assert_eq!(offsets_of(&a), vec![0, 1, 2, 3, 4]);
    let rival_saw = Arc::new(Mutex::new(Vec::new()));
    let rival = {
        let (groups, group, topic, clock, saw) =
            (groups.clone(), group.clone(), topic.clone(), clock.clone(), rival_saw.clone());
        Box::pin(async move {
            clock.advance(6_001);
            let b = groups.poll(&short_session(request(&group, None, &topic, 100))).await.expect("the rival joins");
            *saw.lock().unwrap() = offsets_of(&b);
            groups.commit(&group, &b.member_id, b.generation, &[commit_of(&topic, 0, 10)]).await.expect("its commit");
        })
    };
    script.at(|ops| puts_at(ops, sluice_core::keys::OFFSETS_PREFIX, ""), Action::LoseAnswerAfter(rival));
    let five = [commit_of(&topic, 0, 5)];
    assert_unknown(faulty.commit(&group, &a.member_id, a.generation, &five).await, "a lost commit");
    assert_eq!(script.pending(), 0, "the commit met its lost answer and the rival ran");
    assert_eq!(*rival_saw.lock().unwrap(), vec![5, 6, 7, 8, 9], "the rival resumed at the lost commit");
    match faulty.commit(&group, &a.member_id, a.generation, &five).await {
        Ok(()) | Err(Error::Conflict { code: Code::UnknownMember | Code::StaleGeneration, .. }) => {}
        other => panic!("the evicted member's retry is fenced or ignored: {other:?}"),
    }
    assert_eq!(committed(&groups, &group, 0).await, Some(10), "never moved back");
}

/// A seek applied but unanswered, retried: the offsets are at the target, and members resume there.
pub async fn given_a_seek_applied_but_its_answer_lost_then_the_retry_leaves_the_offsets_at_the_target(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-seek", 1, 10).await;
    let group = unique_topic("g");
    let a = groups.poll(&request(&group, None, &topic, 100)).await.unwrap();
    groups.commit(&group, &a.member_id, a.generation, &[commit_of(&topic, 0, 10)]).await.unwrap();
    script.at(
        |ops| {
            puts_at(ops, sluice_core::keys::GROUP_PREFIX, sluice_core::keys::GROUP_META_SK)
                && puts_at(ops, sluice_core::keys::OFFSETS_PREFIX, "")
        },
        Action::Fault(Fault::LoseAnswer),
    );
    assert_unknown(faulty.seek(&group, &topic, None, SeekTarget::Offset(3)).await, "a seek whose answer was lost");
    assert_eq!(script.pending(), 0, "the seek met its lost answer");
    let moved = faulty.seek(&group, &topic, None, SeekTarget::Offset(3)).await.expect("the retried seek");
    assert_eq!(moved, vec![(0, 3)]);
    assert_eq!(committed(&groups, &group, 0).await, Some(3));
    let resumed = groups.poll(&request(&group, Some(&a.member_id), &topic, 100)).await.unwrap();
    assert_eq!(offsets_of(&resumed), (3..10).collect::<Vec<_>>(), "the member resumes at the target");
}

/// A leave applied but unanswered, retried: the retry is done (ok, or `unknown_member`: it
/// left), and its partitions go to the others at once.
pub async fn given_a_leave_applied_but_its_answer_lost_then_the_retry_is_done_and_the_partitions_are_reassigned(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups, script, faulty) = scripted_groups(backend, &clock).await;
    let topic = topic_with(&log, "lost-leave", 2, 1).await;
    let group = unique_topic("g");
    let a = groups.poll(&request(&group, None, &topic, 100)).await.unwrap();
    let b = groups.poll(&request(&group, None, &topic, 100)).await.unwrap();
    let a = groups.poll(&request(&group, Some(&a.member_id), &topic, 100)).await.unwrap();
    assert_eq!((a.assignment.len(), b.assignment.len()), (1, 1));
    let member = a.member_id.clone();
    script.at(
        move |ops| {
            deletes_at(ops, sluice_core::keys::GROUP_PREFIX, &format!("{}{member}", sluice_core::keys::MEMBER_PREFIX))
        },
        Action::Fault(Fault::LoseAnswer),
    );
    assert_unknown(faulty.leave(&group, &a.member_id).await, "a leave whose answer was lost");
    assert_eq!(script.pending(), 0, "the leave met its lost answer");
    match faulty.leave(&group, &a.member_id).await {
        Ok(()) | Err(Error::Conflict { code: Code::UnknownMember, .. }) => {}
        other => panic!("a retried leave is done (ok, or unknown member): {other:?}"),
    }
    let b = groups.poll(&request(&group, Some(&b.member_id), &topic, 100)).await.unwrap();
    assert_eq!(b.assignment.len(), 2, "the leaver's partitions are reassigned");
    let d = groups.describe(&group).await.unwrap();
    assert_eq!(d.members.iter().map(|m| m.member_id.as_str()).collect::<Vec<_>>(), vec![b.member_id.as_str()]);
}

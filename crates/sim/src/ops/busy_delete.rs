//! Deletes of a topic in use (TOPIC_B, by the topic admin): the topic with a subscription
//! whose messages are in flight and a group with a member and a committed offset, then
//! deleted. After the delete nothing of it answers: a receive delivers nothing, the held
//! receipts ack nothing, the subscription is not found, the group counts no offset of it.
//! Created again under the same name, the topic shows none of it: no subscription, no
//! committed offset.

use sluice_core::groups::{CommitOffset, GroupDescription, Groups, PollRequest, ResetPolicy};
use sluice_core::queues::{Queues, ReceiveRequest, StartAt, SubscriptionSpec};
use sluice_core::{Error, Log, TopicSpec};

use crate::world::{code, uncertain, BusyDelete, Done, Res, World, TOPIC_B};

const SUB_B: &str = "qb";
const GROUP_B: &str = "gb";

/// Sets the topic up in use, deletes it, looks at what is left, creates it again, looks again.
async fn script(log: Log, groups: Groups, queues: Queues, spec: TopicSpec) -> BusyDelete {
    let mut out = BusyDelete { created: Some(log.create_topic(TOPIC_B, spec).await), ..BusyDelete::default() };
    let sub_spec = SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() };
    let _ = queues.create(TOPIC_B, SUB_B, sub_spec).await;
    let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: Some(600_000) };
    let receipts: Vec<String> = match queues.receive(TOPIC_B, SUB_B, &req).await {
        Ok(ms) => ms.into_iter().map(|m| m.receipt).collect(),
        Err(_) => Vec::new(),
    };
    out.held = receipts.len();
    out.committed = Some(join_and_commit(&groups).await);
    out.deleted = Some(log.delete_topic(TOPIC_B).await);
    out.receive = Some(queues.receive(TOPIC_B, SUB_B, &req).await);
    if !receipts.is_empty() {
        out.acks = Some(queues.ack(TOPIC_B, SUB_B, &receipts).await);
    }
    out.describe = Some(queues.describe(TOPIC_B, SUB_B).await);
    out.group = Some(groups.describe(GROUP_B).await);
    out.recreated = Some(log.create_topic(TOPIC_B, spec).await);
    out.describe_again = Some(queues.describe(TOPIC_B, SUB_B).await);
    out.group_again = Some(groups.describe(GROUP_B).await);
    out
}

/// A member of GROUP_B joins (reading TOPIC_B) and commits a position on a partition it owns.
async fn join_and_commit(groups: &Groups) -> Result<(), Error> {
    let poll = PollRequest {
        group: GROUP_B.into(),
        member_id: None,
        topics: vec![TOPIC_B.into()],
        max_events: 10,
        max_bytes: 1 << 20,
        wait_ms: 0,
        reset: ResetPolicy::Earliest,
        session_timeout_ms: None,
        auto_commit: false,
        instance_id: None,
        positions: None,
    };
    let answer = groups.poll(&poll).await?;
    let Some(tp) = answer.assignment.first() else { return Ok(()) };
    let read = answer.events.iter().filter(|e| e.event.partition == tp.partition).map(|e| e.event.offset + 1).max();
    let offset =
        CommitOffset { topic: TOPIC_B.into(), partition: tp.partition, offset: read.unwrap_or(0), metadata: None };
    groups.commit(GROUP_B, &answer.member_id, answer.generation, &[offset]).await
}

impl World {
    pub(crate) fn start_busy_delete(&mut self, c: usize, log: Log, groups: Groups, queues: Queues) {
        let spec = self.topic_specs[TOPIC_B];
        self.spawn(c, crate::world::Act::BusyDelete, Some(TOPIC_B), async move {
            Res::BusyDelete(Box::new(script(log, groups, queues, spec).await))
        });
    }

    /// What a deleted topic may still answer, and what its successor must not show.
    pub(crate) fn on_busy_delete(&mut self, d: &Done) {
        let Res::BusyDelete(out) = &d.res else { return };
        for t in [&out.created, &out.recreated].into_iter().flatten().flatten() {
            self.topic_ids.entry(TOPIC_B).or_default().insert(t.0.id);
        }
        if !matches!(out.deleted, Some(Ok(()))) {
            return;
        }
        self.stat("busy_topic_deletes");
        let mut problems = Vec::new();
        if let Some(Ok(ms)) = &out.receive {
            if !ms.is_empty() {
                problems.push(format!("a receive after the delete delivered {}", ms.len()));
            }
        }
        if let Some(Ok(rs)) = &out.acks {
            if rs.iter().any(|r| r.is_ok()) {
                problems.push("a receipt held through the delete acked".into());
            }
        }
        if let Some(Ok(s)) = &out.describe {
            problems.push(format!("the subscription is described after the delete: {:?}", s.backlog));
        }
        if let Some(Ok(g)) = &out.group {
            problems.extend(committed_on_b(g, "after the delete"));
        }
        // Created again (by this op: no other client creates TOPIC_B meanwhile), nothing
        // of the deleted one shows: not its subscription, not its group's offsets.
        if matches!(out.recreated, Some(Ok((_, true)))) {
            if let Some(Ok(_)) = &out.describe_again {
                problems.push("the deleted topic's subscription resurfaced on its successor".into());
            }
            if let Some(Ok(g)) = &out.group_again {
                problems.extend(committed_on_b(g, "on the successor"));
            }
        }
        if !problems.is_empty() {
            self.violate("deleted-topic-gone", problems.join("; "));
        }
        // Refused, as not found (or unknown, under faults).
        let receive = out.receive.as_ref().and_then(|r| r.as_ref().err());
        let describe = out.describe.as_ref().and_then(|r| r.as_ref().err());
        for e in [receive, describe].into_iter().flatten() {
            if !uncertain(e) && !code(e).contains("not_found") {
                self.violate("deleted-topic-gone", format!("after the delete: {}", code(e)));
            }
        }
    }
}

/// A committed offset of TOPIC_B in the group's description (the topic was deleted since).
fn committed_on_b(g: &GroupDescription, when: &str) -> Vec<String> {
    g.partitions
        .iter()
        .filter(|p| p.topic == TOPIC_B && p.committed.is_some())
        .map(|p| format!("{TOPIC_B}/{} committed {:?} {when}", p.partition, p.committed))
        .collect()
}

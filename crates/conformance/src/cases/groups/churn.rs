//! Members joining and leaving while publishers write: no acknowledged event is lost.

use sluice_core::Code;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::groups::CommitOffset;
use sluice_core::groups::Groups;
use sluice_core::{Error, Log, ManualClock, NewEvent, TopicSpec};

use crate::cases::support::groups::*;
use crate::{unique_topic, Backend};

const PUBLISHERS: usize = 4;
const EACH: usize = 60;

/// Publishers and members at once; members join and leave. Checks at-least-once
/// delivery of every acknowledged event and monotonic committed offsets.
pub async fn given_members_joining_and_leaving_while_publishers_write_then_every_acked_event_delivered(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (log, groups) = groups_on(backend, &clock).await;
    let (topic, group) = (unique_topic("busy"), unique_topic("g"));
    log.create_topic(&topic, TopicSpec { partitions: 4, retention_ms: None, retention_bytes: None }).await.unwrap();
    let mut publishers = Vec::new();
    for p in 0..PUBLISHERS {
        publishers.push(tokio::spawn(publish_keyed(log.clone(), topic.clone(), p)));
    }
    let delivered = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    // Held across the describe, so the sequences are in the order the offsets were observed.
    let commits = Arc::new(tokio::sync::Mutex::new(BTreeMap::<u32, Vec<u64>>::new()));
    let mut members = Vec::new();
    for m in 0..4usize {
        let (delivered, commits) = (delivered.clone(), commits.clone());
        members.push(tokio::spawn(churning_member(
            (groups.clone(), topic.clone(), group.clone()),
            m,
            delivered,
            commits,
        )));
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

/// Publishes `EACH` keyed events as publisher `p`, one per request; answers where each landed.
async fn publish_keyed(log: Log, topic: String, p: usize) -> Vec<(u32, u64)> {
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
}

/// Member `m`'s 400 rounds of polls and commits (members 2 and 3 leave now and then and
/// come back as new members), recording what it was delivered and, after each commit, every
/// partition's committed offset.
async fn churning_member(
    (groups, topic, group): (Groups, String, String),
    m: usize,
    delivered: Arc<std::sync::Mutex<BTreeSet<(u32, u64)>>>,
    commits: Arc<tokio::sync::Mutex<BTreeMap<u32, Vec<u64>>>>,
) {
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
}

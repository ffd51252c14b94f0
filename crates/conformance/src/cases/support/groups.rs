//! Consumer group helpers the group and lost-answer cases share, and a log start
//! moved as retention moves it (used by group and queue cases).

use std::sync::Arc;

use bytes::Bytes;
use sluice_core::groups::{CommitOffset, Groups, PollAnswer, PollRequest, ResetPolicy};
use sluice_core::layout;
use sluice_core::ports::state::{StateStore, WriteOp};
use sluice_core::{Log, ManualClock, NewEvent};

use crate::Backend;

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

pub(crate) fn partitions(answer: &PollAnswer) -> Vec<u32> {
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

/// Moves a partition's log start to `start`, as the janitor's first retention step does:
/// the head item rewritten with only `start` changed, conditional on the version read.
/// The index items and objects below it stay (the janitor removes them afterwards), so a
/// reader that still read below the start would get the events: the cases can tell.
pub async fn advance_log_start(store: &dyn StateStore, topic_id: u64, partition: u32, start: u64) {
    let key = sluice_core::keys::head_key(topic_id, partition);
    let item = store.get(&key).await.expect("read the head").expect("the partition has a head");
    let (mut head, tail) = layout::decode_head(&item.value).expect("decode the head");
    assert!(start <= head.next, "a log start past the high watermark {}", head.next);
    head.start = start;
    let value = layout::encode_head(&head, tail.as_ref());
    store.write(vec![WriteOp::replace(key, value, Some(item.version))]).await.expect("write the head");
}

pub(crate) fn offsets_of(answer: &PollAnswer) -> Vec<u64> {
    answer.events.iter().map(|e| e.event.offset).collect()
}

//! One partition, one write (`LogConfig::single_write_commits`): a small commit to one
//! partition is one conditional write of its head, which carries the commit's index entry
//! until the next commit writes it out. Nothing acknowledged may be lost on the way: not
//! when every commit replaces the head's entry, nor when a commit stops between writing the
//! entry out and writing the head, nor when processes that commit by transaction follow.

use std::sync::Arc;

use sluice_core::ports::state::{Query, WriteOp};
use sluice_core::{Error, Log, LogConfig, OffsetQuery, Position, SystemClock};

use super::fixtures::*;
use crate::cases::support::faults::{Action, Fault, Scripted};
use crate::{is_commit, unique_topic, Backend, Stores};

/// A log that commits small single-partition publishes with one write of the head, on `stores`.
fn single_write_log((store, objects): Stores) -> Log {
    let config = LogConfig { inline_segment_bytes: 4 << 10, single_write_commits: true, ..crate::log_config() };
    Log::new(store, objects, Arc::new(SystemClock), config)
}

/// A log that commits every publish by transaction (the embedded backend's way), on `stores`.
fn transaction_log((store, objects): Stores) -> Log {
    let config = LogConfig { inline_segment_bytes: 4 << 10, single_write_commits: false, ..crate::log_config() };
    Log::new(store, objects, Arc::new(SystemClock), config)
}

pub async fn given_single_write_commits_when_each_replaces_the_heads_entry_then_every_event_stays_readable(
    backend: &dyn Backend,
) {
    let log = single_write_log(backend.open().await);
    let topic = unique_topic("single");
    log.create_topic(&topic, spec(1)).await.unwrap();
    for (i, v) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let acked = log.publish(&topic, vec![event(v, 0)], None).await.unwrap();
        assert_eq!(acked, vec![Position { partition: 0, offset: i as u64 }], "dense offsets");
    }
    let expected: Vec<(u64, String)> =
        ["a", "b", "c", "d", "e"].iter().enumerate().map(|(i, v)| (i as u64, v.to_string())).collect();
    assert_eq!(
        values(&read_all(&log, &topic, 0).await.unwrap()),
        expected,
        "every entry the head carried was written out"
    );
    let fresh = transaction_log(backend.open().await);
    assert_eq!(values(&read_all(&fresh, &topic, 0).await.unwrap()), expected, "another process reads them too");
    assert_eq!(fresh.offset(&topic, 0, OffsetQuery::Timestamp(0)).await.unwrap(), 0, "offset by time");
    assert_eq!(fresh.offset(&topic, 0, OffsetQuery::Latest).await.unwrap(), 5);
    let (_, states) = fresh.describe_topic(&topic).await.unwrap();
    assert_eq!((states[0].log_start_offset, states[0].high_watermark), (0, 5));
}

pub async fn given_a_commit_stopped_between_writing_out_the_entry_and_its_head_then_later_commits_lose_nothing(
    backend: &dyn Backend,
) {
    let (store, objects) = backend.open().await;
    let script = Scripted::new(store);
    let log = single_write_log((script.clone(), objects));
    let topic = unique_topic("stopped");
    log.create_topic(&topic, spec(1)).await.unwrap();
    assert_eq!(
        log.publish(&topic, vec![event("a", 0)], None).await.unwrap(),
        vec![Position { partition: 0, offset: 0 }]
    );
    // The next commit writes "a" out, then its head write never applies: the process stops there.
    for _ in 0..3 {
        script.at(is_commit, Action::Fault(Fault::FailBefore));
    }
    let stopped = log.publish(&topic, vec![event("b", 0)], None).await;
    assert!(matches!(stopped, Err(Error::Unavailable(_))), "{stopped:?}");
    assert_eq!(script.pending(), 0, "every attempt of its head write failed");
    // Another process, committing by transaction, then one committing by single writes.
    let other = transaction_log(backend.open().await);
    assert_eq!(
        other.publish(&topic, vec![event("c", 0)], None).await.unwrap(),
        vec![Position { partition: 0, offset: 1 }]
    );
    let third = single_write_log(backend.open().await);
    assert_eq!(
        third.publish(&topic, vec![event("d", 0)], None).await.unwrap(),
        vec![Position { partition: 0, offset: 2 }]
    );
    assert_eq!(
        other.publish(&topic, vec![event("e", 0)], None).await.unwrap(),
        vec![Position { partition: 0, offset: 3 }]
    );
    let expected = vec![(0, "a".to_string()), (1, "c".into()), (2, "d".into()), (3, "e".into())];
    assert_eq!(values(&read_all(&other, &topic, 0).await.unwrap()), expected, "acknowledged, never lost");
}

/// A stale committer's write-out of its head's entry that lands after the topic was deleted
/// and purged, its answer lost, is removed again when the commit fails: nothing of the
/// deleted topic is left for no purge to visit (the fault simulation's seed 63).
pub async fn given_a_write_out_landing_after_the_purge_with_its_answer_lost_then_nothing_is_left(
    backend: &dyn Backend,
) {
    let (store, objects) = backend.open().await;
    let script = Scripted::new(store.clone());
    let stale = single_write_log((script.clone(), objects));
    let admin = transaction_log(backend.open().await);
    let topic = unique_topic("late-write-out");
    let (config, _) = stale.create_topic(&topic, spec(1)).await.unwrap();
    // The head now carries "a"'s entry: the next commit writes it out first.
    stale.publish(&topic, vec![event("a", 0)], None).await.unwrap();
    let rival = {
        let (admin, topic, store) = (admin.clone(), topic.clone(), store.clone());
        Box::pin(async move {
            admin.delete_topic(&topic).await.unwrap();
            let own = crate::OwnPurges::new(store.clone(), &[config.id], &[]);
            for _ in 0..100 {
                if store.get(&sluice_core::keys::purge_key(config.id)).await.unwrap().is_none() {
                    break;
                }
                crate::janitor_step(&own, 1_000, 0).await;
            }
            assert!(store.get(&sluice_core::keys::purge_key(config.id)).await.unwrap().is_none(), "purged");
        })
    };
    let segments = sluice_core::keys::segments_pk(config.id, 0);
    let write_out = move |ops: &[WriteOp]| ops.iter().any(|op| op.key().pk == segments);
    script.at(write_out, Action::LoseAnswerBefore(rival));
    let late = stale.publish(&topic, vec![event("b", 0)], None).await;
    assert_eq!(script.pending(), 0, "the purge ran before the write-out landed");
    assert!(matches!(late, Err(Error::TopicNotFound(_))), "{late:?}");
    let left = store.query(&Query::all(sluice_core::keys::segments_pk(config.id, 0), 10)).await.unwrap();
    assert_eq!(left.items, vec![], "the late write-out was removed again");
}

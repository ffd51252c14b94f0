//! Publishing through injected storage faults: lost answers, failures, throttling.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sluice_core::ports::state::WriteOp;
use sluice_core::{Error, IdempotencyKey, Log, Position, SystemClock};

use super::fixtures::*;
use crate::cases::support::faults::Fault;
use crate::cases::support::faults::{Action, Scripted};
use crate::{unique_topic, Backend};

/// Whether a write is a commit (it indexes a segment).
fn is_commit(ops: &[WriteOp]) -> bool {
    ops.iter().any(|op| op.key().pk.starts_with(sluice_core::keys::SEGMENTS_PREFIX))
}

/// A log whose commits meet `faults`, in order, beside a clean log on the same storage;
/// with the count of commit writes it attempts, faulty ones included.
async fn faulty_log(backend: &dyn Backend, faults: &[Fault]) -> (Log, Arc<AtomicUsize>, Log) {
    let (store, objects) = backend.open().await;
    let script = Scripted::new(store);
    let commits = script.count(is_commit);
    for fault in faults {
        script.at(is_commit, Action::Fault(*fault));
    }
    let log = Log::new(script, objects, Arc::new(SystemClock), crate::log_config());
    (log, commits, log_on(backend.open().await))
}

pub async fn given_commit_applied_but_answer_lost_when_publish_then_answered_once_and_written_once(
    backend: &dyn Backend,
) {
    let (log, faulty, clean) = faulty_log(backend, &[Fault::LoseAnswer]).await;
    let topic = unique_topic("lost");
    clean.create_topic(&topic, spec(1)).await.unwrap();
    let acked = log.publish(&topic, vec![event("a", 0), event("b", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }, Position { partition: 0, offset: 1 }]);
    assert_eq!(faulty.load(Ordering::SeqCst), 1, "resolved by reading back, not by writing again");
    let acked = log.publish(&topic, vec![event("c", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 2 }]);
    let read = values(&read_all(&clean, &topic, 0).await.unwrap());
    assert_eq!(read, vec![(0, "a".into()), (1, "b".into()), (2, "c".into())], "nothing written twice");
}

pub async fn given_commit_failed_and_answer_lost_when_publish_then_retried_and_written_once(backend: &dyn Backend) {
    let (log, faulty, clean) = faulty_log(backend, &[Fault::FailBefore]).await;
    let topic = unique_topic("unknown");
    clean.create_topic(&topic, spec(1)).await.unwrap();
    let acked = log.publish(&topic, vec![event("a", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }]);
    assert_eq!(faulty.load(Ordering::SeqCst), 2, "read back, found missing, written again");
    assert_eq!(values(&read_all(&clean, &topic, 0).await.unwrap()), vec![(0, "a".into())]);
}

pub async fn given_storage_down_when_publish_then_error_nothing_visible_and_keyed_retry_succeeds_once(
    backend: &dyn Backend,
) {
    let (log, _, clean) = faulty_log(backend, &[Fault::FailBefore; 3]).await;
    let topic = unique_topic("down");
    clean.create_topic(&topic, spec(1)).await.unwrap();
    let key = || Some(IdempotencyKey { key: "retry-me".into(), fingerprint: vec![9; 32] });
    let events = || vec![event("a", 0), event("b", 0)];
    let failed = log.publish(&topic, events(), key()).await;
    assert!(matches!(failed, Err(Error::Unavailable(_))), "{failed:?}");
    assert_eq!(read_all(&clean, &topic, 0).await.unwrap(), vec![], "nothing visible");

    // The client retries with the same key, then once more (say its ack was lost).
    let first = log.publish(&topic, events(), key()).await.unwrap();
    let again = clean.publish(&topic, events(), key()).await.unwrap();
    let expected = vec![Position { partition: 0, offset: 0 }, Position { partition: 0, offset: 1 }];
    assert_eq!((first, again), (expected.clone(), expected));
    assert_eq!(values(&read_all(&clean, &topic, 0).await.unwrap()), vec![(0, "a".into()), (1, "b".into())]);
}

pub async fn given_throttling_and_conflicts_when_publish_then_retried_and_acknowledged(backend: &dyn Backend) {
    let (log, faulty, clean) = faulty_log(backend, &[Fault::Throttle; 4]).await;
    let topic = unique_topic("throttled");
    clean.create_topic(&topic, spec(1)).await.unwrap();
    let acked = log.publish(&topic, vec![event("a", 0)], None).await.unwrap();
    assert_eq!(acked, vec![Position { partition: 0, offset: 0 }]);
    assert_eq!(faulty.load(Ordering::SeqCst), 5);
    assert_eq!(values(&read_all(&clean, &topic, 0).await.unwrap()), vec![(0, "a".into())]);
}

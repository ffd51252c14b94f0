//! Helpers the lost-answer cases share.

use std::sync::Arc;

use bytes::Bytes;
use sluice_core::{Clock, Error, Log, NewEvent, ReadRequest};
use sluice_testkit::Layered;

use crate::cases::support::faults::Scripted;
use crate::Backend;

pub(super) const HOUR: i64 = 3600 * 1000;

/// The answer a lost answer gets: `Unavailable` (the outcome unknown), never a success or another error.
pub(super) fn assert_unknown<T: std::fmt::Debug>(answer: Result<T, Error>, what: &str) {
    assert!(matches!(answer, Err(Error::Unavailable(_))), "{what}: a lost answer is unavailable, got {answer:?}");
}

pub(super) fn event(value: &str, partition: u32, timestamp_ms: Option<i64>) -> NewEvent {
    NewEvent {
        key: None,
        headers: vec![("h".into(), Bytes::from_static(b"x"))],
        value: Bytes::from(value.to_owned()),
        value_is_json: false,
        timestamp_ms,
        partition: Some(partition),
    }
}

/// Every event of a partition from `offset` to the end, page by page, as (offset, value).
pub(super) async fn replay(log: &Log, topic: &str, partition: u32, mut offset: u64) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    loop {
        let req = ReadRequest {
            topic: topic.to_owned(),
            partition,
            offset,
            max_events: 10_000,
            max_bytes: 6 << 20,
            wait_ms: 0,
        };
        let batch = log.read(&req).await.expect("replay");
        if batch.events.is_empty() {
            return out;
        }
        for e in batch.events {
            assert_eq!(e.offset, offset, "offsets come densely");
            out.push((e.offset, String::from_utf8_lossy(&e.record.value).into_owned()));
            offset += 1;
        }
    }
}

pub(super) fn expected(from: u64, values: &[&str]) -> Vec<(u64, String)> {
    values.iter().enumerate().map(|(i, v)| (from + i as u64, (*v).to_owned())).collect()
}

/// A log on `backend`'s storage whose writes meet `script`'s rules, beside the script.
pub(super) async fn scripted_log(backend: &dyn Backend, clock: Arc<dyn Clock>) -> (Arc<Layered<Scripted>>, Log) {
    let (store, objects) = backend.open_with(clock.clone()).await;
    let script = Scripted::new(store);
    (script.clone(), Log::new(script, objects, clock, crate::log_config()))
}

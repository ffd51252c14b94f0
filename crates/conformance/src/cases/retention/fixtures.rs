//! Helpers the retention cases share: logs and janitors on a manual clock, replays.

use std::sync::Arc;

use bytes::Bytes;
use sluice_core::upkeep::{Janitor, JanitorConfig};
use sluice_core::{Clock, Error, Log, ManualClock, NewEvent, ReadRequest, SystemClock};

use crate::Stores;

pub(super) const HOUR: i64 = 3600 * 1000;

/// A janitor works on every topic and object of its backend, so cases that run one take
/// turns: on a shared backend (one moto server) one case's janitor would otherwise compact or
/// collect under another case's expectations. (Other suites share no moto server with these.)
pub(super) static ONE_JANITOR_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The clock starts at the real time, so object stores' own timestamps (file times,
/// S3's LastModified) and the collector's judgement of age agree.
pub(super) fn real_now() -> i64 {
    SystemClock.now_ms()
}

pub(super) fn log_at(stores: Stores, clock: &Arc<ManualClock>) -> Log {
    Log::new(stores.0, stores.1, clock.clone(), crate::log_config())
}

/// [`log_at`] with every segment in a blob: for the cases about objects.
pub(super) fn blobs_log_at(stores: Stores, clock: &Arc<ManualClock>) -> Log {
    Log::new(stores.0, stores.1, clock.clone(), crate::blobs_only())
}

pub(super) fn janitor(stores: &Stores, clock: &Arc<ManualClock>, config: JanitorConfig) -> Janitor {
    Janitor::new(stores.0.clone(), stores.1.clone(), clock.clone(), config)
}

pub(super) fn event(value: impl Into<Bytes>, partition: u32, timestamp_ms: Option<i64>) -> NewEvent {
    NewEvent {
        key: None,
        headers: vec![("h".into(), Bytes::from_static(b"x"))],
        value: value.into(),
        value_is_json: false,
        timestamp_ms,
        partition: Some(partition),
    }
}

pub(super) fn request(topic: &str, partition: u32, offset: u64) -> ReadRequest {
    ReadRequest { topic: topic.to_owned(), partition, offset, max_events: 10_000, max_bytes: 6 << 20, wait_ms: 0 }
}

/// Every event of a partition from `offset` to the end, page by page.
pub(super) async fn replay(
    log: &Log,
    topic: &str,
    partition: u32,
    mut offset: u64,
) -> Result<Vec<(u64, Bytes)>, Error> {
    let mut out = Vec::new();
    loop {
        let batch = log.read(&request(topic, partition, offset)).await?;
        if batch.events.is_empty() {
            return Ok(out);
        }
        for e in batch.events {
            assert_eq!(e.offset, offset, "offsets come densely");
            out.push((e.offset, e.record.value));
            offset += 1;
        }
    }
}

/// No compaction: a target below any segment.
pub(super) fn retention_only() -> JanitorConfig {
    JanitorConfig { compaction_target_bytes: 1, grace_ms: 0, ..JanitorConfig::default() }
}

/// Compaction to `target_bytes` in the default parts, not settling, unpaced.
pub(super) fn rewriting(target_bytes: u64) -> sluice_core::upkeep::compaction::Rewriting<'static> {
    sluice_core::upkeep::compaction::Rewriting {
        target_bytes,
        part_bytes: sluice_core::segment::PART_BYTES,
        settle: false,
        pacer: None,
    }
}

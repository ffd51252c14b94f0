//! Helpers the log cases share: topic specs, events, logs on a backend, replays.

use std::sync::Arc;

use std::time::Duration;

use bytes::Bytes;
use sluice_core::{Error, Log, LogConfig, NewEvent, ReadRequest, SystemClock, TopicSpec};

use crate::Stores;

pub(super) fn spec(partitions: u32) -> TopicSpec {
    TopicSpec { partitions, retention_ms: None, retention_bytes: None }
}

pub(super) fn event(value: &str, partition: u32) -> NewEvent {
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: Bytes::from(value.to_owned()),
        value_is_json: false,
        timestamp_ms: None,
        partition: Some(partition),
    }
}

/// A log on `stores` that trusts its topic cache for ten minutes: a warm, stale process.
pub(super) fn warm_log((store, objects): Stores) -> Log {
    let config = LogConfig { topic_cache_ttl: Duration::from_secs(600), ..crate::log_config() };
    Log::new(store, objects, Arc::new(SystemClock), config)
}

pub(super) fn log_on((store, objects): Stores) -> Log {
    Log::new(store, objects, Arc::new(SystemClock), crate::log_config())
}

pub async fn read_all(log: &Log, topic: &str, partition: u32) -> Result<Vec<(u64, Bytes)>, Error> {
    let request = ReadRequest {
        topic: topic.to_owned(),
        partition,
        offset: 0,
        max_events: 10_000,
        max_bytes: 6 << 20,
        wait_ms: 0,
    };
    let batch = log.read(&request).await?;
    Ok(batch.events.into_iter().map(|e| (e.offset, e.record.value)).collect())
}

pub fn values(events: &[(u64, Bytes)]) -> Vec<(u64, String)> {
    events.iter().map(|(o, v)| (*o, String::from_utf8_lossy(v).into_owned())).collect()
}

//! The embedded backend's data directory under a bounded topic, as `serve` runs it: a log
//! publishing, the janitor running a round between bursts on a manual clock, and the
//! directory's size measured (`tests/disk_retention.rs`, `tests/soak.rs`).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::upkeep::{Janitor, JanitorConfig, UpkeepReport, STEP_BUDGET};
use sluice_core::{Clock, Log, LogConfig, ManualClock, NewEvent, PartitionState, SystemClock, TopicSpec};
use tempfile::TempDir;

/// `serve`'s janitor interval.
pub const INTERVAL_MS: i64 = 60_000;

/// A topic of `partitions` partitions keeping `bound_per_partition` bytes each, in a data
/// directory of its own.
pub struct DiskRun {
    pub dir: TempDir,
    pub clock: Arc<ManualClock>,
    pub log: Log,
    pub janitor: Janitor,
    pub topic: &'static str,
    /// What the bounds keep, over every partition.
    pub bound: u64,
    /// The most the data directory held when measured between bursts.
    pub largest: u64,
    /// What the janitor's rounds did.
    pub upkeep: UpkeepReport,
}

impl DiskRun {
    /// Opens the directory and creates the topic; the janitor as `serve` runs it
    /// (`sluice_runtime::janitor`: a blob file per blob it writes, commits' segments settled).
    pub async fn open(topic: &'static str, partitions: u32, bound_per_partition: u64, grace_ms: i64) -> DiskRun {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
        let (store, objects) = sluice_local::open(dir.path(), clock.clone()).unwrap();
        let log = Log::new(store.clone(), objects, clock.clone(), LogConfig::default());
        let own: Arc<dyn sluice_core::ObjectStore> = Arc::new(sluice_local::open_upkeep_objects(dir.path()).unwrap());
        let config = JanitorConfig { grace_ms, settle_commit_segments: true, ..JanitorConfig::default() };
        let janitor = Janitor::new(store, own, clock.clone(), config);
        let spec = TopicSpec { partitions, retention_ms: None, retention_bytes: Some(bound_per_partition as i64) };
        log.create_topic(topic, spec).await.unwrap();
        let bound = bound_per_partition * u64::from(partitions);
        DiskRun { dir, clock, log, janitor, topic, bound, largest: 0, upkeep: UpkeepReport::default() }
    }

    /// Publishes `total` bytes in batches of `batch` events of `value_len` bytes, with a
    /// janitor round (one interval later) after every `burst` bytes, the directory measured
    /// before and after each.
    pub async fn publish(&mut self, total: u64, value_len: usize, batch: usize, burst: u64) {
        let value = Bytes::from(vec![b'd'; value_len]);
        let (mut published, mut since_upkeep) = (0u64, 0u64);
        while published < total {
            let events = (0..batch).map(|_| event(&value)).collect();
            self.log.publish(self.topic, events, None).await.unwrap();
            published += (batch * value_len) as u64;
            since_upkeep += (batch * value_len) as u64;
            if since_upkeep >= burst {
                self.measure();
                self.round(INTERVAL_MS).await;
                self.measure();
                since_upkeep = 0;
            }
        }
        self.measure();
    }

    /// A janitor round `after_ms` later.
    pub async fn round(&mut self, after_ms: i64) {
        self.clock.advance(after_ms);
        self.upkeep.add(&self.janitor.run(STEP_BUDGET).await.unwrap());
    }

    /// The data directory's size now, kept in `largest` if it is the most yet.
    pub fn measure(&mut self) -> u64 {
        let now = dir_bytes(self.dir.path());
        self.largest = self.largest.max(now);
        now
    }

    /// The topic's partitions as describe shows them.
    pub async fn partitions(&self) -> Vec<PartitionState> {
        self.log.describe_topic(self.topic).await.unwrap().1
    }
}

/// The bytes of every file below `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() { dir_bytes(&entry.path()) } else { meta.len() };
    }
    total
}

fn event(value: &Bytes) -> NewEvent {
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: value.clone(),
        value_is_json: false,
        timestamp_ms: None,
        partition: None,
    }
}

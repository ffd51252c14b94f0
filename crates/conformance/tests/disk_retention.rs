//! Disk that follows retention, on the embedded backend: 160 MiB published into a topic
//! whose partitions each keep 4 MiB, the janitor running a round after every 16 MiB (as
//! `serve`'s background task does every minute), then publishing stops. One round later,
//! and one more once the collector's grace period has passed, the data directory must be
//! within twice what the bounds keep. Prints its figures (`cargo test -p
//! sluice-conformance --test disk_retention -- --nocapture`); docs/PERFORMANCE.md has them.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::upkeep::{Janitor, JanitorConfig, UpkeepReport, STEP_BUDGET};
use sluice_core::{Clock, Log, LogConfig, ManualClock, NewEvent, SystemClock, TopicSpec};

const PARTITIONS: u32 = 4;
const BOUND_PER_PARTITION: u64 = 4 << 20;
const TOTAL: u64 = 160 << 20;
const VALUE: usize = 2 << 10;
const BATCH: usize = 64;
/// Bytes published between janitor rounds.
const BURST: u64 = 16 << 20;
/// `serve`'s janitor interval.
const INTERVAL_MS: i64 = 60_000;

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() { dir_bytes(&entry.path()) } else { meta.len() };
    }
    total
}

fn batch(value: &Bytes) -> Vec<NewEvent> {
    let event = |_| NewEvent {
        key: None,
        headers: Vec::new(),
        value: value.clone(),
        value_is_json: false,
        timestamp_ms: None,
        partition: None,
    };
    (0..BATCH).map(event).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_retention_the_data_dir_is_within_twice_the_bounds_one_round_past_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let (store, objects) = sluice_local::open(dir.path(), clock.clone()).unwrap();
    let log = Log::new(store.clone(), objects.clone(), clock.clone(), LogConfig::default());
    // As `serve` runs it (`sluice_runtime::janitor`).
    let own: Arc<dyn sluice_core::ObjectStore> = Arc::new(sluice_local::open_upkeep_objects(dir.path()).unwrap());
    let config = JanitorConfig { settle_commit_segments: true, ..JanitorConfig::default() };
    let grace_ms = config.grace_ms;
    let janitor = Janitor::new(store, own, clock.clone(), config);
    let spec =
        TopicSpec { partitions: PARTITIONS, retention_ms: None, retention_bytes: Some(BOUND_PER_PARTITION as i64) };
    log.create_topic("disk", spec).await.unwrap();
    let bound = BOUND_PER_PARTITION * u64::from(PARTITIONS);
    let value = Bytes::from(vec![b'd'; VALUE]);
    let (mut published, mut since_upkeep, mut largest) = (0u64, 0u64, 0u64);
    let mut upkeep = UpkeepReport::default();
    while published < TOTAL {
        log.publish("disk", batch(&value), None).await.unwrap();
        published += (BATCH * VALUE) as u64;
        since_upkeep += (BATCH * VALUE) as u64;
        if since_upkeep >= BURST {
            largest = largest.max(dir_bytes(dir.path()));
            clock.advance(INTERVAL_MS);
            upkeep.add(&janitor.run(STEP_BUDGET).await.unwrap());
            since_upkeep = 0;
        }
    }
    largest = largest.max(dir_bytes(dir.path()));
    // Publishing stops: the next round, then one past the grace period of what it freed.
    clock.advance(INTERVAL_MS);
    upkeep.add(&janitor.run(STEP_BUDGET).await.unwrap());
    let after_round = dir_bytes(dir.path());
    clock.advance(grace_ms + INTERVAL_MS);
    upkeep.add(&janitor.run(STEP_BUDGET).await.unwrap());
    let end = dir_bytes(dir.path());
    let (_, states) = log.describe_topic("disk").await.unwrap();
    let held: u64 = states.iter().map(|s| s.bytes).sum();
    let files = std::fs::read_dir(dir.path().join("objects")).unwrap().count();
    let blobs = dir_bytes(&dir.path().join("objects"));
    println!(
        "disk: published {} MiB; bound {} MiB ({} MiB per partition); partitions hold {:.1} MiB; data dir \
         largest {:.1} MiB, a round after publishing {:.1} MiB, past the grace {:.1} MiB ({:.2} × the bound; \
         blob files {:.1} MiB in {files}); {upkeep:?}",
        published >> 20,
        bound >> 20,
        BOUND_PER_PARTITION >> 20,
        held as f64 / 1048576.0,
        largest as f64 / 1048576.0,
        after_round as f64 / 1048576.0,
        end as f64 / 1048576.0,
        end as f64 / bound as f64,
        blobs as f64 / 1048576.0,
    );
    for s in &states {
        assert!(s.bytes <= BOUND_PER_PARTITION, "partition {} holds {} bytes", s.partition, s.bytes);
    }
    assert!(end <= 2 * bound, "the data directory holds {end} bytes; twice the bound is {}", 2 * bound);
}

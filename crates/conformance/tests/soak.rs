//! A soak on the embedded backend: 1 GiB published into a topic whose partitions each
//! keep 64 MiB, with the janitor running between bursts (as `serve`'s background task
//! does every minute). The data directory must stay under twice the total bound.
//! Prints its figures (`cargo test --test soak -- --nocapture`); docs/PERFORMANCE.md has them.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sluice_core::upkeep::{Janitor, JanitorConfig, UpkeepReport, STEP_BUDGET};
use sluice_core::{Clock, Log, LogConfig, ManualClock, NewEvent, SystemClock, TopicSpec};

const PARTITIONS: u32 = 4;
const BOUND_PER_PARTITION: u64 = 64 << 20;
const TOTAL: u64 = 1 << 30;
const VALUE: usize = 8 << 10;
const BATCH: usize = 64;
/// Bytes published between janitor rounds.
const BURST: u64 = 32 << 20;

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() { dir_bytes(&entry.path()) } else { meta.len() };
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_1_gib_with_64_mib_retention_per_partition_keeps_the_data_dir_under_twice_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let (store, objects) = sluice_local::open(dir.path(), clock.clone()).unwrap();
    let log = Log::new(store.clone(), objects.clone(), clock.clone(), LogConfig::default());
    // As `serve` runs it (`sluice_runtime::janitor`): a blob file per blob it writes, commits'
    // segments settled.
    let own: Arc<dyn sluice_core::ObjectStore> = Arc::new(sluice_local::open_upkeep_objects(dir.path()).unwrap());
    let config = JanitorConfig { grace_ms: 0, settle_commit_segments: true, ..JanitorConfig::default() };
    let janitor = Janitor::new(store, own, clock.clone(), config);
    let spec =
        TopicSpec { partitions: PARTITIONS, retention_ms: None, retention_bytes: Some(BOUND_PER_PARTITION as i64) };
    log.create_topic("soak", spec).await.unwrap();
    let bound = BOUND_PER_PARTITION * u64::from(PARTITIONS);
    let value = Bytes::from(vec![b's'; VALUE]);
    let (mut published, mut since_upkeep, mut largest) = (0u64, 0u64, 0u64);
    let mut upkeep = UpkeepReport::default();
    let started = Instant::now();
    while published < TOTAL {
        let events = (0..BATCH)
            .map(|_| NewEvent {
                key: None,
                headers: Vec::new(),
                value: value.clone(),
                value_is_json: false,
                timestamp_ms: None,
                partition: None,
            })
            .collect();
        log.publish("soak", events, None).await.unwrap();
        published += (BATCH * VALUE) as u64;
        since_upkeep += (BATCH * VALUE) as u64;
        if since_upkeep >= BURST {
            largest = largest.max(dir_bytes(dir.path()));
            clock.advance(60_000);
            upkeep.add(&janitor.run(STEP_BUDGET).await.unwrap());
            since_upkeep = 0;
            largest = largest.max(dir_bytes(dir.path()));
        }
    }
    let elapsed = started.elapsed();
    let (_, states) = log.describe_topic("soak").await.unwrap();
    let held: u64 = states.iter().map(|s| s.bytes).sum();
    let end = dir_bytes(dir.path());
    println!(
        "soak: published {} MiB in {:.1} s; bound {} MiB ({} MiB per partition); partitions hold {} MiB; \
         data dir largest {} MiB, at the end {} MiB; {upkeep:?}",
        published >> 20,
        elapsed.as_secs_f64(),
        bound >> 20,
        BOUND_PER_PARTITION >> 20,
        held >> 20,
        largest >> 20,
        end >> 20,
    );
    for s in &states {
        assert!(s.bytes <= BOUND_PER_PARTITION, "partition {} holds {} bytes", s.partition, s.bytes);
    }
    assert!(largest < 2 * bound, "the data directory reached {largest} bytes; twice the bound is {}", 2 * bound);
}

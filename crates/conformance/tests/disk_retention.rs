//! Disk that follows retention, on the embedded backend: 160 MiB published into a topic
//! whose partitions each keep 4 MiB, the janitor running a round after every 16 MiB (as
//! `serve`'s background task does every minute), then publishing stops. One round later,
//! and one more once the collector's grace period has passed, the data directory must be
//! within twice what the bounds keep. Prints its figures (`cargo test -p
//! sluice-conformance --test disk_retention -- --nocapture`); docs/PERFORMANCE.md has them.

use sluice_conformance::disk::{dir_bytes, DiskRun, INTERVAL_MS};

const PARTITIONS: u32 = 4;
const BOUND_PER_PARTITION: u64 = 4 << 20;
const TOTAL: u64 = 160 << 20;
const VALUE: usize = 2 << 10;
const BATCH: usize = 64;
/// Bytes published between janitor rounds.
const BURST: u64 = 16 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_retention_the_data_dir_is_within_twice_the_bounds_one_round_past_the_grace() {
    let grace_ms = sluice_core::upkeep::JanitorConfig::default().grace_ms;
    let mut run = DiskRun::open("disk", PARTITIONS, BOUND_PER_PARTITION, grace_ms).await;
    run.publish(TOTAL, VALUE, BATCH, BURST).await;
    // Publishing stops: the next round, then one past the grace period of what it freed.
    run.round(INTERVAL_MS).await;
    let after_round = run.measure();
    run.round(grace_ms + INTERVAL_MS).await;
    let end = run.measure();
    let states = run.partitions().await;
    let held: u64 = states.iter().map(|s| s.bytes).sum();
    let objects = run.dir.path().join("objects");
    let (files, blobs) = (std::fs::read_dir(&objects).unwrap().count(), dir_bytes(&objects));
    let (bound, upkeep) = (run.bound, &run.upkeep);
    println!(
        "disk: published {} MiB; bound {} MiB ({} MiB per partition); partitions hold {:.1} MiB; data dir \
         largest {:.1} MiB, a round after publishing {:.1} MiB, past the grace {:.1} MiB ({:.2} × the bound; \
         blob files {:.1} MiB in {files}); {upkeep:?}",
        TOTAL >> 20,
        bound >> 20,
        BOUND_PER_PARTITION >> 20,
        held as f64 / 1048576.0,
        run.largest as f64 / 1048576.0,
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

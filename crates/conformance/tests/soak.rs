//! A soak on the embedded backend: 1 GiB published into a topic whose partitions each
//! keep 64 MiB, with the janitor running between bursts (as `serve`'s background task
//! does every minute). The data directory must stay under twice the total bound.
//! Prints its figures (`cargo test --test soak -- --nocapture`); docs/PERFORMANCE.md has them.

use std::time::Instant;

use sluice_conformance::disk::DiskRun;

const PARTITIONS: u32 = 4;
const BOUND_PER_PARTITION: u64 = 64 << 20;
const TOTAL: u64 = 1 << 30;
const VALUE: usize = 8 << 10;
const BATCH: usize = 64;
/// Bytes published between janitor rounds.
const BURST: u64 = 32 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_1_gib_with_64_mib_retention_per_partition_keeps_the_data_dir_under_twice_the_bound() {
    let mut run = DiskRun::open("soak", PARTITIONS, BOUND_PER_PARTITION, 0).await;
    let started = Instant::now();
    run.publish(TOTAL, VALUE, BATCH, BURST).await;
    let elapsed = started.elapsed();
    let states = run.partitions().await;
    let held: u64 = states.iter().map(|s| s.bytes).sum();
    let (end, largest, bound, upkeep) = (run.measure(), run.largest, run.bound, &run.upkeep);
    println!(
        "soak: published {} MiB in {:.1} s; bound {} MiB ({} MiB per partition); partitions hold {} MiB; \
         data dir largest {} MiB, at the end {} MiB; {upkeep:?}",
        TOTAL >> 20,
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

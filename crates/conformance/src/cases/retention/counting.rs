//! The partition's byte count (what size retention goes by) under retention racing a
//! compaction of the segments it removes.

use std::sync::Arc;

use sluice_core::upkeep::{compaction, retention, JanitorConfig, STEP_BUDGET};
use sluice_core::{keys, ManualClock, TopicSpec};

use super::fixtures::*;
use crate::cases::support::entries::entries;
use crate::cases::support::faults::{puts_at, Action, Scripted};
use crate::{unique_topic, Backend};

/// Retention reads a partition and takes its oldest segment; before its write lands, a
/// compaction that read the same partition merges that segment with the next one, which
/// retention keeps. The merged item must not straddle the new log start: taken off whole
/// later, its part below the start would come off the count a second time, and size
/// retention would then keep more than its bound.
pub async fn given_a_merge_racing_retention_then_the_byte_count_stays_what_the_segments_hold(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("raced");
    let spec = TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None };
    log.create_topic(&topic, spec).await.unwrap();
    // Offset 0, two hours old and larger, goes; 1 and 2 are fresh and stay.
    for (value, at) in [("x".repeat(300), t0 - 2 * HOUR), ("y".into(), t0), ("z".into(), t0)] {
        log.publish(&topic, vec![event(value, 0, Some(at))], None).await.unwrap();
    }
    let config = log.describe_topic(&topic).await.unwrap().0;
    let merge = {
        let (state, objects, config) = (stores.0.clone(), stores.1.clone(), config.clone());
        Box::pin(async move {
            let sizes = (8 << 20, sluice_core::segment::PART_BYTES);
            let done = compaction::compact(state.as_ref(), objects.as_ref(), &config, 0, t0, sizes, false).await;
            assert_eq!(done.unwrap().segments_written, 1, "the rival merged 0..2");
        })
    };
    let raced = Scripted::new(stores.0.clone());
    let head_pk = keys::head_key(config.id, 0).pk;
    raced.at(move |ops| puts_at(ops, &head_pk, ""), Action::Before(merge));
    let default_ms = JanitorConfig::default().default_retention_ms;
    retention::retain(raced.as_ref(), &config, 0, t0, default_ms).await.unwrap();
    assert_eq!(raced.pending(), 0, "the merge landed between retention's read and its write");
    let start = log.describe_topic(&topic).await.unwrap().1[0].log_start_offset;
    for (base, record) in entries(stores.0.as_ref(), config.id, 0).await {
        assert!(base >= start || record.next <= start, "{base}..{} straddles the log start {start}", record.next);
    }
    // Later the merged segment and 2 expire too, and a fresh event stays.
    clock.set(t0 + 2 * HOUR);
    log.publish(&topic, vec![event("fresh", 0, Some(t0 + 2 * HOUR))], None).await.unwrap();
    janitor(&stores, &clock, retention_only()).run(STEP_BUDGET).await.unwrap();
    let (_, states) = log.describe_topic(&topic).await.unwrap();
    assert_eq!(states[0].log_start_offset, 3, "all but the fresh event expired");
    let held: u64 = entries(stores.0.as_ref(), config.id, 0)
        .await
        .iter()
        .filter(|(_, r)| r.next > 3)
        .map(|(_, r)| r.counted_bytes())
        .sum();
    assert!(held > 0);
    assert_eq!(states[0].bytes, held, "the partition's count is what its segments hold");
}

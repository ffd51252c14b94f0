//! The partition's byte count (what size retention goes by) under retention racing a
//! compaction of the segments it removes.

use std::sync::Arc;

use tokio::sync::Notify;

use sluice_core::ports::state::WriteOp;
use sluice_core::upkeep::{compaction, retention, JanitorConfig, STEP_BUDGET};
use sluice_core::{keys, Log, LogConfig, ManualClock, TopicSpec};

use super::fixtures::*;
use crate::cases::support::entries::entries;
use crate::cases::support::faults::{puts_at, Action, QueryAction, Scripted};
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
            let how = rewriting(8 << 20);
            let done = compaction::compact(state.as_ref(), objects.as_ref(), &config, 0, t0, how).await;
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
    assert_count_exact_once_all_but_one_expired(&log, &stores, &clock, &topic, (config.id, t0)).await;
}

/// Retention takes a segment of two events (offsets b + 1 and b + 2, after b + 1 larger
/// segments of one, b = `before`) that holds a stale committer's write-out of its last event
/// (another item, ending where it ends). A compaction that read the head before retention's
/// write, and the index after it (before retention's other removals), must not find that
/// write-out alone and merge it with the next segment across the new log start. With `before`
/// 0 the write-out is on retention's page, which must remove it in the head's write; with
/// `before` 98 the segment is the last item of a full page and the write-out on the next
/// page, so retention must leave that segment to its next step. Late, the write-out lands
/// after retention's head write (a create of a key nobody holds) and before the compaction's
/// query: that compaction must read the log start again after its query.
pub async fn given_a_write_out_inside_the_last_segment_retention_takes_then_no_merge_crosses_the_start(
    backend: &dyn Backend,
) {
    for (before, late) in [(0, false), (98, false), (0, true)] {
        write_out_inside_the_last_segment_taken(backend, before, late).await;
    }
}

async fn write_out_inside_the_last_segment_taken(backend: &dyn Backend, before: u64, late: bool) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = Log::new(
        stores.0.clone(),
        stores.1.clone(),
        clock.clone(),
        LogConfig { inline_segment_bytes: 4 << 10, ..crate::log_config() },
    );
    let spec = TopicSpec { partitions: 1, retention_ms: Some(HOUR), retention_bytes: None };
    let (topic, donor) = (unique_topic("inside"), unique_topic("donor"));
    log.create_topic(&topic, spec).await.unwrap();
    log.create_topic(&donor, spec).await.unwrap();
    let old = Some(t0 - 2 * HOUR);
    // `before` + 1 old segments of one event (too large to merge), one old segment of two, then two fresh ones.
    for _ in 0..=before {
        log.publish(&topic, vec![event("o".repeat(2000), 0, old)], None).await.unwrap();
    }
    log.publish(&topic, vec![event("m", 0, old), event("n", 0, old)], None).await.unwrap();
    for v in ["f", "g"] {
        log.publish(&topic, vec![event(v, 0, Some(t0))], None).await.unwrap();
    }
    // The write-out of offset `before` + 2 alone: a one-event segment item there, as a stale
    // committer writes it (the donor's, at the same offset).
    let at = before + 2;
    for _ in 0..at + 2 {
        log.publish(&donor, vec![event("n", 0, old)], None).await.unwrap();
    }
    let donor_id = log.describe_topic(&donor).await.unwrap().0.id;
    let config = log.describe_topic(&topic).await.unwrap().0;
    let item = stores.0.get(&keys::segment_key(donor_id, 0, at)).await.unwrap().expect("the donor's item");
    let write_out = WriteOp::create(keys::segment_key(config.id, 0, at), item.value);
    let late = if late {
        Some(write_out)
    } else {
        stores.0.write(vec![write_out]).await.unwrap();
        None
    };
    race_retention_into_a_compaction(&stores, &config, t0, late).await;
    let start = log.describe_topic(&topic).await.unwrap().1[0].log_start_offset;
    for (base, record) in entries(stores.0.as_ref(), config.id, 0).await {
        assert!(base >= start || record.next <= start, "{base}..{} straddles the log start {start}", record.next);
    }
    assert_count_exact_once_all_but_one_expired(&log, &stores, &clock, &topic, (config.id, t0)).await;
}

/// A compaction reads the partition's head; retention then runs up to its head's write (after
/// which `late`, a write-out, lands); the compaction reads the index and does what it does;
/// then retention goes on.
async fn race_retention_into_a_compaction(
    stores: &crate::Stores,
    config: &sluice_core::TopicConfig,
    t0: i64,
    late: Option<WriteOp>,
) {
    let (read, written, compacted) = (Arc::new(Notify::new()), Arc::new(Notify::new()), Arc::new(Notify::new()));
    let for_retention = Scripted::new(stores.0.clone());
    let head_pk = keys::head_key(config.id, 0).pk;
    let (w, c, state) = (written.clone(), compacted.clone(), stores.0.clone());
    let pause = Box::pin(async move {
        if let Some(write_out) = late {
            state.write(vec![write_out]).await.unwrap();
        }
        w.notify_one();
        c.notified().await;
    });
    for_retention.at(move |ops| puts_at(ops, &head_pk, ""), Action::After(pause));
    let for_compaction = Scripted::new(stores.0.clone());
    let (r, w) = (read.clone(), written.clone());
    // At its query, the compaction has read the head: retention starts only then.
    let at_query = Box::pin(async move {
        r.notify_one();
        w.notified().await
    });
    for_compaction.at_query(keys::segments_pk(config.id, 0), QueryAction::Before(at_query));
    let default_ms = JanitorConfig::default().default_retention_ms;
    let how = rewriting(2 << 10);
    let retention = async {
        read.notified().await;
        retention::retain(for_retention.as_ref(), config, 0, t0, default_ms).await
    };
    let compaction = async {
        compaction::compact(for_compaction.as_ref(), stores.1.as_ref(), config, 0, t0, how).await.unwrap();
        compacted.notify_one();
    };
    let (retained, ()) = tokio::join!(retention, compaction);
    retained.unwrap();
    assert_eq!((for_retention.pending(), for_compaction.pending()), (0, 0), "the compaction read the index between");
}

/// Publishes one fresh event two hours after `t0`, lets retention take everything before it,
/// and checks the partition's count is what its segments hold.
async fn assert_count_exact_once_all_but_one_expired(
    log: &Log,
    stores: &crate::Stores,
    clock: &Arc<ManualClock>,
    topic: &str,
    (id, t0): (u64, i64),
) {
    clock.set(t0 + 2 * HOUR);
    let fresh = log.publish(topic, vec![event("fresh", 0, Some(t0 + 2 * HOUR))], None).await.unwrap()[0].offset;
    let janitor = janitor(stores, clock, retention_only());
    for _ in 0..5 {
        janitor.run(STEP_BUDGET).await.unwrap();
    }
    let (_, states) = log.describe_topic(topic).await.unwrap();
    assert_eq!(states[0].log_start_offset, fresh, "all but the fresh event expired");
    let held: u64 = entries(stores.0.as_ref(), id, 0)
        .await
        .iter()
        .filter(|(_, r)| r.next > fresh)
        .map(|(_, r)| r.counted_bytes())
        .sum();
    assert!(held > 0);
    assert_eq!(states[0].bytes, held, "the partition's count is what its segments hold");
}

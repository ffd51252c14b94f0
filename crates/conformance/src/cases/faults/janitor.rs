//! The janitor: retention's head move and item removals, compaction's swap, the collector's doom.

use sluice_core::upkeep::{JanitorConfig, STEP_BUDGET};
use sluice_core::{Error, Log, ReadRequest, StorageError};

use super::fixtures::*;
use super::scope::*;
use crate::cases::support::faults::Fault;
use crate::cases::support::faults::{deletes_at, puts_at, puts_value, Action};
use crate::Backend;

/// No compaction: a target below any segment; no grace: freed objects go at once.
fn retention_only() -> JanitorConfig {
    JanitorConfig { compaction_target_bytes: 1, grace_ms: 0, ..JanitorConfig::default() }
}

/// Two old segments (from one process) and a new one (from another): a retention of an
/// hour at t0 + 1 h takes the old ones, and with them every segment of the first process's objects.
async fn old_and_new(world: &JanitorWorld, backend: &dyn Backend) -> Log {
    let (t0, topic) = (world.t0, &world.topic);
    let old = world.log(backend).await;
    for i in 0..2 {
        let events = (0..3).map(|j| event(&format!("old{}", i * 3 + j), 0, Some(t0 - 2 * HOUR))).collect();
        old.publish(topic, events, None).await.unwrap();
    }
    let new = world.log(backend).await;
    let events = (0..3).map(|j| event(&format!("new{j}"), 0, Some(t0 + HOUR / 2))).collect();
    new.publish(topic, events, None).await.unwrap();
    world.clock.set(t0 + HOUR);
    new
}

/// What replay must answer once the two old segments are gone.
fn the_new_ones() -> Vec<(u64, String)> {
    expected(6, &["new0", "new1", "new2"])
}

async fn assert_retained(world: &JanitorWorld, log: &Log) {
    let (_, states) = log.describe_topic(&world.topic).await.unwrap();
    assert_eq!((states[0].log_start_offset, states[0].high_watermark), (6, 9));
    let below = ReadRequest {
        topic: world.topic.clone(),
        partition: 0,
        offset: 0,
        max_events: 10,
        max_bytes: 1 << 20,
        wait_ms: 0,
    };
    assert!(matches!(log.read(&below).await, Err(Error::OffsetOutOfRange { log_start_offset: 6, .. })));
    assert_eq!(replay(log, &world.topic, 0, 6).await, the_new_ones(), "every kept event once, same bytes");
    assert_eq!(world.index_items().await, 1, "the old index items are gone");
    assert!(world.freed().await.is_empty(), "every freed object collected");
    world.assert_every_object_live().await;
}

/// Retention's head move (the log start advances, the item ending there removed with it) is applied but its answer lost: that
/// partition's upkeep stops there; the next run removes the items below the start, the
/// collector takes their objects, and replay answers every kept event once.
pub async fn given_retentions_head_move_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-head-move", Some(HOUR)).await;
    let log = old_and_new(&world, backend).await;
    world.script.at(
        // Retention's head write: it also deletes the segment item ending at the new start.
        |ops| {
            puts_at(ops, sluice_core::keys::HEADS_PREFIX, "") && deletes_at(ops, sluice_core::keys::SEGMENTS_PREFIX, "")
        },
        Action::Fault(Fault::LoseAnswer),
    );
    let janitor = world.janitor(retention_only());
    let first = janitor.run(STEP_BUDGET).await.expect("a janitor run");
    assert_eq!(world.script.pending(), 0, "the head move met its lost answer");
    assert_eq!(first.partitions_failed, 1, "{first:?}");
    assert_eq!(replay(&log, &world.topic, 0, 6).await, the_new_ones());
    janitor.run(STEP_BUDGET).await.expect("the next run");
    assert_retained(&world, &log).await;
}

/// Retention's removal of index items (with their objects' counts) is applied but its
/// answer lost: the next run finds nothing more to remove and subtracts nothing twice, so the
/// collector takes exactly the objects no kept segment needs.
pub async fn given_retentions_item_removal_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-removal", Some(HOUR)).await;
    let log = old_and_new(&world, backend).await;
    world.script.at(
        |ops| {
            // Not the head's write (which removes the item ending at the new start), nor a swap.
            deletes_at(ops, sluice_core::keys::SEGMENTS_PREFIX, "")
                && !puts_at(ops, sluice_core::keys::SEGMENTS_PREFIX, "")
                && !puts_at(ops, sluice_core::keys::HEADS_PREFIX, "")
        },
        Action::Fault(Fault::LoseAnswer),
    );
    let janitor = world.janitor(retention_only());
    let first = janitor.run(STEP_BUDGET).await.expect("a janitor run");
    assert_eq!(world.script.pending(), 0, "the removal met its lost answer");
    assert_eq!(first.partitions_failed, 1, "{first:?}");
    janitor.run(STEP_BUDGET).await.expect("the next run");
    assert_retained(&world, &log).await;
}

/// Compaction's swap (the merged segment in, the run's items out, the counts moved) is
/// applied but its answer lost: the next run merges nothing twice, the collector takes the
/// merged-away objects only, and replay answers every event once with the same bytes.
pub async fn given_a_compaction_swap_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-swap", None).await;
    let log = world.log(backend).await;
    let values: Vec<String> = (0..6).map(|i| format!("e{i}")).collect();
    for v in &values {
        log.publish(&world.topic, vec![event(v, 0, Some(world.t0))], None).await.unwrap();
    }
    world.clock.set(world.t0 + HOUR);
    world.script.at(
        |ops| {
            puts_at(ops, sluice_core::keys::SEGMENTS_PREFIX, "")
                && deletes_at(ops, sluice_core::keys::SEGMENTS_PREFIX, "")
        },
        Action::Fault(Fault::LoseAnswer),
    );
    let janitor = world.janitor(JanitorConfig { grace_ms: 0, ..JanitorConfig::default() });
    let first = janitor.run(STEP_BUDGET).await.expect("a janitor run");
    assert_eq!(world.script.pending(), 0, "the swap met its lost answer");
    assert_eq!(first.partitions_failed, 1, "{first:?}");
    let all: Vec<&str> = values.iter().map(String::as_str).collect();
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &all));
    let second = janitor.run(STEP_BUDGET).await.expect("the next run");
    assert_eq!(second.segments_merged, 0, "nothing merged twice: {second:?}");
    assert_eq!(world.index_items().await, 2, "the merged segment and the newest one");
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &all), "every event once, same bytes");
    assert!(world.freed().await.is_empty(), "every merged-away object collected");
    world.assert_every_object_live().await;
}

/// The collector's doom of a freed object is applied but its answer lost: the object stays
/// on the free list, the next run deletes it (doomed already, it is never revived), and
/// replay of what is kept is exact.
pub async fn given_a_collectors_doom_applied_but_its_answer_lost_then_the_next_run_collects_and_replay_is_exact(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "lost-doom", Some(HOUR)).await;
    let log = old_and_new(&world, backend).await;
    world.script.at(
        |ops| puts_value(ops, sluice_core::keys::OBJECT_PREFIX, b"\"doomed\":true"),
        Action::Fault(Fault::LoseAnswer),
    );
    let janitor = world.janitor(retention_only());
    janitor.run(STEP_BUDGET).await.expect("a janitor run");
    assert_eq!(world.script.pending(), 0, "the doom met its lost answer");
    let left = world.freed().await;
    assert_eq!(left.len(), 1, "the object whose doom was unanswered stays on the free list");
    janitor.run(STEP_BUDGET).await.expect("the next run");
    assert!(matches!(world.janitor_objects.read(&left[0], 0, 1).await, Err(StorageError::NotFound(_))), "collected");
    assert_retained(&world, &log).await;
}

/// Settling (the embedded backend's upkeep): every segment a commit wrote moves alone to an
/// object of its own, the newest included, each keeping where it came from; nothing moves
/// twice; replay is exact; and the commits' objects, emptied, are collected.
pub async fn given_commits_segments_when_settled_then_each_moves_once_replay_is_exact_and_their_objects_go(
    backend: &dyn Backend,
) {
    let world = JanitorWorld::new(backend, "settle", None).await;
    let log = world.log(backend).await;
    let big = "x".repeat(3000);
    for value in ["a", "b", &big, "c", "d"] {
        log.publish(&world.topic, vec![event(value, 0, None), event("-", 0, None)], None).await.unwrap();
    }
    let values = ["a", "-", "b", "-", big.as_str(), "-", "c", "-", "d", "-"];
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &values));
    let id = world.id().await;
    let commits: Vec<String> = crate::cases::support::entries::entries(world.store.as_ref(), id, 0)
        .await
        .into_iter()
        .map(|(_, e)| e.object)
        .collect();
    // Small segments merge (below half of 4 KiB), the large one and the newest move alone.
    let config = JanitorConfig { compaction_target_bytes: 4 << 10, settle_commit_segments: true, ..retention_only() };
    let report = world.janitor(config.clone()).run(STEP_BUDGET).await.unwrap();
    assert_eq!((report.segments_merged, report.segments_written), (5, 4), "{report:?}");
    let entries = crate::cases::support::entries::entries(world.store.as_ref(), id, 0).await;
    assert!(entries.iter().all(|(_, e)| e.rewritten && !commits.contains(&e.object)), "{entries:?}");
    let newest = &entries.last().expect("the newest").1;
    assert_eq!(newest.moved_from.as_ref().map(|(object, _)| object), commits.last(), "where it came from");
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &values));
    let again = world.janitor(config).run(STEP_BUDGET).await.unwrap();
    assert_eq!(again.segments_written, 0, "nothing moves twice: {again:?}");
    for object in &commits {
        assert!(matches!(world.janitor_objects.read(object, 0, 1).await, Err(StorageError::NotFound(_))), "{object}");
    }
    assert_eq!(replay(&log, &world.topic, 0, 0).await, expected(0, &values));
    world.assert_every_object_live().await;
}

//! A janitor pass racing a topic purge, a janitor run to a deadline, and `serve`'s size
//! retention between rounds.

use std::sync::Arc;

use sluice_core::ports::state::Query;
use sluice_core::upkeep::{Janitor, JanitorConfig, STEP_BUDGET};
use sluice_core::{ManualClock, TopicSpec};

use super::fixtures::*;
use crate::{unique_topic, Backend};

/// One janitor compacts a topic and indexes its settled segments by time while another
/// deletes and purges the topic: the first must not re-create the time index cursor or the
/// upkeep record that the purge already removed (nothing would ever remove them again).
pub async fn given_a_topic_purged_during_a_janitor_pass_then_the_pass_leaves_none_of_its_items(backend: &dyn Backend) {
    use crate::cases::support::faults::{Action, Scripted};

    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = small_segments(&log, "purged-mid-pass", t0).await;
    let (config, _) = log.describe_topic(&topic).await.unwrap();
    let script = Scripted::new(stores.0.clone());
    let rival = {
        let (log, store, topic) = (log.clone(), stores.0.clone(), topic.clone());
        Box::pin(async move {
            log.delete_topic(&topic).await.unwrap();
            for _ in 0..100 {
                if !sluice_core::upkeep::step(store.as_ref(), STEP_BUDGET, t0).await.unwrap().more {
                    break;
                }
            }
        })
    };
    let cursors = sluice_core::keys::time_cursors_pk(config.id);
    script.at(move |ops| ops.iter().any(|op| op.key().pk == cursors), Action::Before(rival));
    let config_small = JanitorConfig { compaction_target_bytes: 2 << 10, grace_ms: 0, ..retention_only() };
    let racing = Janitor::new(script.clone(), stores.1.clone(), clock.clone(), config_small);
    racing.run(STEP_BUDGET).await.unwrap();
    assert_eq!(script.pending(), 0, "the purge ran during the pass");
    let store = stores.0.clone();
    let cursors = store.query(&Query::all(sluice_core::keys::time_cursors_pk(config.id), 10)).await.unwrap();
    let entries = store.query(&Query::all(sluice_core::keys::time_entries_pk(config.id, 0), 10)).await.unwrap();
    assert!(cursors.items.is_empty() && entries.items.is_empty(), "time index items of a purged topic were re-created");
    assert!(
        store.get(&sluice_core::keys::upkeep_record_key(config.id)).await.unwrap().is_none(),
        "upkeep record re-created"
    );
}

/// `run_until` (the janitor function's loop) steps until its deadline by the janitor's clock,
/// and no further; a later run resumes and finishes.
pub async fn given_a_deadline_when_the_janitor_runs_until_it_then_it_stops_there_and_the_next_run_finishes(
    backend: &dyn Backend,
) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("run-until");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..20 {
        log.publish(&topic, vec![event(format!("e{i}"), 0, Some(t0 + i))], None).await.unwrap();
    }
    let id = log.describe_topic(&topic).await.unwrap().0.id;
    // 20 entries: in index items, but for the newest one a head may carry (one-write commits).
    let query = sluice_core::ports::state::Query::all(sluice_core::keys::segments_pk(id, 0), 100);
    let items = stores.0.query(&query).await.unwrap().items.len();
    log.delete_topic(&topic).await.unwrap();
    let janitor = janitor(&stores, &clock, retention_only());
    // The deadline has come: one step (its purge takes 3 of the index items), then it stops.
    let first = janitor.run_until(t0, 3).await.unwrap();
    assert!(first.more(), "one step cannot purge 20 items 3 at a time: {first:?}");
    assert_eq!(first.purge.items_deleted, 3, "a step takes its budget: {first:?}");
    // A later run with time left (the clock stands still) goes on until nothing is left.
    let rest = janitor.run_until(t0 + 60_000, 3).await.unwrap();
    assert!(!rest.more(), "{rest:?}");
    assert!(items >= 19, "at most the newest entry in the head: {items} index items");
    assert!(
        first.purge.items_deleted + rest.purge.items_deleted > items,
        "{items} index items and a head: {first:?} {rest:?}"
    );
}

/// `serve`'s schedule ([`Janitor::run_forever`]): while events keep coming into a partition
/// bounded by `retention_bytes`, each retention interval brings it back within its bound,
/// though the next round is an hour away (under sustained intake a round, busy compacting,
/// came too seldom: docs/PERFORMANCE.md, "Upkeep that yields to live traffic").
pub async fn given_intake_past_a_bytes_bound_when_a_retention_interval_passes_then_the_partition_is_within_it_before_any_round(
    backend: &dyn Backend,
) {
    use crate::cases::support::clock::WatchedClock;

    const BOUND: i64 = 8 << 10;
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = unique_topic("held-bound");
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: Some(BOUND) };
    log.create_topic(&topic, spec).await.unwrap();
    // The janitor's own clock, so that the sleeps counted are its loops' (a store may sleep
    // on its clock too); the events' times do not matter to a bound by bytes.
    let janitor_clock = Arc::new(WatchedClock::new(t0));
    let janitor = Janitor::new(stores.0.clone(), stores.1.clone(), janitor_clock.clone(), retention_only());
    let upkeep = tokio::spawn(janitor.run_forever(3_600_000, 1_000));
    // Both loops wait on the clock: the rounds' and retention's.
    janitor_clock.slept_more_than(1).await;
    for intake in 0..3 {
        // Forty segments of about 1 KiB: five times the bound.
        for i in 0..40 {
            log.publish(&topic, vec![event(format!("{intake}.{i}:{}", "v".repeat(1000)), 0, None)], None)
                .await
                .unwrap();
        }
        let bytes = log.describe_topic(&topic).await.unwrap().1[0].bytes;
        assert!(bytes > 4 * BOUND as u64, "intake {intake}: {bytes} bytes");
        let before = janitor_clock.sleeps();
        janitor_clock.clock.advance(1_000);
        // Retention ran, and waits for its next interval.
        janitor_clock.slept_more_than(before).await;
        let (_, states) = log.describe_topic(&topic).await.unwrap();
        assert!(states[0].bytes <= BOUND as u64, "intake {intake}: {} bytes, over the bound", states[0].bytes);
        assert!(states[0].log_start_offset > 0, "intake {intake}: retention advanced the start");
    }
    upkeep.abort();
}

/// A pacer that counts the rewrites it let go.
struct CountingPacer(std::sync::atomic::AtomicUsize);

impl sluice_core::upkeep::pace::Pacer for CountingPacer {
    fn until_quiet(&self) -> sluice_core::clock::Sleep {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(std::future::ready(()))
    }
}

/// Compaction's rewrites wait for the janitor's pacer (`serve`'s holds them back while requests
/// keep coming): every merge asks it first.
pub async fn given_a_pacer_when_the_janitor_compacts_then_every_rewrite_waits_for_it_first(backend: &dyn Backend) {
    let _turn = ONE_JANITOR_AT_A_TIME.lock().await;
    let t0 = real_now();
    let clock = Arc::new(ManualClock::new(t0));
    let stores = backend.open_with(clock.clone()).await;
    let log = log_at(stores.clone(), &clock);
    let topic = small_segments(&log, "paced", t0).await;
    let pacer = Arc::new(CountingPacer(Default::default()));
    let config = JanitorConfig { compaction_target_bytes: 2 << 10, ..retention_only() };
    let paced = janitor(&stores, &clock, config).with_pacer(pacer.clone());
    paced.run(STEP_BUDGET).await.unwrap();
    let config = log.describe_topic(&topic).await.unwrap().0;
    let written = log.upkeep_of(&config).await.unwrap().segments_written;
    let asked = pacer.0.load(std::sync::atomic::Ordering::SeqCst) as u64;
    assert!(written >= 4, "forty small segments merge in runs of 2 KiB: {written} written");
    // Other cases' topics on a shared backend may have merges of their own in this round.
    assert!(asked >= written, "{asked} rewrites paced of {written} written");
}

/// A new one-partition topic (no retention) holding 40 events of ~200 bytes, each its own
/// segment, timestamped `t0`, `t0 + 1`, ...: small segments for compaction to merge.
async fn small_segments(log: &sluice_core::Log, name: &str, t0: i64) -> String {
    let topic = unique_topic(name);
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..40 {
        log.publish(&topic, vec![event(format!("e{i}:{}", "z".repeat(200)), 0, Some(t0 + i))], None).await.unwrap();
    }
    topic
}

//! A janitor pass racing a topic purge, and a janitor run to a deadline.

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
    let topic = unique_topic("purged-mid-pass");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    for i in 0..40 {
        log.publish(&topic, vec![event(format!("e{i}:{}", "z".repeat(200)), 0, Some(t0 + i))], None).await.unwrap();
    }
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

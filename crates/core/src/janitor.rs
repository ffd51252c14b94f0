//! Upkeep in bounded, resumable steps: removes the items of deleted topics, of
//! deleted subscriptions, and expired records. The janitor Lambda function runs steps on a schedule;
//! `serve` runs them in a background task. A step does at most `budget`
//! deletions and keeps its progress in the store, so a step cut short (a
//! timeout, a crash) is simply continued by the next one.
//!
//! Segment objects of deleted topics stay for now: an object can hold segments
//! of several topics, so removing objects needs the garbage collector that
//! retention brings.

use serde::Serialize;

use crate::layout::{self, PurgeRecord, IDEMPOTENCY_SHARDS};
use crate::store::{Expect, Key, Query, StateStore, WriteOp};
use crate::StorageError;

/// Purge orders looked at per step.
const ORDERS_PER_STEP: usize = 16;

/// What one step did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct JanitorReport {
    /// Deleted topics whose items are now all gone.
    pub topics_purged: usize,
    /// Items of deleted topics removed.
    pub items_deleted: usize,
    /// Expired records removed (0 on stores that expire items themselves).
    pub expired_removed: usize,
    /// Whether work is left for another step.
    pub more: bool,
}

/// Runs one bounded step of at most about `budget` deletions.
pub async fn step(store: &dyn StateStore, budget: usize) -> Result<JanitorReport, StorageError> {
    let budget = budget.max(1);
    let mut report =
        JanitorReport { expired_removed: store.purge_expired(budget / 4 + 1).await?, ..Default::default() };
    let mut left = budget;
    let (deleted, more) = crate::queues::purge_step(store, budget).await?;
    report.items_deleted += deleted;
    left = left.saturating_sub(deleted);
    if more {
        report.more = true;
        return Ok(report);
    }
    let orders = store.query(&Query::all(layout::purge_pk(), ORDERS_PER_STEP)).await?;
    report.more = orders.next.is_some();
    for item in orders.items {
        let mut order: PurgeRecord = layout::decode("purge", &item.value)?;
        let id = u64::from_str_radix(&item.key.sk, 16)
            .map_err(|_| StorageError::Corrupt(format!("purge order key {:?}", item.key.sk)))?;
        let mut version = item.version;
        // The index, one partition at a time, recording progress after each.
        let partitions = order.partitions;
        let done: fn(&mut PurgeRecord) -> &mut u32 = |o| &mut o.done_partitions;
        let pks = |p| vec![layout::segments_pk(id, p)];
        let (deleted, finished) =
            drain_partitions(store, &item.key, &mut version, &mut order, done, partitions, pks, &mut left).await?;
        report.items_deleted += deleted;
        if !finished {
            report.more = true;
            return Ok(report);
        }
        // Its subscriptions become purge orders of their own; then the heads and
        // idempotency records go, each collection small or bounded by its TTL.
        if crate::queues::purge_topic_subscriptions(store, id, order.partitions).await? > 0 {
            report.more = true;
        }
        let mut rest = vec![layout::heads_pk(id)];
        rest.extend((0..IDEMPOTENCY_SHARDS).map(|shard| layout::idempotency_pk_shard(id, shard)));
        for pk in rest {
            let (deleted, emptied) = drain(store, &pk, left).await?;
            report.items_deleted += deleted;
            left = left.saturating_sub(deleted);
            if !emptied {
                report.more = true;
                return Ok(report);
            }
        }
        store.write(vec![WriteOp::Delete { key: item.key, expect: Expect::Version(version) }]).await?;
        tracing::info!(topic = %order.name, topic_id = id, "deleted topic purged");
        report.topics_purged += 1;
    }
    Ok(report)
}

/// Works through a purge order's partitions from the one `done` names: deletes the
/// collections `pks(partition)` within the budget `left`, and records progress in the
/// order's item (`key`, at `version`) after each partition, so the next step resumes there.
/// Answers the items deleted and whether every partition is done.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn drain_partitions<R: Serialize>(
    store: &dyn StateStore,
    key: &Key,
    version: &mut u64,
    order: &mut R,
    done: fn(&mut R) -> &mut u32,
    partitions: u32,
    pks: impl Fn(u32) -> Vec<String>,
    left: &mut usize,
) -> Result<(usize, bool), StorageError> {
    let mut deleted = 0;
    while *done(order) < partitions {
        if *left == 0 {
            return Ok((deleted, false));
        }
        for pk in pks(*done(order)) {
            let (n, emptied) = drain(store, &pk, *left).await?;
            deleted += n;
            // An empty collection still costs a query and a progress write: it counts against the budget.
            *left = left.saturating_sub(n.max(1));
            if !emptied {
                return Ok((deleted, false));
            }
        }
        *done(order) += 1;
        store.write(vec![WriteOp::replace(key.clone(), layout::encode(order), Some(*version))]).await?;
        *version += 1;
    }
    Ok((deleted, true))
}

/// Deletes up to `budget` items of collection `pk`; answers how many, and whether it is now empty.
pub(crate) async fn drain(store: &dyn StateStore, pk: &str, budget: usize) -> Result<(usize, bool), StorageError> {
    let mut deleted = 0;
    while deleted < budget {
        let page = store.query(&Query::all(pk, (budget - deleted).min(1000))).await?;
        if page.items.is_empty() {
            return Ok((deleted, true));
        }
        let keys: Vec<Key> = page.items.into_iter().map(|i| i.key).collect();
        deleted += keys.len();
        store.delete_many(keys).await?;
    }
    Ok((deleted, false))
}

/// Deletions per step when running continuously.
pub const STEP_BUDGET: usize = 5_000;

/// Runs steps every `interval_ms` of `clock`'s time, forever: `serve`'s background upkeep.
/// Each round runs steps until nothing is left; a failed step is logged and retried next round.
pub async fn run_forever(
    store: std::sync::Arc<dyn StateStore>,
    clock: std::sync::Arc<dyn crate::Clock>,
    interval_ms: u64,
) {
    loop {
        clock.sleep(interval_ms).await;
        loop {
            match step(store.as_ref(), STEP_BUDGET).await {
                Ok(report) => {
                    if report.items_deleted + report.expired_removed + report.topics_purged > 0 {
                        tracing::info!(?report, "janitor step");
                    }
                    if !report.more {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "janitor step failed; retrying next round");
                    break;
                }
            }
        }
    }
}

//! The janitor's purges of deleted subscriptions and of a deleted topic's subscriptions.

use serde::Serialize;

use super::*;
use crate::ports::drain::drain;

/// Removes, within `budget` deletions, the queue items of deleted subscriptions and the
/// subscriptions of deleted topics; answers how many items went, and whether work is left.
pub(crate) async fn purge_step(store: &dyn StateStore, budget: usize) -> Result<(usize, bool), StorageError> {
    let mut left = budget.max(1);
    let mut deleted = 0;
    let orders = store.query(&Query::all(sub_purge_pk(), 16)).await?;
    let more = orders.next.is_some();
    for item in orders.items {
        let mut order: SubPurgeRecord = layout::decode("subscription purge", &item.value)?;
        let id = u64::from_str_radix(&item.key.sk, 16)
            .map_err(|_| StorageError::Corrupt(format!("subscription purge key {:?}", item.key.sk)))?;
        let mut version = item.version;
        let partitions = order.partitions;
        let done: fn(&mut SubPurgeRecord) -> &mut u32 = |o| &mut o.done_partitions;
        let pks = |p| crate::keys::queue_collections(id, p).to_vec();
        let (n, finished) =
            drain_partitions(store, &item.key, &mut version, &mut order, done, partitions, pks, &mut left).await?;
        deleted += n;
        if !finished {
            return Ok((deleted, true));
        }
        store.write(vec![WriteOp::Delete { key: item.key, expect: Expect::Version(version) }]).await?;
    }
    Ok((deleted, more))
}

/// Turns the subscriptions of a deleted topic into purge orders (called by the topic's
/// purge); answers how many.
pub(crate) async fn purge_topic_subscriptions(
    store: &dyn StateStore,
    topic_id: u64,
    partitions: u32,
) -> Result<usize, StorageError> {
    let mut orders = 0;
    loop {
        let page = store.query(&Query::all(subs_pk(topic_id), 40)).await?;
        if page.items.is_empty() {
            return Ok(orders);
        }
        orders += page.items.len();
        let mut ops = Vec::new();
        for item in page.items {
            let record: SubscriptionRecord = layout::decode("subscription", &item.value)?;
            if record.deleted {
                // Its purge was ordered when it was deleted.
                orders -= 1;
                ops.push(WriteOp::Delete { key: item.key, expect: Expect::Version(item.version) });
                continue;
            }
            ops.push(WriteOp::Put {
                key: sub_purge_key(record.id),
                value: layout::encode(&SubPurgeRecord { partitions, done_partitions: 0 }),
                expires_at_ms: None,
                expect: Expect::Any,
            });
            ops.push(WriteOp::Delete { key: item.key, expect: Expect::Version(item.version) });
        }
        store.write(ops).await?;
    }
}

/// Works through a purge order's partitions from the one `done` names: deletes the
/// collections `pks(partition)` within the budget `left`, and records progress in the
/// order's item (`key`, at `version`) after each partition, so the next step resumes there.
/// Answers the items deleted and whether every partition is done.
#[allow(clippy::too_many_arguments)]
async fn drain_partitions<R: Serialize>(
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

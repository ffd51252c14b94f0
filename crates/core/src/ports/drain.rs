//! Draining collections of the state store in budgeted, resumable steps: what the
//! topic and subscription purges do to remove everything under a deleted id.

use serde::Serialize;

use crate::layout;
use crate::ports::state::{Key, Query, StateStore, WriteOp};
use crate::StorageError;

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

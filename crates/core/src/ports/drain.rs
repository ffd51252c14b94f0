//! Draining a collection of the state store in budgeted steps: what the topic and
//! subscription purges do to remove everything under a deleted id.

use crate::ports::state::{Key, Query, StateStore};
use crate::StorageError;

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
